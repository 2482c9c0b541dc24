//! `eddy bench alloc --quick --json` on its own live pool (8 server and 4 compute
//! namespaces, `tc`-limited links): the allocation's decisions and the growth's members,
//! never their timings.

use eddy_testkit::cli::{s, text};
use eddy_testkit::{eddy_bin, eddyd_bin};
use std::process::Command;

#[test]
fn bench_alloc_decides_scaling_isolation_screening_and_growth_on_a_live_pool() {
    eddy_testkit::require::netns();
    eddy_testkit::require::program("tc", "iproute2");
    eddy_testkit::require::program("unshare", "util-linux");
    let dir = tempfile::tempdir().unwrap();
    let inventory = dir.path().join("inventory.db");
    let child = Command::new(eddy_bin())
        // Links slow enough that a debug build fills them (scenario d judges saturation).
        .args([
            "bench",
            "alloc",
            "--quick",
            "--server-rate",
            "40mbit",
            "--json",
            "-",
        ])
        .arg("--inventory")
        .arg(&inventory)
        .env("EDDY_DAEMON_BIN", eddyd_bin())
        .env_remove("EDDY_STATE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The bench names its namespaces after its pid (net.rs).
    let prefix = format!("ea{}", child.id() % 100_000);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "eddy bench alloc: {}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids_of = |l: &serde_json::Value| -> Vec<u64> {
        l.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    let ids = |d: &serde_json::Value| ids_of(&d["servers"]);

    // a. The profile of the default run calls for scaling: more servers, rule "scaled".
    let a = &v["scaling"];
    assert_eq!(a["scaled"]["rule"], "scaled", "{a}");
    assert!(ids(&a["scaled"]).len() > ids(&a["default"]).len(), "{a}");

    // b. Default: the N-1 job shares the bandwidth job's servers; DFRA: disjoint ones.
    let b = &v["isolation"];
    let bw = ids_of(&b["bandwidth_job"]);
    assert_eq!(ids(&b["shared"]), bw, "{b}");
    assert_eq!(b["dfra"]["rule"], "isolated", "{b}");
    assert!(ids(&b["dfra"]).iter().all(|i| !bw.contains(i)), "{b}");

    // c. The throttled server is anomalous in the inventory and not in the screened
    // allocation; the unscreened one of the same size has it.
    let c = &v["screening"];
    let slow = c["throttled_host"].as_str().unwrap();
    let out = Command::new(eddy_bin())
        .args(["sysmap", "health", "--db", s(&inventory)])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let health: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = health.as_array().unwrap();
    assert_eq!(rows.len(), 8, "{health}");
    for r in rows {
        assert_eq!(r["anomalous"], r["host"] == slow, "{health}");
    }
    let slow_id: u64 = slow.rsplit('s').next().unwrap().parse().unwrap();
    assert!(!ids(&c["screened"]).contains(&slow_id), "{c}");
    assert!(c["screened"]["excluded"]
        .as_array()
        .unwrap()
        .contains(&slow_id.into()));
    assert!(ids(&c["unscreened"]).contains(&slow_id), "{c}");
    assert_eq!(ids(&c["screened"]).len(), ids(&c["unscreened"]).len());
    // `eddy status --inventory` flags the daemon on the slow host, and only it.
    assert_eq!(
        c["status_flagged_unscreened"],
        serde_json::json!([slow]),
        "{c}"
    );
    assert_eq!(c["status_flagged_screened"], serde_json::json!([]), "{c}");

    // d. The deployment grew from 2 servers to 4: the added ones are others, and not the
    // server c throttled.
    let d = &v["growth"];
    let before: Vec<u64> = ids_of(&d["servers_before"]);
    let added: Vec<u64> = ids_of(&d["servers_added"]);
    assert_eq!(before.len(), 2, "{d}");
    assert_eq!(added.len(), 2, "{d}");
    assert!(added.iter().all(|i| !before.contains(i)), "{d}");
    assert!(
        !added.contains(&slow_id) && !before.contains(&slow_id),
        "{d}"
    );
    assert_eq!(d["members_after"], 4, "{d}");
    // The run-time rule, on the live counters of the job bound by its 2 servers' links,
    // grows it to 4: the servers added are the ones it chose.
    let verdict = &d["verdict"];
    assert!(verdict["hold"].is_null(), "{verdict}");
    assert_eq!(verdict["target"], 4, "{verdict}");
    assert_eq!(d["servers_added"], verdict["add"], "{d}");
    let live_queue = d["live_queue_mean"].as_f64().unwrap_or(f64::NAN);
    assert!(live_queue.is_finite() && live_queue >= 0.0, "{d}");

    // Every figure is a positive finite number.
    let figures = [
        &a["default_mib_s"],
        &a["scaled_mib_s"],
        &a["ratio"],
        &b["alone_mib_s"],
        &b["shared_mib_s"],
        &b["isolated_mib_s"],
        &b["slowdown_shared"],
        &b["slowdown_isolated"],
        &c["baseline_mib_s"],
        &c["screened_mib_s"],
        &c["unscreened_mib_s"],
        &c["slowdown_screened"],
        &c["slowdown_unscreened"],
        &d["before_mib_s"],
        &d["after_mib_s"],
        &d["ratio"],
        &d["grow_s"],
        &d["live_bytes_per_s"],
    ];
    for f in figures {
        let x = f.as_f64().unwrap_or(f64::NAN);
        assert!(x.is_finite() && x > 0.0, "figure {f} in {v}");
    }
    // Nothing of the pool is left behind.
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let left: Vec<&str> = std::str::from_utf8(&ns.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with(&format!("{prefix}s")) || l.starts_with(&format!("{prefix}c")))
        .collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
}
