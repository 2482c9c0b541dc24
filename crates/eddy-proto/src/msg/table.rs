//! `request_table!`, the one list of requests, and what is generated from it: the wire enum
//! `Request` (one variant per request struct of `req`, in list order), the kinds `Op` (name,
//! index, `Props`), each request's `Rpc` impl (its reply type, its kind, the path it is
//! addressed by, its `Bulk` bytes), `Request::on_identity` (which requests reach a file's
//! identity record, and how), the framing of a request (the `payload` field travels as the
//! frame's payload) and `TABLE_TEXT`, whose fingerprint `TABLE_FINGERPRINTS` ties to
//! `PROTOCOL_VERSION`. Adding a request is its struct in `req`, its line here and its handler
//! in the daemon's `ops`: the compiler checks the rest (decision 0065).

use super::codec::{decode, unexpected_payload};
use super::records::{BatchOutcome, Inode, LockInfo, LockOwner, Piece, RenameIntent};
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
    /// The bytes the request moves beyond its encoding (its `bulk` column).
    fn bulk(&self) -> Bulk;
}

/// The bytes a request moves beyond its encoding, from the `bulk` column of
/// `request_table!` (all zero for a request without one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bulk {
    /// Bytes it may add to the daemon's storage (`adds`), checked against the room left.
    pub adds: u64,
    /// Bytes of file data its reply carries (`reads`): the daemon makes room for them
    /// before serving it.
    pub reply: Option<u64>,
    /// Bytes it brings (`writes`, `moves`), for the daemon's counters.
    pub counted: u64,
    /// The file whose data it reads or writes (`reads`, `writes`), for the daemon's
    /// counters, and whether it writes.
    pub file: Option<(crate::FileId, bool)>,
}

/// How many bytes a bulk field stands for.
trait Measure {
    fn bytes(&self) -> u64;
}

impl Measure for Bytes {
    fn bytes(&self) -> u64 {
        self.len() as u64
    }
}

impl Measure for Vec<Piece> {
    fn bytes(&self) -> u64 {
        Piece::total(self)
    }
}

/// Ranges as (offset, length). The lengths come from the sender: their sum saturates (a
/// request whose ranges add up past u64 is refused where they are checked, never a panic).
impl Measure for Vec<(u64, u64)> {
    fn bytes(&self) -> u64 {
        self.iter().fold(0u64, |sum, r| sum.saturating_add(r.1))
    }
}

