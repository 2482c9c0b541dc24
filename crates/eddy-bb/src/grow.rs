//! Pool mode's run-time grow (decision 0082): a running job whose live counters show its I/O
//! servers hold it back gets more of the pool's nodes, by DFRA's scaling rule applied to what
//! its daemons count now (`eddy_alloc::grow`), within the site's caps and a cool-down.
//!
//! `pre_run` starts the watcher, `eddy bb grow-watch JOB`, as root on the node that runs the
//! burst-buffer scripts (detached, its pid and start time in root's record, as the early
//! write-back). Every `poll_s` it asks the job's own daemons for their counters and judges;
//! a verdict sustained for `sustain` polls reserves the servers in the record under the
//! state directory's lock (other jobs' setups then see them taken, and teardown cleans their
//! roots whatever happens next), grows the deployment through the launcher it was started
//! with (`eddy_deploy::grow_hosts_with`, bounded by `move_deadline_s`), passes every new hosts
//! file on to the job's user, and records the outcome with its reasons in the record, the
//! job's Comment and, at teardown, the profile. `post_run`, `data_out` and `teardown` stop
//! it; the servers go back at teardown, after stage-out ran through all of them.
//!
//! What the watcher reads of the job's making — its daemons' counters — only decides whether
//! the job grows, within the site's caps, the cool-down and `max_grows`: a user whose daemons
//! lie can make only their own job grow, as far as the site lets any job (decision 0054).

use crate::alloc;
use crate::job::{DaemonPlace, GrowEvent, GrowOutcome, JobDir, JobRecord};
use crate::site::{Pool, Site};
use crate::walltime::now;
use anyhow::{bail, Context, Result};
use eddy_alloc::{judge, Cap, GrowPolicy, GrowVerdict, Live, Observed, Watch};
use eddy_deploy::launch::{fill, parse_hosts, HostLine};
use eddy_deploy::{Moving, Say};
use eddy_proto::stats::DaemonStats;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The watcher's log in the job's directory (root's).
pub const LOG: &str = "grow.log";
/// Slurm not answering this many polls in a row ends the watcher (the job grows no more).
const SLURM_SILENT_POLLS: u32 = 10;

/// pre_run: starts the watcher when the site grows jobs and this one can grow (pool mode, no
/// linked prefixes, a deployment without direct local I/O); otherwise records why not.
pub fn start(
    site: &Site,
    site_file: Option<&Path>,
    jd: &JobDir,
    rec: &mut JobRecord,
    say: Say,
) -> Result<()> {
    let grows = site.pool.as_ref().is_some_and(|p| p.grow.is_some());
    if !grows || rec.mode != crate::directives::Mode::Pool || rec.grow.pid.is_some() {
        return Ok(());
    }
    if let Some(why) = unmovable(jd, rec)? {
        rec.grow.last_hold = Some(why.clone());
        jd.save(rec)?;
        say.out(&format!("eddy: job {}: {why}", rec.job));
        return Ok(());
    }
    let exe = std::env::current_exe().context("cannot find the eddy program")?;
    let mut args: Vec<std::ffi::OsString> = vec!["bb".into()];
    if let Some(f) = site_file {
        args.extend(["--site".into(), f.as_os_str().to_owned()]);
    }
    args.extend(["grow-watch".into(), rec.job.to_string().into()]);
    let child = eddy_deploy::procs::spawn_detached(&exe, &args, &jd.dir.join(LOG))?;
    let p = eddy_deploy::procs::record("grow watcher".into(), &child);
    rec.grow.pid = Some(p.pid);
    rec.grow.start_time = Some(p.start_time);
    rec.grow.started.get_or_insert_with(now);
    jd.save(rec)?;
    say.out(&format!(
        "eddy: job {}: its servers may grow while it runs (watcher pid {})",
        rec.job, p.pid
    ));
    Ok(())
}

/// Why the job's deployment cannot grow (None when it can).
fn unmovable(jd: &JobDir, rec: &JobRecord) -> Result<Option<String>> {
    if !rec.request.links.is_empty() {
        return Ok(Some(
            "not grown: the job links prefixes, and the backend tier's records do not move \
             between servers yet (decision 0081)"
                .into(),
        ));
    }
    let dep = jd.state().load_deployment()?;
    if dep.config.direct_io {
        return Ok(Some(
            "not grown: its deployment serves direct local I/O, which a move cannot follow \
             (started before the site set [pool.grow])"
                .into(),
        ));
    }
    Ok(None)
}

/// post_run, data_out and teardown: the watcher stopped (SIGTERM; it finishes a grow under
/// way up to its deadline; SIGKILL past `stop_grace_s`; never a reused pid). Idempotent. The
/// caller reads the record again afterwards: the watcher may have added servers.
pub fn stop(site: &Site, rec: &JobRecord) {
    let grace = site
        .pool
        .as_ref()
        .and_then(|p| p.grow.as_ref())
        .map_or(GrowPolicy::default().stop_grace_s, |g| g.stop_grace_s);
    eddy_deploy::procs::end_recorded(
        "grow watcher",
        rec.grow.pid,
        rec.grow.start_time,
        Duration::from_secs(grace),
    );
}

/// The grows of the record as the profile keeps them.
pub fn grown(rec: &JobRecord) -> Vec<eddy_history::Grown> {
    rec.grow
        .events
        .iter()
        .map(|e| eddy_history::Grown {
            at: e.at,
            from: e.from,
            to: e.from + u32::try_from(e.added.len()).unwrap_or(u32::MAX),
            servers: e.added.clone(),
            hosts: e.hosts.clone(),
            outcome: e.outcome.describe(),
            reasons: e.reasons.clone(),
        })
        .collect()
}

static STOPPING: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    STOPPING.store(true, Ordering::SeqCst);
}

