//! The requests: one struct per request, and `request_table!`, the one list they are named in.
//!
//! From the list come the wire enum `Request` (one variant per request, holding its struct),
//! the kinds `Op` (name, index, properties) and each request's `Rpc` impl (its reply type,
//! its kind, the path it is addressed by). A new request is one struct here, one line in the
//! list, and one handler in the daemon (`eddy-daemon/src/ops/`); the compiler finds every
//! place that must know of it.
//!
//! The requests are a module of their own (`eddy_proto::req::Stat`), apart from the records
//! they carry, so that their names (`Read`, `Write`, `Sync`, `Link`, `SetAttr`) do not clash.

use super::codec::{decode, outside, unexpected_payload};
use super::records::*;
use super::replies::*;
use crate::frame::{Frame, OutFrame};
use crate::Errno;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

// ---- metadata: sent to owner(hash(path)) ----

/// Creates an entry. With `exclusive`, an existing entry gives EEXIST; without, the
/// existing entry is returned as it is, whatever its kind (O_CREAT without O_EXCL: the
/// client tells a file it may open from a directory it may not). Replies `Inode`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Create {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
    pub inode: Inode,
    pub exclusive: bool,
}

/// Replies `Inode` or ENOENT.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
}

/// Removes an entry; replies the removed `Inode`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remove {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
    pub kind: RemoveKind,
}

/// Changes attributes; replies the new `Inode`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAttr {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
    pub attr: super::SetAttr,
}

/// Raises the size to at least `size` (merged with max) and updates mtime; replies `Inode`.
/// Sent by writers; concurrent writers never wait on each other.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrowSize {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
    pub size: u64,
}

/// Reserves `len` bytes at the end of the file atomically (O_APPEND); replies `Offset`
/// with the start of the reserved range.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReserveAppend {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
    pub len: u64,
}

/// Inserts (or, with `replace`, overwrites) an entry as given: the second half of rename.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Insert {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
    pub inode: Inode,
    pub replace: bool,
}

/// Up to `limit` children of `dir` held by this daemon with names after `after`, in
/// byte order of their names. Replies `Entries`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readdir {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub dir: String,
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::opt_path))]
    pub after: Option<String>,
    pub limit: u32,
}

/// Whether this daemon holds any child of `dir`. Replies `Bool`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HasChildren {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub dir: String,
}

/// Up to `limit` entries strictly below `dir` held by this daemon, after the path `after`.
/// Replies `Subtree`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListSubtree {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub dir: String,
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::opt_path))]
    pub after: Option<String>,
    pub limit: u32,
}

// ---- hard links (decision 0009) ----

/// Counts one more name of the file at `path` (the first half of link(2); the client then
/// inserts the new name). A file with one name gets an identity record on this daemon
/// (link count 2) and its own record becomes a name of it, in one atomic batch; a name of
/// a shared file replies `Shared`, and sent `OnIdentity` it counts one more name. A
/// directory is EPERM. Replies the identity `Inode`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
}

/// Counts one name less of the shared file `file_id` whose identity record this daemon
/// holds (after one of its names was removed); at zero the identity record goes too.
/// Replies the identity `Inode` with the count left (0: the client drops the data).
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropName {
    pub file_id: FileId,
}

/// `op`, an encoded request on an entry's path, applied to the identity record of the
/// shared file `file_id` (what a `Shared` reply asks for). Replies what `op` replies.
/// Encoded, not nested, so that decoding a frame never recurses: an `op` that is itself
/// `OnIdentity` is EINVAL.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnIdentity {
    pub file_id: FileId,
    #[serde(with = "serde_bytes")]
    pub op: Vec<u8>,
}

// ---- data: sent to owner(hash(file_id, k)) ----

/// Writes `data` (the pieces' bytes back to back) into the chunks. Replies `Ok`.
/// With `backing` (a file under a linked prefix), a chunk missing here is fetched from the
/// backend before a partial write, and written chunks are dirty until written back.
/// `sums`: the CRC32C of each block-aligned segment of the pieces (`checksum::sums`),
/// checked before anything is written (a mismatch is EIO, nothing written); empty when
/// the client sends none (the daemon then computes what it stores).
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    pub file_id: FileId,
    pub pieces: Vec<Piece>,
    pub sums: Vec<u32>,
    /// Travels as the frame's payload, outside the encoding.
    #[serde(with = "outside")]
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::bytes))]
    pub data: Bytes,
    pub backing: Option<Backing>,
}

