//! The tier with placement by locality (decision 0043): a file created under a linked prefix
//! by a client on one host has its chunks on that host's daemon, is written back whole by
//! stage-out and read from another host; a backend change makes a new generation, which is
//! hashed and read from the backend.

use super::*;
use eddy_config::PlacementMode;
use eddy_placement::home_of;

const HOSTS: [&str; 3] = ["node-a", "node-b", "node-c"];

/// A client that counts as `HOSTS[host]`, with the daemons named by `HOSTS`.
async fn client_on(cl: &Cluster, host: usize) -> Client {
    let mut dep = cl.dep.clone();
    for (d, name) in dep.daemons.iter_mut().zip(HOSTS) {
        d.host = name.to_string();
    }
    dep.config.placement_host = Some(HOSTS[host].to_string());
    Client::connect(dep).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_file_under_a_linked_prefix_is_written_back_and_refetched() {
    let backend = tempfile::tempdir().unwrap();
    let cl = Cluster::start_with(
        3,
        Config {
            placement: PlacementMode::Local,
            ..linked(&[("/lnk", backend.path())])
        },
    );
    let b = client_on(&cl, 1).await;
    let a = client_on(&cl, 0).await;
    let me = Creds::root();
    let data = random_bytes(5 * 64 * KIB + 100);
    let f = b.create("/lnk/out.bin", 0o644, true, me).await.unwrap();
    assert_eq!(home_of(f.file_id()), Some(1));
    b.pwrite(&f, 0, &data).await.unwrap();
    b.close(&f).await.unwrap();
    let held: Vec<u64> = statuses(&a).await.iter().map(|s| s.chunk_bytes).collect();
    assert_eq!(held, vec![0, data.len() as u64, 0]);
    all_ok(&a.stage_out(&[], &|_| {}).await.unwrap());
    same(
        &std::fs::read(backend.path().join("out.bin")).unwrap(),
        &data,
        "backend copy after stage-out",
    );
    same(
        &eddy_testkit::read_all(&a, "/lnk/out.bin").await,
        &data,
        "read on node-a",
    );
    // The backend copy changes behind Eddy's back: the next open takes it as a new
    // generation, placed by hash, its bytes fetched from the backend.
    let changed = random_bytes(3 * 64 * KIB);
    std::fs::write(backend.path().join("out.bin"), &changed).unwrap();
    let g = a.open("/lnk/out.bin", libc::O_RDONLY, 0, me).await.unwrap();
    assert_eq!(home_of(g.file_id()), None, "a new generation is hashed");
    a.close(&g).await.unwrap();
    same(
        &eddy_testkit::read_all(&b, "/lnk/out.bin").await,
        &changed,
        "the new generation",
    );
}
