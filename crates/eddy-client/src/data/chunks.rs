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

/// How long a failed removal is tried again in the background (`retry_in_background`).
const DROP_RETRY: std::time::Duration = std::time::Duration::from_secs(600);

/// Runs `attempt` now and, when it fails, again in the background (`retry_in_background`):
/// for the second half of a removal whose first half (the name) is done, so that nobody else
/// would ever drop what it leaves. The caller's removal has succeeded either way.
pub(crate) async fn now_or_in_background<F, Fut>(what: String, attempt: F)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), Errno>> + Send,
{
    if let Err(e) = attempt().await {
        tracing::warn!("removing {what} failed, tried again in the background: {e}");
        retry_in_background(what, attempt);
    }
}

/// Runs `attempt` again in the background, with pauses from 0.1 s doubling up to 5 s, until it
/// succeeds or `DROP_RETRY` has passed (then `what` is logged as left behind).
fn retry_in_background<F, Fut>(what: String, attempt: F)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), Errno>> + Send,
{
    tokio::spawn(async move {
        let mut pause = std::time::Duration::from_millis(100);
        let began = std::time::Instant::now();
        loop {
            tokio::time::sleep(pause).await;
            match attempt().await {
                Ok(()) => return,
                Err(e) if began.elapsed() >= DROP_RETRY => {
                    tracing::error!(
                        "{what} could not be removed within {DROP_RETRY:?}; it stays until the \
                         deployment ends: {e}"
                    );
                    return;
                }
                Err(_) => pause = (pause * 2).min(std::time::Duration::from_secs(5)),
            }
        }
    });
}

impl Data<'_> {
    /// Drops the data of a file that lost its last name.
    /// The name is gone already, so a drop that fails (a daemon restarting, its store
    /// refusing writes on a full device) is tried again in the background until it succeeds
    /// (`DROP_RETRY`): otherwise its chunks would stay with no name to reach them. The
    /// removal itself has succeeded and reports no error.
    pub(crate) async fn drop_file(&self, last: &Inode) -> Result<(), Errno> {
        self.0.sizes.forget(last.file_id);
        let spilled = self.data().take_spilled(last.file_id);
        let (client, last) = (self.client(), last.clone());
        let what = format!("the data of file {:032x}", last.file_id);
        now_or_in_background(what, move || {
            let (client, last) = (client.clone(), last.clone());
            async move { client.data().drop_chunks(&last, spilled).await }
        })
        .await;
        Ok(())
    }

    /// The requests of `drop_file`.
    async fn drop_chunks(&self, last: &Inode, spilled: bool) -> Result<(), Errno> {
        // A file of size 0 holds no chunk: the first write of every client publishes its size
        // at once, and truncation drops the chunks past the new size. Only a write racing with
        // the removal, or one that failed half-way, can leave unreachable chunks behind
        // (garbage, never visible).
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
    /// unlink or truncate of a small file so costs one RPC, not one per daemon. Refused for
    /// this client's membership epoch, it is sent again to the holders under the new view
    /// (a removal or a truncate can be applied twice; decision 0081).
    pub(crate) async fn to_chunk_holders<R: Rpc, F: Fn() -> R>(
        &self,
        file_id: FileId,
        from: u64,
        to: u64,
        make: F,
    ) -> Result<(), Errno> {
        self.rpc()
            .retry_moved(|| self.to_chunk_holders_once(file_id, from, to, &make))
            .await
    }

    async fn to_chunk_holders_once<R: Rpc, F: Fn() -> R>(
        &self,
        file_id: FileId,
        from: u64,
        to: u64,
        make: &F,
    ) -> Result<(), Errno> {
        let cs = self.config().chunk_size;
        let first = from / cs;
        let last = if to > from { (to - 1) / cs } else { first };
        let ids = self.rpc().ids();
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
