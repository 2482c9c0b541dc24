//! A daemon's storage is private and a deployment's capacity is enforced (decision 0023),
//! read as an attacker on the node would: real daemons (3 in every test), real FUSE mounts
//! made by root with `allow_other`, another user (uid 65534, and 65533 through setpriv).
//! The storage roots hold nothing group or others may read, write or search; the namespace
//! root is 0700 unless `root_mode` opens it; `capacity_bytes` refuses data past it with
//! ENOSPC (clean cached backend chunks evicted first), and removing files makes room again.

use eddy_client::{Client, Creds};
use eddy_config::{Config, FileMode, Link};
use eddy_testkit::{errno, require, test_config, Cluster, Mounted};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

const CHUNK: u64 = 64 * 1024;
/// Each daemon's capacity in the capacity tests: eight chunks.
const CAPACITY: u64 = 8 * CHUNK;

fn out_text(o: &Output) -> String {
    format!(
        "status {}; stdout: {}; stderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every entry under `dir` (itself included), not following links.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_owned());
    if std::fs::symlink_metadata(dir).unwrap().is_dir() {
        for e in std::fs::read_dir(dir).unwrap() {
            walk(&e.unwrap().path(), out);
        }
    }
}

fn capacity_config() -> Config {
    Config {
        capacity_bytes: CAPACITY,
        ..test_config()
    }
}

// ---------------------------------------------------------------------- private storage

#[test]
fn daemon_roots_hold_nothing_other_users_may_read_write_or_search() {
    require::switch_user();
    let m = Mounted::start(3);
    // Through the mount: a private file, written with the loosest umask.
    m.ok(
        "umask 000; head -c 300000 /dev/urandom > secret; chmod 600 secret; \
         mkdir -p d/e; head -c 70000 /dev/urandom > d/e/f",
    );
    // Through the library.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = m.cluster.client().await;
        let f = c
            .create("/lib.bin", 0o600, false, Creds::root())
            .await
            .unwrap();
        c.pwrite(&f, 0, &vec![7u8; 200_000]).await.unwrap();
        c.fsync(&f).await.unwrap();
        c.close(&f).await.unwrap();
    });
    let mut entries = Vec::new();
    let mut chunk_files = Vec::new();
    for i in 0..3 {
        let root = m.cluster.root_of(i).to_owned();
        let mut mine = Vec::new();
        walk(&root, &mut mine);
        for p in &mine {
            let rel = p.strip_prefix(&root).unwrap();
            let is_data = rel.starts_with("chunks")
                && rel.components().count() == 3
                && !rel.to_string_lossy().ends_with(".sum");
            if is_data {
                chunk_files.push(p.clone());
            }
        }
        entries.extend(mine);
    }
    assert!(
        entries.iter().any(|p| p.ends_with("meta")) && chunk_files.len() >= 3,
        "the walk found the stores: {entries:?}"
    );
    let open: Vec<String> = entries
        .iter()
        .filter_map(|p| {
            let mode = std::fs::symlink_metadata(p).unwrap().mode() & 0o7777;
            (mode & 0o077 != 0).then(|| format!("{} {mode:04o}", p.display()))
        })
        .collect();
    assert!(
        open.is_empty(),
        "entries open to group or others: {open:#?}"
    );
    // Another user cannot read a chunk file, nor list a root.
    let chunk = chunk_files[0].display().to_string();
    let out = eddy_testkit::sh_as_user(65534, &format!("cat '{chunk}' > /dev/null"));
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
        "reading {chunk} as nobody: {}",
        out_text(&out)
    );
    let root = m.cluster.root_of(0).display().to_string();
    let out = eddy_testkit::sh_as_user(65534, &format!("ls '{root}'"));
    assert!(!out.status.success(), "listing {root}: {}", out_text(&out));
}

// ---------------------------------------------------------------------- namespace root

