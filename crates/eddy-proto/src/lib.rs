//! eddy-proto: the wire format between Eddy clients and daemons, and the rules both sides
//! apply to what crosses it.
//!
//! - `frame`: length-prefixed frames `[u32 len][u64 request id][u32 meta len][meta][payload]`,
//!   with a maximum size; bulk bytes travel as the raw payload, outside the encoding;
//! - `msg`: the messages: one struct per request (`req`), listed once in `request_table!`
//!   (their wire tags, names, properties, reply types, whether they may reach a file's
//!   identity record, the bulk bytes they move), the replies, and the records they carry
//!   (bincode-encoded, size-limited decoding); `TABLE_FINGERPRINTS` ties the table to
//!   `PROTOCOL_VERSION` (a test fails when one changes without the other);
//! - `auth`: the handshake (protocol version, HMAC proof of the deployment secret, the wire
//!   protection both ends use);
//! - `wire`: the protection of the frames after the handshake: clear, a keyed-BLAKE3 tag per frame,
//!   or AES-256-GCM, with per-connection, per-direction keys (decision 0022);
//! - `checksum`: the CRC32C of the block-aligned pieces of a read or write (decision 0019);
//! - `fdpass`: descriptors handed over a Unix socket for direct local I/O (decision 0048);
//! - `mounts`: unmounting a file system and reading the mount table, shared by the FUSE
//!   front-end, `eddy stop` and the burst-buffer phases (which do not link the front-end);
//! - `keepalive`: TCP keepalive and user timeout, so both ends notice a peer gone silent;
//! - `path`: path normalisation and the metadata key layout;
//! - `repair`: the digests a repair push is verified with (decision 0021);
//! - `stats`: what a daemon counts of the I/O it serves (the `Stats` reply);
//! - `sync`: `lock`, the poison-tolerant mutex lock every crate uses;
//! - `Errno`: errors as errno values with a short context message;
//! - `fuzzing` (feature `arbitrary`): generators of request fields for the fuzzer.
//!
//! Beyond reaching sockets (`fdpass`), reading the mount table and unmounting (`mounts`),
//! this crate performs no file or metadata operation itself; it must never panic on bytes
//! read from the network.

pub mod auth;
pub mod checksum;
pub mod fdpass;
pub mod frame;
#[cfg(feature = "arbitrary")]
pub mod fuzzing;
pub mod keepalive;
pub mod lockset;
pub mod mounts;
pub mod msg;
pub mod path;
pub mod repair;
pub mod stats;
pub mod sync;
pub mod unixio;
pub mod wire;

pub use msg::*;

/// Version of the protocol; the handshake refuses a peer with another one. Raise it with
/// any change to the wire: a request's fields, a reply, a frame, or the request table
/// (then record the table's fingerprint in `TABLE_FINGERPRINTS`).
pub const PROTOCOL_VERSION: u32 = 18;

/// The fingerprint of `request_table!` (the first 16 hex digits of the BLAKE3 hash of
/// `TABLE_TEXT` without its white space) under each protocol version since they were
/// first recorded, oldest first. The last entry must be `PROTOCOL_VERSION` with the table
/// as it is: a test (`msg::tests::request_table_matches_its_protocol_version`) fails
/// otherwise and prints the line to add. Entries are never edited: a new table is a new
/// version.
pub const TABLE_FINGERPRINTS: &[(u32, &str)] = &[
    (12, "023a7d0f41ceba22"),
    // Version 13: `req::Read` carries a `StreamHint` (decision 0072); the table is the same.
    (13, "023a7d0f41ceba22"),
    // Version 14: `TierStatus` and `DaemonStats` carry per-backend figures (decision 0073);
    // `req::Write` carries a `StreamHint`, `TierStatus` counts backend calls and merged
    // requests, `BackendStats` merged requests (decision 0074); the table is the same.
    (14, "023a7d0f41ceba22"),
    // Version 15: directory leases (decision 0075): `Lease`, `LeaseNote`, `Recall`,
    // `LeaseWait`, `LeaseReturn`, `Batch`; `DaemonStats` counts leases.
    (15, "4940f474582c487d"),
    // Version 16: a mount says what it is and its FUSE transport (`Mounted`, decision 0079);
    // `DaemonStatus` lists the mounts connected.
    (16, "a9f6f637209c9165"),
    // Version 17: `ShutdownWithStats`, the stop that answers with the counters (decision
    // 0076).
    (17, "0fffb11acdbf8afc"),
    // Version 18: `Epoch` and `Membership` (decision 0081).
    (18, "c2bf6becdafe1e53"),
];

/// An error as it crosses the wire: an errno value and a short message saying what failed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error)]
#[error("{msg} ({})", errno_name(*.errno))]
pub struct Errno {
    /// A positive errno value (libc constants).
    pub errno: i32,
    /// What failed, for humans.
    pub msg: String,
}

impl Errno {
    pub fn new(errno: i32, msg: impl Into<String>) -> Errno {
        Errno {
            errno,
            msg: msg.into(),
        }
    }
    pub fn enoent(what: impl std::fmt::Display) -> Errno {
        Errno::new(libc::ENOENT, format!("{what}: no such file or directory"))
    }
    pub fn eio(what: impl Into<String>) -> Errno {
        Errno::new(libc::EIO, what)
    }
    pub fn einval(what: impl Into<String>) -> Errno {
        Errno::new(libc::EINVAL, what)
    }
    /// A daemon at membership epoch `daemon` refusing a client of the older epoch `client`
    /// (decision 0081): the request was not applied; read the hosts file again and resend.
    pub fn moved(id: u32, daemon: u64, client: u64) -> Errno {
        Errno::new(
            libc::EREMCHG,
            format!(
                "daemon {id} is at membership epoch {daemon}, this client at {client}: the \
                 deployment's membership moved on"
            ),
        )
    }
    /// Whether this is the refusal of a client of an older membership epoch (`moved`).
    pub fn is_moved(&self) -> bool {
        self.errno == libc::EREMCHG
    }
    /// Wraps an OS error, keeping its errno (EIO if it has none).
    pub fn from_io(err: &std::io::Error, context: impl std::fmt::Display) -> Errno {
        Errno::new(
            err.raw_os_error().unwrap_or(libc::EIO),
            format!("{context}: {err}"),
        )
    }
}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> std::io::Error {
        std::io::Error::new(std::io::Error::from_raw_os_error(e.errno).kind(), e)
    }
}

/// The symbolic name of an errno value, e.g. "ENOENT".
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EACCES => "EACCES",
        libc::EEXIST => "EEXIST",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::ENOLCK => "ENOLCK",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EPROTO => "EPROTO",
        libc::EXDEV => "EXDEV",
        libc::EBUSY => "EBUSY",
        libc::ENODATA => "ENODATA",
        _ => "errno",
    }
}
