//! `eddy bench suite`: starts a local Eddy deployment with the `eddy` command itself
//! (`eddy start --local N --root R --mount M --state S`), runs the workloads on the mount M,
//! through the client library on the same deployment (`eddy:S`, unless --no-client) and on a
//! raw directory on the same storage in the same run, prints them with ratios to raw, and
//! always stops the deployment (`eddy stop --state S`) and removes what it created.
//! With `--hosts N` the same runs are made in the netns host layout (hosts.rs); every table,
//! plot and JSON file says which layout it is. `--placement` (decision 0047) sets the
//! deployments' placement; tables, plot and JSON say which placement was measured.

mod hosts;
mod python;

pub use python::PythonBench;

use crate::args::{LaunchOpts, SuiteArgs};
use crate::coord::{run_plan, RunSpec};
use crate::fs::Target;
use crate::plan::Plan;
use crate::report::{self, Layout, Report};
use anyhow::{bail, Context};
use eddy_config::PlacementMode;
use hosts::Hosts;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the mount may take to appear after `eddy start` returned.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);
/// Stonewall of the suite's creating phases unless --stonewall is given: bounds the suite's
/// time on a slow file system while the default sizes finish well before it on this one.
const SUITE_STONEWALL_S: f64 = 20.0;
/// Labels of the suite's runs in tables, plots and JSON.
pub const LABEL_RAW: &str = "raw";
pub const LABEL_MOUNT: &str = "eddy";
pub const LABEL_LIB: &str = "eddy-lib";
pub const LABEL_PRELOAD: &str = "eddy-preload";
pub const LABEL_C: &str = "eddy-c";
/// Default storage: tmpfs.
const TMPFS: &str = "/dev/shm";

