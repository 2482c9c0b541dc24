//! What each metadata operation costs in requests, through the library, on three daemons:
//! a create, stat, open, unlink and mkdir in a directory the client knows take one request
//! on their critical path (a directory's time update may go alongside, never before or
//! after). Printed as a table, asserted per operation. Without directory leases, whose
//! batches (decision 0075) would send them later and together.

use eddy_client::{Client, Creds};
use eddy_testkit::Cluster;
use std::collections::BTreeMap;

/// Requests an operation sent, by kind, leaving out directory-time updates (sent alongside
/// the change, or deferred to a timer that may fire at any moment).
async fn cost<T, F: std::future::Future<Output = T>>(
    c: &Client,
    op: F,
) -> (T, BTreeMap<&'static str, u64>) {
    let before = c.rpc_counts();
    let out = op.await;
    let after = c.rpc_counts();
    let diff = after
        .into_iter()
        .filter(|(k, _)| *k != "touch_dir")
        .filter_map(|(k, n)| {
            let d = n - before.get(k).copied().unwrap_or(0);
            (d > 0).then_some((k, d))
        })
        .collect();
    (out, diff)
}

fn no_leases() -> eddy_config::Config {
    eddy_config::Config {
        leases: false,
        ..eddy_testkit::test_config()
    }
}

