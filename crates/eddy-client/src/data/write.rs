//! Writes to open files: the range split by chunk into one request per daemon holding any
//! of its chunks (on every copy with R > 1, one payload checksummed once), all sent at once,
//! direct to a local data file where a lease allows it (decision 0048); O_APPEND's offset
//! reserved at the owner first; the outcome settled, with hints for the copies that missed
//! it, before the write is acknowledged; the size the write reached left to the size cache.

use crate::data::Data;
use crate::layout::{self, Batch};
use crate::{integrity, size, Errno, Failure, File};
use eddy_proto::{req, Request};
use futures::future::join_all;
use std::collections::{BTreeMap, BTreeSet, HashMap};

impl Data<'_> {
    /// Writes `data` at `offset` (at the end, reserved atomically, with O_APPEND). The size
    /// update follows the data RPCs once they are acknowledged (another client that sees the
    /// size finds the bytes); writers never wait on each other's data.
    /// The first write through a handle opened by a caller other than root clears the file's
    /// set-id bits (set-group-ID only with group execute), as POSIX allows and Linux does.
    pub async fn pwrite(&self, f: &File, offset: u64, data: &[u8]) -> Result<usize, Errno> {
        self.pwrite_clearing(f, offset, data, !f.0.creds.keeps_setid())
            .await
    }

    /// `pwrite`, where the caller says whether the write clears the file's set-id bits: a
    /// kernel knows the writing process's privilege (through FUSE: FUSE_WRITE_KILL_SUIDGID).
    pub async fn pwrite_clearing(
        &self,
        f: &File,
        offset: u64,
        data: &[u8],
        clear_setid: bool,
    ) -> Result<usize, Errno> {
        if !f.writable() {
            return Err(Errno::new(
                libc::EBADF,
                format!("{} is not open for writing", f.path()),
            ));
        }
        if data.is_empty() {
            return Ok(0);
        }
        let offset = if f.append() {
            self.ns().reserve_append(f, data.len() as u64).await?
        } else {
            offset
        };
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(|| Errno::new(libc::EFBIG, "write beyond the largest file size"))?;
        let hint = self.write_hint(f, offset, data.len());
        let ns = self.ns();
        let cleared = ns.clear_setid_on_write(f, clear_setid);
        // Refused for this client's membership epoch, no copy took it: the owners are
        // computed again from the view that follows the hosts file (decision 0081).
        let placed = self
            .rpc()
            .retry_moved(|| self.write_placed(f, offset, data, hint));
        let (placed, cleared) = futures::join!(placed, cleared);
        placed?;
        // The size this write reached goes to the owner once its data is stored, now or
        // later in a batch (see `size`): another client that sees the size finds the bytes
        // (a size published beside the data could be read before them, as zeros: a torn
        // read; decision 0003). O_APPEND reserved its range, and so the size, already.
        let plan = if f.append() {
            size::Plan::Wait
        } else {
            self.0.sizes.record(f.file_id(), &f.path(), end)
        };
        match plan {
            size::Plan::Now(size) => self.ns().send_size(f.file_id(), &f.path(), size).await?,
            size::Plan::Arm(delay) => self.schedule_size_publication(f.file_id(), delay),
            size::Plan::Wait => {}
        }
        cleared?;
        f.raise_known(end);
        Ok(data.len())
    }

    /// The part of a write sent to the owners of its chunks (and direct to a local data file
    /// under a lease): cut by the current placement, sent at once, settled.
    async fn write_placed(
        &self,
        f: &File,
        offset: u64,
        data: &[u8],
        hint: Option<eddy_proto::StreamHint>,
    ) -> Result<(), Errno> {
        let all = self.write_batches(f.file_id(), offset, data.len());
        // The chunks on a daemon of this host are written directly (decision 0048), but
        // under a lease the kernel writes through (the O_DIRECT writer of a passed-through
        // file the mount serves, decision 0059): those go through the daemon, which writes
        // and records them before it answers, as for a writer on another host (a direct
        // write's report could land after a truncate made through another open).
        let (mut batches, mut direct) = (Vec::with_capacity(all.len()), Vec::new());
        for b in all {
            match self.direct_lease(f, b.daemon).await {
                Some(l) if !l.kernels() => direct.push((b, l)),
                _ => batches.push(b),
            }
        }
        let direct_writes = async {
            for (b, l) in &direct {
                self.direct_write(f, l, &b.spans, data).await?;
            }
            Ok::<(), Errno>(())
        };
        let payloads = self.write_payloads(&batches, data);
        let writes = batches.iter().zip(payloads).map(|(b, (data, sums))| {
            let req = Request::Write(req::Write {
                file_id: f.file_id(),
                sums,
                pieces: b.spans.iter().map(|s| s.piece).collect(),
                data,
                backing: f.backing(),
                hint,
            });
            async move {
                let (_, generation) = self.rpc().send(b.daemon, &req).await?;
                f.0.unsynced.note(b.daemon, generation);
                Ok::<(), Failure>(())
            }
        });
        let (results, direct_done) = futures::join!(join_all(writes), direct_writes);
        if let Err(e) = self.settle_writes(f.file_id(), &batches, results).await {
            // Some daemons may have stored their part past the size (decision 0060).
            self.note_spilled(f.file_id());
            return Err(e);
        }
        direct_done
    }

    /// The requests that put `len` bytes of a file at `offset` on every copy: one group per
    /// daemon holding any of the chunks (with R = 1, the owner's groups as always).
    pub(crate) fn write_batches(&self, file_id: u128, offset: u64, len: usize) -> Vec<Batch> {
        let cfg = self.config();
        let max = cfg.max_rpc_data_bytes as usize;
        if self.replicas() == 1 {
            return layout::batches(
                &self.rpc().placement(),
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
}
