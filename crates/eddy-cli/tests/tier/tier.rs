//! The backend tier with real daemons (3 in every test), real backend directories (a plain
//! directory, a read-only bind mount of one, a GlusterFS volume) and real FUSE mounts: lazy
//! import of large directories, chunk fetches equal to the backend's bytes (one backend read
//! per cold chunk, read-ahead), validation against a changed backend, write-back by
//! stage-out after every namespace operation, durability of dirty data across kill -9,
//! eviction under a small cache, pins, failures of the backend (read-only, hung) and several
//! linked prefixes at once.

use eddy_client::{Client, Creds, DaemonStatus, FileKind, FileResult, SetAttr};
use eddy_config::{Config, Link};
use eddy_proto::TierStatus;
use eddy_testkit::cli::{self, s};
use eddy_testkit::gluster::GlusterVolume;
use eddy_testkit::{test_config, Cluster, Mounted};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

// ------------------------------------------------------------------------------ helpers

/// The test configuration (64 KiB chunks) with `links` as (prefix, backend directory).
fn linked(links: &[(&str, &Path)]) -> Config {
    Config {
        links: links
            .iter()
            .map(|(prefix, backend)| Link {
                prefix: prefix.to_string(),
                backend: backend.to_path_buf(),
            })
            .collect(),
        ..test_config()
    }
}

/// Random bytes from the kernel (fast even in a debug build, and never periodic, so a chunk
/// served from the wrong offset cannot match).
fn random_bytes(len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    std::fs::File::open("/dev/urandom")
        .expect("/dev/urandom")
        .read_exact(&mut v)
        .expect("read /dev/urandom");
    v
}

/// Equality of two byte strings, with the first difference in the failure message (never
/// megabytes of bytes).
#[track_caller]
fn same(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let first = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    panic!(
        "{what}: {} bytes read, {} expected; first difference at byte {first} (chunk {})",
        got.len(),
        want.len(),
        first / (64 * KIB)
    );
}

/// Every daemon's status, in id order.
async fn statuses(c: &Client) -> Vec<DaemonStatus> {
    c.daemon_status()
        .await
        .into_iter()
        .map(|(id, r)| r.unwrap_or_else(|e| panic!("status of daemon {id}: {e:?}")))
        .collect()
}

/// A tier figure summed over the daemons.
async fn total(c: &Client, f: impl Fn(&TierStatus) -> u64) -> u64 {
    statuses(c).await.iter().map(|s| f(&s.tier)).sum()
}

/// Waits (at most 30 s, for asynchronous read-ahead) until `f` of the summed tier figures
/// holds; returns whether it did.
async fn wait_for(c: &Client, f: impl Fn(u64) -> bool, fig: fn(&TierStatus) -> u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if f(total(c, fig).await) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Creates (or opens) a file through the library and writes `data` in 1 MiB pieces.
async fn write_all(c: &Client, path: &str, data: &[u8], fsync: bool) {
    let f = c
        .create(path, 0o644, false, Creds::root())
        .await
        .unwrap_or_else(|e| panic!("create {path}: {e:?}"));
    for (i, piece) in data.chunks(MIB).enumerate() {
        c.pwrite(&f, (i * MIB) as u64, piece)
            .await
            .unwrap_or_else(|e| panic!("write {path}: {e:?}"));
    }
    if fsync {
        c.fsync(&f).await.unwrap();
    }
    c.close(&f).await.unwrap();
}

/// The names of a directory listed through the library, a new reader every `resume_every`
/// pages resuming from the previous reader's cookie.
async fn list_by_cookie(c: &Client, dir: &str, resume_every: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut cookie: Option<String> = None;
    loop {
        let mut reader = c.readdir(dir, cookie.clone()).unwrap();
        let mut pages = 0;
        let mut ended = false;
        while pages < resume_every {
            match reader.next_page().await.unwrap() {
                Some(page) => names.extend(page.into_iter().map(|e| e.name)),
                None => {
                    ended = true;
                    break;
                }
            }
            pages += 1;
        }
        if ended {
            return names;
        }
        cookie = reader.cookie().map(str::to_string);
        assert!(
            cookie.is_some(),
            "a reader that returned pages has a cookie"
        );
    }
}

/// Names in a directory listed through the library.
async fn names(c: &Client, dir: &str) -> Vec<String> {
    list_by_cookie(c, dir, usize::MAX).await
}

/// Every stage-out result must have succeeded.
#[track_caller]
fn all_ok(results: &[FileResult]) {
    let failed: Vec<&FileResult> = results.iter().filter(|r| r.error.is_some()).collect();
    assert!(failed.is_empty(), "stage-out failures: {failed:#?}");
}

/// A tree as (relative path → kind, mode, size of files), for comparing two trees' shapes
/// and modes (contents are compared by `diff -r`).
fn walk(root: &Path) -> BTreeMap<String, (char, u32, u64)> {
    fn go(root: &Path, dir: &Path, out: &mut BTreeMap<String, (char, u32, u64)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            let rel = e
                .path()
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let ft = m.file_type();
            let kind = if ft.is_dir() {
                'd'
            } else if ft.is_symlink() {
                'l'
            } else {
                'f'
            };
            let size = if kind == 'f' { m.len() } else { 0 };
            let mode = if kind == 'l' {
                0o777
            } else {
                m.mode() & 0o7777
            };
            out.insert(rel, (kind, mode, size));
            if kind == 'd' {
                go(root, &e.path(), out);
            }
        }
    }
    let mut out = BTreeMap::new();
    go(root, root, &mut out);
    out
}

/// `want` and `got` hold the same entries with the same kinds, modes, sizes and bytes.
#[track_caller]
fn same_tree(got: &Path, want: &Path) {
    assert_eq!(
        walk(got),
        walk(want),
        "tree {} (left) differs from {} (right)",
        got.display(),
        want.display()
    );
    let out = Command::new("diff")
        .arg("-r")
        .arg("--no-dereference")
        .arg(want)
        .arg(got)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "diff -r {} {}:\n{}{}",
        want.display(),
        got.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a shell script in `dir` with `$SRC` set; it must succeed.
#[track_caller]
fn script(dir: &Path, src: &Path, text: &str) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("set -e\n{text}"))
        .current_dir(dir)
        .env("SRC", src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "script in {} failed: {}\n{text}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Copies a directory tree (cp -a).
fn copy_tree(from: &Path, to: &Path) {
    let st = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success(), "cp -a {} {}", from.display(), to.display());
}

/// A directory bind-mounted read-only over itself (as root) until dropped, also when the
/// test fails.
struct ReadOnly(PathBuf);