fn one(kind: &'static str) -> BTreeMap<&'static str, u64> {
    BTreeMap::from([(kind, 1)])
}

#[test]
fn metadata_operations_take_one_request() {
    let cl = Cluster::start_with(3, no_leases());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(cl.client());
    // What each operation costs on its own: leases off (`no_leases`), which answer some
    // operations locally and batch others (their costs: eddy-client's and eddy-preload's
    // `leases` tests).
    let me = Creds::root();
    rt.block_on(async {
        // The first operation in a directory looks it up once.
        let (made, first) = cost(&c, c.mkdir("/d", 0o755, me)).await;
        made.unwrap();
        let mut table = vec![("mkdir /d (root not yet known)", first.clone())];
        assert_eq!(first.get("stat"), Some(&1), "{first:?}");

        let (f, create) = cost(&c, c.create("/d/f", 0o644, true, me)).await;
        let f = f.unwrap();
        c.close(&f).await.unwrap();
        assert_eq!(create, one("create"), "create in a known directory");
        table.push(("create /d/f", create));

        let (st, stat) = cost(&c, c.stat("/d/f")).await;
        st.unwrap();
        assert_eq!(stat, one("stat"));
        table.push(("stat /d/f", stat));

        let (g, open) = cost(&c, c.open("/d/f", libc::O_RDONLY, 0, me)).await;
        c.close(&g.unwrap()).await.unwrap();
        assert_eq!(open, one("stat"), "open of an existing file");
        table.push(("open /d/f", open));

        let (e, mkdir) = cost(&c, c.mkdir("/d/e", 0o755, me)).await;
        e.unwrap();
        assert_eq!(
            mkdir,
            BTreeMap::from([("count_subdirs", 1), ("create", 1)]),
            "mkdir: the entry and its parent's link count, at once"
        );
        table.push(("mkdir /d/e", mkdir));

        let (u, unlink) = cost(&c, c.unlink("/d/f", me)).await;
        u.unwrap();
        assert_eq!(unlink, one("remove"), "unlink of a file with no data");
        table.push(("unlink /d/f", unlink));

        // A directory another client removes is noticed by this one when its entry expires;
        // its own rmdir forgets it at once.
        c.rmdir("/d/e", me).await.unwrap();
        let (again, _) = cost(&c, c.create("/d/e/x", 0o644, true, me)).await;
        assert_eq!(again.err().map(|e| e.errno), Some(libc::ENOENT));

        for (op, counts) in table {
            println!("{op:32} {counts:?}");
        }
    });
}

/// Requests the daemons have served, summed (the status requests of this call included).
fn served(rt: &tokio::runtime::Runtime, c: &Client) -> u64 {
    rt.block_on(c.daemon_status())
        .into_iter()
        .map(|(_, s)| s.unwrap().requests)
        .sum()
}

/// Through the mount, a missing name is asked for once per negative TTL: the kernel keeps
/// the answer. A create through the same mount replaces it at once; a file created through
/// another mount appears when it expires (without leases: `remembers_missing_names`).
#[test]
fn a_mount_remembers_missing_names() {
    remembers_missing_names(false);
}

/// The same in a directory the mount made, so holds the lease on (decisions 0075, 0077): the
/// lease knows the name missing, so the daemons are not asked at all, and a file another
/// mount creates there is seen at once (the recall drops the kernel's negative entry).
#[test]
fn a_mount_with_a_lease_asks_nothing_for_missing_names() {
    remembers_missing_names(true);
}

fn remembers_missing_names(leases: bool) {
    let m = eddy_testkit::Mounted::start_with(
        3,
        eddy_config::Config {
            leases,
            ..eddy_testkit::test_config()
        },
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(m.cluster.client());
    m.ok("mkdir d && ls d");
    let overhead = served(&rt, &c).abs_diff(served(&rt, &c));
    let before = served(&rt, &c);
    for _ in 0..5 {
        assert!(std::fs::metadata(m.path("d/missing")).is_err());
    }
    let asked = served(&rt, &c) - before - overhead;
    assert_eq!(
        asked,
        u64::from(!leases),
        "five stats of a missing name reached the daemons {asked} times"
    );
    // The same mount creates it: seen at once.
    std::fs::write(m.path("d/missing"), b"here").unwrap();
    assert_eq!(std::fs::read(m.path("d/missing")).unwrap(), b"here");
    // Another mount creates a name this one was told is missing: it appears within the
    // negative TTL (1 s by default).
    assert!(std::fs::metadata(m.path("d/later")).is_err());
    let other = m.another_mount();
    std::fs::write(other.path("d/later"), b"x").unwrap();
    if leases {
        assert_eq!(std::fs::read(m.path("d/later")).unwrap(), b"x");
    }
    eddy_testkit::eventually::eventually_within(
        std::time::Duration::from_secs(10),
        "d/later appears through the mount",
        || std::fs::metadata(m.path("d/later")).ok(),
    );
}

/// Through the mount, in a directory the mount made itself (within the negative TTL, here
/// ten minutes), a missing name is known without asking: the lookup the kernel sends before
/// each create costs no request (decision 0044). What another mount made there still counts
/// where the contract says so: an O_EXCL create of it is EEXIST, an O_CREAT open opens it;
/// names this mount made, renamed or saw in a listing are found when the kernel asks again.
#[test]
fn a_mount_knows_the_missing_names_of_a_directory_it_made() {
    let mut config = eddy_testkit::test_config();
    config.fuse_negative_ttl_ms = 600_000;
    config.fuse_fresh_dirs = true;
    let m = eddy_testkit::Mounted::start_with(3, config);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(m.cluster.client());
    let other = m.another_mount();
    m.ok("mkdir fresh");
    std::fs::create_dir(other.path("old")).unwrap();
    std::fs::write(other.path("fresh/theirs"), b"theirs").unwrap();
    std::fs::write(other.path("fresh/kept"), b"kept").unwrap();

    // Five missing names in each directory: asked for in the one another mount made only.
    let overhead = served(&rt, &c).abs_diff(served(&rt, &c));
    let asked = |dir: &str| {
        let before = served(&rt, &c);
        for i in 0..5 {
            assert!(std::fs::metadata(m.path(&format!("{dir}/missing{i}"))).is_err());
        }
        (served(&rt, &c) - before).saturating_sub(overhead)
    };
    let (fresh, old) = (asked("fresh"), asked("old"));
    assert!(old >= 5, "five lookups in old/ asked {old} times");
    // At most a directory-time update of the mkdir lands meanwhile.
    assert!(fresh < 5, "five lookups in fresh/ asked {fresh} times");

    // Another mount's file: an exclusive create fails, a plain O_CREAT open opens it.
    let excl = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(m.path("fresh/theirs"));
    assert_eq!(
        excl.err().and_then(|e| e.raw_os_error()),
        Some(libc::EEXIST)
    );
    drop(
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(m.path("fresh/kept"))
            .unwrap(),
    );
    assert_eq!(std::fs::read(other.path("fresh/kept")).unwrap(), b"kept");

    // This mount's own names, found again once the kernel has forgotten its entries.
    std::fs::write(m.path("fresh/mine"), b"mine").unwrap();
    std::fs::write(m.path("fresh/moving"), b"moving").unwrap();
    std::fs::rename(m.path("fresh/moving"), m.path("fresh/moved")).unwrap();
    std::fs::write("/proc/sys/vm/drop_caches", b"2").unwrap();
    assert_eq!(std::fs::read(m.path("fresh/mine")).unwrap(), b"mine");
    assert_eq!(std::fs::read(m.path("fresh/moved")).unwrap(), b"moving");
    assert!(std::fs::metadata(m.path("fresh/moving")).is_err());

    // A listing shows another mount's names; the kernel may look them up from then on.
    let listed = m.ok("mkdir listed && ls listed");
    assert_eq!(listed, "");
    std::fs::write(other.path("listed/x"), b"x").unwrap();
    let listed = m.ok("ls listed");
    assert_eq!(listed.trim(), "x");
    std::fs::write("/proc/sys/vm/drop_caches", b"2").unwrap();
    assert_eq!(std::fs::read(m.path("listed/x")).unwrap(), b"x");
}

/// By default a directory a mount made is not known whole: a file another mount creates and
/// closes in it opens here at once (close-to-open across nodes; an N-N job's rank 0 reading
/// its peers' files in a directory it made, as `ior -C` does).
#[test]
fn a_file_another_mount_made_in_a_directory_this_one_made_opens_at_once() {
    let m = eddy_testkit::Mounted::start(3);
    let other = m.another_mount();
    m.ok("mkdir work");
    std::fs::write(other.path("work/peer.0"), b"from the other node").unwrap();
    assert_eq!(
        std::fs::read(m.path("work/peer.0")).unwrap(),
        b"from the other node"
    );
}