/// Reads the pieces; holes and bytes past a chunk's end read as zeros. Replies `Data`
/// with the pieces' bytes back to back, or `Checked` with their checksums too (a daemon
/// with checksums on: the stored checksums were verified first, a mismatch is EIO naming
/// the file id, chunk and offset). With `backing`, a chunk missing here is fetched
/// from the backend (once, whatever the number of concurrent readers) and kept.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read {
    pub file_id: FileId,
    pub pieces: Vec<Piece>,
    pub backing: Option<Backing>,
}

/// Fetches the listed chunks of a backend file that this daemon owns and does not hold
/// (read-ahead, stage-in); `pin` keeps them from eviction. Replies `Count` with the bytes
/// fetched from the backend.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prefetch {
    pub file_id: FileId,
    pub chunks: Vec<u64>,
    pub backing: Backing,
    pub pin: bool,
}

/// Writes this daemon's dirty chunks of files under `prefix` back to the backend (pwrite
/// into the backend file, then fsync), for files with ids after `after`, at most `limit`
/// files, and for at most half the RPC deadline (then `more`, and the file under way is
/// incomplete). Replies `Flushed`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlushDirty {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub prefix: String,
    pub after: Option<FileId>,
    pub limit: u32,
}

/// Releases the pins of this daemon's chunks of files under `prefix`. Replies `Count`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unpin {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub prefix: String,
}

/// Drops the data at and after byte `size` of the file held by this daemon. Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruncateData {
    pub file_id: FileId,
    pub size: u64,
}

/// Drops every chunk of the file held by this daemon. Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveData {
    pub file_id: FileId,
}

/// Makes this daemon's chunks of the file and its metadata store durable. Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sync {
    pub file_id: Option<FileId>,
}

// ---- backend tier, metadata side: sent to owner(hash(path)) ----

/// Checks a linked file against its backend copy on open: a clean file whose backend
/// mtime or size changed gets a new generation (a new file id: the old chunks are
/// garbage); `for_write` marks it dirty. Replies `Revalidated`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Validate {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
    pub for_write: bool,
}

/// Renames the backend copy of a linked entry (the write-through half of rename; the
/// metadata moves with Insert/Remove). A missing backend source is fine (never flushed).
/// Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendRename {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub from: String,
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub to: String,
}

/// Finalises this daemon's dirty entries under `prefix` in the backend (create, size,
/// mode, times), skipping `skip` (files whose data did not flush), after the path `after`,
/// at most `limit`. Replies `Flushed`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalizeDirty {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub prefix: String,
    pub skip: Vec<FileId>,
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::opt_path))]
    pub after: Option<String>,
    pub limit: u32,
}

// ---- backend tier, every daemon ----

/// A linked entry was renamed: this daemon's records of dirty files under `from` now
/// name paths under `to`. Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rebind {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub from: String,
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub to: String,
}

// ---- extended attributes: sent to owner(hash(path)) ----

/// setxattr(2) on the entry itself (no symlink is followed). Replies `Inode`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetXattr {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::xattr_name))]
    pub name: String,
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
    pub how: XattrSet,
}

/// getxattr(2). Replies `Data` with the value, or ENODATA.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetXattr {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::xattr_name))]
    pub name: String,
}

/// listxattr(2). Replies `Names`, in name order.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListXattr {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
}

/// removexattr(2). Replies `Inode`, or ENODATA.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveXattr {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::xattr_name))]
    pub name: String,
}

// ---- advisory locks: sent to the lock owner of the file id (placement by file id) ----

/// Takes (Read/Write) or releases (Unlock) `range` of the file for `owner`, POSIX-style:
/// the owner's own overlapping locks are replaced, split or merged. A conflict replies
/// EAGAIN when `wait_ms` is 0; otherwise the daemon waits up to `wait_ms` (capped at half
/// the RPC deadline) and then replies `LockBlocked`: the client asks again. `handle`
/// names the open file the lock came through (released with it). Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    pub file_id: FileId,
    pub owner: LockOwner,
    pub handle: u64,
    pub pid: u32,
    pub kind: LockKind,
    pub range: LockRange,
    pub wait_ms: u32,
}

