//! `eddy stats` (decision 0032): three daemons count a known workload of three client
//! processes (python3 through the preload library, each its own client with its own MPI
//! rank from `PMI_RANK`), and `eddy stats --json` and `--job --json` show exactly the bytes
//! written and read, each client, the ops, the errors by errno, the series, and the I/O
//! mode of an N-N and of an N-1 workload.

use eddy_history::{IoMode, JobProfile};
use eddy_proto::stats::DaemonStats;
use eddy_testkit::cli::{ok, s};
use eddy_testkit::{python::preload_procs, Cluster};
use std::process::Stdio;
use std::time::{Duration, Instant};

const PREFIX: &str = "/eddy";
/// Bytes each process writes: 16 chunks of the test config's 64 KiB, 48 in all, so that
/// every daemon gets some (chunks are placed by hashing random file ids: with 15 chunks one
/// of three daemons got none about once in 150 runs; with 48, once in 10^8).
const EACH: usize = 1024 * 1024;
/// Guard against a hang; never an assertion on speed.
const GUARD: Duration = Duration::from_secs(60);

/// Process `rank` writes EACH bytes (its own file for N-N, its own range of one shared
/// file for N-1), reads them back and checks them, and stats a missing path (ENOENT).
const WORKLOAD: &str = r#"
import os, sys
prefix, mode, rank, each = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
data = bytes((rank * 7 + i) % 251 for i in range(each))
if mode == "nn":
    path, off = f"{prefix}/nn-{rank}", 0
else:
    path, off = f"{prefix}/shared", rank * each
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
assert os.pwrite(fd, data, off) == each
os.close(fd)
fd = os.open(path, os.O_RDONLY)
got = os.pread(fd, each, off)
os.close(fd)
assert got == data, "read back differs"
try:
    os.stat(f"{prefix}/missing-{rank}")
    sys.exit("stat of a missing path succeeded")
except FileNotFoundError:
    pass
print("done")
"#;

fn run_workload(cluster: &Cluster, mode: &str) {
    let procs: Vec<Vec<String>> = (0..3)
        .map(|rank| {
            vec![
                PREFIX.into(),
                mode.into(),
                rank.to_string(),
                EACH.to_string(),
            ]
        })
        .collect();
    preload_procs(cluster.dir.path(), PREFIX, WORKLOAD, &procs, true);
}

fn stats_json(cluster: &Cluster) -> Vec<DaemonStats> {
    let out = ok(&["stats", "--state", s(cluster.dir.path()), "--json"]);
    serde_json::from_slice(&out.stdout).expect("eddy stats --json prints the snapshots")
}

fn job_json(cluster: &Cluster) -> JobProfile {
    let out = ok(&["stats", "--state", s(cluster.dir.path()), "--job", "--json"]);
    serde_json::from_slice(&out.stdout).expect("eddy stats --job --json prints a profile")
}

fn op_sum(stats: &[DaemonStats], op: &str, f: fn(&eddy_proto::stats::OpStats) -> u64) -> u64 {
    stats
        .iter()
        .flat_map(|d| &d.ops)
        .filter(|o| o.op == op)
        .map(f)
        .sum()
}

/// Snapshots once every daemon's series has caught up with its counters (the sampler
/// closes a sample every second).
fn settled(cluster: &Cluster) -> Vec<DaemonStats> {
    eddy_testkit::eventually::eventually_seen(GUARD, "the series catches up", || {
        let stats = stats_json(cluster);
        let caught_up = stats.iter().all(|d| {
            let written: u64 = d.series.iter().map(|x| x.written_bytes).sum();
            let counted: u64 = d
                .ops
                .iter()
                .filter(|o| o.op == "write")
                .map(|o| o.bytes)
                .sum();
            !d.series.is_empty() && written == counted
        });
        if caught_up {
            Ok(stats)
        } else {
            Err(stats)
        }
    })
}

#[test]
fn stats_counts_a_known_n_n_workload_per_client() {
    let cluster = Cluster::start(3);
    run_workload(&cluster, "nn");
    let stats = settled(&cluster);
    assert_eq!(stats.len(), 3);
    let total = 3 * EACH as u64;
    assert_eq!(op_sum(&stats, "write", |o| o.bytes), total);
    assert_eq!(op_sum(&stats, "read", |o| o.bytes), total);
    // At least one write and one read per process (a request carries every piece one
    // daemon holds).
    assert!(op_sum(&stats, "write", |o| o.count) >= 3);
    assert!(op_sum(&stats, "read", |o| o.count) >= 3);
    assert!(op_sum(&stats, "create", |o| o.count) >= 3);
    // Every daemon served data; and the ENOENT of each process's stat is counted.
    for d in &stats {
        assert!(d.counting);
        assert_eq!(d.job, "test");
        assert!(
            d.ops.iter().any(|o| o.op == "write" && o.bytes > 0),
            "{d:?}"
        );
        assert_eq!(
            (d.queued, d.in_flight),
            (0, 1),
            "only the Stats request is in flight"
        );
    }
    let enoent: u64 = stats
        .iter()
        .flat_map(|d| &d.errors)
        .filter(|(e, _)| *e == libc::ENOENT)
        .map(|(_, n)| n)
        .sum();
    assert!(enoent >= 3, "{enoent}");
    assert!(op_sum(&stats, "stat", |o| o.errors) >= 3);
    // Each process is one client, named by its rank, with exactly its bytes.
    for rank in 0..3u32 {
        let mine: Vec<_> = stats
            .iter()
            .flat_map(|d| &d.clients)
            .filter(|c| c.client.rank == Some(rank))
            .collect();
        assert!(!mine.is_empty(), "no client of rank {rank}");
        assert!(mine
            .iter()
            .all(|c| c.key == mine[0].key && c.client.pid != 0));
        assert_eq!(
            mine.iter().map(|c| c.written_bytes).sum::<u64>(),
            EACH as u64
        );
        assert_eq!(mine.iter().map(|c| c.read_bytes).sum::<u64>(), EACH as u64);
        assert!(mine.iter().map(|c| c.errors).sum::<u64>() >= 1);
    }
    // Every file was written and read by its one client.
    let files: Vec<_> = stats.iter().flat_map(|d| &d.files).collect();
    assert!(files
        .iter()
        .all(|f| f.writers.len() == 1 && f.writers == f.readers));
    assert_eq!(files.iter().map(|f| f.written_bytes).sum::<u64>(), total);
    // The series holds everything written.
    let series: u64 = stats
        .iter()
        .flat_map(|d| &d.series)
        .map(|x| x.written_bytes)
        .sum();
    assert_eq!(series, total);

    let p = job_json(&cluster);
    assert_eq!(p.io_mode, IoMode::NN);
    assert_eq!(p.written_bytes, total);
    assert_eq!(p.read_bytes, total);
    assert_eq!(p.io_processes, 3);
    assert_eq!(p.io_nodes, Some(1));
    assert_eq!(p.files, 3);
    assert_eq!(p.shared_files, 0);
    assert_eq!(p.daemons.len(), 3);
    assert!(p.peak_bandwidth > 0.0 && !p.series.is_empty());
    assert_eq!(p.request_sizes.iter().sum::<u64>(), p.data_ops);

    // The table (two snapshots a second apart) names each daemon and client.
    let out = ok(&["stats", "--state", s(cluster.dir.path())]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("DAEMON") && text.contains("CLIENT"), "{text}");
    for rank in 0..3 {
        assert!(text.contains(&format!("[{rank}]")), "{text}");
    }
}

