//! `eddy bench tier --merging`: the write-back of an ior-hard file with and without the
//! daemons' per-object merging (decision 0074), in one run.
//!
//! Two local deployments side by side, each linking `/tier` to a directory of its own in the
//! backend work directory: one with `backend_merge_window_us` at its default (merging on),
//! one with 0 (off). Each round, on each (alternating which goes first), `--files` ranks
//! write one shared file through the client library, ior-hard style: 47,008-byte records,
//! record i of rank r at (i · ranks + r) · 47,008, all ranks at once (one thread each);
//! then `eddy stage-out` of it is timed, and the daemons' backend write calls and merged
//! requests (`eddy status --json`) are counted across it. The backend copy is verified byte
//! for byte after each stage-out. For reference, the same file written directly into the
//! backend by the ranks (one pwrite per record, fsync at the end). Ratios are off / on: the
//! backend writes saved and the stage-out time (higher is better).

use super::files::{files, read_files, DataFile};
use super::host::{fs_type, scratch, sync_all};
use super::phases::eddy;
use super::{median, mib, storage_or_default, IO_BYTES, LINK_PREFIX, MIB};
use crate::args::TierArgs;
use crate::fs::{EddyFs, Fs, OpenMode};
use crate::suite::Deployment;
use crate::{interrupt, pattern};
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Identifies the JSON format of `eddy bench tier --merging`.
pub const FORMAT: &str = "eddy-bench-tier-merging/1";
/// ior-hard's record size.
pub const RECORD: u64 = 47_008;

/// The JSON file of a merging run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergingReport {
    pub format: String,
    pub backend: String,
    pub backend_fs: String,
    pub storage: String,
    pub daemons: u32,
    pub ranks: u32,
    pub record_bytes: u64,
    /// The shared file's size (records × ranks × record bytes).
    pub file_bytes: u64,
    pub rounds: u32,
    /// `backend_merge_window_us` of the deployment with merging on.
    pub window_us: u64,
    pub started_unix: u64,
    pub on: Side,
    pub off: Side,
    /// Backend writes off / on (medians), and stage-out time off / on.
    pub writes_ratio: f64,
    pub time_ratio: f64,
    /// The ranks writing the file directly into the backend (fsync at the end).
    pub direct_seconds: f64,
    pub direct_rounds_s: Vec<f64>,
    pub direct_writes: u64,
    pub notes: Vec<String>,
}

/// One deployment's figures over the rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Side {
    pub stage_out_seconds: f64,
    pub stage_out_rounds_s: Vec<f64>,
    pub stage_out_mib_s: f64,
    /// Backend pwrite calls of the stage-out, and the requests merged into others, per round.
    pub backend_writes: Vec<u64>,
    pub merged_writes: Vec<u64>,
    /// How long the ranks' writes into Eddy took, per round.
    pub write_rounds_s: Vec<f64>,
}

fn median_u64(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.get(s.len() / 2).copied().unwrap_or(0)
}

impl Side {
    fn new(onces: &[Once], bytes: u64) -> Side {
        let outs: Vec<Duration> = onces.iter().map(|o| o.stage_out).collect();
        let med = median(&outs).as_secs_f64();
        Side {
            stage_out_seconds: med,
            stage_out_rounds_s: outs.iter().map(Duration::as_secs_f64).collect(),
            stage_out_mib_s: bytes as f64 / MIB / med.max(1e-9),
            backend_writes: onces.iter().map(|o| o.writes).collect(),
            merged_writes: onces.iter().map(|o| o.merged).collect(),
            write_rounds_s: onces.iter().map(|o| o.write.as_secs_f64()).collect(),
        }
    }
}

struct Once {
    stage_out: Duration,
    writes: u64,
    merged: u64,
    write: Duration,
}

/// One of the two deployments.
struct Dep {
    on: bool,
    state: PathBuf,
    /// Its linked backend directory.
    work: PathBuf,
    deployment: Deployment,
}

