//! `eddy history`: the I/O history of the jobs Eddy served (eddy-history's database).
//!
//! - `eddy history list [--user U] [--job-name N] [--since T] [--until T] [--limit N] [--json]`:
//!   one line per job, newest first;
//! - `eddy history show JOB [--json]`: one job's profile (JOB: its key or Slurm job id);
//! - `eddy history export [filters]`: the matching profiles, whole, as one JSON array;
//! - `eddy history plot JOB --out F.png`: the profile's plot.
//!
//! Each takes `--db SPEC` (a path for SQLite, a `postgres://` URL for PostgreSQL), by default
//! the `history_db` of the `--config` file, else of the burst-buffer site settings, else the
//! per-user default where `eddy stop` stores profiles when nothing names a database
//! (`$XDG_DATA_HOME/eddy/history.db`, else `~/.local/share/eddy/history.db`).

use anyhow::{anyhow, Context, Result};
use clap::{Args, Subcommand};
use eddy_history::db::mode_name;
use eddy_history::plot::human_bytes;
use eddy_history::{Filter, HistoryDb, JobProfile, JobSummary};
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[command(subcommand)]
    pub command: HistoryCommand,
}

#[derive(Debug, Subcommand)]
pub enum HistoryCommand {
    /// List the stored jobs, newest first: job, name, user, start, duration, volume, I/O
    /// mode, nodes that did I/O (N_A), peak bandwidth.
    List {
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        filter: FilterArgs,
        /// Print JSON (an array of the listed fields per job).
        #[arg(long)]
        json: bool,
    },
    /// Show one job's profile.
    Show {
        /// The job: its profile key or its Slurm job id (the newest run with that id).
        job: String,
        #[command(flatten)]
        db: DbArgs,
        /// Print the whole profile as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the matching profiles, whole, as one JSON array (the same filters as list).
    Export {
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        filter: FilterArgs,
        /// JSON is the only format; accepted for symmetry with the other commands.
        #[arg(long)]
        json: bool,
    },
    /// Plot one job's profile: bandwidth and IOPS per daemon over time, request sizes,
    /// metadata operations (PNG; SVG for a .svg file).
    Plot {
        /// The job: its profile key or its Slurm job id.
        job: String,
        /// The image to write.
        #[arg(long, value_name = "F.png")]
        out: PathBuf,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Read Darshan logs (with PyDarshan) and store one profile per log; prints the keys
    /// (with --json, the profiles stored).
    Import {
        /// The Darshan logs.
        #[arg(required = true, value_name = "FILE.darshan")]
        files: Vec<PathBuf>,
        #[command(flatten)]
        db: DbArgs,
        /// Print the stored profiles as a JSON array.
        #[arg(long)]
        json: bool,
    },
}

/// Which history database.
#[derive(Debug, Args)]
pub struct DbArgs {
    /// The history database: a path (SQLite) or a postgres:// URL (PostgreSQL). Default: the
    /// `history_db` of the --config file, else of the burst-buffer site settings, else
    /// $XDG_DATA_HOME/eddy/history.db (else ~/.local/share/eddy/history.db).
    #[arg(long, value_name = "SPEC")]
    pub db: Option<String>,
    /// A configuration file (as `eddy start --config`) whose `history_db` is the default.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The site's burst-buffer settings (default /etc/eddy/bb.toml, if present), whose
    /// `history_db` is the default when no --config names one.
    #[arg(long, value_name = "FILE")]
    pub site: Option<PathBuf>,
}

/// Which jobs.
#[derive(Debug, Args)]
pub struct FilterArgs {
    /// Only this user's jobs.
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Only jobs of this (Slurm) job name.
    #[arg(long, value_name = "NAME")]
    pub job_name: Option<String>,
    /// Only jobs started at or after T: unix seconds or RFC 3339 in UTC
    /// (2026-11-27T08:00:00Z, or a date 2026-11-27).
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub since: Option<f64>,
    /// Only jobs started at or before T (as --since).
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub until: Option<f64>,
    /// At most N jobs (the newest).
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
}

impl FilterArgs {
    fn filter(&self) -> Filter {
        Filter {
            user: self.user.clone(),
            job_name: self.job_name.clone(),
            since: self.since,
            until: self.until,
            limit: self.limit,
            ..Filter::default()
        }
    }
}

/// A time as unix seconds: a number, an RFC 3339 time (UTC) or a date.
pub fn parse_time(text: &str) -> Result<f64, String> {
    let t = text.trim();
    if let Ok(secs) = t.parse::<f64>() {
        if secs.is_finite() {
            return Ok(secs);
        }
    }
    let full = if t.len() == 10 {
        format!("{t}T00:00:00Z")
    } else {
        t.to_string()
    };
    let when = humantime::parse_rfc3339_weak(&full).map_err(|e| {
        format!(
            "{text:?} is not unix seconds nor an RFC 3339 time such as 2026-11-27T08:00:00Z: {e}"
        )
    })?;
    Ok(when
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64()))
}

pub(crate) fn open(args: &DbArgs) -> Result<HistoryDb> {
    let (spec, access) = eddy_bb::history_db::spec(
        args.db.as_deref(),
        args.config.as_deref(),
        args.site.as_deref(),
    )?;
    Ok(HistoryDb::open_with(&spec, &access)?)
}

/// Runs `eddy history`.
pub fn history(args: HistoryArgs) -> Result<()> {
    match args.command {
        HistoryCommand::List { db, filter, json } => {
            let jobs = open(&db)?.list(&filter.filter())?;
            let rows: Vec<JobSummary> = jobs.iter().map(JobSummary::of).collect();
            if json {
                print_json(&rows)
            } else {
                print_table(&rows);
                Ok(())
            }
        }
        HistoryCommand::Show { job, db, json } => {
            let mut h = open(&db)?;
            let p = find(&mut h, &job)?;
            if json {
                print_json(&p)
            } else {
                print_profile(&p);
                Ok(())
            }
        }
        HistoryCommand::Export {
            db,
            filter,
            json: _,
        } => print_json(&open(&db)?.list(&filter.filter())?),
        HistoryCommand::Plot { job, out, db } => {
            let mut h = open(&db)?;
            let p = find(&mut h, &job)?;
            eddy_history::plot::plot_profile(&p, &out)?;
            outln!("wrote {}", out.display());
            Ok(())
        }
        HistoryCommand::Import { files, db, json } => {
            // Every log is read before anything is stored: one bad log stores nothing.
            let profiles = eddy_history::darshan::import_logs(&files)?;
            let mut h = open(&db)?;
            for p in &profiles {
                h.put(p)
                    .with_context(|| format!("storing the profile {} in {}", p.key, h.name()))?;
            }
            if json {
                return print_json(&profiles);
            }
            for p in &profiles {
                outln!(
                    "imported {} ({}, {}, {} read, {} written)",
                    p.key,
                    p.job_name.as_deref().unwrap_or("?"),
                    mode_name(p.io_mode),
                    p.read_bytes,
                    p.written_bytes
                );
            }
            Ok(())
        }
    }
}

fn find(db: &mut HistoryDb, job: &str) -> Result<JobProfile> {
    db.find(job)?
        .ok_or_else(|| anyhow!("no job {job} in the history {}", db.name()))
}

fn print_json<T: Serialize + ?Sized>(v: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(v).context("cannot encode JSON")?;
    outln!("{text}");
    Ok(())
}

/// A unix time as RFC 3339 in UTC, to the second.
fn time_text(t: f64) -> String {
    if !(t.is_finite() && t >= 0.0) {
        return format!("{t}");
    }
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs_f64(t)).to_string()
}

