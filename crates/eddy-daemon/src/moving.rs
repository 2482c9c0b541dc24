//! A move of items between owners (decision 0081, "A move: copy, then one cut-over"): what a
//! daemon does when it adopts a membership with `moving_from` (the placement clients use, S)
//! and members T, when it adopts the cut-over (no `moving_from`), and when it collects.
//!
//! - **Copy.** For every metadata key (a path's, by its hash; a hard-linked file's identity
//!   record, by the daemon its names point at or, once that leaves, by its own hash: decision
//!   0083) and every chunk it holds of which it is the first owner under S, the daemon
//!   records a durable hint (`hints.rs`) for each of the item's owners under T that is not
//!   an owner under S — only those, so the bytes moved are the items whose owner set
//!   changed (`scan`). The scan runs on the blocking pool; until it is done, the
//!   `Membership` reply counts one item left. From the
//!   adoption on, a metadata change it applies as first owner under S also goes to those new
//!   owners with its copies (`Replicator::targets`), and a chunk change it applies as first
//!   owner under S adds a chunk hint for them (`note_moved_chunks`: "make the target's chunk
//!   what this daemon holds", which covers removal). The repair loop pushes the hints and
//!   verifies each by digest, with one copy as with several, at most
//!   `move_bandwidth_bytes` per second (`Mover::pace`) from the adoption until the collect.
//! - **Cut-over.** A membership without `moving_from`: placement follows T; the loop is woken
//!   and pushes what is left (hints are per target, whichever placement recorded them).
//! - **Collect.** At the settled epoch with no hint left, the daemon deletes, locally and
//!   without copies, hints or pending marks, every path key and chunk it holds that it does
//!   not own under T (`collect`). A drained daemon is left with nothing.
//!
//! A move is refused (EOPNOTSUPP) while the deployment links backend prefixes: the tier's
//! records are placed by its imports, which a move does not carry yet; its import placement
//! keeps the members the daemon started with for the same reason.

use crate::hints::Item;
use crate::state::State;
use eddy_proto::sync::lock;
use eddy_proto::{req, Errno, FileId, MembershipState};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A daemon that admitted a client's request within this window is busy: a move's pushes
/// go at `move_busy_bandwidth_bytes`.
const BUSY_WINDOW: Duration = Duration::from_millis(200);

/// Hints recorded at once by a scan (per target), so that a scan holds a bounded list.
const SCAN_BATCH: usize = 4096;

/// A move's state on this daemon: whether it runs, its scan, its pacing and its count.
pub(crate) struct Mover {
    /// From the adoption of a membership with `moving_from` until a collect: pushes are paced
    /// and counted as the move's.
    active: AtomicBool,
    /// The scan of what moves from here is not done since the adoption.
    scanning: AtomicBool,
    /// A scan task runs.
    running: AtomicBool,
    /// `move_bandwidth_bytes` and `move_busy_bandwidth_bytes` (0: unbounded), and when the
    /// next push may start.
    rate: u64,
    busy_rate: u64,
    next: Mutex<Option<Instant>>,
    /// Bytes of chunks pushed while a move was active, since start.
    moved: AtomicU64,
}

impl Mover {
    /// `moving`: the membership kept in the root has `moving_from` (a restart during a move:
    /// the scan is made again, its hints are recorded once).
    pub(crate) fn new(config: &eddy_config::Config, moving: bool) -> Mover {
        Mover {
            active: AtomicBool::new(moving),
            scanning: AtomicBool::new(moving),
            running: AtomicBool::new(false),
            rate: config.move_bandwidth_bytes,
            busy_rate: config.move_busy_bandwidth_bytes,
            next: Mutex::new(None),
            moved: AtomicU64::new(0),
        }
    }

    /// Whether pushes are a move's (paced, counted).
    pub(crate) fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Bytes of chunks pushed by moves since start.
    pub(crate) fn moved_bytes(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    /// Waits for the turn of a push of `bytes`: pushes start no faster than the rate allows,
    /// the busy rate when the daemon `busy` serves clients (the lower of the two).
    pub(crate) async fn pace(&self, bytes: u64, busy: bool) {
        self.moved.fetch_add(bytes, Ordering::Relaxed);
        let rate = match (busy, self.rate, self.busy_rate) {
            (true, 0, b) => b,
            (true, r, b) if b > 0 => r.min(b),
            (_, r, _) => r,
        };
        if rate == 0 || bytes == 0 {
            return;
        }
        let cost = Duration::from_secs_f64(bytes as f64 / rate as f64);
        let at = {
            let mut next = lock(&self.next);
            let now = Instant::now();
            let start = next.map_or(now, |n| n.max(now));
            *next = Some(start + cost);
            start
        };
        tokio::time::sleep_until(at).await;
    }
}

impl State {
    /// Recalls every directory lease granted here, in the background (a move grants none
    /// until it is over): the holders send what they queued under them while clients still
    /// place by the old members, and give them back.
    fn recall_every_lease(self: &Arc<Self>) {
        for (dir, id) in self.leases.granted() {
            let st = Arc::clone(self);
            tokio::spawn(async move {
                st.leases.recall(&dir, id).await;
            });
        }
    }

