//! What Slurm says of the machine: the queue (squeue) and the partitions' nodes (sinfo), read with
//! times in UTC and a bound on each call; and the clock.

use anyhow::Result;
use eddy_walltime::sacct;
use std::collections::{BTreeSet, HashMap};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Bound on one call of a Slurm tool.
pub(super) const TOOL_BOUND: Duration = Duration::from_secs(30);

/// Seconds since the epoch, now.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A Slurm tool's output, times printed in UTC (as eddy-walltime reads them).
pub(super) fn slurm(program: &str, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new(program);
    cmd.args(args).env("TZ", "UTC").stdin(Stdio::null());
    crate::nodes::output_bounded(cmd, TOOL_BOUND)
}

/// One job of `squeue`.
#[derive(Debug, Clone, PartialEq)]
pub struct Queued {
    pub id: u32,
    pub user: String,
    pub nodes: u32,
    pub cpus: u32,
    pub state: String,
    pub limit: Option<u64>,
    /// Start (running jobs), seconds since the epoch.
    pub start: Option<i64>,
    pub priority: u64,
    /// The partitions it runs in (running) or may run in (pending).
    pub partitions: Vec<String>,
    /// Why it is pending (`None` when running).
    pub reason: String,
}

/// The fields of [`parse_squeue`]'s lines.
pub const SQUEUE_FORMAT: &str = "%i|%u|%D|%C|%T|%l|%S|%Q|%P|%r";

/// The reasons of a pending job that waits only for its turn, its nodes or its own
/// stage-in: it may start as soon as nodes free. Any other reason (held, `--begin`, a
/// dependency, a limit, a partition down, nodes not available) means it cannot, so it never
/// delays a job behind it in a prediction (its user chose the reason).
pub const CAN_START: [&str; 5] = [
    "None",
    "Priority",
    "Resources",
    "BurstBufferResources",
    "BurstBufferStageIn",
];

/// `squeue -h -o SQUEUE_FORMAT` lines; array or odd lines are left out.
pub fn parse_squeue(text: &str) -> Vec<Queued> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.trim().split('|').collect();
            let [id, user, nodes, cpus, state, limit, start, prio, partitions, reason] =
                f.as_slice()
            else {
                return None;
            };
            Some(Queued {
                id: id.parse().ok()?,
                user: user.to_string(),
                nodes: nodes.parse().ok()?,
                cpus: cpus.parse().unwrap_or(1),
                state: state.to_string(),
                limit: sacct::parse_duration(limit).ok()?,
                start: sacct::parse_date(start).ok().flatten(),
                priority: prio.parse().unwrap_or(0),
                partitions: partitions
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect(),
                reason: reason.trim().to_string(),
            })
        })
        .collect()
}

/// `sinfo -h -N -o SINFO_FORMAT`: a line per node and partition.
pub const SINFO_FORMAT: &str = "%N|%P|%t";

/// The nodes of each partition that can run jobs, from [`SINFO_FORMAT`] lines (the default
/// partition's `*` dropped; down, drained and failed nodes left out).
pub fn partition_nodes(text: &str) -> HashMap<String, BTreeSet<String>> {
    let mut parts: HashMap<String, BTreeSet<String>> = HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.trim().split('|').collect();
        let [name, partition, state] = f.as_slice() else {
            continue;
        };
        let out = ["down", "drain", "drng", "fail", "maint", "unk", "inval"];
        if out.iter().any(|o| state.trim().starts_with(o)) {
            continue;
        }
        parts
            .entry(partition.trim().trim_end_matches('*').to_string())
            .or_default()
            .insert(name.trim().to_string());
    }
    parts
}

/// The usable nodes of `partitions`, together.
pub(super) fn nodes_of<'a>(
    parts: &'a HashMap<String, BTreeSet<String>>,
    partitions: &[String],
) -> BTreeSet<&'a str> {
    partitions
        .iter()
        .filter_map(|p| parts.get(p))
        .flatten()
        .map(String::as_str)
        .collect()
}
