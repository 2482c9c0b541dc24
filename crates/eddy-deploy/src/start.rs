//! Starting a deployment: launch its daemons (here, or one per host through a launcher),
//! wait until every one is ready (its ready file, or the ready line in its launcher's
//! output) and serves, then record the processes and write the deployment file in the state
//! directory. A start that fails leaves nothing running.

use crate::launch::{
    fill, launcher_argv, listen_addr, metrics_listen, read_ready, ready_entry, resolve_host,
    DaemonLaunch, HostLine,
};
use crate::mounts::LOG_TAIL_LINES;
use crate::procs::{self, log_tail, POLL_INTERVAL};
use crate::state::{absolute, RecordedProcess, RemoteLaunch, StateDir};
use crate::Say;
use anyhow::{bail, Context, Result};
use eddy_client::Client;
use eddy_config::{Config, DaemonEntry, Deployment, Link, Wire};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// What to start: everything a new deployment is made of.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Where the deployment's state lives (made if missing; no deployment may run there).
    pub state: StateDir,
    /// The configuration the daemons get (see `configure`).
    pub config: Config,
    /// Name of the deployment.
    pub name: String,
    /// Where the daemons run.
    pub placement: Placement,
    /// User the daemons run as (`eddyd --user`, a name or uid), if not the caller.
    pub daemon_user: Option<String>,
    /// The job it serves (recorded in the deployment file; the daemons' counters name it;
    /// decision 0032). A `start_ms` of 0 is set to the start's time.
    pub job: eddy_config::JobInfo,
}

/// Where the daemons of a plan run; made by `Placement::local` or `Placement::remote`, which
/// check it before anything is started.
#[derive(Debug, Clone)]
pub enum Placement {
    /// `daemons` daemons on this host, with roots ROOT/d0 .. ROOT/d<daemons-1>.
    Local { daemons: u32, root: PathBuf },
    /// One daemon per host, started through `launcher` (a template with `{host}` and
    /// `{cmd}`), listening on `port` (0: any free one); `root` may contain `{host}` and
    /// `{id}`.
    Remote {
        hosts: Vec<HostLine>,
        root: PathBuf,
        launcher: String,
        port: u16,
    },
}

impl Placement {
    /// `daemons` daemons on this host (at least one).
    pub fn local(daemons: u32, root: PathBuf) -> Result<Placement> {
        if daemons == 0 {
            bail!("--local 0: a deployment needs at least one daemon (use --local N with N >= 1)");
        }
        Ok(Placement::Local { daemons, root })
    }

    /// One daemon per host of `hosts`, their addresses resolved to IP literals; the
    /// launcher template is checked.
    pub fn remote(
        hosts: Vec<HostLine>,
        root: PathBuf,
        launcher: String,
        port: u16,
    ) -> Result<Placement> {
        let hosts = hosts
            .into_iter()
            .map(resolve_host)
            .collect::<Result<Vec<_>>>()?;
        launcher_argv(&launcher, "", 0, &[])?;
        Ok(Placement::Remote {
            hosts,
            root,
            launcher,
            port,
        })
    }
}

/// Settings that override a configuration (`configure`).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub chunk_size: Option<u64>,
    pub wire: Option<Wire>,
    pub replicas: Option<usize>,
    /// Links added to the configuration's (backends made absolute).
    pub links: Vec<Link>,
}

/// `config` with `overrides` applied, validated, and every backend directory checked to be
/// a directory this host reaches.
pub fn configure(mut config: Config, overrides: Overrides) -> Result<Config> {
    if let Some(cs) = overrides.chunk_size {
        config.chunk_size = cs;
    }
    if let Some(w) = overrides.wire {
        config.wire = w;
    }
    if let Some(r) = overrides.replicas {
        config.replicas = r;
    }
    for mut link in overrides.links {
        link.backend = absolute(&link.backend);
        config.links.push(link);
    }
    config.validate().context(
        "invalid configuration (check --chunk-size, --replicas, --backend, --link and --config)",
    )?;
    for link in &config.links {
        // privileged-path: the backends the caller names (eddy bb: resolved as the job's user first)
        let ok = std::fs::metadata(&link.backend).map(|m| m.is_dir());
        if !matches!(ok, Ok(true)) {
            bail!(
                "the backend directory {} of {} is not a directory this host can reach; \
                 create it or fix --backend/--link",
                link.backend.display(),
                link.prefix
            );
        }
    }
    Ok(config)
}

