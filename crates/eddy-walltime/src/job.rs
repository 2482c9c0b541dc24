//! The job record every reader produces and every predictor reads, and the JSON reader.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One finished job: what its user asked for and how long it ran. Times are seconds (the
/// instants since the Unix epoch, or since the trace's start for SWF).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Job id as the source names it.
    pub id: String,
    pub user: String,
    /// Requested CPUs.
    pub cpus: u32,
    /// Requested memory of the whole job in MB; `None` when the source does not say.
    #[serde(default)]
    pub mem_mb: Option<f64>,
    /// Requested walltime (the limit) in seconds; `None` when unlimited or unknown.
    #[serde(default)]
    pub limit: Option<u64>,
    pub submit: i64,
    pub start: i64,
    pub end: i64,
    /// Seconds it ran (end − start as the source measured it).
    pub runtime: u64,
}

/// The jobs of a JSON file: an array of [`Job`] records.
pub fn read_json(path: &Path) -> Result<Vec<Job>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("parsing job records in {}", path.display()))
}