pub fn run(a: SuiteArgs) -> anyhow::Result<()> {
    let base = storage_dir(a.storage.as_deref())?;
    let root = base.path().join("root");
    let state = base.path().join("state");
    let raw = base.path().join("raw");
    std::fs::create_dir(&raw).with_context(|| format!("cannot create {}", raw.display()))?;
    // Declared after `base`: the namespaces go before the storage does.
    let hosts = match a.hosts {
        Some(n) => Some(Hosts::build(&a, n, base.path())?),
        None => None,
    };
    let mount = match &hosts {
        Some(h) => h.shared_mount(),
        None => {
            let m = base.path().join("mnt");
            std::fs::create_dir(&m).with_context(|| format!("cannot create {}", m.display()))?;
            m
        }
    };
    let exe = std::env::current_exe().context("cannot find the eddy program's path")?;
    note!(
        "eddy bench suite: storage {}, layout: {}",
        base.path().display(),
        hosts
            .as_ref()
            .map_or(Layout::ONE_HOST.to_string(), |h| Layout::hosts_name(
                h.count() as u32
            ))
    );
    let mut extra: Vec<std::ffi::OsString> = Vec::new();
    if let Some(file) = &a.config {
        extra.extend(["--config".into(), file.into()]);
    }
    if let Some(r) = a.replicas {
        extra.extend(["--replicas".into(), r.to_string().into()]);
    }
    let targets = Targets {
        raw: Target::Dir(raw.clone()),
        mount: Target::Dir(mount.clone()),
        lib: (!a.no_client).then(|| Target::Eddy {
            state: state.clone(),
            dir: "/".to_string(),
        }),
        c: a.client_c.then(|| Target::C {
            state: state.clone(),
            dir: "/".to_string(),
        }),
        preload: match a.preload {
            true => Some(
                Target::preload(state.clone(), "/".to_string()).map_err(|e| anyhow::anyhow!(e))?,
            ),
            false => None,
        },
        state: state.clone(),
        launch: hosts.as_ref().map_or(a.launch.clone(), Hosts::launch),
        mount_launch: hosts.as_ref().map_or(a.launch.clone(), Hosts::mount_launch),
    };
    let mut variants = variants(&a, &extra)?;
    if let Some(p) = &a.placement {
        set_placement(&mut variants, p, base.path())?;
    }
    if a.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let mut rounds: Vec<Vec<Report>> = Vec::new();
    let mut layout: Option<Layout> = None;
    // Per variant (in the order given): the placement its deployment runs with.
    let mut placements: Vec<Option<Placed>> = variants.iter().map(|_| None).collect();
    // With --client-py: the Python benchmark, on the first deployment measured.
    let mut py_bench: Option<python::PythonBench> = None;
    for round in 0..a.rounds {
        // Every other round in reverse, so that neither variant always runs on a warmer
        // machine.
        let mut order: Vec<&Variant> = variants.iter().collect();
        if round % 2 == 1 {
            order.reverse();
        }
        let mut runs: Vec<Report> = Vec::new();
        for (i, v) in order.into_iter().enumerate() {
            let vi = variants
                .iter()
                .position(|w| std::ptr::eq(w, v))
                .unwrap_or_default();
            if a.rounds > 1 {
                note!("eddy bench suite: round {} of {}", round + 1, a.rounds);
            }
            if root.exists() {
                // The previous deployment's storage goes; the next starts afresh.
                std::fs::remove_dir_all(&root)
                    .with_context(|| format!("cannot remove {}", root.display()))?;
            }
            let mut deployment = match &hosts {
                None => Deployment::start(&exe, a.daemons, &root, &mount, &state, &v.extra)?,
                Some(h) => Deployment::start_on_hosts(&exe, h, &root, &state, &v.extra)?,
            };
            let placed = Placed::of(&state, hosts.is_some())?;
            let local = placed.mode == PlacementMode::Local;
            placements[vi] = Some(placed);
            if layout.is_none() {
                layout = Some(match &hosts {
                    Some(h) => h.layout(&state, None)?,
                    None => Layout {
                        name: Layout::ONE_HOST.to_string(),
                        hosts: 1,
                        namespaces: Vec::new(),
                        daemons: hosts::daemon_addrs(&state)?,
                        link_rate: None,
                        placement: None,
                    },
                });
            }
            let mut result = measure(&a, &targets, i == 0, local);
            if let (Ok(_), Some(py), None) = (&result, &a.client_py, &py_bench) {
                match python::run(py, &state, &raw) {
                    Ok(b) => py_bench = Some(b),
                    Err(e) => result = Err(e),
                }
            }
            let stopped = deployment.stop();
            let mut these = result?;
            stopped?;
            drop(deployment);
            if let Some(name) = &v.name {
                for r in these.iter_mut().filter(|r| r.label != LABEL_RAW) {
                    r.label = format!("{}[{name}]", r.label);
                }
            }
            runs.extend(these);
        }
        // Raw first, then the variants in the order they were given.
        runs.sort_by_key(|r| {
            (r.label != LABEL_RAW)
                .then(|| variants.iter().position(|v| v.labels(&r.label)))
                .flatten()
                .map_or(0, |p| p + 1)
        });
        rounds.push(runs);
    }
    let runs = report::median_of_rounds(&rounds);
    let (short, long) = placement_words(&variants, &placements);
    if let Some(l) = layout.as_mut() {
        l.placement = Some(short);
    }
    let layout_name = layout
        .as_ref()
        .map_or(Layout::ONE_HOST, |l| l.name.as_str());
    let mut head = format!("layout: {layout_name}\n{long}");
    if a.work.readback == crate::args::Readback::Own {
        head.push_str("readback: own (each rank reads back and stats its own files)\n");
    }
    print_suite(&a, &runs, &report::paired_ratios(&rounds), &head);
    if let Some(b) = &py_bench {
        crate::human(a.out.json.as_deref(), &format!("\n{}", python::table(b)));
    }
    let title = if a.no_client {
        "eddy bench suite: Eddy mount vs raw storage"
    } else {
        "eddy bench suite: Eddy mount and client library vs raw storage"
    };
    crate::write_outputs_with(&a.out, runs, title, layout, py_bench)
}

/// One deployment the suite measures: its name in labels (none: a single deployment) and
/// what `eddy start` is given beyond the suite's own arguments.
struct Variant {
    name: Option<String>,
    extra: Vec<std::ffi::OsString>,
}

