//! The Prometheus endpoint (decision 0035): with `metrics_addr` (or `eddyd --metrics`) set,
//! the daemon answers `GET /metrics` with its counters in the Prometheus text exposition
//! format (version 0.0.4), 404 for any other path. The counters stay the daemon's own (the
//! atomics and small maps `State::snapshot` reads); at each scrape one snapshot
//! (`eddy_proto::stats::DaemonStats`) is taken and encoded by `prometheus-client` through a
//! custom `Collector`, so no Prometheus type sits on the request path.
//!
//! The server is hyper's HTTP/1 on the daemon's runtime, bounded so that a slow or hostile
//! scraper cannot hold the daemon: at most `metrics_max_connections` connections at once,
//! one request per connection, request heads of at most `HEAD_BYTES`, and each connection cut
//! after `metrics_timeout_ms`. Past the bound a new connection pushes out the connection that
//! has waited longest without sending its request head (an idle or slow one), so that idle
//! connections, anyone's to open, never keep a scrape out (decision 0056); only when every
//! connection is being answered is the new one closed.
//!
//! Names and labels (every series also carries `job` and `daemon`):
//! `eddy_operations_total{op}`, `eddy_operation_errors_total{op}`,
//! `eddy_bytes_read_total{op}` / `eddy_bytes_written_total{op}` (an op's bytes count as
//! written when the op adds data, `Props::grows`, else as read; only ops that carried bytes),
//! the histograms `eddy_request_size_bytes{op}`, `eddy_queue_wait_seconds{op}` and
//! `eddy_service_seconds{op}`, the gauges `eddy_requests_queued` and
//! `eddy_requests_in_flight`, per client `eddy_client_{operations,metadata_operations,errors,
//! bytes_read,bytes_written}_total{client_host,client_pid,client_rank}` (no rank: the label
//! is empty, i.e. absent; at most `metrics_max_clients` clients one by one, the first to
//! arrive, a set that does not change once full, and the later ones summed in one series
//! with `client_host="_others"`, so each series stays monotonic and their number bounded),
//! `eddy_errors_total{errno}` (the errno's name), `eddy_backend_bytes_read_total`,
//! `eddy_backend_bytes_written_total`, `eddy_backend_operations_total{dir="read"|"write"}`,
//! per backend of the linked prefixes (decision 0073) `eddy_backend_store_bytes_read_total`,
//! `eddy_backend_store_bytes_written_total`, `eddy_backend_store_placed_files_total`,
//! `eddy_backend_store_placed_bytes_total` and `eddy_backend_store_failures_total`, each
//! with `backend="name"`,
//! `eddy_start_time_seconds` and `eddy_counting` (0 only while counting is switched off to
//! measure its cost).
//!
//! Histograms: the snapshot's buckets are powers of two (bucket i holds the integers in
//! [2^(i-1), 2^i)), so `le` is the largest integer a bucket holds, 2^i − 1 (bytes, or
//! microseconds converted to seconds): exact, not rounded. Every second power is exposed
//! (`le` = 0, 3, 15, 63, …), then `+Inf`; merging neighbours keeps the cumulative counts
//! exact. Request sizes are counted for the requests that carry data (read, write,
//! put_chunk), and their `_sum` is exact (the op's bytes). The counting keeps no sum of
//! latencies, so the latency histograms' `_sum` is an estimate: each value counted at its
//! bucket's midpoint (between 25 % under and 50 % over the true value); `_count` is exact.

use crate::DaemonError;
use bytes::Bytes;
use eddy_proto::stats::{DaemonStats, Histogram, BUCKETS};
use eddy_proto::sync::lock;
use eddy_proto::Op;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

