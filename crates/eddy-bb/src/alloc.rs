//! Pool mode's allocation at setup (decision 0038): which of the site's I/O nodes a job's
//! daemons start on, decided by the DFRA policy (`eddy_alloc::decide`) from the job's history
//! in the site's history database and the pool as it is now — the other pool jobs set up on
//! it (their records under `state_dir`), each with what its own history expects of it and
//! the live load its daemons report (`Stats`). The job's `nodes=` directive and the site's
//! `[pool] max_servers_per_job` / `max_servers_per_user` cap the servers.
//!
//! What the job's user controls steers nothing but the user's own jobs (decision 0054): the
//! history is looked up by the job's user, name and script (another user's identical script
//! is not this job's history); a neighbour's daemons (its user's) report its live load, which
//! counts for no less than the neighbour's history says; the database is opened with a
//! password from a root-only file and bounded (connection, locks, statements, and the whole
//! lookup).
//! The decision is kept in the job's record, summed up in the Slurm job's Comment, and stored
//! with the job's profile at teardown (`alloc/comment.rs`: the Comment).
//!
//! `pool_view` (the servers and their jobs) and `cap` are pure; `gather_for` does the I/O
//! (Slurm, the history database, the neighbours' daemons, the health probes) before the state
//! directory's lock is taken, and `decide_for` decides under it from what was gathered and
//! the records as they are then (decision 0055): no job waits on another's I/O.

use crate::job::{JobDir, JobRecord};
use crate::site::{Pool, Site};
use anyhow::{bail, Context, Result};
use eddy_alloc::pool::pick_history;
use eddy_alloc::{decide, Decision, Job, Load, Policy, RunningJob, Server, Traits};
use eddy_deploy::launch::parse_hosts;
use eddy_history::{Allocation, HistoryDb, JobProfile};
use eddy_proto::stats::DaemonStats;
use std::collections::BTreeMap;
use std::time::Duration;

/// Bound on one call of a Slurm tool from the allocation.
const SLURM_BOUND: Duration = Duration::from_secs(30);
/// Longest Slurm job comment the allocation writes (Slurm keeps more; a line stays readable).
pub const COMMENT_MAX: usize = 240;

/// Another pool job set up now, as the allocation sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Neighbour {
    pub job: u32,
    /// Its user (root's record).
    pub uid: u32,
    pub name: Option<String>,
    /// The pool nodes its daemons run on.
    pub hosts: Vec<String>,
    /// What its own history expects of it.
    pub expected: Option<Traits>,
    /// Its daemons' live load by host, or why they could not be asked.
    pub live: Result<BTreeMap<String, Load>, String>,
}

impl Neighbour {
    fn label(&self) -> String {
        match &self.name {
            Some(n) => format!("job {} ({n})", self.job),
            None => format!("job {}", self.job),
        }
    }
}

/// The pool's servers (id = index in `[pool] nodes`) with the neighbours running on them, and
/// a note for each neighbour whose daemons could not be asked (listed with its history only).
pub fn pool_view(
    hosts: &[String],
    peaks: &[f64],
    neighbours: &[Neighbour],
) -> (Vec<Server>, Vec<String>) {
    let mut notes = Vec::new();
    for n in neighbours {
        if let Err(e) = &n.live {
            notes.push(format!(
                "neighbour {} cannot be reached ({e}): listed with its history only",
                n.label()
            ));
        }
    }
    let servers = hosts
        .iter()
        .zip(peaks)
        .enumerate()
        .map(|(i, (host, peak))| {
            let mut load = Load::default();
            let jobs: Vec<RunningJob> = neighbours
                .iter()
                .filter(|n| n.hosts.contains(host))
                .map(|n| {
                    // Its user's daemons say what it does now: never less than its history.
                    let live = n.live.as_ref().ok().map(|by_host| {
                        at_least(
                            by_host.get(host).copied().unwrap_or_default(),
                            n.expected.as_ref(),
                        )
                    });
                    if let Some(l) = &live {
                        load.bytes_per_s += l.bytes_per_s;
                        load.iops += l.iops;
                        load.metadata_rate += l.metadata_rate;
                    }
                    RunningJob {
                        job: n.label(),
                        expected: n.expected,
                        live,
                    }
                })
                .collect();
            Server {
                id: u32::try_from(i).unwrap_or(u32::MAX),
                host: host.clone(),
                peak_bandwidth: *peak,
                load,
                jobs,
                healthy: true,
                // Filled in by `screen` (the health probe and the inventory's health).
                recent_bandwidth: None,
            }
        })
        .collect();
    (servers, notes)
}

