//! What the daemon counts of the I/O it serves (decision 0032), and the snapshot the
//! `Stats` request returns (`eddy_proto::stats::DaemonStats`).
//!
//! Counting sits on every request's path, so it is cheap by construction:
//! - per op kind (indexed by `Op`): relaxed atomic counters and atomic power-of-two
//!   histograms (`hist.rs`) of request sizes, queue wait and service time;
//! - per client: each connection caches the `Arc` of its client's counters (`ConnStats`),
//!   set once by the connection's `Identify`; the map of clients is locked only then and
//!   for a snapshot;
//! - per file (`files.rs`): bounded sets of writer and reader keys, in a map sharded over
//!   mutexes by file id, touched by data requests only;
//! - gauges of requests queued (decoded, waiting for their handler: the connection's reply
//!   budget or an I/O permit) and in a handler;
//! - the one-second series (`series.rs`), filled by `sampler` from the counters' totals
//!   and a window of queue samples taken at each request's arrival.
//!
//! A request's progress travels with it in the task-local `REQUEST` (set by the server
//! around each request's future): `started` marks the handler's start (inline, or on the
//! blocking pool once the I/O permit is held), and `Identify` finds its connection there.
//! With `stats_counting = false` nothing is counted.
//!
//! `persist.rs` writes the snapshot to the root every `stats_persist_ms` and at a clean
//! stop, for the profile of a deployment whose daemons were killed.

mod files;
mod hist;
mod persist;
mod series;

pub(crate) use persist::{persist_now, persister};

use crate::backend::Backend;
use eddy_proto::stats::{BackendStats, ClientId, ClientStats, DaemonStats, OpStats, Sample};
use eddy_proto::{Errno, FileId, Op, Request, Response};
use files::FileSets;
use hist::AtomicHistogram;
use series::Series;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Errno values counted in an array; rarer ones (none on Linux) in a map.
const ERRNO_SLOTS: usize = 256;

/// Unix time in milliseconds.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The stable key of a client, the same on every daemon: xxh3 of host, pid and rank.
pub fn client_key(c: &ClientId) -> u64 {
    let mut buf = Vec::with_capacity(c.host.len() + 16);
    buf.extend_from_slice(c.host.as_bytes());
    buf.push(0);
    buf.extend_from_slice(&c.pid.to_le_bytes());
    match c.rank {
        Some(r) => {
            buf.push(1);
            buf.extend_from_slice(&r.to_le_bytes());
        }
        None => buf.push(0),
    }
    xxhash_rust::xxh3::xxh3_64(&buf)
}

/// Whether requests of this kind count as metadata operations: what is not `STORAGE`,
/// except the monitoring and membership requests themselves.
fn is_metadata(op: Op) -> bool {
    !op.props().storage() && !is_control(op)
}

/// The requests that say who a connection is, what it mounts and at which membership epoch
/// it places, ask for counters, or change the membership: not the job's I/O, never counted
/// as its operations.
fn is_control(op: Op) -> bool {
    matches!(
        op,
        Op::Identify | Op::Mounted | Op::Stats | Op::Epoch | Op::Membership
    )
}

/// The counters of one op kind.
#[derive(Default)]
struct OpCounters {
    count: AtomicU64,
    errors: AtomicU64,
    bytes: AtomicU64,
    sizes: AtomicHistogram,
    queue_us: AtomicHistogram,
    service_us: AtomicHistogram,
}

/// The counters of one client (shared by its connections).
pub(crate) struct ClientCounters {
    id: ClientId,
    key: u64,
    ops: AtomicU64,
    metadata_ops: AtomicU64,
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
    errors: AtomicU64,
    first_ms: AtomicU64,
    last_ms: AtomicU64,
}

impl ClientCounters {
    fn new(id: ClientId) -> ClientCounters {
        ClientCounters {
            key: client_key(&id),
            id,
            ops: AtomicU64::new(0),
            metadata_ops: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            written_bytes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            first_ms: AtomicU64::new(0),
            last_ms: AtomicU64::new(0),
        }
    }

    fn snapshot(&self) -> ClientStats {
        ClientStats {
            client: self.id.clone(),
            key: self.key,
            ops: self.ops.load(Ordering::Relaxed),
            metadata_ops: self.metadata_ops.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            written_bytes: self.written_bytes.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            first_ms: self.first_ms.load(Ordering::Relaxed),
            last_ms: self.last_ms.load(Ordering::Relaxed),
        }
    }
}

