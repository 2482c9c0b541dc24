//! `eddy walltime`: how long jobs will really run (eddy-walltime, decision 0037).
//!
//! - `eddy walltime predict --user U --cpus N --mem M --time LIMIT [--history FILE | --sacct]
//!   [--json]`: the predicted runtime by each predictor (request, EASY++, AdaBoost) and the
//!   one used, from a history of finished jobs (a JSON file of job records, an SWF trace by
//!   its `.swf` name, or the user's Slurm accounting by running `sacct`);
//! - `eddy walltime replay FILE (--swf|--json|--sacct-text) [--json]`: every predictor with
//!   and without each correction over a trace, as a table.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use eddy_walltime::{predict, replay, sacct, swf, Evaluation, Job, Params};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, Args)]
pub struct WalltimeArgs {
    #[command(subcommand)]
    pub command: WalltimeCommand,
}

#[derive(Debug, Subcommand)]
pub enum WalltimeCommand {
    /// Predict a job's runtime from the history of finished jobs.
    Predict(PredictArgs),
    /// Evaluate the predictors and corrections over a trace of finished jobs.
    Replay(ReplayArgs),
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["history", "sacct"])))]
pub struct PredictArgs {
    /// The job's user.
    #[arg(long)]
    pub user: String,
    /// Requested CPUs.
    #[arg(long)]
    pub cpus: u32,
    /// Requested memory, Slurm's way (4000M, 4G, 1000Mc per CPU).
    #[arg(long)]
    pub mem: Option<String>,
    /// Requested walltime, Slurm's way ([D-]HH:MM:SS, MM, UNLIMITED).
    #[arg(long)]
    pub time: String,
    /// The history: a JSON array of job records, or an SWF trace (a name ending in .swf).
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
    /// The history from Slurm accounting: `sacct` of the user's jobs since --since.
    #[arg(long)]
    pub sacct: bool,
    /// How far back `sacct` looks (its -S).
    #[arg(long, default_value = "now-90days")]
    pub since: String,
    #[command(flatten)]
    pub params: ParamArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("format").required(true).args(["swf", "json_records", "sacct_text"])))]
pub struct ReplayArgs {
    /// The trace.
    pub file: PathBuf,
    /// FILE is an SWF trace (Parallel Workloads Archive).
    #[arg(long)]
    pub swf: bool,
    /// FILE is a JSON array of job records.
    #[arg(long = "json-records", visible_alias = "records")]
    pub json_records: bool,
    /// FILE is the output of `sacct --parsable2 --noheader -o <eddy-walltime's fields>`.
    #[arg(long)]
    pub sacct_text: bool,
    #[command(flatten)]
    pub params: ParamArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The regression's knobs (defaults: eddy-walltime's `Params`).
#[derive(Debug, Args)]
pub struct ParamArgs {
    /// Boosting rounds (trees).
    #[arg(long, default_value_t = Params::default().rounds)]
    pub rounds: usize,
    /// Depth of each tree.
    #[arg(long, default_value_t = Params::default().depth)]
    pub depth: u16,
    /// Finished jobs the regression needs before it predicts.
    #[arg(long, default_value_t = Params::default().min_train)]
    pub min_train: usize,
}

impl ParamArgs {
    fn params(&self) -> Params {
        Params {
            rounds: self.rounds,
            depth: self.depth,
            min_train: self.min_train,
            ..Params::default()
        }
    }
}

pub fn walltime(args: WalltimeArgs) -> Result<()> {
    match args.command {
        WalltimeCommand::Predict(a) => predict_cmd(a),
        WalltimeCommand::Replay(a) => replay_cmd(a),
    }
}

fn read(path: &Path, format: &str) -> Result<Vec<Job>> {
    if format == "json" {
        return eddy_walltime::job::read_json(path);
    }
    let text =
        // privileged-path: a trace the caller names on its own command line
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    match format {
        "swf" => swf::parse(&text),
        _ => sacct::parse(&text),
    }
}

fn run_sacct(user: &str, since: &str) -> Result<Vec<Job>> {
    let out = Command::new("sacct")
        .args([
            "--parsable2",
            "--noheader",
            "-o",
            sacct::FIELDS,
            "-S",
            since,
            "-u",
            user,
        ])
        // sacct prints local times; eddy-walltime reads them as UTC.
        .env("TZ", "UTC")
        .output()
        .context("running sacct (is Slurm's accounting installed?)")?;
    if !out.status.success() {
        bail!(
            "sacct failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    sacct::parse(&String::from_utf8_lossy(&out.stdout)).context("reading sacct's output")
}

fn predict_cmd(a: PredictArgs) -> Result<()> {
    let history = match &a.history {
        Some(path) if path.extension().is_some_and(|e| e == "swf") => read(path, "swf")?,
        Some(path) => read(path, "json")?,
        None => run_sacct(&a.user, &a.since)?,
    };
    let mem_mb = match &a.mem {
        Some(m) => sacct::parse_mem(m, a.cpus).with_context(|| format!("--mem {m}"))?,
        None => None,
    };
    let limit = sacct::parse_duration(&a.time).with_context(|| format!("--time {}", a.time))?;
    let job = Job {
        id: "new".into(),
        user: a.user.clone(),
        cpus: a.cpus,
        mem_mb,
        limit,
        submit: 0,
        start: 0,
        end: 0,
        runtime: 0,
    };
    let p = predict(&history, &job, &a.params.params())?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&p)?);
        return Ok(());
    }
    let show = |v: Option<u64>| {
        v.map(hms)
            .unwrap_or_else(|| "- (too little history)".into())
    };
    outln!("history   {} finished jobs", history.len());
    outln!("request   {}", hms(p.request));
    outln!("easy++    {}", show(p.easy));
    outln!("adaboost  {}", show(p.adaboost));
    outln!("used      {} ({})", hms(p.walltime), p.used.name());
    Ok(())
}

fn replay_cmd(a: ReplayArgs) -> Result<()> {
    let format = if a.swf {
        "swf"
    } else if a.json_records {
        "json"
    } else {
        "sacct"
    };
    let jobs = read(&a.file, format)?;
    if jobs.is_empty() {
        bail!("{}: no finished jobs", a.file.display());
    }
    let e = replay(&jobs, &a.params.params())?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&e)?);
    } else {
        print_table(&e);
    }
    Ok(())
}

fn print_table(e: &Evaluation) {
    outln!(
        "{} jobs; EASY++ predicted {}, AdaBoost {} (the others: their request)",
        e.jobs,
        e.easy_predicted,
        e.adaboost_predicted
    );
    outln!(
        "{:<10} {:<10} {:>10} {:>12} {:>10} {:>12}",
        "predictor",
        "correction",
        "within20%",
        "MAE",
        "under",
        "corrections"
    );
    for r in &e.rows {
        outln!(
            "{:<10} {:<10} {:>9.1}% {:>12} {:>9.1}% {:>12.2}",
            r.predictor.name(),
            r.correction.name(),
            100.0 * r.within_20,
            hms(r.mae.round() as u64),
            100.0 * r.underestimates,
            r.mean_corrections
        );
    }
}

/// Seconds as Slurm writes them: [D-]HH:MM:SS.
fn hms(s: u64) -> String {
    let (d, h, m, sec) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{sec:02}")
    } else {
        format!("{h:02}:{m:02}:{sec:02}")
    }
}
