//! Pool mode's allocation through the real private Slurm (issue 22, decision 0038): a pool
//! job's I/O servers are the ones `eddy alloc explain` decides from the site's history; its
//! profile lands in that history at teardown with the allocation; the next run of the same
//! job (same name, same script) is allocated from that profile and gets more servers (the
//! scaling rule), and the Slurm job's Comment and the history say so.
//!
//! The site's `[alloc]` knobs are small, so that a few MiB written from two nodes make a job
//! eligible: V_min 1 MiB, N_min 2, and a server peak (B_f) of 1 KiB/s, so that F = 1 and
//! S = N_A. The job's two steps (one per Slurm node) write through libeddy_preload.so, each a
//! client of its own that names its node by SLURMD_NODENAME (the slurmd "nodes" share this
//! host): N_A = 2.
//!
//! Needs root, FUSE and Slurm, like burst_buffer.

use crate::burst_buffer::Site;
use eddy_testkit::cli::s;
use serde_json::Value;

/// Guard on a job's set-up and teardown (never a claim on speed).
const BOUND: std::time::Duration = std::time::Duration::from_secs(120);

/// MiB each of the job's two steps writes.
const MIB_EACH: u64 = 4;

fn script(site: &Site) -> String {
    format!(
        "#!/bin/bash\n#SBATCH -N 2\n#SBATCH -J ioapp\n#SBATCH -o {out}/slurm-%j.out\n\
         #EDDY capacity=1G pool=io\nset -eu\n\
         {eddy} status --json > {out}/status-$SLURM_JOB_ID.json\n\
         srun -N 2 -n 2 env LD_PRELOAD={so} EDDY_PREFIX=/bb /usr/bin/python3 -c \
         \"import os; open('/bb/out-' + os.environ['SLURM_PROCID'], 'wb').write(b'x' * ({mib} << 20))\"\n",
        out = site.path("out").display(),
        eddy = eddy_testkit::eddy_bin(),
        so = eddy_testkit::preload_so().display(),
        mib = MIB_EACH,
    )
}

