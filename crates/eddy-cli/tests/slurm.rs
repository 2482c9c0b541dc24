//! `eddy start --slurm` against a real Slurm: a private single-node cluster (munged,
//! slurmctld and slurmd of Debian's slurm-wlm and munge, see scripts/install-deps.sh) is
//! brought up in a temporary directory, and a deployment lives its whole life inside an
//! allocation made with `salloc`: start, write, read back, status, stop.
//!
//! The daemons run as root (SlurmUser=root), so the test needs euid 0 and the Slurm and
//! munge programs; without them it fails, naming what is missing.

mod common;

use common::cli::free_port;
use common::{EDDY, EDDYD};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Every program the cluster and the job need.
const TOOLS: [&str; 9] = [
    "munged",
    "slurmctld",
    "slurmd",
    "salloc",
    "srun",
    "sinfo",
    "squeue",
    "scancel",
    "scontrol",
];
/// Bound on the cluster coming up (munge socket, then the node idle in sinfo).
const BRING_UP: Duration = Duration::from_secs(30);
/// Bound on the whole allocation: start, put, get, status, stop.
const JOB_BOUND: Duration = Duration::from_secs(60);
/// Bound on each step of tearing the cluster down before signals get harsher.
const TEARDOWN_STEP: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(100);
/// Lines of each log shown when something fails.
const LOG_LINES: usize = 30;

/// The job run by `salloc` on this host; the allocation's nodes are in SLURM_JOB_NODELIST.
/// Files for the test to check are left in $T.
const JOB_SCRIPT: &str = r#"set -eu
echo "$SLURM_JOB_ID" > "$T/jobid"
"$EDDY" start --slurm --root "$T/root-{host}" --state "$T/state" --listen-port "$PORT"
cp "$T/state/deployment.toml" "$T/deployment.toml"
squeue -h -s -j "$SLURM_JOB_ID" -o '%i|%N|%j' > "$T/steps"
"$EDDY" debug put --state "$T/state" "$T/payload.in" /payload
"$EDDY" debug get --state "$T/state" /payload "$T/payload.out"
"$EDDY" status --state "$T/state" --json > "$T/status.json"
"$EDDY" stop --state "$T/state"
"#;

/// A program on PATH or in the sbin directories, where Debian puts the Slurm daemons.
fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Fails the test, naming what is missing, if the private cluster cannot run here.
fn require_slurm() {
    common::require::root("run slurmctld and slurmd as root (SlurmUser=root)");
    common::require::programs(&TOOLS, "slurm-wlm and munge");
}

