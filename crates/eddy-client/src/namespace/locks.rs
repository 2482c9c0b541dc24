//! Advisory file locks (POSIX record locks, OFD locks, flock) through the daemon that is the
//! file's lock owner: `owner(chunk_hash(file_id, LOCK_CHUNK))`, a pure function of the
//! immutable file id, so every client and every name of the file (renames included) reach
//! the same lock table. An owner is this client's session plus the caller's owner number.
//!
//! Across a restart of that daemon (decision 0028): the session records the locks it holds
//! (granted ranges, per file and daemon, by the same POSIX rules as the daemon's table), and
//! a task per daemon holding some waits for its connection to be lost; then it takes them
//! all back (`ReclaimLock`), connecting again until the daemon answers, before any other
//! lock request of this client goes to it. A daemon restarted on its root grants nothing
//! new for its grace period (ENOLCK): requests wait and ask again meanwhile. A lock the
//! daemon does not give back (no grace period: it did not restart, it only lost the
//! connection, which dropped the lock; or a conflict) is forgotten.

use crate::namespace::Namespace;
use crate::{Client, File, Inner};
use eddy_proto::lockset::{self, RangeLock};
use eddy_proto::{req, Errno, FileId, LockInfo, LockKind, LockOwner, LockRange, LockReply, Rpc};
use eddy_rpc::Failure;
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, Weak};
use std::time::Duration;
use tokio::time::Instant;

/// The chunk index whose placement names a file's lock daemon (never a real chunk: no file
/// reaches 2^64 chunks).
const LOCK_CHUNK: u64 = u64::MAX;

/// How long one waiting lock request waits at the daemon before it is asked again.
const WAIT_SLICE: Duration = Duration::from_millis(500);

/// The pause before asking again a lock daemon that could not be reached, or that is in its
/// grace period.
const RETRY: Duration = Duration::from_millis(100);

/// How long the deadlock coordinator keeps a wait that is not recorded again (a waiter
/// records it again after every slice of its wait).
const WAIT_TTL_MS: u32 = 3_000;

/// The file id whose lock chunk's owner is the deployment's deadlock coordinator.
const COORDINATOR_KEY: FileId = 0;

/// One wait for a lock, as the deadlock coordinator knows it (decision 0028): made by
/// `Client::waiting`, checked after every blocked slice (`Client::check_deadlock`), ended by
/// `Client::stop_waiting`.
#[derive(Debug)]
pub struct Waiting {
    wait: u64,
    /// The waiting owner, once its wait is recorded.
    recorded: Option<LockOwner>,
}

/// One lock or unlock request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRequest {
    /// Owner number inside this client (FUSE: the kernel's lock owner; library users choose:
    /// e.g. a process id for POSIX-like locks, a handle number for OFD-like locks).
    pub owner: u64,
    /// The open file the lock is taken through: `release_locks` with this handle drops it.
    pub handle: u64,
    /// Process id reported to F_GETLK callers.
    pub pid: u32,
    pub kind: LockKind,
    pub range: LockRange,
}

impl RangeLock for LockRequest {
    fn same_owner(&self, other: &LockRequest) -> bool {
        self.owner == other.owner
    }
    fn kind(&self) -> LockKind {
        self.kind
    }
    fn range(&self) -> LockRange {
        self.range
    }
    fn with_range(self, range: LockRange) -> LockRequest {
        LockRequest { range, ..self }
    }
}

/// What this client holds: by file, the daemon that granted its locks and the locks.
#[derive(Default)]
struct Held {
    files: HashMap<FileId, (u32, Vec<LockRequest>)>,
    /// Daemons whose connection a task watches, to take the locks back when it is lost.
    watched: HashSet<u32>,
}

impl Held {
    fn holds_on(&self, daemon: u32) -> bool {
        self.files.values().any(|(d, _)| *d == daemon)
    }
}

/// This client's identity in lock owners (random, so two clients never share an owner) and
/// the locks it holds.
pub(crate) struct LockSession {
    id: u128,
    held: Mutex<Held>,
    /// Read by every lock request while it is sent and recorded, written while locks are
    /// taken back: no request goes out in between.
    gate: tokio::sync::RwLock<()>,
}

impl LockSession {
    pub fn new() -> LockSession {
        LockSession {
            id: rand::random::<u128>(),
            held: Mutex::default(),
            gate: tokio::sync::RwLock::new(()),
        }
    }

    pub fn id(&self) -> u128 {
        self.id
    }

