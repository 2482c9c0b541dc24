//! `eddy bench tier --streams`: cold reads of backend files by `READERS` readers at once,
//! each its own file, sequentially (1 MiB reads) and strided (1 MiB records every
//! `STRIDE_RECORDS` MiB), through the mount and through the client library, each with stream
//! hints on (the deployment's default) and off (`stream_hints = false`: a second mount of the
//! same deployment, and a second library client), against the same files read directly from
//! the backend by as many threads: decision 0072. Every phase and round reads files of its
//! own, never touched by Eddy before; the page cache is dropped before each side. Bytes are
//! checked against their pattern after the clock stops.

use super::files::{files, flat_set, write_files, DataFile, FileSet};
use super::phases::{eddy, pair, say, Counter, Ctx, Sets};
use super::{Rounds, TierPhase, IO_BYTES, LINK_PREFIX};
use crate::{interrupt, pattern};
use anyhow::{anyhow, bail, Context};
use eddy_client::{Client, Creds};
use std::ffi::OsString;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Readers at once, each its own file.
pub(super) const READERS: u32 = 8;
/// A strided reader reads one record of `IO_BYTES` of every `STRIDE_RECORDS`.
const STRIDE_RECORDS: u64 = 4;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    Sequential,
    Strided,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Sequential => "seq",
            Shape::Strided => "strided",
        }
    }

    /// The reads of a file of `size` bytes: (offset, length).
    fn reads(self, size: u64) -> Vec<(u64, usize)> {
        let step = match self {
            Shape::Sequential => IO_BYTES as u64,
            Shape::Strided => STRIDE_RECORDS * IO_BYTES as u64,
        };
        (0..size.div_ceil(step))
            .map(|i| {
                let off = i * step;
                (off, (size - off).min(IO_BYTES as u64) as usize)
            })
            .collect()
    }

    fn words(self) -> &'static str {
        match self {
            Shape::Sequential => "1 MiB reads in order",
            Shape::Strided => "1 MiB records, one of every 4 MiB",
        }
    }
}

/// One reader's bytes, in the order of its reads.
type Got = Vec<u8>;

