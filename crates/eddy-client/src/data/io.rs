//! The data of open files: positioned reads (with read-ahead) and writes split by chunk and
//! sent to every daemon at once, fsync, close and flush, ftruncate, fallocate and the
//! chunks a failed allocation gives back, and the files that may hold chunks past their size.

use crate::data::Data;
use crate::file::truncations;
use crate::{
    integrity, layout, size, unsynced, Creds, Errno, Failure, File, FileId, FileKind, Inode,
    SetAttr,
};
use eddy_proto::{req, Piece, Request};
use futures::future::join_all;
use std::sync::atomic::Ordering;

impl Data<'_> {
    /// The requests, one per daemon and at most `max_rpc_data_bytes` each, that cover `len`
    /// bytes of `f` at `offset`.
    fn batches(&self, f: &File, offset: u64, len: usize) -> Vec<layout::Batch> {
        let cfg = self.config();
        layout::batches(
            self.rpc().placement(),
            f.file_id(),
            offset,
            len,
            cfg.chunk_size,
            cfg.max_rpc_data_bytes as usize,
        )
    }

    /// Reads up to `len` bytes at `offset`; short at end of file; holes read as zeros.
    pub async fn pread(&self, f: &File, offset: u64, len: usize) -> Result<Vec<u8>, Errno> {
        let mut out = Vec::new();
        let n = self
            .read_at(f, offset, len, |len| {
                out.resize(len, 0);
                &mut out[..]
            })
            .await?;
        out.truncate(n);
        self.note_read(f).await;
        Ok(out)
    }

    /// Reads up to `buf.len()` bytes at `offset` straight into `buf`; returns how many (short
    /// at end of file; holes read as zeros, bytes past the end are left alone). For callers that
    /// own a buffer already: no allocation, no copy beyond the one out of the replies.
    pub async fn pread_into(&self, f: &File, offset: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let len = buf.len();
        let n = self.read_at(f, offset, len, |n| &mut buf[..n]).await?;
        self.note_read(f).await;
        Ok(n)
    }

    /// Reads up to `len` bytes at `offset` into the buffer `dest(n)` gives once the number of
    /// bytes `n` to read is known.
    async fn read_at<'b>(
        &self,
        f: &File,
        offset: u64,
        len: usize,
        dest: impl FnOnce(usize) -> &'b mut [u8],
    ) -> Result<usize, Errno> {
        if !f.readable() {
            return Err(Errno::new(
                libc::EBADF,
                format!("{} is not open for reading", f.path()),
            ));
        }
        if f.0.inode.kind == FileKind::Dir {
            return Err(Errno::new(
                libc::EISDIR,
                format!("{} is a directory", f.path()),
            ));
        }
        let end = offset.saturating_add(len as u64);
        let mut size = f.0.known_size.load(Ordering::Acquire);
        let epoch = truncations();
        if end > size || f.0.known_epoch.load(Ordering::Acquire) != epoch {
            // The range reaches past what we know: another writer may have extended the file
            // (or a truncate through this process cut it since we knew its size).
            size = self.ns().stat_norm(&f.path()).await?.size;
            f.0.known_size.store(size, Ordering::Release);
            f.0.known_epoch.store(epoch, Ordering::Release);
        }
        if offset >= size {
            return Ok(0);
        }
        let len = (size - offset).min(len as u64) as usize;
        let out = dest(len);
        if self.replicas() > 1 {
            self.read_ahead(f, offset, len, size);
            let spans = layout::pieces(offset, len, self.config().chunk_size);
            self.read_copies(f.file_id(), &f.path(), f.backing(), spans, out)
                .await?;
            return Ok(len);
        }
        let all = self.batches(f, offset, len);
        // The chunks on a daemon of this host are read directly (decision 0048); a block
        // that does not match its checksum there leaves its batch to the daemon.
        let mut batches = Vec::with_capacity(all.len());
        for b in all {
            match self.direct_lease(f, b.daemon).await {
                Some(l) if !l.kernels() && self.direct_read(&l, &b.spans, out).is_ok() => {}
                _ => batches.push(b),
            }
        }
        let cfg = self.config();
        let reads = batches.iter().map(|b| {
            let pieces: Vec<Piece> = b.spans.iter().map(|s| s.piece).collect();
            async move {
                let reply = self
                    .rpc()
                    .call(
                        b.daemon,
                        req::Read {
                            file_id: f.file_id(),
                            pieces: pieces.clone(),
                            backing: f.backing(),
                        },
                    )
                    .await
                    .map_err(|e| integrity::read_error(e, &f.path()))?;
                integrity::read_reply(cfg, reply, &pieces, &f.path(), b.daemon)
            }
        });
        self.read_ahead(f, offset, len, size);
        for (b, r) in batches.iter().zip(join_all(reads).await) {
            let data = r?;
            if data.len() != b.bytes {
                return Err(Errno::eio(format!(
                    "daemon {} returned {} bytes, expected {}",
                    b.daemon,
                    data.len(),
                    b.bytes
                )));
            }
            let mut pos = 0;
            for s in &b.spans {
                let n = s.piece.len as usize;
                out[s.buf_pos..s.buf_pos + n].copy_from_slice(&data[pos..pos + n]);
                pos += n;
            }
        }
        Ok(len)
    }

    /// Read-ahead for a sequential reader of a linked file: asks the owners of the next
    /// `readahead_chunks` chunks to fetch them from the backend, without waiting for them.
    fn read_ahead(&self, f: &File, offset: u64, len: usize, size: u64) {
        let (Some(backing), ahead) = (f.backing(), u64::from(self.config().readahead_chunks))
        else {
            return;
        };
        let cs = self.config().chunk_size;
        let end = offset + len as u64;
        // Near where the last read ended: a kernel reading ahead issues several reads at once,
        // not always in order.
        let sequential = f.0.ra_next.swap(end, Ordering::AcqRel).abs_diff(offset) <= 4 * cs;
        if !sequential || ahead == 0 || len == 0 {
            return;
        }
        let chunks_in_file = size.div_ceil(cs);
        let want = ((end - 1) / cs + 1 + ahead).min(chunks_in_file);
        let from =
            f.0.ra_upto
                .fetch_max(want, Ordering::AcqRel)
                .max((end - 1) / cs + 1);
        if from >= want {
            return;
        }
        let mut by_daemon: std::collections::BTreeMap<u32, Vec<u64>> = Default::default();
        for k in from..want {
            by_daemon
                .entry(self.rpc().placement().chunk_owner(f.file_id(), k))
                .or_default()
                .push(k);
        }
        for (daemon, chunks) in by_daemon {
            let client = self.client();
            let req = req::Prefetch {
                file_id: f.file_id(),
                chunks,
                backing: backing.clone(),
                pin: false,
            };
            tokio::spawn(async move {
                if let Err(e) = client.rpc().call(daemon, req).await {
                    tracing::debug!("read-ahead failed (the read itself will fetch): {e}");
                }
            });
        }
    }

    /// Writes `data` at `offset` (at the end, reserved atomically, with O_APPEND). The data
    /// RPCs and the size update go out together; writers never wait on each other's data.
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
            });
            async move {
                let (_, generation) = self.rpc().send(b.daemon, &req).await?;
                f.0.unsynced.note(b.daemon, generation);
                Ok::<(), Failure>(())
            }
        });
        // The size this write reached goes to the owner with the data, or later in a batch
        // (see `size`); O_APPEND reserved its range, and so the size, already.
        let plan = if f.append() {
            size::Plan::Wait
        } else {
            self.0.sizes.record(f.file_id(), &f.path(), end)
        };
        let grow = async {
            match plan {
                size::Plan::Now(size) => self.ns().send_size(f.file_id(), &f.path(), size).await,
                size::Plan::Arm(delay) => {
                    self.schedule_size_publication(f.file_id(), delay);
                    Ok(())
                }
                size::Plan::Wait => Ok(()),
            }
        };
        let ns = self.ns();
        let cleared = ns.clear_setid_on_write(f, clear_setid);
        let (results, grown, cleared, direct_done) =
            futures::join!(join_all(writes), grow, cleared, direct_writes);
        if let Err(e) = self.settle_writes(f.file_id(), &batches, results).await {
            // Some daemons may have stored their part past the size (decision 0060).
            self.note_spilled(f.file_id());
            return Err(e);
        }
        direct_done?;
        grown?;
        cleared?;
        f.raise_known(end);
        Ok(data.len())
    }

    /// Makes the file's data and metadata durable: publishes its size, then sends
    /// `Sync{file_id}` to the daemons that acknowledged writes through this handle since its
    /// last fsync, to its metadata owner, and to the daemons holding other unsynced changes
    /// of this client (its entries, sizes, truncates; decision 0015). EIO if one of them
    /// answers on a newer connection than a change it covers (it may have restarted and
    /// lost it).
    pub async fn fsync(&self, f: &File) -> Result<(), Errno> {
        self.direct_report(f, false).await?;
        self.publish_size(f).await?;
        let mut data = f.0.unsynced.take();
        let mut meta = self.0.unsynced.take();
        let mut targets: std::collections::BTreeSet<u32> =
            data.keys().chain(meta.keys()).copied().collect();
        // With R copies: every owner of the file's metadata, and the copies that cannot be
        // reached are left out (up to R-1 of them: the others hold what they missed).
        let meta_owners = self.rpc().meta_owners(&f.path());
        let tolerated = meta_owners.len() - 1;
        targets.extend(meta_owners);
        let file_id = Some(f.file_id());
        let req = Request::Sync(req::Sync { file_id });
        let syncs = targets.iter().map(|&d| self.rpc().send(d, &req));
        let mut answered = std::collections::HashMap::new();
        let mut failed = None;
        let mut unreachable = Vec::new();
        for (&d, r) in targets.iter().zip(join_all(syncs).await) {
            match r {
                Ok((_, generation)) => {
                    answered.insert(d, generation);
                }
                Err(Failure::Unreachable(e)) if tolerated > 0 => unreachable.push((d, e)),
                Err(e) => failed = failed.or(Some(e.into_errno())),
            }
        }
        if unreachable.len() > tolerated {
            failed = failed.or(unreachable.pop().map(|(_, e)| e));
        }
        for (d, _) in &unreachable {
            data.remove(d);
            meta.remove(d);
        }
        if let Some(e) = failed {
            // Retried by the next fsync.
            f.0.unsynced.restore(data);
            self.0.unsynced.restore(meta);
            return Err(e);
        }
        unsynced::check_generations(&data, &answered, &f.path())?;
        unsynced::check_generations(&meta, &answered, &f.path())
    }

    /// Closes the handle: `flush`, and the last handle of a file unlinked or replaced while
    /// open through this client removes it for good (its data freed; decision 0061).
    pub async fn close(&self, f: &File) -> Result<(), Errno> {
        let flushed = self.flush(f).await;
        let released = self.release_held(f).await;
        flushed.and(released)
    }

    /// What the close of one descriptor does while the handle may stay open (a mount's
    /// FLUSH): publishes the size its writes reached, so that every client sees it from now
    /// on (close-to-open), and reports and ends its direct leases (later I/O takes new ones).
    pub async fn flush(&self, f: &File) -> Result<(), Errno> {
        let reported = self.direct_report(f, true).await;
        self.publish_size(f).await?;
        self.0.sizes.release(f.file_id());
        reported
    }

    /// Truncates an open file (permission was checked at open); by a caller other than root,
    /// it clears the file's set-id bits.
    pub async fn ftruncate(&self, f: &File, size: u64) -> Result<Inode, Errno> {
        if !f.writable() {
            return Err(Errno::new(
                libc::EINVAL,
                format!("{} is not open for writing", f.path()),
            ));
        }
        // The writes of every handle not reported yet are reported by `setattr` first.
        let i = self
            .setattr(
                &f.path(),
                SetAttr {
                    size: Some(size),
                    ..SetAttr::default()
                },
                Creds {
                    enforce: false,
                    ..f.0.creds
                },
            )
            .await?;
        f.0.known_size.store(size, Ordering::Release);
        Ok(i)
    }

    /// fallocate(2) with its `mode`: 0 and `FALLOC_FL_KEEP_SIZE` reserve space (`allocate`);
    /// other modes (punching, zeroing, collapsing, inserting) are EOPNOTSUPP.
    pub async fn fallocate(&self, f: &File, offset: u64, len: u64, mode: i32) -> Result<(), Errno> {
        let keep_size = match mode {
            0 => false,
            libc::FALLOC_FL_KEEP_SIZE => true,
            other => {
                return Err(Errno::new(
                    libc::EOPNOTSUPP,
                    format!(
                        "fallocate mode {other:#x} is not supported: only reserving space \
                         (mode 0 or KEEP_SIZE)"
                    ),
                ))
            }
        };
        self.allocate(f, offset, len, keep_size).await
    }

    /// fallocate: reserves storage for `len` bytes at `offset` on the daemons that hold
    /// those chunks (`Allocate`: fallocate on their data files), so later writes there
    /// cannot fail for want of room; unless `keep_size`, the file grows to cover the range.
    /// ENOSPC when a daemon cannot hold its part (what others reserved stays reserved, as
    /// with a local file system).
    /// After a failed fallocate (a daemon refused its part, ENOSPC most often): the daemons
    /// that took theirs give back what lies past the file's size as the owner and this client
    /// know it (each daemon undid a refused part itself). What cannot be given back (a
    /// daemon unreachable now) is dropped when the file is removed (decision 0060).
    async fn give_back(&self, f: &File, offset: u64, took: &[u32]) {
        self.note_spilled(f.file_id());
        let owner = match self.ns().stat_raw(&f.path()).await {
            Ok(i) if i.file_id == f.file_id() => i.size,
            // Removed or replaced meanwhile: its removal dropped everything.
            _ => return,
        };
        let size = owner
            .max(f.0.known_size.load(Ordering::Acquire))
            .max(self.0.sizes.pending(f.file_id()))
            .max(offset);
        let mut daemons = took.to_vec();
        daemons.sort_unstable();
        daemons.dedup();
        let calls = daemons.iter().map(|&d| {
            self.rpc().call(
                d,
                req::TruncateData {
                    file_id: f.file_id(),
                    size,
                },
            )
        });
        for (d, r) in daemons.iter().zip(join_all(calls).await) {
            if let Err(e) = r {
                tracing::debug!(daemon = d, "cannot give back a failed fallocate: {e}");
            }
        }
    }

    /// Notes a file that may hold chunks past its size.
    pub(crate) fn note_spilled(&self, id: FileId) {
        lock_spilled(&self.0.spilled).insert(id);
    }

    /// Whether a file may hold chunks past its size; forgets it (its data is being dropped).
    pub(crate) fn take_spilled(&self, id: FileId) -> bool {
        lock_spilled(&self.0.spilled).remove(&id)
    }

    pub async fn allocate(
        &self,
        f: &File,
        offset: u64,
        len: u64,
        keep_size: bool,
    ) -> Result<(), Errno> {
        if !f.writable() {
            return Err(Errno::new(
                libc::EBADF,
                format!("{} is not open for writing", f.path()),
            ));
        }
        if len == 0 {
            return Err(Errno::einval("fallocate of an empty range"));
        }
        // What the handles of this client wrote directly reaches the daemons before the
        // allocation changes the chunks (as before a truncate: `report_every_handle`).
        self.report_every_handle(f.file_id()).await?;
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(|| Errno::new(libc::EFBIG, "fallocate beyond the largest file size"))?;
        let len = usize::try_from(len)
            .map_err(|_| Errno::new(libc::EFBIG, "fallocate range too large"))?;
        let batches = self.write_batches(f.file_id(), offset, len);
        let calls = batches.iter().map(|b| {
            let req = Request::Allocate(req::Allocate {
                file_id: f.file_id(),
                pieces: b.spans.iter().map(|s| s.piece).collect(),
            });
            async move {
                let (_, generation) = self.rpc().send(b.daemon, &req).await?;
                f.0.unsynced.note(b.daemon, generation);
                Ok::<(), Failure>(())
            }
        });
        let results = join_all(calls).await;
        let took: Vec<u32> = batches
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_ok())
            .map(|(b, _)| b.daemon)
            .collect();
        if let Err(e) = self.settle_writes(f.file_id(), &batches, results).await {
            self.give_back(f, offset, &took).await;
            return Err(e);
        }
        if keep_size {
            // Blocks past the size: its removal must find them wherever they are.
            self.note_spilled(f.file_id());
        } else {
            self.ns().grow_size(&f.path(), end).await?;
            f.raise_known(end);
        }
        Ok(())
    }
}

pub(crate) fn lock_spilled(
    m: &std::sync::Mutex<std::collections::HashSet<FileId>>,
) -> std::sync::MutexGuard<'_, std::collections::HashSet<FileId>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
