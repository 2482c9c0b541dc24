//! Moves of items between owners (decision 0081) with real daemons: a deployment of three
//! grows to six and one of six shrinks to four, with one copy and with two. Each test writes
//! files through a client, makes every daemon adopt the copy epoch (`moving_from`), waits
//! until none holds anything left to copy, adopts the cut-over, waits again, writes the hosts
//! file of the new epoch, collects, and reads every file back through a new client made from
//! that file. The bytes the move added on the members are compared with the bytes whose owner
//! set changed, computed from placement; the daemons that lost items hold fewer chunks after
//! the collect, and a drained daemon holds nothing. A quarter of the files have a second
//! name (a hard link): their identity records move with the rest (decision 0083), and every
//! name of a file shows one file, with as many links as it has names, before and after.

use eddy_client::{Client, Creds};
use eddy_config::{Config, Deployment};
use eddy_placement::Placement;
use eddy_proto::{req, DaemonStatus, FileId, MembershipState};
use eddy_rpc::{Daemons, Failure};
use eddy_testkit::{pattern, read_all, Cluster};
use std::collections::BTreeMap;
use std::time::Duration;

fn config(replicas: usize) -> Config {
    Config {
        replicas,
        rpc_timeout_ms: 5_000,
        connect_timeout_ms: 2_000,
        repair_interval_ms: 100,
        ..eddy_testkit::test_config()
    }
}

/// The files a test writes: path → bytes (sizes from empty to a few chunks). A name ending
/// in `.l` is a hard link to the name without it (made by `write_files`).
fn files() -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for i in 0..36u64 {
        let dir = ["a", "b", "c/d"][(i % 3) as usize];
        let len = ((i * 37_001) % 300_000) as usize;
        let path = format!("/{dir}/f{i}");
        if i % 4 == 1 {
            files.insert(format!("{path}.l"), pattern(i + 1, 0, len));
        }
        files.insert(path, pattern(i + 1, 0, len));
    }
    files
}

/// Writes `files` through `c`; a name ending in `.l` is linked to the name without it.
async fn write_files(c: &Client, files: &BTreeMap<String, Vec<u8>>) {
    let root = Creds::root();
    for dir in ["/a", "/b", "/c", "/c/d"] {
        c.mkdir(dir, 0o755, root).await.unwrap();
    }
    for (path, data) in files {
        if let Some(old) = path.strip_suffix(".l") {
            c.link(old, path, root).await.unwrap();
            continue;
        }
        let f = c.create(path, 0o644, true, root).await.unwrap();
        if !data.is_empty() {
            c.pwrite(&f, 0, data).await.unwrap();
        }
        c.close(&f).await.unwrap();
    }
}

/// Each file's id and size (once per file, whatever its names), as `c` finds them; each
/// name is checked against `files`, and shows as many links as the file has names there.
async fn file_ids(c: &Client, files: &BTreeMap<String, Vec<u8>>) -> Vec<(FileId, u64)> {
    /// A file's size, and each of its names with the links it showed.
    type Names<'a> = (u64, Vec<(&'a str, u32)>);
    let mut ids: BTreeMap<FileId, Names> = BTreeMap::new();
    for (path, data) in files {
        let st = c.stat(path).await.unwrap();
        assert_eq!(st.size, data.len() as u64, "{path}");
        let file = ids.entry(st.file_id).or_insert((st.size, Vec::new()));
        file.1.push((path, st.nlink));
    }
    for (size, names) in ids.values() {
        for (path, nlink) in names {
            assert_eq!(
                *nlink as usize,
                names.len(),
                "{path}: names {names:?}, {size} bytes"
            );
        }
    }
    ids.into_iter().map(|(id, (size, _))| (id, size)).collect()
}

/// The file `change_files` removes.
const REMOVED: &str = "/c/d/f14";

