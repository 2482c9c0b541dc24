//! Copies on several daemons (decision 0020): with `replicas` R > 1 every metadata record
//! and chunk lives on the first R owners of the placement order. This module holds what the
//! fan-out needs in one place: which daemons hold an item (ranked, the ones believed down
//! last), the marks of daemons found unreachable (kept `down_hold_ms`, so that later calls
//! go to the next copy at once), and the failover of a request to the copies in turn.
//!
//! A daemon answering with an error is an answer (EEXIST is EEXIST on every copy); a daemon
//! that cannot be reached means "try the next copy". Reads fail over on EIO too (a copy
//! with a damaged chunk answers EIO: the next copy may have it whole). With R = 1 nothing
//! here is used: every call goes to the one owner, as it always did.

use crate::conn::Failure;
use crate::integrity;
use crate::layout::{self, Batch, Span};
use crate::{Client, Errno};
use eddy_placement::{chunk_hash, path_hash};
use eddy_proto::{req, typed_reply, Reply, Request, Rpc};
use futures::future::join_all;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Daemons found unreachable, until when they are treated as down.
pub(crate) struct Down {
    until: Mutex<HashMap<u32, Instant>>,
    hold: Duration,
}

impl Down {
    pub fn new(hold: Duration) -> Down {
        Down {
            until: Mutex::new(HashMap::new()),
            hold,
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Instant>> {
        eddy_proto::sync::lock(&self.until)
    }

    pub fn is_down(&self, id: u32) -> bool {
        let mut m = self.map();
        match m.get(&id) {
            Some(&t) if t > Instant::now() => true,
            Some(_) => {
                m.remove(&id);
                false
            }
            None => false,
        }
    }

    pub fn mark(&self, id: u32) {
        self.map().insert(id, Instant::now() + self.hold);
    }

    pub fn clear(&self, id: u32) {
        let mut m = self.map();
        if !m.is_empty() {
            m.remove(&id);
        }
    }
}

impl Client {
    /// Copies of everything (the deployment's `replicas`).
    pub fn replicas(&self) -> usize {
        self.config().replicas.max(1)
    }

    /// Whether this client found `daemon` unreachable lately (only tracked with R > 1).
    pub fn is_down(&self, daemon: u32) -> bool {
        self.0.down.is_down(daemon)
    }

    /// Forgets that `daemon` was found unreachable (it told the caller it is up again).
    pub fn mark_up(&self, daemon: u32) {
        self.0.down.clear(daemon);
    }

    /// Sends one request to one daemon, telling an error answer apart from an unreachable
    /// daemon: for peers (a daemon forwarding copies) and tools.
    pub async fn call_daemon<R: Rpc>(&self, daemon: u32, req: R) -> Result<R::Reply, Failure> {
        self.try_call_as(daemon, req).await
    }

    /// `call_daemon` for a request as it travels (kept by the caller, e.g. to be sent
    /// again), answered with the reply as it came.
    pub async fn call_daemon_raw(&self, daemon: u32, req: &Request) -> Result<Reply, Failure> {
        self.try_call(daemon, req).await.map(|(r, _)| r)
    }

    /// `owners` with the daemons believed down moved to the end (order kept otherwise).
    pub(crate) fn ranked(&self, mut owners: Vec<u32>) -> Vec<u32> {
        if owners.len() > 1 {
            owners.sort_by_key(|&d| self.0.down.is_down(d));
        }
        owners
    }

    /// The R owners of a path's metadata, the ones believed down last.
    pub(crate) fn meta_owners(&self, path: &str) -> Vec<u32> {
        let r = self.replicas();
        if r == 1 {
            return vec![self.0.placement.meta_owner(path)];
        }
        self.ranked(self.0.placement.owners(path_hash(path), r))
    }

    /// The R owners of chunk `k` of a file, in placement order.
    pub(crate) fn chunk_owners(&self, file_id: u128, k: u64) -> Vec<u32> {
        let r = self.replicas();
        if r == 1 {
            return vec![self.0.placement.chunk_owner(file_id, k)];
        }
        self.0.placement.owners(chunk_hash(file_id, k), r)
    }

    /// The daemons holding the identity record of a shared file that `daemon` holds: it,
    /// then its R-1 successors in id order (the ring), the ones believed down last.
    pub(crate) fn identity_holders(&self, daemon: u32) -> Vec<u32> {
        let r = self.replicas();
        if r == 1 {
            return vec![daemon];
        }
        let ids = self.0.placement.ids();
        let start = ids.iter().position(|&d| d == daemon).unwrap_or(0);
        let ring = (0..r.min(ids.len())).map(|i| ids[(start + i) % ids.len()]);
        self.ranked(ring.collect())
    }

    /// Sends `req` to the first of `targets` that can be reached; an answer (error or not)
    /// from any of them is the result.
    pub(crate) async fn failover_as<R: Rpc>(
        &self,
        targets: &[u32],
        req: R,
    ) -> Result<R::Reply, Errno> {
        typed_reply::<R>(self.failover(targets, &req.into()).await?)
    }

    /// `failover_as` for a request as it travels, answered with the reply as it came.
    pub(crate) async fn failover(&self, targets: &[u32], req: &Request) -> Result<Reply, Errno> {
        let mut last = None;
        for &d in targets {
            match self.try_call(d, req).await {
                Ok((reply, _)) => return Ok(reply),
                Err(Failure::Unreachable(e)) => last = Some(e),
                Err(Failure::Daemon(e)) if last.is_some() && e.errno == libc::EEXIST => {
                    return self.created_before(d, req).await.ok_or(e);
                }
                Err(Failure::Daemon(e)) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Errno::eio("no daemon to send the request to")))
    }

    /// An exclusive create that a copy lost on the way may have applied (and passed on)
    /// before it died: the entry is ours when it carries our file id.
    async fn created_before(&self, daemon: u32, req: &Request) -> Option<Reply> {
        let Request::Create(req::Create {
            path,
            inode,
            exclusive: true,
        }) = req
        else {
            return None;
        };
        let stat = req::Stat { path: path.clone() };
        match self.try_call_as(daemon, stat).await {
            Ok(i) if i.file_id == inode.file_id => Some(Reply::Inode(i)),
            _ => None,
        }
    }

    /// Notes the outcome of a call for the down marks (only with R > 1).
    pub(crate) fn note_outcome<T>(&self, daemon: u32, r: &Result<T, Failure>) {
        if self.replicas() == 1 {
            return;
        }
        match r {
            Err(Failure::Unreachable(_)) => self.0.down.mark(daemon),
            _ => self.0.down.clear(daemon),
        }
    }

    /// Whether a failed call to one copy should be tried on the next: unreachable, or (for
    /// reads) EIO from the daemon.
    pub(crate) fn worth_another_copy(f: &Failure, read: bool) -> bool {
        match f {
            Failure::Unreachable(_) => true,
            Failure::Daemon(e) => read && e.errno == libc::EIO,
        }
    }
}

impl Client {
    /// The requests that put `len` bytes of a file at `offset` on every copy: one group per
    /// daemon holding any of the chunks (with R = 1, the owner's groups as always).
    pub(crate) fn write_batches(&self, file_id: u128, offset: u64, len: usize) -> Vec<Batch> {
        let cfg = self.config();
        let max = cfg.max_rpc_data_bytes as usize;
        if self.replicas() == 1 {
            return layout::batches(&self.0.placement, file_id, offset, len, cfg.chunk_size, max);
        }
        layout::batches_to(
            layout::pieces(offset, len, cfg.chunk_size),
            |s| self.chunk_owners(file_id, s.piece.chunk),
            max,
        )
    }

    /// The payload and checksums of each write batch (`write_batches`) of `data`. With R
    /// copies every byte is in R batches: it is copied once and checksummed once (each
    /// piece's checksums computed once; a batch whose pieces lie back to back in `data`
    /// shares its bytes).
    pub(crate) fn write_payloads(
        &self,
        batches: &[Batch],
        data: &[u8],
    ) -> Vec<(bytes::Bytes, Vec<u32>)> {
        let cfg = self.config();
        let gather = |b: &Batch| {
            let mut buf = Vec::with_capacity(b.bytes);
            for s in &b.spans {
                buf.extend_from_slice(&data[s.buf_pos..s.buf_pos + s.piece.len as usize]);
            }
            buf
        };
        if self.replicas() == 1 {
            return batches
                .iter()
                .map(|b| {
                    let buf = gather(b);
                    let pieces: Vec<eddy_proto::Piece> = b.spans.iter().map(|s| s.piece).collect();
                    let sums = integrity::write_sums(cfg, &pieces, &buf);
                    (buf.into(), sums)
                })
                .collect();
        }
        let shared = bytes::Bytes::copy_from_slice(data);
        let mut sums_at: HashMap<usize, Vec<u32>> = HashMap::new();
        batches
            .iter()
            .map(|b| {
                let mut sums = Vec::new();
                for s in &b.spans {
                    let span = &data[s.buf_pos..s.buf_pos + s.piece.len as usize];
                    let own = sums_at
                        .entry(s.buf_pos)
                        .or_insert_with(|| integrity::write_sums(cfg, &[s.piece], span));
                    sums.extend_from_slice(own);
                }
                let start = b.spans.first().map_or(0, |s| s.buf_pos);
                let back_to_back = b.spans.iter().try_fold(start, |pos, s| {
                    (s.buf_pos == pos).then_some(pos + s.piece.len as usize)
                });
                let payload = match back_to_back {
                    Some(end) => shared.slice(start..end),
                    None => gather(b).into(),
                };
                (payload, sums)
            })
            .collect()
    }

    /// The outcome of a write sent as `write_batches` cut it: every copy that could be
    /// reached must have taken it, and each chunk at least one copy; the owners that missed
    /// it are told to an owner that took it (`hint_missed`) before the write is acknowledged.
    /// With R = 1 the first failure is the result, as always.
    pub(crate) async fn settle_writes(
        &self,
        file_id: u128,
        batches: &[Batch],
        results: Vec<Result<(), Failure>>,
    ) -> Result<(), Errno> {
        if self.replicas() == 1 {
            return results
                .into_iter()
                .try_for_each(|r| r.map_err(Failure::into_errno));
        }
        let mut missed: HashMap<u32, Errno> = HashMap::new();
        for (b, r) in batches.iter().zip(results) {
            match r {
                Ok(()) => {}
                Err(Failure::Unreachable(e)) => {
                    missed.entry(b.daemon).or_insert(e);
                }
                Err(Failure::Daemon(e)) => return Err(e),
            }
        }
        if missed.is_empty() {
            return Ok(());
        }
        let mut chunks: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
        for b in batches.iter().filter(|b| missed.contains_key(&b.daemon)) {
            for s in &b.spans {
                let owners = self.chunk_owners(file_id, s.piece.chunk);
                if owners.iter().all(|d| missed.contains_key(d)) {
                    let e = missed
                        .remove(&b.daemon)
                        .unwrap_or_else(|| Errno::eio("lost"));
                    return Err(Errno::eio(format!(
                        "no copy of chunk {} could be written (all {} owners unreachable): {e}",
                        s.piece.chunk,
                        owners.len()
                    )));
                }
                chunks.entry(b.daemon).or_default().insert(s.piece.chunk);
            }
        }
        self.hint_missed(file_id, chunks).await;
        Ok(())
    }

    /// Tells, for each chunk an owner missed (it could not be reached), another owner
    /// that took the change: that one records a hint and pushes the chunk to the owner that
    /// missed it once it can be reached (decision 0021). A hint that cannot be delivered is
    /// logged (`eddy repair --full` finds the item anyway).
    pub(crate) async fn hint_missed(&self, file_id: u128, missed: BTreeMap<u32, BTreeSet<u64>>) {
        let per_request = (self.config().max_rpc_data_bytes as usize / 8).max(1);
        let mut groups: BTreeMap<(u32, u32), Vec<u64>> = BTreeMap::new();
        for (&target, chunks) in &missed {
            for &k in chunks {
                let holder = self
                    .ranked(self.chunk_owners(file_id, k))
                    .into_iter()
                    .find(|d| !missed.contains_key(d));
                if let Some(h) = holder {
                    groups.entry((h, target)).or_default().push(k);
                }
            }
        }
        let calls = groups.into_iter().flat_map(|((holder, target), ks)| {
            ks.chunks(per_request)
                .map(|c| (holder, target, c.to_vec()))
                .collect::<Vec<_>>()
        });
        let sends = calls.map(|(holder, target, chunks)| async move {
            let n = chunks.len();
            let req = req::Hint {
                target,
                file_id,
                chunks,
            };
            if let Err(e) = self.try_call_as(holder, req).await {
                tracing::warn!(
                    holder,
                    target,
                    chunks = n,
                    "cannot record that daemon {target} missed chunks of file {file_id:032x}: {}",
                    e.errno()
                );
            }
        });
        join_all(sends).await;
    }

    /// Reads `spans` of a file into `out` (at each span's buffer position) from the first
    /// copy of each chunk that answers, failing over to the next copy on an unreachable
    /// daemon or EIO. Used with R > 1.
    pub(crate) async fn read_copies(
        &self,
        file_id: u128,
        path: &str,
        backing: Option<eddy_proto::Backing>,
        spans: Vec<Span>,
        out: &mut [u8],
    ) -> Result<(), Errno> {
        let max = self.config().max_rpc_data_bytes as usize;
        let mut left: HashMap<usize, Vec<u32>> = spans
            .iter()
            .map(|s| {
                (
                    s.buf_pos,
                    self.ranked(self.chunk_owners(file_id, s.piece.chunk)),
                )
            })
            .collect();
        let mut todo = spans;
        // Copies that answered with damaged stored data: rewritten from a good copy.
        let mut damaged: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
        while !todo.is_empty() {
            let batches = layout::batches_to(
                todo.drain(..),
                |s| {
                    left.get(&s.buf_pos)
                        .and_then(|o| o.first())
                        .copied()
                        .into_iter()
                        .collect()
                },
                max,
            );
            let cfg = self.config();
            let reads = batches.iter().map(|b| {
                let pieces: Vec<eddy_proto::Piece> = b.spans.iter().map(|s| s.piece).collect();
                let req = req::Read {
                    file_id,
                    pieces: pieces.clone(),
                    backing: backing.clone(),
                };
                async move {
                    let reply = self.try_call_as(b.daemon, req).await?;
                    // Damaged on the wire or on the daemon's disk: EIO, and the next copy.
                    integrity::read_reply(cfg, reply, &pieces, path, b.daemon)
                        .map_err(Failure::Daemon)
                }
            });
            for (b, r) in batches.iter().zip(join_all(reads).await) {
                let failure = match r {
                    Ok(data) if data.len() == b.bytes => {
                        let mut pos = 0;
                        for s in &b.spans {
                            let n = s.piece.len as usize;
                            out[s.buf_pos..s.buf_pos + n].copy_from_slice(&data[pos..pos + n]);
                            pos += n;
                        }
                        continue;
                    }
                    Ok(data) => Failure::Daemon(Errno::eio(format!(
                        "daemon {} returned {} bytes, expected {}",
                        b.daemon,
                        data.len(),
                        b.bytes
                    ))),
                    Err(f) => f,
                };
                let last = |f: Failure| integrity::read_error(f.into_errno(), path);
                if !Client::worth_another_copy(&failure, true) {
                    return Err(last(failure));
                }
                if integrity::is_damage(&failure) {
                    let chunks = damaged.entry(b.daemon).or_default();
                    chunks.extend(b.spans.iter().map(|s| s.piece.chunk));
                }
                for s in &b.spans {
                    let owners = left.entry(s.buf_pos).or_default();
                    owners.retain(|&d| d != b.daemon);
                    if owners.is_empty() {
                        return Err(last(failure));
                    }
                    tracing::debug!(
                        daemon = b.daemon,
                        "read failed over to the next copy: {}",
                        failure.errno()
                    );
                    todo.push(*s);
                }
            }
        }
        if !damaged.is_empty() {
            // Read repair (decision 0021): an owner that gave the good bytes is told the
            // damaged copies, and its repair loop rewrites them whole.
            self.hint_missed(file_id, damaged).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_expire() {
        let d = Down::new(Duration::from_millis(30));
        assert!(!d.is_down(1));
        d.mark(1);
        assert!(d.is_down(1) && !d.is_down(2));
        std::thread::sleep(Duration::from_millis(40));
        assert!(!d.is_down(1));
        d.mark(2);
        d.clear(2);
        assert!(!d.is_down(2));
    }
}
