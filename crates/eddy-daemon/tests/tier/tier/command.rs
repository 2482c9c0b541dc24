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

/// The pids of a local deployment's daemons (its state directory's `pids`).
fn daemon_pids(state: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(state.join("pids")).expect("the state's pids");
    let pids: Vec<String> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    assert_eq!(pids.len(), 3, "{text}");
    pids
}

/// Sends `signal` (e.g. "STOP", "CONT") to the processes `pids`.
fn signal(signal: &str, pids: &[String]) {
    run_ok(Command::new("kill").arg(format!("-{signal}")).args(pids));
}

/// The command line of process `pid` (arguments joined by spaces), None once it is gone or
/// a zombie.
fn command_line(pid: &str) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = stat[stat.rfind(')')? + 1..].split_whitespace().next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(String::from_utf8_lossy(&raw).replace('\0', " "))
}

/// Kills a process the test stopped when the test ends, however it ends.
struct KillOnDrop(String);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if command_line(&self.0).is_some() {
            let _ = Command::new("kill").args(["-KILL", &self.0]).status();
        }
    }
}

/// The pid `eddy prefetch` says its background process has ("... (pid N) ...").
fn background_pid(out: &str) -> String {
    let after = out
        .split("(pid ")
        .nth(1)
        .unwrap_or_else(|| panic!("no pid in: {out}"));
    after[..after.find(')').expect("pid)")].to_string()
}

/// `eddy prefetch /in` run while the daemons of `state` are stopped (SIGSTOP), so that
/// nothing is fetched before it returns: the daemons (still stopped), the command's output
/// and the pid of its background process.
fn prefetch_held(state: &Path) -> (Vec<String>, std::process::Output, String) {
    let daemons = daemon_pids(state);
    signal("STOP", &daemons);
    let out = cli::eddy(&["prefetch", "--state", s(state), "/in"]);
    let pid = background_pid(&String::from_utf8_lossy(&out.stdout));
    (daemons, out, pid)
}

/// A backend tree of `files` files of 200 KiB + i bytes in nested directories under `in`;
/// returns the files (relative paths) and their chunks of 64 KiB.
fn backend_tree(b: &Path, files: usize) -> (Vec<(String, Vec<u8>)>, u64) {
    let mut made = Vec::new();
    let mut chunks = 0;
    for i in 0..files {
        let rel = format!("in/d{}/e{}/f{i}", i % 3, i % 2);
        let data = random_bytes(200 * KIB + i);
        std::fs::create_dir_all(b.join(&rel).parent().unwrap()).unwrap();
        std::fs::write(b.join(&rel), &data).unwrap();
        chunks += data.len().div_ceil(64 * KIB) as u64;
        made.push((rel, data));
    }
    (made, chunks)
}

/// `eddy prefetch` of a tree returns while its fetch goes on in a process of its own (the
/// daemons are held stopped meanwhile, so nothing can be fetched before it returns); the
/// fetch then caches every chunk of the tree, each fetched once, its results in the state's
/// prefetch.log, and reading the tree through the mount afterwards fetches nothing.
#[test]
fn cli_prefetch_returns_at_once_and_caches_the_tree() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    let (tree, chunks) = backend_tree(b, 24);
    let root = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let state = root.path();
    let _stop = cli_start(state, b, mnt.path());
    assert_eq!(status_total(state, "fetches"), 0);

    let (daemons, out, pid) = prefetch_held(state);
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    // The fetch has not happened (its daemons are stopped) and its process runs.
    let cmd = command_line(&pid);
    signal("CONT", &daemons);
    assert!(out.status.success(), "{}", cli::text(&out));
    assert!(line.contains("in the background"), "{line}");
    let cmd = cmd.unwrap_or_else(|| panic!("no background process {pid} after: {line}"));
    assert!(
        cmd.contains("prefetch --background --state") && cmd.ends_with("-- /in "),
        "{cmd}"
    );

    eddy_testkit::eventually::eventually(
        format!("the background prefetch {pid} caches the tree's {chunks} chunks"),
        || (status_total(state, "cached_chunks") == chunks).then_some(()),
    );
    eddy_testkit::eventually::eventually(format!("prefetch {pid} ends"), || {
        command_line(&pid).is_none().then_some(())
    });
    assert_eq!(status_total(state, "fetches"), chunks, "each chunk once");
    assert_eq!(
        status_total(state, "pinned_bytes"),
        0,
        "prefetch pins nothing"
    );
    let log = std::fs::read_to_string(state.join("prefetch.log")).unwrap();
    let mode = std::fs::metadata(state.join("prefetch.log"))
        .unwrap()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the log is private");
    assert!(
        log.contains(&format!("eddy: prefetch {pid}: prefetched 24 files")),
        "{log}"
    );
    for (rel, data) in &tree {
        same(&std::fs::read(mnt.path().join(rel)).unwrap(), data, rel);
    }
    assert_eq!(
        status_total(state, "fetches"),
        chunks,
        "reading the prefetched tree fetched again"
    );
}

