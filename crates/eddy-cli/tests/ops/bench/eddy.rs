//! Workloads on Eddy: through the client library and a mount, the suite beside raw storage, Ctrl-C, stonewalling, OpenMPI ranks.

use super::plain::{flip_byte, Deployment};
use super::*;

pub(super) fn is_mountpoint(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::metadata(p), p.parent().map(fs::metadata)) {
        (Ok(a), Some(Ok(b))) => a.dev() != b.dev(),
        _ => false,
    }
}

/// A local deployment without a mount (`eddy start --local 3`), benchmarked through the client
/// library as `eddy:STATE`; stopped on drop. Needs no FUSE.
struct LibDeployment {
    dir: tempfile::TempDir,
}

impl LibDeployment {
    fn start() -> LibDeployment {
        let d = LibDeployment {
            dir: tempfile::tempdir().unwrap(),
        };
        let p = d.dir.path();
        ok(&[
            "start",
            "--local",
            "3",
            "--root",
            s(&p.join("root")),
            "--state",
            s(&p.join("state")),
        ]);
        d
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn target(&self) -> String {
        format!("eddy:{}", s(&self.state()))
    }

    /// True if `path` does not exist in the namespace (read through the library).
    fn absent(&self, path: &str) -> bool {
        let local = self.dir.path().join("got");
        let out = eddy(&["debug", "get", "--state", s(&self.state()), path, s(&local)]);
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("ENOENT")
    }

    fn get(&self, path: &str) -> Vec<u8> {
        let local = self.dir.path().join("got");
        ok(&["debug", "get", "--state", s(&self.state()), path, s(&local)]);
        fs::read(&local).unwrap()
    }

    fn put(&self, path: &str, data: &[u8]) {
        let local = self.dir.path().join("put");
        fs::write(&local, data).unwrap();
        ok(&["debug", "put", "--state", s(&self.state()), s(&local), path]);
    }
}

impl Drop for LibDeployment {
    fn drop(&mut self) {
        let _ = eddy(&["stop", "--state", s(&self.state())]);
    }
}

#[test]
fn each_workload_through_the_client_library() {
    let d = LibDeployment::start();
    let target = d.target();
    let json = d.dir.path().join("lib.json");
    for (workloads, extra, want) in WORKLOAD_CASES {
        let got = bench_run(&target, &json, workloads, extra);
        assert_phases(workloads, &got, want);
        assert!(
            d.absent("/eddy-bench.work"),
            "{workloads}: work directory left in the namespace"
        );
    }
    // The three IOR layouts through the library too.
    for (easy, hard) in [("n-1", "n-n"), ("1-1", "1-1")] {
        let extra = ["--procs", "3", "--easy-mode", easy, "--hard-mode", hard];
        let got = bench_run(&target, &json, "ior-easy,ior-hard,rnd4k", &extra);
        assert_eq!(got.len(), 5, "{got:?}");
    }
    // All workloads in one run.
    let got = bench_run(
        &target,
        &json,
        "ior-easy,ior-hard,mdtest-easy,mdtest-hard,find,rnd4k,smallfiles",
        &[],
    );
    assert_eq!(got.len(), 15, "{got:?}");
    assert!(d.absent("/eddy-bench.work"));
}

#[test]
fn library_targets_give_clear_errors() {
    let d = LibDeployment::start();
    let state = s(&d.state()).to_string();
    let err = fails(&[
        "bench",
        "run",
        &format!("eddy:{state}:/nope"),
        "--scale",
        TINY,
    ]);
    assert!(err.contains("does not exist"), "{err}");
    d.put("/file", b"x");
    let err = fails(&[
        "bench",
        "run",
        &format!("eddy:{state}:/file"),
        "--scale",
        TINY,
    ]);
    assert!(err.contains("not a directory"), "{err}");
    // Free space comes from the daemons' statfs.
    let err = fails(&[
        "bench",
        "run",
        &d.target(),
        "--easy-bytes",
        "1000000000000000000",
    ]);
    assert!(err.contains("MiB free") && err.contains("--scale"), "{err}");
    let err = fails(&[
        "bench",
        "run",
        &d.target(),
        "--phases",
        "read",
        "--scale",
        TINY,
    ]);
    assert!(err.contains("--phases write"), "{err}");
    assert!(d.absent("/eddy-bench.work"));
    let err = fails(&["bench", "run", "eddy:", "--scale", TINY]);
    assert!(err.contains("STATE_DIR"), "{err}");
    let nothing = d.dir.path().join("no-state");
    let err = fails(&[
        "bench",
        "run",
        &format!("eddy:{}", s(&nothing)),
        "--scale",
        TINY,
    ]);
    assert!(err.contains("no Eddy deployment is running"), "{err}");
    // A stopped deployment, and one whose daemons are gone while its file says otherwise.
    ok(&["stop", "--state", &state]);
    let err = fails(&["bench", "run", &d.target(), "--scale", TINY]);
    assert!(err.contains("is stopped"), "{err}");
    fs::copy(
        d.state().join("deployment.stopped.toml"),
        d.state().join("deployment.toml"),
    )
    .unwrap();
    let err = fails(&["bench", "run", &d.target(), "--scale", TINY]);
    assert!(err.contains("cannot reach the Eddy deployment"), "{err}");
    fs::remove_file(d.state().join("deployment.toml")).unwrap();
}

/// Writes through the library with `--phases write`, lets `damage` alter the kept files
/// through the library (`eddy debug get`/`put`), then expects `--phases read` to fail with
/// `expect` in its message, to print no score, and to clean up.
fn corrupt_through_library(workloads: &str, damage: impl Fn(&LibDeployment), expect: &str) {
    let d = LibDeployment::start();
    let target = d.target();
    let common = ["--scale", TINY, "--workloads", workloads];
    let mut write = vec!["bench", "run", &target, "--phases", "write"];
    write.extend_from_slice(&common);
    ok(&write);
    assert!(!d.absent("/eddy-bench.work/manifest.json"));
    let mut other = vec!["bench", "run", &target, "--phases", "read", "--procs", "3"];
    other.extend_from_slice(&common);
    assert!(fails(&other).contains("other options"));

    damage(&d);
    let mut read = vec!["bench", "run", &target, "--phases", "read"];
    read.extend_from_slice(&common);
    let out = eddy(&read);
    assert!(
        !out.status.success(),
        "corrupted data was accepted:\n{}",
        text(&out)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(expect), "expected {expect:?} in:\n{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("score"));
    assert!(
        d.absent("/eddy-bench.work"),
        "work directory left behind after the failure"
    );
}

#[test]
fn a_byte_flipped_through_the_library_fails_the_ior_read() {
    corrupt_through_library(
        "ior-easy",
        |d| {
            let path = "/eddy-bench.work/ior-easy/file.1";
            let mut data = d.get(path);
            data[12345] ^= 0x01;
            d.put(path, &data);
        },
        "data mismatch at file offset 12345",
    );
}

#[test]
fn a_shared_file_damaged_through_the_library_fails_the_read() {
    corrupt_through_library(
        "ior-hard",
        |d| {
            let path = "/eddy-bench.work/ior-hard/shared";
            let mut data = d.get(path);
            data[47008 + 7] ^= 0x80;
            d.put(path, &data);
        },
        "verification failed",
    );
}

#[test]
fn a_file_truncated_through_the_library_fails_the_mdtest_stat() {
    corrupt_through_library(
        "mdtest-hard",
        |d| {
            let path = "/eddy-bench.work/mdt-hard/f.1.3";
            let data = d.get(path);
            d.put(path, &data[..100]);
        },
        "expected a regular file of 3901 bytes",
    );
}

#[test]
fn every_workload_on_an_eddy_mount() {
    let d = Deployment::start();
    let mnt = d.mount();
    // From here on, a failure is a failure: the mount works, so the benchmark must.
    let json = d.dir.path().join("eddy.json");
    ok(&[
        "bench",
        "run",
        s(&mnt),
        "--scale",
        TINY,
        "--procs",
        "3",
        "--label",
        "eddy",
        "--json",
        s(&json),
    ]);
    let v = load(&json);
    assert_eq!(phases(&v, 0).len(), 15);
    assert!(empty(&mnt), "work directory left on the mount");
    // Verification works through the mount too.
    ok(&[
        "bench",
        "run",
        s(&mnt),
        "--scale",
        TINY,
        "--workloads",
        "ior-hard",
        "--phases",
        "write",
    ]);
    flip_byte(&mnt.join("eddy-bench.work/ior-hard/shared"), 100);
    let err = fails(&[
        "bench",
        "run",
        s(&mnt),
        "--scale",
        TINY,
        "--workloads",
        "ior-hard",
        "--phases",
        "read",
    ]);
    assert!(err.contains("verification failed"), "{err}");
    assert!(empty(&mnt));
}

#[test]
fn suite_measures_eddy_and_raw_in_one_run() {
    // The suite mounts Eddy itself.
    eddy_testkit::require::fuse();
    let storage = tempfile::tempdir().unwrap();
    let json = storage.path().join("suite.json");
    let plot = storage.path().join("suite.png");
    let out = ok(&[
        "bench",
        "suite",
        "--storage",
        s(storage.path()),
        "--scale",
        TINY,
        "--json",
        s(&json),
        "--plot",
        s(&plot),
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("eddy, eddy-lib vs raw") && table.contains("ratio"),
        "{table}"
    );
    let header = table
        .lines()
        .find(|l| l.contains("eddy-lib/raw"))
        .unwrap_or_else(|| panic!("no ratio header:\n{table}"));
    let cols: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(
        cols,
        [
            "phase",
            "raw",
            "eddy",
            "eddy-lib",
            "eddy/raw",
            "eddy-lib/raw",
            "unit"
        ]
    );
    let v = load(&json);
    assert_eq!(v["runs"].as_array().unwrap().len(), 3);
    assert_eq!(v["runs"][0]["label"], "raw");
    assert_eq!(v["runs"][1]["label"], "eddy");
    assert_eq!(v["runs"][2]["label"], "eddy-lib");
    let lib_target = v["runs"][2]["target"].as_str().unwrap();
    assert!(lib_target.starts_with("eddy:"), "{lib_target}");
    assert_eq!(phases(&v, 0), phases(&v, 1));
    assert_eq!(phases(&v, 0), phases(&v, 2));
    assert!(fs::read(&plot).unwrap().starts_with(b"\x89PNG"));
    // compare on a suite file: the mount (run 2) against raw (run 1).
    let cmp = ok(&["bench", "compare", s(&json)]);
    assert!(String::from_utf8_lossy(&cmp.stdout).contains("eddy vs raw"));
    // Everything the suite created is gone, the plot and JSON aside.
    let mut left: Vec<String> = fs::read_dir(storage.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["suite.json", "suite.png"]);
}

/// Runs `eddy bench suite` with `flags` on ior-easy and mdtest-easy at the tiny scale; its
/// table and the JSON of its runs.
fn small_suite(flags: &[&str]) -> (String, serde_json::Value) {
    // The suite mounts Eddy itself.
    eddy_testkit::require::fuse();
    let storage = tempfile::tempdir().unwrap();
    let json = storage.path().join("suite.json");
    let mut args = vec!["bench", "suite"];
    args.extend_from_slice(flags);
    args.extend([
        "--storage",
        s(storage.path()),
        "--scale",
        TINY,
        "--workloads",
        "ior-easy,mdtest-easy",
        "--json",
        s(&json),
    ]);
    let out = ok(&args);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        load(&json),
    )
}

fn run_labels(v: &serde_json::Value) -> Vec<&str> {
    v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["label"].as_str().unwrap())
        .collect()
}

#[test]
fn suite_without_the_library_run() {
    let (table, v) = small_suite(&["--no-client"]);
    assert!(
        table.contains("eddy vs raw") && !table.contains("eddy-lib"),
        "{table}"
    );
    assert_eq!(run_labels(&v), ["raw", "eddy"]);
}

/// `--preload` adds a run whose workers reach the deployment with plain file calls through
/// libeddy_preload.so (no FUSE, no library calls of their own), verified like the others.
#[test]
fn suite_with_the_preload_run() {
    let (table, v) = small_suite(&["--preload"]);
    assert!(
        table.contains("eddy, eddy-lib, eddy-preload vs raw"),
        "{table}"
    );
    assert_eq!(run_labels(&v), ["raw", "eddy", "eddy-lib", "eddy-preload"]);
    let preload = &v["runs"][3];
    assert!(
        preload.to_string().contains("mdtest-easy-write"),
        "the preload run has no mdtest phase: {preload}"
    );
}

/// `--wire clear,mac,sealed`: one deployment per setting beside one raw run, each way in
/// compared with raw and, under mac and sealed, with itself under clear.
#[test]
fn suite_under_each_wire_setting() {
    let (table, v) = small_suite(&["--wire=clear,mac,sealed"]);
    assert_eq!(
        run_labels(&v),
        [
            "raw",
            "eddy[clear]",
            "eddy-lib[clear]",
            "eddy[mac]",
            "eddy-lib[mac]",
            "eddy[sealed]",
            "eddy-lib[sealed]"
        ]
    );
    for header in [
        "eddy[mac], eddy[sealed] vs eddy[clear]",
        "eddy-lib[mac], eddy-lib[sealed] vs eddy-lib[clear]",
    ] {
        assert!(table.contains(header), "no {header:?} in\n{table}");
    }
    for run in v["runs"].as_array().unwrap() {
        assert!(
            run.to_string().contains("ior-easy-write"),
            "a run without ior-easy: {run}"
        );
    }
}

/// `--variant NAME=FILE` and `--rounds N`: one deployment per configuration each round (here
/// counting on, and off as only a cost measurement turns it), each figure the median of the
/// rounds, every way in under `off` compared with itself under `on`.
#[test]
fn suite_of_config_variants_over_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let off = dir.path().join("nocount.toml");
    fs::write(&off, "stats_counting = false\n").unwrap();
    let variant = format!("--variant=off={}", s(&off));
    let (table, v) = small_suite(&["--variant=on=", &variant, "--rounds", "2"]);
    assert_eq!(
        run_labels(&v),
        [
            "raw",
            "eddy[on]",
            "eddy-lib[on]",
            "eddy[off]",
            "eddy-lib[off]"
        ]
    );
    for header in [
        "eddy[off] vs eddy[on]",
        "eddy-lib[off] vs eddy-lib[on]",
        "eddy[off] / eddy[on] paired by round (median of 2 rounds",
        "eddy-lib[off] / eddy-lib[on] paired by round (median of 2 rounds",
    ] {
        assert!(table.contains(header), "no {header:?} in\n{table}");
    }
    let err = fails(&["bench", "suite", "--variant", "nofile", "--scale", TINY]);
    assert!(err.contains("NAME=FILE"), "{err}");
}

