//! A real network file system for tests: a GlusterFS volume whose bricks live on this host, mounted
//! with the GlusterFS FUSE client.
//!
//! One `glusterd` serves every test process of the machine. The first `GlusterVolume::start` that
//! finds none running starts it (under a lock file, so concurrent test processes start exactly
//! one), and the last test process using it stops it as it exits (`gluster/glusterd.rs`): tests
//! leave no glusterd behind. A glusterd the kit did not start (the machine's own) is used if
//! it runs where the tests do, never stopped, and named in every failure; one in another
//! network namespace is refused at once, saying why. Each `GlusterVolume` has its own volume
//! (named `eddy_<pid>_<n>_<hint>`), its own bricks and mount point in a temporary directory, and
//! removes all of them on drop. Volumes left behind by test processes that died without dropping
//! them are removed by the next process that starts a volume.
//!
//! Needs root, the `glusterfs-server` and `glusterfs-client` packages, and a host name for the
//! bricks that resolves to a loopback address (GlusterFS refuses `localhost`):
//! `scripts/install-deps.sh` sets all of this up. Any failure panics: a test that needs a backend
//! file system fails rather than skips when there is none.

use std::net::ToSocketAddrs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::eventually::{poll_every, poll_for};

/// The host name of the bricks; /etc/hosts maps it to 127.0.1.77 (scripts/install-deps.sh).
pub const GLUSTER_HOST: &str = "eddy-gluster-host";
/// Bricks per volume: two, so that the distribute (DHT) layer spreads files over them as on a
/// real multi-server volume.
pub const DEFAULT_BRICKS: usize = 2;
/// Every volume this helper creates has a name that starts with this.
const VOLUME_PREFIX: &str = "eddy_";
const GLUSTERD_LOG: &str = "/var/log/glusterfs/glusterd.log";
/// Upper bound for any single gluster, mount or umount command: a hang fails the test.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;
const TMPFS_MAGIC: i64 = 0x0102_1994;

static COUNTER: AtomicU64 = AtomicU64::new(0);

mod glusterd;
use glusterd::ensure_glusterd;
pub use glusterd::{kit_glusterd, running_glusterd};

pub struct GlusterVolume {
    name: String,
    /// Holds `brick0..`, `mnt` and `client.log`; `None` once handed over or leaked.
    dir: Option<tempfile::TempDir>,
    mnt: PathBuf,
    bricks: Vec<PathBuf>,
    created: bool,
    mounted: bool,
    frozen: AtomicBool,
}

impl GlusterVolume {
    /// Creates, starts and mounts a fresh volume of `DEFAULT_BRICKS` bricks; `name_hint` ends up
    /// in the volume name (useful in logs). Panics if anything fails.
    pub fn start(name_hint: &str) -> GlusterVolume {
        GlusterVolume::start_with_bricks(name_hint, DEFAULT_BRICKS)
    }

    /// As `start`, with `bricks` bricks (1 or more) in a plain distribute volume.
    pub fn start_with_bricks(name_hint: &str, bricks: usize) -> GlusterVolume {
        GlusterVolume::start_with(name_hint, bricks, &[])
    }

    /// As `start_with_bricks`, with volume options (`gluster volume set VOL KEY VALUE`) set
    /// before the volume starts, e.g. `("network.ping-timeout", "2")`: how long the FUSE client
    /// waits for a frozen brick before failing requests with ENOTCONN (default 42 s; changing it
    /// on a mounted volume does not affect the running client). Each option adds about 0.2 s.
    pub fn start_with(name_hint: &str, bricks: usize, options: &[(&str, &str)]) -> GlusterVolume {
        assert!(bricks >= 1, "a GlusterFS volume needs at least one brick");
        check_prerequisites();
        ensure_glusterd();

        let name = volume_name(name_hint);
        let base = volume_base_dir();
        let dir = tempfile::Builder::new()
            .prefix("eddy-gluster-")
            .tempdir_in(&base)
            .unwrap_or_else(|e| panic!("gluster: create a directory in {}: {e}", base.display()));
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).expect("gluster: create the mount point");
        let brick_dirs: Vec<PathBuf> = (0..bricks)
            .map(|i| dir.path().join(format!("brick{i}")))
            .collect();
        for b in &brick_dirs {
            std::fs::create_dir(b).expect("gluster: create a brick directory");
        }
        // From here on a panic drops `vol`, which undoes whatever was done.
        let mut vol = GlusterVolume {
            name,
            dir: Some(dir),
            mnt,
            bricks: brick_dirs,
            created: false,
            mounted: false,
            frozen: AtomicBool::new(false),
        };

