//! The phases, one function each, and what they share: where everything is, the sides of
//! a round run in alternating order, and the figures `eddy status --json` gives.

use super::files::{cp_r, files, read_files, write_files, DataFile, FileSet};
use super::host::{sync_all, PageCache};
use super::{interrupt, median, mib, Rounds, TierPhase, LINK_PREFIX, MIB, SCRATCH};
use anyhow::{bail, Context};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

/// Runs `eddy ARGS` (this program; `crate::run_eddy` for the tier's argument lists): fails
/// with its output if it fails. Returns its wall time and its output.
pub(super) fn eddy(exe: &Path, args: &[OsString]) -> anyhow::Result<(Duration, Output)> {
    crate::run_eddy(exe, args)
}

/// What `eddy status --json` tells of the deployment's data, summed over the daemons.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    /// Bytes of chunk data held (None if status does not say).
    chunk_bytes: Option<u64>,
    /// Bytes read from and written to the backend by the tier (None if status does not say).
    backend_read: Option<u64>,
    backend_written: Option<u64>,
    /// Of `backend_read`, what the daemons fetched ahead of streams on their hints.
    read_ahead: Option<u64>,
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
            read_ahead: sum(&|d| d["tier"]["read_ahead_bytes"].as_u64()),
        }
    }
}

/// `after - before` of one figure, when both are known.
fn grew(before: Option<u64>, after: Option<u64>) -> Option<u64> {
    Some(after?.saturating_sub(before?))
}

/// Where everything of one run is.
pub(super) struct Paths {
    pub(super) exe: PathBuf,
    /// The backend work directory, linked at /tier.
    pub(super) work: PathBuf,
    pub(super) mount: PathBuf,
    pub(super) state: PathBuf,
    /// Destination of `cp -r`.
    pub(super) local: PathBuf,
}

impl Paths {
    /// A path under the mount for a namespace path such as /tier/cold.
    fn ns(&self, path: &str) -> PathBuf {
        self.mount.join(path.trim_start_matches('/'))
    }

    /// Round r's files of a set in directory `dir` of the backend.
    fn backend(&self, dir: &str, set: &FileSet, r: u32) -> Vec<DataFile> {
        let name = format!("{dir}/r{r}");
        files(&self.work.join(&name), set, &name)
    }

    /// The same files through the mount.
    fn mounted(&self, dir: &str, set: &FileSet, r: u32) -> Vec<DataFile> {
        let name = format!("{dir}/r{r}");
        files(&self.ns(LINK_PREFIX).join(&name), set, &name)
    }
}

/// The files of one run: `flat` (the read and stage-out phases) and `tree` (stage-in), the
/// same for every round, each round in directories of its own.
pub(super) struct Sets {
    pub(super) flat: FileSet,
    pub(super) tree: FileSet,
    pub(super) tree_dirs: u32,
    pub(super) rounds: u32,
}

impl Sets {
    /// Bytes of `flat` (each side of a read or stage-out round moves them).
    fn flat_bytes(&self) -> u64 {
        self.flat.iter().map(|(_, s)| s).sum()
    }

    /// Bytes of `tree` (each side of a stage-in round moves them).
    fn tree_bytes(&self) -> u64 {
        self.tree.iter().map(|(_, s)| s).sum()
    }
}

/// Which tier counter an Eddy side moves.
#[derive(Clone, Copy)]
pub(super) enum Counter {
    Read,
    Written,
}

/// What the phases share: the paths, the page cache, the I/O buffer.
pub(super) struct Ctx<'a> {
    pub(super) p: &'a Paths,
    pub(super) cache: PageCache,
    pub(super) buf: Vec<u8>,
}