/// SIGTERM asks the watcher to stop between polls (a grow under way finishes first, within
/// its deadline).
fn catch_term() -> Result<()> {
    let handler: extern "C" fn(libc::c_int) = on_term;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    if unsafe { libc::signal(libc::SIGTERM, handler as libc::sighandler_t) } == libc::SIG_ERR {
        return Err(std::io::Error::last_os_error()).context("cannot catch SIGTERM");
    }
    Ok(())
}

fn stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// Sleeps `d`, waking early when asked to stop.
fn nap(d: Duration) {
    let end = Instant::now() + d;
    while !stopping() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100).min(end - Instant::now()));
    }
}

/// A line of the watcher's log (its standard output), with the time.
fn log(say: Say, line: &str) {
    say.out(&format!("{} {line}", now()));
}

/// `eddy bb grow-watch JOB`: the watcher's loop, until the job ends, its record goes, it is
/// asked to stop or the job has grown `max_grows` times.
pub fn watch(site: &Site, job: u32, say: Say) -> Result<()> {
    catch_term()?;
    let pool = site.pool.as_ref().context("the site has no [pool]")?;
    let g = pool
        .grow
        .clone()
        .context("the site's [pool.grow] is not set: no job grows")?;
    let jd = JobDir::new(site, job);
    let rec = jd.load()?;
    let mut w = Watch::new(rec.grow.started.unwrap_or_else(now) as f64);
    for e in &rec.grow.events {
        w.ended(e.ended.unwrap_or(e.at) as f64);
    }
    let mut silent = 0;
    log(say, &format!("eddy: job {job}: watching its servers' load"));
    loop {
        nap(Duration::from_secs(g.poll_s));
        if stopping() {
            log(say, "eddy: asked to stop");
            return Ok(());
        }
        // privileged-path: job.toml in the job directory, root's 0711 under the trusted state_dir
        if !jd.exists() || !jd.state().has_deployment() {
            log(say, "eddy: the job's deployment is gone");
            return Ok(());
        }
        match crate::nodes::job_running(job) {
            Ok(true) => silent = 0,
            Ok(false) => {
                log(say, "eddy: the job no longer runs");
                return Ok(());
            }
            Err(e) => {
                silent += 1;
                log(
                    say,
                    &format!("eddy: Slurm does not say the job's state: {e:#}"),
                );
                if silent >= SLURM_SILENT_POLLS {
                    return Ok(());
                }
                continue;
            }
        }
        if w.grows() >= g.max_grows {
            log(say, &format!("eddy: grown {} time(s): the most", w.grows()));
            return Ok(());
        }
        if w.may_decide(&g, now() as f64).is_err() {
            continue; // warming up or cooling down
        }
        let mut rec = jd.load()?;
        let verdict = match judge_now(site, pool, &g, &jd, &rec) {
            Ok(v) => v,
            Err(e) => GrowVerdict {
                bound: false,
                add: Vec::new(),
                target: 0,
                reasons: Vec::new(),
                hold: Some(format!("{e:#}")),
            },
        };
        if !w.sustained(&g, &verdict) {
            if let Some(why) = verdict.hold {
                held(&jd, &mut rec, say, why)?;
            }
            continue;
        }
        let outcome = carry_out(site, pool, &g, &jd, &verdict, say);
        w.ended(now() as f64);
        match outcome {
            Ok(line) => log(say, &line),
            Err(e) => log(say, &format!("eddy: the grow failed: {e:#}")),
        }
    }
}

