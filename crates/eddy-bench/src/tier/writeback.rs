//! `eddy bench writeback`: early write-back (`eddy writeback`, decision 0041) measured on the
//! same job, in one run.
//!
//! A local deployment links `/tier` to a fresh backend work directory (as `eddy bench tier`
//! does). The "job" writes W bytes (`--size`) steadily over T seconds (`--seconds`) through
//! the client library into `--files` files under `/tier/wb/rN-MODE`, 1 MiB at a time,
//! round-robin, paced so that by time t it has written W·t/T. Each round has two runs of it:
//!
//! | run | during the job | teardown (timed) |
//! |---|---|---|
//! | `without` | nothing | `eddy stage-out` of the job's directory |
//! | `with` | `eddy writeback --end START+T --margin M` beside it | the same |
//!
//! The two runs alternate which goes first; a run's figure is its median over `--rounds`.
//! Before each stage-out the dirty bytes of the deployment are read (`eddy status --json`)
//! and the host's dirty pages are synced (not timed). The backend copies are verified byte
//! for byte after each stage-out. For reference, the same W bytes are written directly into
//! the backend (fsync per file) in each round: the backend's raw write rate. The ratio is
//! the stage-out time without over the time with early write-back (higher is better).

use super::files::{files, flat_set, read_files, FileSet};
use super::host::{fs_type, sync_all};
use super::phases::eddy;
use super::{median, mib, IO_BYTES, LINK_PREFIX, MIB};
use crate::args::WritebackArgs;
use crate::fs::{EddyFs, Fs, OpenMode};
use crate::suite::Deployment;
use crate::{interrupt, pattern};
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Identifies the JSON format of `eddy bench writeback`.
pub const FORMAT: &str = "eddy-bench-writeback/1";
/// The size, duration and files of `--quick`.
const QUICK: (u64, f64, u32) = (8 << 20, 3.0, 2);

/// The JSON file of a writeback run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WritebackReport {
    pub format: String,
    pub backend: String,
    pub backend_fs: String,
    pub storage: String,
    pub daemons: u32,
    pub config: Option<String>,
    /// Bytes the job writes in each run (W).
    pub size_bytes: u64,
    /// Seconds the job spreads them over (T).
    pub job_seconds: f64,
    pub files: u32,
    pub rounds: u32,
    /// `eddy writeback --margin`.
    pub margin_s: f64,
    pub started_unix: u64,
    pub without: Run,
    pub with: Run,
    /// Teardown stage-out time without early write-back / with it (medians).
    pub ratio: f64,
    /// The backend written directly: W bytes, fsync per file (median of the rounds).
    pub raw_write_seconds: f64,
    pub raw_write_rounds_s: Vec<f64>,
    pub raw_write_mib_s: f64,
    pub notes: Vec<String>,
}

/// One run of the job, over the rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Median teardown stage-out time, and each round's.
    pub stage_out_seconds: f64,
    pub stage_out_rounds_s: Vec<f64>,
    /// Dirty bytes of the deployment when the job ended (before the stage-out), per round,
    /// and their median as a share of W.
    pub dirty_at_end_bytes: Vec<u64>,
    pub dirty_share: f64,
    /// How long the job's writes took, per round (T unless the writes could not keep up).
    pub job_rounds_s: Vec<f64>,
}

/// One round's figures of a run.
struct Once {
    stage_out: Duration,
    dirty: u64,
    job: Duration,
}

impl Run {
    fn new(onces: &[Once], size: u64) -> Run {
        let outs: Vec<Duration> = onces.iter().map(|o| o.stage_out).collect();
        let mut dirty: Vec<u64> = onces.iter().map(|o| o.dirty).collect();
        let dirty_at_end_bytes = dirty.clone();
        dirty.sort_unstable();
        let mid = dirty.get(dirty.len() / 2).copied().unwrap_or(0);
        Run {
            stage_out_seconds: median(&outs).as_secs_f64(),
            stage_out_rounds_s: outs.iter().map(Duration::as_secs_f64).collect(),
            dirty_at_end_bytes,
            dirty_share: mid as f64 / size.max(1) as f64,
            job_rounds_s: onces.iter().map(|o| o.job.as_secs_f64()).collect(),
        }
    }
}