impl Variant {
    /// Whether `label` is a run of this variant (`eddy[NAME]`, `eddy-lib[NAME]`, ...).
    fn labels(&self, label: &str) -> bool {
        match &self.name {
            Some(n) => label.ends_with(&format!("[{n}]")),
            None => true,
        }
    }
}

/// The deployments asked for: one per --wire setting or --variant, else one with the
/// configuration's settings (`extra`: --config and --replicas).
fn variants(a: &SuiteArgs, extra: &[std::ffi::OsString]) -> anyhow::Result<Vec<Variant>> {
    if !a.wire.is_empty() {
        return Ok(a
            .wire
            .iter()
            .map(|w| Variant {
                name: Some(w.clone()),
                extra: [extra, &["--wire".into(), w.into()]].concat(),
            })
            .collect());
    }
    if a.variant.is_empty() {
        return Ok(vec![Variant {
            name: None,
            extra: extra.to_vec(),
        }]);
    }
    let mut out: Vec<Variant> = Vec::new();
    for v in &a.variant {
        let Some((name, file)) = v.split_once('=') else {
            bail!("--variant {v:?}: expected NAME=FILE (NAME= for the defaults)");
        };
        if name.is_empty() || name.contains(['[', ']']) {
            bail!("--variant {v:?}: the name must be non-empty, without brackets");
        }
        if out.iter().any(|o| o.name.as_deref() == Some(name)) {
            bail!("--variant {name:?} is given twice");
        }
        // The variant's file replaces --config; --replicas stays.
        let mut extra: Vec<std::ffi::OsString> = Vec::new();
        if let Some(r) = a.replicas {
            extra.extend(["--replicas".into(), r.to_string().into()]);
        }
        if !file.is_empty() {
            if !Path::new(file).is_file() {
                bail!("--variant {name}: no configuration file {file}");
            }
            extra.extend(["--config".into(), file.into()]);
        } else if let Some(c) = &a.config {
            extra.extend(["--config".into(), c.into()]);
        }
        out.push(Variant {
            name: Some(name.to_string()),
            extra,
        });
    }
    Ok(out)
}

/// `--daemon-stats DIR`: the daemons' counts after the run `label` to DIR/LABEL.json.
fn save_daemon_stats(dir: &Path, state: &Path, label: &str) -> anyhow::Result<()> {
    let stats = crate::fs::EddyFs::connect(state)?.daemon_stats()?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let file = dir.join(format!("{label}.json"));
    let text = serde_json::to_string_pretty(&stats).context("encoding the daemons' counts")?;
    std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))
}

/// `--placement`: every variant's deployment gets a configuration file of its own in `base`,
/// its own file (or --config, or none) with `placement` set.
fn set_placement(variants: &mut [Variant], mode: &str, base: &Path) -> anyhow::Result<()> {
    for (i, v) in variants.iter_mut().enumerate() {
        let at = v.extra.iter().position(|x| x == "--config");
        let mut table = match at.and_then(|k| v.extra.get(k + 1)) {
            Some(file) => {
                let text = std::fs::read_to_string(file)
                    .with_context(|| format!("cannot read {}", Path::new(file).display()))?;
                text.parse::<toml::Table>()
                    .with_context(|| format!("{} is not a TOML table", Path::new(file).display()))?
            }
            None => toml::Table::new(),
        };
        table.insert("placement".into(), toml::Value::String(mode.to_string()));
        let file = base.join(format!("config-{i}.toml"));
        write_private(&file, &table.to_string())?;
        match at {
            Some(k) => v.extra[k + 1] = file.into(),
            None => v.extra.extend(["--config".into(), file.into()]),
        }
    }
    Ok(())
}

/// Writes `text` to a new file readable by its owner only.
fn write_private(file: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .with_context(|| format!("cannot write {}", file.display()))
}

/// The placement a started deployment runs with, and what "local" means in its layout.
struct Placed {
    mode: PlacementMode,
    /// What the tables say of it.
    meaning: String,
}

