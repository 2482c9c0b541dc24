//! The job profile a deployment leaves in the I/O history when it ends (issue 21, decision
//! 0032 "At a deployment's end"): at `eddy stop` (and the burst buffer's teardown, which
//! stops through it) from what every daemon answers to `Stats`, and for a deployment whose
//! daemons were killed, at the next `eddy start` (or `eddy stop`) on its state, from the
//! snapshots the daemons persisted in their roots (`ROOT/stats/<instance>.json`).
//!
//! Nothing here fails the operation it is part of: a daemon that does not answer, a
//! database that cannot be reached, a file that cannot be written are warnings through the
//! caller's `Say`, and the stop (or start) goes on. The profile is also written to the state
//! directory (`profile.json`, 0600), so that it survives without a database.

use crate::secure::DirFd;
use crate::state::StateDir;
use crate::Say;
use eddy_config::Deployment;
use eddy_history::{profile_from_stats, Allocation, HistoryDb, JobMeta, JobProfile};
use eddy_proto::stats::{deployment_tag, DaemonStats, PersistedStats, PERSIST_DIR};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The longest a stop waits for the history database (a PostgreSQL server that does not
/// answer must not hold the stop); past it, a warning.
const STORE_BOUND: Duration = Duration::from_secs(30);

/// Where a deployment's profile is stored, and what may be read to make it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum HistoryTarget {
    /// The deployment's `history_db`, else the per-user default
    /// (`eddy_history::user_default_db`); the snapshots persisted in the daemons' roots that
    /// this host can read (the caller's own files) fill in for daemons that do not answer and
    /// add the earlier processes of restarted ones.
    #[default]
    User,
    /// A site's database, given by root-owned settings (the burst buffer's teardown): only
    /// what the daemons answer is used; no file of the job's user is read and nothing the
    /// deployment's configuration names is followed.
    Site(SiteHistory),
    /// A site's database that cannot be used (its settings or its password file are wrong,
    /// said here): as `Site`, but the profile is kept in the state directory only.
    SiteUnavailable(String),
}

/// The site's history as the burst buffer's teardown writes to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteHistory {
    /// The database: an SQLite path or a `postgres://` URL (its password, if any, in
    /// `access`, read from a root-only file).
    pub spec: String,
    /// The password and the bounds of the connection.
    pub access: eddy_history::Access,
    /// `spec`'s role may only INSERT (the site's teardown role): the database is not
    /// migrated through it (the allocation's role does that).
    pub insert_only_role: bool,
    /// The job's nodes as Slurm gave them (root's record): the profile's nodes and N_A's
    /// bound (`JobMeta::slurm_nodes`).
    pub slurm_nodes: Option<Vec<String>>,
}

/// How the deployment ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// `eddy stop` or a teardown: the daemons answered (those that could).
    Stopped,
    /// Its daemons were killed (or their node crashed): only their persisted snapshots are
    /// left, and its end is the last of them.
    Killed,
}

/// What the profile needs beyond the counters: the job from the deployment file.
pub fn job_meta(dep: &Deployment) -> JobMeta {
    let start_s = dep.job.start_ms / 1000;
    JobMeta {
        key: dep
            .job
            .id
            .clone()
            .unwrap_or_else(|| format!("{}@{start_s}", dep.name)),
        job_id: dep.job.id.clone(),
        job_name: dep.job.name.clone(),
        user: dep.job.user.clone(),
        script_hash: dep.job.script_hash.clone(),
        start: dep.job.start_ms as f64 / 1e3,
        slurm_nodes: None,
    }
}

/// The path of the profile in the state directory.
pub fn profile_path(state: &StateDir) -> PathBuf {
    state.dir().join("profile.json")
}

/// Makes and stores the profile of `dep`, which is ending as `ending` says, with the
/// allocation its servers were chosen by (the burst buffer's pool mode), if any; returns it if
/// one was made. Never fails: what goes wrong is said through `say.err`.
pub fn record_end(
    state: &StateDir,
    dep: &Deployment,
    target: &HistoryTarget,
    allocation: Option<&Allocation>,
    ending: Ending,
    say: Say,
) -> Option<JobProfile> {
    let live = match ending {
        Ending::Stopped => ask_daemons(dep),
        Ending::Killed => Vec::new(),
    };
    record_answered(state, dep, target, allocation, ending, live, say)
}

