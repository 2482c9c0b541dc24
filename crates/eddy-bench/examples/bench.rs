//! Stand-alone `bench` front end: `cargo run -p eddy-bench --example bench -- bench run DIR`.
//! The same arguments as `eddy bench`.

use clap::{Parser, Subcommand};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Top,
}

#[derive(Subcommand)]
enum Top {
    /// IO500-shaped workloads.
    Bench(eddy_bench::BenchArgs),
}

fn main() {
    let Top::Bench(args) = Cli::parse().cmd;
    if let Err(e) = eddy_bench::run(args) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
