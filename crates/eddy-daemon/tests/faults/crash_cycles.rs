//! Crash cycles: rounds of kill -9 of every daemon (and of the FUSE mount, when a round has
//! one) while writers are in the middle of writes and fsyncs, a restart on the same storage,
//! and a check of every byte that was fsync'd.
//!
//! Each round, client-library writers (and, every other round, a thread writing through a
//! FUSE mount with std::fs) write random ranges of their own files and fsync at random
//! points, and a creator makes small files one after the other (create, write, fsync). An in-memory model per file keeps what a successful fsync made durable: the file's
//! contents as they were when the fsync was called. Writes issued after the last successful
//! fsync (including one that failed: part of it may have landed) may read back old or new.
//! After the restart, every file that was fsync'd at least once exists in the listing of its
//! directory, is at least as long as its durable contents, and each durable byte reads back
//! as the model has it, or as one of the writes issued after the last fsync wrote it.
//!
//! `EDDY_CRASH_ROUNDS` sets the number of rounds (5 by default; `make crash-cycles` runs 100),
//! `EDDY_CRASH_SEED` the seed (printed either way, so that a failing run can be repeated).
//! A round that takes longer than `ROUND_BOUND` fails the test: a hang, not a slow round.

use eddy_client::{Client, Creds, FileKind};
use eddy_testkit::Cluster;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Far beyond what a round needs (a few seconds): only a hang gets there.
const ROUND_BOUND: Duration = Duration::from_secs(120);
/// Client-library writers per round, and files each of them writes.
const WRITERS: usize = 3;
const FILES_PER_WRITER: usize = 2;
/// Files the FUSE writer writes in the rounds that have a mount.
const MOUNT_FILES: usize = 2;
/// The creator's files: at most this many bytes each.
const CREATED_MAX: usize = 3 * 64 * 1024;
/// Writes land in the first `SPAN_CHUNKS` chunks of a file, at most `MAX_WRITE` bytes each.
const SPAN_CHUNKS: u64 = 6;
const MAX_WRITE: usize = 96 * 1024;

/// What one file has been through, as its (only) writer saw it.
#[derive(Debug, Clone, Default)]
struct FileModel {
    /// Path in the deployment.
    path: String,
    /// Every write that succeeded, applied in order.
    current: Vec<u8>,
    /// `current` as it was when the last successful fsync was called.
    durable: Vec<u8>,
    /// Writes issued since the last successful fsync (a failed one included).
    since: Vec<(u64, Vec<u8>)>,
    /// Successful fsyncs.
    fsyncs: u64,
    /// Written through the FUSE mount.
    mounted: bool,
}

impl FileModel {
    fn new(path: String) -> FileModel {
        FileModel {
            path,
            ..FileModel::default()
        }
    }

    /// Before a write is sent: from now on its bytes may be on the daemons.
    fn issue(&mut self, offset: u64, data: &[u8]) {
        self.since.push((offset, data.to_vec()));
    }

    /// The write issued last succeeded.
    fn written(&mut self, offset: u64, data: &[u8]) {
        let end = offset as usize + data.len();
        if self.current.len() < end {
            self.current.resize(end, 0);
        }
        self.current[offset as usize..end].copy_from_slice(data);
    }

    /// An fsync called when the file was `current` succeeded.
    fn synced(&mut self) {
        self.durable = self.current.clone();
        self.since.clear();
        self.fsyncs += 1;
    }

    /// Checks `got` (the whole file as read back after the restart) against the durable
    /// contents; returns the number of durable bytes checked.
    fn check(&self, got: &[u8], size: u64, seed: u64) -> u64 {
        assert!(
            size >= self.durable.len() as u64 && got.len() >= self.durable.len(),
            "{}: {} bytes were fsync'd, the file is {size} bytes long and {} were read \
             (seed {seed})",
            self.path,
            self.durable.len(),
            got.len()
        );
        for (i, (&want, &have)) in self.durable.iter().zip(got).enumerate() {
            if want == have {
                continue;
            }
            let rewritten = self.since.iter().any(|(off, data)| {
                let off = *off as usize;
                i >= off && i < off + data.len() && data[i - off] == have
            });
            assert!(
                rewritten,
                "{}: byte {i} was fsync'd as {want:#04x} and reads {have:#04x}, which no later \
                 write wrote ({} fsyncs, {} writes after the last; seed {seed})",
                self.path,
                self.fsyncs,
                self.since.len()
            );
        }
        self.durable.len() as u64
    }
}

/// Counters shared by the writers of a round.
#[derive(Default)]
struct Progress {
    fsyncs: AtomicU64,
    writes: AtomicU64,
}

