//! A private Slurm cluster on this host for tests: munged, slurmctld and one or more slurmd
//! of Debian's slurm-wlm and munge (see scripts/install-deps.sh), all in a temporary
//! directory, run as root (SlurmUser=root).
//!
//! Several nodes live on this one host as several slurmd (`slurmd -N n1`, ...), each with its
//! own port and its own loopback address (127.N.0.11, 127.N.0.12, ..., N chosen per cluster so
//! that clusters of tests running at once never share an address; Linux routes all of
//! 127/8 to lo) and `NodeHostname` this host. The burst_buffer/lua plugin can be switched on
//! with a `burst_buffer.lua` and the text of a `burst_buffer.conf`, installed next to the
//! private slurm.conf, where the plugin looks for them.
//!
//! With [`SlurmBuilder::accounting`] the cluster keeps real accounting: a private MariaDB
//! server (its own data directory, a unix socket only, run as the `mysql` user) under a
//! private slurmdbd (`slurmdbd.conf` 0600, StorageType=accounting_storage/mysql), the cluster
//! registered with `sacctmgr`, and `AccountingStorageType=accounting_storage/slurmdbd` in
//! slurm.conf, so that `sacct` knows the jobs that ran (`slurm/accounting.rs`). Without it,
//! no accounting.
//!
//! Every wait is bounded; a failure shows the tails of the daemons' logs. Dropping the cluster
//! cancels its jobs and stops its daemons, whatever state the test left it in.

mod accounting;

use super::cli::free_port;
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

/// Every program the cluster and its jobs need.
pub const TOOLS: [&str; 11] = [
    "munged",
    "slurmctld",
    "slurmd",
    "salloc",
    "sbatch",
    "srun",
    "sinfo",
    "squeue",
    "scancel",
    "scontrol",
    "runuser",
];
/// What accounting needs besides [`TOOLS`].
pub const ACCOUNTING_TOOLS: [&str; 6] = [
    "mariadbd",
    "mariadb-install-db",
    "mariadb",
    "slurmdbd",
    "sacctmgr",
    "sacct",
];
/// The system user the private MariaDB server runs as (the mariadb-server package makes it).
const DB_USER: &str = "mysql";
/// Bound on the cluster coming up (munge socket, then every node idle in sinfo).
pub const BRING_UP: Duration = Duration::from_secs(30);
/// Bound on each step of tearing the cluster down before signals get harsher.
const TEARDOWN_STEP: Duration = Duration::from_secs(5);
/// Bound on one Slurm client command (sbatch, squeue, scontrol, scancel).
const CLIENT_BOUND: Duration = Duration::from_secs(20);
pub const POLL: Duration = Duration::from_millis(100);
/// Lines of each log shown when something fails.
const LOG_LINES: usize = 30;
/// The cluster's name in slurm.conf (and in slurmdbd, with accounting).
pub const CLUSTER: &str = "eddytest";
/// The partition holding every node.
pub const PARTITION: &str = "eddy";

/// A program on PATH or in the sbin directories, where Debian puts the Slurm daemons.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    super::require::find_program(name)
}

/// Fails the test, naming what is missing, if the private cluster cannot run here.
pub fn require_slurm() {
    super::require::root("run slurmctld and slurmd as root (SlurmUser=root)");
    super::require::programs(&TOOLS, "slurm-wlm and munge");
}

/// Fails the test, naming what is missing, if the private cluster cannot keep accounting.
pub fn require_accounting() {
    require_slurm();
    super::require::programs(
        &ACCOUNTING_TOOLS,
        "slurmdbd, slurm-client, mariadb-server and mariadb-client",
    );
    if nix_user_id(DB_USER).is_none() {
        super::require::missing(&format!(
            "the system user `{DB_USER}` is missing (Debian package mariadb-server makes it)"
        ));
    }
}

/// The uid and gid of a user of the password database.
fn nix_user_id(name: &str) -> Option<(u32, u32)> {
    let name = std::ffi::CString::new(name).ok()?;
    // SAFETY: getpwnam with a NUL-terminated name; the fields are copied at once.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return None;
    }
    // SAFETY: non-null, as getpwnam returned it.
    Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

