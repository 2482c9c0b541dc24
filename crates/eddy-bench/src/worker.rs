//! One rank: connects to the coordinator, receives the plan, and runs each phase it is told
//! to run on its share of the files, verifying every byte it reads.

use crate::args::WorkerArgs;
use crate::fs::{EddyFs, Fs, LocalFs, Meta, OpenMode, Target};
use crate::msg::{recv, send, PhaseStats, ToCoord, ToWorker};
use crate::pattern;
use crate::plan::{Ior, Phase, Plan, FIND_REF, RND_READ};
use anyhow::{bail, Context};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use xxhash_rust::xxh3::xxh3_64;

/// How often a worker reports progress during a phase.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// Entry point of `eddy bench worker`.
pub fn main(args: WorkerArgs) -> anyhow::Result<()> {
    let rank = match args.rank {
        Some(r) => r,
        None => mpi_rank().context("no --rank and no MPI rank in the environment")?,
    };
    let stream = TcpStream::connect(&args.connect).with_context(|| {
        format!(
            "rank {rank}: cannot connect to coordinator {}",
            args.connect
        )
    })?;
    stream.set_nodelay(true).ok();
    let mut out = stream
        .try_clone()
        .context("cloning the coordinator connection")?;
    let mut input = BufReader::new(stream);
    send(
        &mut out,
        &ToCoord::Hello {
            rank,
            token: args.token,
        },
    )?;
    let plan = match recv::<ToWorker>(&mut input)? {
        Some(ToWorker::Setup { plan }) => *plan,
        other => bail!("rank {rank}: expected the plan, got {other:?}"),
    };
    match &plan.target {
        Target::Dir(_) => serve(&LocalFs, plan, rank, &mut out, &mut input),
        // Plain file calls, which the preload library turns into Eddy's under its prefix.
        Target::Preload { .. } => {
            let mut plan = plan;
            let rel = plan
                .work
                .strip_prefix("/")
                .unwrap_or(&plan.work)
                .to_path_buf();
            plan.work = Path::new(crate::fs::PRELOAD_PATH).join(rel);
            plan.target = Target::Dir(
                Path::new(crate::fs::PRELOAD_PATH)
                    .join(plan.target.dir().strip_prefix("/").unwrap_or(Path::new(""))),
            );
            serve(&LocalFs, plan, rank, &mut out, &mut input)
        }
        Target::Eddy { state, .. } => {
            let fs = EddyFs::connect(state).with_context(|| format!("rank {rank}"))?;
            serve(&fs, plan, rank, &mut out, &mut input)
        }
        Target::C { state, .. } => {
            let fs = crate::fs::CFs::connect(state).with_context(|| format!("rank {rank}"))?;
            serve(&fs, plan, rank, &mut out, &mut input)
        }
    }
}

/// Runs the phases the coordinator asks for, on `fs`, until told to exit.
fn serve<F: Fs>(
    fs: &F,
    mut plan: Plan,
    rank: u32,
    out: &mut TcpStream,
    input: &mut BufReader<TcpStream>,
) -> anyhow::Result<()> {
    loop {
        match recv::<ToWorker>(input)? {
            Some(ToWorker::Run { phase, sizes }) => {
                plan.sizes = sizes;
                let mut ctx = Ctx::new(fs, &plan, rank, out, input);
                let msg = match ctx.run(phase) {
                    Ok(()) => ToCoord::Done(ctx.stats),
                    Err(e) => ToCoord::Failed {
                        error: format!("{e:#}"),
                    },
                };
                send(out, &msg)?;
            }
            Some(ToWorker::Exit) | None => return Ok(()),
            Some(other) => bail!("rank {rank}: unexpected message {other:?}"),
        }
    }
}

/// The rank of this process when started by mpirun (OpenMPI, or any PMIx launcher).
fn mpi_rank() -> Option<u32> {
    ["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
}

/// The state of one rank during one phase.
pub struct Ctx<'a, F: Fs, W: Write, R: BufRead> {
    fs: &'a F,
    plan: &'a Plan,
    rank: u32,
    out: &'a mut W,
    input: &'a mut R,
    started: Instant,
    stonewalled: bool,
    last_progress: Instant,
    pub stats: PhaseStats,
}

