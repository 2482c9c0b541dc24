//! Growing and shrinking a running deployment (decision 0081): `grow_local` starts daemons
//! on this host and makes them members, `shrink` drains daemons and stops them. Both write
//! the hosts file at a new epoch with `moving_from` (clients go on placing by the old
//! members), make every daemon adopt it (`req::Membership`), wait until every daemon has
//! copied what moves (`left` 0 everywhere), cut over (a newer epoch without `moving_from`,
//! adopted by every daemon, then written to the hosts file once nothing is left anywhere),
//! and have every daemon delete what it no longer owns (`collect`). Drained daemons, then
//! empty, are stopped and left out of the hosts file.
//!
//! Every step is decided from the hosts file and the daemons' answers and may be repeated:
//! a coordinating command killed at any point is resumed by the next `grow` or `shrink`
//! (`resume`), which finishes the move under way before it begins its own.

use crate::launch::HostLine;
use crate::start::{spawn_and_wait_local, spawn_and_wait_remote, Run, Spawned};
use crate::state::{absolute, StateDir};
use crate::Say;
use anyhow::{bail, Context, Result};
use eddy_client::membership_of;
use eddy_client::Client;
use eddy_config::{DaemonEntry, Deployment};
use eddy_proto::{req, MembershipState};
use std::path::Path;
use std::time::{Duration, Instant};

mod room;

/// How often the daemons are asked how far the move is.
const POLL: Duration = Duration::from_millis(200);
/// How often a move under way says how far it is.
const REPORT_EVERY: Duration = Duration::from_secs(2);
/// The bytes left to copy at or below which the copy ends and the cut-over begins, counted
/// as whole chunks (`cut_over_left`): the cut-over copies the rest while clients wait (at
/// most the RPC deadline), so it must be short; above it, a copy whose writers change items
/// as fast as they are copied cuts over anyway once `SETTLE` passes without a new low.
const CUT_OVER_BYTES: u64 = 64 << 20;
/// The bounds of the items left at the cut-over, whatever the chunk size: metadata keys are
/// items too, and small.
const CUT_OVER_ITEMS: (u64, u64) = (16, 256);
/// How long the copy waits for a new low of the items left before it cuts over anyway.
const SETTLE: Duration = Duration::from_secs(10);
/// How long a move waits for a daemon that does not answer (or stays at an older epoch)
/// before the command gives up; running it again resumes.
const STALL: Duration = Duration::from_secs(120);
/// How long drained daemons get to exit once asked to stop.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// How a move is carried out for a caller that must bound it (the burst buffer's run-time
/// grow, as root): when it gives up, and what runs after each write of the hosts file. The
/// commands `eddy grow` and `eddy shrink` use the default: no deadline but `STALL` per
/// silent daemon, nothing run.
#[derive(Default, Clone, Copy)]
pub struct Moving<'a> {
    /// Past it, the move stops waiting and fails (its daemons' answers cannot hold it longer);
    /// the hosts file then stays where the move got to, and a later command resumes. A
    /// cut-over already begun is carried on `STALL` longer: clients wait on it.
    pub deadline: Option<Instant>,
    /// The ids the caller reserved for the new daemons (recorded where they will run): a grow
    /// that would give them others is refused before any starts, with nothing changed.
    pub ids: Option<&'a [u32]>,
    /// Run after every write of the hosts file (each epoch a move reaches), e.g. to publish
    /// it where the deployment's users read it.
    pub saved: Option<&'a Saved<'a>>,
}

/// What runs after each write of the hosts file.
pub type Saved<'a> = dyn Fn(&Deployment) -> Result<()> + 'a;

