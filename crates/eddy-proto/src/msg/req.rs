//! The requests: one struct per request, each named once in `request_table!` (`table.rs`).
//! A new request is one struct here, one line in the list, and one handler in the daemon
//! (`eddy-daemon/src/ops/`); the compiler finds every place that must know of it.
//!
//! The requests are a module of their own (`eddy_proto::req::Stat`), apart from the records
//! they carry, so that their names (`Read`, `Write`, `Sync`, `Link`, `SetAttr`) do not clash.

use super::codec::outside;
use super::records::*;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

mod leases;
mod members;
pub use leases::*;
pub use members::*;

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
/// the client sends none (the daemon then computes what it stores). `hint`: the stream the
/// write belongs to and how it writes (decision 0074): a sequential stream gets the next
/// chunks it will write that this daemon owns preallocated (`write_prealloc_chunks`).
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
    pub hint: Option<StreamHint>,
}

/// Reads the pieces; holes and bytes past a chunk's end read as zeros. Replies `Data`
/// with the pieces' bytes back to back, or `Checked` with their checksums too (a daemon
/// with checksums on: the stored checksums were verified first, a mismatch is EIO naming
/// the file id, chunk and offset). With `backing`, a chunk missing here is fetched
/// from the backend (once, whatever the number of concurrent readers) and kept. `hint`:
/// the stream the read belongs to and how it reads (decision 0072); with `backing`, a
/// sequential or strided stream gets the next chunks it will read that this daemon owns
/// fetched ahead in the background, after the reply's data is read.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read {
    pub file_id: FileId,
    pub pieces: Vec<Piece>,
    pub backing: Option<Backing>,
    pub hint: Option<StreamHint>,
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

/// Stops the daemon cleanly after replying with what it counted (`Stats`), taken as it
/// stops: `eddy stop` asks the counters of the job profile and for the stop in one round
/// (decision 0076). Replies `Stats`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownWithStats;

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

/// A read of the file `path` at `time` (decision 0061): its atime becomes `time` when
/// `strict`, else (relatime) only when the atime is not later than its mtime or ctime or is
/// a day old, decided under the entry's lock. Nothing else moves (not the ctime). Replies
/// `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accessed {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
    pub time: Timespec,
    pub strict: bool,
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

/// Makes `to` another name of the linked file `file_id` in the backend (link(2); the
/// backend file is created empty at `from` first if it was never written back), and
/// records both names with the identity record this daemon holds, for its write-back
/// (decision 0029). Sent to the identity's daemon after the new name was inserted. Replies
/// `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendLink {
    pub file_id: FileId,
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub from: String,
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub to: String,
}

/// The names of the linked file `file_id` (whose identity record this daemon holds) that
/// still name its backend file, checked in the backend (decision 0029). Replies the names.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkedNames {
    pub file_id: FileId,
}

/// Checks this daemon's dirty entries under `prefix` against their backend copies before a
/// stage-out writes them back (decision 0030): a backend copy that changed since this
/// deployment took it (another writer, on another cache) is a conflict, reported as the
/// file's error and kept until resolved; with `overwrite`, the copy here wins and the
/// conflict is cleared. After the path `after`, at most `limit`. Replies `Flushed`: one
/// outcome per dirty file checked.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckBackend {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub prefix: String,
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::opt_path))]
    pub after: Option<String>,
    pub limit: u32,
    pub overwrite: bool,
    /// Files this deployment's daemons wrote back in part by eviction since their last
    /// stage-out (`WrittenBack`): their backend copy changed by this deployment's hand.
    pub ours: Vec<FileId>,
}

/// The files under `prefix` whose dirty chunks this daemon wrote back by eviction since
/// their last stage-out (decision 0030). Replies `Flushed` (one outcome per file, the bytes
/// it wrote back that way).
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WrittenBack {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub prefix: String,
}

/// Holds back (`hold`) or lets go again the write-back of this daemon's dirty chunks of
/// `files` (files in conflict with their backend copy, decision 0030): held back, they are
/// neither written back by a stage-out nor by eviction. Replies `Count`: the files held
/// back here now.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldBack {
    pub files: Vec<FileId>,
    pub hold: bool,
}

// ---- advisory locks across a restart of their daemon (decision 0028) ----