        let mut args: Vec<String> = vec!["volume".into(), "create".into(), vol.name.clone()];
        args.extend(
            vol.bricks
                .iter()
                .map(|b| format!("{GLUSTER_HOST}:{}", b.display())),
        );
        // `force`: gluster refuses bricks on the root file system (the fallback location) and
        // several bricks of one volume on one server otherwise.
        args.push("force".into());
        gluster_ok(&args);
        vol.created = true;
        for (key, value) in options {
            gluster_ok(&["volume", "set", &vol.name, key, value]);
        }
        gluster_ok(&["volume", "start", &vol.name]);
        vol.wait_brick_processes();

        // The FUSE client, started directly rather than through mount.glusterfs (which runs the
        // same command after about 100 ms of shell checks); it daemonizes and mounts in the
        // background, `wait_mount_ready` waits for the result.
        let log = vol.dir().join("client.log");
        let out = run(
            Command::new(find_in_path("glusterfs").expect("glusterfs"))
                .arg("--process-name=fuse")
                .arg(format!("--volfile-server={GLUSTER_HOST}"))
                .arg(format!("--volfile-id=/{}", vol.name))
                .arg("--log-level=WARNING")
                .arg(format!("--log-file={}", log.display()))
                .arg(format!("--pid-file={}", vol.client_pid_file().display()))
                .arg(&vol.mnt),
            COMMAND_TIMEOUT,
        );
        vol.mounted = true;
        if !out.status.success() {
            panic!(
                "gluster: the FUSE client for volume {} at {} failed: {}\nclient log:\n{}",
                vol.name,
                vol.mnt.display(),
                output_text(&out),
                tail(&log, 30)
            );
        }
        vol.wait_mount_ready(&log);
        vol
    }

    /// The GlusterFS FUSE mount of the volume.
    pub fn mount(&self) -> &Path {
        &self.mnt
    }

    /// The volume's name in gluster.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The brick directories (on the local file system). Reading them is fine; writing into them
    /// bypasses gluster and corrupts the volume.
    pub fn bricks(&self) -> &[PathBuf] {
        &self.bricks
    }

    /// The pids of the live `glusterfsd` processes serving this volume's bricks (found in /proc
    /// by their `--volfile-id`, so bricks restarted with `volume start VOL force` are included).
    pub fn brick_pids(&self) -> Vec<i32> {
        brick_pids_of(&self.name)
    }

    /// SIGSTOPs the brick processes: every request that reaches them hangs until `thaw` (the
    /// FUSE client gives up on them only after gluster's ping timeout, 42 s). Returns once all
    /// of them are stopped. glusterd itself keeps running.
    pub fn freeze(&self) {
        let pids = self.brick_pids();
        assert!(
            !pids.is_empty(),
            "gluster: volume {} has no brick processes to freeze",
            self.name
        );
        self.frozen.store(true, Ordering::SeqCst);
        signal_and_wait(&pids, libc::SIGSTOP, true);
    }

    /// SIGCONTs the brick processes stopped by `freeze`; returns once all of them run again.
    pub fn thaw(&self) {
        signal_and_wait(&self.brick_pids(), libc::SIGCONT, false);
        self.frozen.store(false, Ordering::SeqCst);
    }

    fn client_pid_file(&self) -> PathBuf {
        self.dir().join("client.pid")
    }

    /// The pid of the FUSE client process, while it runs.
    fn client_pid(&self) -> Option<i32> {
        let pid = std::fs::read_to_string(self.client_pid_file()).ok()?;
        let pid: i32 = pid.trim().parse().ok()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (comm.trim_end() == "glusterfs" && is_alive(pid)).then_some(pid)
    }

    fn dir(&self) -> &Path {
        self.dir
            .as_ref()
            .expect("gluster: temporary directory")
            .path()
    }

    /// Waits until every brick of the volume has its glusterfsd process.
    /// (Whether they accept connections is checked on the mount, see `wait_mount_ready`.)
    fn wait_brick_processes(&self) {
        let t = Instant::now();
        let up = poll_for(READY_TIMEOUT, || {
            (self.brick_pids().len() >= self.bricks.len()).then_some(())
        });
        if up.is_none() {
            let status = gluster(&["volume", "status", &self.name]);
            panic!(
                "gluster: volume {} has {} of {} brick processes after {:?}: {}\nglusterd log:\n{}",
                self.name,
                self.brick_pids().len(),
                self.bricks.len(),
                READY_TIMEOUT,
                output_text(&status),
                tail(Path::new(GLUSTERD_LOG), 30)
            );
        }
        trace("brick processes up", t);
    }

    /// Waits until the mount is a FUSE file system whose client is connected to every brick.
    fn wait_mount_ready(&self, log: &Path) {
        let t = Instant::now();
        // The last look's (is FUSE, client exited); the wait ends early when the client exits.
        let mut seen = (false, false);
        let ready = poll_for(READY_TIMEOUT, || {
            let fuse = statfs_type(&self.mnt) == Some(FUSE_SUPER_MAGIC);
            let connected = fuse
                && (0..self.bricks.len()).all(|i| {
                    let p = self.mnt.join(format!(
                        ".meta/graphs/active/{}-client-{i}/private",
                        self.name
                    ));
                    std::fs::read_to_string(p)
                        .map(|s| s.lines().any(|l| l.trim() == "connected = 1"))
                        .unwrap_or(false)
                });
            if connected && std::fs::read_dir(&self.mnt).is_ok() {
                return Some(true);
            }
            // The client writes its pid file once it runs; gone afterwards means it failed.
            let client_died = self.client_pid_file().exists() && self.client_pid().is_none();
            seen = (fuse, client_died);
            client_died.then_some(false)
        });
        if ready != Some(true) {
            let (fuse, client_died) = seen;
            panic!(
                "gluster: the mount of volume {} at {} is not usable {:?} after start (fuse: {fuse}, client exited: {client_died})\nclient log:\n{}",
                self.name,
                self.mnt.display(),
                t.elapsed(),
                tail(log, 30)
            );
        }
        trace("mount ready", t);
    }
}