impl<'a> Moving<'a> {
    /// The bound of a move whose cut-over has begun: the daemons refuse the copy's epoch, at
    /// which the hosts file still places clients, so giving up now would leave them waiting
    /// until the next command; it goes on `STALL` past the deadline.
    fn cutting_over(self) -> Moving<'a> {
        Moving {
            deadline: self.deadline.map(|d| d + STALL),
            ..self
        }
    }

    /// Past the deadline: the error to fail with.
    fn check(&self, what: impl FnOnce() -> String) -> Result<()> {
        match self.deadline {
            Some(d) if Instant::now() >= d => bail!(
                "the move passed its deadline ({}); the hosts file stays where it got to and \
                 the next grow, shrink or stop resumes from there",
                what()
            ),
            _ => Ok(()),
        }
    }

    /// Writes the hosts file, then runs `saved`.
    fn save(&self, state: &StateDir, dep: &Deployment) -> Result<()> {
        state.save_deployment(dep)?;
        match self.saved {
            Some(f) => f(dep).context("the hosts file was written, but not passed on"),
            None => Ok(()),
        }
    }
}

/// What a grow or a shrink did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resized {
    /// The epoch the deployment is at now.
    pub epoch: u64,
    /// The members now.
    pub members: Vec<u32>,
    /// Daemons started and made members.
    pub added: Vec<u32>,
    /// Daemons drained and stopped.
    pub removed: Vec<u32>,
}

/// Starts `k` daemons on this host beside the deployment's (roots next to theirs, same
/// user, configuration and secret) and moves to them the items they now own.
pub fn grow_local(state: &StateDir, k: u32, how: Moving, say: Say) -> Result<Resized> {
    if k == 0 {
        bail!("--local 0: grow by at least one daemon");
    }
    let dep = resume(state, how, say)?;
    refuse_unmovable(&dep)?;
    let root = local_root(state, &dep)?;
    let first = end_orphans(state, &dep, &root, say)? + 1;
    let added: Vec<u32> = (first..first + k).collect();
    grow(state, dep, added, how, say, |run, ids, spawned| {
        spawn_and_wait_local(run, ids, &root, spawned)
    })
}

/// Starts one daemon on each host of `hosts` (`name [address]` lines, as `eddy start
/// --hosts`), through the launcher, with the root template and port the deployment was
/// started with, and moves to them the items they now own.
pub fn grow_hosts(
    state: &StateDir,
    hosts: Vec<HostLine>,
    how: Moving,
    say: Say,
) -> Result<Resized> {
    if hosts.is_empty() {
        bail!("the hosts file lists no host: grow by at least one daemon");
    }
    let hosts = hosts
        .into_iter()
        .map(crate::launch::resolve_host)
        .collect::<Result<Vec<_>>>()?;
    let Some(launch) = state.remote_launch()? else {
        bail!(
            "the deployment in {} was started with --local: grow it with --local K",
            state.dir().display()
        );
    };
    let dep = resume(state, how, say)?;
    refuse_unmovable(&dep)?;
    let first = dep.daemons.iter().map(|d| d.id).max().unwrap_or(0) + 1;
    let k = u32::try_from(hosts.len()).context("too many hosts")?;
    let added: Vec<u32> = (first..first + k).collect();
    if let Some(ids) = how.ids.filter(|ids| *ids != added.as_slice()) {
        bail!(
            "the grow would start daemons {}, not {} as reserved; nothing changed",
            list(&added),
            list(ids)
        );
    }
    let already: Vec<String> = dep.daemons.iter().map(|d| d.host.clone()).collect();
    grow(state, dep, added, how, say, |run, ids, spawned| {
        spawn_and_wait_remote(run, &hosts, ids, &already, &launch, spawned)
    })
}

