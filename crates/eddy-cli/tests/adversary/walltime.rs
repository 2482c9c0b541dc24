//! Staging timed by predicted walltime (decision 0040) as a weapon: another user's jobs push a
//! pool job's stage-in out, and their histories cost the controller's CPU at every re-check.
//! The attacker (`daemon`) has a history of long jobs (a JSON history file of the site's) and
//! submits jobs that cannot start (held by `--begin`, by a dependency, in another partition)
//! or many that can; the victim (`nobody`) has a pool job whose data_in (`eddy bb data-in`,
//! with the private Slurm's SLURM_CONF, as slurmctld's lua would run it) times its stage-in.
//! The victim's Slurm job is held (`sbatch -H`) for as long as the test needs it pending: in
//! a real burst-buffer cluster its own stage-in holds it.
//!
//! The work of the predictions is read from the job's `walltime.log` (root's), never from a
//! clock: the history rows replayed per look at the machine.

use eddy_testkit::bbsite::{s, Site, NOBODY};
use eddy_testkit::slurm::{output_bounded, require_slurm, SlurmCluster};
use serde_json::json;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

/// The attacker: another user, with a history of jobs of the site's.
const ATTACKER: &str = "daemon";
/// The victim, whose pool job stages in.
const USER: &str = "nobody";
/// The attacker's jobs' limit and their runtime in the history (EASY++ predicts it).
const LIMIT: &str = "10:00";
const RUNTIME: u64 = 500;
/// Bound on one `eddy bb` phase (data-in waits at most the test's `max_wait_s`).
const PHASE_BOUND: Duration = Duration::from_secs(300);
/// The site's default cap on the history rows replayed per user (site.rs, [walltime]).
const DEFAULT_MAX_HISTORY: usize = 500;
/// The site's default bound on the delay by other users' pending jobs (s).
const DEFAULT_MAX_DELAY_BY_OTHERS: i64 = 900;

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A site timing stage-in by walltime over a history file in which the attacker has `jobs`
/// finished jobs of RUNTIME s under LIMIT (and the victim none), waiting at most
/// `max_wait_s`, re-checking every second.
fn site(jobs: usize, max_wait_s: u64) -> Site {
    let site = Site::new("", "capacity = \"1GiB\"");
    let history: Vec<serde_json::Value> = (0..jobs)
        .map(|i| {
            let submit = 1_600_000_000 + i as i64 * 1000;
            json!({"id": format!("h{i}"), "user": ATTACKER, "cpus": 1, "limit": 600,
                   "submit": submit, "start": submit, "end": submit + RUNTIME as i64,
                   "runtime": RUNTIME})
        })
        .collect();
    let path = site.path("history.json");
    std::fs::write(&path, serde_json::to_string(&history).unwrap()).unwrap();
    let mut text = std::fs::read_to_string(site.path("bb.toml")).unwrap();
    text.push_str(&format!(
        "[walltime]\npredictor = \"easy++\"\nsource = {:?}\nstage_in_rate = \"1GiB\"\n\
         max_wait_s = {max_wait_s}\nrecheck_s = 1\n",
        path.display().to_string()
    ));
    std::fs::write(site.path("bb.toml"), text).unwrap();
    site
}

fn cluster(nodes: usize, other_partition: bool) -> SlurmCluster {
    require_slurm();
    let b = SlurmCluster::builder().nodes(nodes);
    if other_partition {
        b.partition("other", 1).start()
    } else {
        b.start()
    }
}

/// `sbatch` as `user` of a job sleeping `secs` with `args`; its id.
fn submit(cluster: &SlurmCluster, user: &str, secs: u64, args: &[&str]) -> u32 {
    let mut all = vec!["-t", LIMIT, "-o", "/dev/null"];
    all.extend_from_slice(args);
    cluster
        .sbatch(&format!("#!/bin/bash\nsleep {secs}\n"), &all, Some(user))
        .unwrap_or_else(|e| panic!("sbatch {args:?} as {user}: {e}"))
}

