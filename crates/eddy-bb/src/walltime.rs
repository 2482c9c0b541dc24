//! Staging timed by predicted walltime (decision 0040): a pool job's stage-in begins at its
//! predicted start minus the estimated staging time instead of at once, and its predicted
//! end is recorded at pre_run for the early write-back. The predictions come from
//! eddy-walltime over the history the site names in `[walltime]` (each user's `sacct`, or a
//! file), the machine's state from `squeue` and `sinfo`, the staging estimate from the
//! bytes of the job's stage-in sources (measured as the job's user) over the site's rate.
//!
//! Asked only from the asynchronous phases (data_in, pre_run). Whatever cannot be predicted
//! (no Slurm answer, a neighbour without history) never holds a job: it stages at once.
//!
//! Other users' jobs are input an attacker shapes (decision 0053): a pending job that
//! cannot start (held, `--begin`, a dependency, a limit: any reason but waiting for its
//! turn or its nodes) or whose partitions share no node with the job's is left out; other
//! users' pending jobs ahead delay the predicted start by at most `max_delay_by_others_s`;
//! and each user's history is read and modelled about once per `snapshot_s` for all waiting
//! data_in processes together (they share a snapshot in `<state_dir>/walltime/`), at most
//! `max_history` of its most recent jobs.
//!
//! `queue.rs` reads the queue and the partitions from Slurm.

use crate::as_user::{self, Sized};
use crate::job::{JobDir, JobRecord};
use crate::site::{Site, WalltimeSite};
use anyhow::{bail, Context, Result};
use eddy_deploy::secure::DirFd;
use eddy_deploy::{human_bytes, Say};
use eddy_walltime::start::{predicted_start, running_end, Pending, Running};
use eddy_walltime::{sacct, Job, Model, Params, Predictor};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod queue;
pub use queue::*;

/// The work of the predictions since it was last said (in the job's walltime.log).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Work {
    /// Histories read (a `sacct` per user, or the site's file).
    pub histories: usize,
    /// Models fitted (one per user per snapshot).
    pub models: usize,
    /// History rows those models fitted and replayed.
    pub rows: usize,
}

/// Predicted runtimes of users' jobs from the site's history source: one model per user,
/// over at most `max_history` of its most recent jobs, kept for `snapshot_s` (a waiting
/// data_in keeps its `Predictions` across its re-checks).
pub struct Predictions<'a> {
    w: &'a WalltimeSite,
    params: Params,
    /// When the models were first asked for since the last refresh.
    since: Option<i64>,
    /// The site's history file, read once per snapshot (`None`: not yet, or sacct).
    file: Option<Vec<Job>>,
    /// Each user's model (`None`: the user has no history).
    models: HashMap<String, Option<Model>>,
    pub work: Work,
}

