//! A job profile from the daemons' counters (`eddy_proto::stats::DaemonStats`, one per
//! daemon): what `eddy stats --job` prints and what a deployment leaves in the history at
//! its end. Pure: no I/O.
//!
//! Approximations, as the counters allow:
//! - **I/O mode**: from the per-file client sets merged over the daemons (a file's chunks
//!   spread over several): 1-1 when one client did all the data I/O; N-1 when more than
//!   half the bytes went to files that more than one client wrote or read; N-N otherwise.
//!   Files past a daemon's bound (`files_untracked`) are not looked at.
//! - **Bandwidth per node**: the daemons count bytes per client, not per client and second.
//!   A node's mean is its clients' bytes over its active span (first to last request of any
//!   of its clients, at least 1 s); its peak is the sum of its clients' own means (each
//!   client's bytes over its own span), i.e. the rate had they all run at once at their
//!   mean rate, or the job's peak second shared evenly by the nodes that did I/O, whichever
//!   is larger: both are lower bounds of the true peak (with one node, the job's peak is
//!   the node's).
//! - **Restarted daemons**: snapshots of one daemon id from several processes (a daemon
//!   restarted by `eddy replace`, each process counting from zero; `merge_instances`) are
//!   added up into one before anything else: counters summed, client and file sets merged,
//!   the series interleaved by time.
//! - **Job-wide rates** come from the one-second series summed over daemons by second (a
//!   downsampled sample is spread evenly over its seconds); means are over the seconds
//!   with any request.

use crate::profile::{DaemonLoad, IoMode, JobProfile, SeriesPoint, Source};
use eddy_proto::stats::{DaemonStats, Histogram, FILE_CLIENTS};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Points per daemon the profile's series keeps at most.
pub const SERIES_POINTS: usize = 300;

/// What the counters do not know of a job: its names and start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobMeta {
    /// The profile's key (see `JobProfile::key`).
    pub key: String,
    pub job_id: Option<String>,
    pub job_name: Option<String>,
    pub user: String,
    pub script_hash: Option<String>,
    /// Start, unix seconds; 0: the earliest daemon's start of counting.
    pub start: f64,
    /// The job's nodes as Slurm allocated them (the burst buffer's record), when known: the
    /// profile's node list, and the only nodes counted in N_A. A client names its node itself
    /// (`SLURMD_NODENAME`, which a job's user sets at will): a name outside this list counts
    /// for nothing. None: the clients' names as they are (`eddy stop` of a user's own
    /// deployment, whose profile is the user's alone).
    pub slurm_nodes: Option<Vec<String>>,
}

/// Ops whose bytes are the job's data I/O.
const READ_OP: &str = "read";
const WRITE_OP: &str = "write";
/// What clients wrote directly into a daemon's data files, reported (decision 0048).
const DIRECT_OP: &str = "direct_commit";

/// One client of the job, merged over the daemons.
#[derive(Default)]
struct Client {
    host: String,
    bytes: u64,
    first_ms: u64,
    last_ms: u64,
}

/// One file, merged over the daemons: its distinct clients (bounded) and bytes.
#[derive(Default)]
struct File {
    clients: BTreeSet<u64>,
    many: bool,
    bytes: u64,
}