impl ReadOnly {
    fn new(dir: &Path) -> ReadOnly {
        run_ok(Command::new("mount").arg("--bind").arg(dir).arg(dir));
        let guard = ReadOnly(dir.to_path_buf());
        run_ok(
            Command::new("mount")
                .arg("-o")
                .arg("remount,ro,bind")
                .arg(dir),
        );
        guard
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[track_caller]
fn run_ok(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn set_mtime(p: &Path, sec: u64, nsec: u32) {
    let t = std::time::UNIX_EPOCH + Duration::new(sec, nsec);
    std::fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_modified(t).set_accessed(t))
        .unwrap();
}

// ------------------------------------------------------------------------------ tests

/// 100,000 files made directly in the backend are listed, through the library page by page
/// (resumed by cookie) and through the mount, exactly; a stat shows the backend's size and
/// mtime without fetching any data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_backend_directory_is_listed_lazily() {
    const N: usize = 100_000;
    let backend = tempfile::tempdir().unwrap();
    let many = backend.path().join("many");
    std::fs::create_dir(&many).unwrap();
    let mut want: Vec<String> = (0..N).map(|i| format!("f{i:06}")).collect();
    for n in &want {
        std::fs::File::create(many.join(n)).unwrap();
    }
    // One of them with data and an exact mtime.
    std::fs::write(many.join("f050000"), random_bytes(12_345)).unwrap();
    set_mtime(&many.join("f050000"), 1_600_000_000, 123_456_789);
    want.sort();

    // The first page imports each daemon's third of the 100,000 names in one request: on a
    // loaded 2-core machine with a debug build that can take longer than the tests' usual
    // deadline.
    let config = Config {
        rpc_timeout_ms: 30_000,
        ..linked(&[("/", backend.path())])
    };
    let m = Mounted::start_with(3, config);
    let c = m.cluster.client().await;
    let listed = list_by_cookie(&c, "/many", 10).await;
    assert_eq!(listed.len(), N, "entries listed through the library");
    assert!(listed == want, "names listed through the library differ");

    let out = m.ok("ls many | wc -l");
    assert_eq!(out.trim(), N.to_string(), "ls many | wc -l on the mount");
    let mut on_mount: Vec<String> = std::fs::read_dir(m.path("many"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    on_mount.sort();
    assert!(on_mount == want, "names listed through the mount differ");

    let i = c.stat("/many/f050000").await.unwrap();
    assert_eq!(i.kind, FileKind::File);
    assert_eq!(i.size, 12_345);
    assert_eq!((i.mtime.sec, i.mtime.nsec), (1_600_000_000, 123_456_789));
    let md = std::fs::metadata(m.path("many/f050000")).unwrap();
    assert_eq!(md.len(), 12_345);
    assert_eq!((md.mtime(), md.mtime_nsec()), (1_600_000_000, 123_456_789));
    assert_eq!(
        total(&c, |t| t.fetches).await,
        0,
        "listing and stat fetched data"
    );
    assert_eq!(total(&c, |t| t.cached_bytes).await, 0);
}

/// Backend files read at random offsets and lengths by many processes at once through the
/// mount, and by several library clients at once, give the backend's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_from_many_processes_equal_the_backend_bytes() {
    let backend = tempfile::tempdir().unwrap();
    let sizes = [3 * MIB + 12_345, 5 * MIB + 1, 2 * MIB + 65_535];
    let mut files = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let data = random_bytes(size);
        std::fs::write(backend.path().join(format!("file{i}")), &data).unwrap();
        files.push(data);
    }
    let m = Mounted::start_with(3, linked(&[("/", backend.path())]));

    // Rounds of 8 dd processes at once, each reading one random range of one file.
    let mut rng_state = 0x1234_5678_9abc_def0u64;
    let mut next = move |bound: usize| {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        (rng_state % bound as u64) as usize
    };
    for _round in 0..8 {
        let mut children = Vec::new();
        for _ in 0..8 {
            let i = next(files.len());
            let size = files[i].len();
            let off = next(size);
            let len = 1 + next((size - off).min(700 * KIB));
            let child = Command::new("dd")
                .arg(format!("if={}", m.path(&format!("file{i}")).display()))
                .arg("iflag=skip_bytes,count_bytes")
                .arg(format!("skip={off}"))
                .arg(format!("count={len}"))
                .arg("bs=256K")
                .arg("status=none")
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            children.push((i, off, len, child));
        }
        for (i, off, len, child) in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "dd of file{i} at {off}+{len} failed");
            same(
                &out.stdout,
                &files[i][off..off + len],
                &format!("dd of file{i} at {off}+{len} through the mount"),
            );
        }
    }
    // Whole files through the mount.
    for (i, want) in files.iter().enumerate() {
        let got = std::fs::read(m.path(&format!("file{i}"))).unwrap();
        same(&got, want, &format!("whole file{i} through the mount"));
    }

    // Three library clients, each with several reads in flight at once.
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(m.cluster.client().await);
    }
    let mut reads = Vec::new();
    for r in 0..24 {
        let i = next(files.len());
        let size = files[i].len();
        let off = next(size);
        let len = 1 + next((size - off).min(MIB + 3));
        let c = clients[r % 3].clone();
        reads.push(async move {
            let f = c
                .open(&format!("/file{i}"), libc::O_RDONLY, 0, Creds::root())
                .await
                .unwrap();
            let got = c.pread(&f, off as u64, len).await.unwrap();
            (i, off, len, got)
        });
    }
    for (i, off, len, got) in futures::future::join_all(reads).await {
        same(
            &got,
            &files[i][off..off + len],
            &format!("library read of file{i} at {off}+{len}"),
        );
    }
    let c = &clients[0];
    assert!(total(c, |t| t.fetches).await > 0);
    // Reads past the end are short, at the end empty.
    let f = c
        .open("/file1", libc::O_RDONLY, 0, Creds::root())
        .await
        .unwrap();
    let end = files[1].len() as u64;
    same(
        &c.pread(&f, end - 10, 100).await.unwrap(),
        &files[1][files[1].len() - 10..],
        "read across the end",
    );
    assert!(c.pread(&f, end, 100).await.unwrap().is_empty());
}