/// The path the metrics are served at.
pub const METRICS_PATH: &str = "/metrics";
/// Largest request head (request line and headers) read from a scraper: a scrape's is a
/// few hundred bytes (hyper's smallest buffer is 8 KiB).
const HEAD_BYTES: usize = 16 * 1024;
/// Pause after a failed accept (e.g. out of file descriptors) before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// The histogram buckets exposed: every second power of two (see the module's header).
const BUCKET_STEP: usize = 2;
/// Highest bucket exposed for sizes (2^28 − 1 bytes, past any frame) and latencies
/// (2^26 − 1 µs, about 67 s, past any deadline); above them only `+Inf`.
const SIZE_TOP: usize = 28;
const LATENCY_TOP: usize = 26;

/// Where a scrape gets its snapshot: the daemon's counters at that moment.
pub type Snapshot = Arc<dyn Fn() -> DaemonStats + Send + Sync>;

/// The bounds of the endpoint (from the config).
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub max_connections: usize,
    pub timeout: Duration,
    /// Clients named one by one (`metrics_max_clients`).
    pub max_clients: usize,
}

impl Bounds {
    pub fn from_config(config: &eddy_config::Config) -> Bounds {
        Bounds {
            max_connections: config.metrics_max_connections,
            timeout: Duration::from_millis(config.metrics_timeout_ms),
            max_clients: config.metrics_max_clients,
        }
    }
}

/// Binds the endpoint's address; returns the listener and the address bound (port 0: the
/// one picked). A daemon that cannot bind it is not started (the error names the address).
pub async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), DaemonError> {
    let err = |source| DaemonError::Metrics {
        addr: addr.to_string(),
        source,
    };
    let listener = TcpListener::bind(addr).await.map_err(err)?;
    let bound = listener.local_addr().map_err(err)?;
    Ok((listener, bound))
}

/// Serves scrapes on `listener` until `stop` turns true.
pub async fn serve(
    listener: TcpListener,
    bounds: Bounds,
    snapshot: Snapshot,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Slots::new(bounds.max_connections));
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "metrics endpoint: accept failed");
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        // Over the bound with every connection answering: closed at once, the daemon's
        // work is not shared with more.
        let Some((slot, pushed_out)) = Slots::enter(&slots) else {
            tracing::debug!("metrics endpoint: too many connections, one closed");
            continue;
        };
        tokio::spawn(connection(
            stream,
            (slot, pushed_out),
            bounds,
            Arc::clone(&snapshot),
        ));
    }
}

/// The endpoint's connections: at most `max`, and of them those that have not sent their
/// request head yet, by age (their ids count up), each with the sender that pushes it out.
struct Slots {
    max: usize,
    inner: Mutex<SlotsInner>,
}

#[derive(Default)]
struct SlotsInner {
    next: u64,
    held: HashSet<u64>,
    waiting: BTreeMap<u64, oneshot::Sender<()>>,
}

/// A connection's place among the `Slots`, given back when it ends.
struct Slot {
    id: u64,
    slots: Arc<Slots>,
}

impl Slots {
    fn new(max: usize) -> Slots {
        Slots {
            max,
            inner: Mutex::new(SlotsInner::default()),
        }
    }

    /// A place for a new connection, and what tells it it was pushed out: past the bound,
    /// the place of the connection waiting longest for its head; None if none waits.
    fn enter(slots: &Arc<Slots>) -> Option<(Slot, oneshot::Receiver<()>)> {
        let mut inner = lock(&slots.inner);
        if inner.held.len() >= slots.max {
            let oldest = *inner.waiting.keys().next()?;
            if let Some(push) = inner.waiting.remove(&oldest) {
                let _ = push.send(());
            }
            inner.held.remove(&oldest);
            tracing::debug!("metrics endpoint: a connection without a request pushed out");
        }
        let id = inner.next;
        inner.next += 1;
        inner.held.insert(id);
        let (push, pushed) = oneshot::channel();
        inner.waiting.insert(id, push);
        Some((
            Slot {
                id,
                slots: Arc::clone(slots),
            },
            pushed,
        ))
    }
}

impl Slot {
    /// Its request head came: it is answered, no longer pushed out.
    fn answering(&self) {
        lock(&self.slots.inner).waiting.remove(&self.id);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut inner = lock(&self.slots.inner);
        inner.waiting.remove(&self.id);
        inner.held.remove(&self.id);
    }
}

