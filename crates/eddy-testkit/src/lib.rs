//! eddy-testkit: what the tests of every crate share (not published, a dev-dependency only).
//!
//! The harness of the integration tests: real `eddyd` processes on this host, each with its
//! own storage root, talking over real sockets ([`Cluster`]); a FUSE mount of them served by
//! `eddy mount` ([`Mounted`], [`ExtraMount`]); the test configurations ([`test_config`],
//! [`shared_config`]); commands as another user ([`as_user`], [`sh_as_user`]); the `eddy`
//! and `eddyd` programs of this build ([`eddy_bin`], [`eddyd_bin`]). Beside it: what a test
//! requires of the host ([`require`]: a test that lacks a facility fails naming it), waiting
//! for a condition instead of sleeping ([`eventually`]), the
//! `eddy` command as a user runs it ([`cli`]), raw frames on a blocking connection ([`raw`])
//! and an asynchronous wire client that matches replies by id ([`wire`]), the in-memory
//! model of the property tests ([`model`]), the write workload of the replication tests
//! ([`workload`]), a GlusterFS volume ([`gluster`]), a private Slurm cluster ([`slurm`]),
//! a burst-buffer site without Slurm ([`bbsite`]), a private PostgreSQL server
//! ([`postgres`]), job profiles for the I/O history ([`profiles`]), a private Prometheus
//! server ([`prometheus`]) and the daemons' request counters as the tests that count
//! requests read them ([`served`]).
//!
//! Test code: a failure panics with what went wrong, and `unwrap` is allowed here.
#![allow(clippy::unwrap_used)]

pub mod bbsite;
pub mod cli;
pub mod eventually;
pub mod fsx;
pub mod gluster;
pub mod model;
pub mod postgres;
pub mod profiles;
pub mod prometheus;
pub mod python;
pub mod raw;
pub mod require;
pub mod served;
pub mod slurm;
pub mod tmpfs;
pub mod wire;
pub mod workload;

use eddy_client::Client;
use eddy_config::{Config, DaemonEntry, Deployment};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The `eddy` program of this build: `target/<profile>/eddy`, beside the `deps` directory
/// that holds the running test binary (`EDDY_BIN_DIR` names another directory). `make test`
/// builds it (`cargo build --bins`) before the tests; a missing program fails the test.
pub fn eddy_bin() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| program_of_build("eddy"))
}

/// The daemon `eddyd` of this build, beside `eddy` (see [`eddy_bin`]).
pub fn eddyd_bin() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| program_of_build("eddyd"))
}

/// The directory of this build's programs: `EDDY_BIN_DIR`, else the parent of the test
/// binary's directory when that is `deps` (integration tests), else the test binary's own.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("EDDY_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe.parent().expect("the test binary's directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().unwrap_or(dir).to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

fn program_of_build(name: &str) -> String {
    let path = bin_dir().join(name);
    if !path.is_file() {
        require::missing(&format!(
            "{} is not built (run `cargo build --bins` first; `make test` does)",
            path.display()
        ));
    }
    path.to_str().expect("utf-8 target directory").to_string()
}

/// `libeddy_preload.so` of this build: built by `cargo test` of eddy-cli (a dev-dependency
/// of it), next to the test binary (target/<profile>/deps) or one directory up.
pub fn preload_so() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("test binary directory");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let so = dir.join("libeddy_preload.so");
        if so.is_file() {
            return so;
        }
    }
    panic!(
        "libeddy_preload.so is not next to {} (build it with `cargo build -p eddy-preload`)",
        exe.display()
    );
}

/// `program`, to be run with the preload library on the deployment of state directory
/// `state`, its namespace under `prefix` (`LD_PRELOAD`, `EDDY_PREFIX`, `EDDY_STATE`).
pub fn preloaded(program: impl AsRef<std::ffi::OsStr>, prefix: &str, state: &Path) -> Command {
    let mut c = Command::new(program);
    c.env("LD_PRELOAD", preload_so())
        .env("EDDY_PREFIX", prefix)
        .env("EDDY_STATE", state);
    c
}