/// The job's profile so far, from every daemon's counters (several snapshots of one daemon
/// id, from its successive processes, are added up first).
pub fn profile_from_stats(stats: &[DaemonStats], job: &JobMeta) -> JobProfile {
    let merged = merge_instances(stats);
    let stats = merged.as_slice();
    let start = if job.start > 0.0 {
        job.start
    } else {
        stats
            .iter()
            .map(|s| s.started_ms)
            .min()
            .map_or(0.0, |ms| ms as f64 / 1e3)
    };
    let end = stats
        .iter()
        .map(|s| s.now_ms)
        .max()
        .map_or(start, |ms| ms as f64 / 1e3)
        .max(start);
    let (clients, mut nodes) = merge_clients(stats);
    let files = merge_files(stats);
    let io_clients: Vec<&Client> = clients.values().filter(|c| c.bytes > 0).collect();
    let mut io_hosts: BTreeSet<&str> = io_clients.iter().map(|c| c.host.as_str()).collect();
    if let Some(slurm) = &job.slurm_nodes {
        io_hosts.retain(|h| slurm.iter().any(|n| n == h));
        nodes = slurm.iter().cloned().collect();
    }
    let (client_bound, mean_node_bandwidth) = node_bandwidth(&io_clients);
    let rates = Rates::of(stats);
    // The busiest node carried at least an even share of the job's busiest second.
    let even_share = match io_hosts.len() {
        0 => 0.0,
        n => rates.peak_bytes / n as f64,
    };
    let peak_node_bandwidth = client_bound.max(even_share);
    let mut request_sizes = Histogram::default();
    let (mut read_bytes, mut written_bytes, mut data_ops, mut metadata_ops) = (0, 0, 0, 0);
    let mut daemons = Vec::new();
    for s in stats {
        let mut load = DaemonLoad {
            daemon: s.daemon,
            host: s.host.clone(),
            ..DaemonLoad::default()
        };
        for o in &s.ops {
            match o.op.as_str() {
                READ_OP => load.read_bytes += o.bytes,
                WRITE_OP | DIRECT_OP => load.written_bytes += o.bytes,
                _ => {}
            }
            if o.op == READ_OP || o.op == WRITE_OP {
                data_ops += o.count;
                request_sizes.merge(&o.sizes);
            }
            if o.metadata {
                load.metadata_ops += o.count;
            }
            load.ops += o.count;
        }
        read_bytes += load.read_bytes;
        written_bytes += load.written_bytes;
        metadata_ops += load.metadata_ops;
        daemons.push(load);
    }
    daemons.sort_by_key(|d| d.daemon);
    let shared_files = files
        .values()
        .filter(|f| f.many || f.clients.len() > 1)
        .count() as u64;
    JobProfile {
        key: job.key.clone(),
        source: Source::Eddy,
        job_id: job.job_id.clone(),
        job_name: job.job_name.clone(),
        user: job.user.clone(),
        script_hash: job.script_hash.clone(),
        nodes: nodes.into_iter().collect(),
        start,
        end,
        read_bytes,
        written_bytes,
        io_nodes: Some(io_hosts.len() as u32),
        io_processes: io_clients.len() as u32,
        peak_node_bandwidth,
        mean_node_bandwidth,
        peak_bandwidth: rates.peak_bytes,
        mean_bandwidth: rates.mean_bytes,
        peak_iops: rates.peak_ops,
        mean_iops: rates.mean_ops,
        peak_metadata_rate: rates.peak_meta,
        mean_metadata_rate: rates.mean_meta,
        mean_metadata_queue: rates.metadata_queue,
        io_mode: io_mode(&files, io_clients.len()),
        files: files.len() as u64,
        shared_files,
        data_ops,
        metadata_ops,
        request_sizes: request_sizes.counts,
        daemons,
        series: series(stats, start),
        allocation: None,
    }
}

/// One snapshot per daemon id, sorted by id: the snapshots of the successive processes of a
/// daemon (each counting from zero) added up.
pub fn merge_instances(stats: &[DaemonStats]) -> Vec<DaemonStats> {
    let mut by_id: BTreeMap<u32, DaemonStats> = BTreeMap::new();
    for s in stats {
        match by_id.get_mut(&s.daemon) {
            None => {
                by_id.insert(s.daemon, s.clone());
            }
            Some(m) => add_instance(m, s),
        }
    }
    by_id.into_values().collect()
}