/// The list of requests. **A line's position is the request's tag on the wire** (bincode's
/// variant index of `Request`) and its index in `Op`: add new requests at the end; never
/// reorder, remove or insert a line, or every daemon and client of another version
/// misreads every request after it. Any change to the list changes the protocol: raise
/// `PROTOCOL_VERSION` and record the list's new fingerprint (`TABLE_FINGERPRINTS`, in
/// `lib.rs`); a test fails until both are done.
///
/// Each line, column by column:
/// - the struct (in `req`) and its op name (logs, counters);
/// - `{ field }`: the field holding the path the request is addressed by, if any;
/// - `-> T`: the reply type of a successful call;
/// - how the daemon serves it: `store` (applied to the stores, inline or on the blocking
///   pool) or `conn` (asynchronously, with the connection it came on);
/// - its `Props`;
/// - `id:` whether it may be sent on a file's identity record inside an `OnIdentity`
///   (decision 0009): `-` no; `same` as it is, its path field set to the identity record's
///   name; or the name of another path-addressed request to run instead (an O_CREAT open
///   of a shared file is a `Stat` of its identity record). Only `store` requests with a
///   path field can be; the compiler checks both;
/// - `bulk:` the bytes it moves beyond its encoding, each as `kind(field)`, measured by the
///   field's type (`Measure`): `payload` the field travels as the frame's payload, outside
///   the encoding; `adds` bytes it may add to the daemon's storage (checked against the
///   room left when it `GROWS`); `reads` file data the reply carries (room is made for it
///   before it is served); `writes` file data it writes (counted for its file);
///   `moves` bytes it moves between daemons for no file (counted as bytes only). `reads`
///   and `writes` need a `file_id` field.
///
/// Invoked with the name of a macro that receives the list (`request_table!(my_macro)`):
/// this crate builds `Request`, `Op`, the `Rpc` impls and the table's text from it, the
/// daemon its dispatch.
#[macro_export]
macro_rules! request_table {
    ($m:ident) => {
        $m! {
            Create "create" { path } -> Inode, store, CHANGES | BACKEND | GROWS, id: Stat, bulk: [];
            Stat "stat" { path } -> Inode, store, BACKEND, id: same, bulk: [];
            Remove "remove" { path } -> Inode, store, CHANGES | BACKEND, id: -, bulk: [];
            SetAttr "setattr" { path } -> Inode, store, CHANGES | BACKEND, id: same, bulk: [];
            GrowSize "grow_size" { path } -> Inode, store, CHANGES | BACKEND, id: same, bulk: [];
            ReserveAppend "reserve_append" { path } -> Offset, store, CHANGES | BACKEND, id: same, bulk: [];
            Insert "insert" { path } -> (), store, CHANGES | GROWS, id: -, bulk: [];
            Readdir "readdir" { dir } -> DirPage, store, BACKEND, id: -, bulk: [];
            HasChildren "has_children" { dir } -> bool, store, BACKEND, id: -, bulk: [];
            ListSubtree "list_subtree" { dir } -> SubtreePage, store, 0, id: -, bulk: [];
            Link "link" { path } -> Inode, store, CHANGES | BACKEND | GROWS, id: same, bulk: [];
            DropName "drop_name" {} -> Inode, store, CHANGES, id: -, bulk: [];
            OnIdentity "on_identity" {} -> Reply, store, CHANGES, id: -, bulk: [];
            Write "write" {} -> (), store, STORAGE | GROWS, id: -, bulk: [payload(data), adds(pieces), writes(data)];
            Read "read" {} -> ReadReply, store, STORAGE, id: -, bulk: [reads(pieces)];
            Prefetch "prefetch" {} -> u64, store, STORAGE, id: -, bulk: [];
            FlushDirty "flush_dirty" {} -> Flushed, store, CHANGES | STORAGE, id: -, bulk: [];
            Unpin "unpin" {} -> u64, store, CHANGES | STORAGE, id: -, bulk: [];
            TruncateData "truncate_data" {} -> (), store, CHANGES | STORAGE, id: -, bulk: [];
            RemoveData "remove_data" {} -> (), store, CHANGES | STORAGE, id: -, bulk: [];
            Sync "sync" {} -> (), store, STORAGE, id: -, bulk: [];
            Validate "validate" { path } -> Revalidated, store, CHANGES | STORAGE, id: same, bulk: [];
            BackendRename "backend_rename" {} -> (), store, CHANGES | STORAGE, id: -, bulk: [];
            FinalizeDirty "finalize_dirty" {} -> Flushed, store, CHANGES | STORAGE, id: -, bulk: [];
            Rebind "rebind" {} -> (), store, CHANGES | STORAGE, id: -, bulk: [];
            SetXattr "setxattr" { path } -> Inode, store, CHANGES | BACKEND | GROWS, id: same, bulk: [];
            GetXattr "getxattr" { path } -> Bytes, store, BACKEND, id: same, bulk: [];
            ListXattr "listxattr" { path } -> Vec<String>, store, BACKEND, id: same, bulk: [];
            RemoveXattr "removexattr" { path } -> Inode, store, CHANGES | BACKEND, id: same, bulk: [];
            Lock "lock" {} -> LockReply, conn, REJOINING, id: -, bulk: [];
            TestLock "test_lock" {} -> Option<LockInfo>, conn, REJOINING, id: -, bulk: [];
            ReleaseLocks "release_locks" {} -> (), conn, REJOINING, id: -, bulk: [];
            Status "status" {} -> DaemonStatus, store, STORAGE | REJOINING, id: -, bulk: [];
            Shutdown "shutdown" {} -> (), conn, REJOINING, id: -, bulk: [];
            BeginRename "begin_rename" {} -> Vec<RenameIntent>, conn, CHANGES, id: -, bulk: [];
            ClaimRenames "claim_renames" {} -> Vec<RenameIntent>, conn, CHANGES, id: -, bulk: [];
            EndRename "end_rename" {} -> (), conn, CHANGES, id: -, bulk: [];
            ReleaseRename "release_rename" {} -> (), conn, CHANGES, id: -, bulk: [];
            TouchDir "touch_dir" { path } -> (), store, CHANGES | BACKEND, id: -, bulk: [];
            ClearSetId "clear_setid" { path } -> Inode, store, CHANGES | BACKEND, id: same, bulk: [];
            CountSubdirs "count_subdirs" { dir } -> (), store, CHANGES | BACKEND, id: -, bulk: [];
            Allocate "allocate" {} -> (), store, CHANGES | STORAGE | GROWS, id: -, bulk: [adds(pieces)];
            Scrub "scrub" {} -> ScrubPage, store, CHANGES | STORAGE | REJOINING, id: -, bulk: [];
            Replicate "replicate" {} -> Vec<$crate::repair::Digest>, store, CHANGES | REJOINING, id: -, bulk: [];
            Hint "hint" {} -> (), store, CHANGES | REJOINING, id: -, bulk: [];
            PutChunk "put_chunk" {} -> Vec<$crate::repair::Digest>, store, CHANGES | STORAGE | GROWS | REJOINING, id: -, bulk: [payload(data), adds(data), moves(data)];
            RepairFor "repair_for" {} -> u64, conn, CHANGES | REJOINING, id: -, bulk: [];
            Repair "repair" {} -> (), conn, CHANGES | REJOINING, id: -, bulk: [];
            BackendLink "backend_link" {} -> (), store, CHANGES | STORAGE, id: -, bulk: [];
            LinkedNames "linked_names" {} -> Vec<String>, store, STORAGE, id: -, bulk: [];
            CheckBackend "check_backend" {} -> Flushed, store, CHANGES | STORAGE, id: -, bulk: [];
            HoldBack "hold_back" {} -> u64, store, CHANGES | STORAGE, id: -, bulk: [];
            WrittenBack "written_back" {} -> Flushed, store, 0, id: -, bulk: [];
            ReclaimLock "reclaim_lock" {} -> bool, conn, REJOINING, id: -, bulk: [];
            LockHolders "lock_holders" {} -> Vec<LockOwner>, conn, REJOINING, id: -, bulk: [];
            WaitsFor "waits_for" {} -> bool, conn, REJOINING, id: -, bulk: [];
            Identify "identify" {} -> (), conn, REJOINING, id: -, bulk: [];
            Stats "stats" {} -> $crate::stats::DaemonStats, conn, REJOINING, id: -, bulk: [];
            DirectOpen "direct_open" {} -> DirectGrant, conn, STORAGE, id: -, bulk: [];
            DirectCommit "direct_commit" {} -> (), conn, CHANGES | STORAGE | GROWS, id: -, bulk: [writes(ranges)];
            Accessed "accessed" { path } -> (), store, CHANGES, id: same, bulk: [];
            Lease "lease" {} -> LeaseGrant, conn, 0, id: -, bulk: [];
            LeaseNote "lease_note" {} -> LeaseNames, conn, 0, id: -, bulk: [];
            Recall "recall" {} -> (), conn, REJOINING, id: -, bulk: [];
            LeaseWait "lease_wait" {} -> Vec<u64>, conn, 0, id: -, bulk: [];
            LeaseReturn "lease_return" {} -> (), conn, 0, id: -, bulk: [];
            Batch "batch" {} -> Vec<BatchOutcome>, store, CHANGES | GROWS, id: -, bulk: [];
            Mounted "mounted" {} -> (), conn, REJOINING, id: -, bulk: [];
            ShutdownWithStats "shutdown_with_stats" {} -> $crate::stats::DaemonStats, conn, REJOINING, id: -, bulk: [];
            Epoch "epoch" {} -> (), conn, REJOINING, id: -, bulk: [];
            Membership "membership" {} -> MembershipState, conn, CHANGES | REJOINING, id: -, bulk: [];
        }
    };
}