/// F_GETLK: the first lock of another owner that would conflict. Replies `LockTest`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestLock {
    pub file_id: FileId,
    pub owner: LockOwner,
    pub kind: LockKind,
    pub range: LockRange,
}

/// Drops every lock of the file held by `owner` (close: POSIX locks) and/or taken through
/// `handle` of `session` (release of an open file: OFD locks and flock). Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseLocks {
    pub file_id: FileId,
    pub session: u128,
    pub owner: Option<u64>,
    pub handle: Option<u64>,
}

// ---- daemon ----

/// Replies `Status`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status;

/// Stops the daemon cleanly after replying `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shutdown;

// ---- directory rename intents: sent to owner(hash(from)) (decision 0010) ----

/// Records the intent to rename the directory `from` to `to`, durably (journal fsync)
/// before replying, held by this connection until it ends, is released or the connection
/// closes. Replies `Renames`, empty when recorded. When an unfinished rename of `from` is
/// recorded already and no other open connection holds it, this connection takes it over
/// and it is replied instead (nothing new is recorded: the caller completes that one);
/// held by another open connection, EBUSY.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeginRename {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub from: String,
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub to: String,
    pub dir_id: FileId,
}

/// Takes over, for this connection, up to `limit` unfinished renames that no open
/// connection holds (their renamer died or gave up, or this daemon restarted since), or,
/// with `from`, only the rename of `from` (also when this connection holds it already).
/// Replies `Renames`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRenames {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::opt_path))]
    pub from: Option<String>,
    pub limit: u32,
}

/// The rename of `from` to `to` is complete (or undone): its intent goes, durably. An
/// intent of `from` to another path stays; no intent at all is fine. Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndRename {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub from: String,
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub to: String,
}

/// This connection gives up its hold on the rename of `from`, which stays recorded for
/// whoever completes it. Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseRename {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub from: String,
}

// ---- permissions and directory times: sent to owner(hash(path)) ----

/// An entry was created, removed or renamed in the directory `path` at `time`: its mtime
/// and ctime become at least `time` (merged with max, so that touches from many clients,
/// in any order, never move them backwards). Kept in Eddy only, never written through to
/// a linked backend (the backend directory's own times move with the write-through of the
/// change itself). ENOTDIR for anything but a directory. Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TouchDir {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
    pub time: Timespec,
}

/// A write or truncate by a caller without the privilege to keep set-id bits: clears the
/// set-user-ID bit of the regular file `path`, and its set-group-ID bit when group execute
/// is set (without it, the bit marks mandatory locking and stays), atomically under the
/// entry's lock; ctime moves when a bit was cleared. Other kinds are left as they are.
/// Replies `Inode`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClearSetId {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
}

/// A subdirectory of the directory `dir` was made (`delta` 1) or removed or moved away
/// (-1): its link count, 2 and its subdirectories, moves by `delta` (never below 2).
/// ENOTDIR for anything but a directory. Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountSubdirs {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub dir: String,
    pub delta: i32,
}

// ---- data: sent to owner(hash(file_id, k)) ----

/// Reserves storage for the pieces in the file's data file (fallocate): later writes
/// there cannot fail for want of room. Bytes not written read as zeros. ENOSPC when the
/// device cannot hold them. Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocate {
    pub file_id: FileId,
    pub pieces: Vec<Piece>,
}

// ---- data integrity, every daemon (decision 0019) ----

/// Verifies every stored block of up to `limit` chunks held here, in (file id, chunk)
/// order after `after`. Replies `Scrubbed`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scrub {
    pub after: Option<(FileId, u64)>,
    pub limit: u32,
}

// ---- replication: daemon to daemon (decision 0020) ----

/// The current state of metadata keys a peer changed, for the other owners of those
/// keys: each key's record is stored as given, or removed (`None`). Replies `Digests`: the
/// digest of each key's record as this daemon holds it afterwards, in their order.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replicate {
    pub changes: Vec<KeyState>,
}

// ---- repair: daemon to daemon, and `eddy repair` (decision 0021) ----

/// Chunks of a file that `target`, one of their owners, missed (it could not be reached)
/// and that this daemon holds: recorded as hints and pushed to `target` by the repair
/// loop. Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hint {
    pub target: u32,
    pub file_id: FileId,
    pub chunks: Vec<u64>,
}

