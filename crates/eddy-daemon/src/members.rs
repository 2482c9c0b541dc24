//! The deployment's membership as this daemon holds it (decision 0081): its epoch, the
//! membership it adopted from a coordinating command (`req::Membership`), kept in the root
//! (`MEMBERSHIP_FILE`, mode 0600) so a restart keeps it, and the epoch each client connection
//! said it places by (`req::Epoch`). A client's request on a connection of an older epoch is
//! refused with `EREMCHG` before anything is done with it (`State::serve`).
//!
//! What a client sends is untrusted: an epoch is a number compared, a membership is checked
//! (bounded, no id twice, this daemon in it) before it is adopted.

use crate::advisory::ConnId;
use eddy_proto::sync::lock;
use eddy_proto::{req, Errno, MembershipState};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// The file in the root that keeps the membership adopted (bincode of `req::Membership`).
pub const MEMBERSHIP_FILE: &str = "membership";

/// Largest membership file read back (a list of `MEMBERS_MAX` daemons with long names fits).
const FILE_MAX: u64 = 64 << 20;

/// This daemon's membership and its clients' epochs.
pub(crate) struct Members {
    me: u32,
    file: PathBuf,
    /// The epoch adopted (0: the deployment's first), read without a lock on every request.
    epoch: AtomicU64,
    /// The membership adopted, when one was (none: the deployment file's, as started).
    adopted: Mutex<Option<req::Membership>>,
    /// The epoch each live connection said its client places by (none said: 0).
    conns: Mutex<HashMap<ConnId, u64>>,
    /// What this daemon does not own at its settled epoch was deleted (`moving.rs`); reset
    /// by the next adoption.
    collected: AtomicBool,
    /// Held (read) by a client's request that touches what moves from its admission until
    /// it is answered, and (write) by an adoption: a membership is adopted between such
    /// requests, never while one admitted at the older epoch is still applying (`admit`).
    admission: tokio::sync::RwLock<()>,
    /// When a client's request that touches what moves was last admitted (milliseconds
    /// from `since`): a move's pushes yield to the clients while they come
    /// (`served_clients_within`).
    since: std::time::Instant,
    last_admitted_ms: AtomicU64,
}

impl Members {
    /// The membership kept in `root`, else the deployment's at `epoch` (what the daemon was
    /// started with). A kept file that cannot be read is an error: the daemon must not serve
    /// by an older membership than it adopted.
    pub(crate) fn open(me: u32, root: &Path, epoch: u64) -> Result<Members, Errno> {
        let file = root.join(MEMBERSHIP_FILE);
        let adopted = match std::fs::read(&file) {
            Ok(bytes) => Some(
                eddy_proto::decode::<req::Membership>(&bytes, FILE_MAX).map_err(|e| {
                    Errno::eio(format!("the membership kept in {}: {e}", file.display()))
                })?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Errno::from_io(&e, format!("read {}", file.display()))),
        };
        let epoch = adopted.as_ref().map_or(epoch, |m| m.epoch.max(epoch));
        Ok(Members {
            me,
            file,
            epoch: AtomicU64::new(epoch),
            adopted: Mutex::new(adopted),
            conns: Mutex::default(),
            collected: AtomicBool::new(false),
            admission: tokio::sync::RwLock::new(()),
            since: std::time::Instant::now(),
            last_admitted_ms: AtomicU64::new(0),
        })
    }

    /// The epoch adopted.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The membership adopted, if one was.
    pub(crate) fn adopted(&self) -> Option<req::Membership> {
        lock(&self.adopted).clone()
    }

    /// Connection `conn`'s client places by `epoch`.
    pub(crate) fn note_conn(&self, conn: ConnId, epoch: u64) {
        lock(&self.conns).insert(conn, epoch);
    }

    /// The connection is gone.
    pub(crate) fn close_conn(&self, conn: ConnId) {
        lock(&self.conns).remove(&conn);
    }

