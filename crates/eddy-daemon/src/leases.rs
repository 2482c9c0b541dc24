//! Directory leases (decision 0075), as one daemon keeps them.
//!
//! - As the owner of a directory's record (the *granter*): the leases it granted, each held
//!   by the connection it was asked on, with the directory's cool-down after recalls; a
//!   recall marks the lease, wakes its holder's long poll (`LeaseWait`) and waits for the
//!   holder to give it back, at most `lease_recall_timeout_ms`, then revokes it.
//! - As the owner of names in a leased directory (every daemon): the *registry* of the
//!   leases their holders noted here (directory, lease, the holder's connection). A request
//!   about a name in a registered directory (or a listing of it) from another connection
//!   first has the lease recalled (`State::clear_leases`); the holder's own requests and its
//!   batches pass. A lease found over is dropped and remembered as dead, so that a late
//!   batch of a revoked lease is refused.
//!
//! The registry is read on every path-addressed request only when it is not empty (one
//! atomic load otherwise); a request that may add a name holds the read side of the `gate`
//! whatever the registry holds. A registration lists the names held here once every such
//! request that began before the lease was installed has ended (`gate`): what it lists is
//! then complete.

use crate::advisory::ConnId;
use eddy_proto::sync::lock;
use eddy_proto::{Errno, LeaseRef};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Dead leases remembered (lazily learnt from their granters), at most.
const DEAD_MAX: usize = 4096;
/// A cool-down grows up to this many times `lease_cooldown_ms`.
const COOLDOWN_CAP: u32 = 64;
/// Recalls within this many times the current cool-down count as one more in a row.
const COOLDOWN_WINDOW: u32 = 8;

/// A lease granted here.
struct Grant {
    id: u64,
    conn: ConnId,
    /// Another client wants the directory: the holder is to give it back.
    recalled: bool,
}

/// A directory's recent recalls, for its cool-down.
struct Cooling {
    /// No lease before this.
    until: Instant,
    /// The cool-down the last recall started.
    current: Duration,
}

/// A lease noted here by its holder.
#[derive(Clone, Copy)]
pub(crate) struct Registered {
    pub lease: LeaseRef,
    pub conn: ConnId,
}

/// What the counters of leases count (`LeaseStats`).
#[derive(Default)]
pub(crate) struct Counters {
    pub grants: AtomicU64,
    pub recalls: AtomicU64,
    pub revocations: AtomicU64,
    pub refused: AtomicU64,
    pub batched_ops: AtomicU64,
}

pub(crate) struct Leases {
    recall_timeout: Duration,
    cooldown: Duration,
    next_id: AtomicU64,
    grants: Mutex<HashMap<String, Grant>>,
    cooling: Mutex<HashMap<String, Cooling>>,
    /// Leases this granter revoked (their holder's return is ESTALE).
    revoked: Mutex<Dead>,
    /// Bumped when a lease is recalled (holders' long polls look) and when one ends
    /// (recalls waiting look).
    recalled: watch::Sender<u64>,
    ended: watch::Sender<u64>,
    registry: Mutex<HashMap<String, Registered>>,
    registered: AtomicUsize,
    dead: Mutex<Dead>,
    /// Held (read) by a request that may add a name while it runs; taken (write) by a
    /// registration between installing its lease and listing the names.
    pub gate: tokio::sync::RwLock<()>,
    pub counters: Counters,
}

/// A bounded set of leases known to be over.
#[derive(Default)]
struct Dead {
    set: HashSet<LeaseRef>,
    order: VecDeque<LeaseRef>,
}

impl Dead {
    fn add(&mut self, l: LeaseRef) {
        if self.set.insert(l) {
            self.order.push_back(l);
            if self.order.len() > DEAD_MAX {
                if let Some(old) = self.order.pop_front() {
                    self.set.remove(&old);
                }
            }
        }
    }
}

/// Whether a granter wants a lease back, as `recall` found it.
pub(crate) enum Recalled {
    /// Given back (or gone) in time.
    Returned,
    /// Not given back in time: revoked.
    Revoked,
}

