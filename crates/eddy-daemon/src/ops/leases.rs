//! Directory leases (decision 0075): the grant and the holder's long poll at the owner of
//! the directory's record, the registration and return at every daemon, the recall a daemon
//! sends the granter, and the holder's batches of creates and unlinks.

use super::{Apply, Serve};
use crate::advisory::ConnId;
use crate::leases::Recalled;
use crate::state::State;
use eddy_proto::path::{normalize, split};
use eddy_proto::req::{self, LEASE_BATCH_MAX, LEASE_NAMES_MAX};
use eddy_proto::{BatchOp, BatchOutcome, Errno, LeaseGrant, LeaseNames};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How long a client asking a daemon that is not the first owner of the directory's record
/// does not ask again.
const NOT_FIRST_RETRY_MS: u64 = 10_000;

/// How long a client asking while items move (decision 0081) does not ask again.
const MOVING_RETRY_MS: u64 = 1_000;

/// Granted unless leases are off, the directory is under a linked prefix (its names are not
/// all here: the backend's are imported as they are asked for), another client holds it
/// or it cools down after a recall; none while items move (decision 0081: a lease's names
/// and batches would outlive the placement they were granted under). Only the first owner of the directory's record grants:
/// a copy answering for it while that daemon cannot be reached would grant a second lease
/// on the directory beside the one its first owner granted.
impl Serve for req::Lease {
    async fn serve(self, st: &Arc<State>, conn: ConnId) -> Result<LeaseGrant, Errno> {
        let dir = normalize(&self.dir, st.meta.limits())?;
        let never = LeaseGrant::Refused { retry_ms: u64::MAX };
        if !st.settings.config.leases || st.is_linked(Some(&dir)) {
            return Ok(never);
        }
        if st.placement().is_moving() {
            return Ok(LeaseGrant::Refused {
                retry_ms: MOVING_RETRY_MS,
            });
        }
        if st
            .replicator()
            .is_some_and(|r| r.first_owner(&dir) != st.settings.id)
        {
            return Ok(LeaseGrant::Refused {
                retry_ms: NOT_FIRST_RETRY_MS,
            });
        }
        Ok(st.leases.grant(&dir, conn))
    }
}

/// Installs the lease, waits for the requests that may add a name and passed the check
/// before it, then lists the names held here (at most `LEASE_NAMES_MAX`).
impl Serve for req::LeaseNote {
    async fn serve(self, st: &Arc<State>, conn: ConnId) -> Result<LeaseNames, Errno> {
        let dir = normalize(&self.dir, st.meta.limits())?;
        st.leases.register(&dir, self.lease, conn)?;
        drop(st.leases.gate.write().await);
        let page = st.meta.readdir(&dir, None, LEASE_NAMES_MAX as u32)?;
        if page.more || page.items.len() > LEASE_NAMES_MAX {
            return Ok(LeaseNames {
                names: Vec::new(),
                complete: false,
            });
        }
        Ok(LeaseNames {
            names: page.items.into_iter().map(|e| e.name).collect(),
            complete: true,
        })
    }
}

/// Answered once the lease is given back or revoked.
impl Serve for req::Recall {
    async fn serve(self, st: &Arc<State>, _conn: ConnId) -> Result<(), Errno> {
        let dir = normalize(&self.dir, st.meta.limits())?;
        match st.leases.recall(&dir, self.id).await {
            Recalled::Returned | Recalled::Revoked => Ok(()),
        }
    }
}

/// The holder's long poll, at most half the RPC deadline.
impl Serve for req::LeaseWait {
    async fn serve(self, st: &Arc<State>, conn: ConnId) -> Result<Vec<u64>, Errno> {
        let cap = st.settings.config.rpc_timeout_ms / 2;
        let wait = Duration::from_millis(u64::from(self.wait_ms).min(cap));
        Ok(st.leases.wait_recalls(conn, wait).await)
    }
}

/// Drops the registration; at the granter also ends the lease (ESTALE if it was revoked).
impl Serve for req::LeaseReturn {
    async fn serve(self, st: &Arc<State>, _conn: ConnId) -> Result<(), Errno> {
        let dir = normalize(&self.dir, st.meta.limits())?;
        st.leases.unregister(&dir, self.lease);
        if self.lease.daemon == st.settings.id {
            st.leases.end(&dir, self.lease.id)?;
        }
        Ok(())
    }
}

/// Each operation as its single request would be applied (in the same capture of changed
/// keys: their copies go to the other owners before the reply).
impl Apply for req::Batch {
    fn apply(self, st: &State) -> Result<Vec<BatchOutcome>, Errno> {
        if self.ops.len() > LEASE_BATCH_MAX {
            return Err(Errno::einval(format!(
                "a batch of {} operations (at most {LEASE_BATCH_MAX})",
                self.ops.len()
            )));
        }
        let dir = normalize(&self.dir, st.meta.limits())?;
        st.leases.check_batch(&dir, self.lease)?;
        let n = self.ops.len() as u64;
        let outcomes = self
            .ops
            .into_iter()
            .map(|op| {
                let inside = normalize(op.path(), st.meta.limits())
                    .ok()
                    .is_some_and(|p| split(&p).is_some_and(|(parent, _)| parent == dir));
                if !inside {
                    return Err(Errno::einval(format!(
                        "{} is not a name in the leased directory {dir}",
                        op.path()
                    )));
                }
                match op {
                    BatchOp::Create(c) => c.apply(st),
                    BatchOp::Remove(r) => r.apply(st),
                }
            })
            .collect();
        st.leases
            .counters
            .batched_ops
            .fetch_add(n, Ordering::Relaxed);
        Ok(outcomes)
    }
}
