//! A deployment's end leaves its job profile in the I/O history (decision 0032, "At a
//! deployment's end"): `eddy start` of three real daemons as a Slurm job would
//! (`SLURM_JOB_ID`, `SLURM_JOB_NAME`), a known workload through the preload library, then
//! - `eddy stop`: the profile is in the configured SQLite history with exactly the bytes
//!   written and read, the job's name and user and three daemons; `eddy history plot` draws
//!   it; `profile.json` is in the state directory;
//! - every daemon killed with SIGKILL after it persisted its counters: the next `eddy start`
//!   on the same state stores the killed job's profile with the workload's bytes;
//! - one daemon killed and started again on its root (`eddy replace --keep-root`) between
//!   two workloads: the profile has both, each byte once;
//! - no `history_db` anywhere: the profile goes to the per-user default, where
//!   `eddy history list` finds it with no setup.

use eddy_config::Deployment;
use eddy_history::JobProfile;
use eddy_proto::stats::{PersistedStats, PERSIST_DIR};
use eddy_testkit::cli::{eddy, eddy_cmd, s, text};
use eddy_testkit::python::preload_procs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const PREFIX: &str = "/eddy";
/// Bytes each of the three processes writes and reads back (several 64 KiB chunks: every
/// daemon gets some).
const EACH: usize = 200 * 1024;
const TOTAL: u64 = 3 * EACH as u64;
/// Guard against a hang; never an assertion on speed.
const GUARD: Duration = Duration::from_secs(60);

/// Process `rank` writes EACH bytes to its own file and reads them back.
const WORKLOAD: &str = r#"
import os, sys
prefix, rank, each = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = bytes((rank * 11 + i) % 253 for i in range(each))
path = f"{prefix}/out-{rank}"
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
assert os.pwrite(fd, data, 0) == each
os.close(fd)
fd = os.open(path, os.O_RDONLY)
assert os.pread(fd, each, 0) == data, "read back differs"
os.close(fd)
print("done")
"#;

/// Stops the deployment in `state` when the test ends, whatever happened.
struct StopGuard(PathBuf);

impl Drop for StopGuard {
    fn drop(&mut self) {
        let _ = eddy(&["stop", "--state", s(&self.0)]);
    }
}