/// Where everything of the run is.
struct Ctx {
    exe: PathBuf,
    state: PathBuf,
    work: PathBuf,
    set: FileSet,
    size: u64,
    job: Duration,
    margin: f64,
}

pub fn run(mut a: WritebackArgs) -> anyhow::Result<()> {
    if a.quick {
        (a.size, a.seconds, a.files) = QUICK;
        a.rounds = 1;
    }
    if a.files == 0 || a.daemons == 0 || a.rounds == 0 {
        bail!("--files, --daemons and --rounds must be at least 1");
    }
    if !(a.seconds.is_finite() && a.seconds >= 1.0) {
        bail!("--seconds {} must be at least 1", a.seconds);
    }
    if !(a.margin.is_finite() && a.margin >= 0.0) {
        bail!("--margin {} must be 0 or more", a.margin);
    }
    if a.size < u64::from(a.files) {
        bail!("--size {} is smaller than --files {}", a.size, a.files);
    }
    let storage = super::storage_or_default(a.storage.as_ref());
    // Per round the backend holds 3 copies (without, with, direct), the cache 2.
    let need = a.size.saturating_mul(u64::from(a.rounds));
    let scratch = super::host::scratch(
        &storage,
        a.backend.as_ref(),
        (need * 3, need * 2),
        "eddy-bench-writeback.",
    )?;
    let (base, work) = (&scratch.base, scratch.work.clone());
    let (root, mount) = (base.path().join("root"), base.path().join("mnt"));
    for d in [&mount, &work] {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    let ctx = Ctx {
        exe: std::env::current_exe().context("cannot find the eddy program's path")?,
        state: base.path().join("state"),
        work: work.clone(),
        set: flat_set(a.size, a.files),
        size: a.size,
        job: Duration::from_secs_f64(a.seconds),
        margin: a.margin,
    };
    let backend_fs = fs_type(&work);
    note!(
        "eddy bench writeback: backend {} ({backend_fs}), storage {}, the job writes {} over \
         {:.0} s, {} rounds",
        work.display(),
        base.path().display(),
        mib(a.size),
        a.seconds,
        a.rounds
    );
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let link: OsString = {
        let mut s = OsString::from(format!("{LINK_PREFIX}="));
        s.push(&work);
        s
    };
    let mut start_args: Vec<OsString> = vec!["--link".into(), link];
    if let Some(c) = &a.config {
        start_args.extend(["--config".into(), c.into()]);
    }
    let mut deployment =
        Deployment::start(&ctx.exe, a.daemons, &root, &mount, &ctx.state, &start_args)?;
    let result = measure(&ctx, a.rounds);
    let stopped = deployment.stop();
    let (without, with, raw) = result?;
    stopped?;
    drop(deployment);
    let raw_med = median(&raw).as_secs_f64();
    let without = Run::new(&without, a.size);
    let with = Run::new(&with, a.size);
    let mut notes = Vec::new();
    if with
        .job_rounds_s
        .iter()
        .chain(&without.job_rounds_s)
        .any(|s| *s > a.seconds * 1.1)
    {
        notes.push(format!(
            "the job's writes took longer than the {:.0} s asked in some rounds (the writes \
             could not keep up): its predicted end came before it ended",
            a.seconds
        ));
    }
    if backend_fs == "tmpfs" {
        notes.push("the backend is on tmpfs: its writes go to RAM".into());
    }
    let report = WritebackReport {
        format: FORMAT.into(),
        backend: work.display().to_string(),
        backend_fs,
        storage: base.path().display().to_string(),
        daemons: a.daemons,
        config: a.config.as_ref().map(|c| c.display().to_string()),
        size_bytes: a.size,
        job_seconds: a.seconds,
        files: a.files,
        rounds: a.rounds,
        margin_s: a.margin,
        started_unix,
        ratio: without.stage_out_seconds / with.stage_out_seconds.max(1e-9),
        without,
        with,
        raw_write_seconds: raw_med,
        raw_write_rounds_s: raw.iter().map(Duration::as_secs_f64).collect(),
        raw_write_mib_s: a.size as f64 / MIB / raw_med.max(1e-9),
        notes,
    };
    crate::table_and_json(a.json.as_deref(), &table(&report), &report)
}

type Measured = (Vec<Once>, Vec<Once>, Vec<Duration>);

/// Every round: both runs (alternating which goes first) and the direct write.
fn measure(ctx: &Ctx, rounds: u32) -> anyhow::Result<Measured> {
    let fs = EddyFs::connect(&ctx.state)?;
    let (mut without, mut with, mut raw) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        interrupt::check()?;
        let order = if r % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for early in order {
            let once = one_run(ctx, &fs, r, early)?;
            if early {
                with.push(once);
            } else {
                without.push(once);
            }
        }
        raw.push(direct(ctx, r)?);
    }
    Ok((without, with, raw))
}