/// N readers of one cold chunk at once cause one backend read; a sequential reader has the
/// next chunks fetched ahead of it, so reading them fetches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_fetch_per_cold_chunk_and_read_ahead_for_sequential_readers() {
    let backend = tempfile::tempdir().unwrap();
    let cs = 64 * KIB;
    let cold = random_bytes(12 * cs + 777);
    let seq = random_bytes(20 * cs + 4321);
    std::fs::write(backend.path().join("cold.bin"), &cold).unwrap();
    std::fs::write(backend.path().join("seq.bin"), &seq).unwrap();
    let cl = Cluster::start_with(3, linked(&[("/", backend.path())]));
    assert_eq!(cl.dep.config.chunk_size as usize, cs);
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(cl.client().await);
    }
    let c = clients[0].clone();

    // 8 readers (4 clients, 2 reads each, same range of chunk 9) of a chunk nobody read.
    let before = statuses(&c).await;
    let (off, len) = (9 * cs + 100, 1000);
    let reads = (0..8).map(|r| {
        let c = clients[r % 4].clone();
        async move {
            let f = c
                .open("/cold.bin", libc::O_RDONLY, 0, Creds::root())
                .await
                .unwrap();
            c.pread(&f, off as u64, len).await.unwrap()
        }
    });
    for got in futures::future::join_all(reads).await {
        same(&got, &cold[off..off + len], "concurrent read of chunk 9");
    }
    let after = statuses(&c).await;
    let fetches: u64 = after.iter().map(|s| s.tier.fetches).sum::<u64>()
        - before.iter().map(|s| s.tier.fetches).sum::<u64>();
    let read_bytes: u64 = after.iter().map(|s| s.tier.backend_read_bytes).sum::<u64>()
        - before
            .iter()
            .map(|s| s.tier.backend_read_bytes)
            .sum::<u64>();
    assert_eq!(fetches, 1, "8 concurrent readers of one cold chunk");
    assert_eq!(read_bytes, cs as u64, "one chunk read from the backend");
    assert_eq!(total(&c, |t| t.cached_chunks).await, 1);

    // A sequential reader: after chunk 0, the next chunks get cached without being read.
    let cached0 = total(&c, |t| t.cached_chunks).await;
    let f = c
        .open("/seq.bin", libc::O_RDONLY, 0, Creds::root())
        .await
        .unwrap();
    same(
        &c.pread(&f, 0, cs).await.unwrap(),
        &seq[..cs],
        "chunk 0 of seq.bin",
    );
    let ahead = c.config().readahead_chunks as u64;
    assert!(ahead >= 2, "the default read-ahead is several chunks");
    assert!(
        wait_for(&c, |n| n >= cached0 + 1 + ahead, |t| t.cached_chunks).await,
        "after reading chunk 0 of seq.bin, {} chunks are cached, expected {} (read-ahead of {ahead})",
        total(&c, |t| t.cached_chunks).await,
        cached0 + 1 + ahead
    );
    // Reading the chunks fetched ahead reads nothing from the backend. Another handle reads
    // them one by one, each after a read of the last chunk (never near the previous read, so
    // that these reads start no read-ahead of their own).
    let g = c
        .open("/seq.bin", libc::O_RDONLY, 0, Creds::root())
        .await
        .unwrap();
    let last = 20 * cs;
    same(
        &c.pread(&g, last as u64, cs).await.unwrap(),
        &seq[last..],
        "last chunk of seq.bin",
    );
    let fetched = total(&c, |t| t.fetches).await;
    for k in 1..=ahead as usize {
        same(
            &c.pread(&g, (k * cs) as u64, cs).await.unwrap(),
            &seq[k * cs..(k + 1) * cs],
            &format!("chunk {k} of seq.bin"),
        );
        c.pread(&g, last as u64, cs).await.unwrap();
    }
    assert_eq!(
        total(&c, |t| t.fetches).await,
        fetched,
        "chunks fetched ahead were fetched again"
    );
    // The rest of the file, sequentially, is right too.
    same(
        &eddy_testkit::read_all(&c, "/seq.bin").await,
        &seq,
        "seq.bin",
    );
}

/// A file changed in the backend after it was read (new contents, size and mtime) is read
/// anew on the next open, through the library and through the mount; a file removed from
/// the backend is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_changes_are_seen_on_the_next_open() {
    let backend = tempfile::tempdir().unwrap();
    let (f, g) = (backend.path().join("f"), backend.path().join("g"));
    let a = random_bytes(200_000);
    std::fs::write(&f, &a).unwrap();
    std::fs::write(&g, &a).unwrap();
    set_mtime(&f, 1_500_000_000, 0);
    set_mtime(&g, 1_500_000_000, 0);
    let m = Mounted::start_with(3, linked(&[("/", backend.path())]));
    let c = m.cluster.client().await;
    // Replaces a backend file's contents and mtime.
    let change = |p: &Path, data: &[u8], sec: u64, nsec: u32| {
        std::fs::write(p, data).unwrap();
        set_mtime(p, sec, nsec);
    };

    // Through the library: /f.
    same(
        &eddy_testkit::read_all(&c, "/f").await,
        &a,
        "f before the change",
    );
    let b = random_bytes(333_333);
    change(&f, &b, 1_500_000_100, 5);
    same(
        &eddy_testkit::read_all(&c, "/f").await,
        &b,
        "f after it grew in the backend",
    );
    let i = c.stat("/f").await.unwrap();
    assert_eq!(i.size, b.len() as u64);
    assert_eq!((i.mtime.sec, i.mtime.nsec), (1_500_000_100, 5));
    // Smaller: nothing of the old generation shows past the new end.
    let small = random_bytes(70_000);
    change(&f, &small, 1_500_000_200, 0);
    same(
        &eddy_testkit::read_all(&c, "/f").await,
        &small,
        "f after it shrank",
    );
    let h = c
        .open("/f", libc::O_RDONLY, 0, Creds::root())
        .await
        .unwrap();
    assert!(c.pread(&h, 70_000, 100_000).await.unwrap().is_empty());
    // Removed in the backend: gone from Eddy on the next open.
    std::fs::remove_file(&f).unwrap();
    let e = c
        .open("/f", libc::O_RDONLY, 0, Creds::root())
        .await
        .expect_err("open of a file removed from the backend");
    assert_eq!(e.errno, libc::ENOENT, "{e:?}");

    // Through the mount: /g. The kernel caches attributes for fuse_attr_ttl_ms, so each
    // reopen comes that long after the change.
    let ttl = Duration::from_millis(c.config().fuse_attr_ttl_ms + 500);
    same(
        &std::fs::read(m.path("g")).unwrap(),
        &a,
        "g before the change",
    );
    change(&g, &b, 1_500_000_100, 5);
    tokio::time::sleep(ttl).await;
    same(
        &std::fs::read(m.path("g")).unwrap(),
        &b,
        "g through the mount after it grew in the backend",
    );
    change(&g, &small, 1_500_000_200, 0);
    tokio::time::sleep(ttl).await;
    same(
        &std::fs::read(m.path("g")).unwrap(),
        &small,
        "g through the mount after it shrank in the backend",
    );
    std::fs::remove_file(&g).unwrap();
    tokio::time::sleep(ttl).await;
    let e = std::fs::read(m.path("g")).expect_err("g was removed from the backend");
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
}

