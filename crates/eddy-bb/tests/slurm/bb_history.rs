//! Burst-buffer jobs and the site's history, end to end: a job's profile is in the site's history
//! database after its teardown, and a pool job's stage-in begins at its predicted start minus the
//! staging estimate (the walltime predictions from the jobs that ran before). The site and its
//! cluster are those of burst_buffer.rs.

use crate::burst_buffer::{Site, JOB_BOUND, OTHER_USER, USER};
use eddy_testkit::eventually::{eventually_else, poll_seen_every};
use eddy_testkit::slurm::SlurmCluster;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

/// The job's I/O profile lands in the site's history at teardown (issue 21): a node-local
/// job on one node writes a known number of bytes through its mount; after the teardown the
/// site's `history_db` (an SQLite file of the site's settings) holds the job's profile,
/// keyed by its Slurm job id, with exactly those bytes written, its user and its daemon.
#[test]
fn a_jobs_profile_is_in_the_sites_history_after_teardown() {
    const BYTES: u64 = 3 << 20;
    let site = Site::with(|dir| format!("history_db = {:?}\n", dir.join("history.db")));
    let cluster = site.cluster();
    let script = site.script(
        1,
        &["capacity=1G pool=node-local"],
        &format!(
            "dd if=/dev/zero of=\"$EDDY_MOUNT/out.dat\" bs=1M count={} conv=fsync status=none",
            BYTES >> 20
        ),
    );
    let job = site.run_to_completion(&cluster, &script);
    let db = site.path("history.db");
    let meta = std::fs::metadata(&db).unwrap_or_else(|e| {
        panic!(
            "no history {}: {e}\n{}\n{}",
            db.display(),
            site.job_output(job),
            cluster.logs()
        )
    });
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600));
    // Found through the site settings' `history_db`, by the job id.
    let p = site.profile(job);
    assert_eq!(p.key, job.to_string());
    assert_eq!(p.job_id.as_deref(), Some(job.to_string().as_str()));
    assert_eq!(p.user, USER);
    assert_eq!(p.written_bytes, BYTES, "{p:?}");
    assert_eq!(p.daemons.len(), 1);
    assert_eq!(p.daemons[0].written_bytes, BYTES);
    assert_eq!(p.nodes.len(), 1, "{:?}", p.nodes);
    assert!(p.end >= p.start && p.start > 0.0);
}