/// A small chunk size so that tests cross chunk and daemon boundaries with little data; the
/// mount's FUSE transport as `EDDY_TEST_FUSE_TRANSPORT` says ([`test_fuse_transport`]).
pub fn test_config() -> Config {
    Config {
        chunk_size: 64 * 1024,
        rpc_timeout_ms: 5_000,
        readdir_page: 256,
        fuse_transport: test_fuse_transport(),
        ..Config::default()
    }
}

/// The variable that names the FUSE transport of the test kit's configurations
/// (`fuse_transport`: `dev_fuse`, `io_uring` or `auto`): `make test` runs the mount's suites
/// once more with `io_uring` (scripts/test-lanes.py, the io_uring lane).
pub const FUSE_TRANSPORT_VAR: &str = "EDDY_TEST_FUSE_TRANSPORT";

/// The FUSE transport the tests' mounts use: `EDDY_TEST_FUSE_TRANSPORT`, else the
/// configuration's default. A value that names no transport fails the test (a run meant for
/// io_uring must not pass on `/dev/fuse`); a mount asked to run on io_uring fails the test
/// where the kernel does not offer it ([`require::fuse_io_uring`]).
pub fn test_fuse_transport() -> eddy_config::FuseTransport {
    match std::env::var(FUSE_TRANSPORT_VAR) {
        Err(std::env::VarError::NotPresent) => eddy_config::FuseTransport::default(),
        Ok(v) if v.is_empty() => eddy_config::FuseTransport::default(),
        Ok(v) => eddy_config::FuseTransport::parse(&v).unwrap_or_else(|| {
            panic!("{FUSE_TRANSPORT_VAR}={v:?}: say dev_fuse, io_uring or auto")
        }),
        Err(e) => panic!("{FUSE_TRANSPORT_VAR}: {e}"),
    }
}

/// `test_config` with directory leases on, whatever the default (on: decision 0075, "On by
/// default"), for the tests of leases.
pub fn leased_config() -> Config {
    Config {
        leases: true,
        ..test_config()
    }
}

/// `test_config` with a namespace root other users may search and list (`root_mode` 0755),
/// for tests where several users share one namespace; the default root is 0700, its
/// owner's only (decision 0023).
pub fn shared_config() -> Config {
    Config {
        root_mode: eddy_config::FileMode(0o755),
        ..test_config()
    }
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub dep: Deployment,
    pub deployment_file: PathBuf,
    children: Vec<Option<Child>>,
}

impl Cluster {
    pub fn start(n: usize) -> Cluster {
        Cluster::start_with(n, test_config())
    }

    pub fn start_with(n: usize, config: Config) -> Cluster {
        Cluster::start_on(n, config, |_| PathBuf::new())
    }

