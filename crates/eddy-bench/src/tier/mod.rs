//! `eddy bench tier`: the backend tier against the backend used directly, in one run.
//!
//! The backend work directory (a fresh sub-directory of `--backend`, or of the storage) gets
//! pattern files written and fsynced directly; a local deployment is started with
//! `eddy start --local N --link /tier=WORK --mount M`, so `/tier` is linked to it while the
//! rest of the namespace (`/scratch`) is transient Eddy storage. Then, each phase with its
//! baseline in the same run:
//!
//! | phase | baseline | eddy |
//! |---|---|---|
//! | `cold-read` | 1 MiB reads of the backend files | the same files through `M/tier`, never touched by Eddy before (import, fetch on a miss, read-ahead) |
//! | `cold-read-ram` | the same, backend files in the page cache | the same, other files never touched by Eddy |
//! | `warm-read` | a native `/scratch` Eddy file of the same size through the mount | the `cold-read` files again, now cached by Eddy |
//! | `warm-read-ram` | the same, Eddy's chunk files in the page cache | the same |
//! | `stage-in` | `cp -r` of a tree from the backend to a local directory | `eddy stage-in` of the same tree |
//! | `prefetched-read` | the warm read of another tree through `M/tier`, right after the Eddy side | that tree's first read through `M/tier` after `eddy prefetch --wait` of it (not counted) |
//! | `stage-out` | writing the bytes directly into the backend, fsync per file | `eddy stage-out` of the same bytes written into `M/tier` |
//!
//! Each phase runs `--rounds` times, the two sides alternating which goes first (but in
//! `prefetched-read`, whose Eddy side is the first read after the prefetch), each round on
//! files of its own where a side changes what it reads (cold files, trees, staged-out files);
//! a side's figure is its median time. The page cache is dropped (`sync; echo 3 >
//! /proc/sys/vm/drop_caches`) before each side of `cold-read`, `warm-read`, `stage-in` and
//! `prefetched-read`;
//! where that is refused, the benchmark's own files get `posix_fadvise(DONTNEED)` instead and
//! the output says so. Every byte read is checked against the pattern it was written with
//! (`pattern.rs`), the staged tree, the copy and the files staged out included; the time of
//! the checks is not counted. Ratios are eddy / baseline throughput (higher is better); goals
//! are printed, never asserted.
//!
//! `run` (here) prepares the run and writes the report; `phases.rs` holds one function per
//! phase and what they share (the paths, the sides of a round, the figures of `eddy status`),
//! `files.rs` the benchmark's pattern files and their timed reads and writes, `host.rs` what
//! is asked of the machine (page cache, free room, CPU use, file system types) and `table.rs`
//! the human output.

mod files;
pub(crate) mod host;
mod merging;
mod phases;
mod streams;
mod table;
pub mod writeback;

use crate::args::TierArgs;
use crate::interrupt;
use crate::suite::Deployment;
use anyhow::{bail, Context};
use files::{files, flat_set, tree_set};
use host::{cpu_busy_pct, fs_type, read_ahead_kb, PageCache};
use phases::{measure, Ctx, Paths, Sets};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;
use table::table;

/// Identifies the JSON format of `eddy bench tier`.
pub const FORMAT: &str = "eddy-bench-tier/1";
/// Size of one read or write call, like `dd bs=1M`.
const IO_BYTES: usize = 1 << 20;
/// Largest buffer of a file's bytes kept between checks: the clock stops every SEGMENT bytes
/// of a larger file while they are verified or generated.
const SEGMENT: usize = 64 << 20;
/// Default storage: a disk, so that dropping the page cache makes a read hit the device.
const DEFAULT_STORAGE: &str = "/var/tmp";