/// A neighbour's live load (what its own daemons report), raised to what its history expects
/// where it says less: a neighbour cannot make itself look quiet to draw jobs onto its
/// servers.
pub fn at_least(live: Load, expected: Option<&Traits>) -> Load {
    let Some(t) = expected else {
        return live;
    };
    Load {
        bytes_per_s: live.bytes_per_s.max(t.peak_bandwidth),
        iops: live.iops.max(t.peak_iops),
        metadata_rate: live.metadata_rate.max(t.peak_metadata_rate),
        metadata_queue: match (live.metadata_queue, t.mean_metadata_queue) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        },
    }
}

/// A site's cap on the servers of a job (`why` says whose): a decision with more is cut to
/// its first `max`, and the reasons say so.
pub fn site_cap(decision: &mut Decision, max: u32, why: &str) {
    let n = decision.servers.len();
    if n > max as usize {
        decision.servers.truncate(max as usize);
        decision.reasons.push(format!(
            "{why}: at most {max} server(s), {n} decided: servers {:?}",
            decision.servers
        ));
    }
}

/// The servers one user's other pool jobs hold now.
pub fn held_by(neighbours: &[Neighbour], uid: u32) -> u32 {
    let n: usize = neighbours
        .iter()
        .filter(|n| n.uid == uid)
        .map(|n| n.hosts.len())
        .sum();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The job's `nodes=` directive as the most servers it may get: a decision with more is cut
/// to its first `max`; either way the reasons say so.
pub fn cap(decision: &mut Decision, max: Option<u32>) {
    let Some(max) = max else {
        return;
    };
    let n = decision.servers.len();
    if n > max as usize {
        decision.servers.truncate(max as usize);
        decision.reasons.push(format!(
            "nodes={max}: the job's directive allows at most {max} server(s), {n} decided: \
             servers {:?}",
            decision.servers
        ));
    } else {
        decision.reasons.push(format!(
            "nodes={max}: the job's directive allows at most {max} server(s); {n} decided"
        ));
    }
}

/// The load a daemon's counters show over their last `window_s` seconds.
pub fn live_load(s: &DaemonStats, window_s: u64) -> Load {
    let r = s.recent(window_s);
    if !r.sampled {
        return Load::default();
    }
    Load {
        bytes_per_s: r.bytes_per_s,
        iops: r.ops_per_s,
        metadata_rate: r.metadata_ops_per_s,
        metadata_queue: Some(r.metadata_queue_mean),
    }
}

/// The allocation in the form the history keeps (with the servers' hosts).
pub fn allocation(decision: &Decision, pool: &Pool) -> Allocation {
    let names = pool.node_names();
    Allocation {
        rule: rule_name(decision),
        servers: decision.servers.clone(),
        hosts: hosts_of(decision, &names),
        reasons: decision.reasons.clone(),
        grown: Vec::new(),
    }
}

fn rule_name(decision: &Decision) -> String {
    match decision.rule {
        eddy_alloc::Rule::Scaled => "scaled",
        eddy_alloc::Rule::Isolated => "isolated",
        eddy_alloc::Rule::Default => "default",
    }
    .to_string()
}

/// The pool nodes a decision names.
pub fn hosts_of(decision: &Decision, names: &[String]) -> Vec<String> {
    decision
        .servers
        .iter()
        .filter_map(|id| names.get(*id as usize).cloned())
        .collect()
}

mod comment;
pub use comment::*;

/// One history lookup: a job's user, name, script hash and node count.
#[derive(Debug, Clone)]
struct Lookup {
    user: String,
    name: String,
    script_hash: Option<String>,
    nodes: u32,
}

/// The histories of `lookups` in the site's history database (None: no run, or the database
/// could not be read, said in `notes`): each the previous runs of the same user's job of the
/// same name and script, the one DFRA decides from. The database is opened with the site's
/// password file and bounds; the whole lookup is bounded too (`[history]`'s sum): past it
/// the job is decided without history.
fn histories(
    site: &Site,
    lookups: Vec<Lookup>,
    notes: &mut Vec<String>,
) -> Vec<Option<JobProfile>> {
    let none = |n: usize| vec![None; n];
    let count = lookups.len();
    if count == 0 {
        return Vec::new();
    }
    let opened = site
        .profile_db()
        .and_then(|spec| Ok((spec, site.history_access()?)));
    let (spec, access) = match opened {
        Ok(x) => x,
        Err(e) => {
            notes.push(format!("the site's history cannot be opened: {e:#}"));
            return none(count);
        }
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("eddy-history".into())
        .spawn(move || {
            let mut notes = Vec::new();
            let found = match HistoryDb::open_with(&spec, &access) {
                Ok(mut db) => lookups
                    .iter()
                    .map(
                        |l| match db.runs_of(Some(&l.user), &l.name, l.script_hash.as_deref()) {
                            Ok(runs) => pick_history(&runs, l.nodes).cloned(),
                            Err(e) => {
                                notes.push(format!(
                                    "the history of {} ({}) cannot be read: {e}",
                                    l.name, l.user
                                ));
                                None
                            }
                        },
                    )
                    .collect(),
                Err(e) => {
                    notes.push(format!("the site's history cannot be opened: {e}"));
                    vec![None; lookups.len()]
                }
            };
            let _ = tx.send((found, notes));
        });
    if let Err(e) = spawned {
        notes.push(format!("the site's history cannot be read: {e}"));
        return none(count);
    }
    let bound = site.history.bound();
    match rx.recv_timeout(bound) {
        Ok((found, more)) => {
            notes.extend(more);
            found
        }
        Err(_) => {
            notes.push(format!(
                "the site's history did not answer within {} s: decided without it",
                bound.as_secs()
            ));
            none(count)
        }
    }
}

/// The other pool jobs set up now (records under `state_dir` with daemons or a decision), each
/// with the hosts of its servers: root's records alone, no other I/O.
fn pool_jobs(site: &Site, pool: &Pool, job: u32) -> Result<Vec<(JobDir, JobRecord, Vec<String>)>> {
    // privileged-path: the site's state_dir (root's settings; trusted_dir checks it at setup)
    let entries = match std::fs::read_dir(&site.state_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).context(format!("cannot list {}", site.state_dir.display())),
    };
    let mut ids: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|id| *id != job)
        .collect();
    ids.sort_unstable();
    let names = pool.node_names();
    let mut out = Vec::new();
    for id in ids {
        let jd = JobDir::new(site, id);
        let Ok(rec) = jd.load() else {
            continue; // being set up or torn down: no record to read
        };
        if rec.mode != crate::directives::Mode::Pool {
            continue;
        }
        let hosts: Vec<String> = if rec.daemons.is_empty() {
            rec.decision
                .as_ref()
                .map(|d| hosts_of(d, &names))
                .unwrap_or_default()
        } else {
            rec.daemons.iter().map(|d| d.host.clone()).collect()
        };
        if hosts.is_empty() {
            continue;
        }
        out.push((jd, rec, hosts));
    }
    Ok(out)
}

