//! Request and response messages. Bodies are bincode with a size limit, so a hostile length
//! field cannot make the decoder allocate more than the frame it came in.

use crate::frame::{Frame, OutFrame};
use crate::Errno;
use bincode::Options;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Unique, immutable id of a file's data, assigned at create. Chunks are named by it, so a
/// rename moves no data.
pub type FileId = u128;

/// What an entry is.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    // Special files (no data in Eddy): added at the end, so older encodings stay valid.
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl FileKind {
    /// FIFOs, sockets and device nodes: metadata entries only, opened by the kernel.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            FileKind::Fifo | FileKind::Socket | FileKind::CharDevice | FileKind::BlockDevice
        )
    }
}

/// Largest extended attribute name, in bytes (Linux XATTR_NAME_MAX).
pub const XATTR_NAME_MAX: usize = 255;
/// Largest extended attribute value, in bytes (Linux XATTR_SIZE_MAX).
pub const XATTR_SIZE_MAX: usize = 64 * 1024;
/// Largest total of one entry's extended attributes (names and values), in bytes: the record
/// travels whole in stat and listing replies.
pub const XATTR_TOTAL_MAX: usize = 256 * 1024;

/// One extended attribute of an entry.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Xattr {
    pub name: String,
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
}

/// How `SetXattr` treats an existing attribute (setxattr(2) flags).
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum XattrSet {
    /// Creates or replaces.
    Any,
    /// XATTR_CREATE: an existing attribute gives EEXIST.
    Create,
    /// XATTR_REPLACE: a missing attribute gives ENODATA.
    Replace,
}

/// A point in time, seconds and nanoseconds since the epoch.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    /// The current wall-clock time.
    pub fn now() -> Timespec {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        }
    }
}

/// The metadata record of a file, directory or symlink: one KV entry on its owner daemon.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    pub kind: FileKind,
    /// Data id (files); directories and symlinks have one too, unused.
    pub file_id: FileId,
    /// Permission bits (07777), without the type bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Bytes (files), target length (symlinks), 0 for directories.
    pub size: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    /// Target of a symlink.
    pub target: Option<String>,
    /// For an entry under a linked prefix: what Eddy knows of its backend copy.
    pub tier: Option<TierState>,
    /// Device number of a character or block device node (Linux `dev_t` encoding), 0 for
    /// anything else.
    pub rdev: u64,
    /// Extended attributes, sorted by name. Kept in the record, so they move with the entry
    /// on rename and are written atomically with it.
    pub xattrs: Vec<Xattr>,
    /// Names of the file (hard links): 1 for an entry that was never linked; directories
    /// report 2 whatever is stored here.
    pub nlink: u32,
    /// A file with several names (decision 0009): the id of the daemon holding its identity
    /// record (the attributes, the size, the link count, keyed by file id). In a name's
    /// record the other fields are a copy of the day it was linked and are not kept up to date;
    /// the identity record and the inodes replies carry for it hold the current ones.
    pub shared: Option<u32>,
}

impl Inode {
    /// An entry with these identity and permission fields and nothing else: size 0, zero
    /// times, no target, no backend state, no device number, no extended attributes.
    pub fn new(kind: FileKind, file_id: FileId, mode: u32, uid: u32, gid: u32) -> Inode {
        Inode {
            kind,
            file_id,
            mode,
            uid,
            gid,
            size: 0,
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            target: None,
            tier: None,
            rdev: 0,
            xattrs: Vec::new(),
            nlink: 1,
            shared: None,
        }
    }

    /// Bytes the extended attributes take (names and values).
    pub fn xattr_bytes(&self) -> usize {
        self.xattrs
            .iter()
            .map(|x| x.name.len() + x.value.len())
            .sum()
    }
}

/// The backend side of an entry under a linked prefix.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TierState {
    /// The backend copy's mtime and size when they were last seen (import, validation,
    /// write-through or stage-out): a different pair on open means the backend changed.
    pub backend_mtime: Timespec,
    pub backend_size: u64,
    /// The entry has changes the backend has not seen yet (created or opened for writing
    /// since the last stage-out): never invalidated by a backend change, finalised
    /// (created, sized, mode and times set) by stage-out.
    pub dirty: bool,
}

/// Version byte in front of every stored `Inode` record. Version 1 records (before the
/// backend tier), version 2 records (before special files and extended attributes) and
/// version 3 records (before hard links) are still read.
pub const INODE_RECORD_VERSION: u8 = 4;

/// The record layout of version 3: an `Inode` without `nlink` and `shared`.
#[derive(Deserialize)]
struct InodeV3 {
    kind: FileKind,
    file_id: FileId,
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    atime: Timespec,
    mtime: Timespec,
    ctime: Timespec,
    target: Option<String>,
    tier: Option<TierState>,
    rdev: u64,
    xattrs: Vec<Xattr>,
}

impl From<InodeV3> for Inode {
    fn from(v: InodeV3) -> Inode {
        Inode {
            kind: v.kind,
            file_id: v.file_id,
            mode: v.mode,
            uid: v.uid,
            gid: v.gid,
            size: v.size,
            atime: v.atime,
            mtime: v.mtime,
            ctime: v.ctime,
            target: v.target,
            tier: v.tier,
            rdev: v.rdev,
            xattrs: v.xattrs,
            nlink: 1,
            shared: None,
        }
    }
}

/// The record layout of version 2: an `Inode` without `rdev` and `xattrs`.
#[derive(Deserialize)]
struct InodeV2 {
    kind: FileKind,
    file_id: FileId,
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    atime: Timespec,
    mtime: Timespec,
    ctime: Timespec,
    target: Option<String>,
    tier: Option<TierState>,
}

impl From<InodeV2> for Inode {
    fn from(v: InodeV2) -> Inode {
        Inode::from(InodeV3 {
            kind: v.kind,
            file_id: v.file_id,
            mode: v.mode,
            uid: v.uid,
            gid: v.gid,
            size: v.size,
            atime: v.atime,
            mtime: v.mtime,
            ctime: v.ctime,
            target: v.target,
            tier: v.tier,
            rdev: 0,
            xattrs: Vec::new(),
        })
    }
}

