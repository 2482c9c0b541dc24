//! eddy-bench: the `eddy bench` command. It runs IO500-shaped workloads (ior-easy, ior-hard,
//! mdtest-easy, mdtest-hard, find, rnd4k, smallfiles) with worker processes on any directory or,
//! as `eddy:STATE_DIR[:/dir]`, through the Eddy client library (one `Fs` trait, two
//! implementations, see `fs`), verifies every byte it reads, and reports MiB/s, kIOPS, latency
//! percentiles and the IO500-style score as tables, JSON and plots; `suite` measures an Eddy
//! mount and the client library against the raw storage under them in the same run; `tier`
//! measures the backend tier (cold and warm reads of backend files, stage-in, stage-out)
//! against the backend used directly.
//!
//! It must not: touch anything outside its own work directory (`eddy-bench.work`) in the
//! target, report a number for a phase whose reads failed verification, depend on Eddy's
//! internals (it drives Eddy only through the `eddy` command, the mount and the public API of
//! `eddy-client`), or fail on a time.

/// `eprintln!` for progress and warnings: when standard error has gone (`eddy bench ...
/// 2>&1 | head`), the line is lost instead of a panic (see `err_out`).
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::err_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod alloc;
pub mod args;
mod coord;
mod deploy;
pub mod fs;
mod grow;
mod hist;
mod interrupt;
mod msg;
mod net;
pub mod pattern;
pub mod plan;
mod plot;
pub mod report;
mod suite;
mod tier;
mod worker;

/// Runs the eddy command `exe` (this program) with `args` to its end; fails with its output
/// if it fails. Returns its wall time and its output.
pub(crate) fn run_eddy<A: AsRef<std::ffi::OsStr>>(
    exe: &Path,
    args: &[A],
) -> anyhow::Result<(std::time::Duration, std::process::Output)> {
    use anyhow::Context;
    let clock = std::time::Instant::now();
    let out = std::process::Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    let took = clock.elapsed();
    if !out.status.success() {
        let words: Vec<String> = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into())
            .collect();
        anyhow::bail!(
            "eddy {} failed ({}):\n{}{}",
            words.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok((took, out))
}

pub use args::BenchArgs;
use args::{BenchCommand, CompareArgs, OutputOpts, RunArgs, ScaleArgs};
use report::{Report, ResultsFile};
use std::path::Path;

/// Runs `eddy bench <subcommand>`.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if !matches!(args.command, BenchCommand::Worker(_)) {
        interrupt::install();
    }
    match args.command {
        BenchCommand::Run(a) => cmd_run(a),
        BenchCommand::Suite(a) => suite::run(a),
        BenchCommand::Compare(a) => cmd_compare(a),
        BenchCommand::Scale(a) => cmd_scale(a),
        BenchCommand::Tier(a) => tier::run(a),
        BenchCommand::Writeback(a) => tier::writeback::run(a),
        BenchCommand::Deploy(a) => deploy::run(a),
        BenchCommand::Grow(a) => grow::run(a),
        BenchCommand::Alloc(a) => alloc::run(a),
        BenchCommand::Worker(a) => worker::main(a),
    }
}

/// A command's human table and its `--json` document (a file, or `-`: stdout, the table then
/// going to stderr).
fn table_and_json<T: serde::Serialize>(
    json: Option<&Path>,
    table: &str,
    value: &T,
) -> anyhow::Result<()> {
    use anyhow::Context;
    human(json, table);
    if let Some(j) = json {
        let text = serde_json::to_string_pretty(value).context("encoding results")?;
        if j == Path::new("-") {
            out(format_args!("{text}\n"));
        } else {
            std::fs::write(j, text + "\n")
                .with_context(|| format!("cannot write {}", j.display()))?;
        }
    }
    Ok(())
}

/// Prints human output to stdout, or to stderr when the JSON goes to stdout.
fn human(json: Option<&Path>, text: &str) {
    if json == Some(Path::new("-")) {
        err_out(format_args!("{text}"));
    } else {
        out(format_args!("{text}"));
    }
}

fn cmd_run(a: RunArgs) -> anyhow::Result<()> {
    let plan = plan::Plan::new(&a.target, &a.work, &a.phases)?;
    let label = a.label.clone().unwrap_or_else(|| a.target.to_string());
    note!(
        "eddy bench: {} with {} procs, phases: {}",
        a.target,
        plan.procs,
        a.phases
    );
    let spec = coord::RunSpec {
        label,
        launch: &a.launch,
        keep: a.keep,
    };
    let report = coord::run_plan(&plan, &spec)?;
    human(a.out.json.as_deref(), &report::table(&report));
    write_outputs(&a.out, vec![report], "eddy bench")
}