/// Changes made while items move, through a client of the copy epoch (which places by the
/// daemons items move from): part of a file overwritten, one cut, one removed, one made.
async fn change_files(c: &Client, files: &mut BTreeMap<String, Vec<u8>>) {
    let root = Creds::root();
    let (big, cut) = ("/a/f6", "/b/f22");
    let f = c.open(big, libc::O_RDWR, 0, root).await.unwrap();
    let patch = pattern(999, 0, 100_000);
    c.pwrite(&f, 70_000, &patch).await.unwrap();
    c.close(&f).await.unwrap();
    let data = files.get_mut(big).unwrap();
    data[70_000..170_000].copy_from_slice(&patch);

    c.truncate(cut, 10_000, root).await.unwrap();
    files.get_mut(cut).unwrap().truncate(10_000);

    c.unlink(REMOVED, root).await.unwrap();
    assert!(files.remove(REMOVED).is_some_and(|d| !d.is_empty()));

    let made = pattern(1000, 0, 250_000);
    let f = c.create("/b/made", 0o644, true, root).await.unwrap();
    c.pwrite(&f, 0, &made).await.unwrap();
    c.close(&f).await.unwrap();
    files.insert("/b/made".into(), made.clone());

    // Hard links: one made (its identity record is made while items move), one file losing
    // both its names (its identity record removed), one its first name.
    c.link("/b/made", "/b/made.l", root).await.unwrap();
    files.insert("/b/made.l".into(), made);
    for gone in ["/c/d/f5", "/c/d/f5.l", "/a/f9"] {
        c.unlink(gone, root).await.unwrap();
        assert!(files.remove(gone).is_some(), "{gone}");
    }
}

/// After a move: a file with two names (`/a/f21` and `/a/f21.l`) written through one reads
/// through the other, loses one name (the other shows one link), then the other (gone).
async fn use_links(c: &Client) {
    let root = Creds::root();
    let patch = pattern(4242, 0, 5_000);
    let f = c.open("/a/f21", libc::O_RDWR, 0, root).await.unwrap();
    c.pwrite(&f, 100, &patch).await.unwrap();
    c.close(&f).await.unwrap();
    let through = read_all(c, "/a/f21.l").await;
    assert_eq!(
        &through[100..5_100],
        &patch[..],
        "written through the other name"
    );
    c.unlink("/a/f21", root).await.unwrap();
    assert_eq!(c.stat("/a/f21.l").await.unwrap().nlink, 1);
    c.unlink("/a/f21.l", root).await.unwrap();
    let e = c.stat("/a/f21.l").await.expect_err("both names removed");
    assert_eq!(e.errno, libc::ENOENT, "{e}");
}

/// Bytes that must be copied when chunks move from placement `from` to `to`: each chunk's
/// length once per owner under `to` that is not an owner under `from`.
fn bytes_to_move(files: &[(FileId, u64)], cs: u64, r: usize, from: &[u32], to: &[u32]) -> u64 {
    let (from, to) = (
        Placement::new(from.to_vec()).unwrap(),
        Placement::new(to.to_vec()).unwrap(),
    );
    let mut n = 0;
    for &(id, size) in files {
        for k in 0..size.div_ceil(cs) {
            let len = cs.min(size - k * cs);
            let before = from.chunk_owners(id, k, r);
            let new = to
                .chunk_owners(id, k, r)
                .into_iter()
                .filter(|d| !before.contains(d))
                .count();
            n += len * new as u64;
        }
    }
    n
}

/// The connections a coordinating tool uses: every daemon listed in `dep`.
fn tool(dep: &Deployment) -> Daemons {
    Daemons::new(dep).unwrap()
}

fn membership(
    dep: &Deployment,
    epoch: u64,
    moving_from: Option<Vec<u32>>,
    draining: Vec<u32>,
    collect: bool,
) -> req::Membership {
    let mut at = dep.clone();
    (at.epoch, at.moving_from, at.draining) = (epoch, moving_from, draining);
    eddy_rpc::membership_of(&at, collect)
}

