//! `eddy writeback` (decision 0041) beside a live deployment of 3 daemons linked to a backend
//! directory: early passes while a writer keeps writing and rewriting lose nothing and mark
//! nothing clean wrongly (the final stage-out makes the backend byte-identical); a file in
//! conflict with its backend copy is left alone; SIGTERM and a stopped deployment end it with exit 0; an unreachable daemon and a bad `--end` are
//! clear errors. Bytes and states are asserted, never times.

use super::*;
use eddy_testkit::cli::eddy_cmd;
use std::io::BufRead;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;

const CHUNK: usize = 64 * KIB;
/// Longest a test waits for a line or an exit of `eddy writeback` before it fails (a hang
/// guard, not a measurement).
const GUARD: Duration = Duration::from_secs(120);

/// Unix seconds `secs` from now, as `--end` takes them.
fn end_in(secs: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    (now + secs).to_string()
}

/// `eddy writeback --state DIR ARGS` in the background, its stdout lines on a channel.
fn spawn_writeback(state: &Path, args: &[&str]) -> (Child, Receiver<String>) {
    let mut child = eddy_cmd()
        .arg("writeback")
        .arg("--state")
        .arg(state)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn eddy writeback");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// Waits for a line starting with `start`; returns it and every line before it.
fn line_starting(rx: &Receiver<String>, start: &str, seen: &mut Vec<String>) -> String {
    let deadline = Instant::now() + GUARD;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => {
                seen.push(l.clone());
                if l.starts_with(start) {
                    return l;
                }
            }
            Err(e) => panic!("no line starting {start:?} ({e}); lines: {seen:#?}"),
        }
    }
}

/// Waits for the process to end (a hang guard); returns whether it succeeded.
fn wait_ended(child: &mut Child) -> bool {
    let status = eddy_testkit::eventually::exited(child, GUARD);
    status.map(|s| s.success()).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("eddy writeback did not end");
    })
}

/// What the writer wrote: each file's final bytes and every version of each chunk.
#[derive(Default)]
struct Model {
    files: BTreeMap<String, Vec<u8>>,
    versions: BTreeMap<(String, usize), Vec<Vec<u8>>>,
}

impl Model {
    /// `data` written at `off`: a new version of every chunk it touches (a write of many
    /// chunks, such as big.bin's before the writer starts, makes one of each).
    fn put(&mut self, path: &str, off: usize, data: &[u8]) {
        let f = self.files.entry(path.to_string()).or_default();
        if f.len() < off + data.len() {
            f.resize(off + data.len(), 0);
        }
        f[off..off + data.len()].copy_from_slice(data);
        let last = (off + data.len().max(1) - 1) / CHUNK;
        for k in off / CHUNK..=last {
            let chunk = f[k * CHUNK..(f.len()).min((k + 1) * CHUNK)].to_vec();
            self.versions
                .entry((path.to_string(), k))
                .or_default()
                .push(chunk);
        }
    }
}

