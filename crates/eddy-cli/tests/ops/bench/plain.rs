//! Workloads on a plain directory: each one, ior's modes, damage found by the reads, bad targets, JSON, comparison, plots, scaling.

use super::eddy::is_mountpoint;
use super::*;

#[test]
fn each_workload_runs_and_cleans_up_on_a_plain_directory() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("target");
    fs::create_dir(&dir).unwrap();
    for (workloads, extra, want) in WORKLOAD_CASES {
        let got = run_workloads(&dir, workloads, extra);
        assert_phases(workloads, &got, want);
    }
}

/// `eddy bench run ... | head`: standard output and standard error both closed before the
/// command writes (EPIPE): the run ends successfully, its results lost, and it leaves its
/// work directory removed, as with a reader.
#[test]
fn a_run_into_closed_pipes_succeeds_and_cleans_up() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("target");
    fs::create_dir(&dir).unwrap();
    for json in [false, true] {
        let (out_r, out_w) = std::io::pipe().unwrap();
        let (err_r, err_w) = std::io::pipe().unwrap();
        drop(out_r);
        drop(err_r);
        let mut cmd = Command::new(eddy_bin());
        cmd.args(["bench", "run", s(&dir), "--procs", "1", "--workloads"])
            .args(["mdtest-easy", "--scale", TINY]);
        if json {
            cmd.args(["--json", "-"]);
        }
        let status = cmd
            .stdin(Stdio::null())
            .stdout(out_w)
            .stderr(err_w)
            .status()
            .expect("run eddy bench");
        assert!(
            status.success(),
            "eddy bench (json {json}) into closed pipes: {status}"
        );
        assert!(empty(&dir), "eddy bench left files in {dir:?}");
    }
}

#[test]
fn ior_modes_n1_nn_and_1_1() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("target");
    fs::create_dir(&dir).unwrap();
    for (easy, hard) in [("n-1", "n-n"), ("1-1", "1-1"), ("n-n", "n-1")] {
        let got = run_workloads(
            &dir,
            "ior-easy,ior-hard,rnd4k",
            &[
                "--procs",
                "3",
                "--easy-mode",
                easy,
                "--hard-mode",
                hard,
                "--easy-xfer",
                "65536",
            ],
        );
        assert_eq!(
            got,
            [
                "ior-easy-write",
                "ior-hard-write",
                "ior-easy-read",
                "rnd4k-read",
                "ior-hard-read"
            ]
        );
    }
}

/// Writes with `--phases write`, lets `damage` alter the kept files, then expects
/// `--phases read` to fail with `expect` in its message, to print no score, and to clean up.
fn corrupt_between_phases(workloads: &str, damage: impl Fn(&Path), expect: &str) {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path();
    let common = ["--scale", TINY, "--workloads", workloads];
    let mut write = vec!["bench", "run", s(dir), "--phases", "write"];
    write.extend_from_slice(&common);
    ok(&write);
    let work = dir.join("eddy-bench.work");
    assert!(work.is_dir(), "--phases write must keep its files");
    // A read run with other options is refused before reading anything.
    let mut other = vec!["bench", "run", s(dir), "--phases", "read", "--procs", "3"];
    other.extend_from_slice(&common);
    assert!(fails(&other).contains("other options"));
    assert!(work.is_dir());

    damage(&work);
    let mut read = vec!["bench", "run", s(dir), "--phases", "read"];
    read.extend_from_slice(&common);
    let out = eddy(&read);
    assert!(
        !out.status.success(),
        "corrupted data was accepted:\n{}",
        text(&out)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(expect), "expected {expect:?} in:\n{err}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("score"),
        "a score was printed:\n{}",
        text(&out)
    );
    assert!(
        !work.exists(),
        "work directory left behind after the failure"
    );
}

pub(super) fn flip_byte(path: &Path, offset: u64) {
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    f.write_all_at(&[b[0] ^ 0x01], offset).unwrap();
}

