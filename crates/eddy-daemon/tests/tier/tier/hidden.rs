//! Eddy's own names never reach the backend: a file unlinked through the mount while open
//! lives on under a hidden name (`.eddy-unlinked-…`) in Eddy only, with all its bytes, and
//! neither a stage-out nor a mount killed while it is open leaves that name in the backend.

use super::*;
use std::io::{Seek, SeekFrom, Write};

/// The backend's names (relative paths) that are Eddy's hidden names.
fn hidden_in(backend: &Path) -> Vec<String> {
    walk(backend)
        .into_keys()
        .filter(|p| p.split('/').any(eddy_config::is_hidden_orphan))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_unlinked_while_open_never_reach_the_backend() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    std::fs::create_dir_all(b.join("old")).unwrap();
    // Clean and never read before the unlink: five chunks of 64 KiB, only the first fetched.
    let big = random_bytes(5 * 64 * KIB + 123);
    std::fs::write(b.join("old/big.bin"), &big).unwrap();
    let m = Mounted::start_with(3, linked(&[("/", b)]));
    let c = m.cluster.client().await;

    // A clean backend file, open, read in part, unlinked.
    let mut clean = std::fs::File::open(m.path("old/big.bin")).unwrap();
    let mut head = [0u8; 10];
    clean.read_exact(&mut head).unwrap();
    assert_eq!(head, big[..10]);
    std::fs::remove_file(m.path("old/big.bin")).unwrap();
    // A file written here (dirty, never written back), open, unlinked, written on.
    let mut dirty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(m.path("new.bin"))
        .unwrap();
    let first = random_bytes(200 * KIB);
    dirty.write_all(&first).unwrap();
    std::fs::remove_file(m.path("new.bin")).unwrap();
    dirty.write_all(b"after the unlink").unwrap();
    dirty.sync_all().unwrap();

    // The unlink reached the backend; the hidden names did not.
    assert!(
        !b.join("old/big.bin").exists(),
        "the unlink of old/big.bin reached the backend"
    );
    assert_eq!(
        hidden_in(b),
        Vec::<String>::new(),
        "hidden names in the backend"
    );
    assert_eq!(
        std::fs::read_dir(m.path("old")).unwrap().count(),
        0,
        "the mount lists the unlinked files"
    );

    // The open handles read every byte: the clean file's were fetched before its backend
    // copy went.
    let mut rest = Vec::new();
    clean.read_to_end(&mut rest).unwrap();
    same(&rest, &big[10..], "the rest of the unlinked clean file");
    let mut back = Vec::new();
    dirty.seek(SeekFrom::Start(0)).unwrap();
    dirty.read_to_end(&mut back).unwrap();
    let mut want = first.clone();
    want.extend_from_slice(b"after the unlink");
    same(&back, &want, "the unlinked dirty file");

    // A stage-out while they are open, and another after their last close, write nothing
    // of them.
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    assert_eq!(
        hidden_in(b),
        Vec::<String>::new(),
        "hidden names after a stage-out"
    );
    assert!(
        !b.join("new.bin").exists(),
        "the unlinked new.bin was written back"
    );
    assert!(!b.join("old/big.bin").exists(), "old/big.bin came back");
    drop((clean, dirty));
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    assert_eq!(
        walk(b).into_keys().collect::<Vec<_>>(),
        vec!["old".to_string()]
    );
}

/// A mount killed while a file it unlinked is still open leaves the hidden name in Eddy (no
/// one is left to remove it), never in the backend, through any later stage-out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_mount_leaves_no_hidden_name_in_the_backend() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    std::fs::write(b.join("kept.bin"), random_bytes(70 * KIB)).unwrap();
    std::fs::write(b.join("doomed.bin"), random_bytes(130 * KIB)).unwrap();
    let cluster = Cluster::start_with(3, linked(&[("/", b)]));
    let mut mount = cluster.mount();
    let mut open = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(mount.path("doomed.bin"))
        .unwrap();
    open.write_all(b"dirty now").unwrap();
    std::fs::remove_file(mount.path("doomed.bin")).unwrap();
    mount.kill_process();
    drop(open);

    let c = cluster.client().await;
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    assert_eq!(
        hidden_in(b),
        Vec::<String>::new(),
        "hidden names in the backend"
    );
    assert!(
        !b.join("doomed.bin").exists(),
        "doomed.bin is back in the backend"
    );
    assert!(
        b.join("kept.bin").exists(),
        "kept.bin is gone from the backend"
    );
    // The hidden file is still in Eddy, with the bytes written before the unlink.
    let hidden: Vec<String> = names(&c, "/")
        .await
        .into_iter()
        .filter(|n| eddy_config::is_hidden_orphan(n))
        .collect();
    assert_eq!(hidden.len(), 1, "the hidden entry in Eddy: {hidden:?}");
}
