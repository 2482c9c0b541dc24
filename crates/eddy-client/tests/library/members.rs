//! A client following the deployment's membership epochs (decision 0081), against 3 real
//! daemons: every daemon adopts a newer epoch (`Membership`, as `eddy grow` would send it)
//! and the hosts file is written at it; a client made from the hosts file is refused once,
//! reads the file again (waiting for it while it is not newer yet), tells its connections the
//! new epoch and goes on; new connections say it first. A client whose file stays behind
//! fails with EIO naming the epochs; one made without a file cannot follow at all. A
//! membership that places items on other daemons is followed too: the owners are computed
//! again and the request sent to them. A daemon that left and was stopped sends its clients
//! to the file too: one it cannot reach while the file is newer is a membership moved on.

use eddy_client::{Client, Creds};
use eddy_config::Deployment;
use eddy_proto::req;
use eddy_testkit::{errno, read_all, Cluster};

/// The membership of `dep` at `epoch`, draining `draining`, as a coordinating command sends
/// it to every daemon.
fn membership(dep: &Deployment, epoch: u64, draining: Vec<u32>) -> req::Membership {
    let mut at = dep.clone();
    (at.epoch, at.moving_from, at.draining) = (epoch, None, draining);
    eddy_rpc::membership_of(&at, false)
}

/// Every daemon adopts `m` (sent by `tool`, a client of its own: `Membership` is never
/// refused for an epoch).
async fn adopt(tool: &Client, dep: &Deployment, m: &req::Membership) {
    for d in &dep.daemons {
        let state = tool.call_daemon(d.id, m.clone()).await.unwrap();
        assert_eq!(state.epoch, m.epoch, "daemon {} adopted it", d.id);
    }
}

/// A client made from the cluster's hosts file, which it reads again when the membership
/// moves on.
async fn following(cl: &Cluster) -> Client {
    Client::connect_following(cl.dep.clone(), cl.deployment_file.clone())
        .await
        .unwrap()
}