/// The record layout of version 1: an `Inode` without `tier`.
#[derive(Deserialize)]
struct InodeV1 {
    kind: FileKind,
    file_id: FileId,
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    atime: Timespec,
    mtime: Timespec,
    ctime: Timespec,
    target: Option<String>,
}

impl From<InodeV1> for Inode {
    fn from(v: InodeV1) -> Inode {
        Inode::from(InodeV2 {
            kind: v.kind,
            file_id: v.file_id,
            mode: v.mode,
            uid: v.uid,
            gid: v.gid,
            size: v.size,
            atime: v.atime,
            mtime: v.mtime,
            ctime: v.ctime,
            target: v.target,
            tier: None,
        })
    }
}

impl Inode {
    /// Encodes the record as stored in the KV store: version byte + bincode.
    pub fn to_record(&self) -> Vec<u8> {
        let mut out = vec![INODE_RECORD_VERSION];
        // Serialising a plain struct into a Vec cannot fail.
        out.extend(bincode::serialize(self).unwrap_or_default());
        out
    }

    /// Decodes a stored record; an unknown version or a damaged record is EIO.
    pub fn from_record(bytes: &[u8]) -> Result<Inode, Errno> {
        /// Decodes a record of an older layout and converts it.
        fn older<T: serde::de::DeserializeOwned + Into<Inode>>(
            rest: &[u8],
        ) -> Result<Inode, Errno> {
            codec()
                .deserialize::<T>(rest)
                .map(Into::into)
                .map_err(|e| Errno::eio(format!("damaged metadata record: {e}")))
        }
        match bytes.split_first() {
            Some((&INODE_RECORD_VERSION, rest)) => older::<Inode>(rest),
            Some((3, rest)) => older::<InodeV3>(rest),
            Some((2, rest)) => older::<InodeV2>(rest),
            Some((1, rest)) => older::<InodeV1>(rest),
            Some((v, _)) => Err(Errno::eio(format!(
                "metadata record version {v} is not supported"
            ))),
            None => Err(Errno::eio("empty metadata record")),
        }
    }
}

/// How to set a time in `SetAttr`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetTime {
    Now,
    At(Timespec),
}

/// Attribute changes; `None` leaves a field as it is. Setting `size` on a file sets the
/// metadata size only: the client also truncates the data on every daemon.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

/// What `Remove` may remove.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoveKind {
    /// unlink: files and symlinks; a directory gives EISDIR.
    NotDir,
    /// rmdir: directories only; anything else gives ENOTDIR. Emptiness is checked by the
    /// client across all daemons before.
    Dir,
    /// Whatever is there (used by rename to drop the old name).
    Any,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: String,
    pub inode: Inode,
}

/// One entry of a subtree listing (full path), used to rename directories.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtreeEntry {
    pub path: String,
    pub inode: Inode,
}

/// A directory rename recorded before anything moves and cleared once it is complete
/// (decision 0010): whoever finds it unfinished completes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenameIntent {
    pub from: String,
    pub to: String,
    /// The renamed directory's id (`Inode::file_id`, kept by the move): a directory found at
    /// `from` with another id is a new one, made after this rename had moved everything.
    pub dir_id: FileId,
}

/// A piece of a chunk: `len` bytes at `offset` inside chunk `chunk`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    pub chunk: u64,
    pub offset: u32,
    pub len: u32,
}

/// Storage use of one daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonStatus {
    pub id: u32,
    pub host: String,
    pub pid: u32,
    pub root: String,
    /// Bytes and free bytes of the file system under the root.
    pub fs_total_bytes: u64,
    pub fs_free_bytes: u64,
    pub fs_avail_bytes: u64,
    pub fs_files: u64,
    pub fs_files_free: u64,
    /// Bytes held in chunk files.
    pub chunk_bytes: u64,
    /// Chunk files held.
    pub chunks: u64,
    /// The backend tier: bytes of cached backend chunks, of those not yet written back, of
    /// pinned ones; bytes read from and written to the backend; chunks evicted; the
    /// capacity and the watermarks (bytes) eviction works between.
    pub tier: TierStatus,
    /// Metadata entries held.
    pub entries: u64,
    /// Seconds since the daemon started.
    pub uptime_s: u64,
    /// Requests served since start.
    pub requests: u64,
    /// Stored blocks found not to match their checksum (each counted once), since start.
    pub checksum_errors: u64,
    /// Writes refused because their data did not match the checksums they carried.
    pub corrupt_payloads: u64,
    /// Chunks holding a block found damaged and not rewritten since (what a repair from a
    /// replica restores).
    pub corrupt_chunks: u64,
    /// Items (metadata keys, chunks) this daemon holds that other owners missed: hints,
    /// pushed by its repair loop (decision 0021). Per target daemon, and their sum.
    pub hints: u64,
    pub hints_for: Vec<(u32, u64)>,
    /// True while the daemon rejoins after a restart or a replacement: it takes the changes
    /// it missed and answers clients as if it were down.
    pub rejoining: bool,
}

/// What a data request on a file under a linked prefix tells the chunk's daemon.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backing {
    /// Namespace path of the file (the daemon maps it to the backend path).
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub path: String,
    /// Bytes of the backend copy the client knows of (`TierState::backend_size`): a missing
    /// chunk below it is fetched; above it, only a chunk this daemon wrote back and evicted
    /// is, and any other reads as a hole without asking the backend.
    pub size: u64,
}

/// Backend-tier figures of one daemon (all zero when nothing is linked).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierStatus {
    pub cached_bytes: u64,
    pub dirty_bytes: u64,
    pub pinned_bytes: u64,
    pub cached_chunks: u64,
    pub backend_read_bytes: u64,
    pub backend_write_bytes: u64,
    pub fetches: u64,
    pub evictions: u64,
    pub capacity_bytes: u64,
    pub high_watermark_bytes: u64,
    pub low_watermark_bytes: u64,
}

