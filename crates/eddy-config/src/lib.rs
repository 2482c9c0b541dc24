//! eddy-config: the one place where Eddy's tunables and the description of a deployment live.
//!
//! `Config` holds every tunable with its documented default; `Deployment` is the hosts file
//! written at start-up (daemon list, secret, config) that clients and tools read; `ready` is
//! the ready file and ready line a daemon announces its address with; `values` the types of
//! the settings' values (atime, placement, file modes, the wire, links). This crate does no I/O
//! beyond reading and writing those files (and printing the ready line), and knows nothing
//! of the wire format.

#![forbid(unsafe_code)]

mod backends;
mod deployment;
pub mod launcher;
pub mod ready;
mod values;

pub use backends::{
    BackendDecl, Because, FileFacts, IoMode, PlacementRule, Placer, Store, BACKEND_XATTR,
};
pub use deployment::{write_private, DaemonEntry, Deployment, JobInfo};
pub use values::*;

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Errors reading or writing configuration files.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The largest `max_path_bytes` accepted: 60 KiB, below the 64 KiB a metadata store key can
/// hold (fjall), leaving room for the bytes some keys add to a path (hints, directory marks).
pub const MAX_PATH_BYTES_LIMIT: usize = 60 * 1024;

/// Every tunable of a deployment. Defaults are documented per field; a TOML file may set any
/// subset of them (missing fields take the default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Size of a data chunk in bytes; chunk k of a file is placed by hash(file id, k).
    /// Default 512 KiB. Fixed for the life of a deployment.
    pub chunk_size: u64,
    /// End-to-end checksums (decision 0019): clients send the CRC32C of every block-aligned
    /// piece they write, daemons verify and store one per block and verify what they read,
    /// clients verify what comes back. Default true; off only to measure what they cost.
    pub checksums: bool,
    /// Bytes covered by one stored checksum, at least 4 KiB; a chunk smaller than this has
    /// one block (see `checksum_block`), otherwise it must divide `chunk_size`. Default
    /// 64 KiB. Fixed for the life of a deployment.
    pub checksum_block_bytes: u64,
    /// Chunks one scrub request verifies at most (`eddy scrub` asks in pages of this many).
    /// Default 64.
    pub scrub_page_chunks: u32,
    /// Deadline for one RPC, in milliseconds; past it the caller gets EIO. Default 10 000.
    pub rpc_timeout_ms: u64,
    /// How the frames after the handshake are protected on the wire (decision 0022). Both
    /// ends of a connection must use the same; a client whose setting differs from its
    /// daemon's is refused (EPROTO), never downgraded. Default `auto`.
    pub wire: Wire,
    /// Copies of every metadata record and chunk, on that many distinct daemons (the first
    /// owners of the placement order; decision 0020). With R copies, reads, writes, listing,
    /// stat, create and unlink keep working with up to R-1 daemons down. 1..=daemons.
    /// Default 1 (no replication).
    pub replicas: usize,
    /// How long a client (or a daemon forwarding to its peers) treats a daemon it could not
    /// reach as down when it has another copy to use, in milliseconds: later calls go to
    /// the next owner at once instead of each trying the dead one first. Only used with
    /// `replicas` > 1. Default 2 000.
    pub down_hold_ms: u64,
    /// The grace period of a daemon restarted on its root (killed, crashed or stopped), in
    /// milliseconds: for this long after its start it grants no new advisory lock (nor
    /// answers F_GETLK; clients wait and ask again) while the clients that held locks on it
    /// before take them back (decision 0028). 0: no grace period (locks held before a
    /// restart are lost). Default 5 000.
    pub lock_grace_ms: u64,
    /// How often a daemon's repair loop pushes the hints it holds (items another owner
    /// missed while it could not be reached) to their targets, in milliseconds; a target
    /// that cannot be reached is tried again next round (decision 0021). Used with
    /// `replicas` > 1, and while items move to new owners (decision 0081). Default 1 000.
    pub repair_interval_ms: u64,
    /// Items (metadata keys or chunks) one repair push sends at once to one target.
    /// Default 64.
    pub repair_batch_items: u32,
    /// Bytes per second one daemon pushes at most while items move to new owners (`eddy
    /// grow`, `eddy shrink`: decision 0081), so that a move leaves the clients' I/O its
    /// bandwidth. 0: unbounded. Default 268 435 456 (256 MiB/s).
    pub move_bandwidth_bytes: u64,
    /// The same while the daemon serves clients' requests that touch what moves (one came
    /// within the last 200 ms), so that a move yields to the job running through it; the
    /// lower of the two applies. 0 (the default): `move_bandwidth_bytes`. A copy that yields
    /// takes longer, and writers that change what moves faster than it sends it make it
    /// send their changes again (`eddy bench grow --move-busy-bandwidth`).
    pub move_busy_bandwidth_bytes: u64,
    /// Deadline to connect and authenticate to a daemon, in milliseconds. Default 3 000.
    pub connect_timeout_ms: u64,
    /// Largest frame accepted on the wire, header included. Default 64 MiB.
    pub max_frame_bytes: u32,
    /// Largest data payload the client puts in one read or write RPC; larger per-daemon
    /// groups are split. Default 8 MiB.
    pub max_rpc_data_bytes: u32,
    /// How often, at most, a client publishes to a file's metadata owner the size its writes
    /// reached, in milliseconds; fsync and close always publish. 0 publishes with every
    /// write. Default 5.
    pub size_update_ms: u64,
    /// How often, at most, a client sends the owner of a directory the time of its latest
    /// create, remove or rename in it (the directory's mtime and ctime), in milliseconds: the
    /// first change of an interval goes at once, with the change; later ones are folded into
    /// one deferred update (decision 0011). The client's own stats see them at once. 0 sends
    /// one with every change. Default 5.
    pub dir_time_update_ms: u64,
    /// How long a client trusts a directory it looked up (its existence, kind and mode) when
    /// it creates, removes or resolves entries below it, in milliseconds: creates in a known
    /// directory take one round trip; a mount answers the kernel's GETATTR of such a
    /// directory from it (decision 0050). Its own changes to a directory drop it at once; other
    /// nodes' within this time. 0 asks every time. Default 1 000 (as `fuse_attr_ttl_ms`).
    pub dir_cache_ms: u64,
    /// Directory entries per readdir page from each daemon. Default 1024.
    pub readdir_page: u32,
    /// Entries a client takes from one daemon in one paged series of replies (a listing, a
    /// stage-out's check, flush and finalisation, a directory move's subtree, the files and
    /// directories a stage-in collects). Every page must also move its cursor on and hold no
    /// more than was asked. Past the bound, or on a cursor that does not move, the call fails
    /// with EIO naming the daemon: a daemon (the job's user's) that pages forever cannot hold
    /// its caller (root's stage-out, a root mount) nor grow its memory (decision 0056).
    /// Default 10 000 000.
    pub max_paged_entries: u64,
    /// Requests one connection may have unanswered at a daemon; past it the daemon stops
    /// reading that connection until replies are taken (backpressure, bounded memory).
    /// Default 1024.
    pub max_requests_in_flight: usize,
    /// Bytes one connection may have in flight at a daemon: the frames of its requests read
    /// and not yet answered, and the replies they are owed (a read's data) until written.
    /// Before a frame is buffered its announced size must fit; past the bound the daemon
    /// stops reading that connection until replies are taken. Taken as at least
    /// `max_frame_bytes`. Default 256 MiB.
    pub max_connection_bytes: u64,
    /// Connections a daemon holds that have not finished the handshake. Past it a new
    /// connection pushes out the one that has waited longest; each also has the
    /// `connect_timeout_ms` deadline. Default 128.
    pub max_unauthenticated: usize,
    /// Free bytes a daemon keeps on its metadata device: below them, requests that add
    /// metadata or data fail with ENOSPC, so the store never meets a full device (removing
    /// files still works and frees room). At most a tenth of the device. Default 64 MiB.
    pub meta_reserve_bytes: u64,
    /// Threads of a daemon's blocking pool for chunk and metadata I/O. Default 32.
    pub io_threads: usize,
    /// Threads serving FUSE requests in `eddy mount`. Default 8. Over FUSE io_uring
    /// (`fuse_transport`) the kernel keeps a queue per possible CPU: each gets as many of
    /// them, and at least one (decision 0078).
    pub fuse_threads: usize,
    /// How long the kernel may cache attributes and entries of the mount, in milliseconds.
    /// Default 1 000.
    pub fuse_attr_ttl_ms: u64,
    /// How long the kernel may remember that a name does not exist on the mount (a negative
    /// entry), in milliseconds: a lookup of a missing name, e.g. before a create or along a
    /// search path, is answered once in that time. A create through the same mount replaces
    /// it at once; a file created on another node appears there when it expires. 0: never
    /// remembered. Default 1 000.
    pub fuse_negative_ttl_ms: u64,
    /// Whether the mount answers the kernel's lookups in a directory it made itself from
    /// what it knows, within `fuse_negative_ttl_ms` of the mkdir: a name this mount has not
    /// made or seen there is missing (as a negative entry taken at the mkdir would say), so
    /// the lookup the kernel sends before each create costs no round trip (decision 0044).
    /// Default false: it is for directories filled through one mount only (a single-node
    /// job). Across nodes it breaks close-to-open for that time: a file another node made
    /// and closed in such a directory does not open here (an N-N job whose rank 0 made the
    /// directory and reads its peers' files, as `ior -C` does, gets ENOENT).
    pub fuse_fresh_dirs: bool,
    /// Whether the preload library makes an open's descriptor (its memfd, header, seals and
    /// write-only reopen: six system calls) while the open's request is at the daemon,
    /// instead of after the reply (decision 0046). The descriptor of a failed open is
    /// closed again. Default false (the descriptor after the reply): on the 2-core
    /// development machine the gain (at most the calls' 6 µs of a create) did not stand out
    /// of the noise; turn it on where a core is idle during the round trip.
    pub preload_early_descriptor: bool,
    /// Kernel read-ahead of the mount in KiB, set (as root) through
    /// `/sys/class/bdi/MAJ:MIN/read_ahead_kb` once the mount is up: how large the reads the
    /// kernel sends to Eddy for a sequential reader get (the kernel's default for FUSE is
    /// 128). 0 leaves the kernel's value. Default 1 024.
    pub fuse_read_ahead_kb: u32,
    /// FUSE passthrough (decision 0049): an open of a file whose chunks all lie in one data
    /// file of a daemon of this host (R = 1, not linked, no lock taken through the mount)
    /// hands the kernel that data file, which then reads and writes it without visiting
    /// the mount. Taken only by a mount run with CAP_SYS_ADMIN on a kernel that offers it
    /// (Linux >= 6.9), and with `direct_io` on. Default true.
    pub fuse_passthrough: bool,
    /// How the mount's requests cross to the kernel (decision 0078): `auto` takes FUSE over
    /// io_uring when the kernel offers it (Linux 6.14+ built with `CONFIG_FUSE_IO_URING`, and
    /// the module parameter `/sys/module/fuse/parameters/enable_uring` set to Y by the site),
    /// else `/dev/fuse`; `io_uring` insists on it (the mount fails with the reason when the
    /// kernel does not offer it); `dev_fuse` never asks. Default `dev_fuse` until io_uring
    /// has run the mount's whole test suite; the mount's log says which transport it runs.
    pub fuse_transport: FuseTransport,
    /// When reads move a file's atime (decision 0061), through the mount (`eddy mount
    /// --atime` overrides it there) and the library: `relatime` (the default, as Linux's):
    /// a read moves it when it is not later than the mtime or the ctime, or is a day old, so
    /// at most one update per change of the file or per day; `strictatime`: every read that
    /// reaches Eddy (one more metadata request per read, and no FUSE passthrough for
    /// read-only opens); `noatime`: never.
    pub atime: Atime,
    /// Longest accepted path from the namespace root, in bytes (ENAMETOOLONG beyond). The
    /// kernel bounds the path string of one call (PATH_MAX, 4096), not the depth of a tree:
    /// a program that works in a deep directory with relative names reaches paths from the
    /// root of any length, through the mount and the preload library alike. This bound is
    /// the stores' (a path is a metadata key, and fjall keys hold at most 64 KiB), at most
    /// `MAX_PATH_BYTES_LIMIT` (60 KiB). Symbolic link targets stay within 4095 bytes, as
    /// Linux's. Default 32 768.
    pub max_path_bytes: usize,
    /// Longest accepted path component, in bytes (ENAMETOOLONG beyond). Default 255.
    pub max_name_bytes: usize,
    /// TCP port daemons listen on when started on remote hosts. Default 7750.
    pub port: u16,
    /// Seconds `eddy start` waits for every daemon to become ready. Default 60.
    pub start_timeout_s: u64,
    /// Bytes of chunk data a daemon may hold before it evicts cached backend chunks; 0 means
    /// what it holds plus the free space of the file system under its root. Default 0.
    pub cache_capacity_bytes: u64,
    /// Bytes of chunk data one daemon may hold at most, whatever the data (scratch files,
    /// dirty, pinned and clean cached chunks of linked files): a write, fallocate, repair
    /// push or backend fetch that would take the chunks it holds past it is refused with
    /// ENOSPC, after clean cached chunks of linked files were evicted if that makes room
    /// (dirty chunks are not written back to make room for it). Counted as the chunk store
    /// counts: each chunk's length, holes included; overwrites add nothing. 0: no limit.
    /// The Slurm integration sets it to the job's capacity divided over its daemons.
    /// Default 0.
    pub capacity_bytes: u64,
    /// Percent of the capacity above which a daemon starts evicting clean cached chunks
    /// (least recently used first, dirty ones flushed first). Default 90.
    pub cache_high_watermark_pct: u8,
    /// Percent of the capacity eviction brings the daemon's use down to. Default 75.
    pub cache_low_watermark_pct: u8,
    /// Chunks a sequential reader of a backend file has fetched ahead of it. Default 8.
    pub readahead_chunks: u32,
    /// Files `eddy prefetch` and a job's `#EDDY prefetch` fetch at once (each with all its
    /// chunks asked of their owners at once): the bound that leaves the daemons' backend
    /// threads to the job's own reads meanwhile. `eddy stage-in`, which the job waits for,
    /// fetches 16 at once. Default 4.
    pub prefetch_files: u32,
    /// Whether a client's reads tell the daemons the stream they belong to and how it reads
    /// (sequential, strided with its stride, random: decision 0072), so that a daemon reads
    /// ahead, for that stream, the chunks of a backend file it owns. Off: reads carry no
    /// hint and the daemons read nothing ahead on their own (the client's own read-ahead of
    /// `readahead_chunks` goes on). Default true.
    pub stream_hints: bool,
    /// Chunks of a backend file ahead of a sequential or strided stream's last read among
    /// which a daemon fetches, in the background, those it owns (decision 0072); 0: none.
    /// Default 16.
    pub stream_readahead_chunks: u32,
    /// Deadline of one backend operation (a fetch, a flush, a namespace write-through), in
    /// milliseconds; past it the request fails with EIO naming the backend path. At most
    /// three quarters of `rpc_timeout_ms` is used. Default 5 000.
    pub backend_timeout_ms: u64,
    /// Threads of a daemon doing backend I/O; a hung backend holds at most these. Default 16.
    pub backend_threads: usize,
    /// How long, in microseconds, a daemon's backend read or write waits in the queue of its
    /// backend file for others next to it, so that adjacent ones go as one larger `pread` or
    /// `pwrite` (decision 0074). A write-back hands a file's dirty chunks over at once and
    /// does not wait; a fetch on a miss waits at most this. 0: no queues, every request is
    /// its own call, as before. Default 200.
    pub backend_merge_window_us: u64,
    /// The largest backend read or write the queues make of adjacent requests (decision
    /// 0074); also what one backend file's queue holds before its next request waits.
    /// Default 8 MiB.
    pub backend_merge_max_bytes: u64,
    /// Chunks ahead of a sequential writer's last write (known from the hint its writes
    /// carry, decision 0074) among which a daemon preallocates (`fallocate`) the slots of
    /// those it owns in its data file, for file systems that would otherwise scatter the
    /// writer's blocks; at most 16 such windows per daemon, given back at the first ENOSPC,
    /// by truncate and at removal. 0: none. Default 0: on ext4, whose delayed allocation
    /// already lays a sequential writer's chunks out contiguously, preallocating chunk by
    /// chunk left the data files in six times as many extents (decision 0074).
    pub write_prealloc_chunks: u32,
    /// Owner (uid and gid) of the namespace's root directory, and of the scratch directories
    /// above linked prefixes, when they are made; unset: whoever connects first (the user who
    /// starts the deployment). A deployment root makes for one user's job gives them to
    /// that user. Default unset.
    pub root_uid: Option<u32>,
    pub root_gid: Option<u32>,
    /// Permission bits of the namespace's root directory and of the scratch directories
    /// above linked prefixes, when they are made. TOML: an octal string (`"0755"`) or an
    /// integer (`0o755`). The default, 0700, keeps other users of a node out of the job's
    /// namespace on a mount every user can reach (`allow_other`); a job that shares its
    /// files with other users sets e.g. `"0755"`. Default 0700.
    pub root_mode: FileMode,
    /// Whether daemons count the I/O they serve (per op, client and file, the one-second
    /// series; `eddy stats`, decision 0032). Counting is always on in service: the switch
    /// exists only to measure what counting costs (`eddy bench` with it on and off).
    /// Default true.
    pub stats_counting: bool,
    /// Files whose distinct writers and readers a daemon tracks one by one (decision 0032);
    /// data requests on further files are counted but not attributed (`files_untracked`).
    /// Bounds the daemon's memory for counting. Default 65 536.
    pub stats_max_files: usize,
    /// One-second samples a daemon keeps of its time series; when full, the older half is
    /// merged pairwise into wider samples, so the whole deployment's life is kept at a
    /// coarser resolution the older it is. At least 16. Default 3 600.
    pub stats_series_max: usize,
    /// How often, in milliseconds, a daemon writes its counters' snapshot to
    /// `ROOT/stats/<instance>.json` (and once more at a clean stop), so that a deployment
    /// killed without `eddy stop` still leaves its job profile (made at the next `eddy start`
    /// or `eddy stop` on its state). 0: never. Default 10 000.
    pub stats_persist_ms: u64,
    /// Namespace prefixes linked to backend directories (the parallel file system). Entries
    /// under a prefix are imported from the backend on first touch, fetched chunk by chunk,
    /// written back by stage-out, eviction and stop. The rest of the namespace is scratch.
    /// TOML: `[[links]]` tables with `prefix = "/data"` and `backend = "/pfs/run7"`.
    pub links: Vec<Link>,
    /// More backend directories under linked prefixes (decision 0073): `[[backends]]`
    /// tables with `name`, `prefix` (a `[[links]]` prefix), `path`, and optionally `kind`,
    /// `capacity_bytes` (a quota) and `read_only`. The link's own `backend` is the default
    /// backend of its prefix (a `[[backends]]` entry with its path names it). Imports look
    /// in every backend of a link, the default first, then in the declared order. Default
    /// none.
    pub backends: Vec<BackendDecl>,
    /// Where a new file under a link with several backends is written back (decision
    /// 0073): `[[placement_rules]]` tables with `backend` and any of `path` (a glob),
    /// `min_size`, `max_size` (bytes, at write-back), `uid`, `gid`, `io_mode` (`"shared"`:
    /// written by more than one client before its first write-back; `"per-process"`: by
    /// one); the first rule whose conditions all hold wins, after the file's
    /// `user.eddy.backend` and before the default backend. Default none.
    pub placement_rules: Vec<PlacementRule>,
    /// The I/O history database (decision 0033): an absolute path names an SQLite file
    /// (made 0600), a `postgres://` or `postgresql://` URL a PostgreSQL database (for a site
    /// whose login nodes share one history; `?host=/dir` for a unix socket). A deployment's
    /// job profile is stored there when it ends, and `eddy history` reads it (its default
    /// `--db`). Default unset: no history is kept.
    pub history_db: Option<String>,
    /// Where each daemon serves its counters for Prometheus (`GET /metrics`, the text
    /// exposition format), as `IP:PORT`; unset (the default): no endpoint. Daemon *i* of a
    /// host listens on PORT + *i* (`eddy start --metrics` sets it); port 0: any free port,
    /// recorded in the deployment file. Use the unspecified address (`0.0.0.0:9400`) when
    /// the daemons run on several hosts. In the burst buffer's site config only the IP
    /// counts: each job's daemons take free ports, recorded in its deployment (a fixed port
    /// would be every job's on a node, decision 0056). Default unset.
    pub metrics_addr: Option<String>,
    /// Connections a daemon's metrics endpoint holds at once. Past it a new connection pushes
    /// out the one that has waited longest without sending its request (so idle connections,
    /// anyone's to open, never keep a scrape out); only when all are being answered is the
    /// new one closed (decision 0056). Default 8.
    pub metrics_max_connections: usize,
    /// Longest a metrics connection may last, from accept to the reply written (a slow
    /// scraper is cut off), in milliseconds. Default 5 000.
    pub metrics_timeout_ms: u64,
    /// Clients a daemon's metrics name one by one (`eddy_client_*` series): the first to
    /// arrive; the later ones are summed in one series with `client_host="_others"`, so
    /// that a job of many processes cannot flood Prometheus with series. Default 64.
    pub metrics_max_clients: usize,
    /// Early write-back (`eddy writeback`, decision 0041): the write-back rate, in bytes per
    /// second, assumed until its own passes have measured one; it decides when writing back
    /// starts before the job's predicted end. Default 100 MiB/s.
    pub writeback_rate_estimate: u64,
    /// Early write-back: milliseconds between two looks at the dirty bytes (before writing
    /// back starts) and between two passes that found nothing to write. Default 1 000.
    pub writeback_pass_interval_ms: u64,
    /// Where a new file's chunks go (decision 0043): `"hashed"` spreads them over the
    /// daemons by hash; `"local"` puts them all on the daemon of the host that creates the
    /// file (hashing when that daemon is down or full). A directory's `user.eddy.placement`
    /// attribute overrides it for the files created in it. Default `"hashed"`.
    pub placement: PlacementMode,
    /// The host this client counts as for `placement = "local"`: its daemons are those of
    /// the deployment whose `host` is this name. Unset: the node name a client identifies
    /// with (Slurm's node name in a job step, else the host name). For tests that give one
    /// machine's daemons several host names, and for sites whose host names differ from
    /// the deployment's. Default unset.
    pub placement_host: Option<String>,
    /// How long, in milliseconds, a client trusts what it last learnt of its local daemon
    /// (reachable, room for a chunk) when it places a new file by locality. Default 1 000.
    pub placement_view_ms: u64,
    /// Direct local I/O (decision 0048): a client on the host of a daemon that owns chunks
    /// of a file it opened reads and writes that daemon's data file itself, through
    /// descriptors the daemon hands it over its Unix socket, and reports what it wrote.
    /// Files under a linked prefix always go through the daemon. Default true.
    pub direct_io: bool,
    /// Direct local I/O: bytes a client writes directly before it reports them to the
    /// daemon (it reports at fsync, close and lock too, and when this many are pending);
    /// a daemon hands out a write descriptor only with at least this much room below its
    /// capacity. Default 64 MiB.
    pub direct_batch_bytes: u64,
    /// Directory leases (decision 0075): a client that made a directory, or created
    /// `lease_after_creates` files in one, asks the daemon owning the directory's record for
    /// an exclusive lease on its names; it then answers lookups of names it knows absent and
    /// `O_EXCL` creates locally and sends creates and unlinks in batches. Another client's
    /// lookup, listing or create there recalls the lease first. Default true (decision 0075,
    /// "On by default"); `false` makes every name operation a request of its own.
    pub leases: bool,
    /// Leases: operations a holder queues for one daemon before it sends them as one batch
    /// (close and fsync send earlier). At most 1 024. Default 64.
    pub lease_batch_max: u32,
    /// Leases: how long, in milliseconds, a holder keeps a queued create or unlink before it
    /// sends it anyway. Default 5.
    pub lease_batch_age_ms: u64,
    /// Leases: how long, in milliseconds, the daemon owning a leased directory waits for its
    /// holder to give the lease back when another client needs the directory; then it
    /// revokes the lease (the holder's unsent operations there fail with EIO on its side).
    /// At most half of `rpc_timeout_ms` is used (a recall waits inside another client's
    /// request), and at least `lease_fence` (7/16 of `rpc_timeout_ms`: a holder cut off the
    /// network answers from its lease until then). Default 2 000.
    pub lease_recall_timeout_ms: u64,
    /// Leases: after a recall, the directory is not leased again for this long, in
    /// milliseconds; each further recall within 8 times that doubles it, up to 64 times it:
    /// this bounds the recalls per second of a directory many clients share. Default 200.
    pub lease_cooldown_ms: u64,
    /// Leases: creates by one client in one directory after which it asks for a lease on it.
    /// Default 8.
    pub lease_after_creates: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            chunk_size: 512 * 1024,
            checksums: true,
            checksum_block_bytes: 64 * 1024,
            scrub_page_chunks: 64,
            rpc_timeout_ms: 10_000,
            wire: Wire::Auto,
            replicas: 1,
            down_hold_ms: 2_000,
            lock_grace_ms: 5_000,
            repair_interval_ms: 1_000,
            repair_batch_items: 64,
            move_bandwidth_bytes: 256 << 20,
            move_busy_bandwidth_bytes: 0,
            connect_timeout_ms: 3_000,
            max_frame_bytes: 64 * 1024 * 1024,
            max_rpc_data_bytes: 8 * 1024 * 1024,
            size_update_ms: 5,
            dir_time_update_ms: 5,
            dir_cache_ms: 1_000,
            readdir_page: 1024,
            max_paged_entries: 10_000_000,
            max_requests_in_flight: 1024,
            max_connection_bytes: 256 * 1024 * 1024,
            max_unauthenticated: 128,
            meta_reserve_bytes: 64 * 1024 * 1024,
            io_threads: 32,
            fuse_threads: 8,
            fuse_attr_ttl_ms: 1_000,
            fuse_negative_ttl_ms: 1_000,
            fuse_fresh_dirs: false,
            preload_early_descriptor: false,
            fuse_read_ahead_kb: 1024,
            fuse_passthrough: true,
            fuse_transport: FuseTransport::DevFuse,
            atime: Atime::Relatime,
            max_path_bytes: 32 * 1024,
            max_name_bytes: 255,
            port: 7750,
            start_timeout_s: 60,
            cache_capacity_bytes: 0,
            capacity_bytes: 0,
            cache_high_watermark_pct: 90,
            cache_low_watermark_pct: 75,
            readahead_chunks: 8,
            prefetch_files: 4,
            stream_hints: true,
            stream_readahead_chunks: 16,
            backend_timeout_ms: 5_000,
            backend_threads: 16,
            backend_merge_window_us: 200,
            backend_merge_max_bytes: 8 * 1024 * 1024,
            write_prealloc_chunks: 0,
            root_uid: None,
            root_gid: None,
            root_mode: FileMode(0o700),
            stats_counting: true,
            stats_max_files: 65_536,
            stats_series_max: 3_600,
            stats_persist_ms: 10_000,
            links: Vec::new(),
            backends: Vec::new(),
            placement_rules: Vec::new(),
            history_db: None,
            metrics_addr: None,
            metrics_max_connections: 8,
            metrics_timeout_ms: 5_000,
            metrics_max_clients: 64,
            writeback_rate_estimate: 100 * 1024 * 1024,
            writeback_pass_interval_ms: 1_000,
            placement: PlacementMode::Hashed,
            placement_host: None,
            placement_view_ms: 1_000,
            direct_io: true,
            direct_batch_bytes: 64 * 1024 * 1024,
            leases: true,
            lease_batch_max: 64,
            lease_batch_age_ms: 5,
            lease_recall_timeout_ms: 2_000,
            lease_cooldown_ms: 200,
            lease_after_creates: 8,
        }
    }
}