/// Starts daemons `added` by `spawn`, records them, writes the hosts file with them at a new
/// epoch that moves items from the current placement, and carries the move out.
fn grow(
    state: &StateDir,
    dep: Deployment,
    added: Vec<u32>,
    how: Moving,
    say: Say,
    spawn: impl FnOnce(&Run, &[u32], &mut Spawned) -> Result<Vec<DaemonEntry>>,
) -> Result<Resized> {
    let mut members = dep.members();
    members.extend(&added);
    let run = Run::joining(state, &dep, members)?;
    let mut spawned = Spawned::default();
    let entries = match spawn(&run, &added, &mut spawned) {
        Ok(entries) => entries,
        Err(e) => {
            crate::procs::kill_children(&mut spawned.children);
            return Err(e.context("the new daemons did not start; nothing changed"));
        }
    };
    let mut pids = state.read_pids()?;
    pids.extend(spawned.recorded.iter().cloned());
    let mut next = dep.clone();
    next.daemons.extend(entries);
    next.epoch = dep.epoch + 1;
    next.moving_from = Some(dep.placed_on());
    if let Err(e) = check_room(&next) {
        crate::procs::kill_children(&mut spawned.children);
        return Err(e);
    }
    let saved = state
        .write_pids(&pids)
        .and_then(|()| next.validate().context("the grown deployment is not valid"))
        .and_then(|()| how.save(state, &next));
    if let Err(e) = saved {
        crate::procs::kill_children(&mut spawned.children);
        return Err(e.context("the grown deployment could not be recorded; nothing changed"));
    }
    say.out(&format!(
        "eddy: started daemons {}; moving what they own to them (epoch {})",
        list(&added),
        next.epoch
    ));
    let mut done = carry_out(state, next, how, say)?;
    done.added = added;
    Ok(done)
}

/// Drains daemons `drain` (ids as `eddy status` shows): their items move to their next
/// owners, then they stop and leave the hosts file.
pub fn shrink(state: &StateDir, drain: &[u32], how: Moving, say: Say) -> Result<Resized> {
    if drain.is_empty() {
        bail!("name the daemons to drain with --drain ID (ids as `eddy status` shows)");
    }
    let dep = resume(state, how, say)?;
    for id in drain {
        if !dep.daemons.iter().any(|d| d.id == *id) {
            bail!(
                "daemon {id} is not part of the deployment (its daemons: {})",
                list(&dep.daemons.iter().map(|d| d.id).collect::<Vec<_>>())
            );
        }
    }
    let mut next = dep.clone();
    next.draining = drain.to_vec();
    next.draining.sort_unstable();
    next.draining.dedup();
    let left = next.members().len();
    if left == 0 || left < dep.config.replicas {
        bail!(
            "draining {} would leave {left} daemons for {} copies of everything: keep at \
             least {}",
            list(&next.draining),
            dep.config.replicas,
            dep.config.replicas.max(1)
        );
    }
    refuse_unmovable(&dep)?;
    next.epoch = dep.epoch + 1;
    next.moving_from = Some(dep.placed_on());
    next.validate()
        .context("the shrunk deployment is not valid")?;
    check_room(&next)?;
    how.save(state, &next)?;
    say.out(&format!(
        "eddy: draining daemons {}; moving what they hold to its next owners (epoch {})",
        list(&next.draining),
        next.epoch
    ));
    carry_out(state, next, how, say)
}

/// Refuses a move whose members would lack room for their shares of the data
/// (`room::check`): asked of the daemons of `next` before anything is recorded.
fn check_room(next: &Deployment) -> Result<()> {
    let rt = crate::runtime()?;
    let client = Client::new(next.clone()).context("the deployment file is not usable")?;
    room::check(&rt, &client, next)
}

/// Finishes the move the hosts file of `state` records as under way, if any (a coordinating
/// command was stopped), and returns the deployment as it is then.
pub fn resume(state: &StateDir, how: Moving, say: Say) -> Result<Deployment> {
    let dep = state.load_deployment()?;
    if dep.moving_from.is_none() && dep.draining.is_empty() {
        return Ok(dep);
    }
    say.out(&format!(
        "eddy: a move of the deployment was under way (epoch {}); finishing it first",
        dep.epoch
    ));
    carry_out(state, dep, how, say)?;
    state.load_deployment()
}

