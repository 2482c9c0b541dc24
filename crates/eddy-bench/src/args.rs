//! Command-line arguments of `eddy bench`.

use crate::fs::Target;
use clap::{Args, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `eddy bench`: IO500-shaped workloads on any directory.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Run the workloads on a directory (any mounted file system) or, with
    /// `eddy:STATE_DIR[:/dir]`, through the Eddy client library.
    Run(RunArgs),
    /// Start a local Eddy deployment, run the workloads on its mount, through the client
    /// library and on a raw directory on the same storage in the same run, print them with
    /// ratios, stop the deployment.
    Suite(SuiteArgs),
    /// Compare two result files (written with --json) phase by phase.
    Compare(CompareArgs),
    /// Run the workloads at several process counts and draw throughput against process count.
    Scale(ScaleArgs),
    /// Measure the backend tier: cold and warm reads of backend files through an Eddy mount,
    /// stage-in and stage-out, each against its baseline (the backend read or written
    /// directly, a native Eddy file, `cp -r`) in the same run.
    Tier(TierArgs),
    /// Measure early write-back (`eddy writeback`): the teardown stage-out of a job that
    /// writes steadily into a linked prefix, without and with early write-back timed by the
    /// job's end, in the same run, with the backend's raw write rate beside them.
    Writeback(WritebackArgs),
    /// Measure how long `eddy start --local N` takes until every daemon serves and `eddy
    /// stop` until none runs, and the memory of an idle daemon, for each N of --daemons
    /// (decision 0076).
    Deploy(DeployArgs),
    /// Measure what a grow costs a job that writes through it: the writer's rate before,
    /// during and after `eddy grow`, and the bytes moved against the minimum (decision 0081),
    /// with the same writer on the raw storage in the same run.
    Grow(GrowArgs),
    /// Measure DFRA's allocation on a live pool: I/O servers and compute nodes in network
    /// namespaces, each server's link rate-limited with `tc`; scaling, isolation, anomaly
    /// screening and a running deployment grown from 2 servers to 4 as the run-time rule
    /// decides, each against its baseline in the same run (needs root; decisions 0039, 0081,
    /// 0082).
    Alloc(crate::alloc::AllocArgs),
    /// Internal: one rank of a run, started by the coordinator.
    #[command(hide = true)]
    Worker(WorkerArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// What to benchmark: a directory (any mounted file system), or
    /// `eddy:STATE_DIR[:/sub/dir]` to drive the workloads through the Eddy client library in
    /// the namespace of the deployment started with `eddy start --state STATE_DIR` (default
    /// directory `/`). A work directory `eddy-bench.work` is created inside it.
    pub target: Target,
    #[command(flatten)]
    pub work: WorkloadOpts,
    #[command(flatten)]
    pub launch: LaunchOpts,
    #[command(flatten)]
    pub out: OutputOpts,
    /// Name of this run in tables, plots and JSON (default: the target).
    #[arg(long)]
    pub label: Option<String>,
    /// Which phases to run: `all`, `write` (creating phases only; keeps the files for a later
    /// `read`), `read` (everything but the creating phases), or a comma list of phase names.
    #[arg(long, default_value = "all")]
    pub phases: String,
    /// Keep the work directory at the end.
    #[arg(long)]
    pub keep: bool,
}

#[derive(Debug, Args)]
pub struct SuiteArgs {
    /// Directory for the daemons' storage and the raw comparison (default: a fresh directory
    /// on /dev/shm, i.e. tmpfs).
    #[arg(long)]
    pub storage: Option<PathBuf>,
    /// Number of local daemons.
    #[arg(long, default_value_t = 3)]
    pub daemons: u32,
    /// The netns host layout (decision 0042): N hosts, each a network namespace with one
    /// daemon, a mount of its own and the ranks r with r mod N = its index, so that local and
    /// remote mean what they mean on a cluster (needs root and iproute2; replaces --daemons).
    /// Default: the single-host layout.
    #[arg(long, value_name = "N", conflicts_with = "daemons")]
    pub hosts: Option<u32>,
    /// With --hosts: limit every host's link to this rate with `tc tbf`, both directions
    /// (e.g. `10gbit`). Default: no limit.
    #[arg(long, value_name = "RATE", requires = "hosts")]
    pub link_rate: Option<String>,
    /// Copies of everything (`eddy start --replicas`); default: eddy start's (1).
    #[arg(long, value_name = "R")]
    pub replicas: Option<usize>,
    /// Run the raw storage first (default: Eddy first).
    #[arg(long)]
    pub raw_first: bool,
    /// Skip the third run, through the client library (`eddy:STATE`) on the same deployment.
    #[arg(long)]
    pub no_client: bool,
    /// Add a run through libeddy_preload.so (`preload:STATE`: the workers' plain file calls
    /// intercepted, no FUSE) on the same deployment. The library must be beside `eddy` (or
    /// named by EDDY_PRELOAD_LIB).
    #[arg(long)]
    pub preload: bool,
    /// Add a run through libeddy, the C library (`c:STATE`: the workers call its C
    /// functions; decision 0066), on the same deployment, after the client library's run,
    /// and print its ratio to that run phase by phase.
    #[arg(long)]
    pub client_c: bool,
    /// Add the Python package's benchmark (decision 0067) on the same deployment, after the
    /// other runs: a 1 GiB file read whole into a NumPy array by PYTHON against the Rust
    /// library, and a zarr array of 1,000 chunks written and read through `eddy://` against
    /// the same array in a directory of the raw storage, with their ratios. PYTHON must
    /// import eddy (the wheel of `make wheel`), numpy, zarr 2 and fsspec.
    #[arg(long, value_name = "PYTHON")]
    pub client_py: Option<PathBuf>,
    /// Configuration file for the deployment (`eddy start --config`), e.g. `checksums =
    /// false` to measure what the checksums cost.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Placement of the new files (`placement` in the deployment's configuration, decision
    /// 0043) in every deployment the suite starts, overriding what --config or a --variant's
    /// file says; unset: theirs (default hashed). With `local` the suite makes ior-hard's
    /// directory `user.eddy.placement = hashed` (its file is shared; decision 0047).
    #[arg(long, value_name = "hashed|local", value_parser = ["hashed", "local"])]
    pub placement: Option<String>,
    /// After each Eddy run, save what the daemons counted (`eddy stats --json`: per daemon
    /// its clients and the files it served) to DIR/LABEL.json, the last round's; the counts
    /// add up over the runs of one deployment. Shows where each run's bytes went.
    #[arg(long, value_name = "DIR")]
    pub daemon_stats: Option<PathBuf>,
    /// Measure Eddy once per wire protection (`eddy start --wire`), e.g. `clear,mac,sealed`:
    /// a deployment each, in that order, on the same storage and beside the same raw run;
    /// every later setting is also compared with the first (decision 0022).
    #[arg(long, value_name = "MODES", value_delimiter = ',')]
    pub wire: Vec<String>,
    /// Measure Eddy once per configuration, each as `NAME=FILE` (`NAME=` alone: the
    /// defaults), e.g. `--variant on= --variant off=nocount.toml`: a deployment each, labelled
    /// `eddy[NAME]` etc., every later one compared with the first (not with --wire).
    #[arg(long, value_name = "NAME=FILE", conflicts_with = "wire")]
    pub variant: Vec<String>,
    /// Rounds of the whole suite (each variant, or wire setting, once per round, the order
    /// reversed every other round; raw storage once per round): each figure is the median of
    /// the rounds, so that small differences stand out of the noise of single runs.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub rounds: u32,
    #[command(flatten)]
    pub work: WorkloadOpts,
    #[command(flatten)]
    pub launch: LaunchOpts,
    #[command(flatten)]
    pub out: OutputOpts,
}

#[derive(Debug, Args)]
pub struct DeployArgs {
    /// Numbers of local daemons to start, one deployment after the other, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "256,1024")]
    pub daemons: Vec<u32>,
    /// Directory for the daemons' storage roots and the state directory (a fresh
    /// sub-directory, removed at the end); default /var/tmp. Roots on tmpfs hold each
    /// daemon's metadata reserve in memory: see --reserve.
    #[arg(long, value_name = "DIR")]
    pub storage: Option<PathBuf>,
    /// Each daemon's metadata reserve (`meta_reserve_bytes`; suffixes K, M, G): small, since
    /// a thousand daemons of the default 64 MiB on tmpfs would take 64 GiB of memory.
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = parse_bytes)]
    pub reserve: u64,
    /// How long the daemons stay idle before their memory is read, in seconds.
    #[arg(long, default_value_t = 2)]
    pub idle_s: u64,
    /// Write the results as JSON to this file (`-` = stdout).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct GrowArgs {
    /// Daemons the deployment starts with.
    #[arg(long, default_value_t = 3)]
    pub daemons: u32,
    /// Daemons the grow adds.
    #[arg(long, default_value_t = 3)]
    pub add: u32,
    /// Bytes of the data set the writer rewrites (suffixes K, M, G).
    #[arg(long, value_name = "BYTES", default_value = "512M", value_parser = parse_bytes)]
    pub data: u64,
    /// Bytes of each file of the data set.
    #[arg(long, value_name = "BYTES", default_value = "8M", value_parser = parse_bytes)]
    pub file_size: u64,
    /// The deployment's chunk size, and the writer's request size.
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = parse_bytes)]
    pub chunk_size: u64,
    /// Seconds the writer's rate is measured before the grow, and after it.
    #[arg(long, default_value_t = 5)]
    pub window_s: u64,
    /// The deployment's `move_busy_bandwidth_bytes`: how fast each daemon pushes what moves
    /// while it serves the writer; default the configuration's (0: `move_bandwidth_bytes`).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub move_busy_bandwidth: Option<u64>,
    /// Directory for the daemons' storage roots and the raw storage's files (a fresh
    /// sub-directory, removed at the end); default /var/tmp.
    #[arg(long, value_name = "DIR")]
    pub storage: Option<PathBuf>,
    /// Write the results as JSON to this file (`-` = stdout).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct TierArgs {
    /// Directory for the daemons' storage (the cache), the mount point and the local copy of
    /// `cp -r`; default /var/tmp (a disk whose page cache can be dropped, unlike tmpfs).
    #[arg(long, value_name = "DIR")]
    pub storage: Option<PathBuf>,
    /// The backend (parallel file system) directory: a plain directory or, e.g., a GlusterFS
    /// mount point. The benchmark works in a fresh sub-directory of it and removes it at the
    /// end. Default: a fresh directory under --storage.
    #[arg(long, value_name = "DIR")]
    pub backend: Option<PathBuf>,
    /// Bytes moved by each side of each phase in one round (suffixes K, M, G, T: powers of
    /// 1024; e.g. 256M, 1.5G).
    #[arg(long, value_name = "BYTES", default_value = "256M", value_parser = parse_bytes)]
    pub size: u64,
    /// Files the read and stage-out phases spread --size over.
    #[arg(long, default_value_t = 8)]
    pub files: u32,
    /// Files of the tree staged in (and copied with `cp -r`), spread over --tree-dirs
    /// directories; together they hold --size bytes.
    #[arg(long, default_value_t = 64)]
    pub tree_files: u32,
    /// Directories of the staged tree.
    #[arg(long, default_value_t = 4)]
    pub tree_dirs: u32,
    /// Number of local daemons.
    #[arg(long, default_value_t = 3)]
    pub daemons: u32,
    /// Configuration file for the deployment (`eddy start --config`), e.g. to try another
    /// `chunk_size` or `readahead_chunks`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Rounds of each phase, the two sides alternating which goes first, each round on files
    /// of its own where needed; a side's figure is its median time.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Write the results as JSON to this file (`-` = stdout; the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Run the stream phases instead of the usual ones (decision 0072): 8 readers at once,
    /// each its own cold backend file, sequential and strided, through the mount and the
    /// library, stream hints on and off, against the direct backend read; --size is what
    /// the 8 readers' files hold together.
    #[arg(long)]
    pub streams: bool,
    /// Run the merging phase instead (decision 0074): --files ranks write one shared file of
    /// about --size bytes in 47,008-byte records (ior-hard), through the client library, on
    /// two deployments side by side, one with the daemons' per-object merging on and one
    /// with it off; each one's stage-out is timed and its backend writes counted.
    #[arg(long, conflicts_with = "streams")]
    pub merging: bool,
}

