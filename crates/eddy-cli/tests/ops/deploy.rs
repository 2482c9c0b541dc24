//! `eddy start --local / status / stop / mount` end to end: real eddyd processes started by
//! the real `eddy` binary, each test in its own temporary directory.

use eddy_testkit::cli::{eddy, fails, free_port, ok, s, text};
use eddy_testkit::{eddy_bin, eddyd_bin};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Stops the deployment in `state` when the test ends, whatever happened.
struct StopGuard(PathBuf);

impl Drop for StopGuard {
    fn drop(&mut self) {
        let _ = eddy(&["stop", "--state", s(&self.0)]);
    }
}

/// Starts `n` local daemons with root DIR/root (state there too) and a small chunk size.
fn start_local(dir: &Path, n: u32, extra: &[&str]) -> (PathBuf, StopGuard) {
    let root = dir.join("root");
    let guard = StopGuard(root.clone());
    let n = n.to_string();
    let mut args = vec![
        "start",
        "--local",
        &n,
        "--root",
        s(&root),
        "--chunk-size",
        "65536",
        "--name",
        "t",
    ];
    args.extend_from_slice(extra);
    ok(&args);
    (root, guard)
}

fn status_json(state: &Path) -> (bool, serde_json::Value) {
    let out = eddy(&["status", "--state", s(state), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status --json is not JSON ({e}): {}", text(&out)));
    (out.status.success(), v)
}

fn pids(state: &Path) -> Vec<u32> {
    std::fs::read_to_string(state.join("pids"))
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
        .collect()
}

/// Running (present in /proc and not a zombie).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat[stat.rfind(')').unwrap() + 1..]
                .split_whitespace()
                .next()
                .unwrap()
                .to_string();
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn start_status_stop_local_deployment() {
    let dir = tempfile::tempdir().unwrap();
    let (state, _guard) = start_local(dir.path(), 3, &[]);

    let dep = eddy_config::Deployment::load(&state.join("deployment.toml")).unwrap();
    assert_eq!(dep.name, "t");
    assert_eq!(dep.config.chunk_size, 65536);
    assert_eq!(
        dep.daemons.iter().map(|d| d.id).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    let mut addrs: Vec<&str> = dep.daemons.iter().map(|d| d.addr.as_str()).collect();
    addrs.dedup();
    assert_eq!(addrs.len(), 3, "daemons share an address: {addrs:?}");
    for (i, d) in dep.daemons.iter().enumerate() {
        assert_eq!(d.root, state.join(format!("d{i}")));
        assert!(
            !d.addr.ends_with(":0"),
            "address {} is not the real one",
            d.addr
        );
    }
    assert_eq!(mode(&state.join("deployment.toml")), 0o600);
    assert_eq!(mode(&state.join("secret")), 0o600);
    assert_eq!(
        std::fs::read_to_string(state.join("secret"))
            .unwrap()
            .trim(),
        dep.secret
    );

    let (up, v) = status_json(&state);
    assert!(up, "status failed: {v}");
    let daemons = v["daemons"].as_array().unwrap();
    assert_eq!(daemons.len(), 3);
    for (i, d) in daemons.iter().enumerate() {
        assert_eq!(d["id"], i as u64);
        assert_eq!(d["up"], true, "{d}");
        assert_eq!(d["addr"], dep.daemons[i].addr.as_str());
        assert!(
            d["entries"].as_u64().is_some() && d["uptime_s"].as_u64().is_some(),
            "{d}"
        );
    }
    let table = ok(&["status", "--state", s(&state)]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert_eq!(
        table.lines().filter(|l| l.contains(" up ")).count(),
        3,
        "{table}"
    );

    let procs = pids(&state);
    assert_eq!(procs.len(), 3);
    assert!(procs.iter().all(|&p| alive(p)));
    let out = ok(&["stop", "--state", s(&state)]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("stopped"),
        "{}",
        text(&out)
    );
    // Every daemon acknowledged the shutdown and exited without being signalled.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{}", text(&out));
    assert!(
        procs.iter().all(|&p| !alive(p)),
        "daemons still run after stop"
    );
    assert!(!state.join("deployment.toml").exists());
    assert!(state.join("deployment.stopped.toml").exists());
    assert!(state.join("daemon-0.log").exists(), "logs are kept");

    let out = ok(&["stop", "--state", s(&state)]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("nothing is running"),
        "{}",
        text(&out)
    );
    let err = fails(&["status", "--state", s(&state)]);
    assert!(err.contains("no deployment is running"), "{err}");
}

/// `eddy status | head -c 10`: the reader is gone before the output is written (EPIPE); the
/// command ends quietly and successfully instead of panicking.
#[test]
fn status_into_a_closed_pipe_exits_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let (state, _guard) = start_local(dir.path(), 3, &[]);
    for json in [true, false] {
        let (reader, writer) = std::io::pipe().unwrap();
        // Closed before eddy writes a byte: every write of it fails with EPIPE.
        drop(reader);
        let mut cmd = eddy_testkit::cli::eddy_cmd();
        cmd.args(["status", "--state", s(&state)]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.stdout(writer).output().expect("run eddy status");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.is_empty(),
            "eddy status (json {json}) into a closed pipe: {}, stderr: {stderr}",
            out.status
        );
    }
}

#[test]
fn stop_without_any_deployment_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(&["stop", "--state", s(dir.path())]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("nothing is running"),
        "{}",
        text(&out)
    );
}

#[test]
fn starting_twice_in_one_state_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (state, _guard) = start_local(dir.path(), 3, &[]);
    let before = std::fs::read_to_string(state.join("deployment.toml")).unwrap();
    let err = fails(&["start", "--local", "3", "--root", s(&state)]);
    assert!(
        err.contains("already running") && err.contains("eddy stop"),
        "{err}"
    );
    // The running deployment is untouched.
    assert_eq!(
        std::fs::read_to_string(state.join("deployment.toml")).unwrap(),
        before
    );
    assert!(status_json(&state).0);
}

#[test]
fn a_dead_daemon_shows_as_down_and_stop_still_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let (state, _guard) = start_local(dir.path(), 3, &[]);
    let victim = pids(&state)[1];
    // SAFETY: kill(2) on a daemon this test started.
    unsafe { libc::kill(victim as i32, libc::SIGKILL) };
    eddy_testkit::eventually::eventually("the killed daemon is gone", || {
        (!alive(victim)).then_some(())
    });
    let (up, v) = status_json(&state);
    assert!(!up, "status must fail with a daemon down: {v}");
    let states: Vec<bool> = v["daemons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["up"].as_bool().unwrap())
        .collect();
    assert_eq!(states, [true, false, true]);
    assert!(v["daemons"][1]["error"].as_str().is_some());
    ok(&["stop", "--state", s(&state)]);
    assert!(pids_gone(&state));
}

fn pids_gone(state: &Path) -> bool {
    !state.join("pids").exists() && state.join("deployment.stopped.toml").exists()
}

#[test]
fn bad_arguments_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("r");

    let err = fails(&["start", "--local", "0", "--root", s(&root)]);
    assert!(err.contains("--local 0"), "{err}");

    let err = fails(&["start", "--local", "3"]);
    assert!(err.contains("--root"), "{err}");

    // A regular file in the way: no user, not even root, can create the root below it.
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let bad_root = file.join("root");
    let err = fails(&[
        "start",
        "--local",
        "3",
        "--root",
        s(&bad_root),
        "--state",
        s(&dir.path().join("st")),
    ]);
    assert!(
        err.contains(s(&bad_root)) && err.contains("writable --root"),
        "{err}"
    );

    let err = fails(&[
        "start",
        "--local",
        "3",
        "--root",
        s(&root),
        "--chunk-size",
        "10",
    ]);
    assert!(err.contains("chunk_size"), "{err}");

    let err = fails(&["status"]);
    assert!(err.contains("--state"), "{err}");

    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "# nothing\n").unwrap();
    let err = fails(&["start", "--hosts", s(&hosts), "--root", s(&root)]);
    assert!(err.contains("lists no hosts"), "{err}");

    let missing = dir.path().join("no-such-mnt");
    let err = fails(&[
        "start",
        "--local",
        "1",
        "--root",
        s(&root),
        "--mount",
        s(&missing),
    ]);
    assert!(
        err.contains(s(&missing)) && err.contains("create the directory"),
        "{err}"
    );

    // Arguments are checked before anything is created or started.
    assert!(!root.exists(), "a refused start created {}", root.display());
}

