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
    /// Write dirty data back to the backend, unmount, stop every daemon (idempotent).
    Stop(StopArgs),
    /// Show every daemon of the deployment: address, up/down, storage, entries, uptime.
    Status(StatusArgs),
    /// Show the I/O the daemons serve, per daemon and per client (rates over the last
    /// second, queue, latency), or the job's I/O profile so far (--job).
    Stats(StatsArgs),
    /// Verify every stored block of every daemon against its checksum (while I/O goes on);
    /// exits non-zero when damaged data is found.
    Scrub(ScrubArgs),
    /// Restore every copy (replicas > 1): every daemon pushes now what other owners missed
    /// while they were down, and this waits, with a progress bar, until nothing is left.
    Repair(RepairArgs),
    /// Start a fresh daemon on an empty root in place of a dead one (same id and address),
    /// which takes a full copy of everything it owns from the others before serving; with
    /// --keep-root, start the dead one again on its root (it takes what it missed).
    Replace(ReplaceArgs),
    /// Add daemons to a running deployment: they start, join, and the items they now own move
    /// to them in the background while the job goes on (decision 0081).
    Grow(crate::resize::GrowArgs),
    /// Drain daemons from a running deployment: their items move to their next owners, then
    /// they stop.
    Shrink(crate::resize::ShrinkArgs),
    /// Mount the deployment's namespace with FUSE.
    Mount(MountArgs),
    /// Unmount a mount point made by `eddy mount`.
    Umount(UmountArgs),
    /// Fetch files or trees of linked prefixes from the backend into the cache, ahead of use.
    StageIn(StageInArgs),
    /// Start fetching files or trees of linked prefixes into the cache in the background and
    /// return at once (results in STATE/prefetch.log); --wait fetches here instead.
    Prefetch(PrefetchArgs),
    /// Write the dirty data under linked prefixes back to the backend; returns once it is
    /// durable there.
    StageOut(StageOutArgs),
    /// Release the pins `eddy stage-in --pin` put on cached data, so that it can be evicted.
    Unpin(UnpinArgs),
    /// Early write-back: beside a running job, write its dirty data back to the backend
    /// early enough that little is left at its predicted end (--end, Unix seconds).
    Writeback(crate::writeback::WritebackArgs),
    /// Run IO500-shaped benchmarks on a directory.
    Bench(eddy_bench::BenchArgs),
    /// Low-level helpers that talk to the deployment through the client library.
    #[command(hide = true, subcommand)]
    Debug(DebugCommand),
    /// Slurm burst-buffer phases, called by slurm/burst_buffer.lua (see docs/guide/slurm-admin.md).
    Bb(BbArgs),
    /// Describe this node (cores, memory, network, storage with measured bandwidth) as JSON,
    /// optionally into a shared inventory database; `eddy sysmap show` reads it back.
    Sysmap(crate::sysmap::SysmapArgs),
    /// The I/O history of the jobs Eddy served: list, show, export (JSON) and plot job
    /// profiles from the history database (`history_db`, or --db).
    History(crate::history::HistoryArgs),
    /// Walltime prediction: predict a job's runtime from past jobs (request, EASY++,
    /// AdaBoost), or replay a trace (SWF, JSON, sacct text) through every predictor and
    /// correction.
    Walltime(crate::walltime::WalltimeArgs),
    /// The I/O-server allocation policy (DFRA): explain the servers a job would get on a
    /// pool and why, or replay a history through the policy (the paper's Table 4).
    Alloc(crate::alloc::AllocArgs),
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
    /// Mount the namespace here once the daemons are ready. Mounted by root, the mount is
    /// open to every user (see --allow-other).
    #[arg(long, value_name = "MNT")]
    pub mount: Option<PathBuf>,
    /// Let every user use the --mount, with the kernel checking mode bits. The default when
    /// root mounts; a user other than root needs `user_allow_other` in /etc/fuse.conf.
    #[arg(long, requires = "mount", conflicts_with = "owner_only")]
    pub allow_other: bool,
    /// Only the user who mounts may use the --mount. The default when a user other than root
    /// mounts.
    #[arg(long, requires = "mount")]
    pub owner_only: bool,
    /// State directory (default: $EDDY_STATE, else --root).
    #[arg(long, env = "EDDY_STATE", value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// TOML file with configuration tunables (any subset of them).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Chunk size in bytes (overrides the configuration file).
    #[arg(long, value_name = "BYTES")]
    pub chunk_size: Option<u64>,
    /// Copies of every metadata record and chunk, on R distinct daemons (1..=daemons;
    /// overrides the configuration file; default 1). With R copies the deployment keeps
    /// working with up to R-1 daemons down.
    #[arg(long, value_name = "R")]
    pub replicas: Option<usize>,
    /// Protection of the frames after the handshake: auto (mac over TCP, clear on the Unix
    /// socket), clear, mac or sealed (overrides the configuration file; decision 0022).
    #[arg(long, value_name = "MODE")]
    pub wire: Option<eddy_config::Wire>,
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
    /// The job script: its SHA-256 is recorded with the job (with the Slurm job name, what
    /// identifies "the same application" across runs in the I/O history).
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// TCP port remote daemons listen on (default: the configuration's `port`).
    #[arg(long, value_name = "PORT", conflicts_with = "local")]
    pub listen_port: Option<u16>,
    /// Run the daemons as this user (name or uid): root starts them, they make their roots
    /// the user's and drop to the user's ids (`eddyd --user`). For a deployment made for
    /// one user's job, so that the backend sees that user's rights.
    #[arg(long, value_name = "USER")]
    pub daemon_user: Option<String>,
    /// Each daemon serves `GET /metrics` for Prometheus: daemon i of a host on IP:PORT+i
    /// (port 0: any free ports; the addresses are in `eddy status`). Sets the
    /// configuration's `metrics_addr`. Use 0.0.0.0:PORT when the daemons run on several
    /// hosts.
    #[arg(long, value_name = "IP:PORT")]
    pub metrics: Option<String>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The node inventory with the pool servers' health probes (`eddy sysmap probe`): a
    /// daemon on a host marked anomalous there is flagged.
    #[arg(long, value_name = "FILE")]
    pub inventory: Option<std::path::PathBuf>,
    /// Print the daemons' metrics endpoints as a Prometheus file-based service discovery
    /// target group (JSON), labelled with the deployment's job as this state directory has
    /// it; scrape it with `honor_labels: false`, so that a job's daemons cannot label their
    /// series as another job's (docs/guide/monitoring.md, decision 0056). Asks no daemon.
    #[arg(long, conflicts_with_all = ["json", "inventory"])]
    pub prometheus: bool,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// Print JSON: the daemons' raw snapshots (an array), or with --job the profile.
    #[arg(long)]
    pub json: bool,
    /// Refresh every second until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// The job's I/O profile so far (volume, I/O mode, nodes, bandwidth, IOPS, metadata).
    #[arg(long)]
    pub job: bool,
}

