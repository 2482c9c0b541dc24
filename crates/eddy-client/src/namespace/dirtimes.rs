//! Directory times: creating, removing or renaming an entry moves its directory's mtime and
//! ctime (POSIX). The directory's record lives with its own metadata owner, not with the
//! entry's, so that is one more request (`TouchDir`, merged with max at the owner, never
//! written through to a linked backend).
//!
//! Like file sizes (decision 0003), the touches are batched per client and directory
//! (decision 0011): the first change to a directory sends its touch at once, alongside the
//! change's own request (the operation waits for both, so its latency does not grow); further
//! changes within `dir_time_update_ms` are folded into one deferred touch, which carries the
//! time of the latest change. So a create-heavy job sends one touch per directory and
//! interval instead of one per create, and no directory owner becomes a hot spot. This
//! client's own `stat` adds the times it has not published yet; other clients see them
//! within `dir_time_update_ms`.
//!
//! A change that fails may still have moved the times when its touch went out with it (the
//! first of an interval); the deferred ones only carry changes that succeeded. An open with
//! O_CREAT but without O_EXCL, which often finds the file there, only ever defers its touch,
//! and only when it created the file.

use crate::namespace::Namespace;
use crate::{Errno, FileKind, Inode, Timespec};
use eddy_proto::{path, req};
use futures::future::join_all;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Directories tracked before idle ones are pruned (then twice what is left).
const PRUNE_FLOOR: usize = 1024;

struct Entry {
    /// Time of the latest change not sent yet.
    pending: Option<Timespec>,
    /// Time of the latest change this client made (sent or not): its stats show at least it.
    latest: Timespec,
    /// When a touch was last sent.
    last: Option<Instant>,
    /// Whether a deferred touch is scheduled.
    armed: bool,
    /// Held while a deferred touch is sent, and while this client changes the directory's
    /// attributes, so that a touch never lands after a change it predates.
    gate: Arc<tokio::sync::Mutex<()>>,
}

/// What a change to a directory does about its times.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Send the touch now, with the change.
    Now,
    /// After the change, schedule a deferred touch after this delay.
    Arm(Duration),
    /// A deferred touch is scheduled: the change joins it.
    Wait,
}

pub(crate) struct DirTimes {
    interval: Duration,
    state: Mutex<(HashMap<String, Entry>, usize)>,
}

impl DirTimes {
    pub fn new(interval: Duration) -> DirTimes {
        DirTimes {
            interval,
            state: Mutex::new((HashMap::new(), PRUNE_FLOOR)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (HashMap<String, Entry>, usize)> {
        eddy_proto::sync::lock(&self.state)
    }

    /// The entry of `dir`, made if missing; idle entries are pruned when there are many.
    fn entry<'a>(
        &self,
        state: &'a mut (HashMap<String, Entry>, usize),
        dir: &str,
    ) -> &'a mut Entry {
        let (dirs, prune_at) = state;
        if dirs.len() >= *prune_at {
            let interval = self.interval;
            dirs.retain(|_, e| {
                e.armed || e.pending.is_some() || e.last.is_some_and(|t| t.elapsed() < interval)
            });
            *prune_at = (dirs.len() * 2).max(PRUNE_FLOOR);
        }
        dirs.entry(dir.to_string()).or_insert(Entry {
            pending: None,
            latest: Timespec::default(),
            last: None,
            armed: false,
            gate: Arc::default(),
        })
    }

    /// Decides how a change to `dir` about to be made publishes its time.
    pub fn plan(&self, dir: &str) -> Plan {
        let now = Instant::now();
        let mut state = self.lock();
        let e = self.entry(&mut state, dir);
        match e.last.map(|t| now.duration_since(t)) {
            Some(since) if since < self.interval => {
                if e.armed {
                    Plan::Wait
                } else {
                    e.armed = true;
                    Plan::Arm(self.interval - since)
                }
            }
            _ => {
                e.last = Some(now);
                Plan::Now
            }
        }
    }

    /// A change to `dir` at `time` that only a deferred touch carries: returns the delay
    /// after which to send one, unless one is scheduled already.
    pub fn defer_only(&self, dir: &str, time: Timespec) -> Option<Duration> {
        let mut state = self.lock();
        let e = self.entry(&mut state, dir);
        e.pending = Some(e.pending.map_or(time, |p| p.max(time)));
        e.latest = e.latest.max(time);
        if e.armed {
            return None;
        }
        e.armed = true;
        let since = e.last.map_or(self.interval, |t| t.elapsed());
        Some(self.interval.saturating_sub(since))
    }

    /// A change to `dir` at `time` succeeded; its touch goes with the deferred one.
    pub fn defer(&self, dir: &str, time: Timespec) {
        let mut state = self.lock();
        if let Some(e) = state.0.get_mut(dir) {
            e.pending = Some(e.pending.map_or(time, |p| p.max(time)));
            e.latest = e.latest.max(time);
        }
    }

    /// Takes the time the deferred touch of `dir` carries; `disarm` is set by the deferred
    /// touch itself.
    pub fn take(&self, dir: &str, disarm: bool) -> Option<Timespec> {
        let mut state = self.lock();
        let e = state.0.get_mut(dir)?;
        if disarm {
            e.armed = false;
        }
        let time = e.pending.take()?;
        e.last = Some(Instant::now());
        Some(time)
    }

    /// Holds the gate of `dir`, if this client has changed it: a touch under way ends
    /// first, and none starts while the guard lives.
    pub async fn hold(&self, dir: &str) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        let gate = self.lock().0.get(dir).map(|e| Arc::clone(&e.gate))?;
        Some(gate.lock_owned().await)
    }