fn is_mounted(mnt: &Path) -> bool {
    let canon = std::fs::canonicalize(mnt).unwrap_or_else(|_| mnt.to_owned());
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .any(|l| l.split_whitespace().nth(4) == Some(canon.to_str().unwrap()))
}

#[test]
fn start_with_mount_serves_files_and_stop_unmounts() {
    eddy_testkit::require::fuse();
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let (state, _guard) = start_local(dir.path(), 3, &["--mount", s(&mnt)]);
    assert!(
        is_mounted(&mnt),
        "{} is not a mount point after start --mount",
        mnt.display()
    );

    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(mnt.join("hello.bin"), &data).unwrap();
    std::fs::create_dir(mnt.join("sub")).unwrap();
    assert_eq!(std::fs::read(mnt.join("hello.bin")).unwrap(), data);
    let mut names: Vec<String> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["hello.bin", "sub"]);
    let ls = Command::new("ls").arg("-l").arg(&mnt).output().unwrap();
    assert!(ls.status.success());
    assert!(String::from_utf8_lossy(&ls.stdout).contains("hello.bin"));

    let mounts = std::fs::read_to_string(state.join("mounts")).unwrap();
    assert!(
        mounts.contains(s(&std::fs::canonicalize(&mnt).unwrap())),
        "{mounts}"
    );
    ok(&["stop", "--state", s(&state)]);
    assert!(!is_mounted(&mnt), "stop left {} mounted", mnt.display());
}

