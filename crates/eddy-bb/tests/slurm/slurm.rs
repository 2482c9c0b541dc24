//! `eddy start --slurm` against a real Slurm: a private single-node cluster (munged,
//! slurmctld and slurmd of Debian's slurm-wlm and munge, see scripts/install-deps.sh) is
//! brought up in a temporary directory, and a deployment lives its whole life inside an
//! allocation made with `salloc`: start, write, read back, status, stop.
//!
//! The daemons run as root (SlurmUser=root), so the test needs euid 0 and the Slurm and
//! munge programs; without them it fails, naming what is missing.

use eddy_testkit::cli::free_port;
use eddy_testkit::slurm::{processes_mentioning, require_slurm, tail, wait_bounded, SlurmCluster};
use eddy_testkit::{eddy_bin, eddyd_bin};
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
        .env("EDDY", eddy_bin())
        .env("EDDY_DAEMON_BIN", eddyd_bin())
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

/// burst_buffer.lua of the plugin test: job_process refuses `#EDDY bad`, data_in fails on
/// `#EDDY fail_data_in`, setup, data_in and teardown leave their arguments in `MARKS`, and
/// paths gives the job EDDY_BB_TEST. Only the arguments common to Slurm 22.05 and later
/// are used (later versions append uid and gid).
const BB_LUA: &str = r##"
local marks = "MARKS"
local function script_has(path, word)
  local f = io.open(path)
  if not f then return false end
  local s = f:read("*a")
  f:close()
  return string.find(s, word, 1, true) ~= nil
end
local function mark(name, ...)
  local f = io.open(marks .. "/" .. name, "a")
  f:write(table.concat({...}, " ") .. "\n")
  f:close()
end
function slurm_bb_job_process(script)
  if script_has(script, "#EDDY bad") then
    return slurm.ERROR, "eddy: refused the bad directive"
  end
  return slurm.SUCCESS
end
function slurm_bb_pools()
  return slurm.SUCCESS, '{"pools":[{"id":"eddy","granularity":1,"quantity":1000,"free":1000}]}'
end
function slurm_bb_setup(job_id, uid, gid, pool, size)
  mark("setup-" .. job_id, job_id, uid, gid, pool, size)
  return slurm.SUCCESS
end
function slurm_bb_data_in(job_id, script)
  if script_has(script, "#EDDY fail_data_in") then
    return slurm.ERROR, "eddy: stage-in failed"
  end
  mark("data_in-" .. job_id, job_id)
  return slurm.SUCCESS
end
function slurm_bb_job_teardown(job_id, script, hurry)
  mark("teardown-" .. job_id, job_id, hurry)
  return slurm.SUCCESS
end
function slurm_bb_paths(job_id, script, path_file)
  local f = io.open(path_file, "a")
  f:write("EDDY_BB_TEST=job" .. job_id .. "\n")
  f:close()
  return slurm.SUCCESS
end
function slurm_bb_real_size(job_id) return slurm.SUCCESS end
function slurm_bb_pre_run(job_id) return slurm.SUCCESS end
function slurm_bb_post_run(job_id) return slurm.SUCCESS end
function slurm_bb_data_out(job_id) return slurm.SUCCESS end
function slurm_bb_get_status(...) return slurm.SUCCESS, "eddy-test-status" end
"##;

/// Burst buffers cannot belong to root; the jobs of the plugin test run as this user.
const BB_USER: &str = "nobody";

/// Polls `f` up to `bound` until it returns Some (every 200 ms: each look runs Slurm's
/// commands).
fn poll<T>(bound: Duration, f: impl FnMut() -> Option<T>) -> Option<T> {
    eddy_testkit::eventually::poll_every(bound, Duration::from_millis(200), f)
}

