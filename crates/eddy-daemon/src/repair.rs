//! Repair (decision 0021): with `replicas` R > 1 a daemon keeps hints (`hints.rs`) for the
//! items another owner missed, and pushes them: a metadata key as its current state
//! (`Request::Replicate`), a chunk as its whole current content (`Request::PutChunk`). The
//! target replies with the digest of what it holds afterwards; the pusher compares it with
//! the digest of its own copy, read after the reply: equal, the hint goes; different (a
//! change landed on one copy only meanwhile), the item is pushed again next round.
//!
//! A loop pushes every `repair_interval_ms` while hints are held (a target that cannot be
//! reached is skipped for the round at its first failure). A daemon that starts on a
//! store it used before (or with `--rejoin`) is *rejoining*: it serves peers but answers
//! clients `EHOSTDOWN` (taken for a daemon down), asks every peer to push its hints for it
//! now (`RepairFor`, with `--full` a scan of everything they hold first), and becomes ready
//! once a round pushes nothing or makes no progress.
//!
//! With one copy the hints and the loop exist too, for a move's copies (decision 0081,
//! `moving.rs`); what replication asks of repair (`RepairFor`, `Repair`, `Hint`, rejoining)
//! still needs R > 1.

use crate::hints::{Hints, Item};
use crate::replicate::Replicator;
use crate::state::State;
use eddy_proto::repair::{digest, verdict, Digest, Verdict};
use eddy_proto::sync::lock;
use eddy_proto::{req, Errno};
use eddy_rpc::{Daemons, Failure};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Rounds of `RepairFor` in a row that leave no fewer hints for a rejoining daemon before
/// it stops waiting and serves (what is left is pushed by the peers' loops).
const REJOIN_STALLS: u32 = 3;

/// The repair side of a daemon (hints and pushes; rejoining with R > 1).
pub struct Repair {
    pub hints: Hints,
    rejoining: AtomicBool,
    wake: tokio::sync::Notify,
    /// One push at a time per target (the loop and a `RepairFor` may meet).
    pushing: Mutex<HashMap<u32, Arc<tokio::sync::Mutex<()>>>>,
}

impl Repair {
    pub fn new(hints: Hints, rejoining: bool) -> Repair {
        Repair {
            hints,
            rejoining: AtomicBool::new(rejoining),
            wake: tokio::sync::Notify::new(),
            pushing: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the daemon is still taking the changes it missed.
    pub fn is_rejoining(&self) -> bool {
        self.rejoining.load(Ordering::Acquire)
    }

    /// Makes the loop push now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    fn target_lock(&self, target: u32) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = lock(&self.pushing);
        Arc::clone(m.entry(target).or_default())
    }
}

/// Why a push to a target stopped before its hints were done: its answer does not match
/// what was pushed.
fn mismatched(target: u32, what: &str, sent: usize, got: usize) -> Failure {
    Failure::Daemon(Errno::eio(format!(
        "daemon {target} answered a {what} push of {sent} items with {got} digests"
    )))
}

impl State {
    /// Pushes the hints held for `target`, page after page, until none is left, the target
    /// fails (returned), or `until` passes. Returns the items verified on the target.
    pub(crate) async fn push_hints(
        self: &Arc<Self>,
        target: u32,
        until: Option<Instant>,
    ) -> Result<u64, Failure> {
        let Some(repair) = self.repair() else {
            return Ok(0);
        };
        let replicator = self.placement();
        let lock = repair.target_lock(target);
        // A push bounded in time (`RepairFor`) waits for one under way (the loop's) only
        // as long as it may run: that one makes the progress meanwhile.
        let _pushing = match until {
            Some(t) => match tokio::time::timeout_at(t.into(), lock.lock()).await {
                Ok(guard) => guard,
                Err(_) => return Ok(0),
            },
            None => lock.lock().await,
        };
        let Some(peers) = replicator.peers(true) else {
            return Err(Failure::Unreachable(Errno::eio(
                "the other daemons are not known yet (no deployment file)",
            )));
        };
        let batch = self.settings.config.repair_batch_items as usize;
        let (mut after, mut verified) = (None, 0u64);
        loop {
            if until.is_some_and(|t| Instant::now() >= t) {
                return Ok(verified);
            }
            // Taken before anything is read: a hint renewed after it is pushed again.
            let mark = repair.hints.mark();
            let page = repair
                .hints
                .page(target, after.as_ref(), batch)
                .map_err(Failure::Daemon)?;
            let Some(last) = page.last() else {
                return Ok(verified);
            };
            after = Some(last.clone());
            let (mut keys, mut chunks) = (Vec::new(), Vec::new());
            for item in page {
                match item {
                    Item::Key(k) => keys.push(k),
                    Item::Chunk(id, k) => chunks.push((id, k)),
                }
            }
            if !keys.is_empty() {
                verified += self.push_keys(&peers, target, keys, mark).await?;
            }
            let pushes = chunks
                .into_iter()
                .map(|(id, k)| self.push_chunk(&peers, target, id, k, mark));
            for r in futures::future::join_all(pushes).await {
                verified += u64::from(r?);
            }
        }
    }

