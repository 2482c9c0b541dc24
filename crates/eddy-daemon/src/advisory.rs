//! Advisory file locks (POSIX record locks, OFD locks, flock) held in this daemon's memory,
//! keyed by file id. Every lock remembers the connection it was taken over: when that
//! connection closes (the client's mount stopped or its node died) its locks go. Waiting
//! lock requests never hold an RPC longer than they were told to: they wait for a change of
//! the table, then reply "still blocked" and the client asks again (decision 0008).

use eddy_proto::lockset::{self, overlaps, RangeLock};
use eddy_proto::sync::lock;
use eddy_proto::{Errno, FileId, LockInfo, LockKind, LockOwner, LockRange};
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Identity of a client connection, unique for the daemon's lifetime.
pub type ConnId = u64;

/// One held lock: a range of one kind for one owner (Unlock only as a request to `apply`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    owner: LockOwner,
    conn: ConnId,
    handle: u64,
    pid: u32,
    /// Read or Write (never Unlock).
    kind: LockKind,
    range: LockRange,
}

impl Held {
    fn info(&self) -> LockInfo {
        LockInfo {
            kind: self.kind,
            range: self.range,
            pid: self.pid,
        }
    }
}

impl RangeLock for Held {
    fn same_owner(&self, other: &Held) -> bool {
        self.owner == other.owner
    }
    fn kind(&self) -> LockKind {
        self.kind
    }
    fn range(&self) -> LockRange {
        self.range
    }
    fn with_range(self, range: LockRange) -> Held {
        Held { range, ..self }
    }
}

/// Whether a held lock stops `owner` from taking `kind` over `range`.
fn conflicts(h: &Held, owner: LockOwner, kind: LockKind, range: LockRange) -> bool {
    h.owner != owner
        && overlaps(h.range, range)
        && (h.kind == LockKind::Write || kind == LockKind::Write)
}

#[derive(Default)]
struct Tables {
    files: HashMap<FileId, Vec<Held>>,
    /// Connections open now: a lock request finishing after its connection closed takes
    /// nothing.
    conns: HashSet<ConnId>,
    next_conn: ConnId,
    /// The end of the grace period after a restart (decision 0028): until then only locks
    /// held before the restart are taken (back), by `reclaim`.
    grace_until: Option<Instant>,
}

/// What a lock attempt needs to know.
#[derive(Debug, Clone, Copy)]
pub struct LockAsk {
    pub file_id: FileId,
    pub owner: LockOwner,
    pub conn: ConnId,
    pub handle: u64,
    pub pid: u32,
    pub kind: LockKind,
    pub range: LockRange,
}

/// The daemon's lock table.
#[derive(Default)]
pub struct LockTable {
    inner: Mutex<Tables>,
    /// Woken whenever locks are released or downgraded.
    changed: Notify,
}