/// Stops the daemons that a grow stopped before it wrote the hosts file had started: not in
/// the hosts file (they never held anything: no membership was sent to them), recorded in
/// the pid list or serving a root `ROOT/d<id>` beside the deployment's. Returns the highest
/// id listed or found in `root`: new daemons take ids above it (an unfinished grow's roots
/// are left as they are, never used again).
fn end_orphans(state: &StateDir, dep: &Deployment, root: &Path, say: Say) -> Result<u32> {
    let listed = |id: u32| dep.daemons.iter().any(|d| d.id == id);
    let mut highest = dep.daemons.iter().map(|d| d.id).max().unwrap_or(0);
    let mut orphans = Vec::new();
    // privileged-path: lists the deployment's root (the caller's --root), follows nothing
    let entries = std::fs::read_dir(root)
        .with_context(|| format!("cannot list the deployment's root {}", root.display()))?;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_prefix('d'))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        highest = highest.max(id);
        if !listed(id) {
            orphans.extend(crate::procs::serving_root(&e.path()));
        }
    }
    let (recorded, kept): (Vec<_>, Vec<_>) = state.read_pids()?.into_iter().partition(|p| {
        p.label
            .strip_prefix("daemon-")
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|id| !listed(id))
    });
    orphans.extend(recorded);
    orphans.sort_by_key(|p| p.pid);
    orphans.dedup_by_key(|p| p.pid);
    for line in crate::procs::terminate(&orphans, STOP_GRACE) {
        say.err(&format!(
            "eddy: stopped {line}, started by a grow that did not finish"
        ));
    }
    if kept.len() != state.read_pids()?.len() {
        state.write_pids(&kept)?;
    }
    Ok(highest)
}

/// A move is refused where decision 0081 does not move everything yet: direct local I/O's
/// descriptors, the records of hard links and of the backend tier (the daemons check the
/// hard links; the rest is here).
fn refuse_unmovable(dep: &Deployment) -> Result<()> {
    if dep.config.direct_io {
        bail!(
            "the deployment serves direct local I/O (direct_io, and FUSE passthrough with it): \
             clients then read and write the daemons' data files through descriptors a move \
             cannot follow yet, so it cannot grow or shrink; start it with `direct_io = \
             false` in its --config to resize it"
        );
    }
    if !dep.config.links.is_empty() {
        bail!(
            "the deployment caches a backend (links are configured): its daemons cannot move \
             the backend tier's records yet, so it cannot grow or shrink"
        );
    }
    Ok(())
}

/// The directory the deployment's daemons have their roots in (ROOT of `eddy start --local
/// N --root ROOT`): the daemons must all have been started on this host by `eddy start
/// --local` (recorded as `daemon-ID`), their roots side by side.
fn local_root(state: &StateDir, dep: &Deployment) -> Result<std::path::PathBuf> {
    let recorded = state.read_pids()?;
    if let Some(d) = dep.daemons.iter().find(|d| {
        !recorded
            .iter()
            .any(|p| p.label == format!("daemon-{}", d.id))
    }) {
        bail!(
            "daemon {} was not started on this host by `eddy start --local` (or is not \
             recorded in {}): --local grows a deployment of local daemons",
            d.id,
            state.pids_path().display()
        );
    }
    let parents: Vec<_> = dep
        .daemons
        .iter()
        .map(|d| absolute(&d.root).parent().map(|p| p.to_owned()))
        .collect();
    match parents.first() {
        Some(Some(first)) if parents.iter().all(|p| p.as_ref() == Some(first)) => Ok(first.clone()),
        _ => bail!(
            "the deployment's daemons do not have their roots side by side: --local adds \
             daemons next to them"
        ),
    }
}