    /// Pushes metadata keys in one `Replicate`; returns how many verified (their hints
    /// dropped unless renewed after `mark`).
    async fn push_keys(
        self: &Arc<Self>,
        peers: &Daemons,
        target: u32,
        keys: Vec<Vec<u8>>,
        mark: u64,
    ) -> Result<u64, Failure> {
        let Some(repair) = self.repair() else {
            return Ok(0);
        };
        let states = self
            .meta
            .key_states(keys.clone())
            .map_err(Failure::Daemon)?;
        let req = req::Replicate { changes: states };
        let theirs = peers.try_call(target, req).await?;
        if theirs.len() != keys.len() {
            return Err(mismatched(target, "metadata", keys.len(), theirs.len()));
        }
        let mine = self.meta.key_states(keys).map_err(Failure::Daemon)?;
        let mut verified = 0;
        for (state, theirs) in mine.into_iter().zip(theirs) {
            if verdict(theirs, digest(state.value.as_deref())) == Verdict::Same {
                repair
                    .hints
                    .done(target, &Item::Key(state.key), mark)
                    .map_err(Failure::Daemon)?;
                verified += 1;
            }
        }
        Ok(verified)
    }

    /// Pushes one chunk whole (`PutChunk`); returns whether it verified (its hint dropped
    /// unless renewed after `mark`).
    async fn push_chunk(
        self: &Arc<Self>,
        peers: &Daemons,
        target: u32,
        id: eddy_proto::FileId,
        k: u64,
        mark: u64,
    ) -> Result<bool, Failure> {
        let Some(repair) = self.repair() else {
            return Ok(false);
        };
        let data = match self.blocking_any(move |st| st.chunks.whole(id, k)).await {
            Ok(Ok(d)) => d,
            // This copy is damaged (or unreadable): the hint stays, the next copy may help.
            Ok(Err(e)) | Err(e) => {
                tracing::warn!(
                    daemon = target,
                    "cannot read chunk {k} of file {id:032x} to repair it: {e}"
                );
                return Ok(false);
            }
        };
        let sums = match (&data, self.chunks.checksum_block()) {
            (Some(d), Some(block)) => {
                let len = u32::try_from(d.len()).unwrap_or(u32::MAX);
                let p = eddy_proto::Piece {
                    chunk: k,
                    offset: 0,
                    len,
                };
                eddy_proto::checksum::sums(&[p], d, block)
            }
            _ => Vec::new(),
        };
        // A move's pushes are paced (`move_bandwidth_bytes`, `move_busy_bandwidth_bytes`
        // while they yield to clients) and counted.
        if self.mover.is_active() {
            let len = data.as_ref().map_or(0, |d| d.len() as u64);
            self.mover.pace(len, self.move_yields()).await;
        }
        let req = req::PutChunk {
            file_id: id,
            chunk: k,
            present: data.is_some(),
            sums,
            data: data.unwrap_or_default().into(),
        };
        let theirs = match peers.try_call(target, req).await?.as_slice() {
            &[d] => d,
            other => return Err(mismatched(target, "chunk", 1, other.len())),
        };
        let mine: Digest = match self.blocking_any(move |st| st.chunks.whole(id, k)).await {
            Ok(Ok(d)) => digest(d.as_deref()),
            Ok(Err(_)) | Err(_) => return Ok(false),
        };
        if verdict(theirs, mine) == Verdict::Differs {
            return Ok(false);
        }
        repair
            .hints
            .done(target, &Item::Chunk(id, k), mark)
            .map_err(Failure::Daemon)?;
        Ok(true)
    }

