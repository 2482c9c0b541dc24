//! The job profile: what one run of a job did with its I/O, in the terms the allocation
//! (DFRA, `../shared/papers/dfra-io-forwarding-allocation.txt` §4) decides by. Each field that
//! feeds one of its tests says which.

use serde::{Deserialize, Serialize};

/// Where a profile came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The daemons' counters of an Eddy deployment.
    Eddy,
    /// A Darshan log (`eddy history import`).
    Darshan,
}

/// How a job's processes share its files (DFRA Table 2): the interference rule isolates N-1
/// jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IoMode {
    /// Each process its own files.
    #[serde(rename = "N-N")]
    NN,
    /// Many processes, one (shared) file.
    #[serde(rename = "N-1")]
    N1,
    /// One process does the I/O.
    #[serde(rename = "1-1")]
    OneOne,
    /// No I/O, or not enough to tell.
    #[serde(rename = "none")]
    None,
}

/// One daemon's (I/O server's) share of a job's I/O: the load balance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DaemonLoad {
    pub daemon: u32,
    pub host: String,
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub ops: u64,
    pub metadata_ops: u64,
}

/// One point of a job's time series on one daemon, downsampled.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SeriesPoint {
    /// Seconds from the job's start, and the point's width in seconds.
    pub t: f64,
    pub seconds: f64,
    pub daemon: u32,
    pub read_bps: f64,
    pub write_bps: f64,
    pub iops: f64,
    pub metadata_ops_per_s: f64,
    pub queue_mean: f64,
}

/// What one run of a job did with its I/O.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobProfile {
    /// The profile's key: the Slurm job id when there is one, else
    /// `<deployment name>@<start, unix seconds>` (for Darshan: `darshan:<jobid>@<start>`).
    pub key: String,
    pub source: Source,
    /// Slurm job id, job name and user (name or uid).
    pub job_id: Option<String>,
    pub job_name: Option<String>,
    pub user: String,
    /// Hash of the job script (or the executable, for Darshan): with `job_name`, what
    /// identifies "the same application" across runs (DFRA assumes HPC jobs repeat).
    pub script_hash: Option<String>,
    /// The compute nodes of the job (hosts of Eddy's clients; empty when unknown).
    pub nodes: Vec<String>,
    /// Start and end, unix seconds.
    pub start: f64,
    pub end: f64,
    /// Volume read and written, bytes: their sum is what DFRA's V_min test compares.
    pub read_bytes: u64,
    pub written_bytes: u64,
    /// N_A: compute nodes that did I/O (DFRA's N_min test, and S = ⌈N_A / F⌉). `None` when
    /// the source does not know nodes (Darshan names ranks, not hosts).
    pub io_nodes: Option<u32>,
    /// Processes (clients, ranks) that did I/O.
    pub io_processes: u32,
    /// B_c: the peak I/O bandwidth of one compute node, bytes/s (F = ⌈B_f / B_c⌉); and its
    /// mean over the seconds the node did I/O.
    pub peak_node_bandwidth: f64,
    pub mean_node_bandwidth: f64,
    /// Job-wide bandwidth, bytes/s (the throughput threshold of the interference rule:
    /// α × a server's peak).
    pub peak_bandwidth: f64,
    pub mean_bandwidth: f64,
    /// Job-wide operations per second (the IOPS threshold).
    pub peak_iops: f64,
    pub mean_iops: f64,
    /// Job-wide metadata operations per second (the metadata-rate threshold).
    pub peak_metadata_rate: f64,
    pub mean_metadata_rate: f64,
    /// Mean number of metadata requests waiting in a server's queue (DFRA's W_metadata
    /// test: metadata-bound jobs are not scaled and are isolated). `None` when unknown.
    pub mean_metadata_queue: Option<f64>,
    /// How processes shared files (the interference rule isolates N-1).
    pub io_mode: IoMode,
    /// Files with data read or written, and those of them more than one process wrote or
    /// read.
    pub files: u64,
    pub shared_files: u64,
    /// Operations: data, metadata.
    pub data_ops: u64,
    pub metadata_ops: u64,
    /// Request sizes: count per power-of-two bucket (`eddy_proto::stats::Histogram`).
    pub request_sizes: Vec<u64>,
    /// Per daemon (I/O server): the load balance.
    pub daemons: Vec<DaemonLoad>,
    /// The time series, downsampled (at most a few hundred points per daemon).
    pub series: Vec<SeriesPoint>,
    /// How this run's I/O servers were allocated (the burst buffer's pool mode, decision
    /// 0038); absent for other runs and for profiles stored before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<Allocation>,
}

/// The allocation a run got: which rule of the policy decided, the servers (ids in the pool
/// and their hosts) and the reasons with the numbers used (`eddy_alloc::Decision`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    /// `scaled`, `isolated` or `default`.
    pub rule: String,
    pub servers: Vec<u32>,
    pub hosts: Vec<String>,
    pub reasons: Vec<String>,
    /// Servers added while the run ran (the burst buffer's run-time grow, decision 0082),
    /// each attempt in order; empty for runs never grown and for profiles stored before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grown: Vec<Grown>,
}

/// One grow of a running job's servers: when, from how many to how many, which were added,
/// how it ended and why it was decided (the rule's numbers).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Grown {
    /// Unix seconds of the decision.
    pub at: i64,
    pub from: u32,
    pub to: u32,
    pub servers: Vec<u32>,
    pub hosts: Vec<String>,
    /// `done at epoch N`, `failed: why` or `reserved` (never carried out).
    pub outcome: String,
    pub reasons: Vec<String>,
}

impl JobProfile {
    /// Total bytes moved: what V_min is compared with.
    pub fn volume(&self) -> u64 {
        self.read_bytes.saturating_add(self.written_bytes)
    }

    /// Wall seconds (at least a millisecond, so rates stay finite).
    pub fn seconds(&self) -> f64 {
        (self.end - self.start).max(0.001)
    }
}

/// One job of a listing: what `eddy history list --json` prints per job and the Python
/// package's `eddy.history.list()` returns.
#[derive(Debug, Clone, Serialize)]
pub struct JobSummary {
    pub key: String,
    pub job_id: Option<String>,
    pub job_name: Option<String>,
    pub user: String,
    pub script_hash: Option<String>,
    pub start: f64,
    pub end: f64,
    pub seconds: f64,
    pub volume: u64,
    pub io_mode: &'static str,
    pub io_nodes: Option<u32>,
    pub peak_bandwidth: f64,
}

impl JobSummary {
    pub fn of(p: &JobProfile) -> JobSummary {
        JobSummary {
            key: p.key.clone(),
            job_id: p.job_id.clone(),
            job_name: p.job_name.clone(),
            user: p.user.clone(),
            script_hash: p.script_hash.clone(),
            start: p.start,
            end: p.end,
            seconds: p.end - p.start,
            volume: p.volume(),
            io_mode: crate::db::mode_name(p.io_mode),
            io_nodes: p.io_nodes,
            peak_bandwidth: p.peak_bandwidth,
        }
    }
}