/// `eddy ARGS` with extra environment, which must succeed.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = eddy_cmd();
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run eddy");
    assert!(
        out.status.success(),
        "eddy {args:?} failed:\n{}",
        text(&out)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A configuration file: the tests' chunk size, a short persist interval, and `history_db`
/// when given.
fn config(dir: &Path, db: Option<&Path>) -> PathBuf {
    let mut text = String::from("chunk_size = 65536\nstats_persist_ms = 200\n");
    if let Some(db) = db {
        text.push_str(&format!("history_db = {:?}\n", s(db)));
    }
    let path = dir.join("eddy.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `eddy start --local 3` in DIR/root as Slurm job `job` named `name`.
fn start(dir: &Path, config: &Path, job: &str, name: &str, env: &[(&str, &str)]) -> Output {
    let root = dir.join("root");
    let mut all = vec![("SLURM_JOB_ID", job), ("SLURM_JOB_NAME", name)];
    all.extend_from_slice(env);
    run(
        &[
            "start",
            "--local",
            "3",
            "--root",
            s(&root),
            "--config",
            s(config),
        ],
        &all,
    )
}

/// Three processes through the preload library, each writing and reading EACH bytes.
fn workload(state: &Path) {
    workload_ranks(state, 0..3);
}

/// Processes `ranks` through the preload library, each writing and reading EACH bytes to a
/// file of its own.
fn workload_ranks(state: &Path, ranks: std::ops::Range<u32>) {
    let procs: Vec<Vec<String>> = ranks
        .map(|rank| vec![PREFIX.to_string(), rank.to_string(), EACH.to_string()])
        .collect();
    preload_procs(state, PREFIX, WORKLOAD, &procs, false);
}

fn show(db: &Path, job: &str, env: &[(&str, &str)]) -> JobProfile {
    let out = run(&["history", "show", job, "--json", "--db", s(db)], env);
    serde_json::from_slice(&out.stdout).expect("eddy history show --json prints a profile")
}

fn me() -> String {
    // SAFETY: getuid(2) cannot fail and touches no memory.
    eddy_config::JobInfo::user_name(unsafe { libc::getuid() })
}

fn mode_of(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// The snapshots the daemons of `dep` persisted so far.
fn persisted(dep: &Deployment) -> Vec<PersistedStats> {
    dep.daemons
        .iter()
        .flat_map(|d| {
            std::fs::read_dir(d.root.join(PERSIST_DIR))
                .into_iter()
                .flatten()
        })
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect()
}

/// Bytes counted under `op`; "write" counts what clients wrote directly on the daemons'
/// host too (their reports, `direct_commit`: decision 0048).
fn op_bytes(snaps: &[PersistedStats], op: &str) -> u64 {
    snaps
        .iter()
        .flat_map(|p| &p.stats.ops)
        .filter(|o| o.op == op || (op == "write" && o.op == "direct_commit"))
        .map(|o| o.bytes)
        .sum()
}

#[test]
fn stop_stores_the_jobs_profile_in_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hist").join("history.db");
    let cfg = config(dir.path(), Some(&db));
    let state = dir.path().join("root");
    let _guard = StopGuard(state.clone());
    start(dir.path(), &cfg, "4242", "wrf-run", &[]);
    let dep = Deployment::load(&state.join("deployment.toml")).unwrap();
    workload(&state);

    let out = run(&["stop", "--state", s(&state)], &[]);
    let said = stdout(&out);
    assert!(
        said.contains(&format!(
            "eddy: job profile 4242 stored in {} (0.6 MiB read, 0.6 MiB written, mode N-N)",
            db.display()
        )),
        "{}",
        text(&out)
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("warning"),
        "{}",
        text(&out)
    );

    let p = show(&db, "4242", &[]);
    assert_eq!(p.key, "4242");
    assert_eq!(p.job_id.as_deref(), Some("4242"));
    assert_eq!(p.job_name.as_deref(), Some("wrf-run"));
    assert_eq!(p.user, me());
    assert_eq!(p.written_bytes, TOTAL);
    assert_eq!(p.read_bytes, TOTAL);
    assert_eq!(p.daemons.len(), 3);
    assert_eq!(
        p.daemons.iter().map(|d| d.written_bytes).sum::<u64>(),
        TOTAL
    );
    assert_eq!(p.io_processes, 3);
    assert_eq!(p.files, 3);
    assert!(p.end >= p.start && p.start > 0.0, "{} {}", p.start, p.end);
    assert_eq!(mode_of(&db), 0o600);

    // The profile is in the state directory too, private.
    let kept = state.join("profile.json");
    let local: JobProfile = serde_json::from_slice(&std::fs::read(&kept).unwrap()).unwrap();
    assert_eq!(local, p);
    assert_eq!(mode_of(&kept), 0o600);
    // Counted: the daemons' persisted snapshots are gone from their roots.
    assert!(persisted(&dep).is_empty());

    let png = dir.path().join("job.png");
    run(
        &["history", "plot", "4242", "--out", s(&png), "--db", s(&db)],
        &[],
    );
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let img = image::load_from_memory(&bytes).unwrap();
    assert!(img.width() > 100 && img.height() > 100);
}

#[test]
fn a_killed_deployments_profile_is_stored_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.db");
    let cfg = config(dir.path(), Some(&db));
    let state = dir.path().join("root");
    let _guard = StopGuard(state.clone());
    start(dir.path(), &cfg, "5151", "lammps", &[]);
    let dep = Deployment::load(&state.join("deployment.toml")).unwrap();
    workload(&state);

    for p in &wait_persisted(&dep) {
        assert_eq!(p.stats.job, "5151");
    }
    for f in dep.daemons.iter().flat_map(|d| {
        std::fs::read_dir(d.root.join(PERSIST_DIR))
            .unwrap()
            .flatten()
    }) {
        assert_eq!(mode_of(&f.path()), 0o600, "{}", f.path().display());
    }

    // kill -9 every daemon: no clean stop, no last snapshot.
    kill_daemons(&state, &[0, 1, 2]);
    // What the killed daemons left: their last snapshots.
    let last_ms = persisted(&dep)
        .iter()
        .map(|p| p.stats.now_ms)
        .max()
        .unwrap();

    // The next start on the same state ends the dead deployment and stores its profile.
    let out = start(dir.path(), &cfg, "5152", "lammps", &[]);
    let said = stdout(&out);
    assert!(
        said.contains(&format!(
            "eddy: job profile 5151 stored in {}",
            db.display()
        )) && said.contains("without `eddy stop`"),
        "{}",
        text(&out)
    );
    assert!(
        said.contains("deployment \"5152\" started"),
        "{}",
        text(&out)
    );
    let p = show(&db, "5151", &[]);
    assert_eq!(p.written_bytes, TOTAL);
    assert_eq!(p.read_bytes, TOTAL);
    assert_eq!(p.job_name.as_deref(), Some("lammps"));
    assert_eq!(p.daemons.len(), 3);
    // Its end is the last snapshot's time, not this start's.
    assert_eq!(p.end, last_ms as f64 / 1e3);
    // The new deployment serves and counts from zero: its stop stores job 5152 apart.
    run(&["stop", "--state", s(&state)], &[]);
    let q = show(&db, "5152", &[]);
    assert_eq!(q.written_bytes, 0);
    assert_eq!(show(&db, "5151", &[]).written_bytes, TOTAL);
}

/// Waits until the daemons' persisted snapshots hold the whole first workload (one file
/// per daemon); returns them.
fn wait_persisted(dep: &Deployment) -> Vec<PersistedStats> {
    let what = "the daemons persist the workload (files, bytes written)";
    eddy_testkit::eventually::eventually_seen(GUARD, what, || {
        let snaps = persisted(dep);
        if snaps.len() == 3
            && op_bytes(&snaps, "write") == TOTAL
            && op_bytes(&snaps, "read") == TOTAL
        {
            Ok(snaps)
        } else {
            Err((snaps.len(), op_bytes(&snaps, "write")))
        }
    })
}

/// `kill -9` of the daemons `ids` recorded in `state`; returns once they are gone.
fn kill_daemons(state: &Path, ids: &[u32]) {
    let pids = std::fs::read_to_string(state.join("pids")).unwrap();
    let daemons: Vec<i32> = ids
        .iter()
        .map(|id| {
            let line = pids
                .lines()
                .find(|l| l.starts_with(&format!("daemon-{id} ")))
                .unwrap_or_else(|| panic!("no daemon-{id} in {pids}"));
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        })
        .collect();
    for pid in &daemons {
        // SAFETY: kill(2) of a daemon this test started.
        assert_eq!(unsafe { libc::kill(*pid, libc::SIGKILL) }, 0);
    }
    eddy_testkit::eventually::eventually_within(GUARD, "the killed daemons are gone", || {
        (!daemons.iter().any(|p| running(*p))).then_some(())
    });
}

#[test]
fn a_restarted_daemons_earlier_counts_are_kept_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.db");
    let cfg = config(dir.path(), Some(&db));
    let state = dir.path().join("root");
    let _guard = StopGuard(state.clone());
    start(dir.path(), &cfg, "6161", "restarted", &[]);
    let dep = Deployment::load(&state.join("deployment.toml")).unwrap();
    workload(&state);
    wait_persisted(&dep);
    // Daemon 1 dies and is started again on its root: a new process, counting from zero.
    kill_daemons(&state, &[1]);
    run(&["replace", "1", "--keep-root", "--state", s(&state)], &[]);
    workload_ranks(&state, 3..6);
    let out = run(&["stop", "--state", s(&state)], &[]);
    assert!(
        stdout(&out).contains("eddy: job profile 6161 stored"),
        "{}",
        text(&out)
    );
    let p = show(&db, "6161", &[]);
    // Both workloads, each byte once: daemon 1's first process from its persisted
    // snapshot, its second from its answer.
    assert_eq!(p.written_bytes, 2 * TOTAL);
    assert_eq!(p.read_bytes, 2 * TOTAL);
    assert_eq!(p.daemons.len(), 3);
    assert_eq!(p.io_processes, 6);
    assert_eq!(p.files, 6);
}

/// Whether `pid` runs (not gone, not a zombie).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X"))
        }
        Err(_) => false,
    }
}