pub fn run(a: TierArgs) -> anyhow::Result<()> {
    let ranks = a.files;
    if ranks == 0 || a.daemons == 0 || a.rounds == 0 {
        bail!("--files (the ranks), --daemons and --rounds must be at least 1");
    }
    let records = a.size / (RECORD * u64::from(ranks));
    if records == 0 {
        bail!(
            "--size {} holds no record of {RECORD} bytes per rank ({ranks} ranks)",
            a.size
        );
    }
    let file_bytes = records * u64::from(ranks) * RECORD;
    let user_config = match &a.config {
        Some(c) => std::fs::read_to_string(c)
            .with_context(|| format!("cannot read the config {}", c.display()))?,
        None => String::new(),
    };
    if user_config.contains("backend_merge_window_us") {
        bail!("with --merging the benchmark sets backend_merge_window_us itself (0 and the default): leave it out of --config");
    }
    let window_us = eddy_config::Config::default().backend_merge_window_us;
    let storage = storage_or_default(a.storage.as_ref());
    // Per round: two staged-out copies and the direct one in the backend, two in the caches.
    let need = file_bytes.saturating_mul(u64::from(a.rounds));
    let scratch = scratch(
        &storage,
        a.backend.as_ref(),
        (need * 3, need * 2),
        "eddy-bench-merging.",
    )?;
    let (base, work) = (&scratch.base, scratch.work.clone());
    let exe = std::env::current_exe().context("cannot find the eddy program's path")?;
    let backend_fs = fs_type(&work);
    note!(
        "eddy bench tier --merging: backend {} ({backend_fs}), storage {}, {ranks} ranks write \
         {} in {RECORD}-byte records, {} rounds",
        work.display(),
        base.path().display(),
        mib(file_bytes),
        a.rounds
    );
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut deps = Vec::new();
    for on in [true, false] {
        let name = if on { "on" } else { "off" };
        let dir = base.path().join(name);
        let (root, mount, state) = (dir.join("root"), dir.join("mnt"), dir.join("state"));
        let linked = work.join(name);
        for d in [&mount, &linked] {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
        }
        let config = dir.join("config.toml");
        let window = if on { window_us } else { 0 };
        std::fs::write(
            &config,
            format!("{user_config}\nbackend_merge_window_us = {window}\n"),
        )
        .with_context(|| format!("cannot write {}", config.display()))?;
        let mut link = OsString::from(format!("{LINK_PREFIX}="));
        link.push(&linked);
        let args: Vec<OsString> = vec!["--link".into(), link, "--config".into(), config.into()];
        let deployment = Deployment::start(&exe, a.daemons, &root, &mount, &state, &args)?;
        deps.push(Dep {
            on,
            state,
            work: linked,
            deployment,
        });
    }
    let result = measure(&exe, &deps, &work, ranks, records, a.rounds);
    let mut stopped = Ok(());
    for d in &mut deps {
        let s = d.deployment.stop();
        if stopped.is_ok() {
            stopped = s;
        }
    }
    let (on, off, direct) = result?;
    stopped?;
    drop(deps);
    let on = Side::new(&on, file_bytes);
    let off = Side::new(&off, file_bytes);
    let mut notes = Vec::new();
    if backend_fs == "tmpfs" {
        notes.push("the backend is on tmpfs: its writes go to RAM".into());
    }
    let direct_med = median(&direct).as_secs_f64();
    let report = MergingReport {
        format: FORMAT.into(),
        backend: work.display().to_string(),
        backend_fs,
        storage: base.path().display().to_string(),
        daemons: a.daemons,
        ranks,
        record_bytes: RECORD,
        file_bytes,
        rounds: a.rounds,
        window_us,
        started_unix,
        writes_ratio: median_u64(&off.backend_writes) as f64
            / median_u64(&on.backend_writes).max(1) as f64,
        time_ratio: off.stage_out_seconds / on.stage_out_seconds.max(1e-9),
        on,
        off,
        direct_seconds: direct_med,
        direct_rounds_s: direct.iter().map(Duration::as_secs_f64).collect(),
        direct_writes: records * u64::from(ranks),
        notes,
    };
    crate::table_and_json(a.json.as_deref(), &table(&report), &report)
}