/// Namespace operations and writes through the mount and the library: mkdir, unlink, rmdir,
/// rename and chmod reach the backend at once; after stage-out the backend tree equals,
/// byte for byte and mode for mode, the same operations done on a local copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage_out_makes_the_backend_equal_to_what_was_written() {
    let backend = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    let expect_dir = tempfile::tempdir().unwrap();
    let b = backend.path();
    // The backend's initial contents.
    for d in ["old/emptydir", "olddir/in"] {
        std::fs::create_dir_all(b.join(d)).unwrap();
    }
    for (name, size) in [
        ("old/a.bin", 300_000),
        ("old/b.bin", 150_000),
        ("old/c.bin", 1000),
        ("old/t.bin", 500_000),
        ("old/grow.bin", 70_000),
        ("old/ren.bin", 140_000),
        ("old/gone.bin", 10),
        ("old/app.txt", 65_536 + 10),
        ("old/sg.bin", 500_000),
        ("old/over.bin", 4 * MIB),
        ("old/victim.bin", 300_000),
        ("olddir/x", 80_000),
        ("olddir/in/y", 5),
    ] {
        std::fs::write(b.join(name), random_bytes(size)).unwrap();
    }
    // What the mount copies in.
    let tree = src.path().join("tree");
    std::fs::create_dir_all(tree.join("sub/deeper")).unwrap();
    for (name, size) in [
        ("f1", 1),
        ("f2", 64 * KIB),
        ("f3", 3 * MIB + 7),
        ("sub/s1", 200_001),
        ("sub/deeper/d1", 65_535),
        ("sub/deeper/zero", 0),
    ] {
        std::fs::write(tree.join(name), random_bytes(size)).unwrap();
    }
    std::fs::write(src.path().join("patch"), random_bytes(150_000)).unwrap();
    let expect = expect_dir.path().join("b");
    copy_tree(b, &expect);

    let m = Mounted::start_with(3, linked(&[("/", b)]));
    let c = m.cluster.client().await;
    // The same commands on the mount and on the local copy.
    let commands = r#"
cp -r "$SRC/tree" tree
dd if="$SRC/patch" of=old/a.bin bs=4096 seek=70001 oflag=seek_bytes conv=notrunc status=none
truncate -s 100000 old/t.bin
truncate -s 1000000 old/grow.bin
printf 'appended' >> old/app.txt
cat old/sg.bin > /dev/null
truncate -s 1000 old/sg.bin
truncate -s 300000 old/sg.bin
cp "$SRC/tree/f3" old/over.bin
dd if="$SRC/patch" of=tree/sparse bs=1000 count=1 seek=200 status=none
mv tree/sparse old/victim.bin
touch tree/empty1 old/empty2
: > empty3
mkdir -p newdir/sub
mkdir -m 777 open
ln -s old/a.bin link
mv old/ren.bin old/renamed.bin
mv tree/f1 tree/f1-moved
mv olddir olddir2
mv tree/sub tree/sub2
chmod 600 old/a.bin
chmod 750 newdir
chmod 640 tree/f2
rm old/gone.bin
rmdir old/emptydir
"#;
    script(m.mnt.path(), src.path(), commands);
    script(&expect, src.path(), commands);

    // Write-through: namespace changes are in the backend before any stage-out.
    let is_dir = |p: &str| b.join(p).symlink_metadata().is_ok_and(|m| m.is_dir());
    let exists = |p: &str| b.join(p).symlink_metadata().is_ok();
    for d in [
        "newdir/sub",
        "open",
        "olddir2",
        "olddir2/in",
        "tree",
        "tree/sub2/deeper",
    ] {
        assert!(
            is_dir(d),
            "directory {d} is not in the backend before stage-out"
        );
    }
    for gone in [
        "olddir",
        "old/ren.bin",
        "old/gone.bin",
        "old/emptydir",
        "tree/sub",
    ] {
        assert!(!exists(gone), "{gone} is still in the backend");
    }
    assert!(exists("old/renamed.bin") && exists("olddir2/x") && exists("olddir2/in/y"));
    assert_eq!(
        std::fs::read_link(b.join("link")).unwrap(),
        Path::new("old/a.bin")
    );
    let mode = |p: &str| b.join(p).metadata().unwrap().mode() & 0o7777;
    assert_eq!(mode("old/a.bin"), 0o600, "chmod of a backend file");
    assert_eq!(mode("newdir"), 0o750, "chmod of a directory");
    assert_eq!(mode("open"), 0o777, "mkdir -m 777");
    assert_eq!(
        b.join("old/t.bin").metadata().unwrap().len(),
        100_000,
        "truncate of a backend file"
    );

    // Eddy itself shows the result of the commands.
    same_tree(m.mnt.path(), &expect);

    // The library: a new file renamed and chmod'ed, a backend file partly overwritten, one
    // truncated, one removed; the same on the local copy.
    let me = Creds::root();
    c.mkdir("/lib", 0o755, me).await.unwrap();
    std::fs::create_dir(expect.join("lib")).unwrap();
    let x = random_bytes(200_000);
    write_all(&c, "/lib/x.bin", &x, false).await;
    std::fs::write(expect.join("lib/x.bin"), &x).unwrap();
    c.rename("/lib/x.bin", "/lib/y.bin", me).await.unwrap();
    std::fs::rename(expect.join("lib/x.bin"), expect.join("lib/y.bin")).unwrap();
    let attr = SetAttr {
        mode: Some(0o604),
        ..SetAttr::default()
    };
    c.setattr("/lib/y.bin", attr, me).await.unwrap();
    std::fs::set_permissions(
        expect.join("lib/y.bin"),
        std::fs::Permissions::from_mode(0o604),
    )
    .unwrap();
    let patch = random_bytes(1000);
    let f = c.open("/old/b.bin", libc::O_RDWR, 0, me).await.unwrap();
    c.pwrite(&f, 10, &patch).await.unwrap();
    c.close(&f).await.unwrap();
    {
        use std::os::unix::fs::FileExt;
        let e = std::fs::File::options()
            .write(true)
            .open(expect.join("old/b.bin"))
            .unwrap();
        e.write_all_at(&patch, 10).unwrap();
    }
    c.truncate("/old/renamed.bin", 5, me).await.unwrap();
    std::fs::File::options()
        .write(true)
        .open(expect.join("old/renamed.bin"))
        .unwrap()
        .set_len(5)
        .unwrap();
    c.unlink("/old/c.bin", me).await.unwrap();
    std::fs::remove_file(expect.join("old/c.bin")).unwrap();
    assert!(!exists("old/c.bin"), "unlink is written through");

    let results = c.stage_out(&[], &|_| {}).await.unwrap();
    all_ok(&results);
    let paths: Vec<&str> = results.iter().map(|r| r.path.as_str()).collect();
    for p in ["/tree/f3", "/old/a.bin", "/lib/y.bin", "/old/b.bin"] {
        assert!(paths.contains(&p), "{p} missing from the results {paths:?}");
    }
    same_tree(b, &expect);
    // Stage-out set the backend files' mtimes to Eddy's.
    for p in ["tree/f3", "old/a.bin", "lib/y.bin", "tree/empty1"] {
        let i = c.stat(&format!("/{p}")).await.unwrap();
        let md = b.join(p).metadata().unwrap();
        assert_eq!(
            (md.mtime(), md.mtime_nsec() as u32),
            (i.mtime.sec, i.mtime.nsec),
            "mtime of {p}"
        );
    }
    // A second stage-out has nothing left to write.
    let again = c.stage_out(&[], &|_| {}).await.unwrap();
    all_ok(&again);
    assert_eq!(again.iter().map(|r| r.bytes).sum::<u64>(), 0, "{again:?}");
    assert_eq!(total(&c, |t| t.dirty_bytes).await, 0);
    same_tree(b, &expect);
}

