//! `eddy bench suite`: starts a local Eddy deployment with the `eddy` command itself
//! (`eddy start --local N --root R --mount M --state S`), runs the workloads on the mount M,
//! through the client library on the same deployment (`eddy:S`, unless --no-client) and on a
//! raw directory on the same storage in the same run, prints them with ratios to raw, and
//! always stops the deployment (`eddy stop --state S`) and removes what it created.
//! With `--hosts N` the same runs are made in the netns host layout (hosts.rs); every table,
//! plot and JSON file says which layout it is.

mod hosts;

use crate::args::{LaunchOpts, SuiteArgs};
use crate::coord::{run_plan, RunSpec};
use crate::fs::Target;
use crate::plan::Plan;
use crate::report::{self, Layout, Report};
use anyhow::{bail, Context};
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
        raw: Target::Dir(raw),
        mount: Target::Dir(mount.clone()),
        lib: (!a.no_client).then(|| Target::Eddy {
            state: state.clone(),
            dir: "/".to_string(),
        }),
        preload: match a.preload {
            true => Some(
                Target::preload(state.clone(), "/".to_string()).map_err(|e| anyhow::anyhow!(e))?,
            ),
            false => None,
        },
        launch: hosts.as_ref().map_or(a.launch.clone(), Hosts::launch),
        mount_launch: hosts.as_ref().map_or(a.launch.clone(), Hosts::mount_launch),
    };
    let variants = variants(&a, &extra)?;
    if a.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let mut rounds: Vec<Vec<Report>> = Vec::new();
    let mut layout: Option<Layout> = None;
    for round in 0..a.rounds {
        // Every other round in reverse, so that neither variant always runs on a warmer
        // machine.
        let mut order: Vec<&Variant> = variants.iter().collect();
        if round % 2 == 1 {
            order.reverse();
        }
        let mut runs: Vec<Report> = Vec::new();
        for (i, v) in order.into_iter().enumerate() {
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
            if layout.is_none() {
                layout = Some(match &hosts {
                    Some(h) => h.layout(&state)?,
                    None => Layout {
                        name: Layout::ONE_HOST.to_string(),
                        hosts: 1,
                        namespaces: Vec::new(),
                        daemons: hosts::daemon_addrs(&state)?,
                        link_rate: None,
                    },
                });
            }
            let result = measure(&a, &targets, i == 0);
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
    let layout_name = layout
        .as_ref()
        .map_or(Layout::ONE_HOST, |l| l.name.as_str());
    print_suite(&a, &runs, &report::paired_ratios(&rounds), layout_name);
    let title = if a.no_client {
        "eddy bench suite: Eddy mount vs raw storage"
    } else {
        "eddy bench suite: Eddy mount and client library vs raw storage"
    };
    crate::write_outputs_in(&a.out, runs, title, layout)
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

/// What the suite measures on one deployment.
struct Targets {
    raw: Target,
    mount: Target,
    /// The same namespace through the client library (None with --no-client).
    lib: Option<Target>,
    /// The same namespace through the preload library (with --preload).
    preload: Option<Target>,
    /// How the ranks start: on this host, or spread over the hosts of the layout.
    launch: LaunchOpts,
    /// How the mount run's ranks start (in the hosts layout each sees its host's mount).
    mount_launch: LaunchOpts,
}

/// Runs the workloads on Eddy (mount, library, preload) and, `with_raw`, on raw storage;
/// returns [raw, eddy, eddy-lib, eddy-preload] (raw only `with_raw`, eddy-lib only without
/// --no-client, eddy-preload only with --preload).
fn measure(a: &SuiteArgs, t: &Targets, with_raw: bool) -> anyhow::Result<Vec<Report>> {
    let one = |target: &Target, label: &str, launch: &LaunchOpts| -> anyhow::Result<Report> {
        crate::interrupt::check()?;
        note!("eddy bench suite: {label} ({target})");
        let mut plan = Plan::new(target, &a.work, "all")?;
        if a.work.stonewall.is_none() {
            plan.stonewall_s = SUITE_STONEWALL_S;
        }
        let spec = RunSpec {
            label: label.to_string(),
            launch,
            keep: false,
        };
        run_plan(&plan, &spec).with_context(|| format!("benchmark on {label} ({target}) failed"))
    };
    let eddy = |first: Option<Report>| -> anyhow::Result<Vec<Report>> {
        let mut runs: Vec<Report> = first.into_iter().collect();
        runs.push(one(&t.mount, LABEL_MOUNT, &t.mount_launch)?);
        if let Some(lib) = &t.lib {
            runs.push(one(lib, LABEL_LIB, &t.launch)?);
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

fn print_suite(a: &SuiteArgs, runs: &[Report], paired: &str, layout: &str) {
    let mut text = format!("layout: {layout}\n\n");
    for r in runs {
        text.push_str(&report::table(r));
        text.push('\n');
    }
    if let [raw, eddy @ ..] = runs {
        let others: Vec<&Report> = eddy.iter().collect();
        text.push_str(&format!("layout: {layout}\n"));
        text.push_str(&report::ratios_table(raw, &others));
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
        if !out.status.success() {
            // Whatever was started must go.
            let _ = d.stop();
            bail!(
                "eddy start failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        wait_mounted(mount)?;
        d.running = true;
        Ok(d)
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
        if !out.status.success() {
            let _ = d.stop();
            bail!(
                "eddy start --hosts failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
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
