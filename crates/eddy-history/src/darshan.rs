//! Darshan logs → job profiles (`eddy history import`), read with the field's own reader,
//! PyDarshan. No parser of the binary format here: `darshan_profile.py` (embedded) runs in a
//! Python that has PyDarshan and prints each log's facts as JSON ([`DarshanFacts`]); this
//! module maps them onto a [`JobProfile`]. The rules (docs/decisions/0034-darshan-import.md):
//!
//! - Volume: POSIX bytes, plus STDIO's (a layer of its own: Darshan's POSIX module does not
//!   see libc's buffered writes), plus MPI-IO's only for files no POSIX record names (MPI-IO
//!   sits on POSIX: counting both would count its bytes twice).
//! - Files: distinct files of those layers that moved bytes; shared: those of them named by
//!   records of more than one process (a record of rank -1 stands for every rank).
//! - Processes with I/O: distinct ranks of records that moved bytes, rank -1 = all `nprocs`.
//!   I/O mode: 1-1 if one process did it all, N-1 if most bytes went to shared files, else
//!   N-N.
//! - Operations: data = reads + writes (POSIX_READS/WRITES, STDIO_READS/WRITES, MPI-IO's
//!   independent, collective, split and non-blocking ones); metadata = POSIX_OPENS, _STATS,
//!   _SEEKS, _FSYNCS, _FDSYNCS, _RENAME_SOURCES; STDIO_OPENS, _FDOPENS, _SEEKS, _FLUSHES;
//!   MPIIO_INDEP_OPENS, _COLL_OPENS, _SYNCS.
//! - Request sizes: each Darshan bin (≤100, ≤1K, ≤10K, ≤100K, ≤1M, ≤4M, ≤10M, ≤100M, ≤1G
//!   and over 1G; bounds inclusive) goes whole into the power-of-two bucket of its largest
//!   value (a request of exactly the bound, the common case, lands in its true bucket;
//!   others are overstated by at most the bin's width).
//! - Rates: mean = amount / job run time; peak = amount / I/O time, the I/O time being
//!   libdarshan-util's "time by slowest rank" summed over the layers counted (capped at the
//!   run time); with a DXT trace, also at least the busiest second of the trace.
//! - Per node: Darshan names ranks, not hosts, so the per-node bandwidth is per process
//!   (bytes over the seconds it spent in I/O calls); a node running k ranks moves up to k
//!   times that. Hosts, `io_nodes` and the time series come only from a DXT trace.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use eddy_proto::stats::Histogram;
use serde::{Deserialize, Serialize};

use crate::profile::{IoMode, JobProfile, SeriesPoint, Source};

/// The helper run by the Python interpreter (on its stdin).
const HELPER: &str = include_str!("darshan_profile.py");

/// Names the Python that has PyDarshan; else [`DEFAULT_PYTHON`].
pub const PYTHON_ENV: &str = "EDDY_PYDARSHAN";

/// Where `scripts/install-deps.sh` puts the PyDarshan venv's interpreter.
pub const DEFAULT_PYTHON: &str = "/opt/eddy/pydarshan-venv/bin/python";

/// The largest request size of each of Darshan's size bins (its bounds are inclusive), in the
/// order of the POSIX_SIZE_READ_* counters; the last bin (> 1 GiB) by its smallest value.
pub const DARSHAN_BIN_MAX: [u64; 10] = [
    100,
    1 << 10,
    10 << 10,
    100 << 10,
    1 << 20,
    4 << 20,
    10 << 20,
    100 << 20,
    1 << 30,
    (1 << 30) + 1,
];

/// What `darshan_profile.py` reports of one log (every number from PyDarshan).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DarshanFacts {
    pub path: String,
    pub job_id: String,
    pub uid: u64,
    pub nprocs: u32,
    /// Unix seconds; PyDarshan's run time of the job, seconds.
    pub start: f64,
    pub run_time: f64,
    /// The executable and its arguments as the log has them, and their SHA-256.
    pub exe: String,
    pub exe_sha256: Option<String>,
    pub modules: Vec<String>,
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub files: u64,
    pub shared_files: u64,
    /// Bytes moved to and from shared files.
    pub shared_bytes: u64,
    pub io_processes: u32,
    pub data_ops: u64,
    pub metadata_ops: u64,
    /// Requests per Darshan size bin (see [`DARSHAN_BIN_MAX`]).
    pub read_sizes: Vec<u64>,
    pub write_sizes: Vec<u64>,
    /// Seconds of I/O by the slowest rank, summed over the layers counted.
    pub io_time: f64,
    /// Bytes per second of I/O time of the fastest process, and of all processes together.
    pub peak_process_bandwidth: f64,
    pub mean_process_bandwidth: f64,
    pub dxt: Option<DxtFacts>,
}

/// The DXT POSIX trace of a log: hosts that did I/O, bytes and operations per time bin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DxtFacts {
    pub hosts: Vec<String>,
    pub bins: Vec<DxtBin>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DxtBin {
    /// Seconds from the job's start, and the bin's width.
    pub t: f64,
    pub seconds: f64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub ops: u64,
}