/// The outcome for one file of a flush or finalisation on one daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileOutcome {
    /// Namespace path of the file.
    pub path: String,
    pub file_id: FileId,
    /// Bytes written to the backend.
    pub bytes: u64,
    /// Why it failed (the backend path is named); `None` when it succeeded.
    pub error: Option<Errno>,
    /// False when the request's time ran out in the middle of this file: the rest of it comes
    /// with the next page.
    pub complete: bool,
}

/// The kind of an advisory lock request.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockKind {
    /// Shared (F_RDLCK, LOCK_SH).
    Read,
    /// Exclusive (F_WRLCK, LOCK_EX).
    Write,
    /// Release (F_UNLCK, LOCK_UN).
    Unlock,
}

/// Who holds an advisory lock: the client's session (random, one per `Client`, so two
/// mounts never share an owner) and the owner inside it (the kernel's lock owner through
/// FUSE: a process's file table for POSIX locks, an open file for OFD locks and flock).
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LockOwner {
    pub session: u128,
    pub owner: u64,
}

/// A byte range of a lock, both ends inclusive; `end == u64::MAX` reaches past any end of
/// file (the kernel's OFFSET_MAX is mapped to it).
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRange {
    pub start: u64,
    pub end: u64,
}

/// A held lock as reported to F_GETLK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    pub kind: LockKind,
    pub range: LockRange,
    /// Process id the holder gave (meaningful on its own node only).
    pub pid: u32,
}

