//! Pool mode's run-time grow through the real private Slurm (issue 37, decision 0082): a pool
//! job set up on one I/O server, whose two steps write through libeddy_preload.so, is judged
//! bound by its server by the watcher pre_run starts, is grown to two servers while it
//! writes, and finds every byte it wrote; the Slurm job's Comment, root's record and the
//! profile say why, and teardown gives the added server back. A linked job is not grown, and
//! its record says why.
//!
//! The site's knobs make a few MiB/s from two nodes "bound": a server peak (B_f) of 1 KiB/s,
//! B_c of 1 KiB/s (F = 1, S = N_A = 2), no least queue; the warm-up and the polls are short.
//! The two steps name their nodes by SLURMD_NODENAME (the slurmd "nodes" share this host).
//!
//! Needs root, FUSE and Slurm, like burst_buffer.

use crate::bb_pool::whole_comment;
use crate::burst_buffer::Site;
use eddy_testkit::cli::s;
use serde_json::Value;

const GROW: &str = "[pool.grow]\npoll_s = 1\nwindow_s = 3\nsustain = 2\nmin_queue = 0.0\n\
                    cooldown_s = 600\nmax_grows = 1\nstop_grace_s = 60\n\
                    move_deadline_s = 90\n";

fn grow_site() -> Site {
    grow_site_warming(2)
}

/// The site, with the watcher's warm-up `warmup_s`.
fn grow_site_warming(warmup_s: u64) -> Site {
    let site = Site::with(|dir| format!("history_db = {:?}\n", dir.join("history.db")));
    let settings = site.path("bb.toml");
    let text = std::fs::read_to_string(&settings).unwrap().replace(
        "[alloc]\n",
        // No health probe: the pool's "nodes" share this host with the other tests'.
        &format!(
            "peak_bandwidth = \"1KiB\"\nprobe_bytes = \"0\"\n{GROW}warmup_s = {warmup_s}\n\
             [alloc]\n"
        ),
    );
    let text = format!(
        "{text}default_servers = 1\nv_min_bytes = 1048576\ncompute_peak_bandwidth = 1024.0\n"
    );
    std::fs::write(&settings, text).unwrap();
    site
}

/// Each rank writes 256 KiB blocks tagged with its rank to `/bb/out-RANK` (fsync'd every 8)
/// until the stop file exists (at most 600: 150 MiB, within the job's capacity), then the count of blocks to `/bb/count-RANK`.
const WRITER: &str = r#"
import os, sys, time
r = int(os.environ['SLURM_PROCID'])
stop = sys.argv[1]
blk = bytes([65 + r]) * 262144
n = 0
with open('/bb/out-%d' % r, 'wb') as f:
    while not os.path.exists(stop) and n < 600:
        f.write(blk)
        n += 1
        if n % 8 == 0:
            f.flush()
            os.fsync(f.fileno())
        time.sleep(0.05)
open('/bb/count-%d' % r, 'w').write(str(n))
"#;

/// Reads every block back and compares.
const VERIFY: &str = r#"
for r in (0, 1):
    n = int(open('/bb/count-%d' % r).read())
    data = open('/bb/out-%d' % r, 'rb').read()
    assert n > 0 and len(data) == n * 262144, (r, n, len(data))
    assert data == bytes([65 + r]) * len(data), r
print('verified', flush=True)
"#;

/// Succeeds when the status file shows two daemons and no move under way.
const GROWN: &str = r#"
import json, sys
s = json.load(open(sys.argv[1]))
sys.exit(0 if len(s['daemons']) == 2 and s['moving_from'] is None else 1)
"#;