    /// Records a hint for every item held here that another owner should hold (`only`:
    /// that owner alone): a full resync. Returns the hints recorded (existing ones included).
    pub(crate) fn hint_everything(&self, only: Option<u32>) -> Result<u64, Errno> {
        let (Some(repair), Some(replicator)) = (self.copies_repair(), self.replicator()) else {
            return Ok(0);
        };
        let wanted = |t: &u32| only.is_none_or(|o| o == *t);
        let mut per_target: HashMap<u32, Vec<Item>> = HashMap::new();
        self.meta.each_key(|key, record| {
            for t in replicator
                .targets(key, Some(record))
                .into_iter()
                .filter(wanted)
            {
                per_target
                    .entry(t)
                    .or_default()
                    .push(Item::Key(key.to_vec()));
            }
            true
        })?;
        for (id, k) in self.chunks.held() {
            for t in replicator.chunk_targets(id, k).into_iter().filter(wanted) {
                per_target.entry(t).or_default().push(Item::Chunk(id, k));
            }
        }
        let mut n = 0;
        for (t, items) in per_target {
            n += items.len() as u64;
            repair.hints.add(t, items)?;
        }
        Ok(n)
    }

    /// `RepairFor`: pushes the hints for `target` now (after a full scan for it with
    /// `full`), for up to half the RPC deadline; replies the hints still held for it.
    pub(crate) async fn repair_for(
        self: &Arc<Self>,
        target: u32,
        full: bool,
    ) -> Result<u64, Errno> {
        let Some(repair) = self.copies_repair() else {
            return Err(Errno::einval(
                "repair needs replicas > 1 and the other daemons known",
            ));
        };
        if target == self.settings.id || !self.is_member(target) {
            return Err(Errno::einval(format!(
                "daemon {target} is not a peer of this daemon"
            )));
        }
        // The daemon asking is up again: changes go to it from now on, not only as hints
        // (a down mark from before its restart would hold them back a while).
        if let Some(peers) = self.replicator().and_then(|r| r.peers(false)) {
            peers.mark_up(target);
        }
        if full {
            let n = self
                .blocking_any(move |st| st.hint_everything(Some(target)))
                .await??;
            tracing::info!(
                daemon = target,
                items = n,
                "full resync: every item it owns is hinted"
            );
        }
        let budget = Duration::from_millis(self.settings.config.rpc_timeout_ms / 2);
        if let Err(e) = self.push_hints(target, Some(Instant::now() + budget)).await {
            tracing::info!(daemon = target, "repair push stopped: {}", e.errno());
        }
        Ok(repair.hints.count_for(target))
    }

    /// `Repair`: wakes the loop, after a full scan for every other owner with `full`.
    pub(crate) async fn repair_all(self: &Arc<Self>, full: bool) -> Result<(), Errno> {
        let Some(repair) = self.copies_repair() else {
            return Err(Errno::einval(
                "repair needs replicas > 1 and the other daemons known",
            ));
        };
        if full {
            let n = self.blocking_any(|st| st.hint_everything(None)).await??;
            tracing::info!(
                items = n,
                "full resync: every item is hinted for its other owners"
            );
        }
        repair.wake();
        Ok(())
    }

    /// `Hint`: chunks a client could not write to `target`.
    pub(crate) fn add_chunk_hints(
        &self,
        target: u32,
        file_id: eddy_proto::FileId,
        chunks: &[u64],
    ) -> Result<(), Errno> {
        let Some(repair) = self.copies_repair() else {
            return Err(Errno::einval(
                "hints need replicas > 1 and the other daemons known",
            ));
        };
        if target == self.settings.id || !self.is_member(target) {
            return Err(Errno::einval(format!(
                "daemon {target} is not a peer of this daemon"
            )));
        }
        repair
            .hints
            .add(target, chunks.iter().map(|&k| Item::Chunk(file_id, k)))
    }

    fn is_member(&self, id: u32) -> bool {
        self.replicator().is_some_and(|r| r.members().contains(&id))
    }
}

/// The repair loop: every `repair_interval_ms` (or when woken) pushes the hints held to
/// every target that can be reached.
pub(crate) async fn repair_loop(state: Arc<State>) {
    let Some(repair) = state.repair() else {
        return;
    };
    let interval = Duration::from_millis(state.settings.config.repair_interval_ms);
    let mut stop = state.shutdown.subscribe();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(interval) => {}
            _ = repair.wake.notified() => {}
        }
        for (target, held) in repair.hints.per_target() {
            match state.push_hints(target, None).await {
                Ok(n) => tracing::debug!(daemon = target, held, verified = n, "repair round"),
                Err(e) => tracing::debug!(daemon = target, held, "repair waits: {}", e.errno()),
            }
        }
    }
}