/// Records why the job does not grow now when it is a new reason (the latest only: the
/// record stays small, and a job held for the same reason is not rewritten every poll).
fn held(jd: &JobDir, rec: &mut JobRecord, say: Say, why: String) -> Result<()> {
    if rec.grow.last_hold.as_ref() == Some(&why) {
        return Ok(());
    }
    log(say, &format!("eddy: holding: {why}"));
    rec.grow.last_hold = Some(why);
    jd.save(rec)
}

/// The job's daemons' counters over the window, judged against the pool now.
fn judge_now(
    site: &Site,
    pool: &Pool,
    g: &GrowPolicy,
    jd: &JobDir,
    rec: &JobRecord,
) -> Result<GrowVerdict> {
    if let Some(why) = unmovable(jd, rec)? {
        bail!("{why}");
    }
    let dep = jd.state().load_deployment()?;
    if dep.moving_from.is_some() || !dep.draining.is_empty() {
        bail!(
            "a move of its deployment is under way (epoch {})",
            dep.epoch
        );
    }
    let stats = own_stats(&dep)?;
    let names = pool.node_names();
    let peaks = site.pool_peaks(pool)?;
    let window = g.window_s.unwrap_or(pool.live_window_s);
    let live = live_of(&dep, &stats, &names, &peaks, window, rec)?;
    let members: Vec<u32> = live.servers.iter().map(|s| s.id).collect();
    // First as if the job were alone in the pool: only a verdict to grow pays for asking the
    // other jobs' daemons and for the health of the servers it would take.
    let (alone, _) = alloc::pool_view(&names, &peaks, &[]);
    let first = judge(
        &site.alloc,
        g,
        &live,
        &alone,
        &members,
        &caps_of(pool, g, rec, &[], &names),
    );
    if first.add.is_empty() {
        return Ok(first);
    }
    let neighbours = alloc::neighbours_live(site, pool, rec.job)?;
    let (mut servers, mut notes) = alloc::pool_view(&names, &peaks, &neighbours);
    let caps = caps_of(pool, g, rec, &neighbours, &names);
    let health = alloc::screen(site, pool, &servers, &mut notes);
    alloc::mark(site, &mut servers, &health, &mut notes);
    let mut v = judge(&site.alloc, g, &live, &servers, &members, &caps);
    // The rule's reasons first: the Comment quotes the first.
    v.reasons.extend(notes);
    Ok(v)
}