/// The namespace directory and the pattern key name of round `r`'s run.
fn names(r: u32, early: bool) -> (String, String) {
    let name = format!("wb/r{r}-{}", if early { "with" } else { "without" });
    (format!("{LINK_PREFIX}/{name}"), name)
}

/// One run of the job (with `eddy writeback` beside it if `early`), then the teardown
/// stage-out, timed, and the check of the backend copies.
fn one_run(ctx: &Ctx, fs: &EddyFs, r: u32, early: bool) -> anyhow::Result<Once> {
    let (ns_dir, name) = names(r, early);
    note!(
        "eddy bench writeback: round {}, {} early write-back",
        r + 1,
        if early { "with" } else { "without" }
    );
    fs.mkdir(Path::new(&format!("{LINK_PREFIX}/wb"))).ok();
    fs.mkdir(Path::new(&ns_dir))
        .with_context(|| format!("cannot create {ns_dir}"))?;
    let start = SystemTime::now();
    let mut helper = if early {
        let end = start.duration_since(UNIX_EPOCH)?.as_secs_f64() + ctx.job.as_secs_f64();
        Some(Helper::spawn(ctx, end)?)
    } else {
        None
    };
    let job = write_job(fs, ctx, &ns_dir, &name);
    let helped = match helper.as_mut() {
        Some(h) => h.wait(),
        None => Ok(()),
    };
    let job = job?;
    helped?;
    let dirty = dirty_bytes(ctx)?;
    sync_all();
    let args = [
        "stage-out".into(),
        "--state".into(),
        ctx.state.clone().into(),
        ns_dir.clone().into(),
    ];
    let (stage_out, _) = eddy(&ctx.exe, &args)?;
    let mut buf = vec![0u8; IO_BYTES];
    read_files(&files(&ctx.work.join(&name), &ctx.set, &name), &mut buf)
        .with_context(|| format!("checking the backend copies of {ns_dir}"))?;
    Ok(Once {
        stage_out,
        dirty,
        job,
    })
}

/// The job: the files written round-robin, 1 MiB at a time, paced over `ctx.job`; closed at
/// the end. Returns how long the writes took.
fn write_job(fs: &EddyFs, ctx: &Ctx, ns_dir: &str, name: &str) -> anyhow::Result<Duration> {
    let targets = files(Path::new(ns_dir), &ctx.set, name);
    let mut open = Vec::new();
    for (f, (rel, _)) in targets.iter().zip(&ctx.set) {
        let p = Path::new(ns_dir).join(rel);
        let h = fs
            .open(&p, OpenMode::Truncate)
            .with_context(|| format!("cannot create {}", p.display()))?;
        open.push((h, f.clone(), 0u64));
    }
    let clock = Instant::now();
    let mut written = 0u64;
    let mut buf = vec![0u8; IO_BYTES];
    while written < ctx.size {
        interrupt::check()?;
        for (h, f, off) in open.iter_mut() {
            let n = (f.size() - *off).min(IO_BYTES as u64) as usize;
            if n == 0 {
                continue;
            }
            pattern::fill(&mut buf[..n], f.key(), *off);
            fs.write_all_at(h, &buf[..n], *off)
                .with_context(|| format!("write of {} at {off}", f.path().display()))?;
            *off += n as u64;
            written += n as u64;
            // Paced: by time t, W·t/T bytes.
            let due = ctx.job.mul_f64(written as f64 / ctx.size as f64);
            if let Some(ahead) = due.checked_sub(clock.elapsed()) {
                std::thread::sleep(ahead);
            }
        }
    }
    let took = clock.elapsed();
    for (h, f, _) in open {
        fs.close(h)
            .with_context(|| format!("close of {}", f.path().display()))?;
    }
    Ok(took)
}