async fn names(c: &Client, dir: &str) -> Vec<String> {
    let mut r = c.readdir(dir, None).unwrap();
    let mut out = Vec::new();
    while let Some(page) = r.next_page().await.unwrap() {
        out.extend(page.into_iter().map(|e| e.name));
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_from_the_hosts_file_follows_a_newer_epoch() {
    let cl = Cluster::start(3);
    let me = Creds::root();
    let c = following(&cl).await;
    assert_eq!(c.rpc().epoch(), 0);
    c.mkdir("/d", 0o755, me).await.unwrap();
    let f = c
        .open("/d/f", libc::O_RDWR | libc::O_CREAT, 0o644, me)
        .await
        .unwrap();
    let chunk = c.config().chunk_size as usize;
    let data = eddy_testkit::pattern(1, 0, 3 * chunk + 17);
    c.pwrite(&f, 0, &data).await.unwrap();

    // Another client whose first call after the change is a fan-out (a listing).
    let lister = following(&cl).await;
    assert_eq!(names(&lister, "/d").await, ["f"]);
    let tool = cl.client().await;
    let m = membership(&cl.dep, 1, vec![]);
    adopt(&tool, &cl.dep, &m).await;
    // The daemons refuse the client now; it waits for the file, written a little later (as
    // the coordinator writes it after every daemon adopted).
    let stat = tokio::spawn({
        let c = c.clone();
        async move { c.stat("/d/f").await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let mut next = cl.dep.clone();
    next.epoch = 1;
    next.save(&cl.deployment_file).unwrap();
    assert_eq!(stat.await.unwrap().unwrap().size, data.len() as u64);
    assert_eq!(c.rpc().epoch(), 1, "the client places by epoch 1 now");
    assert_eq!(names(&lister, "/d").await, ["f"]);
    assert_eq!(lister.rpc().epoch(), 1);

    // Every kind of call goes on: reads, writes (one request per chunk), listings (a
    // fan-out), creates.
    assert_eq!(c.pread(&f, 0, data.len()).await.unwrap(), data);
    let more = eddy_testkit::pattern(2, 0, 2 * chunk);
    c.pwrite(&f, chunk as u64, &more).await.unwrap();
    c.fsync(&f).await.unwrap();
    c.close(&f).await.unwrap();
    let mut want = data.clone();
    want[chunk..3 * chunk].copy_from_slice(&more);
    assert_eq!(read_all(&c, "/d/f").await, want);
    let g = c
        .open("/d/g", libc::O_RDWR | libc::O_CREAT, 0o644, me)
        .await
        .unwrap();
    c.close(&g).await.unwrap();
    assert_eq!(names(&c, "/d").await, ["f", "g"]);
    assert!(c.statfs().await.is_ok());

    // New connections say epoch 1 before anything else: the daemons serve them.
    for d in &cl.dep.daemons {
        c.rpc().drop_connection(d.id).await;
    }
    assert_eq!(c.stat("/d/g").await.unwrap().size, 0);
    assert_eq!(names(&c, "/d").await, ["f", "g"]);
    // And so does a client made from the file as it is now.
    let fresh = Client::connect_following(next, cl.deployment_file.clone())
        .await
        .unwrap();
    assert_eq!(fresh.rpc().epoch(), 1);
    assert_eq!(read_all(&fresh, "/d/f").await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_whose_hosts_file_stays_behind_fails_with_eio_naming_the_epochs() {
    let cl = Cluster::start(3);
    let me = Creds::root();
    let c = following(&cl).await;
    let without_file = cl.client().await;
    c.mkdir("/d", 0o755, me).await.unwrap();
    let m = membership(&cl.dep, 1, vec![]);
    adopt(&without_file, &cl.dep, &m).await;

    // The file stays at epoch 0: after the RPC deadline, EIO (not a hang) naming both.
    let e = c.stat("/d").await.expect_err("the file never moves on");
    assert_eq!(e.errno, libc::EIO, "{e}");
    assert!(
        e.msg.contains("at membership epoch 1") && e.msg.contains("still at epoch 0"),
        "{e}"
    );
    assert_eq!(c.rpc().epoch(), 0);
    // A client made without the file cannot follow at all.
    let e = without_file
        .stat("/d")
        .await
        .expect_err("nothing to follow");
    assert_eq!(e.errno, libc::EIO, "{e}");
    assert!(e.msg.contains("cannot follow the membership"), "{e}");
    assert_eq!(errno(without_file.mkdir("/e", 0o755, me).await), libc::EIO);

    // Once the file is written, the same client goes on.
    let mut next = cl.dep.clone();
    next.epoch = 1;
    next.save(&cl.deployment_file).unwrap();
    assert!(c.stat("/d").await.is_ok());
    assert_eq!(c.rpc().epoch(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_places_by_the_new_members_after_a_cut_over() {
    let cl = Cluster::start(3);
    let me = Creds::root();
    let c = following(&cl).await;
    let tool = cl.client().await;
    // Drain a daemon that does not own the root's metadata, so that "/" keeps its owner
    // (rendezvous hashing moves only what the drained daemon owned); nothing moves between
    // daemons here, so only names made after the change are looked at.
    let root_owner = c.rpc().meta_owners("/")[0];
    let drained = cl
        .dep
        .daemons
        .iter()
        .map(|d| d.id)
        .find(|&id| id != root_owner)
        .unwrap();
    adopt(&tool, &cl.dep, &membership(&cl.dep, 1, vec![drained])).await;
    let mut next = cl.dep.clone();
    next.epoch = 1;
    next.draining = vec![drained];
    next.save(&cl.deployment_file).unwrap();

    // Concurrent calls refused together follow the file once between them.
    let made = futures::future::join_all((0..8).map(|i| {
        let c = c.clone();
        async move { c.mkdir(&format!("/n{i}"), 0o755, me).await }
    }))
    .await;
    assert!(made.iter().all(Result::is_ok), "{made:?}");
    assert_eq!(c.rpc().epoch(), 1);
    assert!(!c.rpc().ids().contains(&drained));
    // Each name went to its owner among the members, where another client of epoch 1 finds it.
    let fresh = Client::connect_following(next, cl.deployment_file.clone())
        .await
        .unwrap();
    for i in 0..8 {
        let path = format!("/n{i}");
        assert_ne!(fresh.rpc().meta_owners(&path)[0], drained);
        assert!(fresh.stat(&path).await.is_ok(), "{path}");
    }
    let f = c
        .open("/n0/f", libc::O_RDWR | libc::O_CREAT, 0o644, me)
        .await
        .unwrap();
    let data = eddy_testkit::pattern(3, 0, 3 * c.config().chunk_size as usize);
    c.pwrite(&f, 0, &data).await.unwrap();
    c.close(&f).await.unwrap();
    assert_eq!(read_all(&fresh, "/n0/f").await, data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_daemon_stopped_after_it_left_sends_its_clients_to_the_hosts_file() {
    let mut cl = Cluster::start(3);
    let me = Creds::root();
    let c = following(&cl).await;
    let root_owner = c.rpc().meta_owners("/")[0];
    let f = c
        .open("/f", libc::O_RDWR | libc::O_CREAT, 0o644, me)
        .await
        .unwrap();
    // Enough chunks that every daemon took a write of this handle, unsynced.
    let chunk = c.config().chunk_size as usize;
    c.pwrite(&f, 0, &eddy_testkit::pattern(4, 0, 32 * chunk))
        .await
        .unwrap();
    let meta_owner = c.rpc().meta_owners("/f")[0];
    let (gone, idx) = cl
        .dep
        .daemons
        .iter()
        .enumerate()
        .map(|(i, d)| (d.id, i))
        .find(|&(id, _)| id != root_owner && id != meta_owner)
        .expect("a daemon owning neither name");
    // The daemon is drained (the file says so at epoch 1) and stopped before this client
    // called it again: it cannot refuse anything, it is not there.
    assert!(
        (0..32).any(|k| c.rpc().chunk_owners(f.file_id(), k).contains(&gone)),
        "daemon {gone} took a write of the handle"
    );
    let tool = cl.client().await;
    adopt(&tool, &cl.dep, &membership(&cl.dep, 1, vec![gone])).await;
    let mut next = cl.dep.clone();
    next.epoch = 1;
    next.draining = vec![gone];
    next.save(&cl.deployment_file).unwrap();
    cl.kill(idx);

    // A write to a chunk it owned finds the file newer, follows it and goes to the chunk's
    // owner among the members; the fsync that covers a write it took syncs the members
    // instead: no EIO.
    let k = (0..32)
        .find(|&k| c.rpc().chunk_owners(f.file_id(), k).contains(&gone))
        .unwrap();
    let again = eddy_testkit::pattern(5, 0, chunk);
    c.pwrite(&f, k * chunk as u64, &again).await.unwrap();
    assert_eq!(c.rpc().epoch(), 1);
    assert_eq!(c.pread(&f, k * chunk as u64, chunk).await.unwrap(), again);
    c.fsync(&f).await.unwrap();
    assert_eq!(c.rpc().epoch(), 1);
    assert!(!c.rpc().ids().contains(&gone));
    c.close(&f).await.unwrap();
    assert_eq!(c.stat("/f").await.unwrap().size, 32 * chunk as u64);
}