/// The job's own daemons' counters, all asked at once within twice the RPC deadline; every
/// daemon must answer (a grow judged from part of the job would be judged wrong).
fn own_stats(dep: &eddy_config::Deployment) -> Result<Vec<(u32, DaemonStats)>> {
    let answers = eddy_deploy::runtime()?
        .block_on(alloc::stats_of(dep))
        .map_err(|e| anyhow::anyhow!("its daemons did not answer: {e}"))?;
    answers
        .into_iter()
        .map(|(id, a)| {
            a.map(|s| (id, s))
                .map_err(|e| anyhow::anyhow!("daemon {id} did not say its load: {e}"))
        })
        .collect()
}

/// What the rule reads of the job now (`Live::observed`, counting only the compute nodes
/// Slurm gave the job), with its times and the move's bandwidth.
fn live_of(
    dep: &eddy_config::Deployment,
    stats: &[(u32, DaemonStats)],
    names: &[String],
    peaks: &[f64],
    window_s: u64,
    rec: &JobRecord,
) -> Result<Live> {
    let mut servers = Vec::with_capacity(stats.len());
    for (id, s) in stats {
        let host = dep
            .daemons
            .iter()
            .find(|d| d.id == *id)
            .map(|d| d.host.clone())
            .with_context(|| format!("daemon {id} is not in the deployment file"))?;
        let pid = names
            .iter()
            .position(|n| *n == host)
            .with_context(|| format!("daemon {id}'s host {host} is not in the site's [pool]"))?;
        servers.push(Observed {
            id: u32::try_from(pid).unwrap_or(u32::MAX),
            host,
            peak_bandwidth: peaks.get(pid).copied().unwrap_or(0.0),
            stats: s,
        });
    }
    let slurm_gave_it =
        |host: &str| rec.mounted.is_empty() || rec.mounted.iter().any(|m| m == host);
    let started = rec.grow.started.unwrap_or_else(now);
    // Each of its daemons pushes at most `move_bandwidth_bytes` while items move (0: no bound
    // but the links, which the rule then takes as the added servers' peaks).
    let k = servers.len() as f64;
    let per_daemon = dep.config.move_bandwidth_bytes as f64;
    Ok(Live {
        elapsed_s: (now() - started).max(0) as f64,
        remaining_s: rec
            .walltime
            .predicted_end
            .map(|e| (e - now()).max(0) as f64),
        move_bandwidth: (per_daemon > 0.0).then_some(per_daemon * k),
        ..Live::observed(&servers, window_s, slurm_gave_it)
    })
}

/// The caps on the job's servers after a grow: the site's per job and per user (less what
/// the user's other jobs hold), `[pool.grow] max_servers`, the job's `nodes=`.
fn caps_of(
    pool: &Pool,
    g: &GrowPolicy,
    rec: &JobRecord,
    neighbours: &[alloc::Neighbour],
    names: &[String],
) -> Vec<Cap> {
    let mut caps = vec![Cap {
        name: "the pool's size".into(),
        servers: u32::try_from(names.len()).unwrap_or(u32::MAX),
    }];
    if let Some(m) = pool.max_servers_per_job {
        caps.push(Cap {
            name: "max_servers_per_job".into(),
            servers: m,
        });
    }
    if let Some(m) = g.max_servers {
        caps.push(Cap {
            name: "pool.grow.max_servers".into(),
            servers: m,
        });
    }
    if let Some(m) = pool.max_servers_per_user {
        let held = alloc::held_by(neighbours, rec.uid);
        caps.push(Cap {
            name: format!("max_servers_per_user {m} ({held} held by the user's other jobs)"),
            servers: m.saturating_sub(held),
        });
    }
    if let Some(m) = rec.request.nodes {
        caps.push(Cap {
            name: format!("the job's nodes={m}"),
            servers: m,
        });
    }
    caps
}