/// A request from a client to a daemon.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    // ---- metadata: sent to owner(hash(path)) ----
    /// Creates an entry. With `exclusive`, an existing entry gives EEXIST; without, the
    /// existing entry is returned as it is, whatever its kind (O_CREAT without O_EXCL: the
    /// client tells a file it may open from a directory it may not). Replies `Inode`.
    Create {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        path: String,
        inode: Inode,
        exclusive: bool,
    },
    /// Replies `Inode` or ENOENT.
    Stat {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        path: String,
    },
    /// Removes an entry; replies the removed `Inode`.
    Remove {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        path: String,
        kind: RemoveKind,
    },
    /// Changes attributes; replies the new `Inode`.
    SetAttr {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        path: String,
        attr: SetAttr,
    },
    /// Raises the size to at least `size` (merged with max) and updates mtime; replies `Inode`.
    /// Sent by writers; concurrent writers never wait on each other.
    GrowSize {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        path: String,
        size: u64,
    },
    /// Reserves `len` bytes at the end of the file atomically (O_APPEND); replies `Offset`
    /// with the start of the reserved range.
    ReserveAppend {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        path: String,
        len: u64,
    },
    /// Inserts (or, with `replace`, overwrites) an entry as given: the second half of rename.
    Insert {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        path: String,
        inode: Inode,
        replace: bool,
    },
    /// Up to `limit` children of `dir` held by this daemon with names after `after`, in
    /// byte order of their names. Replies `Entries`.
    Readdir {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        dir: String,
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::opt_path))]
        after: Option<String>,
        limit: u32,
    },
    /// Whether this daemon holds any child of `dir`. Replies `Bool`.
    HasChildren {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        dir: String,
    },
    /// Up to `limit` entries strictly below `dir` held by this daemon, after the path `after`.
    /// Replies `Subtree`.
    ListSubtree {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        dir: String,
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::opt_path))]
        after: Option<String>,
        limit: u32,
    },

    // ---- hard links (decision 0009) ----
    /// Counts one more name of the file at `path` (the first half of link(2); the client then
    /// inserts the new name). A file with one name gets an identity record on this daemon
    /// (link count 2) and its own record becomes a name of it, in one atomic batch; a name of
    /// a shared file replies `Shared`, and sent `OnIdentity` it counts one more name. A
    /// directory is EPERM. Replies the identity `Inode`.
    Link {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        path: String,
    },
    /// Counts one name less of the shared file `file_id` whose identity record this daemon
    /// holds (after one of its names was removed); at zero the identity record goes too.
    /// Replies the identity `Inode` with the count left (0: the client drops the data).
    DropName { file_id: FileId },
    /// `op`, an encoded request on an entry's path, applied to the identity record of the
    /// shared file `file_id` (what a `Shared` reply asks for). Replies what `op` replies.
    /// Encoded, not nested, so that decoding a frame never recurses: an `op` that is itself
    /// `OnIdentity` is EINVAL.
    OnIdentity {
        file_id: FileId,
        #[serde(with = "serde_bytes")]
        op: Vec<u8>,
    },

    // ---- data: sent to owner(hash(file_id, k)) ----
    /// Writes `data` (the pieces' bytes back to back) into the chunks. Replies `Ok`.
    /// With `backing` (a file under a linked prefix), a chunk missing here is fetched from the
    /// backend before a partial write, and written chunks are dirty until written back.
    /// `sums`: the CRC32C of each block-aligned segment of the pieces (`checksum::sums`),
    /// checked before anything is written (a mismatch is EIO, nothing written); empty when
    /// the client sends none (the daemon then computes what it stores).
    Write {
        file_id: FileId,
        pieces: Vec<Piece>,
        sums: Vec<u32>,
        /// Travels as the frame's payload, outside the encoding.
        #[serde(with = "outside")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::bytes))]
        data: Bytes,
        backing: Option<Backing>,
    },
    /// Reads the pieces; holes and bytes past a chunk's end read as zeros. Replies `Data`
    /// with the pieces' bytes back to back, or `Checked` with their checksums too (a daemon
    /// with checksums on: the stored checksums were verified first, a mismatch is EIO naming
    /// the file id, chunk and offset). With `backing`, a chunk missing here is fetched
    /// from the backend (once, whatever the number of concurrent readers) and kept.
    Read {
        file_id: FileId,
        pieces: Vec<Piece>,
        backing: Option<Backing>,
    },
    /// Fetches the listed chunks of a backend file that this daemon owns and does not hold
    /// (read-ahead, stage-in); `pin` keeps them from eviction. Replies `Count` with the bytes
    /// fetched from the backend.
    Prefetch {
        file_id: FileId,
        chunks: Vec<u64>,
        backing: Backing,
        pin: bool,
    },
    /// Writes this daemon's dirty chunks of files under `prefix` back to the backend (pwrite
    /// into the backend file, then fsync), for files with ids after `after`, at most `limit`
    /// files, and for at most half the RPC deadline (then `more`, and the file under way is
    /// incomplete). Replies `Flushed`.
    FlushDirty {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        prefix: String,
        after: Option<FileId>,
        limit: u32,
    },
    /// Releases the pins of this daemon's chunks of files under `prefix`. Replies `Count`.
    Unpin {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        prefix: String,
    },
    /// Drops the data at and after byte `size` of the file held by this daemon. Replies `Ok`.
    TruncateData { file_id: FileId, size: u64 },
    /// Drops every chunk of the file held by this daemon. Replies `Ok`.
    RemoveData { file_id: FileId },
    /// Makes this daemon's chunks of the file and its metadata store durable. Replies `Ok`.
    Sync { file_id: Option<FileId> },

    // ---- backend tier, metadata side: sent to owner(hash(path)) ----
    /// Checks a linked file against its backend copy on open: a clean file whose backend
    /// mtime or size changed gets a new generation (a new file id: the old chunks are
    /// garbage); `for_write` marks it dirty. Replies `Revalidated`.
    Validate {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        path: String,
        for_write: bool,
    },
    /// Renames the backend copy of a linked entry (the write-through half of rename; the
    /// metadata moves with Insert/Remove). A missing backend source is fine (never flushed).
    /// Replies `Ok`.
    BackendRename {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        from: String,
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        to: String,
    },
    /// Finalises this daemon's dirty entries under `prefix` in the backend (create, size,
    /// mode, times), skipping `skip` (files whose data did not flush), after the path `after`,
    /// at most `limit`. Replies `Flushed`.
    FinalizeDirty {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        prefix: String,
        skip: Vec<FileId>,
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::opt_path))]
        after: Option<String>,
        limit: u32,
    },

    // ---- backend tier, every daemon ----
    /// A linked entry was renamed: this daemon's records of dirty files under `from` now
    /// name paths under `to`. Replies `Ok`.
    Rebind {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        from: String,
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        to: String,
    },

    // ---- extended attributes: sent to owner(hash(path)) ----
    /// setxattr(2) on the entry itself (no symlink is followed). Replies `Inode`.
    SetXattr {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        path: String,
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::xattr_name))]
        name: String,
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        how: XattrSet,
    },
    /// getxattr(2). Replies `Data` with the value, or ENODATA.
    GetXattr {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        path: String,
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::xattr_name))]
        name: String,
    },
    /// listxattr(2). Replies `Names`, in name order.
    ListXattr {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        path: String,
    },
    /// removexattr(2). Replies `Inode`, or ENODATA.
    RemoveXattr {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        path: String,
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::xattr_name))]
        name: String,
    },
    // ---- advisory locks: sent to the lock owner of the file id (placement by file id) ----
    /// Takes (Read/Write) or releases (Unlock) `range` of the file for `owner`, POSIX-style:
    /// the owner's own overlapping locks are replaced, split or merged. A conflict replies
    /// EAGAIN when `wait_ms` is 0; otherwise the daemon waits up to `wait_ms` (capped at half
    /// the RPC deadline) and then replies `LockBlocked`: the client asks again. `handle`
    /// names the open file the lock came through (released with it). Replies `Ok`.
    Lock {
        file_id: FileId,
        owner: LockOwner,
        handle: u64,
        pid: u32,
        kind: LockKind,
        range: LockRange,
        wait_ms: u32,
    },
    /// F_GETLK: the first lock of another owner that would conflict. Replies `LockTest`.
    TestLock {
        file_id: FileId,
        owner: LockOwner,
        kind: LockKind,
        range: LockRange,
    },
    /// Drops every lock of the file held by `owner` (close: POSIX locks) and/or taken through
    /// `handle` of `session` (release of an open file: OFD locks and flock). Replies `Ok`.
    ReleaseLocks {
        file_id: FileId,
        session: u128,
        owner: Option<u64>,
        handle: Option<u64>,
    },

    // ---- daemon ----
    /// Replies `Status`.
    Status,
    /// Stops the daemon cleanly after replying `Ok`.
    Shutdown,

    // ---- directory rename intents: sent to owner(hash(from)) (decision 0010) ----
    /// Records the intent to rename the directory `from` to `to`, durably (journal fsync)
    /// before replying, held by this connection until it ends, is released or the connection
    /// closes. Replies `Renames`, empty when recorded. When an unfinished rename of `from` is
    /// recorded already and no other open connection holds it, this connection takes it over
    /// and it is replied instead (nothing new is recorded: the caller completes that one);
    /// held by another open connection, EBUSY.
    BeginRename {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        from: String,
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        to: String,
        dir_id: FileId,
    },
    /// Takes over, for this connection, up to `limit` unfinished renames that no open
    /// connection holds (their renamer died or gave up, or this daemon restarted since), or,
    /// with `from`, only the rename of `from` (also when this connection holds it already).
    /// Replies `Renames`.
    ClaimRenames {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::opt_path))]
        from: Option<String>,
        limit: u32,
    },
    /// The rename of `from` to `to` is complete (or undone): its intent goes, durably. An
    /// intent of `from` to another path stays; no intent at all is fine. Replies `Ok`.
    EndRename {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        from: String,
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        to: String,
    },
    /// This connection gives up its hold on the rename of `from`, which stays recorded for
    /// whoever completes it. Replies `Ok`.
    ReleaseRename {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        from: String,
    },

    // ---- permissions and directory times: sent to owner(hash(path)) ----
    /// An entry was created, removed or renamed in the directory `path` at `time`: its mtime
    /// and ctime become at least `time` (merged with max, so that touches from many clients,
    /// in any order, never move them backwards). Kept in Eddy only, never written through to
    /// a linked backend (the backend directory's own times move with the write-through of the
    /// change itself). ENOTDIR for anything but a directory. Replies `Ok`.
    TouchDir {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        path: String,
        time: Timespec,
    },
    /// A write or truncate by a caller without the privilege to keep set-id bits: clears the
    /// set-user-ID bit of the regular file `path`, and its set-group-ID bit when group execute
    /// is set (without it, the bit marks mandatory locking and stays), atomically under the
    /// entry's lock; ctime moves when a bit was cleared. Other kinds are left as they are.
    /// Replies `Inode`.
    ClearSetId {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        path: String,
    },
    /// A subdirectory of the directory `dir` was made (`delta` 1) or removed or moved away
    /// (-1): its link count, 2 and its subdirectories, moves by `delta` (never below 2).
    /// ENOTDIR for anything but a directory. Replies `Ok`.
    CountSubdirs {
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
        dir: String,
        delta: i32,
    },

    // ---- data: sent to owner(hash(file_id, k)) ----
    /// Reserves storage for the pieces in the file's data file (fallocate): later writes
    /// there cannot fail for want of room. Bytes not written read as zeros. ENOSPC when the
    /// device cannot hold them. Replies `Ok`.
    Allocate { file_id: FileId, pieces: Vec<Piece> },

    // ---- data integrity, every daemon (decision 0019) ----
    /// Verifies every stored block of up to `limit` chunks held here, in (file id, chunk)
    /// order after `after`. Replies `Scrubbed`.
    Scrub {
        after: Option<(FileId, u64)>,
        limit: u32,
    },

    // ---- replication: daemon to daemon (decision 0020) ----
    /// The current state of metadata keys a peer changed, for the other owners of those
    /// keys: each key's record is stored as given, or removed (`None`). Replies `Ok`.
    Replicate { changes: Vec<KeyState> },

    // ---- repair: daemon to daemon, and `eddy repair` (decision 0021) ----
    /// Chunks of a file that `target`, one of their owners, missed (it could not be reached)
    /// and that this daemon holds: recorded as hints and pushed to `target` by the repair
    /// loop. Replies `Ok`.
    Hint {
        target: u32,
        file_id: FileId,
        chunks: Vec<u64>,
    },
    /// The whole state of a chunk as another owner holds it: `present` false removes it;
    /// else `data` (the payload) is its content (its length is the chunk's) and `sums` the
    /// checksums of its block-aligned segments (may be empty). Replies `Digests` with the
    /// digest of the chunk as this daemon holds it afterwards.
    PutChunk {
        file_id: FileId,
        chunk: u64,
        present: bool,
        sums: Vec<u32>,
        #[serde(with = "outside")]
        #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::bytes))]
        data: Bytes,
    },
    /// Pushes the hints held for `target` now, for as long as half the RPC deadline; with
    /// `full`, first records a hint for every item held here that `target` owns (a
    /// replaced daemon). Replies `Count`: the hints still held for `target`.
    RepairFor { target: u32, full: bool },
    /// Wakes the repair loop (`eddy repair`); with `full`, first records a hint for every
    /// item held here for each of its other owners. Replies `Ok`.
    Repair { full: bool },
}

