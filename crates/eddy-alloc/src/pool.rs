//! The allocation's inputs: the job to place, the pool's servers (a JSON list a site makes
//! from its inventory and monitoring), their live load and the jobs running on them.

use eddy_history::{IoMode, JobProfile};
use serde::{Deserialize, Serialize};

/// The job to place.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub user: Option<String>,
    pub job_name: String,
    pub script_hash: Option<String>,
    /// Compute nodes requested.
    pub nodes: u32,
    /// The servers the default allocation would give it (a site's static mapping); empty:
    /// the first D healthy servers by id.
    #[serde(default)]
    pub default_servers: Vec<u32>,
}

/// A load: rates over the last monitoring window (or the peak of a running job so far).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Load {
    pub bytes_per_s: f64,
    pub iops: f64,
    pub metadata_rate: f64,
    /// Mean metadata requests waiting; unknown when absent.
    pub metadata_queue: Option<f64>,
}

/// What the interference rule needs to know of a job: from a profile (its history) or from
/// live monitoring.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Traits {
    pub io_mode: IoMode,
    pub peak_bandwidth: f64,
    pub peak_iops: f64,
    pub peak_metadata_rate: f64,
    pub mean_metadata_queue: Option<f64>,
}

impl Traits {
    pub fn of(p: &JobProfile) -> Traits {
        Traits {
            io_mode: p.io_mode,
            peak_bandwidth: p.peak_bandwidth,
            peak_iops: p.peak_iops,
            peak_metadata_rate: p.peak_metadata_rate,
            mean_metadata_queue: p.mean_metadata_queue,
        }
    }
}

/// A job running on a server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunningJob {
    /// Its name (or Slurm job id), for the explanation.
    pub job: String,
    /// What its history says it does; absent for a job without history.
    #[serde(default)]
    pub expected: Option<Traits>,
    /// What it does now on this server (monitoring); overrides `expected` (DFRA §5.2).
    #[serde(default)]
    pub live: Option<Load>,
}

/// One I/O server of the pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Server {
    pub id: u32,
    #[serde(default)]
    pub host: String,
    /// B_f: the server's measured peak bandwidth, bytes/s (sysmap's storage measurement or
    /// monitoring).
    pub peak_bandwidth: f64,
    /// Its whole load now.
    #[serde(default)]
    pub load: Load,
    /// The jobs now on it.
    #[serde(default)]
    pub jobs: Vec<RunningJob>,
    /// False when the site marks it down or drained.
    #[serde(default = "yes")]
    pub healthy: bool,
    /// Its recent bandwidth (monitoring, or a short probe), bytes/s: compared with its peers'
    /// by the anomaly screening; absent: not screened.
    #[serde(default)]
    pub recent_bandwidth: Option<f64>,
}

fn yes() -> bool {
    true
}

impl Server {
    /// No job runs on it.
    pub fn idle(&self) -> bool {
        self.jobs.is_empty()
    }

    /// An idle, healthy server of `peak` bytes/s (the replay's pool).
    pub fn idle_of(id: u32, peak: f64) -> Server {
        Server {
            id,
            host: format!("io{id}"),
            peak_bandwidth: peak,
            load: Load::default(),
            jobs: Vec::new(),
            healthy: true,
            recent_bandwidth: None,
        }
    }
}

/// The history to decide from: the most recent run with the job's node count, else the most
/// recent run (DFRA §6.1: the latest run at the same scale predicted mode and volume within
/// 20 % for 90 % of jobs). `runs` newest first, as `HistoryDb::runs_of` gives them.
pub fn pick_history(runs: &[JobProfile], nodes: u32) -> Option<&JobProfile> {
    let newest = |a: &&JobProfile, b: &&JobProfile| a.start.total_cmp(&b.start);
    let same_scale = runs
        .iter()
        .filter(|p| node_count(p) == nodes)
        .max_by(newest);
    same_scale.or_else(|| runs.iter().max_by(newest))
}

/// The compute nodes of a run: its node list, else (unknown, as for Darshan) its I/O
/// processes.
pub fn node_count(p: &JobProfile) -> u32 {
    if p.nodes.is_empty() {
        p.io_processes
    } else {
        u32::try_from(p.nodes.len()).unwrap_or(u32::MAX)
    }
}
