//! Placement by locality through the mount (decision 0043): `setfattr` of
//! `user.eddy.placement` on a directory (checked: another value, or a file, is EINVAL),
//! inherited by a new subdirectory; a file written through the mount in a `local` directory
//! has all its chunks on one daemon of the mount's host (the three daemons share the host
//! `localhost`: one by hash), a file elsewhere is hashed. A file created under a directory
//! lease (decision 0075) is placed as its directory asks, as one created without.

use eddy_config::{Config, PlacementMode};
use eddy_placement::home_of;
use eddy_proto::req;
use eddy_testkit::Mounted;

#[test]
fn a_local_directory_through_the_mount() {
    eddy_testkit::require::programs(&["setfattr", "getfattr"], "attr");
    let m = Mounted::start_with(
        3,
        Config {
            placement: PlacementMode::Hashed,
            // The cluster's daemons all run on the host named "localhost".
            placement_host: Some("localhost".into()),
            ..eddy_testkit::test_config()
        },
    );
    m.ok("mkdir loc && setfattr -n user.eddy.placement -v local loc");
    let (ok, _, err) = m.sh("setfattr -n user.eddy.placement -v nearby loc");
    assert!(!ok && err.contains("Invalid argument"), "{err}");
    let (ok, _, err) = m.sh("touch f && setfattr -n user.eddy.placement -v local f");
    assert!(!ok && err.contains("Invalid argument"), "{err}");
    m.ok("mkdir loc/sub");
    assert_eq!(
        m.ok("getfattr --only-values -n user.eddy.placement loc/sub"),
        "local"
    );
    m.ok("head -c 1000000 /dev/urandom > loc/sub/data && cp loc/sub/data plain");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = m.cluster.client().await;
        let local = c.lookup("/loc/sub/data").await.unwrap();
        let home = home_of(local.file_id).expect("placed by locality");
        assert!(home < 3);
        let plain = c.lookup("/plain").await.unwrap();
        assert_eq!(
            home_of(plain.file_id),
            None,
            "outside the directory: hashed"
        );
        assert_eq!(
            eddy_testkit::read_all(&c, "/loc/sub/data").await,
            eddy_testkit::read_all(&c, "/plain").await
        );
        // Every byte of the local file is on its home: the others hold only the hashed
        // file's chunks, and the home holds the local file whole beside its share of them.
        let cs = c.config().chunk_size;
        let p = eddy_placement::Placement::new(vec![0, 1, 2]).unwrap();
        let chunks = 1_000_000u64.div_ceil(cs);
        for d in 0..3u32 {
            let held = c.rpc().call(d, req::Status).await.unwrap().chunk_bytes;
            let hashed: u64 = (0..chunks)
                .filter(|&k| p.chunk_owner(plain.file_id, k) == d)
                .map(|k| cs.min(1_000_000 - k * cs))
                .sum();
            let own = if d == home { 1_000_000 } else { 0 };
            assert_eq!(held, hashed + own, "daemon {d} (home {home})");
        }
    });
}

/// A file the mount creates under its lease on a directory (made by the mount, so leased at
/// once) is placed as the directory's `user.eddy.placement` says, not as the configuration
/// does: the lease's create once placed it by the configuration when the directory's record
/// was not in the directory cache, and `eddy bench suite --placement local` then wrote
/// ior-hard's shared file (its directory `hashed`) from three hosts as a local file.
#[test]
fn a_file_created_under_a_lease_is_placed_as_its_directory_asks() {
    eddy_testkit::require::programs(&["setfattr"], "attr");
    let m = Mounted::start_with(
        3,
        Config {
            placement: PlacementMode::Local,
            placement_host: Some("localhost".into()),
            // The directory's record is never cached: looked up for each create.
            dir_cache_ms: 0,
            ..eddy_testkit::leased_config()
        },
    );
    m.ok("mkdir shared && setfattr -n user.eddy.placement -v hashed shared");
    m.ok("mkdir loc");
    for i in 0..4 {
        m.ok(&format!("echo {i} > shared/f{i} && echo {i} > loc/f{i}"));
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = m.cluster.client().await;
        for i in 0..4 {
            let f = c.lookup(&format!("/shared/f{i}")).await.unwrap();
            assert_eq!(
                home_of(f.file_id),
                None,
                "shared/f{i}: placed by locality in a hashed directory"
            );
            let f = c.lookup(&format!("/loc/f{i}")).await.unwrap();
            assert!(home_of(f.file_id).is_some(), "loc/f{i}: hashed");
        }
        // The creates went in the lease's batches (recalled by the lookups above).
        let batched = eddy_testkit::served::lease_stats(&c).await.batched_ops;
        assert!(batched >= 8, "only {batched} operations went in batches");
    });
}