/// The whole state of a chunk as another owner holds it: `present` false removes it;
/// else `data` (the payload) is its content (its length is the chunk's) and `sums` the
/// checksums of its block-aligned segments (may be empty). Replies `Digests` with the
/// digest of the chunk as this daemon holds it afterwards.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutChunk {
    pub file_id: FileId,
    pub chunk: u64,
    pub present: bool,
    pub sums: Vec<u32>,
    #[serde(with = "outside")]
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::bytes))]
    pub data: Bytes,
}

/// Pushes the hints held for `target` now, for as long as half the RPC deadline; with
/// `full`, first records a hint for every item held here that `target` owns (a
/// replaced daemon). Replies `Count`: the hints still held for `target`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairFor {
    pub target: u32,
    pub full: bool,
}

/// Wakes the repair loop (`eddy repair`); with `full`, first records a hint for every
/// item held here for each of its other owners. Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repair {
    pub full: bool,
}

/// What a request is, beyond its fields: one bit each, set in `request_table!`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Props(u8);

impl Props {
    /// Changes state that a `Sync` makes durable: the client counts the daemon for the next
    /// fsync (decision 0015). Writes are counted by the open file they went through instead.
    pub const CHANGES: u8 = 1;
    /// Disk-bound: touches chunk files, syncs storage or reaches the backend (the daemon runs
    /// it on its blocking pool), as opposed to a metadata operation at memory speed.
    pub const STORAGE: u8 = 1 << 1;
    /// A metadata request that may reach the backend when its path is under a linked prefix
    /// (import, write-through): then it runs on the blocking pool too.
    pub const BACKEND: u8 = 1 << 2;
    /// May add entries or data, so is checked against the room left (`Request::adds_bytes`);
    /// the others (reads, updates in place, removals) must work on a full device.
    pub const GROWS: u8 = 1 << 3;
    /// Served by a daemon that is rejoining (decision 0021): what peers and tools send.
    /// Clients' requests are answered EHOSTDOWN meanwhile.
    pub const REJOINING: u8 = 1 << 4;

    pub const fn new(bits: u8) -> Props {
        Props(bits)
    }
    pub const fn changes(self) -> bool {
        self.0 & Props::CHANGES != 0
    }
    pub const fn storage(self) -> bool {
        self.0 & Props::STORAGE != 0
    }
    pub const fn backend(self) -> bool {
        self.0 & Props::BACKEND != 0
    }
    pub const fn grows(self) -> bool {
        self.0 & Props::GROWS != 0
    }
    pub const fn rejoining(self) -> bool {
        self.0 & Props::REJOINING != 0
    }
}

/// A request: its struct, the reply a successful call gets, what kind it is. Implemented by
/// `request_table!` for every request struct of this module.
pub trait Rpc: Into<Request> + Send + 'static {
    /// What a successful call returns (converted from the wire's `Reply`).
    type Reply: ReplyType + Send + 'static;
    /// The request's kind.
    const OP: Op;
    /// The namespace path the request is addressed by (its owner is `owner(hash(path))`),
    /// for requests addressed by a path.
    fn path(&self) -> Option<&str>;
}