/// Dirty data made durable by fsync survives kill -9 of every daemon and a restart, and a
/// stage-out afterwards writes all of it to the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsynced_dirty_data_survives_kill_9_and_reaches_the_backend() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    let mut base = random_bytes(500_000);
    std::fs::write(b.join("base.bin"), &base).unwrap();
    let mut cl = Cluster::start_with(3, linked(&[("/", b)]));
    let mut expect: Vec<(String, Vec<u8>)> = Vec::new();
    {
        let c = cl.client().await;
        c.mkdir("/k", 0o755, Creds::root()).await.unwrap();
        for (i, size) in [0, 1, 65_536, 200_003, MIB + 17].into_iter().enumerate() {
            let data = random_bytes(size);
            write_all(&c, &format!("/k/new{i}"), &data, true).await;
            expect.push((format!("k/new{i}"), data));
        }
        let f = c
            .open("/base.bin", libc::O_RDWR, 0, Creds::root())
            .await
            .unwrap();
        let patch = random_bytes(50_000);
        c.pwrite(&f, 100_000, &patch).await.unwrap();
        base[100_000..150_000].copy_from_slice(&patch);
        c.pwrite(&f, 600_000, b"0123456789").await.unwrap();
        base.resize(600_000, 0);
        base.extend_from_slice(b"0123456789");
        c.fsync(&f).await.unwrap();
        expect.push(("base.bin".into(), base));
        assert!(total(&c, |t| t.dirty_bytes).await > 0);
    }
    cl.kill_and_restart_all();
    let c = cl.client().await;
    assert!(
        total(&c, |t| t.dirty_bytes).await > 0,
        "dirty chunks are known after the restart"
    );
    for (p, want) in &expect {
        same(
            &eddy_testkit::read_all(&c, &format!("/{p}")).await,
            want,
            &format!("{p} after restart"),
        );
    }
    let results = c.stage_out(&[], &|_| {}).await.unwrap();
    all_ok(&results);
    for (p, want) in &expect {
        let got = std::fs::read(b.join(p)).unwrap_or_else(|e| panic!("backend {p}: {e}"));
        same(&got, want, &format!("backend {p} after stage-out"));
    }
    assert_eq!(total(&c, |t| t.dirty_bytes).await, 0);
}

/// The configuration of the eviction tests: 32 MiB of cache per daemon.
fn small_cache(links: &[(&str, &Path)]) -> Config {
    Config {
        cache_capacity_bytes: 32 * MIB as u64,
        ..linked(links)
    }
}

/// A 200 MiB working set (100 MiB written, 100 MiB of backend files read) through caches of
/// 32 MiB per daemon: all data correct, chunks evicted, every daemon within its capacity, and
/// stage-out writes everything written to the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_keeps_each_daemon_within_its_capacity() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    std::fs::create_dir(b.join("in")).unwrap();
    let mut inputs = Vec::new();
    for i in 0..10 {
        let data = random_bytes(10 * MIB + 1000 * i);
        std::fs::write(b.join(format!("in/r{i}")), &data).unwrap();
        inputs.push(data);
    }
    let cl = Cluster::start_with(3, small_cache(&[("/", b)]));
    let cap = cl.dep.config.cache_capacity_bytes;
    let c = cl.client().await;
    c.mkdir("/out", 0o755, Creds::root()).await.unwrap();
    let mut outputs = Vec::new();
    for i in 0..10 {
        let data = random_bytes(10 * MIB + 333 * i);
        write_all(&c, &format!("/out/w{i}"), &data, false).await;
        outputs.push(data);
    }
    for (i, want) in inputs.iter().enumerate() {
        same(
            &eddy_testkit::read_all(&c, &format!("/in/r{i}")).await,
            want,
            &format!("in/r{i}"),
        );
    }
    for (i, want) in outputs.iter().enumerate() {
        same(
            &eddy_testkit::read_all(&c, &format!("/out/w{i}")).await,
            want,
            &format!("out/w{i}"),
        );
    }
    let st = statuses(&c).await;
    for s in &st {
        eprintln!(
            "daemon {}: {} bytes of chunks, {} evictions, {} fetches, {} bytes written back",
            s.id, s.chunk_bytes, s.tier.evictions, s.tier.fetches, s.tier.backend_write_bytes
        );
    }
    assert!(
        st.iter().map(|s| s.tier.evictions).sum::<u64>() > 0,
        "no eviction"
    );
    for s in &st {
        // "Around the capacity": a few chunks of slack for writes racing the eviction.
        assert!(
            s.chunk_bytes <= cap + MIB as u64,
            "daemon {} holds {} bytes of chunks, capacity {cap}",
            s.id,
            s.chunk_bytes
        );
        assert!(s.tier.evictions > 0, "daemon {} evicted nothing", s.id);
    }
    let results = c.stage_out(&[], &|_| {}).await.unwrap();
    all_ok(&results);
    for (i, want) in outputs.iter().enumerate() {
        same(
            &std::fs::read(b.join(format!("out/w{i}"))).unwrap(),
            want,
            &format!("backend out/w{i}"),
        );
    }
    for (i, want) in inputs.iter().enumerate() {
        same(
            &std::fs::read(b.join(format!("in/r{i}"))).unwrap(),
            want,
            &format!("backend in/r{i} (read only)"),
        );
    }
}

/// A 20 MiB tree staged in with a pin stays cached while 200 MiB of other data pass through
/// 32 MiB caches; once unpinned, it can be evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_stage_in_survives_cache_pressure_until_unpinned() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    std::fs::create_dir_all(b.join("pinned/sub")).unwrap();
    std::fs::create_dir(b.join("other")).unwrap();
    let mut pinned = Vec::new();
    for i in 0..5 {
        let p = if i % 2 == 0 {
            format!("pinned/p{i}")
        } else {
            format!("pinned/sub/p{i}")
        };
        let data = random_bytes(4 * MIB);
        std::fs::write(b.join(&p), &data).unwrap();
        pinned.push((p, data));
    }
    for i in 0..20 {
        std::fs::write(b.join(format!("other/o{i}")), random_bytes(10 * MIB)).unwrap();
    }
    let cl = Cluster::start_with(3, small_cache(&[("/", b)]));
    let c = cl.client().await;
    let results = c.stage_in(&["/pinned".to_string()], true, &|_| {}).await;
    assert_eq!(results.len(), 5, "{results:?}");
    all_ok(&results);
    assert_eq!(
        results.iter().map(|r| r.bytes).sum::<u64>(),
        20 * MIB as u64
    );
    let pins: Vec<u64> = statuses(&c)
        .await
        .iter()
        .map(|s| s.tier.pinned_bytes)
        .collect();
    assert_eq!(pins.iter().sum::<u64>(), 20 * MIB as u64, "{pins:?}");

    // 200 MiB of other data.
    for i in 0..20 {
        let got = eddy_testkit::read_all(&c, &format!("/other/o{i}")).await;
        same(
            &got,
            &std::fs::read(b.join(format!("other/o{i}"))).unwrap(),
            &format!("other/o{i}"),
        );
    }
    let st = statuses(&c).await;
    assert!(st.iter().map(|s| s.tier.evictions).sum::<u64>() > 0);
    let pins_after: Vec<u64> = st.iter().map(|s| s.tier.pinned_bytes).collect();
    assert_eq!(pins_after, pins, "pinned bytes per daemon changed");
    let fetched = total(&c, |t| t.fetches).await;
    for (p, want) in &pinned {
        same(&eddy_testkit::read_all(&c, &format!("/{p}")).await, want, p);
    }
    assert_eq!(
        total(&c, |t| t.fetches).await,
        fetched,
        "reading pinned files fetched from the backend"
    );

    let unpinned = c.unpin(&["/pinned".to_string()]).await.unwrap();
    assert_eq!(unpinned, (20 * MIB / (64 * KIB)) as u64, "chunks unpinned");
    assert_eq!(total(&c, |t| t.pinned_bytes).await, 0);
    for i in 0..12 {
        eddy_testkit::read_all(&c, &format!("/other/o{i}")).await;
    }
    let fetched = total(&c, |t| t.fetches).await;
    for (p, want) in &pinned {
        same(&eddy_testkit::read_all(&c, &format!("/{p}")).await, want, p);
    }
    assert!(
        total(&c, |t| t.fetches).await > fetched,
        "unpinned files were never evicted"
    );
}