/// `--storage`, else /var/tmp (a disk whose page cache can be dropped), else the temporary
/// directory.
pub(super) fn storage_or_default(given: Option<&PathBuf>) -> PathBuf {
    given.cloned().unwrap_or_else(|| {
        let disk = PathBuf::from(DEFAULT_STORAGE);
        if disk.is_dir() {
            disk
        } else {
            std::env::temp_dir()
        }
    })
}
/// The linked prefix in the namespace and the transient directory beside it.
const LINK_PREFIX: &str = "/tier";
const SCRATCH: &str = "scratch";
const DROP_CACHES: &str = "/proc/sys/vm/drop_caches";
const MIB: f64 = 1024.0 * 1024.0;
/// CPU use by other work before the start above which the output mentions it.
const BUSY_NOTE_PCT: f64 = 10.0;

/// The JSON file of a tier run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierReport {
    pub format: String,
    /// The backend work directory (a fresh sub-directory of --backend or of the storage).
    pub backend: String,
    /// File system type of the backend (from /proc/self/mountinfo), e.g. ext4, fuse.glusterfs.
    pub backend_fs: String,
    /// Directory holding the daemons' storage, the mount point and the local copy.
    pub storage: String,
    pub daemons: u32,
    /// The configuration file given to `eddy start` (--config), if any.
    pub config: Option<String>,
    /// Bytes moved by each side of each phase in one round.
    pub size_bytes: u64,
    /// Rounds of each phase (a side's figure is its median time).
    pub rounds: u32,
    pub files: u32,
    pub tree_files: u32,
    pub tree_dirs: u32,
    /// Whether /proc/sys/vm/drop_caches worked (else posix_fadvise was used).
    pub page_cache_dropped: bool,
    /// How the page cache was emptied, in words.
    pub page_cache: String,
    /// Read-ahead of the Eddy mount's backing device (/sys/class/bdi/MAJ:MIN/read_ahead_kb):
    /// how large the reads the kernel sends to Eddy for a sequential reader get.
    pub mount_read_ahead_kb: Option<u64>,
    /// CPUs of this host, and the percentage of them busy in the second before the run
    /// started (other work).
    pub cpus: usize,
    pub cpu_busy_pct: Option<f64>,
    pub started_unix: u64,
    pub phases: Vec<TierPhase>,
    /// Remarks worth knowing beside the figures.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierPhase {
    pub phase: String,
    /// What the baseline side does.
    pub baseline: String,
    /// What the Eddy side does.
    pub eddy: String,
    /// Bytes of each side in one round.
    pub bytes: u64,
    /// Median time of each side over the rounds.
    pub baseline_seconds: f64,
    pub eddy_seconds: f64,
    /// Time of each side in each round.
    pub baseline_rounds_s: Vec<f64>,
    pub eddy_rounds_s: Vec<f64>,
    pub baseline_mib_s: f64,
    pub eddy_mib_s: f64,
    /// eddy / baseline throughput (= baseline time / eddy time).
    pub ratio: f64,
    /// The ratio the tier aims for, if any (informative, never checked).
    pub goal: Option<f64>,
    pub unit: String,
    /// Bytes the Eddy side read from (reads, stage-in) or wrote to (stage-out) the backend
    /// in all rounds, from the tier figures of `eddy status --json`; None if not known.
    pub eddy_backend_bytes: Option<u64>,
}

/// The times of both sides of a phase over the rounds, and what the Eddy side moved.
#[derive(Debug, Default)]
struct Rounds {
    base: Vec<Duration>,
    eddy: Vec<Duration>,
    /// Bytes each round's Eddy side moved to or from the backend, if known.
    moved: Vec<Option<u64>>,
}

impl Rounds {
    fn add(&mut self, base: Duration, (eddy, moved): (Duration, Option<u64>)) {
        self.base.push(base);
        self.eddy.push(eddy);
        self.moved.push(moved);
    }

    /// Bytes moved by all rounds, if known for every one.
    fn moved_total(&self) -> Option<u64> {
        self.moved.iter().copied().sum()
    }

    fn moved_last(&self) -> Option<u64> {
        self.moved.last().copied().flatten()
    }
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort_unstable();
    match v.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2,
    }
}

