//! The mount over FUSE io_uring (decision 0078): `fuse_transport = "io_uring"` on real daemons
//! with the kernel's `fuse.enable_uring` turned on by the test (root), and the mount failing
//! with the reason when the parameter is off.

use eddy_config::{Config, FuseTransport};
use eddy_testkit::{eddy_bin, pattern, require, test_config, Cluster, Mounted};
use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

const PARAMETER: &str = eddy_fuse::ENABLE_URING_PARAMETER;

/// The tests of this file set the kernel's parameter one at a time.
static PARAMETER_LOCK: Mutex<()> = Mutex::new(());

/// Sets `fuse.enable_uring` for the life of the guard and restores the value it had. The
/// kernel checks the parameter at every ring command too: drop it only after the mounts that
/// use the rings are gone.
struct EnableUring {
    before: String,
    _lock: MutexGuard<'static, ()>,
}

impl EnableUring {
    fn set(on: bool) -> EnableUring {
        let lock = PARAMETER_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        require::root("setting the kernel's fuse.enable_uring parameter");
        let before = match fs::read_to_string(PARAMETER) {
            Ok(v) => v.trim().to_string(),
            Err(e) => require::missing(&format!(
                "{PARAMETER} ({e}): FUSE over io_uring needs Linux 6.14 or later built with \
                 CONFIG_FUSE_IO_URING"
            )),
        };
        let want = if on { "Y" } else { "N" };
        if let Err(e) = fs::write(PARAMETER, want) {
            panic!("cannot set {PARAMETER} to {want}: {e}");
        }
        assert_eq!(fs::read_to_string(PARAMETER).unwrap().trim(), want);
        EnableUring {
            before,
            _lock: lock,
        }
    }
}

impl Drop for EnableUring {
    fn drop(&mut self) {
        if let Err(e) = fs::write(PARAMETER, &self.before) {
            eprintln!("cannot restore {PARAMETER} to {}: {e}", self.before);
        }
    }
}

fn uring_config() -> Config {
    Config {
        fuse_transport: FuseTransport::IoUring,
        ..test_config()
    }
}

/// The times the io_uring queue threads of the mount at `mnt` woke up (their voluntary
/// context switches, summed): each wait for a request in `io_uring_enter` is one.
fn queue_wakeups(mnt: &Path) -> u64 {
    let pid = serving_pid(mnt);
    let mut sum = 0;
    for t in fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let comm = fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("fuser-uring-") {
            continue;
        }
        let status = fs::read_to_string(t.path().join("status")).unwrap_or_default();
        for line in status.lines() {
            if let Some(n) = line.strip_prefix("voluntary_ctxt_switches:") {
                sum += n.trim().parse::<u64>().unwrap();
            }
        }
    }
    sum
}

/// The pid of the `eddy mount` process serving `mnt`.
fn serving_pid(mnt: &Path) -> String {
    let want = mnt.to_string_lossy().into_owned();
    for p in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = fs::read(p.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.iter().any(|a| a == "mount") && args.contains(&want) {
            return p.file_name().to_string_lossy().into_owned();
        }
    }
    panic!("no process serves {want}");
}

/// The names of the threads of the process serving the mount at `mnt`.
fn serving_threads(mnt: &Path) -> Vec<String> {
    let task = Path::new("/proc").join(serving_pid(mnt)).join("task");
    fs::read_dir(task)
        .unwrap()
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .collect()
}

/// The kernel's FUSE queues: one per possible CPU (`/sys/devices/system/cpu/possible`, e.g.
/// `0-1`).
fn possible_cpus() -> usize {
    let text = fs::read_to_string("/sys/devices/system/cpu/possible").unwrap();
    let last = text
        .trim()
        .split([',', '-'])
        .filter_map(|n| n.parse::<usize>().ok())
        .max()
        .unwrap();
    last + 1
}