/// A mount by root of a deployment whose namespace belongs to uid 65534.
fn mount_for_nobody(extra: impl FnOnce(&mut Config)) -> Mounted {
    let mut config = Config {
        root_uid: Some(65534),
        root_gid: Some(65534),
        ..test_config()
    };
    extra(&mut config);
    let m = Mounted::start_with(3, config);
    // The mount point's temporary directory is 0700 root's: let users reach the mount.
    std::fs::set_permissions(
        m.mnt.path().parent().unwrap_or(Path::new("/")),
        std::fs::Permissions::from_mode(0o1777),
    )
    .ok();
    m
}

#[test]
fn the_namespace_root_is_closed_to_other_users_unless_root_mode_opens_it() {
    require::switch_user();
    let backend = tempfile::tempdir().unwrap();
    std::fs::write(backend.path().join("in.txt"), b"backend").unwrap();
    let m = mount_for_nobody(|c| {
        c.links = vec![Link {
            prefix: "/a/b/in".into(),
            backend: backend.path().to_owned(),
        }]
    });
    let mnt = m.mnt.path().display().to_string();
    let st = std::fs::metadata(m.mnt.path()).unwrap();
    assert_eq!((st.uid(), st.mode() & 0o7777), (65534, 0o700));
    // The scratch directories above the linked prefix are closed too.
    let a = std::fs::metadata(m.path("a")).unwrap();
    assert_eq!((a.uid(), a.mode() & 0o7777), (65534, 0o700));
    // The owner lists, enters and writes.
    let out = eddy_testkit::sh_as_user(
        65534,
        &format!("ls '{mnt}' && echo hi > '{mnt}/mine' && cat '{mnt}/mine'"),
    );
    assert!(out.status.success(), "the owner: {}", out_text(&out));
    // Another user can neither list nor enter, nor reach a file by its name.
    for script in [
        format!("ls '{mnt}'"),
        format!("cd '{mnt}'"),
        format!("cat '{mnt}/mine'"),
        format!("ls '{mnt}/a/b/in'"),
    ] {
        let out = eddy_testkit::sh_as_user(65533, &script);
        // (dash's `cd` says only "can't cd".)
        let denied = script.starts_with("cd ")
            || String::from_utf8_lossy(&out.stderr).contains("Permission denied");
        assert!(
            !out.status.success() && denied,
            "as 65533 `{script}`: {}",
            out_text(&out)
        );
    }
    drop(m);
    // A job that shares sets root_mode.
    let m = mount_for_nobody(|c| c.root_mode = FileMode(0o755));
    let mnt = m.mnt.path().display().to_string();
    assert_eq!(
        std::fs::metadata(m.mnt.path()).unwrap().mode() & 0o7777,
        0o755
    );
    let out = eddy_testkit::sh_as_user(65533, &format!("ls '{mnt}' && cd '{mnt}'"));
    assert!(out.status.success(), "root_mode 0755: {}", out_text(&out));
}

// ---------------------------------------------------------------------- capacity

