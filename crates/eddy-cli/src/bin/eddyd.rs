//! eddyd: the Eddy storage daemon. All the work is in the eddy-daemon crate.

use clap::Parser;

fn main() {
    let args = eddy_daemon::DaemonArgs::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = eddy_daemon::run(args) {
        eprintln!("eddyd: {e}");
        std::process::exit(1);
    }
}
