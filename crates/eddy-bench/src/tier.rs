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
//! | `stage-out` | writing the bytes directly into the backend, fsync per file | `eddy stage-out` of the same bytes written into `M/tier` |
//!
//! Each phase runs `--rounds` times, the two sides alternating which goes first, each round on
//! files of its own where a side changes what it reads (cold files, trees, staged-out files);
//! a side's figure is its median time. The page cache is dropped (`sync; echo 3 >
//! /proc/sys/vm/drop_caches`) before each side of `cold-read`, `warm-read` and `stage-in`;
//! where that is refused, the benchmark's own files get `posix_fadvise(DONTNEED)` instead and
//! the output says so. Every byte read is checked against the pattern it was written with
//! (`pattern.rs`), the staged tree, the copy and the files staged out included; the time of
//! the checks is not counted. Ratios are eddy / baseline throughput (higher is better); goals
//! are printed, never asserted.

use crate::args::TierArgs;
use crate::interrupt;
use crate::pattern;
use crate::suite::Deployment;
use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Identifies the JSON format of `eddy bench tier`.
pub const FORMAT: &str = "eddy-bench-tier/1";
/// Size of one read or write call, like `dd bs=1M`.
const IO_BYTES: usize = 1 << 20;
/// Largest buffer of a file's bytes kept between checks: the clock stops every SEGMENT bytes
/// of a larger file while they are verified or generated.
const SEGMENT: usize = 64 << 20;
/// Default storage: a disk, so that dropping the page cache makes a read hit the device.
const DEFAULT_STORAGE: &str = "/var/tmp";
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

/// A file of the benchmark: where it is, the key of its pattern, its size.
#[derive(Debug, Clone)]
struct DataFile {
    path: PathBuf,
    key: u64,
    size: u64,
}

/// Relative paths and sizes of a set of files.
type FileSet = Vec<(String, u64)>;

/// The files of `set` under `dir`, with the pattern keys of `key_name/REL`: the same set
/// under two directories with the same key name holds the same bytes.
fn files(dir: &Path, set: &FileSet, key_name: &str) -> Vec<DataFile> {
    set.iter()
        .map(|(rel, size)| DataFile {
            path: dir.join(rel),
            key: pattern::key(&format!("{key_name}/{rel}"), 0),
            size: *size,
        })
        .collect()
}

/// `total` bytes in `n` sizes as equal as possible.
fn split(total: u64, n: u32) -> Vec<u64> {
    let n64 = u64::from(n);
    (0..n64)
        .map(|i| total / n64 + u64::from(i < total % n64))
        .collect()
}

fn flat_set(total: u64, n: u32) -> FileSet {
    split(total, n)
        .into_iter()
        .enumerate()
        .map(|(i, s)| (format!("f{i}"), s))
        .collect()
}

/// `n` files spread round-robin over `dirs` directories.
fn tree_set(total: u64, n: u32, dirs: u32) -> FileSet {
    split(total, n)
        .into_iter()
        .enumerate()
        .map(|(i, s)| (format!("d{}/f{i}", i as u32 % dirs), s))
        .collect()
}