/// One scraper's connection: one request, all of it within `timeout`, unless a newer
/// connection pushes it out before its request head came.
async fn connection(
    stream: TcpStream,
    (slot, pushed_out): (Slot, oneshot::Receiver<()>),
    bounds: Bounds,
    snapshot: Snapshot,
) {
    let timeout = bounds.timeout;
    let slot = Arc::new(slot);
    let held = Arc::clone(&slot);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        held.answering();
        let snapshot = Arc::clone(&snapshot);
        async move { Ok::<_, Infallible>(respond(&req, snapshot, bounds.max_clients).await) }
    });
    // Only a sent signal pushes out; a sender dropped (the head came) does not.
    let pushed_out = async {
        if pushed_out.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .max_buf_size(HEAD_BYTES)
        .timer(TokioTimer::new())
        .header_read_timeout(timeout)
        .serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        ended = tokio::time::timeout(timeout, conn) => match ended {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "metrics endpoint: connection failed"),
            Err(_) => {
                tracing::debug!("metrics endpoint: connection cut after metrics_timeout_ms")
            }
        },
        () = pushed_out => {}
    }
    drop(slot);
}

async fn respond(
    req: &Request<Incoming>,
    snapshot: Snapshot,
    max_clients: usize,
) -> Response<Full<Bytes>> {
    if req.uri().path() != METRICS_PATH {
        return plain(
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics\n",
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "use GET\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    // Off the runtime's threads: the snapshot reads the counters' maps.
    let text = tokio::task::spawn_blocking(move || encode(snapshot(), max_clients)).await;
    match text {
        Ok(Ok(text)) => {
            let mut r = Response::new(Full::new(Bytes::from(text)));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(
                    prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                ),
            );
            r
        }
        _ => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the counters could not be encoded\n",
        ),
    }
}

fn plain(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The snapshot in the Prometheus text exposition format, naming at most `max_clients`
/// clients one by one.
pub fn encode(stats: DaemonStats, max_clients: usize) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(StatsCollector(bounded_clients(
        stats,
        max_clients,
    ))));
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)?;
    Ok(text)
}

/// The value of `client_host` of the series summing the clients past `metrics_max_clients`.
pub const OTHER_CLIENTS: &str = "_others";

/// `stats` with at most `max` clients: the first to arrive (by their first request, then
/// by who they are), and one more summing the others (see the module's header).
fn bounded_clients(mut stats: DaemonStats, max: usize) -> DaemonStats {
    if stats.clients.len() <= max {
        return stats;
    }
    stats
        .clients
        .sort_by(|a, b| (a.first_ms, &a.client).cmp(&(b.first_ms, &b.client)));
    let rest = stats.clients.split_off(max);
    let mut others = eddy_proto::stats::ClientStats {
        client: eddy_proto::stats::ClientId {
            host: OTHER_CLIENTS.into(),
            pid: 0,
            rank: None,
        },
        ..Default::default()
    };
    for c in rest {
        others.ops += c.ops;
        others.metadata_ops += c.metadata_ops;
        others.read_bytes += c.read_bytes;
        others.written_bytes += c.written_bytes;
        others.errors += c.errors;
    }
    stats.clients.push(others);
    stats
}

/// One snapshot, encoded as the metric families of the module's header.
#[derive(Debug)]
struct StatsCollector(DaemonStats);

