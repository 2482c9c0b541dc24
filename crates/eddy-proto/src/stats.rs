//! What a daemon counts of the I/O it serves, as the `Stats` request returns it: per
//! operation kind, per client and per file, errors by errno, the backend's share, and a
//! time series of one-second samples. The daemon keeps these always (counting is cheap:
//! atomics and a few small maps); `eddy stats`, the Prometheus endpoint and the job profile
//! at a deployment's end (eddy-history) are all built from this one snapshot.
//!
//! Histograms have power-of-two buckets: bucket 0 counts the value 0, bucket i ≥ 1 counts
//! values in [2^(i-1), 2^i), the last bucket everything above. Request sizes are in bytes,
//! latencies in microseconds.

use serde::{Deserialize, Serialize};

/// Buckets of a histogram (`Histogram::counts`): bucket 63 holds values ≥ 2^62.
pub const BUCKETS: usize = 64;

/// A histogram of power-of-two buckets (see the module's header). `counts` may be shorter
/// than `BUCKETS` (trailing empty buckets are dropped on the wire); missing buckets are 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    pub counts: Vec<u64>,
}

impl Histogram {
    /// The bucket value `v` falls in.
    pub fn bucket(v: u64) -> usize {
        (64 - v.leading_zeros() as usize).min(BUCKETS - 1)
    }

    /// The smallest value past bucket `i` (its upper bound, exclusive): 1, 2, 4, ...
    pub fn upper(i: usize) -> u64 {
        if i >= 63 {
            u64::MAX
        } else {
            1u64 << i
        }
    }

    pub fn record(&mut self, v: u64) {
        let b = Self::bucket(v);
        if self.counts.len() <= b {
            self.counts.resize(b + 1, 0);
        }
        self.counts[b] += 1;
    }

    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: &Histogram) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The upper bound of the bucket holding quantile `q` (0..=1) of the values; 0 when
    /// empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let total = self.total();
        if total == 0 {
            return 0;
        }
        let want = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return Self::upper(i);
            }
        }
        Self::upper(self.counts.len().saturating_sub(1))
    }
}

/// Who a client is: the host and process it runs in, and its MPI rank when it knows it
/// (`Identify`). `key` is a hash of the three, the same on every daemon, by which clients
/// are named in `FileAccess`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ClientId {
    pub host: String,
    pub pid: u32,
    pub rank: Option<u32>,
}

/// One kind of operation on one daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpStats {
    /// The request's op name (`Op::name`).
    pub op: String,
    /// A metadata operation (not `STORAGE` in `request_table!`).
    pub metadata: bool,
    pub count: u64,
    /// Answered with an error.
    pub errors: u64,
    /// Bytes carried (written for a write, read for a read; 0 for others).
    pub bytes: u64,
    /// Bytes per request.
    pub sizes: Histogram,
    /// Microseconds from the request's frame decoded to its handler starting (waiting for a
    /// slot of the connection or an I/O permit).
    pub queue_us: Histogram,
    /// Microseconds in the handler.
    pub service_us: Histogram,
}

/// One client on one daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientStats {
    pub client: ClientId,
    pub key: u64,
    pub ops: u64,
    pub metadata_ops: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub errors: u64,
    /// Unix time (ms) of its first and last request here.
    pub first_ms: u64,
    pub last_ms: u64,
}

/// The distinct clients of a file on one daemon, bounded: at most `FILE_CLIENTS` keys, then
/// `many`.
pub const FILE_CLIENTS: usize = 4;

/// Who read and wrote one file's data on one daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileAccess {
    pub file_id: u128,
    pub writers: Vec<u64>,
    pub many_writers: bool,
    pub readers: Vec<u64>,
    pub many_readers: bool,
    pub read_bytes: u64,
    pub written_bytes: u64,
}

/// One sample of the time series: what happened in `seconds` seconds from `t_ms`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Unix time (ms) of the sample's start.
    pub t_ms: u64,
    /// Its width: 1 s, more once downsampled.
    pub seconds: u32,
    pub read_bytes: u64,
    pub written_bytes: u64,
    /// Requests (all kinds) and metadata requests.
    pub ops: u64,
    pub metadata_ops: u64,
    /// Most requests queued or in flight at once during the sample, and their mean
    /// (over the sample, sampled at each request's arrival).
    pub queue_max: u32,
    pub queue_mean: f32,
    /// Mean number of metadata requests waiting (queued, not yet served) at arrival: what
    /// DFRA's W_metadata test compares.
    pub metadata_queue_mean: f32,
}