impl<'a, F: Fs, W: Write, R: BufRead> Ctx<'a, F, W, R> {
    pub fn new(fs: &'a F, plan: &'a Plan, rank: u32, out: &'a mut W, input: &'a mut R) -> Self {
        Ctx {
            fs,
            plan,
            rank,
            out,
            input,
            started: Instant::now(),
            stonewalled: false,
            last_progress: Instant::now(),
            stats: PhaseStats::default(),
        }
    }

    /// Before creating item `i` of `count`: once the stonewall time has passed, reports the
    /// items made so far and returns the count the coordinator says every rank must reach.
    fn stonewall(&mut self, i: u64, count: u64) -> anyhow::Result<u64> {
        let limit = self.plan.stonewall_s;
        if self.stonewalled || limit <= 0.0 || self.started.elapsed().as_secs_f64() < limit {
            return Ok(count);
        }
        self.stonewalled = true;
        send(self.out, &ToCoord::Stonewalled { items: i })?;
        match recv::<ToWorker>(self.input)? {
            Some(ToWorker::Continue { to }) => Ok(to.max(i)),
            other => bail!("expected the count to continue to, got {other:?}"),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.plan.work.join(rel)
    }

    /// Records one finished operation.
    fn op(&mut self, started: Instant, bytes: u64) -> anyhow::Result<()> {
        self.stats.latency.record(started.elapsed());
        self.stats.ops += 1;
        self.stats.bytes += bytes;
        if self.last_progress.elapsed() >= PROGRESS_EVERY {
            self.last_progress = Instant::now();
            send(
                self.out,
                &ToCoord::Progress {
                    ops: self.stats.ops,
                },
            )?;
        }
        Ok(())
    }

    pub fn run(&mut self, phase: Phase) -> anyhow::Result<()> {
        let p = self.plan;
        let r = self.rank;
        let shifted = p.shifted(r);
        let res = match phase {
            Phase::IorEasyWrite => self.ior_write(&p.ior_easy()),
            Phase::IorHardWrite => self.ior_write(&p.ior_hard()),
            Phase::IorEasyRead => self.ior_read(&p.ior_easy()),
            Phase::IorHardRead => self.ior_read(&p.ior_hard()),
            Phase::Rnd4kRead => self.rnd4k(&p.ior_easy()),
            Phase::MdtestEasyWrite => {
                self.create_files(p.sizes.md_easy_files, 0, |i| Plan::md_easy_file(r, i))
            }
            Phase::MdtestEasyStat => {
                self.stat_files(p.sizes.md_easy_files, 0, |i| Plan::md_easy_file(shifted, i))
            }
            Phase::MdtestEasyDelete => {
                self.delete_files(p.sizes.md_easy_files, |i| Plan::md_easy_file(r, i))
            }
            Phase::MdtestHardWrite => {
                self.create_files(p.sizes.md_hard_files, p.opts.md_hard_bytes, |i| {
                    Plan::md_hard_file(r, i)
                })
            }
            Phase::MdtestHardStat => {
                self.stat_files(p.sizes.md_hard_files, p.opts.md_hard_bytes, |i| {
                    Plan::md_hard_file(shifted, i)
                })
            }
            Phase::MdtestHardRead => {
                self.read_files(p.sizes.md_hard_files, p.opts.md_hard_bytes, shifted, |i| {
                    Plan::md_hard_file(shifted, i)
                })
            }
            Phase::MdtestHardDelete => {
                self.delete_files(p.sizes.md_hard_files, |i| Plan::md_hard_file(r, i))
            }
            Phase::SmallfilesWrite => {
                self.create_files(p.sizes.small_files, p.opts.small_bytes, |i| {
                    Plan::small_file(r, i)
                })
            }
            Phase::SmallfilesRead => {
                self.read_files(p.sizes.small_files, p.opts.small_bytes, shifted, |i| {
                    Plan::small_file(shifted, i)
                })
            }
            Phase::Find => self.find(),
        };
        res.with_context(|| format!("rank {r}, phase {}", phase.name()))
    }

    fn ior_write(&mut self, ior: &Ior) -> anyhow::Result<()> {
        if !ior.writes(self.rank) {
            return Ok(());
        }
        let rel = ior.file(self.rank);
        let path = self.path(&rel);
        let file = self
            .fs
            .open(&path, OpenMode::Write)
            .with_context(|| format!("cannot open {} for writing", path.display()))?;
        let key = pattern::key(&rel, self.rank);
        let mut buf = vec![0u8; usize::try_from(ior.xfer)?];
        let mut count = ior.count;
        let mut i = 0;
        while i < count {
            count = self.stonewall(i, count)?;
            if i >= count {
                break;
            }
            let off = ior.offset(self.rank, i);
            pattern::fill(&mut buf, key, off);
            let t = Instant::now();
            self.fs.write_all_at(&file, &buf, off).with_context(|| {
                format!(
                    "write of {} bytes at {off} in {}",
                    buf.len(),
                    path.display()
                )
            })?;
            self.op(t, ior.xfer)?;
            i += 1;
        }
        self.stats.items = Some(i);
        self.fs
            .fsync(&file)
            .with_context(|| format!("fsync of {}", path.display()))?;
        self.fs
            .close(file)
            .with_context(|| format!("close of {}", path.display()))
    }

    fn ior_read(&mut self, ior: &Ior) -> anyhow::Result<()> {
        let Some(src) = ior.source(self.rank) else {
            return Ok(());
        };
        let rel = ior.file(src);
        let path = self.path(&rel);
        let file = self
            .fs
            .open(&path, OpenMode::Read)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let key = pattern::key(&rel, src);
        let mut buf = vec![0u8; usize::try_from(ior.xfer)?];
        for i in 0..ior.count {
            let off = ior.offset(src, i);
            let t = Instant::now();
            self.read_exact_at(&file, &mut buf, off, &path)?;
            self.op(t, ior.xfer)?;
            verify(&buf, key, off, &path)?;
        }
        self.fs
            .close(file)
            .with_context(|| format!("close of {}", path.display()))
    }

    fn rnd4k(&mut self, ior: &Ior) -> anyhow::Result<()> {
        let writers = ior.writers();
        let mut files: HashMap<String, F::File> = HashMap::new();
        let mut rng = StdRng::seed_from_u64(0x4b_0000 + u64::from(self.rank));
        let mut buf = vec![0u8; RND_READ as usize];
        let limit = self.plan.stonewall_s;
        for _ in 0..self.plan.sizes.rnd4k_ops {
            if limit > 0.0 && self.started.elapsed().as_secs_f64() >= limit {
                break; // nothing depends on the count of random reads
            }
            let w = writers[rng.gen_range(0..writers.len())];
            let i = rng.gen_range(0..ior.count);
            let within = rng.gen_range(0..ior.xfer.div_ceil(RND_READ)) * RND_READ;
            let len = RND_READ.min(ior.xfer - within) as usize;
            let off = ior.offset(w, i) + within;
            let rel = ior.file(w);
            let path = self.path(&rel);
            if !files.contains_key(&rel) {
                let f = self
                    .fs
                    .open(&path, OpenMode::Read)
                    .with_context(|| format!("cannot open {}", path.display()))?;
                files.insert(rel.clone(), f);
            }
            let Some(file) = files.get(&rel) else {
                continue;
            };
            let t = Instant::now();
            self.read_exact_at(file, &mut buf[..len], off, &path)?;
            self.op(t, len as u64)?;
            verify(&buf[..len], pattern::key(&rel, w), off, &path)?;
        }
        for (rel, f) in files {
            self.fs
                .close(f)
                .with_context(|| format!("close of {}", self.path(&rel).display()))?;
        }
        Ok(())
    }

    /// Creates `count` files of `size` bytes (pattern of this rank); size 0 = empty files.
    fn create_files(
        &mut self,
        count: u64,
        size: u64,
        name: impl Fn(u64) -> String,
    ) -> anyhow::Result<()> {
        let mut buf = vec![0u8; usize::try_from(size)?];
        let mut count = count;
        let mut i = 0;
        while i < count {
            count = self.stonewall(i, count)?;
            if i >= count {
                break;
            }
            let rel = name(i);
            let path = self.path(&rel);
            if size > 0 {
                pattern::fill(&mut buf, pattern::key(&rel, self.rank), 0);
            }
            let t = Instant::now();
            let f = self
                .fs
                .open(&path, OpenMode::CreateNew)
                .with_context(|| format!("cannot create {}", path.display()))?;
            if size > 0 {
                self.fs
                    .write_all_at(&f, &buf, 0)
                    .with_context(|| format!("write to {}", path.display()))?;
            }
            self.fs
                .close(f)
                .with_context(|| format!("close of {}", path.display()))?;
            self.op(t, size)?;
            i += 1;
        }
        self.stats.items = Some(i);
        Ok(())
    }

    fn stat_files(
        &mut self,
        count: u64,
        size: u64,
        name: impl Fn(u64) -> String,
    ) -> anyhow::Result<()> {
        for i in 0..count {
            let path = self.path(&name(i));
            let t = Instant::now();
            let md = self
                .fs
                .stat(&path)
                .with_context(|| format!("stat of {}", path.display()))?;
            self.op(t, 0)?;
            if !md.is_file || md.len != size {
                bail!(
                    "{}: expected a regular file of {size} bytes, found {} of {} bytes",
                    path.display(),
                    if md.is_file { "a file" } else { "a non-file" },
                    md.len
                );
            }
        }
        Ok(())
    }

    fn read_files(
        &mut self,
        count: u64,
        size: u64,
        writer: u32,
        name: impl Fn(u64) -> String,
    ) -> anyhow::Result<()> {
        let mut buf = Vec::with_capacity(usize::try_from(size)? + 1);
        for i in 0..count {
            let rel = name(i);
            let path = self.path(&rel);
            buf.clear();
            let t = Instant::now();
            self.read_whole(&path, &mut buf)
                .with_context(|| format!("read of {}", path.display()))?;
            self.op(t, buf.len() as u64)?;
            if buf.len() as u64 != size {
                bail!(
                    "{}: read {} bytes, expected {size}",
                    path.display(),
                    buf.len()
                );
            }
            verify(&buf, pattern::key(&rel, writer), 0, &path)?;
        }
        Ok(())
    }

    fn delete_files(&mut self, count: u64, name: impl Fn(u64) -> String) -> anyhow::Result<()> {
        for i in 0..count {
            let path = self.path(&name(i));
            let t = Instant::now();
            self.fs
                .unlink(&path)
                .with_context(|| format!("unlink of {}", path.display()))?;
            self.op(t, 0)?;
        }
        Ok(())
    }

    /// Parallel walk of the work directory: every rank lists every directory, and stats the
    /// entries whose name hashes to it, matching name, size and newer-than like IO500's find.
    fn find(&mut self) -> anyhow::Result<()> {
        let reference = self.path(FIND_REF);
        let newer_than = self
            .fs
            .stat(&reference)
            .with_context(|| format!("stat of {}", reference.display()))?
            .mtime;
        let root = self.plan.work.clone();
        let mut stack = vec![root];
        while let Some(dir) = stack.pop() {
            let entries = self
                .fs
                .readdir(&dir)
                .with_context(|| format!("readdir of {}", dir.display()))?;
            for entry in entries {
                let path = dir.join(&entry.name);
                if entry.is_dir {
                    stack.push(path);
                    continue;
                }
                let name = entry.name.as_str();
                if xxh3_64(name.as_bytes()) % u64::from(self.plan.procs) != u64::from(self.rank) {
                    continue;
                }
                self.find_one(&path, name, newer_than, entry.meta)?;
            }
        }
        Ok(())
    }

    /// Matches one entry, with the attributes its listing carried or, failing those, a stat.
    fn find_one(
        &mut self,
        path: &Path,
        name: &str,
        newer_than: SystemTime,
        listed: Option<Meta>,
    ) -> anyhow::Result<()> {
        let t = Instant::now();
        let md = match listed {
            Some(md) => md,
            None => self
                .fs
                .stat(path)
                .with_context(|| format!("stat of {}", path.display()))?,
        };
        self.op(t, 0)?;
        let newer = md.mtime > newer_than;
        if name.contains(Plan::FIND_NAME) && md.len == self.plan.find_size() && newer {
            self.stats.matches += 1;
        }
        Ok(())
    }

    fn read_exact_at(
        &self,
        file: &F::File,
        buf: &mut [u8],
        off: u64,
        path: &Path,
    ) -> anyhow::Result<()> {
        self.fs.read_exact_at(file, buf, off).with_context(|| {
            format!(
                "read of {} bytes at offset {off} of {} (file too short or I/O error)",
                buf.len(),
                path.display()
            )
        })
    }

    /// open, read to the end, close.
    fn read_whole(&self, path: &Path, buf: &mut Vec<u8>) -> std::io::Result<()> {
        let f = self.fs.open(path, OpenMode::Read)?;
        self.fs.read_to_end(&f, buf)?;
        self.fs.close(f)
    }
}

fn verify(buf: &[u8], key: u64, off: u64, path: &Path) -> anyhow::Result<()> {
    pattern::verify(buf, key, off).with_context(|| {
        format!(
            "verification failed in {}: the file system returned wrong data",
            path.display()
        )
    })
}