/// Steps 1–3 of decision 0081 for the deployment `dep` (saved with `moving_from`, or with
/// daemons being drained): adopt, copy, cut over, collect, stop the drained ones.
fn carry_out(state: &StateDir, dep: Deployment, how: Moving, say: Say) -> Result<Resized> {
    let rt = crate::runtime()?;
    let client = Client::new(dep.clone()).context("the deployment file is not usable")?;
    let ids: Vec<u32> = dep.daemons.iter().map(|d| d.id).collect();
    let mut settled = dep.clone();
    if dep.moving_from.is_some() {
        // 1. Copy: every daemon adopts the membership clients do not place by yet.
        adopt(&rt, &client, &ids, &membership_of(&dep, false), how)?;
        wait_moved(&rt, &client, &ids, dep.epoch, how, say, Phase::Copy)?;
        // 2. Cut over: every daemon refuses the clients of the copy's epoch, pushes what
        // changed since, and only then do clients learn the members from the hosts file.
        settled.epoch = dep.epoch + 1;
        settled.moving_from = None;
        how.check(|| format!("copied at epoch {}, not cut over", dep.epoch))?;
        let how = how.cutting_over();
        adopt(&rt, &client, &ids, &membership_of(&settled, false), how)?;
        wait_moved(&rt, &client, &ids, settled.epoch, how, say, Phase::CutOver)?;
        how.save(state, &settled)?;
    }
    // 3. Collect: each deletes what it does not own any more.
    let collect = membership_of(&settled, true);
    let states = adopt(&rt, &client, &ids, &collect, how)?;
    if let Some((id, _)) = states.iter().find(|(_, s)| !s.collected) {
        bail!("daemon {id} did not delete what it no longer owns; run the command again");
    }
    let removed = stop_drained(state, &rt, &client, &settled, say)?;
    let mut done = settled.clone();
    done.daemons.retain(|d| !removed.contains(&d.id));
    done.draining.retain(|id| !removed.contains(id));
    if !removed.is_empty() {
        how.save(state, &done)?;
    }
    say.out(&format!(
        "eddy: the deployment's members are {} (epoch {})",
        list(&done.members()),
        done.epoch
    ));
    Ok(Resized {
        epoch: done.epoch,
        members: done.members(),
        added: Vec::new(),
        removed,
    })
}

/// Sends `m` to every daemon of `ids` (each adopts it when newer, else answers how far it
/// is); every one must answer. A daemon that cannot be reached is asked again until
/// `STALL` passes (or the deadline of `how`).
fn adopt(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    ids: &[u32],
    m: &req::Membership,
    how: Moving,
) -> Result<Vec<(u32, MembershipState)>> {
    let mut states = Vec::with_capacity(ids.len());
    for &id in ids {
        let since = Instant::now();
        loop {
            match rt.block_on(client.call_daemon(id, m.clone())) {
                Ok(s) => {
                    states.push((id, s));
                    break;
                }
                Err(eddy_client::Failure::Daemon(e)) if e.errno != libc::EAGAIN => {
                    bail!(
                        "daemon {id} refused the membership of epoch {}: {e}; nothing is lost, \
                         run the command again once it is fixed",
                        m.epoch
                    )
                }
                Err(e) if since.elapsed() >= STALL => bail!(
                    "daemon {id} did not take the membership of epoch {} within {} s ({}); \
                     run the command again to resume",
                    m.epoch,
                    STALL.as_secs(),
                    e.errno()
                ),
                Err(e) => {
                    how.check(|| {
                        format!("daemon {id} did not take epoch {}: {}", m.epoch, e.errno())
                    })?;
                    std::thread::sleep(POLL)
                }
            }
        }
    }
    Ok(states)
}

/// Which wait of a move: the copy (clients place by the old members) or the cut-over
/// (clients wait).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Copy,
    CutOver,
}

