//! `eddy alloc`: the I/O-server allocation policy (eddy-alloc, DFRA) from the command line.
//!
//! - `eddy alloc explain --job-name N [--script-hash H] [--user U] --nodes K --pool POOL.json
//!   [--db SPEC] [--policy FILE] [--json]`: the servers the policy gives the job on that pool,
//!   which rule decided, and the numbers it used;
//! - `eddy alloc replay (--db SPEC | --from EXPORT.json) --servers N --server-bandwidth B
//!   [--policy FILE] [--json]`: every profile of a history run through the policy on an idle
//!   pool, summed up as the DFRA paper's Table 4.
//!
//! POOL.json is a JSON array of `eddy_alloc::Server`; the policy file's `[alloc]` table sets
//! `eddy_alloc::Policy` (docs/guide/allocation.md).

use crate::history::{open, DbArgs};
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use eddy_alloc::pool::pick_history;
use eddy_alloc::{decide, replay, Job, Policy, Server};
use eddy_history::plot::human_bytes;
use eddy_history::{Filter, JobProfile};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct AllocArgs {
    #[command(subcommand)]
    pub command: AllocCommand,
}

#[derive(Debug, Subcommand)]
pub enum AllocCommand {
    /// The servers the policy gives a job on a pool, and why (rule, tests, numbers).
    Explain {
        /// The job's (Slurm) name: with --script-hash, which runs are its history.
        #[arg(long, value_name = "NAME")]
        job_name: String,
        /// The job script's hash (as `eddy history` stores it); without it, runs without one.
        #[arg(long, value_name = "H")]
        script_hash: Option<String>,
        /// Only this user's runs count as history.
        #[arg(long, value_name = "USER")]
        user: Option<String>,
        /// Compute nodes requested.
        #[arg(long, value_name = "K")]
        nodes: u32,
        /// The pool: a JSON array of servers (id, host, peak_bandwidth, load, jobs, healthy,
        /// recent_bandwidth).
        #[arg(long, value_name = "POOL.json")]
        pool: PathBuf,
        /// The default allocation's servers (the site's mapping), comma-separated ids;
        /// default: the first `default_servers` usable servers by id.
        #[arg(long, value_name = "IDS", value_delimiter = ',')]
        default_servers: Vec<u32>,
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        policy: PolicyArgs,
        /// Print the decision as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a history through the policy (each profile a new job with itself as history, on
    /// an idle pool) and print the share of jobs upgraded, their share of node-hours, the
    /// first test each refused job failed, and the mean servers in use.
    Replay {
        /// A JSON export (`eddy history export`) instead of the database.
        #[arg(long, value_name = "EXPORT.json")]
        from: Option<PathBuf>,
        #[command(flatten)]
        db: DbArgs,
        /// Servers of the idle pool.
        #[arg(long, value_name = "N")]
        servers: u32,
        /// Each server's peak bandwidth (B_f), bytes/s; K, M, G, T (powers of 1000) or Ki,
        /// Mi, Gi, Ti suffixes.
        #[arg(long, value_name = "B", value_parser = parse_rate)]
        server_bandwidth: f64,
        #[command(flatten)]
        policy: PolicyArgs,
        /// Print the replay (summary and per-job decisions) as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// A TOML file whose `[alloc]` table sets the thresholds (default: the built-in policy).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
}

impl PolicyArgs {
    fn load(&self) -> Result<Policy> {
        let Some(path) = &self.policy else {
            return Ok(Policy::default());
        };
        // privileged-path: a file the caller names on its own command line
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the policy file {}", path.display()))?;
        Policy::from_toml(&text).map_err(|e| anyhow!("fix the policy file {}: {e}", path.display()))
    }
}

/// A rate in bytes/s: a number with an optional decimal or binary suffix.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    let t = text.trim().trim_end_matches("/s").trim_end_matches('B');
    let (num, mult) = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("K", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ]
    .iter()
    .find_map(|(s, m)| t.strip_suffix(s).map(|n| (n, *m)))
    .unwrap_or((t, 1.0));
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v * mult),
        _ => Err(format!(
            "{text:?} is not a positive rate in bytes/s (e.g. 2500000000, 2.5G, 800Mi)"
        )),
    }
}

fn read_pool(path: &Path) -> Result<Vec<Server>> {
    // privileged-path: a file the caller names on its own command line
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the pool file {}", path.display()))?;
    let pool: Vec<Server> = serde_json::from_str(&text).with_context(|| {
        format!(
            "the pool file {} is not a JSON array of servers ({{\"id\", \"peak_bandwidth\", ...}})",
            path.display()
        )
    })?;
    if pool.is_empty() {
        bail!("the pool file {} lists no server", path.display());
    }
    Ok(pool)
}