impl TierPhase {
    fn new(
        phase: &str,
        baseline: &str,
        eddy: &str,
        bytes: u64,
        rounds: &Rounds,
        goal: Option<f64>,
    ) -> TierPhase {
        let (base, ours) = (median(&rounds.base), median(&rounds.eddy));
        let (b, e) = (base.as_secs_f64().max(1e-9), ours.as_secs_f64().max(1e-9));
        let secs = |v: &[Duration]| v.iter().map(Duration::as_secs_f64).collect();
        TierPhase {
            phase: phase.into(),
            baseline: baseline.into(),
            eddy: eddy.into(),
            bytes,
            baseline_seconds: base.as_secs_f64(),
            eddy_seconds: ours.as_secs_f64(),
            baseline_rounds_s: secs(&rounds.base),
            eddy_rounds_s: secs(&rounds.eddy),
            baseline_mib_s: bytes as f64 / MIB / b,
            eddy_mib_s: bytes as f64 / MIB / e,
            ratio: b / e,
            goal,
            unit: "MiB/s".into(),
            eddy_backend_bytes: rounds.moved_total(),
        }
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB)
}

pub fn run(a: TierArgs) -> anyhow::Result<()> {
    if a.merging {
        return merging::run(a);
    }
    if a.files == 0 || a.tree_files == 0 || a.tree_dirs == 0 || a.daemons == 0 || a.rounds == 0 {
        bail!("--files, --tree-files, --tree-dirs, --daemons and --rounds must be at least 1");
    }
    if a.size < u64::from(a.files.max(a.tree_files)) {
        bail!(
            "--size {} is smaller than the number of files ({}): every file needs a byte",
            a.size,
            a.files.max(a.tree_files)
        );
    }
    let storage = storage_or_default(a.storage.as_ref());
    // Per round the backend holds 6 sets (cold, ram, tree, pre, direct, out), the storage 5
    // in the cache (cold, ram, tree, pre, out) and the local copy; plus the native files.
    let per_set = a.size.saturating_mul(u64::from(a.rounds));
    // With --streams: 8 sets in the backend and as many in the cache.
    let (backend_need, storage_need) = match a.streams {
        true => (per_set * 8, per_set * 8),
        false => (per_set * 6, per_set * 6 + a.size),
    };
    // Given a backend, work in a fresh sub-directory of it, removed at the end.
    let scratch = host::scratch(
        &storage,
        a.backend.as_ref(),
        (backend_need, storage_need),
        "eddy-bench-tier.",
    )?;
    let (base, work) = (&scratch.base, scratch.work.clone());
    let paths = Paths {
        exe: std::env::current_exe().context("cannot find the eddy program's path")?,
        work: work.clone(),
        mount: base.path().join("mnt"),
        state: base.path().join("state"),
        local: base.path().join("local"),
    };
    let root = base.path().join("root");
    for d in [&paths.mount, &paths.local, &paths.work] {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    let sets = Sets {
        flat: flat_set(a.size, a.files),
        tree: tree_set(a.size, a.tree_files, a.tree_dirs),
        tree_dirs: a.tree_dirs.min(a.tree_files),
        rounds: a.rounds,
    };
    let largest = sets.flat.iter().chain(&sets.tree).map(|(_, s)| *s).max();
    let buf_len = (largest.unwrap_or(1) as usize)
        .next_multiple_of(IO_BYTES)
        .min(SEGMENT);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let busy = cpu_busy_pct(Duration::from_secs(1));
    let backend_fs = fs_type(&work);
    note!(
        "eddy bench tier: backend {} ({backend_fs}), storage {}, {} per side and round, {} \
         rounds",
        work.display(),
        base.path().display(),
        mib(a.size),
        a.rounds
    );
    let mut ctx = Ctx {
        p: &paths,
        cache: PageCache {
            refused: None,
            dirs: vec![work.clone(), root.clone(), paths.local.clone()],
        },
        // Touched now, so that no page fault of the buffer is timed.
        buf: vec![0xa5u8; buf_len],
    };
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());

    note!("eddy bench tier: writing the backend files");
    for r in (0..a.rounds).filter(|_| !a.streams) {
        for (dir, set) in [
            ("cold", &sets.flat),
            ("ram", &sets.flat),
            ("tree", &sets.tree),
            ("pre", &sets.tree),
        ] {
            let name = format!("{dir}/r{r}");
            ctx.write(&files(&work.join(&name), set, &name), true)?;
        }
    }
    interrupt::check()?;
    let link: OsString = {
        let mut s = OsString::from(format!("{LINK_PREFIX}="));
        s.push(&work);
        s
    };
    let mut start_args: Vec<OsString> = vec!["--link".into(), link];
    if let Some(c) = &a.config {
        start_args.extend(["--config".into(), c.into()]);
    }
    // Declared after the directories: dropped (stopped) before they are removed.
    let mut deployment = Deployment::start(
        &paths.exe,
        a.daemons,
        &root,
        &paths.mount,
        &paths.state,
        &start_args,
    )?;
    let mount_read_ahead_kb = read_ahead_kb(&paths.mount);
    let mut notes = Vec::new();
    let result = if a.streams {
        streams::measure(&mut ctx, &sets, a.size, base.path(), &mut notes)
    } else {
        measure(&mut ctx, &sets, &mut notes)
    };
    let stopped = deployment.stop();
    let phases = result?;
    stopped?;
    drop(deployment);
    if backend_fs == "tmpfs" {
        notes.push(
            "the backend is on tmpfs: its files live in RAM and cannot be dropped from it, so \
             the cold phases do not read a device"
                .into(),
        );
    }
    if let Some(b) = busy.filter(|b| *b >= BUSY_NOTE_PCT) {
        notes.push(format!(
            "{b:.0} % of the CPUs were busy in the second before the run started: other work \
             may have competed with it"
        ));
    }
    let report = TierReport {
        format: FORMAT.into(),
        backend: work.display().to_string(),
        backend_fs,
        storage: base.path().display().to_string(),
        daemons: a.daemons,
        config: a.config.as_ref().map(|c| c.display().to_string()),
        size_bytes: a.size,
        rounds: a.rounds,
        files: a.files,
        tree_files: a.tree_files,
        tree_dirs: a.tree_dirs,
        page_cache_dropped: ctx.cache.dropped(),
        page_cache: ctx.cache.describe(),
        mount_read_ahead_kb,
        cpus,
        cpu_busy_pct: busy,
        started_unix,
        phases,
        notes,
    };
    crate::table_and_json(a.json.as_deref(), &table(&report), &report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_with_units() {
        use crate::args::parse_bytes;
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("256M"), Ok(256 << 20));
        assert_eq!(parse_bytes("64KiB"), Ok(64 << 10));
        assert_eq!(parse_bytes("1.5G"), Ok(3 << 29));
        assert_eq!(parse_bytes("2 gb"), Ok(2 << 30));
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("12Q").is_err());
        assert!(parse_bytes("M").is_err());
    }

    #[test]
    fn medians_and_moved_bytes_of_rounds() {
        let d = Duration::from_millis;
        assert_eq!(median(&[d(5), d(1), d(3)]), d(3));
        assert_eq!(median(&[d(4), d(1)]), Duration::from_micros(2500));
        let mut r = Rounds::default();
        r.add(d(10), (d(20), Some(7)));
        r.add(d(30), (d(10), Some(3)));
        r.add(d(20), (d(40), Some(5)));
        assert_eq!(r.moved_total(), Some(15));
        assert_eq!(r.moved_last(), Some(5));
        let p = TierPhase::new("x", "b", "e", 1 << 20, &r, None);
        assert_eq!(p.baseline_seconds, 0.02);
        assert_eq!(p.eddy_seconds, 0.02);
        assert!((p.ratio - 1.0).abs() < 1e-9);
        assert_eq!(p.eddy_rounds_s, vec![0.02, 0.01, 0.04]);
        r.add(d(1), (d(1), None));
        assert_eq!(r.moved_total(), None);
    }
}