/// Refuses job `rec` when its user holds the most pool jobs the site allows at a time
/// (`[pool] max_jobs_per_user`): their jobs decided and not torn down. Root's records alone.
pub fn check_user_limit(site: &Site, pool: &Pool, rec: &JobRecord) -> Result<()> {
    let held: Vec<String> = pool_jobs(site, pool, rec.job)?
        .iter()
        .filter(|(_, other, _)| other.uid == rec.uid)
        .map(|(_, other, _)| other.job.to_string())
        .collect();
    if held.len() >= pool.max_jobs_per_user as usize {
        bail!(
            "user {} (uid {}) holds {} pool job(s) already ({}): this site allows {} at a time \
             ([pool] max_jobs_per_user); submit this one again when one of them has ended",
            eddy_config::JobInfo::user_name(rec.uid),
            rec.uid,
            held.len(),
            held.join(", "),
            pool.max_jobs_per_user
        );
    }
    Ok(())
}

/// The other pool jobs set up now, with their daemons' live load (all asked at once), and the
/// history lookup of each (by its own user).
/// The other pool jobs set up now with their daemons' live load (no history lookups).
pub(crate) fn neighbours_live(site: &Site, pool: &Pool, job: u32) -> Result<Vec<Neighbour>> {
    Ok(neighbours(site, pool, job)?
        .into_iter()
        .map(|(n, _)| n)
        .collect())
}

/// The pool nodes other jobs' daemons run on (or were decided) now: root's records alone.
pub(crate) fn hosts_of_others(site: &Site, pool: &Pool, job: u32) -> Result<Vec<String>> {
    Ok(pool_jobs(site, pool, job)?
        .into_iter()
        .flat_map(|(_, _, h)| h)
        .collect())
}

