//! Request and response messages. Bodies are bincode with a size limit, so a hostile length
//! field cannot make the decoder allocate more than the frame it came in.

use crate::Errno;
use bincode::Options;
use serde::{Deserialize, Serialize};

/// Unique, immutable id of a file's data, assigned at create. Chunks are named by it, so a
/// rename moves no data.
pub type FileId = u128;

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
}

/// A point in time, seconds and nanoseconds since the epoch.
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
}

/// Version byte in front of every stored `Inode` record.
pub const INODE_RECORD_VERSION: u8 = 1;

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
        match bytes.split_first() {
            Some((&INODE_RECORD_VERSION, rest)) => codec()
                .deserialize(rest)
                .map_err(|e| Errno::eio(format!("damaged metadata record: {e}"))),
            Some((v, _)) => Err(Errno::eio(format!(
                "metadata record version {v} is not supported"
            ))),
            None => Err(Errno::eio("empty metadata record")),
        }
    }
}

/// How to set a time in `SetAttr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetTime {
    Now,
    At(Timespec),
}

/// Attribute changes; `None` leaves a field as it is. Setting `size` on a file sets the
/// metadata size only: the client also truncates the data on every daemon.
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

/// A piece of a chunk: `len` bytes at `offset` inside chunk `chunk`.
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
    /// Metadata entries held.
    pub entries: u64,
    /// Seconds since the daemon started.
    pub uptime_s: u64,
    /// Requests served since start.
    pub requests: u64,
}

/// A request from a client to a daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    // ---- metadata: sent to owner(hash(path)) ----
    /// Creates an entry. With `exclusive`, an existing entry gives EEXIST; without, the
    /// existing entry is returned as it is, whatever its kind (O_CREAT without O_EXCL: the
    /// client tells a file it may open from a directory it may not). Replies `Inode`.
    Create {
        path: String,
        inode: Inode,
        exclusive: bool,
    },
    /// Replies `Inode` or ENOENT.
    Stat { path: String },
    /// Removes an entry; replies the removed `Inode`.
    Remove { path: String, kind: RemoveKind },
    /// Changes attributes; replies the new `Inode`.
    SetAttr { path: String, attr: SetAttr },
    /// Raises the size to at least `size` (merged with max) and updates mtime; replies `Inode`.
    /// Sent by writers; concurrent writers never wait on each other.
    GrowSize { path: String, size: u64 },
    /// Reserves `len` bytes at the end of the file atomically (O_APPEND); replies `Offset`
    /// with the start of the reserved range.
    ReserveAppend { path: String, len: u64 },
    /// Inserts (or, with `replace`, overwrites) an entry as given: the second half of rename.
    Insert {
        path: String,
        inode: Inode,
        replace: bool,
    },
    /// Up to `limit` children of `dir` held by this daemon with names after `after`, in
    /// byte order of their names. Replies `Entries`.
    Readdir {
        dir: String,
        after: Option<String>,
        limit: u32,
    },
    /// Whether this daemon holds any child of `dir`. Replies `Bool`.
    HasChildren { dir: String },
    /// Up to `limit` entries strictly below `dir` held by this daemon, after the path `after`.
    /// Replies `Subtree`.
    ListSubtree {
        dir: String,
        after: Option<String>,
        limit: u32,
    },

    // ---- data: sent to owner(hash(file_id, k)) ----
    /// Writes `data` (the pieces' bytes back to back) into the chunks. Replies `Ok`.
    Write {
        file_id: FileId,
        pieces: Vec<Piece>,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// Reads the pieces; holes and bytes past a chunk's end read as zeros. Replies `Data`
    /// with the pieces' bytes back to back.
    Read { file_id: FileId, pieces: Vec<Piece> },
    /// Drops the data at and after byte `size` of the file held by this daemon. Replies `Ok`.
    TruncateData { file_id: FileId, size: u64 },
    /// Drops every chunk of the file held by this daemon. Replies `Ok`.
    RemoveData { file_id: FileId },
    /// Makes this daemon's chunks of the file and its metadata store durable. Replies `Ok`.
    Sync { file_id: Option<FileId> },

    // ---- daemon ----
    /// Replies `Status`.
    Status,
    /// Stops the daemon cleanly after replying `Ok`.
    Shutdown,
}

impl Request {
    /// Whether the request touches chunk files or syncs storage (disk-bound), as opposed to
    /// metadata operations that run at memory speed in the KV store.
    pub fn is_storage_io(&self) -> bool {
        matches!(
            self,
            Request::Write { .. }
                | Request::Read { .. }
                | Request::TruncateData { .. }
                | Request::RemoveData { .. }
                | Request::Sync { .. }
                | Request::Status
        )
    }

    /// Short name of the operation, for logs and counters.
    pub fn op_name(&self) -> &'static str {
        match self {
            Request::Create { .. } => "create",
            Request::Stat { .. } => "stat",
            Request::Remove { .. } => "remove",
            Request::SetAttr { .. } => "setattr",
            Request::GrowSize { .. } => "grow_size",
            Request::ReserveAppend { .. } => "reserve_append",
            Request::Insert { .. } => "insert",
            Request::Readdir { .. } => "readdir",
            Request::HasChildren { .. } => "has_children",
            Request::ListSubtree { .. } => "list_subtree",
            Request::Write { .. } => "write",
            Request::Read { .. } => "read",
            Request::TruncateData { .. } => "truncate_data",
            Request::RemoveData { .. } => "remove_data",
            Request::Sync { .. } => "sync",
            Request::Status => "status",
            Request::Shutdown => "shutdown",
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
    Data(#[serde(with = "serde_bytes")] Vec<u8>),
    Status(DaemonStatus),
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
    use proptest::prelude::*;

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
            data: vec![1, 2, 3],
        };
        let bytes = encode(&r).unwrap();
        assert_eq!(decode::<Request>(&bytes, 1 << 20).unwrap(), r);
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
    fn huge_length_prefix_does_not_allocate() {
        // A Write whose data claims 2^60 bytes.
        let mut bytes = encode(&Request::Write {
            file_id: 1,
            pieces: vec![],
            data: vec![],
        })
        .unwrap();
        let n = bytes.len();
        bytes[n - 8..].copy_from_slice(&(1u64 << 60).to_le_bytes());
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
        }
    }
}