/// Ends the deployment recorded in `state` if it is dead: none of the processes this host
/// started for it runs and none of its daemons answers (killed with `kill -9`, its node
/// crashed, the host rebooted). Its job profile is made from the snapshots its daemons
/// persisted (`profile::record_end`, as killed), its stale mounts are unmounted and it is
/// marked stopped, so that a new deployment can start in `state`. A live deployment (or
/// none) is left alone; returns whether one was ended.
pub fn end_dead(state: &StateDir, say: Say) -> Result<bool> {
    if !state.has_deployment() {
        return Ok(false);
    }
    let dep = state.load_deployment()?;
    if state.read_pids()?.iter().any(procs::is_running) || any_daemon_answers(&dep) {
        return Ok(false);
    }
    say.err(&format!(
        "eddy: the deployment {:?} in {} did not stop cleanly (its daemons are gone); ending it",
        dep.name,
        state.dir().display()
    ));
    crate::profile::record_end(
        state,
        &dep,
        &crate::profile::HistoryTarget::User,
        None,
        crate::profile::Ending::Killed,
        say,
    );
    for p in crate::stop::unmount_all(state) {
        say.err(&format!("eddy: warning: {p}"));
    }
    state.mark_stopped()?;
    crate::profile::remove_persisted(&dep);
    Ok(true)
}

/// Whether any daemon of `dep` answers a status request (within the RPC deadline).
fn any_daemon_answers(dep: &Deployment) -> bool {
    let Ok(rt) = crate::runtime() else {
        return false;
    };
    let Ok(client) = eddy_client::Client::new(dep.clone()) else {
        return false;
    };
    rt.block_on(client.daemon_status())
        .iter()
        .any(|(_, r)| r.is_ok())
}

/// Fails if a deployment runs in `state` already.
pub fn refuse_running(state: &StateDir) -> Result<()> {
    if state.has_deployment() {
        bail!(
            "a deployment is already running in {} (see `eddy status --state {0}`); \
             stop it first with `eddy stop --state {0}`",
            state.dir().display()
        );
    }
    Ok(())
}

/// Starts the deployment of `plan`: makes the state directory, launches the daemons, waits
/// until every one serves, records them and writes the deployment file, which it returns.
pub fn start(plan: &Plan) -> Result<Deployment> {
    refuse_running(&plan.state)?;
    plan.state.create()?;
    let daemons = match &plan.placement {
        Placement::Local { daemons, .. } => *daemons,
        Placement::Remote { hosts, .. } => to_id(hosts.len())?,
    };
    if plan.config.replicas > daemons as usize {
        bail!(
            "--replicas {} needs at least that many daemons, but the deployment has {daemons}: \
             each copy lives on a daemon of its own",
            plan.config.replicas
        );
    }
    let run = Run {
        state: plan.state.clone(),
        config: plan.config.clone(),
        name: plan.name.clone(),
        secret: Deployment::new_secret(),
        members: (0..daemons).collect(),
        daemon_user: plan.daemon_user.clone(),
        job: eddy_config::JobInfo {
            start_ms: match plan.job.start_ms {
                0 => now_ms(),
                t => t,
            },
            ..plan.job.clone()
        },
    };
    run.state.write_secret(&run.secret)?;
    run.state.write_config(&run.config)?;
    run.state.write_daemon_user(run.daemon_user.as_deref())?;
    match &plan.placement {
        Placement::Local { daemons, root } => start_local(&run, *daemons, root),
        Placement::Remote {
            hosts,
            root,
            launcher,
            port,
        } => start_remote(&run, hosts, root, launcher, *port),
    }
}