/// A read that retries on EINTR.
fn read_some(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match f.read(buf) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// Reads the files one after the other with 1 MiB read calls up to end of file, as `dd`
/// does, and checks every byte against its pattern. Returns the time from each open to each
/// close, without the checks.
fn read_files(files: &[DataFile], buf: &mut [u8]) -> anyhow::Result<Duration> {
    let mut spent = Duration::ZERO;
    for f in files {
        interrupt::check()?;
        let show = || f.path.display();
        let mut clock = Instant::now();
        let mut file = File::open(&f.path).with_context(|| format!("cannot open {}", show()))?;
        let mut offset = 0u64;
        loop {
            let mut filled = 0usize;
            let mut eof = false;
            while filled < buf.len() {
                let end = (filled + IO_BYTES).min(buf.len());
                let n = read_some(&mut file, &mut buf[filled..end])
                    .with_context(|| format!("read of {} at {}", show(), offset + filled as u64))?;
                if n == 0 {
                    eof = true;
                    break;
                }
                filled += n;
            }
            spent += clock.elapsed();
            if offset + filled as u64 > f.size {
                bail!(
                    "{} holds more than the {} bytes written to it",
                    show(),
                    f.size
                );
            }
            pattern::verify(&buf[..filled], f.key, offset)
                .map_err(|m| anyhow!("verification failed: {}: {m}", show()))?;
            offset += filled as u64;
            clock = Instant::now();
            if eof {
                break;
            }
        }
        drop(file);
        spent += clock.elapsed();
        if offset != f.size {
            bail!(
                "verification failed: {} ends after {offset} bytes, {} were written",
                show(),
                f.size
            );
        }
    }
    Ok(spent)
}

/// Writes the files (created or truncated) with 1 MiB write calls, then fsync if asked, and
/// closes them. Returns the time from each open to each close, without generating the bytes
/// or creating the parent directories.
fn write_files(files: &[DataFile], buf: &mut [u8], fsync: bool) -> anyhow::Result<Duration> {
    let mut spent = Duration::ZERO;
    for f in files {
        interrupt::check()?;
        let show = || f.path.display();
        if let Some(parent) = f.path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let mut offset = 0u64;
        let mut file: Option<File> = None;
        loop {
            let n = (f.size - offset).min(buf.len() as u64) as usize;
            pattern::fill(&mut buf[..n], f.key, offset);
            let clock = Instant::now();
            let out = match &mut file {
                Some(out) => out,
                None => file.insert(
                    File::create(&f.path).with_context(|| format!("cannot create {}", show()))?,
                ),
            };
            for piece in buf[..n].chunks(IO_BYTES) {
                out.write_all(piece)
                    .with_context(|| format!("write to {} at {offset}", show()))?;
            }
            spent += clock.elapsed();
            offset += n as u64;
            if offset >= f.size {
                break;
            }
        }
        let clock = Instant::now();
        if let Some(out) = file {
            if fsync {
                out.sync_all()
                    .with_context(|| format!("fsync of {}", show()))?;
            }
            drop(out);
        }
        spent += clock.elapsed();
    }
    Ok(spent)
}

/// Empties the page cache between the sides of a phase.
struct PageCache {
    /// Why /proc/sys/vm/drop_caches could not be used (None: it works, or was not tried).
    refused: Option<String>,
    /// Where the benchmark's files are, for posix_fadvise when dropping is refused (never the
    /// mount: walking it would touch Eddy).
    dirs: Vec<PathBuf>,
}

impl PageCache {
    fn drop_all(&mut self) {
        // SAFETY: sync(2) has no arguments and cannot fail.
        unsafe { libc::sync() };
        if self.refused.is_none() {
            match std::fs::write(DROP_CACHES, "3") {
                Ok(()) => return,
                Err(e) => {
                    note!(
                        "eddy bench tier: warning: cannot drop the page cache ({DROP_CACHES}: \
                         {e}); using posix_fadvise(DONTNEED) on the benchmark's files instead"
                    );
                    self.refused = Some(e.to_string());
                }
            }
        }
        for d in &self.dirs {
            fadvise_tree(d);
        }
    }

    fn dropped(&self) -> bool {
        self.refused.is_none()
    }

    fn describe(&self) -> String {
        match &self.refused {
            None => format!(
                "dropped before each side of cold-read, warm-read and stage-in (sync; echo 3 > \
                 {DROP_CACHES})"
            ),
            Some(e) => format!(
                "NOT dropped ({DROP_CACHES}: {e}); posix_fadvise(DONTNEED) on the benchmark's \
                 files instead (caches of a network backend's servers may remain)"
            ),
        }
    }
}

/// posix_fadvise(DONTNEED) on every regular file under `dir` (errors ignored).
fn fadvise_tree(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            fadvise_tree(&e.path());
        } else if ft.is_file() {
            if let Ok(f) = File::open(e.path()) {
                use std::os::fd::AsRawFd;
                // SAFETY: a valid open descriptor; the call only advises the kernel.
                unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            }
        }
    }
}

/// The type of the file system holding `p` (the longest mount point above it).
fn fs_type(p: &Path) -> String {
    let Ok(canon) = p.canonicalize() else {
        return "unknown".into();
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return "unknown".into();
    };
    let mut best: Option<(usize, String)> = None;
    for line in info.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(point), Some(kind)) = (fields.get(4), fields.get(dash + 1)) else {
            continue;
        };
        let point = point.replace("\\040", " ");
        if canon.starts_with(&point) && best.as_ref().is_none_or(|(n, _)| point.len() >= *n) {
            best = Some((point.len(), kind.to_string()));
        }
    }
    best.map_or_else(|| "unknown".into(), |(_, k)| k)
}

