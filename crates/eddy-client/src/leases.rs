//! Directory leases as the holder keeps them (decision 0075): for each directory this client
//! holds a lease on, the names it knows there (all of them, when every daemon answered its
//! registration with a complete list), the entries it created under the lease, and the
//! creates and unlinks queued for each owning daemon. The requests are sent by the
//! namespace layer (`namespace/leases.rs`); this module keeps the state, sends nothing.
//!
//! While a lease is *active*, a name not known present is known absent: a lookup of it is
//! ENOENT and an exclusive create of it succeeds here, queued. A recall (or a failure)
//! makes it inactive at once: nothing more is answered from it, and what is queued is
//! flushed before the lease is given back.

use crate::{Errno, Inode};
use eddy_proto::sync::lock;
use eddy_proto::{BatchOp, LeaseRef};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// What a front end runs (and the client awaits) before it gives a lease back: the mount
/// drops the kernel's negative entries of the directory it is given.
pub type LeaseReturnHook =
    Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Directories whose creates are counted towards a lease, at most (the oldest go).
const COUNTED_MAX: usize = 1024;
/// Errors of deferred operations kept for the calls that depend on them, at most.
const ERRORS_MAX: usize = 4096;
/// Leases one client holds at most: each is an entry in every daemon's registry, and a
/// tree made directory by directory (an archive unpacked) would otherwise hold one per
/// directory until recalled. Past it the oldest is given back.
pub(crate) const HELD_MAX: usize = 256;

/// One lease this client holds.
pub(crate) struct DirLease {
    pub dir: String,
    pub lease: LeaseRef,
    /// When it was granted (the oldest goes first past `HELD_MAX`).
    pub since: Instant,
    pub st: Mutex<LeaseState>,
    /// Held while a batch of this lease is sent (so that batches to one daemon leave in
    /// the order their operations were made) and, by a flush, until the replies came.
    pub sending: tokio::sync::Mutex<()>,
    /// Held (read) by each batch sent without waiting for its reply until it came; taken
    /// (write) by a flush, which so waits for them.
    pub replies: Arc<tokio::sync::RwLock<()>>,
}

#[derive(Default)]
pub(crate) struct LeaseState {
    /// Local answers are given (false once recalled, given back or failed).
    pub active: bool,
    /// Names known present in the directory (listed at registration, created since).
    pub present: HashSet<String>,
    /// Entries this client created under the lease, by name.
    pub created: HashMap<String, Inode>,
    /// Operations queued, by owning daemon, in the order they were made.
    pub queue: BTreeMap<u32, Vec<BatchOp>>,
    pub queued: usize,
    /// When the oldest queued operation was queued.
    pub oldest: Option<Instant>,
    /// A send of the queue after `lease_batch_age_ms` is planned.
    pub timer: bool,
    /// Being given back: nothing more is queued, the give-back runs once.
    pub returning: bool,
    /// Until when names known absent are answered here: `Leases::valid_for` after this
    /// client last heard from the granter (its registration's answer, each answer of the
    /// long poll). Past it, with the granter perhaps cut off, another daemon may have given
    /// up on the granter and dropped the registration (decision 0075, *Replication*).
    pub fresh_until: Option<Instant>,
}

impl LeaseState {
    /// Whether names known absent are answered from the lease now: active, and the granter
    /// heard from within `Leases::valid_for`.
    pub fn answers(&self) -> bool {
        self.active && self.fresh_until.is_some_and(|t| Instant::now() < t)
    }
}

impl DirLease {
    pub fn state(&self) -> std::sync::MutexGuard<'_, LeaseState> {
        lock(&self.st)
    }

    /// Whether `name` is known absent now.
    pub fn knows_absent(&self, name: &str) -> bool {
        let st = self.state();
        st.answers() && !st.present.contains(name)
    }

    /// The operations queued, taken for sending.
    pub fn take_queue(&self) -> BTreeMap<u32, Vec<BatchOp>> {
        let mut st = self.state();
        st.queued = 0;
        st.oldest = None;
        std::mem::take(&mut st.queue)
    }
}

/// What this client knows of directory leases.
pub(crate) struct Leases {
    /// Whether this client takes leases (the config's `leases`; a front end may turn it
    /// off, as the mount does).
    on: AtomicBool,
    pub after_creates: u32,
    pub batch_max: usize,
    pub batch_age: Duration,
    /// How long the long poll at a granter waits at most (`Config::lease_poll_cap`).
    pub poll_cap: Duration,
    /// How long a lease answers names known absent after the granter was last heard from
    /// (`Config::lease_valid_for`).
    pub valid_for: Duration,
    held: RwLock<HashMap<String, Arc<DirLease>>>,
    /// Creates made per directory without a lease, and directories not to ask for one
    /// before a time (refused).
    counted: Mutex<HashMap<String, u32>>,
    refused: Mutex<HashMap<String, Instant>>,
    /// Directories whose lease is being asked for now.
    asking: Mutex<HashSet<String>>,
    /// Granters whose long poll runs.
    pub watching: Mutex<HashSet<u32>>,
    /// Errors of deferred operations, by path, for the next call that depends on them.
    errors: Mutex<HashMap<String, Errno>>,
    hook: RwLock<Option<LeaseReturnHook>>,
}