/// Adds the counters of another process of the same daemon to `m`.
fn add_instance(m: &mut DaemonStats, s: &DaemonStats) {
    let later = s.now_ms > m.now_ms;
    m.started_ms = m.started_ms.min(s.started_ms);
    m.now_ms = m.now_ms.max(s.now_ms);
    m.counting |= s.counting;
    if later {
        // The gauges are the latest process's.
        m.queued = s.queued;
        m.in_flight = s.in_flight;
        m.host.clone_from(&s.host);
    }
    for o in &s.ops {
        match m.ops.iter_mut().find(|x| x.op == o.op) {
            None => m.ops.push(o.clone()),
            Some(x) => {
                x.count += o.count;
                x.errors += o.errors;
                x.bytes += o.bytes;
                x.sizes.merge(&o.sizes);
                x.queue_us.merge(&o.queue_us);
                x.service_us.merge(&o.service_us);
            }
        }
    }
    for c in &s.clients {
        match m.clients.iter_mut().find(|x| x.key == c.key) {
            None => m.clients.push(c.clone()),
            Some(x) => {
                x.ops += c.ops;
                x.metadata_ops += c.metadata_ops;
                x.read_bytes += c.read_bytes;
                x.written_bytes += c.written_bytes;
                x.errors += c.errors;
                x.first_ms = match (x.first_ms, c.first_ms) {
                    (0, t) | (t, 0) => t,
                    (a, b) => a.min(b),
                };
                x.last_ms = x.last_ms.max(c.last_ms);
            }
        }
    }
    for f in &s.files {
        match m.files.iter_mut().find(|x| x.file_id == f.file_id) {
            None => m.files.push(f.clone()),
            Some(x) => {
                let union = |a: &mut Vec<u64>, many: &mut bool, b: &[u64], b_many: bool| {
                    for k in b {
                        if !a.contains(k) {
                            a.push(*k);
                        }
                    }
                    *many |= b_many;
                    a.sort_unstable();
                    if a.len() > FILE_CLIENTS {
                        a.truncate(FILE_CLIENTS);
                        *many = true;
                    }
                };
                union(
                    &mut x.writers,
                    &mut x.many_writers,
                    &f.writers,
                    f.many_writers,
                );
                union(
                    &mut x.readers,
                    &mut x.many_readers,
                    &f.readers,
                    f.many_readers,
                );
                x.read_bytes += f.read_bytes;
                x.written_bytes += f.written_bytes;
            }
        }
    }
    m.files_untracked += s.files_untracked;
    for (errno, n) in &s.errors {
        match m.errors.iter_mut().find(|(e, _)| e == errno) {
            None => m.errors.push((*errno, *n)),
            Some((_, x)) => *x += n,
        }
    }
    m.errors.sort_unstable();
    m.backend.reads += s.backend.reads;
    m.backend.writes += s.backend.writes;
    m.backend.read_bytes += s.backend.read_bytes;
    m.backend.written_bytes += s.backend.written_bytes;
    m.series.extend(s.series.iter().cloned());
    m.series.sort_by_key(|x| x.t_ms);
}

/// The clients by key, merged over daemons, and the hosts of every identified client.
fn merge_clients(stats: &[DaemonStats]) -> (HashMap<u64, Client>, BTreeSet<String>) {
    let mut clients: HashMap<u64, Client> = HashMap::new();
    let mut nodes = BTreeSet::new();
    for c in stats.iter().flat_map(|s| &s.clients) {
        if c.client.host.is_empty() {
            continue; // requests of connections that never identified
        }
        nodes.insert(c.client.host.clone());
        let m = clients.entry(c.key).or_default();
        m.host.clone_from(&c.client.host);
        m.bytes += c.read_bytes + c.written_bytes;
        if c.read_bytes + c.written_bytes > 0 {
            m.first_ms = match m.first_ms {
                0 => c.first_ms,
                t => t.min(c.first_ms),
            };
            m.last_ms = m.last_ms.max(c.last_ms);
        }
    }
    (clients, nodes)
}

/// The files by id, their client sets merged (bounded as on a daemon).
fn merge_files(stats: &[DaemonStats]) -> BTreeMap<u128, File> {
    let mut files: BTreeMap<u128, File> = BTreeMap::new();
    for f in stats.iter().flat_map(|s| &s.files) {
        let m = files.entry(f.file_id).or_default();
        m.clients.extend(f.writers.iter().chain(&f.readers));
        m.many |= f.many_writers || f.many_readers || m.clients.len() > FILE_CLIENTS;
        m.bytes += f.read_bytes + f.written_bytes;
    }
    files
}

