//! Advisory file locks (POSIX record locks, OFD locks, flock) through the daemon that is the
//! file's lock owner: `owner(chunk_hash(file_id, LOCK_CHUNK))`, a pure function of the
//! immutable file id, so every client and every name of the file (renames included) reach
//! the same lock table. An owner is this client's session plus the caller's owner number.

use crate::{Client, File};
use eddy_proto::{req, Errno, FileId, LockInfo, LockKind, LockOwner, LockRange, LockReply};
use std::time::Duration;

/// The chunk index whose placement names a file's lock daemon (never a real chunk: no file
/// reaches 2^64 chunks).
const LOCK_CHUNK: u64 = u64::MAX;

/// How long one waiting lock request waits at the daemon before it is asked again.
const WAIT_SLICE: Duration = Duration::from_millis(500);

/// One lock or unlock request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRequest {
    /// Owner number inside this client (FUSE: the kernel's lock owner; library users choose:
    /// e.g. a process id for POSIX-like locks, a handle number for OFD-like locks).
    pub owner: u64,
    /// The open file the lock is taken through: `release_locks` with this handle drops it.
    pub handle: u64,
    /// Process id reported to F_GETLK callers.
    pub pid: u32,
    pub kind: LockKind,
    pub range: LockRange,
}

/// This client's identity in lock owners: random, so two clients never share an owner.
pub(crate) struct LockSession(u128);

impl LockSession {
    pub fn new() -> LockSession {
        LockSession(rand::random::<u128>())
    }

    pub fn id(&self) -> u128 {
        self.0
    }

    /// The lock owner of the caller's owner number `owner` in this session.
    pub fn owner(&self, owner: u64) -> LockOwner {
        LockOwner {
            session: self.0,
            owner,
        }
    }
}

impl Client {
    /// This client's lock session (part of every lock owner it uses).
    pub fn lock_session(&self) -> u128 {
        self.0.locks.id()
    }

    fn lock_owner(&self, owner: u64) -> LockOwner {
        self.0.locks.owner(owner)
    }

    /// The daemon holding the lock table of a file.
    /// With R copies, the first of the chunk's owners not believed down (decision 0020: the
    /// locks held on a daemon that died are gone with it, as with one copy).
    fn lock_daemon(&self, file_id: FileId) -> u32 {
        let owners = self
            .rpc()
            .ranked(self.rpc().chunk_owners(file_id, LOCK_CHUNK));
        owners[0]
    }

    /// One lock attempt. With `wait` zero, a conflict is EAGAIN; otherwise the daemon waits
    /// up to `wait` (at most half the RPC deadline) and `Ok(false)` means still blocked: the
    /// caller decides whether to ask again (FUSE checks for a signal in between).
    pub async fn lock_once(
        &self,
        f: &File,
        req: &LockRequest,
        wait: Duration,
    ) -> Result<bool, Errno> {
        let file_id = f.file_id();
        let wait_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
        let r = req::Lock {
            file_id,
            owner: self.lock_owner(req.owner),
            handle: req.handle,
            pid: req.pid,
            kind: req.kind,
            range: req.range,
            wait_ms,
        };
        let reply = self.rpc().call(self.lock_daemon(file_id), r).await?;
        Ok(reply == LockReply::Granted)
    }

    /// F_SETLK (`wait` false: EAGAIN on conflict) or F_SETLKW (`wait` true: asks again until
    /// granted; dropping the future stops waiting).
    pub async fn lock(&self, f: &File, req: &LockRequest, wait: bool) -> Result<(), Errno> {
        if !wait {
            self.lock_once(f, req, Duration::ZERO).await?;
            return Ok(());
        }
        while !self.lock_once(f, req, WAIT_SLICE).await? {}
        Ok(())
    }

    /// F_GETLK: the lock of another owner that would stop `owner` taking `kind` over `range`.
    pub async fn test_lock(
        &self,
        f: &File,
        owner: u64,
        kind: LockKind,
        range: LockRange,
    ) -> Result<Option<LockInfo>, Errno> {
        let file_id = f.file_id();
        let r = req::TestLock {
            file_id,
            owner: self.lock_owner(owner),
            kind,
            range,
        };
        self.rpc().call(self.lock_daemon(file_id), r).await
    }

    /// Drops this client's locks of the file held by `owner` (a close: POSIX locks) and/or
    /// taken through `handle` (the last close of an open file: OFD locks and flock).
    pub async fn release_locks(
        &self,
        f: &File,
        owner: Option<u64>,
        handle: Option<u64>,
    ) -> Result<(), Errno> {
        let file_id = f.file_id();
        let r = req::ReleaseLocks {
            file_id,
            session: self.0.locks.id(),
            owner,
            handle,
        };
        self.rpc().call(self.lock_daemon(file_id), r).await
    }
}