/// `eddy prefetch --wait --json` fetches before it returns, with one result per file, and
/// fails naming a path that does not exist; the files that exist are cached all the same.
#[test]
fn cli_prefetch_wait_reports_each_file_and_fails_for_a_missing_path() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    let (tree, chunks) = backend_tree(b, 5);
    let root = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let state = root.path();
    let _stop = cli_start(state, b, mnt.path());

    let local = mnt.path().join("in");
    let out = cli::eddy(&[
        "prefetch",
        "--wait",
        "--json",
        "--state",
        s(state),
        s(&local),
        "/in/missing",
    ]);
    assert!(!out.status.success(), "{}", cli::text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("prefetch failed for 1 file: /in/missing"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let files = json_files(&v);
    assert_eq!(files.len(), tree.len() + 1, "{v}");
    for (rel, data) in &tree {
        assert_eq!(
            files.get(&format!("/{rel}")),
            Some(&(data.len() as u64, None)),
            "{v}"
        );
    }
    let missing = &files["/in/missing"];
    assert!(
        missing.1.as_deref().is_some_and(|e| e.contains("ENOENT")),
        "{v}"
    );
    assert_eq!(v["failed"], 1, "{v}");
    // Fetched before the command returned.
    assert_eq!(status_total(state, "cached_chunks"), chunks);
    assert_eq!(status_total(state, "fetches"), chunks);
    // Plain lines without --json; nothing left to fetch.
    let out = eddy_ok(&["prefetch", "--wait", "--state", s(state), "/in/d0"]);
    assert!(out.contains("eddy: prefetched 2 files, 0 B"), "{out}");
    assert_eq!(status_total(state, "fetches"), chunks);
}

/// `eddy stop` ends the background prefetches of its deployment, even one that does not
/// answer SIGTERM (stopped): nothing of it is left after the stop.
#[test]
fn cli_stop_leaves_no_prefetch_behind() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    backend_tree(b, 6);
    let root = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let state = root.path();
    let stopper = cli_start(state, b, mnt.path());
    // Held before it can fetch: the daemons, then the prefetch itself, are stopped.
    let (daemons, out, pid) = prefetch_held(state);
    let _kill = KillOnDrop(pid.clone());
    let running = command_line(&pid).is_some();
    signal("STOP", std::slice::from_ref(&pid));
    signal("CONT", &daemons);
    assert!(out.status.success(), "{}", cli::text(&out));
    assert!(running, "no background prefetch {pid}");

    let said = eddy_ok(&["stop", "--state", s(state)]);
    assert!(
        said.contains(&format!("ended the background prefetch (pid {pid})")),
        "{said}"
    );
    assert_eq!(command_line(&pid), None, "prefetch {pid} outlived the stop");
    drop(stopper);
}

/// A prefetch gives up once its deployment file is gone (a stop on another host, a teardown
/// that removed the job's directory), even while its requests wait on daemons that do not
/// answer: it ends, saying so in its log.
#[test]
fn a_prefetch_gives_up_once_its_deployment_is_gone() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    backend_tree(b, 6);
    let root = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let state = root.path();
    let stopper = cli_start(state, b, mnt.path());
    let (daemons, out, pid) = prefetch_held(state);
    let _kill = KillOnDrop(pid.clone());
    // Its fetch has begun: it loaded the deployment and waits on a daemon's socket.
    eddy_testkit::eventually::eventually(format!("prefetch {pid} connects"), || {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
        fds.flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .any(|l| l.to_string_lossy().starts_with("socket:"))
            .then_some(())
    });
    let (dep, away) = (state.join("deployment.toml"), state.join("away.toml"));
    std::fs::rename(&dep, &away).unwrap();
    let ended = eddy_testkit::eventually::poll_for(Duration::from_secs(30), || {
        command_line(&pid).is_none().then_some(())
    });
    std::fs::rename(&away, &dep).unwrap();
    signal("CONT", &daemons);
    assert!(out.status.success(), "{}", cli::text(&out));
    assert!(
        ended.is_some(),
        "prefetch {pid} outlived its deployment file"
    );
    let log = std::fs::read_to_string(state.join("prefetch.log")).unwrap();
    assert!(
        log.contains(&format!(
            "eddy: prefetch {pid}: prefetch did not complete: the deployment stopped"
        )),
        "{log}"
    );
    drop(stopper);
}