#[derive(Debug, Args)]
pub struct WritebackArgs {
    /// Directory for the daemons' storage and the mount point; default /var/tmp.
    #[arg(long, value_name = "DIR")]
    pub storage: Option<PathBuf>,
    /// The backend directory (e.g. a GlusterFS mount point); the benchmark works in a fresh
    /// sub-directory of it and removes it at the end. Default: a fresh directory under
    /// --storage.
    #[arg(long, value_name = "DIR")]
    pub backend: Option<PathBuf>,
    /// Bytes the job writes in each run (W; suffixes K, M, G: powers of 1024).
    #[arg(long, value_name = "BYTES", default_value = "256M", value_parser = parse_bytes)]
    pub size: u64,
    /// Seconds the job spreads its writes over (T); its predicted end is its start + T.
    #[arg(long, value_name = "SECONDS", default_value_t = 20.0)]
    pub seconds: f64,
    /// Files the job writes, round-robin, 1 MiB at a time.
    #[arg(long, default_value_t = 4)]
    pub files: u32,
    /// Number of local daemons.
    #[arg(long, default_value_t = 3)]
    pub daemons: u32,
    /// Configuration file for the deployment (`eddy start --config`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Rounds, the two runs alternating which goes first; a run's figure is its median.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// `eddy writeback --margin`: seconds kept in hand.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0)]
    pub margin: f64,
    /// A small, fast run (8 MiB over 3 s, 2 files, 1 round): checks that it works.
    #[arg(long)]
    pub quick: bool,
    /// Write the results as JSON to this file (`-` = stdout; the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

pub use eddy_config::parse_bytes;

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Baseline result file.
    pub a: PathBuf,
    /// Result file compared with the baseline (ratio = B / A). If omitted, A must hold two
    /// runs (as written by `suite`) and its second run is compared with its first.
    pub b: Option<PathBuf>,
    /// Draw the comparison to this file (.svg or .png).
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ScaleArgs {
    /// What to benchmark: a directory or `eddy:STATE_DIR[:/sub/dir]` (see `run`).
    pub target: Target,
    /// Process counts to run, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub procs_list: Vec<u32>,
    #[command(flatten)]
    pub work: WorkloadOpts,
    /// Write the results (one run per process count) as JSON to this file (`-` = stdout).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw throughput against process count to this file (.svg or .png).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    #[command(flatten)]
    pub launch: LaunchOpts,
}

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Coordinator address.
    #[arg(long)]
    pub connect: String,
    /// Token proving the worker was started by this coordinator.
    #[arg(long)]
    pub token: String,
    /// Rank; under mpirun it is taken from OMPI_COMM_WORLD_RANK / PMIX_RANK.
    #[arg(long)]
    pub rank: Option<u32>,
}