/// Runs `eddy ARGS` (this program); fails with its output if it fails. Returns its wall time.
fn eddy(exe: &Path, args: &[OsString]) -> anyhow::Result<(Duration, Output)> {
    let clock = Instant::now();
    let out = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    let took = clock.elapsed();
    if !out.status.success() {
        let words: Vec<String> = args.iter().map(|a| a.to_string_lossy().into()).collect();
        bail!(
            "eddy {} failed ({}):\n{}{}",
            words.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok((took, out))
}

/// What `eddy status --json` tells of the deployment's data, summed over the daemons.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    /// Bytes of chunk data held (None if status does not say).
    chunk_bytes: Option<u64>,
    /// Bytes read from and written to the backend by the tier (None if status does not say).
    backend_read: Option<u64>,
    backend_written: Option<u64>,
}

impl Figures {
    fn of(exe: &Path, state: &Path) -> Figures {
        let args = [
            "status".into(),
            "--state".into(),
            state.into(),
            "--json".into(),
        ];
        let Ok((_, out)) = eddy(exe, &args) else {
            return Figures::default();
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
            return Figures::default();
        };
        let Some(daemons) = v["daemons"].as_array() else {
            return Figures::default();
        };
        let sum = |get: &dyn Fn(&serde_json::Value) -> Option<u64>| -> Option<u64> {
            daemons.iter().map(get).sum()
        };
        Figures {
            chunk_bytes: sum(&|d| d["chunk_bytes"].as_u64()),
            backend_read: sum(&|d| d["tier"]["backend_read_bytes"].as_u64()),
            backend_written: sum(&|d| d["tier"]["backend_write_bytes"].as_u64()),
        }
    }
}

/// `after - before` of one figure, when both are known.
fn grew(before: Option<u64>, after: Option<u64>) -> Option<u64> {
    Some(after?.saturating_sub(before?))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB)
}

/// Where everything of one run is.
struct Paths {
    exe: PathBuf,
    /// The backend work directory, linked at /tier.
    work: PathBuf,
    mount: PathBuf,
    state: PathBuf,
    /// Destination of `cp -r`.
    local: PathBuf,
}

impl Paths {
    /// A path under the mount for a namespace path such as /tier/cold.
    fn ns(&self, path: &str) -> PathBuf {
        self.mount.join(path.trim_start_matches('/'))
    }
}

/// The files of one run: `flat` (the read and stage-out phases) and `tree` (stage-in), the
/// same for every round, each round in directories of its own.
struct Sets {
    flat: FileSet,
    tree: FileSet,
    tree_dirs: u32,
    rounds: u32,
}

/// Which tier counter an Eddy side moves.
#[derive(Clone, Copy)]
enum Counter {
    Read,
    Written,
}

/// What the phases share: the paths, the page cache, the I/O buffer.
struct Ctx<'a> {
    p: &'a Paths,
    cache: PageCache,
    buf: Vec<u8>,
}

impl Ctx<'_> {
    fn read(&mut self, files: &[DataFile]) -> anyhow::Result<Duration> {
        read_files(files, &mut self.buf)
    }

    fn write(&mut self, files: &[DataFile], fsync: bool) -> anyhow::Result<Duration> {
        write_files(files, &mut self.buf, fsync)
    }

    fn figures(&self) -> Figures {
        Figures::of(&self.p.exe, &self.p.state)
    }

    /// Runs the Eddy side `f` and returns its time and what the tier counter moved meanwhile.
    fn eddy_side(
        &mut self,
        counter: Counter,
        f: impl FnOnce(&mut Self) -> anyhow::Result<Duration>,
    ) -> anyhow::Result<(Duration, Option<u64>)> {
        let pick = |f: Figures| match counter {
            Counter::Read => f.backend_read,
            Counter::Written => f.backend_written,
        };
        let before = pick(self.figures());
        let took = f(self)?;
        Ok((took, grew(before, pick(self.figures()))))
    }

    /// `eddy stage-in` or `stage-out` of a namespace path; returns its wall time.
    fn stage(&self, what: &str, ns_path: &str) -> anyhow::Result<Duration> {
        let args = [
            what.into(),
            "--state".into(),
            self.p.state.clone().into(),
            ns_path.into(),
        ];
        Ok(eddy(&self.p.exe, &args)?.0)
    }
}

/// Runs both sides of one round, the baseline first in even rounds and last in odd ones.
fn pair<B, E>(
    ctx: &mut Ctx,
    round: u32,
    rounds: &mut Rounds,
    base: B,
    eddy: E,
) -> anyhow::Result<()>
where
    B: FnOnce(&mut Ctx) -> anyhow::Result<Duration>,
    E: FnOnce(&mut Ctx) -> anyhow::Result<(Duration, Option<u64>)>,
{
    interrupt::check()?;
    if round.is_multiple_of(2) {
        let b = base(ctx)?;
        let e = eddy(ctx)?;
        rounds.add(b, e);
    } else {
        let e = eddy(ctx)?;
        let b = base(ctx)?;
        rounds.add(b, e);
    }
    Ok(())
}