/// Builds `Request`, `Op`, the `Rpc` impls and `TABLE_TEXT` from the list.
macro_rules! define_requests {
    ($( $name:ident $op:literal { $($field:ident)? } -> $reply:ty, $served:ident, $props:expr,
        id: $id:tt, bulk: [$($kind:ident($bf:ident)),*]; )*) => {
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

        /// The request table as text, one line per request in tag order, with the columns
        /// that make the protocol (struct, op name, path field, reply, identity, bulk); what
        /// `TABLE_FINGERPRINTS` records. How the daemon serves a request (`store`/`conn`,
        /// `Props`) is its own affair and not part of it.
        #[doc(hidden)]
        pub const TABLE_TEXT: &str = concat!($(
            stringify!($name), " ", stringify!($op), " {", $(stringify!($field),)? "} -> ",
            stringify!($reply), ", id: ", stringify!($id), ", bulk: [",
            stringify!($($kind($bf)),*), "];\n",
        )*);

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

            /// The bytes the request moves beyond its encoding (the table's `bulk` column).
            pub fn bulk(&self) -> Bulk {
                match self {
                    $( Request::$name(r) => Rpc::bulk(r), )*
                }
            }

            /// The field that travels as the frame's payload (`bulk: [payload(..)]`).
            #[allow(unused_mut, unused_assignments)]
            fn payload_field(&self) -> Option<&Bytes> {
                match self {
                    $( Request::$name(r) => {
                        let mut field: Option<&Bytes> = None;
                        $( define_requests!(@payload field r $kind $bf); )*
                        let _ = r;
                        field
                    } )*
                }
            }

            /// The field that travels as the frame's payload, to be set from the frame.
            #[allow(unused_mut, unused_assignments)]
            fn payload_field_mut(&mut self) -> Option<&mut Bytes> {
                match self {
                    $( Request::$name(r) => {
                        let mut field: Option<&mut Bytes> = None;
                        $( define_requests!(@payload_mut field r $kind $bf); )*
                        let _ = r;
                        field
                    } )*
                }
            }

            /// This path-addressed request, sent inside an `OnIdentity`, as it applies to
            /// the identity record named `path` (the table's `id` column); a request that
            /// does not apply to an identity record is refused with its kind.
            pub fn on_identity(self, path: String) -> Result<Request, Op> {
                match self {
                    $( Request::$name(r) => define_requests!(@id r path $name $id $($field)?), )*
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
                #[allow(unused_mut)]
                fn bulk(&self) -> Bulk {
                    let mut b = Bulk::default();
                    $( define_requests!(@bulk b self $kind $bf); )*
                    b
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

    (@id $r:ident $path:ident $name:ident - $($field:ident)?) => {{
        let _ = $r;
        Err(Op::$name)
    }};
    (@id $r:ident $path:ident $name:ident same $field:ident) => {{
        let mut r = $r;
        r.$field = $path;
        Ok(Request::$name(r))
    }};
    (@id $r:ident $path:ident $name:ident $other:ident $field:ident) => {{
        let _ = $r;
        Ok(Request::$other($other { path: $path }))
    }};
    (@id $r:ident $path:ident $name:ident $id:tt) => {
        compile_error!(concat!(
            stringify!($name),
            ": only a request addressed by a path can be sent on an identity record (id: -)"
        ))
    };

    (@payload $p:ident $r:ident payload $f:ident) => { $p = Some(&$r.$f); };
    (@payload $p:ident $r:ident $kind:ident $f:ident) => {};
    (@payload_mut $p:ident $r:ident payload $f:ident) => { $p = Some(&mut $r.$f); };
    (@payload_mut $p:ident $r:ident $kind:ident $f:ident) => {};

    (@bulk $b:ident $s:ident payload $f:ident) => {};
    (@bulk $b:ident $s:ident adds $f:ident) => { $b.adds = Measure::bytes(&$s.$f); };
    (@bulk $b:ident $s:ident reads $f:ident) => {
        $b.reply = Some(Measure::bytes(&$s.$f));
        $b.file = Some(($s.file_id, false));
    };
    (@bulk $b:ident $s:ident writes $f:ident) => {
        $b.counted = Measure::bytes(&$s.$f);
        $b.file = Some(($s.file_id, true));
    };
    (@bulk $b:ident $s:ident moves $f:ident) => { $b.counted = Measure::bytes(&$s.$f); };
    (@bulk $b:ident $s:ident $kind:ident $f:ident) => {
        compile_error!(concat!(
            "unknown bulk kind `", stringify!($kind),
            "` (payload, adds, reads, writes, moves)"
        ));
    };
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
        self.op().props().grows().then(|| self.bulk().adds)
    }

    /// The bytes this request carries outside its encoding (its `payload` field, shared,
    /// not copied).
    pub fn payload(&self) -> Bytes {
        self.payload_field().cloned().unwrap_or_default()
    }

    /// The frame of this request: its encoding as the meta section, its data as the payload
    /// (shared, not copied).
    pub fn to_frame(&self, id: u64, max: u32) -> Result<OutFrame, Errno> {
        OutFrame::new(id, self, self.payload(), max)
    }

    /// Decodes a request frame, allocating at most `limit` bytes for the meta section; the
    /// payload becomes the request's `payload` field as it is. A payload on any other
    /// request, or a malformed meta section, is EPROTO.
    pub fn from_frame(frame: Frame, limit: u64) -> Result<Request, Errno> {
        let mut req: Request = decode(&frame.meta, limit)?;
        match req.payload_field_mut() {
            Some(field) => *field = frame.payload,
            None if !frame.payload.is_empty() => {
                return Err(unexpected_payload(req.op_name(), frame.payload.len()))
            }
            None => {}
        }
        Ok(req)
    }
}

/// The reply of a call of `R`, typed; a reply of another type is EIO naming the request.
pub fn typed_reply<R: Rpc>(reply: Reply) -> Result<R::Reply, Errno> {
    R::Reply::from_reply(reply).map_err(|other| unexpected_reply(R::OP.name(), &other))
}