/// The W bytes written directly into the backend, fsync per file; its wall time.
fn direct(ctx: &Ctx, r: u32) -> anyhow::Result<Duration> {
    let name = format!("direct/r{r}");
    let set = files(&ctx.work.join(&name), &ctx.set, &name);
    sync_all();
    let mut buf = vec![0u8; IO_BYTES];
    super::files::write_files(&set, &mut buf, true)
}

/// The deployment's dirty bytes (`eddy status --json`, summed over the daemons).
fn dirty_bytes(ctx: &Ctx) -> anyhow::Result<u64> {
    let args = [
        "status".into(),
        "--state".into(),
        ctx.state.clone().into(),
        "--json".into(),
    ];
    let (_, out) = eddy(&ctx.exe, &args)?;
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("eddy status --json: not JSON")?;
    let daemons = v["daemons"]
        .as_array()
        .context("eddy status --json: no daemons")?;
    daemons
        .iter()
        .map(|d| d["tier"]["dirty_bytes"].as_u64())
        .sum::<Option<u64>>()
        .context("eddy status --json: no tier.dirty_bytes")
}

/// `eddy writeback` running beside the job; stopped (SIGTERM) if dropped before it ended.
struct Helper {
    child: Option<Child>,
}

impl Helper {
    fn spawn(ctx: &Ctx, end: f64) -> anyhow::Result<Helper> {
        let child = Command::new(&ctx.exe)
            .arg("writeback")
            .arg("--state")
            .arg(&ctx.state)
            .arg("--end")
            .arg(format!("{end:.3}"))
            .arg("--margin")
            .arg(ctx.margin.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {} writeback", ctx.exe.display()))?;
        Ok(Helper { child: Some(child) })
    }

    /// Waits for it to end (at the predicted end); fails with its output if it failed.
    fn wait(&mut self) -> anyhow::Result<()> {
        let Some(child) = self.child.take() else {
            return Ok(());
        };
        let out = child
            .wait_with_output()
            .context("waiting for eddy writeback")?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!(
                "eddy writeback failed ({}):\n{text}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        for line in text.lines() {
            note!("  {line}");
        }
        Ok(())
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(pid) = i32::try_from(child.id()) {
                // SAFETY: kill(2) on the pid of our own child, not yet reaped.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            let _ = child.wait();
        }
    }
}

/// The human table.
fn table(r: &WritebackReport) -> String {
    let mut s = format!(
        "eddy bench writeback: the job writes {} over {:.0} s into {} files; {} daemons, \
         backend {} ({}), {} round{}, margin {:.1} s\n\n",
        mib(r.size_bytes),
        r.job_seconds,
        r.files,
        r.daemons,
        r.backend,
        r.backend_fs,
        r.rounds,
        if r.rounds == 1 { "" } else { "s" },
        r.margin_s
    );
    s.push_str(&format!(
        "{:<28} {:>18} {:>14} {:>11}\n",
        "run", "teardown stage-out", "dirty at end", "share of W"
    ));
    for (label, run) in [
        ("without early write-back", &r.without),
        ("with eddy writeback", &r.with),
    ] {
        let mut d = run.dirty_at_end_bytes.clone();
        d.sort_unstable();
        let mid = d.get(d.len() / 2).copied().unwrap_or(0);
        s.push_str(&format!(
            "{:<28} {:>16.2} s {:>14} {:>9.1} %\n",
            label,
            run.stage_out_seconds,
            mib(mid),
            run.dirty_share * 100.0
        ));
    }
    s.push_str(&format!(
        "{:<28} {:>18.1}\n\nraw backend write of the same {} (fsync per file): {:.2} s, {:.0} \
         MiB/s\n",
        "ratio (without / with)",
        r.ratio,
        mib(r.size_bytes),
        r.raw_write_seconds,
        r.raw_write_mib_s
    ));
    for n in &r.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}
