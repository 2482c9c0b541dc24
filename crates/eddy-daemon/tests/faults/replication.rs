//! Replication (decision 0020): with `replicas = 2` and three real daemons, a daemon killed
//! with SIGKILL in the middle of a write-heavy workload costs no operation, through the
//! client library and through a FUSE mount, and every byte reads back afterwards; with one
//! copy the same kill still gives EIO.

use eddy_client::{Client, Creds, Errno, Failure};
use eddy_config::Config;
use eddy_proto::req;
use eddy_proto::{KeyState, RemoveKind, Reply, Request};
use eddy_testkit::workload::{file_len, seed, verify_mount, write_through_a_kill, FILES};
use eddy_testkit::{pattern, Cluster, Mounted};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn config(replicas: usize) -> Config {
    Config {
        replicas,
        rpc_timeout_ms: 3_000,
        connect_timeout_ms: 1_000,
        ..eddy_testkit::test_config()
    }
}

/// Every name in a directory, each once (a name listed twice is an error here).
async fn listed(c: &Client, dir: &str) -> Result<Vec<String>, Errno> {
    let mut r = c.readdir(dir, None)?;
    let mut out = Vec::new();
    while let Some(page) = r.next_page().await? {
        out.extend(page.into_iter().map(|e| e.name));
    }
    Ok(out)
}

/// One writer: creates, writes, stats, lists and unlinks files in its own directory; every
/// operation must succeed. Returns the files it left (index) .
async fn writer(c: Client, w: usize, files: usize, done: Arc<AtomicUsize>) -> BTreeSet<usize> {
    let me = Creds::root();
    let dir = format!("/w{w}");
    let mut kept = BTreeSet::new();
    for i in 0..files {
        let path = format!("{dir}/f{i}");
        let f = c
            .create(&path, 0o644, true, me)
            .await
            .unwrap_or_else(|e| panic!("create {path}: {e}"));
        let data = pattern(seed(w, i), 0, file_len(w, i));
        // In two writes, the second at an offset.
        let half = data.len() / 2;
        c.pwrite(&f, 0, &data[..half])
            .await
            .unwrap_or_else(|e| panic!("write {path}: {e}"));
        c.pwrite(&f, half as u64, &data[half..])
            .await
            .unwrap_or_else(|e| panic!("write {path}: {e}"));
        c.close(&f)
            .await
            .unwrap_or_else(|e| panic!("close {path}: {e}"));
        let st = c
            .stat(&path)
            .await
            .unwrap_or_else(|e| panic!("stat {path}: {e}"));
        assert_eq!(st.size, data.len() as u64, "{path}");
        kept.insert(i);
        if i % 4 == 3 {
            let gone = format!("{dir}/f{}", i - 1);
            c.unlink(&gone, me)
                .await
                .unwrap_or_else(|e| panic!("unlink {gone}: {e}"));
            kept.remove(&(i - 1));
        }
        if i % 5 == 0 {
            let names = listed(&c, &dir)
                .await
                .unwrap_or_else(|e| panic!("list {dir}: {e}"));
            let want: Vec<String> = kept.iter().map(|k| format!("f{k}")).collect();
            let mut got = names.clone();
            got.sort_by_key(|n| n[1..].parse::<usize>().unwrap_or(usize::MAX));
            assert_eq!(got, want, "listing of {dir}");
        }
        done.fetch_add(1, Ordering::SeqCst);
    }
    kept
}

async fn verify(c: &Client, w: usize, kept: &BTreeSet<usize>) {
    let me = Creds::root();
    let dir = format!("/w{w}");
    let names: BTreeSet<String> = listed(c, &dir).await.unwrap().into_iter().collect();
    let want: BTreeSet<String> = kept.iter().map(|k| format!("f{k}")).collect();
    assert_eq!(names, want, "listing of {dir}");
    for &i in kept {
        let path = format!("{dir}/f{i}");
        let f = c.open(&path, libc::O_RDONLY, 0, me).await.unwrap();
        let data = pattern(seed(w, i), 0, file_len(w, i));
        let got = c.pread(&f, 0, data.len() + 10).await.unwrap();
        assert!(got == data, "{path}: content differs after the kill");
        c.close(&f).await.unwrap();
    }
}