fn io_mode(files: &BTreeMap<u128, File>, io_processes: usize) -> IoMode {
    let total: u64 = files.values().map(|f| f.bytes).sum();
    if total == 0 {
        return IoMode::None;
    }
    let all: BTreeSet<u64> = files
        .values()
        .flat_map(|f| f.clients.iter().copied())
        .collect();
    let many = files.values().any(|f| f.many);
    if !many && all.len() <= 1 && io_processes <= 1 {
        return IoMode::OneOne;
    }
    let shared: u64 = files
        .values()
        .filter(|f| f.many || f.clients.len() > 1)
        .map(|f| f.bytes)
        .sum();
    if shared * 2 > total {
        IoMode::N1
    } else {
        IoMode::NN
    }
}

/// (peak, mean) bandwidth of one node, bytes/s (see the module's header).
fn node_bandwidth(io_clients: &[&Client]) -> (f64, f64) {
    let span = |first: u64, last: u64| (last.saturating_sub(first) as f64 / 1e3).max(1.0);
    let mut hosts: BTreeMap<&str, (u64, u64, u64, f64)> = BTreeMap::new();
    for c in io_clients {
        let h = hosts
            .entry(c.host.as_str())
            .or_insert((0, u64::MAX, 0, 0.0));
        h.0 += c.bytes;
        h.1 = h.1.min(c.first_ms);
        h.2 = h.2.max(c.last_ms);
        h.3 += c.bytes as f64 / span(c.first_ms, c.last_ms);
    }
    if hosts.is_empty() {
        return (0.0, 0.0);
    }
    let peak = hosts.values().map(|h| h.3).fold(0.0, f64::max);
    let mean = hosts
        .values()
        .map(|h| h.0 as f64 / span(h.1, h.2))
        .sum::<f64>()
        / hosts.len() as f64;
    (peak, mean)
}

/// Job-wide rates from the series summed by second.
#[derive(Default)]
struct Rates {
    peak_bytes: f64,
    mean_bytes: f64,
    peak_ops: f64,
    mean_ops: f64,
    peak_meta: f64,
    mean_meta: f64,
    metadata_queue: Option<f64>,
}

impl Rates {
    fn of(stats: &[DaemonStats]) -> Rates {
        // Second → (bytes, ops, metadata ops), spread evenly over a sample's seconds.
        let mut by_second: BTreeMap<u64, (f64, f64, f64)> = BTreeMap::new();
        let (mut queue_sum, mut queue_weight) = (0.0, 0u64);
        for s in stats.iter().flat_map(|s| &s.series) {
            let w = f64::from(s.seconds.max(1));
            for i in 0..u64::from(s.seconds.max(1)) {
                let e = by_second.entry(s.t_ms / 1000 + i).or_default();
                e.0 += (s.read_bytes + s.written_bytes) as f64 / w;
                e.1 += s.ops as f64 / w;
                e.2 += s.metadata_ops as f64 / w;
            }
            queue_sum += f64::from(s.metadata_queue_mean) * s.metadata_ops as f64;
            queue_weight += s.metadata_ops;
        }
        let active: Vec<&(f64, f64, f64)> = by_second.values().filter(|v| v.1 > 0.0).collect();
        let n = active.len().max(1) as f64;
        let peak = |f: fn(&(f64, f64, f64)) -> f64| active.iter().map(|v| f(v)).fold(0.0, f64::max);
        let mean = |f: fn(&(f64, f64, f64)) -> f64| active.iter().map(|v| f(v)).sum::<f64>() / n;
        Rates {
            peak_bytes: peak(|v| v.0),
            mean_bytes: mean(|v| v.0),
            peak_ops: peak(|v| v.1),
            mean_ops: mean(|v| v.1),
            peak_meta: peak(|v| v.2),
            mean_meta: mean(|v| v.2),
            metadata_queue: (queue_weight > 0).then(|| queue_sum / queue_weight as f64),
        }
    }
}

