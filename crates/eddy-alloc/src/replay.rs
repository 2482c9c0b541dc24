//! A history run through the policy (DFRA §6.1, Table 4): each profile as a new job whose
//! history is that profile, on an idle pool of a given size; summed up as the share of jobs
//! upgraded, their share of node-hours, the first test each refused job failed, and the mean
//! servers in use.

use crate::decide::{decide, Rule, Test};
use crate::policy::Policy;
use crate::pool::{node_count, Job, Server};
use eddy_history::JobProfile;
use serde::{Deserialize, Serialize};

/// One row of Table 4: jobs, their share of the count and of the node-hours.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub category: String,
    pub jobs: u64,
    pub share: f64,
    pub node_hours: f64,
    pub node_hours_share: f64,
}

/// The replay's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    pub jobs: u64,
    pub node_hours: f64,
    /// Jobs given more servers (the scaling rule).
    pub upgraded: Row,
    /// Refused jobs by the first test failed, in the tests' order.
    pub refused: Vec<Row>,
    /// Servers per job, averaged over jobs.
    pub mean_servers_per_job: f64,
    /// Servers in use over the history's span (servers x duration summed over jobs, divided
    /// by the span from the first start to the last end): the paper's "average forwarding
    /// node consumption".
    pub mean_servers_in_use: f64,
    /// Per job: key, nodes, rule, servers, first test failed.
    pub decisions: Vec<JobDecision>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDecision {
    pub key: String,
    pub job_name: Option<String>,
    pub nodes: u32,
    pub node_hours: f64,
    pub rule: Rule,
    pub servers: usize,
    pub refused_at: Option<Test>,
}

/// Replays `profiles` on an idle pool of `servers` servers of `server_bandwidth` bytes/s.
pub fn replay(
    policy: &Policy,
    profiles: &[JobProfile],
    servers: u32,
    server_bandwidth: f64,
) -> Replay {
    let pool: Vec<Server> = (0..servers)
        .map(|id| Server::idle_of(id, server_bandwidth))
        .collect();
    let mut decisions = Vec::new();
    for p in profiles {
        let nodes = node_count(p);
        let job = Job {
            user: Some(p.user.clone()),
            job_name: p.job_name.clone().unwrap_or_else(|| p.key.clone()),
            script_hash: p.script_hash.clone(),
            nodes,
            default_servers: Vec::new(),
        };
        let d = decide(policy, &job, Some(p), &pool);
        decisions.push(JobDecision {
            key: p.key.clone(),
            job_name: p.job_name.clone(),
            nodes,
            node_hours: f64::from(nodes) * (p.end - p.start).max(0.0) / 3600.0,
            rule: d.rule,
            servers: d.servers.len(),
            refused_at: d.refused_at,
        });
    }
    let jobs = decisions.len() as u64;
    let node_hours: f64 = decisions.iter().map(|d| d.node_hours).sum();
    let row = |category: &str, pick: &dyn Fn(&JobDecision) -> bool| {
        let (n, h) = decisions
            .iter()
            .filter(|d| pick(d))
            .fold((0u64, 0.0), |(n, h), d| (n + 1, h + d.node_hours));
        Row {
            category: category.to_string(),
            jobs: n,
            share: if jobs == 0 {
                0.0
            } else {
                n as f64 / jobs as f64
            },
            node_hours: h,
            node_hours_share: if node_hours > 0.0 {
                h / node_hours
            } else {
                0.0
            },
        }
    };
    let upgraded = row("upgraded (scaled)", &|d| d.rule == Rule::Scaled);
    let refused = Test::ALL
        .iter()
        .map(|t| row(t.describe(), &|d| d.refused_at == Some(*t)))
        .collect();
    let mean_servers_per_job = if jobs == 0 {
        0.0
    } else {
        decisions.iter().map(|d| d.servers as f64).sum::<f64>() / jobs as f64
    };
    let first = profiles
        .iter()
        .map(|p| p.start)
        .fold(f64::INFINITY, f64::min);
    let last = profiles
        .iter()
        .map(|p| p.end)
        .fold(f64::NEG_INFINITY, f64::max);
    let span = last - first;
    let server_seconds: f64 = profiles
        .iter()
        .zip(&decisions)
        .map(|(p, d)| d.servers as f64 * (p.end - p.start).max(0.0))
        .sum();
    let mean_servers_in_use = if span > 0.0 && span.is_finite() {
        server_seconds / span
    } else {
        0.0
    };
    Replay {
        jobs,
        node_hours,
        upgraded,
        refused,
        mean_servers_per_job,
        mean_servers_in_use,
        decisions,
    }
}
