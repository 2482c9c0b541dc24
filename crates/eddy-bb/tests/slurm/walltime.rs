//! `eddy walltime` against real Slurm accounting: a private Slurm whose slurmdbd stores into a
//! private MariaDB (eddy_testkit::slurm, `.accounting()`); a user's jobs of known runtimes
//! (sleeps) run, `sacct` knows them, and `eddy walltime predict --sacct` predicts the next one
//! from them (EASY++ the mean of the last two), `eddy walltime replay` runs over their sacct
//! text.
//!
//! Needs root, Slurm, slurmdbd and MariaDB; without them it fails, naming what is missing.

use eddy_testkit::slurm::{require_accounting, SlurmCluster};
use std::time::Duration;

/// The jobs' user.
const USER: &str = "nobody";
/// Bound on the jobs running and their records reaching sacct.
const BOUND: Duration = Duration::from_secs(120);

/// `sacct` text of the cluster's finished jobs, in eddy-walltime's fields.
pub fn sacct_text(cluster: &SlurmCluster, user: &str) -> String {
    let out = cluster
        .command("sacct")
        .args([
            "--parsable2",
            "--noheader",
            "-X",
            "-o",
            eddy_walltime::sacct::FIELDS,
            "-S",
            "now-1days",
            "-u",
            user,
        ])
        .env("TZ", "UTC")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The finished jobs sacct lists of `user`, as eddy-walltime reads them.
pub fn sacct_jobs(cluster: &SlurmCluster, user: &str) -> Vec<eddy_walltime::Job> {
    eddy_walltime::sacct::parse(&sacct_text(cluster, user)).unwrap()
}

/// Runs one job per entry of `sleeps` (seconds) as `user`, one after another, each with
/// `limit`; waits until sacct lists all of them finished. Their jobs as eddy-walltime reads
/// sacct.
pub fn run_history(
    cluster: &SlurmCluster,
    user: &str,
    sleeps: &[u64],
    limit: &str,
) -> Vec<eddy_walltime::Job> {
    let mut ids = Vec::new();
    for s in sleeps {
        let id = cluster
            .sbatch(
                &format!("#!/bin/bash\nsleep {s}\n"),
                &["-N", "1", "-t", limit, "-o", "/dev/null"],
                Some(user),
            )
            .unwrap();
        let state = cluster
            .wait_state(id, &["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"], BOUND)
            .unwrap();
        assert_eq!(state, "COMPLETED", "{}", cluster.logs());
        ids.push(id.to_string());
    }
    let mut text = String::new();
    let jobs = eddy_testkit::eventually::poll_every(BOUND, Duration::from_millis(500), || {
        text = sacct_text(cluster, user);
        let jobs = eddy_walltime::sacct::parse(&text).unwrap();
        ids.iter()
            .all(|id| jobs.iter().any(|j| &j.id == id))
            .then_some(jobs)
    });
    jobs.unwrap_or_else(|| {
        panic!(
            "sacct does not list jobs {ids:?} after {BOUND:?}:\n{text}\n{}",
            cluster.logs()
        )
    })
}

/// Three jobs of 2, 4 and 6 s under a 10-minute limit: sacct has them (runtimes within its
/// 1 s resolution, times in the right zone); `eddy walltime predict --sacct` gives EASY++ =
/// the mean of the last two (5 s, ± 1), the request 600 s and a regression figure within the
/// request; `eddy walltime replay --sacct-text` over the sacct text evaluates three jobs.
#[test]
fn predict_and_replay_from_real_sacct() {
    require_accounting();
    let cluster = SlurmCluster::builder().accounting().start();
    let jobs = run_history(&cluster, USER, &[2, 4, 6], "10:00");
    assert_eq!(jobs.len(), 3, "{jobs:?}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    for (j, want) in jobs.iter().zip([2u64, 4, 6]) {
        assert!(
            j.runtime >= want && j.runtime <= want + 1,
            "job {} ran {} s, slept {want}: {jobs:?}",
            j.id,
            j.runtime
        );
        assert_eq!(j.limit, Some(600));
        assert!(
            (now - j.end).abs() < 300 && j.end >= j.start,
            "job {} ended at {} (now {now}): sacct's times in the wrong zone?",
            j.id,
            j.end
        );
    }
    let out = cluster
        .command(eddy_testkit::eddy_bin())
        .args([
            "walltime",
            "predict",
            "--sacct",
            "--user",
            USER,
            "--cpus",
            "1",
            "--time",
            "10:00",
            "--min-train",
            "2",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let last_two = (jobs[1].runtime + jobs[2].runtime) / 2;
    assert_eq!(p["request"], 600, "{p}");
    assert_eq!(p["easy++"].as_u64(), Some(last_two), "{p}");
    assert!((4..=6).contains(&last_two), "{jobs:?}");
    let ada = p["adaboost"].as_u64().unwrap_or_else(|| panic!("{p}"));
    assert!((1..=600).contains(&ada), "{p}");
    let trace = cluster.path("sacct.txt");
    std::fs::write(&trace, sacct_text(&cluster, USER)).unwrap();
    let out = cluster
        .command(eddy_testkit::eddy_bin())
        .args(["walltime", "replay", "--sacct-text"])
        .arg(&trace)
        .args(["--min-train", "2", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["jobs"], 3, "{e}");
    assert_eq!(e["rows"].as_array().map(Vec::len), Some(9), "{e}");
}