fn neighbours(site: &Site, pool: &Pool, job: u32) -> Result<Vec<(Neighbour, Option<Lookup>)>> {
    let jobs = pool_jobs(site, pool, job)?;
    let states = jobs.iter().map(|(jd, _, _)| jd.state()).collect();
    let mut lives = lives_of(states, pool.live_window_s).into_iter();
    let mut out = Vec::new();
    for (_, rec, hosts) in jobs {
        let lookup = rec.job_name.as_ref().map(|name| Lookup {
            user: eddy_config::JobInfo::user_name(rec.uid),
            name: name.clone(),
            script_hash: rec.script_hash.clone(),
            nodes: rec.nodes.unwrap_or(0),
        });
        out.push((
            Neighbour {
                job: rec.job,
                uid: rec.uid,
                name: rec.job_name.clone(),
                hosts,
                expected: None,
                live: lives
                    .next()
                    .unwrap_or_else(|| Err("its daemons were not asked".into())),
            },
            lookup,
        ));
    }
    Ok(out)
}

/// What the daemons of the neighbours with deployments `states` report now, all asked at once
/// (decision 0055): neighbours whose daemons do not answer cost one bound, not one each.
fn lives_of(
    states: Vec<eddy_deploy::StateDir>,
    window_s: u64,
) -> Vec<Result<BTreeMap<String, Load>, String>> {
    let rt = match eddy_deploy::runtime() {
        Ok(rt) => rt,
        Err(e) => return states.iter().map(|_| Err(format!("{e:#}"))).collect(),
    };
    let asks: Vec<_> = states
        .into_iter()
        .map(|state| rt.spawn(live_of(state, window_s)))
        .collect();
    rt.block_on(async {
        let mut out = Vec::new();
        for ask in asks {
            out.push(
                ask.await
                    .unwrap_or_else(|e| Err(format!("asking failed: {e}"))),
            );
        }
        out
    })
}

/// What a neighbour's daemons report now, by host (as `eddy stats` asks them).
/// Every daemon's counters of `dep`, all asked at once within twice its RPC deadline
/// (decision 0055): daemons that do not answer cost one bound, not one each.
pub(crate) async fn stats_of(
    dep: &eddy_config::Deployment,
) -> Result<Vec<(u32, Result<DaemonStats, eddy_proto::Errno>)>, String> {
    let client = eddy_client::Client::new(dep.clone()).map_err(|e| e.to_string())?;
    let bound = Duration::from_millis(dep.config.rpc_timeout_ms.saturating_mul(2));
    tokio::time::timeout(bound, client.daemon_stats())
        .await
        .map_err(|_| format!("no answer within {} ms", bound.as_millis()))
}

async fn live_of(
    state: eddy_deploy::StateDir,
    window_s: u64,
) -> Result<BTreeMap<String, Load>, String> {
    if !state.has_deployment() {
        return Err("its daemons are not started yet".into());
    }
    let dep = state.load_deployment().map_err(|e| format!("{e:#}"))?;
    let answers = stats_of(&dep).await?;
    let mut by_host = BTreeMap::new();
    let mut failed = Vec::new();
    for (id, answer) in answers {
        let host = dep
            .daemons
            .iter()
            .find(|d| d.id == id)
            .map(|d| d.host.clone())
            .unwrap_or_default();
        match answer {
            Ok(s) => {
                let l = live_load(&s, window_s);
                let e: &mut Load = by_host.entry(host).or_default();
                e.bytes_per_s += l.bytes_per_s;
                e.iops += l.iops;
                e.metadata_rate += l.metadata_rate;
                e.metadata_queue = match (e.metadata_queue, l.metadata_queue) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
            }
            Err(e) => failed.push(format!("daemon {id}: {e}")),
        }
    }
    if by_host.is_empty() {
        return Err(failed.join("; "));
    }
    Ok(by_host)
}

/// What the allocation of a job reads before it decides (`gather_for`, without the state
/// directory's lock), for `decide_for` (under it).
pub struct Gathered {
    job: Job,
    history: Option<JobProfile>,
    neighbours: Vec<Neighbour>,
    peaks: Vec<f64>,
    health: Vec<eddy_sysmap::health::Health>,
    notes: Vec<String>,
}

