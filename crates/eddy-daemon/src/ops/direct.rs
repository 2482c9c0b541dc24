//! Direct local I/O (decision 0048): `DirectOpen` grants a lease and the token of its
//! descriptors; `DirectCommit` records what the lease's holder wrote and may end it. Both
//! are held by the connection they came on (`crate::direct`).

use super::Serve;
use crate::advisory::ConnId;
use crate::direct::Lease;
use crate::state::State;
use eddy_proto::{req, DirectGrant, Errno};
use std::sync::Arc;

impl Serve for req::DirectOpen {
    async fn serve(self, st: &Arc<State>, conn: ConnId) -> Result<DirectGrant, Errno> {
        let cfg = &st.settings.config;
        if !cfg.direct_io || !st.direct_socket() {
            return Err(Errno::new(
                libc::EOPNOTSUPP,
                "direct I/O is off on this daemon (direct_io, or no descriptor socket)",
            ));
        }
        let batch = cfg.direct_batch_bytes;
        if self.write && nearly_full(st) {
            return Err(Errno::new(
                libc::ENOSPC,
                format!(
                    "less than direct_batch_bytes ({batch}) of room is left below the \
                     capacity: write through the daemon"
                ),
            ));
        }
        let (id, write) = (self.file_id, self.write);
        let (data, sums) = st
            .blocking_any(move |st| st.chunks.direct_open(id, write))
            .await??;
        let files = std::iter::once(data).chain(sums).collect();
        let lease = Lease {
            file_id: id,
            write,
            conn,
        };
        let (lease, token) = st.direct.grant(lease, files);
        Ok(DirectGrant {
            lease,
            token,
            batch,
        })
    }
}

impl Serve for req::DirectCommit {
    async fn serve(self, st: &Arc<State>, conn: ConnId) -> Result<(), Errno> {
        let lease = st.direct.lease(self.lease, conn, self.file_id)?;
        st.stats.read_directly(self.file_id, self.read_bytes);
        if !lease.write && !self.ranges.is_empty() {
            return Err(Errno::new(
                libc::EBADF,
                "a read lease reported writes: nothing recorded",
            ));
        }
        let (id, number) = (self.file_id, self.lease);
        let (ranges, sums) = (self.ranges, self.sums);
        let release = self.release;
        if lease.write {
            let whole = self.whole;
            let grown = st
                .blocking_any(move |st| {
                    st.chunks.direct_commit(id, &ranges, &sums)?;
                    // Written by the kernel (FUSE passthrough): anywhere, unreported. Its
                    // chunks are recorded now; its blocks are checksummed after the reply,
                    // the file marked until then (decision 0049).
                    let grown = match whole {
                        true => st.chunks.adopt_chunks(id),
                        false => Ok(0),
                    }?;
                    // Direct writes while items move: every chunk of the file held here
                    // goes to its new owners (the ranges do not name a passthrough's).
                    if st.placement().is_moving() {
                        st.note_moved_chunks(id, st.chunks.held_of(id))?;
                    }
                    Ok::<_, Errno>(grown)
                })
                .await??;
            st.stats.wrote_directly(id, grown);
            if whole {
                let later = Arc::clone(st);
                tokio::spawn(async move {
                    let done = later
                        .blocking_any(move |st| st.chunks.adopt_checksums(id))
                        .await
                        .and_then(|r| r);
                    if let Err(e) = done {
                        tracing::warn!(
                            "checksumming file {id:032x} after its passthrough writes (the \
                             next start does): {e}"
                        );
                    }
                });
            }
            if release {
                st.blocking_any(move |st| st.chunks.direct_close(id, false))
                    .await??;
            }
        }
        if release {
            st.direct.end(number);
        }
        // Past the capacity less one batch, the writer is told to stop writing directly:
        // it writes through the daemon from now on, and gets its ENOSPC. The lease itself
        // (and the file's mark) lasts until the writer releases it, so that a write it made
        // before it was told (another thread's) is reported then, never taken for damage.
        if lease.write && !release && nearly_full(st) {
            return Err(Errno::new(
                libc::ENOSPC,
                "recorded; this daemon is nearly full: stop writing directly, release the \
                 lease and write through the daemon",
            ));
        }
        Ok(())
    }
}

/// Whether less than `direct_batch_bytes` of room is left below the capacity: no write
/// lease is granted, and one reporting then ends (a direct writer may pass the capacity by
/// one batch at most).
fn nearly_full(st: &State) -> bool {
    let batch = st.settings.config.direct_batch_bytes;
    st.chunks
        .capacity_limit()
        .is_some_and(|limit| st.chunks.usage().0.saturating_add(batch) > limit)
}