/// A label set: (name, value) pairs.
type Labels = Vec<(&'static str, String)>;

impl StatsCollector {
    fn base(&self) -> Labels {
        vec![
            ("job", self.0.job.clone()),
            ("daemon", self.0.daemon.to_string()),
        ]
    }

    fn with(&self, more: &[(&'static str, String)]) -> Labels {
        let mut l = self.base();
        l.extend(more.iter().cloned());
        l
    }

    fn op_labels(&self, op: &str) -> Labels {
        self.with(&[("op", op.to_string())])
    }

    fn client_labels(&self, c: &eddy_proto::stats::ClientId) -> Labels {
        self.with(&[
            ("client_host", c.host.clone()),
            (
                "client_pid",
                if c.host == OTHER_CLIENTS {
                    String::new()
                } else {
                    c.pid.to_string()
                },
            ),
            (
                "client_rank",
                c.rank.map(|r| r.to_string()).unwrap_or_default(),
            ),
        ])
    }
}

/// Writes one family of counters or gauges: `rows` are (labels, value).
fn family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    rows: Vec<(Labels, u64)>,
) -> std::fmt::Result {
    if rows.is_empty() {
        return Ok(());
    }
    let mut metric = enc.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in rows {
        let sample = metric.encode_family(&labels)?;
        match kind {
            MetricType::Counter => ConstCounter::new(value).encode(sample)?,
            _ => ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(sample)?,
        }
    }
    Ok(())
}

/// Writes one histogram family: `rows` are (labels, histogram, its exact sum when known, in
/// the histogram's unit); a bucket's integer bound
/// divided by `per_unit` is its `le` (1 for bytes, 1e6 for microseconds to seconds: a
/// division, so that `le` prints as the shortest decimal, 0.065535 rather than
/// 0.06553499999999999).
fn histograms(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: Vec<(Labels, &Histogram, Option<u64>)>,
    top: usize,
    per_unit: f64,
) -> std::fmt::Result {
    if rows.is_empty() {
        return Ok(());
    }
    let mut metric = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, h, exact) in rows {
        let (buckets, estimate, count) = exposed_buckets(h, top, per_unit);
        let sum = exact.map_or(estimate, |v| v as f64 / per_unit);
        metric
            .encode_family(&labels)?
            .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                sum, count, &buckets, None,
            )?;
    }
    Ok(())
}

/// The buckets of `h` as Prometheus wants them: (le, count of the values since the previous
/// le) for every `BUCKET_STEP`-th power of two up to `top` and `+Inf`; the estimated sum
/// and the exact count.
fn exposed_buckets(h: &Histogram, top: usize, per_unit: f64) -> (Vec<(f64, u64)>, f64, u64) {
    let count_of = |i: usize| h.counts.get(i).copied().unwrap_or(0);
    let mut buckets = Vec::new();
    let mut pending = 0u64;
    for i in 0..BUCKETS {
        pending += count_of(i);
        if i <= top && i % BUCKET_STEP == 0 {
            buckets.push((largest_in(i) as f64 / per_unit, pending));
            pending = 0;
        }
    }
    buckets.push((f64::INFINITY, pending));
    let sum = (0..BUCKETS)
        .map(|i| count_of(i) as f64 * midpoint(i))
        .sum::<f64>()
        / per_unit;
    (buckets, sum, h.total())
}

/// The largest integer bucket `i` holds: 0 for bucket 0, else 2^i − 1.
fn largest_in(i: usize) -> u64 {
    Histogram::upper(i).saturating_sub(1)
}

/// The value a bucket's values are counted at in the estimated `_sum`.
fn midpoint(i: usize) -> f64 {
    match i {
        0 => 0.0,
        _ => 1.5 * 2f64.powi(i as i32 - 1),
    }
}

/// An errno's name (`ENOENT`), or its number when it has none.
fn errno_name(errno: i32) -> String {
    match nix::errno::Errno::from_raw(errno) {
        nix::errno::Errno::UnknownErrno => errno.to_string(),
        e => format!("{e:?}"),
    }
}

/// Whether an op's bytes are written (it adds data) rather than read.
fn writes(op: &str) -> bool {
    Op::ALL
        .iter()
        .find(|o| o.name() == op)
        .is_some_and(|o| o.props().grows())
}

