//! Reads of open files: clamped to the size the handle knows (asked again after a truncate
//! in this process), split by chunk and sent to every daemon at once, read from the next
//! copy when one cannot be reached or holds a damaged chunk (decision 0020), direct from a
//! local data file where a lease allows it (decision 0048), and read-ahead of the chunks a
//! sequential reader asks for next.

use crate::data::Data;
use crate::file::truncations;
use crate::layout::{self, Span};
use crate::{integrity, Errno, Failure, File, FileKind};
use eddy_proto::{req, Piece};
use eddy_rpc::Daemons;
use futures::future::join_all;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::Ordering;

impl Data<'_> {
    /// The requests, one per daemon and at most `max_rpc_data_bytes` each, that cover `len`
    /// bytes of `f` at `offset`.
    fn batches(&self, f: &File, offset: u64, len: usize) -> Vec<layout::Batch> {
        let cfg = self.config();
        layout::batches(
            &self.rpc().placement(),
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
        let hint = self.stream_hint(f, offset, len);
        self.read_ahead(f, offset, len, size, hint);
        // Refused for this client's membership epoch (nothing was read): the owners are
        // computed again from the view that follows the hosts file (decision 0081).
        let mut moves = 0;
        loop {
            match self.read_placed(f, offset, len, hint, out).await {
                Err(e) if e.is_moved() => {
                    moves += 1;
                    if moves >= eddy_rpc::MOVES_MAX {
                        return Err(Errno::eio(format!(
                            "reading {}: the membership kept moving: {e}",
                            f.path()
                        )));
                    }
                }
                r => return r.map(|()| len),
            }
        }
    }

    /// Reads `len` bytes at `offset` (within the size) into `out`, from the owners of their
    /// chunks under the current placement (direct from a local data file under a lease).
    async fn read_placed(
        &self,
        f: &File,
        offset: u64,
        len: usize,
        hint: Option<eddy_proto::StreamHint>,
        out: &mut [u8],
    ) -> Result<(), Errno> {
        if self.replicas() > 1 {
            let spans = layout::pieces(offset, len, self.config().chunk_size);
            return self
                .read_copies(f.file_id(), &f.path(), f.backing(), hint, spans, out)
                .await;
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
                            hint,
                        },
                    )
                    .await
                    .map_err(|e| integrity::read_error(e, &f.path()))?;
                integrity::read_reply(cfg, reply, &pieces, &f.path(), b.daemon)
            }
        });
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
        Ok(())
    }

    /// Read-ahead for a sequential reader of a linked file: asks the owners of the next
    /// `readahead_chunks` chunks to fetch them from the backend, without waiting for them.
    /// A stream its hint calls strided is left to the daemons (decision 0072): this would
    /// fetch the gaps between its records too.
    fn read_ahead(
        &self,
        f: &File,
        offset: u64,
        len: usize,
        size: u64,
        hint: Option<eddy_proto::StreamHint>,
    ) {
        let (Some(backing), ahead) = (f.backing(), u64::from(self.config().readahead_chunks))
        else {
            return;
        };
        let cs = self.config().chunk_size;
        let end = offset + len as u64;
        // Near where the last read ended: a kernel reading ahead issues several reads at once,
        // not always in order.
        let near = f.0.ra_next.swap(end, Ordering::AcqRel).abs_diff(offset) <= 4 * cs;
        let sequential = match f.0.ra_mode.load(Ordering::Relaxed) {
            crate::data::RA_ALWAYS => true,
            crate::data::RA_NEVER => false,
            _ => near,
        };
        let strided =
            hint.is_some_and(|h| matches!(h.pattern, eddy_proto::Pattern::Strided { .. }));
        if !sequential || strided || ahead == 0 || len == 0 {
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
        for (daemon, chunks) in self.by_owner(f.file_id(), from..want) {
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

    /// Chunks `ks` of a file, by the daemon that owns each (its first copy's).
    pub(crate) fn by_owner(
        &self,
        file_id: eddy_proto::FileId,
        ks: std::ops::Range<u64>,
    ) -> BTreeMap<u32, Vec<u64>> {
        let mut by: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for k in ks {
            by.entry(self.rpc().placement().chunk_owner(file_id, k))
                .or_default()
                .push(k);
        }
        by
    }

    /// Reads `spans` of a file into `out` (at each span's buffer position) from the first
    /// copy of each chunk that answers, failing over to the next copy on an unreachable
    /// daemon or EIO. Used with R > 1.
    pub(crate) async fn read_copies(
        &self,
        file_id: u128,
        path: &str,
        backing: Option<eddy_proto::Backing>,
        hint: Option<eddy_proto::StreamHint>,
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
                    hint,
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