/// Two steps write through the preload until the deployment has two members at a settled
/// epoch (at most 80 s), then one step reads every byte back; the job fails if a byte
/// differs or a write failed.
fn writing_script(site: &Site) -> String {
    let out = site.path("out");
    let py = |name: &str, text: &str| {
        let p = site.path(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let (writer, verify, grown) = (
        py("writer.py", WRITER),
        py("verify.py", VERIFY),
        py("grown.py", GROWN),
    );
    let so = eddy_testkit::preload_so();
    let pre = format!(
        "env LD_PRELOAD={} EDDY_PREFIX=/bb /usr/bin/python3",
        so.display()
    );
    format!(
        "#!/bin/bash\n#SBATCH -N 2\n#SBATCH -J growapp\n#SBATCH -o {out}/slurm-%j.out\n\
         #EDDY capacity=1G pool=io\nset -eu\n\
         STOP={out}/stop-$SLURM_JOB_ID\n\
         STATUS={out}/status-$SLURM_JOB_ID.json\n\
         srun -N 2 -n 2 {pre} {writer} $STOP &\n\
         WRITERS=$!\n\
         for i in $(seq 80); do\n\
         {eddy} status --json > $STATUS || true\n\
         python3 {grown} $STATUS && break\n\
         sleep 1\n\
         done\n\
         sleep 2\n\
         touch $STOP\n\
         wait $WRITERS\n\
         srun -N 1 -n 1 {pre} {verify}\n",
        out = out.display(),
        eddy = eddy_testkit::eddy_bin(),
    )
}

/// The watcher's log of job `job` (root's, removed at teardown), as it grows.
fn watcher_log(site: &Site, job: u32) -> std::sync::Arc<std::sync::Mutex<String>> {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (path, copy) = (site.path(&format!("jobs/{job}/grow.log")), seen.clone());
    std::thread::spawn(move || loop {
        if let Ok(text) = std::fs::read_to_string(&path) {
            *copy.lock().unwrap() = text;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    });
    seen
}

#[test]
fn a_pool_job_bound_by_its_server_grows_while_it_writes_and_gives_it_back() {
    let site = grow_site();
    let cluster = site.cluster();
    let log = watcher_log(&site, 1);
    let job = site.run_to_completion(&cluster, &writing_script(&site));
    let output = format!(
        "{}\n--- the watcher's log:\n{}",
        site.job_output(job),
        log.lock().unwrap()
    );
    assert!(output.contains("verified"), "{output}");

    // The job saw its deployment grow to two members, the move over.
    let status: Value = serde_json::from_str(
        &std::fs::read_to_string(site.path(&format!("out/status-{job}.json"))).unwrap(),
    )
    .unwrap();
    let hosts: Vec<&str> = status["daemons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["io1", "io2"], "{status}\n{output}");
    assert!(status["moving_from"].is_null(), "{status}");
    assert!(status["epoch"].as_u64().unwrap() >= 2, "{status}");

    // The Comment says it grew, after the allocation's note.
    let c = whole_comment(&cluster, job);
    assert!(
        c.contains("eddy grow: 1 -> 2 server(s) +io2: bound by servers"),
        "{c}"
    );

    // The profile carries the grow with the rule's numbers, and `eddy history show` prints it.
    let p = site.profile(job);
    let a = p.allocation.expect("the profile carries the allocation");
    assert_eq!(a.servers, [0], "{:?}", a.reasons);
    assert_eq!(a.grown.len(), 1, "{:?}", a.grown);
    let g = &a.grown[0];
    assert_eq!((g.from, g.to), (1, 2), "{g:?}");
    assert_eq!(g.hosts, ["io2"], "{g:?}");
    assert!(g.outcome.starts_with("done at epoch"), "{g:?}");
    assert!(
        g.reasons
            .iter()
            .any(|r| r.contains("S = ceil(N_A 2 / F 1) = 2")),
        "{g:?}"
    );
    let shown = eddy_testkit::cli::ok(&[
        "history",
        "show",
        &job.to_string(),
        "--site",
        s(&site.path("bb.toml")),
    ]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("1 -> 2 server(s), +1 (io2)"), "{shown}");
    // The added server's storage and daemon are gone (run_to_completion checked every root
    // under pool/ and every process serving one).
    assert!(!site.path(&format!("pool/io2/job-{job}")).exists());
}

#[test]
fn a_linked_pool_job_is_not_grown_and_its_record_says_why() {
    let site = grow_site();
    let cluster = site.cluster();
    let go = site.path("out/go");
    let script = format!(
        "#!/bin/bash\n#SBATCH -N 2\n#SBATCH -o {out}/slurm-%j.out\n\
         #EDDY capacity=1G pool=io\n#EDDY link /data={pfs}\nset -eu\n\
         for i in $(seq 60); do [ -e {go} ] && break; sleep 1; done\n",
        out = site.path("out").display(),
        pfs = site.pfs().join("run").display(),
        go = go.display(),
    );
    let job = site.submit(&cluster, &script);
    cluster
        .wait_state(job, &["RUNNING"], crate::burst_buffer::JOB_BOUND)
        .unwrap();
    // Root's record while it runs: pre_run said why, and started no watcher.
    let record = site.path(&format!("jobs/{job}/job.toml"));
    let rec: toml::Value = toml::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    let grow = &rec["grow"];
    assert!(grow.get("pid").is_none(), "{rec}");
    assert!(
        grow["last_hold"]
            .as_str()
            .unwrap()
            .starts_with("not grown: the job links prefixes"),
        "{rec}"
    );
    std::fs::write(&go, b"").unwrap();
    site.completes(&cluster, job);
}

/// An attack on the watcher (root): the job's user stops its own daemon (SIGSTOP, as any
/// process of theirs) while it writes, so that the watcher's questions go unanswered. Each
/// poll waits at most twice the RPC deadline, the watcher holds and says why in root's
/// record, grows nothing, and post_run and teardown end it: the job's end and teardown are
/// not held, and nothing of the job is left.
#[test]
fn a_user_whose_daemons_stop_answering_holds_the_watcher_only_within_its_bounds() {
    let site = grow_site_warming(8);
    let cluster = site.cluster();
    let (writer, go) = (site.path("writer.py"), site.path("out/go"));
    std::fs::write(&writer, WRITER).unwrap();
    let so = eddy_testkit::preload_so();
    let daemon = format!("{}/io1/job-$SLURM_JOB_ID", site.path("pool").display());
    let script = format!(
        "#!/bin/bash\n#SBATCH -N 2\n#SBATCH -o {out}/slurm-%j.out\n\
         #EDDY capacity=1G pool=io\nset -u\n\
         STOP={out}/stop-$SLURM_JOB_ID\n\
         srun -N 2 -n 2 env LD_PRELOAD={so} EDDY_PREFIX=/bb /usr/bin/python3 {writer} $STOP &\n\
         WRITERS=$!\n\
         sleep 1\n\
         pkill -STOP -f {daemon}\n\
         for i in $(seq 90); do [ -e {go} ] && break; sleep 1; done\n\
         pkill -CONT -f {daemon}\n\
         touch $STOP\n\
         wait $WRITERS || true\n",
        out = site.path("out").display(),
        so = so.display(),
        writer = writer.display(),
        go = go.display(),
    );
    let job = site.submit(&cluster, &script);
    let record = site.path(&format!("jobs/{job}/job.toml"));
    let held = eddy_testkit::eventually::eventually_else(
        std::time::Duration::from_secs(90),
        || {
            let rec: toml::Value = toml::from_str(&std::fs::read_to_string(&record).ok()?).ok()?;
            let hold = rec.get("grow")?.get("last_hold")?.as_str()?.to_string();
            let unanswered =
                hold.contains("did not say its load") || hold.contains("did not answer");
            unanswered.then_some(rec)
        },
        || {
            format!(
                "the watcher never said its questions went unanswered: {}",
                std::fs::read_to_string(&record).unwrap_or_default()
            )
        },
    );
    let events = held["grow"]
        .get("events")
        .and_then(|e| e.as_array().cloned());
    assert!(events.unwrap_or_default().is_empty(), "{held}");
    std::fs::write(&go, b"").unwrap();
    site.completes(&cluster, job);
    assert!(!whole_comment(&cluster, job).contains("eddy grow"));
}