/// Sends `m` to every daemon of `ids` until each answers with nothing left to copy (at most
/// a minute of rounds); returns their answers.
async fn until_nothing_left(t: &Daemons, ids: &[u32], m: &req::Membership) -> Vec<MembershipState> {
    let mut last = Vec::new();
    for _ in 0..600 {
        last.clear();
        for &id in ids {
            last.push(t.try_call(id, m.clone()).await);
        }
        if last.iter().all(|r| r.as_ref().is_ok_and(|s| s.left == 0)) {
            return last.into_iter().map(Result::unwrap).collect();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("items still left to copy after a minute: {last:?}");
}

async fn status(t: &Daemons, id: u32) -> DaemonStatus {
    t.try_call(id, req::Status).await.unwrap()
}

/// A client of the hosts file at its epoch, told that epoch on every connection.
async fn client_at(dep: &Deployment) -> Client {
    let c = Client::new(dep.clone()).unwrap();
    for d in &dep.daemons {
        c.call_daemon(d.id, req::Epoch { epoch: dep.epoch })
            .await
            .unwrap();
    }
    c
}

/// What a move did, as the test measured it.
struct Moved {
    /// Bytes of chunks the move added (on the daemons that joined, else on every member),
    /// and the least it had to.
    added: u64,
    least: u64,
    /// Chunks and keys per daemon, before the move and after the collect.
    before: BTreeMap<u32, (u64, u64)>,
    after: BTreeMap<u32, (u64, u64)>,
    /// Every file's id and size once the changes were made.
    ids: Vec<(FileId, u64)>,
}

/// Runs a whole move on `cluster`, from the daemons `from` to the members `to` (the
/// daemons listed but not in `to` drained), with `change_files` during the copy when
/// `change`, and checks every file reads back after it (the removed one is gone), every name
/// of a file shows one file with as many links as names, and a linked file can be written,
/// read and removed through its names (`use_links`).
fn run_move(
    cluster: &mut Cluster,
    rt: &tokio::runtime::Runtime,
    files: &mut BTreeMap<String, Vec<u8>>,
    from: &[u32],
    to: &[u32],
    change: bool,
) -> Moved {
    let (cs, r) = (cluster.dep.config.chunk_size, cluster.dep.config.replicas);
    let listed: Vec<u32> = cluster.dep.daemons.iter().map(|d| d.id).collect();
    let draining: Vec<u32> = listed.iter().copied().filter(|d| !to.contains(d)).collect();
    let t = tool(&cluster.dep);
    let counts = |t: &Daemons| {
        rt.block_on(async {
            let mut out = BTreeMap::new();
            for &id in &listed {
                let s = status(t, id).await;
                out.insert(id, (s.chunks, s.entries));
            }
            out
        })
    };
    // The bytes the move added are counted on the daemons that join (only the move writes
    // there), else on every member (nothing else changes meanwhile then).
    let joining: Vec<u32> = to.iter().copied().filter(|d| !from.contains(d)).collect();
    let counted = if joining.is_empty() {
        to.to_vec()
    } else {
        joining
    };
    let bytes = |t: &Daemons| -> BTreeMap<u32, u64> {
        rt.block_on(async {
            let mut out = BTreeMap::new();
            for &id in &counted {
                out.insert(id, status(t, id).await.chunk_bytes);
            }
            out
        })
    };
    let before = counts(&t);
    let held_before = bytes(&t);

    // Copy: every daemon adopts epoch 1, moving from `from`.
    let copy = membership(
        &cluster.dep,
        1,
        Some(from.to_vec()),
        draining.clone(),
        false,
    );
    rt.block_on(async {
        for &id in &listed {
            let s = t.try_call(id, copy.clone()).await.unwrap();
            assert!(s.epoch == 1 && s.moving, "daemon {id}: {s:?}");
        }
    });
    // A client of epoch 1 places by `from`.
    let mut placed = cluster.dep.clone();
    placed.daemons.retain(|d| from.contains(&d.id));
    (placed.epoch, placed.moving_from, placed.draining) = (1, None, Vec::new());
    let ids = rt.block_on(async {
        let c = client_at(&placed).await;
        if change {
            change_files(&c, files).await;
        }
        file_ids(&c, files).await
    });
    let states = rt.block_on(until_nothing_left(&t, &listed, &copy));
    assert!(
        states.iter().all(|s| s.epoch == 1 && s.moving),
        "{states:?}"
    );
    let held_after = bytes(&t);
    let added: u64 = counted
        .iter()
        .map(|id| held_after[id].saturating_sub(held_before[id]))
        .sum();

    // Cut-over: epoch 2 without moving_from; then nothing left anywhere.
    let cut = membership(&cluster.dep, 2, None, draining.clone(), false);
    let states = rt.block_on(until_nothing_left(&t, &listed, &cut));
    assert!(
        states.iter().all(|s| s.epoch == 2 && !s.moving),
        "{states:?}"
    );

    // The hosts file at epoch 2 (drained daemons still listed until they are empty).
    cluster.dep.epoch = 2;
    cluster.dep.moving_from = None;
    cluster.dep.draining = draining.clone();
    cluster.dep.save(&cluster.deployment_file).unwrap();

    let collect = membership(&cluster.dep, 2, None, draining.clone(), true);
    rt.block_on(async {
        for &id in &listed {
            let s = t.try_call(id, collect.clone()).await.unwrap();
            assert!(s.collected && s.left == 0, "daemon {id}: {s:?}");
            // Idempotent.
            let again = t.try_call(id, collect.clone()).await.unwrap();
            assert!(again.collected, "daemon {id}: {again:?}");
        }
    });

    // The drained daemons leave the hosts file; a new client reads everything back.
    let mut settled = cluster.dep.clone();
    settled.daemons.retain(|d| to.contains(&d.id));
    settled.draining.clear();
    rt.block_on(async {
        let c = client_at(&settled).await;
        for (path, data) in files.iter() {
            let got = read_all(&c, path).await;
            assert!(
                got == *data,
                "{path}: {} bytes read, {} written",
                got.len(),
                data.len()
            );
        }
        if change {
            let e = c
                .stat(REMOVED)
                .await
                .expect_err("a file removed while moving");
            assert_eq!(e.errno, libc::ENOENT, "{e}");
        }
        file_ids(&c, files).await;
    });
    let after = counts(&t);
    rt.block_on(async {
        let c = client_at(&settled).await;
        use_links(&c).await;
        for gone in ["/a/f21", "/a/f21.l"] {
            assert!(files.remove(gone).is_some(), "{gone}");
        }
    });
    Moved {
        added,
        least: bytes_to_move(&ids, cs, r, from, to),
        before,
        after,
        ids,
    }
}

fn check_bytes(m: &Moved) {
    eprintln!(
        "move: {} bytes added, {} bytes had to move ({:.3}x)",
        m.added,
        m.least,
        m.added as f64 / m.least.max(1) as f64
    );
    assert!(m.least > 0, "the test's files must have chunks that move");
    assert!(
        m.added >= m.least,
        "{} added < {} to move",
        m.added,
        m.least
    );
    assert!(
        m.added * 10 <= m.least * 12,
        "{} bytes added for {} that had to move: more than 1.2x",
        m.added,
        m.least
    );
}

fn grow(replicas: usize) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut cluster = Cluster::start_with(3, config(replicas));
    let cs = cluster.dep.config.chunk_size;
    let mut files = files();
    rt.block_on(async {
        let c = cluster.client().await;
        write_files(&c, &files).await
    });
    let new = cluster.add_daemons(3, Some(vec![0, 1, 2]));
    assert_eq!(new, vec![3, 4, 5]);
    let m = run_move(
        &mut cluster,
        &rt,
        &mut files,
        &[0, 1, 2],
        &[0, 1, 2, 3, 4, 5],
        true,
    );
    check_bytes(&m);
    for old in 0..3 {
        assert!(
            m.after[&old].0 < m.before[&old].0,
            "daemon {old} kept every chunk: {:?} → {:?}",
            m.before[&old],
            m.after[&old]
        );
    }
    for new in 3..6 {
        assert!(m.after[&new].0 > 0, "daemon {new} took no chunk");
    }
    let total = |s: &BTreeMap<u32, (u64, u64)>| s.values().map(|c| c.0).sum::<u64>();
    let chunks = m
        .ids
        .iter()
        .map(|&(_, size)| size.div_ceil(cs))
        .sum::<u64>();
    assert_eq!(
        total(&m.after),
        chunks * replicas as u64,
        "every chunk is held {replicas} times after the move: {:?} → {:?}",
        m.before,
        m.after
    );
}

#[test]
fn a_deployment_of_three_grows_to_six_with_one_copy_and_every_file_reads_back() {
    grow(1);
}

#[test]
fn a_deployment_of_three_grows_to_six_with_two_copies_and_keeps_both() {
    grow(2);
}

#[test]
fn a_deployment_of_six_shrinks_to_four_and_the_drained_daemons_end_empty() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut cluster = Cluster::start_with(6, config(1));
    let mut files = files();
    // Some file linked here has its identity record on a daemon that is drained: the daemon
    // that held its first name (decision 0009).
    let six = Placement::new((0..6).collect()).unwrap();
    assert!(
        files
            .keys()
            .filter_map(|p| p.strip_suffix(".l"))
            .any(|old| six.meta_owner(old) >= 4),
        "no identity record would move"
    );
    rt.block_on(async {
        let c = cluster.client().await;
        write_files(&c, &files).await
    });
    let m = run_move(
        &mut cluster,
        &rt,
        &mut files,
        &[0, 1, 2, 3, 4, 5],
        &[0, 1, 2, 3],
        false,
    );
    check_bytes(&m);
    for drained in [4, 5] {
        assert!(m.before[&drained].0 > 0, "daemon {drained} held no chunk");
        assert_eq!(
            m.after[&drained],
            (0, 0),
            "daemon {drained}: chunks and keys left after the collect"
        );
    }
}

