//! Full devices and fallocate, against three real daemons: a daemon whose metadata device (a
//! small tmpfs as its root) fills answers ENOSPC, never EIO, and serves again once files are
//! removed, without a restart; fallocate through the library and through a FUSE mount
//! reserves real blocks on the daemons' storage, and modes it cannot honour are EOPNOTSUPP.

use eddy_client::{Client, Creds};
use eddy_testkit::tmpfs::Tmpfs;
use eddy_testkit::{errno, Cluster, Mounted};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const MIB: u64 = 1024 * 1024;

fn daemon_pid(root: &Path) -> i64 {
    let text = std::fs::read_to_string(root.join("eddyd.ready")).expect("ready file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("ready json");
    v["pid"].as_i64().expect("pid")
}

/// Bytes of storage (st_blocks) the chunk files of a daemon hold.
pub(crate) fn chunk_blocks(root: &Path) -> u64 {
    fn walk(p: &Path) -> u64 {
        let Ok(rd) = std::fs::read_dir(p) else {
            return 0;
        };
        rd.filter_map(Result::ok)
            .map(|e| {
                let m = e.metadata().expect("metadata");
                if m.is_dir() {
                    walk(&e.path())
                } else {
                    m.blocks() * 512
                }
            })
            .sum()
    }
    walk(&root.join("chunks"))
}

pub(crate) fn all_chunk_blocks(cl: &Cluster) -> u64 {
    (0..cl.dep.daemons.len())
        .map(|i| chunk_blocks(cl.root_of(i)))
        .sum()
}

/// Writes `len` bytes to a new file; the write's error, if any.
async fn write_file(c: &Client, path: &str, len: usize) -> Result<(), eddy_client::Errno> {
    let f = c.create(path, 0o644, true, Creds::root()).await?;
    c.pwrite(&f, 0, &vec![0x5a; len]).await?;
    c.close(&f).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_metadata_device_gives_enospc_and_recovers_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("d0");
    let _tmpfs = Tmpfs::mount(&small, 24 * MIB);
    let config = eddy_config::Config {
        meta_reserve_bytes: 4 * MIB,
        ..eddy_testkit::test_config()
    };
    let cl = Cluster::start_on(3, config, |i| {
        if i == 0 {
            small.clone()
        } else {
            PathBuf::new()
        }
    });
    let pid = daemon_pid(&small);
    let c = cl.client().await;

    // Data until daemon 0's device is full, in smaller and smaller writes.
    let mut n = 0;
    let mut big = Vec::new();
    for size in [MIB, 64 * 1024, 4096] {
        loop {
            n += 1;
            assert!(n < 2_000, "daemon 0's 24 MiB device never filled");
            let path = format!("/big{n}");
            let r = write_file(&c, &path, size as usize).await;
            big.push(path);
            match r {
                Ok(()) => continue,
                Err(e) => {
                    assert_eq!(e.errno, libc::ENOSPC, "a full device is ENOSPC: {e}");
                    assert!(e.msg.contains("daemon 0"), "{}", e.msg);
                    break;
                }
            }
        }
    }
    // Entries too, once the reserve is reached: those daemon 0 owns fail with ENOSPC, the
    // others succeed; never EIO. A create under a directory lease is deferred: its failure
    // comes at the latest with the file's fsync (decision 0075), and a name refused there is
    // absent.
    let mut refused = 0;
    for i in 0..400 {
        let p = format!("/small{i}");
        let made = match c.create(&p, 0o644, true, Creds::root()).await {
            Ok(f) => {
                let synced = c.fsync(&f).await;
                let closed = c.close(&f).await;
                synced.and(closed)
            }
            Err(e) => Err(e),
        };
        match made {
            Ok(()) => {
                c.stat(&p)
                    .await
                    .unwrap_or_else(|e| panic!("{p} was made but is not there: {e}"));
            }
            Err(e) => {
                assert_eq!(e.errno, libc::ENOSPC, "{p}: {e}");
                refused += 1;
            }
        }
    }
    assert!(refused > 0, "daemon 0 took every entry on a full device");
    // Reads still work on a full device.
    c.stat("/big1").await.expect("stat on a full device");

    // Removing files makes room; the same daemon process serves everything again.
    for p in &big {
        match c.unlink(p, Creds::root()).await {
            Ok(()) => {}
            Err(e) => assert_eq!(e.errno, libc::ENOENT, "unlink {p}: {e}"),
        }
    }
    for i in 0..400 {
        let p = format!("/again{i}");
        c.create(&p, 0o644, true, Creds::root())
            .await
            .unwrap_or_else(|e| panic!("create {p} after removing files: {e}"));
    }
    let data: Vec<u8> = (0..4 * MIB).map(|i| (i % 251) as u8).collect();
    let f = c
        .create("/after", 0o644, true, Creds::root())
        .await
        .unwrap();
    c.pwrite(&f, 0, &data)
        .await
        .expect("write after removing files");
    c.fsync(&f).await.expect("fsync after removing files");
    assert_eq!(c.pread(&f, 0, data.len()).await.unwrap(), data);
    assert_eq!(daemon_pid(&small), pid, "daemon 0 was not restarted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallocate_through_the_library_reserves_real_blocks() {
    let cl = Cluster::start(3);
    let c = cl.client().await;
    let f = c
        .create("/reserved", 0o644, true, Creds::root())
        .await
        .unwrap();
    let before = all_chunk_blocks(&cl);
    c.allocate(&f, 0, 8 * MIB, false).await.expect("fallocate");
    assert_eq!(c.stat("/reserved").await.unwrap().size, 8 * MIB);
    let after = all_chunk_blocks(&cl);
    assert!(
        after >= before + 8 * MIB,
        "8 MiB reserved but the daemons' chunk files grew from {before} to {after} bytes"
    );
    // Every daemon holds its part (the range covers 128 chunks of 64 KiB).
    for i in 0..3 {
        assert!(
            chunk_blocks(cl.root_of(i)) > 0,
            "daemon {i} reserved nothing"
        );
    }
    // KEEP_SIZE: blocks, not size.
    c.allocate(&f, 8 * MIB, 2 * MIB, true)
        .await
        .expect("keep size");
    assert_eq!(c.stat("/reserved").await.unwrap().size, 8 * MIB);
    assert!(all_chunk_blocks(&cl) >= after + 2 * MIB);
    // The range reads as zeros, and writes into it land.
    assert_eq!(c.pread(&f, MIB, 4096).await.unwrap(), vec![0u8; 4096]);
    c.pwrite(&f, MIB, b"inside").await.unwrap();
    assert_eq!(c.pread(&f, MIB, 6).await.unwrap(), b"inside");
    // Bad ranges and read-only handles are refused.
    assert_eq!(errno(c.allocate(&f, 0, 0, false).await), libc::EINVAL);
    let ro = c
        .open("/reserved", libc::O_RDONLY, 0, Creds::root())
        .await
        .unwrap();
    assert_eq!(errno(c.allocate(&ro, 0, 4096, false).await), libc::EBADF);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallocate_through_a_mount_reserves_blocks_and_refuses_holes() {
    let m = Mounted::start(3);
    let before = all_chunk_blocks(&m.cluster);
    m.ok("fallocate -l 8M reserved");

    let st = std::fs::metadata(m.path("reserved")).unwrap();
    assert_eq!(st.len(), 8 * MIB);
    let after = all_chunk_blocks(&m.cluster);
    assert!(
        after >= before + 8 * MIB,
        "8 MiB reserved but the daemons' chunk files grew from {before} to {after} bytes"
    );
    // Punching a hole (or collapsing a range) is not supported: said so, not faked.
    // (util-linux words EOPNOTSUPP of a punch, which implies KEEP_SIZE, as "keep size mode
    // is unsupported".)
    let (ok, _, err) = m.sh("fallocate --punch-hole -o 0 -l 65536 reserved");
    assert!(!ok, "punch-hole succeeded");
    assert!(err.contains("unsupported"), "{err}");
    let (ok, _, err) = m.sh("fallocate --collapse-range -o 0 -l 65536 reserved");
    assert!(!ok, "collapse-range succeeded");
    assert!(err.contains("not supported"), "{err}");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(m.path("reserved"))
        .unwrap();
    for mode in [
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        libc::FALLOC_FL_ZERO_RANGE,
        libc::FALLOC_FL_COLLAPSE_RANGE,
        libc::FALLOC_FL_INSERT_RANGE,
    ] {
        // SAFETY: fallocate(2) on a descriptor this test owns.
        let r = unsafe {
            use std::os::fd::AsRawFd;
            libc::fallocate(file.as_raw_fd(), mode, 0, 65536)
        };
        let e = std::io::Error::last_os_error().raw_os_error();
        assert_eq!((r, e), (-1, Some(libc::EOPNOTSUPP)), "mode {mode:#x}");
    }
    drop(file);
    // The data is unchanged by the refused calls, and the reserved range reads as zeros.
    let data = std::fs::read(m.path("reserved")).unwrap();
    assert_eq!(data.len() as u64, 8 * MIB);
    assert!(data.iter().all(|&b| b == 0));
    // KEEP_SIZE reserves without growing.
    m.ok("fallocate -n -o 8M -l 2M reserved");
    assert_eq!(
        std::fs::metadata(m.path("reserved")).unwrap().len(),
        8 * MIB
    );
    assert!(all_chunk_blocks(&m.cluster) >= after + 2 * MIB);
}