/// One connection's view of the counting: its client, once identified.
#[derive(Default)]
pub(crate) struct ConnStats {
    client: OnceLock<Arc<ClientCounters>>,
}

/// The requests' queue samples of the current second (swapped out by the sampler).
#[derive(Default)]
struct Window {
    arrivals: AtomicU64,
    queue_sum: AtomicU64,
    queue_max: AtomicU64,
    metadata_arrivals: AtomicU64,
    metadata_queue_sum: AtomicU64,
}

/// The totals the sampler differences from one second to the next.
#[derive(Default, Clone, Copy)]
struct Totals {
    read_bytes: u64,
    written_bytes: u64,
    ops: u64,
    metadata_ops: u64,
}

/// Everything counted by one daemon.
pub struct Stats {
    on: bool,
    daemon: u32,
    host: String,
    job: String,
    started_ms: u64,
    ops: Box<[OpCounters]>,
    errnos: Box<[AtomicU64]>,
    rare_errnos: Mutex<HashMap<i32, u64>>,
    queued: AtomicU64,
    in_flight: AtomicU64,
    metadata_queued: AtomicU64,
    window: Window,
    clients: Mutex<HashMap<ClientId, Arc<ClientCounters>>>,
    /// Requests of connections that have not identified (yet).
    unknown: Arc<ClientCounters>,
    files: FileSets,
    series: Mutex<Series>,
    last: Mutex<Totals>,
}

/// A request's progress, set by the server around its future (`REQUEST.scope`).
pub(crate) struct RequestCtx {
    pub conn: Arc<ConnStats>,
    op: Op,
    arrived: Instant,
    started: Cell<Option<Instant>>,
}

tokio::task_local! {
    pub(crate) static REQUEST: RequestCtx;
}

/// What a request carried, for its counters (taken before it is served).
pub(crate) struct Carried {
    bytes: u64,
    file: Option<(FileId, bool)>,
}

/// What `req` carried, from the table's `bulk` column: the bytes it brings (`writes`,
/// `moves`) and the file whose data it reads or writes.
pub(crate) fn carried(req: &Request) -> Carried {
    let bulk = req.bulk();
    Carried {
        bytes: bulk.counted,
        file: bulk.file,
    }
}

