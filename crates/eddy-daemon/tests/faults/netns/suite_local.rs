//! `eddy bench suite --hosts 3 --placement local` (decision 0047): the placement said in the
//! table and the JSON, and, from what the daemons counted after each Eddy run
//! (`--daemon-stats`: every daemon's clients and the files it served), that every file a
//! rank wrote alone (ior-easy's file per rank) lies on its own host's daemon, named its home
//! in its file id, and nowhere else, while ior-hard's shared file, in the directory the suite
//! made `user.eddy.placement = hashed`, is hashed over all three daemons. The deployment runs
//! with directory leases on (decision 0075).

use super::*;
use eddy_proto::stats::DaemonStats;
use std::collections::{BTreeMap, BTreeSet};

#[test]
fn bench_suite_local_placement_keeps_each_ranks_files_on_its_host() {
    eddy_testkit::require::netns();
    eddy_testkit::require::fuse();
    let dir = tempfile::tempdir().unwrap();
    let counts = dir.path().join("counts");
    // With directory leases on (decision 0075): each mount holds the directories it made,
    // and the ranks of the other hosts recall them.
    let config = dir.path().join("leases.toml");
    std::fs::write(&config, "leases = true\n").unwrap();
    let (table, v) = host_suite(
        dir.path(),
        &[
            "--config",
            s(&config),
            "--placement",
            "local",
            // ior-hard's shared file: 200 transfers of 47008 bytes per rank, 3 ranks,
            // about 54 chunks of 512 KiB, so that hashing puts some on every daemon.
            "--hard-segments",
            "10000",
            "--daemon-stats",
            s(&counts),
        ],
    );
    assert!(table.contains("placement: local ("), "{table}");
    assert!(table.contains("ior-hard's directory"), "{table}");
    assert_eq!(v["layout"]["placement"], "local", "{}", v["layout"]);
    let namespaces = layout_namespaces(&v);

    for label in ["eddy", "eddy-lib", "eddy-preload"] {
        let file = counts.join(format!("{label}.json"));
        let stats: Vec<DaemonStats> =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        check_locality(label, &stats, &namespaces);
    }
}

/// The checks of one run's counts (they add up over the runs of the deployment: the mount's,
/// then the library's, then the preload's).
fn check_locality(label: &str, stats: &[DaemonStats], namespaces: &[String]) {
    assert_eq!(stats.len(), 3, "{label}: three daemons");
    // Daemon i is host i (its namespace).
    let hosts: Vec<&str> = stats.iter().map(|d| d.host.as_str()).collect();
    assert_eq!(hosts, namespaces, "{label}: daemons' hosts");
    // Hashed files written by ranks of several hosts (ior-hard's), by daemon.
    let mut shared: BTreeMap<u128, BTreeSet<u32>> = BTreeMap::new();
    for d in stats {
        assert!(d.counting, "{label}: daemon {} does not count", d.daemon);
        assert_eq!(d.files_untracked, 0, "{label}: daemon {}", d.daemon);
        let host_of: BTreeMap<u64, &str> = d
            .clients
            .iter()
            .map(|c| (c.key, c.client.host.as_str()))
            .collect();
        let mut local_files = 0;
        for f in d.files.iter().filter(|f| f.written_bytes > 0) {
            let writers: BTreeSet<&str> = f
                .writers
                .iter()
                .map(|k| *host_of.get(k).unwrap_or(&"?"))
                .collect();
            let by_ranks = writers.iter().any(|h| namespaces.iter().any(|n| n == h));
            match eddy_placement::home_of(f.file_id) {
                Some(home) => {
                    // A local file: on its home only, written by that host alone.
                    assert_eq!(
                        home, d.daemon,
                        "{label}: file {:x} of home {home} written on daemon {}",
                        f.file_id, d.daemon
                    );
                    assert_eq!(
                        writers,
                        BTreeSet::from([d.host.as_str()]),
                        "{label}: local file {:x} on daemon {} ({}) written from {writers:?}",
                        f.file_id,
                        d.daemon,
                        d.host
                    );
                    assert!(!f.many_writers, "{label}: {:x}", f.file_id);
                    local_files += 1;
                }
                None if by_ranks => {
                    // Hashed and written by ranks: only the shared file, written from every
                    // host (no rank's own file is hashed, nor on another host's daemon).
                    assert_eq!(
                        writers.len(),
                        namespaces.len(),
                        "{label}: hashed file {:x} on daemon {} written only from \
                         {writers:?}: a rank's own file was not placed locally",
                        f.file_id,
                        d.daemon
                    );
                    shared.entry(f.file_id).or_default().insert(d.daemon);
                }
                // The coordinator's own files (the manifest, find's reference), written from
                // this host, which runs no daemon: hashed, as they should be.
                None => {}
            }
        }
        assert!(
            local_files >= 1,
            "{label}: daemon {} holds no file of its host's rank",
            d.daemon
        );
    }
    // ior-hard's file (one per run so far) is spread over all three daemons.
    assert!(!shared.is_empty(), "{label}: no shared file was written");
    for (id, on) in &shared {
        assert_eq!(
            on.len(),
            3,
            "{label}: shared file {id:x} only on daemons {on:?}"
        );
    }
}