/// Gathers what job `rec`'s servers are decided from: its history and the pool now (the
/// neighbours' history and load, the servers' peaks and health). Fills in the record's job
/// name and node count (from Slurm; when Slurm cannot be asked, the job is decided without
/// history and the reasons say why). Runs without the state directory's lock: every wait on
/// Slurm, a database, a neighbour's daemons or a probe is this job's alone.
pub fn gather_for(site: &Site, pool: &Pool, rec: &mut JobRecord) -> Result<Gathered> {
    let mut notes = Vec::new();
    // A Slurm that does not answer costs the job its history, not its burst buffer.
    let (name, nodes) = match slurm_job(rec.job) {
        Ok((name, nodes)) => {
            rec.job_name = Some(name.clone());
            rec.nodes = Some(nodes);
            (name, nodes)
        }
        Err(e) => {
            notes.push(format!(
                "Slurm does not say the job's name and nodes ({e:#}): no history is looked up"
            ));
            (String::new(), 0)
        }
    };
    let user = eddy_config::JobInfo::user_name(rec.uid);
    let listed = neighbours(site, pool, rec.job)?;
    // One bounded lookup for the job and every neighbour: the job's own first.
    let mut lookups: Vec<Lookup> = Vec::new();
    if rec.job_name.is_some() {
        lookups.push(Lookup {
            user: user.clone(),
            name: name.clone(),
            script_hash: rec.script_hash.clone(),
            nodes,
        });
    }
    lookups.extend(listed.iter().filter_map(|(_, l)| l.clone()));
    let mut histories = histories(site, lookups, &mut notes).into_iter();
    let history = if rec.job_name.is_some() {
        histories.next().flatten()
    } else {
        None
    };
    let found: Vec<Neighbour> = listed
        .into_iter()
        .map(|(mut n, lookup)| {
            if lookup.is_some() {
                n.expected = histories.next().flatten().map(|p| Traits::of(&p));
            }
            n
        })
        .collect();
    let peaks = site.pool_peaks(pool)?;
    let (servers, _) = pool_view(&pool.node_names(), &peaks, &found);
    let health = screen(site, pool, &servers, &mut notes);
    let job = Job {
        user: Some(user),
        job_name: name,
        script_hash: rec.script_hash.clone(),
        nodes,
        default_servers: Vec::new(),
    };
    Ok(Gathered {
        job,
        history,
        neighbours: found,
        peaks,
        health,
        notes,
    })
}

/// Decides job `rec`'s servers from what `gather_for` found, through the site's policy, capped
/// by its `nodes=`: the one step under the state directory's lock, so that jobs set up
/// together each see the others' decisions. The neighbours are the records' as they are now
/// (one set up since the gathering is listed by its servers alone); nothing here waits on
/// anything but root's records.
pub fn decide_for(
    site: &Site,
    pool: &Pool,
    rec: &JobRecord,
    gathered: Gathered,
) -> Result<Decision> {
    let Gathered {
        job,
        history,
        neighbours: gathered,
        peaks,
        health,
        mut notes,
    } = gathered;
    let mut found = Vec::new();
    for (_, now, hosts) in pool_jobs(site, pool, rec.job)? {
        found.push(match gathered.iter().find(|n| n.job == now.job) {
            Some(n) => Neighbour { hosts, ..n.clone() },
            None => Neighbour {
                job: now.job,
                uid: now.uid,
                name: now.job_name.clone(),
                hosts,
                expected: None,
                live: Err("set up while this job's allocation was gathered".into()),
            },
        });
    }
    let (mut servers, unreachable) = pool_view(&pool.node_names(), &peaks, &found);
    notes.extend(unreachable);
    mark(site, &mut servers, &health, &mut notes);
    let mut decision = decide_with(
        &site.alloc,
        &job,
        history.as_ref(),
        &servers,
        rec.request.nodes,
    );
    decision.reasons.splice(0..0, notes);
    if let Some(max) = pool.max_servers_per_job {
        site_cap(&mut decision, max, "the site's max_servers_per_job");
    }
    if let Some(max) = pool.max_servers_per_user {
        let user = eddy_config::JobInfo::user_name(rec.uid);
        let held = held_by(&found, rec.uid);
        let left = max.saturating_sub(held);
        if left == 0 {
            bail!(
                "user {user} holds {held} I/O node(s) of the pool in other jobs already, the most \
                 this site allows one user (max_servers_per_user = {max}): this job's setup is \
                 refused while they hold them"
            );
        }
        site_cap(
            &mut decision,
            left,
            &format!("the site's max_servers_per_user = {max}, {held} held by {user}'s other jobs"),
        );
    }
    if decision.servers.is_empty() {
        bail!(
            "no I/O node of the pool can take the job: {}",
            decision.reasons.join("; ")
        );
    }
    Ok(decision)
}

