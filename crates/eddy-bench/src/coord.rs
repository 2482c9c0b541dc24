//! The coordinator: prepares the work directory, starts the workers (as child processes of
//! this executable, or as MPI ranks through OpenMPI's mpirun), runs the phases with a barrier
//! between them, and turns the workers' measurements into a report.
//!
//! Workers connect back over TCP (loopback by default, so that mpirun ranks on other nodes can
//! use the same path with `--listen 0.0.0.0:0`) and prove with a random token that this
//! coordinator started them. See `msg.rs` for the protocol.

use crate::args::LaunchOpts;
use crate::fs::{EddyFs, Fs, LocalFs, Target};
use crate::interrupt;
use crate::msg::{recv, send, PhaseStats, ToCoord, ToWorker};
use crate::plan::{Phase, Plan, FIND_REF, MANIFEST};
use crate::report::{PhaseResult, Report, Score};
use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::io::BufReader;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long workers may take to start and connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long workers may take to exit once told to.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the coordinator checks for a signal while waiting for workers.
const POLL: Duration = Duration::from_millis(100);
/// The find phase's reference time lies this far in the past, so that files created right
/// after it are "newer" even on a file system with one-second timestamps.
const FIND_REF_AGE: Duration = Duration::from_secs(2);

/// What a run needs besides the plan.
pub struct RunSpec<'a> {
    pub label: String,
    pub launch: &'a LaunchOpts,
    pub keep: bool,
}

/// The manifest written by the creating phases, checked by a later run without them.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Manifest {
    procs: u32,
    sizes: crate::plan::Sizes,
    options: crate::args::WorkloadOpts,
}

/// Runs the plan's phases on its work directory and returns the report.
pub fn run_plan(plan: &Plan, spec: &RunSpec) -> anyhow::Result<Report> {
    match &plan.target {
        Target::Dir(_) => run_on(&LocalFs, plan, spec),
        Target::Eddy { state, .. } | Target::Preload { state, .. } | Target::C { state, .. } => {
            run_on(&EddyFs::connect(state)?, plan, spec)
        }
    }
}

/// `run_plan` with the coordinator's own access to the target (work directory, manifest).
fn run_on<F: Fs>(fs: &F, plan: &Plan, spec: &RunSpec) -> anyhow::Result<Report> {
    let mut plan = plan.clone();
    let plan = &mut plan;
    check_target(fs, plan)?;
    let creates = plan.phases.iter().any(|p| p.creates());
    if creates {
        create_work_dir(fs, plan)?;
    } else {
        check_manifest(fs, plan)?;
    }
    // From here on the work directory is ours to remove (unless --keep).
    let mut guard = WorkDir {
        fs,
        path: plan.work.clone(),
        remove: !spec.keep,
    };
    if creates {
        populate(fs, plan)?;
    }
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut workers = Workers::launch(plan, spec.launch)?;
    let mut phases = Vec::new();
    for phase in plan.phases.clone() {
        interrupt::check()?;
        let (stats, secs) = workers.run_phase(plan, phase)?;
        if phase.creates() {
            if let Some(items) = stats.items {
                plan.set_items(phase, items);
            }
            write_manifest(fs, plan)?;
        }
        if phase == Phase::Find && stats.matches != plan.find_expected() {
            bail!(
                "find matched {} files but {} files match its criteria: the file system lost, \
                 added or altered entries",
                stats.matches,
                plan.find_expected()
            );
        }
        let r = PhaseResult::new(phase, &stats, secs);
        note!(
            "  {:<20} {:>10.2} {}  ({:.2} s)",
            phase.name(),
            r.primary(),
            r.unit(),
            r.seconds
        );
        phases.push(r);
    }
    workers.shutdown();
    if plan.phases.iter().all(|p| p.creates()) {
        guard.remove = false; // kept for a later `--phases read`
    }
    drop(guard);
    Ok(Report {
        label: spec.label.clone(),
        target: plan.target.to_string(),
        procs: plan.procs,
        started_unix,
        options: plan.opts.clone(),
        score: Score::of(&phases),
        phases,
    })
}

/// Removes the work directory when dropped, unless told not to.
struct WorkDir<'a, F: Fs> {
    fs: &'a F,
    path: PathBuf,
    remove: bool,
}

