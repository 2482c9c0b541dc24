//! The backend tier with real daemons (3 in every test), real backend directories (a plain
//! directory, a read-only bind mount of one, a GlusterFS volume) and real FUSE mounts: lazy
//! import of large directories, chunk fetches equal to the backend's bytes (one backend read
//! per cold chunk, read-ahead), validation against a changed backend, write-back by
//! stage-out after every namespace operation, durability of dirty data across kill -9,
//! eviction under a small cache, pins, failures of the backend (read-only, hung) and several
//! linked prefixes at once.

use eddy_client::{Advice, Client, Creds, DaemonStatus, FileKind, FileResult, SetAttr};
use eddy_config::{Config, Link};
use eddy_proto::TierStatus;
use eddy_testkit::cli::{self, s};
use eddy_testkit::gluster::GlusterVolume;
use eddy_testkit::tmpfs::Tmpfs;
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
    let f = &f;
    let bound = Duration::from_secs(30);
    eddy_testkit::eventually::poll_async(bound, None, || async move {
        f(total(c, fig).await).then_some(())
    })
    .await
    .is_some()
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

mod backend_moves;
mod backends;
mod cache;
mod command;
mod failures;
mod hidden;
mod links;
mod locality;
mod merging;
mod prealloc;
mod reads;
mod streams;
mod two_writers;
mod writeback;
mod writes;
mod xattrs;