/// The daemons' answers to the request for their counters, by id.
pub(crate) type Answers = Vec<(u32, Result<DaemonStats, String>)>;

/// `record_end` with the live daemons' answers already asked for: `eddy stop` has them
/// from the daemons' answers to the stop (`ShutdownWithStats`).
pub(crate) fn record_answered(
    state: &StateDir,
    dep: &Deployment,
    target: &HistoryTarget,
    allocation: Option<&Allocation>,
    ending: Ending,
    live: Answers,
    say: Say,
) -> Option<JobProfile> {
    let persisted = match target {
        HistoryTarget::User => read_persisted(dep, say),
        HistoryTarget::Site(_) | HistoryTarget::SiteUnavailable(_) => Vec::new(),
    };
    // A stop that finds every daemon gone ends a killed deployment.
    let ending = if ending == Ending::Stopped
        && !persisted.is_empty()
        && live.iter().all(|(_, r)| r.is_err())
    {
        Ending::Killed
    } else {
        ending
    };
    let (stats, warnings) = gather(dep, live, persisted, ending);
    for w in &warnings {
        say.err(&format!("eddy: warning: job profile: {w}"));
    }
    if stats.is_empty() {
        say.err(
            "eddy: warning: no job profile: no daemon answered and none left a snapshot of \
             its counters",
        );
        return None;
    }
    let mut meta = job_meta(dep);
    if let HistoryTarget::Site(site) = target {
        meta.slurm_nodes.clone_from(&site.slurm_nodes);
    }
    let mut profile = profile_from_stats(&stats, &meta);
    profile.allocation = allocation.cloned();
    match serde_json::to_vec_pretty(&profile) {
        Ok(text) => {
            if let Err(e) = crate::state::write_private(&profile_path(state), &text) {
                say.err(&format!("eddy: warning: job profile: {e:#}"));
            }
        }
        Err(e) => say.err(&format!(
            "eddy: warning: job profile: cannot encode it: {e}"
        )),
    }
    let spec = match target {
        HistoryTarget::Site(site) => Some(site.spec.clone()),
        HistoryTarget::SiteUnavailable(why) => {
            say.err(&format!(
                "eddy: warning: job profile {} not stored: the site's history cannot be used \
                 ({why}); it is in {}",
                profile.key,
                profile_path(state).display()
            ));
            return Some(profile);
        }
        HistoryTarget::User => dep
            .config
            .history_db
            .clone()
            .or_else(|| eddy_history::user_default_db().map(|p| p.display().to_string())),
    };
    let Some(spec) = spec else {
        say.err(&format!(
            "eddy: warning: job profile {} not stored: no history_db in the configuration and \
             no home directory for the default; it is in {}",
            profile.key,
            profile_path(state).display()
        ));
        return Some(profile);
    };
    let access = match target {
        HistoryTarget::Site(site) => Some((site.access.clone(), site.insert_only_role)),
        HistoryTarget::User | HistoryTarget::SiteUnavailable(_) => None,
    };
    match store(&spec, access, &profile) {
        Ok(name) => say.out(&stored_line(&profile, &name, ending)),
        // The setting as it is may hold a password: never shown.
        Err(e) => say.err(&format!(
            "eddy: warning: job profile {} not stored in the history {}: {e:#}; it is in {}",
            profile.key,
            eddy_history::redacted(&spec),
            profile_path(state).display()
        )),
    }
    Some(profile)
}

/// The line a stored profile is announced with.
fn stored_line(p: &JobProfile, db: &str, ending: Ending) -> String {
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    let mut line = format!(
        "eddy: job profile {} stored in {db} ({:.1} MiB read, {:.1} MiB written, mode {}",
        p.key,
        mib(p.read_bytes),
        mib(p.written_bytes),
        eddy_history::db::mode_name(p.io_mode)
    );
    if ending == Ending::Killed {
        line.push_str(
            "; the deployment ended without `eddy stop` (its daemons were killed): counted up to \
             their last persisted snapshot",
        );
    }
    line.push(')');
    line
}