/// Writes `--json` and `--plot` for a list of runs.
fn write_outputs(out: &OutputOpts, runs: Vec<Report>, title: &str) -> anyhow::Result<()> {
    write_outputs_in(out, runs, title, None)
}

/// `write_outputs` of runs made in `layout`: the plot's title and the JSON say which.
fn write_outputs_in(
    out: &OutputOpts,
    runs: Vec<Report>,
    title: &str,
    layout: Option<report::Layout>,
) -> anyhow::Result<()> {
    write_outputs_with(out, runs, title, layout, None)
}

/// `write_outputs_in` with the Python package's benchmark (`suite --client-py`) in the JSON.
fn write_outputs_with(
    out: &OutputOpts,
    runs: Vec<Report>,
    title: &str,
    layout: Option<report::Layout>,
    python: Option<suite::PythonBench>,
) -> anyhow::Result<()> {
    if let Some(p) = &out.plot {
        let title = match &layout {
            Some(l) => match &l.placement {
                Some(p) => format!("{title} (layout: {}, placement: {p})", l.name),
                None => format!("{title} (layout: {})", l.name),
            },
            None => title.to_string(),
        };
        plot::plot_runs(&runs, p, &title)?;
        note!("plot written to {}", p.display());
    }
    if let Some(j) = &out.json {
        let mut file = ResultsFile::new(runs).with_layout(layout);
        file.python = python;
        file.save(j)?;
    }
    Ok(())
}

fn pick(file: &ResultsFile, index: usize, path: &Path) -> anyhow::Result<Report> {
    file.runs.get(index).cloned().ok_or_else(|| {
        anyhow::anyhow!(
            "{} holds {} run(s), run {} is missing",
            path.display(),
            file.runs.len(),
            index + 1
        )
    })
}

fn cmd_compare(a: CompareArgs) -> anyhow::Result<()> {
    let fa = ResultsFile::load(&a.a)?;
    let (ra, rb) = match &a.b {
        Some(b) => (pick(&fa, 0, &a.a)?, pick(&ResultsFile::load(b)?, 0, b)?),
        None => (pick(&fa, 0, &a.a)?, pick(&fa, 1, &a.a)?),
    };
    out(format_args!("{}", report::compare_table(&ra, &rb)));
    if let Some(p) = &a.plot {
        let title = format!("eddy bench: {} vs {}", rb.label, ra.label);
        plot::plot_runs(&[ra, rb], p, &title)?;
        note!("plot written to {}", p.display());
    }
    Ok(())
}

fn cmd_scale(a: ScaleArgs) -> anyhow::Result<()> {
    if a.procs_list.is_empty() {
        anyhow::bail!("--procs-list is empty");
    }
    let mut runs = Vec::new();
    for &procs in &a.procs_list {
        interrupt::check()?;
        let mut opts = a.work.clone();
        opts.procs = procs;
        let plan = plan::Plan::new(&a.target, &opts, "all")?;
        note!("eddy bench scale: {} procs on {}", procs, a.target);
        let spec = coord::RunSpec {
            label: format!("{procs} procs"),
            launch: &a.launch,
            keep: false,
        };
        runs.push(coord::run_plan(&plan, &spec)?);
    }
    human(a.json.as_deref(), &report::scale_table(&runs));
    if let Some(p) = &a.plot {
        plot::plot_scale(&runs, p, &format!("eddy bench scale: {}", a.target))?;
        note!("plot written to {}", p.display());
    }
    if let Some(j) = &a.json {
        ResultsFile::new(runs).save(j)?;
    }
    Ok(())
}

/// Writes to standard output. When the reader has gone (EPIPE: `eddy status | head`), the
/// command ends at once, quietly and successfully, as `cat` and `ls` end under a shell; any
/// other write error ends it with a message. (Rust ignores SIGPIPE, so `println!` would
/// panic; SIGPIPE is not reset to its default instead, because it would also kill a mount or
/// a command writing to a daemon's Unix socket that closed.)
pub fn out(args: std::fmt::Arguments) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        err_out(format_args!("eddy: cannot write to standard output: {e}\n"));
        std::process::exit(1);
    }
}

/// Writes progress or a warning to standard error; a failed write (the reader went away) is
/// ignored: such lines are for a person watching, and the command's work goes on.
pub fn err_out(args: std::fmt::Arguments) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_fmt(args);
}