/// A random write: offset, bytes.
fn random_write(rng: &mut StdRng, chunk_size: u64) -> (u64, Vec<u8>) {
    let offset = rng.gen_range(0..SPAN_CHUNKS * chunk_size);
    let mut data = vec![0u8; rng.gen_range(1..=MAX_WRITE)];
    rng.fill(&mut data[..]);
    (offset, data)
}

/// A client-library writer: random writes over its files, an fsync of one of them now and
/// then, until `stop` is set or an operation fails (the daemons were killed).
async fn library_writer(
    c: Client,
    mut files: Vec<FileModel>,
    mut rng: StdRng,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
) -> Vec<FileModel> {
    let me = Creds::root();
    let chunk_size = c.config().chunk_size;
    let mut handles = Vec::new();
    for m in &files {
        match c.create(&m.path, 0o644, true, me).await {
            Ok(f) => handles.push(f),
            Err(_) => return files,
        }
    }
    while !stop.load(Ordering::SeqCst) {
        let k = rng.gen_range(0..files.len());
        let (m, f) = (&mut files[k], &handles[k]);
        if rng.gen_ratio(1, 4) {
            if c.fsync(f).await.is_err() {
                break;
            }
            m.synced();
            progress.fsyncs.fetch_add(1, Ordering::SeqCst);
        } else {
            let (offset, data) = random_write(&mut rng, chunk_size);
            m.issue(offset, &data);
            if c.pwrite(f, offset, &data).await.is_err() {
                break;
            }
            m.written(offset, &data);
            progress.writes.fetch_add(1, Ordering::SeqCst);
        }
    }
    files
}

/// A client-library writer of many small files, one after the other: create, write, fsync,
/// until `stop` is set or an operation fails; so that the kill also meets creates.
async fn library_creator(
    c: Client,
    dir: String,
    mut rng: StdRng,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
) -> Vec<FileModel> {
    let me = Creds::root();
    let mut files = Vec::new();
    for n in 0.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        files.push(FileModel::new(format!("{dir}/c{n}")));
        let m = files.last_mut().expect("just pushed");
        let Ok(f) = c.create(&m.path, 0o644, true, me).await else {
            break;
        };
        let mut data = vec![0u8; rng.gen_range(0..=CREATED_MAX)];
        rng.fill(&mut data[..]);
        m.issue(0, &data);
        if c.pwrite(&f, 0, &data).await.is_err() {
            break;
        }
        m.written(0, &data);
        progress.writes.fetch_add(1, Ordering::SeqCst);
        if c.fsync(&f).await.is_err() {
            break;
        }
        m.synced();
        progress.fsyncs.fetch_add(1, Ordering::SeqCst);
    }
    files
}

/// The same through a FUSE mount with std::fs: `files` are paths in the deployment, `mnt`
/// where it is mounted.
fn mount_writer(
    mnt: PathBuf,
    mut files: Vec<FileModel>,
    mut rng: StdRng,
    chunk_size: u64,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
) -> Vec<FileModel> {
    let mut handles = Vec::new();
    for m in &files {
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(mnt.join(m.path.trim_start_matches('/')));
        match opened {
            Ok(f) => handles.push(f),
            Err(_) => return files,
        }
    }
    while !stop.load(Ordering::SeqCst) {
        let k = rng.gen_range(0..files.len());
        let (m, f) = (&mut files[k], &handles[k]);
        if rng.gen_ratio(1, 4) {
            if f.sync_all().is_err() {
                break;
            }
            m.synced();
            progress.fsyncs.fetch_add(1, Ordering::SeqCst);
        } else {
            let (offset, data) = random_write(&mut rng, chunk_size);
            m.issue(offset, &data);
            if f.write_all_at(&data, offset).is_err() {
                break;
            }
            m.written(offset, &data);
            progress.writes.fetch_add(1, Ordering::SeqCst);
        }
    }
    files
}

/// Names in directory `dir`.
async fn names_in(c: &Client, dir: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rd = c
        .readdir(dir, None)
        .unwrap_or_else(|e| panic!("readdir {dir}: {e}"));
    while let Some(page) = rd
        .next_page()
        .await
        .unwrap_or_else(|e| panic!("readdir {dir}: {e}"))
    {
        out.extend(page.into_iter().map(|e| e.name));
    }
    out
}

