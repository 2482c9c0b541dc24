//! `eddy bench writeback --quick`: it completes and reports positive, finite figures; without
//! early write-back the whole of the job's bytes are dirty at its end, with it no more. No
//! test looks at a speed.

use eddy_testkit::cli::{ok, s};
use serde_json::Value;
use std::fs;

#[test]
fn writeback_bench_reports_positive_finite_figures() {
    let storage = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("wb.json");
    let run = ok(&[
        "bench",
        "writeback",
        "--quick",
        "--storage",
        s(storage.path()),
        "--json",
        s(&json),
    ]);
    let table = String::from_utf8_lossy(&run.stdout);
    for row in ["without early write-back", "with eddy writeback", "ratio"] {
        assert!(table.contains(row), "no {row}:\n{table}");
    }
    assert!(table.contains("raw backend write"), "{table}");
    let v: Value = serde_json::from_str(&fs::read_to_string(&json).unwrap()).expect("json");
    assert_eq!(v["format"], "eddy-bench-writeback/1");
    let size = v["size_bytes"].as_u64().unwrap();
    assert_eq!(size, 8 << 20);
    assert_eq!(v["rounds"], 1);
    for key in ["ratio", "raw_write_mib_s", "raw_write_seconds"] {
        let x = v[key].as_f64().unwrap_or_else(|| panic!("{key}: {v}"));
        assert!(x.is_finite() && x > 0.0, "{key} = {x}");
    }
    for run in ["without", "with"] {
        let x = v[run]["stage_out_seconds"].as_f64().unwrap();
        assert!(x.is_finite() && x > 0.0, "{run}: {x}");
        let share = v[run]["dirty_share"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&share), "{run}: {share}");
    }
    assert_eq!(v["without"]["dirty_at_end_bytes"][0].as_u64(), Some(size));
    assert!(v["with"]["dirty_at_end_bytes"][0].as_u64().unwrap() <= size);
    // Nothing is left behind in the storage.
    assert!(fs::read_dir(storage.path()).unwrap().next().is_none());
}