async fn write_file(c: &Client, path: &str, data: &[u8]) -> Result<(), eddy_client::Errno> {
    let f = c.create(path, 0o644, false, Creds::root()).await?;
    let r = c.pwrite(&f, 0, data).await.map(|_| ());
    let closed = c.close(&f).await;
    r.and(closed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn library_writes_past_the_capacity_get_enospc_and_removal_makes_room() {
    let cluster = Cluster::start_with(3, capacity_config());
    let c = cluster.client().await;
    // One chunk per file, until a daemon is full.
    let mut written = Vec::new();
    let mut refused = None;
    for i in 0..64u64 {
        let data = eddy_testkit::pattern(i, 0, CHUNK as usize);
        let path = format!("/f{i}");
        match write_file(&c, &path, &data).await {
            Ok(()) => written.push((path, data)),
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
    }
    let (at, e) = refused.expect("ENOSPC before 64 chunks on 3 daemons of 8 chunks each");
    assert_eq!(e.errno, libc::ENOSPC, "{e}");
    assert!(e.msg.contains("capacity_bytes"), "{e}");
    assert!(at >= 8, "refused after only {at} chunks");
    for (path, data) in &written {
        assert!(
            eddy_testkit::read_all(&c, path).await == *data,
            "{path} reads back intact"
        );
    }
    // What each daemon holds stays within its capacity.
    for (i, st) in c.daemon_status().await {
        let st = st.unwrap();
        assert!(st.chunk_bytes <= CAPACITY, "daemon {i}: {st:?}");
    }
    // Removing files makes room: the refused write now fits.
    for (path, _) in &written {
        c.unlink(path, Creds::root()).await.unwrap();
    }
    let data = eddy_testkit::pattern(99, 0, 3 * CHUNK as usize);
    write_file(&c, "/again", &data).await.unwrap();
    assert!(eddy_testkit::read_all(&c, "/again").await == data);
    // A fallocate past the capacity is refused the same way.
    let f = c.create("/big", 0o644, false, Creds::root()).await.unwrap();
    let e = errno(c.allocate(&f, 0, 40 * CHUNK, false).await);
    assert_eq!(e, libc::ENOSPC);
}

#[test]
fn dd_on_a_mount_past_the_capacity_gets_no_space_left_on_device() {
    let m = Mounted::start_with(3, capacity_config());
    m.ok("head -c 200000 /dev/urandom > /tmp/eddy-cap-keep.$$ && cp /tmp/eddy-cap-keep.$$ keep && cmp keep /tmp/eddy-cap-keep.$$ && rm /tmp/eddy-cap-keep.$$");
    let (ok, _, err) = m.sh("dd if=/dev/zero of=big bs=64k count=100 conv=fsync");
    assert!(!ok, "dd of 6.4 MB onto 3 x 512 KiB succeeded");
    assert!(err.contains("No space left on device"), "dd: {err}");
    m.ok("head -c 200000 keep > /dev/null");
    m.ok("rm big");
    m.ok("dd if=/dev/zero of=small bs=64k count=4 conv=fsync 2>/dev/null && test $(stat -c %s small) = 262144");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stage_in_past_the_capacity_evicts_clean_chunks_while_dirty_data_gets_enospc() {
    let backend = tempfile::tempdir().unwrap();
    // Three times what the daemons may hold together, in files of two chunks.
    let mut files = Vec::new();
    for i in 0..36u64 {
        let data = eddy_testkit::pattern(1000 + i, 0, 2 * CHUNK as usize);
        std::fs::write(backend.path().join(format!("f{i}")), &data).unwrap();
        files.push((format!("/in/f{i}"), data));
    }
    let config = Config {
        links: vec![Link {
            prefix: "/in".into(),
            backend: backend.path().to_owned(),
        }],
        ..capacity_config()
    };
    let cluster = Cluster::start_with(3, config);
    let c = cluster.client().await;
    let results = c.stage_in(&["/in".to_string()], false, &|_| {}).await;
    assert_eq!(results.len(), files.len());
    let failed: Vec<_> = results.iter().filter(|r| r.error.is_some()).collect();
    assert!(failed.is_empty(), "stage-in failures: {failed:?}");
    let mut evictions = 0;
    for (i, st) in c.daemon_status().await {
        let st = st.unwrap();
        assert!(st.chunk_bytes <= CAPACITY, "daemon {i}: {st:?}");
        evictions += st.tier.evictions;
    }
    assert!(
        evictions > 0,
        "a stage-in of 3 x the capacity evicted nothing"
    );
    for (path, data) in &files {
        assert!(
            eddy_testkit::read_all(&c, path).await == *data,
            "{path} reads back"
        );
    }
    // Dirty data is not written back to make room: past the capacity it is refused.
    let mut refused = None;
    for i in 0..64u64 {
        let data = eddy_testkit::pattern(5000 + i, 0, CHUNK as usize);
        if let Err(e) = write_file(&c, &format!("/in/new{i}"), &data).await {
            refused = Some(e);
            break;
        }
    }
    let e = refused.expect("dirty writes past 3 x the capacity were all taken");
    assert_eq!(e.errno, libc::ENOSPC, "{e}");
}
