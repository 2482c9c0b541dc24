//! Darshan import on the real logs that ship inside the PyDarshan package (its
//! `examples/example_logs`, `examples/darshan-graph` and `tests/input`): each imported
//! profile's volume, file count and I/O mode agree with what PyDarshan's own aggregation
//! (libdarshan-util's accumulator, the numbers of `python -m darshan summary`) says of that
//! log, and `ior_hdf5_example.darshan` matches values checked by hand. Needs the PyDarshan
//! venv of `scripts/install-deps.sh` (or `EDDY_PYDARSHAN`): without it the tests fail.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use eddy_history::darshan::{self, profile_from_facts, read_facts_with};
use eddy_history::{IoMode, Source};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The Python with PyDarshan, or the test fails saying how to get it.
fn python() -> PathBuf {
    darshan::interpreter().unwrap_or_else(|e| eddy_testkit::require::missing(&format!("{e:#}")))
}

/// Runs `code` with the PyDarshan Python and `args`; its stdout.
fn run_python(code: &str, args: &[PathBuf]) -> String {
    let out = Command::new(python())
        .arg("-c")
        .arg(code)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every Darshan log shipped inside the installed `darshan` package, one per file name (two
/// are shipped twice, identical).
fn shipped_logs() -> BTreeMap<String, PathBuf> {
    let dir = run_python(
        "import darshan, os; print(os.path.dirname(darshan.__file__))",
        &[],
    );
    let mut logs = BTreeMap::new();
    let mut stack = vec![PathBuf::from(dir.trim())];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "darshan") {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                logs.entry(name).or_insert(p);
            }
        }
    }
    logs
}

/// What PyDarshan itself says of each log, by a query separate from the import: per module,
/// libdarshan-util's accumulator (`accumulate_records`, the figures of the summary report's
/// "Overview" and "File Count Summary" tables): total bytes, files read-only + write-only +
/// read/write, bytes of the shared and partially shared categories; and the ranks of records
/// that moved bytes. Modules: POSIX and STDIO, MPI-IO only in a log without POSIX.
const EXPECTED: &str = r#"
import json, sys, warnings
warnings.simplefilter("ignore")
import darshan
from darshan.backend.cffi_backend import accumulate_records
out = {}
for path in sys.argv[1:]:
    r = darshan.DarshanReport(path, read_all=True)
    nprocs = r.metadata["job"]["nprocs"]
    mods = [m for m in ("POSIX", "STDIO", "MPI-IO") if m in r.records]
    if "POSIX" in mods and "MPI-IO" in mods:
        mods.remove("MPI-IO")
    volume = files = shared = 0
    ranks = set()
    for m in mods:
        df = r.records[m].to_df()
        dm = accumulate_records(df, m, nprocs).derived_metrics
        volume += dm.total_bytes
        files += sum(dm.category_counters[i].count for i in (1, 2, 3))
        for i in (5, 6):
            cc = dm.category_counters[i]
            shared += cc.total_read_volume_bytes + cc.total_write_volume_bytes
        p = "MPIIO" if m == "MPI-IO" else m
        c = df["counters"]
        moved = c[c[p + "_BYTES_READ"] + c[p + "_BYTES_WRITTEN"] > 0]
        ranks |= set(int(x) for x in moved["rank"])
    procs = nprocs if -1 in ranks else len(ranks)
    mode = ("none" if volume == 0 else "1-1" if procs == 1
            else "N-1" if 2 * shared > volume else "N-N")
    out[path] = {"volume": volume, "files": files, "mode": mode, "modules": mods}
print(json.dumps(out))
"#;

fn mode_name(m: IoMode) -> &'static str {
    match m {
        IoMode::NN => "N-N",
        IoMode::N1 => "N-1",
        IoMode::OneOne => "1-1",
        IoMode::None => "none",
    }
}

#[test]
fn every_shipped_log_agrees_with_pydarshan() {
    let logs = shipped_logs();
    for want in [
        "ior_hdf5_example.darshan",
        "shane_macsio_id29959_5-22-32552-7035573431850780836_1590156158.darshan",
        "sample.darshan",
        "sample-badost.darshan",
        "sample-goodost.darshan",
        "sample-dxt-simple.darshan",
        "dxt.darshan",
        "noposix.darshan",
    ] {
        assert!(
            logs.contains_key(want),
            "PyDarshan ships no {want}: {logs:?}"
        );
    }
    let paths: Vec<PathBuf> = logs.values().cloned().collect();
    let profiles = darshan::import_logs(&paths).unwrap();
    assert_eq!(profiles.len(), paths.len());
    let expected: Value = serde_json::from_str(&run_python(EXPECTED, &paths)).unwrap();
    let mut modes = BTreeMap::new();
    for (path, p) in paths.iter().zip(&profiles) {
        let e = &expected[path.to_str().unwrap()];
        let name = path.file_name().unwrap().to_string_lossy();
        assert_eq!(p.volume(), e["volume"].as_u64().unwrap(), "{name}: volume");
        assert_eq!(p.files, e["files"].as_u64().unwrap(), "{name}: files");
        assert_eq!(mode_name(p.io_mode), e["mode"], "{name}: I/O mode");
        assert_eq!(p.source, Source::Darshan);
        assert!(p.key.starts_with("darshan:"), "{name}: key {}", p.key);
        assert!(p.shared_files <= p.files, "{name}");
        assert!(p.io_processes >= 1, "{name}: {p:?}");
        assert!(p.peak_bandwidth >= p.mean_bandwidth, "{name}");
        *modes.entry(mode_name(p.io_mode)).or_insert(0) += 1;
    }
    // The shipped logs cover every mode the import can give (so the rule is exercised).
    for m in ["N-N", "N-1", "1-1"] {
        assert!(modes.contains_key(m), "no shipped log is {m}: {modes:?}");
    }
}