impl Config {
    /// Checks the values that would make a deployment unusable.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.chunk_size < 4096 || self.chunk_size > 64 * 1024 * 1024 {
            return Err(ConfigError::Invalid(format!(
                "chunk_size {} must be between 4 KiB and 64 MiB",
                self.chunk_size
            )));
        }
        if self.checksum_block_bytes < 4096
            || !self.chunk_size.is_multiple_of(self.checksum_block())
        {
            return Err(ConfigError::Invalid(format!(
                "checksum_block_bytes {} must be at least 4 KiB and divide chunk_size {}",
                self.checksum_block_bytes, self.chunk_size
            )));
        }
        if u64::from(self.max_rpc_data_bytes) + 1024 * 1024 > u64::from(self.max_frame_bytes) {
            return Err(ConfigError::Invalid(format!(
                "max_rpc_data_bytes {} must be at least 1 MiB below max_frame_bytes {}",
                self.max_rpc_data_bytes, self.max_frame_bytes
            )));
        }
        if self.max_path_bytes < 4096 || self.max_path_bytes > MAX_PATH_BYTES_LIMIT {
            return Err(ConfigError::Invalid(format!(
                "max_path_bytes {} must be between 4096 and {MAX_PATH_BYTES_LIMIT}: a path is a \
                 metadata key (with a few bytes more in some records), and the store's keys \
                 hold at most 64 KiB",
                self.max_path_bytes
            )));
        }
        if self.chunk_size > u64::from(self.max_rpc_data_bytes) {
            return Err(ConfigError::Invalid(format!(
                "chunk_size {} must not exceed max_rpc_data_bytes {}: one chunk must fit in one RPC",
                self.chunk_size, self.max_rpc_data_bytes
            )));
        }
        if self.max_rpc_data_bytes < 64 * 1024 {
            return Err(ConfigError::Invalid(
                "max_rpc_data_bytes must be at least 64 KiB".into(),
            ));
        }
        if self.readdir_page == 0
            || self.io_threads == 0
            || self.fuse_threads == 0
            || self.max_requests_in_flight == 0
            || self.max_unauthenticated == 0
            || self.max_paged_entries == 0
        {
            return Err(ConfigError::Invalid(
                "readdir_page, io_threads, fuse_threads, max_requests_in_flight, max_unauthenticated and max_paged_entries must be positive"
                    .into(),
            ));
        }
        if self.replicas == 0 {
            return Err(ConfigError::Invalid(
                "replicas must be at least 1 (1 keeps one copy of everything)".into(),
            ));
        }
        if self.rpc_timeout_ms == 0 || self.connect_timeout_ms == 0 {
            return Err(ConfigError::Invalid("timeouts must be positive".into()));
        }
        if self.lease_batch_max == 0 || self.lease_batch_max > 1024 {
            return Err(ConfigError::Invalid(format!(
                "lease_batch_max {} must be between 1 and 1024",
                self.lease_batch_max
            )));
        }
        if self.direct_batch_bytes < 1024 * 1024 {
            return Err(ConfigError::Invalid(format!(
                "direct_batch_bytes {} must be at least 1 MiB",
                self.direct_batch_bytes
            )));
        }
        if self.writeback_rate_estimate == 0 || self.writeback_pass_interval_ms == 0 {
            return Err(ConfigError::Invalid(
                "writeback_rate_estimate and writeback_pass_interval_ms must be positive".into(),
            ));
        }
        if self.stats_series_max < 16 {
            return Err(ConfigError::Invalid(format!(
                "stats_series_max {} must be at least 16 (samples of the time series kept)",
                self.stats_series_max
            )));
        }
        if self.repair_interval_ms == 0 || self.repair_batch_items == 0 {
            return Err(ConfigError::Invalid(
                "repair_interval_ms and repair_batch_items must be positive".into(),
            ));
        }
        if let Some(db) = &self.history_db {
            check_history_db(db)?;
        }
        self.validate_metrics()?;
        self.validate_tier()
    }

    /// `metrics_addr` is an `IP:PORT` address; the endpoint's bounds are positive.
    fn validate_metrics(&self) -> Result<(), ConfigError> {
        if let Some(addr) = &self.metrics_addr {
            metrics_socket_addr(addr)?;
        }
        if self.metrics_max_connections == 0 || self.metrics_timeout_ms == 0 {
            return Err(ConfigError::Invalid(
                "metrics_max_connections and metrics_timeout_ms must be positive".into(),
            ));
        }
        Ok(())
    }

    /// The bytes one stored checksum covers: `checksum_block_bytes`, or the whole chunk when
    /// chunks are smaller.
    pub fn checksum_block(&self) -> u64 {
        self.checksum_block_bytes.min(self.chunk_size).max(1)
    }

    fn validate_tier(&self) -> Result<(), ConfigError> {
        let (low, high) = (self.cache_low_watermark_pct, self.cache_high_watermark_pct);
        if low == 0 || low >= high || high > 100 {
            return Err(ConfigError::Invalid(format!(
                "cache watermarks must satisfy 0 < low ({low}) < high ({high}) <= 100"
            )));
        }
        if self.backend_timeout_ms == 0 {
            return Err(ConfigError::Invalid(
                "backend_timeout_ms must be positive".into(),
            ));
        }
        if self.backend_threads == 0 {
            return Err(ConfigError::Invalid(
                "backend_threads must be positive".into(),
            ));
        }
        if self.backend_merge_window_us > 1_000_000 {
            return Err(ConfigError::Invalid(format!(
                "backend_merge_window_us {} must be at most 1 000 000 (one second)",
                self.backend_merge_window_us
            )));
        }
        if self.backend_merge_max_bytes < 4096 || self.backend_merge_max_bytes > 1 << 30 {
            return Err(ConfigError::Invalid(format!(
                "backend_merge_max_bytes {} must be between 4 KiB and 1 GiB",
                self.backend_merge_max_bytes
            )));
        }
        for (i, link) in self.links.iter().enumerate() {
            link.validate()?;
            for other in &self.links[..i] {
                if link.covers(&other.prefix) || other.covers(&link.prefix) {
                    return Err(ConfigError::Invalid(format!(
                        "links {} and {} overlap: linked prefixes must be disjoint",
                        other.prefix, link.prefix
                    )));
                }
            }
        }
        self.placer().map(|_| ())
    }

    /// The backends of every link and the placement rules, checked and compiled (decision
    /// 0073).
    pub fn placer(&self) -> Result<Placer, ConfigError> {
        Placer::new(&self.links, &self.backends, &self.placement_rules)
    }

    /// Deadline of one backend operation: `backend_timeout_ms`, but at most three quarters of
    /// the RPC deadline, so a hung backend gives EIO before the client stops waiting.
    pub fn backend_deadline(&self) -> std::time::Duration {
        let ms = self
            .backend_timeout_ms
            .min(self.rpc_timeout_ms * 3 / 4)
            .max(1);
        std::time::Duration::from_millis(ms)
    }

    /// How long the long poll of a lease holder at its granter waits at most (`LeaseWait`,
    /// decision 0075): a quarter of the RPC deadline.
    pub fn lease_poll_cap(&self) -> std::time::Duration {
        std::time::Duration::from_millis((self.rpc_timeout_ms / 4).max(1))
    }

    /// How long a holder answers names known absent from a lease after it last heard from
    /// the granter (decision 0075, *Replication*): the poll's cap and an eighth of the RPC
    /// deadline for the poll's round trip, 3/8 of it.
    pub fn lease_valid_for(&self) -> std::time::Duration {
        std::time::Duration::from_millis((self.rpc_timeout_ms / 8 * 3).max(2))
    }

    /// How long a daemon that found a lease's granter unreachable waits before it drops the
    /// registration and serves another client (decision 0075, *Replication*): the holder's
    /// `lease_valid_for` and a sixteenth of the RPC deadline for clocks and packets in
    /// flight, 7/16 of it. With the recall's connect (at most half the deadline) it fits in
    /// the other client's RPC deadline.
    pub fn lease_fence(&self) -> std::time::Duration {
        std::time::Duration::from_millis((self.rpc_timeout_ms / 16 * 7).max(3))
    }

    /// The link covering the normalised namespace path `path`, if any.
    pub fn link_for(&self, path: &str) -> Option<&Link> {
        self.links.iter().find(|l| l.covers(path))
    }

    /// Reads a TOML file holding any subset of the fields.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = read(path)?;
        let cfg: Config = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }
}