#[test]
fn a_collect_while_items_move_is_refused() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut cluster = Cluster::start_with(3, config(1));
    rt.block_on(async {
        let c = cluster.client().await;
        let f = c.create("/x", 0o644, true, Creds::root()).await.unwrap();
        c.close(&f).await.unwrap();
    });
    cluster.add_daemons(1, Some(vec![0, 1, 2]));
    let t = tool(&cluster.dep);
    let m = membership(&cluster.dep, 1, Some(vec![0, 1, 2]), Vec::new(), false);
    rt.block_on(async {
        for id in 0..4 {
            let s = t.try_call(id, m.clone()).await.unwrap();
            assert!(s.moving, "daemon {id} answered {s:?}");
            // Not at a settled epoch: refused.
            let mut c = m.clone();
            c.collect = true;
            match t.try_call(id, c).await {
                Err(Failure::Daemon(e)) => assert_eq!(e.errno, libc::EINVAL, "{e}"),
                other => panic!("daemon {id}: a collect while moving answered {other:?}"),
            }
        }
    });
}

#[test]
fn a_collect_waits_until_every_copy_reached_its_new_owner() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut cluster = Cluster::start_with(3, config(1));
    let files = files();
    rt.block_on(async {
        let c = cluster.client().await;
        write_files(&c, &files).await
    });
    cluster.add_daemons(1, Some(vec![0, 1, 2]));
    // The new daemon is down: what moves to it stays hinted on the others.
    cluster.kill(3);
    let t = tool(&cluster.dep);
    let copy = membership(&cluster.dep, 1, Some(vec![0, 1, 2]), Vec::new(), false);
    let cut = membership(&cluster.dep, 2, None, Vec::new(), false);
    let mut collect = cut.clone();
    collect.collect = true;
    rt.block_on(async {
        let mut left = 0;
        for id in 0..3 {
            left += t.try_call(id, copy.clone()).await.unwrap().left;
        }
        assert!(left > 0, "items move to daemon 3");
        let mut refused = 0;
        for id in 0..3 {
            t.try_call(id, cut.clone()).await.unwrap();
            let s = t.try_call(id, cut.clone()).await.unwrap();
            if s.left == 0 {
                continue;
            }
            match t.try_call(id, collect.clone()).await {
                Err(Failure::Daemon(e)) => {
                    assert_eq!(e.errno, libc::EAGAIN, "daemon {id}: {e}");
                    refused += 1;
                }
                other => panic!("daemon {id} holds {} hints; collect: {other:?}", s.left),
            }
            let s = t.try_call(id, cut.clone()).await.unwrap();
            assert!(!s.collected, "daemon {id}: {s:?}");
        }
        assert!(
            refused > 0,
            "some daemon still holds what moves to daemon 3"
        );
    });
}