#[test]
fn stats_job_tells_a_shared_file_n_1() {
    let cluster = Cluster::start(3);
    run_workload(&cluster, "n1");
    let stats = settled(&cluster);
    let total = 3 * EACH as u64;
    assert_eq!(op_sum(&stats, "write", |o| o.bytes), total);
    assert_eq!(op_sum(&stats, "read", |o| o.bytes), total);
    let p = job_json(&cluster);
    assert_eq!(p.io_mode, IoMode::N1);
    assert_eq!(p.files, 1);
    assert_eq!(p.shared_files, 1);
    assert_eq!(p.io_processes, 3);
    assert_eq!(p.written_bytes, total);
}

/// Stops the deployment in a state directory when the test ends, whatever happened.
struct StopGuard(std::path::PathBuf);

impl Drop for StopGuard {
    fn drop(&mut self) {
        let _ = eddy_testkit::cli::eddy(&["stop", "--state", s(&self.0)]);
    }
}

/// `eddy start` records the job (Slurm's id and name from the environment, the script's
/// SHA-256, the user, the start); the daemons name it in their counters and the profile
/// carries it.
#[test]
fn the_job_started_is_what_stats_names() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let script = dir.path().join("job.sh");
    std::fs::write(&script, b"#!/bin/sh\nsrun ./app\n").unwrap();
    let _guard = StopGuard(root.clone());
    let out = eddy_testkit::cli::eddy_cmd()
        .args([
            "start",
            "--local",
            "3",
            "--root",
            s(&root),
            "--script",
            s(&script),
        ])
        .env("SLURM_JOB_ID", "4242")
        .env("SLURM_JOB_NAME", "app")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", eddy_testkit::cli::text(&out));
    let dep = eddy_config::Deployment::load(&root.join("deployment.toml")).unwrap();
    assert_eq!(dep.job.id.as_deref(), Some("4242"));
    assert_eq!(dep.job.name.as_deref(), Some("app"));
    let hash = eddy_config::JobInfo::script_hash(b"#!/bin/sh\nsrun ./app\n");
    assert_eq!(dep.job.script_hash.as_deref(), Some(hash.as_str()));
    assert!(dep.job.start_ms > 0 && !dep.job.user.is_empty());

    let out = ok(&["stats", "--state", s(&root), "--json"]);
    let stats: Vec<DaemonStats> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats.len(), 3);
    assert!(stats.iter().all(|d| d.job == "4242"));
    let out = ok(&["stats", "--state", s(&root), "--job", "--json"]);
    let p: JobProfile = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p.key, "4242");
    assert_eq!(p.job_name.as_deref(), Some("app"));
    assert_eq!(p.script_hash, Some(hash));
    assert_eq!(p.user, dep.job.user);
    assert_eq!(p.start, dep.job.start_ms as f64 / 1e3);
    assert_eq!(p.io_mode, IoMode::None);
}

/// `eddy stats --watch` draws a frame a second (the screen cleared before each) until it is
/// interrupted, and then exits cleanly; while a workload runs, a frame shows its clients.
#[test]
fn watch_draws_frames_until_interrupted() {
    use std::io::{BufRead, BufReader};
    let cluster = Cluster::start(3);
    run_workload(&cluster, "nn");
    let mut child = eddy_testkit::cli::eddy_cmd()
        .args(["stats", "--state", s(cluster.dir.path()), "--watch"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn eddy stats --watch");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + GUARD;
    let (mut frames, mut clients) = (0, false);
    while frames < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("eddy stats --watch drew two frames in time");
        frames += usize::from(line.contains("\x1b[2J"));
        clients |= line.starts_with("CLIENT");
    }
    assert!(clients, "a frame lists the clients");
    // Ctrl-C: SIGINT to the process.
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = eddy_testkit::eventually::exited(&mut child, GUARD)
        .expect("eddy stats --watch stops on SIGINT");
    assert!(
        status.success(),
        "eddy stats --watch exits 0 on SIGINT: {status}"
    );
}