/// The state of one metadata key as its primary holds it: its record, or `None` when the
/// key is gone (decision 0020).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct KeyState {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// Short names of the requests, in `Request::op_index` order.
pub const OP_NAMES: [&str; 48] = [
    "create",
    "stat",
    "remove",
    "setattr",
    "grow_size",
    "reserve_append",
    "insert",
    "readdir",
    "has_children",
    "list_subtree",
    "write",
    "read",
    "truncate_data",
    "remove_data",
    "sync",
    "prefetch",
    "flush_dirty",
    "unpin",
    "validate",
    "backend_rename",
    "finalize_dirty",
    "rebind",
    "setxattr",
    "getxattr",
    "listxattr",
    "removexattr",
    "lock",
    "test_lock",
    "release_locks",
    "link",
    "drop_name",
    "on_identity",
    "status",
    "shutdown",
    "begin_rename",
    "claim_renames",
    "end_rename",
    "release_rename",
    "touch_dir",
    "clear_setid",
    "count_subdirs",
    "allocate",
    "scrub",
    "replicate",
    "hint",
    "put_chunk",
    "repair_for",
    "repair",
];

impl Request {
    /// Whether the request touches chunk files, syncs storage or reaches the backend
    /// (disk-bound), as opposed to metadata operations that run at memory speed in the KV
    /// store. (A metadata request on a linked path may reach the backend too: the daemon
    /// checks the path.)
    pub fn is_storage_io(&self) -> bool {
        matches!(
            self,
            Request::Write { .. }
                | Request::Allocate { .. }
                | Request::Read { .. }
                | Request::Prefetch { .. }
                | Request::FlushDirty { .. }
                | Request::FinalizeDirty { .. }
                | Request::Unpin { .. }
                | Request::Validate { .. }
                | Request::BackendRename { .. }
                | Request::Rebind { .. }
                | Request::TruncateData { .. }
                | Request::RemoveData { .. }
                | Request::Sync { .. }
                | Request::Status
                | Request::Scrub { .. }
                | Request::PutChunk { .. }
        )
    }

    /// Bytes a request adds to the daemon's storage, for requests that add entries or data
    /// (`None` for the rest: reads, updates in place, removals, which must work on a full
    /// device to make room).
    pub fn adds_bytes(&self) -> Option<u64> {
        let pieces = |p: &[Piece]| p.iter().map(|p| u64::from(p.len)).sum();
        match self {
            Request::Write { pieces: p, .. } | Request::Allocate { pieces: p, .. } => {
                Some(pieces(p))
            }
            Request::PutChunk { data, .. } => Some(data.len() as u64),
            Request::Create { .. }
            | Request::Insert { .. }
            | Request::Link { .. }
            | Request::SetXattr { .. } => Some(0),
            _ => None,
        }
    }

