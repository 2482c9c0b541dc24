//! `eddy`: the command that starts, stops, inspects and mounts an Eddy deployment, and runs
//! the benchmarks. It drives daemons through their processes and the client library only;
//! it never touches a daemon's storage directly.

mod cli;

use anyhow::Result;
use clap::Parser;
use cli::{Cli, Command};

fn main() {
    init_tracing();
    let cli = Cli::parse();
    if let Err(err) = run(cli) {
        eprintln!("eddy: {err:#}");
        std::process::exit(1);
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("EDDY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Bench(_) => anyhow::bail!("eddy bench is not available in this build yet"),
        other => anyhow::bail!("{other:?} is not implemented yet"),
    }
}