const WRITERS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_copies_survive_kill_9_in_a_write_workload() {
    let mut cl = Cluster::start_with(3, config(2));
    let c = cl.client().await;
    for w in 0..WRITERS {
        c.mkdir(&format!("/w{w}"), 0o755, Creds::root())
            .await
            .unwrap();
    }
    let done = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(writer(c.clone(), w, FILES, done.clone())))
        .collect();
    // Kill daemon 1 once about a third of the work is done: operations are in flight.
    let third = || async { (done.load(Ordering::SeqCst) >= WRITERS * FILES / 3).then_some(()) };
    eddy_testkit::eventually::eventually_async(
        eddy_testkit::eventually::GUARD,
        "a third of the writes are done",
        third,
    )
    .await;
    cl.kill(1);
    let mut kept = Vec::new();
    for t in tasks {
        kept.push(t.await.expect("a writer failed"));
    }
    // Everything reads back, through this client and through a new one.
    for (w, k) in kept.iter().enumerate() {
        verify(&c, w, k).await;
    }
    let fresh = cl.client().await;
    for (w, k) in kept.iter().enumerate() {
        verify(&fresh, w, k).await;
    }
    let root: BTreeSet<String> = listed(&fresh, "/").await.unwrap().into_iter().collect();
    let want: BTreeSet<String> = (0..WRITERS).map(|w| format!("w{w}")).collect();
    assert_eq!(root, want);
    fresh.statfs().await.unwrap();
}

/// An unlink whose first owner applied it, copied the removal to the second owner and died
/// before replying is retried on the second owner: that answer is the removed record (the
/// client needs it to drop the file's data), once; a second unlink is ENOENT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlink_retried_on_the_copy_after_the_first_owner_died_succeeds() {
    let cl = Cluster::start_with(3, config(2));
    let c = cl.client().await;
    let path = "/retried";
    let made = c.create(path, 0o644, true, Creds::root()).await.unwrap();
    c.pwrite(&made, 0, b"data").await.unwrap();
    let created = c.stat(path).await.unwrap();
    let owners = eddy_placement::Placement::new(vec![0, 1, 2])
        .unwrap()
        .owners(eddy_placement::path_hash(path), 2);
    let second = owners[1];
    // What the first owner sends the second when it applies the unlink.
    let copied = Request::Replicate(req::Replicate {
        changes: vec![KeyState {
            key: eddy_proto::path::meta_key(path),
            value: None,
        }],
    });
    c.call_daemon_raw(second, &copied)
        .await
        .unwrap_or_else(|e| panic!("the copy refused the change: {}", e.errno()));
    let remove = Request::Remove(req::Remove {
        path: path.into(),
        kind: RemoveKind::NotDir,
    });
    match c.call_daemon_raw(second, &remove).await {
        Ok(Reply::Inode(i)) => assert_eq!(i.file_id, created.file_id),
        other => panic!("the retried unlink got {other:?}"),
    }
    match c.call_daemon_raw(second, &remove).await {
        Err(Failure::Daemon(e)) => assert_eq!(e.errno, libc::ENOENT, "{e}"),
        other => panic!("a second unlink got {other:?}"),
    }
    // An rmdir retried the same way does not remove a file.
    let file = "/still-a-file";
    c.create(file, 0o644, true, Creds::root()).await.unwrap();
    let second = eddy_placement::Placement::new(vec![0, 1, 2])
        .unwrap()
        .owners(eddy_placement::path_hash(file), 2)[1];
    let copied = Request::Replicate(req::Replicate {
        changes: vec![KeyState {
            key: eddy_proto::path::meta_key(file),
            value: None,
        }],
    });
    c.call_daemon_raw(second, &copied)
        .await
        .unwrap_or_else(|e| panic!("the copy refused the change: {}", e.errno()));
    let rmdir = Request::Remove(req::Remove {
        path: file.into(),
        kind: RemoveKind::Dir,
    });
    match c.call_daemon_raw(second, &rmdir).await {
        Err(Failure::Daemon(e)) => assert_eq!(e.errno, libc::ENOTDIR, "{e}"),
        other => panic!("rmdir of a file got {other:?}"),
    }
}