/// Keeps writing until `stop`: rewrites the chunks of /out/big.bin (all but the last) twice
/// each, rewrites the 4 chunks of /out/rewrite.bin and appends chunks to /out/grow.bin, all
/// kept open across the passes, and now and then creates a new file /out/new-N.bin (whole);
/// after `stop`, rewrites big.bin's last chunk. Every chunk write carries fresh random bytes.
async fn writer(c: Client, big: Vec<u8>, go: Arc<AtomicBool>, stop: Arc<AtomicBool>) -> Model {
    let mut m = Model::default();
    m.put("/out/big.bin", 0, &big);
    let big_file = c
        .open("/out/big.bin", libc::O_RDWR, 0, Creds::root())
        .await
        .unwrap();
    let grow = c
        .create("/out/grow.bin", 0o644, false, Creds::root())
        .await
        .unwrap();
    let rewrite = c
        .create("/out/rewrite.bin", 0o644, false, Creds::root())
        .await
        .unwrap();
    // Rewrites back to back (a pass's read, backend write and marking clean are often
    // overtaken by one), an append every 8th, a new file every 64th.
    while !go.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (mut i, mut appended) = (0usize, 0usize);
    let mut next_big = 0usize;
    while !stop.load(Ordering::SeqCst) {
        // Each chunk of big.bin but the last twice more, in order, then never again: a second
        // write that comes after a pass read the chunk and before it marked it clean must
        // leave it dirty, since no later write would.
        if (next_big + 1) * CHUNK < big.len() {
            for _ in 0..2 {
                let data = random_bytes(CHUNK);
                c.pwrite(&big_file, (next_big * CHUNK) as u64, &data)
                    .await
                    .unwrap();
                m.put("/out/big.bin", next_big * CHUNK, &data);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            next_big += 1;
        }
        let k = i % 4;
        let data = random_bytes(CHUNK);
        c.pwrite(&rewrite, (k * CHUNK) as u64, &data).await.unwrap();
        m.put("/out/rewrite.bin", k * CHUNK, &data);
        if i % 8 == 0 {
            let data = random_bytes(CHUNK);
            let off = appended * CHUNK;
            c.pwrite(&grow, off as u64, &data).await.unwrap();
            m.put("/out/grow.bin", off, &data);
            appended += 1;
        }
        if i % 64 == 63 {
            let path = format!("/out/new-{i}.bin");
            let data = random_bytes(CHUNK * 2 + 100);
            write_all(&c, &path, &data, false).await;
            m.put(&path, 0, &data);
        }
        i += 1;
    }
    // A job that writes past its predicted end: once `eddy writeback` has ended, big.bin's
    // last chunk once more, whose backend copy is then still the one written before the
    // writer started (as for any chunk the writer had not reached, or rewrote, under load).
    let last = (big.len() - 1) / CHUNK;
    let data = random_bytes(big.len() - last * CHUNK);
    c.pwrite(&big_file, (last * CHUNK) as u64, &data)
        .await
        .unwrap();
    m.put("/out/big.bin", last * CHUNK, &data);
    c.close(&big_file).await.unwrap();
    c.close(&grow).await.unwrap();
    c.close(&rewrite).await.unwrap();
    m
}

/// The backend copy of a namespace path under /out.
fn backend_copy(b: &Path, path: &str) -> Vec<u8> {
    std::fs::read(b.join(path.trim_start_matches("/out/"))).unwrap_or_default()
}

/// Early write-back while a writer keeps writing: data written before `eddy writeback`
/// started is in the backend after its first pass; afterwards every backend chunk is one of
/// the versions written to it (never torn), every chunk the backend lacks is still dirty,
/// and the final `eddy stage-out` makes the backend byte-identical to what was written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_passes_beside_a_writer_lose_nothing() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    // Passes back to back, so that they often overlap the writes.
    let config = Config {
        writeback_pass_interval_ms: 20,
        ..linked(&[("/out", b)])
    };
    let cluster = Cluster::start_with(3, config);
    let state = cluster.dir.path();
    let c = cluster.client().await;
    let before = random_bytes(MIB + 3 * CHUNK);
    write_all(&c, "/out/before.bin", &before, false).await;
    let big = random_bytes(16 * MIB);
    write_all(&c, "/out/big.bin", &big, false).await;

    // A huge margin: writing back starts at once and passes go on until the end.
    let (mut child, rx) = spawn_writeback(state, &["--end", &end_in(6), "--margin", "1000"]);
    let (go, stop) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let task = tokio::spawn(writer(
        cluster.client().await,
        big,
        go.clone(),
        stop.clone(),
    ));
    let mut lines = Vec::new();
    let first = tokio::task::block_in_place(|| {
        line_starting(&rx, "eddy writeback: watching 3 daemons", &mut lines);
        // The first pass starts now: the writer goes at the same time.
        go.store(true, Ordering::SeqCst);
        line_starting(&rx, "eddy writeback: pass 1:", &mut lines)
    });
    same(
        &backend_copy(b, "/out/before.bin"),
        &before,
        &format!("before.bin in the backend after {first}"),
    );
    let ended = tokio::task::block_in_place(|| {
        let end = line_starting(&rx, "eddy writeback: at the predicted end", &mut lines);
        assert!(wait_ended(&mut child), "eddy writeback failed: {lines:#?}");
        end
    });
    stop.store(true, Ordering::SeqCst);
    let model = task.await.unwrap();
    let passes = lines.iter().filter(|l| l.contains(": pass ")).count();
    assert!(passes >= 1, "{lines:#?}");
    assert!(ended.contains("written back early"), "{ended}");

    // Every backend chunk is a version that was written; what is missing is dirty.
    let mut missing = 0u64;
    for (path, data) in &model.files {
        let got = backend_copy(b, path);
        for k in 0..data.len().div_ceil(CHUNK) {
            let want = &data[k * CHUNK..data.len().min((k + 1) * CHUNK)];
            let have = got.get(k * CHUNK..got.len().min((k + 1) * CHUNK));
            match have {
                Some(h) if h == want => {}
                Some(h) if !h.is_empty() => {
                    let versions = &model.versions[&(path.clone(), k)];
                    assert!(
                        versions.iter().any(|v| v.as_slice() == h),
                        "{path} chunk {k} in the backend is no version ever written"
                    );
                    missing += want.len() as u64;
                }
                _ => missing += want.len() as u64,
            }
        }
    }
    let dirty = total(&c, |t| t.dirty_bytes).await;
    assert!(
        dirty >= missing,
        "{missing} bytes are not in the backend yet but only {dirty} are dirty"
    );

    // The teardown stage-out makes the backend byte-identical.
    cli::ok(&["stage-out", "--state", s(state)]);
    same(&backend_copy(b, "/out/before.bin"), &before, "before.bin");
    for (path, data) in &model.files {
        same(&backend_copy(b, path), data, path);
    }
    assert_eq!(total(&c, |t| t.dirty_bytes).await, 0);
    assert_eq!(total(&c, |t| t.conflicts).await, 0);
}

