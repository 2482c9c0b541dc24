//! Staging timed by predicted walltime (decision 0040): a pool job's stage-in begins at its
//! predicted start minus the estimated staging time instead of at once, and its predicted
//! end is recorded at pre_run for the early write-back. The predictions come from
//! eddy-walltime over the history the site names in `[walltime]` (each user's `sacct`, or a
//! file), the machine's state from `squeue` and `sinfo`, the staging estimate from the
//! bytes of the job's stage-in sources (measured as the job's user) over the site's rate.
//!
//! Asked only from the asynchronous phases (data_in, pre_run). Whatever cannot be predicted
//! (no Slurm answer, a neighbour without history) never holds a job: it stages at once.

use crate::as_user::{self, Sized};
use crate::job::{JobDir, JobRecord};
use crate::site::{Site, WalltimeSite};
use anyhow::{bail, Context, Result};
use eddy_deploy::{human_bytes, Say};
use eddy_walltime::start::{predicted_start, running_end, Pending, Running};
use eddy_walltime::{sacct, Job, Params, Predictor};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Bound on one call of a Slurm tool.
const TOOL_BOUND: Duration = Duration::from_secs(30);

/// Seconds since the epoch, now.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A Slurm tool's output, times printed in UTC (as eddy-walltime reads them).
fn slurm(program: &str, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new(program);
    cmd.args(args).env("TZ", "UTC").stdin(Stdio::null());
    crate::nodes::output_bounded(cmd, TOOL_BOUND)
}

/// One job of `squeue`.
#[derive(Debug, Clone, PartialEq)]
pub struct Queued {
    pub id: u32,
    pub user: String,
    pub nodes: u32,
    pub cpus: u32,
    pub state: String,
    pub limit: Option<u64>,
    /// Start (running jobs), seconds since the epoch.
    pub start: Option<i64>,
    pub priority: u64,
}

/// The fields of [`parse_squeue`]'s lines.
pub const SQUEUE_FORMAT: &str = "%i|%u|%D|%C|%T|%l|%S|%Q";

/// `squeue -h -o SQUEUE_FORMAT` lines; array or odd lines are left out.
pub fn parse_squeue(text: &str) -> Vec<Queued> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.trim().split('|').collect();
            let [id, user, nodes, cpus, state, limit, start, prio] = f.as_slice() else {
                return None;
            };
            Some(Queued {
                id: id.parse().ok()?,
                user: user.to_string(),
                nodes: nodes.parse().ok()?,
                cpus: cpus.parse().unwrap_or(1),
                state: state.to_string(),
                limit: sacct::parse_duration(limit).ok()?,
                start: sacct::parse_date(start).ok().flatten(),
                priority: prio.parse().unwrap_or(0),
            })
        })
        .collect()
}

/// The nodes that can run jobs, from `sinfo -h -N -o "%N %t"` lines (a node once, however
/// many partitions list it; down, drained and failed ones left out).
pub fn usable_nodes(text: &str) -> u32 {
    let mut names: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (name, state) = (w.next()?, w.next()?);
            let out = ["down", "drain", "drng", "fail", "maint", "unk", "inval"];
            (!out.iter().any(|o| state.starts_with(o))).then_some(name)
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    u32::try_from(names.len()).unwrap_or(u32::MAX)
}

/// Predicted runtimes of users' jobs from the site's history source.
struct Predictions<'a> {
    w: &'a WalltimeSite,
    params: Params,
    /// Each user's finished jobs (a file source: all jobs, under the key "").
    histories: HashMap<String, Vec<Job>>,
}