impl<'a> Predictions<'a> {
    pub fn new(w: &'a WalltimeSite) -> Predictions<'a> {
        Predictions {
            w,
            params: Params {
                min_train: w.min_train,
                ..Params::default()
            },
            since: None,
            file: None,
            models: HashMap::new(),
            work: Work::default(),
        }
    }

    /// Forgets the histories and models once they are `snapshot_s` old at `now`.
    fn refresh(&mut self, now: i64) {
        let age = self.since.map(|s| now.saturating_sub(s));
        let snapshot = i64::try_from(self.w.snapshot_s).unwrap_or(i64::MAX);
        if age.is_some_and(|a| a >= snapshot) {
            self.since = None;
            self.file = None;
            self.models.clear();
        }
    }

    /// `user`'s finished jobs, at most `max_history` of the most recent.
    fn history(&mut self, user: &str) -> Result<Vec<Job>> {
        let mut jobs = if self.w.source == "sacct" {
            let text = slurm(
                "sacct",
                &[
                    "--parsable2",
                    "--noheader",
                    "-X",
                    "-o",
                    sacct::FIELDS,
                    "-S",
                    &self.w.since,
                    "-u",
                    user,
                ],
            )?;
            self.work.histories += 1;
            sacct::parse(&text).context("reading sacct's output")?
        } else {
            if self.file.is_none() {
                let path = PathBuf::from(&self.w.source);
                let jobs = if path.extension().is_some_and(|e| e == "swf") {
                    // privileged-path: the trace file the site's [walltime] names (root's settings)
                    let text = std::fs::read_to_string(&path)
                        .with_context(|| format!("reading {}", path.display()))?;
                    eddy_walltime::swf::parse(&text)?
                } else {
                    eddy_walltime::job::read_json(&path)?
                };
                self.work.histories += 1;
                self.file = Some(jobs);
            }
            self.file
                .iter()
                .flatten()
                .filter(|j| j.user == user)
                .cloned()
                .collect()
        };
        jobs.retain(|j| j.user == user);
        jobs.sort_by_key(|j| j.end);
        let skip = jobs.len().saturating_sub(self.w.max_history);
        jobs.drain(..skip);
        Ok(jobs)
    }

    /// `user`'s model, fitted once per snapshot; `None` without history.
    fn model(&mut self, user: &str) -> Result<Option<&mut Model>> {
        self.since.get_or_insert_with(now);
        if !self.models.contains_key(user) {
            let history = self.history(user)?;
            let model = if history.is_empty() {
                None
            } else {
                let m = Model::fit(&history, &self.params)?;
                self.work.models += 1;
                self.work.rows += m.rows;
                Some(m)
            };
            self.models.insert(user.to_string(), model);
        }
        Ok(self.models.get_mut(user).and_then(Option::as_mut))
    }

    /// The predicted runtime of a job of `q`'s user, cpus and limit; `None` when its
    /// user's history gives no prediction (the request would be a guess).
    fn runtime(&mut self, q: &Queued) -> Result<Option<u64>> {
        let job = Job {
            id: q.id.to_string(),
            user: q.user.clone(),
            cpus: q.cpus,
            mem_mb: None,
            limit: q.limit,
            submit: 0,
            start: 0,
            end: 0,
            runtime: 0,
        };
        let which = self.w.predictor;
        let Some(model) = self.model(&q.user)? else {
            return Ok(None);
        };
        let p = model.predict(&job)?;
        Ok(match which {
            None if p.easy.is_none() && p.adaboost.is_none() => None,
            None => Some(p.walltime),
            Some(Predictor::EasyPlusPlus) => p.easy,
            Some(Predictor::AdaBoost) => p.adaboost,
            Some(Predictor::Request) => Some(p.request),
        })
    }
}

/// The outcome of one look at the machine.
#[derive(Debug, Clone, PartialEq)]
pub enum Start {
    /// The predicted start, seconds since the epoch, and how it was reached.
    At(i64, String),
    /// No prediction (and why): stage at once.
    Unknown(String),
    /// The job is no longer queued (cancelled while it waited).
    Gone,
}

/// The snapshot the waiting data_in processes of a site share, in `<state_dir>/walltime/`
/// (root's, 0700; decision 0053): the queue as `squeue` and `sinfo` last gave it, and the
/// predicted runtime of every job asked since the models' snapshot began. One process at a
/// time reads and updates it (an flock on its `lock`), so that a user's model is fitted once
/// per `snapshot_s` for all of them, and the queue read once per `recheck_s`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Shared {
    /// When `squeue` and `sinfo` gave these texts, seconds since the epoch.
    queue_at: i64,
    squeue: String,
    sinfo: String,
    /// When the predictions in `runtimes` began.
    models_at: i64,
    /// Predicted runtime by [`job_key`] (`None`: its user has no history).
    runtimes: HashMap<String, Option<u64>>,
}

