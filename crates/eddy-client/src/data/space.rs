//! The room a file's data takes: ftruncate, fallocate (allocation on every chunk's holders,
//! or a clear errno for what is not supported), the chunks a failed allocation gives back,
//! and the files that may hold chunks past their size (decision 0060).

use crate::data::Data;
use crate::{Creds, Errno, Failure, File, FileId, Inode, SetAttr};
use eddy_proto::{req, Request};
use futures::future::join_all;
use std::sync::atomic::Ordering;

impl Data<'_> {
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
