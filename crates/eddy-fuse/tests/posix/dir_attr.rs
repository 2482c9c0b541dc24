//! The mount answers the kernel's GETATTR of a directory from its client's cache of recent
//! directories (decision 0050): what a create and an unlink cost in daemon requests (counted
//! at the daemons, never timed), and that the attributes it answers with are right at once
//! after this mount's own changes (times, link count, mode) and within the cache's window
//! after another client's.

use eddy_client::{Creds, SetAttr};
use eddy_testkit::served::{diff, served};
use eddy_testkit::{test_config, Mounted};
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The touches between two snapshots: at most one per change.
fn touches(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> u64 {
    let get = |m: &BTreeMap<String, u64>| m.get("touch_dir").copied().unwrap_or(0);
    get(after) - get(before)
}

/// Nanoseconds since the epoch.
fn nanos(t: SystemTime) -> i128 {
    t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i128
}

/// A directory's (mtime, ctime) in nanoseconds, as stat(2) through the mount shows them.
fn times(p: &Path) -> (i128, i128) {
    let m = std::fs::metadata(p).unwrap();
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    (ns(m.mtime(), m.mtime_nsec()), ns(m.ctime(), m.ctime_nsec()))
}

fn nlink(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().nlink()
}

/// Long caches (the kernel's and the client's, ten minutes): whatever this test sees right
/// comes from the invalidations that follow the mount's own changes, not from an expiry, and
/// no request depends on the pace. Without directory leases: the counts are those of
/// requests sent one by one, not batched under a lease (decision 0075).
fn long_caches() -> eddy_config::Config {
    eddy_config::Config {
        dir_cache_ms: 600_000,
        fuse_attr_ttl_ms: 600_000,
        leases: false,
        ..test_config()
    }
}

/// Through the mount, a create in a directory the mount did not make costs its LOOKUP and its
/// CREATE, and an unlink of a name the kernel does not know its LOOKUP and its UNLINK: the
/// GETATTR of the directory the kernel sends after each (it drops the directory's attributes
/// on every change in it) is answered from the cache, where it used to cost a `stat`.
#[test]
fn a_create_or_unlink_through_the_mount_does_not_stat_its_directory() {
    let m = Mounted::start_with(3, long_caches());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(m.cluster.client());
    // Made by another client: the mount knows nothing of its names.
    rt.block_on(c.mkdir("/d", 0o755, Creds::root())).unwrap();
    // The mount looks the directory up and caches it (its first GETATTR after a create).
    std::fs::write(m.path("d/warm"), b"").unwrap();
    std::fs::metadata(m.path("d")).unwrap();

    let n = 20;
    let before = served(&rt, &c);
    for i in 0..n {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(m.path(&format!("d/f{i}")))
            .unwrap();
        drop(f);
    }
    let after = served(&rt, &c);
    assert_eq!(
        diff(&before, &after),
        BTreeMap::from([("create".to_string(), n), ("stat".to_string(), n)]),
        "{n} creates through the mount: one lookup and one create each, no stat of the directory"
    );
    assert!(touches(&before, &after) <= n);

    // Names the kernel has not seen (made by the other client): each unlink looks its name up.
    for i in 0..n {
        let f = rt
            .block_on(c.create(&format!("/d/g{i}"), 0o644, true, Creds::root()))
            .unwrap();
        rt.block_on(c.close(&f)).unwrap();
    }
    std::fs::metadata(m.path("d")).unwrap();
    let before = served(&rt, &c);
    for i in 0..n {
        std::fs::remove_file(m.path(&format!("d/g{i}"))).unwrap();
    }
    let after = served(&rt, &c);
    assert_eq!(
        diff(&before, &after),
        BTreeMap::from([("remove".to_string(), n), ("stat".to_string(), n)]),
        "{n} unlinks through the mount: one lookup and one remove each, no stat of the directory"
    );
    assert!(touches(&before, &after) <= n);
}

/// What the cache answers after this mount's own changes is what the owner has: the times of
/// a create or unlink at once (this client's overlay), the link count after mkdir, rmdir and
/// rename of a subdirectory, the mode after a chmod; with caches long enough that only the
/// invalidations can make it right.
#[test]
fn a_directory_s_attributes_follow_the_mount_s_own_changes_at_once() {
    eddy_testkit::require::program("setfattr", "attr");
    let m = Mounted::start_with(3, long_caches());
    let d = m.path("d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(m.path("d/warm"), b"").unwrap();
    let _ = times(&d);

    // A create, then an unlink, each the first change of a touch interval (5 ms: the touch
    // goes alongside), then one within it (deferred).
    for (i, step) in ["create", "unlink", "create again", "deferred create"]
        .iter()
        .enumerate()
    {
        if i < 3 {
            std::thread::sleep(Duration::from_millis(20));
        }
        let t = nanos(SystemTime::now());
        match i {
            0 | 2 => std::fs::write(m.path("d/x"), b"").unwrap(),
            1 => std::fs::remove_file(m.path("d/x")).unwrap(),
            _ => std::fs::write(m.path("d/y"), b"").unwrap(),
        }
        let (mtime, ctime) = times(&d);
        assert!(
            mtime >= t && ctime >= t,
            "after a {step} in d at {t}: mtime {mtime}, ctime {ctime}"
        );
    }

    assert_eq!(nlink(&d), 2);
    std::fs::create_dir(m.path("d/sub")).unwrap();
    assert_eq!(nlink(&d), 3, "after mkdir d/sub");
    std::fs::create_dir(m.path("d/sub2")).unwrap();
    assert_eq!(nlink(&d), 4, "after mkdir d/sub2");
    std::fs::remove_dir(m.path("d/sub2")).unwrap();
    assert_eq!(nlink(&d), 3, "after rmdir d/sub2");
    std::fs::create_dir(m.path("e")).unwrap();
    let e = m.path("e");
    assert_eq!(nlink(&e), 2);
    std::fs::rename(m.path("d/sub"), m.path("e/sub")).unwrap();
    assert_eq!((nlink(&d), nlink(&e)), (2, 3), "after moving d/sub to e");
    std::fs::remove_dir(m.path("e/sub")).unwrap();
    assert_eq!(nlink(&e), 2, "after rmdir e/sub");

    // A chmod through the mount, then a create in the directory: the GETATTR that follows
    // shows the new mode, not the one cached before.
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::write(m.path("d/z"), b"").unwrap();
    assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o7777, 0o711);

    // An extended attribute set through the mount moves the directory's ctime.
    let t = nanos(SystemTime::now());
    m.ok("setfattr -n user.k -v v d");
    let (_, ctime) = times(&d);
    assert!(ctime >= t, "after setfattr on d at {t}: ctime {ctime}");
}

/// Another client's chmod of a directory the mount has cached shows through the mount once
/// the cache's entry (`dir_cache_ms`) and the kernel's attributes (`fuse_attr_ttl_ms`) have
/// expired: polled with a generous deadline, the window is not timed.
#[test]
fn another_client_s_chmod_of_a_directory_shows_through_the_mount() {
    let m = Mounted::start(3);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(m.cluster.client());
    let d = m.path("d");
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(m.path("d/f"), b"").unwrap();
    assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o7777, 0o755);
    let attr = SetAttr {
        mode: Some(0o700),
        ..SetAttr::default()
    };
    rt.block_on(c.setattr("/d", attr, Creds::root())).unwrap();
    eddy_testkit::eventually::eventually_seen(
        Duration::from_secs(20),
        "the other client's chmod shows through the mount",
        || match std::fs::metadata(&d).unwrap().mode() & 0o7777 {
            0o700 => Ok(()),
            mode => Err(format!("mode {mode:o}")),
        },
    );
}