/// A duration as `1h02m03s`, `4m05s` or `6.2s`.
fn duration_text(seconds: f64) -> String {
    if !(seconds.is_finite() && seconds >= 0.0) {
        return "-".into();
    }
    let s = seconds.round() as u64;
    match s {
        _ if seconds < 60.0 => format!("{seconds:.1}s"),
        _ if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m{:02}s", s / 3600, (s / 60) % 60, s % 60),
    }
}

fn print_table(rows: &[JobSummary]) {
    let header = [
        "JOB", "NAME", "USER", "START", "DURATION", "VOLUME", "MODE", "N_A", "PEAK BW",
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.key.clone(),
                r.job_name.clone().unwrap_or_else(|| "-".into()),
                r.user.clone(),
                time_text(r.start),
                duration_text(r.seconds),
                human_bytes(r.volume as f64),
                r.io_mode.to_string(),
                r.io_nodes.map_or("-".into(), |n| n.to_string()),
                format!("{}/s", human_bytes(r.peak_bandwidth)),
            ]
        })
        .collect();
    print_aligned(&header, &cells);
}

/// A header and rows in left-aligned columns two spaces apart.
fn print_aligned(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |row: &mut dyn Iterator<Item = &str>| {
        let parts: Vec<String> = row.zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        parts.join("  ").trim_end().to_string()
    };
    outln!("{}", line(&mut header.iter().copied()));
    for row in rows {
        outln!("{}", line(&mut row.iter().map(String::as_str)));
    }
}