    /// The lock owner of the caller's owner number `owner` in this session.
    pub fn owner(&self, owner: u64) -> LockOwner {
        LockOwner {
            session: self.id,
            owner,
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        eddy_proto::sync::lock(&self.held)
    }

    /// Records a granted request (or an unlock, whatever its outcome: a lock its owner let go
    /// is never taken back); returns true when `daemon` must be watched from now on.
    fn record(&self, file_id: FileId, daemon: u32, r: LockRequest) -> bool {
        let mut h = self.held();
        let entry = h.files.entry(file_id).or_insert((daemon, Vec::new()));
        entry.0 = daemon;
        lockset::apply(&mut entry.1, r);
        if entry.1.is_empty() {
            h.files.remove(&file_id);
            return false;
        }
        h.watched.insert(daemon)
    }

    /// Forgets the locks of a file held by `owner` and/or taken through `handle`.
    fn forget(&self, file_id: FileId, owner: Option<u64>, handle: Option<u64>) {
        let mut h = self.held();
        if let Some((_, locks)) = h.files.get_mut(&file_id) {
            locks.retain(|l| !(Some(l.owner) == owner || Some(l.handle) == handle));
            if locks.is_empty() {
                h.files.remove(&file_id);
            }
        }
    }

    /// Forgets one lock the daemon did not give back.
    fn lost(&self, file_id: FileId, lock: &LockRequest) {
        let mut h = self.held();
        if let Some((_, locks)) = h.files.get_mut(&file_id) {
            locks.retain(|l| l != lock);
            if locks.is_empty() {
                h.files.remove(&file_id);
            }
        }
    }

    /// The locks held through `daemon`.
    fn on(&self, daemon: u32) -> Vec<(FileId, LockRequest)> {
        self.held()
            .files
            .iter()
            .filter(|(_, (d, _))| *d == daemon)
            .flat_map(|(f, (_, locks))| locks.iter().map(|l| (*f, *l)))
            .collect()
    }

    /// Stops watching `daemon` if nothing is held through it any more: true then.
    fn unwatch_if_idle(&self, daemon: u32) -> bool {
        let mut h = self.held();
        if h.holds_on(daemon) {
            return false;
        }
        h.watched.remove(&daemon);
        true
    }
}

/// Whether a lock daemon in its grace period refused the request (ENOLCK: ask again).
fn in_grace(f: &Failure) -> bool {
    matches!(f, Failure::Daemon(e) if e.errno == libc::ENOLCK)
}

impl Namespace<'_> {
    /// This client's lock session (part of every lock owner it uses).
    pub fn lock_session(&self) -> u128 {
        self.0.locks.id()
    }

    fn lock_owner(&self, owner: u64) -> LockOwner {
        self.0.locks.owner(owner)
    }

    /// The daemon holding the lock table of a file: the first owner of its lock chunk. With
    /// R copies, after it could not be reached for a whole RPC deadline (`failed_over`), the
    /// first one not believed down (decision 0020; the locks held on the first are lost then).
    fn lock_daemon(&self, file_id: FileId, failed_over: bool) -> u32 {
        let owners = self.rpc().chunk_owners(file_id, LOCK_CHUNK);
        if failed_over {
            self.rpc().ranked(owners)[0]
        } else {
            owners[0]
        }
    }

    /// Sends a lock request to the file's lock daemon: asked again while it cannot be reached,
    /// for up to the RPC deadline (a daemon restarting), and, with `through_grace`, while it
    /// is in its grace period (up to `lock_grace_ms` more). `record` runs with the reply
    /// before any lock is taken back.
    async fn lock_call<R, T>(
        &self,
        file_id: FileId,
        r: R,
        through_grace: bool,
        record: impl FnOnce(u32, &Result<R::Reply, Errno>) -> T,
    ) -> T
    where
        R: Rpc + Clone,
    {
        let cfg = self.config();
        let start = Instant::now();
        let reach_by = start + Duration::from_millis(cfg.rpc_timeout_ms);
        let grace_by = reach_by + Duration::from_millis(cfg.lock_grace_ms);
        let mut moves = 0;
        loop {
            let failed_over = Instant::now() >= reach_by;
            let daemon = self.lock_daemon(file_id, failed_over);
            let gate = self.0.locks.gate.read().await;
            let reply = self.rpc().try_call(daemon, r.clone()).await;
            let now = Instant::now();
            let again = match &reply {
                Err(f) if f.is_unreachable() => now < reach_by,
                Err(f) if in_grace(f) => through_grace && now < grace_by,
                // Refused for this client's membership epoch and the placement changed: the
                // lock daemon is chosen again from the new view (decision 0081).
                Err(f) if f.errno().is_moved() => {
                    moves += 1;
                    moves < eddy_rpc::MOVES_MAX
                }
                _ => false,
            };
            if !again {
                let out = record(daemon, &reply.map_err(Failure::into_errno));
                drop(gate);
                return out;
            }
            drop(gate);
            tokio::time::sleep(RETRY).await;
        }
    }