/// Opens the history and puts the profile, within `STORE_BOUND`; returns the database's
/// name. A site's history (`access` given, with whether its role may only INSERT) is written
/// insert-only (a profile already stored under the key is never replaced); a user's own is
/// migrated and upserted.
fn store(
    spec: &str,
    access: Option<(eddy_history::Access, bool)>,
    profile: &JobProfile,
) -> anyhow::Result<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (spec, profile) = (spec.to_string(), profile.clone());
    std::thread::Builder::new()
        .name("eddy-history".into())
        .spawn(move || {
            let put = (|| {
                let Some((access, insert_only_role)) = access else {
                    let mut db = HistoryDb::open(&spec)?;
                    db.put(&profile)?;
                    return anyhow::Ok(db.name().to_string());
                };
                let mut db = if insert_only_role {
                    HistoryDb::open_insert_only(&spec, &access)?
                } else {
                    HistoryDb::open_with(&spec, &access)?
                };
                if db.insert_new(&profile)? == eddy_history::Inserted::KeyTaken {
                    anyhow::bail!(
                        "a profile with the key {} is stored already: it is not replaced",
                        profile.key
                    );
                }
                anyhow::Ok(db.name().to_string())
            })();
            let _ = tx.send(put);
        })?;
    match rx.recv_timeout(STORE_BOUND) {
        Ok(r) => r,
        Err(_) => anyhow::bail!(
            "the database did not answer within {} s",
            STORE_BOUND.as_secs()
        ),
    }
}

/// Every daemon's answer to `Stats`, within the RPC deadline.
fn ask_daemons(dep: &Deployment) -> Answers {
    let failed = |e: String| dep.daemons.iter().map(|d| (d.id, Err(e.clone()))).collect();
    let rt = match crate::runtime() {
        Ok(rt) => rt,
        Err(e) => return failed(format!("{e:#}")),
    };
    let client = match eddy_client::Client::new(dep.clone()) {
        Ok(c) => c,
        Err(e) => return failed(format!("cannot connect to the daemons: {e}")),
    };
    ask_with(&rt, &client, dep)
}

/// Every daemon's counters, asked through `client` (at once, bounded by twice the RPC
/// deadline).
fn ask_with(
    rt: &tokio::runtime::Runtime,
    client: &eddy_client::Client,
    dep: &Deployment,
) -> Answers {
    let failed = |e: String| dep.daemons.iter().map(|d| (d.id, Err(e.clone()))).collect();
    // Each call is bounded by the RPC deadline; this bounds them all once more.
    let bound = Duration::from_millis(dep.config.rpc_timeout_ms.saturating_mul(2));
    rt.block_on(async {
        match tokio::time::timeout(bound, client.daemon_stats()).await {
            Ok(answers) => answers
                .into_iter()
                .map(|(id, r)| (id, r.map_err(|e| e.to_string())))
                .collect(),
            Err(_) => failed(format!("no answer within {} ms", bound.as_millis())),
        }
    })
}

/// The largest persisted snapshot read (a daemon's counters are far smaller): a daemon
/// root is its user's, and what lies there is read with a bound.
const MAX_SNAPSHOT_BYTES: u64 = 16 << 20;
/// The most snapshot files read from one daemon root (one per process of the daemon).
const MAX_SNAPSHOTS: usize = 1024;

/// The snapshots of this deployment persisted in the daemons' roots this host can read.
fn read_persisted(dep: &Deployment, say: Say) -> Vec<PersistedStats> {
    let secret = match dep.secret_bytes() {
        Ok(s) => s,
        Err(e) => {
            say.err(&format!("eddy: warning: job profile: {e}"));
            return Vec::new();
        }
    };
    let tag = deployment_tag(&secret);
    let per_daemon = each_daemon(dep, |d| {
        let mut found = Vec::new();
        let Some((dir, names)) = persisted_files(&d.root) else {
            return found;
        };
        for name in names {
            let read = dir
                .read_file(&name, MAX_SNAPSHOT_BYTES)
                .map_err(|e| format!("{e:#}"))
                .and_then(|b| {
                    serde_json::from_slice::<PersistedStats>(&b).map_err(|e| e.to_string())
                });
            match read {
                Ok(p) if p.deployment == tag && p.stats.daemon == d.id => found.push(Ok(p)),
                Ok(_) => {} // another deployment's, or another daemon's
                Err(e) => found.push(Err(format!(
                    "eddy: warning: job profile: cannot read {}: {e}",
                    dir.path().join(&name).display()
                ))),
            }
        }
        found
    });
    let mut out = Vec::new();
    for found in per_daemon.into_iter().flatten() {
        match found {
            Ok(p) => out.push(p),
            Err(e) => say.err(&e),
        }
    }
    out
}