impl Leases {
    pub fn new(cfg: &eddy_config::Config, instance: u64) -> Leases {
        Leases {
            // Within the request that waits for it: at most half the RPC deadline. Never
            // before the holder must have stopped answering from the lease: its last word
            // from here was sent at the latest when the recall woke its poll, and it answers
            // at most `lease_valid_for` after that; `lease_fence` adds the margin for packets
            // in flight and clock rates (decision 0075, *Replication*).
            recall_timeout: Duration::from_millis(
                cfg.lease_recall_timeout_ms.min(cfg.rpc_timeout_ms / 2),
            )
            .max(cfg.lease_fence()),
            cooldown: Duration::from_millis(cfg.lease_cooldown_ms),
            // Unique per process: a restarted granter never reuses an id of its previous life.
            next_id: AtomicU64::new((instance & 0xffff_ffff) << 32 | 1),
            grants: Default::default(),
            cooling: Default::default(),
            revoked: Default::default(),
            recalled: watch::Sender::new(0),
            ended: watch::Sender::new(0),
            registry: Default::default(),
            registered: AtomicUsize::new(0),
            dead: Default::default(),
            gate: tokio::sync::RwLock::new(()),
            counters: Counters::default(),
        }
    }

    // ------------------------------------------------------------ the granter

    /// Grants a lease on `dir` to connection `conn`, or says for how long not to ask again.
    pub fn grant(&self, dir: &str, conn: ConnId) -> eddy_proto::LeaseGrant {
        let now = Instant::now();
        if let Some(c) = lock(&self.cooling).get(dir) {
            if c.until > now {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                let left = c.until - now;
                return eddy_proto::LeaseGrant::Refused {
                    retry_ms: left.as_millis().max(1) as u64,
                };
            }
        }
        let mut grants = lock(&self.grants);
        if let Some(g) = grants.get(dir) {
            if g.conn == conn && !g.recalled {
                return eddy_proto::LeaseGrant::Granted { id: g.id };
            }
            return eddy_proto::LeaseGrant::Refused {
                retry_ms: self.cooldown.as_millis().max(1) as u64,
            };
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        grants.insert(
            dir.to_string(),
            Grant {
                id,
                conn,
                recalled: false,
            },
        );
        self.counters.grants.fetch_add(1, Ordering::Relaxed);
        eddy_proto::LeaseGrant::Granted { id }
    }

    /// Every lease granted here, as (directory, id): a move recalls them all (decision 0081).
    pub fn granted(&self) -> Vec<(String, u64)> {
        lock(&self.grants)
            .iter()
            .map(|(dir, g)| (dir.clone(), g.id))
            .collect()
    }

    /// The ids of the leases connection `conn` holds that are recalled.
    fn recalled_of(&self, conn: ConnId) -> Vec<u64> {
        lock(&self.grants)
            .values()
            .filter(|g| g.conn == conn && g.recalled)
            .map(|g| g.id)
            .collect()
    }

    /// The holder's long poll: the leases of `conn` recalled, as soon as there are some or
    /// after `wait`.
    pub async fn wait_recalls(&self, conn: ConnId, wait: Duration) -> Vec<u64> {
        let mut rx = self.recalled.subscribe();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            rx.borrow_and_update();
            let ids = self.recalled_of(conn);
            if !ids.is_empty() {
                return ids;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Vec::new(),
            }
        }
    }

    /// Takes lease `id` on `dir` back for another client: marks it recalled (its holder's
    /// long poll answers), starts the directory's cool-down and waits for the holder to give
    /// it back, at most `lease_recall_timeout_ms` (and at least `lease_fence`); then revokes
    /// it.
    pub async fn recall(&self, dir: &str, id: u64) -> Recalled {
        let mut ended = self.ended.subscribe();
        {
            let mut grants = lock(&self.grants);
            match grants.get_mut(dir) {
                Some(g) if g.id == id => {
                    if !g.recalled {
                        g.recalled = true;
                        self.counters.recalls.fetch_add(1, Ordering::Relaxed);
                        self.cool_down(dir);
                    }
                }
                _ => return Recalled::Returned,
            }
        }
        self.recalled.send_modify(|n| *n += 1);
        let deadline = tokio::time::Instant::now() + self.recall_timeout;
        loop {
            ended.borrow_and_update();
            if lock(&self.grants).get(dir).is_none_or(|g| g.id != id) {
                return Recalled::Returned;
            }
            match tokio::time::timeout_at(deadline, ended.changed()).await {
                Ok(Ok(())) => continue,
                _ => break,
            }
        }
        let revoked = {
            let mut grants = lock(&self.grants);
            match grants.get(dir) {
                Some(g) if g.id == id => grants.remove(dir).is_some(),
                _ => false,
            }
        };
        if !revoked {
            return Recalled::Returned;
        }
        tracing::warn!(
            dir,
            id,
            "a lease's holder did not give it back in time: revoked"
        );
        self.counters.revocations.fetch_add(1, Ordering::Relaxed);
        lock(&self.revoked).add(LeaseRef { daemon: 0, id });
        self.ended.send_modify(|n| *n += 1);
        Recalled::Revoked
    }