#[derive(Debug, Args)]
pub struct ScrubArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RepairArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// A full resync: every daemon first scans everything it holds and queues each item
    /// for its other owners (slow; for copies lost without a record, e.g. a wiped root).
    #[arg(long)]
    pub full: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReplaceArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// Id of the dead daemon to replace.
    pub id: u32,
    /// Start the dead daemon again on its root as it is, instead of a fresh one on an empty
    /// root: it rejoins, taking only what it missed while it was down.
    #[arg(long)]
    pub keep_root: bool,
}

#[derive(Debug, Args)]
pub struct StopArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// Stop even though dirty data under linked prefixes is not written back to the backend:
    /// no write-back is attempted and that data is lost. Without it, stop first writes every
    /// linked prefix back, and refuses to stop (the daemons keep running with the data) if
    /// any file cannot be written back.
    #[arg(long)]
    pub discard: bool,
}

/// How the PATH arguments of stage-in, prefetch, stage-out and unpin are read.
const STAGE_PATHS_HELP: &str = "\
PATH is a namespace path or a local path under a mount of this deployment:
  - a path that lies under a mount point of this deployment that is mounted on this host
    (recorded by `eddy mount` / `eddy start --mount` in the state directory) is translated to
    the namespace path below that mount, e.g. /tmp/mnt/in/x with the mount /tmp/mnt is /in/x;
    a relative path is taken from the current directory and must lie under such a mount;
  - any other absolute path is a namespace path, e.g. /in/x (whether or not it also exists
    on this host).
A path names a file or a whole tree; it must lie under a linked prefix (--backend, --link).";

#[derive(Debug, Args)]
#[command(after_help = STAGE_PATHS_HELP)]
pub struct StageInArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// Keep the staged chunks from eviction until `eddy unpin` (or the end of the deployment).
    #[arg(long)]
    pub pin: bool,
    /// Print one JSON document ({"files": [...], "bytes", "failed", "seconds"}) on stdout
    /// instead of one line per file.
    #[arg(long)]
    pub json: bool,
    /// Files or trees to fetch (namespace paths, or local paths under a mount).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

#[derive(Debug, Args)]
#[command(after_help = STAGE_PATHS_HELP)]
pub struct PrefetchArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// Fetch here and wait: one line per file (or --json), and a non-zero exit if any file
    /// failed. Without it the fetch runs in a process of its own, which `eddy stop` ends.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: print one JSON document ({"files": [...], "bytes", "failed", "seconds"})
    /// on stdout instead of one line per file.
    #[arg(long, requires = "wait")]
    pub json: bool,
    /// The background process itself: PATHs are namespace paths, taken as they are, and the
    /// results go to the end of STATE/prefetch.log.
    #[arg(long, hide = true, conflicts_with_all = ["wait", "json"])]
    pub background: bool,
    /// Files or trees to fetch (namespace paths, or local paths under a mount).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

#[derive(Debug, Args)]
#[command(after_help = STAGE_PATHS_HELP)]
pub struct StageOutArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// Print one JSON document ({"files": [...], "bytes", "failed", "seconds"}) on stdout
    /// instead of one line per file.
    #[arg(long)]
    pub json: bool,
    /// Write this deployment's copy of a file over a backend copy that another writer
    /// changed since this deployment took it (a conflict, shown by `eddy status`); without
    /// it such files are not written back and the command fails naming them.
    #[arg(long)]
    pub overwrite: bool,
    /// Linked prefixes or trees under them to write back (default: every linked prefix).
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