impl<'a> Predictions<'a> {
    fn new(w: &'a WalltimeSite) -> Predictions<'a> {
        Predictions {
            w,
            params: Params {
                min_train: w.min_train,
                ..Params::default()
            },
            histories: HashMap::new(),
        }
    }

    fn history(&mut self, user: &str) -> Result<&[Job]> {
        let key = if self.w.source == "sacct" { user } else { "" };
        if !self.histories.contains_key(key) {
            let jobs = if self.w.source == "sacct" {
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
                sacct::parse(&text).context("reading sacct's output")?
            } else {
                let path = PathBuf::from(&self.w.source);
                if path.extension().is_some_and(|e| e == "swf") {
                    // privileged-path: the trace file the site's [walltime] names (root's settings)
                    let text = std::fs::read_to_string(&path)
                        .with_context(|| format!("reading {}", path.display()))?;
                    eddy_walltime::swf::parse(&text)?
                } else {
                    eddy_walltime::job::read_json(&path)?
                }
            };
            self.histories.insert(key.to_string(), jobs);
        }
        Ok(self
            .histories
            .get(key)
            .map(Vec::as_slice)
            .unwrap_or_default())
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
        let params = self.params.clone();
        let which = self.w.predictor;
        let history = self.history(&q.user)?;
        if !history.iter().any(|h| h.user == q.user) {
            return Ok(None);
        }
        let p = eddy_walltime::predict(history, &job, &params)?;
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

/// The predicted start of pending job `job` now: the running jobs' predicted ends, the
/// pending jobs ahead of it (higher priority, or equal and older), FCFS.
pub fn job_start(w: &WalltimeSite, job: u32) -> Result<Start> {
    let queue = parse_squeue(&slurm(
        "squeue",
        &["-h", "-t", "PD,CF,R,CG", "-o", SQUEUE_FORMAT],
    )?);
    let total = usable_nodes(&slurm("sinfo", &["-h", "-N", "-o", "%N %t"])?);
    let Some(me) = queue.iter().find(|q| q.id == job) else {
        return Ok(Start::Gone);
    };
    let now = now();
    let mut predictions = Predictions::new(w);
    let mut running = Vec::new();
    let mut words = Vec::new();
    for q in queue.iter().filter(|q| q.id != job) {
        match q.state.as_str() {
            "RUNNING" | "CONFIGURING" => {
                let Some(p) = predictions.runtime(q)? else {
                    return Ok(Start::Unknown(format!(
                        "running job {} of {} has no history",
                        q.id, q.user
                    )));
                };
                let end = running_end(q.start.unwrap_or(now), p, q.limit, w.correction, now);
                words.push(format!(
                    "job {} ({} nodes) ends in {} s",
                    q.id,
                    q.nodes,
                    end - now
                ));
                running.push(Running {
                    nodes: q.nodes,
                    end,
                });
            }
            // Completing: its nodes free about now.
            "COMPLETING" => running.push(Running {
                nodes: q.nodes,
                end: now,
            }),
            _ => {}
        }
    }
    let mut ahead: Vec<&Queued> = queue
        .iter()
        .filter(|q| q.state == "PENDING" && q.id != job)
        .filter(|q| (q.priority, std::cmp::Reverse(q.id)) > (me.priority, std::cmp::Reverse(me.id)))
        .collect();
    ahead.sort_by_key(|q| (std::cmp::Reverse(q.priority), q.id));
    let mut pending = Vec::new();
    for q in ahead {
        let Some(p) = predictions.runtime(q)? else {
            return Ok(Start::Unknown(format!(
                "pending job {} of {} ahead has no history",
                q.id, q.user
            )));
        };
        words.push(format!("job {} ({} nodes) ahead runs {p} s", q.id, q.nodes));
        pending.push(Pending {
            nodes: q.nodes,
            runtime: p,
        });
    }
    match predicted_start(now, total, &running, &pending, me.nodes) {
        Some(t) => Ok(Start::At(
            t,
            format!(
                "{} of {total} nodes{}{}",
                me.nodes,
                if words.is_empty() { "" } else { ": " },
                words.join(", ")
            ),
        )),
        None => Ok(Start::Unknown(format!(
            "the job or one ahead asks more than the {total} usable nodes"
        ))),
    }
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
    loop {
        let start = match job_start(w, job) {
            Ok(s) => s,
            Err(e) => Start::Unknown(format!("{e:#}")),
        };
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
    match Predictions::new(w).runtime(&me)? {
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
    let (Some(pid), Some(start_time)) = (
        rec.walltime.writeback_pid,
        rec.walltime.writeback_start_time,
    ) else {
        return;
    };
    let p = eddy_deploy::state::RecordedProcess {
        label: "early write-back".into(),
        pid,
        start_time,
    };
    if eddy_deploy::procs::is_running(&p) {
        eddy_deploy::procs::terminate(&[p], Duration::from_secs(10));
    }
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
mod tests {
    use super::*;

    #[test]
    fn squeue_lines_are_read() {
        let text = "12|alice|2|2|RUNNING|10:00|2024-01-01T00:00:10|4294901759\n\
                    13|bob|1|1|PENDING|UNLIMITED|N/A|4294901758\n\
                    14_[1-3]|bob|1|1|PENDING|1:00|N/A|1\n";
        let q = parse_squeue(text);
        assert_eq!(q.len(), 2);
        assert_eq!(
            q[0],
            Queued {
                id: 12,
                user: "alice".into(),
                nodes: 2,
                cpus: 2,
                state: "RUNNING".into(),
                limit: Some(600),
                start: Some(1704067210),
                priority: 4294901759,
            }
        );
        assert_eq!((q[1].limit, q[1].start), (None, None));
    }

    #[test]
    fn usable_nodes_leave_out_down_and_repeats() {
        let text = "n1 idle\nn2 alloc\nn2 alloc\nn3 down*\nn4 drain\nn5 mix\n";
        assert_eq!(usable_nodes(text), 3);
    }
}