/// The shared snapshot's directory in the site's state_dir.
pub const SHARED_DIR: &str = "walltime";
const SHARED_FILE: &str = "snapshot.json";
const SHARED_LOCK: &str = "lock";
/// The longest a data_in waits for the shared snapshot's lock (another one fitting models);
/// past it, it predicts alone this time.
const SHARED_LOCK_BOUND: Duration = Duration::from_secs(60);
/// How often a data_in tries the lock while another one holds it.
const SHARED_LOCK_POLL: Duration = Duration::from_millis(100);

/// The shared snapshot, locked (until dropped).
pub struct SharedLock {
    dir: DirFd,
    _lock: std::fs::File,
}

impl SharedLock {
    /// Opens (making it if missing) and locks the shared snapshot of the site whose
    /// state_dir is `state_dir`, waiting at most SHARED_LOCK_BOUND.
    pub fn open(state_dir: &Path) -> Result<SharedLock> {
        let (me, my_group) = eddy_deploy::secure::me();
        let dir = eddy_deploy::secure::trusted_dir(state_dir)?
            .child_dir(SHARED_DIR, 0o700, me, my_group)?;
        let path = dir.path().join(SHARED_LOCK);
        // privileged-path: in <state_dir>/walltime, root's 0700 (trusted_dir + child_dir refuse links), O_NOFOLLOW
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let deadline = Instant::now() + SHARED_LOCK_BOUND;
        loop {
            let fd = std::os::fd::AsRawFd::as_raw_fd(&lock);
            // SAFETY: flock on a descriptor this function opened and owns.
            if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()));
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} stayed locked for {SHARED_LOCK_BOUND:?} by another stage-in",
                    path.display()
                );
            }
            std::thread::sleep(SHARED_LOCK_POLL);
        }
        Ok(SharedLock { dir, _lock: lock })
    }

    /// The snapshot (empty when there is none or it does not read).
    fn load(&self) -> Shared {
        // privileged-path: in <state_dir>/walltime, root's 0700 directory checked by trusted_dir + child_dir
        std::fs::read_to_string(self.dir.path().join(SHARED_FILE))
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default()
    }

    fn save(&self, shared: &Shared) -> Result<()> {
        let (me, my_group) = eddy_deploy::secure::me();
        let data = serde_json::to_vec(shared).context("writing the shared snapshot")?;
        self.dir.write_file(SHARED_FILE, &data, 0o600, me, my_group)
    }
}

/// What a job's predicted runtime depends on: its id (a reused id after a Slurm restart is
/// another job), user, cpus and limit.
fn job_key(q: &Queued) -> String {
    format!("{}|{}|{}|{:?}", q.id, q.user, q.cpus, q.limit)
}

/// The predicted start of pending job `job` now, over the nodes of its partitions: the
/// running jobs' predicted ends, the pending jobs ahead of it (higher priority, or equal
/// and older) that can start, FCFS; other users' pending jobs push it out by at most the
/// site's `max_delay_by_others_s`. With `shared` (locked), the queue and the runtimes come
/// from the site's shared snapshot while they are fresh, and what this look reads or
/// predicts goes into it.
pub fn job_start(
    w: &WalltimeSite,
    job: u32,
    predictions: &mut Predictions,
    shared: Option<&SharedLock>,
) -> Result<Start> {
    let now = now();
    let mut snap = shared.map(SharedLock::load).unwrap_or_default();
    let recheck = i64::try_from(w.recheck_s.max(1)).unwrap_or(i64::MAX);
    let age = now.saturating_sub(snap.queue_at);
    let mut queue = Vec::new();
    let mut fresh = shared.is_some() && (0..recheck).contains(&age);
    if fresh {
        queue = parse_squeue(&snap.squeue);
        // A job submitted after the snapshot is not in it: read the queue again.
        fresh = queue.iter().any(|q| q.id == job);
    }
    if !fresh {
        snap.squeue = slurm("squeue", &["-h", "-t", "PD,CF,R,CG", "-o", SQUEUE_FORMAT])?;
        snap.sinfo = slurm("sinfo", &["-h", "-N", "-o", SINFO_FORMAT])?;
        snap.queue_at = now;
        queue = parse_squeue(&snap.squeue);
    }
    let parts = partition_nodes(&snap.sinfo);
    predictions.refresh(now);
    let snapshot = i64::try_from(w.snapshot_s).unwrap_or(i64::MAX);
    if !(0..snapshot).contains(&now.saturating_sub(snap.models_at)) {
        snap.runtimes.clear();
        snap.models_at = now;
    }
    let runtimes = &mut snap.runtimes;
    let start = plan(w, &queue, &parts, job, now, &mut |q| {
        if let Some(r) = runtimes.get(&job_key(q)) {
            return Ok(*r);
        }
        // The user's model is fitted now: every job of the user's on the machine is
        // predicted with it, for the other stage-ins.
        for o in queue.iter().filter(|o| o.user == q.user) {
            if let std::collections::hash_map::Entry::Vacant(e) = runtimes.entry(job_key(o)) {
                e.insert(predictions.runtime(o)?);
            }
        }
        match runtimes.get(&job_key(q)) {
            Some(r) => Ok(*r),
            None => predictions.runtime(q),
        }
    });
    if let Some(lock) = shared {
        lock.save(&snap)?;
    }
    start
}