/// Checks every file of `files` that was fsync'd; returns the durable bytes checked.
async fn verify(c: &Client, dir: &str, files: &[FileModel], seed: u64) -> u64 {
    let me = Creds::root();
    let listed = names_in(c, dir).await;
    let mut bytes = 0;
    for m in files.iter().filter(|m| m.fsyncs > 0) {
        let name = m.path.rsplit('/').next().unwrap_or_default();
        assert!(
            listed.contains(name),
            "{} was fsync'd and is not listed in {dir} after the restart (seed {seed})",
            m.path
        );
        let inode = c
            .stat(&m.path)
            .await
            .unwrap_or_else(|e| panic!("{} was fsync'd: {e} (seed {seed})", m.path));
        assert_eq!(inode.kind, FileKind::File, "{}", m.path);
        let f = c
            .open(&m.path, libc::O_RDONLY, 0, me)
            .await
            .unwrap_or_else(|e| panic!("open {}: {e} (seed {seed})", m.path));
        let got = c
            .pread(&f, 0, inode.size as usize)
            .await
            .unwrap_or_else(|e| panic!("read {}: {e} (seed {seed})", m.path));
        bytes += m.check(&got, inode.size, seed);
        let _ = c.close(&f).await;
    }
    bytes
}

/// What the run did, for the summary.
#[derive(Default)]
struct Totals {
    files: u64,
    fsynced_files: u64,
    fsyncs: u64,
    writes: u64,
    bytes_verified: u64,
    mount_rounds: u64,
    /// Files written through the mount and fsync'd.
    mount_fsynced_files: u64,
}

/// Files of a round that were written: kept to be checked again after the next round.
struct Round {
    dir: String,
    files: Vec<FileModel>,
}

/// One round: writers, kill -9 of everything while they write, restart, checks. Returns the
/// round's files.
async fn round(
    cl: &mut Cluster,
    c: &Client,
    r: u64,
    seed: u64,
    rng: &mut StdRng,
    totals: &mut Totals,
) -> Round {
    let me = Creds::root();
    let chunk_size = c.config().chunk_size;
    let dir = format!("/r{r}");
    c.mkdir(&dir, 0o755, me)
        .await
        .unwrap_or_else(|e| panic!("mkdir {dir}: {e}"));
    // The directory's entry is durable before any of its files is (decision 0015).
    c.sync_all()
        .await
        .unwrap_or_else(|e| panic!("sync after mkdir {dir}: {e}"));

    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(Progress::default());
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let files = (0..FILES_PER_WRITER)
            .map(|k| FileModel::new(format!("{dir}/w{w}f{k}")))
            .collect();
        writers.push(tokio::spawn(library_writer(
            c.clone(),
            files,
            StdRng::seed_from_u64(rng.gen()),
            stop.clone(),
            progress.clone(),
        )));
    }
    writers.push(tokio::spawn(library_creator(
        c.clone(),
        dir.clone(),
        StdRng::seed_from_u64(rng.gen()),
        stop.clone(),
        progress.clone(),
    )));
    let mut mount = None;
    let mut mount_writer_task = None;
    if r % 2 == 1 {
        totals.mount_rounds += 1;
        let m = cl.mount();
        let files = (0..MOUNT_FILES)
            .map(|k| FileModel {
                mounted: true,
                ..FileModel::new(format!("{dir}/m{k}"))
            })
            .collect();
        let (mnt, wrng) = (m.mnt.path().to_path_buf(), StdRng::seed_from_u64(rng.gen()));
        let (stop, progress) = (stop.clone(), progress.clone());
        mount_writer_task = Some(tokio::task::spawn_blocking(move || {
            mount_writer(mnt, files, wrng, chunk_size, stop, progress)
        }));
        mount = Some(m);
    }

    // Let the writers get going: at least one fsync, then a random while more.
    while progress.fsyncs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(rng.gen_range(50..800))).await;

    // kill -9 of every daemon and of the mount, with writes and fsyncs in flight.
    for i in 0..cl.dep.daemons.len() {
        cl.kill(i);
    }
    if let Some(m) = mount.as_mut() {
        m.kill_process();
    }
    // The writers fail (or see the stop) and hand back their models; no write or fsync is
    // issued after this, so the models are final.
    stop.store(true, Ordering::SeqCst);
    let mut files = Vec::new();
    for w in writers {
        files.extend(w.await.expect("writer task"));
    }
    if let Some(t) = mount_writer_task {
        files.extend(t.await.expect("mount writer"));
    }
    drop(mount);

    for i in 0..cl.dep.daemons.len() {
        cl.restart(i);
    }
    if c.replicas() > 1 {
        // With copies, the restarted daemons rejoin and push each other what they missed
        // (decision 0021); `eddy start` on used roots returns once they serve, and
        // `eddy repair` once every copy is in place: the same here, by hand.
        let state = cl.dir.path().to_path_buf();
        let out = tokio::task::spawn_blocking(move || {
            eddy_testkit::cli::eddy(&["repair", "--state", eddy_testkit::cli::s(&state)])
        })
        .await
        .expect("eddy repair");
        assert!(
            out.status.success(),
            "eddy repair after restart (seed {seed}): {}",
            eddy_testkit::cli::text(&out)
        );
    }
    // The same client reconnects by itself.
    totals.bytes_verified += verify(c, &dir, &files, seed).await;
    totals.files += files.len() as u64;
    totals.fsynced_files += files.iter().filter(|m| m.fsyncs > 0).count() as u64;
    totals.mount_fsynced_files += files.iter().filter(|m| m.mounted && m.fsyncs > 0).count() as u64;
    totals.fsyncs += progress.fsyncs.load(Ordering::SeqCst);
    totals.writes += progress.writes.load(Ordering::SeqCst);
    Round { dir, files }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsynced_bytes_survive_rounds_of_kill_9_during_writes() {
    crash_cycles(1).await;
}