/// The Python with PyDarshan: `EDDY_PYDARSHAN`, else the venv of `scripts/install-deps.sh`.
pub fn interpreter() -> Result<PathBuf> {
    let (path, from) = match std::env::var_os(PYTHON_ENV) {
        Some(p) if !p.is_empty() => (PathBuf::from(p), PYTHON_ENV),
        _ => (PathBuf::from(DEFAULT_PYTHON), "the default"),
    };
    // privileged-path: Darshan logs an administrator names on the command line
    if !path.is_file() {
        bail!(
            "no Python with PyDarshan at {} ({from}): install it with scripts/install-deps.sh \
             or set {PYTHON_ENV} to a python that can `import darshan`",
            path.display()
        );
    }
    Ok(path)
}

/// Reads each Darshan log with PyDarshan and makes its job profile.
pub fn import_logs(paths: &[PathBuf]) -> Result<Vec<JobProfile>> {
    Ok(read_facts(paths)?.iter().map(profile_from_facts).collect())
}

/// The facts of each log, as PyDarshan reads them (one run of the helper for all logs).
pub fn read_facts(paths: &[PathBuf]) -> Result<Vec<DarshanFacts>> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    read_facts_with(&interpreter()?, paths)
}

/// [`read_facts`] with the given Python.
pub fn read_facts_with(python: &Path, paths: &[PathBuf]) -> Result<Vec<DarshanFacts>> {
    for p in paths {
        // privileged-path: Darshan logs an administrator names on the command line
        if !p.is_file() {
            bail!("{}: no such Darshan log", p.display());
        }
    }
    let json = run_helper(python, paths)?;
    let facts: Vec<DarshanFacts> =
        serde_json::from_str(&json).context("the PyDarshan helper's output is not its JSON")?;
    if facts.len() != paths.len() {
        bail!(
            "the PyDarshan helper reported {} logs of {}",
            facts.len(),
            paths.len()
        );
    }
    Ok(facts)
}

/// The only variable of the helper's environment: `PATH`, the system's directories.
const HELPER_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Runs the helper with `python` (its text on stdin, the logs as arguments); its stdout.
///
/// Whoever imports may be root, and the logs may lie in a directory anyone can write: the
/// interpreter runs isolated (`-I`: neither the working directory nor the script's is on
/// `sys.path`, `PYTHON*` variables and the user's site directory are ignored), in `/`, with an
/// environment of `PATH` only, so no module planted beside the logs or named by the caller's
/// environment is imported (decision 0056). The logs are named by absolute paths.
fn run_helper(python: &Path, paths: &[PathBuf]) -> Result<String> {
    let mut absolute = Vec::with_capacity(paths.len());
    for p in paths {
        absolute.push(
            std::path::absolute(p).with_context(|| format!("{}: no absolute path", p.display()))?,
        );
    }
    let mut child = Command::new(python)
        .args(["-I", "-"])
        .args(&absolute)
        .current_dir("/")
        .env_clear()
        .env("PATH", HELPER_PATH)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(HELPER.as_bytes())
            .with_context(|| format!("cannot feed the helper to {}", python.display()))?;
    }
    let out = child
        .wait_with_output()
        .with_context(|| format!("{} did not finish", python.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        let why = tail.into_iter().rev().collect::<Vec<_>>().join("\n");
        if out.status.code() == Some(3) {
            bail!(
                "{why}\ninstall PyDarshan with scripts/install-deps.sh or set {PYTHON_ENV} to a \
                 python that can `import darshan`"
            );
        }
        bail!(
            "reading Darshan logs with {} failed ({}): {why}",
            python.display(),
            out.status
        );
    }
    String::from_utf8(out.stdout).context("the PyDarshan helper printed non-UTF-8")
}

/// The profiles of the helper's JSON output (a list of [`DarshanFacts`]).
pub fn profiles_from_json(json: &str) -> Result<Vec<JobProfile>> {
    let facts: Vec<DarshanFacts> =
        serde_json::from_str(json).context("not the PyDarshan helper's JSON")?;
    Ok(facts.iter().map(profile_from_facts).collect())
}