    /// Admits a client's request of `conn` that touches what moves (data, names, attributes:
    /// `touches_moving`): refused (`refusal`) when its epoch is older than this daemon's,
    /// else the guard it holds until it is answered. An adoption (`quiesce`) waits for the
    /// requests admitted before it, and the requests that come while it waits are admitted
    /// after it (and so refused): a change admitted at the copy epoch is applied, and hinted
    /// for its new owners, before the cut-over is adopted.
    pub(crate) async fn admit(
        &self,
        conn: ConnId,
    ) -> Result<tokio::sync::RwLockReadGuard<'_, ()>, Errno> {
        let admitted = self.admission.read().await;
        match self.refusal(conn) {
            Some(refused) => Err(refused),
            None => {
                self.last_admitted_ms
                    .store(self.ms_since_start(), Ordering::Relaxed);
                Ok(admitted)
            }
        }
    }

    /// Whether a client's request that touches what moves was admitted within `window`.
    pub(crate) fn served_clients_within(&self, window: std::time::Duration) -> bool {
        let last = self.last_admitted_ms.load(Ordering::Relaxed);
        last > 0 && self.ms_since_start().saturating_sub(last) <= window.as_millis() as u64
    }

    /// Milliseconds since this daemon opened its membership (at least 1).
    fn ms_since_start(&self) -> u64 {
        (self.since.elapsed().as_millis() as u64).max(1)
    }

    /// What an adoption holds: no request admitted at the older epoch is still applying.
    pub(crate) async fn quiesce(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.admission.write().await
    }

    /// The refusal of a client's request on `conn` when its epoch is older than this
    /// daemon's.
    pub(crate) fn refusal(&self, conn: ConnId) -> Option<Errno> {
        let mine = self.epoch();
        if mine == 0 {
            return None;
        }
        let theirs = lock(&self.conns).get(&conn).copied().unwrap_or(0);
        (theirs < mine).then(|| Errno::moved(self.me, mine, theirs))
    }

    /// Checks a membership a coordinating command sent.
    pub(crate) fn check(&self, m: &req::Membership) -> Result<(), Errno> {
        if m.daemons.is_empty() || m.daemons.len() > req::MEMBERS_MAX {
            return Err(Errno::einval(format!(
                "a membership of {} daemons (1 to {})",
                m.daemons.len(),
                req::MEMBERS_MAX
            )));
        }
        let mut ids = HashSet::new();
        if let Some(d) = m.daemons.iter().find(|d| !ids.insert(d.id)) {
            return Err(Errno::einval(format!(
                "the membership names daemon {} twice",
                d.id
            )));
        }
        if !ids.contains(&self.me) {
            return Err(Errno::einval(format!(
                "the membership leaves this daemon ({}) out",
                self.me
            )));
        }
        if let Some(bad) = m
            .draining
            .iter()
            .chain(m.moving_from.iter().flatten())
            .find(|id| !ids.contains(id))
        {
            return Err(Errno::einval(format!(
                "the membership drains or moves from daemon {bad}, which it does not list"
            )));
        }
        if m.daemons.iter().all(|d| m.draining.contains(&d.id)) {
            return Err(Errno::einval("the membership drains every daemon"));
        }
        Ok(())
    }

    /// Adopts `m` (checked, its epoch newer than this daemon's): kept in the root first, so
    /// that a restart never serves by an older one. Returns whether it was adopted (false:
    /// not newer, nothing changed).
    pub(crate) fn adopt(&self, m: &req::Membership) -> Result<bool, Errno> {
        let mut adopted = lock(&self.adopted);
        if m.epoch <= self.epoch() {
            return Ok(false);
        }
        let bytes = eddy_proto::encode(m)
            .map_err(|e| Errno::eio(format!("cannot encode the membership: {e}")))?;
        // privileged-path: a fresh name made with O_EXCL then renamed over, in the daemon's own root
        eddy_config::write_private(&self.file, &bytes)
            .map_err(|e| Errno::eio(format!("cannot keep the membership: {e}")))?;
        *adopted = Some(m.clone());
        self.collected.store(false, Ordering::Release);
        self.epoch.store(m.epoch, Ordering::Release);
        tracing::info!(
            epoch = m.epoch,
            daemons = m.daemons.len(),
            moving = m.moving_from.is_some(),
            "membership adopted"
        );
        Ok(true)
    }

    /// Whether what this daemon does not own at its epoch was deleted.
    pub(crate) fn collected(&self) -> bool {
        self.collected.load(Ordering::Acquire)
    }

    /// What this daemon does not own at its epoch is deleted.
    pub(crate) fn set_collected(&self) {
        self.collected.store(true, Ordering::Release);
    }

    /// What a `Membership` reply says of this daemon (the move's part by the caller).
    pub(crate) fn state(
        &self,
        left: u64,
        collected: bool,
        (moved_bytes, scanning): (u64, bool),
    ) -> MembershipState {
        let moving = self.adopted().is_some_and(|m| m.moving_from.is_some());
        MembershipState {
            epoch: self.epoch(),
            moving,
            left,
            collected,
            moved_bytes,
            scanning,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u32) -> req::Member {
        req::Member {
            id,
            host: "h".into(),
            addr: format!("127.0.0.1:{}", 7000 + id),
            socket: None,
            root: format!("/r/{id}"),
        }
    }

    fn membership(epoch: u64, ids: &[u32]) -> req::Membership {
        req::Membership {
            epoch,
            daemons: ids.iter().map(|&i| member(i)).collect(),
            draining: Vec::new(),
            moving_from: None,
            collect: false,
        }
    }

    #[test]
    fn a_client_of_an_older_epoch_is_refused_and_an_adopted_membership_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let m = Members::open(1, dir.path(), 0).unwrap();
        assert!(m.refusal(7).is_none(), "epoch 0 refuses nobody");
        let next = membership(2, &[0, 1, 2, 3]);
        m.check(&next).unwrap();
        assert!(m.adopt(&next).unwrap());
        assert!(!m.adopt(&membership(2, &[0, 1])).unwrap(), "not newer");
        let e = m
            .refusal(7)
            .expect("a connection that said nothing is at 0");
        assert_eq!(e.errno, libc::EREMCHG);
        m.note_conn(7, 2);
        assert!(m.refusal(7).is_none());
        m.note_conn(8, 3);
        assert!(m.refusal(8).is_none(), "a newer client is served");
        let again = Members::open(1, dir.path(), 0).unwrap();
        assert_eq!(again.epoch(), 2);
        assert_eq!(again.adopted(), Some(next));
    }

    #[tokio::test]
    async fn a_client_admitted_makes_the_daemon_busy_and_a_refused_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let m = Members::open(1, dir.path(), 0).unwrap();
        let window = std::time::Duration::from_secs(60);
        assert!(!m.served_clients_within(window), "nobody came yet");
        assert!(m.adopt(&membership(2, &[0, 1])).unwrap());
        assert!(m.admit(7).await.is_err(), "an older client");
        assert!(!m.served_clients_within(window), "a refusal serves nobody");
        m.note_conn(7, 2);
        drop(m.admit(7).await.unwrap());
        assert!(m.served_clients_within(window));
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!m.served_clients_within(std::time::Duration::from_millis(5)));
    }

    #[test]
    fn a_bad_membership_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let m = Members::open(1, dir.path(), 0).unwrap();
        assert!(m.check(&membership(1, &[])).is_err());
        assert!(m.check(&membership(1, &[0, 2])).is_err(), "leaves 1 out");
        assert!(m.check(&membership(1, &[1, 1])).is_err(), "twice");
        let mut drains_all = membership(1, &[1]);
        drains_all.draining = vec![1];
        assert!(m.check(&drains_all).is_err());
        let mut unknown = membership(1, &[0, 1]);
        unknown.moving_from = Some(vec![0, 5]);
        assert!(m.check(&unknown).is_err());
        std::fs::write(dir.path().join(MEMBERSHIP_FILE), b"garbage").unwrap();
        assert!(Members::open(1, dir.path(), 0).is_err());
    }
}
