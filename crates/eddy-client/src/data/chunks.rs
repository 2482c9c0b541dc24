//! Requests to the holders of a file's chunks over a byte range: dropping the data of a file
//! that lost its last name (on every daemon when it may hold chunks past its size), a file's
//! data, or its data past a new size, with one request per holder (every daemon only when the
//! range covers more chunks than there are daemons) and hints for copies not reached.

use crate::data::Data;
use crate::{Errno, FileId, FileKind, Inode};
use eddy_proto::{req, Rpc};
use eddy_rpc::Failure;
use futures::future::join_all;
use std::collections::{BTreeMap, BTreeSet};

impl Data<'_> {
    /// Drops the data of a file that lost its last name.
    pub(crate) async fn drop_file(&self, last: &Inode) -> Result<(), Errno> {
        self.0.sizes.forget(last.file_id);
        // A file of size 0 holds no chunk: the first write of every client publishes its size
        // at once, and truncation drops the chunks past the new size. Only a write racing with
        // the removal, or one that failed half-way, can leave unreachable chunks behind
        // (garbage, never visible).
        let spilled = self.data().take_spilled(last.file_id);
        if last.kind == FileKind::File && spilled {
            // Chunks past the size may be anywhere (decision 0060).
            self.rpc()
                .all_ok(|| req::RemoveData {
                    file_id: last.file_id,
                })
                .await?;
        } else if last.kind == FileKind::File && last.size > 0 {
            self.data().drop_data(last.file_id, last.size).await?;
        }
        Ok(())
    }

    /// Drops every chunk of a file of `size` bytes.
    pub(crate) async fn drop_data(&self, file_id: FileId, size: u64) -> Result<(), Errno> {
        self.to_chunk_holders(file_id, 0, size, || req::RemoveData { file_id })
            .await
    }

    /// Drops the data of a file at and after byte `size`, for a file known to reach `old`.
    pub(crate) async fn truncate_data(
        &self,
        file_id: FileId,
        size: u64,
        old: u64,
    ) -> Result<(), Errno> {
        let (from, to) = (size.min(old), size.max(old));
        self.to_chunk_holders(file_id, from, to, || req::TruncateData { file_id, size })
            .await
    }

    /// Sends a request to every daemon that may hold a chunk of `file_id` overlapping bytes
    /// `[from, to)` (at least the chunk holding `from`): the chunks' owners, as placement names
    /// them, or every daemon when the range covers more chunks than there are daemons. An
    /// unlink or truncate of a small file so costs one RPC, not one per daemon.
    pub(crate) async fn to_chunk_holders<R: Rpc, F: Fn() -> R>(
        &self,
        file_id: FileId,
        from: u64,
        to: u64,
        make: F,
    ) -> Result<(), Errno> {
        let cs = self.config().chunk_size;
        let first = from / cs;
        let last = if to > from { (to - 1) / cs } else { first };
        let ids = self.rpc().placement().ids();
        let r = self.replicas();
        if last - first >= ids.len() as u64 && r == 1 {
            return self.rpc().all_ok(make).await.map(|_| ());
        }
        let mut holders: Vec<u32> = if last - first >= ids.len() as u64 {
            ids.to_vec()
        } else {
            (first..=last)
                .flat_map(|k| self.rpc().chunk_owners(file_id, k))
                .collect()
        };
        holders.sort_unstable();
        holders.dedup();
        let calls = holders.iter().map(|&id| {
            let req = make();
            async move { self.rpc().try_call(id, req).await }
        });
        // With R copies, up to R-1 owners that cannot be reached are left out; the chunks
        // they own are hinted to an owner that took the change (decision 0021).
        let mut missed: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
        for (&id, res) in holders.iter().zip(join_all(calls).await) {
            match res {
                Ok(_) => {}
                Err(Failure::Unreachable(e)) => {
                    missed.insert(id, BTreeSet::new());
                    if missed.len() >= r {
                        return Err(e);
                    }
                }
                Err(f) => return Err(f.into_errno()),
            }
        }
        if missed.is_empty() {
            return Ok(());
        }
        for k in first..=last {
            for d in self.rpc().chunk_owners(file_id, k) {
                if let Some(set) = missed.get_mut(&d) {
                    set.insert(k);
                }
            }
        }
        self.hint_missed(file_id, missed).await;
        Ok(())
    }
}
