//! `eddy start --slurm` against a real Slurm: a private single-node cluster (munged,
//! slurmctld and slurmd of Debian's slurm-wlm and munge, see scripts/install-deps.sh) is
//! brought up in a temporary directory, and a deployment lives its whole life inside an
//! allocation made with `salloc`: start, write, read back, status, stop.
//!
//! The daemons run as root (SlurmUser=root), so the test needs euid 0 and the Slurm and
//! munge programs; without them it fails, naming what is missing.

mod common;

use common::cli::free_port;
use common::slurm::{processes_mentioning, require_slurm, tail, wait_bounded, SlurmCluster};
use common::{EDDY, EDDYD};
use std::process::Stdio;
use std::time::Duration;

/// Bound on the whole allocation: start, put, get, status, stop.
const JOB_BOUND: Duration = Duration::from_secs(60);

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
    assert_eq!(daemon.host, cluster.node());
    assert!(
        daemon.addr.ends_with(&format!(":{port}")),
        "{}",
        daemon.addr
    );
    assert_eq!(daemon.root, t.join(format!("root-{}", cluster.node())));

    // The daemon ran as a step of the job, launched by srun on the node.
    let steps = std::fs::read_to_string(t.join("steps")).unwrap();
    let daemon_step = format!("{job_id}.0|{}|eddyd", cluster.node());
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
    let root = t.join(format!("root-{}", cluster.node()));
    let left = processes_mentioning(&root.to_string_lossy());
    assert!(left.is_empty(), "processes left running: {left:?}");
}