/// The list of requests. **A line's position is the request's tag on the wire** (bincode's
/// variant index of `Request`) and its index in `Op`: add new requests at the end; never
/// reorder, remove or insert a line, or every daemon and client of another version
/// misreads every request after it.
///
/// Each line: the struct, its op name (logs, counters), the field holding the path it is
/// addressed by (if any), its reply type, how the daemon serves it (`store`: applied to the
/// stores, inline or on the blocking pool; `conn`: asynchronously, with the connection it
/// came on), and its `Props`.
///
/// Invoked with the name of a macro that receives the list (`request_table!(my_macro)`):
/// this crate builds `Request` and `Op` from it, the daemon its dispatch.
#[macro_export]
macro_rules! request_table {
    ($m:ident) => {
        $m! {
            Create "create" { path } -> Inode, store, CHANGES | BACKEND | GROWS;
            Stat "stat" { path } -> Inode, store, BACKEND;
            Remove "remove" { path } -> Inode, store, CHANGES | BACKEND;
            SetAttr "setattr" { path } -> Inode, store, CHANGES | BACKEND;
            GrowSize "grow_size" { path } -> Inode, store, CHANGES | BACKEND;
            ReserveAppend "reserve_append" { path } -> Offset, store, CHANGES | BACKEND;
            Insert "insert" { path } -> (), store, CHANGES | GROWS;
            Readdir "readdir" { dir } -> DirPage, store, BACKEND;
            HasChildren "has_children" { dir } -> bool, store, BACKEND;
            ListSubtree "list_subtree" { dir } -> SubtreePage, store, 0;
            Link "link" { path } -> Inode, store, CHANGES | BACKEND | GROWS;
            DropName "drop_name" {} -> Inode, store, CHANGES;
            OnIdentity "on_identity" {} -> Reply, store, CHANGES;
            Write "write" {} -> (), store, STORAGE | GROWS;
            Read "read" {} -> ReadReply, store, STORAGE;
            Prefetch "prefetch" {} -> u64, store, STORAGE;
            FlushDirty "flush_dirty" {} -> Flushed, store, CHANGES | STORAGE;
            Unpin "unpin" {} -> u64, store, CHANGES | STORAGE;
            TruncateData "truncate_data" {} -> (), store, CHANGES | STORAGE;
            RemoveData "remove_data" {} -> (), store, CHANGES | STORAGE;
            Sync "sync" {} -> (), store, STORAGE;
            Validate "validate" { path } -> Revalidated, store, CHANGES | STORAGE;
            BackendRename "backend_rename" {} -> (), store, CHANGES | STORAGE;
            FinalizeDirty "finalize_dirty" {} -> Flushed, store, CHANGES | STORAGE;
            Rebind "rebind" {} -> (), store, CHANGES | STORAGE;
            SetXattr "setxattr" { path } -> Inode, store, CHANGES | BACKEND | GROWS;
            GetXattr "getxattr" { path } -> Bytes, store, BACKEND;
            ListXattr "listxattr" { path } -> Vec<String>, store, BACKEND;
            RemoveXattr "removexattr" { path } -> Inode, store, CHANGES | BACKEND;
            Lock "lock" {} -> LockReply, conn, 0;
            TestLock "test_lock" {} -> Option<LockInfo>, conn, 0;
            ReleaseLocks "release_locks" {} -> (), conn, 0;
            Status "status" {} -> DaemonStatus, store, STORAGE | REJOINING;
            Shutdown "shutdown" {} -> (), conn, REJOINING;
            BeginRename "begin_rename" {} -> Vec<RenameIntent>, conn, CHANGES;
            ClaimRenames "claim_renames" {} -> Vec<RenameIntent>, conn, CHANGES;
            EndRename "end_rename" {} -> (), conn, CHANGES;
            ReleaseRename "release_rename" {} -> (), conn, CHANGES;
            TouchDir "touch_dir" { path } -> (), store, CHANGES | BACKEND;
            ClearSetId "clear_setid" { path } -> Inode, store, CHANGES | BACKEND;
            CountSubdirs "count_subdirs" { dir } -> (), store, CHANGES | BACKEND;
            Allocate "allocate" {} -> (), store, CHANGES | STORAGE | GROWS;
            Scrub "scrub" {} -> ScrubPage, store, CHANGES | STORAGE | REJOINING;
            Replicate "replicate" {} -> Vec<$crate::repair::Digest>, store, CHANGES | REJOINING;
            Hint "hint" {} -> (), store, CHANGES | REJOINING;
            PutChunk "put_chunk" {} -> Vec<$crate::repair::Digest>, store, CHANGES | STORAGE | GROWS | REJOINING;
            RepairFor "repair_for" {} -> u64, conn, CHANGES | REJOINING;
            Repair "repair" {} -> (), conn, CHANGES | REJOINING;
        }
    };
}