/// `ior_hdf5_example.darshan`, checked by hand against `python -m darshan summary` of the log
/// (PyDarshan 3.5.0's HTML report: Job Summary; POSIX Overview "bytes read 4.01 MiB, bytes
/// written 4.00 MiB", File Count Summary "read/write files 1"; STDIO Overview "bytes
/// written 2.36 KiB", "write-only files 1"; POSIX Common Access Sizes "262144: 32") and the
/// exact byte counters of its records (POSIX_BYTES_READ 4202504, POSIX_BYTES_WRITTEN
/// 4195800 on the one POSIX record, rank -1; STDIO_BYTES_WRITTEN 2421 on rank 0's record),
/// and the DXT trace's one host name.
#[test]
fn ior_hdf5_example_by_hand() {
    let logs = shipped_logs();
    let path = logs["ior_hdf5_example.darshan"].clone();
    let facts = read_facts_with(&python(), std::slice::from_ref(&path)).unwrap();
    let p = profile_from_facts(&facts[0]);
    let exe = "/global/u2/s/ssnyder/software/ior/build/src/ior -a HDF5 -o \
               /global/cscratch1/sd/ssnyder/test123.h5";
    assert_eq!(facts[0].exe, exe);
    assert_eq!(facts[0].nprocs, 4);
    assert_eq!(p.key, "darshan:32324925@1594155460"); // Job ID; Start Time 2020-07-07 20:57:40
    assert_eq!(p.job_id.as_deref(), Some("32324925"));
    assert_eq!(p.job_name.as_deref(), Some("ior"));
    assert_eq!(p.user, "69628"); // User ID
    let hash = hex::encode(Sha256::digest(exe.as_bytes()));
    assert_eq!(p.script_hash.as_deref(), Some(hash.as_str()));
    assert_eq!(p.start, 1_594_155_460.0);
    assert_eq!(p.end, 1_594_155_461.0); // Run time (s) 1.0000
                                        // POSIX read 4202504 B; written: POSIX 4195800 + STDIO 2421. MPI-IO's 4.01/4.00 MiB are
                                        // the same bytes as POSIX's (one file, seen by both), so not added.
    assert_eq!(p.read_bytes, 4_202_504);
    assert_eq!(p.written_bytes, 4_195_800 + 2_421);
    // test123.h5 (POSIX, rank -1 of 4 processes: shared) and <STDOUT> (STDIO, rank 0).
    assert_eq!(p.files, 2);
    assert_eq!(p.shared_files, 1);
    assert_eq!(p.io_processes, 4);
    // 8398304 of 8400725 bytes went to the shared file.
    assert_eq!(p.io_mode, IoMode::N1);
    // 262144-byte requests (32 of them) are in Darshan's 100K-1M bin → bucket [1 MiB, 2 MiB).
    assert_eq!(p.request_sizes.len(), 22);
    assert_eq!(p.request_sizes[21], 32);
    // DXT_POSIX: every traced rank ran on nid00097.
    assert_eq!(p.nodes, vec!["nid00097".to_string()]);
    assert_eq!(p.io_nodes, Some(1));
    assert!(!p.series.is_empty());
    let traced: f64 = p
        .series
        .iter()
        .map(|s| (s.read_bps + s.write_bps) * s.seconds)
        .sum();
    assert!(traced > 0.0 && traced <= p.volume() as f64, "{traced}");
    // No DXT, no series (sample.darshan has none).
    let plain = darshan::import_logs(&[logs["sample.darshan"].clone()]).unwrap();
    assert!(plain[0].series.is_empty() && plain[0].io_nodes.is_none());
}

#[test]
fn a_file_that_is_not_a_darshan_log_is_an_error_naming_it() {
    let python = python();
    let not_a_log = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let err = read_facts_with(&python, std::slice::from_ref(&not_a_log)).unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains(&not_a_log.display().to_string()), "{msg}");
    let missing = Path::new(env!("CARGO_MANIFEST_DIR")).join("no-such.darshan");
    let err = read_facts_with(&python, &[missing]).unwrap_err();
    assert!(
        format!("{err:#}").contains("no such Darshan log"),
        "{err:#}"
    );
}

#[test]
fn a_python_without_pydarshan_is_named_with_the_way_to_install_it() {
    // Debian's python3 has no PyDarshan (Debian 12 ships no package of it).
    let system = PathBuf::from("/usr/bin/python3");
    if !system.is_file() {
        eddy_testkit::require::missing("/usr/bin/python3 (Debian package python3)");
    }
    let log = shipped_logs()["sample.darshan"].clone();
    let err = read_facts_with(&system, &[log]).unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("scripts/install-deps.sh"), "{msg}");
    assert!(msg.contains("EDDY_PYDARSHAN"), "{msg}");
}