/// How long a start waits for the daemons (and a mount after it): `start_timeout_s`.
pub fn start_bound(config: &Config) -> Duration {
    Duration::from_secs(config.start_timeout_s)
}

/// Everything the daemons of a deployment being started (or grown) share.
pub(crate) struct Run {
    state: StateDir,
    config: Config,
    name: String,
    secret: String,
    /// The ids of the deployment's members (`eddyd --members`).
    members: Vec<u32>,
    /// User the daemons run as (`eddyd --user`), if not the caller.
    daemon_user: Option<String>,
    job: eddy_config::JobInfo,
}

impl Run {
    /// What daemons added to the running deployment `dep` of `state` share with its own:
    /// its configuration, secret, user and job, and `members` for their `--members`.
    pub(crate) fn joining(state: &StateDir, dep: &Deployment, members: Vec<u32>) -> Result<Run> {
        Ok(Run {
            state: state.clone(),
            config: dep.config.clone(),
            name: dep.name.clone(),
            secret: dep.secret.clone(),
            members,
            daemon_user: state.daemon_user()?,
            job: dep.job.clone(),
        })
    }

    fn deployment(&self, daemons: Vec<DaemonEntry>) -> Deployment {
        Deployment {
            name: self.name.clone(),
            secret: self.secret.clone(),
            config: self.config.clone(),
            daemons,
            job: self.job.clone(),
            epoch: 0,
            moving_from: None,
            draining: Vec::new(),
        }
    }

    /// The job as the daemons' counters name it.
    fn job_label(&self) -> String {
        self.job.label(&self.name)
    }
}

/// Unix time in milliseconds.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// How many daemons (or their launchers) are launched at once (`Spawned::launch_all`).
const LAUNCHING_AT_ONCE: usize = 16;

/// Processes spawned by a start in progress; all are killed if the start fails.
#[derive(Default)]
pub(crate) struct Spawned {
    pub(crate) children: Vec<Child>,
    pub(crate) recorded: Vec<RecordedProcess>,
}