#[test]
fn history_without_a_database_goes_to_the_users_default() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let cfg = config(dir.path(), None);
    let state = dir.path().join("root");
    let _guard = StopGuard(state.clone());
    // No XDG_DATA_HOME: $HOME/.local/share/eddy/history.db.
    let env = |c: &mut Command| {
        c.env("HOME", &home).env_remove("XDG_DATA_HOME");
    };
    let mut c = eddy_cmd();
    c.args([
        "start",
        "--local",
        "3",
        "--root",
        s(&state),
        "--config",
        s(&cfg),
        "--name",
        "mine",
    ])
    .env_remove("SLURM_JOB_ID")
    .env_remove("SLURM_JOB_NAME");
    env(&mut c);
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    workload(&state);
    let mut c = eddy_cmd();
    c.args(["stop", "--state", s(&state)]);
    env(&mut c);
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let db = home.join(".local/share/eddy/history.db");
    assert!(
        stdout(&out).contains(&format!("stored in {}", db.display())),
        "{}",
        text(&out)
    );
    assert_eq!(mode_of(&db), 0o600);
    assert_eq!(mode_of(&home.join(".local/share/eddy")), 0o700);

    // `eddy history list` with no --db finds it (no site settings either).
    let no_site = dir.path().join("bb.toml");
    std::fs::write(&no_site, "").unwrap();
    let mut c = eddy_cmd();
    c.args(["history", "list", "--json", "--site", s(&no_site)]);
    env(&mut c);
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 1, "{}", text(&out));
    let key = rows[0]["key"].as_str().unwrap().to_string();
    assert!(key.starts_with("mine@"), "{key}");
    let p = show(&db, &key, &[]);
    assert_eq!(p.written_bytes, TOTAL);
    assert_eq!(p.job_id, None);
}