/// [`job_start`] over one snapshot of the queue and the partitions at `now`, with each
/// neighbour's predicted runtime from `runtime`.
fn plan(
    w: &WalltimeSite,
    queue: &[Queued],
    parts: &HashMap<String, BTreeSet<String>>,
    job: u32,
    now: i64,
    runtime: &mut dyn FnMut(&Queued) -> Result<Option<u64>>,
) -> Result<Start> {
    let Some(me) = queue.iter().find(|q| q.id == job) else {
        return Ok(Start::Gone);
    };
    let mine = nodes_of(parts, &me.partitions);
    let total = u32::try_from(mine.len()).unwrap_or(u32::MAX);
    // A neighbour's nodes among this job's: none when its partitions share none.
    let shared = |q: &Queued| -> u32 {
        let theirs = nodes_of(parts, &q.partitions);
        let n = u32::try_from(theirs.intersection(&mine).count()).unwrap_or(u32::MAX);
        q.nodes.min(n)
    };
    let mut running = Vec::new();
    let mut words = Vec::new();
    for q in queue.iter().filter(|q| q.id != job) {
        let nodes = shared(q);
        if nodes == 0 {
            continue;
        }
        match q.state.as_str() {
            "RUNNING" | "CONFIGURING" => {
                let Some(p) = runtime(q)? else {
                    return Ok(Start::Unknown(format!(
                        "running job {} of {} has no history",
                        q.id, q.user
                    )));
                };
                let end = running_end(q.start.unwrap_or(now), p, q.limit, w.correction, now);
                words.push(format!(
                    "job {} ({nodes} nodes) ends in {} s",
                    q.id,
                    end - now
                ));
                running.push(Running { nodes, end });
            }
            // Completing: its nodes free about now.
            "COMPLETING" => running.push(Running { nodes, end: now }),
            _ => {}
        }
    }
    let mut ahead: Vec<(&Queued, u32)> = queue
        .iter()
        .filter(|q| q.state == "PENDING" && q.id != job)
        .filter(|q| CAN_START.contains(&q.reason.as_str()))
        .filter(|q| (q.priority, std::cmp::Reverse(q.id)) > (me.priority, std::cmp::Reverse(me.id)))
        .map(|q| (q, shared(q)))
        .filter(|(_, nodes)| *nodes > 0)
        .collect();
    ahead.sort_by_key(|(q, _)| (std::cmp::Reverse(q.priority), q.id));
    let mut pending = Vec::new();
    let mut own = Vec::new();
    for (q, nodes) in ahead {
        let Some(p) = runtime(q)? else {
            return Ok(Start::Unknown(format!(
                "pending job {} of {} ahead has no history",
                q.id, q.user
            )));
        };
        words.push(format!("job {} ({nodes} nodes) ahead runs {p} s", q.id));
        let job = Pending { nodes, runtime: p };
        pending.push(job);
        if q.user == me.user {
            own.push(job);
        }
    }
    let (Some(all), Some(alone)) = (
        predicted_start(now, total, &running, &pending, me.nodes),
        predicted_start(now, total, &running, &own, me.nodes),
    ) else {
        return Ok(Start::Unknown(format!(
            "the job or one ahead asks more than the {total} usable nodes of its partitions \
             {}",
            me.partitions.join(",")
        )));
    };
    let bound = i64::try_from(w.max_delay_by_others_s).unwrap_or(i64::MAX);
    let t = if all.saturating_sub(alone) > bound {
        words.push(format!(
            "other users' jobs ahead delay it {} s, past the site's bound of {bound} s",
            all - alone
        ));
        alone.saturating_add(bound)
    } else {
        all
    };
    Ok(Start::At(
        t,
        format!(
            "{} of {total} nodes{}{}",
            me.nodes,
            if words.is_empty() { "" } else { ": " },
            words.join(", ")
        ),
    ))
}