#[test]
fn a_flipped_byte_fails_the_ior_read() {
    corrupt_between_phases(
        "ior-easy",
        |work| flip_byte(&work.join("ior-easy/file.1"), 12345),
        "data mismatch at file offset 12345",
    );
}

#[test]
fn a_flipped_byte_fails_the_shared_file_read() {
    corrupt_between_phases(
        "ior-hard",
        |work| flip_byte(&work.join("ior-hard/shared"), 47008 + 7),
        "verification failed",
    );
}

#[test]
fn a_truncated_small_file_fails_the_mdtest_read() {
    corrupt_between_phases(
        "mdtest-hard",
        |work| {
            let f = fs::OpenOptions::new()
                .write(true)
                .open(work.join("mdt-hard/f.1.3"))
                .unwrap();
            f.set_len(100).unwrap();
        },
        "expected a regular file of 3901 bytes",
    );
}

#[test]
fn a_missing_entry_fails_find() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path();
    let args = [
        "--workloads",
        "mdtest-hard,find",
        "--md-hard-files",
        "150",
        "--procs",
        "2",
    ];
    let mut write = vec!["bench", "run", s(dir), "--phases", "write"];
    write.extend_from_slice(&args);
    ok(&write);
    // f.0.101 matches find's criteria (name contains "01", 3901 bytes, new).
    fs::remove_file(dir.join("eddy-bench.work/mdt-hard/f.0.101")).unwrap();
    let mut find = vec!["bench", "run", s(dir), "--phases", "find"];
    find.extend_from_slice(&args);
    let err = fails(&find);
    assert!(err.contains("find matched"), "{err}");
}

/// A directory nobody may write into: mode 0555 for a user; for root, whom mode bits do not
/// stop, a read-only tmpfs mounted on it (unmounted on drop).
struct ReadOnlyDir(Option<PathBuf>);

impl ReadOnlyDir {
    fn make(dir: &Path) -> ReadOnlyDir {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(dir, fs::Permissions::from_mode(0o555)).unwrap();
            return ReadOnlyDir(None);
        }
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(st.success(), "mount a read-only tmpfs on {}", dir.display());
        ReadOnlyDir(Some(dir.to_owned()))
    }
}

impl Drop for ReadOnlyDir {
    fn drop(&mut self) {
        if let Some(dir) = &self.0 {
            let _ = Command::new("umount").arg(dir).status();
        }
    }
}

#[test]
fn bad_targets_give_clear_errors() {
    let base = tempfile::tempdir().unwrap();
    let missing = base.path().join("nope");
    let err = fails(&["bench", "run", s(&missing), "--scale", TINY]);
    assert!(err.contains("does not exist"), "{err}");

    let file = base.path().join("file");
    fs::write(&file, b"x").unwrap();
    let err = fails(&["bench", "run", s(&file), "--scale", TINY]);
    assert!(err.contains("not a directory"), "{err}");

    let err = fails(&[
        "bench",
        "run",
        s(base.path()),
        "--easy-bytes",
        "1000000000000000000",
    ]);
    assert!(err.contains("MiB free") && err.contains("--scale"), "{err}");

    let ro = base.path().join("ro");
    fs::create_dir(&ro).unwrap();
    let _ro = ReadOnlyDir::make(&ro);
    let err = fails(&["bench", "run", s(&ro), "--scale", TINY]);
    assert!(err.contains("not writable"), "{err}");

    let err = fails(&["bench", "run", s(base.path()), "--phases", "no-such-phase"]);
    assert!(err.contains("unknown phase"), "{err}");
    let err = fails(&[
        "bench",
        "run",
        s(base.path()),
        "--phases",
        "read",
        "--scale",
        TINY,
    ]);
    assert!(err.contains("--phases write"), "{err}");
    // Nothing was created by the failed runs.
    let left: Vec<_> = fs::read_dir(base.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.iter().all(|n| n != "eddy-bench.work"), "{left:?}");
}