/// Rejoining: asks every peer to push what this daemon missed until a round leaves
/// nothing (or stops making progress), then serves clients.
pub(crate) async fn rejoin(state: Arc<State>, full: bool) {
    let (Some(repair), Some(replicator)) = (state.copies_repair(), state.replicator()) else {
        return;
    };
    let me = state.settings.id;
    let peers: Vec<u32> = replicator
        .members()
        .iter()
        .copied()
        .filter(|&d| d != me)
        .collect();
    // Peers that still have to scan everything for this daemon (a replacement).
    let mut to_scan: Vec<u32> = if full { peers.clone() } else { Vec::new() };
    let (mut best, mut stalls) = (u64::MAX, 0u32);
    tracing::info!(
        full,
        "rejoining: taking the changes missed from the other daemons"
    );
    // First what this daemon holds for the others (recorded before it stopped: when the
    // whole deployment restarts, another daemon may already serve without them), each push
    // bounded, those that cannot be reached left to the loop.
    let budget = Duration::from_millis(state.settings.config.rpc_timeout_ms / 2);
    let pushes = peers
        .iter()
        .map(|&p| state.push_hints(p, Some(Instant::now() + budget)));
    futures::future::join_all(pushes).await;
    loop {
        let Some(daemons) = replicator.peers(true) else {
            // The deployment file is not written yet (`eddy start` writes it once every
            // daemon listens): a round without progress.
            stalls += 1;
            if stalls >= REJOIN_STALLS {
                tracing::warn!("rejoin: the other daemons are not known: serving");
                break;
            }
            tokio::time::sleep(Duration::from_millis(
                state.settings.config.repair_interval_ms,
            ))
            .await;
            continue;
        };
        let calls = peers.iter().map(|&p| {
            let req = req::RepairFor {
                target: me,
                full: to_scan.contains(&p),
            };
            let daemons = daemons.clone();
            async move { (p, daemons.try_call(p, req).await) }
        });
        let (mut left, mut answered) = (0u64, 0usize);
        for (p, r) in futures::future::join_all(calls).await {
            match r {
                Ok(n) => {
                    to_scan.retain(|&d| d != p);
                    left += n;
                    answered += 1;
                }
                // Down (or restarting too): skipped; its hints come with its loop.
                Err(e) => tracing::info!(daemon = p, "rejoin: peer skipped: {}", e.errno()),
            }
        }
        if answered > 0 && left == 0 && to_scan.is_empty() {
            break;
        }
        if answered > 0 && left < best {
            (best, stalls) = (left, 0);
            continue;
        }
        // No peer answered (all restarting?) or no progress: wait a round, a few times.
        stalls += 1;
        if stalls >= REJOIN_STALLS {
            tracing::warn!(
                left,
                answered,
                "rejoin makes no progress: serving; the peers push the rest"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(
            state.settings.config.repair_interval_ms,
        ))
        .await;
    }
    // What the others held for this daemon is here now: a change of this daemon's that may
    // never have left (decision 0080) goes to the key's other owners as a hint.
    hint_leftover_changes(&state, repair, replicator);
    repair.rejoining.store(false, Ordering::Release);
    tracing::info!("rejoined: serving clients");
}

/// Each key marked pending before this process (changed here, maybe never sent to its
/// other owners: decision 0080) becomes a hint for those owners, then is unmarked; a key
/// whose hints cannot be recorded stays marked.
fn hint_leftover_changes(state: &State, repair: &Repair, replicator: &Replicator) {
    let pending = state.meta.pending();
    let keys = match pending.leftover() {
        Ok(keys) => keys,
        Err(e) => {
            tracing::warn!("cannot read the changes left pending: {e}");
            return;
        }
    };
    if keys.is_empty() {
        return;
    }
    tracing::info!(
        keys = keys.len(),
        "changes this daemon made before it stopped go to their other owners"
    );
    let states = match state.meta.key_states(keys) {
        Ok(states) => states,
        Err(e) => {
            tracing::warn!("cannot read the changes left pending: {e}");
            return;
        }
    };
    for eddy_proto::KeyState { key, value } in states {
        let hinted = replicator
            .targets(&key, value.as_deref())
            .into_iter()
            .try_for_each(|t| repair.hints.add(t, [Item::Key(key.clone())]));
        if let Err(e) = hinted.and_then(|()| pending.forget(&key)) {
            tracing::warn!("cannot pass on a change left pending: {e}");
        }
    }
    repair.wake();
}