/// The bytes of the job's stage-in sources (as its user sees them) and the seconds staging
/// them takes at the site's rate.
pub fn stage_in_estimate(w: &WalltimeSite, rec: &JobRecord) -> Result<(u64, u64)> {
    let sources: Vec<PathBuf> = rec
        .request
        .stage_in
        .iter()
        .filter_map(|s| {
            let link = rec.request.links.iter().find(|l| l.covers(&s.path))?;
            Some(link.backend_path(&s.path))
        })
        .collect();
    let mut bytes = 0u64;
    for (path, sized) in sources
        .iter()
        .zip(as_user::tree_bytes(rec.uid, rec.gid, &sources)?)
    {
        match sized {
            Sized::Bytes(b) => bytes = bytes.saturating_add(b),
            Sized::Unreachable(why) => bail!("cannot measure {} ({why})", path.display()),
        }
    }
    let rate = eddy_config::parse_bytes(&w.stage_in_rate)
        .map_err(|e| anyhow::anyhow!("[walltime] stage_in_rate {:?}: {e}", w.stage_in_rate))?
        .max(1);
    Ok((bytes, bytes.div_ceil(rate)))
}

/// data_in of a pool job: waits (bounded by `max_wait_s`, re-checking every `recheck_s`)
/// until predicted start − the staging estimate, recording the times in the job's record.
/// Returns at once when the stage-in began before (a retried phase) or cannot be timed.
pub fn wait_for_stage_in(
    w: &WalltimeSite,
    jd: &JobDir,
    rec: &mut JobRecord,
    say: Say,
) -> Result<()> {
    if rec.walltime.stage_in_began.is_some() {
        return Ok(());
    }
    let job = rec.job;
    let why = match stage_in_estimate(w, rec) {
        Err(e) => format!("no estimate: {e:#}"),
        Ok((bytes, estimate)) => {
            rec.walltime.stage_in_estimate_s = Some(estimate);
            note(
                jd,
                say,
                &format!(
                    "eddy: job {job}: stage-in of {} estimated at {estimate} s ({}/s)",
                    human_bytes(bytes),
                    w.stage_in_rate
                ),
            );
            wait_loop(w, jd, rec, estimate, say)?
        }
    };
    let began = now();
    rec.walltime.stage_in_began = Some(began);
    note(
        jd,
        say,
        &format!("eddy: job {job}: stage-in begins at {began} ({why})"),
    );
    rec.walltime.stage_in_why = Some(why);
    jd.save(rec)
}

