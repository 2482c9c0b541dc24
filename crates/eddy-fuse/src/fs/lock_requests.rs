//! The lock requests of the `fuser::Filesystem` implementation (`requests.rs`): getlk
//! and setlk (POSIX locks and flock(2) across nodes, blocking ones waiting on the runtime).

use super::{failed, EddyFs};
use fuser::{FileHandle, INodeNo, LockOwner, ReplyEmpty, ReplyLock, Request};

impl EddyFs {
    /// The kernel's `getlk` request (`Filesystem::getlk` in `requests.rs`).
    pub(super) fn getlk_request(
        &self,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        reply: ReplyLock,
    ) {
        use crate::locks::{kernel_end, kind_of, range_of, typ_of};
        let res = self.file(fh).and_then(|f| {
            let (kind, range) = (kind_of(typ)?, range_of(start, end)?);
            self.run(self.client.test_lock(&f, lock_owner.0, kind, range))
        });
        match res {
            Ok(Some(h)) => reply.locked(
                h.range.start,
                kernel_end(h.range.end),
                typ_of(h.kind),
                h.pid,
            ),
            Ok(None) => reply.locked(start, end, libc::F_UNLCK, 0),
            Err(e) => reply.error(failed("getlk", &e)),
        }
    }

    /// The kernel's `setlk` request (`Filesystem::setlk` in `requests.rs`).
    #[expect(clippy::too_many_arguments, reason = "fuser's arguments, passed on")]
    pub(super) fn setlk_request(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        // Also reached by flock(2) (FUSE_FLOCK_LOCKS): a whole-file lock owned by the open file.
        use crate::locks::{invalidate, kind_of, range_of, wait_for_lock};
        let ask = self.file(fh).and_then(|f| {
            let lr = eddy_client::LockRequest {
                owner: lock_owner.0,
                handle: fh.0,
                pid,
                kind: kind_of(typ)?,
                range: range_of(start, end)?,
            };
            Ok((f, lr))
        });
        let (f, lr) = match ask {
            Ok(x) => x,
            Err(e) => return reply.error(failed("setlk", &e)),
        };
        self.note_lock(f.file_id());
        // Whoever gets the range next must see the size this node's writes reached.
        let published = match self.pass_handle(fh.0) {
            true => self.run(self.client.passthrough_flush(&f)),
            false => self.run(self.client.close(&f)),
        };
        if let Err(e) = published {
            return reply.error(failed("setlk", &e));
        }
        let slot = self.locks().notifier_slot();
        let taking = lr.kind != eddy_client::LockKind::Unlock;
        if !sleep || !taking {
            return match self.run(self.client.lock(&f, &lr, false)) {
                Ok(()) => {
                    if taking {
                        invalidate(&slot, ino);
                    }
                    reply.ok()
                }
                Err(e) => reply.error(failed("setlk", &e)),
            };
        }
        // A blocking lock waits on the runtime, so that it holds no FUSE thread.
        let (client, tid) = (self.client.clone(), req.pid());
        self.driver.spawn(async move {
            match wait_for_lock(client, f, lr, tid, move || invalidate(&slot, ino)).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(failed("setlk", &e)),
            }
        });
    }
}
