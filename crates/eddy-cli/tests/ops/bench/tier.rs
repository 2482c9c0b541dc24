//! `eddy bench tier` at a tiny size: it completes, reports its phases in the table and as
//! JSON with positive figures, and leaves nothing behind in the storage or the backend.
//! No test looks at a speed.

use eddy_testkit::cli::{ok, s};
use serde_json::Value;
use std::fs;
use std::path::Path;

fn empty(dir: &Path) -> bool {
    fs::read_dir(dir).expect("readdir").next().is_none()
}

#[test]
fn tier_bench_reports_every_phase_with_positive_figures() {
    let storage = tempfile::tempdir().unwrap();
    let backend = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("tier.json");
    let run = ok(&[
        "bench",
        "tier",
        "--storage",
        s(storage.path()),
        "--backend",
        s(backend.path()),
        "--size",
        "2M",
        "--files",
        "3",
        "--tree-files",
        "10",
        "--tree-dirs",
        "3",
        "--rounds",
        "2",
        "--json",
        s(&json),
    ]);
    let table = String::from_utf8_lossy(&run.stdout);
    let header = table
        .lines()
        .find(|l| l.starts_with("phase"))
        .unwrap_or_else(|| panic!("no table:\n{table}"));
    for col in ["baseline", "eddy", "ratio", "goal", "unit"] {
        assert!(
            header.split_whitespace().any(|c| c == col),
            "{col}: {table}"
        );
    }
    for phase in [
        "cold-read",
        "warm-read",
        "stage-in",
        "prefetched-read",
        "stage-out",
    ] {
        assert!(
            table.lines().any(|l| l.starts_with(&format!("{phase} "))),
            "no row for {phase}:\n{table}"
        );
    }
    assert!(table.contains("than cp -r"), "{table}");
    assert!(table.contains("page cache:"), "{table}");

    let v: Value = serde_json::from_str(&fs::read_to_string(&json).unwrap()).expect("json");
    assert_eq!(v["format"], "eddy-bench-tier/1");
    assert_eq!(v["size_bytes"], 2 << 20);
    assert_eq!(v["rounds"], 2);
    let phases = v["phases"].as_array().expect("phases");
    let names: Vec<&str> = phases
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    for phase in [
        "cold-read",
        "warm-read",
        "stage-in",
        "prefetched-read",
        "stage-out",
    ] {
        assert!(names.contains(&phase), "{phase} missing: {names:?}");
    }
    // The prefetched tree's first read fetched nothing: the prefetch had cached all of it.
    let prefetched = &phases[names.iter().position(|n| *n == "prefetched-read").unwrap()];
    assert_eq!(prefetched["eddy_backend_bytes"], 0, "{prefetched}");
    for p in phases {
        assert_eq!(p["bytes"], 2 << 20, "{p}");
        // Both sides ran in both rounds (alternating which went first, but in
        // prefetched-read).
        for key in ["baseline_rounds_s", "eddy_rounds_s"] {
            assert_eq!(p[key].as_array().map(Vec::len), Some(2), "{key}: {p}");
        }
        for key in [
            "baseline_seconds",
            "eddy_seconds",
            "baseline_mib_s",
            "eddy_mib_s",
            "ratio",
        ] {
            let x = p[key].as_f64().unwrap_or(-1.0);
            assert!(x > 0.0 && x.is_finite(), "{key} of {}: {p}", p["phase"]);
        }
    }
    // Everything the run created is gone: the deployment, its mount, the backend files.
    assert!(empty(storage.path()), "left in the storage");
    assert!(empty(backend.path()), "left in the backend");
}
