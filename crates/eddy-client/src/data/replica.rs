//! Copies on several daemons (decision 0020): with `replicas` R > 1 every metadata record
//! and chunk lives on the first R owners of the placement order. Which daemons hold an item
//! (ranked, the ones believed down last), the down marks and the plain failover are the rpc
//! layer's (`eddy_rpc::Daemons`); this module holds what the POSIX client adds: the
//! refinement of an exclusive create that a lost copy may have applied, the writes to every
//! copy (one payload, checksummed once) and their settlement with hints for the copies that
//! missed them, and reads failing over to the next copy.
//!
//! A daemon answering with an error is an answer (EEXIST is EEXIST on every copy); a daemon
//! that cannot be reached means "try the next copy". Reads fail over on EIO too (a copy
//! with a damaged chunk answers EIO: the next copy may have it whole). With R = 1 nothing
//! here is used: every call goes to the one owner, as it always did.

use crate::data::Data;
use crate::integrity;
use crate::layout::{self, Batch, Span};
use crate::Errno;
use eddy_proto::req;
use eddy_rpc::{Daemons, Failure};
use futures::future::join_all;
use std::collections::{BTreeMap, BTreeSet, HashMap};

impl Data<'_> {
    /// The requests that put `len` bytes of a file at `offset` on every copy: one group per
    /// daemon holding any of the chunks (with R = 1, the owner's groups as always).
    pub(crate) fn write_batches(&self, file_id: u128, offset: u64, len: usize) -> Vec<Batch> {
        let cfg = self.config();
        let max = cfg.max_rpc_data_bytes as usize;
        if self.replicas() == 1 {
            return layout::batches(
                self.rpc().placement(),
                file_id,
                offset,
                len,
                cfg.chunk_size,
                max,
            );
        }
        layout::batches_to(
            layout::pieces(offset, len, cfg.chunk_size),
            |s| self.rpc().chunk_owners(file_id, s.piece.chunk),
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
                let owners = self.rpc().chunk_owners(file_id, s.piece.chunk);
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
                    .rpc()
                    .ranked(self.rpc().chunk_owners(file_id, k))
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
            if let Err(e) = self.rpc().try_call(holder, req).await {
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
                    self.rpc()
                        .ranked(self.rpc().chunk_owners(file_id, s.piece.chunk)),
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
                    let reply = self.rpc().try_call(b.daemon, req).await?;
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
                if !Daemons::worth_another_copy(&failure, true) {
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