/// A deployment of 3 daemons holding `files()`, grown by `add` daemons that every daemon
/// knows at the copy epoch (adopted by all of them): the cluster, the files, the copy.
fn grown_at_the_copy(
    rt: &tokio::runtime::Runtime,
    add: usize,
) -> (Cluster, BTreeMap<String, Vec<u8>>, req::Membership) {
    let mut cluster = Cluster::start_with(3, config(1));
    let files = files();
    rt.block_on(async {
        let c = cluster.client().await;
        write_files(&c, &files).await
    });
    cluster.add_daemons(add, Some(vec![0, 1, 2]));
    let t = tool(&cluster.dep);
    let copy = membership(&cluster.dep, 1, Some(vec![0, 1, 2]), Vec::new(), false);
    let all: Vec<u32> = cluster.dep.daemons.iter().map(|d| d.id).collect();
    rt.block_on(async {
        for &id in &all {
            t.try_call(id, copy.clone()).await.unwrap();
        }
    });
    (cluster, files, copy)
}

/// Finishes a grow whatever step each daemon reached (the copy, then the cut-over at epoch
/// 2, then the collect, each sent again to all as a coordinator resuming would), and checks
/// that every file reads back and every chunk is held once, some by the daemons that joined.
fn finish_grow(
    cluster: &Cluster,
    rt: &tokio::runtime::Runtime,
    files: &BTreeMap<String, Vec<u8>>,
    copy: &req::Membership,
) {
    let all: Vec<u32> = cluster.dep.daemons.iter().map(|d| d.id).collect();
    let t = tool(&cluster.dep);
    rt.block_on(until_nothing_left(&t, &all, copy));
    let cut = membership(&cluster.dep, 2, None, Vec::new(), false);
    rt.block_on(until_nothing_left(&t, &all, &cut));
    let mut collect = cut.clone();
    collect.collect = true;
    rt.block_on(async {
        for &id in &all {
            assert!(t.try_call(id, collect.clone()).await.unwrap().collected);
        }
    });
    let mut settled = cluster.dep.clone();
    (settled.epoch, settled.moving_from) = (2, None);
    rt.block_on(async {
        let c = client_at(&settled).await;
        for (path, data) in files {
            assert!(read_all(&c, path).await == *data, "{path}");
        }
        let ids = file_ids(&c, files).await;
        let cs = settled.config.chunk_size;
        let chunks: u64 = ids.iter().map(|&(_, size)| size.div_ceil(cs)).sum();
        let mut held = 0;
        let mut joined = 0;
        for &id in &all {
            let n = status(&t, id).await.chunks;
            held += n;
            if id >= 3 {
                joined += n;
            }
        }
        assert_eq!(held, chunks, "every chunk held once after the collect");
        assert!(joined > 0, "the daemons that joined hold what they own");
    });
}