/// What the workloads do and how big they are.
#[derive(Debug, Clone, Args, Serialize, Deserialize, PartialEq)]
pub struct WorkloadOpts {
    /// Number of worker processes (ranks).
    #[arg(long, default_value_t = 2)]
    pub procs: u32,
    /// Multiplies every size and count below (e.g. 10 on a cluster, 0.01 for a smoke test).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Workloads to run, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ior-easy,ior-hard,mdtest-easy,mdtest-hard,find,rnd4k,smallfiles"
    )]
    pub workloads: Vec<Workload>,
    /// I/O mode of ior-easy.
    #[arg(long, default_value = "n-n")]
    pub easy_mode: IoMode,
    /// Transfer size of ior-easy in bytes.
    #[arg(long, default_value_t = 2 * 1024 * 1024)]
    pub easy_xfer: u64,
    /// Bytes per rank written by ior-easy (before --scale).
    #[arg(long, default_value_t = 128 * 1024 * 1024)]
    pub easy_bytes: u64,
    /// I/O mode of ior-hard.
    #[arg(long, default_value = "n-1")]
    pub hard_mode: IoMode,
    /// Transfer size of ior-hard in bytes.
    #[arg(long, default_value_t = 47008)]
    pub hard_xfer: u64,
    /// Transfers per rank of ior-hard (before --scale).
    #[arg(long, default_value_t = 1024)]
    pub hard_segments: u64,
    /// Empty files per rank of mdtest-easy (before --scale).
    #[arg(long, default_value_t = 4000)]
    pub md_easy_files: u64,
    /// Files per rank of mdtest-hard (before --scale).
    #[arg(long, default_value_t = 2000)]
    pub md_hard_files: u64,
    /// Size of each mdtest-hard file.
    #[arg(long, default_value_t = 3901)]
    pub md_hard_bytes: u64,
    /// Random 4 KiB reads per rank of rnd4k (before --scale).
    #[arg(long, default_value_t = 8000)]
    pub rnd4k_ops: u64,
    /// Small files per rank of smallfiles (before --scale).
    #[arg(long, default_value_t = 2000)]
    pub small_files: u64,
    /// Size of each small file.
    #[arg(long, default_value_t = 8192)]
    pub small_bytes: u64,
    /// Stop each creating phase after this many seconds (IO500's stonewall): every rank then
    /// continues to the largest count any rank reached, and later phases use that count;
    /// rnd4k-read stops at this time too. 0 = off. Default: off for `run` and `scale`, 20 s
    /// for `suite`.
    #[arg(long)]
    pub stonewall: Option<f64>,
    /// Whose files the read and stat phases read back: `next`, the next rank's (IO500's
    /// reordered tasks, `-C`: in the host layout another host's, never a local read), or
    /// `own`, each rank its own (IOR without `-C`: under `placement = "local"` the data of
    /// its own host).
    #[arg(long, value_enum, default_value = "next")]
    #[serde(default)]
    pub readback: Readback,
}

