//! `eddy bench`: every workload at a tiny size on a plain directory, verification failures on
//! corrupted data, errors for bad targets, JSON/compare/plots, and runs on a real Eddy mount.
//! No test looks at a speed.

use eddy_testkit::cli::{eddy, fails, ok, s, text};
use eddy_testkit::eddy_bin;
use serde_json::Value;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Makes every size tiny.
const TINY: &str = "0.02";

fn load(p: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(p).expect("json file")).expect("valid json")
}

/// Phase names of run `i` of a result file, checking every phase did some work.
fn phases(v: &Value, i: usize) -> Vec<String> {
    let run = &v["runs"][i];
    run["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .map(|p| {
            let name = p["phase"].as_str().expect("phase name").to_string();
            assert!(
                p["ops"].as_u64().expect("ops") > 0,
                "{name} did nothing: {p}"
            );
            assert!(p["seconds"].as_f64().expect("seconds") >= 0.0);
            name
        })
        .collect()
}

fn empty(dir: &Path) -> bool {
    fs::read_dir(dir).expect("readdir").next().is_none()
}

/// Runs one workload selection on `target` (a directory or `eddy:STATE`), writing its JSON to
/// `json`, and returns the phases it reported.
fn bench_run(target: &str, json: &Path, workloads: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "bench",
        "run",
        target,
        "--scale",
        TINY,
        "--workloads",
        workloads,
        "--json",
        s(json),
    ];
    args.extend_from_slice(extra);
    let out = ok(&args);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("phase") && table.contains("score"),
        "no table:\n{table}"
    );
    let v = load(json);
    assert_eq!(v["format"], "eddy-bench/1");
    assert_eq!(v["runs"][0]["target"], target);
    phases(&v, 0)
}

/// Runs one workload selection on `dir` and returns the phases it reported.
fn run_workloads(dir: &Path, workloads: &str, extra: &[&str]) -> Vec<String> {
    let json = dir.join("../r.json");
    let got = bench_run(s(dir), &json, workloads, extra);
    assert!(
        empty(dir),
        "work directory left behind in {}",
        dir.display()
    );
    got
}

type Case = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
);

/// Every workload: (--workloads, extra options, phases that must be reported).
const WORKLOAD_CASES: [Case; 7] = [
    ("ior-easy", &[], &["ior-easy-write", "ior-easy-read"]),
    ("ior-hard", &[], &["ior-hard-write", "ior-hard-read"]),
    (
        "mdtest-easy",
        &[],
        &[
            "mdtest-easy-write",
            "mdtest-easy-stat",
            "mdtest-easy-delete",
        ],
    ),
    (
        "mdtest-hard",
        &[],
        &[
            "mdtest-hard-write",
            "mdtest-hard-stat",
            "mdtest-hard-read",
            "mdtest-hard-delete",
        ],
    ),
    // find needs something to walk: mdtest-hard with enough files to match "01".
    ("mdtest-hard,find", &["--md-hard-files", "6000"], &["find"]),
    ("ior-easy,rnd4k", &[], &["rnd4k-read"]),
    ("smallfiles", &[], &["smallfiles-write", "smallfiles-read"]),
];

fn assert_phases(workloads: &str, got: &[String], want: &[&str]) {
    for w in want {
        assert!(
            got.iter().any(|g| g == w),
            "{workloads}: phase {w} missing from {got:?}"
        );
    }
}

mod deploy;
mod eddy;
mod plain;
mod tier;
mod writeback;
