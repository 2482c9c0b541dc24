//! The write workload of the replication and repair tests: writers in their own
//! directories that create, write, stat, list and unlink files, and the check that what
//! they left reads back.

use super::pattern;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Files each writer writes.
pub const FILES: usize = 24;

/// Bytes of file `i` of writer `w`: crosses chunk boundaries (64 KiB chunks).
pub fn file_len(w: usize, i: usize) -> usize {
    100_000 + (w * 7919 + i * 104_729) % 150_000
}

pub fn seed(w: usize, i: usize) -> u64 {
    (w * 1000 + i) as u64
}

/// One writer through the mount: creates, writes, stats, lists and unlinks files in its
/// own directory; every operation must succeed. Returns the files it left.
pub fn mount_writer(root: PathBuf, w: usize, done: Arc<AtomicUsize>) -> BTreeSet<usize> {
    let dir = root.join(format!("m{w}"));
    std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {dir:?}: {e}"));
    let mut kept = BTreeSet::new();
    for i in 0..FILES {
        let p = dir.join(format!("f{i}"));
        let data = pattern(seed(w, i), 0, file_len(w, i));
        std::fs::write(&p, &data).unwrap_or_else(|e| panic!("write {p:?}: {e}"));
        let len = std::fs::metadata(&p)
            .unwrap_or_else(|e| panic!("stat {p:?}: {e}"))
            .len();
        assert_eq!(len, data.len() as u64, "{p:?}");
        kept.insert(i);
        if i % 4 == 3 {
            let gone = dir.join(format!("f{}", i - 1));
            std::fs::remove_file(&gone).unwrap_or_else(|e| panic!("unlink {gone:?}: {e}"));
            kept.remove(&(i - 1));
        }
        if i % 5 == 0 {
            let names: BTreeSet<usize> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("list {dir:?}: {e}"))
                .map(|e| {
                    let e = e.unwrap_or_else(|e| panic!("list {dir:?}: {e}"));
                    e.file_name().to_string_lossy()[1..].parse().unwrap()
                })
                .collect();
            assert_eq!(names, kept, "listing of {dir:?}");
        }
        done.fetch_add(1, Ordering::SeqCst);
    }
    kept
}

/// Every file the writers left reads back whole through the mount at `root`.
pub fn verify_mount(root: &Path, kept: &[BTreeSet<usize>]) {
    for (w, k) in kept.iter().enumerate() {
        let dir = root.join(format!("m{w}"));
        let names: BTreeSet<usize> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("list {dir:?}: {e}"))
            .map(|e| {
                e.unwrap().file_name().to_string_lossy()[1..]
                    .parse()
                    .unwrap()
            })
            .collect();
        assert_eq!(&names, k, "listing of {dir:?}");
        for &i in k {
            let p = dir.join(format!("f{i}"));
            let data = pattern(seed(w, i), 0, file_len(w, i));
            let got = std::fs::read(&p).unwrap_or_else(|e| panic!("read {p:?}: {e}"));
            assert!(got == data, "{p:?} differs");
        }
    }
}

/// `writers` mount writers at `root`; once a third of their work is done, `kill` runs
/// (a daemon dies under them). Returns what each writer left, once all are done.
pub fn write_through_a_kill(
    root: &Path,
    writers: usize,
    kill: impl FnOnce(),
) -> Vec<BTreeSet<usize>> {
    let done = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..writers)
        .map(|w| {
            let (root, done) = (root.to_path_buf(), done.clone());
            std::thread::spawn(move || mount_writer(root, w, done))
        })
        .collect();
    crate::eventually::eventually("a third of the writers' files written", || {
        (done.load(Ordering::SeqCst) >= writers * FILES / 3).then_some(())
    });
    kill();
    workers
        .into_iter()
        .map(|t| t.join().expect("a writer failed"))
        .collect()
}
