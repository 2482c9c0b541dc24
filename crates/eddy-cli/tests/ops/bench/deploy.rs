//! `eddy bench deploy`: it starts and stops each deployment, reports positive figures for
//! each, leaves no daemon and nothing of its work directory behind. No test looks at a speed.

use eddy_testkit::cli::{ok, s};
use serde_json::Value;
use std::fs;

#[test]
fn deploy_bench_reports_each_deployment_and_leaves_nothing_behind() {
    let storage = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("deploy.json");
    let run = ok(&[
        "bench",
        "deploy",
        "--daemons",
        "3,5",
        "--storage",
        s(storage.path()),
        "--idle-s",
        "0",
        "--json",
        s(&json),
    ]);
    let table = String::from_utf8_lossy(&run.stdout);
    assert!(table.contains("RSS/daemon MiB"), "{table}");
    let v: Value = serde_json::from_str(&fs::read_to_string(&json).unwrap()).expect("json");
    assert_eq!(v["reserve_bytes"], 1 << 20);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(
        runs.iter()
            .map(|r| r["daemons"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [3, 5]
    );
    for r in runs {
        for key in ["start_s", "stop_s", "threads"] {
            let x = r[key].as_f64().unwrap();
            assert!(x.is_finite() && x > 0.0, "{key} {x}: {r}");
        }
        let (rss, anon) = (
            r["rss_kib"].as_u64().unwrap(),
            r["anon_kib"].as_u64().unwrap(),
        );
        assert!(anon > 0 && rss >= anon, "{r}");
    }
    // Its work directory (the roots and the state) is gone.
    let left: Vec<_> = fs::read_dir(storage.path()).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
}