#[test]
fn mount_and_umount_commands() {
    eddy_testkit::require::fuse();
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    let (state, _guard) = start_local(dir.path(), 3, &[]);
    ok(&["mount", "--state", s(&state), s(&mnt)]);
    assert!(is_mounted(&mnt));
    std::fs::write(mnt.join("f"), b"abc").unwrap();
    let err = fails(&["mount", "--state", s(&state), s(&mnt)]);
    assert!(err.contains("already a mount point"), "{err}");
    ok(&["umount", s(&mnt)]);
    assert!(!is_mounted(&mnt));
    let err = fails(&["umount", s(&mnt)]);
    assert!(err.contains("not a FUSE mount point"), "{err}");
    // The data stays in the deployment: mount again and read it.
    ok(&["mount", "--state", s(&state), s(&mnt)]);
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"abc");
    ok(&["stop", "--state", s(&state)]);
    assert!(!is_mounted(&mnt));
}

fn write_script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_daemon_that_dies_at_start_fails_start_with_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("fake-eddyd");
    write_script(&fake, "echo 'disk on fire' >&2\nexit 3");
    let root = dir.path().join("r");
    let out = Command::new(eddy_bin())
        .args(["start", "--local", "2", "--root", s(&root)])
        .env("EDDY_DAEMON_BIN", &fake)
        .env_remove("EDDY_STATE")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("exited") && err.contains("disk on fire"),
        "{err}"
    );
    assert!(
        !root.join("deployment.toml").exists(),
        "a failed start wrote a deployment"
    );
    // Nothing is left to stop.
    let out = ok(&["stop", "--state", s(&root)]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing is running"));
}