    /// Whether a daemon that is rejoining (decision 0021) serves the request: what peers
    /// and tools send (copies, repair, status, scrub, shutdown). Clients' data and metadata
    /// requests are answered `EHOSTDOWN` meanwhile, which clients take for a daemon down.
    pub fn served_while_rejoining(&self) -> bool {
        matches!(
            self,
            Request::Replicate { .. }
                | Request::Hint { .. }
                | Request::PutChunk { .. }
                | Request::RepairFor { .. }
                | Request::Repair { .. }
                | Request::Status
                | Request::Shutdown
                | Request::Scrub { .. }
        )
    }

    /// Whether the request is about directory rename intents (served with the connection it
    /// came on, which holds the intents it records or takes over).
    pub fn is_rename_intent(&self) -> bool {
        matches!(
            self,
            Request::BeginRename { .. }
                | Request::ClaimRenames { .. }
                | Request::EndRename { .. }
                | Request::ReleaseRename { .. }
        )
    }

    /// Whether the request is an advisory-lock request (served from the daemon's lock table,
    /// which needs to know the connection it came on).
    pub fn is_lock(&self) -> bool {
        matches!(
            self,
            Request::Lock { .. } | Request::TestLock { .. } | Request::ReleaseLocks { .. }
        )
    }

    /// Short name of the operation, for logs and counters.
    pub fn op_name(&self) -> &'static str {
        OP_NAMES[self.op_index()]
    }

    /// Position of the operation in `OP_NAMES`: counters can be an array.
    pub fn op_index(&self) -> usize {
        match self {
            Request::Create { .. } => 0,
            Request::Stat { .. } => 1,
            Request::Remove { .. } => 2,
            Request::SetAttr { .. } => 3,
            Request::GrowSize { .. } => 4,
            Request::ReserveAppend { .. } => 5,
            Request::Insert { .. } => 6,
            Request::Readdir { .. } => 7,
            Request::HasChildren { .. } => 8,
            Request::ListSubtree { .. } => 9,
            Request::Write { .. } => 10,
            Request::Read { .. } => 11,
            Request::TruncateData { .. } => 12,
            Request::RemoveData { .. } => 13,
            Request::Sync { .. } => 14,
            Request::Prefetch { .. } => 15,
            Request::FlushDirty { .. } => 16,
            Request::Unpin { .. } => 17,
            Request::Validate { .. } => 18,
            Request::BackendRename { .. } => 19,
            Request::FinalizeDirty { .. } => 20,
            Request::Rebind { .. } => 21,
            Request::SetXattr { .. } => 22,
            Request::GetXattr { .. } => 23,
            Request::ListXattr { .. } => 24,
            Request::RemoveXattr { .. } => 25,
            Request::Lock { .. } => 26,
            Request::TestLock { .. } => 27,
            Request::ReleaseLocks { .. } => 28,
            Request::Link { .. } => 29,
            Request::DropName { .. } => 30,
            Request::OnIdentity { .. } => 31,
            Request::Status => 32,
            Request::Shutdown => 33,
            Request::BeginRename { .. } => 34,
            Request::ClaimRenames { .. } => 35,
            Request::EndRename { .. } => 36,
            Request::ReleaseRename { .. } => 37,
            Request::TouchDir { .. } => 38,
            Request::ClearSetId { .. } => 39,
            Request::CountSubdirs { .. } => 40,
            Request::Allocate { .. } => 41,
            Request::Scrub { .. } => 42,
            Request::Replicate { .. } => 43,
            Request::Hint { .. } => 44,
            Request::PutChunk { .. } => 45,
            Request::RepairFor { .. } => 46,
            Request::Repair { .. } => 47,
        }
    }
}

/// A successful reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    Ok,
    Inode(Inode),
    Offset(u64),
    Bool(bool),
    /// Directory entries; `more` is true when the daemon holds further children.
    Entries {
        entries: Vec<DirEntry>,
        more: bool,
    },
    Subtree {
        entries: Vec<SubtreeEntry>,
        more: bool,
    },
    /// Bytes read (travel as the frame's payload, outside the encoding).
    Data(#[serde(with = "outside")] Bytes),
    Status(DaemonStatus),
    Count(u64),
    /// The entry after validation, and the generation it replaced (file id and the size it
    /// had), whose chunks the client drops.
    Revalidated {
        inode: Inode,
        dropped: Option<(FileId, u64)>,
    },
    /// Per-file outcomes of a flush or finalisation; `more` when files remain.
    Flushed {
        files: Vec<FileOutcome>,
        more: bool,
    },
    /// Names of extended attributes (`ListXattr`).
    Names(Vec<String>),
    // ---- advisory locks ----
    /// A waiting `Lock` is still blocked after the time it was given: ask again.
    LockBlocked,
    /// `TestLock`: the conflicting lock, or `None` when the range is free for this owner.
    LockTest(Option<LockInfo>),
    /// The path names a file with several names: send the request again, as `OnIdentity`,
    /// to `daemon`, which holds the file's identity record.
    Shared {
        daemon: u32,
        file_id: FileId,
    },
    /// Unfinished directory renames (`BeginRename`, `ClaimRenames`).
    Renames(Vec<RenameIntent>),
    /// Bytes read and the CRC32C of each block-aligned segment of the pieces
    /// (`checksum::sums`), for the client to verify; the bytes travel as the payload.
    Checked {
        #[serde(with = "outside")]
        data: Bytes,
        sums: Vec<u32>,
    },
    /// One page of a scrub.
    Scrubbed(ScrubPage),
    /// What the daemon holds now of the items a repair push or a copy sent it, in their
    /// order (decision 0021).
    Digests(Vec<crate::repair::Digest>),
}