impl<F: Fs> Drop for WorkDir<'_, F> {
    fn drop(&mut self) {
        if self.remove {
            if let Err(e) = self.fs.remove_tree(&self.path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    note!("warning: could not remove {}: {e}", self.path.display());
                }
            }
        }
    }
}

/// Clear errors for a missing, unwritable or too small target directory.
fn check_target<F: Fs>(fs: &F, plan: &Plan) -> anyhow::Result<()> {
    let dir = plan.target.dir();
    let t = &plan.target;
    let md = fs
        .stat(&dir)
        .with_context(|| format!("target directory {t} does not exist or cannot be accessed"))?;
    if !md.is_dir {
        bail!("target {t} is not a directory");
    }
    if !plan.phases.iter().any(|p| p.creates()) {
        return Ok(());
    }
    if let Err(e) = fs.check_writable(&dir) {
        bail!("target directory {t} is not writable: {e}");
    }
    let Some(avail) = fs
        .avail_bytes(&dir)
        .with_context(|| format!("cannot get the free space of {t}"))?
    else {
        return Ok(()); // the file system does not report its size
    };
    let needed = plan.space_needed();
    if avail < needed {
        bail!(
            "target directory {t} has {} MiB free but the chosen sizes need {} MiB: \
             lower --scale or the sizes, or free space",
            avail >> 20,
            needed.div_ceil(1 << 20)
        );
    }
    Ok(())
}

/// Creates the work directory; fails if it exists, so that nothing of another run is touched.
fn create_work_dir<F: Fs>(fs: &F, plan: &Plan) -> anyhow::Result<()> {
    match fs.mkdir(&plan.work) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "{} already exists (left by an earlier run with --keep or --phases write?): \
             remove it or run --phases read",
            plan.work.display()
        ),
        Err(e) => Err(e).with_context(|| format!("cannot create {}", plan.work.display())),
    }
}

/// Creates the sub-directories, the manifest and the find reference.
fn populate<F: Fs>(fs: &F, plan: &Plan) -> anyhow::Result<()> {
    for d in plan.dirs() {
        let p = plan.work.join(&d);
        fs.mkdir(&p)
            .with_context(|| format!("cannot create {}", p.display()))?;
        if plan.hashed_dirs.contains(&d) {
            fs.set_xattr(&p, eddy_config::PLACEMENT_XATTR, b"hashed")
                .with_context(|| {
                    format!(
                        "cannot set {} = hashed on {}",
                        eddy_config::PLACEMENT_XATTR,
                        p.display()
                    )
                })?;
        }
    }
    let reference = plan.work.join(FIND_REF);
    fs.write_file(&reference, b"")
        .with_context(|| format!("cannot create {}", reference.display()))?;
    let when = SystemTime::now() - FIND_REF_AGE;
    fs.set_mtime(&reference, when)
        .with_context(|| format!("cannot set the mtime of {}", reference.display()))?;
    write_manifest(fs, plan)
}