/// The anomaly screening's input (decision 0039): the idle servers probed now (in parallel,
/// each within `probe_bound_s`, through the site's launcher into the storage holding the
/// pool's roots), assessed against their peers, stored in the inventory when the site has
/// one; the busy servers by their latest stored health (a probe would measure their
/// neighbours' load). A probe that cannot run is a note, never a failed setup. A server probed
/// within `probe_cache_s` is judged by that probe, and one round runs at a time: an allocation
/// that finds another's round under way judges by what is stored (decision 0055).
pub(crate) fn screen(
    site: &Site,
    pool: &Pool,
    servers: &[Server],
    notes: &mut Vec<String>,
) -> Vec<eddy_sysmap::health::Health> {
    let ratio = site.alloc.anomaly_ratio;
    let mut health = Vec::new();
    // privileged-path: the site's inventory database, named by root's settings
    if let Some(db) = site.inventory.as_deref().filter(|db| db.exists()) {
        match eddy_sysmap::health::latest(db, &[]) {
            Ok(rows) => health = rows,
            Err(e) => notes.push(format!("the inventory's health cannot be read: {e:#}")),
        }
    }
    let bytes = match pool.probe_bytes() {
        Ok(b) => b,
        Err(e) => {
            notes.push(format!("{e:#}"));
            0
        }
    };
    let idle: Vec<eddy_sysmap::health::Host> = match parse_hosts(&pool.nodes.join("\n")) {
        Ok(lines) => lines
            .into_iter()
            .filter(|h| servers.iter().any(|s| s.host == h.name && s.idle()))
            .map(|h| eddy_sysmap::health::Host {
                name: h.name,
                address: h.address,
            })
            .collect(),
        Err(e) => {
            notes.push(format!(
                "the pool's nodes cannot be read for the probe: {e:#}"
            ));
            Vec::new()
        }
    };
    if bytes > 0 && !idle.is_empty() {
        match site.eddy_program() {
            Ok(program) => {
                let spec = eddy_sysmap::health::ProbeSpec {
                    launcher: &site.launcher,
                    program: program.into(),
                    dir: crate::site::fixed_prefix(&pool.root),
                    bytes,
                    bound: Duration::from_secs(pool.probe_bound_s),
                };
                let (probes, fresh) = probes::probes_for(site, pool, &idle, &spec, notes);
                if let (Some(db), false) = (site.inventory.as_deref(), fresh.is_empty()) {
                    if let Err(e) = eddy_sysmap::health::record(db, &fresh, ratio) {
                        notes.push(format!("the probe's health is not stored: {e:#}"));
                    }
                }
                let now = u64::try_from(crate::walltime::now()).unwrap_or(0);
                let assessed = eddy_sysmap::health::assess(&probes, &health, ratio, now);
                health.retain(|h| !assessed.iter().any(|a| a.host == h.host));
                health.extend(assessed);
            }
            Err(e) => notes.push(format!("no health probe: {e:#}")),
        }
    }
    health
}

/// The screening itself: the reasons name each anomalous server of the pool, and `health`
/// fills in the servers' `recent_bandwidth` and `healthy`.
pub(crate) fn mark(
    site: &Site,
    servers: &mut [Server],
    health: &[eddy_sysmap::health::Health],
    notes: &mut Vec<String>,
) {
    let ratio = site.alloc.anomaly_ratio;
    for h in health.iter().filter(|h| h.anomalous) {
        if !servers.iter().any(|s| s.host == h.host) {
            continue;
        }
        notes.push(match (h.bandwidth, &h.error) {
            (None, Some(e)) => format!("health probe: {} is down ({e})", h.host),
            (None, None) => format!("health probe: {} is down", h.host),
            (Some(bw), _) => format!(
                "health probe: {} measured {}/s, below {ratio} of its peers' median {}/s",
                h.host,
                eddy_deploy::human_bytes(bw as u64),
                eddy_deploy::human_bytes(h.peer_median.unwrap_or(0.0) as u64)
            ),
        });
    }
    eddy_sysmap::health::fill(servers, health);
}

/// `decide`, then the job's `nodes=` cap.
pub fn decide_with(
    policy: &Policy,
    job: &Job,
    history: Option<&eddy_history::JobProfile>,
    servers: &[Server],
    max: Option<u32>,
) -> Decision {
    let mut d = decide(policy, job, history, servers);
    cap(&mut d, max);
    d
}

mod probes;
#[cfg(test)]
mod tests;