/// The job's record (root's `job.toml`), while the job has one.
fn job_record(site: &Site, job: u32) -> toml::Value {
    let path = site.path("jobs").join(job.to_string()).join("job.toml");
    toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// `squeue`'s start of a running job, seconds since the epoch (UTC).
fn start_of(cluster: &SlurmCluster, job: u32) -> i64 {
    let out = cluster
        .command("squeue")
        .args(["-h", "-j", &job.to_string(), "-o", "%S"])
        .env("TZ", "UTC")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eddy_walltime::sacct::parse_date(text.trim())
        .unwrap()
        .unwrap_or_else(|| panic!("job {job} has no start: {text:?}"))
}

/// Staging timed by predicted walltime (decision 0040), through real Slurm accounting: a
/// user's two finished jobs of ~12 s under a 10-minute limit; their third job blocks both
/// nodes; a pool job with 3 MiB to stage in (estimated at 7 s at the site's 512 KiB/s, rounded up) is
/// submitted behind it. Its record says: predicted start = the blocking job's start + EASY++
/// of the user's history (the mean of the two, far below the blocking job's limit); stage-in
/// scheduled at predicted start − 7 s, and not begun before then, but before the blocking
/// job ended (the data was staged while the job waited); a predicted end at pre_run. The
/// job ran with its data. Then a job of a user without history blocks the nodes: the next
/// pool job stages at once, still pending, saying why.
#[test]
fn a_pool_jobs_stage_in_begins_at_its_predicted_start_minus_the_estimate() {
    let site = Site::new();
    let mut settings = std::fs::read_to_string(site.path("bb.toml")).unwrap();
    settings.push_str(
        "[walltime]\npredictor = \"easy++\"\nsource = \"sacct\"\nstage_in_rate = \"512KiB\"\n\
         recheck_s = 1\nmax_wait_s = 100\n",
    );
    std::fs::write(site.path("bb.toml"), settings).unwrap();
    let cluster = site.cluster_with_accounting();
    let history = crate::walltime::run_history(&cluster, USER, &[12, 12], "10:00");
    let easy = (history[0].runtime + history[1].runtime) / 2;
    let blocker = cluster
        .sbatch(
            "#!/bin/bash\nsleep 40\n",
            &["-N", "2", "-t", "10:00", "-o", "/dev/null"],
            Some(USER),
        )
        .unwrap();
    cluster
        .wait_state(blocker, &["RUNNING"], JOB_BOUND)
        .unwrap();
    let blocker_start = start_of(&cluster, blocker);
    let pfs = site.pfs();
    let link = format!("link /data={}", pfs.join("run").display());
    let go = site.path("out/go");
    let script = site.script(
        1,
        &[
            "capacity=1G pool=io",
            &link,
            "stage_in /data/inputs",
            "stage_out /data/out",
        ],
        &format!(
            "mkdir -p \"$EDDY_MOUNT/data/out\"\n\
             sha256sum < \"$EDDY_MOUNT/data/inputs/a.dat\" > \"$EDDY_MOUNT/data/out/sum\"\n\
             touch {out}/started-$SLURM_JOB_ID\n\
             for i in $(seq 600); do [ -e {go} ] && break; sleep 0.2; done",
            out = site.path("out").display(),
            go = go.display(),
        ),
    );
    let job = cluster
        .sbatch(&script, &["-t", "10:00"], Some(USER))
        .unwrap();
    let started = site.path(&format!("out/started-{job}"));
    eventually_else(
        JOB_BOUND,
        || started.exists().then_some(()),
        || {
            format!(
                "job {job} did not start: {} {}\n{}\n{}",
                cluster.job_state(job),
                cluster.job_reason(job),
                site.job_output(job),
                cluster.logs()
            )
        },
    );
    // The early write-back, started at pre_run with the job's predicted end (EASY++ of 12 s
    // after its start, within the site's 30 s margin: at once), writes the job's output to
    // the backend while the job still runs; data_out is left with nothing of it.
    let early = pfs.join("run/out/sum");
    eventually_else(
        JOB_BOUND,
        || (std::fs::metadata(&early).map(|m| m.len()).unwrap_or(0) >= 64).then_some(()),
        || {
            format!(
                "the early write-back did not write {} while job {job} ran: {}\n{}",
                early.display(),
                job_record(&site, job),
                std::fs::read_to_string(
                    site.path("jobs")
                        .join(job.to_string())
                        .join("writeback.log")
                )
                .unwrap_or_default()
            )
        },
    );
    assert_eq!(
        cluster.job_state(job),
        "RUNNING",
        "written back early, not at data_out"
    );
    let rec = job_record(&site, job);
    assert!(
        rec["walltime"]["writeback_pid"].as_integer().is_some(),
        "the early write-back is recorded: {rec}"
    );
    let log_path = site.path("jobs").join(job.to_string()).join("walltime.log");
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert_eq!(
        std::fs::metadata(&log_path).unwrap().mode() & 0o777,
        0o600,
        "the site's log of predictions is root's alone"
    );
    assert!(log.contains("early write-back started"), "{log}");
    std::fs::write(&go, b"").unwrap();
    let w = &rec["walltime"];
    let int = |k: &str| w[k].as_integer().unwrap_or_else(|| panic!("no {k}: {rec}"));
    let (predicted, estimate, scheduled, began) = (
        int("predicted_start"),
        int("stage_in_estimate_s"),
        int("stage_in_scheduled"),
        int("stage_in_began"),
    );
    assert_eq!(estimate, 7, "3 MiB + 8 B at 512 KiB/s, rounded up: {rec}");
    assert_eq!(
        predicted,
        blocker_start + easy as i64,
        "the blocking job ends after EASY++ ({easy} s) of its user's history: {rec}"
    );
    assert!(predicted < blocker_start + 600, "before its limit: {rec}");
    assert_eq!(scheduled, predicted - estimate, "{rec}");
    assert!(began >= scheduled, "stage-in began before its time: {rec}");
    assert!(
        w["stage_in_why"]
            .as_str()
            .unwrap()
            .starts_with("its time came"),
        "{rec}"
    );
    for words in [
        "stage-in of 3.0 MiB estimated at 7 s",
        &format!("predicted start {predicted}"),
        &format!("stage-in begins at {began} (its time came"),
        "predicted end",
    ] {
        assert!(log.contains(words), "{words:?} not in the log:\n{log}");
    }
    let job_start = start_of(&cluster, job);
    let end = int("predicted_end");
    assert!(
        end > job_start && end <= job_start + 600,
        "predicted end {end} of a job started at {job_start}: {rec}"
    );
    let state = cluster
        .wait_state(job, &["COMPLETED", "FAILED", "CANCELLED"], JOB_BOUND)
        .unwrap();
    assert_eq!(state, "COMPLETED", "{}", site.job_output(job));
    // Staged while the job waited: before the blocking job freed the nodes.
    // sacct asked every 500 ms, not faster: each look is a query to slurmdbd.
    let blocker_end = poll_seen_every(JOB_BOUND, Duration::from_millis(500), || {
        let jobs = crate::walltime::sacct_jobs(&cluster, USER);
        match jobs.iter().find(|j| j.id == blocker.to_string()) {
            Some(j) => Ok(j.end),
            None => Err(jobs),
        }
    })
    .unwrap_or_else(|jobs| panic!("sacct lacks job {blocker}: {jobs:?}"));
    assert!(
        began < blocker_end,
        "stage-in at {began}, nodes free at {blocker_end}: {rec}"
    );
    site.assert_gone(&cluster, job);
    let sum = std::fs::read_to_string(pfs.join("run/out/sum")).unwrap();
    let want = std::process::Command::new("sha256sum")
        .stdin(std::fs::File::open(pfs.join("run/inputs/a.dat")).unwrap())
        .output()
        .unwrap();
    assert_eq!(sum.as_bytes(), want.stdout.as_slice());

    // A neighbour without history (a user who never ran a job here) blocks both nodes: the
    // next pool job's start cannot be predicted, so it stages at once, while still pending.
    let stranger = cluster
        .sbatch(
            "#!/bin/bash\nsleep 600\n",
            &["-N", "2", "-t", "20:00", "-o", "/dev/null"],
            Some(OTHER_USER),
        )
        .unwrap();
    cluster
        .wait_state(stranger, &["RUNNING"], JOB_BOUND)
        .unwrap();
    let job2 = cluster
        .sbatch(&script, &["-t", "10:00"], Some(USER))
        .unwrap();
    let rec2 = eventually_else(
        JOB_BOUND,
        || {
            let path = site.path("jobs").join(job2.to_string()).join("job.toml");
            let text = std::fs::read_to_string(&path).ok()?;
            let rec: toml::Value = toml::from_str(&text).unwrap();
            rec["walltime"]
                .get("stage_in_began")
                .is_some()
                .then_some(rec)
        },
        || {
            format!(
                "job {job2}'s stage-in never began: {} {}\n{}",
                cluster.job_state(job2),
                cluster.job_reason(job2),
                cluster.logs()
            )
        },
    );
    assert_eq!(cluster.job_state(job2), "PENDING", "{rec2}");
    let why = rec2["walltime"]["stage_in_why"].as_str().unwrap();
    assert_eq!(
        why,
        format!("no prediction: running job {stranger} of {OTHER_USER} has no history"),
        "{rec2}"
    );
    assert!(rec2["walltime"].get("predicted_start").is_none(), "{rec2}");
    cluster.cancel(stranger, false).unwrap();
    let state = cluster
        .wait_state(job2, &["COMPLETED", "FAILED", "CANCELLED"], JOB_BOUND)
        .unwrap();
    assert_eq!(state, "COMPLETED", "{}", site.job_output(job2));
    site.assert_gone(&cluster, job2);
}
