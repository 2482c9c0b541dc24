//! Replies: the wire enum `Reply`, the typed replies requests declare (`ReplyType`), the
//! status and outcome records they carry, and the framing of a response (a `Data` or
//! `Checked` reply's bytes travel as the frame's payload).

use super::codec::{decode, outside, unexpected_payload};
use super::records::*;
use crate::frame::{Frame, OutFrame};
use crate::Errno;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

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
    /// Bytes of chunk slots preallocated for sequential writers and not yet written whole,
    /// and all bytes ever preallocated (decision 0074).
    pub preallocated_bytes: u64,
    pub preallocated_total_bytes: u64,
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
    /// The file system under the root, named so that every daemon whose root is on it on
    /// this machine names it alike (the machine's boot id and the device number): `statfs`
    /// counts each device once (decision 0060).
    pub device: String,
    /// The bound on the bytes of chunks this daemon holds (`capacity_bytes`; 0: none).
    pub capacity_bytes: u64,
    /// Bytes of the device kept in reserve for the metadata store (`meta_reserve_bytes`,
    /// decision 0017): not offered to writers.
    pub reserve_bytes: u64,
    /// The FUSE mounts connected to this daemon now, as they told it (`req::Mounted`,
    /// decision 0079): at most `MOUNTS_LISTED`, and how many more there are.
    pub mounts: Vec<MountSeen>,
    pub mounts_unlisted: u64,
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
    /// Bytes fetched ahead of readers' streams on their hints (decision 0072).
    pub read_ahead_bytes: u64,
    /// Backend read and write calls of fetches and write-backs, and the requests that went
    /// in another's call, merged by the per-object queues (decision 0074).
    pub backend_reads: u64,
    pub backend_writes: u64,
    pub merged_reads: u64,
    pub merged_writes: u64,
    pub capacity_bytes: u64,
    pub high_watermark_bytes: u64,
    pub low_watermark_bytes: u64,
    /// Dirty files whose backend copy another writer changed (decision 0030), on the
    /// metadata owner: their number and the first paths.
    pub conflicts: u64,
    pub conflict_paths: Vec<String>,
    /// Files whose dirty chunks here are held back from write-back (in conflict).
    pub held_back: u64,
    /// Per backend of the linked prefixes (decision 0073): placed, dirty, written back.
    pub backends: Vec<crate::stats::StoreStats>,
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

/// A successful reply, as it travels. **The variant order is the wire tag**: add new
/// variants at the end only. Requests get theirs typed (`Rpc::Reply`, `ReplyType`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    Ok,
    Inode(Inode),
    Offset(Offset),
    Bool(bool),
    /// Directory entries; `more` is true when the daemon holds further children.
    Entries(DirPage),
    Subtree(SubtreePage),
    /// Bytes read (travel as the frame's payload, outside the encoding).
    Data(#[serde(with = "outside")] Bytes),
    /// Boxed (as `Stats`): the largest reply by far, which would size every other.
    Status(Box<DaemonStatus>),
    Count(u64),
    Revalidated(Revalidated),
    Flushed(Flushed),
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
    /// The owners holding locks that conflict with a request (`LockHolders`, decision 0028).
    LockOwners(Vec<LockOwner>),
    /// What a daemon counted (`Stats`), boxed: it is large.
    Stats(Box<crate::stats::DaemonStats>),
    /// A lease for direct local I/O (`DirectOpen`).
    Direct(DirectGrant),
    /// A directory lease granted or refused (`Lease`, decision 0075).
    LeaseGrant(LeaseGrant),
    /// The names a daemon holds in a leased directory (`LeaseNote`).
    LeaseNames(LeaseNames),
    /// Ids of recalled leases (`LeaseWait`).
    Recalled(Vec<u64>),
    /// One outcome per operation of a `Batch`.
    Batched(Vec<BatchOutcome>),
    /// A daemon's membership and the progress of a move (`Membership`, decision 0081).
    Membership(MembershipState),
}

/// A daemon's membership as it stands (`Membership`, decision 0081): its epoch, whether items
/// still move from an older placement, and how many of its items still wait to be copied to
/// their new owners (its move hints); `collected`: at a settled epoch, what it does not own
/// any more has been deleted; `moved_bytes`: the bytes of chunks it pushed for moves since it
/// started; `scanning`: it is still hinting what it holds for a move's new owners (until
/// then `left` is not all that is to copy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipState {
    pub epoch: u64,
    pub moving: bool,
    pub left: u64,
    pub collected: bool,
    pub moved_bytes: u64,
    pub scanning: bool,
}

/// The answer to a `Lease`: granted with the lease's id (unique on its granter), or refused;
/// a refused client does not ask again for `retry_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseGrant {
    Granted { id: u64 },
    Refused { retry_ms: u64 },
}

/// The names one daemon holds in a leased directory, all of them when `complete`; past
/// `req::LEASE_NAMES_MAX` none and not complete.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseNames {
    pub names: Vec<String>,
    pub complete: bool,
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

/// The start of the range an O_APPEND write reserved (`ReserveAppend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offset(pub u64);

/// One page of a directory's children held by one daemon; `more` when it holds further ones.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirPage {
    pub entries: Vec<DirEntry>,
    pub more: bool,
}