impl Drop for GlusterVolume {
    fn drop(&mut self) {
        // Never panic here: this may run while a failed test unwinds.
        signal_and_wait(&self.brick_pids(), libc::SIGCONT, false);
        let mut leak_dir = false;
        if self.mounted && !unmount(&self.mnt) {
            eprintln!(
                "gluster: could not unmount {}; leaving its directory behind",
                self.mnt.display()
            );
            leak_dir = true;
        }
        if self.mounted {
            // The client exits by itself once unmounted; this is for one that never mounted.
            if let Some(pid) = self.client_pid() {
                // SAFETY: kill(2) on the FUSE client of this volume (checked by name).
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        }
        if self.created {
            stop_bricks(&self.brick_pids());
            remove_volume(&self.name);
            for b in &self.bricks {
                let _ = std::fs::remove_file(brick_log_path(b));
            }
        }
        if let Some(d) = self.dir.take() {
            if leak_dir {
                let _ = d.keep();
            } else {
                let t = Instant::now();
                let shown = d.path().display().to_string();
                if let Err(e) = d.close() {
                    eprintln!("gluster: removing {shown}: {e}");
                }
                trace("temporary directory removed", t);
            }
        }
    }
}

/// Where the bricks and mount points go: `$EDDY_GLUSTER_DIR` if set, else /dev/shm when it is a
/// tmpfs (on a disk file system creating and removing a brick's `.glusterfs` tree of 256
/// directories takes up to seconds), else the temporary directory.
pub fn volume_base_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("EDDY_GLUSTER_DIR") {
        return PathBuf::from(d);
    }
    let shm = Path::new("/dev/shm");
    if statfs_type(shm) == Some(TMPFS_MAGIC) {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

fn volume_name(hint: &str) -> String {
    let clean: String = hint
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(32)
        .collect();
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    format!("{VOLUME_PREFIX}{}_{n}_{clean}", std::process::id())
}

fn check_prerequisites() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!("gluster: GlusterFS test volumes need root (glusterd, bricks and mounts)");
    }
    for bin in ["gluster", "glusterd", "glusterfsd", "mount.glusterfs"] {
        if find_in_path(bin).is_none() {
            panic!(
                "gluster: `{bin}` not found: install glusterfs-server and glusterfs-client (scripts/install-deps.sh)"
            );
        }
    }
    let loopback = (GLUSTER_HOST, 0)
        .to_socket_addrs()
        .map(|mut a| a.all(|a| a.ip().is_loopback()))
        .unwrap_or(false);
    if !loopback {
        panic!(
            "gluster: host name {GLUSTER_HOST} must resolve to a loopback address other than \
             127.0.0.1: add `127.0.1.77 {GLUSTER_HOST}` to /etc/hosts (scripts/install-deps.sh does)"
        );
    }
}