pub fn short_hostname() -> String {
    let out = Command::new("hostname").arg("-s").output().unwrap();
    assert!(out.status.success(), "hostname -s failed");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The last lines of a file, headed by its path.
pub fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(LOG_LINES);
    format!("--- {}:\n{}", path.display(), lines[from..].join("\n"))
}

pub fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Pids of the processes whose command line mentions `needle`.
pub fn processes_mentioning(needle: &str) -> Vec<i32> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| u32::try_from(pid).is_ok_and(|p| p != me))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .collect()
}

/// What a failed burst-buffer test may leave under `dir`: every mount below `dir/mnt` (lazily
/// unmounted, as often as it is stacked) and every process whose command line names `dir`.
pub fn clean_leftovers(dir: &Path) {
    for m in std::fs::read_dir(dir.join("mnt"))
        .into_iter()
        .flatten()
        .flatten()
    {
        while super::is_mountpoint(&m.path()) {
            let ok = Command::new("umount")
                .arg("-l")
                .arg(m.path())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                break;
            }
        }
    }
    for pid in processes_mentioning(&dir.display().to_string()) {
        // SAFETY: signalling a pid; at worst one that already exited.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// Waits up to `bound` for the child to exit.
pub fn wait_bounded(child: &mut Child, bound: Duration) -> Option<ExitStatus> {
    crate::eventually::exited(child, bound)
}

/// Runs a command to its end within `bound`, killing it past that; `None` if it did not end
/// or could not start.
pub fn output_bounded(cmd: &mut Command, bound: Duration) -> Option<Output> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    // Drain the pipes on threads so that a chatty command cannot block on a full pipe.
    let mut out = child.stdout.take()?;
    let mut err = child.stderr.take()?;
    let out_thread = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_thread = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let Some(status) = wait_bounded(&mut child, bound) else {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    };
    Some(Output {
        status,
        stdout: out_thread.join().unwrap_or_default(),
        stderr: err_thread.join().unwrap_or_default(),
    })
}

/// Parses `scontrol show job -o` output: `Key=Value` words; a word without `=` (or a value
/// with spaces, such as `BurstBuffer=` or `Command=`) continues the previous value.
pub fn parse_scontrol_line(line: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let mut last: Option<String> = None;
    for word in line.split_whitespace() {
        let key = word.split_once('=').map(|(k, _)| k).filter(|k| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '/' | '_'))
        });
        match (key, &last) {
            (Some(k), _) => {
                let value = &word[k.len() + 1..];
                map.insert(k.to_string(), value.to_string());
                last = Some(k.to_string());
            }
            (None, Some(k)) => {
                let v = map.get_mut(k).unwrap();
                v.push(' ');
                v.push_str(word);
            }
            (None, None) => {}
        }
    }
    map
}

/// A second octet for this process's loopback addresses (127.N.x.y), different for every
/// call within a test binary and, likely, across binaries running at once.
pub fn loopback_net() -> u8 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = std::process::id().wrapping_mul(7) + NEXT.fetch_add(1, Ordering::Relaxed);
    (1 + n % 250) as u8
}

/// How to build a [`SlurmCluster`].
#[derive(Default)]
pub struct SlurmBuilder {
    nodes: usize,
    burst_buffer: Option<(PathBuf, String)>,
    accounting: bool,
    /// A second partition: its name and how many of the last nodes it holds (they leave
    /// [`PARTITION`]).
    partition: Option<(String, usize)>,
}

impl SlurmBuilder {
    /// `n` nodes `n1`..`nN`, each a slurmd of its own on this host; with one node (the
    /// default) the node is named after this host and listens on 127.0.0.1.
    pub fn nodes(mut self, n: usize) -> SlurmBuilder {
        assert!((1..=200).contains(&n), "1 to 200 nodes, not {n}");
        self.nodes = n;
        self
    }

    /// Switches on burst_buffer/lua: `lua` is copied to `burst_buffer.lua` and `conf` written
    /// to `burst_buffer.conf`, both next to slurm.conf.
    pub fn burst_buffer(mut self, lua: &Path, conf: &str) -> SlurmBuilder {
        self.burst_buffer = Some((lua.to_path_buf(), conf.to_string()));
        self
    }