    /// Watches the connection to `daemon` from now on (see the module's doc).
    fn watch_locks(&self, daemon: u32) {
        let client = std::sync::Arc::downgrade(self.0);
        tokio::spawn(watch_locks(client, daemon));
    }

    /// Takes back every lock held through `daemon`, before any other lock request of this
    /// client goes there; a lock it does not give back is forgotten. Err: it could not be
    /// reached (tried again later).
    async fn reclaim_locks(&self, daemon: u32) -> Result<(), Errno> {
        let _gate = self.0.locks.gate.write().await;
        for (file_id, l) in self.0.locks.on(daemon) {
            let r = req::ReclaimLock {
                file_id,
                owner: self.lock_owner(l.owner),
                handle: l.handle,
                pid: l.pid,
                kind: l.kind,
                range: l.range,
            };
            match self.rpc().try_call(daemon, r).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(
                        file_id,
                        daemon,
                        "a lock held before the connection to its daemon was lost is gone"
                    );
                    self.0.locks.lost(file_id, &l);
                }
                Err(f) if f.is_unreachable() => return Err(f.into_errno()),
                Err(f) => {
                    tracing::warn!(
                        file_id,
                        daemon,
                        "a lock could not be taken back: {}",
                        f.errno()
                    );
                    self.0.locks.lost(file_id, &l);
                }
            }
        }
        Ok(())
    }

    /// One lock attempt. With `wait` zero, a conflict is EAGAIN; otherwise the daemon waits
    /// up to `wait` (at most half the RPC deadline) and `Ok(false)` means still blocked: the
    /// caller decides whether to ask again (FUSE checks for a signal in between). In the
    /// grace period of a restarted lock daemon, an attempt without a wait waits for its end
    /// (never a spurious EAGAIN; ENOLCK if it lasts past `lock_grace_ms`), one with a wait
    /// is still blocked.
    pub async fn lock_once(
        &self,
        f: &File,
        req: &LockRequest,
        wait: Duration,
    ) -> Result<bool, Errno> {
        // What this handle wrote directly is reported first: a lock orders it (0048).
        self.data().direct_report(f, false).await?;
        let file_id = f.file_id();
        let wait_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
        let r = req::Lock {
            file_id,
            owner: self.lock_owner(req.owner),
            handle: req.handle,
            pid: req.pid,
            kind: req.kind,
            range: req.range,
            wait_ms,
        };
        let locks = &self.0.locks;
        let outcome = self
            .lock_call(file_id, r, wait.is_zero(), |daemon, reply| {
                let granted = matches!(reply, Ok(LockReply::Granted));
                let watch = (granted || req.kind == LockKind::Unlock)
                    && locks.record(file_id, daemon, *req);
                (
                    reply.clone().map(|r| r == LockReply::Granted),
                    watch,
                    daemon,
                )
            })
            .await;
        let (reply, watch, daemon) = outcome;
        if watch {
            self.watch_locks(daemon);
        }
        match reply {
            Err(e) if e.errno == libc::ENOLCK && !wait.is_zero() => {
                tokio::time::sleep(wait.min(RETRY * 2)).await;
                Ok(false)
            }
            other => other,
        }
    }

    /// F_SETLK (`wait` false: EAGAIN on conflict) or F_SETLKW (`wait` true: asks again until
    /// granted, EDEADLK when the wait would close a cycle of owners; dropping the future
    /// stops waiting).
    pub async fn lock(&self, f: &File, req: &LockRequest, wait: bool) -> Result<(), Errno> {
        if !wait {
            self.lock_once(f, req, Duration::ZERO).await?;
            return Ok(());
        }
        let mut waiting = self.waiting();
        let out = loop {
            match self.lock_once(f, req, WAIT_SLICE).await {
                Ok(true) => break Ok(()),
                Ok(false) => {}
                Err(e) => break Err(e),
            }
            match self.check_deadlock(f, req, &mut waiting).await {
                Ok(true) => break Ok(()),
                Ok(false) => {}
                Err(e) => break Err(e),
            }
        };
        self.stop_waiting(&waiting).await;
        out
    }

    /// A new wait for a lock (see `Waiting`).
    pub fn waiting(&self) -> Waiting {
        Waiting {
            wait: rand::random(),
            recorded: None,
        }
    }

    /// The deployment's deadlock coordinator: the first owner of one fixed lock chunk.
    fn coordinator(&self) -> u32 {
        self.rpc()
            .placement()
            .chunk_owner(COORDINATOR_KEY, LOCK_CHUNK)
    }

    /// After a blocked slice of a wait: asks the file's lock daemon which owners hold the
    /// conflicting locks and records at the coordinator that this owner waits for them.
    /// EDEADLK when that would close a cycle (some holder waits, through any chain, for
    /// this owner) and one more attempt still finds the range held; `Ok(true)` when that
    /// attempt got the lock. A coordinator or lock daemon that does not answer leaves the
    /// wait undetected (`Ok(false)`: wait on).
    pub async fn check_deadlock(
        &self,
        f: &File,
        req: &LockRequest,
        w: &mut Waiting,
    ) -> Result<bool, Errno> {
        let file_id = f.file_id();
        let owner = self.lock_owner(req.owner);
        let ask = req::LockHolders {
            file_id,
            owner,
            kind: req.kind,
            range: req.range,
        };
        let Ok(holders) = self.lock_call(file_id, ask, false, |_, r| r.clone()).await else {
            return Ok(false);
        };
        if holders.is_empty() {
            return Ok(false);
        }
        let r = req::WaitsFor {
            waiter: owner,
            wait: w.wait,
            holders,
            ttl_ms: WAIT_TTL_MS,
        };
        match self.rpc().call(self.coordinator(), r).await {
            Ok(false) => {
                w.recorded = Some(owner);
                Ok(false)
            }
            Ok(true) => {
                w.recorded = None;
                // A holder may have let go since it was named: one more attempt first.
                match self.lock_once(f, req, Duration::ZERO).await {
                    Ok(granted) => Ok(granted),
                    Err(e) if e.errno == libc::EAGAIN => Err(Errno::new(
                        libc::EDEADLK,
                        format!(
                            "waiting for bytes {}..={} of {} would deadlock: a holder waits for this lock owner",
                            req.range.start,
                            req.range.end,
                            f.path()
                        ),
                    )),
                    Err(e) => Err(e),
                }
            }
            Err(e) => {
                tracing::debug!("deadlock coordinator: {e}");
                Ok(false)
            }
        }
    }

    /// Ends a wait at the coordinator (granted, failed or given up); a wait never ended
    /// there expires.
    pub async fn stop_waiting(&self, w: &Waiting) {
        let Some(waiter) = w.recorded else {
            return;
        };
        let r = req::WaitsFor {
            waiter,
            wait: w.wait,
            holders: Vec::new(),
            ttl_ms: 0,
        };
        let _ = self.rpc().call(self.coordinator(), r).await;
    }

    /// F_GETLK: the lock of another owner that would stop `owner` taking `kind` over `range`
    /// (after the grace period of a restarted lock daemon).
    pub async fn test_lock(
        &self,
        f: &File,
        owner: u64,
        kind: LockKind,
        range: LockRange,
    ) -> Result<Option<LockInfo>, Errno> {
        let file_id = f.file_id();
        let r = req::TestLock {
            file_id,
            owner: self.lock_owner(owner),
            kind,
            range,
        };
        self.lock_call(file_id, r, true, |_, reply| reply.clone())
            .await
    }

    /// Drops this client's locks of the file held by `owner` (a close: POSIX locks) and/or
    /// taken through `handle` (the last close of an open file: OFD locks and flock).
    pub async fn release_locks(
        &self,
        f: &File,
        owner: Option<u64>,
        handle: Option<u64>,
    ) -> Result<(), Errno> {
        self.data().direct_report(f, false).await?;
        let file_id = f.file_id();
        let r = req::ReleaseLocks {
            file_id,
            session: self.0.locks.id(),
            owner,
            handle,
        };
        let locks = &self.0.locks;
        self.lock_call(file_id, r, false, |_, reply| {
            locks.forget(file_id, owner, handle);
            reply.clone()
        })
        .await
    }
}

/// Waits for the connection to a daemon holding this client's locks to be lost, then takes
/// them back (asking until it answers); ends when nothing is held there any more or the
/// client is gone. Holds no reference to the client while it waits, so dropping the client
/// still closes its connections (and the daemons drop its locks).
async fn watch_locks(client: Weak<Inner>, daemon: u32) {
    loop {
        let closed = {
            let Some(inner) = client.upgrade() else {
                return;
            };
            inner.rpc.closed_signal(daemon)
        };
        if let Some(closed) = closed {
            closed.wait().await;
        }
        loop {
            let Some(inner) = client.upgrade() else {
                return;
            };
            let c = Client(inner);
            if c.0.locks.unwatch_if_idle(daemon) {
                return;
            }
            match c.ns().reclaim_locks(daemon).await {
                Ok(()) if c.0.locks.unwatch_if_idle(daemon) => return,
                Ok(()) => break,
                Err(e) => {
                    tracing::debug!(daemon, "taking locks back: {e}");
                    drop(c);
                    tokio::time::sleep(RETRY * 3).await;
                }
            }
        }
    }
}