impl Placed {
    /// From the deployment's own record (`STATE/deployment.toml`), so that --config,
    /// --variant and --placement all end up said the same way.
    fn of(state: &Path, host_layout: bool) -> anyhow::Result<Placed> {
        let file = state.join("deployment.toml");
        let dep = eddy_config::Deployment::load(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let mode = dep.config.placement;
        let meaning = match (mode, host_layout) {
            (PlacementMode::Hashed, _) => {
                "chunks spread over all daemons by hash of (file, chunk)".to_string()
            }
            (PlacementMode::Local, true) => match &dep.config.placement_host {
                Some(h) => format!(
                    "placement_host = {h:?}: every client counts as that host, so every \
                     file goes to its daemon (hashed if none); ior-hard's directory hashed"
                ),
                None => "each file on the daemon of the host (namespace) whose rank or \
                         mount creates it; ior-hard's directory user.eddy.placement = hashed"
                    .to_string(),
            },
            (PlacementMode::Local, false) => {
                let me = dep
                    .config
                    .placement_host
                    .clone()
                    .unwrap_or_else(this_host_name);
                let here = dep.daemons.iter().filter(|d| d.host == me).count();
                if here == 0 {
                    format!(
                        "no daemon's host is this client's ({me}), so every file falls back \
                         to hashed"
                    )
                } else {
                    format!(
                        "all {here} daemons are on one host ({me}): each file whole on one \
                         of them, picked by hash of its id; ior-hard's directory hashed"
                    )
                }
            }
        };
        Ok(Placed { mode, meaning })
    }
}

/// The host name clients of this host identify with (`eddy_rpc::client_id`: Slurm's node
/// name, else the kernel's host name).
fn this_host_name() -> String {
    std::env::var("SLURMD_NODENAME")
        .ok()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "localhost".to_string())
}

/// The placement as the JSON says it (`local`, or `local [a], hashed [b]` for variants that
/// differ) and the tables' line(s) that say what it means.
fn placement_words(variants: &[Variant], placed: &[Option<Placed>]) -> (String, String) {
    let known: Vec<(&Variant, &Placed)> = variants
        .iter()
        .zip(placed)
        .filter_map(|(v, p)| p.as_ref().map(|p| (v, p)))
        .collect();
    let same = known.windows(2).all(|w| w[0].1.mode == w[1].1.mode);
    match known.first() {
        None => ("unknown".into(), "placement: unknown\n".into()),
        Some((_, p)) if same => (
            p.mode.as_str().to_string(),
            format!("placement: {} ({})\n", p.mode.as_str(), p.meaning),
        ),
        Some(_) => {
            let each = |v: &Variant| v.name.clone().unwrap_or_default();
            let short = known
                .iter()
                .map(|(v, p)| format!("{} [{}]", p.mode.as_str(), each(v)))
                .collect::<Vec<_>>()
                .join(", ");
            let long = known
                .iter()
                .map(|(v, p)| {
                    format!(
                        "placement [{}]: {} ({})\n",
                        each(v),
                        p.mode.as_str(),
                        p.meaning
                    )
                })
                .collect();
            (short, long)
        }
    }
}

/// What the suite measures on one deployment.
struct Targets {
    raw: Target,
    mount: Target,
    /// The same namespace through the client library (None with --no-client).
    lib: Option<Target>,
    /// The same namespace through the preload library (with --preload).
    preload: Option<Target>,
    /// The same namespace through libeddy's C interface (with --client-c).
    c: Option<Target>,
    /// The deployment's state directory.
    state: PathBuf,
    /// How the ranks start: on this host, or spread over the hosts of the layout.
    launch: LaunchOpts,
    /// How the mount run's ranks start (in the hosts layout each sees its host's mount).
    mount_launch: LaunchOpts,
}

