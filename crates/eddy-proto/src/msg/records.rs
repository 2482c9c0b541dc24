//! The records of the namespace (entries, attributes, pieces of chunks, locks) as they are
//! stored in the metadata store and carried in requests and replies. A stored `Inode` record
//! starts with a version byte; records of every earlier version are still read.

use crate::Errno;
use bincode::Options;
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

    /// The type bits of `st_mode` (S_IFREG, S_IFDIR, ...).
    pub fn type_bits(self) -> u32 {
        match self {
            FileKind::File => libc::S_IFREG,
            FileKind::Dir => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
            FileKind::CharDevice => libc::S_IFCHR,
            FileKind::BlockDevice => libc::S_IFBLK,
        }
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
    /// The inode number the library front-ends report (the preload library, libeddy): the
    /// file id folded to 64 bits, never 0 or 1.
    pub fn st_ino(&self) -> u64 {
        ((self.file_id as u64) ^ ((self.file_id >> 64) as u64)).max(2)
    }

    /// `st_mode`: the type bits and the permission bits.
    pub fn st_mode(&self) -> u32 {
        self.kind.type_bits() | (self.mode & 0o7777)
    }

    /// `st_nlink` as the library front-ends report it: a directory at least 2, anything
    /// else at least 1.
    pub fn st_nlink(&self) -> u32 {
        match self.kind {
            FileKind::Dir => self.nlink.max(2),
            _ => self.nlink.max(1),
        }
    }
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
            super::codec::codec()
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

impl Piece {
    /// The bytes of pieces, together.
    pub fn total(pieces: &[Piece]) -> u64 {
        pieces
            .iter()
            .fold(0u64, |sum, p| sum.saturating_add(u64::from(p.len)))
    }
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

/// What a client knows of the stream a read belongs to (decision 0072): one stream is one
/// open handle of one client process (`stream`: the client's random session mixed with the
/// handle), and `pattern` is how it has been reading. A daemon keeps per-stream read-ahead
/// state from it (no data) and fetches ahead the chunks it owns that the stream will read
/// next. Only a hint: a daemon ignores one it cannot use (a stride of 0, a stride past
/// the file), and a request without one is served as before.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StreamHint {
    pub stream: u64,
    pub pattern: Pattern,
}

/// How a stream reads, as its client detected it or was advised (`posix_fadvise`).
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Pattern {
    /// Not known yet (a first read).
    Unknown,
    /// Each read starts where the last ended (or near it), or `POSIX_FADV_SEQUENTIAL`.
    Sequential,
    /// Reads of the same length at a constant distance `stride` (bytes, from one read's
    /// start to the next's) larger than the read.
    Strided { stride: u64 },
    /// Neither, or `POSIX_FADV_RANDOM`: read nothing ahead for it.
    Random,
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

/// The state of one metadata key as its primary holds it: its record, or `None` when the
/// key is gone (decision 0020).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct KeyState {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// A directory lease (decision 0075): the daemon that granted it (the owner of the
/// directory's record) and its id there.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseRef {
    pub daemon: u32,
    pub id: u64,
}

/// One operation of a `Batch`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BatchOp {
    Create(crate::req::Create),
    Remove(crate::req::Remove),
}

impl BatchOp {
    /// The path the operation is about.
    pub fn path(&self) -> &str {
        match self {
            BatchOp::Create(c) => &c.path,
            BatchOp::Remove(r) => &r.path,
        }
    }
}

/// The outcome of one operation of a `Batch`: the entry made or removed, or why not.
pub type BatchOutcome = Result<Inode, crate::Errno>;

/// How a FUSE mount's requests cross to the kernel (decision 0078), as the mount tells the
/// daemons (`req::Mounted`, decision 0079): what it runs on, not what it was asked for.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MountTransport {
    /// `read(2)` and `write(2)` on `/dev/fuse`.
    DevFuse,
    /// FUSE over io_uring.
    IoUring,
}

impl MountTransport {
    /// As people read it: `/dev/fuse` or `io_uring`.
    pub fn name(self) -> &'static str {
        match self {
            MountTransport::DevFuse => "/dev/fuse",
            MountTransport::IoUring => "io_uring",
        }
    }
}

/// Longest mount point a daemon keeps of a `req::Mounted` (bytes; PATH_MAX): a longer one is
/// refused with EINVAL.
pub const MOUNT_POINT_MAX: usize = 4096;
/// Longest host name a daemon keeps of a `req::Mounted` (bytes): a longer one is refused.
pub const MOUNT_HOST_MAX: usize = 255;
/// Most mounts one `Status` reply lists (`DaemonStatus::mounts`); the rest are counted
/// (`mounts_unlisted`).
pub const MOUNTS_LISTED: usize = 256;

/// A mount connected to a daemon, as it said when it started (`req::Mounted`): who it is,
/// where it is mounted on its host, and its FUSE transport. What the mount sent, checked for
/// size only: untrusted text.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MountSeen {
    pub client: crate::stats::ClientId,
    pub mountpoint: String,
    pub transport: MountTransport,
}