/// Records the options and the (effective) sizes for a later run without creating phases.
fn write_manifest<F: Fs>(fs: &F, plan: &Plan) -> anyhow::Result<()> {
    let m = Manifest {
        procs: plan.procs,
        sizes: plan.sizes.clone(),
        options: plan.opts.clone(),
    };
    let text = serde_json::to_string_pretty(&m).context("encoding the manifest")?;
    let path = plan.work.join(MANIFEST);
    fs.write_file(&path, text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// A run without creating phases must use the options its files were written with; it takes
/// the sizes the creating phases reached from the manifest.
fn check_manifest<F: Fs>(fs: &F, plan: &mut Plan) -> anyhow::Result<()> {
    let path = plan.work.join(MANIFEST);
    let text = fs.read_file(&path).with_context(|| {
        format!(
            "cannot read {}: run the write phases first (--phases write)",
            path.display()
        )
    })?;
    let m: Manifest = serde_json::from_slice(&text)
        .with_context(|| format!("{} is malformed", path.display()))?;
    let mut opts = plan.opts.clone();
    opts.workloads = m.options.workloads.clone();
    opts.stonewall = m.options.stonewall;
    if m.procs != plan.procs || m.options != opts {
        bail!(
            "the files in {} were written with other options (procs {}, {:?}); \
             use the same --procs, --scale and sizes as the write run",
            plan.work.display(),
            m.procs,
            m.sizes
        );
    }
    plan.sizes = m.sizes;
    Ok(())
}

enum Event {
    Msg(ToCoord),
    Closed(String),
}

/// What the coordinator knows about the ranks during one phase.
struct PhaseState {
    finished: Vec<bool>,
    /// Ranks stopped at the stonewall, with the items they made.
    waiting: Vec<Option<u64>>,
    /// Items made by finished ranks.
    items: Vec<Option<u64>>,
    progress: Vec<u64>,
    total: PhaseStats,
    errors: Vec<String>,
}

impl PhaseState {
    fn event(&mut self, r: usize, ev: Event, phase: Phase) {
        match ev {
            Event::Msg(ToCoord::Progress { ops }) => self.progress[r] = ops,
            Event::Msg(ToCoord::Stonewalled { items }) => self.waiting[r] = Some(items),
            Event::Msg(ToCoord::Done(stats)) => {
                self.items[r] = stats.items;
                self.total.merge(&stats);
                self.finished[r] = true;
            }
            Event::Msg(ToCoord::Failed { error }) => {
                self.errors.push(error);
                self.finished[r] = true;
            }
            Event::Msg(ToCoord::Hello { .. }) => {
                self.errors.push(format!("rank {r}: unexpected hello"));
                self.finished[r] = true;
            }
            Event::Closed(why) => {
                if !self.finished[r] {
                    self.errors.push(format!(
                        "rank {r}: worker lost during {} ({why})",
                        phase.name()
                    ));
                    self.finished[r] = true;
                    self.waiting[r] = None;
                }
            }
        }
    }
}

/// The running workers and their connections.
struct Workers {
    children: Vec<Child>,
    conns: Vec<TcpStream>,
    rx: Receiver<(u32, Event)>,
}

fn random_token() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if rc == 0 && end > 0 {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "localhost".to_string()
    }
}

impl Workers {
    fn launch(plan: &Plan, launch: &LaunchOpts) -> anyhow::Result<Workers> {
        let listener = TcpListener::bind(&launch.listen)
            .with_context(|| format!("cannot listen on {} for the workers", launch.listen))?;
        let local = listener.local_addr().context("listener address")?;
        let addr = if local.ip().is_unspecified() {
            format!("{}:{}", hostname(), local.port())
        } else {
            local.to_string()
        };
        let token = random_token();
        let exe = std::env::current_exe().context("cannot find this program's path")?;
        let worker_args = |rank: Option<u32>| {
            let mut a: Vec<String> = ["bench", "worker", "--connect", &addr, "--token", &token]
                .map(String::from)
                .to_vec();
            if let Some(r) = rank {
                a.extend(["--rank".to_string(), r.to_string()]);
            }
            a
        };
        let (tx, rx) = channel();
        let mut w = Workers {
            children: Vec::new(),
            conns: Vec::new(),
            rx,
        };
        // Under the preload, the workers (and only they) get the library and its settings.
        let preload: Vec<(&str, std::ffi::OsString)> = match &plan.target {
            Target::Preload { state, lib, .. } => vec![
                ("LD_PRELOAD", lib.clone().into()),
                ("EDDY_PREFIX", crate::fs::PRELOAD_PATH.into()),
                ("EDDY_STATE", state.clone().into()),
            ],
            _ => Vec::new(),
        };
        if launch.mpi {
            let mut exports = Vec::new();
            for (k, v) in &preload {
                exports.push("-x".into());
                exports.push(format!("{k}={}", v.to_string_lossy()));
            }
            let child = Command::new("mpirun")
                .args(&launch.mpirun_args)
                .args(&exports)
                .arg("-np")
                .arg(plan.procs.to_string())
                .arg(&exe)
                .args(worker_args(None))
                .stdin(Stdio::null())
                .spawn()
                .context("cannot run mpirun (is OpenMPI installed and on PATH?)")?;
            w.children.push(child);
        } else if let Some(template) = &launch.worker_launcher {
            if launch.worker_hosts.is_empty() {
                bail!("--worker-launcher needs --worker-hosts");
            }
            for rank in 0..plan.procs {
                let host = &launch.worker_hosts[rank as usize % launch.worker_hosts.len()];
                let mut cmd = vec![exe.as_os_str().to_owned()];
                cmd.extend(
                    worker_args(Some(rank))
                        .into_iter()
                        .map(std::ffi::OsString::from),
                );
                let argv = eddy_config::launcher::argv(template, host, 0, &cmd)
                    .map_err(anyhow::Error::msg)?;
                let child = Command::new(&argv[0])
                    .args(&argv[1..])
                    .envs(preload.iter().map(|(k, v)| (k, v)))
                    .stdin(Stdio::null())
                    .spawn()
                    .with_context(|| {
                        format!(
                            "cannot start worker {rank} with {}",
                            argv[0].to_string_lossy()
                        )
                    })?;
                w.children.push(child);
            }
        } else {
            for rank in 0..plan.procs {
                let child = Command::new(&exe)
                    .args(worker_args(Some(rank)))
                    .envs(preload.iter().map(|(k, v)| (k, v)))
                    .stdin(Stdio::null())
                    .spawn()
                    .with_context(|| format!("cannot start worker {}", exe.display()))?;
                w.children.push(child);
            }
        }
        w.accept(&listener, plan, &token, tx)?;
        Ok(w)
    }

    /// Accepts one connection per rank, checks its token and starts its reader thread.
    fn accept(
        &mut self,
        listener: &TcpListener,
        plan: &Plan,
        token: &str,
        tx: Sender<(u32, Event)>,
    ) -> anyhow::Result<()> {
        listener.set_nonblocking(true).context("listener")?;
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let mut slots: Vec<Option<TcpStream>> = (0..plan.procs).map(|_| None).collect();
        let mut connected = 0;
        while connected < plan.procs {
            match listener.accept() {
                Ok((stream, _)) => {
                    let rank = self.hello(stream.try_clone()?, plan, token, &tx)?;
                    if slots[rank as usize].replace(stream).is_some() {
                        bail!("two workers claim rank {rank}");
                    }
                    connected += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    interrupt::check()?;
                    self.check_alive()?;
                    if Instant::now() > deadline {
                        bail!(
                            "only {connected} of {} workers connected within {CONNECT_TIMEOUT:?}",
                            plan.procs
                        );
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(e).context("accepting a worker connection"),
            }
        }
        self.conns = slots.into_iter().flatten().collect();
        for c in &mut self.conns {
            send(
                c,
                &ToWorker::Setup {
                    plan: Box::new(plan.clone()),
                },
            )?;
        }
        Ok(())
    }

    /// Reads a worker's hello, then hands its connection to a reader thread.
    fn hello(
        &self,
        stream: TcpStream,
        plan: &Plan,
        token: &str,
        tx: &Sender<(u32, Event)>,
    ) -> anyhow::Result<u32> {
        stream.set_nonblocking(false).context("worker connection")?;
        stream.set_nodelay(true).ok();
        stream
            .set_read_timeout(Some(CONNECT_TIMEOUT))
            .context("worker connection")?;
        let mut reader = BufReader::new(stream);
        let rank = match recv::<ToCoord>(&mut reader)? {
            Some(ToCoord::Hello { rank, token: t }) if t == token && rank < plan.procs => rank,
            Some(ToCoord::Hello { rank, .. }) if rank >= plan.procs => {
                bail!(
                    "a worker announced rank {rank} but the run has {} procs",
                    plan.procs
                )
            }
            other => bail!("unexpected connection to the coordinator: {other:?}"),
        };
        reader
            .get_ref()
            .set_read_timeout(None)
            .context("worker connection")?;
        let tx = tx.clone();
        std::thread::spawn(move || loop {
            match recv::<ToCoord>(&mut reader) {
                Ok(Some(m)) => {
                    if tx.send((rank, Event::Msg(m))).is_err() {
                        return;
                    }
                }
                Ok(None) => {
                    let _ = tx.send((rank, Event::Closed("connection closed".into())));
                    return;
                }
                Err(e) => {
                    let _ = tx.send((rank, Event::Closed(format!("{e:#}"))));
                    return;
                }
            }
        });
        Ok(rank)
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        for c in &mut self.children {
            if let Some(status) = c.try_wait().context("waiting for a worker")? {
                bail!("a worker exited ({status}) before connecting; its messages are above");
            }
        }
        Ok(())
    }

    /// Runs one phase on every rank and waits for all of them: the barrier.
    fn run_phase(&mut self, plan: &Plan, phase: Phase) -> anyhow::Result<(PhaseStats, f64)> {
        let bar = progress_bar(phase, expected_ops(plan, phase));
        let t0 = Instant::now();
        for c in &mut self.conns {
            send(
                c,
                &ToWorker::Run {
                    phase,
                    sizes: plan.sizes.clone(),
                },
            )?;
        }
        let n = self.conns.len();
        let mut st = PhaseState {
            finished: vec![false; n],
            waiting: vec![None; n],
            items: vec![None; n],
            progress: vec![0; n],
            total: PhaseStats::default(),
            errors: Vec::new(),
        };
        while st.finished.iter().any(|f| !f) {
            interrupt::check()?;
            let (rank, ev) = match self.rx.recv_timeout(POLL) {
                Ok(x) => x,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => bail!("all worker connections are gone"),
            };
            st.event(rank as usize, ev, phase);
            bar.set_position(st.progress.iter().sum());
            self.release_stonewalled(&mut st)?;
        }
        let secs = t0.elapsed().as_secs_f64();
        bar.finish_and_clear();
        if !st.errors.is_empty() {
            bail!(
                "phase {} failed:\n  {}",
                phase.name(),
                st.errors.join("\n  ")
            );
        }
        Ok((st.total, secs))
    }

    /// Once every rank has either finished or stopped at the stonewall, tells the stopped ones
    /// to continue to the largest count any rank reached (IO500's wear-out).
    fn release_stonewalled(&mut self, st: &mut PhaseState) -> anyhow::Result<()> {
        if st.waiting.iter().all(Option::is_none) {
            return Ok(());
        }
        if (0..st.finished.len()).any(|r| !st.finished[r] && st.waiting[r].is_none()) {
            return Ok(());
        }
        let reached = st
            .waiting
            .iter()
            .chain(st.items.iter())
            .flatten()
            .copied()
            .max()
            .unwrap_or(0);
        for (r, w) in st.waiting.iter_mut().enumerate() {
            if w.take().is_some() {
                send(&mut self.conns[r], &ToWorker::Continue { to: reached })?;
            }
        }
        Ok(())
    }
    /// Tells the workers to exit and reaps them; kills those that do not exit in time.
    fn shutdown(&mut self) {
        for c in &mut self.conns {
            let _ = send(c, &ToWorker::Exit);
        }
        self.conns.clear();
        let deadline = Instant::now() + EXIT_TIMEOUT;
        for c in &mut self.children {
            loop {
                match c.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if interrupt::interrupted() || Instant::now() > deadline => {
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        }
        self.children.clear();
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn progress_bar(phase: Phase, len: Option<u64>) -> ProgressBar {
    let target = ProgressDrawTarget::stderr();
    let bar = match len {
        Some(n) => ProgressBar::with_draw_target(Some(n), target),
        None => ProgressBar::with_draw_target(None, target),
    };
    let style = ProgressStyle::with_template("{msg:<20} [{bar:30}] {pos}/{len} ops {elapsed}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style.progress_chars("=> "));
    bar.set_message(phase.name());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Operations a phase performs over all ranks (None if unknown in advance, as for find).
fn expected_ops(plan: &Plan, phase: Phase) -> Option<u64> {
    let n = u64::from(plan.procs);
    let ior_ops = |ior: crate::plan::Ior| ior.writers().len() as u64 * ior.count;
    let s = &plan.sizes;
    Some(match phase {
        Phase::IorEasyWrite | Phase::IorEasyRead => ior_ops(plan.ior_easy()),
        Phase::IorHardWrite | Phase::IorHardRead => ior_ops(plan.ior_hard()),
        Phase::Rnd4kRead => n * s.rnd4k_ops,
        Phase::MdtestEasyWrite | Phase::MdtestEasyStat | Phase::MdtestEasyDelete => {
            n * s.md_easy_files
        }
        Phase::MdtestHardWrite
        | Phase::MdtestHardStat
        | Phase::MdtestHardRead
        | Phase::MdtestHardDelete => n * s.md_hard_files,
        Phase::SmallfilesWrite | Phase::SmallfilesRead => n * s.small_files,
        Phase::Find => return None,
    })
}
