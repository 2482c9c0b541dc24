//! Copies on several daemons (decision 0020): with `replicas` R > 1 every metadata record
//! and chunk lives on the first R owners of the placement order. Which daemons hold an item
//! (ranked, the ones believed down last), the down marks and the plain failover are the rpc
//! layer's (`eddy_rpc::Daemons`). What the POSIX client adds is told where it is done: the
//! refinement of an exclusive create that a lost copy may have applied (`namespace`), the
//! writes to every copy with their settlement (`write.rs`), reads failing over to the next
//! copy (`read.rs`); this module holds the hints for the copies that missed a change.
//!
//! A daemon answering with an error is an answer (EEXIST is EEXIST on every copy); a daemon
//! that cannot be reached means "try the next copy". Reads fail over on EIO too (a copy
//! with a damaged chunk answers EIO: the next copy may have it whole). With R = 1 nothing
//! here is used: every call goes to the one owner, as it always did.

use crate::data::Data;
use eddy_proto::req;
use futures::future::join_all;
use std::collections::{BTreeMap, BTreeSet};

impl Data<'_> {
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
}
