//! Advisory locks (decision 0008), served from the daemon's lock table with the connection
//! they came on: a lock is held by its connection and goes when it closes.

use super::Serve;
use crate::advisory::{bad_range, ConnId, LockAsk};
use crate::state::State;
use eddy_proto::{req, Errno, LockInfo, LockKind, LockOwner, LockReply};
use std::sync::Arc;
use std::time::Duration;

/// In the grace period after a restart, ENOLCK for anything but an unlock: ask again
/// (decision 0028). A conflict is EAGAIN without a wait; with one, the daemon waits up to `wait_ms` (capped
/// at half the RPC deadline) and then replies `Blocked`: the client asks again.
impl Serve for req::Lock {
    async fn serve(self, st: &Arc<State>, conn: ConnId) -> Result<LockReply, Errno> {
        bad_range(self.range)?;
        let ask = LockAsk {
            file_id: self.file_id,
            owner: self.owner,
            conn,
            handle: self.handle,
            pid: self.pid,
            kind: self.kind,
            range: self.range,
        };
        let locks = &st.file_locks;
        if self.kind != LockKind::Unlock {
            locks.check_grace()?;
        }
        if self.wait_ms == 0 || self.kind == LockKind::Unlock {
            return match locks.try_lock(&ask)? {
                Ok(()) => Ok(LockReply::Granted),
                Err(h) => Err(Errno::new(
                    libc::EAGAIN,
                    format!(
                        "bytes {}..={} are locked by another owner (pid {} on its node)",
                        h.range.start, h.range.end, h.pid
                    ),
                )),
            };
        }
        let cap = st.settings.config.rpc_timeout_ms / 2;
        let wait = Duration::from_millis(u64::from(self.wait_ms).min(cap));
        Ok(match locks.lock_wait(&ask, wait).await? {
            true => LockReply::Granted,
            false => LockReply::Blocked,
        })
    }
}

/// In the grace period, ENOLCK: the table is not complete yet.
impl Serve for req::TestLock {
    async fn serve(self, st: &Arc<State>, _conn: ConnId) -> Result<Option<LockInfo>, Errno> {
        bad_range(self.range)?;
        st.file_locks.check_grace()?;
        Ok(st
            .file_locks
            .test(self.file_id, self.owner, self.kind, self.range))
    }
}

impl Serve for req::ReleaseLocks {
    async fn serve(self, st: &Arc<State>, _conn: ConnId) -> Result<(), Errno> {
        st.file_locks
            .release(self.file_id, self.session, self.owner, self.handle);
        Ok(())
    }
}

/// A lock held before this daemon restarted, taken back in its grace period (decision 0028).
impl Serve for req::ReclaimLock {
    async fn serve(self, st: &Arc<State>, conn: ConnId) -> Result<bool, Errno> {
        bad_range(self.range)?;
        st.file_locks.reclaim(&LockAsk {
            file_id: self.file_id,
            owner: self.owner,
            conn,
            handle: self.handle,
            pid: self.pid,
            kind: self.kind,
            range: self.range,
        })
    }
}

/// The owners a blocked waiter waits for (decision 0028).
impl Serve for req::LockHolders {
    async fn serve(self, st: &Arc<State>, _conn: ConnId) -> Result<Vec<LockOwner>, Errno> {
        bad_range(self.range)?;
        Ok(st
            .file_locks
            .holders(self.file_id, self.owner, self.kind, self.range))
    }
}

/// This daemon as the deadlock coordinator: records a wait, or finds the cycle it would
/// close (decision 0028). The record lasts `ttl_ms`, at most the RPC deadline.
impl Serve for req::WaitsFor {
    async fn serve(self, st: &Arc<State>, _conn: ConnId) -> Result<bool, Errno> {
        let ttl = u64::from(self.ttl_ms).min(st.settings.config.rpc_timeout_ms);
        st.lock_waits.wait(
            self.waiter,
            self.wait,
            self.holders,
            Duration::from_millis(ttl),
        )
    }
}