/// Free bytes for the caller under `dir` (None if statvfs fails).
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: a valid C string and a zeroed out-struct; statvfs only writes into it.
    let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut v) } != 0 {
        return None;
    }
    Some(v.f_bavail as u64 * v.f_frsize as u64)
}

fn check_room(dir: &Path, need: u64, what: &str) -> anyhow::Result<()> {
    if let Some(free) = free_bytes(dir) {
        if free < need {
            bail!(
                "{what} {} has {} free, the run needs about {} (lower --size or --rounds)",
                dir.display(),
                mib(free),
                mib(need)
            );
        }
    }
    Ok(())
}

/// Read-ahead of the file system mounted at `mount`, from its backing device info.
fn read_ahead_kb(mount: &Path) -> Option<u64> {
    let canon = mount.canonicalize().ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let dev = info.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.get(4).map(|m| m.replace("\\040", " ")) == Some(canon.to_string_lossy().into()))
            .then(|| f.get(2).map(|d| d.to_string()))
            .flatten()
    })?;
    std::fs::read_to_string(format!("/sys/class/bdi/{dev}/read_ahead_kb"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// (busy, all) jiffies of every CPU so far, from /proc/stat; iowait counts as idle.
fn cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let all: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4).unwrap_or(&0);
    Some((all - idle, all))
}

/// Percent of the CPUs busy during `window` (other work competing with the run).
fn cpu_busy_pct(window: Duration) -> Option<f64> {
    let (b0, a0) = cpu_jiffies()?;
    std::thread::sleep(window);
    let (b1, a1) = cpu_jiffies()?;
    (a1 > a0).then(|| 100.0 * (b1 - b0) as f64 / (a1 - a0) as f64)
}