fn find_in_path(bin: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].iter().map(PathBuf::from))
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
}

/// Removes the volumes in `list` (with their mounts and directories) created by test processes
/// that no longer exist. Best effort.
fn collect_stale_volumes(list: &str) {
    for name in list.lines().map(str::trim) {
        let Some(pid) = name
            .strip_prefix(VOLUME_PREFIX)
            .and_then(|r| r.split('_').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        eprintln!("gluster: removing volume {name} left behind by dead process {pid}");
        let source = format!("{GLUSTER_HOST}:/{name}");
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        for line in mounts.lines() {
            let mut f = line.split(' ');
            if f.next() == Some(source.as_str()) {
                if let Some(mnt) = f.next() {
                    unmount(Path::new(&unescape_mount_path(mnt)));
                }
            }
        }
        stop_bricks(&brick_pids_of(name));
        let info = String::from_utf8_lossy(&gluster(&["volume", "info", name]).stdout).into_owned();
        remove_volume(name);
        // Brick lines look like `Brick1: host:/dev/shm/eddy-gluster-XXXX/brick0`.
        for line in info.lines() {
            let Some((_, brick)) = line
                .trim()
                .strip_prefix("Brick")
                .and_then(|r| r.split_once(": "))
                .and_then(|(_, b)| b.split_once(':'))
            else {
                continue;
            };
            let brick = Path::new(brick);
            let _ = std::fs::remove_file(brick_log_path(brick));
            let Some(parent) = brick.parent() else {
                continue;
            };
            let ours = parent
                .file_name()
                .is_some_and(|n| n.as_bytes().starts_with(b"eddy-gluster-"));
            if ours && parent.is_dir() && !is_mounted_below(parent) {
                let _ = std::fs::remove_dir_all(parent);
            }
        }
    }
}

fn unescape_mount_path(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

fn is_mounted_below(dir: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts.lines().any(|l| {
        l.split(' ')
            .nth(1)
            .is_some_and(|m| Path::new(&unescape_mount_path(m)).starts_with(dir))
    })
}

/// `volume stop force` then `volume delete`; best effort, reports failures on stderr.
fn remove_volume(name: &str) {
    let stop = gluster(&["volume", "stop", name, "force"]);
    let text = output_text(&stop);
    if !stop.status.success() && !text.contains("is not in the started state") {
        eprintln!("gluster: volume stop {name} failed: {text}");
    }
    let del = gluster(&["volume", "delete", name]);
    if !del.status.success() {
        eprintln!(
            "gluster: volume delete {name} failed: {}",
            output_text(&del)
        );
    }
}

/// Unmounts a GlusterFS mount, lazily if a plain unmount fails; true when it is gone (or never
/// was there).
fn unmount(mnt: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(mnt.as_os_str().as_bytes()) else {
        return false;
    };
    for flags in [0, libc::MNT_DETACH] {
        // SAFETY: umount2 with a NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
            return true;
        }
        let e = std::io::Error::last_os_error();
        if statfs_type(mnt) != Some(FUSE_SUPER_MAGIC) {
            return true; // not (or no longer) mounted
        }
        if flags == libc::MNT_DETACH {
            eprintln!("gluster: umount {}: {e}", mnt.display());
        }
    }
    false
}

/// Runs `gluster --mode=script ARGS`, retrying while another transaction holds the cluster lock.
fn gluster<S: AsRef<str>>(args: &[S]) -> Output {
    let mut last = None;
    let done = poll_for(COMMAND_TIMEOUT, || {
        let out = run(
            Command::new("gluster")
                .arg("--mode=script")
                .args(args.iter().map(|a| a.as_ref())),
            COMMAND_TIMEOUT,
        );
        let text = output_text(&out);
        let busy = text.contains("Another transaction is in progress")
            || text.contains("Locking failed")
            || text.contains("try again after some time");
        if out.status.success() || !busy {
            return Some(out);
        }
        last = Some(out);
        None
    });
    // Still busy when the bound passed: the last answer, for the caller to show.
    done.or(last).expect("gluster: at least one run")
}

/// `gluster` that panics on failure; returns stdout.
fn gluster_ok<S: AsRef<str>>(args: &[S]) -> String {
    let out = gluster(args);
    if !out.status.success() {
        let args: Vec<&str> = args.iter().map(|a| a.as_ref()).collect();
        panic!(
            "gluster: `gluster --mode=script {}` failed: {}{}\nglusterd log:\n{}",
            args.join(" "),
            output_text(&out),
            glusterd::foreign_note(),
            tail(Path::new(GLUSTERD_LOG), 20)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command with its output captured; kills it and panics after `timeout`. The output goes
/// to unlinked temporary files rather than pipes: daemons forked by the command (glusterd, the
/// FUSE client of `mount`) may keep them open long after the command has exited.
fn run(cmd: &mut Command, timeout: Duration) -> Output {
    use std::io::{Read, Seek};
    let shown = format!("{cmd:?}");
    let mut out = tempfile::tempfile().expect("gluster: temporary file");
    let mut err = tempfile::tempfile().expect("gluster: temporary file");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("gluster: dup"))
        .stderr(err.try_clone().expect("gluster: dup"))
        .spawn()
        .unwrap_or_else(|e| panic!("gluster: cannot run {shown}: {e}"));
    let t = Instant::now();
    // Looked at every 5 ms: most commands take tens of milliseconds, and there are many.
    let status = poll_every(timeout, Duration::from_millis(5), || {
        match child.try_wait() {
            Ok(status) => status,
            Err(e) => panic!("gluster: waiting for {shown}: {e}"),
        }
    });
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("gluster: {shown} did not finish within {timeout:?}");
    };
    trace(&shown, t);
    let read = |f: &mut std::fs::File| {
        let mut v = Vec::new();
        let _ = f.rewind();
        let _ = f.read_to_end(&mut v);
        v
    };
    Output {
        status,
        stdout: read(&mut out),
        stderr: read(&mut err),
    }
}

/// With EDDY_GLUSTER_TRACE set, prints how long each step took (on stderr).
fn trace(what: &str, since: Instant) {
    if std::env::var_os("EDDY_GLUSTER_TRACE").is_some() {
        eprintln!("gluster trace: {:>9.1?} {what}", since.elapsed());
    }
}

fn output_text(out: &Output) -> String {
    format!(
        "{} {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    )
}

fn tail(path: &Path, lines: usize) -> String {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| format!("({}: {e})", path.display()));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The process state letter from /proc/PID/stat (`R`, `S`, `T`, `Z`, ...).
fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: the state follows the last ')'.
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

fn is_alive(pid: i32) -> bool {
    matches!(proc_state(pid), Some(s) if s != 'Z' && s != 'X')
}

/// True when `pid` is a live glusterfsd serving a brick of volume `name`.
fn is_brick_of(pid: i32, name: &str) -> bool {
    if !is_alive(pid) {
        return false;
    }
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let prefix = format!("{name}.");
    args.windows(2)
        .any(|w| w[0] == b"--volfile-id" && w[1].starts_with(prefix.as_bytes()))
}

/// Where glusterd has brick `brick` log: /var/log/glusterfs/bricks/ + the path with its slashes
/// turned into dashes.
fn brick_log_path(brick: &Path) -> PathBuf {
    let flat = brick
        .to_string_lossy()
        .trim_start_matches('/')
        .replace('/', "-");
    Path::new("/var/log/glusterfs/bricks").join(format!("{flat}.log"))
}

/// The live glusterfsd processes serving bricks of volume `name`, found in /proc.
fn brick_pids_of(name: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| c.trim_end() == "glusterfsd")
                && is_brick_of(p, name)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// Ends brick processes ahead of `volume stop`: SIGCONT (they may be frozen) and SIGTERM, then
/// waits for them to exit. Bricks ended this way exit cleanly and remove their pid files, and
/// `volume stop` has nothing left to do; otherwise it waits about a second per brick, and it
/// leaves frozen bricks stopped forever.
fn stop_bricks(pids: &[i32]) {
    let t = Instant::now();
    for &p in pids {
        // SAFETY: kill(2) on pids checked to be glusterfsd bricks of one of our volumes.
        unsafe {
            libc::kill(p, libc::SIGCONT);
            libc::kill(p, libc::SIGTERM);
        }
    }
    // Never panics (this runs in drop): bricks still alive are left to `volume stop`.
    poll_for(Duration::from_secs(5), || {
        (!pids.iter().any(|&p| is_alive(p))).then_some(())
    });
    trace("bricks exited", t);
}

/// Sends `sig` to every pid, then waits until each is stopped (`stopped`) or not stopped.
fn signal_and_wait(pids: &[i32], sig: i32, stopped: bool) {
    for &p in pids {
        // SAFETY: kill(2) on pids checked to be this volume's bricks.
        unsafe { libc::kill(p, sig) };
    }
    let done = poll_for(Duration::from_secs(5), || {
        pids.iter()
            .all(|&p| match proc_state(p) {
                Some('T') => stopped,
                Some('Z') | Some('X') | None => true,
                Some(_) => !stopped,
            })
            .then_some(())
    });
    if done.is_some() {
        return;
    }
    eprintln!("gluster: signal {sig} to bricks {pids:?} did not take effect within 5 s");
}

fn statfs_type(path: &Path) -> Option<i64> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs is plain data, for which all zeros is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` a writable statfs, both alive for the call.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_type as i64)
}

/// An exclusive flock(2) on a file, released on drop; shared by threads and processes alike
/// (each acquisition opens its own file description).
struct FileLock(std::fs::File);

impl FileLock {
    fn acquire(path: &Path) -> FileLock {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .unwrap_or_else(|e| panic!("gluster: open lock file {}: {e}", path.display()));
        loop {
            // SAFETY: flock on a file descriptor we own.
            let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
            if r == 0 {
                return FileLock(f);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                panic!("gluster: flock {}: {e}", path.display());
            }
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // SAFETY: unlocking a descriptor we own (closing it would release the lock as well).
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}