/// Builds `Request`, `Op` and the `Rpc` impls from the list.
macro_rules! define_requests {
    ($( $name:ident $op:literal { $($field:ident)? } -> $reply:ty, $served:ident, $props:expr; )*) => {
        /// A request from a client (or a peer) to a daemon: the wire enum, one variant per
        /// request struct, in `request_table!` order (the variant index is the wire tag).
        #[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        pub enum Request {
            $( $name($name), )*
        }

        /// The kinds of requests, in `request_table!` order: `Op as usize` indexes counters.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Op {
            $( $name, )*
        }

        impl Op {
            /// Every kind, in order.
            pub const ALL: &'static [Op] = &[$( Op::$name, )*];

            /// Short name of the operation, for logs and counters.
            pub const fn name(self) -> &'static str {
                match self {
                    $( Op::$name => $op, )*
                }
            }

            /// What the request is (`Props`).
            pub const fn props(self) -> Props {
                #[allow(unused_imports)]
                use Props as P;
                const CHANGES: u8 = P::CHANGES;
                const STORAGE: u8 = P::STORAGE;
                const BACKEND: u8 = P::BACKEND;
                const GROWS: u8 = P::GROWS;
                const REJOINING: u8 = P::REJOINING;
                match self {
                    $( Op::$name => Props::new($props), )*
                }
            }
        }

        impl Request {
            /// The request's kind.
            pub fn op(&self) -> Op {
                match self {
                    $( Request::$name(_) => Op::$name, )*
                }
            }

            /// The namespace path the request is addressed by, if it is addressed by one.
            pub fn path(&self) -> Option<&str> {
                match self {
                    $( Request::$name(r) => Rpc::path(r), )*
                }
            }
        }

        $(
            impl Rpc for $name {
                type Reply = $reply;
                const OP: Op = Op::$name;
                fn path(&self) -> Option<&str> {
                    define_requests!(@path self $($field)?)
                }
            }

            impl From<$name> for Request {
                fn from(r: $name) -> Request {
                    Request::$name(r)
                }
            }
        )*
    };
    (@path $self:ident $field:ident) => { Some(&$self.$field) };
    (@path $self:ident) => { None };
}

request_table!(define_requests);

/// Short names of the requests, in `Op` order.
pub const OP_NAMES: [&str; Op::ALL.len()] = {
    let mut names = [""; Op::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = Op::ALL[i].name();
        i += 1;
    }
    names
};

impl Request {
    /// Short name of the operation, for logs and counters.
    pub fn op_name(&self) -> &'static str {
        self.op().name()
    }

    /// Bytes the request adds to the daemon's storage, for requests that may add entries or
    /// data (`Props::GROWS`); `None` for the rest.
    pub fn adds_bytes(&self) -> Option<u64> {
        if !self.op().props().grows() {
            return None;
        }
        let pieces = |p: &[Piece]| p.iter().map(|p| u64::from(p.len)).sum();
        Some(match self {
            Request::Write(w) => pieces(&w.pieces),
            Request::Allocate(a) => pieces(&a.pieces),
            Request::PutChunk(c) => c.data.len() as u64,
            _ => 0,
        })
    }

    /// The bytes this request carries outside its encoding (a `Write`'s or a `PutChunk`'s
    /// data).
    pub fn payload(&self) -> Bytes {
        match self {
            Request::Write(Write { data, .. }) | Request::PutChunk(PutChunk { data, .. }) => {
                data.clone()
            }
            _ => Bytes::new(),
        }
    }

    /// The frame of this request: its encoding as the meta section, its data as the payload
    /// (shared, not copied).
    pub fn to_frame(&self, id: u64, max: u32) -> Result<OutFrame, Errno> {
        OutFrame::new(id, self, self.payload(), max)
    }

    /// Decodes a request frame, allocating at most `limit` bytes for the meta section; the
    /// payload becomes the `Write`'s data as it is. A payload on any other request, or a
    /// malformed meta section, is EPROTO.
    pub fn from_frame(frame: Frame, limit: u64) -> Result<Request, Errno> {
        let mut req: Request = decode(&frame.meta, limit)?;
        match &mut req {
            Request::Write(Write { data, .. }) | Request::PutChunk(PutChunk { data, .. }) => {
                *data = frame.payload
            }
            other if !frame.payload.is_empty() => {
                return Err(unexpected_payload(other.op_name(), frame.payload.len()))
            }
            _ => {}
        }
        Ok(req)
    }
}

/// The reply of a call of `R`, typed; a reply of another type is EIO naming the request.
pub fn typed_reply<R: Rpc>(reply: Reply) -> Result<R::Reply, Errno> {
    R::Reply::from_reply(reply).map_err(|other| unexpected_reply(R::OP.name(), &other))
}