// The means of a sample are computed with guards against division by zero, so never NaN:
// equality is total, as `Reply` (which carries a `DaemonStats`) requires.
impl Eq for Sample {}

impl Sample {
    /// This sample and `other` (the next, or an earlier process's of the same second) as
    /// one: sums, the larger maximum, means weighted by the requests each was sampled over.
    pub fn merge(&self, other: &Sample) -> Sample {
        let mean = |a: f32, wa: u64, b: f32, wb: u64| match wa + wb {
            0 => 0.0,
            w => ((f64::from(a) * wa as f64 + f64::from(b) * wb as f64) / w as f64) as f32,
        };
        Sample {
            t_ms: self.t_ms.min(other.t_ms),
            seconds: self.seconds + other.seconds,
            read_bytes: self.read_bytes + other.read_bytes,
            written_bytes: self.written_bytes + other.written_bytes,
            ops: self.ops + other.ops,
            metadata_ops: self.metadata_ops + other.metadata_ops,
            queue_max: self.queue_max.max(other.queue_max),
            queue_mean: mean(self.queue_mean, self.ops, other.queue_mean, other.ops),
            metadata_queue_mean: mean(
                self.metadata_queue_mean,
                self.metadata_ops,
                other.metadata_queue_mean,
                other.metadata_ops,
            ),
        }
    }
}

/// The backend tier's share of the I/O.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendStats {
    /// Backend read and write calls (a merged call counts once, decision 0074).
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
    /// Of `read_bytes`, those fetched ahead of readers' streams on their hints (decision
    /// 0072); absent from snapshots persisted before it.
    #[serde(default)]
    pub read_ahead_bytes: u64,
    /// Requests that went in another's backend call, merged by the per-object queues
    /// (decision 0074): `reads + merged_reads` fetches were asked for. Absent from snapshots
    /// persisted before it.
    #[serde(default)]
    pub merged_reads: u64,
    #[serde(default)]
    pub merged_writes: u64,
}

/// One backend of a linked prefix, as one daemon saw it (decision 0073): named in
/// `[[backends]]`, or a link's own directory (named by its prefix).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStats {
    pub name: String,
    /// The prefix it serves.
    pub prefix: String,
    /// What it is (`[[backends]]` `kind`), for people.
    pub kind: String,
    pub read_only: bool,
    /// Files this daemon (as their metadata owner) placed there at their first write-back,
    /// and their bytes then.
    pub placed_files: u64,
    pub placed_bytes: u64,
    /// Dirty bytes this daemon holds of files it knows to be there (status only).
    pub dirty_bytes: u64,
    /// Bytes this daemon read from it and wrote back to it.
    pub read_bytes: u64,
    pub written_bytes: u64,
    /// Write-backs refused there (full, over quota, read-only, unreachable).
    pub failures: u64,
}

/// Everything one daemon counted since it started: the `Stats` reply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DaemonStats {
    pub daemon: u32,
    pub host: String,
    /// The job the deployment serves (Slurm job id), or the deployment's name.
    pub job: String,
    /// Unix time (ms) the counting started and of this snapshot.
    pub started_ms: u64,
    pub now_ms: u64,
    /// False when counting was switched off (only to measure what it costs).
    pub counting: bool,
    pub ops: Vec<OpStats>,
    pub clients: Vec<ClientStats>,
    pub files: Vec<FileAccess>,
    /// Files no longer tracked one by one (past the bound).
    pub files_untracked: u64,
    /// Requests now waiting for a slot or permit, and now in a handler.
    pub queued: u64,
    pub in_flight: u64,
    /// Errors by errno: (errno, count).
    pub errors: Vec<(i32, u64)>,
    pub backend: BackendStats,
    /// One-second samples, oldest first; older ones merged into wider samples beyond a
    /// bound.
    pub series: Vec<Sample>,
    /// Per backend of the linked prefixes (decision 0073); absent from snapshots persisted
    /// before it.
    #[serde(default)]
    pub backends: Vec<StoreStats>,
    /// Directory leases (decision 0075); absent from snapshots persisted before them.
    #[serde(default)]
    pub leases: LeaseStats,
}

impl Eq for DaemonStats {}

/// What a daemon's samples of its last seconds show (`DaemonStats::recent`): rates per
/// second and queues weighted by the samples' widths. All 0 without a sample in the window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Recent {
    /// Bytes read and written per second.
    pub bytes_per_s: f64,
    pub ops_per_s: f64,
    pub metadata_ops_per_s: f64,
    /// Requests queued or in flight at each arrival, and metadata requests waiting.
    pub queue_mean: f64,
    pub metadata_queue_mean: f64,
    /// Whether any sample fell in the window.
    pub sampled: bool,
}