/// Runs the workloads on Eddy (mount, library, C library, preload) and, `with_raw`, on raw
/// storage; returns [raw, eddy, eddy-lib, eddy-c, eddy-preload] (raw only `with_raw`,
/// eddy-lib only without --no-client, eddy-c only with --client-c, eddy-preload only with
/// --preload). With `local` placement the Eddy runs make ior-hard's directory
/// `user.eddy.placement = hashed`, through the run's own way in (the mount; the library for
/// the library, C library and preload runs, whose coordinator makes the directories).
fn measure(a: &SuiteArgs, t: &Targets, with_raw: bool, local: bool) -> anyhow::Result<Vec<Report>> {
    let one = |target: &Target, label: &str, launch: &LaunchOpts| -> anyhow::Result<Report> {
        crate::interrupt::check()?;
        note!("eddy bench suite: {label} ({target})");
        let mut plan = Plan::new(target, &a.work, "all")?;
        if a.work.stonewall.is_none() {
            plan.stonewall_s = SUITE_STONEWALL_S;
        }
        if local && label != LABEL_RAW {
            plan.hashed_dirs = plan
                .shared_file_dir()
                .into_iter()
                .map(String::from)
                .collect();
        }
        let spec = RunSpec {
            label: label.to_string(),
            launch,
            keep: false,
        };
        let report = run_plan(&plan, &spec)
            .with_context(|| format!("benchmark on {label} ({target}) failed"))?;
        if let (Some(dir), true) = (&a.daemon_stats, label != LABEL_RAW) {
            save_daemon_stats(dir, &t.state, label)?;
        }
        Ok(report)
    };
    let eddy = |first: Option<Report>| -> anyhow::Result<Vec<Report>> {
        let mut runs: Vec<Report> = first.into_iter().collect();
        runs.push(one(&t.mount, LABEL_MOUNT, &t.mount_launch)?);
        if let Some(lib) = &t.lib {
            runs.push(one(lib, LABEL_LIB, &t.launch)?);
        }
        if let Some(c) = &t.c {
            runs.push(one(c, LABEL_C, &t.launch)?);
        }
        if let Some(preload) = &t.preload {
            runs.push(one(preload, LABEL_PRELOAD, &t.launch)?);
        }
        Ok(runs)
    };
    if !with_raw {
        eddy(None)
    } else if a.raw_first {
        let raw = one(&t.raw, LABEL_RAW, &t.launch)?;
        eddy(Some(raw))
    } else {
        let mut runs = eddy(None)?;
        runs.insert(0, one(&t.raw, LABEL_RAW, &t.launch)?);
        Ok(runs)
    }
}

/// Prints the tables, each group under `head` (the layout and placement lines).
fn print_suite(a: &SuiteArgs, runs: &[Report], paired: &str, head: &str) {
    let mut text = format!("{head}\n");
    for r in runs {
        text.push_str(&report::table(r));
        text.push('\n');
    }
    if let [raw, eddy @ ..] = runs {
        let others: Vec<&Report> = eddy.iter().collect();
        text.push_str(head);
        text.push_str(&report::ratios_table(raw, &others));
        // With --client-c: the C library against the Rust library, phase by phase.
        for c in eddy.iter().filter(|r| r.label.starts_with(LABEL_C)) {
            let lib_label = c.label.replacen(LABEL_C, LABEL_LIB, 1);
            if let Some(lib) = eddy.iter().find(|r| r.label == lib_label) {
                text.push('\n');
                text.push_str(&report::ratios_table(lib, &[c]));
            }
        }
        // With several wire settings or variants: each way in (mount, library, preload)
        // under every later one against the same way in under the first.
        let first = a.wire.first().cloned().or_else(|| {
            a.variant
                .first()
                .and_then(|v| v.split_once('='))
                .map(|(n, _)| n.to_string())
        });
        if let Some(first) = first {
            for base in eddy
                .iter()
                .filter(|r| r.label.ends_with(&format!("[{first}]")))
            {
                let kind = base.label.trim_end_matches(&format!("[{first}]"));
                let later: Vec<&Report> = eddy
                    .iter()
                    .filter(|r| {
                        r.label != base.label
                            && r.label
                                .strip_suffix(']')
                                .and_then(|l| l.rsplit_once('['))
                                .is_some_and(|(k, _)| k == kind)
                    })
                    .collect();
                if !later.is_empty() {
                    text.push('\n');
                    text.push_str(&report::ratios_table(base, &later));
                }
            }
        }
    }
    text.push_str(paired);
    crate::human(a.out.json.as_deref(), &text);
}