/// The same with two copies of everything: every daemon restarts at once, each one catching
/// up from the others while they do the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsynced_bytes_survive_rounds_of_kill_9_with_two_copies() {
    crash_cycles(2).await;
}

async fn crash_cycles(replicas: usize) {
    let rounds: u64 = match std::env::var("EDDY_CRASH_ROUNDS") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("EDDY_CRASH_ROUNDS={v} is not a number")),
        Err(_) => 5,
    };
    let seed: u64 = match std::env::var("EDDY_CRASH_SEED") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("EDDY_CRASH_SEED={v} is not a number")),
        Err(_) => rand::random(),
    };
    eprintln!(
        "crash cycles: {rounds} rounds, {replicas} cop(ies), seed {seed} (EDDY_CRASH_SEED={seed} \
         repeats it)"
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let config = eddy_config::Config {
        replicas,
        ..eddy_testkit::test_config()
    };
    let mut cl = Cluster::start_with(3, config);
    let c = cl.client().await;
    let me = Creds::root();
    let mut totals = Totals::default();
    let mut previous: Option<Round> = None;
    let started = Instant::now();
    for r in 0..rounds {
        let t = Instant::now();
        let this = tokio::time::timeout(
            ROUND_BOUND,
            round(&mut cl, &c, r, seed, &mut rng, &mut totals),
        )
        .await
        .unwrap_or_else(|_| {
            panic!("round {r} did not finish within {ROUND_BOUND:?}: something hangs (seed {seed})")
        });
        // The previous round's files went through a second crash: checked again, then removed.
        if let Some(prev) = previous.take() {
            totals.bytes_verified += verify(&c, &prev.dir, &prev.files, seed).await;
            for m in &prev.files {
                match c.unlink(&m.path, me).await {
                    Ok(()) => {}
                    Err(e) if e.errno == libc::ENOENT && m.fsyncs == 0 => {}
                    Err(e) => panic!("unlink {}: {e}", m.path),
                }
            }
            if let Err(e) = c.rmdir(&prev.dir, me).await {
                // What is left, and what a stat of it says (a name listed and absent: the
                // copies disagree).
                let mut left = Vec::new();
                for n in names_in(&c, &prev.dir).await {
                    let p = format!("{}/{n}", prev.dir);
                    left.push(format!("{p}: {:?}", c.stat(&p).await.map(|i| i.size)));
                }
                panic!("rmdir {}: {e}; left: {left:?} (seed {seed})", prev.dir);
            }
        }
        eprintln!(
            "round {r}: {} files, {} fsync'd, in {:?}",
            this.files.len(),
            this.files.iter().filter(|m| m.fsyncs > 0).count(),
            t.elapsed()
        );
        previous = Some(this);
    }
    // A client that never saw the crashes reads the last round the same.
    if let Some(last) = previous {
        let fresh = cl.client().await;
        totals.bytes_verified += verify(&fresh, &last.dir, &last.files, seed).await;
    }
    assert!(
        totals.fsyncs >= rounds,
        "fewer fsyncs than rounds: the rounds checked nothing"
    );
    eprintln!(
        "crash cycles: {rounds} rounds, {replicas} cop(ies) ({} with a FUSE mount) in {:?}, \
         seed {seed}: {} files \
         ({} fsync'd, {} of them written through the mount), {} writes, {} fsyncs, {} fsync'd \
         bytes verified",
        totals.mount_rounds,
        started.elapsed(),
        totals.files,
        totals.fsynced_files,
        totals.mount_fsynced_files,
        totals.writes,
        totals.fsyncs,
        totals.bytes_verified
    );
}