/// A daemon killed after it applied a create and before its copy had it (the copy stopped:
/// it takes the change and answers nothing) leaves the change marked pending; after the
/// whole deployment restarts and `eddy repair` returns, both copies agree (decision 0080).
/// Before, the copies disagreed for good: a name listed by one and absent on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_applied_by_a_daemon_killed_before_its_copy_had_it_reaches_the_copy() {
    let mut cl = Cluster::start_with(
        3,
        Config {
            leases: false,
            ..config(2)
        },
    );
    let c = cl.client().await;
    let me = Creds::root();
    c.mkdir("/d", 0o755, me).await.unwrap();
    c.sync_all().await.unwrap();
    let path = "/d/made";
    let owners = eddy_placement::Placement::new(vec![0, 1, 2])
        .unwrap()
        .owners(eddy_placement::path_hash(path), 2);
    let (first, second) = (owners[0], owners[1]);
    cl.signal(second as usize, libc::SIGSTOP);
    let creator = {
        let c = c.clone();
        tokio::spawn(async move { c.create(path, 0o644, true, Creds::root()).await })
    };
    // The first owner applied the create and waits for its copy's answer.
    let stat = Request::Stat(req::Stat { path: path.into() });
    let applied = std::time::Instant::now();
    while c.call_daemon_raw(first, &stat).await.is_err() {
        assert!(
            applied.elapsed() < std::time::Duration::from_secs(30),
            "the first owner never applied the create"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    cl.kill(first as usize);
    cl.kill(second as usize);
    creator.abort();
    for i in 0..3 {
        cl.kill(i);
    }
    for i in 0..3 {
        cl.restart(i);
    }
    let state = cl.dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        eddy_testkit::cli::eddy(&["repair", "--state", eddy_testkit::cli::s(&state)])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", eddy_testkit::cli::text(&out));
    let c = cl.client().await;
    let held = |d: u32| {
        let c = c.clone();
        let stat = stat.clone();
        async move {
            match c.call_daemon_raw(d, &stat).await {
                Ok(Reply::Inode(_)) => true,
                Err(Failure::Daemon(e)) if e.errno == libc::ENOENT => false,
                other => panic!("stat on daemon {d}: {other:?}"),
            }
        }
    };
    assert!(
        held(first).await,
        "the first owner lost a create it applied"
    );
    assert!(
        held(second).await,
        "the copy never got the create its first owner applied before it was killed"
    );
    // And the directory empties.
    c.unlink(path, me).await.unwrap();
    c.rmdir("/d", me).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_copy_still_gives_eio_when_a_daemon_dies() {
    let mut cl = Cluster::start_with(3, config(1));
    let c = cl.client().await;
    let me = Creds::root();
    let cs = c.config().chunk_size as usize;
    let f = c.create("/big", 0o644, true, me).await.unwrap();
    let data = pattern(3, 0, cs * 12);
    c.pwrite(&f, 0, &data).await.unwrap();
    for i in 0..12 {
        c.mkdir(&format!("/d{i}"), 0o755, me).await.unwrap();
    }
    cl.kill(1);
    assert_eq!(
        c.pread(&f, 0, data.len()).await.unwrap_err().errno,
        libc::EIO
    );
    assert_eq!(listed(&c, "/").await.unwrap_err().errno, libc::EIO);
}

#[test]
fn replicas_beyond_the_daemons_are_refused() {
    let dep = eddy_config::Deployment {
        name: "t".into(),
        job: Default::default(),
        epoch: 0,
        moving_from: None,
        draining: Vec::new(),
        secret: eddy_config::Deployment::new_secret(),
        config: config(3),
        daemons: vec![eddy_config::DaemonEntry {
            id: 0,
            host: "localhost".into(),
            addr: "127.0.0.1:1".into(),
            socket: None,
            root: "/nonexistent".into(),
            metrics: None,
        }],
    };
    let e = dep.validate().unwrap_err().to_string();
    assert!(e.contains("replicas 3"), "{e}");
}

/// The same through a FUSE mount: files written, stat'ed, listed, created and unlinked
/// with `std::fs` while a daemon is killed.
#[test]
fn two_copies_survive_kill_9_through_a_mount() {
    let mut m = Mounted::start_with(3, config(2));
    let root = m.path("");
    let kept = write_through_a_kill(&root, WRITERS, || m.cluster.kill(2));
    verify_mount(&root, &kept);
    // A second mount (a fresh client) sees the same.
    let other = m.another_mount();
    verify_mount(&other.path(""), &kept);
}

/// Directory leases with two copies (decision 0075): only the first owner of a directory's
/// record grants a lease on it. A client that believed the first owner down asked the copy,
/// which granted a second lease beside the first owner's: noted at every daemon, it replaced
/// the holder's registrations without a recall, and both clients answered from their leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_first_owner_of_a_directory_grants_a_lease_on_it() {
    let cl = Cluster::start_with(
        3,
        Config {
            leases: true,
            ..config(2)
        },
    );
    let a = cl.client().await;
    a.mkdir("/d", 0o755, Creds::root()).await.unwrap();
    assert!(a.known_absent("/d/x"), "a lease on /d after its mkdir");
    let owners = eddy_placement::Placement::new(vec![0, 1, 2])
        .unwrap()
        .owners(eddy_placement::path_hash("/d"), 2);
    let b = cl.client().await;
    let ask = |d: u32| {
        let b = &b;
        async move {
            b.call_daemon(d, req::Lease { dir: "/d".into() })
                .await
                .unwrap_or_else(|e| panic!("a lease asked of daemon {d}: {}", e.errno()))
        }
    };
    // Held by `a`: its granter refuses it for a while.
    assert!(
        matches!(ask(owners[0]).await, eddy_proto::LeaseGrant::Refused { .. }),
        "the first owner granted a lease another client holds"
    );
    // Neither the copy nor the third daemon grants one.
    for d in [0, 1, 2].into_iter().filter(|&d| d != owners[0]) {
        match ask(d).await {
            eddy_proto::LeaseGrant::Refused { .. } => {}
            other => panic!("daemon {d}, not the first owner of /d, answered {other:?}"),
        }
    }
    assert!(a.known_absent("/d/x"), "a still holds its lease");
}

/// A holder that does not give its lease back is revoked when its granter stops waiting
/// (`lease_recall_timeout_ms`, at most half the RPC deadline). The daemon that asked for the
/// recall must not take the granter for unreachable when the answer comes then: a recall sent
/// with a copy's deadline (half the RPC deadline) gave up at that moment, marked the granter
/// down, and the create it came before skipped its copy to the granter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recall_answered_by_a_revocation_leaves_the_granter_its_copies() {
    let cl = Cluster::start_with(
        3,
        Config {
            leases: true,
            ..config(2)
        },
    );
    let dep = cl.dep.clone();
    // The holder, on a runtime driven only by its own calls: it answers no recall.
    let holder = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let a = rt.block_on(async {
            let a = Client::connect(dep).await.expect("connect");
            a.mkdir("/d", 0o755, Creds::root()).await.unwrap();
            a
        });
        assert!(a.known_absent("/d/x"), "a lease on /d after its mkdir");
        (rt, a)
    })
    .join()
    .unwrap();
    let placement = eddy_placement::Placement::new(vec![0, 1, 2]).unwrap();
    let granter = placement.meta_owner("/d");
    // A name whose first owner is another daemon and whose copy is the granter's.
    let name = (0..)
        .map(|i| format!("/d/x{i}"))
        .find(|p| placement.owners(eddy_placement::path_hash(p), 2)[1] == granter)
        .unwrap();
    let b = cl.client().await;
    let f = b.create(&name, 0o644, true, Creds::root()).await.unwrap();
    b.close(&f).await.unwrap();
    let made = b.stat(&name).await.unwrap();
    let copy = b
        .call_daemon(granter, req::Stat { path: name.clone() })
        .await
        .unwrap_or_else(|e| panic!("{name} at daemon {granter}, its copy: {}", e.errno()));
    assert_eq!(copy.file_id, made.file_id, "{name} at its copy");
    // A runtime is not dropped from within another.
    std::thread::spawn(move || drop(holder)).join().unwrap();
}