/// Starts 3 daemons and a mount that must run on io_uring, and checks that it does: queue
/// threads (each registered its entry before the mount went on), and none
/// of the 8 `/dev/fuse` threads (`fuse_threads`) of the classic transport: its one loop, for
/// FORGET and INTERRUPT, runs on the mount's main thread.
fn uring_mount() -> Mounted {
    let m = Mounted::start_with(3, uring_config());
    // The mount is in the table before its session answers INIT and starts its threads.
    fs::metadata(m.path("")).unwrap();
    let threads = eddy_testkit::eventually::poll_for(Duration::from_secs(30), || {
        let t = serving_threads(m.mnt.path());
        t.iter().any(|t| t.starts_with("fuser-")).then_some(t)
    })
    .expect("the mount's session started no thread within 30 s");
    let queues = threads
        .iter()
        .filter(|t| t.starts_with("fuser-uring-"))
        .count();
    // `fuse_threads` threads spread over the kernel's queues, one per possible CPU, at least
    // one and as many each.
    let cpus = possible_cpus();
    let want = cpus * test_config().fuse_threads.div_ceil(cpus).max(1);
    assert_eq!(queues, want, "{cpus} possible CPUs: {threads:?}");
    let classic = threads.iter().filter(|t| t.starts_with("fuser-")).count() - queues;
    assert_eq!(classic, 0, "{threads:?}");
    m
}