    /// Starts `n` daemons; `root_of(i)` gives daemon i's storage root (empty: under the
    /// cluster's temporary directory).
    pub fn start_on(n: usize, config: Config, root_of: impl Fn(usize) -> PathBuf) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let secret = Deployment::new_secret();
        let mut dep = Deployment {
            name: "test".into(),
            job: Default::default(),
            epoch: 0,
            moving_from: None,
            draining: Vec::new(),
            secret,
            config,
            daemons: Vec::new(),
        };
        let deployment_file = dir.path().join("deployment.toml");
        let mut children = Vec::new();
        for id in 0..n as u32 {
            let given = root_of(id as usize);
            let root = if given.as_os_str().is_empty() {
                dir.path().join(format!("d{id}"))
            } else {
                given
            };
            dep.daemons.push(DaemonEntry {
                id,
                host: "localhost".into(),
                addr: "127.0.0.1:0".into(),
                socket: Some(root.join("eddyd.sock")),
                root,
                metrics: None,
            });
        }
        // Written once before start so daemons read secret and config from it.
        dep.save(&deployment_file).expect("save deployment");
        // All started at once, then each awaited: a daemon's start (its stores opened, its
        // directories made) overlaps the others'.
        let launched: Vec<Child> = dep
            .daemons
            .iter()
            .map(|d| launch_daemon(d, &deployment_file, "127.0.0.1:0"))
            .collect();
        for (i, child) in launched.into_iter().enumerate() {
            let (child, addr) = await_ready(child, &dep.daemons[i]);
            dep.daemons[i].addr = addr;
            children.push(Some(child));
        }
        dep.save(&deployment_file).expect("save deployment");
        Cluster {
            dir,
            dep,
            deployment_file,
            children,
        }
    }

    /// What daemon `i` has logged so far (warnings and errors).
    pub fn daemon_log(&self, i: usize) -> String {
        tail_log(&self.dep.daemons[i])
    }

    pub async fn client(&self) -> Client {
        Client::connect(self.dep.clone()).await.expect("connect")
    }

    pub fn root_of(&self, i: usize) -> &Path {
        &self.dep.daemons[i].root
    }

    /// Sends `signal` to daemon `i` (SIGSTOP, say: a daemon that accepts connections and
    /// answers nothing).
    pub fn signal(&self, i: usize, signal: libc::c_int) {
        let child = self.children[i].as_ref().expect("daemon running");
        // SAFETY: plain kill(2) on our own child's pid.
        let r = unsafe { libc::kill(child.id() as i32, signal) };
        assert_eq!(r, 0, "kill({}, {signal})", child.id());
    }

    /// kill -9: no chance to flush anything.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for a clean exit; returns the exit status success.
    pub fn terminate(&mut self, i: usize) -> bool {
        match self.children[i].take() {
            Some(mut c) => {
                // SAFETY: plain kill(2) on our own child's pid.
                unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
                c.wait().map(|s| s.success()).unwrap_or(false)
            }
            None => false,
        }
    }

    /// kill -9 of every daemon, then every one started again on its storage (all at once,
    /// then each awaited).
    pub fn kill_and_restart_all(&mut self) {
        let n = self.children.len();
        for i in 0..n {
            self.kill(i);
        }
        let launched: Vec<Child> = (0..n)
            .map(|i| {
                let d = &self.dep.daemons[i];
                launch_daemon(d, &self.deployment_file, &d.addr.clone())
            })
            .collect();
        for (i, child) in launched.into_iter().enumerate() {
            let (child, bound) = await_ready(child, &self.dep.daemons[i]);
            assert_eq!(bound, self.dep.daemons[i].addr);
            self.children[i] = Some(child);
        }
    }

    /// A FUSE mount of this deployment (`eddy mount --foreground`), unmounted when the guard
    /// is dropped; fails the test where FUSE is unavailable.
    pub fn mount(&self) -> ExtraMount {
        require::fuse();
        let (mnt, child) = mount_at(self, &[]);
        ExtraMount {
            mnt,
            child: Some(child),
        }
    }

    /// Starts `n` more daemons on this deployment, with the next ids and the same secret and
    /// config: the hosts file is rewritten first to list them too (at its epoch, with
    /// `moving_from` as given: what clients place by while items move to them, decision
    /// 0081), the new daemons start from it, then it is written again with their addresses.
    /// Returns their ids.
    pub fn add_daemons(&mut self, n: usize, moving_from: Option<Vec<u32>>) -> Vec<u32> {
        let first = self.dep.daemons.iter().map(|d| d.id + 1).max().unwrap_or(0);
        let ids: Vec<u32> = (first..first + n as u32).collect();
        for &id in &ids {
            let root = self.dir.path().join(format!("d{id}"));
            self.dep.daemons.push(DaemonEntry {
                id,
                host: "localhost".into(),
                addr: "127.0.0.1:0".into(),
                socket: Some(root.join("eddyd.sock")),
                root,
                metrics: None,
            });
        }
        self.dep.moving_from = moving_from;
        self.dep
            .save(&self.deployment_file)
            .expect("save deployment");
        let at = self.dep.daemons.len() - n;
        let launched: Vec<Child> = self.dep.daemons[at..]
            .iter()
            .map(|d| launch_daemon(d, &self.deployment_file, "127.0.0.1:0"))
            .collect();
        for (i, child) in launched.into_iter().enumerate() {
            let (child, addr) = await_ready(child, &self.dep.daemons[at + i]);
            self.dep.daemons[at + i].addr = addr;
            self.children.push(Some(child));
        }
        self.dep
            .save(&self.deployment_file)
            .expect("save deployment");
        ids
    }

    /// Daemon i's entry in the hosts file.
    pub fn entry(&self, i: usize) -> &DaemonEntry {
        &self.dep.daemons[i]
    }

    /// Starts daemon i again on the same root and the same address.
    pub fn restart(&mut self, i: usize) {
        let addr = self.dep.daemons[i].addr.clone();
        let (child, bound) = spawn_daemon(&self.dep.daemons[i], &self.deployment_file, &addr);
        assert_eq!(bound, addr);
        self.children[i] = Some(child);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Every daemon signalled first, then each reaped: their exits overlap.
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
        }
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}