/// One log's job profile (the rules are in the module's header).
pub fn profile_from_facts(f: &DarshanFacts) -> JobProfile {
    let start = f.start;
    let end = start + f.run_time.max(0.0);
    let volume = f.read_bytes.saturating_add(f.written_bytes);
    let run = (end - start).max(0.001);
    // Seconds of I/O: the slowest rank's, never more than the run (layers may overlap).
    let active = if f.io_time > 0.0 {
        f.io_time.min(run)
    } else {
        run
    };
    let series = f.dxt.as_ref().map(series_of).unwrap_or_default();
    let busiest_bps = series
        .iter()
        .map(|p| p.read_bps + p.write_bps)
        .fold(0.0, f64::max);
    let busiest_iops = series.iter().map(|p| p.iops).fold(0.0, f64::max);
    let hosts = f.dxt.as_ref().map(|d| d.hosts.clone()).unwrap_or_default();
    JobProfile {
        key: format!("darshan:{}@{}", f.job_id, start.floor() as i64),
        source: Source::Darshan,
        job_id: Some(f.job_id.clone()),
        job_name: exe_name(&f.exe),
        // Darshan records a uid; a name looked up here would be this host's, not the log's.
        user: f.uid.to_string(),
        script_hash: f.exe_sha256.clone(),
        io_nodes: f.dxt.as_ref().map(|d| d.hosts.len() as u32),
        nodes: hosts,
        start,
        end,
        read_bytes: f.read_bytes,
        written_bytes: f.written_bytes,
        io_processes: f.io_processes,
        peak_node_bandwidth: f.peak_process_bandwidth,
        mean_node_bandwidth: f.mean_process_bandwidth,
        peak_bandwidth: (volume as f64 / active).max(busiest_bps),
        mean_bandwidth: volume as f64 / run,
        peak_iops: (f.data_ops as f64 / active).max(busiest_iops),
        mean_iops: f.data_ops as f64 / run,
        peak_metadata_rate: f.metadata_ops as f64 / active,
        mean_metadata_rate: f.metadata_ops as f64 / run,
        mean_metadata_queue: None,
        io_mode: io_mode(volume, f.shared_bytes, f.io_processes),
        files: f.files,
        shared_files: f.shared_files,
        data_ops: f.data_ops,
        metadata_ops: f.metadata_ops,
        request_sizes: request_sizes(&f.read_sizes, &f.write_sizes),
        daemons: Vec::new(),
        series,
        allocation: None,
    }
}

/// 1-1 if one process did all the I/O, N-1 if most bytes went to shared files, else N-N.
pub fn io_mode(volume: u64, shared_bytes: u64, io_processes: u32) -> IoMode {
    if volume == 0 || io_processes == 0 {
        IoMode::None
    } else if io_processes == 1 {
        IoMode::OneOne
    } else if shared_bytes.saturating_mul(2) > volume {
        IoMode::N1
    } else {
        IoMode::NN
    }
}

/// Darshan's size bins (reads and writes) onto power-of-two buckets: each bin whole into the
/// bucket of its largest value ([`DARSHAN_BIN_MAX`]); trailing empty buckets dropped.
pub fn request_sizes(read: &[u64], write: &[u64]) -> Vec<u64> {
    let mut h = Histogram::default();
    for (i, max) in DARSHAN_BIN_MAX.iter().enumerate() {
        let n = read.get(i).copied().unwrap_or(0) + write.get(i).copied().unwrap_or(0);
        if n > 0 {
            let b = Histogram::bucket(*max);
            if h.counts.len() <= b {
                h.counts.resize(b + 1, 0);
            }
            h.counts[b] += n;
        }
    }
    h.counts
}

/// The DXT bins as the profile's time series (one "daemon", 0: the job as a whole).
fn series_of(d: &DxtFacts) -> Vec<SeriesPoint> {
    d.bins
        .iter()
        .filter(|b| b.seconds > 0.0)
        .map(|b| SeriesPoint {
            t: b.t,
            seconds: b.seconds,
            daemon: 0,
            read_bps: b.read_bytes as f64 / b.seconds,
            write_bps: b.write_bytes as f64 / b.seconds,
            iops: b.ops as f64 / b.seconds,
            metadata_ops_per_s: 0.0,
            queue_mean: 0.0,
        })
        .collect()
}

/// The job name: the executable's file name (the first word of the log's command line).
fn exe_name(exe: &str) -> Option<String> {
    let first = exe.split_whitespace().next()?;
    let name = first.rsplit('/').next().unwrap_or(first);
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_go_to_the_bucket_of_their_largest_value() {
        // ≤100 → [64,128) = bucket 7; ≤1K → [1K,2K) = 11; ≤1M → 21; ≤4M → 23; >1G → 31.
        let read = [1, 2, 0, 0, 3, 4, 0, 0, 0, 5];
        let write = [10, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let h = request_sizes(&read, &write);
        assert_eq!(h.len(), 32);
        assert_eq!(h[7], 11);
        assert_eq!(h[11], 2);
        assert_eq!(h[21], 3);
        assert_eq!(h[23], 4);
        assert_eq!(h[31], 5);
        assert_eq!(h.iter().sum::<u64>(), 25);
        assert!(request_sizes(&[0; 10], &[0; 10]).is_empty());
    }

    #[test]
    fn modes() {
        assert_eq!(io_mode(0, 0, 0), IoMode::None);
        assert_eq!(io_mode(100, 100, 1), IoMode::OneOne);
        assert_eq!(io_mode(100, 51, 4), IoMode::N1);
        assert_eq!(io_mode(100, 50, 4), IoMode::NN);
    }

    #[test]
    fn exe_names() {
        assert_eq!(exe_name("/a/b/ior -a HDF5").as_deref(), Some("ior"));
        assert_eq!(exe_name("ior").as_deref(), Some("ior"));
        assert_eq!(exe_name("  "), None);
    }
}