/// Stage-out into a read-only backend fails for every dirty file, naming its backend path,
/// and loses nothing; once the backend is writable again, stage-out succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage_out_into_a_read_only_backend_fails_per_file_and_loses_nothing() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path().to_path_buf();
    let mut old = random_bytes(300_000);
    std::fs::write(b.join("old.bin"), &old).unwrap();
    let cl = Cluster::start_with(3, linked(&[("/", &b)]));
    let c = cl.client().await;
    let me = Creds::root();
    c.mkdir("/d", 0o755, me).await.unwrap();
    let mut expect = vec![
        ("d/new1".to_string(), random_bytes(500_000)),
        ("d/new2".to_string(), random_bytes(3)),
        ("d/empty".to_string(), Vec::new()),
    ];
    for (p, data) in &expect {
        write_all(&c, &format!("/{p}"), data, false).await;
    }
    let f = c.open("/old.bin", libc::O_RDWR, 0, me).await.unwrap();
    let patch = random_bytes(70_000);
    c.pwrite(&f, 60_000, &patch).await.unwrap();
    c.close(&f).await.unwrap();
    old[60_000..130_000].copy_from_slice(&patch);
    expect.push(("old.bin".to_string(), old));
    let dirty = total(&c, |t| t.dirty_bytes).await;
    assert!(dirty > 0);

    {
        let _ro = ReadOnly::new(&b);
        assert!(
            std::fs::write(b.join("probe"), b"x").is_err(),
            "the bind mount is not read-only"
        );
        let results = c.stage_out(&[], &|_| {}).await.unwrap();
        let by_path: BTreeMap<&str, &FileResult> =
            results.iter().map(|r| (r.path.as_str(), r)).collect();
        for (p, _) in &expect {
            let r = by_path
                .get(format!("/{p}").as_str())
                .unwrap_or_else(|| panic!("no result for /{p}: {results:#?}"));
            let err = r
                .error
                .as_deref()
                .unwrap_or_else(|| panic!("stage-out of /{p} into a read-only backend: {r:?}"));
            let bpath = b.join(p).display().to_string();
            assert!(
                err.contains(&bpath),
                "error for /{p} does not name {bpath}: {err}"
            );
        }
        assert_eq!(
            total(&c, |t| t.dirty_bytes).await,
            dirty,
            "dirty bytes after a failed stage-out"
        );
        for (p, want) in &expect {
            same(
                &eddy_testkit::read_all(&c, &format!("/{p}")).await,
                want,
                &format!("{p} while read-only"),
            );
        }
        let e = c
            .mkdir("/d2", 0o755, me)
            .await
            .expect_err("mkdir in a read-only backend");
        assert_eq!(e.errno, libc::EROFS, "{e:?}");
    }
    assert!(
        std::fs::write(b.join("probe"), b"x").is_ok(),
        "backend still read-only"
    );
    std::fs::remove_file(b.join("probe")).unwrap();
    let results = c.stage_out(&[], &|_| {}).await.unwrap();
    all_ok(&results);
    for (p, want) in &expect {
        same(
            &std::fs::read(b.join(p)).unwrap(),
            want,
            &format!("backend {p}"),
        );
    }
    assert_eq!(total(&c, |t| t.dirty_bytes).await, 0);
}

/// With a GlusterFS backend whose bricks are frozen, a read of a cold chunk gives EIO within
/// the deadline instead of hanging, while the scratch namespace and cached chunks keep
/// working; after the thaw the same read succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_backend_gives_eio_in_time_and_scratch_keeps_working() {
    let vol = GlusterVolume::start("tier_hang");
    let data = random_bytes(4 * MIB + 99);
    std::fs::write(vol.mount().join("f"), &data).unwrap();
    let config = Config {
        backend_timeout_ms: 1500,
        rpc_timeout_ms: 4000,
        ..linked(&[("/data", vol.mount())])
    };
    let rpc_deadline = Duration::from_millis(config.rpc_timeout_ms);
    let cl = Cluster::start_with(3, config);
    let c = cl.client().await;
    let cs = 64 * KIB;
    let me = Creds::root();
    let f = c.open("/data/f", libc::O_RDONLY, 0, me).await.unwrap();
    same(&c.pread(&f, 0, cs).await.unwrap(), &data[..cs], "chunk 0");

    vol.freeze();
    let hang_guard = Duration::from_secs(30);
    let t = Instant::now();
    let r = tokio::time::timeout(hang_guard, c.pread(&f, (10 * cs) as u64, 1000))
        .await
        .expect("a read of a cold chunk hung with the backend frozen");
    let took = t.elapsed();
    let e = r.expect_err("a read of a cold chunk with the backend frozen");
    assert_eq!(e.errno, libc::EIO, "{e:?}");
    assert!(
        took <= rpc_deadline + Duration::from_secs(1),
        "EIO came after {took:?}"
    );
    let bpath = vol.mount().join("f").display().to_string();
    assert!(
        e.msg.contains(&bpath),
        "the error does not name {bpath}: {e:?}"
    );

    // Cold reads of other chunks in flight while the scratch namespace is used.
    let cold: Vec<_> = (20..24u64)
        .map(|k| {
            let (c, f) = (c.clone(), f.clone());
            tokio::spawn(async move {
                let t = Instant::now();
                let r = tokio::time::timeout(hang_guard, c.pread(&f, k * cs as u64, 10)).await;
                (k, r, t.elapsed())
            })
        })
        .collect();
    c.mkdir("/scratch", 0o755, me).await.unwrap();
    let s = random_bytes(300_000);
    write_all(&c, "/scratch/s", &s, true).await;
    same(
        &eddy_testkit::read_all(&c, "/scratch/s").await,
        &s,
        "scratch file",
    );
    assert_eq!(names(&c, "/scratch").await, ["s"]);
    c.rename("/scratch/s", "/scratch/t", me).await.unwrap();
    c.unlink("/scratch/t", me).await.unwrap();
    // A chunk cached before the freeze is still served.
    same(
        &c.pread(&f, 0, cs).await.unwrap(),
        &data[..cs],
        "cached chunk 0",
    );
    for h in cold {
        let (k, r, took) = h.await.unwrap();
        let r = r.unwrap_or_else(|_| panic!("read of chunk {k} hung"));
        let e = r.expect_err("cold read with the backend frozen");
        assert_eq!(e.errno, libc::EIO, "chunk {k}: {e:?}");
        assert!(
            took <= rpc_deadline + Duration::from_secs(1),
            "chunk {k}: EIO after {took:?}"
        );
    }
    // A name never looked up needs the backend too: EIO in time as well.
    let t = Instant::now();
    let r = tokio::time::timeout(hang_guard, c.stat("/data/never-seen"))
        .await
        .expect("a stat hung with the backend frozen");
    let e = r.expect_err("stat of an unimported name with the backend frozen");
    assert_eq!(e.errno, libc::EIO, "{e:?}");
    assert!(t.elapsed() <= rpc_deadline + Duration::from_secs(1));

    vol.thaw();
    let got = tokio::time::timeout(hang_guard, c.pread(&f, (10 * cs) as u64, 1000))
        .await
        .expect("read after thaw hung")
        .expect("read after thaw");
    same(&got, &data[10 * cs..10 * cs + 1000], "chunk 10 after thaw");
    same(
        &eddy_testkit::read_all(&c, "/data/f").await,
        &data,
        "whole file after thaw",
    );
    drop(c);
    drop(cl);
}