#[test]
fn json_compare_and_plots() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("t");
    fs::create_dir(&dir).unwrap();
    let p = |n: &str| base.path().join(n);
    for (label, json, plot) in [("first", "a.json", "a.svg"), ("second", "b.json", "b.png")] {
        ok(&[
            "bench",
            "run",
            s(&dir),
            "--scale",
            TINY,
            "--label",
            label,
            "--json",
            s(&p(json)),
            "--plot",
            s(&p(plot)),
        ]);
    }
    let a = load(&p("a.json"));
    assert_eq!(a["runs"][0]["label"], "first");
    assert_eq!(phases(&a, 0).len(), 15);
    assert!(a["runs"][0]["score"]["score"].as_f64().unwrap() > 0.0);
    assert!(fs::read_to_string(p("a.svg")).unwrap().contains("<svg"));
    assert!(fs::read(p("b.png")).unwrap().starts_with(b"\x89PNG"));

    let out = ok(&[
        "bench",
        "compare",
        s(&p("a.json")),
        s(&p("b.json")),
        "--plot",
        s(&p("c.png")),
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("ratio") && table.contains("ior-hard-read") && table.contains("score"),
        "{table}"
    );
    assert!(fs::read(p("c.png")).unwrap().starts_with(b"\x89PNG"));

    // JSON to stdout: the table moves to stderr and stdout parses.
    let out = ok(&[
        "bench",
        "run",
        s(&dir),
        "--scale",
        TINY,
        "--workloads",
        "mdtest-easy",
        "--json",
        "-",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["runs"][0]["phases"][0]["phase"], "mdtest-easy-write");

    assert!(
        fails(&["bench", "compare", s(&p("a.svg")), s(&p("b.json"))])
            .contains("not an eddy bench result")
    );
    assert!(fails(&["bench", "compare", s(&p("a.json"))]).contains("run 2 is missing"));
}

#[test]
fn scale_runs_each_process_count_and_plots() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("t");
    fs::create_dir(&dir).unwrap();
    let json = base.path().join("s.json");
    let plot = base.path().join("s.svg");
    ok(&[
        "bench",
        "scale",
        s(&dir),
        "--procs-list",
        "1,3",
        "--scale",
        TINY,
        "--workloads",
        "ior-easy,mdtest-easy",
        "--json",
        s(&json),
        "--plot",
        s(&plot),
    ]);
    let v = load(&json);
    let procs: Vec<u64> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["procs"].as_u64().unwrap())
        .collect();
    assert_eq!(procs, [1, 3]);
    assert!(fs::read_to_string(&plot)
        .unwrap()
        .contains("ior-easy-write"));
    assert!(empty(&dir));
}

/// A local deployment started with `eddy start --local 3 --mount`; stopped on drop.
pub(super) struct Deployment {
    pub(super) dir: tempfile::TempDir,
}

impl Deployment {
    pub(super) fn mount(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    /// Starts the deployment and its mount; any failure fails the test.
    pub(super) fn start() -> Deployment {
        eddy_testkit::require::fuse();
        let d = Deployment {
            dir: tempfile::tempdir().unwrap(),
        };
        let p = d.dir.path();
        fs::create_dir(p.join("mnt")).unwrap();
        let out = eddy(&[
            "start",
            "--local",
            "3",
            "--root",
            s(&p.join("root")),
            "--mount",
            s(&p.join("mnt")),
            "--state",
            s(&p.join("state")),
        ]);
        assert!(
            out.status.success(),
            "eddy start --local 3 --mount failed:\n{}",
            text(&out)
        );
        let what = format!("eddy start --mount mounts {}", d.mount().display());
        eddy_testkit::eventually::eventually(what, || is_mountpoint(&d.mount()).then_some(()));
        d
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        let _ = eddy(&["stop", "--state", s(&self.dir.path().join("state"))]);
    }
}
