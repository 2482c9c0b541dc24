//! Directory leases (decision 0075) against 3 real daemons, through the library: a holder's
//! creates and unlinks go in batches and another client sees them at once (its lookup,
//! listing and create each recall the lease); two clients creating in one directory lose
//! no name and recall far less often than they create (the cool-down); `O_EXCL` races
//! between the holder and another client have exactly one winner per name; a full device
//! reaches the holder as ENOSPC and the directory can be emptied after.

use eddy_client::{Client, Creds};
use eddy_testkit::served::{lease_stats, LeaseStats};
use eddy_testkit::{errno, Cluster};
use std::collections::BTreeSet;

const CREAT: i32 = libc::O_RDWR | libc::O_CREAT;
const EXCL: i32 = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;

/// The names in `dir` as `c` lists them.
async fn names(c: &Client, dir: &str) -> BTreeSet<String> {
    let mut r = c.readdir(dir, None).unwrap();
    let mut out = BTreeSet::new();
    while let Some(page) = r.next_page().await.unwrap() {
        out.extend(page.into_iter().map(|e| e.name));
    }
    out
}

async fn create(c: &Client, p: &str, flags: i32) -> Result<(), eddy_client::Errno> {
    let f = c.open(p, flags, 0o644, Creds::root()).await?;
    c.close(&f).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_holders_batches_are_seen_by_another_client_at_once() {
    let cl = Cluster::start_with(3, eddy_testkit::leased_config());
    let holder = cl.client().await;
    let other = cl.client().await;
    let me = Creds::root();
    assert!(holder.leases_on());
    holder.mkdir("/d", 0o755, me).await.unwrap();
    let before = holder.rpc_counts().get("create").copied().unwrap_or(0);
    for i in 0..200 {
        create(&holder, &format!("/d/f{i}"), EXCL).await.unwrap();
    }
    for i in 0..20 {
        holder.unlink(&format!("/d/f{i}"), me).await.unwrap();
    }
    // Answered here: no create went out on its own, absent names are known absent.
    let after = holder.rpc_counts().get("create").copied().unwrap_or(0);
    assert_eq!(after, before, "creates under the lease went in batches");
    assert!(holder.known_absent("/d/f5"));
    assert!(!holder.known_absent("/d/f50"));
    assert_eq!(errno(holder.stat("/d/f5").await), libc::ENOENT);
    assert_eq!(errno(create(&holder, "/d/f50", EXCL).await), libc::EEXIST);
    // One file still open, its create queued: another client's lookup finds it.
    let open = holder.open("/d/open", EXCL, 0o644, me).await.unwrap();
    assert_eq!(
        other.stat("/d/open").await.unwrap().kind,
        eddy_client::FileKind::File
    );
    assert_eq!(other.stat("/d/f199").await.unwrap().size, 0);
    assert_eq!(errno(other.stat("/d/f3").await), libc::ENOENT);
    let LeaseStats {
        grants,
        recalls,
        batched_ops: batched,
        ..
    } = lease_stats(&other).await;
    assert!(
        grants >= 1 && recalls >= 1,
        "grants {grants} recalls {recalls}"
    );
    assert!(batched >= 220, "batched ops {batched}");
    holder.close(&open).await.unwrap();
    // The holder takes the lease again (after its cool-down) and creates more; another
    // client's listing sees them all.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    for i in 200..300 {
        create(&holder, &format!("/d/f{i}"), EXCL).await.unwrap();
    }
    let listed = names(&other, "/d").await;
    let want: BTreeSet<String> = (20..300)
        .map(|i| format!("f{i}"))
        .chain(["open".to_string()])
        .collect();
    assert_eq!(listed, want);
    // Again, and another client's create of a name the holder made is EEXIST; of a new
    // one succeeds, and the holder then sees it.
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    for i in 300..320 {
        create(&holder, &format!("/d/f{i}"), EXCL).await.unwrap();
    }
    assert_eq!(errno(create(&other, "/d/f310", EXCL).await), libc::EEXIST);
    create(&other, "/d/theirs", EXCL).await.unwrap();
    assert!(holder.stat("/d/theirs").await.is_ok());
    assert_eq!(
        errno(create(&holder, "/d/theirs", EXCL).await),
        libc::EEXIST
    );
    // Everything can be removed, by the other client, and the directory too.
    for n in names(&other, "/d").await {
        other.unlink(&format!("/d/{n}"), me).await.unwrap();
    }
    other.rmdir("/d", me).await.unwrap();
    assert_eq!(errno(holder.stat("/d").await), libc::ENOENT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_clients_in_one_directory_lose_no_name_and_recall_little() {
    let cl = Cluster::start_with(3, eddy_testkit::leased_config());
    let a = cl.client().await;
    let b = cl.client().await;
    let me = Creds::root();
    a.mkdir("/s", 0o755, me).await.unwrap();
    const N: usize = 400;
    let work = |c: Client, tag: &'static str| async move {
        for i in 0..N {
            create(&c, &format!("/s/{tag}{i}"), EXCL).await.unwrap();
            if i % 7 == 0 {
                // A look at the other's names too.
                let _ = c
                    .stat(&format!("/s/{}{i}", if tag == "a" { "b" } else { "a" }))
                    .await;
            }
        }
        for i in (0..N).step_by(2) {
            c.unlink(&format!("/s/{tag}{i}"), me).await.unwrap();
        }
    };
    let (ra, rb) = tokio::join!(
        tokio::spawn(work(a.clone(), "a")),
        tokio::spawn(work(b.clone(), "b"))
    );
    ra.unwrap();
    rb.unwrap();
    let listed = names(&b, "/s").await;
    let want: BTreeSet<String> = (1..N)
        .step_by(2)
        .flat_map(|i| [format!("a{i}"), format!("b{i}")])
        .collect();
    assert_eq!(listed, want);
    assert_eq!(names(&a, "/s").await, want);
    let LeaseStats { recalls, .. } = lease_stats(&a).await;
    // 2 × (400 creates + 200 unlinks + 57 lookups): the cool-down keeps recalls far below.
    assert!(
        recalls < 100,
        "{recalls} recalls for {} operations",
        2 * (N + N / 2 + N / 7)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exclusive_creates_racing_the_holder_have_one_winner_each() {
    let cl = Cluster::start_with(3, eddy_testkit::leased_config());
    let holder = cl.client().await;
    let other = cl.client().await;
    let me = Creds::root();
    for round in 0..3 {
        let dir = format!("/x{round}");
        holder.mkdir(&dir, 0o755, me).await.unwrap();
        const N: usize = 60;
        let race = |c: Client, dir: String| async move {
            let mut won = Vec::new();
            for i in 0..N {
                match create(&c, &format!("{dir}/n{i}"), EXCL).await {
                    Ok(()) => won.push(i),
                    Err(e) if e.errno == libc::EEXIST => {}
                    Err(e) => panic!("{dir}/n{i}: {e}"),
                }
            }
            won
        };
        let (h, o) = tokio::join!(
            tokio::spawn(race(holder.clone(), dir.clone())),
            tokio::spawn(race(other.clone(), dir.clone()))
        );
        let (h, o) = (h.unwrap(), o.unwrap());
        let mut all: Vec<usize> = h.iter().chain(&o).copied().collect();
        all.sort_unstable();
        assert_eq!(
            all,
            (0..N).collect::<Vec<_>>(),
            "holder won {h:?}, other {o:?}"
        );
        assert_eq!(names(&other, &dir).await.len(), N);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leases_off_is_as_before() {
    let cl = Cluster::start_with(3, eddy_testkit::leased_config());
    let c = cl.client().await;
    c.set_leases(false);
    let me = Creds::root();
    c.mkdir("/n", 0o755, me).await.unwrap();
    for i in 0..20 {
        create(&c, &format!("/n/f{i}"), CREAT).await.unwrap();
    }
    assert!(!c.known_absent("/n/zzz"));
    let LeaseStats {
        grants,
        batched_ops: batched,
        ..
    } = lease_stats(&c).await;
    assert_eq!((grants, batched), (0, 0));
}

/// Tests that need root (a tmpfs mounted for a full device): the root lane runs them.
mod needs_root {
    use super::*;

    /// The `i`th name `/full/<prefix>N` whose owner is daemon 0 (the one on the full device).
    fn full_name(c: &Client, prefix: &str, i: usize) -> String {
        (0..)
            .map(|n| format!("/full/{prefix}{n}"))
            .filter(|p| c.rpc().meta_owners(p).first() == Some(&0))
            .nth(i)
            .unwrap_or_default()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_full_device_reaches_the_holder_and_the_directory_empties() {
        let dir = tempfile::tempdir().unwrap();
        let disk = dir.path().join("disk");
        let _tmpfs = eddy_testkit::tmpfs::Tmpfs::mount(&disk, 64 * 1024 * 1024);
        let config = eddy_config::Config {
            meta_reserve_bytes: 4 * 1024 * 1024,
            ..eddy_testkit::leased_config()
        };
        // Daemon 0 on the small device, the others where the cluster is.
        let cl = Cluster::start_on(3, config, |i| match i {
            0 => disk.join("d0"),
            _ => std::path::PathBuf::new(),
        });
        let c = cl.client().await;
        let me = Creds::root();
        c.mkdir("/full", 0o755, me).await.unwrap();
        for i in 0..10 {
            create(&c, &format!("/full/a{i}"), EXCL).await.unwrap();
        }
        assert!(c.known_absent("/full/g0"), "the directory is leased");
        // The device fills up (another user of it); the daemons give their reserve files to
        // their stores (decision 0060), and that fills up too but for 1 MiB, which the stores
        // keep for the removals: under the reserve, entries are refused.
        let fill = |name: &str, blocks: Option<u64>| {
            let mut dd = std::process::Command::new("dd");
            dd.args(["if=/dev/zero", "bs=64k"])
                .arg(format!("of={}", disk.join(name).display()));
            if let Some(n) = blocks {
                dd.arg(format!("count={n}"));
            }
            let _ = dd.stderr(std::process::Stdio::null()).status().unwrap();
        };
        // Daemon 0 gives its reserve up at its first request on a device that has run out.
        fill("filler0", None);
        for i in 0..40 {
            let _ = create(&c, &format!("/z{i}"), EXCL).await;
        }
        let df = std::process::Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(&disk)
            .output()
            .unwrap();
        let avail: u64 = String::from_utf8_lossy(&df.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap();
        fill("filler1", Some(avail.saturating_sub(1 << 20) / (64 << 10)));
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(60), async {
            let mut files = Vec::new();
            for i in 0..10 {
                // Answered under the lease: the create is queued (for daemon 0).
                let f = c.open(&full_name(&c, "g", i), EXCL, 0o644, me).await;
                files.push(f.expect("an exclusive create of a known-absent name"));
            }
            let mut first = None;
            for f in &files {
                if let Err(e) = c.fsync(f).await {
                    first.get_or_insert(e);
                }
            }
            for f in &files {
                let _ = c.close(f).await;
            }
            first.map_or(Ok(()), Err)
        })
        .await
        .expect("creates on a full device did not finish within 60 s");
        assert_eq!(errno(outcome), libc::ENOSPC);
        assert_eq!(
            errno(create(&c, &full_name(&c, "h", 0), EXCL).await),
            libc::ENOSPC
        );
        // The directory lists and empties on the full device.
        tokio::time::timeout(std::time::Duration::from_secs(60), async {
            for n in names(&c, "/full").await {
                c.unlink(&format!("/full/{n}"), me).await.unwrap();
            }
            c.rmdir("/full", me).await.unwrap();
        })
        .await
        .expect("emptying the directory did not finish within 60 s");
        for n in 0..2 {
            std::fs::remove_file(disk.join(format!("filler{n}"))).unwrap();
        }
        c.mkdir("/again", 0o755, me).await.unwrap();
        create(&c, "/again/x", EXCL).await.unwrap();
        drop(cl);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_holds_a_bounded_number_of_leases_giving_back_the_oldest() {
    let cl = Cluster::start_with(3, eddy_testkit::leased_config());
    let c = cl.client().await;
    let me = Creds::root();
    // One lease per directory made here (an archive unpacked): past the cap, the oldest
    // goes back before another is taken.
    let dirs = 300;
    for i in 0..dirs {
        c.mkdir(&format!("/t{i}"), 0o755, me).await.unwrap();
    }
    assert!(
        c.known_absent(&format!("/t{}/x", dirs - 1)),
        "the newest is held"
    );
    eddy_testkit::eventually::eventually_async(
        std::time::Duration::from_secs(30),
        "the oldest leases were never given back",
        || async { (!c.known_absent("/t0/x") && !c.known_absent("/t40/x")).then_some(()) },
    )
    .await;
    let held = (0..dirs)
        .filter(|i| c.known_absent(&format!("/t{i}/x")))
        .count();
    assert!(held <= 256, "{held} leases held");
    // What was given back stays correct: another client creates in the oldest directory
    // and the first one sees it.
    let other = cl.client().await;
    create(&other, "/t0/y", EXCL).await.unwrap();
    assert_eq!(c.stat("/t0/y").await.unwrap().size, 0);
    assert_eq!(errno(create(&c, "/t0/y", EXCL).await), libc::EEXIST);
}