impl LockTable {
    fn tables(&self) -> MutexGuard<'_, Tables> {
        lock(&self.inner)
    }

    /// Opens the grace period of a daemon that restarted on its root: for `len`, new lock
    /// requests (and F_GETLK) are refused with ENOLCK, which clients take as "ask again",
    /// while the clients that held locks before the restart take them back (`reclaim`).
    pub fn start_grace(&self, len: Duration) {
        self.tables().grace_until = Instant::now().checked_add(len);
    }

    /// ENOLCK while the grace period after a restart lasts: the lock table is not complete
    /// yet (holders are still taking their locks back), so no new lock is granted and no
    /// F_GETLK answered; clients ask again until it ends (decision 0028).
    pub fn check_grace(&self) -> Result<(), Errno> {
        match self.grace_left() {
            Some(left) => Err(Errno::new(
                libc::ENOLCK,
                format!(
                    "the lock daemon restarted: locks held before are being taken back for {} ms more; ask again",
                    left.as_millis()
                ),
            )),
            None => Ok(()),
        }
    }

    /// What is left of the grace period, if it lasts.
    fn grace_left(&self) -> Option<Duration> {
        let mut t = self.tables();
        let until = t.grace_until?;
        let left = until.checked_duration_since(Instant::now());
        if left.is_none() {
            t.grace_until = None;
        }
        left.filter(|l| !l.is_zero())
    }

    /// Takes back a lock held before a restart: only in the grace period, and only when no
    /// lock taken back meanwhile conflicts (`Ok(false)`: the lock is lost).
    pub fn reclaim(&self, ask: &LockAsk) -> Result<bool, Errno> {
        if ask.kind == LockKind::Unlock || self.grace_left().is_none() {
            return Ok(false);
        }
        let mut t = self.tables();
        if !t.conns.contains(&ask.conn) {
            return Err(Errno::eio("the connection of this lock request has closed"));
        }
        let locks = t.files.entry(ask.file_id).or_default();
        if locks
            .iter()
            .any(|h| conflicts(h, ask.owner, ask.kind, ask.range))
        {
            return Ok(false);
        }
        apply(locks, ask);
        Ok(true)
    }

    /// Registers a new connection and returns its id.
    pub fn open_conn(&self) -> ConnId {
        let mut t = self.tables();
        t.next_conn += 1;
        let id = t.next_conn;
        t.conns.insert(id);
        id
    }

    /// Whether connection `conn` is open (registered and not closed yet).
    pub fn is_open(&self, conn: ConnId) -> bool {
        self.tables().conns.contains(&conn)
    }

    /// Forgets a connection and drops every lock taken over it; returns how many.
    pub fn close_conn(&self, conn: ConnId) -> usize {
        let dropped = {
            let mut t = self.tables();
            t.conns.remove(&conn);
            retain_locks(&mut t, |h| h.conn != conn)
        };
        if dropped > 0 {
            self.changed.notify_waiters();
        }
        dropped
    }

    /// Takes or releases a range at once: `Err(conflicting lock)` if another owner holds a
    /// conflicting one; an unknown (closed) connection takes nothing (EIO).
    pub fn try_lock(&self, ask: &LockAsk) -> Result<Result<(), LockInfo>, Errno> {
        let released = {
            let mut t = self.tables();
            if !t.conns.contains(&ask.conn) {
                return Err(Errno::eio("the connection of this lock request has closed"));
            }
            let locks = t.files.entry(ask.file_id).or_default();
            if ask.kind != LockKind::Unlock {
                if let Some(h) = locks
                    .iter()
                    .find(|h| conflicts(h, ask.owner, ask.kind, ask.range))
                {
                    return Ok(Err(h.info()));
                }
            }
            let released = apply(locks, ask);
            if locks.is_empty() {
                t.files.remove(&ask.file_id);
            }
            released
        };
        if released {
            self.changed.notify_waiters();
        }
        Ok(Ok(()))
    }

    /// Like `try_lock`, but waits up to `wait` for a conflicting lock to go. `Ok(false)`:
    /// still blocked.
    pub async fn lock_wait(&self, ask: &LockAsk, wait: Duration) -> Result<bool, Errno> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before trying, so a release between the try and the wait is seen.
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.try_lock(ask)?.is_ok() {
                return Ok(true);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Ok(false);
            }
        }
    }

    /// F_GETLK: the first lock of another owner conflicting with `kind` over `range`.
    pub fn test(
        &self,
        file_id: FileId,
        owner: LockOwner,
        kind: LockKind,
        range: LockRange,
    ) -> Option<LockInfo> {
        if kind == LockKind::Unlock {
            return None;
        }
        self.tables()
            .files
            .get(&file_id)
            .and_then(|locks| locks.iter().find(|h| conflicts(h, owner, kind, range)))
            .map(Held::info)
    }

    /// The owners of the locks conflicting with `kind` over `range` for `owner`, each once.
    pub fn holders(
        &self,
        file_id: FileId,
        owner: LockOwner,
        kind: LockKind,
        range: LockRange,
    ) -> Vec<LockOwner> {
        let mut out: Vec<LockOwner> = Vec::new();
        if kind == LockKind::Unlock {
            return out;
        }
        if let Some(locks) = self.tables().files.get(&file_id) {
            for h in locks.iter().filter(|h| conflicts(h, owner, kind, range)) {
                if !out.contains(&h.owner) {
                    out.push(h.owner);
                }
            }
        }
        out
    }

    /// Drops the file's locks of `owner` (in `session`) and those taken through `handle`.
    pub fn release(
        &self,
        file_id: FileId,
        session: u128,
        owner: Option<u64>,
        handle: Option<u64>,
    ) -> usize {
        let dropped = {
            let mut t = self.tables();
            let Some(locks) = t.files.get_mut(&file_id) else {
                return 0;
            };
            let before = locks.len();
            locks.retain(|h| {
                let mine = h.owner.session == session;
                !(mine && (Some(h.owner.owner) == owner || Some(h.handle) == handle))
            });
            let dropped = before - locks.len();
            if locks.is_empty() {
                t.files.remove(&file_id);
            }
            dropped
        };
        if dropped > 0 {
            self.changed.notify_waiters();
        }
        dropped
    }

    /// Locks held on a file (tests).
    #[cfg(test)]
    pub fn held(&self, file_id: FileId) -> usize {
        self.tables().files.get(&file_id).map_or(0, Vec::len)
    }
}

