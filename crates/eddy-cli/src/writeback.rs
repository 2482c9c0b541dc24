//! `eddy writeback` (`eddy_deploy::writeback`, decision 0041): early write-back beside a live
//! deployment, timed by the job's predicted end. Prints one line per pass and one at the end
//! (or the outcome as JSON); SIGTERM and SIGINT end it cleanly (exit 0).

use crate::cli::StateArgs;
use anyhow::{bail, Result};
use clap::Args;
use eddy_deploy::writeback::{self, Options};
use eddy_deploy::StateDir;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Start writing the deployment's dirty data back to the backend early enough that little is
/// left at the job's predicted end; runs until that end, the deployment's stop or SIGTERM.
#[derive(Debug, Args)]
pub struct WritebackArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// The job's predicted end, in Unix seconds (e.g. from `eddy walltime predict`).
    #[arg(long, value_name = "UNIX_SECONDS")]
    pub end: String,
    /// Seconds kept in hand: writing back starts when the time left is what writing back
    /// the dirty bytes takes plus this.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub margin: f64,
    /// Print the outcome (passes, dirty bytes at the end) as one JSON document.
    #[arg(long)]
    pub json: bool,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

pub fn writeback(args: WritebackArgs) -> Result<()> {
    let end = writeback::parse_end(&args.end)?;
    if !args.margin.is_finite() || args.margin < 0.0 {
        bail!(
            "--margin {}: give a number of seconds, 0 or more",
            args.margin
        );
    }
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
    let opts = Options {
        end,
        margin: Duration::from_secs_f64(args.margin),
    };
    let quiet = eddy_deploy::Say {
        out: &|_| {},
        err: &|line| errln!("{line}"),
    };
    let say = if args.json { quiet } else { crate::say() };
    let outcome = writeback::run(&state, opts, &|| STOP.load(Ordering::SeqCst), say)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&outcome)?);
    }
    Ok(())
}
