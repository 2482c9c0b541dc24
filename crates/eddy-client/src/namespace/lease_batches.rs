//! Directory leases (decision 0075), the holder's batches: creates and unlinks queued per
//! owning daemon, sent at `lease_batch_max` operations or after `lease_batch_age_ms`, their
//! outcomes applied, a refused batch replayed one request at a time, and deferred errors
//! kept for the next close, fsync or create in the directory.

use super::leases::NOT_AGAIN;
use crate::leases::{DirLease, LeaseState};
use crate::namespace::Namespace;
use crate::Errno;
use eddy_proto::req::{self, LEASE_BATCH_MAX};
use eddy_proto::{path, BatchOp, BatchOutcome, Request};
use eddy_rpc::Failure;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// A batch on its way: its operations and the future of its reply.
type Pending = (
    u32,
    Vec<BatchOp>,
    std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(eddy_proto::Reply, u64), Failure>> + Send>,
    >,
);

impl Namespace<'_> {
    /// Queues `op` for `owner`; true when the queue is full (the caller sends it). The
    /// first operation of a queue plans its send after `lease_batch_age_ms`.
    pub(super) fn queue(
        &self,
        l: &Arc<DirLease>,
        st: &mut LeaseState,
        owner: u32,
        op: BatchOp,
    ) -> bool {
        st.queue.entry(owner).or_default().push(op);
        st.queued += 1;
        st.oldest.get_or_insert_with(Instant::now);
        if st.queued >= self.0.leases.batch_max {
            return true;
        }
        if !st.timer {
            st.timer = true;
            let (client, l, age) = (self.client(), Arc::clone(l), self.0.leases.batch_age);
            tokio::spawn(async move {
                tokio::time::sleep(age).await;
                l.state().timer = false;
                client.ns().send_lease(&l).await;
            });
        }
        false
    }

    /// Sends what is queued under `l`, once it is on its connections (not waiting for the
    /// replies: they are handled in the background). What `close` does.
    pub(crate) async fn send_lease(&self, l: &Arc<DirLease>) {
        let pending = {
            let _order = l.sending.lock().await;
            let queue = l.take_queue();
            if queue.is_empty() {
                return;
            }
            self.start_batches(l, queue).await
        };
        let replies = Arc::clone(&l.replies).read_owned().await;
        let (client, l) = (self.client(), Arc::clone(l));
        tokio::spawn(async move {
            client.ns().settle_batches(&l, pending).await;
            drop(replies);
        });
    }

    /// Sends what is queued under `l` and waits for the replies of every batch of it sent
    /// so far. What `fsync` does, and every operation the lease does not answer.
    pub(crate) async fn flush_lease(&self, l: &Arc<DirLease>) {
        let pending = {
            let _order = l.sending.lock().await;
            let queue = l.take_queue();
            self.start_batches(l, queue).await
        };
        self.settle_batches(l, pending).await;
        // Batches sent earlier without waiting (by a close) are answered too.
        drop(l.replies.write().await);
    }

    /// Puts the batches of `queue` on their connections, in order, at most
    /// `LEASE_BATCH_MAX` operations each; one that cannot be sent fails its operations.
    async fn start_batches(
        &self,
        l: &Arc<DirLease>,
        queue: BTreeMap<u32, Vec<BatchOp>>,
    ) -> Vec<Pending> {
        let mut pending: Vec<Pending> = Vec::new();
        for (daemon, ops) in queue {
            let mut ops = ops;
            while !ops.is_empty() {
                let rest = ops.split_off(ops.len().min(LEASE_BATCH_MAX));
                let batch = std::mem::replace(&mut ops, rest);
                let req = Request::Batch(req::Batch {
                    dir: l.dir.clone(),
                    lease: l.lease,
                    ops: batch,
                });
                match self.rpc().start(daemon, &req).await {
                    Ok(reply) => {
                        let Request::Batch(req::Batch { ops: batch, .. }) = req else {
                            continue;
                        };
                        pending.push((daemon, batch, Box::pin(reply)));
                    }
                    Err(f) => {
                        let Request::Batch(req::Batch { ops: batch, .. }) = req else {
                            continue;
                        };
                        self.failed_batch(l, daemon, batch, f).await;
                    }
                }
            }
        }
        pending
    }

    /// Waits for the replies of batches and notes what failed.
    async fn settle_batches(&self, l: &Arc<DirLease>, pending: Vec<Pending>) {
        for (daemon, ops, reply) in pending {
            let outcomes = match reply.await {
                Ok((reply, generation)) => {
                    self.0.unsynced.note(daemon, generation);
                    eddy_proto::typed_reply::<req::Batch>(reply).map_err(Failure::Daemon)
                }
                Err(f) => Err(f),
            };
            match outcomes {
                Ok(outcomes) => self.batch_outcomes(l, ops, outcomes),
                Err(f) => self.failed_batch(l, daemon, ops, f).await,
            }
        }
    }

    /// The outcomes of a batch: a failed operation is noted for the calls that depend on
    /// it, and the lease answers nothing more (it is given back).
    fn batch_outcomes(&self, l: &Arc<DirLease>, ops: Vec<BatchOp>, outcomes: Vec<BatchOutcome>) {
        let n = ops.len();
        let mut failed = false;
        let mut outcomes = outcomes.into_iter();
        for op in ops {
            let outcome = outcomes.next().unwrap_or_else(|| {
                Err(Errno::eio(format!(
                    "a batch of {n} operations answered fewer"
                )))
            });
            if let Err(e) = outcome {
                failed = true;
                self.deferred_failed(l, &op, &e);
            }
        }
        if failed {
            self.give_back_later(l);
        }
    }

    /// A batch refused as a whole: refused for a membership that moved on (EREMCHG: not
    /// applied; decision 0081), sent to a daemon that left since, or queued for a daemon
    /// the view no longer places on, its
    /// operations are sent one by one to their owners now; on a full device its removals
    /// are sent one by one (they are served there) and its creates fail with ENOSPC;
    /// otherwise (the lease revoked, a daemon not reached) every operation fails with EIO.
    /// The lease is given back.
    async fn failed_batch(&self, l: &Arc<DirLease>, daemon: u32, ops: Vec<BatchOp>, f: Failure) {
        let f = match f {
            Failure::Unreachable(e) => self.rpc().unreachable(self.rpc().epoch(), daemon, e).await,
            f => f,
        };
        let moved = f.errno().is_moved() || !self.rpc().ids().contains(&daemon);
        if moved || (f.is_unreachable() && self.rpc().replicas() > 1) {
            self.replay_one_by_one(l, ops).await;
            return;
        }
        let e = f.into_errno();
        for op in ops {
            match op {
                BatchOp::Remove(r) if e.errno == libc::ENOSPC => {
                    let p = r.path.clone();
                    if let Err(e) = self.meta(&p, r).await {
                        self.0.leases.note_error(&p, e);
                    }
                }
                op => self.deferred_failed(l, &op, &e),
            }
        }
        if e.errno == libc::ENOSPC {
            self.0.leases.refused(&l.dir, NOT_AGAIN);
        }
        self.give_back_later(l);
    }

    /// A batch whose daemon could not be reached (or whose reply was lost with it), with
    /// other copies, or that a moved membership refused: each operation goes on its own to
    /// the first of its owners that answers, as without the lease (a create the lost daemon applied and passed on is ours if the
    /// entry carries our file id; a removal it applied is done).
    async fn replay_one_by_one(&self, l: &Arc<DirLease>, ops: Vec<BatchOp>) {
        let mut failed = false;
        for op in ops {
            let p = op.path().to_string();
            let done = match &op {
                BatchOp::Create(c) => match self.meta(&p, c.clone()).await {
                    // Applied by the copy that was lost, and passed on: ours if the entry
                    // carries our file id.
                    Err(e) if e.errno == libc::EEXIST => {
                        match self.meta(&p, req::Stat { path: p.clone() }).await {
                            Ok(i) if i.file_id == c.inode.file_id => Ok(()),
                            _ => Err(e),
                        }
                    }
                    other => other.map(|_| ()),
                },
                BatchOp::Remove(r) => match self.meta(&p, r.clone()).await {
                    // Applied by the copy that was lost, and passed on.
                    Err(e) if e.errno == libc::ENOENT => Ok(()),
                    other => other.map(|_| ()),
                },
            };
            if let Err(e) = done {
                failed = true;
                self.deferred_failed(l, &op, &e);
            }
        }
        if failed {
            self.give_back_later(l);
        }
    }

    /// A deferred operation failed: noted for the calls that depend on it (its close,
    /// fsync, the next create in the directory), and no longer answered from the lease.
    fn deferred_failed(&self, l: &DirLease, op: &BatchOp, e: &Errno) {
        let p = op.path();
        let errno = match e.errno {
            libc::ENOSPC | libc::EDQUOT => e.errno,
            _ => libc::EIO,
        };
        let what = match op {
            BatchOp::Create(_) => "create",
            BatchOp::Remove(_) => "unlink",
        };
        tracing::warn!(path = p, "a deferred {what} failed: {e}");
        self.0.leases.note_error(
            p,
            Errno::new(errno, format!("the deferred {what} of {p} failed: {e}")),
        );
        if let Some((_, name)) = path::split(p) {
            let mut st = l.state();
            st.active = false;
            st.created.remove(name);
        }
    }
}