    /// Starts (or doubles) `dir`'s cool-down after a recall.
    fn cool_down(&self, dir: &str) {
        let now = Instant::now();
        let mut cooling = lock(&self.cooling);
        let next = match cooling.get(dir) {
            Some(c) if now < c.until + c.current * COOLDOWN_WINDOW => {
                (c.current * 2).min(self.cooldown * COOLDOWN_CAP)
            }
            _ => self.cooldown,
        };
        cooling.insert(
            dir.to_string(),
            Cooling {
                until: now + next,
                current: next,
            },
        );
        // Keep the map small: directories whose window passed are forgotten.
        if cooling.len() > 4096 {
            cooling.retain(|_, c| now < c.until + c.current * COOLDOWN_WINDOW);
        }
    }

    /// The holder gives lease `id` on `dir` back. ESTALE if it was revoked.
    pub fn end(&self, dir: &str, id: u64) -> Result<(), Errno> {
        let removed = {
            let mut grants = lock(&self.grants);
            match grants.get(dir) {
                Some(g) if g.id == id => grants.remove(dir).is_some(),
                _ => false,
            }
        };
        if removed {
            self.ended.send_modify(|n| *n += 1);
            return Ok(());
        }
        if lock(&self.revoked)
            .set
            .contains(&LeaseRef { daemon: 0, id })
        {
            return Err(Errno::new(
                libc::ESTALE,
                format!("the lease on {dir} was revoked: its holder did not give it back in time"),
            ));
        }
        Ok(())
    }

    /// Connection `conn` closed: the leases it held end.
    pub fn close_conn(&self, conn: ConnId) -> usize {
        let dropped = {
            let mut grants = lock(&self.grants);
            let before = grants.len();
            grants.retain(|_, g| g.conn != conn);
            before - grants.len()
        };
        if dropped > 0 {
            self.ended.send_modify(|n| *n += 1);
        }
        dropped
    }

    // ------------------------------------------------------------ the registry

    /// Whether any lease is registered here (one atomic load).
    pub fn any_registered(&self) -> bool {
        self.registered.load(Ordering::Acquire) > 0
    }

    /// The lease registered on `dir`, if any.
    pub fn registered(&self, dir: &str) -> Option<Registered> {
        lock(&self.registry).get(dir).copied()
    }

    /// Installs `lease` on `dir`, held by connection `conn`; a lease known dead is ESTALE.
    /// An earlier lease on `dir` is over (its granter grants one at a time): dead.
    pub fn register(&self, dir: &str, lease: LeaseRef, conn: ConnId) -> Result<(), Errno> {
        let mut dead = lock(&self.dead);
        if dead.set.contains(&lease) {
            return Err(stale(dir));
        }
        let mut registry = lock(&self.registry);
        if let Some(old) = registry.insert(dir.to_string(), Registered { lease, conn }) {
            if old.lease != lease {
                dead.add(old.lease);
            }
        }
        self.registered.store(registry.len(), Ordering::Release);
        Ok(())
    }

    /// Drops `lease` on `dir` from the registry (given back, or found over) and remembers
    /// it as dead.
    pub fn unregister(&self, dir: &str, lease: LeaseRef) {
        let mut dead = lock(&self.dead);
        dead.add(lease);
        let mut registry = lock(&self.registry);
        if registry.get(dir).is_some_and(|r| r.lease == lease) {
            registry.remove(dir);
        }
        self.registered.store(registry.len(), Ordering::Release);
    }

    /// Whether `lease` on `dir` is the one registered here (a batch of it may be applied).
    pub fn check_batch(&self, dir: &str, lease: LeaseRef) -> Result<(), Errno> {
        match lock(&self.registry).get(dir) {
            Some(r) if r.lease == lease => Ok(()),
            _ => Err(stale(dir)),
        }
    }

    pub fn stats(&self) -> eddy_proto::stats::LeaseStats {
        let c = &self.counters;
        eddy_proto::stats::LeaseStats {
            grants: c.grants.load(Ordering::Relaxed),
            recalls: c.recalls.load(Ordering::Relaxed),
            revocations: c.revocations.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            batched_ops: c.batched_ops.load(Ordering::Relaxed),
        }
    }
}

fn stale(dir: &str) -> Errno {
    Errno::new(
        libc::ESTALE,
        format!("the lease on {dir} is no longer held (given back or revoked)"),
    )
}

#[cfg(test)]
mod tests;