type Measured = (Vec<Once>, Vec<Once>, Vec<Duration>);

fn measure(
    exe: &Path,
    deps: &[Dep],
    work: &Path,
    ranks: u32,
    records: u64,
    rounds: u32,
) -> anyhow::Result<Measured> {
    let fss = deps
        .iter()
        .map(|d| EddyFs::connect(&d.state))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (mut on, mut off, mut direct) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let order: Vec<usize> = if r % 2 == 0 { vec![0, 1] } else { vec![1, 0] };
        for i in order {
            interrupt::check()?;
            let (d, fs) = (&deps[i], &fss[i]);
            let once = one_round(exe, d, fs, r, ranks, records)?;
            if d.on {
                on.push(once);
            } else {
                off.push(once);
            }
        }
        direct.push(write_direct(work, r, ranks, records)?);
    }
    Ok((on, off, direct))
}

/// The shared file of round `r` (namespace path under the link, and its pattern file).
fn shared(r: u32, dir: &Path, ranks: u32, records: u64) -> DataFile {
    let set = vec![(format!("ior-r{r}.bin"), records * u64::from(ranks) * RECORD)];
    files(dir, &set, "ior").remove(0)
}

/// The ranks' records of `f`, record i of rank `rank` at (i · ranks + rank) · RECORD.
fn records_of(rank: u32, ranks: u32, records: u64) -> impl Iterator<Item = u64> {
    (0..records).map(move |i| (i * u64::from(ranks) + u64::from(rank)) * RECORD)
}

/// Runs `rank(r)` for every rank at once, each on a thread of its own; the first error.
fn each_rank(ranks: u32, rank: impl Fn(u32) -> anyhow::Result<()> + Sync) -> anyhow::Result<()> {
    std::thread::scope(|s| {
        let rank = &rank;
        let threads: Vec<_> = (0..ranks).map(|r| s.spawn(move || rank(r))).collect();
        for t in threads {
            t.join()
                .map_err(|_| anyhow::anyhow!("a rank's thread panicked"))??;
        }
        Ok(())
    })
}

fn one_round(
    exe: &Path,
    d: &Dep,
    fs: &EddyFs,
    r: u32,
    ranks: u32,
    records: u64,
) -> anyhow::Result<Once> {
    note!(
        "eddy bench tier --merging: round {}, merging {}",
        r + 1,
        if d.on { "on" } else { "off" }
    );
    let f = shared(r, Path::new(LINK_PREFIX), ranks, records);
    let ns = f.path().to_path_buf();
    fs.close(fs.open(&ns, OpenMode::Truncate)?)?;
    let clock = Instant::now();
    each_rank(ranks, |rank| {
        let h = fs.open(&ns, OpenMode::Write)?;
        let mut buf = vec![0u8; RECORD as usize];
        for off in records_of(rank, ranks, records) {
            pattern::fill(&mut buf, f.key(), off);
            fs.write_all_at(&h, &buf, off)
                .with_context(|| format!("rank {rank}: write at {off}"))?;
        }
        fs.close(h)?;
        Ok(())
    })?;
    let write = clock.elapsed();
    sync_all();
    let before = counts(exe, &d.state)?;
    let args = [
        "stage-out".into(),
        "--state".into(),
        d.state.clone().into(),
        ns.clone().into_os_string(),
    ];
    let (stage_out, _) = eddy(exe, &args)?;
    let after = counts(exe, &d.state)?;
    let copy = shared(r, &d.work, ranks, records);
    let mut buf = vec![0u8; IO_BYTES];
    read_files(std::slice::from_ref(&copy), &mut buf)
        .with_context(|| format!("checking the backend copy {}", copy.path().display()))?;
    Ok(Once {
        stage_out,
        writes: after.0.saturating_sub(before.0),
        merged: after.1.saturating_sub(before.1),
        write,
    })
}