fn print_profile(p: &JobProfile) {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let lines = [
        ("job", p.key.clone()),
        ("slurm job id", opt(&p.job_id)),
        ("job name", opt(&p.job_name)),
        ("user", p.user.clone()),
        ("script hash", opt(&p.script_hash)),
        ("source", format!("{:?}", p.source).to_lowercase()),
        ("start", time_text(p.start)),
        ("end", time_text(p.end)),
        ("duration", duration_text(p.end - p.start)),
        ("nodes", p.nodes.join(",")),
        (
            "volume",
            format!(
                "{} read, {} written",
                human_bytes(p.read_bytes as f64),
                human_bytes(p.written_bytes as f64)
            ),
        ),
        ("I/O mode", mode_name(p.io_mode).to_string()),
        (
            "nodes that did I/O (N_A)",
            p.io_nodes.map_or("unknown".into(), |n| n.to_string()),
        ),
        ("processes that did I/O", p.io_processes.to_string()),
        ("files", format!("{} ({} shared)", p.files, p.shared_files)),
        (
            "bandwidth",
            format!(
                "peak {}/s, mean {}/s",
                human_bytes(p.peak_bandwidth),
                human_bytes(p.mean_bandwidth)
            ),
        ),
        (
            "bandwidth per node (B_c)",
            format!(
                "peak {}/s, mean {}/s",
                human_bytes(p.peak_node_bandwidth),
                human_bytes(p.mean_node_bandwidth)
            ),
        ),
        (
            "IOPS",
            format!("peak {:.0}, mean {:.1}", p.peak_iops, p.mean_iops),
        ),
        (
            "metadata ops/s",
            format!(
                "peak {:.0}, mean {:.1}",
                p.peak_metadata_rate, p.mean_metadata_rate
            ),
        ),
        (
            "metadata queue (mean)",
            p.mean_metadata_queue
                .map_or("unknown".into(), |q| format!("{q:.2}")),
        ),
        (
            "operations",
            format!("{} data, {} metadata", p.data_ops, p.metadata_ops),
        ),
    ];
    let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in &lines {
        outln!("{:<width$}  {v}", format!("{k}:"), width = width + 1);
    }
    if let Some(a) = &p.allocation {
        // The burst buffer's allocation of this run (decision 0038).
        outln!(
            "{:<width$}  {} on server(s) {} ({})",
            "allocation:",
            a.rule,
            a.servers
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            a.hosts.join(","),
            width = width + 1
        );
        for r in &a.reasons {
            outln!("  - {r}");
        }
        // Servers added while it ran (decision 0082).
        for g in &a.grown {
            outln!(
                "{:<width$}  {} -> {} server(s), +{} ({}): {}",
                "grown:",
                g.from,
                g.to,
                g.servers
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                g.hosts.join(","),
                g.outcome,
                width = width + 1
            );
            for r in &g.reasons {
                outln!("  - {r}");
            }
        }
    }
    if !p.daemons.is_empty() {
        outln!("");
        let rows: Vec<Vec<String>> = p
            .daemons
            .iter()
            .map(|d| {
                vec![
                    d.daemon.to_string(),
                    d.host.clone(),
                    human_bytes(d.read_bytes as f64),
                    human_bytes(d.written_bytes as f64),
                    d.ops.to_string(),
                    d.metadata_ops.to_string(),
                ]
            })
            .collect();
        print_aligned(
            &["DAEMON", "HOST", "READ", "WRITTEN", "OPS", "METADATA OPS"],
            &rows,
        );
    }
}