/// Reads `files` with `READERS` threads at once (each its file, `shape`'s reads), through
/// the kernel; returns the wall time and each file's bytes.
fn read_kernel(
    files: &[PathBuf],
    sizes: &[u64],
    shape: Shape,
) -> anyhow::Result<(Duration, Vec<Got>)> {
    let clock = Instant::now();
    let got = std::thread::scope(|s| {
        let readers: Vec<_> = files
            .iter()
            .zip(sizes)
            .map(|(path, &size)| {
                s.spawn(move || -> anyhow::Result<Got> {
                    let f = std::fs::File::open(path)
                        .with_context(|| format!("cannot open {}", path.display()))?;
                    let reads = shape.reads(size);
                    let mut out = vec![0u8; reads.iter().map(|r| r.1).sum()];
                    let mut at = 0;
                    for (off, len) in reads {
                        f.read_exact_at(&mut out[at..at + len], off)
                            .with_context(|| format!("read of {} at {off}", path.display()))?;
                        at += len;
                    }
                    Ok(out)
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|r| r.join().map_err(|_| anyhow!("a reader thread panicked"))?)
            .collect::<anyhow::Result<Vec<Got>>>()
    })?;
    Ok((clock.elapsed(), got))
}

/// The same through a library client: one task per file on a runtime of `READERS` threads.
fn read_library(
    lib: &Library,
    paths: &[String],
    sizes: &[u64],
    shape: Shape,
) -> anyhow::Result<(Duration, Vec<Got>)> {
    let clock = Instant::now();
    let got = lib.rt.block_on(async {
        let tasks: Vec<_> = paths
            .iter()
            .zip(sizes)
            .map(|(path, &size)| {
                let c = lib.client.clone();
                let path = path.clone();
                lib.rt.spawn(async move {
                    let f = c
                        .open(&path, libc::O_RDONLY, 0, Creds::current())
                        .await
                        .map_err(|e| anyhow!("cannot open {path} through the library: {e}"))?;
                    let reads = shape.reads(size);
                    let mut out = vec![0u8; reads.iter().map(|r| r.1).sum()];
                    let mut at = 0;
                    for (off, len) in reads {
                        let n = c
                            .pread_into(&f, off, &mut out[at..at + len])
                            .await
                            .map_err(|e| anyhow!("read of {path} at {off}: {e}"))?;
                        if n != len {
                            bail!("read of {path} at {off}: {n} bytes of {len}");
                        }
                        at += len;
                    }
                    let _ = c.close(&f).await;
                    Ok(out)
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.push(
                t.await
                    .map_err(|e| anyhow!("a reader task failed: {e}"))??,
            );
        }
        Ok::<_, anyhow::Error>(all)
    })?;
    Ok((clock.elapsed(), got))
}

/// Checks each reader's bytes against its file's pattern.
fn verify(files: &[DataFile], got: &[Got], shape: Shape) -> anyhow::Result<()> {
    for (f, bytes) in files.iter().zip(got) {
        let mut at = 0;
        for (off, len) in shape.reads(f.size()) {
            pattern::verify(&bytes[at..at + len], f.key(), off)
                .map_err(|m| anyhow!("verification failed: {}: {m}", f.path().display()))?;
            at += len;
        }
    }
    Ok(())
}

/// A library client of the deployment, with stream hints on or off.
struct Library {
    rt: tokio::runtime::Runtime,
    client: Client,
}

impl Library {
    fn connect(state: &Path, hints: bool) -> anyhow::Result<Library> {
        let mut dep = crate::fs::load_deployment(state)?;
        dep.config.stream_hints = hints;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(READERS as usize)
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        let client = rt
            .block_on(Client::connect(dep))
            .map_err(|e| anyhow!("cannot reach the deployment in {}: {e}", state.display()))?;
        Ok(Library { rt, client })
    }
}

/// A second mount of the deployment whose client sends no hints: a state directory of its
/// own holding the deployment file with `stream_hints = false`. Unmounted when dropped.
struct QuietMount {
    exe: PathBuf,
    mount: PathBuf,
}

impl QuietMount {
    fn start(exe: &Path, state: &Path, base: &Path) -> anyhow::Result<QuietMount> {
        let mut dep = crate::fs::load_deployment(state)?;
        dep.config.stream_hints = false;
        let (quiet_state, mount) = (base.join("state-no-hints"), base.join("mnt-no-hints"));
        for d in [&quiet_state, &mount] {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
        }
        dep.save(&quiet_state.join("deployment.toml"))
            .map_err(|e| anyhow!("cannot write the deployment without hints: {e}"))?;
        let args: Vec<OsString> = vec![
            "mount".into(),
            "--state".into(),
            quiet_state.into(),
            mount.clone().into(),
        ];
        eddy(exe, &args)?;
        Ok(QuietMount {
            exe: exe.to_path_buf(),
            mount,
        })
    }
}

impl Drop for QuietMount {
    fn drop(&mut self) {
        let args: Vec<OsString> = vec!["umount".into(), self.mount.clone().into()];
        if let Err(e) = eddy(&self.exe, &args) {
            note!("warning: {e:#}");
        }
    }
}

/// How the Eddy side of a phase reads.
#[derive(Clone, Copy)]
enum Via<'a> {
    Mount(&'a Path, bool),
    Library(&'a Library, bool),
}

impl Via<'_> {
    fn name(&self) -> &'static str {
        match self {
            Via::Mount(_, true) => "mount",
            Via::Mount(_, false) => "mount-no-hints",
            Via::Library(_, true) => "lib",
            Via::Library(_, false) => "lib-no-hints",
        }
    }

    fn words(&self) -> &'static str {
        match self {
            Via::Mount(_, true) => "through the mount, stream hints on",
            Via::Mount(_, false) => "through a mount with stream_hints = false",
            Via::Library(_, true) => "through the library (one task per file), hints on",
            Via::Library(_, false) => "through the library, stream_hints = false",
        }
    }
}

/// Runs the stream phases: for each shape, the four ways in, each against the direct read.
pub(super) fn measure(
    ctx: &mut Ctx,
    sets: &Sets,
    size: u64,
    base: &Path,
    notes: &mut Vec<String>,
) -> anyhow::Result<Vec<TierPhase>> {
    let p = ctx.p;
    let set: FileSet = flat_set(size, READERS);
    let quiet = QuietMount::start(&p.exe, &p.state, base)?;
    let (on, off) = (
        Library::connect(&p.state, true)?,
        Library::connect(&p.state, false)?,
    );
    let ways = [
        Via::Mount(&p.mount, true),
        Via::Mount(&quiet.mount, false),
        Via::Library(&on, true),
        Via::Library(&off, false),
    ];
    let mut phases = Vec::new();
    for shape in [Shape::Sequential, Shape::Strided] {
        for via in ways {
            let name = format!("streams-{}-{}", shape.name(), via.name());
            say(&name);
            // Written directly into the backend: never touched by Eddy before its round.
            for r in 0..sets.rounds {
                let dir = format!("streams/{name}/r{r}");
                write_files(&files(&p.work.join(&dir), &set, &dir), &mut ctx.buf, true)?;
            }
            let mut rounds = Rounds::default();
            let ahead_before = ctx.read_ahead();
            for r in 0..sets.rounds {
                interrupt::check()?;
                let dir = format!("streams/{name}/r{r}");
                let backend = files(&p.work.join(&dir), &set, &dir);
                let sizes: Vec<u64> = backend.iter().map(DataFile::size).collect();
                let direct: Vec<PathBuf> = backend.iter().map(|f| f.path().to_path_buf()).collect();
                pair(
                    ctx,
                    r,
                    &mut rounds,
                    |c| {
                        c.cache.drop_all();
                        let (took, got) = read_kernel(&direct, &sizes, shape)?;
                        verify(&backend, &got, shape)?;
                        Ok(took)
                    },
                    |c| {
                        c.cache.drop_all();
                        c.eddy_side(Counter::Read, |_| {
                            let (took, got) = match via {
                                Via::Mount(m, _) => {
                                    let under = m.join(LINK_PREFIX.trim_start_matches('/'));
                                    let paths: Vec<PathBuf> = set
                                        .iter()
                                        .map(|(rel, _)| under.join(&dir).join(rel))
                                        .collect();
                                    read_kernel(&paths, &sizes, shape)?
                                }
                                Via::Library(lib, _) => {
                                    let paths: Vec<String> = set
                                        .iter()
                                        .map(|(rel, _)| format!("{LINK_PREFIX}/{dir}/{rel}"))
                                        .collect();
                                    read_library(lib, &paths, &sizes, shape)?
                                }
                            };
                            verify(&backend, &got, shape)?;
                            Ok(took)
                        })
                    },
                )?;
            }
            let bytes: u64 = set
                .iter()
                .map(|(_, s)| shape.reads(*s).iter().map(|r| r.1 as u64).sum::<u64>())
                .sum();
            if let (Some(a), Some(b)) = (ahead_before, ctx.read_ahead()) {
                notes.push(format!(
                    "{name}: the daemons fetched {:.1} MiB ahead of streams on their hints",
                    b.saturating_sub(a) as f64 / super::MIB
                ));
            }
            let hints = matches!(via, Via::Mount(_, true) | Via::Library(_, true));
            phases.push(TierPhase::new(
                &name,
                &format!("{READERS} threads reading their own backend files directly, {} (page cache dropped)", shape.words()),
                &format!("the same, other files, {} (never touched by Eddy; page cache dropped)", via.words()),
                bytes,
                &rounds,
                hints.then_some(0.9),
            ));
        }
    }
    drop(quiet);
    // Hints on against off, for each shape and way in.
    for shape in [Shape::Sequential, Shape::Strided] {
        for (with, without) in [("mount", "mount-no-hints"), ("lib", "lib-no-hints")] {
            let find = |v: &str| {
                phases
                    .iter()
                    .find(|ph| ph.phase == format!("streams-{}-{v}", shape.name()))
                    .map(|ph| ph.eddy_seconds)
            };
            if let (Some(on), Some(off)) = (find(with), find(without)) {
                notes.push(format!(
                    "{} through the {}: hints on read {:.2}x as fast as hints off (goal 1.5x where the interleaving hurts)",
                    shape.words(),
                    if with == "mount" { "mount" } else { "library" },
                    off / on.max(1e-9)
                ));
            }
        }
    }
    Ok(phases)
}