#[test]
fn a_failing_launcher_fails_start_with_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "node0 127.0.0.1\n").unwrap();
    let launcher = dir.path().join("launch");
    write_script(&launcher, "echo \"no route to $1\" >&2\nexit 255");
    let state = dir.path().join("state");
    let template = format!("{} {{host}} {{cmd}}", launcher.display());
    let port = free_port().to_string();
    let err = fails(&[
        "start",
        "--hosts",
        s(&hosts),
        "--launcher",
        &template,
        "--root",
        s(&dir.path().join("{host}")),
        "--state",
        s(&state),
        "--listen-port",
        &port,
    ]);
    assert!(
        err.contains("launcher of daemon 0 on node0") && err.contains("no route to node0"),
        "{err}"
    );
    assert!(!state.join("deployment.toml").exists());

    let err = fails(&[
        "start",
        "--local",
        "1",
        "--root",
        s(dir.path()),
        "--launcher",
        "x {cmd}",
    ]);
    assert!(
        err.contains("--launcher") && err.contains("--local"),
        "{err}"
    );
}

#[test]
fn slurm_start_outside_an_allocation_names_the_missing_variable() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(eddy_bin())
        .args(["start", "--slurm", "--root", s(dir.path())])
        .env("EDDY_DAEMON_BIN", eddyd_bin())
        .env_remove("SLURM_JOB_NODELIST")
        .env_remove("EDDY_STATE")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("SLURM_JOB_NODELIST"), "{err}");
    assert!(!dir.path().join("deployment.toml").exists());
}

/// `eddy start --replicas 2`: the deployment file carries R, the daemons copy metadata to
/// each other (a file made through a mount is listed after its first owner is killed), and
/// `eddy status` says healthy, then degraded naming the daemon down. More copies than
/// daemons is refused before anything starts.
#[test]
fn replicas_are_started_and_status_tells_healthy_from_degraded() {
    let dir = tempfile::tempdir().unwrap();
    let err = fails(&[
        "start",
        "--local",
        "2",
        "--root",
        s(&dir.path().join("r0")),
        "--replicas",
        "3",
    ]);
    assert!(err.contains("--replicas 3"), "{err}");

    let (state, _guard) = start_local(dir.path(), 3, &["--replicas", "2"]);
    let dep = eddy_config::Deployment::load(&state.join("deployment.toml")).unwrap();
    assert_eq!(dep.config.replicas, 2);
    let (up, v) = status_json(&state);
    assert!(up, "status failed: {v}");
    assert_eq!(v["replicas"], 2);
    assert_eq!(v["health"], "healthy");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = eddy_client::Client::connect(dep.clone()).await.unwrap();
        let me = eddy_client::Creds::root();
        for i in 0..6 {
            let f = c.create(&format!("/f{i}"), 0o644, true, me).await.unwrap();
            c.pwrite(&f, 0, b"two copies").await.unwrap();
            c.close(&f).await.unwrap();
        }
    });
    let victim = pids(&state)[1];
    // SAFETY: plain kill(2) of a daemon this test started.
    unsafe { libc::kill(victim as i32, libc::SIGKILL) };
    eddy_testkit::eventually::eventually("the killed daemon is gone", || {
        (!alive(victim)).then_some(())
    });
    let (up, v) = status_json(&state);
    assert!(!up, "status succeeded with a daemon down: {v}");
    let health = v["health"].as_str().unwrap();
    assert!(health.starts_with("degraded: daemons down: 1;"), "{health}");
    rt.block_on(async {
        let c = eddy_client::Client::connect(dep).await.unwrap();
        let mut r = c.readdir("/", None).unwrap();
        let mut names = Vec::new();
        while let Some(page) = r.next_page().await.unwrap() {
            names.extend(page.into_iter().map(|e| e.name));
        }
        assert_eq!(names, ["f0", "f1", "f2", "f3", "f4", "f5"]);
        for i in 0..6 {
            let f = c
                .open(
                    &format!("/f{i}"),
                    libc::O_RDONLY,
                    0,
                    eddy_client::Creds::root(),
                )
                .await
                .unwrap();
            assert_eq!(c.pread(&f, 0, 100).await.unwrap(), b"two copies");
        }
    });
}

/// The processes of this host serving a daemon root under `root` (`eddyd --root ROOT/d<i>`).
fn daemons_under(root: &Path) -> Vec<u32> {
    let prefix = format!("{}/d", root.display());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<String> = cmdline
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            alive(pid)
                && args
                    .windows(2)
                    .any(|w| w[0] == "--root" && w[1].starts_with(&prefix))
        })
        .collect()
}