    /// Real accounting: a private MariaDB and slurmdbd (see the module's header), so that
    /// `sacct` of [`SlurmCluster::command`] knows the jobs.
    pub fn accounting(mut self) -> SlurmBuilder {
        self.accounting = true;
        self
    }

    /// A second partition `name` of the last `nodes` nodes, which then are not in the
    /// default partition [`PARTITION`] (which keeps at least one).
    pub fn partition(mut self, name: &str, nodes: usize) -> SlurmBuilder {
        self.partition = Some((name.to_string(), nodes));
        self
    }

    pub fn start(self) -> SlurmCluster {
        SlurmCluster::start_with(self)
    }
}

/// A private Slurm cluster of this one host. Dropping it cancels its jobs, stops its
/// daemons and removes its directory, whatever state the test left it in.
pub struct SlurmCluster {
    pub dir: tempfile::TempDir,
    pub conf: PathBuf,
    /// Node names, in order.
    pub nodes: Vec<String>,
    /// munged, slurmctld, slurmd...: in start order.
    daemons: Vec<(String, Child)>,
    /// Jobs submitted through [`SlurmCluster::sbatch`], cancelled on drop.
    jobs: std::cell::RefCell<Vec<u32>>,
}

impl SlurmCluster {
    pub fn builder() -> SlurmBuilder {
        SlurmBuilder::default().nodes(1)
    }

    /// One node named after this host, no burst buffer.
    pub fn start() -> SlurmCluster {
        SlurmCluster::builder().start()
    }

    fn start_with(b: SlurmBuilder) -> SlurmCluster {
        let dir = tempfile::tempdir().unwrap();
        // munged refuses a socket in a directory others cannot traverse; a non-root
        // submitter must reach the job scripts and the jobs directory.
        set_mode(dir.path(), 0o755);
        let nodes = if b.nodes == 1 {
            vec![short_hostname()]
        } else {
            (1..=b.nodes).map(|i| format!("n{i}")).collect()
        };
        let mut cluster = SlurmCluster {
            conf: dir.path().join("slurm.conf"),
            nodes,
            dir,
            daemons: Vec::new(),
            jobs: Default::default(),
        };
        let jobs = cluster.jobs_dir();
        std::fs::create_dir(&jobs).unwrap();
        set_mode(&jobs, 0o1777);
        cluster.start_munge();
        let dbd_port = b.accounting.then(free_port);
        cluster.write_conf(b.burst_buffer.is_some(), dbd_port, b.partition.as_ref());
        if let Some(port) = dbd_port {
            cluster.start_accounting(port);
        }
        if let Some((lua, conf)) = &b.burst_buffer {
            std::fs::copy(lua, cluster.path("burst_buffer.lua"))
                .unwrap_or_else(|e| panic!("cannot copy {}: {e}", lua.display()));
            std::fs::write(cluster.path("burst_buffer.conf"), conf).unwrap();
        }
        let conf = cluster.conf.display().to_string();
        cluster.spawn("slurmctld", &["-D", "-c", "-f", &conf]);
        for node in cluster.nodes.clone() {
            cluster.spawn(&format!("slurmd-{node}"), &["-D", "-f", &conf, "-N", &node]);
        }
        cluster.wait_nodes_idle();
        cluster
    }

    /// The first (with one node, the only) node.
    pub fn node(&self) -> &str {
        &self.nodes[0]
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A directory anyone may write (mode 1777): job scripts and default job output.
    pub fn jobs_dir(&self) -> PathBuf {
        self.path("jobs")
    }

    fn munge_socket(&self) -> PathBuf {
        self.path("munge/munge.socket")
    }

    fn start_munge(&mut self) {
        let keys = self.path("munge-key");
        std::fs::create_dir(&keys).unwrap();
        set_mode(&keys, 0o700);
        let mut key = vec![0u8; 1024];
        std::fs::File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut key)
            .unwrap();
        let key_file = keys.join("munge.key");
        std::fs::write(&key_file, &key).unwrap();
        set_mode(&key_file, 0o400);
        let run = self.path("munge");
        std::fs::create_dir(&run).unwrap();
        set_mode(&run, 0o755);
        let opt = |name: &str, path: &Path| format!("--{name}={}", path.display());
        let args = [
            "-F".to_string(),
            opt("socket", &self.munge_socket()),
            opt("key-file", &key_file),
            opt("pid-file", &run.join("munged.pid")),
            opt("log-file", &run.join("munged.log")),
            opt("seed-file", &run.join("munged.seed")),
        ];
        self.spawn("munged", &args);
        self.wait_for("the munge socket", |c| c.munge_socket().exists());
    }