#[test]
fn io_uring_mount_creates_writes_reads_lists_renames_and_unlinks() {
    let _on = EnableUring::set(true);
    let m = uring_mount();
    let woke = queue_wakeups(m.mnt.path());
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/a"), b"hello ring\n").unwrap();
    assert_eq!(fs::read(m.path("d/a")).unwrap(), b"hello ring\n");
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(m.path("d/a"))
        .unwrap();
    f.write_all(b"more\n").unwrap();
    drop(f);
    assert_eq!(m.ok("cat d/a"), "hello ring\nmore\n");
    for i in 0..50 {
        fs::write(m.path(&format!("d/f{i}")), format!("{i}")).unwrap();
    }
    let mut names: Vec<String> = fs::read_dir(m.path("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = (0..50).map(|i| format!("f{i}")).collect();
    want.push("a".into());
    want.sort();
    assert_eq!(names, want);
    // The requests came on the rings: their threads woke for them (more than 100 requests
    // so far; on /dev/fuse the rings' threads would sleep throughout).
    let woke = queue_wakeups(m.mnt.path()) - woke;
    assert!(woke >= 50, "the io_uring queue threads woke {woke} times");
    fs::rename(m.path("d/a"), m.path("d/b")).unwrap();
    assert!(!m.path("d/a").exists());
    assert_eq!(fs::read(m.path("d/b")).unwrap(), b"hello ring\nmore\n");
    assert_eq!(fs::metadata(m.path("d/b")).unwrap().len(), 16);
    fs::remove_file(m.path("d/b")).unwrap();
    for i in 0..50 {
        fs::remove_file(m.path(&format!("d/f{i}"))).unwrap();
    }
    fs::remove_dir(m.path("d")).unwrap();
    assert_eq!(fs::read_dir(m.path("")).unwrap().count(), 0);
    drop(m);
}

#[test]
fn io_uring_mount_carries_a_large_file_byte_for_byte() {
    let _on = EnableUring::set(true);
    let m = uring_mount();
    // 48 MiB in 1 MiB writes (the size of the largest request), read back in 1 MiB reads and
    // with `cmp` through the kernel's read-ahead.
    let len = 48usize << 20;
    let data = pattern(78, 0, len);
    let mut f = fs::File::create(m.path("big")).unwrap();
    for c in data.chunks(1 << 20) {
        f.write_all(c).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(fs::metadata(m.path("big")).unwrap().len(), len as u64);
    let mut back = Vec::with_capacity(len);
    let mut f = fs::File::open(m.path("big")).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        back.extend_from_slice(&buf[..n]);
    }
    assert!(back == data, "the file read back differs");
    let local = tempfile::NamedTempFile::new().unwrap();
    fs::write(local.path(), &data).unwrap();
    m.ok(&format!("cmp big {}", local.path().display()));
    drop(m);
}

#[test]
fn io_uring_mount_serves_many_processes_at_once() {
    let _on = EnableUring::set(true);
    let m = uring_mount();
    // 16 shells, each creating, writing, reading back and listing its own directory of 20
    // files while the others do the same, then all removing theirs.
    let script = "d=p$0; mkdir $d && i=0; while [ $i -lt 20 ]; do \
                  printf 'p%s-%s' $0 $i > $d/f$i || exit 1; \
                  [ \"$(cat $d/f$i)\" = \"p$0-$i\" ] || exit 2; i=$((i+1)); done; \
                  [ $(ls $d | wc -l) -eq 20 ] || exit 3; \
                  dd if=/dev/zero of=$d/big bs=64k count=32 2>/dev/null || exit 4; \
                  [ $(stat -c %s $d/big) -eq 2097152 ] || exit 5";
    let children: Vec<_> = (0..16)
        .map(|p| {
            Command::new("sh")
                .arg("-c")
                .arg(script)
                .arg(p.to_string())
                .current_dir(m.mnt.path())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (p, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "process {p}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for p in 0..16 {
        assert_eq!(fs::read_dir(m.path(&format!("p{p}"))).unwrap().count(), 21);
        assert_eq!(
            fs::read_to_string(m.path(&format!("p{p}/f7"))).unwrap(),
            format!("p{p}-7")
        );
    }
    m.ok("rm -r p*");
    assert_eq!(fs::read_dir(m.path("")).unwrap().count(), 0);
    drop(m);
}

#[test]
fn io_uring_asked_for_with_the_parameter_off_fails_the_mount_with_the_reason() {
    let _off = EnableUring::set(false);
    require::fuse();
    let cluster = Cluster::start_with(3, uring_config());
    let mnt = tempfile::tempdir().unwrap();
    let mut child = Command::new(eddy_bin())
        .arg("mount")
        .arg("--state")
        .arg(cluster.dir.path())
        .arg(mnt.path())
        .arg("--foreground")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Guard: the mount must end by itself, not serve.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = Command::new("umount").arg("-l").arg(mnt.path()).status();
            panic!("`eddy mount` asked for io_uring with the parameter off kept running");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the mount succeeded: {err}");
    assert!(
        err.contains("io_uring") && err.contains(PARAMETER) && err.contains("is N"),
        "the failure does not give the reason: {err}"
    );
    // Nothing is left mounted there.
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts.contains(&*mnt.path().to_string_lossy()), "{mounts}");
}

/// A mount served by `eddy mount --foreground` with `EDDY_LOG=info`; unmounted, and its
/// process ended, when dropped (also when the test fails).
struct LoggedMount {
    mnt: std::path::PathBuf,
    child: Option<std::process::Child>,
}

impl LoggedMount {
    /// Mounts `cluster` at `mnt`, its log in `log`; returns once the mount is in the table.
    fn start(cluster: &Cluster, mnt: &Path, log: &Path) -> LoggedMount {
        let out = fs::File::create(log).unwrap();
        let child = Command::new(eddy_bin())
            .arg("mount")
            .arg("--state")
            .arg(cluster.dir.path())
            .arg(mnt)
            .arg("--foreground")
            .env("EDDY_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let m = LoggedMount {
            mnt: mnt.to_owned(),
            child: Some(child),
        };
        let up = eddy_testkit::eventually::poll_for(Duration::from_secs(30), || {
            eddy_testkit::is_mountpoint(mnt).then_some(())
        });
        assert!(
            up.is_some(),
            "mount did not appear: {}",
            fs::read_to_string(log).unwrap()
        );
        m
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, std::process::Child::id)
    }

    /// Unmounts and waits for the serving process, which must end by itself.
    fn end(mut self) {
        eddy_fuse::unmount(&self.mnt).unwrap();
        let mut child = self.child.take().unwrap();
        let ended = eddy_testkit::eventually::exited(&mut child, Duration::from_secs(30));
        if ended.is_none() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the mount's process did not end after the unmount");
        }
    }
}

impl Drop for LoggedMount {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = eddy_fuse::unmount(&self.mnt);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The mounts `eddy status --json` lists, once it lists `want` of them, each by every daemon
/// (within 30 s: a mount tells the daemons once it runs).
fn status_mounts(cluster: &Cluster, want: usize) -> Vec<serde_json::Value> {
    let state = cluster.dir.path().to_str().unwrap();
    let got = eddy_testkit::eventually::poll_for(Duration::from_secs(30), || {
        let out = eddy_testkit::cli::ok(&["status", "--state", state, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mounts = v["mounts"].as_array().unwrap().clone();
        // Each daemon lists the mount once it has taken the mount's word, which the mount
        // sends every daemon without waiting for their replies.
        let everywhere = mounts.iter().all(|m| {
            m["daemons"]
                .as_array()
                .is_some_and(|d| d.len() == cluster.dep.daemons.len())
        });
        (mounts.len() == want && everywhere).then_some(mounts)
    });
    got.unwrap_or_else(|| {
        let out = eddy_testkit::cli::eddy(&["status", "--state", state, "--json"]);
        panic!(
            "eddy status did not list {want} mounts within 30 s: {}",
            eddy_testkit::cli::text(&out)
        )
    })
}

/// The mount says which transport it runs on: in its log at start, and to the daemons, from
/// which `eddy status` (table and `--json`) lists each mount with it; a mount that ends is
/// no longer listed. One deployment of 3 daemons per transport (the setting is the
/// deployment's), a mount of each, and fuser's own log lines in the mount's log.
#[test]
fn eddy_status_and_the_log_name_each_mounts_transport() {
    let _on = EnableUring::set(true);
    require::fuse();
    let work = tempfile::tempdir().unwrap();
    for (transport, table_name, json_name) in [
        (FuseTransport::IoUring, "io_uring", "io_uring"),
        (FuseTransport::DevFuse, "/dev/fuse", "dev_fuse"),
    ] {
        let cluster = Cluster::start_with(
            3,
            Config {
                fuse_transport: transport,
                ..test_config()
            },
        );
        let state = cluster.dir.path().to_str().unwrap();
        // Before any mount: none listed.
        let table = eddy_testkit::cli::ok(&["status", "--state", state]);
        let table = String::from_utf8_lossy(&table.stdout).into_owned();
        assert!(table.contains("mounts: none connected"), "{table}");
        let mnt = work.path().join(json_name);
        fs::create_dir(&mnt).unwrap();
        let log = work.path().join(format!("{json_name}.log"));
        let mount = LoggedMount::start(&cluster, &mnt, &log);
        let mounts = status_mounts(&cluster, 1);
        let m = &mounts[0];
        assert_eq!(m["transport"], json_name, "{mounts:?}");
        assert_eq!(m["mountpoint"], mnt.to_str().unwrap(), "{mounts:?}");
        assert_eq!(m["pid"], mount.pid(), "{mounts:?}");
        assert_eq!(m["daemons"], serde_json::json!([0, 1, 2]), "{mounts:?}");
        let table = eddy_testkit::cli::ok(&["status", "--state", state]);
        let table = String::from_utf8_lossy(&table.stdout).into_owned();
        let line = table
            .lines()
            .find(|l| l.ends_with(mnt.to_str().unwrap()))
            .unwrap_or_else(|| panic!("no line for the mount: {table}"));
        assert!(line.contains(table_name), "{line}");
        assert!(line.contains(&mount.pid().to_string()), "{line}");
        assert!(line.contains("0,1,2"), "{line}");
        // The log: the mount's line with its transport, and fuser's own (its `log` records
        // go through tracing, with the same filter).
        let text = fs::read_to_string(&log).unwrap();
        let mounted = text
            .lines()
            .find(|l| l.contains("Eddy mounted"))
            .unwrap_or_else(|| panic!("no \"Eddy mounted\" line: {text}"));
        assert!(
            mounted.contains(&format!("transport={table_name}")),
            "{mounted}"
        );
        assert!(
            text.contains(&format!("Mounting {}", mnt.display())),
            "fuser's log is not in the mount's: {text}"
        );
        mount.end();
        assert!(status_mounts(&cluster, 0).is_empty());
    }
}

/// A mount says what it is on every connection it opens, not only on those open when it
/// started: after a daemon restarts, the mount's next requests to it reconnect, and that
/// daemon lists the mount again.
#[test]
fn a_restarted_daemon_lists_the_mount_again_once_it_reconnects() {
    let mut m = eddy_testkit::Mounted::start(3);
    let mounts = status_mounts(&m.cluster, 1);
    assert_eq!(mounts[0]["daemons"], serde_json::json!([0, 1, 2]));
    m.cluster.kill(1);
    m.cluster.restart(1);
    // Files on every daemon: the mount reconnects to daemon 1 for some of them.
    let state = m.cluster.dir.path().to_str().unwrap().to_string();
    let listed = eddy_testkit::eventually::poll_for(Duration::from_secs(60), || {
        for i in 0..20 {
            let _ = fs::write(m.path(&format!("f{i}")), b"x");
        }
        let out = eddy_testkit::cli::ok(&["status", "--state", &state, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mounts = v["mounts"].as_array().unwrap().clone();
        (mounts.len() == 1 && mounts[0]["daemons"] == serde_json::json!([0, 1, 2]))
            .then_some(mounts)
    });
    assert!(
        listed.is_some(),
        "daemon 1 does not list the mount after it reconnected"
    );
    assert_eq!(listed.unwrap()[0]["transport"], "dev_fuse");
}

/// Children killed when the test ends, so that a failing run leaves no process behind that
/// waits on the mount. One stuck in a request of a hung mount ends only when the mount does
/// (dropped after them): it is not waited for long.
struct Reaped(Vec<std::process::Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = eddy_testkit::eventually::exited(c, Duration::from_secs(1));
        }
    }
}

/// Waits for `child` to end, at most the guard's 60 s (a hang, not a speed claim).
fn ended(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    eddy_testkit::eventually::eventually(format!("{what} ended"), || child.try_wait().unwrap())
}

/// Whether process `pid` is blocked in flock(2) (`/proc/PID/syscall` names the call a
/// process sleeps in).
fn in_flock(pid: u32) -> bool {
    let text = fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
    text.split_whitespace().next() == Some(&libc::SYS_flock.to_string())
}

/// A blocking lock's request is answered from the client's runtime when the lock is granted,
/// and until then holds the ring entry it came on. Many such waiters on one CPU (so on one
/// queue: the kernel picks the queue of the CPU a request is made on) must not hold that
/// queue's other requests back: neither a new one from the same CPU nor the release of the
/// lock they wait for. 24 waiters are more than the entries one queue thread used to
/// register (8).
#[test]
fn io_uring_queue_serves_on_while_many_blocking_locks_wait_on_it() {
    let _on = EnableUring::set(true);
    let m = uring_mount();
    let signals = tempfile::tempdir().unwrap();
    let held = signals.path().join("held");
    let go = signals.path().join("go");
    fs::write(m.path("lk"), b"").unwrap();
    let on_cpu0 = |args: &[&str]| {
        Command::new("taskset")
            .arg("-c")
            .arg("0")
            .args(args)
            .current_dir(m.mnt.path())
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("taskset (util-linux) runs")
    };
    let hold = format!(
        "touch {h}; while [ ! -e {g} ] && kill -0 $PPID 2>/dev/null; do sleep 0.02; done",
        h = held.display(),
        g = go.display()
    );
    let mut holder = Reaped(vec![on_cpu0(&["flock", "-x", "lk", "sh", "-c", &hold])]);
    eddy_testkit::eventually::eventually("the holder took the lock", || {
        held.exists().then_some(())
    });
    let mut waiters = Reaped(
        (0..24)
            .map(|_| on_cpu0(&["flock", "-x", "lk", "true"]))
            .collect(),
    );
    let pids: Vec<u32> = waiters.0.iter().map(|c| c.id()).collect();
    eddy_testkit::eventually::eventually("all 24 waiters wait in flock(2)", || {
        pids.iter().all(|p| in_flock(*p)).then_some(())
    });
    // A new request from the same CPU is served while they wait.
    let mut probe = Reaped(vec![on_cpu0(&[
        "sh",
        "-c",
        "echo probe > probe && cat probe > /dev/null",
    ])]);
    let status = ended(
        &mut probe.0[0],
        "a create and read on CPU 0 beside 24 lock waiters",
    );
    assert!(status.success(), "the probe failed: {status}");
    assert_eq!(fs::read_to_string(m.path("probe")).unwrap(), "probe\n");
    // The holder lets go: every waiter gets the lock in turn.
    fs::write(&go, b"").unwrap();
    let status = ended(&mut holder.0[0], "the holder");
    assert!(status.success(), "the holder failed: {status}");
    for (i, w) in waiters.0.iter_mut().enumerate() {
        let status = ended(w, &format!("waiter {i}"));
        assert!(status.success(), "waiter {i} failed: {status}");
    }
    drop(m);
}