/// Takes back a lock this client held before the file's lock daemon restarted: accepted
/// only in the daemon's grace period after a restart (`lock_grace_ms`), when no lock taken
/// back meanwhile conflicts with it. Replies `Bool`: true when it is held again, false when
/// it is lost (no grace period, or a conflict).
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReclaimLock {
    pub file_id: FileId,
    pub owner: LockOwner,
    pub handle: u64,
    pub pid: u32,
    /// Read or Write (an Unlock takes nothing back: false).
    pub kind: LockKind,
    pub range: LockRange,
}

/// The owners of the locks that stop `owner` taking `kind` over `range` of the file (each
/// once), sent to the file's lock daemon by a waiter before it records what it waits for
/// (`WaitsFor`). Replies `LockOwners`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolders {
    pub file_id: FileId,
    pub owner: LockOwner,
    pub kind: LockKind,
    pub range: LockRange,
}

/// Records, at the deployment's deadlock coordinator, that `waiter` (in its wait `wait`)
/// waits for every owner of `holders`, for `ttl_ms` unless recorded again; empty `holders`
/// ends the wait. Replies `Bool`: true when the wait would close a cycle of owners each
/// waiting for the next (a deadlock: then it is not recorded, and the waiter gets
/// EDEADLK).
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitsFor {
    pub waiter: LockOwner,
    pub wait: u64,
    pub holders: Vec<LockOwner>,
    pub ttl_ms: u32,
}

// ---- monitoring (eddy_proto::stats) ----

/// Tells the daemon who the client of this connection is (host, pid, MPI rank when known):
/// sent once per connection, first after the handshake, by every client (eddy-rpc's
/// connection setup). The daemon counts this connection's requests under that client from
/// then on. Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identify {
    pub client: crate::stats::ClientId,
}

/// Tells the daemon that this connection serves a FUSE mount (decision 0079): who the mount
/// is, where it is mounted, and the transport it runs on. Sent by the mount's client on each of
/// its connections once the mount runs, and on every connection it opens after (eddy-rpc's
/// connection setup, after `Identify`). The daemon keeps it while the connection lives
/// (another `Mounted` on it replaces it) and lists it in its `Status` reply. EINVAL when the
/// mount point or the host is longer than `MOUNT_POINT_MAX` or `MOUNT_HOST_MAX` bytes. Replies
/// `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mounted {
    pub client: crate::stats::ClientId,
    pub mountpoint: String,
    pub transport: MountTransport,
}

/// Asks a daemon for what it counted of the I/O it served (`eddy stats`, the job profile).
/// Answered from memory, without touching storage. Replies `Stats`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats;

// ---- direct local I/O (decision 0048): sent to a daemon on the client's own host ----

/// Asks for descriptors of the file's data file (read-write with `write`, else read-only)
/// and of its sum file, for direct local I/O. The daemon answers with a lease (held by this
/// connection: it ends with it) and a one-use token the client redeems on the daemon's
/// descriptor socket (`fdpass`). Refused with EOPNOTSUPP when direct I/O is off or the
/// daemon has no descriptor socket, ENOENT for a read of a file this daemon holds nothing
/// of, ENOSPC for a write when less than `direct_batch_bytes` of room is left. Replies
/// `DirectGrant`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectOpen {
    pub file_id: FileId,
    pub write: bool,
}

/// Reports what a client wrote directly under `lease` since its last report: the byte
/// ranges of the data file (`(offset, len)`, each inside chunks this daemon owns) and the
/// checksum of every block they touch (`(block index from the file's start, CRC32C of the
/// whole block)`); the daemon records the chunks' lengths and stores the checksums (or
/// computes them from the data when another writer shared the file meanwhile). With
/// `release` the lease ends. ESTALE for a lease this daemon does not know (it restarted,
/// or the connection that held it was lost): the client writes those ranges again through
/// the daemon. Also tells the bytes read directly (counted as reads). With `whole` (a write
/// lease whose data file the kernel writes: FUSE passthrough, decision 0049) any part of the
/// file may have changed: the daemon records the chunks the data file holds bytes in and
/// checksums every block again from the data. Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectCommit {
    pub file_id: FileId,
    pub lease: u64,
    pub ranges: Vec<(u64, u64)>,
    pub sums: Vec<(u64, u32)>,
    /// Bytes read directly since the last report, for the daemon's counters.
    pub read_bytes: u64,
    pub release: bool,
    pub whole: bool,
}