impl Reply {
    /// The bytes of a `Data` or `Checked` reply.
    pub fn data(&self) -> Option<&Bytes> {
        match self {
            Reply::Data(d) | Reply::Checked { data: d, .. } => Some(d),
            _ => None,
        }
    }
}

/// What one page of a scrub found on one daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubPage {
    /// Chunks, blocks and bytes verified.
    pub chunks: u64,
    pub blocks: u64,
    pub bytes: u64,
    /// Blocks whose data and stored checksum disagree.
    pub bad: Vec<BadBlock>,
    /// The last chunk verified: the next page starts after it; `None` when none is left.
    pub next: Option<(FileId, u64)>,
    /// Chunks held by the daemon (for progress).
    pub total_chunks: u64,
}

/// A stored block whose data does not match its checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadBlock {
    pub file_id: FileId,
    pub chunk: u64,
    /// Offset of the block inside the chunk.
    pub offset: u64,
}

/// A response: a reply or an errno.
pub type Response = Result<Reply, Errno>;

fn codec() -> impl bincode::Options {
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .allow_trailing_bytes()
}

/// Encodes a message body.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, Errno> {
    codec()
        .serialize(msg)
        .map_err(|e| Errno::einval(format!("cannot encode message: {e}")))
}

/// Encodes a message body at the end of `w` (the frame's meta section).
pub fn encode_into<W: std::io::Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), Errno> {
    codec()
        .serialize_into(w, msg)
        .map_err(|e| Errno::einval(format!("cannot encode message: {e}")))
}

/// Bulk bytes kept out of the encoding: nothing is encoded in their place, and they decode
/// empty until the frame's payload is put back (`Request::from_frame`, `response_from_frame`).
mod outside {
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(_: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_unit()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        <()>::deserialize(d).map(|()| Bytes::new())
    }
}

impl Request {
    /// The bytes this request carries outside its encoding (a `Write`'s data).
    pub fn payload(&self) -> Bytes {
        match self {
            Request::Write { data, .. } | Request::PutChunk { data, .. } => data.clone(),
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
            Request::Write { data, .. } | Request::PutChunk { data, .. } => *data = frame.payload,
            other if !frame.payload.is_empty() => {
                return Err(unexpected_payload(other.op_name(), frame.payload.len()))
            }
            _ => {}
        }
        Ok(req)
    }
}

fn unexpected_payload(what: &str, len: usize) -> Errno {
    Errno::new(
        libc::EPROTO,
        format!("malformed message: {what} carries no payload, yet {len} bytes came"),
    )
}

/// The frame of a response: a `Data` reply's bytes as the payload.
pub fn response_frame(id: u64, resp: &Response, max: u32) -> Result<OutFrame, Errno> {
    let payload = match resp {
        Ok(Reply::Data(d)) | Ok(Reply::Checked { data: d, .. }) => d.clone(),
        _ => Bytes::new(),
    };
    OutFrame::new(id, resp, payload, max)
}

/// Decodes a response frame (see `Request::from_frame`).
pub fn response_from_frame(frame: Frame, limit: u64) -> Result<Response, Errno> {
    let mut resp: Response = decode(&frame.meta, limit)?;
    match &mut resp {
        Ok(Reply::Data(d)) | Ok(Reply::Checked { data: d, .. }) => *d = frame.payload,
        _ if !frame.payload.is_empty() => {
            return Err(unexpected_payload("a reply", frame.payload.len()))
        }
        _ => {}
    }
    Ok(resp)
}

/// Decodes a message that carries no payload (the handshake's): a payload is EPROTO.
pub fn decode_plain<T: serde::de::DeserializeOwned>(frame: &Frame, limit: u64) -> Result<T, Errno> {
    if !frame.payload.is_empty() {
        return Err(unexpected_payload("this message", frame.payload.len()));
    }
    decode(&frame.meta, limit)
}