fn storage_dir(given: Option<&Path>) -> anyhow::Result<tempfile::TempDir> {
    let parent = match given {
        Some(d) => d.to_path_buf(),
        None if Path::new(TMPFS).is_dir() => PathBuf::from(TMPFS),
        None => std::env::temp_dir(),
    };
    tempfile::Builder::new()
        .prefix("eddy-bench-suite.")
        .tempdir_in(&parent)
        .with_context(|| {
            format!(
                "cannot create a directory in {} (missing or not writable?)",
                parent.display()
            )
        })
}

/// A running local deployment; stopped on drop if not stopped explicitly.
pub(crate) struct Deployment {
    exe: PathBuf,
    state: PathBuf,
    /// Its mount points (one; one per host in the hosts layout).
    mounts: Vec<PathBuf>,
    running: bool,
}

impl Deployment {
    /// `eddy start --local DAEMONS --root ROOT --mount MOUNT --state STATE EXTRA...`, then
    /// waits for the mount.
    pub(crate) fn start(
        exe: &Path,
        daemons: u32,
        root: &Path,
        mount: &Path,
        state: &Path,
        extra: &[std::ffi::OsString],
    ) -> anyhow::Result<Deployment> {
        let mut d = Deployment {
            exe: exe.into(),
            state: state.into(),
            mounts: vec![mount.into()],
            running: true,
        };
        let out = Command::new(exe)
            .arg("start")
            .arg("--local")
            .arg(daemons.to_string())
            .arg("--root")
            .arg(root)
            .arg("--mount")
            .arg(mount)
            .arg("--state")
            .arg(state)
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot run {} start", exe.display()))?;
        d.started(&out, "eddy start")?;
        wait_mounted(mount)?;
        d.running = true;
        Ok(d)
    }

    /// Checks the output of `what` (an `eddy start`); on failure whatever was started is
    /// stopped and the error carries its output.
    fn started(&mut self, out: &std::process::Output, what: &str) -> anyhow::Result<()> {
        if !out.status.success() {
            let _ = self.stop();
            bail!(
                "{what} failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// The hosts layout: `eddy start --hosts` with daemon i in host i's namespace, then one
    /// mount per host (hosts.rs).
    fn start_on_hosts(
        exe: &Path,
        hosts: &Hosts,
        root: &Path,
        state: &Path,
        extra: &[std::ffi::OsString],
    ) -> anyhow::Result<Deployment> {
        let mut d = Deployment {
            exe: exe.into(),
            state: state.into(),
            mounts: Vec::new(),
            running: true,
        };
        let out = Command::new(exe)
            .arg("start")
            .args(hosts.start_args(root)?)
            .arg("--state")
            .arg(state)
            .args(extra)
            .env_remove("EDDY_STATE")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot run {} start", exe.display()))?;
        d.started(&out, "eddy start --hosts")?;
        // On failure `d` is dropped: stopped, which unmounts what was mounted.
        d.mounts = (0..hosts.count()).map(|i| hosts.mount(i)).collect();
        hosts.mount_all(exe, state)?;
        for m in &d.mounts {
            wait_mounted(m)?;
        }
        Ok(d)
    }

    pub(crate) fn stop(&mut self) -> anyhow::Result<()> {
        if !self.running {
            return Ok(());
        }
        self.running = false;
        let out = Command::new(&self.exe)
            .arg("stop")
            .arg("--state")
            .arg(&self.state)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot run {} stop", self.exe.display()))?;
        if !out.status.success() {
            bail!(
                "eddy stop failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        if let Some(m) = self.mounts.iter().find(|m| is_mountpoint(m)) {
            bail!("{} is still mounted after eddy stop", m.display());
        }
        Ok(())
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            note!("warning: {e:#}");
        }
    }
}

/// True if `p` is on another device than its parent (a mount point).
fn is_mountpoint(p: &Path) -> bool {
    let parent = p.parent().unwrap_or(p);
    match (std::fs::metadata(p), std::fs::metadata(parent)) {
        (Ok(a), Ok(b)) => a.dev() != b.dev(),
        _ => false,
    }
}

fn wait_mounted(mount: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + MOUNT_TIMEOUT;
    while !is_mountpoint(mount) {
        if Instant::now() > deadline {
            bail!(
                "eddy start succeeded but {} is not mounted after {MOUNT_TIMEOUT:?}",
                mount.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}