/// Waits until the stage-in's time; why it ended, in words.
fn wait_loop(
    w: &WalltimeSite,
    jd: &JobDir,
    rec: &mut JobRecord,
    estimate: u64,
    say: Say,
) -> Result<String> {
    let job = rec.job;
    let deadline = now().saturating_add(i64::try_from(w.max_wait_s).unwrap_or(i64::MAX));
    let mut last_said = None;
    // Kept across the re-checks: each user's history and model once per snapshot.
    let mut predictions = Predictions::new(w);
    let state_dir = jd.dir.parent().map(Path::to_path_buf);
    let mut alone_said = false;
    loop {
        // The site's shared snapshot, locked for this look; without it, this data_in
        // predicts alone (said once).
        let shared = match state_dir.as_deref().map(SharedLock::open) {
            Some(Ok(lock)) => Some(lock),
            Some(Err(e)) => {
                if !alone_said {
                    note(
                        jd,
                        say,
                        &format!("eddy: job {job}: predicting alone (no shared snapshot: {e:#})"),
                    );
                    alone_said = true;
                }
                None
            }
            None => None,
        };
        let start = match job_start(w, job, &mut predictions, shared.as_ref()) {
            Ok(s) => s,
            Err(e) => Start::Unknown(format!("{e:#}")),
        };
        drop(shared);
        let work = std::mem::take(&mut predictions.work);
        if work.models > 0 {
            note(
                jd,
                say,
                &format!(
                    "eddy: job {job}: predictions: {} histories read, {} models, {} history \
                     rows replayed",
                    work.histories, work.models, work.rows
                ),
            );
        }
        let (t, how) = match start {
            Start::Unknown(why) => return Ok(format!("no prediction: {why}")),
            Start::Gone => bail!("job {job} left the queue while its stage-in waited"),
            Start::At(t, how) => (t, how),
        };
        let scheduled = t.saturating_sub(i64::try_from(estimate).unwrap_or(i64::MAX));
        rec.walltime.predicted_start = Some(t);
        rec.walltime.stage_in_scheduled = Some(scheduled);
        jd.save(rec)?;
        let now = now();
        if last_said != Some(scheduled) {
            note(
                jd,
                say,
                &format!(
                    "eddy: job {job}: predicted start {t} (in {} s; {how}); stage-in scheduled at \
                 {scheduled} (in {} s)",
                    t - now,
                    scheduled - now
                ),
            );
            last_said = Some(scheduled);
        }
        if now >= scheduled {
            return Ok("its time came: predicted start − estimate".into());
        }
        if now >= deadline {
            return Ok(format!("waited the site's bound of {} s", w.max_wait_s));
        }
        let nap = (scheduled - now).min(i64::try_from(w.recheck_s.max(1)).unwrap_or(5));
        std::thread::sleep(Duration::from_secs(u64::try_from(nap).unwrap_or(1)));
    }
}

/// pre_run: the job's predicted end (now, its start, + its predicted runtime), recorded
/// and said; nothing when its user's history gives no prediction.
pub fn record_predicted_end(
    w: &WalltimeSite,
    jd: &JobDir,
    rec: &mut JobRecord,
    say: Say,
) -> Result<()> {
    let job = rec.job;
    let text = slurm(
        "squeue",
        &["-h", "-j", &job.to_string(), "-o", SQUEUE_FORMAT],
    )?;
    let Some(me) = parse_squeue(&text).into_iter().find(|q| q.id == job) else {
        bail!("squeue does not list job {job}");
    };
    let start = me.start.unwrap_or_else(now);
    let mut predictions = Predictions::new(w);
    match predictions.runtime(&me)? {
        Some(p) => {
            let end = start.saturating_add(i64::try_from(p).unwrap_or(i64::MAX));
            rec.walltime.predicted_end = Some(end);
            jd.save(rec)?;
            note(
                jd,
                say,
                &format!("eddy: job {job}: predicted end {end} (runtime {p} s from {start})"),
            );
        }
        None => note(
            jd,
            say,
            &format!(
                "eddy: job {job}: no predicted end ({} has no history)",
                me.user
            ),
        ),
    }
    Ok(())
}

