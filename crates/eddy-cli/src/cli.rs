//! Command-line syntax of `eddy` (clap derive).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Eddy: a burst-buffer file system for HPC jobs.
#[derive(Debug, Parser)]
#[command(name = "eddy", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a deployment: N daemons on this host, or one daemon per listed host.
    Start(StartArgs),
    /// Unmount, stop every daemon of the deployment and mark it stopped (idempotent).
    Stop(StateArgs),
    /// Show every daemon of the deployment: address, up/down, storage, entries, uptime.
    Status(StatusArgs),
    /// Mount the deployment's namespace with FUSE.
    Mount(MountArgs),
    /// Unmount a mount point made by `eddy mount`.
    Umount(UmountArgs),
    /// Run IO500-shaped benchmarks on a directory.
    Bench(eddy_bench::BenchArgs),
    /// Low-level helpers that talk to the deployment through the client library.
    #[command(hide = true, subcommand)]
    Debug(DebugCommand),
}

/// Where the deployment's state lives.
#[derive(Debug, Args)]
pub struct StateArgs {
    /// State directory of the deployment (default: $EDDY_STATE).
    #[arg(long, env = "EDDY_STATE", value_name = "DIR")]
    pub state: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("where").required(true).args(["local", "hosts", "slurm"])))]
pub struct StartArgs {
    /// Run N daemons on this host, with roots DIR/d0 .. DIR/d<N-1>.
    #[arg(long, value_name = "N")]
    pub local: Option<u32>,
    /// Run one daemon per host listed in FILE (`name [address]` per line, `#` comments).
    #[arg(long, value_name = "FILE")]
    pub hosts: Option<PathBuf>,
    /// Run one daemon per node of the current Slurm job.
    #[arg(long)]
    pub slurm: bool,
    /// Storage root of the daemons. With --hosts/--slurm it may contain `{host}` and `{id}`.
    #[arg(long, value_name = "DIR")]
    pub root: PathBuf,
    /// Launcher command template for remote daemons; `{host}` is the host name and `{cmd}`
    /// the daemon command line (default `ssh {host} {cmd}`, or srun with --slurm).
    #[arg(long, value_name = "TEMPLATE", conflicts_with = "local")]
    pub launcher: Option<String>,
    /// Mount the namespace here once the daemons are ready.
    #[arg(long, value_name = "MNT")]
    pub mount: Option<PathBuf>,
    /// State directory (default: $EDDY_STATE, else --root).
    #[arg(long, env = "EDDY_STATE", value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// TOML file with configuration tunables (any subset of them).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Chunk size in bytes (overrides the configuration file).
    #[arg(long, value_name = "BYTES")]
    pub chunk_size: Option<u64>,
    /// Link the whole namespace to this backend directory (the parallel file system): its
    /// entries appear on first touch, data is fetched chunk by chunk and written back by
    /// stage-out, eviction and stop. Every daemon's host must see it at this path.
    #[arg(long, value_name = "DIR")]
    pub backend: Option<PathBuf>,
    /// Link a sub-tree of the namespace to a backend directory, e.g. --link /in=/pfs/in;
    /// repeatable (one backend per prefix; the rest of the namespace is scratch).
    #[arg(long, value_name = "PREFIX=DIR")]
    pub link: Vec<String>,
    /// Name of the deployment (default: the Slurm job id, else "eddy").
    #[arg(long)]
    pub name: Option<String>,
    /// TCP port remote daemons listen on (default: the configuration's `port`).
    #[arg(long, value_name = "PORT", conflicts_with = "local")]
    pub listen_port: Option<u16>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct MountArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// Mount point (an existing directory).
    pub mountpoint: PathBuf,
    /// Stay in the foreground serving the mount until it is unmounted.
    #[arg(long)]
    pub foreground: bool,
    /// Let other users access the mount (needs user_allow_other in /etc/fuse.conf).
    #[arg(long)]
    pub allow_other: bool,
}

#[derive(Debug, Args)]
pub struct UmountArgs {
    /// Mount point to unmount.
    pub mountpoint: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum DebugCommand {
    /// Copy a local file into the namespace.
    Put {
        #[command(flatten)]
        state: StateArgs,
        /// Local file to read.
        local: PathBuf,
        /// Absolute path inside the namespace.
        path: String,
    },
    /// Copy a file of the namespace to a local file.
    Get {
        #[command(flatten)]
        state: StateArgs,
        /// Absolute path inside the namespace.
        path: String,
        /// Local file to write.
        local: PathBuf,
    },
}