/// Keeps the locks `keep` accepts; returns how many went.
fn retain_locks(t: &mut Tables, keep: impl Fn(&Held) -> bool) -> usize {
    let mut dropped = 0;
    t.files.retain(|_, locks| {
        let before = locks.len();
        locks.retain(&keep);
        dropped += before - locks.len();
        !locks.is_empty()
    });
    dropped
}

/// Applies a granted request to the file's locks (`eddy_proto::lockset::apply`). Returns
/// whether anything was released or downgraded (waiters may proceed).
fn apply(locks: &mut Vec<Held>, ask: &LockAsk) -> bool {
    lockset::apply(
        locks,
        Held {
            owner: ask.owner,
            conn: ask.conn,
            handle: ask.handle,
            pid: ask.pid,
            kind: ask.kind,
            range: ask.range,
        },
    )
}

/// A range that ends before it starts is EINVAL.
pub(crate) fn bad_range(range: LockRange) -> Result<(), Errno> {
    if range.start > range.end {
        return Err(Errno::einval(format!(
            "lock range {}..={} ends before it starts",
            range.start, range.end
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: FileId = 7;

    fn owner(o: u64) -> LockOwner {
        LockOwner {
            session: 1,
            owner: o,
        }
    }

    fn ask(conn: ConnId, o: u64, kind: LockKind, start: u64, end: u64) -> LockAsk {
        LockAsk {
            file_id: F,
            owner: owner(o),
            conn,
            handle: o,
            pid: o as u32,
            kind,
            range: LockRange { start, end },
        }
    }

    fn granted(t: &LockTable, a: LockAsk) -> bool {
        t.try_lock(&a).unwrap().is_ok()
    }

    fn ranges(t: &LockTable) -> Vec<(u64, LockKind, u64, u64)> {
        let mut v: Vec<_> = t
            .tables()
            .files
            .get(&F)
            .map(|l| {
                l.iter()
                    .map(|h| (h.owner.owner, h.kind, h.range.start, h.range.end))
                    .collect()
            })
            .unwrap_or_default();
        v.sort_by_key(|x| (x.0, x.2));
        v
    }

    use LockKind::{Read, Unlock, Write};

    #[test]
    fn readers_share_writers_exclude() {
        let t = LockTable::default();
        let c = t.open_conn();
        assert!(granted(&t, ask(c, 1, Read, 0, 99)));
        assert!(granted(&t, ask(c, 2, Read, 50, 149)));
        assert!(!granted(&t, ask(c, 3, Write, 99, 99)));
        assert!(granted(&t, ask(c, 3, Write, 150, u64::MAX)));
        let info = t.test(F, owner(4), Write, LockRange { start: 0, end: 0 });
        assert_eq!(info.map(|i| i.pid), Some(1));
        assert_eq!(
            t.test(F, owner(1), Write, LockRange { start: 0, end: 10 }),
            None
        );
    }

    #[test]
    fn unlock_splits_and_same_kind_merges() {
        let t = LockTable::default();
        let c = t.open_conn();
        assert!(granted(&t, ask(c, 1, Write, 0, 99)));
        assert!(granted(&t, ask(c, 1, Unlock, 40, 59)));
        assert_eq!(ranges(&t), vec![(1, Write, 0, 39), (1, Write, 60, 99)]);
        assert!(granted(&t, ask(c, 2, Write, 40, 59)));
        assert!(granted(&t, ask(c, 1, Write, 100, 199)));
        assert_eq!(
            ranges(&t),
            vec![(1, Write, 0, 39), (1, Write, 60, 199), (2, Write, 40, 59)]
        );
        // Converting the middle of an own lock to read splits it in three.
        assert!(granted(&t, ask(c, 1, Read, 70, 79)));
        assert_eq!(
            ranges(&t),
            vec![
                (1, Write, 0, 39),
                (1, Write, 60, 69),
                (1, Read, 70, 79),
                (1, Write, 80, 199),
                (2, Write, 40, 59)
            ]
        );
        assert!(granted(&t, ask(c, 3, Read, 75, 75)));
    }

    #[test]
    fn release_by_owner_handle_and_connection() {
        let t = LockTable::default();
        let (c1, c2) = (t.open_conn(), t.open_conn());
        assert!(granted(&t, ask(c1, 1, Write, 0, 9)));
        assert!(granted(&t, ask(c1, 2, Write, 10, 19)));
        assert!(granted(&t, ask(c2, 3, Write, 20, 29)));
        assert_eq!(t.release(F, 1, Some(1), None), 1);
        assert_eq!(t.release(F, 1, None, Some(2)), 1);
        assert_eq!(t.release(F, 2, Some(3), None), 0, "another session's owner");
        assert_eq!(t.close_conn(c2), 1);
        assert_eq!(t.held(F), 0);
        assert!(
            t.try_lock(&ask(c2, 3, Write, 0, 0)).is_err(),
            "closed connection"
        );
    }

    #[test]
    fn sessions_never_share_an_owner() {
        let t = LockTable::default();
        let c = t.open_conn();
        let mut a = ask(c, 1, Write, 0, 0);
        assert!(granted(&t, a));
        a.owner.session = 2;
        assert!(!granted(&t, a));
    }

    #[test]
    fn in_the_grace_period_only_reclaims_are_granted() {
        let t = LockTable::default();
        let c = t.open_conn();
        assert!(
            !t.reclaim(&ask(c, 1, Write, 0, 9)).unwrap(),
            "no grace period"
        );
        t.start_grace(Duration::from_secs(60));
        assert_eq!(t.check_grace().unwrap_err().errno, libc::ENOLCK);
        assert!(t.reclaim(&ask(c, 1, Write, 0, 9)).unwrap());
        assert!(t.reclaim(&ask(c, 2, Read, 10, 19)).unwrap());
        assert!(
            !t.reclaim(&ask(c, 3, Read, 5, 5)).unwrap(),
            "conflicts with a lock taken back"
        );
        assert!(!t.reclaim(&ask(c, 3, Unlock, 0, 0)).unwrap());
        assert_eq!(ranges(&t), vec![(1, Write, 0, 9), (2, Read, 10, 19)]);
        t.start_grace(Duration::ZERO);
        assert!(t.check_grace().is_ok());
        assert!(
            !t.reclaim(&ask(c, 4, Read, 100, 100)).unwrap(),
            "grace over"
        );
        assert!(
            !granted(&t, ask(c, 3, Write, 0, 0)),
            "the reclaimed lock holds"
        );
    }

    #[tokio::test]
    async fn a_waiter_gets_the_lock_when_it_is_released() {
        let t = std::sync::Arc::new(LockTable::default());
        let c = t.open_conn();
        assert!(granted(&t, ask(c, 1, Write, 0, 0)));
        let blocked = t
            .lock_wait(&ask(c, 2, Write, 0, 0), Duration::from_millis(50))
            .await
            .unwrap();
        assert!(!blocked);
        let t2 = std::sync::Arc::clone(&t);
        let waiter = tokio::spawn(async move {
            t2.lock_wait(&ask(c, 2, Write, 0, 0), Duration::from_secs(10))
                .await
                .unwrap()
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(t.release(F, 1, Some(1), None), 1);
        assert!(waiter.await.unwrap());
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        /// A byte-level model: per byte, the owners holding it and how.
        fn model_ok(t: &LockTable, model: &[[Option<LockKind>; 3]; 32]) -> bool {
            (0..32u64).all(|b| {
                (1..=3u64).all(|o| {
                    let held = t.tables().files.get(&F).and_then(|l| {
                        l.iter()
                            .find(|h| {
                                h.owner.owner == o
                                    && overlaps(h.range, LockRange { start: b, end: b })
                            })
                            .map(|h| h.kind)
                    });
                    held == model[b as usize][(o - 1) as usize]
                })
            })
        }

        proptest! {
            #[test]
            fn table_matches_a_byte_model(ops in proptest::collection::vec((1u64..=3, 0u8..3, 0u64..32, 0u64..8), 1..60)) {
                let t = LockTable::default();
                let c = t.open_conn();
                let mut model = [[None::<LockKind>; 3]; 32];
                for (o, k, start, len) in ops {
                    let kind = [Read, Write, Unlock][k as usize];
                    let end = (start + len).min(31);
                    let conflict = (start..=end).any(|b| (1..=3u64).any(|p| p != o && match model[b as usize][(p - 1) as usize] {
                        Some(Write) => kind != Unlock,
                        Some(_) => kind == Write,
                        None => false,
                    }));
                    let got = granted(&t, ask(c, o, kind, start, end));
                    prop_assert_eq!(got, !conflict || kind == Unlock);
                    if got {
                        for b in start..=end {
                            model[b as usize][(o - 1) as usize] = if kind == Unlock { None } else { Some(kind) };
                        }
                    }
                    prop_assert!(model_ok(&t, &model));
                    // No two locks of one owner overlap.
                    let l = ranges(&t);
                    for (i, a) in l.iter().enumerate() {
                        for b in &l[i + 1..] {
                            prop_assert!(a.0 != b.0 || a.3 < b.2 || b.3 < a.2, "{:?}", l);
                        }
                    }
                }
            }
        }
    }
}
