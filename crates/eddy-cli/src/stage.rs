//! `eddy stage-in`, `eddy stage-out` and `eddy unpin` (`eddy_deploy::stage`): PATH
//! arguments are namespace paths or local paths under a mount of this deployment (see the
//! commands' `--help`). Results are one line per file (or one JSON document); the command
//! fails naming every file that failed.

use crate::cli::{StageInArgs, StageOutArgs, UnpinArgs};
use anyhow::Result;
use eddy_deploy::stage::{self, Report};
use eddy_deploy::StateDir;

pub fn stage_in(args: StageInArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    let report = stage::stage_in(&state, &args.paths, args.pin)?;
    print(&report, "staged in", "no files to stage in", args.json)?;
    report.outcome("stage-in")
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