fn uid_of(user: &str) -> String {
    let out = std::process::Command::new("id")
        .args(["-u", user])
        .output()
        .unwrap();
    assert!(out.status.success(), "no user {user}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn burst_buffer_lua_plugin_runs_the_sites_script() {
    require_slurm();
    let marks = tempfile::tempdir().unwrap();
    let lua = marks.path().join("burst_buffer.lua");
    std::fs::write(
        &lua,
        BB_LUA.replace("MARKS", &marks.path().display().to_string()),
    )
    .unwrap();
    let cluster = SlurmCluster::builder()
        .burst_buffer(&lua, "Directive=EDDY\nFlags=TeardownFailure\n")
        .start();
    let out = cluster.path("jobs");

    // The pools reported by slurm_bb_pools.
    let burst = cluster
        .command("scontrol")
        .args(["show", "burst"])
        .output()
        .unwrap();
    let burst = String::from_utf8_lossy(&burst.stdout);
    assert!(
        burst.contains("Name=lua") && burst.contains("PoolName[0]=eddy"),
        "{burst}\n{}",
        cluster.logs()
    );

    // job_process refuses the script: sbatch fails and prints the script's message.
    let bad = "#!/bin/sh\n#EDDY bad\ntrue\n";
    let err = cluster.sbatch(bad, &[], Some(BB_USER)).unwrap_err();
    assert!(
        err.contains("burst_buffer/lua: eddy: refused the bad directive"),
        "{err}"
    );
    // Root may not have a burst buffer at all.
    let good = format!(
        "#!/bin/sh\n#EDDY capacity=100 pool=eddy\necho \"env=$EDDY_BB_TEST\" > {}/out-$SLURM_JOB_ID\n",
        out.display()
    );
    let err = cluster.sbatch(&good, &[], None).unwrap_err();
    assert!(err.contains("Burst Buffer permission denied"), "{err}");

    // A job goes through setup (pool and size from `capacity=`), data_in, paths (its
    // environment) and teardown.
    let id = cluster.sbatch(&good, &[], Some(BB_USER)).unwrap();
    cluster
        .wait_state(id, &["COMPLETED"], Duration::from_secs(60))
        .unwrap();
    let uid = uid_of(BB_USER);
    let setup = std::fs::read_to_string(marks.path().join(format!("setup-{id}"))).unwrap();
    let gid = cluster.scontrol_show_job(id)["GroupId"].clone();
    let gid = gid.split(['(', ')']).nth(1).unwrap_or_default().to_string();
    assert_eq!(setup.trim(), format!("{id} {uid} {gid} eddy 100"));
    let data_in = std::fs::read_to_string(marks.path().join(format!("data_in-{id}"))).unwrap();
    assert_eq!(data_in.trim(), id.to_string());
    let env = std::fs::read_to_string(out.join(format!("out-{id}"))).unwrap();
    assert_eq!(env.trim(), format!("env=job{id}"));
    let teardown = poll(Duration::from_secs(20), || {
        std::fs::read_to_string(marks.path().join(format!("teardown-{id}"))).ok()
    })
    .unwrap_or_else(|| panic!("no teardown of job {id}\n{}", cluster.logs()));
    assert_eq!(teardown.trim(), format!("{id} false"));

    // A failed data_in holds the job, the script's message in its reason.
    let failing = "#!/bin/sh\n#EDDY capacity=1 pool=eddy\n#EDDY fail_data_in\ntrue\n";
    let id = cluster.sbatch(failing, &[], Some(BB_USER)).unwrap();
    let want = "burst_buffer/lua: slurm_bb_data_in: eddy: stage-in failed";
    let reason = poll(Duration::from_secs(30), || {
        Some(cluster.job_reason(id)).filter(|r| r == want)
    });
    assert!(
        reason.is_some(),
        "job {id}: reason {:?}, not {want:?}\n{}",
        cluster.job_reason(id),
        cluster.logs()
    );
    assert_eq!(cluster.job_state(id), "PENDING");
    assert_eq!(cluster.scontrol_show_job(id)["Priority"], "0", "held");
    cluster.cancel(id, false).unwrap();
}

#[test]
fn three_slurmd_on_one_host_make_three_nodes() {
    require_slurm();
    let cluster = SlurmCluster::builder().nodes(3).start();
    assert_eq!(cluster.nodes, ["n1", "n2", "n3"]);
    let out = cluster.path("jobs/nodes");
    let script = format!(
        "#!/bin/sh\nsrun sh -c 'echo $SLURMD_NODENAME' > {}\n",
        out.display()
    );
    let id = cluster.sbatch(&script, &["-N3"], None).unwrap();
    cluster
        .wait_state(id, &["COMPLETED"], Duration::from_secs(60))
        .unwrap();
    assert_eq!(cluster.scontrol_show_job(id)["NodeList"], "n[1-3]");
    let text = std::fs::read_to_string(&out).unwrap();
    let mut seen: Vec<&str> = text.lines().collect();
    seen.sort_unstable();
    assert_eq!(seen, ["n1", "n2", "n3"], "one task on each slurmd");
}