    fn write_conf(
        &self,
        burst_buffer: bool,
        dbd_port: Option<u16>,
        partition: Option<&(String, usize)>,
    ) {
        let d = self.dir.path().display();
        let (main, other) = match partition {
            Some((name, n)) => {
                assert!(
                    *n >= 1 && *n < self.nodes.len(),
                    "partition {name} of {n} of {} nodes leaves none to {PARTITION}",
                    self.nodes.len()
                );
                let (main, other) = self.nodes.split_at(self.nodes.len() - n);
                (
                    main.to_vec(),
                    format!(
                        "PartitionName={name} Nodes={} MaxTime=INFINITE State=UP\n",
                        other.join(",")
                    ),
                )
            }
            None => (self.nodes.clone(), String::new()),
        };
        let host = short_hostname();
        let node_lines: String = if self.nodes.len() == 1 {
            format!(
                "NodeName={} NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN\n",
                self.nodes[0]
            )
        } else {
            self.nodes
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    format!(
                        "NodeName={n} NodeHostname={host} NodeAddr=127.{net}.0.{addr} Port={port} \
                         CPUs=1 RealMemory=100 State=UNKNOWN\n",
                        net = loopback_net(),
                        addr = 11 + i,
                        port = free_port(),
                    )
                })
                .collect()
        };
        let bb = if burst_buffer {
            // Slurm's own reading of the directives takes time that grows faster than their
            // number (0.7 s at 50,000 lines): a site bounds scripts (docs/guide/slurm-admin.md).
            "BurstBufferType=burst_buffer/lua\nDebugFlags=BurstBuffer\n\
             SchedulerParameters=max_script_size=1048576\n"
        } else {
            ""
        };
        // Clients reach slurmdbd with AccountingStoragePass as their munge socket.
        let accounting = match dbd_port {
            Some(port) => format!(
                "AccountingStorageType=accounting_storage/slurmdbd\n\
                 AccountingStorageHost=127.0.0.1\n\
                 AccountingStoragePort={port}\n\
                 AccountingStoragePass={socket}\n",
                socket = self.munge_socket().display(),
            ),
            None => "AccountingStorageType=accounting_storage/none\n".to_string(),
        };
        let conf = format!(
            "ClusterName={CLUSTER}\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             SlurmctldPort={ctld_port}\n\
             SlurmdPort={slurmd_port}\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             AuthInfo=socket={socket}\n\
             StateSaveLocation={d}/ctld-state\n\
             SlurmdSpoolDir={d}/slurmd-spool/%n\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\n\
             SlurmdLogFile={d}/slurmd-%n.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             {accounting}\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_CPU\n\
             MpiDefault=none\n\
             ReturnToService=2\n\
             SlurmdParameters=config_overrides\n\
             {bb}\
             {node_lines}\
             PartitionName={PARTITION} Nodes={nodes} Default=YES MaxTime=INFINITE State=UP\n\
             {other}",
            ctld_port = free_port(),
            slurmd_port = free_port(),
            socket = self.munge_socket().display(),
            nodes = main.join(","),
        );
        std::fs::write(&self.conf, conf).unwrap();
        for sub in ["ctld-state", "slurmd-spool"] {
            std::fs::create_dir(self.path(sub)).unwrap();
        }
    }

    /// A Slurm client command of this cluster, free of any outer job's SLURM_* variables.
    /// The daemons are started with it too, so that what they run (burst_buffer.lua calling
    /// `scontrol`, job steps) reaches this cluster through SLURM_CONF.
    pub fn command(&self, tool: &str) -> Command {
        let program = find_tool(tool).unwrap_or_else(|| PathBuf::from(tool));
        let mut cmd = Command::new(program);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("SLURM_") {
                cmd.env_remove(name);
            }
        }
        cmd.env("SLURM_CONF", &self.conf).env_remove("EDDY_STATE");
        cmd
    }

    /// `tool args` run as `user` (through runuser) or as root, bounded in time.
    fn client(&self, tool: &str, args: &[&str], user: Option<&str>) -> Result<Output, String> {
        let mut cmd = match user {
            Some(user) => {
                let mut cmd = self.command("runuser");
                cmd.args(["-u", user, "--"]);
                cmd.arg(find_tool(tool).unwrap_or_else(|| PathBuf::from(tool)));
                cmd
            }
            None => self.command(tool),
        };
        cmd.args(args).current_dir(self.jobs_dir());
        output_bounded(&mut cmd, CLIENT_BOUND).ok_or_else(|| {
            format!(
                "`{tool} {}` did not end in {CLIENT_BOUND:?}",
                args.join(" ")
            )
        })
    }

    /// Submits `script` with `sbatch --parsable extra_args`, as `user` (`runuser -u`) or as
    /// root. The script is written under [`Self::jobs_dir`], which is also the working
    /// directory (default output `slurm-<id>.out` there). Ok: the job id; Err: sbatch's
    /// stderr (or why it did not run).
    pub fn sbatch(
        &self,
        script: &str,
        extra_args: &[&str],
        user: Option<&str>,
    ) -> Result<u32, String> {
        let n = self.jobs.borrow().len();
        let file = self.jobs_dir().join(format!(
            "script-{n}-{}.sh",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::write(&file, script).unwrap();
        set_mode(&file, 0o644);
        let file = file.display().to_string();
        let mut args = vec!["--parsable"];
        args.extend_from_slice(extra_args);
        args.push(&file);
        let out = self.client("sbatch", &args, user)?;
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        if !out.status.success() {
            return Err(stderr);
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        // --parsable prints `id` or `id;cluster`.
        let id = stdout
            .trim()
            .split(';')
            .next()
            .and_then(|s| s.parse::<u32>().ok())
            .ok_or_else(|| format!("sbatch printed no job id: {stdout:?} {stderr}"))?;
        self.jobs.borrow_mut().push(id);
        Ok(id)
    }

    /// `scontrol show job -o id` as a map (JobState, Reason, NodeList, BurstBufferState...);
    /// empty if Slurm no longer knows the job.
    pub fn scontrol_show_job(&self, id: u32) -> BTreeMap<String, String> {
        let id = id.to_string();
        match self.client("scontrol", &["show", "job", "-o", &id], None) {
            Ok(out) if out.status.success() => {
                parse_scontrol_line(&String::from_utf8_lossy(&out.stdout))
            }
            _ => BTreeMap::new(),
        }
    }

    /// The job's state (PENDING, RUNNING, COMPLETED...), or "" if unknown.
    pub fn job_state(&self, id: u32) -> String {
        self.scontrol_show_job(id)
            .remove("JobState")
            .unwrap_or_default()
    }

    /// The job's reason as squeue prints it (`%r`, spaces kept, e.g.
    /// `burst_buffer/lua: slurm_bb_data_in: ...`); scontrol's Reason (spaces turned into
    /// `_`) once the job has left squeue; "" if unknown.
    pub fn job_reason(&self, id: u32) -> String {
        let id_s = id.to_string();
        if let Ok(out) = self.client("squeue", &["-h", "-j", &id_s, "-o", "%r"], None) {
            let r = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if out.status.success() && !r.is_empty() {
                return r;
            }
        }
        self.scontrol_show_job(id)
            .remove("Reason")
            .unwrap_or_default()
    }

    /// Waits up to `bound` for the job to reach one of `states`; Ok: the state reached;
    /// Err: the last state and reason seen, with the daemons' logs.
    pub fn wait_state(&self, id: u32, states: &[&str], bound: Duration) -> Result<String, String> {
        let mut state = String::new();
        let every = Duration::from_millis(250);
        let reached = crate::eventually::poll_every(bound, every, || {
            state = self.job_state(id);
            states.contains(&state.as_str()).then(|| state.clone())
        });
        reached.ok_or_else(|| {
            format!(
                "job {id} not in {states:?} after {bound:?}: state {state:?}, reason {:?}\n{}",
                self.job_reason(id),
                self.logs()
            )
        })
    }

    /// `scancel [--hurry] id`.
    pub fn cancel(&self, id: u32, hurry: bool) -> Result<(), String> {
        let id = id.to_string();
        let mut args = vec![id.as_str()];
        if hurry {
            args.insert(0, "--hurry");
        }
        let out = self.client("scancel", &args, None)?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).to_string())
        }
    }

    /// Starts a daemon in the foreground with its output in `<name>.out`.
    fn spawn<S: AsRef<std::ffi::OsStr>>(&mut self, name: &str, args: &[S]) {
        let out = std::fs::File::create(self.path(&format!("{name}.out"))).unwrap();
        let tool = name.split('-').next().unwrap();
        let child = self
            .command(tool)
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        self.daemons.push((name.to_string(), child));
    }

    /// The daemons' logs, for failure messages.
    pub fn logs(&self) -> String {
        let mut names = vec![
            "munged.out".to_string(),
            "slurmctld.out".to_string(),
            "slurmctld.log".to_string(),
        ];
        for n in &self.nodes {
            names.push(format!("slurmd-{n}.out"));
            names.push(format!("slurmd-{n}.log"));
        }
        if self.path("slurmdbd.conf").exists() {
            for n in ["mysql-run/mariadbd.err", "slurmdbd.out", "slurmdbd.log"] {
                names.push(n.to_string());
            }
        }
        let tails: Vec<String> = names.iter().map(|n| tail(&self.path(n))).collect();
        tails.join("\n")
    }

    /// Polls `done` until it holds; fails with the logs if a daemon exits or time runs out.
    fn wait_for(&mut self, what: &str, done: impl Fn(&SlurmCluster) -> bool) {
        let reached = crate::eventually::poll_every(BRING_UP, POLL, || {
            if done(self) {
                return Some(());
            }
            let exited: Vec<String> = self
                .daemons
                .iter_mut()
                .filter_map(|(name, child)| {
                    let status = child.try_wait().ok()??;
                    Some(format!("{name} exited ({status})"))
                })
                .collect();
            assert!(
                exited.is_empty(),
                "{} while waiting for {what}\n{}",
                exited.join(", "),
                self.logs()
            );
            None
        });
        assert!(
            reached.is_some(),
            "no {what} after {BRING_UP:?}\n{}",
            self.logs()
        );
    }

    /// `NODE STATE` lines of sinfo, sorted, e.g. `vm idle`.
    pub fn node_states(&self) -> String {
        let Ok(out) = self.client("sinfo", &["-h", "-N", "-o", "%N %t"], None) else {
            return String::new();
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines: Vec<&str> = text.lines().map(str::trim).collect();
        lines.sort_unstable();
        lines.join("\n")
    }

    fn wait_nodes_idle(&mut self) {
        let mut want: Vec<String> = self.nodes.iter().map(|n| format!("{n} idle")).collect();
        want.sort_unstable();
        let want = want.join("\n");
        self.wait_for(&format!("`{want}` in sinfo"), |c| c.node_states() == want);
    }

    /// Ids of the jobs squeue lists, one a line.
    pub fn jobs(&self) -> String {
        self.client("squeue", &["-h", "-o", "%i"], None)
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        let _ = self.client("scancel", &["--partition", PARTITION], None);
        for id in self.jobs.borrow().iter() {
            let _ = self.client("scancel", &["--hurry", &id.to_string()], None);
        }
        // Bounded, never a panic (this is drop): jobs still listed die with the daemons.
        crate::eventually::poll_every(TEARDOWN_STEP, POLL, || self.jobs().is_empty().then_some(()));
        // Stop the daemons in reverse order: slurmd, slurmctld, then munged.
        for (_, child) in self.daemons.iter_mut().rev() {
            if let Ok(pid) = i32::try_from(child.id()) {
                // SAFETY: the child is ours and not yet reaped, so its pid is not reused.
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
            }
            if wait_bounded(child, TEARDOWN_STEP).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // Anything still running from this directory (slurmscriptd, a daemon whose step
        // outlived Slurm).
        for pid in processes_mentioning(&self.dir.path().to_string_lossy()) {
            // SAFETY: a plain signal; the pid was read from /proc a moment ago.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}