/// SIGTERM ends a watch with exit 0; so does the deployment's stop (its state says so).
#[test]
fn sigterm_and_a_stopped_deployment_end_it_cleanly() {
    let backend = tempfile::tempdir().unwrap();
    let cluster = Cluster::start_with(3, linked(&[("/out", backend.path())]));
    let state = cluster.dir.path();

    let (mut child, rx) = spawn_writeback(state, &["--end", &end_in(600), "--margin", "0"]);
    let mut lines = Vec::new();
    line_starting(&rx, "eddy writeback: watching", &mut lines);
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    line_starting(&rx, "eddy writeback: stopped by a signal", &mut lines);
    assert!(wait_ended(&mut child), "{lines:#?}");

    let (mut child, rx) = spawn_writeback(state, &["--end", &end_in(600), "--margin", "0"]);
    let mut lines = Vec::new();
    line_starting(&rx, "eddy writeback: watching", &mut lines);
    std::fs::rename(
        state.join("deployment.toml"),
        state.join("deployment.stopped.toml"),
    )
    .unwrap();
    line_starting(&rx, "eddy writeback: the deployment stopped", &mut lines);
    assert!(wait_ended(&mut child), "{lines:#?}");
}

/// A daemon that accepts connections and never answers makes `eddy writeback` fail (within
/// the client's timeouts) naming it; a bad `--end` is refused before anything is reached.
#[test]
fn an_unreachable_daemon_and_a_bad_end_are_errors() {
    let backend = tempfile::tempdir().unwrap();
    let cluster = Cluster::start_with(3, linked(&[("/out", backend.path())]));
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut dep = cluster.dep.clone();
    dep.daemons[2].addr = silent.local_addr().unwrap().to_string();
    dep.daemons[2].socket = None;
    let dir = tempfile::tempdir().unwrap();
    dep.save(&dir.path().join("deployment.toml")).unwrap();
    let err = cli::fails(&["writeback", "--state", s(dir.path()), "--end", &end_in(60)]);
    assert!(err.contains("cannot watch the deployment"), "{err}");
    assert!(err.contains("daemon 2"), "{err}");

    let state = s(cluster.dir.path());
    let err = cli::fails(&["writeback", "--state", state, "--end", "soon"]);
    assert!(err.contains("is not a time"), "{err}");
    let err = cli::fails(&["writeback", "--state", state, "--end", "1000"]);
    assert!(err.contains("in the past"), "{err}");
    let err = cli::fails(&["writeback", "--state", state, "--end", "12abc"]);
    assert!(err.contains("is not a time"), "{err}");
    drop(silent);
}

/// A dirty file whose backend copy another writer changed is left alone by the passes, as by
/// a stage-out: the other writer's bytes stay in the backend, the pass reports the conflict,
/// and the files beside it are written back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_in_conflict_is_left_alone() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    std::fs::write(b.join("shared.bin"), random_bytes(3 * CHUNK)).unwrap();
    let cluster = Cluster::start_with(3, linked(&[("/out", b)]));
    let state = cluster.dir.path();
    let c = cluster.client().await;
    let ours = random_bytes(2 * CHUNK);
    let f = c
        .open("/out/shared.bin", libc::O_RDWR, 0, Creds::root())
        .await
        .unwrap();
    c.pwrite(&f, 0, &ours).await.unwrap();
    c.close(&f).await.unwrap();
    let other = random_bytes(5 * CHUNK + 1);
    std::fs::write(b.join("shared.bin"), &other).unwrap();
    let mine = random_bytes(MIB);
    write_all(&c, "/out/mine.bin", &mine, false).await;

    let out = tokio::task::block_in_place(|| {
        cli::ok(&[
            "writeback",
            "--state",
            s(state),
            "--end",
            &end_in(3),
            "--margin",
            "1000",
            "--json",
        ])
    });
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let passes = v["passes"].as_array().unwrap();
    assert!(!passes.is_empty(), "{v}");
    assert!(passes[0]["failed"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(v["ended"], "PredictedEnd", "{v}");
    same(
        &backend_copy(b, "/out/shared.bin"),
        &other,
        "the other writer's copy",
    );
    same(
        &backend_copy(b, "/out/mine.bin"),
        &mine,
        "mine.bin after the passes",
    );
    assert_eq!(total(&c, |t| t.conflicts).await, 1);
    let err = cli::fails(&["stage-out", "--state", s(state)]);
    assert!(err.contains("/out/shared.bin"), "{err}");
    same(
        &backend_copy(b, "/out/shared.bin"),
        &other,
        "after the stage-out",
    );
}