fn print_json<T: Serialize + ?Sized>(v: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(v).context("cannot encode JSON")?;
    outln!("{text}");
    Ok(())
}

/// Runs `eddy alloc`.
pub fn alloc(args: AllocArgs) -> Result<()> {
    match args.command {
        AllocCommand::Explain {
            job_name,
            script_hash,
            user,
            nodes,
            pool,
            default_servers,
            db,
            policy,
            json,
        } => {
            let policy = policy.load()?;
            let pool = read_pool(&pool)?;
            let mut h = open(&db)?;
            let runs = h.runs_of(user.as_deref(), &job_name, script_hash.as_deref())?;
            let history = pick_history(&runs, nodes);
            let job = Job {
                user,
                job_name,
                script_hash,
                nodes,
                default_servers,
            };
            let d = decide(&policy, &job, history, &pool);
            if json {
                #[derive(Serialize)]
                struct Out<'a> {
                    job: &'a Job,
                    history: Option<&'a str>,
                    runs: usize,
                    decision: &'a eddy_alloc::Decision,
                }
                return print_json(&Out {
                    job: &job,
                    history: history.map(|p| p.key.as_str()),
                    runs: runs.len(),
                    decision: &d,
                });
            }
            outln!(
                "job {} (script {}, user {}), {} node(s): {} run(s) in the history {}",
                job.job_name,
                job.script_hash.as_deref().unwrap_or("-"),
                job.user.as_deref().unwrap_or("any"),
                job.nodes,
                runs.len(),
                h.name()
            );
            let ids: Vec<String> = d.servers.iter().map(u32::to_string).collect();
            outln!(
                "decision: {} on {} server(s): {}",
                format!("{:?}", d.rule).to_lowercase(),
                d.servers.len(),
                if ids.is_empty() {
                    "-".into()
                } else {
                    ids.join(",")
                }
            );
            outln!(
                "first scaling test failed: {}",
                d.refused_at.map_or("none", |t| t.describe())
            );
            if !d.excluded.is_empty() {
                let ex: Vec<String> = d.excluded.iter().map(u32::to_string).collect();
                outln!("excluded servers: {}", ex.join(","));
            }
            outln!("why:");
            for r in &d.reasons {
                outln!("  - {r}");
            }
            Ok(())
        }
        AllocCommand::Replay {
            from,
            db,
            servers,
            server_bandwidth,
            policy,
            json,
        } => {
            let policy = policy.load()?;
            if servers == 0 {
                bail!("--servers 0: the pool needs at least one server");
            }
            let (profiles, source): (Vec<JobProfile>, String) = match &from {
                Some(path) => {
                    // privileged-path: a file the caller names on its own command line
                    let text = std::fs::read_to_string(path)
                        .with_context(|| format!("cannot read {}", path.display()))?;
                    let p = serde_json::from_str(&text).with_context(|| {
                        format!(
                            "{} is not a JSON array of job profiles (`eddy history export`)",
                            path.display()
                        )
                    })?;
                    (p, path.display().to_string())
                }
                None => {
                    let mut h = open(&db)?;
                    (h.list(&Filter::default())?, h.name().to_string())
                }
            };
            let r = replay(&policy, &profiles, servers, server_bandwidth);
            if json {
                return print_json(&r);
            }
            outln!(
                "replay of {} job(s) from {source} on {servers} idle server(s) of {}/s: {:.1} \
                 node-hours",
                r.jobs,
                human_bytes(server_bandwidth),
                r.node_hours
            );
            outln!(
                "{:<38}  {:>6}  {:>7}  {:>11}",
                "CATEGORY",
                "JOBS",
                "JOBS%",
                "NODE-HOURS%"
            );
            let line = |name: &str, row: &eddy_alloc::replay::Row| {
                outln!(
                    "{:<38}  {:>6}  {:>6.1}%  {:>10.1}%",
                    name,
                    row.jobs,
                    100.0 * row.share,
                    100.0 * row.node_hours_share
                );
            };
            line("upgraded (scaled)", &r.upgraded);
            for row in &r.refused {
                line(&format!("refused: {}", row.category), row);
            }
            outln!("mean servers per job: {:.2}", r.mean_servers_per_job);
            outln!("mean servers in use: {:.2}", r.mean_servers_in_use);
            Ok(())
        }
    }
}