/// One page of the entries below a directory held by one daemon (`ListSubtree`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtreePage {
    pub entries: Vec<SubtreeEntry>,
    pub more: bool,
}

/// The entry after validation, and the generation it replaced (file id and the size it
/// had), whose chunks the client drops.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revalidated {
    pub inode: Inode,
    pub dropped: Option<(FileId, u64)>,
}

/// Per-file outcomes of a flush or finalisation; `more` when files remain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flushed {
    pub files: Vec<FileOutcome>,
    pub more: bool,
}

/// Bytes read, with the checksums of their block-aligned segments when the daemon keeps
/// checksums (`Reply::Checked`), else without (`Reply::Data`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadReply {
    pub data: Bytes,
    pub sums: Option<Vec<u32>>,
}

/// The outcome of a `Lock`: granted, or still blocked after the time it was given to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockReply {
    Granted,
    Blocked,
}

/// A request's typed reply, converted to and from the wire's `Reply`.
pub trait ReplyType: Sized {
    fn into_reply(self) -> Reply;
    /// The typed reply, or the reply as it came (boxed: only an error message needs it)
    /// when it is not of this type.
    fn from_reply(r: Reply) -> Result<Self, Box<Reply>>;
}

/// Typed replies that are one variant's content.
macro_rules! variant_replies {
    ($($t:ty => $variant:ident),* $(,)?) => {
        $(
            impl ReplyType for $t {
                fn into_reply(self) -> Reply {
                    Reply::$variant(self)
                }
                fn from_reply(r: Reply) -> Result<Self, Box<Reply>> {
                    match r {
                        Reply::$variant(x) => Ok(x),
                        other => Err(Box::new(other)),
                    }
                }
            }
        )*
    };
}

variant_replies! {
    Inode => Inode,
    Offset => Offset,
    bool => Bool,
    DirPage => Entries,
    SubtreePage => Subtree,
    Bytes => Data,
    u64 => Count,
    Revalidated => Revalidated,
    Flushed => Flushed,
    Vec<String> => Names,
    Option<LockInfo> => LockTest,
    Vec<RenameIntent> => Renames,
    ScrubPage => Scrubbed,
    Vec<crate::repair::Digest> => Digests,
    Vec<LockOwner> => LockOwners,
    DirectGrant => Direct,
    LeaseGrant => LeaseGrant,
    LeaseNames => LeaseNames,
    Vec<u64> => Recalled,
    Vec<BatchOutcome> => Batched,
    MembershipState => Membership,
}

impl ReplyType for DaemonStatus {
    fn into_reply(self) -> Reply {
        Reply::Status(Box::new(self))
    }
    fn from_reply(r: Reply) -> Result<Self, Box<Reply>> {
        match r {
            Reply::Status(s) => Ok(*s),
            other => Err(Box::new(other)),
        }
    }
}

impl ReplyType for crate::stats::DaemonStats {
    fn into_reply(self) -> Reply {
        Reply::Stats(Box::new(self))
    }
    fn from_reply(r: Reply) -> Result<Self, Box<Reply>> {
        match r {
            Reply::Stats(s) => Ok(*s),
            other => Err(Box::new(other)),
        }
    }
}

impl ReplyType for () {
    fn into_reply(self) -> Reply {
        Reply::Ok
    }
    fn from_reply(r: Reply) -> Result<(), Box<Reply>> {
        match r {
            Reply::Ok => Ok(()),
            other => Err(Box::new(other)),
        }
    }
}

impl ReplyType for ReadReply {
    fn into_reply(self) -> Reply {
        match self.sums {
            Some(sums) => Reply::Checked {
                data: self.data,
                sums,
            },
            None => Reply::Data(self.data),
        }
    }
    fn from_reply(r: Reply) -> Result<ReadReply, Box<Reply>> {
        match r {
            Reply::Data(data) => Ok(ReadReply { data, sums: None }),
            Reply::Checked { data, sums } => Ok(ReadReply {
                data,
                sums: Some(sums),
            }),
            other => Err(Box::new(other)),
        }
    }
}

impl ReplyType for LockReply {
    fn into_reply(self) -> Reply {
        match self {
            LockReply::Granted => Reply::Ok,
            LockReply::Blocked => Reply::LockBlocked,
        }
    }
    fn from_reply(r: Reply) -> Result<LockReply, Box<Reply>> {
        match r {
            Reply::Ok => Ok(LockReply::Granted),
            Reply::LockBlocked => Ok(LockReply::Blocked),
            other => Err(Box::new(other)),
        }
    }
}

/// A reply passed on as it is (`OnIdentity` replies what the request it carries replies).
impl ReplyType for Reply {
    fn into_reply(self) -> Reply {
        self
    }
    fn from_reply(r: Reply) -> Result<Reply, Box<Reply>> {
        Ok(r)
    }
}

/// The error of a call whose reply is not of the type its request gets.
pub fn unexpected_reply(op: &str, reply: &Reply) -> Errno {
    Errno::eio(format!("unexpected reply to {op}: {reply:?}"))
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

/// A lease for direct local I/O (`DirectOpen`, decision 0048): its number (named by the
/// client's reports), the one-use token that fetches its descriptors from the daemon's
/// descriptor socket, and how many bytes the client may write before it reports them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectGrant {
    pub lease: u64,
    pub token: u128,
    pub batch: u64,
}