impl Leases {
    pub fn new(cfg: &eddy_config::Config) -> Leases {
        Leases {
            on: AtomicBool::new(cfg.leases),
            after_creates: cfg.lease_after_creates,
            batch_max: cfg.lease_batch_max.clamp(1, 1024) as usize,
            batch_age: Duration::from_millis(cfg.lease_batch_age_ms),
            poll_cap: cfg.lease_poll_cap(),
            valid_for: cfg.lease_valid_for(),
            held: Default::default(),
            counted: Default::default(),
            refused: Default::default(),
            asking: Default::default(),
            watching: Default::default(),
            errors: Default::default(),
            hook: Default::default(),
        }
    }

    pub fn on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    pub fn set_on(&self, on: bool) {
        self.on.store(on, Ordering::Release);
    }

    /// Whether any lease is held (one read of the map).
    pub fn any(&self) -> bool {
        !self
            .held
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// The lease held on `dir`, if any (active or not).
    pub fn get(&self, dir: &str) -> Option<Arc<DirLease>> {
        let held = self.held.read().unwrap_or_else(|p| p.into_inner());
        if held.is_empty() {
            return None;
        }
        held.get(dir).cloned()
    }

    /// Every lease held.
    pub fn all(&self) -> Vec<Arc<DirLease>> {
        self.held
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The leases held whose directory is `dir` or lies below it.
    pub fn within(&self, dir: &str) -> Vec<Arc<DirLease>> {
        self.held
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|l| eddy_proto::path::is_within(&l.dir, dir))
            .cloned()
            .collect()
    }

    pub fn insert(&self, l: Arc<DirLease>) {
        self.held
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(l.dir.clone(), l);
    }

    /// The oldest lease held, when `HELD_MAX` are: to be given back before another is
    /// taken.
    pub fn oldest_past_cap(&self) -> Option<Arc<DirLease>> {
        let held = self.held.read().unwrap_or_else(|p| p.into_inner());
        if held.len() < HELD_MAX {
            return None;
        }
        held.values()
            .filter(|l| !l.state().returning)
            .min_by_key(|l| l.since)
            .cloned()
    }

    /// Forgets the lease `l` (if it is still the one held on its directory).
    pub fn remove(&self, l: &DirLease) {
        let mut held = self.held.write().unwrap_or_else(|p| p.into_inner());
        if held.get(&l.dir).is_some_and(|h| h.lease == l.lease) {
            held.remove(&l.dir);
        }
    }

    /// The leases granted by `daemon`.
    pub fn of_granter(&self, daemon: u32) -> Vec<Arc<DirLease>> {
        self.held
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|l| l.lease.daemon == daemon)
            .cloned()
            .collect()
    }

    /// Counts a create in `dir` made without a lease; true when it is time to ask for one.
    pub fn count_create(&self, dir: &str) -> bool {
        let mut counted = lock(&self.counted);
        if counted.len() >= COUNTED_MAX && !counted.contains_key(dir) {
            counted.clear();
        }
        let n = counted.entry(dir.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        *n >= self.after_creates
    }

    /// Whether a lease on `dir` may be asked for now; if so, marks it asked for (`done_asking`
    /// ends that).
    pub fn may_ask(&self, dir: &str) -> bool {
        if let Some(until) = lock(&self.refused).get(dir) {
            if Instant::now() < *until {
                return false;
            }
        }
        lock(&self.asking).insert(dir.to_string())
    }

    pub fn done_asking(&self, dir: &str) {
        lock(&self.asking).remove(dir);
        lock(&self.counted).remove(dir);
    }

    /// Not to ask for a lease on `dir` for `retry`.
    pub fn refused(&self, dir: &str, retry: Duration) {
        let mut refused = lock(&self.refused);
        let now = Instant::now();
        if refused.len() >= COUNTED_MAX {
            refused.retain(|_, t| *t > now);
        }
        let until = now
            .checked_add(retry)
            .unwrap_or(now + Duration::from_secs(3600));
        refused.insert(dir.to_string(), until);
    }

    /// An error of a deferred operation on `path`, for the next call that depends on it.
    pub fn note_error(&self, path: &str, e: Errno) {
        let mut errors = lock(&self.errors);
        if errors.len() >= ERRORS_MAX {
            errors.clear();
        }
        errors.insert(path.to_string(), e);
    }

    /// The error of a deferred operation on `path`, taken.
    pub fn take_error(&self, path: &str) -> Option<Errno> {
        let mut errors = lock(&self.errors);
        if errors.is_empty() {
            return None;
        }
        errors.remove(path)
    }

    /// The first error of a deferred operation on a name in `dir`, taken.
    pub fn take_error_in(&self, dir: &str) -> Option<Errno> {
        let mut errors = lock(&self.errors);
        if errors.is_empty() {
            return None;
        }
        let key = errors
            .keys()
            .find(|p| eddy_proto::path::split(p).is_some_and(|(d, _)| d == dir))
            .cloned()?;
        errors.remove(&key)
    }

    pub fn set_hook(&self, hook: Option<LeaseReturnHook>) {
        *self.hook.write().unwrap_or_else(|p| p.into_inner()) = hook;
    }

    pub fn hook(&self) -> Option<LeaseReturnHook> {
        self.hook.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