/// Checks a `history_db` setting: a `postgres://`/`postgresql://` URL, or an absolute path
/// (the setting is read by processes with different working directories); another scheme
/// or an empty value is refused. eddy-history opens it.
pub fn check_history_db(spec: &str) -> Result<(), ConfigError> {
    let spec = spec.trim();
    if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
        return Ok(());
    }
    if let Some((scheme, _)) = spec.split_once("://") {
        return Err(ConfigError::Invalid(format!(
            "history_db {scheme}:// is not known: give an absolute path (SQLite) or a \
             postgres:// URL (PostgreSQL)"
        )));
    }
    if !Path::new(spec).is_absolute() {
        return Err(ConfigError::Invalid(format!(
            "history_db {spec:?} must be an absolute path (SQLite) or a postgres:// URL \
             (PostgreSQL)"
        )));
    }
    Ok(())
}

/// A byte count: a number (fractions allowed) with an optional binary suffix K, M, G or T
/// (also KiB, MiB, ..., or with a B: KB, MB, ...).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use K, M, G or T)"
            ))
        }
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a byte count such as 4096, 64K or 1.5G"))?;
    let bytes = n * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(format!("{text:?} is not a positive byte count"));
    }
    Ok(bytes.round() as u64)
}

pub(crate) fn read(path: &Path) -> Result<String, ConfigError> {
    // privileged-path: a configuration file the caller names (--config, the state's config.toml)
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests;