impl Spawned {
    /// Launches `n` processes, process i by `launch(i)` (its label and child), up to
    /// `LAUNCHING_AT_ONCE` at a time, and keeps them in the order of i. A launch returns
    /// once its process runs its program, which on a host busy with the daemons launched
    /// before takes a turn of the scheduler: one after the other, the launches of 1,024
    /// daemons took most of their start (decision 0076). After a failed launch no other
    /// begins; the first failure (by i) is returned once the launches under way have
    /// ended, with every process launched kept here (for `commit` to kill).
    fn launch_all(
        &mut self,
        n: usize,
        launch: impl Fn(usize) -> Result<(String, Child)> + Sync,
    ) -> Result<()> {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let next = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        type Launched = Result<(RecordedProcess, Child)>;
        let slots: Vec<std::sync::Mutex<Option<Launched>>> =
            (0..n).map(|_| std::sync::Mutex::new(None)).collect();
        std::thread::scope(|scope| {
            for _ in 0..LAUNCHING_AT_ONCE.min(n) {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n || failed.load(Ordering::Relaxed) {
                        return;
                    }
                    // Recorded while it surely runs (its start time read from /proc).
                    let launched =
                        launch(i).map(|(label, child)| (procs::record(label, &child), child));
                    failed.fetch_or(launched.is_err(), Ordering::Relaxed);
                    *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(launched);
                });
            }
        });
        let mut first_error = None;
        for slot in slots {
            match slot.into_inner().unwrap_or_else(|e| e.into_inner()) {
                Some(Ok((recorded, child))) => {
                    self.recorded.push(recorded);
                    self.children.push(child);
                }
                Some(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                // Not begun after a failure.
                None => {}
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// On success records the processes and saves the deployment; on any failure kills
    /// every spawned process, so a failed start leaves nothing running.
    fn commit(mut self, plan: &Run, result: Result<Deployment>) -> Result<Deployment> {
        let saved = result.and_then(|dep| {
            plan.state.write_pids(&self.recorded)?;
            plan.state.save_deployment(&dep)?;
            Ok(dep)
        });
        if saved.is_err() {
            procs::kill_children(&mut self.children);
        }
        saved
    }
}

/// Creates a storage root and checks it is writable.
fn create_root(root: &Path) -> Result<()> {
    let hint = || {
        format!(
            "cannot use {} as a storage root; choose a writable --root",
            root.display()
        )
    };
    // privileged-path: the deployment's --root, the caller's choice (eddy bb: the site's, checked by eddyd's rootdir walk)
    std::fs::create_dir_all(root).with_context(hint)?;
    let probe = root.join(".eddy-write-test");
    // privileged-path: create of a probe file in the caller's --root, before any daemon runs there
    std::fs::write(&probe, b"").with_context(hint)?;
    // privileged-path: unlink of the probe file in the caller's --root
    std::fs::remove_file(&probe).with_context(hint)
}

/// Creates a daemon's storage root under the deployment's root: private (0700) and empty
/// when new, so that a daemon started with `--user` takes it (decision 0023); the daemon
/// checks an existing one itself.
fn create_daemon_root(root: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    // privileged-path: mkdir never follows a link; the daemon checks an existing root itself (rootdir)
    match std::fs::DirBuilder::new().mode(0o700).create(root) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e).with_context(|| {
            format!(
                "cannot make the daemon root {}; choose a writable --root",
                root.display()
            )
        }),
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------- local daemons

fn start_local(plan: &Run, n: u32, root: &Path) -> Result<Deployment> {
    let root = absolute(root);
    create_root(&root)?;
    let mut spawned = Spawned::default();
    let ids: Vec<u32> = (0..n).collect();
    let result = spawn_and_wait_local(plan, &ids, &root, &mut spawned).and_then(|daemons| {
        let dep = plan.deployment(daemons);
        verify_known(plan, &dep)?;
        Ok(dep)
    });
    spawned.commit(plan, result)
}

/// Launches daemons `ids` on this host, with roots ROOT/d<id>, and waits until each is
/// ready: their entries, in the order of `ids`.
pub(crate) fn spawn_and_wait_local(
    plan: &Run,
    ids: &[u32],
    root: &Path,
    spawned: &mut Spawned,
) -> Result<Vec<DaemonEntry>> {
    let bin = procs::daemon_binary();
    let roots: Vec<PathBuf> = ids.iter().map(|id| root.join(format!("d{id}"))).collect();
    spawned.launch_all(roots.len(), |i| {
        let (id, droot) = (ids[i], &roots[i]);
        create_daemon_root(droot)?;
        remove_stale(&eddy_config::ready::ready_path(droot))?;
        let args = local_daemon_args(plan, droot, id)?;
        let child = procs::spawn_detached(&bin, &args, &plan.state.daemon_log(id))?;
        Ok((format!("daemon-{id}"), child))
    })?;
    wait_ready(
        plan,
        &mut spawned.children,
        ids,
        |i| format!("daemon {}", ids[i]),
        |i| read_ready(&roots[i]),
    )
}

/// Daemon `id` of this host: metrics (if asked for) on the configured port plus `id`.
fn local_daemon_args(plan: &Run, root: &Path, id: u32) -> Result<Vec<OsString>> {
    let metrics = metrics_listen(&plan.config, id)?;
    Ok(DaemonLaunch {
        state: &plan.state,
        members: &plan.members,
        user: plan.daemon_user.as_deref(),
        job: &plan.job_label(),
    }
    .args(root, id, "127.0.0.1:0", metrics.as_deref()))
}

fn remove_stale(path: &Path) -> Result<()> {
    // privileged-path: unlink removes the name itself, never follows a link
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot remove the stale {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Waits until daemon i (id `ids[i]`) is ready, by `ready(i)`; fails if a process
/// (`what(i)`: the daemon, or its launcher) exits first.
fn wait_ready(
    plan: &Run,
    children: &mut [Child],
    ids: &[u32],
    what: impl Fn(usize) -> String,
    ready_of: impl Fn(usize) -> Result<Option<DaemonEntry>>,
) -> Result<Vec<DaemonEntry>> {
    let deadline = Instant::now() + start_bound(&plan.config);
    let mut ready: Vec<Option<DaemonEntry>> = vec![None; children.len()];
    loop {
        for (i, r) in ready.iter_mut().enumerate() {
            if r.is_none() {
                *r = ready_of(i)?;
            }
        }
        if ready.iter().all(Option::is_some) {
            return Ok(ready.into_iter().flatten().collect());
        }
        for (i, child) in children.iter_mut().enumerate() {
            check_alive(plan, child, ids[i], &what(i))?;
        }
        if Instant::now() >= deadline {
            let missing: Vec<String> = ready
                .iter()
                .enumerate()
                .filter(|(_, r)| r.is_none())
                .map(|(i, _)| ids[i].to_string())
                .collect();
            bail!(
                "daemons {} did not become ready within {} s (start_timeout_s); see their logs in {}",
                missing.join(", "),
                plan.config.start_timeout_s,
                plan.state.dir().display()
            );
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// The entry of daemon `id` (storage `root`) once its launcher's output, in its log, holds
/// the daemon's ready line.
fn read_ready_line(plan: &Run, root: &Path, id: u32) -> Result<Option<DaemonEntry>> {
    let log = plan.state.daemon_log(id);
    // privileged-path: the launcher's log in the caller's state directory
    let text = match std::fs::read(&log) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", log.display())),
    };
    let Some(info) = eddy_config::ready::parse_announcement(&text) else {
        return Ok(None);
    };
    let info = info.with_context(|| format!("the ready line in {} is damaged", log.display()))?;
    if info.id != id {
        bail!(
            "daemon {id} announced id {} in {}: its launcher started something else",
            info.id,
            log.display()
        );
    }
    // Started with `--socket none`: its entry has no socket.
    Ok(Some(ready_entry(info, root)))
}

fn to_id(i: usize) -> Result<u32> {
    u32::try_from(i).context("too many daemons")
}

/// Fails with the tail of the log if the process (daemon or launcher) `id` has exited.
fn check_alive(plan: &Run, child: &mut Child, id: u32, what: &str) -> Result<()> {
    if let Some(status) = child.try_wait().context("cannot check a daemon process")? {
        let log = plan.state.daemon_log(id);
        bail!(
            "{what} exited ({status}) before it was ready\n{}",
            log_tail(&log, LOG_TAIL_LINES)
        );
    }
    Ok(())
}

/// `verify` with the deployment file written first: daemons that rejoin (decision 0021)
/// find their peers there. Removed again if the check fails (the start fails).
fn verify_known(plan: &Run, dep: &Deployment) -> Result<()> {
    if dep.config.replicas <= 1 {
        return verify(dep);
    }
    plan.state.save_deployment(dep)?;
    verify(dep).inspect_err(|_| {
        // privileged-path: the deployment file in the caller's state directory
        let _ = std::fs::remove_file(plan.state.deployment_path());
    })
}

/// Connects once (which creates the namespace root) and checks every daemon answers and
/// serves. Daemons started on roots they used before rejoin first (decision 0021): answered
/// as if down meanwhile, so the check is tried again until `start_timeout_s`; the start
/// returns once every one serves.
fn verify(dep: &Deployment) -> Result<()> {
    let rt = crate::runtime()?;
    let deadline = Instant::now() + start_bound(&dep.config);
    loop {
        match rt.block_on(probe(dep.clone())) {
            Ok(()) => return Ok(()),
            Err(e) if dep.config.replicas <= 1 || Instant::now() >= deadline => {
                bail!("the daemons started but {e}")
            }
            Err(_) => std::thread::sleep(POLL_INTERVAL),
        }
    }
}

/// Ok if a client connects and every daemon answers status and is not rejoining; else what
/// failed.
async fn probe(dep: Deployment) -> Result<(), String> {
    let client = Client::connect(dep)
        .await
        .map_err(|e| format!("a client cannot connect: {e}"))?;
    let failed: Vec<String> = client
        .daemon_status()
        .await
        .into_iter()
        .filter_map(|(id, r)| match r {
            Err(e) => Some(format!("daemon {id}: {e}")),
            // It serves clients once it has taken what it missed.
            Ok(s) if s.rejoining => Some(format!("daemon {id} is still rejoining")),
            Ok(_) => None,
        })
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("not every daemon answers: {}", failed.join("; ")))
    }
}

// ---------------------------------------------------------------- remote daemons

/// The command of daemon `id`, the `nth` (from 0) on its host.
fn remote_daemon_cmd(
    plan: &Run,
    bin: &Path,
    root: &Path,
    (id, nth): (u32, u32),
    host: &HostLine,
    port: u16,
) -> Result<Vec<OsString>> {
    let job = plan.job_label();
    let launch = DaemonLaunch {
        state: &plan.state,
        members: &plan.members,
        user: plan.daemon_user.as_deref(),
        job: &job,
    };
    let metrics = metrics_listen(&plan.config, nth)?;
    let mut cmd: Vec<OsString> = vec![bin.into()];
    cmd.extend(launch.args(
        root,
        id,
        &listen_addr(&host.address, port),
        metrics.as_deref(),
    ));
    cmd.extend(["--host".into(), host.name.clone().into()]);
    cmd.extend(["--socket".into(), "none".into()]);
    Ok(cmd)
}

fn start_remote(
    plan: &Run,
    hosts: &[HostLine],
    root: &Path,
    launcher: &str,
    port: u16,
) -> Result<Deployment> {
    let launch = RemoteLaunch {
        launcher: launcher.to_string(),
        root: absolute(root).to_string_lossy().into_owned(),
        port,
    };
    plan.state.write_remote_launch(&launch)?;
    let mut spawned = Spawned::default();
    let result = launch_remote(plan, hosts, &launch, &mut spawned);
    spawned.commit(plan, result)
}

fn launch_remote(
    plan: &Run,
    hosts: &[HostLine],
    launch: &RemoteLaunch,
    spawned: &mut Spawned,
) -> Result<Deployment> {
    let ids = (0..hosts.len()).map(to_id).collect::<Result<Vec<_>>>()?;
    // Daemons sharing a host count up from its metrics port.
    let daemons = spawn_and_wait_remote(plan, hosts, &ids, &[], launch, spawned)?;
    let dep = plan.deployment(daemons);
    dep.validate().context("the deployment is not valid")?;
    if dep.config.replicas > 1 {
        // Daemons that rejoin find their peers there (decision 0021).
        plan.state.save_deployment(&dep)?;
    }
    wait_serving(plan, &dep, &mut spawned.children).inspect_err(|_| {
        if dep.config.replicas > 1 {
            // privileged-path: the deployment file in the caller's state directory
            let _ = std::fs::remove_file(plan.state.deployment_path());
        }
    })?;
    Ok(dep)
}

/// Launches daemon `ids[i]` on `hosts[i]` through the launcher of `launch`, and waits until
/// each is ready: their entries, in order. Daemons sharing a host count up from its metrics
/// port, after the daemons `already` placed there.
pub(crate) fn spawn_and_wait_remote(
    plan: &Run,
    hosts: &[HostLine],
    ids: &[u32],
    already: &[String],
    launch: &RemoteLaunch,
    spawned: &mut Spawned,
) -> Result<Vec<DaemonEntry>> {
    let bin = procs::daemon_binary();
    let roots: Vec<PathBuf> = hosts
        .iter()
        .zip(ids)
        .map(|(host, &id)| PathBuf::from(fill(&launch.root, &host.name, id)))
        .collect();
    let mut on_host = std::collections::HashMap::<&str, u32>::new();
    for h in already {
        *on_host.entry(h.as_str()).or_default() += 1;
    }
    let nths: Vec<u32> = hosts
        .iter()
        .map(|h| {
            let count = on_host.entry(h.name.as_str()).or_default();
            *count += 1;
            *count - 1
        })
        .collect();
    spawned.launch_all(hosts.len(), |i| {
        let (id, host) = (ids[i], &hosts[i]);
        let cmd = remote_daemon_cmd(plan, &bin, &roots[i], (id, nths[i]), host, launch.port)?;
        let argv = launcher_argv(&launch.launcher, &host.name, id, &cmd)?;
        let (program, rest) = argv.split_first().context("empty launcher template")?;
        let child = procs::spawn_detached(Path::new(program), rest, &plan.state.daemon_log(id))?;
        Ok((format!("launcher-{id}"), child))
    })?;
    // The addresses the daemons bound (port 0: any free one), from their ready lines.
    wait_ready(
        plan,
        &mut spawned.children,
        ids,
        |i| format!("the launcher of daemon {} on {}", ids[i], hosts[i].name),
        |i| read_ready_line(plan, &roots[i], ids[i]),
    )
}

/// Waits until a client reaches every daemon, failing early if a launcher fails.
fn wait_serving(plan: &Run, dep: &Deployment, children: &mut [Child]) -> Result<()> {
    let rt = crate::runtime()?;
    let deadline = Instant::now() + start_bound(&plan.config);
    loop {
        let last = match rt.block_on(probe(dep.clone())) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        for (i, child) in children.iter_mut().enumerate() {
            if let Some(status) = child
                .try_wait()
                .context("cannot check a launcher process")?
            {
                if !status.success() {
                    let log = plan.state.daemon_log(to_id(i)?);
                    bail!(
                        "the launcher of daemon {i} on {} exited ({status}) before the daemon served\n{}",
                        dep.daemons[i].host,
                        log_tail(&log, LOG_TAIL_LINES)
                    );
                }
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "the daemons did not all serve within {} s (start_timeout_s): {last}; see the logs in {}",
                plan.config.start_timeout_s,
                plan.state.dir().display()
            );
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn announced(socket: &str) -> eddy_config::ready::ReadyInfo {
        eddy_config::ready::ReadyInfo {
            id: 0,
            pid: 1,
            addr: "127.0.0.1:1".into(),
            socket: Some(socket.into()),
            host: "h".into(),
            metrics: None,
        }
    }

    #[test]
    fn an_announced_socket_outside_the_daemon_root_is_not_recorded() {
        let root = Path::new("/var/lib/eddy/nodes/job-7/d0");
        let own = ready_entry(announced("/var/lib/eddy/nodes/job-7/d0/eddyd.sock"), root);
        assert_eq!(
            own.socket.as_deref(),
            Some(root.join("eddyd.sock").as_path())
        );
        // The daemon's user wrote the ready file: a socket elsewhere (a service of root's)
        // would be where root's clients connect.
        for elsewhere in [
            "/run/dbus/system_bus_socket",
            "/var/lib/eddy/nodes/job-7/d0/sub/eddyd.sock",
            "/var/lib/eddy/nodes/job-7/d0/../d1/eddyd.sock",
        ] {
            let e = ready_entry(announced(elsewhere), root);
            assert_eq!(e.socket, None, "{elsewhere} was recorded");
        }
    }
}