/// A configuration of small metadata reserves (1 MiB each), for deployments of hundreds.
fn small_reserve(dir: &Path) -> PathBuf {
    let config = dir.join("small-reserve.toml");
    std::fs::write(&config, "meta_reserve_bytes = 1048576\n").unwrap();
    config
}

/// 256 daemons on one host, started by the real `eddy start` (launched several at a time,
/// their chunk subdirectories made as data arrives; decision 0076): every one answers and
/// is ready, a file striped over them reads back, and the stop leaves no daemon running.
#[test]
fn a_deployment_of_256_local_daemons_serves_and_stops_without_leaving_any() {
    const N: usize = 256;
    let dir = tempfile::tempdir().unwrap();
    let config = small_reserve(dir.path());
    let (state, _guard) = start_local(dir.path(), N as u32, &["--config", s(&config)]);
    let dep = eddy_config::Deployment::load(&state.join("deployment.toml")).unwrap();
    assert_eq!(dep.daemons.len(), N);
    let (up, v) = status_json(&state);
    assert!(up, "status failed: {v}");
    let daemons = v["daemons"].as_array().unwrap();
    assert_eq!(daemons.len(), N);
    for (i, d) in daemons.iter().enumerate() {
        assert_eq!(d["id"], i as u64);
        assert_eq!(d["up"], true, "{d}");
    }
    // 512 chunks of 64 KiB, each on the daemon its hash names.
    let data: Vec<u8> = (0..32u32 << 20).map(|i| (i % 251) as u8).collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = eddy_client::Client::connect(dep.clone()).await.unwrap();
        let me = eddy_client::Creds::root();
        let f = c.create("/striped", 0o644, true, me).await.unwrap();
        c.pwrite(&f, 0, &data).await.unwrap();
        c.close(&f).await.unwrap();
        let f = c.open("/striped", libc::O_RDONLY, 0, me).await.unwrap();
        let back = c.pread(&f, 0, data.len()).await.unwrap();
        assert!(back == data, "the striped file read back differs");
    });
    let procs = pids(&state);
    assert_eq!(procs.len(), N);
    assert_eq!(daemons_under(&state).len(), N);
    let out = ok(&["stop", "--state", s(&state)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{}", text(&out));
    assert!(
        procs.iter().all(|&p| !alive(p)),
        "daemons still run after stop"
    );
    assert_eq!(daemons_under(&state), Vec::<u32>::new());
}

/// A start of many daemons that fails part-way, in a launch (daemon 40's log cannot be
/// made) or in a daemon (daemon 37's root holds chunks of a layout it refuses), names the
/// daemon and its log and leaves none of the daemons launched running, and no deployment.
#[test]
fn a_large_start_that_fails_part_way_names_the_daemon_and_leaves_none_running() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_reserve(dir.path());
    let start = |state: &Path| {
        fails(&[
            "start",
            "--local",
            "64",
            "--root",
            s(state),
            "--config",
            s(&config),
        ])
    };
    let launch = dir.path().join("launch");
    std::fs::create_dir_all(launch.join("daemon-40.log")).unwrap();
    let err = start(&launch);
    assert!(
        err.contains(&launch.join("daemon-40.log").display().to_string()),
        "{err}"
    );
    assert_eq!(daemons_under(&launch), Vec::<u32>::new());
    assert!(!launch.join("deployment.toml").exists());

    let daemon = dir.path().join("daemon");
    let old = daemon.join("d37/chunks").join(format!("{:032x}", 5u128));
    std::fs::create_dir_all(&old).unwrap();
    std::fs::write(old.join("0"), b"old").unwrap();
    let err = start(&daemon);
    assert!(err.contains("daemon 37 exited"), "{err}");
    assert!(
        err.contains(&daemon.join("daemon-37.log").display().to_string()),
        "{err}"
    );
    assert_eq!(daemons_under(&daemon), Vec::<u32>::new());
    assert!(!daemon.join("deployment.toml").exists());
}