/// Decodes a message body, allocating at most `limit` bytes; malformed input is EPROTO.
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], limit: u64) -> Result<T, Errno> {
    codec()
        .with_limit(limit)
        .deserialize(bytes)
        .map_err(|e| Errno::new(libc::EPROTO, format!("malformed message: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_names_are_distinct() {
        let mut names = OP_NAMES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), OP_NAMES.len());
        assert_eq!(Request::Status.op_name(), "status");
        assert_eq!(Request::Shutdown.op_name(), "shutdown");
    }
    use proptest::prelude::*;

    /// The frame as a reader gets it.
    fn read_back(f: OutFrame) -> Frame {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut buf = Vec::new();
            crate::frame::write_frames(&mut buf, &[f]).await.unwrap();
            crate::frame::read_frame(&mut &buf[..], 1 << 20)
                .await
                .unwrap()
        })
    }

    fn inode() -> Inode {
        Inode {
            kind: FileKind::File,
            file_id: 0xdead_beef,
            mode: 0o644,
            uid: 1,
            gid: 2,
            size: 3,
            atime: Timespec { sec: 4, nsec: 5 },
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            target: None,
            tier: None,
            rdev: 0,
            xattrs: Vec::new(),
            nlink: 1,
            shared: None,
        }
    }

    #[test]
    fn request_round_trip() {
        let r = Request::Write {
            file_id: 9,
            pieces: vec![Piece {
                chunk: 1,
                offset: 2,
                len: 3,
            }],
            sums: vec![7],
            data: Bytes::from_static(&[1, 2, 3]),
            backing: Some(Backing {
                path: "/in/x".into(),
                size: 5,
            }),
        };
        let frame = read_back(r.to_frame(4, 1 << 20).unwrap());
        assert_eq!((frame.id, &frame.payload[..]), (4, &[1u8, 2, 3][..]));
        assert_eq!(Request::from_frame(frame, 1 << 20).unwrap(), r);
        // The data is not in the encoding.
        let bare = decode::<Request>(&encode(&r).unwrap(), 1 << 20).unwrap();
        assert!(matches!(bare, Request::Write { ref data, .. } if data.is_empty()));
        assert_eq!(bare.payload(), Bytes::new());
        let data: Response = Ok(Reply::Data(Bytes::from(vec![9u8; 100])));
        let frame = read_back(response_frame(1, &data, 1 << 20).unwrap());
        assert_eq!(frame.payload.len(), 100);
        assert_eq!(response_from_frame(frame, 1 << 20).unwrap(), data);
        let checked: Response = Ok(Reply::Checked {
            data: Bytes::from(vec![3u8; 10]),
            sums: vec![1, 2],
        });
        let frame = read_back(response_frame(1, &checked, 1 << 20).unwrap());
        assert_eq!(frame.payload.len(), 10);
        assert_eq!(response_from_frame(frame, 1 << 20).unwrap(), checked);
        // A payload where none belongs is EPROTO.
        let stat = Request::Stat { path: "/a".into() };
        let mut frame = read_back(stat.to_frame(2, 1 << 20).unwrap());
        frame.payload = Bytes::from_static(b"xx");
        assert_eq!(
            Request::from_frame(frame, 1 << 20).unwrap_err().errno,
            libc::EPROTO
        );
        let resp: Response = Err(Errno::enoent("/x"));
        let bytes = encode(&resp).unwrap();
        assert_eq!(decode::<Response>(&bytes, 1 << 20).unwrap(), resp);
    }

    #[test]
    fn record_round_trip_and_version_check() {
        let rec = inode().to_record();
        assert_eq!(Inode::from_record(&rec).unwrap(), inode());
        let mut bad = rec.clone();
        bad[0] = 99;
        assert_eq!(Inode::from_record(&bad).unwrap_err().errno, libc::EIO);
        assert!(Inode::from_record(&[]).is_err());
    }

    #[test]
    fn version_1_records_are_still_read() {
        let i = inode();
        let v1 = (
            i.kind, i.file_id, i.mode, i.uid, i.gid, i.size, i.atime, i.mtime, i.ctime, i.target,
        );
        let mut rec = vec![1u8];
        rec.extend(encode(&v1).unwrap());
        assert_eq!(Inode::from_record(&rec).unwrap(), inode());
        let tiered = Inode {
            tier: Some(TierState {
                backend_mtime: Timespec { sec: 9, nsec: 1 },
                backend_size: 77,
                dirty: true,
            }),
            ..inode()
        };
        assert_eq!(Inode::from_record(&tiered.to_record()).unwrap(), tiered);
    }

    #[test]
    fn version_2_records_are_still_read() {
        let tier = Some(TierState {
            backend_mtime: Timespec { sec: 3, nsec: 2 },
            backend_size: 11,
            dirty: false,
        });
        let i = Inode { tier, ..inode() };
        let v2 = (
            i.kind, i.file_id, i.mode, i.uid, i.gid, i.size, i.atime, i.mtime, i.ctime, i.target,
            i.tier,
        );
        let mut rec = vec![2u8];
        rec.extend(encode(&v2).unwrap());
        assert_eq!(Inode::from_record(&rec).unwrap(), Inode { tier, ..inode() });
    }

    #[test]
    fn special_files_and_xattrs_round_trip() {
        // The old kinds keep their encodings; the new ones come after them.
        assert_eq!(encode(&FileKind::Symlink).unwrap(), 2u32.to_le_bytes());
        assert_eq!(encode(&FileKind::BlockDevice).unwrap(), 6u32.to_le_bytes());
        let dev = Inode {
            kind: FileKind::CharDevice,
            rdev: 0x0103,
            xattrs: vec![Xattr {
                name: "user.a".into(),
                value: vec![0, 1, 2],
            }],
            ..inode()
        };
        assert_eq!(dev.xattr_bytes(), 9);
        let rec = dev.to_record();
        assert_eq!(rec[0], INODE_RECORD_VERSION);
        assert_eq!(Inode::from_record(&rec).unwrap(), dev);
        assert!(FileKind::Fifo.is_special() && !FileKind::Symlink.is_special());
    }

    #[test]
    fn version_3_records_are_read_with_one_name() {
        let i = Inode {
            rdev: 5,
            xattrs: vec![Xattr {
                name: "user.x".into(),
                value: vec![9],
            }],
            ..inode()
        };
        let v3 = (
            i.kind, i.file_id, i.mode, i.uid, i.gid, i.size, i.atime, i.mtime, i.ctime, &i.target,
            i.tier, i.rdev, &i.xattrs,
        );
        let mut rec = vec![3u8];
        rec.extend(encode(&v3).unwrap());
        let read = Inode::from_record(&rec).unwrap();
        assert_eq!(read, i);
        assert_eq!((read.nlink, read.shared), (1, None));
        let shared = Inode {
            nlink: 3,
            shared: Some(2),
            ..i
        };
        assert_eq!(Inode::from_record(&shared.to_record()).unwrap(), shared);
    }

    #[test]
    fn huge_length_prefix_does_not_allocate() {
        // A Write whose checksums claim 2^60 entries.
        let mut bytes = encode(&Request::Write {
            file_id: 1,
            sums: vec![],
            pieces: vec![],
            data: Bytes::new(),
            backing: None,
        })
        .unwrap();
        let n = bytes.len() - 1; // the trailing `backing: None` byte
        bytes[n - 8..n].copy_from_slice(&(1u64 << 60).to_le_bytes());
        assert_eq!(
            decode::<Request>(&bytes, 1 << 20).unwrap_err().errno,
            libc::EPROTO
        );
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode::<Request>(&bytes, 1 << 16);
            let _ = decode::<Response>(&bytes, 1 << 16);
            let frame = Frame { id: 1, meta: Bytes::from(bytes.clone()), payload: Bytes::from(bytes) };
            let _ = Request::from_frame(frame.clone(), 1 << 16);
            let _ = response_from_frame(frame, 1 << 16);
        }
    }
}