#[test]
fn a_daemon_restarted_during_a_move_keeps_its_membership_and_does_not_rejoin() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (mut cluster, files, copy) = grown_at_the_copy(&rt, 1);
    assert!(cluster.terminate(0), "daemon 0 did not stop cleanly");
    cluster.restart(0);
    let t = tool(&cluster.dep);
    rt.block_on(async {
        let s = status(&t, 0).await;
        assert!(!s.rejoining, "a daemon with one copy never rejoins: {s:?}");
        // The membership kept in its root: a question at epoch 1 finds it moving at 1.
        let m = t.try_call(0, copy.clone()).await.unwrap();
        assert!(m.epoch == 1 && m.moving, "{m:?}");
    });
    finish_grow(&cluster, &rt, &files, &copy);
}

#[test]
fn a_source_and_a_target_killed_during_the_copy_finish_the_move_after_their_restart() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (mut cluster, files, copy) = grown_at_the_copy(&rt, 3);
    // kill -9 of a daemon items move from and of one they move to, in the middle of the copy.
    cluster.kill(1);
    cluster.kill(4);
    cluster.restart(1);
    cluster.restart(4);
    finish_grow(&cluster, &rt, &files, &copy);
}

#[test]
fn daemons_killed_in_the_middle_of_the_cut_over_finish_it_after_their_restart() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (mut cluster, mut files, copy) = grown_at_the_copy(&rt, 3);
    let t = tool(&cluster.dep);
    rt.block_on(until_nothing_left(&t, &[0, 1, 2, 3, 4, 5], &copy));
    // Files change after the copy caught up: what is left to push is in the sources' hints.
    let mut placed = cluster.dep.clone();
    placed.daemons.retain(|d| d.id < 3);
    (placed.epoch, placed.moving_from) = (1, None);
    rt.block_on(async {
        let c = client_at(&placed).await;
        change_files(&c, &mut files).await;
    });
    // The coordinator got the cut-over to half the daemons, then died; so do a source that
    // took it and a target that did not, with -9.
    let cut = membership(&cluster.dep, 2, None, Vec::new(), false);
    rt.block_on(async {
        for id in [0, 1, 3] {
            let s = t.try_call(id, cut.clone()).await.unwrap();
            assert!(s.epoch == 2 && !s.moving, "daemon {id}: {s:?}");
        }
    });
    cluster.kill(1);
    cluster.kill(4);
    cluster.restart(1);
    cluster.restart(4);
    let t = tool(&cluster.dep);
    rt.block_on(async {
        // Each kept the epoch it had taken.
        assert_eq!(t.try_call(1, cut.clone()).await.unwrap().epoch, 2);
        let s = t.try_call(4, copy.clone()).await.unwrap();
        assert!(s.epoch == 1 && s.moving, "{s:?}");
    });
    finish_grow(&cluster, &rt, &files, &copy);
}
