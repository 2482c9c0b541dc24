//! Placement by locality (decision 0043): three daemons given three host names in the
//! deployment the clients read, and clients that count as one of those hosts
//! (`placement_host`). A file placed `local` has every chunk on its creator's daemon and is
//! read byte-identical from another host; the directory attribute overrides the deployment's
//! setting both ways and is checked; a full or dead local daemon makes new files hashed; a
//! second copy lives elsewhere and survives the home's kill; truncate and unlink free the
//! home's chunks.

use eddy_client::{Client, Creds, XattrSet};
use eddy_config::{Config, PlacementMode, PLACEMENT_XATTR};
use eddy_placement::{home_of, Placement};
use eddy_proto::req;
use eddy_testkit::{pattern, Cluster};

const HOSTS: [&str; 3] = ["node-a", "node-b", "node-c"];

/// A client of the cluster that counts as `HOSTS[host]`, the daemons named by `HOSTS`.
async fn client_on(cl: &Cluster, host: usize) -> Client {
    let mut dep = cl.dep.clone();
    for (d, name) in dep.daemons.iter_mut().zip(HOSTS) {
        d.host = name.to_string();
    }
    dep.config.placement_host = Some(HOSTS[host].to_string());
    Client::connect(dep).await.unwrap()
}

/// Bytes of chunk data each daemon holds, by id.
async fn chunk_bytes(c: &Client) -> Vec<u64> {
    let mut out = Vec::new();
    for d in 0..3u32 {
        out.push(c.rpc().call(d, req::Status).await.unwrap().chunk_bytes);
    }
    out
}

async fn write_file(c: &Client, path: &str, seed: u64, len: usize) -> u128 {
    let f = c.create(path, 0o644, true, Creds::root()).await.unwrap();
    c.pwrite(&f, 0, &pattern(seed, 0, len)).await.unwrap();
    c.close(&f).await.unwrap();
    c.lookup(path).await.unwrap().file_id
}

