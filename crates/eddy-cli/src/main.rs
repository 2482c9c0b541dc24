//! `eddy`: the command that starts, stops, inspects and mounts an Eddy deployment, stages
//! data in from and out to its backend, and runs the benchmarks. It drives daemons through
//! their processes and the client library only; it never touches a daemon's storage directly.

/// `println!` for the command's output: a reader that went away (`eddy status | head -c 10`)
/// ends the command quietly instead of a panic (see `out`).
macro_rules! outln {
    ($($arg:tt)*) => {
        eddy_bench::out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` for messages: a standard error that has gone loses the line, never panics.
macro_rules! errln {
    ($($arg:tt)*) => {
        eddy_bench::err_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod alloc;
mod bb;
mod cli;
mod debug;
mod history;
mod mount;
mod repair;
mod resize;
mod scrub;
mod stage;
mod start;
mod stats;
mod status;
mod stop;
mod sysmap;
mod walltime;
mod writeback;

use anyhow::Result;
use clap::Parser;
use cli::{Cli, Command};

fn main() {
    init_tracing();
    let cli = Cli::parse();
    if let Err(err) = run(cli) {
        errln!("eddy: {err:#}");
        std::process::exit(1);
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("EDDY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // A line that cannot be written (the log's device is full, decision 0060) is lost: the
    // library's report of it would go to the same standard error with `eprintln!`, whose
    // failure panics (a mount's request thread, or the mount at start-up). `init` also routes
    // the records of the `log` crate into tracing (the `tracing-log` feature), under the same
    // filter: fuser's, in the mount's log (`EDDY_LOG=fuser=debug`).
    // Colours only on a terminal: a mount's or a deployment's log is mostly a file.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .log_internal_errors(false)
        .init();
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Start(args) => start::start(args),
        Command::Stop(args) => stop::stop(args),
        Command::Status(args) => status::status(args),
        Command::Stats(args) => stats::stats(args),
        Command::Scrub(args) => scrub::scrub(args),
        Command::Repair(args) => repair::repair(args),
        Command::Replace(args) => repair::replace(args),
        Command::Grow(args) => resize::grow(args),
        Command::Shrink(args) => resize::shrink(args),
        Command::Mount(args) => mount::mount(args),
        Command::Umount(args) => mount::umount(args),
        Command::StageIn(args) => stage::stage_in(args),
        Command::Prefetch(args) => stage::prefetch(args),
        Command::StageOut(args) => stage::stage_out(args),
        Command::Unpin(args) => stage::unpin(args),
        Command::Bench(args) => eddy_bench::run(args),
        Command::Debug(cmd) => debug::debug(cmd),
        Command::Bb(args) => bb::bb(args),
        Command::Sysmap(args) => sysmap::sysmap(args),
        Command::History(args) => history::history(args),
        Command::Walltime(args) => walltime::walltime(args),
        Command::Alloc(args) => alloc::alloc(args),
        Command::Writeback(args) => writeback::writeback(args),
    }
}

/// Where the libraries' progress lines go: the command's standard output and error.
pub fn say() -> eddy_deploy::Say<'static> {
    fn out(line: &str) {
        outln!("{line}");
    }
    fn err(line: &str) {
        errln!("{line}");
    }
    eddy_deploy::Say {
        out: &out,
        err: &err,
    }
}
