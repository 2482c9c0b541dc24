//! `eddy stage-in`, `eddy prefetch`, `eddy stage-out` and `eddy unpin` (`eddy_deploy::stage`,
//! `eddy_deploy::prefetch`): PATH
//! arguments are namespace paths or local paths under a mount of this deployment (see the
//! commands' `--help`). Results are one line per file (or one JSON document); the command
//! fails naming every file that failed.

use crate::cli::{PrefetchArgs, StageInArgs, StageOutArgs, UnpinArgs};
use anyhow::{anyhow, Context, Result};
use eddy_deploy::prefetch;
use eddy_deploy::stage::{self, result_line, Report};
use eddy_deploy::StateDir;

pub fn stage_in(args: StageInArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    let report = stage::stage_in(&state, &args.paths, args.pin)?;
    print(&report, "staged in", "no files to stage in", args.json)?;
    report.outcome("stage-in")
}

/// `eddy prefetch`: the fetch started in a process of its own (`--background`, which
/// writes its results to the state directory's log), or run here with `--wait`.
pub fn prefetch(args: PrefetchArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    if args.background {
        return background(&state, &args.paths);
    }
    let paths = stage::namespace_paths(&state, &args.paths)?;
    if args.wait {
        let report = prefetch::run(&state, &paths, &|_| {})?;
        print(&report, "prefetched", "no files to prefetch", args.json)?;
        return report.outcome("prefetch");
    }
    let exe = std::env::current_exe().context("cannot find the eddy program")?;
    let child = prefetch::start_background(&exe, &state, &paths, None)?;
    outln!(
        "eddy: prefetching {} in the background (pid {}); results in {}",
        paths.join(" "),
        child.id(),
        state.dir().join(prefetch::LOG).display()
    );
    Ok(())
}

/// The background prefetch: namespace paths as they are, every line into the log,
/// each prefixed with this process's pid (several may write the log at once).
fn background(state: &StateDir, args: &[std::path::PathBuf]) -> Result<()> {
    prefetch::log_to_state(state)?;
    let me = format!("eddy: prefetch {}:", std::process::id());
    let paths = args
        .iter()
        .map(|p| {
            p.to_str()
                .map(str::to_string)
                .ok_or_else(|| anyhow!("{}: a namespace path must be UTF-8", p.display()))
        })
        .collect::<Result<Vec<String>>>()?;
    outln!("{me} started: {}", paths.join(" "));
    let report = prefetch::run(state, &paths, &|r| outln!("{me} {}", result_line(r)))?;
    outln!("{me} {}", report.summary("prefetched"));
    if let Some(why) = report.failure("prefetch") {
        // Said here, with the pid (main's line would lack it), and the exit says it failed.
        outln!("{me} {why}");
        std::process::exit(1);
    }
    Ok(())
}

pub fn stage_out(args: StageOutArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    let report = stage::stage_out(&state, &args.paths, args.overwrite)?;
    print(
        &report,
        "staged out",
        "nothing to stage out: no dirty data",
        args.json,
    )?;
    report.outcome("stage-out")
}

pub fn unpin(args: UnpinArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    let done = stage::unpin(&state, &args.paths)?;
    outln!(
        "eddy: released the pins of {} cached chunks under {}",
        done.chunks,
        done.under
    );
    Ok(())
}

/// The report's lines (`Report::lines`), or the JSON document.
fn print(report: &Report, done: &str, nothing: &str, json: bool) -> Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(report)?);
        return Ok(());
    }
    for line in report.lines(done, nothing) {
        outln!("{line}");
    }
    Ok(())
}