#[test]
fn ctrl_c_stops_the_workers_and_cleans_up() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path();
    let mut child = Command::new(eddy_bin())
        .args([
            "bench",
            "run",
            s(dir),
            "--workloads",
            "mdtest-easy",
            "--md-easy-files",
            "200000",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the create phase is under way.
    let first = dir.join("eddy-bench.work/mdt-easy/r0/f0");
    eddy_testkit::eventually::eventually("the create phase starts", || {
        assert!(
            child.try_wait().unwrap().is_none(),
            "eddy bench exited early"
        );
        first.exists().then_some(())
    });
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("interrupted"), "{err}");
    assert!(empty(dir), "work directory left behind after Ctrl-C");
}

#[test]
fn stonewall_stops_creation_and_every_rank_reaches_the_same_count() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("t");
    fs::create_dir(&dir).unwrap();
    let json = base.path().join("w.json");
    // Far more files than can be made before the stonewall (and few enough that the free-space
    // check, 8 KiB a file, passes on a crowded disk); 3 ranks.
    let opts = [
        "--workloads",
        "mdtest-easy",
        "--md-easy-files",
        "200000",
        "--procs",
        "3",
        "--stonewall",
        "0.05",
    ];
    let mut write = vec![
        "bench",
        "run",
        s(&dir),
        "--phases",
        "write",
        "--json",
        s(&json),
    ];
    write.extend_from_slice(&opts);
    ok(&write);
    let created = load(&json)["runs"][0]["phases"][0]["ops"].as_u64().unwrap();
    assert!(created > 0 && created < 600_000, "created {created}");
    assert_eq!(
        created % 3,
        0,
        "ranks did not continue to the same count: {created}"
    );
    // The read run takes the reached count from the manifest: stat and delete see every file.
    let mut read = vec![
        "bench",
        "run",
        s(&dir),
        "--phases",
        "read",
        "--json",
        s(&json),
    ];
    read.extend_from_slice(&opts);
    ok(&read);
    let v = load(&json);
    assert_eq!(phases(&v, 0), ["mdtest-easy-stat", "mdtest-easy-delete"]);
    for p in v["runs"][0]["phases"].as_array().unwrap() {
        assert_eq!(p["ops"].as_u64().unwrap(), created, "{p}");
    }
    assert!(empty(&dir));
}

#[test]
fn workloads_run_as_openmpi_ranks() {
    eddy_testkit::require::mpirun();
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("target");
    fs::create_dir(&work).unwrap();
    let json = dir.path().join("mpi.json");
    // Under --mpi the workers get no --rank: they must take it from OpenMPI's environment,
    // so a run that completes proves mpirun started them as ranks 0 and 1.
    let out = Command::new(eddy_bin())
        .args([
            "bench",
            "run",
            s(&work),
            "--mpi",
            "--procs",
            "2",
            "--scale",
            TINY,
        ])
        .args(["--json", s(&json)])
        // mpirun refuses to run as root unless told it may (the tests run as root in CI).
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run eddy");
    assert!(
        out.status.success(),
        "eddy bench --mpi failed:\n{}",
        text(&out)
    );
    let v = load(&json);
    assert_eq!(v["runs"][0]["procs"], 2);
    let got = phases(&v, 0);
    for phase in [
        "ior-easy-write",
        "ior-hard-read",
        "mdtest-hard-delete",
        "find",
    ] {
        assert!(
            got.iter().any(|p| p == phase),
            "{phase} missing from {got:?}"
        );
    }
    assert!(empty(&work), "work directory left behind");
}