impl Stats {
    pub fn new(config: &eddy_config::Config, daemon: u32, host: &str, job: &str) -> Stats {
        Stats {
            on: config.stats_counting,
            daemon,
            host: host.to_string(),
            job: job.to_string(),
            started_ms: now_ms(),
            ops: Op::ALL.iter().map(|_| OpCounters::default()).collect(),
            errnos: (0..ERRNO_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            rare_errnos: Mutex::default(),
            queued: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            metadata_queued: AtomicU64::new(0),
            window: Window::default(),
            clients: Mutex::default(),
            unknown: Arc::new(ClientCounters::new(ClientId::default())),
            files: FileSets::new(config.stats_max_files),
            series: Mutex::new(Series::new(config.stats_series_max)),
            last: Mutex::default(),
        }
    }

    pub fn counting(&self) -> bool {
        self.on
    }

    /// A request was decoded: it is queued from now on. Returns its context, to be set
    /// around its future (`REQUEST.scope`).
    pub(crate) fn arrive(&self, conn: &Arc<ConnStats>, op: Op) -> RequestCtx {
        let ctx = RequestCtx {
            conn: Arc::clone(conn),
            op,
            arrived: Instant::now(),
            started: Cell::new(None),
        };
        if !self.on {
            return ctx;
        }
        let queued = self.queued.fetch_add(1, Ordering::Relaxed) + 1;
        let depth = queued + self.in_flight.load(Ordering::Relaxed);
        let w = &self.window;
        w.arrivals.fetch_add(1, Ordering::Relaxed);
        w.queue_sum.fetch_add(depth, Ordering::Relaxed);
        w.queue_max.fetch_max(depth, Ordering::Relaxed);
        if is_metadata(op) {
            // Those waiting before this one arrived.
            let waiting = self.metadata_queued.fetch_add(1, Ordering::Relaxed);
            w.metadata_arrivals.fetch_add(1, Ordering::Relaxed);
            w.metadata_queue_sum.fetch_add(waiting, Ordering::Relaxed);
        }
        ctx
    }

    /// The current request's handler starts (its queue wait ends); once per request, and
    /// nothing outside a request (the repair loop's own work).
    pub(crate) fn started(&self) {
        let _ = REQUEST.try_with(|r| self.start(r));
    }

    fn start(&self, r: &RequestCtx) {
        if r.started.get().is_some() {
            return;
        }
        r.started.set(Some(Instant::now()));
        if !self.on {
            return;
        }
        self.queued.fetch_sub(1, Ordering::Relaxed);
        if is_metadata(r.op) {
            self.metadata_queued.fetch_sub(1, Ordering::Relaxed);
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// The request of context `r`, which carried `carried`, was answered `resp`: counts it.
    pub(crate) fn finish(&self, r: &RequestCtx, mut carried: Carried, resp: &Response) {
        if !self.on {
            return;
        }
        self.start(r);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        let end = Instant::now();
        let started = r.started.get().unwrap_or(end);
        let c = &self.ops[r.op as usize];
        c.count.fetch_add(1, Ordering::Relaxed);
        c.queue_us
            .record(started.saturating_duration_since(r.arrived).as_micros() as u64);
        c.service_us
            .record(end.saturating_duration_since(started).as_micros() as u64);
        if let (Some((_, false)), Ok(reply)) = (carried.file, resp) {
            carried.bytes = reply.data().map_or(0, |d| d.len() as u64);
        }
        if carried.bytes > 0 || carried.file.is_some() {
            c.bytes.fetch_add(carried.bytes, Ordering::Relaxed);
            c.sizes.record(carried.bytes);
        }
        if let Err(e) = resp {
            c.errors.fetch_add(1, Ordering::Relaxed);
            self.count_errno(e);
        }
        if is_control(r.op) {
            return;
        }
        let client = r.conn.client.get().unwrap_or(&self.unknown);
        self.count_client(client, r.op, &carried, resp.is_err());
        if let (Some((file, write)), Ok(_)) = (carried.file, resp) {
            self.files.record(file, client.key, write, carried.bytes);
        }
    }

    fn count_client(&self, client: &ClientCounters, op: Op, carried: &Carried, failed: bool) {
        let now = now_ms();
        client.ops.fetch_add(1, Ordering::Relaxed);
        if is_metadata(op) {
            client.metadata_ops.fetch_add(1, Ordering::Relaxed);
        }
        match carried.file {
            Some((_, true)) => client
                .written_bytes
                .fetch_add(carried.bytes, Ordering::Relaxed),
            Some((_, false)) => client
                .read_bytes
                .fetch_add(carried.bytes, Ordering::Relaxed),
            None => 0,
        };
        if failed {
            client.errors.fetch_add(1, Ordering::Relaxed);
        }
        let _ = client
            .first_ms
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        client.last_ms.fetch_max(now, Ordering::Relaxed);
    }

    fn count_errno(&self, e: &Errno) {
        match usize::try_from(e.errno).ok().filter(|&i| i < ERRNO_SLOTS) {
            Some(i) => {
                self.errnos[i].fetch_add(1, Ordering::Relaxed);
            }
            None => {
                *eddy_proto::sync::lock(&self.rare_errnos)
                    .entry(e.errno)
                    .or_default() += 1
            }
        }
    }

    /// Bytes of `file` a client of this host read directly in this daemon's data file
    /// (decision 0048), told by the current request (its `DirectCommit`): counted as reads
    /// of the client that read them.
    pub(crate) fn read_directly(&self, file: FileId, bytes: u64) {
        if !self.on || bytes == 0 {
            return;
        }
        let c = &self.ops[Op::Read as usize];
        c.bytes.fetch_add(bytes, Ordering::Relaxed);
        let _ = REQUEST.try_with(|r| {
            let client = r.conn.client.get().unwrap_or(&self.unknown);
            client.read_bytes.fetch_add(bytes, Ordering::Relaxed);
            self.files.record(file, client.key, false, bytes);
        });
    }

    /// Bytes of `file` the kernel wrote into this daemon's data file through a client's
    /// FUSE passthrough (decision 0049), as far as the daemon sees them: the growth of the
    /// file's chunks it recorded (overwrites are not seen). Counted as the current
    /// request's (its `DirectCommit`) writes.
    pub(crate) fn wrote_directly(&self, file: FileId, bytes: u64) {
        if !self.on || bytes == 0 {
            return;
        }
        self.ops[Op::DirectCommit as usize]
            .bytes
            .fetch_add(bytes, Ordering::Relaxed);
        let _ = REQUEST.try_with(|r| {
            let client = r.conn.client.get().unwrap_or(&self.unknown);
            client.written_bytes.fetch_add(bytes, Ordering::Relaxed);
            self.files.record(file, client.key, true, bytes);
        });
    }

    /// The connection of the current request belongs to `client` (its `Identify`). A
    /// connection identifies once; a second `Identify` changes nothing.
    pub(crate) fn identify(&self, client: ClientId) {
        if !self.on {
            return;
        }
        let counters = {
            let mut clients = eddy_proto::sync::lock(&self.clients);
            Arc::clone(
                clients
                    .entry(client.clone())
                    .or_insert_with(|| Arc::new(ClientCounters::new(client))),
            )
        };
        let _ = REQUEST.try_with(|r| {
            if r.conn.client.set(counters).is_err() {
                tracing::debug!("a connection identified twice; the first identity is kept");
            }
        });
    }

    /// The totals of the series' counters now.
    fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for op in Op::ALL {
            let c = &self.ops[*op as usize];
            let n = c.count.load(Ordering::Relaxed);
            match op {
                Op::Read => t.read_bytes += c.bytes.load(Ordering::Relaxed),
                Op::Write | Op::DirectCommit => t.written_bytes += c.bytes.load(Ordering::Relaxed),
                _ => {}
            }
            if is_control(*op) {
                continue;
            }
            t.ops += n;
            if is_metadata(*op) {
                t.metadata_ops += n;
            }
        }
        t
    }

    /// Closes the sample of the second that began at `t_ms` and adds it to the series.
    pub(crate) fn sample(&self, t_ms: u64) {
        let now = self.totals();
        let before = std::mem::replace(&mut *eddy_proto::sync::lock(&self.last), now);
        let w = &self.window;
        let arrivals = w.arrivals.swap(0, Ordering::Relaxed);
        let queue_sum = w.queue_sum.swap(0, Ordering::Relaxed);
        let queue_max = w.queue_max.swap(0, Ordering::Relaxed);
        let meta_arrivals = w.metadata_arrivals.swap(0, Ordering::Relaxed);
        let meta_sum = w.metadata_queue_sum.swap(0, Ordering::Relaxed);
        let ratio = |sum: u64, n: u64| if n == 0 { 0.0 } else { sum as f32 / n as f32 };
        let s = Sample {
            t_ms,
            seconds: 1,
            read_bytes: now.read_bytes.saturating_sub(before.read_bytes),
            written_bytes: now.written_bytes.saturating_sub(before.written_bytes),
            ops: now.ops.saturating_sub(before.ops),
            metadata_ops: now.metadata_ops.saturating_sub(before.metadata_ops),
            queue_max: u32::try_from(queue_max).unwrap_or(u32::MAX),
            queue_mean: ratio(queue_sum, arrivals),
            metadata_queue_mean: ratio(meta_sum, meta_arrivals),
        };
        eddy_proto::sync::lock(&self.series).push(s);
    }

    /// Everything counted so far.
    pub fn snapshot(&self, backend: &Backend) -> DaemonStats {
        let ops = Op::ALL
            .iter()
            .map(|op| {
                let c = &self.ops[*op as usize];
                OpStats {
                    op: op.name().to_string(),
                    metadata: is_metadata(*op),
                    count: c.count.load(Ordering::Relaxed),
                    errors: c.errors.load(Ordering::Relaxed),
                    bytes: c.bytes.load(Ordering::Relaxed),
                    sizes: c.sizes.snapshot(),
                    queue_us: c.queue_us.snapshot(),
                    service_us: c.service_us.snapshot(),
                }
            })
            .filter(|o| o.count > 0 || o.bytes > 0)
            .collect();
        // Clients that only identified (a monitoring tool asking `Stats`) are left out.
        let mut clients: Vec<ClientStats> = eddy_proto::sync::lock(&self.clients)
            .values()
            .map(|c| c.snapshot())
            .filter(|c| c.ops > 0)
            .collect();
        let unknown = self.unknown.snapshot();
        if unknown.ops > 0 {
            clients.push(unknown);
        }
        clients.sort_by(|a, b| a.client.cmp(&b.client));
        let mut errors: Vec<(i32, u64)> = self
            .errnos
            .iter()
            .enumerate()
            .map(|(i, c)| (i as i32, c.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect();
        errors.extend(
            eddy_proto::sync::lock(&self.rare_errnos)
                .iter()
                .map(|(e, n)| (*e, *n)),
        );
        errors.sort_unstable();
        DaemonStats {
            daemon: self.daemon,
            host: self.host.clone(),
            job: self.job.clone(),
            started_ms: self.started_ms,
            now_ms: now_ms(),
            counting: self.on,
            ops,
            clients,
            files: self.files.snapshot(),
            files_untracked: self.files.untracked(),
            queued: self.queued.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            errors,
            backend: backend.io.snapshot(),
            series: eddy_proto::sync::lock(&self.series).to_vec(),
            backends: backend.store_stats(),
            leases: Default::default(),
        }
    }
}

/// The backend tier's I/O (`Backend::read_at`, `Backend::write_at`, and the queues' merged
/// calls, decision 0074).
#[derive(Default)]
pub struct BackendCounters {
    on: bool,
    reads: AtomicU64,
    writes: AtomicU64,
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
    read_ahead_bytes: AtomicU64,
    merged_reads: AtomicU64,
    merged_writes: AtomicU64,
}

impl BackendCounters {
    pub fn new(on: bool) -> BackendCounters {
        BackendCounters {
            on,
            ..BackendCounters::default()
        }
    }

    /// One backend read call of `bytes`, made of `requests` merged requests (decision 0074).
    pub fn read(&self, bytes: u64, requests: u64) {
        if self.on {
            self.reads.fetch_add(1, Ordering::Relaxed);
            self.read_bytes.fetch_add(bytes, Ordering::Relaxed);
            self.merged_reads
                .fetch_add(requests.saturating_sub(1), Ordering::Relaxed);
        }
    }

    /// One backend write call of `bytes`, made of `requests` merged requests.
    pub fn wrote(&self, bytes: u64, requests: u64) {
        if self.on {
            self.writes.fetch_add(1, Ordering::Relaxed);
            self.written_bytes.fetch_add(bytes, Ordering::Relaxed);
            self.merged_writes
                .fetch_add(requests.saturating_sub(1), Ordering::Relaxed);
        }
    }

    /// Bytes fetched ahead of a stream on its hint (counted by `read` too).
    pub fn read_ahead(&self, bytes: u64) {
        if self.on {
            self.read_ahead_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    fn snapshot(&self) -> BackendStats {
        BackendStats {
            read_ahead_bytes: self.read_ahead_bytes.load(Ordering::Relaxed),
            merged_reads: self.merged_reads.load(Ordering::Relaxed),
            merged_writes: self.merged_writes.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            written_bytes: self.written_bytes.load(Ordering::Relaxed),
        }
    }
}

/// What the tier did with one backend (decision 0073).
/// Counted always (the tier's own figures, as its dirty bytes), also with counting off.
pub struct StoreCounters {
    name: String,
    kind: String,
    read_only: bool,
    pub placed_files: AtomicU64,
    pub placed_bytes: AtomicU64,
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
    failures: AtomicU64,
}

impl StoreCounters {
    pub fn new(store: &eddy_config::Store) -> StoreCounters {
        StoreCounters {
            name: store.name.clone(),
            kind: store.kind.clone(),
            read_only: store.read_only,
            placed_files: AtomicU64::new(0),
            placed_bytes: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            written_bytes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }

    /// A file was placed here with `bytes`.
    pub fn placed(&self, bytes: u64) {
        self.placed_files.fetch_add(1, Ordering::Relaxed);
        self.placed_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn read(&self, bytes: u64) {
        self.read_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn wrote(&self, bytes: u64) {
        self.written_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// The figures, under the link's `prefix`.
    pub fn snapshot(&self, prefix: &str) -> eddy_proto::stats::StoreStats {
        eddy_proto::stats::StoreStats {
            name: self.name.clone(),
            prefix: prefix.to_string(),
            kind: self.kind.clone(),
            read_only: self.read_only,
            placed_files: self.placed_files.load(Ordering::Relaxed),
            placed_bytes: self.placed_bytes.load(Ordering::Relaxed),
            dirty_bytes: 0,
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            written_bytes: self.written_bytes.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
        }
    }
}

/// Adds a sample to the series every second, until the daemon stops.
pub(crate) async fn sampler(state: Arc<crate::state::State>) {
    if !state.stats.counting() {
        return;
    }
    let mut stop = state.shutdown.subscribe();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut from = now_ms();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tick.tick() => {
                state.stats.sample(from);
                from = now_ms();
            }
        }
    }
}