fn config(placement: PlacementMode) -> Config {
    Config {
        placement,
        ..eddy_testkit::test_config()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_files_stay_on_their_host_and_read_anywhere() {
    let cl = Cluster::start_with(3, config(PlacementMode::Local));
    let b = client_on(&cl, 1).await;
    let a = client_on(&cl, 0).await;
    let cs = b.config().chunk_size as usize;
    let len = cs * 6;
    let id = write_file(&b, "/n-n.0", 7, len).await;
    assert_eq!(home_of(id), Some(1), "created on node-b: home is daemon 1");
    assert_eq!(chunk_bytes(&a).await, vec![0, len as u64, 0]);
    // Read from another host: remote, byte-identical.
    assert_eq!(
        eddy_testkit::read_all(&a, "/n-n.0").await,
        pattern(7, 0, len)
    );
    // The record survives a rename and names the same chunks.
    a.rename("/n-n.0", "/moved", Creds::root()).await.unwrap();
    assert_eq!(a.lookup("/moved").await.unwrap().file_id, id);
    assert_eq!(
        eddy_testkit::read_all(&b, "/moved").await,
        pattern(7, 0, len)
    );
    // Truncate and unlink free the home's chunks.
    a.truncate("/moved", (cs * 2) as u64, Creds::root())
        .await
        .unwrap();
    assert_eq!(chunk_bytes(&a).await, vec![0, (cs * 2) as u64, 0]);
    assert_eq!(
        eddy_testkit::read_all(&a, "/moved").await,
        pattern(7, 0, cs * 2)
    );
    a.unlink("/moved", Creds::root()).await.unwrap();
    assert_eq!(chunk_bytes(&a).await, vec![0, 0, 0]);

    // A client on node-c places on daemon 2.
    let c = client_on(&cl, 2).await;
    let id = write_file(&c, "/n-n.2", 9, cs * 3).await;
    assert_eq!(home_of(id), Some(2));
    assert_eq!(chunk_bytes(&a).await, vec![0, 0, (cs * 3) as u64]);

    // A directory saying "hashed" overrides the deployment's "local"; its subdirectories
    // inherit the attribute.
    b.mkdir("/shared", 0o755, Creds::root()).await.unwrap();
    b.setxattr(
        "/shared",
        PLACEMENT_XATTR,
        b"hashed",
        XattrSet::Any,
        Creds::root(),
    )
    .await
    .unwrap();
    b.mkdir("/shared/sub", 0o755, Creds::root()).await.unwrap();
    assert_eq!(
        b.getxattr("/shared/sub", PLACEMENT_XATTR, Creds::root())
            .await
            .unwrap(),
        b"hashed"
    );
    let f = b
        .create("/shared/sub/n-1", 0o644, true, Creds::root())
        .await
        .unwrap();
    assert_eq!(
        home_of(f.file_id()),
        None,
        "a hashed directory's file is hashed"
    );
    let p = Placement::new(vec![0, 1, 2]).unwrap();
    assert!(
        (0..64).any(|k| p.chunk_owner(f.file_id(), k) != 1),
        "hashed chunks spread"
    );
    b.pwrite(&f, 0, &pattern(3, 0, cs * 4)).await.unwrap();
    b.close(&f).await.unwrap();
    assert_eq!(
        eddy_testkit::read_all(&a, "/shared/sub/n-1").await,
        pattern(3, 0, cs * 4)
    );

    // The attribute is checked: other values and non-directories are EINVAL.
    for bad in [&b"Local"[..], b"", b"striped"] {
        let e = b
            .setxattr(
                "/shared",
                PLACEMENT_XATTR,
                bad,
                XattrSet::Any,
                Creds::root(),
            )
            .await
            .unwrap_err();
        assert_eq!(e.errno, libc::EINVAL, "{bad:?}: {e}");
    }
    let e = b
        .setxattr(
            "/n-n.2",
            PLACEMENT_XATTR,
            b"local",
            XattrSet::Any,
            Creds::root(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.errno, libc::EINVAL, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_says_local_in_a_hashed_deployment() {
    let cl = Cluster::start_with(3, config(PlacementMode::Hashed));
    let b = client_on(&cl, 1).await;
    let a = client_on(&cl, 0).await;
    let cs = b.config().chunk_size as usize;
    // Without the attribute: hashed, as before.
    let id = write_file(&b, "/plain", 1, cs).await;
    assert_eq!(home_of(id), None);
    b.mkdir("/out", 0o755, Creds::root()).await.unwrap();
    b.setxattr(
        "/out",
        PLACEMENT_XATTR,
        b"local",
        XattrSet::Any,
        Creds::root(),
    )
    .await
    .unwrap();
    b.unlink("/plain", Creds::root()).await.unwrap();
    let before = chunk_bytes(&a).await;
    assert_eq!(before, vec![0, 0, 0]);
    let id = write_file(&b, "/out/rank1", 5, cs * 5).await;
    assert_eq!(home_of(id), Some(1));
    assert_eq!(chunk_bytes(&a).await, vec![0, (cs * 5) as u64, 0]);
    let id = write_file(&a, "/out/rank0", 6, cs * 2).await;
    assert_eq!(home_of(id), Some(0));
    assert_eq!(
        chunk_bytes(&a).await,
        vec![(cs * 2) as u64, (cs * 5) as u64, 0]
    );
    assert_eq!(
        eddy_testkit::read_all(&a, "/out/rank1").await,
        pattern(5, 0, cs * 5)
    );
    assert_eq!(
        eddy_testkit::read_all(&b, "/out/rank0").await,
        pattern(6, 0, cs * 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_local_daemon_makes_new_files_hashed() {
    let cs = eddy_testkit::test_config().chunk_size;
    let cl = Cluster::start_with(
        3,
        Config {
            capacity_bytes: cs * 4,
            // Every create looks again at the local daemon.
            placement_view_ms: 0,
            ..config(PlacementMode::Local)
        },
    );
    let b = client_on(&cl, 1).await;
    let a = client_on(&cl, 0).await;
    let id = write_file(&b, "/fills", 2, cs as usize * 4).await;
    assert_eq!(home_of(id), Some(1));
    assert_eq!(chunk_bytes(&a).await, vec![0, cs * 4, 0]);
    // Daemon 1 is full: the next file from node-b is hashed, and its chunks on the other
    // daemons are written and read.
    let f = b
        .create("/spills", 0o644, true, Creds::root())
        .await
        .unwrap();
    assert_eq!(home_of(f.file_id()), None, "a full home is not taken");
    let p = Placement::new(vec![0, 1, 2]).unwrap();
    let k = (0..64u64)
        .find(|&k| p.chunk_owner(f.file_id(), k) != 1)
        .unwrap();
    let data = pattern(4, k * cs, cs as usize);
    b.pwrite(&f, k * cs, &data).await.unwrap();
    b.close(&f).await.unwrap();
    let got = eddy_testkit::read_all(&a, "/spills").await;
    assert_eq!(&got[(k * cs) as usize..], &data[..]);
    // Room again: local again.
    b.unlink("/fills", Creds::root()).await.unwrap();
    let id = write_file(&b, "/again", 8, cs as usize).await;
    assert_eq!(home_of(id), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_copy_survives_the_home_and_a_dead_home_is_not_taken() {
    let mut cl = Cluster::start_with(
        3,
        Config {
            replicas: 2,
            rpc_timeout_ms: 2_000,
            connect_timeout_ms: 1_000,
            placement_view_ms: 0,
            ..config(PlacementMode::Local)
        },
    );
    let b = client_on(&cl, 1).await;
    let a = client_on(&cl, 0).await;
    let cs = b.config().chunk_size as usize;
    let len = cs * 6;
    let id = write_file(&b, "/twice", 11, len).await;
    assert_eq!(home_of(id), Some(1));
    let held = chunk_bytes(&a).await;
    assert_eq!(
        held[1], len as u64,
        "the first copy of every chunk is local"
    );
    assert_eq!(
        held[0] + held[2],
        len as u64,
        "the second copies are elsewhere"
    );
    cl.kill(1);
    assert_eq!(
        eddy_testkit::read_all(&a, "/twice").await,
        pattern(11, 0, len)
    );
    // node-b's daemon is dead: a new file from node-b is hashed and lives on the others.
    let id = write_file(&b, "/after", 12, cs * 3).await;
    assert_eq!(home_of(id), None, "a dead home is not taken");
    assert_eq!(
        eddy_testkit::read_all(&a, "/after").await,
        pattern(12, 0, cs * 3)
    );
    // Written while the home is down: the other copies take it and the home gets it back
    // by repair once it is up again (the chunks it missed pushed to it, not elsewhere).
    let f = a
        .open("/twice", libc::O_RDWR, 0, Creds::root())
        .await
        .unwrap();
    a.pwrite(&f, len as u64, &pattern(11, len as u64, len))
        .await
        .unwrap();
    a.close(&f).await.unwrap();
    // What the home holds once repaired: every chunk of its file, and its copies of the
    // hashed file's chunks.
    let p = Placement::new(vec![0, 1, 2]).unwrap();
    let after = a.lookup("/after").await.unwrap().file_id;
    let copies_of_after = (0..3u64)
        .filter(|&k| p.chunk_owners(after, k, 2).contains(&1))
        .count() as u64
        * cs as u64;
    let want = 2 * len as u64 + copies_of_after;
    cl.restart(1);
    let what = format!("the home holds the {want} bytes of chunks it should after repair");
    let a = &a;
    eddy_testkit::eventually::eventually_async(
        eddy_testkit::eventually::GUARD,
        what,
        || async move {
            let held = a.rpc().call(1, req::Status).await.map(|st| st.chunk_bytes);
            held.is_ok_and(|h| h == want).then_some(())
        },
    )
    .await;
    assert_eq!(
        eddy_testkit::read_all(&b, "/twice").await,
        pattern(11, 0, 2 * len)
    );
}