    /// `Membership`: adopts `m` when newer (kept in the root first), follows its placement,
    /// and starts a move's copy when it has `moving_from`; with `collect`, collects. Replies
    /// the daemon's state: `left` counts the hints held (for any target) and a scan not done.
    pub(crate) async fn membership(
        self: &Arc<Self>,
        m: req::Membership,
    ) -> Result<MembershipState, Errno> {
        if m.epoch > self.members.epoch() {
            self.members.check(&m)?;
            // A membership whose placement or connections cannot be made is not adopted.
            self.placement().prepare(&m)?;
            if m.moving_from.is_some() {
                self.blocking_any(|st| st.movable()).await??;
            }
            // Between the clients' requests that touch what moves (`Members::admit`).
            let _quiet = self.members.quiesce().await;
            let kept = m.clone();
            if self
                .blocking_any(move |st| st.members.adopt(&kept))
                .await??
            {
                self.placement().follow(&m)?;
                if m.moving_from.is_some() {
                    self.mover.active.store(true, Ordering::Release);
                    self.mover.scanning.store(true, Ordering::Release);
                    self.recall_every_lease();
                } else {
                    self.mover.scanning.store(false, Ordering::Release);
                }
                if let Some(r) = self.repair() {
                    r.wake();
                }
            }
        }
        if self.placement().is_moving() {
            self.scan_moves().await;
        }
        if m.collect {
            self.collect_request(m.epoch).await?;
        }
        Ok(self.members.state(
            self.left(),
            self.members.collected(),
            (
                self.mover.moved_bytes(),
                self.mover.scanning.load(Ordering::Acquire),
            ),
        ))
    }

    /// Whether a move's push yields to the clients now: one was served within `BUSY_WINDOW`.
    pub(crate) fn move_yields(&self) -> bool {
        self.members.served_clients_within(BUSY_WINDOW)
    }

    /// Items still to copy from here: hints held, and one while the scan is not done.
    fn left(&self) -> u64 {
        self.repair().map_or(0, |r| r.hints.total())
            + u64::from(self.mover.scanning.load(Ordering::Acquire))
    }

    /// Refuses a move of what this daemon holds when a move cannot carry it yet.
    fn movable(&self) -> Result<(), Errno> {
        if !self.settings.config.links.is_empty() {
            return Err(Errno::new(
                libc::EOPNOTSUPP,
                "the deployment links backend prefixes: their records do not move between \
                 daemons yet (decision 0081)",
            ));
        }
        Ok(())
    }

    /// Starts the scan of what moves from here unless it is done or under way, and waits for
    /// it up to half the RPC deadline (the reply counts it as one item left until it ends).
    pub(crate) async fn scan_moves(self: &Arc<Self>) {
        if !self.mover.scanning.load(Ordering::Acquire) {
            return;
        }
        if self.mover.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let st = Arc::clone(self);
        let scan = tokio::spawn(async move {
            let r = st.blocking_any(|st| st.scan()).await.and_then(|r| r);
            match r {
                Ok(n) => {
                    tracing::info!(items = n, "move: what leaves this daemon is hinted");
                    st.mover.scanning.store(false, Ordering::Release);
                    if let Some(repair) = st.repair() {
                        repair.wake();
                    }
                }
                // Made again by the next `Membership` (the coordinator asks until none left).
                Err(e) => tracing::warn!("move: cannot hint what leaves this daemon: {e}"),
            }
            st.mover.running.store(false, Ordering::Release);
        });
        let budget = Duration::from_millis(self.settings.config.rpc_timeout_ms / 2);
        let _ = tokio::time::timeout(budget, scan).await;
    }