fn short_hostname() -> String {
    let out = Command::new("hostname").arg("-s").output().unwrap();
    assert!(out.status.success(), "hostname -s failed");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(LOG_LINES);
    format!("--- {}:\n{}", path.display(), lines[from..].join("\n"))
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Pids of the processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<i32> {
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

/// Waits up to `bound` for the child to exit.
fn wait_bounded(child: &mut Child, bound: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + bound;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// A private Slurm cluster of this one host. Dropping it cancels its jobs, stops its
/// daemons and removes its directory, whatever state the test left it in.
struct SlurmCluster {
    dir: tempfile::TempDir,
    conf: PathBuf,
    node: String,
    /// munged, slurmctld, slurmd: in start order.
    daemons: Vec<(&'static str, Child)>,
}

impl SlurmCluster {
    fn start() -> SlurmCluster {
        let dir = tempfile::tempdir().unwrap();
        // munged refuses a socket in a directory others cannot traverse.
        set_mode(dir.path(), 0o755);
        let mut cluster = SlurmCluster {
            conf: dir.path().join("slurm.conf"),
            node: short_hostname(),
            dir,
            daemons: Vec::new(),
        };
        cluster.start_munge();
        cluster.write_conf();
        let conf = cluster.conf.display().to_string();
        cluster.spawn("slurmctld", &["-D", "-c", "-f", &conf]);
        let node = cluster.node.clone();
        cluster.spawn("slurmd", &["-D", "-f", &conf, "-N", &node]);
        cluster.wait_node_idle();
        cluster
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
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

    fn write_conf(&self) {
        let d = self.dir.path().display();
        let node = &self.node;
        let conf = format!(
            "ClusterName=eddytest\n\
             SlurmctldHost={node}(127.0.0.1)\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             SlurmctldPort={ctld_port}\n\
             SlurmdPort={slurmd_port}\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             AuthInfo=socket={socket}\n\
             StateSaveLocation={d}/ctld-state\n\
             SlurmdSpoolDir={d}/slurmd-spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\n\
             SlurmdLogFile={d}/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_CPU\n\
             MpiDefault=none\n\
             ReturnToService=2\n\
             SlurmdParameters=config_overrides\n\
             NodeName={node} NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN\n\
             PartitionName=eddy Nodes={node} Default=YES MaxTime=INFINITE State=UP\n",
            ctld_port = free_port(),
            slurmd_port = free_port(),
            socket = self.munge_socket().display(),
        );
        std::fs::write(&self.conf, conf).unwrap();
        for sub in ["ctld-state", "slurmd-spool"] {
            std::fs::create_dir(self.path(sub)).unwrap();
        }
    }

    /// A Slurm client command of this cluster, free of any outer job's SLURM_* variables.
    fn command(&self, tool: &str) -> Command {
        let mut cmd = Command::new(find_tool(tool).unwrap());
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("SLURM_") {
                cmd.env_remove(name);
            }
        }
        cmd.env("SLURM_CONF", &self.conf).env_remove("EDDY_STATE");
        cmd
    }

    /// Starts a daemon in the foreground with its output in `<name>.out`.
    fn spawn<S: AsRef<std::ffi::OsStr>>(&mut self, name: &'static str, args: &[S]) {
        let out = std::fs::File::create(self.path(&format!("{name}.out"))).unwrap();
        let child = self
            .command(name)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        self.daemons.push((name, child));
    }

    /// The daemons' logs, for failure messages.
    fn logs(&self) -> String {
        let names = [
            "munged.out",
            "slurmctld.out",
            "slurmctld.log",
            "slurmd.out",
            "slurmd.log",
        ];
        let tails: Vec<String> = names.iter().map(|n| tail(&self.path(n))).collect();
        tails.join("\n")
    }

    /// Polls `done` until it holds; fails with the logs if a daemon exits or time runs out.
    fn wait_for(&mut self, what: &str, done: impl Fn(&SlurmCluster) -> bool) {
        let deadline = Instant::now() + BRING_UP;
        while !done(self) {
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
            assert!(
                Instant::now() < deadline,
                "no {what} after {BRING_UP:?}\n{}",
                self.logs()
            );
            std::thread::sleep(POLL);
        }
    }

    /// `NODE STATE` lines of sinfo, e.g. `vm idle`.
    fn node_states(&self) -> String {
        let out = self
            .command("sinfo")
            .args(["-h", "-N", "-o", "%N %t"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn wait_node_idle(&mut self) {
        let idle = format!("{} idle", self.node);
        self.wait_for(&format!("`{idle}` in sinfo"), |c| c.node_states() == idle);
    }

    fn jobs(&self) -> String {
        let out = self.command("squeue").args(["-h", "-o", "%i"]).output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        let _ = self.command("scancel").args(["--user", "root"]).output();
        let deadline = Instant::now() + TEARDOWN_STEP;
        while !self.jobs().is_empty() && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
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
        // Anything still running from this directory (a daemon whose step outlived Slurm).
        for pid in processes_mentioning(&self.dir.path().to_string_lossy()) {
            // SAFETY: a plain signal; the pid was read from /proc a moment ago.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// Bytes that cross several RPC pieces and do not repeat with a short period.
fn payload(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x2545_f491;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x.to_le_bytes()[0]
        })
        .collect()
}

#[test]
fn start_put_get_status_stop_inside_a_real_slurm_allocation() {
    require_slurm();
    let cluster = SlurmCluster::start();
    let t = cluster.dir.path().to_path_buf();
    let data = payload(3 * 1024 * 1024 + 4321);
    std::fs::write(t.join("payload.in"), &data).unwrap();
    std::fs::write(t.join("job.sh"), JOB_SCRIPT).unwrap();
    let port = free_port();

    let output = std::fs::File::create(t.join("salloc.out")).unwrap();
    let mut salloc = cluster
        .command("salloc")
        .args(["-N1", "--time=2", "sh"])
        .arg(t.join("job.sh"))
        .env("T", &t)
        .env("EDDY", EDDY)
        .env("EDDY_DAEMON_BIN", EDDYD)
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(output.try_clone().unwrap())
        .stderr(output)
        .spawn()
        .unwrap();
    let status = wait_bounded(&mut salloc, JOB_BOUND);
    if status.is_none() {
        let _ = salloc.kill();
        let _ = salloc.wait();
    }
    let report = || {
        format!(
            "{}\n{}\n{}",
            tail(&t.join("salloc.out")),
            tail(&t.join("state/daemon-0.log")),
            cluster.logs()
        )
    };
    assert!(
        status.is_some_and(|s| s.success()),
        "the job failed or did not end within {JOB_BOUND:?} ({status:?})\n{}",
        report()
    );

    // The deployment is named after the job and has one daemon on the one node.
    let job_id = std::fs::read_to_string(t.join("jobid")).unwrap();
    let job_id = job_id.trim();
    let dep = eddy_config::Deployment::load(&t.join("deployment.toml")).unwrap();
    assert_eq!(dep.name, job_id, "the Slurm job id names the deployment");
    assert_eq!(dep.daemons.len(), 1, "one daemon per node: {dep:?}");
    let daemon = &dep.daemons[0];
    assert_eq!(daemon.host, cluster.node);
    assert!(
        daemon.addr.ends_with(&format!(":{port}")),
        "{}",
        daemon.addr
    );
    assert_eq!(daemon.root, t.join(format!("root-{}", cluster.node)));

    // The daemon ran as a step of the job, launched by srun on the node.
    let steps = std::fs::read_to_string(t.join("steps")).unwrap();
    let daemon_step = format!("{job_id}.0|{}|eddyd", cluster.node);
    assert!(
        steps.lines().any(|l| l.trim() == daemon_step),
        "no step {daemon_step:?} in squeue:\n{steps}"
    );

    // The file written through the client library read back identically.
    let back = std::fs::read(t.join("payload.out")).unwrap();
    assert_eq!(back.len(), data.len());
    assert!(
        back == data,
        "the file read back differs from the one written"
    );

    let status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.join("status.json")).unwrap()).unwrap();
    let daemons = status["daemons"].as_array().unwrap();
    assert_eq!(daemons.len(), 1, "{status}");
    assert_eq!(daemons[0]["up"], true, "{status}");
    assert_eq!(daemons[0]["addr"], daemon.addr.as_str(), "{status}");

    // `eddy stop` said so, and left neither a deployment nor a daemon behind.
    let said = std::fs::read_to_string(t.join("salloc.out")).unwrap();
    assert!(
        said.contains(&format!("deployment \"{job_id}\" stopped (1 daemons)")),
        "{said}"
    );
    assert!(!t.join("state/deployment.toml").exists());
    let root = t.join(format!("root-{}", cluster.node));
    let left = processes_mentioning(&root.to_string_lossy());
    assert!(left.is_empty(), "processes left running: {left:?}");
}