/// How many daemon roots are read (or cleaned) at once: a thousand local daemons' roots one
/// after the other made the stop wait on a thousand directory reads, file reads and unlinks
/// in a row (decision 0076).
const ROOTS_AT_ONCE: usize = 16;

/// `f` of each daemon of `dep`, on up to `ROOTS_AT_ONCE` threads; the results in the
/// daemons' order.
fn each_daemon<T: Send>(
    dep: &Deployment,
    f: impl Fn(&eddy_config::DaemonEntry) -> T + Sync,
) -> Vec<T> {
    let daemons = &dep.daemons;
    if daemons.len() <= 1 {
        return daemons.iter().map(&f).collect();
    }
    let per_thread = daemons.len().div_ceil(ROOTS_AT_ONCE);
    std::thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> = daemons
            .chunks(per_thread)
            .map(|chunk| scope.spawn(move || chunk.iter().map(f).collect::<Vec<T>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(v) => v,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

/// The snapshot files under a daemon root, by name in its `stats` directory held open (none
/// if it cannot be read from here). The root and `stats` belong to the daemon's user: both
/// are opened without following a link, and each file is read through the descriptor
/// (`DirFd::read_file`: no link, no FIFO, bounded), so a link, FIFO or device the user
/// plants there is refused, never followed or waited on.
fn persisted_files(root: &Path) -> Option<(DirFd, Vec<String>)> {
    let dir = DirFd::open(root).and_then(|r| r.sub(PERSIST_DIR)).ok()?;
    let mut names: Vec<String> = dir
        .names()
        .ok()?
        .into_iter()
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    names.truncate(MAX_SNAPSHOTS);
    Some((dir, names))
}

/// Removes this deployment's persisted snapshots from the roots this host reaches (its
/// profile is made); others' files stay. Through the `stats` directory's descriptor: a link
/// planted there is removed, never followed.
pub fn remove_persisted(dep: &Deployment) {
    let Ok(secret) = dep.secret_bytes() else {
        return;
    };
    let tag = deployment_tag(&secret);
    each_daemon(dep, |d| {
        let Some((dir, names)) = persisted_files(&d.root) else {
            return;
        };
        for name in names {
            let ours = dir
                .read_file(&name, MAX_SNAPSHOT_BYTES)
                .ok()
                .and_then(|b| serde_json::from_slice::<PersistedStats>(&b).ok())
                .is_some_and(|p| p.deployment == tag);
            if ours {
                let _ = dir.remove_file(&name);
            }
        }
    });
}

/// The snapshots the profile is made from, one or more per daemon, and what is missing.
/// A daemon that answered contributes its answer and the persisted snapshots of its earlier
/// processes (another start time); one that did not, all its persisted processes.
fn gather(
    dep: &Deployment,
    live: Vec<(u32, Result<DaemonStats, String>)>,
    persisted: Vec<PersistedStats>,
    ending: Ending,
) -> (Vec<DaemonStats>, Vec<String>) {
    let mut stats = Vec::new();
    let mut warnings = Vec::new();
    for d in &dep.daemons {
        let answer = live.iter().find(|(id, _)| *id == d.id).map(|(_, r)| r);
        let mine: Vec<&DaemonStats> = persisted
            .iter()
            .filter(|p| p.stats.daemon == d.id)
            .map(|p| &p.stats)
            .collect();
        match answer {
            Some(Ok(s)) => {
                stats.extend(
                    mine.into_iter()
                        .filter(|p| p.started_ms != s.started_ms)
                        .cloned(),
                );
                stats.push(s.clone());
            }
            other => {
                let why = match (other, ending) {
                    (Some(Err(e)), _) => format!("daemon {} did not answer ({e})", d.id),
                    (_, Ending::Killed) => format!("daemon {} was killed", d.id),
                    (_, Ending::Stopped) => format!("daemon {} did not answer", d.id),
                };
                if mine.is_empty() {
                    warnings.push(format!(
                        "{why} and left no snapshot: the profile is made from the others"
                    ));
                } else {
                    if ending == Ending::Stopped {
                        warnings.push(format!(
                            "{why}: its counts are those of its last persisted snapshot"
                        ));
                    }
                    stats.extend(mine.into_iter().cloned());
                }
            }
        }
    }
    (stats, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_config::{Config, DaemonEntry, JobInfo};

    fn dep(n: u32) -> Deployment {
        Deployment {
            name: "t".into(),
            secret: "00".repeat(32),
            config: Config::default(),
            daemons: (0..n)
                .map(|id| DaemonEntry {
                    id,
                    host: "h".into(),
                    addr: "127.0.0.1:1".into(),
                    socket: None,
                    root: PathBuf::from(format!("/nonexistent/d{id}")),
                    metrics: None,
                })
                .collect(),
            job: JobInfo {
                start_ms: 5_000,
                ..JobInfo::default()
            },
            epoch: 0,
            moving_from: None,
            draining: Vec::new(),
        }
    }

    fn snap(daemon: u32, started_ms: u64) -> DaemonStats {
        DaemonStats {
            daemon,
            started_ms,
            now_ms: started_ms + 1,
            ..DaemonStats::default()
        }
    }

    fn kept(daemon: u32, started_ms: u64) -> PersistedStats {
        PersistedStats {
            deployment: "x".into(),
            instance: started_ms,
            stats: snap(daemon, started_ms),
        }
    }

    #[test]
    fn answers_earlier_processes_and_the_silent_are_combined() {
        let live = vec![
            (0, Ok(snap(0, 100))),
            (1, Err("connection refused".into())),
            (2, Err("timed out".into())),
        ];
        // Daemon 0: its running process's own file (same start) and an earlier process;
        // daemon 1: one file; daemon 2: none.
        let persisted = vec![kept(0, 100), kept(0, 50), kept(1, 70)];
        let (stats, warnings) = gather(&dep(3), live, persisted, Ending::Stopped);
        let mut got: Vec<(u32, u64)> = stats.iter().map(|s| (s.daemon, s.started_ms)).collect();
        got.sort_unstable();
        assert_eq!(got, vec![(0, 50), (0, 100), (1, 70)]);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("daemon 1 did not answer (connection refused)"));
        assert!(warnings[0].contains("last persisted snapshot"));
        assert!(warnings[1].contains("daemon 2") && warnings[1].contains("from the others"));
    }

    #[test]
    fn a_killed_deployment_is_made_of_its_snapshots() {
        let (stats, warnings) = gather(
            &dep(2),
            Vec::new(),
            vec![kept(0, 1), kept(1, 2)],
            Ending::Killed,
        );
        assert_eq!(stats.len(), 2);
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn the_key_is_the_job_id_else_name_and_start() {
        let mut d = dep(1);
        assert_eq!(job_meta(&d).key, "t@5");
        d.job.id = Some("77".into());
        assert_eq!(job_meta(&d).key, "77");
        assert_eq!(job_meta(&d).start, 5.0);
    }

    #[test]
    fn the_stored_line_says_how_it_ended() {
        let mut d = dep(1);
        d.job.id = Some("9".into());
        let mut p = profile_from_stats(&[snap(0, 6_000)], &job_meta(&d));
        p.read_bytes = 3 << 20;
        p.written_bytes = 1 << 19;
        let line = stored_line(&p, "/h.db", Ending::Stopped);
        assert_eq!(
            line,
            "eddy: job profile 9 stored in /h.db (3.0 MiB read, 0.5 MiB written, mode none)"
        );
        assert!(stored_line(&p, "/h.db", Ending::Killed).contains("without `eddy stop`"));
    }
}