/// The hosts of the daemons the job saw at its start.
fn daemon_hosts(site: &Site, job: u32) -> Vec<String> {
    let file = site.path(&format!("out/status-{job}.json"));
    let status: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    status["daemons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["host"].as_str().unwrap().to_string())
        .collect()
}

/// Eddy's note in the job's Comment, as Slurm keeps it (one field: `squeue -o %k`): after the
/// comment the job's user gave it (`run_to_completion`'s), which stays (decision 0056).
fn comment(cluster: &eddy_testkit::slurm::SlurmCluster, job: u32) -> String {
    let whole = whole_comment(cluster, job);
    let (own, note) = whole
        .split_once(" | ")
        .unwrap_or_else(|| panic!("the user's comment is gone: {whole:?}"));
    assert!(own.starts_with("x NodeList=forged"), "{whole:?}");
    note.to_string()
}

pub(crate) fn whole_comment(cluster: &eddy_testkit::slurm::SlurmCluster, job: u32) -> String {
    let out = cluster
        .command("squeue")
        .args(["-h", "-t", "all", "-j", &job.to_string(), "-o", "%k"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What `eddy alloc explain` decides for the job on the site's idle pool, from the site's
/// history and its `[alloc]` table.
fn explain(site: &Site, script_hash: Option<&str>) -> Value {
    let pool: Vec<Value> = (0..3)
        .map(|i| serde_json::json!({"id": i, "host": format!("io{}", i + 1), "peak_bandwidth": 1024.0}))
        .collect();
    let pool_file = site.path("pool.json");
    std::fs::write(&pool_file, serde_json::to_vec(&pool).unwrap()).unwrap();
    let settings = site.path("bb.toml");
    let mut args = vec![
        "alloc",
        "explain",
        "--job-name",
        "ioapp",
        "--nodes",
        "2",
        "--pool",
        s(&pool_file),
        "--policy",
        s(&settings),
        "--site",
        s(&settings),
        "--json",
    ];
    if let Some(h) = script_hash {
        args.extend(["--script-hash", h]);
    }
    let out = eddy_testkit::cli::ok(&args);
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn pool_jobs_are_allocated_from_their_history_through_slurm() {
    let site = Site::with(|dir| format!("history_db = {:?}\n", dir.join("history.db")));
    // The pool's B_f, and the policy's table (the file's last).
    let settings = site.path("bb.toml");
    let mut text = std::fs::read_to_string(&settings)
        .unwrap()
        .replace("[alloc]\n", "peak_bandwidth = \"1KiB\"\n[alloc]\n");
    text.push_str("v_min_bytes = 1048576\nn_min = 2\nserver_peak_bandwidth = 1073741824.0\n");
    std::fs::write(&settings, text).unwrap();
    let cluster = site.cluster();
    let names = |ids: &Value| -> Vec<String> {
        ids.as_array()
            .unwrap()
            .iter()
            .map(|i| format!("io{}", i.as_u64().unwrap() + 1))
            .collect()
    };

    // First run: no history, the default allocation (one server), as `eddy alloc` says.
    let want = explain(&site, None);
    assert_eq!(want["decision"]["rule"], "default", "{want}");
    let job1 = site.run_to_completion(&cluster, &script(&site));
    assert_eq!(
        daemon_hosts(&site, job1),
        names(&want["decision"]["servers"])
    );
    let c1 = comment(&cluster, job1);
    assert!(
        c1.starts_with("eddy alloc: default 1 server(s) io1: no history of ioapp"),
        "{c1}"
    );
    let p1 = site.profile(job1);
    assert_eq!(p1.job_name.as_deref(), Some("ioapp"));
    assert_eq!(p1.written_bytes, 2 * (MIB_EACH << 20), "{p1:?}");
    // Two steps on two Slurm nodes of one host: two nodes did I/O, by Slurm's names.
    assert_eq!(p1.io_nodes, Some(2), "{:?}", p1.nodes);
    let a1 = p1
        .allocation
        .clone()
        .expect("the profile carries the allocation");
    assert_eq!(
        (a1.rule.as_str(), a1.hosts.clone()),
        ("default", vec!["io1".to_string()])
    );
    assert!(
        a1.reasons.iter().any(|r| r.contains("no history")),
        "{a1:?}"
    );
    // The idle I/O nodes were probed through the site's launcher before the decision (the
    // test's ratio is low: three "nodes" of one disk measure alike only roughly).
    assert!(
        a1.reasons
            .iter()
            .any(|r| r.starts_with("health probe: 3 idle server(s) probed (8.0 MiB each): io1 ")),
        "{a1:?}"
    );

    // Second run of the same job: allocated from the first run's profile, scaled to
    // S = ceil(N_A 2 / F 1) = 2 servers.
    let hash = p1.script_hash.clone().expect("the script's hash");
    let want = explain(&site, Some(&hash));
    assert_eq!(want["history"], job1.to_string(), "{want}");
    assert_eq!(want["decision"]["rule"], "scaled", "{want}");
    let job2 = site.run_to_completion(&cluster, &script(&site));
    let hosts2 = daemon_hosts(&site, job2);
    assert_eq!(hosts2, names(&want["decision"]["servers"]));
    assert_eq!(hosts2, ["io1", "io2"]);
    let c2 = comment(&cluster, job2);
    assert!(
        c2.starts_with("eddy alloc: scaled 2 server(s) io1,io2: scaling:"),
        "{c2}"
    );
    let p2 = site.profile(job2);
    let a2 = p2
        .allocation
        .clone()
        .expect("the profile carries the allocation");
    assert_eq!(
        (a2.rule.as_str(), a2.servers.clone()),
        ("scaled", vec![0, 1])
    );
    assert!(
        a2.reasons
            .iter()
            .any(|r| r == &format!("history: run {job1} (start {:.0})", p1.start)),
        "{a2:?}"
    );
    assert!(
        a2.reasons
            .iter()
            .any(|r| r.contains("S = ceil(N_A 2 / F 1) = 2")),
        "{a2:?}"
    );
    // `eddy history show` prints it.
    let shown =
        eddy_testkit::cli::ok(&["history", "show", &job2.to_string(), "--site", s(&settings)]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("scaled on server(s) 0,1 (io1,io2)"),
        "{shown}"
    );
}

/// A user holding the site's most pool jobs at a time (`[pool] max_jobs_per_user`, here 1):
/// their next pool job's setup fails, and Slurm's Reason for it says why (decision 0055).
#[test]
fn a_pool_job_past_the_users_limit_has_a_reason_saying_so() {
    let site = Site::with(|_| String::new());
    let settings = site.path("bb.toml");
    let text = std::fs::read_to_string(&settings).unwrap().replace(
        "capacity = \"4GiB\"\n",
        "capacity = \"4GiB\"\nmax_jobs_per_user = 1\n",
    );
    assert!(text.contains("max_jobs_per_user = 1"), "{text}");
    std::fs::write(&settings, text).unwrap();
    let cluster = site.cluster();
    let job = |body: &str| {
        format!(
            "#!/bin/bash\n#SBATCH -N 1\n#SBATCH -o {out}/slurm-%j.out\n\
             #EDDY capacity=1G pool=io\n{body}\n",
            out = site.path("out").display()
        )
    };
    let first = cluster
        .sbatch(&job("sleep 600"), &[], Some(crate::burst_buffer::USER))
        .unwrap();
    // The first holds its daemons (set up) before the second is submitted.
    let set_up = site.path(&format!("jobs/{first}/state/deployment.toml"));
    if eddy_testkit::eventually::poll_for(BOUND, || set_up.exists().then_some(())).is_none() {
        panic!(
            "job {first} was never set up: {}\n{}",
            cluster.job_reason(first),
            cluster.logs()
        );
    }
    let second = cluster
        .sbatch(&job("true"), &[], Some(crate::burst_buffer::USER))
        .unwrap();
    // squeue asked every 250 ms, not faster: each look is a request to slurmctld.
    let mut reason = String::new();
    let said = eddy_testkit::eventually::poll_every(
        std::time::Duration::from_secs(120),
        std::time::Duration::from_millis(250),
        || {
            reason = cluster.job_reason(second);
            reason.contains("max_jobs_per_user").then_some(())
        },
    );
    assert!(
        said.is_some(),
        "job {second}'s reason says nothing of the limit: {reason:?}\n{}",
        cluster.logs()
    );
    assert!(
        reason.contains(&format!(
            "user nobody (uid 65534) holds 1 pool job(s) already ({first}): this site allows 1 \
             at a time ([pool] max_jobs_per_user)"
        )),
        "reason: {reason}"
    );
    assert!(
        !site.path(&format!("pool/io1/job-{second}")).exists(),
        "the refused job got daemons"
    );
    // The first is cancelled once it runs: a cancel while Slurm runs its pre_run kills that
    // script, and can kill the teardown Slurm starts in the same millisecond before it has
    // started its own process (a race in Slurm; docs/guide/slurm-admin.md, "Recover").
    cluster
        .wait_state(first, &["RUNNING"], crate::burst_buffer::JOB_BOUND)
        .unwrap();
    for j in [second, first] {
        cluster.cancel(j, true).unwrap();
    }
    for j in [first, second] {
        let dir = site.path(&format!("jobs/{j}"));
        if eddy_testkit::eventually::poll_for(BOUND, || (!dir.exists()).then_some(())).is_none() {
            panic!("job {j} was not torn down: {}", cluster.logs());
        }
    }
}