/// Starts daemon `d` and waits until it is ready: the child and the address it bound.
fn spawn_daemon(d: &DaemonEntry, deployment_file: &Path, listen: &str) -> (Child, String) {
    await_ready(launch_daemon(d, deployment_file, listen), d)
}

/// Starts daemon `d` (its ready file removed first), without waiting for it.
// The child is returned to the caller, which awaits it (`await_ready`) and kills it.
#[allow(clippy::zombie_processes)]
fn launch_daemon(d: &DaemonEntry, deployment_file: &Path, listen: &str) -> Child {
    std::fs::create_dir_all(&d.root).expect("create root");
    let _ = std::fs::remove_file(d.root.join("eddyd.ready"));
    let log = std::fs::File::create(log_path(d)).expect("log file");
    Command::new(eddyd_bin())
        .arg("--root")
        .arg(&d.root)
        .arg("--id")
        .arg(d.id.to_string())
        .arg("--listen")
        .arg(listen)
        .arg("--deployment")
        .arg(deployment_file)
        .arg("--log-level")
        .arg("warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("spawn eddyd")
}

/// Waits until daemon `d`, started as `child`, announced its address in its ready file; kills
/// it and fails the test when it does not within 30 s.
fn await_ready(mut child: Child, d: &DaemonEntry) -> (Child, String) {
    let ready = d.root.join("eddyd.ready");
    let addr = eventually::poll_for(Duration::from_secs(30), || {
        let text = std::fs::read_to_string(&ready).ok()?;
        let v = serde_json::from_str::<serde_json::Value>(&text).unwrap_or_default();
        v["addr"].as_str().map(str::to_string)
    });
    match addr {
        Some(addr) => (child, addr),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("daemon {} did not become ready: {}", d.id, tail_log(d));
        }
    }
}

fn tail_log(d: &DaemonEntry) -> String {
    std::fs::read_to_string(log_path(d)).unwrap_or_default()
}

fn log_path(d: &DaemonEntry) -> PathBuf {
    let flat: String = d
        .root
        .to_string_lossy()
        .chars()
        .map(|c| if c == '/' { '_' } else { c })
        .collect();
    std::env::temp_dir().join(format!("eddyd{flat}.log"))
}

/// `setpriv` set to run a program as `uid` (gid the same, no supplementary groups): the
/// caller adds the program and its arguments.
pub fn as_user(uid: u32) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups");
    c
}

/// Runs `script` with sh as `uid` (see `as_user`), from /.
pub fn sh_as_user(uid: u32, script: &str) -> std::process::Output {
    as_user(uid)
        .args(["sh", "-c", script])
        .current_dir("/")
        .output()
        .expect("run setpriv")
}

/// Reads a whole file through the library, in pieces of 4 MiB, as root.
pub async fn read_all(c: &Client, path: &str) -> Vec<u8> {
    let root = eddy_client::Creds::root();
    let f = c
        .open(path, libc::O_RDONLY, 0, root)
        .await
        .unwrap_or_else(|e| panic!("open {path}: {e:?}"));
    let mut out = Vec::new();
    loop {
        let piece = c
            .pread(&f, out.len() as u64, 4 << 20)
            .await
            .unwrap_or_else(|e| panic!("read {path} at {}: {e:?}", out.len()));
        if piece.is_empty() {
            break;
        }
        out.extend_from_slice(&piece);
    }
    c.close(&f).await.unwrap();
    out
}

/// Deterministic bytes for (seed, offset): a fast but wrong system cannot fake them.
pub fn pattern(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((offset + i).wrapping_mul(2654435761) ^ seed.wrapping_mul(40503)) as u8)
        .collect()
}

pub fn errno<T: std::fmt::Debug>(r: Result<T, eddy_client::Errno>) -> i32 {
    r.expect_err("expected an error").errno
}