    /// Records a hint for every item held here of which this daemon is the first owner now,
    /// for its owners under the members that are not its owners now. Returns the hints.
    fn scan(&self) -> Result<u64, Errno> {
        let Some(repair) = self.repair() else {
            return Err(Errno::eio("the hints keyspace is not open"));
        };
        let view = self.placement().view();
        let (me, r) = (self.settings.id, self.placement().replicas());
        let mut per_target: BTreeMap<u32, Vec<Item>> = BTreeMap::new();
        let mut n = 0u64;
        let mut flush = |per_target: &mut BTreeMap<u32, Vec<Item>>, all: bool| {
            for (t, items) in per_target.iter_mut() {
                if all || items.len() >= SCAN_BATCH {
                    n += items.len() as u64;
                    repair.hints.add(*t, std::mem::take(items))?;
                }
            }
            Ok::<(), Errno>(())
        };
        let mut failed = None;
        self.meta.each_key(|key, record| {
            if let Some((now, new)) = view.record_owners(key, record, r) {
                if now.first() == Some(&me) && !new.is_empty() {
                    for t in new {
                        per_target
                            .entry(t)
                            .or_default()
                            .push(Item::Key(key.to_vec()));
                    }
                    if let Err(e) = flush(&mut per_target, false) {
                        failed = Some(e);
                        return false;
                    }
                }
            }
            true
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        for (id, k) in self.chunks.held() {
            if let Some((now, new)) = view.chunk_owners(id, k, r) {
                if now.first() == Some(&me) {
                    for t in new {
                        per_target.entry(t).or_default().push(Item::Chunk(id, k));
                    }
                    flush(&mut per_target, false)?;
                }
            }
        }
        flush(&mut per_target, true)?;
        Ok(n)
    }

    /// While items move: chunks `ks` of file `id` changed here (written, cut, removed, put);
    /// as their first owner now, this daemon hints them for their new owners.
    pub(crate) fn note_moved_chunks(
        &self,
        id: FileId,
        ks: impl IntoIterator<Item = u64>,
    ) -> Result<(), Errno> {
        if !self.placement().is_moving() {
            return Ok(());
        }
        let Some(repair) = self.repair() else {
            return Ok(());
        };
        let view = self.placement().view();
        let (me, r) = (self.settings.id, self.placement().replicas());
        let mut per_target: BTreeMap<u32, Vec<Item>> = BTreeMap::new();
        for k in ks {
            if let Some((now, new)) = view.chunk_owners(id, k, r) {
                if now.first() == Some(&me) {
                    for t in new {
                        per_target.entry(t).or_default().push(Item::Chunk(id, k));
                    }
                }
            }
        }
        for (t, items) in per_target {
            repair.hints.add(t, items)?;
        }
        Ok(())
    }

    /// `Membership { collect }` at epoch `epoch`: refused unless it is this daemon's settled
    /// epoch (EINVAL) with no hint left (EAGAIN); done once per epoch.
    async fn collect_request(self: &Arc<Self>, epoch: u64) -> Result<(), Errno> {
        if epoch != self.members.epoch() || self.placement().is_moving() {
            return Err(Errno::einval(format!(
                "collect asked at epoch {epoch}: daemon {} collects only at its settled epoch \
                 ({}{})",
                self.settings.id,
                self.members.epoch(),
                if self.placement().is_moving() {
                    ", where items still move"
                } else {
                    ""
                }
            )));
        }
        if self.members.collected() {
            return Ok(());
        }
        let left = self.left();
        if left > 0 {
            return Err(Errno::new(
                libc::EAGAIN,
                format!(
                    "daemon {} still holds {left} items to copy to their owners: collect once \
                     none is left",
                    self.settings.id
                ),
            ));
        }
        let (keys, chunks) = self.blocking_any(|st| st.collect()).await??;
        self.members.set_collected();
        self.mover.active.store(false, Ordering::Release);
        tracing::info!(
            keys,
            chunks,
            moved_bytes = self.mover.moved_bytes(),
            "move collected: what this daemon does not own any more is deleted"
        );
        Ok(())
    }

    /// Deletes here every path key and chunk this daemon does not own under the placement in
    /// force, locally only. Returns the keys and chunks deleted.
    fn collect(&self) -> Result<(u64, u64), Errno> {
        let view = self.placement().view();
        let (me, r) = (self.settings.id, self.placement().replicas());
        let mut gone_keys = Vec::new();
        self.meta.each_key(|key, record| {
            if view
                .record_owners(key, record, r)
                .is_some_and(|(owners, _)| !owners.contains(&me))
            {
                gone_keys.push(key.to_vec());
            }
            true
        })?;
        let mut keys = 0;
        for key in gone_keys {
            keys += u64::from(self.meta.drop_local(&key)?);
        }
        let mut chunks = 0;
        for (id, k) in self.chunks.held() {
            if view
                .chunk_owners(id, k, r)
                .is_some_and(|(owners, _)| !owners.contains(&me))
            {
                let _guard = self.chunks.lock(id, k);
                self.chunks.delete_locked(id, k)?;
                chunks += 1;
            }
        }
        self.meta.persist()?;
        Ok((keys, chunks))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replicate::View;

    fn membership(ids: &[u32], from: Option<Vec<u32>>, draining: Vec<u32>) -> req::Membership {
        req::Membership {
            epoch: 1,
            daemons: ids
                .iter()
                .map(|&id| req::Member {
                    id,
                    host: "h".into(),
                    addr: format!("127.0.0.1:{}", 7000 + id),
                    socket: None,
                    root: format!("/r/{id}"),
                })
                .collect(),
            draining,
            moving_from: from,
            collect: false,
        }
    }

    #[test]
    fn an_item_moves_only_to_its_owners_that_are_not_owners_now() {
        let grow = View::of(&membership(
            &[0, 1, 2, 3, 4, 5],
            Some(vec![0, 1, 2]),
            vec![],
        ));
        let (mut moved, mut stayed) = (0, 0);
        for k in 0..600 {
            for r in [1, 2] {
                let (now, new) = grow.chunk_owners(7, k, r).unwrap();
                assert_eq!(now.len(), r);
                assert!(now.iter().all(|d| *d < 3), "{now:?}");
                assert!(new.iter().all(|d| !now.contains(d) && *d >= 3), "{new:?}");
                if r == 1 {
                    if new.is_empty() {
                        stayed += 1;
                    } else {
                        moved += 1;
                    }
                }
            }
        }
        // Rendezvous hashing: about half of the items move from 3 daemons to 6.
        assert!(
            moved > 200 && stayed > 200,
            "{moved} moved, {stayed} stayed"
        );

        let shrink = View::of(&membership(
            &[0, 1, 2, 3],
            Some(vec![0, 1, 2, 3]),
            vec![2, 3],
        ));
        assert_eq!(shrink.listed, vec![0, 1, 2, 3]);
        for k in 0..100 {
            let (now, new) = shrink
                .key_owners(format!("/d\0f{k}").as_bytes(), 1)
                .unwrap();
            if now[0] < 2 {
                assert!(new.is_empty(), "an item on a member stays");
            } else {
                assert_eq!(new.len(), 1);
                assert!(new[0] < 2, "{new:?}");
            }
        }
        let settled = View::of(&membership(&[0, 1, 2, 3], None, vec![3]));
        assert!(settled.to.is_none());
        assert_eq!(settled.placed.as_ref().unwrap().ids(), &[0, 1, 2]);
        assert!(settled
            .key_owners(&eddy_proto::path::identity_key(9), 1)
            .is_none());
        // An identity record stays with the daemon its names point at while that is a
        // member, and follows its hash once that daemon is drained.
        let linked = |pointer| {
            let mut i = eddy_proto::Inode::new(eddy_proto::FileKind::File, 9, 0o644, 0, 0);
            (i.shared, i.nlink) = (Some(pointer), 2);
            i.to_record()
        };
        let key = eddy_proto::path::identity_key(9);
        // Its holder stays; its copy on the drained 2 goes to the next member round the ring.
        let (now, new) = shrink.record_owners(&key, &linked(1), 2).unwrap();
        assert_eq!((now, new), (vec![1, 2], vec![0]));
        let (now, new) = shrink.record_owners(&key, &linked(3), 1).unwrap();
        assert_eq!(now, vec![3]);
        let to = shrink.to.as_ref().unwrap();
        assert_eq!(new, vec![to.owner(eddy_placement::identity_hash(9))]);
        assert!(shrink.record_owners(&key, b"not a record", 1).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn pushes_start_no_faster_than_the_move_bandwidth() {
        let config = eddy_config::Config {
            move_bandwidth_bytes: 1 << 20,
            ..Default::default()
        };
        let mover = Mover::new(&config, true);
        assert!(mover.is_active());
        let start = Instant::now();
        for _ in 0..4 {
            mover.pace(512 << 10, false).await;
        }
        // The fourth starts once three halves of a second's bytes went (on the paused clock).
        assert!(start.elapsed() >= Duration::from_millis(1_500));
        assert_eq!(mover.moved_bytes(), 2 << 20);
        // While clients are served, at the busy rate: a quarter here.
        let config = eddy_config::Config {
            move_bandwidth_bytes: 1 << 20,
            move_busy_bandwidth_bytes: 256 << 10,
            ..Default::default()
        };
        let mover = Mover::new(&config, true);
        let start = Instant::now();
        for _ in 0..3 {
            mover.pace(256 << 10, true).await;
        }
        assert!(start.elapsed() >= Duration::from_millis(2_000));
        assert!(start.elapsed() < Duration::from_millis(3_000));
        let unbounded = Mover::new(&eddy_config::Config::default(), false);
        assert!(!unbounded.is_active());
    }
}
