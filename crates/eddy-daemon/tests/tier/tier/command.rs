//! The tier through the eddy command: stage-in, stage-out and stop.

use super::*;

/// Runs `eddy ARGS`, which must succeed; returns its stdout.
fn eddy_ok(args: &[&str]) -> String {
    String::from_utf8_lossy(&cli::ok(args).stdout).into_owned()
}

/// Runs `eddy ARGS --json`, which must succeed; returns the parsed output.
fn eddy_json(args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = eddy_ok(&all);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("eddy {args:?} --json: {e}: {out}"))
}

/// A tier figure summed over the daemons of `eddy status --json`, which must all be up.
fn status_total(state: &Path, field: &str) -> u64 {
    let v = eddy_json(&["status", "--state", s(state)]);
    let daemons = v["daemons"].as_array().expect("daemons");
    assert_eq!(daemons.len(), 3, "{v}");
    daemons
        .iter()
        .map(|d| {
            assert_eq!(d["up"], true, "{d}");
            d["tier"][field]
                .as_u64()
                .unwrap_or_else(|| panic!("no tier.{field}: {d}"))
        })
        .sum()
}

/// The per-file results of a `--json` stage-in or stage-out, by path: (bytes, error).
fn json_files(v: &serde_json::Value) -> BTreeMap<String, (u64, Option<String>)> {
    v["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files: {v}"))
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                (
                    f["bytes"].as_u64().unwrap(),
                    f["error"].as_str().map(str::to_string),
                ),
            )
        })
        .collect()
}

/// Stops a deployment started by `eddy start` when the test ends, however it ends.
struct Stopper(PathBuf);

impl Drop for Stopper {
    fn drop(&mut self) {
        let _ = cli::eddy(&["stop", "--discard", "--state", s(&self.0)]);
    }
}

/// Starts 3 local daemons linked to `backend` (64 KiB chunks), mounted at `mnt`.
fn cli_start(state: &Path, backend: &Path, mnt: &Path) -> Stopper {
    eddy_ok(&[
        "start",
        "--local",
        "3",
        "--root",
        s(state),
        "--backend",
        s(backend),
        "--chunk-size",
        "65536",
        "--mount",
        s(mnt),
    ]);
    let stopper = Stopper(state.to_path_buf());
    assert!(
        eddy_testkit::is_mountpoint(mnt),
        "eddy start --mount did not mount"
    );
    stopper
}

/// `eddy start --backend --mount`, `stage-in --pin` (of a path under the mount), `unpin`,
/// `stage-out --json`, and `stop`, which writes dirty data back first.
#[test]
fn cli_stage_in_stage_out_and_stop_writes_back() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    std::fs::create_dir(b.join("in")).unwrap();
    let input = random_bytes(3 * MIB + 5);
    std::fs::write(b.join("in/data"), &input).unwrap();
    let root = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let state = root.path();
    let _stop = cli_start(state, b, mnt.path());

    // stage-in --pin, named by its path under the mount.
    let local = mnt.path().join("in");
    let v = eddy_json(&["stage-in", "--pin", "--state", s(state), s(&local)]);
    let files = json_files(&v);
    assert_eq!(
        files.get("/in/data"),
        Some(&(input.len() as u64, None)),
        "{v}"
    );
    assert_eq!(v["failed"], 0, "{v}");
    assert_eq!(status_total(state, "pinned_bytes"), input.len() as u64);
    assert_eq!(status_total(state, "cached_bytes"), input.len() as u64);
    let fetches = status_total(state, "fetches");
    same(
        &std::fs::read(mnt.path().join("in/data")).unwrap(),
        &input,
        "in/data through the mount",
    );
    assert_eq!(
        status_total(state, "fetches"),
        fetches,
        "reading staged-in data fetched again"
    );
    let out = eddy_ok(&["unpin", "--state", s(state), "/in"]);
    let chunks = input.len().div_ceil(64 * KIB);
    assert!(out.contains(&format!(" {chunks} ")), "unpin: {out}");
    assert_eq!(status_total(state, "pinned_bytes"), 0);

    // Written through the mount, then stage-out --json.
    let r1 = random_bytes(MIB + 3);
    std::fs::create_dir(mnt.path().join("out")).unwrap();
    std::fs::write(mnt.path().join("out/r1"), &r1).unwrap();
    std::fs::write(mnt.path().join("out/r2"), b"second").unwrap();
    let v = eddy_json(&["stage-out", "--state", s(state)]);
    let files = json_files(&v);
    assert_eq!(files.get("/out/r1"), Some(&(r1.len() as u64, None)), "{v}");
    assert_eq!(files.get("/out/r2"), Some(&(6, None)), "{v}");
    assert_eq!(v["failed"], 0, "{v}");
    same(
        &std::fs::read(b.join("out/r1")).unwrap(),
        &r1,
        "backend out/r1",
    );
    assert_eq!(std::fs::read(b.join("out/r2")).unwrap(), b"second");
    assert_eq!(status_total(state, "dirty_bytes"), 0);

    // stop writes back what is dirty, then stops.
    let last = random_bytes(200_000);
    std::fs::write(mnt.path().join("out/last"), &last).unwrap();
    std::fs::write(mnt.path().join("in/data"), b"replaced").unwrap();
    eddy_ok(&["stop", "--state", s(state)]);
    same(
        &std::fs::read(b.join("out/last")).unwrap(),
        &last,
        "written back by stop",
    );
    assert_eq!(std::fs::read(b.join("in/data")).unwrap(), b"replaced");
    assert!(
        !eddy_testkit::is_mountpoint(mnt.path()),
        "stop left the mount"
    );
    assert!(
        !cli::eddy(&["status", "--state", s(state)]).status.success(),
        "daemons still answer after stop"
    );
}

/// With a read-only backend, `eddy stop` fails naming the file it cannot write back and
/// keeps the daemons and the mount; `eddy stop --discard` then stops them.
#[test]
fn cli_stop_keeps_the_daemons_when_it_cannot_write_back() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    let root = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let state = root.path();
    let _stop = cli_start(state, b, mnt.path());
    let stuck = random_bytes(100_000);
    std::fs::write(mnt.path().join("stuck"), &stuck).unwrap();
    {
        let _ro = ReadOnly::new(b);
        let err = cli::fails(&["stop", "--state", s(state)]);
        let named = b.join("stuck").display().to_string();
        assert!(err.contains(&named), "stop does not name {named}: {err}");
        assert!(status_total(state, "dirty_bytes") >= stuck.len() as u64);
        assert!(
            eddy_testkit::is_mountpoint(mnt.path()),
            "the failed stop unmounted"
        );
        same(
            &std::fs::read(mnt.path().join("stuck")).unwrap(),
            &stuck,
            "data kept after the failed stop",
        );
        eddy_ok(&["stop", "--discard", "--state", s(state)]);
        assert!(!eddy_testkit::is_mountpoint(mnt.path()));
        assert!(!cli::eddy(&["status", "--state", s(state)]).status.success());
    }
    assert!(
        !b.join("stuck").exists(),
        "discarded data reached the backend"
    );
}
