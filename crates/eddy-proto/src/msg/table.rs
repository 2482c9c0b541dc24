//! `request_table!`, the one list of requests, and what is generated from it: the wire enum
//! `Request` (one variant per request struct of `req`, in list order), the kinds `Op` (name,
//! index, `Props`) and each request's `Rpc` impl (its reply type, its kind, the path it is
//! addressed by); and the framing of a request (a `Write`'s or `PutChunk`'s data travels as
//! the frame's payload).

use super::codec::{decode, unexpected_payload};
use super::records::{Inode, LockInfo, LockOwner, Piece, RenameIntent};
use super::replies::*;
use super::req::*;
use crate::frame::{Frame, OutFrame};
use crate::Errno;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

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
            Lock "lock" {} -> LockReply, conn, REJOINING;
            TestLock "test_lock" {} -> Option<LockInfo>, conn, REJOINING;
            ReleaseLocks "release_locks" {} -> (), conn, REJOINING;
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
            BackendLink "backend_link" {} -> (), store, CHANGES | STORAGE;
            LinkedNames "linked_names" {} -> Vec<String>, store, STORAGE;
            CheckBackend "check_backend" {} -> Flushed, store, CHANGES | STORAGE;
            HoldBack "hold_back" {} -> u64, store, CHANGES | STORAGE;
            WrittenBack "written_back" {} -> Flushed, store, 0;
            ReclaimLock "reclaim_lock" {} -> bool, conn, REJOINING;
            LockHolders "lock_holders" {} -> Vec<LockOwner>, conn, REJOINING;
            WaitsFor "waits_for" {} -> bool, conn, REJOINING;
            Identify "identify" {} -> (), conn, REJOINING;
            Stats "stats" {} -> $crate::stats::DaemonStats, conn, REJOINING;
            DirectOpen "direct_open" {} -> DirectGrant, conn, STORAGE;
            DirectCommit "direct_commit" {} -> (), conn, CHANGES | STORAGE | GROWS;
            Accessed "accessed" { path } -> (), store, CHANGES;
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
        Some(match self {
            Request::Write(w) => Piece::total(&w.pieces),
            Request::Allocate(a) => Piece::total(&a.pieces),
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