impl Ctx<'_> {
    fn read(&mut self, files: &[DataFile]) -> anyhow::Result<Duration> {
        read_files(files, &mut self.buf)
    }

    pub(super) fn write(&mut self, files: &[DataFile], fsync: bool) -> anyhow::Result<Duration> {
        write_files(files, &mut self.buf, fsync)
    }

    fn figures(&self) -> Figures {
        Figures::of(&self.p.exe, &self.p.state)
    }

    /// Runs the Eddy side `f` and returns its time and what the tier counter moved meanwhile.
    pub(super) fn eddy_side(
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

    /// Bytes the daemons fetched ahead of streams on their hints so far (decision 0072).
    pub(super) fn read_ahead(&self) -> Option<u64> {
        self.figures().read_ahead
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
pub(super) fn pair<B, E>(
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

/// Runs the phases on the started deployment.
pub(super) fn measure(
    ctx: &mut Ctx,
    sets: &Sets,
    notes: &mut Vec<String>,
) -> anyhow::Result<Vec<TierPhase>> {
    // The native files of warm-read, in the transient part of the namespace.
    say("writing the native (scratch) Eddy files");
    let native = files(&ctx.p.ns(SCRATCH).join("native"), &sets.flat, "native");
    ctx.write(&native, false)?;
    let cold = cold_read(ctx, sets)?;
    let cold_ram = cold_read_ram(ctx, sets)?;
    let warm = warm_read(ctx, sets, &native)?;
    let warm_ram = warm_read_ram(ctx, sets, &native)?;
    let fetched = [&warm, &warm_ram]
        .iter()
        .map(|p| p.eddy_backend_bytes.unwrap_or(0))
        .sum::<u64>();
    if fetched > 0 {
        notes.push(format!(
            "the warm reads fetched {} from the backend: the cache did not hold every chunk",
            mib(fetched)
        ));
    }
    let staged_in = stage_in(ctx, sets, notes)?;
    let prefetched = prefetched_read(ctx, sets, notes)?;
    let staged_out = stage_out(ctx, sets, notes)?;
    Ok(vec![
        cold, cold_ram, warm, warm_ram, staged_in, prefetched, staged_out,
    ])
}

pub(super) fn say(what: &str) {
    note!("eddy bench tier: {what}");
}

/// `cold-read`: the backend files read directly against the same files read through the
/// mount, never touched by Eddy before; page cache dropped before each side.
fn cold_read(ctx: &mut Ctx, sets: &Sets) -> anyhow::Result<TierPhase> {
    let (p, flat) = (ctx.p, &sets.flat);
    say("cold-read");
    let mut rounds = Rounds::default();
    for r in 0..sets.rounds {
        pair(
            ctx,
            r,
            &mut rounds,
            |c| {
                c.cache.drop_all();
                c.read(&p.backend("cold", flat, r))
            },
            |c| {
                c.cache.drop_all();
                c.eddy_side(Counter::Read, |c| c.read(&p.mounted("cold", flat, r)))
            },
        )?;
    }
    Ok(TierPhase::new(
        "cold-read",
        "1 MiB reads of the backend files directly (page cache dropped)",
        "the same files through the mount, never touched by Eddy (page cache dropped)",
        sets.flat_bytes(),
        &rounds,
        Some(0.9),
    ))
}

/// `cold-read-ram`: as `cold-read` on other files, the backend's in the page cache.
fn cold_read_ram(ctx: &mut Ctx, sets: &Sets) -> anyhow::Result<TierPhase> {
    let (p, flat) = (ctx.p, &sets.flat);
    say("cold-read-ram");
    let mut rounds = Rounds::default();
    for r in 0..sets.rounds {
        ctx.read(&p.backend("ram", flat, r))?; // into the page cache
        pair(
            ctx,
            r,
            &mut rounds,
            |c| c.read(&p.backend("ram", flat, r)),
            |c| c.eddy_side(Counter::Read, |c| c.read(&p.mounted("ram", flat, r))),
        )?;
    }
    Ok(TierPhase::new(
        "cold-read-ram",
        "the same, other backend files, in the page cache",
        "those files through the mount, never touched by Eddy (backend in the page cache)",
        sets.flat_bytes(),
        &rounds,
        None,
    ))
}

/// `warm-read`: a native Eddy file against the `cold-read` files again, now cached by
/// Eddy; page cache dropped before each side.
fn warm_read(ctx: &mut Ctx, sets: &Sets, native: &[DataFile]) -> anyhow::Result<TierPhase> {
    let (p, flat) = (ctx.p, &sets.flat);
    say("warm-read");
    let mut rounds = Rounds::default();
    for r in 0..sets.rounds {
        pair(
            ctx,
            r,
            &mut rounds,
            |c| {
                c.cache.drop_all();
                c.read(native)
            },
            |c| {
                c.cache.drop_all();
                c.eddy_side(Counter::Read, |c| c.read(&p.mounted("cold", flat, r)))
            },
        )?;
    }
    Ok(TierPhase::new(
        "warm-read",
        "a native (scratch, unlinked) Eddy file of each size through the mount (page cache \
         dropped)",
        "the cold-read files again through the mount, cached by Eddy (page cache dropped)",
        sets.flat_bytes(),
        &rounds,
        Some(0.95),
    ))
}

/// `warm-read-ram`: as `warm-read`, both sides' files in the page cache.
fn warm_read_ram(ctx: &mut Ctx, sets: &Sets, native: &[DataFile]) -> anyhow::Result<TierPhase> {
    let (p, flat) = (ctx.p, &sets.flat);
    say("warm-read-ram");
    let mut rounds = Rounds::default();
    for r in 0..sets.rounds {
        // Both into the page cache first.
        ctx.read(native)?;
        ctx.read(&p.mounted("cold", flat, r))?;
        pair(
            ctx,
            r,
            &mut rounds,
            |c| c.read(native),
            |c| c.eddy_side(Counter::Read, |c| c.read(&p.mounted("cold", flat, r))),
        )?;
    }
    Ok(TierPhase::new(
        "warm-read-ram",
        "the same, Eddy's chunk files in the page cache",
        "the same, Eddy's chunk files in the page cache",
        sets.flat_bytes(),
        &rounds,
        Some(0.95),
    ))
}

/// `stage-in`: `cp -r` of a tree from the backend against `eddy stage-in` of the same tree,
/// which must have fetched all of it; both copies verified afterwards (untimed).
fn stage_in(ctx: &mut Ctx, sets: &Sets, notes: &mut Vec<String>) -> anyhow::Result<TierPhase> {
    let p = ctx.p;
    let tree_bytes = sets.tree_bytes();
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
    Ok(TierPhase::new(
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
    ))
}

/// `prefetched-read`: a tree fetched by `eddy prefetch --wait` beforehand (not counted), then
/// read through the mount for the first time, against the warm read of the same tree right
/// after it; page cache dropped before each. The Eddy side goes first in every round: it must
/// be the first read after the prefetch. A ratio of 1 is a prefetched tree read at Eddy's
/// warm speed; what the first read still fetched from the backend is the phase's backend
/// bytes (0 when the prefetch cached it all).
fn prefetched_read(
    ctx: &mut Ctx,
    sets: &Sets,
    notes: &mut Vec<String>,
) -> anyhow::Result<TierPhase> {
    let p = ctx.p;
    let tree_bytes = sets.tree_bytes();
    say("prefetched-read");
    let mut rounds = Rounds::default();
    let mut prefetches = Vec::new();
    for r in 0..sets.rounds {
        interrupt::check()?;
        let name = format!("pre/r{r}");
        let ns_tree = format!("{LINK_PREFIX}/{name}");
        let args = [
            "prefetch".into(),
            "--wait".into(),
            "--state".into(),
            p.state.clone().into(),
            ns_tree.clone().into(),
        ];
        let (took, fetched) = ctx.eddy_side(Counter::Read, |c| Ok(eddy(&c.p.exe, &args)?.0))?;
        if let Some(n) = fetched.filter(|n| *n < tree_bytes) {
            bail!(
                "eddy prefetch --wait {ns_tree} returned, but the daemons fetched only {} \
                 from the backend, not the {} of the tree",
                mib(n),
                mib(tree_bytes)
            );
        }
        prefetches.push(took);
        let tree = files(&p.ns(&ns_tree), &sets.tree, &name);
        ctx.cache.drop_all();
        let first = ctx.eddy_side(Counter::Read, |c| c.read(&tree))?;
        ctx.cache.drop_all();
        let warm = ctx.read(&tree)?;
        rounds.add(warm, first);
    }
    let prefetch = median(&prefetches);
    notes.push(format!(
        "prefetched-read: eddy prefetch --wait of the {} tree took {:.2} s ({:.0} MiB/s, \
         median, not counted)",
        mib(tree_bytes),
        prefetch.as_secs_f64(),
        tree_bytes as f64 / MIB / prefetch.as_secs_f64().max(1e-9)
    ));
    Ok(TierPhase::new(
        "prefetched-read",
        "the same tree read through the mount again right after: Eddy's warm read (page \
         cache dropped)",
        &format!(
            "{LINK_PREFIX}/pre/rN fetched by eddy prefetch --wait beforehand (not counted), \
             then read through the mount for the first time (page cache dropped)"
        ),
        tree_bytes,
        &rounds,
        Some(0.95),
    ))
}

/// `stage-out`: the same bytes written directly into the backend (fsync per file) against
/// `eddy stage-out` of them written into the mount beforehand (not counted); both verified.
fn stage_out(ctx: &mut Ctx, sets: &Sets, notes: &mut Vec<String>) -> anyhow::Result<TierPhase> {
    let (p, flat) = (ctx.p, &sets.flat);
    let flat_bytes = sets.flat_bytes();
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
    Ok(TierPhase::new(
        "stage-out",
        "writing the same bytes directly into the backend, fsync per file",
        &format!(
            "eddy stage-out {LINK_PREFIX}/out/rN of those bytes, written into the mount \
             beforehand (not counted)"
        ),
        flat_bytes,
        &rounds,
        None,
    ))
}