/// Two prefixes linked at once, `/a` to a plain directory and `/b` to a GlusterFS volume:
/// each shows its own backend's files, writes go back to the right backend, a rename between
/// them (or to scratch) is EXDEV, and the scratch namespace never reaches either backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_linked_prefixes_on_two_backends() {
    let vol = GlusterVolume::start("tier_two");
    let plain = tempfile::tempdir().unwrap();
    let (pa, pb) = (plain.path(), vol.mount());
    std::fs::create_dir(pa.join("dir")).unwrap();
    std::fs::create_dir(pb.join("dir")).unwrap();
    let (a1, a2, b1, b2) = (
        random_bytes(100_000),
        random_bytes(7),
        random_bytes(150_000),
        random_bytes(9),
    );
    std::fs::write(pa.join("only-a"), &a1).unwrap();
    std::fs::write(pa.join("dir/x"), &a2).unwrap();
    std::fs::write(pb.join("only-b"), &b1).unwrap();
    std::fs::write(pb.join("dir/y"), &b2).unwrap();
    let cl = Cluster::start_with(3, linked(&[("/a", pa), ("/b", pb)]));
    let c = cl.client().await;
    let me = Creds::root();

    assert_eq!(names(&c, "/a").await, ["dir", "only-a"]);
    assert_eq!(names(&c, "/b").await, ["dir", "only-b"]);
    assert_eq!(names(&c, "/a/dir").await, ["x"]);
    assert_eq!(names(&c, "/b/dir").await, ["y"]);
    same(
        &eddy_testkit::read_all(&c, "/a/only-a").await,
        &a1,
        "/a/only-a",
    );
    same(
        &eddy_testkit::read_all(&c, "/b/dir/y").await,
        &b2,
        "/b/dir/y",
    );
    assert_eq!(eddy_testkit::errno(c.stat("/a/only-b").await), libc::ENOENT);
    assert_eq!(eddy_testkit::errno(c.stat("/b/only-a").await), libc::ENOENT);

    // Writes in each.
    let (na, nb) = (random_bytes(300_000), random_bytes(200_000));
    write_all(&c, "/a/new", &na, false).await;
    write_all(&c, "/b/new", &nb, false).await;
    let patch = random_bytes(5000);
    let f = c.open("/b/only-b", libc::O_RDWR, 0, me).await.unwrap();
    c.pwrite(&f, 70_000, &patch).await.unwrap();
    c.close(&f).await.unwrap();
    let mut b1_new = b1.clone();
    b1_new[70_000..75_000].copy_from_slice(&patch);
    c.mkdir("/a/m", 0o755, me).await.unwrap();
    c.mkdir("/b/m", 0o755, me).await.unwrap();
    assert!(
        pa.join("m").is_dir() && pb.join("m").is_dir(),
        "mkdir write-through"
    );

    // Scratch.
    c.mkdir("/s", 0o755, me).await.unwrap();
    c.mkdir("/s/deep", 0o755, me).await.unwrap();
    write_all(&c, "/s/deep/scratch-file", &random_bytes(100_000), false).await;
    write_all(&c, "/top-scratch", &random_bytes(10), false).await;
    c.rename("/s/deep/scratch-file", "/s/scratch-moved", me)
        .await
        .unwrap();

    // Renames across tiers.
    for (from, to) in [
        ("/a/only-a", "/b/moved"),
        ("/b/only-b", "/a/moved"),
        ("/a/new", "/s/moved"),
        ("/top-scratch", "/a/moved"),
        ("/a/dir", "/b/dir2"),
    ] {
        let e = c
            .rename(from, to, me)
            .await
            .expect_err(&format!("rename {from} {to}"));
        assert_eq!(e.errno, libc::EXDEV, "rename {from} {to}: {e:?}");
    }

    // Stage-out of one prefix leaves the other alone.
    all_ok(&c.stage_out(&["/a".to_string()], &|_| {}).await.unwrap());
    same(
        &std::fs::read(pa.join("new")).unwrap(),
        &na,
        "plain backend new",
    );
    assert!(!pb.join("new").exists(), "stage-out of /a wrote /b/new");
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    same(
        &std::fs::read(pb.join("new")).unwrap(),
        &nb,
        "gluster backend new",
    );
    same(
        &std::fs::read(pb.join("only-b")).unwrap(),
        &b1_new,
        "gluster only-b",
    );
    same(
        &std::fs::read(pa.join("only-a")).unwrap(),
        &a1,
        "plain only-a",
    );

    let tree = |root: &Path| walk(root).into_keys().collect::<Vec<_>>();
    assert_eq!(tree(pa), ["dir", "dir/x", "m", "new", "only-a"]);
    assert_eq!(tree(pb), ["dir", "dir/y", "m", "new", "only-b"]);
    // The scratch namespace is still there, in Eddy only.
    assert_eq!(names(&c, "/s").await, ["deep", "scratch-moved"]);
    let e = c.stage_out(&["/s".to_string()], &|_| {}).await;
    assert_eq!(
        eddy_testkit::errno(e),
        libc::EINVAL,
        "stage-out of a scratch path"
    );
    drop(c);
    drop(cl);
}

