//! eddyd: the Eddy storage daemon, this crate's binary; the work is in its library.

use clap::Parser;
use std::io::IsTerminal;

/// A plain level applies to Eddy; the storage engine's own logs stay at warn unless a full
/// filter is given.
fn log_filter(level: &str) -> String {
    if level.contains('=') || level.contains(',') {
        level.to_string()
    } else {
        format!("{level},fjall=warn,lsm_tree=warn")
    }
}

fn main() {
    let args = eddy_daemon::DaemonArgs::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(log_filter(&args.log_level))
        .unwrap_or_else(|e| {
            eprintln!(
                "eddyd: --log-level {:?} is not valid ({e}); using info",
                args.log_level
            );
            tracing_subscriber::EnvFilter::new(log_filter("info"))
        });
    // A line that cannot be written (the log's device is full, decision 0060) is lost: the
    // library's report of it would go to the same standard error with `eprintln!`, whose
    // failure panics the thread that logged (a request's, the runtime's).
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .log_internal_errors(false)
        .init();
    if let Err(e) = eddy_daemon::run(args) {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "eddyd: {e}");
        std::process::exit(1);
    }
}