/// Waits until every daemon of `ids` is at `epoch` (or later) with its scan done and, for the
/// cut-over, nothing left to copy; for the copy, at most `cut_over_left` items left, or no
/// new low for `SETTLE`. Says how far the move is every `REPORT_EVERY`; fails when a daemon does
/// not answer (or stays behind) for `STALL`, and at the deadline of `how` whatever the
/// daemons answer (one that always reports an item left cannot hold it longer).
fn wait_moved(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    ids: &[u32],
    epoch: u64,
    how: Moving,
    say: Say,
    phase: Phase,
) -> Result<()> {
    let ask = req::Membership::question();
    let tail = cut_over_left(client.config().chunk_size);
    let what = match phase {
        Phase::Copy => "copying",
        Phase::CutOver => "cutting over",
    };
    let mut low = u64::MAX;
    let mut lowered = Instant::now();
    let mut answered = Instant::now();
    let mut reported = Instant::now();
    loop {
        let mut left = 0u64;
        let mut scanning = false;
        let mut behind = Vec::new();
        for &id in ids {
            match rt.block_on(client.call_daemon(id, ask.clone())) {
                Ok(s) if s.epoch >= epoch => {
                    left += s.left;
                    scanning |= s.scanning;
                }
                Ok(s) => behind.push(format!("daemon {id} is at epoch {}", s.epoch)),
                Err(e) => behind.push(format!("daemon {id}: {}", e.errno())),
            }
        }
        if behind.is_empty() {
            answered = Instant::now();
            if left < low {
                low = left;
                lowered = Instant::now();
            }
            let done = match phase {
                Phase::CutOver => left == 0 && !scanning,
                Phase::Copy => !scanning && (left <= tail || lowered.elapsed() >= SETTLE),
            };
            if done {
                return Ok(());
            }
        } else if answered.elapsed() >= STALL {
            bail!(
                "the move waited {} s for its daemons ({what}: {}); run the command again to \
                 resume",
                STALL.as_secs(),
                behind.join("; ")
            );
        }
        how.check(|| format!("{what} at epoch {epoch}: {left} items left"))?;
        if reported.elapsed() >= REPORT_EVERY {
            say.out(&format!("eddy: {what}: {left} items left to copy"));
            reported = Instant::now();
        }
        std::thread::sleep(POLL);
    }
}

/// The items left to copy at which the copy may cut over: `CUT_OVER_BYTES` of chunks of
/// `chunk_size`, within `CUT_OVER_ITEMS`.
fn cut_over_left(chunk_size: u64) -> u64 {
    (CUT_OVER_BYTES / chunk_size.max(1)).clamp(CUT_OVER_ITEMS.0, CUT_OVER_ITEMS.1)
}

/// Stops the drained daemons of `dep` (they hold nothing now) and takes them out of the
/// recorded processes; returns their ids.
fn stop_drained(
    state: &StateDir,
    rt: &tokio::runtime::Runtime,
    client: &Client,
    dep: &Deployment,
    say: Say,
) -> Result<Vec<u32>> {
    if dep.draining.is_empty() {
        return Ok(Vec::new());
    }
    for &id in &dep.draining {
        // One that does not answer is stopped already (a command stopped after this).
        if let Err(e) = rt.block_on(client.call_daemon(id, req::Shutdown)) {
            tracing::debug!("daemon {id} did not take the stop: {}", e.errno());
        }
    }
    let labels: Vec<String> = dep
        .draining
        .iter()
        .map(|id| format!("daemon-{id}"))
        .collect();
    let (theirs, kept): (Vec<_>, Vec<_>) = state
        .read_pids()?
        .into_iter()
        .partition(|p| labels.contains(&p.label));
    let running = crate::procs::wait_gone(&theirs, STOP_GRACE);
    if !running.is_empty() {
        for line in crate::procs::terminate(&running, STOP_GRACE) {
            say.err(&format!("eddy: warning: {line}"));
        }
    }
    state.write_pids(&kept)?;
    say.out(&format!(
        "eddy: stopped the drained daemons {}",
        list(&dep.draining)
    ));
    Ok(dep.draining.clone())
}

fn list(ids: &[u32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cut_over_tail_is_bounded_in_bytes_within_its_item_bounds() {
        assert_eq!(cut_over_left(1 << 20), 64);
        assert_eq!(cut_over_left(256 << 10), 256);
        assert_eq!(cut_over_left(64 << 10), 256, "at most 256 items");
        assert_eq!(cut_over_left(64 << 20), 16, "at least 16 items");
        assert_eq!(cut_over_left(0), 256, "a chunk size of 0 is read as 1");
    }
}