impl Collector for StatsCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        use MetricType::{Counter, Gauge};
        let s = &self.0;
        let ops = |f: &dyn Fn(&eddy_proto::stats::OpStats) -> Option<u64>| -> Vec<(Labels, u64)> {
            s.ops
                .iter()
                .filter_map(|o| f(o).map(|v| (self.op_labels(&o.op), v)))
                .collect()
        };
        family(
            &mut enc,
            "eddy_operations",
            "Requests served, by operation.",
            Counter,
            ops(&|o| Some(o.count)),
        )?;
        family(
            &mut enc,
            "eddy_operation_errors",
            "Requests answered with an error, by operation.",
            Counter,
            ops(&|o| Some(o.errors)),
        )?;
        family(
            &mut enc,
            "eddy_bytes_read",
            "Bytes read by clients, by operation.",
            Counter,
            ops(&|o| (o.bytes > 0 && !writes(&o.op)).then_some(o.bytes)),
        )?;
        family(
            &mut enc,
            "eddy_bytes_written",
            "Bytes written by clients, by operation.",
            Counter,
            ops(&|o| (o.bytes > 0 && writes(&o.op)).then_some(o.bytes)),
        )?;
        type Rows<'a> = Vec<(Labels, &'a Histogram, Option<u64>)>;
        let hist = |f: fn(&eddy_proto::stats::OpStats) -> &Histogram| -> Rows {
            s.ops
                .iter()
                .filter(|o| o.count > 0)
                .map(|o| (self.op_labels(&o.op), f(o), None))
                .collect()
        };
        // Sizes are counted for the requests that carry data; their sum is the op's bytes.
        let sizes: Rows = s
            .ops
            .iter()
            .filter(|o| o.sizes.total() > 0)
            .map(|o| (self.op_labels(&o.op), &o.sizes, Some(o.bytes)))
            .collect();
        histograms(
            &mut enc,
            "eddy_request_size_bytes",
            "Bytes per request carrying data, by operation.",
            sizes,
            SIZE_TOP,
            1.0,
        )?;
        histograms(
            &mut enc,
            "eddy_queue_wait_seconds",
            "Time from a request's arrival to its handler starting, by operation (_sum estimated from the buckets).",
            hist(|o| &o.queue_us),
            LATENCY_TOP,
            1e6,
        )?;
        histograms(
            &mut enc,
            "eddy_service_seconds",
            "Time in the request's handler, by operation (_sum estimated from the buckets).",
            hist(|o| &o.service_us),
            LATENCY_TOP,
            1e6,
        )?;
        family(
            &mut enc,
            "eddy_requests_queued",
            "Requests now waiting for a slot or permit.",
            Gauge,
            vec![(self.base(), s.queued)],
        )?;
        family(
            &mut enc,
            "eddy_requests_in_flight",
            "Requests now in a handler.",
            Gauge,
            vec![(self.base(), s.in_flight)],
        )?;
        let clients = |f: fn(&eddy_proto::stats::ClientStats) -> u64| -> Vec<(Labels, u64)> {
            s.clients
                .iter()
                .map(|c| (self.client_labels(&c.client), f(c)))
                .collect()
        };
        family(
            &mut enc,
            "eddy_client_operations",
            "Requests served, by client.",
            Counter,
            clients(|c| c.ops),
        )?;
        family(
            &mut enc,
            "eddy_client_metadata_operations",
            "Metadata requests served, by client.",
            Counter,
            clients(|c| c.metadata_ops),
        )?;
        family(
            &mut enc,
            "eddy_client_errors",
            "Requests answered with an error, by client.",
            Counter,
            clients(|c| c.errors),
        )?;
        family(
            &mut enc,
            "eddy_client_bytes_read",
            "Bytes read, by client.",
            Counter,
            clients(|c| c.read_bytes),
        )?;
        family(
            &mut enc,
            "eddy_client_bytes_written",
            "Bytes written, by client.",
            Counter,
            clients(|c| c.written_bytes),
        )?;
        family(
            &mut enc,
            "eddy_errors",
            "Errors answered, by errno.",
            Counter,
            s.errors
                .iter()
                .map(|&(errno, n)| (self.with(&[("errno", errno_name(errno))]), n))
                .collect(),
        )?;
        family(
            &mut enc,
            "eddy_backend_bytes_read",
            "Bytes the backend tier read from the backend.",
            Counter,
            vec![(self.base(), s.backend.read_bytes)],
        )?;
        family(
            &mut enc,
            "eddy_backend_bytes_read_ahead",
            "Bytes the backend tier fetched ahead of readers' streams on their hints.",
            Counter,
            vec![(self.base(), s.backend.read_ahead_bytes)],
        )?;
        family(
            &mut enc,
            "eddy_backend_bytes_written",
            "Bytes the backend tier wrote to the backend.",
            Counter,
            vec![(self.base(), s.backend.written_bytes)],
        )?;
        family(
            &mut enc,
            "eddy_backend_operations",
            "Backend read and write calls, by direction (a merged call counts once).",
            Counter,
            vec![
                (self.with(&[("dir", "read".into())]), s.backend.reads),
                (self.with(&[("dir", "write".into())]), s.backend.writes),
            ],
        )?;
        // Per backend of the linked prefixes (decision 0073), labelled `backend="name"`.
        let per = |f: fn(&eddy_proto::stats::StoreStats) -> u64| {
            s.backends
                .iter()
                .map(|b| (self.with(&[("backend", b.name.clone())]), f(b)))
                .collect::<Vec<_>>()
        };
        for (name, help, f) in [
            (
                "eddy_backend_store_bytes_read",
                "Bytes the backend tier read from each backend.",
                (|b| b.read_bytes) as fn(&eddy_proto::stats::StoreStats) -> u64,
            ),
            (
                "eddy_backend_store_bytes_written",
                "Bytes the backend tier wrote back to each backend.",
                |b| b.written_bytes,
            ),
            (
                "eddy_backend_store_placed_files",
                "New files this daemon placed on each backend at their first write-back.",
                |b| b.placed_files,
            ),
            (
                "eddy_backend_store_placed_bytes",
                "Bytes of the new files this daemon placed on each backend.",
                |b| b.placed_bytes,
            ),
            (
                "eddy_backend_store_failures",
                "Write-backs each backend refused (full, over quota, read-only, unreachable).",
                |b| b.failures,
            ),
        ] {
            family(&mut enc, name, help, Counter, per(f))?;
        }
        family(
            &mut enc,
            "eddy_backend_merged_requests",
            "Backend reads and writes that went in another's call, merged by the per-object \
             queues, by direction.",
            Counter,
            vec![
                (self.with(&[("dir", "read".into())]), s.backend.merged_reads),
                (
                    self.with(&[("dir", "write".into())]),
                    s.backend.merged_writes,
                ),
            ],
        )?;
        for (name, help, n) in [
            (
                "eddy_lease_grants",
                "Directory leases this daemon granted as the owner of their directories' records.",
                s.leases.grants,
            ),
            (
                "eddy_lease_recalls",
                "Directory leases recalled because another client needed the directory.",
                s.leases.recalls,
            ),
            (
                "eddy_lease_revocations",
                "Recalled directory leases revoked: their holder did not give them back in time.",
                s.leases.revocations,
            ),
            (
                "eddy_lease_refused",
                "Directory lease requests refused because the directory cooled down after a recall.",
                s.leases.refused,
            ),
            (
                "eddy_lease_batched_ops",
                "Creates and unlinks applied from lease holders' batches.",
                s.leases.batched_ops,
            ),
        ] {
            family(&mut enc, name, help, Counter, vec![(self.base(), n)])?;
        }
        let mut start = enc.encode_descriptor(
            "eddy_start_time_seconds",
            "Unix time the daemon's counting started.",
            None,
            Gauge,
        )?;
        ConstGauge::new(s.started_ms as f64 / 1000.0).encode(start.encode_family(&self.base())?)?;
        family(
            &mut enc,
            "eddy_counting",
            "1 while the daemon counts; 0 only when counting is switched off to measure its cost.",
            Gauge,
            vec![(self.base(), u64::from(s.counting))],
        )
    }
}

#[cfg(test)]
mod tests;