/// `eddy bb <args>` of the site against the cluster.
fn bb_command(site: &Site, cluster: &SlurmCluster, args: &[&str]) -> std::process::Command {
    let mut cmd = cluster.command(eddy_testkit::eddy_bin());
    cmd.arg("bb")
        .arg("--site")
        .arg(site.path("bb.toml"))
        .args(args);
    cmd
}

/// `cmd` run, bounded: (success, stdout + stderr).
fn run(mut cmd: std::process::Command) -> (bool, String) {
    let out = output_bounded(&mut cmd, PHASE_BOUND)
        .unwrap_or_else(|| panic!("{cmd:?} did not end in {PHASE_BOUND:?}"));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `eddy bb <args>` of the site against the cluster, bounded: (success, stdout + stderr).
fn bb(site: &Site, cluster: &SlurmCluster, args: &[&str]) -> (bool, String) {
    run(bb_command(site, cluster, args))
}

/// A victim's pool job: held in Slurm, set up (its daemons started).
struct Victim {
    id: String,
    script: std::path::PathBuf,
}

fn victim(site: &Site, cluster: &SlurmCluster, nodes: u32) -> Victim {
    let job = submit(cluster, USER, 1, &["-H", "-N", &nodes.to_string()]);
    let pfs = site.path("pfs/run");
    let link = format!("link /d={}", pfs.display());
    let script = site.script(&["capacity=64M pool=io", &link, "stage_in /d/in"]);
    let id = job.to_string();
    let uid = NOBODY.to_string();
    for args in [
        vec!["job-process", s(&script)],
        vec!["setup", &id, &uid, &uid, "io", "67108864", s(&script)],
    ] {
        let (ok, out) = bb(site, cluster, &args);
        assert!(ok, "eddy bb {args:?} failed:\n{out}\n{}", cluster.logs());
    }
    Victim { id, script }
}

/// The victim's data_in.
fn data_in_command(site: &Site, cluster: &SlurmCluster, v: &Victim) -> std::process::Command {
    bb_command(site, cluster, &["data-in", &v.id, s(&v.script)])
}

/// The victim's record's `[walltime]` and its walltime.log.
fn outcome(site: &Site, v: &Victim) -> (toml::Value, String) {
    let dir = site.path("jobs").join(&v.id);
    let rec: toml::Value =
        toml::from_str(&std::fs::read_to_string(dir.join("job.toml")).unwrap()).unwrap();
    let log = std::fs::read_to_string(dir.join("walltime.log")).unwrap_or_default();
    (rec["walltime"].clone(), log)
}

fn teardown(site: &Site, cluster: &SlurmCluster, v: &Victim) {
    let (ok, out) = bb(site, cluster, &["teardown", &v.id, s(&v.script), "false"]);
    assert!(ok, "teardown: {out}");
}

/// The victim's pool job (held in Slurm, `nodes` nodes) set up and its data_in run: its
/// record's `[walltime]` and its walltime.log; the job torn down.
fn victim_data_in(site: &Site, cluster: &SlurmCluster, nodes: u32) -> (toml::Value, String) {
    let v = victim(site, cluster, nodes);
    let (ok, out) = run(data_in_command(site, cluster, &v));
    assert!(
        ok,
        "data-in of job {} failed:\n{out}\n{}",
        v.id,
        cluster.logs()
    );
    let outcome = outcome(site, &v);
    teardown(site, cluster, &v);
    outcome
}

/// The victim's stage-in began at once ("its time came"), its predicted start now: the
/// attacker's job that cannot start did not push it out.
#[track_caller]
fn assert_staged_at_once(w: &toml::Value, log: &str, before: i64) {
    let why = w["stage_in_why"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("its time came"),
        "the stage-in waited for a job that cannot start: {w}\n{log}"
    );
    let predicted = w["predicted_start"].as_integer().unwrap();
    assert!(
        predicted <= now() && predicted >= before,
        "predicted start {predicted} (data-in began at {before}): {w}\n{log}"
    );
}

/// An older job of another user held by `--begin` (an hour away) asks for every node: the
/// victim's stage-in must not wait for it as if it ran first.
#[test]
fn a_job_held_by_begin_never_delays_a_later_stage_in() {
    let site = site(30, 15);
    let cluster = cluster(2, false);
    let held = submit(&cluster, ATTACKER, 600, &["-N", "2", "--begin=now+3600"]);
    cluster.wait_state(held, &["PENDING"], PHASE_BOUND).unwrap();
    let before = now();
    let (w, log) = victim_data_in(&site, &cluster, 1);
    assert_staged_at_once(&w, &log, before);
}

/// An older job of another user held by a dependency (on the attacker's running job) asks
/// for every node: it cannot start before that job ends, and the victim's job fits on the
/// node left free now.
#[test]
fn a_job_held_by_a_dependency_never_delays_a_later_stage_in() {
    let site = site(30, 15);
    let cluster = cluster(2, false);
    let running = submit(&cluster, ATTACKER, 600, &["-N", "1"]);
    cluster
        .wait_state(running, &["RUNNING"], PHASE_BOUND)
        .unwrap();
    let after = format!("--dependency=afterok:{running}");
    let held = submit(&cluster, ATTACKER, 600, &["-N", "2", &after]);
    cluster.wait_state(held, &["PENDING"], PHASE_BOUND).unwrap();
    let before = now();
    let (w, log) = victim_data_in(&site, &cluster, 1);
    assert_staged_at_once(&w, &log, before);
}

/// The attacker's jobs in another partition (one running on its node, one pending behind
/// it) never share the victim's nodes: the victim's two-node job in the default partition
/// starts now, whatever they do.
#[test]
fn jobs_in_another_partition_never_delay_a_later_stage_in() {
    let site = site(30, 15);
    let cluster = cluster(3, true);
    let running = submit(&cluster, ATTACKER, 600, &["-p", "other", "-N", "1"]);
    cluster
        .wait_state(running, &["RUNNING"], PHASE_BOUND)
        .unwrap();
    let pending = submit(&cluster, ATTACKER, 600, &["-p", "other", "-N", "1"]);
    cluster
        .wait_state(pending, &["PENDING"], PHASE_BOUND)
        .unwrap();
    let before = now();
    let (w, log) = victim_data_in(&site, &cluster, 2);
    assert_staged_at_once(&w, &log, before);
}

/// The work said in a walltime.log's "predictions" lines, summed: (histories read, models,
/// history rows replayed, lines).
fn work(log: &str) -> (usize, usize, usize, usize) {
    let mut sum = (0, 0, 0, 0);
    for line in log.lines().filter(|l| l.contains("history rows replayed")) {
        let count = |after: &str| -> usize {
            line.split(after)
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no count after {after:?} in {line:?}"))
        };
        sum.0 += count("predictions: ");
        sum.1 += count("histories read, ");
        sum.2 += count(" models, ");
        sum.3 += 1;
    }
    sum
}

/// The attacker has 5,000 past jobs and three jobs on the machine (one running, two pending
/// ahead, all able to run): while the victim's stage-in waits (10 s, a re-check each
/// second), its predictions replay at most the site's cap of the attacker's history once
/// (one model per user per snapshot), never the whole history per job per re-check.
#[test]
fn a_long_history_is_replayed_capped_and_once_per_snapshot() {
    let site = site(5000, 10);
    let cluster = cluster(2, false);
    let running = submit(&cluster, ATTACKER, 600, &["-N", "2"]);
    cluster
        .wait_state(running, &["RUNNING"], PHASE_BOUND)
        .unwrap();
    for _ in 0..2 {
        submit(&cluster, ATTACKER, 600, &["-N", "1"]);
    }
    let (w, log) = victim_data_in(&site, &cluster, 1);
    let (_, models, rows, lines) = work(&log);
    assert!(
        lines >= 1 && models >= 1,
        "no prediction was made: {w}\n{log}"
    );
    assert!(
        rows <= DEFAULT_MAX_HISTORY,
        "{rows} history rows replayed while one stage-in waited (the cap: \
         {DEFAULT_MAX_HISTORY} of one user's, once):\n{log}"
    );
}

/// Three pool jobs wait for their stage-in at once (three data_in processes, as slurmscriptd
/// runs them) behind the attacker's jobs: together they read the attacker's history once and
/// fit one model of it, not one each, through the site's shared snapshot (root's alone).
#[test]
fn waiting_stage_ins_share_one_model_per_user_per_snapshot() {
    let site = site(5000, 10);
    let cluster = cluster(2, false);
    let running = submit(&cluster, ATTACKER, 600, &["-N", "2"]);
    cluster
        .wait_state(running, &["RUNNING"], PHASE_BOUND)
        .unwrap();
    submit(&cluster, ATTACKER, 600, &["-N", "1"]);
    let victims: Vec<Victim> = (0..3).map(|_| victim(&site, &cluster, 1)).collect();
    let runs: Vec<_> = victims
        .iter()
        .map(|v| {
            let cmd = data_in_command(&site, &cluster, v);
            std::thread::spawn(move || run(cmd))
        })
        .collect();
    for (v, r) in victims.iter().zip(runs) {
        let (ok, out) = r.join().unwrap();
        assert!(ok, "data-in of job {} failed:\n{out}", v.id);
    }
    let outs: Vec<(toml::Value, String)> = victims.iter().map(|v| outcome(&site, v)).collect();
    for v in &victims {
        teardown(&site, &cluster, v);
    }
    let logs: Vec<&str> = outs.iter().map(|(_, log)| log.as_str()).collect();
    let all = logs.join("\n---\n");
    let (histories, models, rows) = logs
        .iter()
        .map(|l| work(l))
        .fold((0, 0, 0), |a, w| (a.0 + w.0, a.1 + w.1, a.2 + w.2));
    assert!(models >= 1, "no prediction was made:\n{all}");
    assert!(!all.contains("predicting alone"), "{all}");
    // The shared snapshot is root's alone.
    let dir = site.path("jobs/walltime");
    for (path, mode) in [(dir.clone(), 0o700), (dir.join("snapshot.json"), 0o600)] {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(
            (meta.uid(), meta.mode() & 0o7777),
            (0, mode),
            "{}",
            path.display()
        );
    }
    assert!(
        histories <= 1 && models <= 1 && rows <= DEFAULT_MAX_HISTORY,
        "three waiting stage-ins read {histories} histories and fitted {models} models \
         ({rows} rows) of one user in one snapshot:\n{all}"
    );
}

/// The attacker runs a job on every node and queues three more of every node behind it,
/// all able to run: the victim's predicted start is their predicted end, pushed out by the
/// attacker's pending jobs by at most the site's bound (not 3 × 500 s).
#[test]
fn another_users_pending_jobs_delay_a_stage_in_at_most_the_sites_bound() {
    let site = site(30, 5);
    let cluster = cluster(2, false);
    let running = submit(&cluster, ATTACKER, 600, &["-N", "2"]);
    cluster
        .wait_state(running, &["RUNNING"], PHASE_BOUND)
        .unwrap();
    let started = now();
    for _ in 0..3 {
        submit(&cluster, ATTACKER, 600, &["-N", "2"]);
    }
    let (w, log) = victim_data_in(&site, &cluster, 1);
    let predicted = w["predicted_start"].as_integer().unwrap();
    // The running job ends RUNTIME s after its start (before `started`), plus the bound.
    let most = started + RUNTIME as i64 + DEFAULT_MAX_DELAY_BY_OTHERS;
    assert!(
        predicted <= most,
        "predicted start {predicted} is {} s past the running job's end plus the bound: \
         {w}\n{log}",
        predicted - most
    );
    assert!(
        predicted >= started + RUNTIME as i64 - 60,
        "the running job still holds the nodes: {w}\n{log}"
    );
}