    /// Stops adding this client's changes to its stats of `dir`: its times were set.
    pub fn settled(&self, dir: &str) {
        if let Some(e) = self.lock().0.get_mut(dir) {
            e.latest = Timespec::default();
        }
    }

    /// Forgets `dir` (it is gone).
    pub fn forget(&self, dir: &str) {
        self.lock().0.remove(dir);
    }

    /// `inode` (the directory `dir`) with the times of this client's changes not yet
    /// published, or in flight.
    pub fn overlay(&self, dir: &str, mut inode: Inode) -> Inode {
        if inode.kind != FileKind::Dir {
            return inode;
        }
        if let Some(e) = self.lock().0.get(dir) {
            inode.mtime = inode.mtime.max(e.latest);
            inode.ctime = inode.ctime.max(e.latest);
        }
        inode
    }
}

/// The directory holding `p`, if `p` is not the root.
pub(crate) fn parent(p: &str) -> Option<&str> {
    path::split(p).map(|(dir, _)| dir)
}

impl Namespace<'_> {
    /// Subdirectories were made (+1) or removed or moved away (-1) in the parents of the
    /// paths given: their link counts follow, at once and in parallel, after the change. A
    /// count that cannot be sent is logged and left one off: the change itself succeeded, and
    /// a link count only informs tools.
    pub(crate) async fn count_subdirs(&self, changes: &[(&str, i32)]) {
        let sends = changes.iter().filter_map(|&(p, delta)| {
            let dir = parent(p).filter(|_| delta != 0)?;
            let req = req::CountSubdirs {
                dir: dir.to_string(),
                delta,
            };
            Some(async move { (dir, self.meta(dir, req).await) })
        });
        for (dir, res) in join_all(sends).await {
            // Its cached inode no longer answers a stat (st_nlink), sent or not.
            self.0.dircache.inexact(dir);
            if let Err(e) = res {
                tracing::warn!(%dir, "the directory's link count was not updated: {e}");
            }
        }
    }

    /// Runs `op`, which creates, removes or renames entries of the directories `dirs` (one,
    /// or the two parents of a rename), and moves their mtime and ctime to the time it
    /// started: at once, alongside `op`, or deferred (see the module's comment).
    pub(crate) async fn changing_dirs<T>(
        &self,
        dirs: &[&str],
        op: impl Future<Output = Result<T, Errno>>,
    ) -> Result<T, Errno> {
        let time = Timespec::now();
        let mut dirs: Vec<&str> = dirs.to_vec();
        dirs.sort_unstable();
        dirs.dedup();
        let plans: Vec<(&str, Plan)> = dirs.iter().map(|&d| (d, self.0.dirs.plan(d))).collect();
        let now = plans
            .iter()
            .filter(|(_, plan)| *plan == Plan::Now)
            .map(|(d, _)| self.send_touch(d, time));
        let (res, _) = futures::join!(op, join_all(now));
        for (dir, plan) in plans {
            if plan == Plan::Now {
                // Sent: the owner has it, and so does the directory as cached (decision
                // 0050), which a mount's GETATTR may answer with.
                self.0.dircache.touched(dir, time);
                continue;
            }
            if res.is_ok() {
                self.0.dirs.defer(dir, time);
            }
            if let Plan::Arm(delay) = plan {
                self.schedule_touch(dir, delay);
            }
        }
        res
    }

    /// Like `changing_dirs` for the directories holding `paths` (the root has none).
    pub(crate) async fn changing_parents<T>(
        &self,
        paths: &[&str],
        op: impl Future<Output = Result<T, Errno>>,
    ) -> Result<T, Errno> {
        let dirs: Vec<&str> = paths.iter().filter_map(|p| parent(p)).collect();
        self.changing_dirs(&dirs, op).await
    }

    /// `dir` got an entry at `time` by an operation that could not tell beforehand (an open
    /// with O_CREAT, without O_EXCL, that created the file): its touch is deferred.
    pub(crate) fn changed_dir_later(&self, dir: &str, time: Timespec) {
        if let Some(delay) = self.0.dirs.defer_only(dir, time) {
            self.schedule_touch(dir, delay);
        }
    }

    /// Sends a touch; a failure is logged, never the operation's (the change itself is
    /// done). A directory gone meanwhile is forgotten.
    async fn send_touch(&self, dir: &str, time: Timespec) {
        let req = req::TouchDir {
            path: dir.to_string(),
            time,
        };
        match self.meta(dir, req).await {
            Ok(_) => {}
            Err(e) if e.errno == libc::ENOENT || e.errno == libc::ENOTDIR => {
                self.0.dirs.forget(dir)
            }
            Err(e) => tracing::warn!(dir, "directory times not updated: {e}"),
        }
    }

    /// The deferred touch of `dir`, `delay` from now.
    fn schedule_touch(&self, dir: &str, delay: Duration) {
        let client = self.client();
        let dir = dir.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let Some(_held) = client.0.dirs.hold(&dir).await else {
                return;
            };
            if let Some(time) = client.0.dirs.take(&dir, true) {
                client.ns().send_touch(&dir, time).await;
            }
        });
    }

    /// Before a change of the attributes of the directory `dir` (the explicit times `cp -a`,
    /// `tar` or `rsync -a` set once they have filled it): sends this client's deferred touch
    /// now and holds further ones off while the returned guard lives, so that none lands
    /// after the change (merged with max, it would undo explicit times).
    pub(crate) async fn settle_dir_times(
        &self,
        dir: &str,
    ) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        let held = self.0.dirs.hold(dir).await?;
        if let Some(time) = self.0.dirs.take(dir, false) {
            self.send_touch(dir, time).await;
        }
        self.0.dirs.settled(dir);
        Some(held)
    }

    /// The inode of the directory `dir` with this client's unpublished changes' times.
    pub(crate) fn with_dir_times(&self, dir: &str, inode: Inode) -> Inode {
        self.0.dirs.overlay(dir, inode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_change_now_then_one_deferred_touch_per_interval() {
        let d = DirTimes::new(Duration::from_secs(3600));
        assert_eq!(d.plan("/a"), Plan::Now);
        assert!(matches!(d.plan("/a"), Plan::Arm(_)));
        assert_eq!(d.plan("/a"), Plan::Wait);
        // Another directory is independent.
        assert_eq!(d.plan("/b"), Plan::Now);
        let t = |sec| Timespec { sec, nsec: 0 };
        d.defer("/a", t(5));
        d.defer("/a", t(3));
        assert_eq!(d.take("/a", true), Some(t(5)));
        assert_eq!(d.take("/a", true), None);
        // Disarmed: the next change arms again (the interval has not passed).
        assert!(matches!(d.plan("/a"), Plan::Arm(_)));
        // A change known only afterwards joins the scheduled touch, or schedules one.
        assert_eq!(d.defer_only("/a", t(7)), None);
        assert!(d.defer_only("/c", t(7)).is_some());
        assert_eq!(d.defer_only("/c", t(8)), None);
        assert_eq!(d.take("/c", true), Some(t(8)));
    }

    #[test]
    fn zero_interval_touches_with_every_change() {
        let d = DirTimes::new(Duration::ZERO);
        assert_eq!(d.plan("/a"), Plan::Now);
        assert_eq!(d.plan("/a"), Plan::Now);
    }

    #[test]
    fn own_stats_see_unpublished_times() {
        let d = DirTimes::new(Duration::from_secs(3600));
        let mut dir = Inode::new(FileKind::Dir, 1, 0o755, 0, 0);
        dir.mtime = Timespec { sec: 10, nsec: 0 };
        dir.ctime = dir.mtime;
        assert_eq!(d.overlay("/a", dir.clone()), dir);
        d.plan("/a");
        d.plan("/a");
        d.defer("/a", Timespec { sec: 20, nsec: 0 });
        let seen = d.overlay("/a", dir.clone());
        assert_eq!((seen.mtime.sec, seen.ctime.sec), (20, 20));
        // Never backwards.
        d.defer("/a", Timespec { sec: 1, nsec: 0 });
        assert_eq!(d.overlay("/a", dir.clone()).mtime.sec, 20);
        // Once its times are set, the owner's are the directory's.
        d.settled("/a");
        assert_eq!(d.overlay("/a", dir.clone()), dir);
    }

    #[test]
    fn idle_directories_are_pruned() {
        let d = DirTimes::new(Duration::ZERO);
        for i in 0..PRUNE_FLOOR * 3 {
            d.plan(&format!("/d{i}"));
        }
        assert!(d.lock().0.len() <= PRUNE_FLOOR);
    }
}