/// The deployment's backend write calls and merged write requests (`eddy status --json`,
/// summed over the daemons).
fn counts(exe: &Path, state: &Path) -> anyhow::Result<(u64, u64)> {
    let args = [
        "status".into(),
        "--state".into(),
        state.as_os_str().to_owned(),
        "--json".into(),
    ];
    let (_, out) = eddy(exe, &args)?;
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("eddy status --json: not JSON")?;
    let daemons = v["daemons"]
        .as_array()
        .context("eddy status --json: no daemons")?;
    let sum = |key: &str| {
        daemons
            .iter()
            .map(|d| d["tier"][key].as_u64())
            .sum::<Option<u64>>()
            .with_context(|| format!("eddy status --json: no tier.{key}"))
    };
    Ok((sum("backend_writes")?, sum("merged_writes")?))
}

/// The ranks write the file directly into the backend (one pwrite per record), then fsync.
fn write_direct(work: &Path, r: u32, ranks: u32, records: u64) -> anyhow::Result<Duration> {
    let dir = work.join("direct");
    std::fs::create_dir_all(&dir)?;
    let f = shared(r, &dir, ranks, records);
    let file = std::fs::File::create(f.path())
        .with_context(|| format!("cannot create {}", f.path().display()))?;
    sync_all();
    let clock = Instant::now();
    each_rank(ranks, |rank| {
        let mut buf = vec![0u8; RECORD as usize];
        for off in records_of(rank, ranks, records) {
            pattern::fill(&mut buf, f.key(), off);
            file.write_all_at(&buf, off)?;
        }
        Ok(())
    })?;
    file.sync_all()?;
    let took = clock.elapsed();
    let mut buf = vec![0u8; IO_BYTES];
    read_files(std::slice::from_ref(&f), &mut buf)?;
    std::fs::remove_file(f.path())?;
    Ok(took)
}

fn table(r: &MergingReport) -> String {
    let mut s = format!(
        "eddy bench tier --merging: {} ranks write {} in {}-byte records (ior-hard), \
         {} daemons, backend {} ({}), {} round{}, merge window {} µs\n\n",
        r.ranks,
        mib(r.file_bytes),
        r.record_bytes,
        r.daemons,
        r.backend,
        r.backend_fs,
        r.rounds,
        if r.rounds == 1 { "" } else { "s" },
        r.window_us
    );
    s.push_str(&format!(
        "{:<22} {:>12} {:>10} {:>16} {:>14}\n",
        "write-back", "stage-out", "MiB/s", "backend writes", "merged"
    ));
    for (label, side) in [("merging on", &r.on), ("merging off", &r.off)] {
        s.push_str(&format!(
            "{:<22} {:>10.2} s {:>10.1} {:>16} {:>14}\n",
            label,
            side.stage_out_seconds,
            side.stage_out_mib_s,
            median_u64(&side.backend_writes),
            median_u64(&side.merged_writes)
        ));
    }
    s.push_str(&format!(
        "{:<22} {:>12.2} {:>10} {:>16.1}\n",
        "ratio (off / on)", r.time_ratio, "", r.writes_ratio
    ));
    s.push_str(&format!(
        "\nthe ranks writing the backend directly (a pwrite per record, fsync): {:.2} s, {} \
         writes\n",
        r.direct_seconds, r.direct_writes
    ));
    for n in &r.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_records_interleave_and_cover_the_file() {
        let (ranks, records) = (3u32, 4u64);
        let mut all: Vec<u64> = (0..ranks)
            .flat_map(|r| records_of(r, ranks, records))
            .collect();
        assert_eq!(records_of(1, ranks, records).nth(1), Some(4 * RECORD));
        all.sort_unstable();
        let want: Vec<u64> = (0..12).map(|i| i * RECORD).collect();
        assert_eq!(all, want);
    }
}
