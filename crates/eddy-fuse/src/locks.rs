//! Advisory locks through the mount (decision 0008). The kernel sends POSIX record locks,
//! OFD locks and flock(2) (FUSE_POSIX_LOCKS, FUSE_FLOCK_LOCKS) as getlk/setlk; fuser 0.18
//! does not pass on FUSE_LK_FLOCK, so a flock is served as a whole-file lock whose owner is
//! the open file (the kernel's owner for flock), as NFS does. Locks are released:
//! POSIX ones at any close by their process (flush carries the process's lock owner), OFD
//! ones and flock at the last close of the open file (release: by handle), all of them when
//! the mount's connection to the daemon closes.
//!
//! A blocking lock (F_SETLKW, LOCK_EX without LOCK_NB) waits on the runtime, not on a FUSE
//! thread, in slices: between slices, a signal pending for the waiting thread (or its death)
//! ends the wait with EINTR, which the kernel turns into a restart or EINTR as for a local
//! lock. fuser 0.18 answers FUSE_INTERRUPT with ENOSYS itself, so the pending signal is the
//! only notice the mount gets.

use crate::fs::EddyFs;
use eddy_client::{Client, File, FileId, LockKind, LockRange, LockRequest};
use eddy_proto::Errno;
use fuser::{INodeNo, Notifier};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tracing::{debug, warn};

/// How long one waiting lock request waits at the daemon: the latency of an interruption.
const WAIT_SLICE: Duration = Duration::from_millis(200);

/// The kernel's "to the end of any file" (OFFSET_MAX).
const OFFSET_MAX: u64 = i64::MAX as u64;

/// Files this mount has taken locks on (closes of other files send no release), and the
/// session's notifier, to drop the kernel's cached pages of a file when a lock is granted.
#[derive(Default)]
pub(crate) struct MountLocks {
    files: Mutex<HashSet<FileId>>,
    notifier: Arc<OnceLock<Notifier>>,
}

impl MountLocks {
    /// Where the session's notifier goes once the session exists.
    pub(crate) fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        Arc::clone(&self.notifier)
    }

    fn note(&self, id: FileId) {
        eddy_proto::sync::lock(&self.files).insert(id);
    }

    fn has(&self, id: FileId) -> bool {
        eddy_proto::sync::lock(&self.files).contains(&id)
    }
}

/// F_RDLCK/F_WRLCK/F_UNLCK as a lock kind.
pub(crate) fn kind_of(typ: i32) -> Result<LockKind, Errno> {
    match typ {
        libc::F_RDLCK => Ok(LockKind::Read),
        libc::F_WRLCK => Ok(LockKind::Write),
        libc::F_UNLCK => Ok(LockKind::Unlock),
        other => Err(Errno::einval(format!("unknown lock type {other}"))),
    }
}

/// A lock kind as F_RDLCK/F_WRLCK/F_UNLCK.
pub(crate) fn typ_of(kind: LockKind) -> i32 {
    match kind {
        LockKind::Read => libc::F_RDLCK,
        LockKind::Write => libc::F_WRLCK,
        LockKind::Unlock => libc::F_UNLCK,
    }
}

/// The kernel's range (inclusive, OFFSET_MAX for "to the end") as a lock range.
pub(crate) fn range_of(start: u64, end: u64) -> Result<LockRange, Errno> {
    let end = if end >= OFFSET_MAX { u64::MAX } else { end };
    if start > end {
        return Err(Errno::einval(format!("lock range {start}..={end}")));
    }
    Ok(LockRange { start, end })
}

/// A lock range's end as the kernel wants it back.
pub(crate) fn kernel_end(end: u64) -> u64 {
    end.min(OFFSET_MAX)
}

/// Whether thread `tid` has a signal pending that it does not block or ignore, or is gone.
pub(crate) fn interrupted(tid: u32) -> bool {
    // privileged-path: the kernel's /proc
    let Ok(status) = std::fs::read_to_string(format!("/proc/{tid}/status")) else {
        return true;
    };
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let pending = field("SigPnd:") | field("ShdPnd:");
    pending & !field("SigBlk:") & !field("SigIgn:") != 0
}

/// Drops the kernel's cached pages and attributes of an inode: a lock was just granted, and
/// what the page cache holds may predate writes made on other nodes under the lock before.
pub(crate) fn invalidate(slot: &OnceLock<Notifier>, ino: INodeNo) {
    if let Some(n) = slot.get() {
        // ENOENT: the kernel holds nothing of the inode.
        if let Err(e) = n.inval_inode(ino, 0, 0) {
            debug!(ino = ino.0, error = %e, "page cache invalidation");
        }
    }
}

/// Waits for a lock in slices until it is granted, fails (EDEADLK when the wait would close
/// a cycle of owners), or the waiter is interrupted.
pub(crate) async fn wait_for_lock(
    client: Client,
    file: File,
    req: LockRequest,
    tid: u32,
    granted: impl FnOnce() + Send + 'static,
) -> Result<(), Errno> {
    let mut waiting = client.waiting();
    let out = loop {
        match client.lock_once(&file, &req, WAIT_SLICE).await {
            Ok(true) => break Ok(true),
            Ok(false) => {}
            Err(e) => break Err(e),
        }
        if interrupted(tid) {
            debug!(
                tid,
                path = &*file.path(),
                "lock wait interrupted by a signal"
            );
            break Err(Errno::new(
                libc::EINTR,
                "interrupted while waiting for a lock",
            ));
        }
        // A wait that would close a cycle of owners across nodes: EDEADLK (decision 0028).
        match client.check_deadlock(&file, &req, &mut waiting).await {
            Ok(true) => break Ok(true),
            Ok(false) => {}
            Err(e) => break Err(e),
        }
    };
    client.stop_waiting(&waiting).await;
    if matches!(out, Ok(true)) {
        // Off the thread that drives the runtime (decision 0052): the kernel's invalidation
        // may wait for a page that a read being served holds, and that read may need the
        // runtime for its reply.
        if let Err(e) = tokio::task::spawn_blocking(granted).await {
            warn!("after granting a lock: {e}");
        }
    }
    out.map(|_| ())
}

impl EddyFs {
    /// Notes that a lock was asked for on this file through this mount.
    pub(crate) fn note_lock(&self, id: FileId) {
        self.locks().note(id);
    }

    /// Whether a FLUSH or RELEASE of `file` has anything to do: a size this client's writes
    /// reached to publish, or locks this mount took on the file to drop. Most closes of an
    /// mdtest-like workload (empty files, stats, reads) have neither.
    pub(crate) fn close_has_work(&self, file: &File) -> bool {
        self.client_ref().close_has_work(file) || self.locks().has(file.file_id())
    }

    /// Whether a lock was taken on file `id` through this mount.
    pub(crate) fn locked(&self, id: FileId) -> bool {
        self.locks().has(id)
    }

    /// On close of a descriptor (flush): the POSIX locks of the closing process go.
    pub(crate) fn release_owner_locks(&self, file: &File, owner: u64) -> Result<(), Errno> {
        if !self.locks().has(file.file_id()) {
            return Ok(());
        }
        self.run(self.client_ref().release_locks(file, Some(owner), None))
    }

    /// On the last close of an open file (release): its OFD locks and flock go (and the POSIX
    /// locks of `owner`, when the kernel names one).
    pub(crate) fn release_handle_locks(
        &self,
        file: &File,
        handle: u64,
        owner: Option<u64>,
    ) -> Result<(), Errno> {
        if !self.locks().has(file.file_id()) {
            return Ok(());
        }
        self.run(self.client_ref().release_locks(file, owner, Some(handle)))
    }
}