/// Whose files a rank reads back (`--readback`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Readback {
    /// The next rank's.
    #[default]
    Next,
    /// Its own.
    Own,
}

/// How workers are launched.
#[derive(Debug, Clone, Args)]
pub struct LaunchOpts {
    /// Launch the workers as MPI ranks with OpenMPI's `mpirun -np N` (same command on a cluster).
    #[arg(long)]
    pub mpi: bool,
    /// Address the coordinator listens on for its workers (use 0.0.0.0:0 across nodes).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Extra argument for mpirun (repeatable), e.g. --mpirun-arg=--oversubscribe.
    #[arg(long = "mpirun-arg", allow_hyphen_values = true)]
    pub mpirun_args: Vec<String>,
    /// Start each worker through this template instead (`{host}`, `{cmd}` words, as `eddy
    /// start --launcher`), e.g. `ip netns exec {host} {cmd}`: rank r runs on host
    /// r mod n of --worker-hosts, so that one job's ranks span those nodes.
    #[arg(
        long,
        value_name = "TEMPLATE",
        requires = "worker_hosts",
        conflicts_with = "mpi"
    )]
    pub worker_launcher: Option<String>,
    /// The hosts of --worker-launcher, comma separated.
    #[arg(
        long,
        value_name = "HOSTS",
        value_delimiter = ',',
        requires = "worker_launcher"
    )]
    pub worker_hosts: Vec<String>,
}

impl LaunchOpts {
    /// Workers started as local children, listening on loopback.
    pub fn local() -> LaunchOpts {
        LaunchOpts {
            mpi: false,
            listen: "127.0.0.1:0".into(),
            mpirun_args: Vec::new(),
            worker_launcher: None,
            worker_hosts: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct OutputOpts {
    /// Write the results as JSON to this file (`-` = stdout; the table then goes to stderr).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw the per-phase results to this file (.svg or .png).
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    IorEasy,
    IorHard,
    MdtestEasy,
    MdtestHard,
    Find,
    Rnd4k,
    Smallfiles,
}

/// File sharing mode of an IOR workload (DFRA's Table 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
pub enum IoMode {
    /// N processes, N files.
    #[value(name = "n-n")]
    #[serde(rename = "n-n")]
    NN,
    /// N processes, one shared file.
    #[value(name = "n-1")]
    #[serde(rename = "n-1")]
    N1,
    /// One process does all the I/O on one file.
    #[value(name = "1-1")]
    #[serde(rename = "1-1")]
    OneOne,
}