/// Says `line` and appends it to the job's `walltime.log` (root's, 0600, in the job's
/// directory: Slurm drops what a successful phase prints, so this is where a site reads
/// the predictions until teardown removes the directory).
fn note(jd: &JobDir, say: Say, line: &str) {
    say.out(line);
    let path = jd.dir.join(LOG);
    // privileged-path: walltime.log in the job directory, root's 0711
    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
    text.push_str(&format!("{} {line}\n", now()));
    if let Err(e) = jd.write_private(LOG, text.as_bytes()) {
        say.err(&format!("eddy: cannot write {}: {e:#}", path.display()));
    }
}

/// The log of the job's predictions in its directory.
pub const LOG: &str = "walltime.log";

/// The log of the job's early write-back (`eddy writeback`'s output) in its directory.
pub const WRITEBACK_LOG: &str = "writeback.log";

/// pre_run: the early write-back (decision 0041) beside a job with linked prefixes until its
/// predicted end: `eddy writeback --end PREDICTED_END` detached on this host (root's, as
/// data_out's stage-out is; it reads only root's state directory), recorded so that data_out
/// and teardown stop it. Nothing without a predicted end, or when the site turned it off.
pub fn start_early_writeback(
    w: &WalltimeSite,
    jd: &JobDir,
    rec: &mut JobRecord,
    say: Say,
) -> Result<()> {
    let job = rec.job;
    let Some(end) = rec.walltime.predicted_end else {
        return Ok(());
    };
    if !w.early_writeback || rec.request.links.is_empty() || rec.walltime.writeback_pid.is_some() {
        return Ok(());
    }
    if end <= now() {
        note(
            jd,
            say,
            &format!("eddy: job {job}: predicted end {end} has passed: no early write-back"),
        );
        return Ok(());
    }
    let exe = std::env::current_exe().context("cannot find the eddy program")?;
    let args: Vec<std::ffi::OsString> = vec![
        "writeback".into(),
        "--state".into(),
        jd.state().dir().into(),
        "--end".into(),
        end.to_string().into(),
        "--margin".into(),
        w.writeback_margin_s.to_string().into(),
    ];
    let child = eddy_deploy::procs::spawn_detached(&exe, &args, &jd.dir.join(WRITEBACK_LOG))?;
    let p = eddy_deploy::procs::record("early write-back".into(), &child);
    rec.walltime.writeback_pid = Some(p.pid);
    rec.walltime.writeback_start_time = Some(p.start_time);
    jd.save(rec)?;
    note(
        jd,
        say,
        &format!(
            "eddy: job {job}: early write-back started (pid {}), to be done {} s before the \
             predicted end {end}",
            p.pid, w.writeback_margin_s
        ),
    );
    Ok(())
}

/// data_out and teardown: the early write-back stopped (SIGTERM, SIGKILL past a grace; never
/// a reused pid), and the last lines of its log noted.
pub fn stop_early_writeback(jd: &JobDir, rec: &JobRecord, say: Say) {
    if rec.walltime.writeback_pid.is_none() || rec.walltime.writeback_start_time.is_none() {
        return;
    }
    eddy_deploy::procs::end_recorded(
        "early write-back",
        rec.walltime.writeback_pid,
        rec.walltime.writeback_start_time,
        Duration::from_secs(10),
    );
    // privileged-path: the write-back log in the job directory, root's 0711
    let text = std::fs::read_to_string(jd.dir.join(WRITEBACK_LOG)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    for line in &lines[lines.len().saturating_sub(2)..] {
        note(
            jd,
            say,
            &format!("eddy: job {}: early write-back: {line}", rec.job),
        );
    }
}

/// The site's `[walltime]`, if it times staging.
pub fn settings(site: &Site) -> Option<&WalltimeSite> {
    site.walltime.as_ref()
}

#[cfg(test)]
mod tests;