/// Reserves the servers of `v` in the record (under the state directory's lock: none taken
/// by another job meanwhile), grows the deployment onto them within the move's deadline and
/// records how it ended. Returns the line that says so.
fn carry_out(
    site: &Site,
    pool: &Pool,
    g: &GrowPolicy,
    jd: &JobDir,
    v: &GrowVerdict,
    say: Say,
) -> Result<String> {
    let state = jd.state();
    let launch = state
        .remote_launch()?
        .context("the job's deployment was not started through the launcher")?;
    let lines = parse_hosts(&pool.nodes.join("\n"))?;
    let hosts: Vec<HostLine> = v
        .add
        .iter()
        .map(|id| {
            lines
                .get(*id as usize)
                .cloned()
                .with_context(|| format!("server {id} is not in the site's [pool]"))
        })
        .collect::<Result<_>>()?;
    let at = now();
    // Reserve, one job at a time.
    let (rec, ids) = {
        // privileged-path: the site's state_dir, checked by trusted_dir (JobDir::create) at setup
        let all = std::fs::File::open(&site.state_dir)
            .with_context(|| format!("cannot open {}", site.state_dir.display()))?;
        crate::phases::lock_exclusive(&all, &site.state_dir)?;
        let mut rec = jd.load()?;
        let taken = alloc::hosts_of_others(site, pool, rec.job)?;
        if let Some(h) = hosts.iter().find(|h| taken.contains(&h.name)) {
            bail!("{} was taken by another job meanwhile: not grown", h.name);
        }
        let dep = state.load_deployment()?;
        let first = dep.daemons.iter().map(|d| d.id).max().unwrap_or(0) + 1;
        let ids: Vec<u32> = (first..).take(hosts.len()).collect();
        for (h, id) in hosts.iter().zip(&ids) {
            rec.daemons.push(DaemonPlace {
                host: h.name.clone(),
                address: h.address.clone(),
                root: fill(&launch.root, &h.name, *id).into(),
            });
        }
        rec.grow.events.push(GrowEvent {
            at,
            from: u32::try_from(dep.daemons.len()).unwrap_or(u32::MAX),
            added: v.add.clone(),
            hosts: hosts.iter().map(|h| h.name.clone()).collect(),
            reasons: v.reasons.clone(),
            outcome: GrowOutcome::Reserved,
            ended: None,
        });
        rec.grow.last_hold = None;
        jd.save(&rec)?;
        (rec, ids)
    };
    let (uid, gid) = (rec.uid, rec.gid);
    let saved = |_: &eddy_config::Deployment| jd.publish_deployment(uid, gid);
    let how = Moving {
        deadline: Some(Instant::now() + Duration::from_secs(g.move_deadline_s)),
        ids: Some(&ids),
        saved: Some(&saved),
    };
    let grown = eddy_deploy::grow_hosts(&state, hosts.clone(), how, say);
    let mut rec = jd.load()?;
    let Some(event) = rec.grow.events.iter_mut().rev().find(|e| e.at == at) else {
        bail!("the record lost the grow it reserved");
    };
    event.ended = Some(now());
    let from = event.from;
    let names: Vec<String> = hosts.iter().map(|h| h.name.clone()).collect();
    let result = match &grown {
        Ok(r) => {
            event.outcome = GrowOutcome::Done { epoch: r.epoch };
            Ok(format!(
                "eddy grow: {from} -> {} server(s) +{}: {}",
                r.members.len(),
                names.join(","),
                v.reasons.first().map_or("", String::as_str)
            ))
        }
        Err(e) => {
            event.outcome = GrowOutcome::Failed {
                why: format!("{e:#}"),
            };
            Err(anyhow::anyhow!("{e:#}"))
        }
    };
    jd.save(&rec)?;
    if let Ok(line) = &result {
        if let Err(e) = alloc::set_comment(rec.job, &alloc::one_line(line)) {
            log(
                say,
                &format!("eddy: the job's Comment does not say it grew: {e:#}"),
            );
        }
    }
    result
}
