//! The allocation policy's thresholds (DFRA §4, §2.1 footnote 1), with defaults a site can
//! override in an `[alloc]` TOML table (`eddy alloc --policy FILE`).

use serde::{Deserialize, Serialize};

/// The thresholds the rules compare with. Defaults: the paper's values where they carry over
/// (V_min 20 GB, N_min = F, W_metadata 32, α 0.4, anomaly ratio 0.5), and server peaks for a
/// burst-buffer daemon on NVMe (25,000 IOPS, 500 metadata operations/s; the throughput peak is
/// each server's measured `peak_bandwidth` unless set).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// V_min: a job whose history moved fewer bytes (read + written) is not scaled.
    pub v_min_bytes: u64,
    /// N_min: a job with fewer compute nodes doing I/O (N_A) is not scaled. Unset: F, as the
    /// paper sets it.
    pub n_min: Option<u32>,
    /// W_metadata: a job whose mean metadata queue exceeds it is metadata-bound: not scaled,
    /// and interference-prone.
    pub w_metadata: f64,
    /// α: a job is "high" on throughput, IOPS or metadata rate at α × a server's peak.
    pub alpha: f64,
    /// A server's peak throughput, bytes/s, for the α-threshold. Unset: the median of the
    /// pool's healthy servers' `peak_bandwidth` (B_f).
    pub server_peak_bandwidth: Option<f64>,
    /// A server's peak operations per second and metadata operations per second.
    pub server_peak_iops: f64,
    pub server_peak_metadata_rate: f64,
    /// A server whose recent bandwidth is below this share of the median of the pool's is
    /// anomalous and excluded.
    pub anomaly_ratio: f64,
    /// A running neighbour whose live load is below this share of every α-threshold has
    /// turned its I/O off for this run: its history's interference estimate is overridden.
    pub quiet_ratio: f64,
    /// D: servers of the default allocation.
    pub default_servers: u32,
    /// B_c: a compute node's peak I/O bandwidth, bytes/s (its link, as the paper's F is a
    /// hardware ratio). Unset: the history's `peak_node_bandwidth` (which a run on too few
    /// servers bounds by theirs).
    pub compute_peak_bandwidth: Option<f64>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            v_min_bytes: 20_000_000_000,
            n_min: None,
            w_metadata: 32.0,
            alpha: 0.4,
            server_peak_bandwidth: None,
            server_peak_iops: 25_000.0,
            server_peak_metadata_rate: 500.0,
            anomaly_ratio: 0.5,
            quiet_ratio: 0.05,
            default_servers: 1,
            compute_peak_bandwidth: None,
        }
    }
}

/// A policy file: the `[alloc]` table of a TOML file (other tables are ignored, so that a
/// site can keep it beside its other settings).
#[derive(Debug, Deserialize)]
struct File {
    #[serde(default)]
    alloc: Policy,
}

impl Policy {
    /// The policy of a TOML text's `[alloc]` table (the defaults without one).
    pub fn from_toml(text: &str) -> Result<Policy, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        file.alloc.check()?;
        Ok(file.alloc)
    }

    /// Refuses thresholds that make no sense.
    pub fn check(&self) -> Result<(), String> {
        let positive = [
            ("w_metadata", self.w_metadata),
            ("alpha", self.alpha),
            ("server_peak_iops", self.server_peak_iops),
            ("server_peak_metadata_rate", self.server_peak_metadata_rate),
            ("anomaly_ratio", self.anomaly_ratio),
            ("quiet_ratio", self.quiet_ratio),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("alloc.{name} = {v}: give a positive number"));
            }
        }
        if let Some(b) = self.server_peak_bandwidth {
            if !(b.is_finite() && b > 0.0) {
                return Err(format!(
                    "alloc.server_peak_bandwidth = {b}: give a positive number of bytes/s"
                ));
            }
        }
        if let Some(b) = self.compute_peak_bandwidth {
            if !(b.is_finite() && b > 0.0) {
                return Err(format!(
                    "alloc.compute_peak_bandwidth = {b}: give a positive number of bytes/s"
                ));
            }
        }
        if self.anomaly_ratio >= 1.0 {
            return Err(format!(
                "alloc.anomaly_ratio = {}: give a share of the median below 1",
                self.anomaly_ratio
            ));
        }
        if self.default_servers == 0 {
            return Err("alloc.default_servers = 0: a job needs at least one server".into());
        }
        Ok(())
    }
}