#[derive(Debug, Args)]
#[command(after_help = STAGE_PATHS_HELP)]
pub struct UnpinArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// Trees whose pins to release (default: every linked prefix).
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
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
    /// Let every user use the mount, with the kernel checking mode bits (a job's steps run as
    /// the job's user when root mounts for them). The default when root mounts; a user other
    /// than root needs `user_allow_other` in /etc/fuse.conf.
    #[arg(long, conflicts_with = "owner_only")]
    pub allow_other: bool,
    /// Only the user who mounts may use the mount; any other user gets EACCES (root too, when
    /// another user mounts). The default when a user other than root mounts.
    #[arg(long)]
    pub owner_only: bool,
    /// When reads move a file's atime on this mount: relatime (a read after a change, or a
    /// day after the last update), strictatime (every read) or noatime (never). Default: the
    /// deployment's `atime` setting (relatime).
    #[arg(long, value_name = "MODE", value_parser = ["relatime", "strictatime", "noatime"])]
    pub atime: Option<String>,
    /// Device nodes on the mount open their devices (mount option `dev`; `nodev` without).
    /// Root only. Leave it off where the deployment's user is not trusted with devices:
    /// whoever holds the deployment's secret can make any device node (decision 0061).
    #[arg(long)]
    pub dev: bool,
    /// Set-user-ID and set-group-ID programs on the mount run with their owner's or group's
    /// identity (mount option `suid`; `nosuid` without). Root only; off for the burst buffer
    /// (decision 0061).
    #[arg(long)]
    pub suid: bool,
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

#[derive(Debug, Args)]
pub struct BbArgs {
    /// The site's burst-buffer settings (default /etc/eddy/bb.toml; defaults if missing).
    /// Taken before the phase only: words after it may come from a user (`scontrol show
    /// bbstat ARGS`) and never choose a file root reads.
    #[arg(long, env = "EDDY_BB_SITE", value_name = "FILE")]
    pub site: Option<PathBuf>,
    #[command(subcommand)]
    pub phase: BbPhase,
}

/// The phases of Slurm's burst_buffer/lua plugin (arguments in its order), and the two
/// commands those phases run on a job's nodes through the site's launcher.
#[derive(Debug, Subcommand)]
pub enum BbPhase {
    /// At submit (synchronous, fast): check the script's directives; a refusal names the line.
    JobProcess { script: PathBuf },
    /// Print the pools and their capacity as Slurm's JSON (synchronous, fast).
    Pools,
    /// While the job is pending: make the job's directory; pool mode starts the daemons.
    Setup {
        job: u32,
        uid: u32,
        gid: u32,
        pool: String,
        size: String,
        script: PathBuf,
    },
    /// While the job is pending: check the stage-in sources; pool mode stages in.
    DataIn { job: u32, script: PathBuf },
    /// The capacity the job uses from the pool (nothing to change).
    RealSize { job: u32 },
    /// Write EDDY_MOUNT, EDDY_STATE, ... to the job's environment file (synchronous, fast).
    Paths {
        job: u32,
        script: PathBuf,
        path_file: PathBuf,
    },
    /// Nodes known: node-local mode starts the daemons and stages in; mount on every node.
    PreRun { job: u32, script: PathBuf },
    /// After the job: unmount from its nodes.
    PostRun { job: u32, script: PathBuf },
    /// After the job: write the stage_out trees back to the backend.
    DataOut { job: u32, script: PathBuf },
    /// Stop the daemons, unmount, remove the job's storage and state (idempotent).
    Teardown {
        job: u32,
        script: PathBuf,
        /// "true" (scancel --hurry: no stage-out) or "false".
        hurry: String,
    },
    /// The work of `teardown`, in a session of its own (run by `teardown`, which waits).
    #[command(hide = true)]
    TeardownNow {
        job: u32,
        #[arg(long)]
        hurry: bool,
    },
    /// The run-time grow's watcher of a pool job (started by pre_run, stopped by post_run,
    /// data_out and teardown; decision 0082).
    #[command(hide = true)]
    GrowWatch { job: u32 },
    /// `scontrol show bbstat`: the Eddy jobs of this site.
    Status {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Resolve paths as the user this runs as (run by the phases after dropping to the job's
    /// user): one JSON answer per line.
    #[command(hide = true)]
    ResolvePaths {
        /// Answer each path's bytes (a tree's regular files summed) instead.
        #[arg(long)]
        bytes: bool,
        #[arg(last = true)]
        paths: Vec<PathBuf>,
    },
    /// On a node: mount the deployment of STATE on MOUNT (made if missing; done if mounted).
    NodeMount { state: PathBuf, mount: PathBuf },
    /// On a node: unmount --mount, stop what still serves --root and remove it (idempotent).
    NodeClean {
        #[arg(long)]
        mount: Option<PathBuf>,
        #[arg(long)]
        root: Option<PathBuf>,
    },
}