impl DaemonStats {
    /// Its samples of the last `window_s` seconds to its snapshot's time, summed up (the live
    /// load the allocation and the run-time grow judge by).
    pub fn recent(&self, window_s: u64) -> Recent {
        let from = self.now_ms.saturating_sub(window_s.saturating_mul(1000));
        let recent: Vec<&Sample> = self.series.iter().filter(|x| x.t_ms >= from).collect();
        let seconds: f64 = recent.iter().map(|x| f64::from(x.seconds.max(1))).sum();
        if recent.is_empty() || seconds <= 0.0 {
            return Recent::default();
        }
        let rate =
            |f: &dyn Fn(&Sample) -> u64| recent.iter().map(|x| f(x) as f64).sum::<f64>() / seconds;
        let mean = |f: &dyn Fn(&Sample) -> f32| {
            recent
                .iter()
                .map(|x| f64::from(f(x)) * f64::from(x.seconds.max(1)))
                .sum::<f64>()
                / seconds
        };
        Recent {
            bytes_per_s: rate(&|x| x.read_bytes.saturating_add(x.written_bytes)),
            ops_per_s: rate(&|x| x.ops),
            metadata_ops_per_s: rate(&|x| x.metadata_ops),
            queue_mean: mean(&|x| x.queue_mean),
            metadata_queue_mean: mean(&|x| x.metadata_queue_mean),
            sampled: true,
        }
    }
}

/// What one daemon counted of directory leases (decision 0075).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseStats {
    /// Leases granted (as the owner of their directories' records).
    pub grants: u64,
    /// Leases recalled for another client, and of those revoked (not given back in time).
    pub recalls: u64,
    pub revocations: u64,
    /// Lease requests refused because the directory cooled down after a recall.
    pub refused: u64,
    /// Operations applied from holders' batches.
    pub batched_ops: u64,
}

/// The directory under a daemon's root where it persists its snapshots (`PersistedStats`).
pub const PERSIST_DIR: &str = "stats";

/// A daemon's snapshot as it persists it (`ROOT/stats/<instance hex>.json`, decision 0032):
/// every `stats_persist_ms` and at a clean stop, so that the job profile of a deployment
/// whose daemons were killed can still be made. One file per daemon process (`instance`):
/// a restarted daemon starts counting from zero in a file of its own, and the profile adds
/// the instances up.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PersistedStats {
    /// Which deployment the snapshot belongs to: `deployment_tag` of its secret.
    pub deployment: String,
    /// The daemon process (`ServerHello::instance`).
    pub instance: u64,
    pub stats: DaemonStats,
}

/// A deployment's name for its persisted snapshots: a one-way hash of its secret (unique per
/// start of a deployment, and saying nothing of the secret), hex.
pub fn deployment_tag(secret: &[u8]) -> String {
    let key = blake3::derive_key("eddy persisted statistics deployment tag v1", secret);
    key[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// The file a daemon process persists its snapshot to, relative to its root.
pub fn persist_file(instance: u64) -> std::path::PathBuf {
    std::path::Path::new(PERSIST_DIR).join(format!("{instance:016x}.json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deployment_tag_names_one_secret_and_hides_it() {
        let a = deployment_tag(&[1; 32]);
        assert_eq!(a, deployment_tag(&[1; 32]));
        assert_ne!(a, deployment_tag(&[2; 32]));
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(!a.contains(&"01".repeat(4)));
        assert_eq!(
            persist_file(0xab),
            std::path::Path::new("stats/00000000000000ab.json")
        );
    }

    #[test]
    fn buckets_are_powers_of_two_and_quantiles_their_bounds() {
        assert_eq!(Histogram::bucket(0), 0);
        assert_eq!(Histogram::bucket(1), 1);
        assert_eq!(Histogram::bucket(4095), 12);
        assert_eq!(Histogram::bucket(4096), 13);
        assert_eq!(Histogram::bucket(u64::MAX), 63);
        let mut h = Histogram::default();
        for v in [10, 10, 10, 5000] {
            h.record(v);
        }
        assert_eq!(h.total(), 4);
        assert_eq!(h.quantile(0.5), 16);
        assert_eq!(h.quantile(0.99), 8192);
        let mut g = Histogram::default();
        g.record(1);
        g.merge(&h);
        assert_eq!(g.total(), 5);
        assert_eq!(Histogram::default().quantile(0.5), 0);
    }
}