/// Each daemon's series, at most `SERIES_POINTS` points (consecutive samples merged).
fn series(stats: &[DaemonStats], start: f64) -> Vec<SeriesPoint> {
    let mut out = Vec::new();
    for s in stats {
        let group = s.series.len().div_ceil(SERIES_POINTS).max(1);
        for g in s.series.chunks(group) {
            let Some(first) = g.first() else { continue };
            let merged = g.iter().skip(1).fold(first.clone(), |a, b| a.merge(b));
            let secs = f64::from(merged.seconds.max(1));
            out.push(SeriesPoint {
                t: merged.t_ms as f64 / 1e3 - start,
                seconds: secs,
                daemon: s.daemon,
                read_bps: merged.read_bytes as f64 / secs,
                write_bps: merged.written_bytes as f64 / secs,
                iops: merged.ops as f64 / secs,
                metadata_ops_per_s: merged.metadata_ops as f64 / secs,
                queue_mean: f64::from(merged.queue_mean),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_proto::stats::{ClientId, ClientStats, FileAccess, OpStats, Sample};

    fn client(host: &str, pid: u32, key: u64, read: u64, written: u64) -> ClientStats {
        ClientStats {
            client: ClientId {
                host: host.into(),
                pid,
                rank: None,
            },
            key,
            ops: 10,
            metadata_ops: 2,
            read_bytes: read,
            written_bytes: written,
            errors: 0,
            first_ms: 1_000_000,
            last_ms: 1_004_000,
        }
    }

    fn file(id: u128, writers: &[u64], written: u64) -> FileAccess {
        FileAccess {
            file_id: id,
            writers: writers.to_vec(),
            written_bytes: written,
            ..FileAccess::default()
        }
    }

    fn write_op(bytes: u64, count: u64) -> OpStats {
        let mut sizes = Histogram::default();
        for _ in 0..count {
            sizes.record(bytes / count.max(1));
        }
        OpStats {
            op: WRITE_OP.into(),
            metadata: false,
            count,
            bytes,
            sizes,
            ..OpStats::default()
        }
    }

    fn daemon(id: u32, clients: Vec<ClientStats>, files: Vec<FileAccess>) -> DaemonStats {
        let written: u64 = files.iter().map(|f| f.written_bytes).sum();
        DaemonStats {
            daemon: id,
            host: format!("d{id}"),
            job: "42".into(),
            started_ms: 1_000_000,
            now_ms: 1_010_000,
            counting: true,
            ops: vec![
                write_op(written, 4),
                OpStats {
                    op: "stat".into(),
                    metadata: true,
                    count: 6,
                    ..OpStats::default()
                },
            ],
            clients,
            files,
            series: (0..4)
                .map(|i| Sample {
                    t_ms: 1_000_000 + 1_000 * i,
                    seconds: 1,
                    written_bytes: written / 4,
                    ops: 3,
                    metadata_ops: 1,
                    metadata_queue_mean: 2.0,
                    ..Sample::default()
                })
                .collect(),
            ..DaemonStats::default()
        }
    }

    fn meta() -> JobMeta {
        JobMeta {
            key: "42".into(),
            job_id: Some("42".into()),
            user: "u".into(),
            ..JobMeta::default()
        }
    }

    /// Clients name their node themselves: with Slurm's node list known (the burst buffer's
    /// teardown), a name outside it counts for nothing in N_A, and the node list is Slurm's.
    #[test]
    fn n_a_counts_only_the_nodes_slurm_gave_the_job() {
        // One real node, n0; its processes claim to be n0 … n7.
        let clients: Vec<ClientStats> = (0..8u64)
            .map(|k| client(&format!("n{k}"), 100 + k as u32, k, 0, 500))
            .collect();
        let files: Vec<FileAccess> = (0..8u64).map(|k| file(k as u128 + 1, &[k], 500)).collect();
        let stats = vec![daemon(0, clients, files)];
        assert_eq!(profile_from_stats(&stats, &meta()).io_nodes, Some(8));
        let slurm = JobMeta {
            slurm_nodes: Some(vec!["n0".into()]),
            ..meta()
        };
        let p = profile_from_stats(&stats, &slurm);
        assert_eq!(p.io_nodes, Some(1));
        assert_eq!(p.nodes, vec!["n0".to_string()]);
        let elsewhere = JobMeta {
            slurm_nodes: Some(vec!["c1".into(), "c2".into()]),
            ..meta()
        };
        let p = profile_from_stats(&stats, &elsewhere);
        assert_eq!(p.io_nodes, Some(0));
        assert_eq!(p.nodes, vec!["c1".to_string(), "c2".to_string()]);
    }

    #[test]
    fn each_process_its_own_files_is_n_n() {
        // Four processes on two nodes, each writing its own file; the files' chunks are on
        // both daemons.
        // Each daemon saw 500 bytes of each client.
        let clients = || {
            (0..4u64)
                .map(|k| client(&format!("n{}", k / 2), 100 + k as u32, k, 0, 500))
                .collect::<Vec<_>>()
        };
        let files = (0..4u64)
            .map(|k| file(k as u128 + 1, &[k], 500))
            .collect::<Vec<_>>();
        let stats = vec![
            daemon(0, clients(), files.clone()),
            daemon(1, clients(), files),
        ];
        let p = profile_from_stats(&stats, &meta());
        assert_eq!(p.io_mode, IoMode::NN);
        assert_eq!(p.written_bytes, 4_000);
        assert_eq!(p.files, 4);
        assert_eq!(p.shared_files, 0);
        assert_eq!(p.io_processes, 4);
        assert_eq!(p.io_nodes, Some(2));
        assert_eq!(p.nodes, vec!["n0".to_string(), "n1".to_string()]);
        assert_eq!(p.data_ops, 8);
        assert_eq!(p.metadata_ops, 12);
        assert_eq!(p.request_sizes.iter().sum::<u64>(), 8);
        assert_eq!(p.daemons.len(), 2);
        assert_eq!(p.daemons[1].written_bytes, 2_000);
        // Series: two daemons × 4 seconds, 500 B/s each, summed per second.
        assert_eq!(p.peak_bandwidth, 1_000.0);
        assert_eq!(p.mean_bandwidth, 1_000.0);
        assert_eq!(p.peak_iops, 6.0);
        assert_eq!(p.mean_metadata_rate, 2.0);
        assert_eq!(p.mean_metadata_queue, Some(2.0));
        assert_eq!(p.series.len(), 8);
        assert_eq!(p.series[0].t, 0.0);
        assert_eq!(p.series[0].write_bps, 500.0);
        // Each client: 1000 B over its 4 s (250 B/s); a node: its two clients' 2000 B over
        // 4 s; its peak the sum of its clients' rates.
        assert_eq!(p.mean_node_bandwidth, 500.0);
        assert_eq!(p.peak_node_bandwidth, 500.0);
        assert_eq!((p.start, p.end), (1_000.0, 1_010.0));
    }

    #[test]
    fn many_processes_one_file_is_n_1() {
        // Three processes write parts of one file; each daemon saw some of them.
        let clients = vec![
            client("n0", 1, 1, 0, 300),
            client("n1", 2, 2, 0, 300),
            client("n2", 3, 3, 0, 300),
        ];
        let stats = vec![
            daemon(
                0,
                clients.clone(),
                vec![file(9, &[1, 2], 600), file(10, &[3], 100)],
            ),
            daemon(1, clients, vec![file(9, &[3], 300)]),
        ];
        let p = profile_from_stats(&stats, &meta());
        assert_eq!(p.io_mode, IoMode::N1);
        assert_eq!(p.shared_files, 1);
        assert_eq!(p.files, 2);
        assert_eq!(p.io_nodes, Some(3));
    }

    #[test]
    fn one_process_doing_all_io_is_1_1() {
        let stats = vec![
            daemon(
                0,
                vec![client("n0", 1, 7, 0, 500)],
                vec![file(1, &[7], 500)],
            ),
            daemon(
                1,
                vec![client("n0", 1, 7, 0, 500)],
                vec![file(2, &[7], 500)],
            ),
        ];
        let p = profile_from_stats(&stats, &meta());
        assert_eq!(p.io_mode, IoMode::OneOne);
        assert_eq!(p.io_processes, 1);
        assert_eq!(p.io_nodes, Some(1));
        // A file whose client sets, merged, pass the bound is shared.
        let many: Vec<DaemonStats> = (0..2)
            .map(|d| {
                let keys: Vec<u64> = (0..FILE_CLIENTS as u64).map(|k| k + 10 * d).collect();
                daemon(d as u32, Vec::new(), vec![file(5, &keys, 100)])
            })
            .collect();
        let p = profile_from_stats(&many, &meta());
        assert_eq!(p.io_mode, IoMode::N1);
        // No data at all: no mode.
        let p = profile_from_stats(&[daemon(0, Vec::new(), Vec::new())], &meta());
        assert_eq!(p.io_mode, IoMode::None);
        assert_eq!(p.peak_node_bandwidth, 0.0);
    }

    #[test]
    fn the_processes_of_a_restarted_daemon_add_up() {
        // Daemon 0 ran twice (killed, restarted: each process counts from zero); daemon 1
        // once.
        let mut first = daemon(
            0,
            vec![client("n0", 1, 7, 0, 400)],
            vec![file(1, &[7], 400)],
        );
        first.now_ms = 1_004_000;
        first.errors = vec![(5, 1)];
        first.backend.written_bytes = 10;
        let mut second = daemon(
            0,
            vec![client("n0", 1, 7, 0, 600), client("n1", 2, 8, 0, 100)],
            vec![file(1, &[8], 600), file(2, &[8], 100)],
        );
        second.started_ms = 1_005_000;
        second.now_ms = 1_020_000;
        second.errors = vec![(5, 2), (28, 1)];
        second.backend.written_bytes = 5;
        for s in &mut second.series {
            s.t_ms += 5_000;
        }
        let other = daemon(
            1,
            vec![client("n0", 1, 7, 0, 300)],
            vec![file(1, &[7], 300)],
        );
        let merged = merge_instances(&[second.clone(), other.clone(), first.clone()]);
        assert_eq!(merged.len(), 2);
        let d0 = &merged[0];
        assert_eq!(d0.daemon, 0);
        assert_eq!((d0.started_ms, d0.now_ms), (1_000_000, 1_020_000));
        let write = d0.ops.iter().find(|o| o.op == WRITE_OP).unwrap();
        assert_eq!(write.bytes, 400 + 700);
        assert_eq!(write.count, 8);
        assert_eq!(write.sizes.total(), 8);
        let c7 = d0.clients.iter().find(|c| c.key == 7).unwrap();
        assert_eq!(c7.written_bytes, 1_000);
        assert_eq!(d0.clients.len(), 2);
        let f1 = d0.files.iter().find(|f| f.file_id == 1).unwrap();
        assert_eq!(f1.writers, vec![7, 8]);
        assert_eq!(f1.written_bytes, 1_000);
        assert_eq!(d0.errors, vec![(5, 3), (28, 1)]);
        assert_eq!(d0.backend.written_bytes, 15);
        assert_eq!(d0.series.len(), 8);
        assert!(d0.series.windows(2).all(|w| w[0].t_ms <= w[1].t_ms));
        // The profile counts each byte once and names each daemon once.
        let p = profile_from_stats(&[first, other, second], &meta());
        assert_eq!(p.written_bytes, 1_100 + 300);
        assert_eq!(p.daemons.len(), 2);
        assert_eq!(p.daemons[0].written_bytes, 1_100);
        assert_eq!((p.start, p.end), (1_000.0, 1_020.0));
        // One process alone is left as it is.
        let one = daemon(3, Vec::new(), Vec::new());
        assert_eq!(merge_instances(std::slice::from_ref(&one)), vec![one]);
    }

    #[test]
    fn long_series_are_downsampled_per_daemon() {
        let mut d = daemon(0, Vec::new(), Vec::new());
        d.series = (0..1_000)
            .map(|i| Sample {
                t_ms: 1_000_000 + 1_000 * i,
                seconds: 1,
                read_bytes: 10,
                ops: 1,
                ..Sample::default()
            })
            .collect();
        let p = profile_from_stats(&[d], &meta());
        assert!(p.series.len() <= SERIES_POINTS);
        assert!(p.series.iter().all(|x| x.read_bps == 10.0));
        assert_eq!(p.series.iter().map(|x| x.seconds).sum::<f64>(), 1_000.0);
        assert_eq!(p.mean_bandwidth, 10.0);
    }
}