pub fn run(a: TierArgs) -> anyhow::Result<()> {
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
    let storage = a.storage.clone().unwrap_or_else(|| {
        let disk = PathBuf::from(DEFAULT_STORAGE);
        if disk.is_dir() {
            disk
        } else {
            std::env::temp_dir()
        }
    });
    // Per round the backend holds 5 sets (cold, ram, tree, direct, out), the storage 4 in
    // the cache (cold, ram, tree, out) and the local copy; plus the native files.
    let per_set = a.size.saturating_mul(u64::from(a.rounds));
    let (backend_need, storage_need) = (per_set * 5, per_set * 5 + a.size);
    match &a.backend {
        Some(b) => {
            check_room(b, backend_need, "the backend")?;
            check_room(&storage, storage_need, "the storage")?;
        }
        None => check_room(&storage, backend_need + storage_need, "the storage")?,
    }
    let base = tempfile::Builder::new()
        .prefix("eddy-bench-tier.")
        .tempdir_in(&storage)
        .with_context(|| {
            format!(
                "cannot create a directory in {} (missing or not writable?)",
                storage.display()
            )
        })?;
    // Given a backend, work in a fresh sub-directory of it, removed at the end.
    let backend_dir = match &a.backend {
        Some(b) => Some(
            tempfile::Builder::new()
                .prefix("eddy-bench-tier.")
                .tempdir_in(b)
                .with_context(|| {
                    format!(
                        "cannot create a directory in the backend {} (missing or not writable?)",
                        b.display()
                    )
                })?,
        ),
        None => None,
    };
    let work = match &backend_dir {
        Some(d) => d.path().to_path_buf(),
        None => base.path().join("backend"),
    };
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
    for r in 0..a.rounds {
        for (dir, set) in [
            ("cold", &sets.flat),
            ("ram", &sets.flat),
            ("tree", &sets.tree),
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
    let result = measure(&mut ctx, &sets, &mut notes);
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
    crate::human(a.json.as_deref(), &table(&report));
    if let Some(j) = &a.json {
        let text = serde_json::to_string_pretty(&report).context("encoding results")?;
        if j == Path::new("-") {
            crate::out(format_args!("{text}\n"));
        } else {
            std::fs::write(j, text + "\n")
                .with_context(|| format!("cannot write {}", j.display()))?;
        }
    }
    Ok(())
}

/// Runs the phases on the started deployment.
fn measure(ctx: &mut Ctx, sets: &Sets, notes: &mut Vec<String>) -> anyhow::Result<Vec<TierPhase>> {
    let p = ctx.p;
    let say = |what: &str| note!("eddy bench tier: {what}");
    let flat = &sets.flat;
    let flat_bytes: u64 = flat.iter().map(|(_, s)| s).sum();
    let tree_bytes: u64 = sets.tree.iter().map(|(_, s)| s).sum();
    // Round r's files of a set, in the backend and through the mount.
    let backend = |dir: &str, set: &FileSet, r: u32| {
        let name = format!("{dir}/r{r}");
        files(&p.work.join(&name), set, &name)
    };
    let mounted = |dir: &str, set: &FileSet, r: u32| {
        let name = format!("{dir}/r{r}");
        files(&p.ns(LINK_PREFIX).join(&name), set, &name)
    };
    let mut phases = Vec::new();

    // The native files of warm-read, in the transient part of the namespace.
    say("writing the native (scratch) Eddy files");
    let native = files(&p.ns(SCRATCH).join("native"), flat, "native");
    ctx.write(&native, false)?;

    say("cold-read");
    let mut rounds = Rounds::default();
    for r in 0..sets.rounds {
        pair(
            ctx,
            r,
            &mut rounds,
            |c| {
                c.cache.drop_all();
                c.read(&backend("cold", flat, r))
            },
            |c| {
                c.cache.drop_all();
                c.eddy_side(Counter::Read, |c| c.read(&mounted("cold", flat, r)))
            },
        )?;
    }
    phases.push(TierPhase::new(
        "cold-read",
        "1 MiB reads of the backend files directly (page cache dropped)",
        "the same files through the mount, never touched by Eddy (page cache dropped)",
        flat_bytes,
        &rounds,
        Some(0.9),
    ));

    say("cold-read-ram");
    let mut rounds = Rounds::default();
    for r in 0..sets.rounds {
        ctx.read(&backend("ram", flat, r))?; // into the page cache
        pair(
            ctx,
            r,
            &mut rounds,
            |c| c.read(&backend("ram", flat, r)),
            |c| c.eddy_side(Counter::Read, |c| c.read(&mounted("ram", flat, r))),
        )?;
    }
    phases.push(TierPhase::new(
        "cold-read-ram",
        "the same, other backend files, in the page cache",
        "those files through the mount, never touched by Eddy (backend in the page cache)",
        flat_bytes,
        &rounds,
        None,
    ));

    say("warm-read");
    let mut rounds = Rounds::default();
    for r in 0..sets.rounds {
        pair(
            ctx,
            r,
            &mut rounds,
            |c| {
                c.cache.drop_all();
                c.read(&native)
            },
            |c| {
                c.cache.drop_all();
                c.eddy_side(Counter::Read, |c| c.read(&mounted("cold", flat, r)))
            },
        )?;
    }
    let mut fetched = rounds.moved_total().unwrap_or(0);
    phases.push(TierPhase::new(
        "warm-read",
        "a native (scratch, unlinked) Eddy file of each size through the mount (page cache \
         dropped)",
        "the cold-read files again through the mount, cached by Eddy (page cache dropped)",
        flat_bytes,
        &rounds,
        Some(0.95),
    ));
    say("warm-read-ram");
    let mut rounds = Rounds::default();
    for r in 0..sets.rounds {
        // Both into the page cache first.
        ctx.read(&native)?;
        ctx.read(&mounted("cold", flat, r))?;
        pair(
            ctx,
            r,
            &mut rounds,
            |c| c.read(&native),
            |c| c.eddy_side(Counter::Read, |c| c.read(&mounted("cold", flat, r))),
        )?;
    }
    fetched += rounds.moved_total().unwrap_or(0);
    phases.push(TierPhase::new(
        "warm-read-ram",
        "the same, Eddy's chunk files in the page cache",
        "the same, Eddy's chunk files in the page cache",
        flat_bytes,
        &rounds,
        Some(0.95),
    ));
    if fetched > 0 {
        notes.push(format!(
            "the warm reads fetched {} from the backend: the cache did not hold every chunk",
            mib(fetched)
        ));
    }

    say("stage-in");
    let mut rounds = Rounds::default();
    let mut unchecked = false;
    for r in 0..sets.rounds {
        let name = format!("tree/r{r}");
        let (from, to) = (p.work.join(&name), p.local.join(&name));
        let ns_tree = format!("{LINK_PREFIX}/{name}");
        std::fs::create_dir_all(p.local.join("tree"))?;
        let mut chunk_growth = None;
        pair(
            ctx,
            r,
            &mut rounds,
            |c| {
                c.cache.drop_all();
                cp_r(&from, &to)
            },
            |c| {
                c.cache.drop_all();
                let before = c.figures().chunk_bytes;
                let side = c.eddy_side(Counter::Read, |c| c.stage("stage-in", &ns_tree))?;
                chunk_growth = grew(before, c.figures().chunk_bytes);
                Ok(side)
            },
        )?;
        // A stage-in that returns without caching the tree would be fast and wrong: this
        // round's fetches (else the growth of the cache) must cover the tree.
        match rounds.moved_last().or(chunk_growth) {
            Some(n) if n < tree_bytes => bail!(
                "eddy stage-in {ns_tree} returned, but the daemons fetched only {} from the \
                 backend, not the {} of the tree",
                mib(n),
                mib(tree_bytes)
            ),
            Some(_) => {}
            None => unchecked = true,
        }
        // What cp copied and what stage-in cached, byte for byte (untimed).
        ctx.read(&files(&to, &sets.tree, &name))
            .context("checking the copy of cp -r")?;
        let staged_files = files(&p.ns(&ns_tree), &sets.tree, &name);
        let (_, again) = ctx.eddy_side(Counter::Read, |c| c.read(&staged_files))?;
        if let Some(n) = again.filter(|n| *n > 0) {
            notes.push(format!(
                "reading the tree staged in by round {r} fetched another {} from the backend: \
                 stage-in did not keep all of it",
                mib(n)
            ));
        }
    }
    if unchecked {
        notes.push(
            "eddy status --json gave no tier figures: could not check that stage-in cached the \
             tree (its bytes were still verified through the mount)"
                .into(),
        );
    }
    phases.push(TierPhase::new(
        "stage-in",
        &format!(
            "cp -r of a tree ({} files in {} directories) from the backend to local storage \
             (page cache dropped)",
            sets.tree.len(),
            sets.tree_dirs
        ),
        &format!("eddy stage-in {LINK_PREFIX}/tree/rN of the same tree (page cache dropped)"),
        tree_bytes,
        &rounds,
        None,
    ));

    say("stage-out");
    let mut rounds = Rounds::default();
    let mut writes = Vec::new();
    for r in 0..sets.rounds {
        let name = format!("out/r{r}");
        let ns_out = format!("{LINK_PREFIX}/{name}");
        // The same bytes (same key) directly into the backend and into the mount.
        let direct = files(&p.work.join(format!("direct/r{r}")), flat, &name);
        let into_eddy = files(&p.ns(&ns_out), flat, &name);
        pair(
            ctx,
            r,
            &mut rounds,
            |c| {
                sync_all();
                c.write(&direct, true)
            },
            |c| {
                writes.push(c.write(&into_eddy, false)?);
                // The cache's dirty pages reach the disk now, not during the stage-out.
                sync_all();
                c.eddy_side(Counter::Written, |c| c.stage("stage-out", &ns_out))
            },
        )?;
        ctx.read(&files(&p.work.join(&name), flat, &name))
            .with_context(|| format!("checking the files stage-out wrote to {ns_out}"))?;
        ctx.read(&direct)
            .context("checking the files written directly")?;
    }
    let write = median(&writes);
    notes.push(format!(
        "stage-out: writing the {} into the mount beforehand took {:.2} s ({:.0} MiB/s, median, \
         not counted)",
        mib(flat_bytes),
        write.as_secs_f64(),
        flat_bytes as f64 / MIB / write.as_secs_f64().max(1e-9)
    ));
    phases.push(TierPhase::new(
        "stage-out",
        "writing the same bytes directly into the backend, fsync per file",
        &format!(
            "eddy stage-out {LINK_PREFIX}/out/rN of those bytes, written into the mount \
             beforehand (not counted)"
        ),
        flat_bytes,
        &rounds,
        None,
    ));
    Ok(phases)
}

/// `cp -r FROM TO` (TO must not exist); returns its wall time.
fn cp_r(from: &Path, to: &Path) -> anyhow::Result<Duration> {
    let clock = Instant::now();
    let out = Command::new("cp")
        .arg("-r")
        .arg(from)
        .arg(to)
        .stdin(Stdio::null())
        .output()
        .context("cannot run cp")?;
    let took = clock.elapsed();
    if !out.status.success() {
        bail!(
            "cp -r {} {} failed: {}",
            from.display(),
            to.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(took)
}

fn sync_all() {
    // SAFETY: sync(2) has no arguments and cannot fail.
    unsafe { libc::sync() };
}

fn goal_text(g: Option<f64>) -> String {
    g.map_or("-".into(), |g| format!(">={g:.2}"))
}

/// How many times faster (or slower) `ratio` is, in words.
fn times(ratio: f64) -> String {
    if (0.98..=1.02).contains(&ratio) {
        "about as fast as".into()
    } else if ratio > 1.0 {
        format!("{ratio:.2}× faster than")
    } else {
        format!("{:.2}× slower than", 1.0 / ratio.max(1e-12))
    }
}

/// The human output: the table, what each side does, the headline ratios and the notes.
pub fn table(r: &TierReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "eddy bench tier: Eddy ({} daemons) vs baseline (ratio = eddy / baseline throughput)",
        r.daemons
    );
    let _ = writeln!(s, "backend:    {} ({})", r.backend, r.backend_fs);
    let _ = writeln!(s, "storage:    {}", r.storage);
    if let Some(c) = &r.config {
        let _ = writeln!(s, "config:     {c}");
    }
    let _ = writeln!(s, "page cache: {}", r.page_cache);
    let ra = r
        .mount_read_ahead_kb
        .map_or("unknown".into(), |k| format!("{k} KiB"));
    let busy = r
        .cpu_busy_pct
        .map_or("unknown".into(), |b| format!("{b:.0} %"));
    let _ = writeln!(
        s,
        "mount read-ahead: {ra}; {} CPUs, {busy} busy in the second before the start",
        r.cpus
    );
    let _ = writeln!(
        s,
        "{} per side and round, {} rounds (median time of each side), {} files; stage-in tree: \
         {} files in {} directories",
        mib(r.size_bytes),
        r.rounds,
        r.files,
        r.tree_files,
        r.tree_dirs.min(r.tree_files)
    );
    let _ = writeln!(
        s,
        "{:<14} {:>12} {:>12} {:>8} {:>7} {:>9} {:>9} {:>6}",
        "phase", "baseline", "eddy", "ratio", "goal", "base s", "eddy s", "unit"
    );
    for p in &r.phases {
        let _ = writeln!(
            s,
            "{:<14} {:>12.1} {:>12.1} {:>8.3} {:>7} {:>9.3} {:>9.3} {:>6}",
            p.phase,
            p.baseline_mib_s,
            p.eddy_mib_s,
            p.ratio,
            goal_text(p.goal),
            p.baseline_seconds,
            p.eddy_seconds,
            p.unit
        );
    }
    s.push('\n');
    for p in &r.phases {
        let _ = writeln!(s, "{}: {} MiB", p.phase, p.bytes as f64 / MIB);
        let _ = writeln!(s, "  baseline: {}", p.baseline);
        let _ = writeln!(s, "  eddy:     {}", p.eddy);
        if let Some(n) = p.eddy_backend_bytes {
            let dir = if p.phase == "stage-out" { "to" } else { "from" };
            let _ = writeln!(
                s,
                "  eddy moved {} {dir} the backend in {} rounds",
                mib(n),
                p.eddy_rounds_s.len()
            );
        }
    }
    s.push('\n');
    for p in &r.phases {
        match p.phase.as_str() {
            "stage-in" => {
                let _ = writeln!(
                    s,
                    "stage-in is {} cp -r (ratio {:.3}: {:.2} s vs {:.2} s)",
                    times(p.ratio),
                    p.ratio,
                    p.eddy_seconds,
                    p.baseline_seconds
                );
            }
            "stage-out" => {
                let _ = writeln!(
                    s,
                    "stage-out is {} writing directly into the backend with fsync (ratio \
                     {:.3}: {:.2} s vs {:.2} s)",
                    times(p.ratio),
                    p.ratio,
                    p.eddy_seconds,
                    p.baseline_seconds
                );
            }
            _ => {
                if let Some(g) = p.goal {
                    let verdict = if p.ratio >= g { "meets" } else { "misses" };
                    let _ = writeln!(
                        s,
                        "{}: {:.3}× the baseline, {verdict} the goal of {g:.2}×",
                        p.phase, p.ratio
                    );
                }
            }
        }
    }
    if let Some((extra, reads)) = miss_cost(r) {
        let _ = writeln!(
            s,
            "a miss costs {extra:.2} s over a hit for the same bytes (cold-read minus warm-read), \
             {reads:.2}× the time of reading them from the backend directly (about one backend \
             read is the aim: no whole-file copy, no second pass)"
        );
    }
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

/// What a cache miss adds to a hit: the median time of `cold-read` minus that of `warm-read`
/// (both with the page cache dropped, same bytes), in seconds (not below zero) and in units
/// of the direct backend read of `cold-read`'s baseline. On a machine where the backend reads
/// faster than the mount serves cached data, this isolates the tier's own cost from the
/// mount's data path, which bounds both sides.
fn miss_cost(r: &TierReport) -> Option<(f64, f64)> {
    let cold = r.phases.iter().find(|p| p.phase == "cold-read")?;
    let warm = r.phases.iter().find(|p| p.phase == "warm-read")?;
    if cold.bytes != warm.bytes || cold.baseline_seconds <= 0.0 {
        return None;
    }
    let extra = (cold.eddy_seconds - warm.eddy_seconds).max(0.0);
    Some((extra, extra / cold.baseline_seconds))
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

    #[test]
    fn split_spreads_the_remainder() {
        assert_eq!(split(10, 3), vec![4, 3, 3]);
        assert_eq!(split(9, 3), vec![3, 3, 3]);
        assert_eq!(split(3, 3).iter().sum::<u64>(), 3);
        let t = tree_set(1000, 7, 3);
        assert_eq!(t.iter().map(|(_, s)| s).sum::<u64>(), 1000);
        assert_eq!(t[4].0, "d1/f4");
    }

    #[test]
    fn write_then_read_verifies_and_catches_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let set = flat_set(3 * IO_BYTES as u64 + 17, 2);
        let fs = files(dir.path(), &set, "x");
        // A buffer smaller than a file: segments are checked one after the other.
        let mut buf = vec![0u8; IO_BYTES];
        write_files(&fs, &mut buf, true).unwrap();
        read_files(&fs, &mut buf).unwrap();
        // Another key name: other bytes.
        assert!(read_files(&files(dir.path(), &set, "y"), &mut buf).is_err());
        // One flipped byte past the first segment.
        let p = &fs[1].path;
        let mut data = std::fs::read(p).unwrap();
        data[IO_BYTES + 5] ^= 1;
        std::fs::write(p, &data).unwrap();
        let e = read_files(&fs, &mut buf).unwrap_err().to_string();
        assert!(e.contains("verification failed"), "{e}");
        // A short file.
        std::fs::write(p, &data[..100]).unwrap();
        assert!(read_files(&fs, &mut buf).is_err());
    }

    #[test]
    fn table_names_every_phase_and_the_headlines() {
        let d = Duration::from_millis;
        let one = |b: u64, e: u64| Rounds {
            base: vec![d(b)],
            eddy: vec![d(e)],
            moved: vec![Some(1 << 20)],
        };
        let r = TierReport {
            format: FORMAT.into(),
            backend: "/b".into(),
            backend_fs: "ext4".into(),
            storage: "/s".into(),
            daemons: 3,
            config: None,
            size_bytes: 1 << 20,
            rounds: 1,
            files: 8,
            tree_files: 64,
            tree_dirs: 4,
            page_cache_dropped: true,
            page_cache: "dropped".into(),
            mount_read_ahead_kb: Some(128),
            cpus: 2,
            cpu_busy_pct: Some(1.0),
            started_unix: 1,
            phases: vec![
                TierPhase::new("cold-read", "b", "e", 1 << 20, &one(100, 125), Some(0.9)),
                TierPhase::new("warm-read", "b", "e", 1 << 20, &one(90, 75), Some(0.95)),
                TierPhase::new("stage-in", "b", "e", 1 << 20, &one(300, 100), None),
                TierPhase::new("stage-out", "b", "e", 1 << 20, &one(100, 200), None),
            ],
            notes: vec!["n1".into()],
        };
        let t = table(&r);
        assert!(t.contains("cold-read: 0.800× the baseline, misses"), "{t}");
        assert!(t.contains("stage-in is 3.00× faster than cp -r"), "{t}");
        assert!(t.contains("stage-out is 2.00× slower than"), "{t}");
        assert!(t.contains("note: n1"), "{t}");
        // cold 125 ms - warm 75 ms = 50 ms, half the direct backend read of 100 ms.
        assert!(t.contains("a miss costs 0.05 s over a hit"), "{t}");
        assert!(
            t.contains("0.50× the time of reading them from the backend"),
            "{t}"
        );
        let line = t.lines().find(|l| l.starts_with("cold-read ")).unwrap();
        assert!(line.contains("0.800") && line.contains(">=0.90"), "{t}");
    }
}