// ------------------------------------------------------------------------------ the CLI

/// Runs `eddy ARGS`, which must succeed; returns its stdout.
fn eddy_ok(args: &[&str]) -> String {
    String::from_utf8_lossy(&cli::ok(args).stdout).into_owned()
}

/// Runs `eddy ARGS --json`, which must succeed; returns the parsed output.
fn eddy_json(args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = eddy_ok(&all);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("eddy {args:?} --json: {e}: {out}"))
}

/// A tier figure summed over the daemons of `eddy status --json`, which must all be up.
fn status_total(state: &Path, field: &str) -> u64 {
    let v = eddy_json(&["status", "--state", s(state)]);
    let daemons = v["daemons"].as_array().expect("daemons");
    assert_eq!(daemons.len(), 3, "{v}");
    daemons
        .iter()
        .map(|d| {
            assert_eq!(d["up"], true, "{d}");
            d["tier"][field]
                .as_u64()
                .unwrap_or_else(|| panic!("no tier.{field}: {d}"))
        })
        .sum()
}

/// The per-file results of a `--json` stage-in or stage-out, by path: (bytes, error).
fn json_files(v: &serde_json::Value) -> BTreeMap<String, (u64, Option<String>)> {
    v["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files: {v}"))
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                (
                    f["bytes"].as_u64().unwrap(),
                    f["error"].as_str().map(str::to_string),
                ),
            )
        })
        .collect()
}

/// Stops a deployment started by `eddy start` when the test ends, however it ends.
struct Stopper(PathBuf);

impl Drop for Stopper {
    fn drop(&mut self) {
        let _ = cli::eddy(&["stop", "--discard", "--state", s(&self.0)]);
    }
}

/// Starts 3 local daemons linked to `backend` (64 KiB chunks), mounted at `mnt`.
fn cli_start(state: &Path, backend: &Path, mnt: &Path) -> Stopper {
    eddy_ok(&[
        "start",
        "--local",
        "3",
        "--root",
        s(state),
        "--backend",
        s(backend),
        "--chunk-size",
        "65536",
        "--mount",
        s(mnt),
    ]);
    let stopper = Stopper(state.to_path_buf());
    assert!(
        eddy_testkit::is_mountpoint(mnt),
        "eddy start --mount did not mount"
    );
    stopper
}

/// `eddy start --backend --mount`, `stage-in --pin` (of a path under the mount), `unpin`,
/// `stage-out --json`, and `stop`, which writes dirty data back first.
#[test]
fn cli_stage_in_stage_out_and_stop_writes_back() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    std::fs::create_dir(b.join("in")).unwrap();
    let input = random_bytes(3 * MIB + 5);
    std::fs::write(b.join("in/data"), &input).unwrap();
    let root = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let state = root.path();
    let _stop = cli_start(state, b, mnt.path());

    // stage-in --pin, named by its path under the mount.
    let local = mnt.path().join("in");
    let v = eddy_json(&["stage-in", "--pin", "--state", s(state), s(&local)]);
    let files = json_files(&v);
    assert_eq!(
        files.get("/in/data"),
        Some(&(input.len() as u64, None)),
        "{v}"
    );
    assert_eq!(v["failed"], 0, "{v}");
    assert_eq!(status_total(state, "pinned_bytes"), input.len() as u64);
    assert_eq!(status_total(state, "cached_bytes"), input.len() as u64);
    let fetches = status_total(state, "fetches");
    same(
        &std::fs::read(mnt.path().join("in/data")).unwrap(),
        &input,
        "in/data through the mount",
    );
    assert_eq!(
        status_total(state, "fetches"),
        fetches,
        "reading staged-in data fetched again"
    );
    let out = eddy_ok(&["unpin", "--state", s(state), "/in"]);
    let chunks = input.len().div_ceil(64 * KIB);
    assert!(out.contains(&format!(" {chunks} ")), "unpin: {out}");
    assert_eq!(status_total(state, "pinned_bytes"), 0);

    // Written through the mount, then stage-out --json.
    let r1 = random_bytes(MIB + 3);
    std::fs::create_dir(mnt.path().join("out")).unwrap();
    std::fs::write(mnt.path().join("out/r1"), &r1).unwrap();
    std::fs::write(mnt.path().join("out/r2"), b"second").unwrap();
    let v = eddy_json(&["stage-out", "--state", s(state)]);
    let files = json_files(&v);
    assert_eq!(files.get("/out/r1"), Some(&(r1.len() as u64, None)), "{v}");
    assert_eq!(files.get("/out/r2"), Some(&(6, None)), "{v}");
    assert_eq!(v["failed"], 0, "{v}");
    same(
        &std::fs::read(b.join("out/r1")).unwrap(),
        &r1,
        "backend out/r1",
    );
    assert_eq!(std::fs::read(b.join("out/r2")).unwrap(), b"second");
    assert_eq!(status_total(state, "dirty_bytes"), 0);

    // stop writes back what is dirty, then stops.
    let last = random_bytes(200_000);
    std::fs::write(mnt.path().join("out/last"), &last).unwrap();
    std::fs::write(mnt.path().join("in/data"), b"replaced").unwrap();
    eddy_ok(&["stop", "--state", s(state)]);
    same(
        &std::fs::read(b.join("out/last")).unwrap(),
        &last,
        "written back by stop",
    );
    assert_eq!(std::fs::read(b.join("in/data")).unwrap(), b"replaced");
    assert!(
        !eddy_testkit::is_mountpoint(mnt.path()),
        "stop left the mount"
    );
    assert!(
        !cli::eddy(&["status", "--state", s(state)]).status.success(),
        "daemons still answer after stop"
    );
}

/// With a read-only backend, `eddy stop` fails naming the file it cannot write back and
/// keeps the daemons and the mount; `eddy stop --discard` then stops them.
#[test]
fn cli_stop_keeps_the_daemons_when_it_cannot_write_back() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    let root = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let state = root.path();
    let _stop = cli_start(state, b, mnt.path());
    let stuck = random_bytes(100_000);
    std::fs::write(mnt.path().join("stuck"), &stuck).unwrap();
    {
        let _ro = ReadOnly::new(b);
        let err = cli::fails(&["stop", "--state", s(state)]);
        let named = b.join("stuck").display().to_string();
        assert!(err.contains(&named), "stop does not name {named}: {err}");
        assert!(status_total(state, "dirty_bytes") >= stuck.len() as u64);
        assert!(
            eddy_testkit::is_mountpoint(mnt.path()),
            "the failed stop unmounted"
        );
        same(
            &std::fs::read(mnt.path().join("stuck")).unwrap(),
            &stuck,
            "data kept after the failed stop",
        );
        eddy_ok(&["stop", "--discard", "--state", s(state)]);
        assert!(!eddy_testkit::is_mountpoint(mnt.path()));
        assert!(!cli::eddy(&["status", "--state", s(state)]).status.success());
    }
    assert!(
        !b.join("stuck").exists(),
        "discarded data reached the backend"
    );
}