/// A cluster with a real FUSE mount served by `eddy mount --foreground`.
pub struct Mounted {
    pub mnt: tempfile::TempDir,
    child: Option<Child>,
    // Dropped after the mount is gone.
    pub cluster: Cluster,
}

impl Mounted {
    /// Fails the test (naming what is missing) where FUSE is unavailable.
    pub fn start(n: usize) -> Mounted {
        Mounted::start_with(n, test_config())
    }

    pub fn start_with(n: usize, config: Config) -> Mounted {
        Mounted::start_with_args(n, config, &[])
    }

    /// Like `start_with`, with more arguments for `eddy mount` (`--dev`, `--atime noatime`...).
    pub fn start_with_args(n: usize, config: Config, args: &[&str]) -> Mounted {
        require::fuse();
        let cluster = Cluster::start_with(n, config);
        let (mnt, child) = mount_at(&cluster, args);
        Mounted {
            mnt,
            child: Some(child),
            cluster,
        }
    }

    /// A second mount of the same deployment, as another node would have.
    pub fn another_mount(&self) -> ExtraMount {
        let (mnt, child) = mount_at(&self.cluster, &[]);
        ExtraMount {
            mnt,
            child: Some(child),
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.path().join(rel.trim_start_matches('/'))
    }

    /// Runs a shell command with the mount as working directory; returns (status ok, stdout, stderr).
    pub fn sh(&self, script: &str) -> (bool, String, String) {
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(self.mnt.path())
            .output()
            .expect("sh");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Like `sh`, but the command must succeed.
    pub fn ok(&self, script: &str) -> String {
        let (ok, out, err) = self.sh(script);
        assert!(ok, "`{script}` failed: {err}");
        out
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        unmount(self.mnt.path(), self.child.take());
    }
}

/// Another FUSE mount of a cluster's deployment; unmounted on drop.
pub struct ExtraMount {
    pub mnt: tempfile::TempDir,
    child: Option<Child>,
}

impl ExtraMount {
    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.path().join(rel.trim_start_matches('/'))
    }

    /// Kills the mount's process (SIGKILL), as a node dying would; the mount point stays
    /// until the guard is dropped.
    pub fn kill_process(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ExtraMount {
    fn drop(&mut self) {
        unmount(self.mnt.path(), self.child.take());
    }
}

/// Mounts the cluster's deployment on a new directory with `eddy mount --foreground` and
/// waits until the mount is there; `args` are more arguments for `eddy mount`.
// The child is returned to a guard that unmounts and waits for it on drop.
#[allow(clippy::zombie_processes)]
fn mount_at(cluster: &Cluster, args: &[&str]) -> (tempfile::TempDir, Child) {
    if cluster.dep.config.fuse_transport == eddy_config::FuseTransport::IoUring {
        require::fuse_io_uring();
    }
    let mnt = tempfile::tempdir().expect("mountpoint");
    let log_path = cluster.dir.path().join(format!(
        "mount-{}.log",
        mnt.path().file_name().unwrap_or_default().to_string_lossy()
    ));
    let log = std::fs::File::create(&log_path).expect("log");
    let mut child = Command::new(eddy_bin())
        .arg("mount")
        .arg("--state")
        .arg(cluster.dir.path())
        .arg(mnt.path())
        .arg("--foreground")
        .arg("--allow-other")
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("spawn eddy mount");
    if eventually::poll_for(Duration::from_secs(30), || {
        is_mountpoint(mnt.path()).then_some(())
    })
    .is_none()
    {
        let _ = child.kill();
        let _ = child.wait();
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        panic!("mount did not appear: {log}");
    }
    (mnt, child)
}

/// Unmounts `mnt` and reaps the mount process.
fn unmount(mnt: &Path, child: Option<Child>) {
    let _ = Command::new("fusermount3")
        .arg("-u")
        .arg(mnt)
        .stderr(Stdio::null())
        .status();
    if is_mountpoint(mnt) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(mnt)
            .stderr(Stdio::null())
            .status();
    }
    if let Some(mut c) = child {
        if eventually::exited(&mut c, Duration::from_secs(5)).is_some() {
            return;
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Whether `p` is a mount point, from /proc/self/mountinfo.
pub fn is_mountpoint(p: &Path) -> bool {
    let Ok(canon) = p.canonicalize() else {
        return false;
    };
    let want = canon.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_str()))
}
