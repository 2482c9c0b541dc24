//! `eddy start`: launch the daemons of a deployment, wait until every one serves, write the
//! deployment file, and optionally mount the namespace.

use crate::cli::StartArgs;
use crate::mounts::LOG_TAIL_LINES;
use crate::procs::{self, log_tail, POLL_INTERVAL};
use crate::state::{absolute, RecordedProcess, StateDir};
use anyhow::{bail, Context, Result};
use eddy_client::Client;
use eddy_config::{Config, DaemonEntry, Deployment, Link};
use std::ffi::OsString;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// Default launcher for `--hosts`.
const SSH_LAUNCHER: &str = "ssh {host} {cmd}";
/// Default launcher for `--slurm`.
const SRUN_LAUNCHER: &str = "srun --nodes=1 --ntasks=1 --overlap -w {host} {cmd}";

/// One host of a hosts file: the name the launcher gets and the address daemons listen on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLine {
    pub name: String,
    pub address: String,
}

/// Everything the daemons of a new deployment share.
struct Plan {
    state: StateDir,
    config: Config,
    name: String,
    secret: String,
    /// Number of daemons; their ids are 0..daemons.
    daemons: u32,
    /// User the daemons run as (`eddyd --user`), if not the caller.
    daemon_user: Option<String>,
}

impl Plan {
    fn deployment(&self, daemons: Vec<DaemonEntry>) -> Deployment {
        Deployment {
            name: self.name.clone(),
            secret: self.secret.clone(),
            config: self.config.clone(),
            daemons,
        }
    }
}

/// Processes spawned by a start in progress; all are killed if the start fails.
#[derive(Default)]
struct Spawned {
    children: Vec<Child>,
    recorded: Vec<RecordedProcess>,
}

impl Spawned {
    fn push(&mut self, label: String, child: Child) {
        self.recorded.push(procs::record(label, &child));
        self.children.push(child);
    }

    /// On success records the processes and saves the deployment; on any failure kills
    /// every spawned process, so a failed start leaves nothing running.
    fn commit(mut self, plan: &Plan, result: Result<Deployment>) -> Result<Deployment> {
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

/// Where the daemons run, resolved from the arguments before anything is started.
enum Placement {
    Local(u32),
    Remote {
        hosts: Vec<HostLine>,
        launcher: String,
        port: u16,
    },
}

pub fn start(args: StartArgs) -> Result<()> {
    let state = start_state_dir(&args)?;
    if state.has_deployment() {
        bail!(
            "a deployment is already running in {} (see `eddy status --state {0}`); \
             stop it first with `eddy stop --state {0}`",
            state.dir().display()
        );
    }
    let config = start_config(&args)?;
    let placement = placement(&args, &config)?;
    let allow_other = crate::mount::allow_other(args.allow_other, args.owner_only)?;
    if let Some(mnt) = &args.mount {
        crate::mounts::mount_target(mnt)?;
    }
    let name = args
        .name
        .clone()
        .or_else(|| std::env::var("SLURM_JOB_ID").ok())
        .unwrap_or_else(|| "eddy".to_string());
    state.create()?;
    let daemons = match &placement {
        Placement::Local(n) => *n,
        Placement::Remote { hosts, .. } => to_id(hosts.len())?,
    };
    if config.replicas > daemons as usize {
        bail!(
            "--replicas {} needs at least that many daemons, but the deployment has {daemons}: \
             each copy lives on a daemon of its own",
            config.replicas
        );
    }
    let plan = Plan {
        state,
        config,
        name,
        secret: Deployment::new_secret(),
        daemons,
        daemon_user: args.daemon_user.clone(),
    };
    plan.state.write_secret(&plan.secret)?;
    plan.state.write_config(&plan.config)?;
    plan.state.write_daemon_user(plan.daemon_user.as_deref())?;
    let dep = match &placement {
        Placement::Local(n) => start_local(&plan, *n, &args.root)?,
        Placement::Remote {
            hosts,
            launcher,
            port,
        } => start_remote(&plan, hosts, &args.root, launcher, *port)?,
    };
    outln!(
        "eddy: deployment {:?} started: {} daemons; state in {}",
        dep.name,
        dep.daemons.len(),
        plan.state.dir().display()
    );
    if let Some(mnt) = &args.mount {
        mount_after_start(&plan, mnt, allow_other)?;
    }
    Ok(())
}

fn placement(args: &StartArgs, config: &Config) -> Result<Placement> {
    if let Some(n) = args.local {
        if n == 0 {
            bail!("--local 0: a deployment needs at least one daemon (use --local N with N >= 1)");
        }
        return Ok(Placement::Local(n));
    }
    let hosts = match &args.hosts {
        Some(file) => read_hosts_file(file)?,
        None => slurm_hosts()?,
    };
    let hosts = hosts
        .into_iter()
        .map(resolve_host)
        .collect::<Result<Vec<_>>>()?;
    let default_launcher = if args.slurm {
        SRUN_LAUNCHER
    } else {
        SSH_LAUNCHER
    };
    let launcher = args
        .launcher
        .clone()
        .unwrap_or_else(|| default_launcher.to_string());
    launcher_argv(&launcher, "", 0, &[])?;
    let port = args.listen_port.unwrap_or(config.port);
    Ok(Placement::Remote {
        hosts,
        launcher,
        port,
    })
}

fn mount_after_start(plan: &Plan, mnt: &Path, allow_other: bool) -> Result<()> {
    crate::mount::mount_background(&plan.state, mnt, allow_other, start_bound(&plan.config))
        .with_context(|| {
            format!(
                "the daemons are running but mounting failed; retry `eddy mount --state {0} {1}` \
                 or stop them with `eddy stop --state {0}`",
                plan.state.dir().display(),
                mnt.display()
            )
        })?;
    outln!("eddy: mounted on {}", mnt.display());
    Ok(())
}

/// --state, else $EDDY_STATE (clap fills both), else --root if it is a plain directory.
fn start_state_dir(args: &StartArgs) -> Result<StateDir> {
    if let Some(dir) = &args.state {
        return Ok(StateDir::new(dir));
    }
    let root = args.root.to_string_lossy();
    if root.contains("{host}") || root.contains("{id}") {
        bail!("--root {root} has placeholders, so it cannot hold the state: pass --state DIR");
    }
    Ok(StateDir::new(&args.root))
}

/// The --config file (or defaults) with --chunk-size applied, validated.
fn start_config(args: &StartArgs) -> Result<Config> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)
            .with_context(|| format!("fix the configuration file {}", path.display()))?,
        None => Config::default(),
    };
    if let Some(cs) = args.chunk_size {
        config.chunk_size = cs;
    }
    if let Some(w) = args.wire {
        config.wire = w;
    }
    if let Some(r) = args.replicas {
        config.replicas = r;
    }
    if let Some(dir) = &args.backend {
        config.links.push(Link {
            prefix: "/".into(),
            backend: absolute(dir),
        });
    }
    for text in &args.link {
        let mut link = Link::parse(text).with_context(|| format!("--link {text}"))?;
        link.backend = absolute(&link.backend);
        config.links.push(link);
    }
    config.validate().context(
        "invalid configuration (check --chunk-size, --replicas, --backend, --link and --config)",
    )?;
    for link in &config.links {
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

fn start_bound(config: &Config) -> Duration {
    Duration::from_secs(config.start_timeout_s)
}

/// Creates a storage root and checks it is writable.
fn create_root(root: &Path) -> Result<()> {
    let hint = || {
        format!(
            "cannot use {} as a storage root; choose a writable --root",
            root.display()
        )
    };
    std::fs::create_dir_all(root).with_context(hint)?;
    let probe = root.join(".eddy-write-test");
    std::fs::write(&probe, b"").with_context(hint)?;
    std::fs::remove_file(&probe).with_context(hint)
}

/// Creates a daemon's storage root under the deployment's root: private (0700) and empty
/// when new, so that a daemon started with `--user` takes it (decision 0023); the daemon
/// checks an existing one itself.
fn create_daemon_root(root: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
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

fn start_local(plan: &Plan, n: u32, root: &Path) -> Result<Deployment> {
    let root = absolute(root);
    create_root(&root)?;
    let mut spawned = Spawned::default();
    let result = spawn_and_wait_local(plan, n, &root, &mut spawned);
    spawned.commit(plan, result)
}

fn spawn_and_wait_local(
    plan: &Plan,
    n: u32,
    root: &Path,
    spawned: &mut Spawned,
) -> Result<Deployment> {
    let bin = procs::daemon_binary();
    let mut roots = Vec::new();
    for id in 0..n {
        let droot = root.join(format!("d{id}"));
        create_daemon_root(&droot)?;
        remove_stale(&eddy_daemon::ready_path(&droot))?;
        let args = local_daemon_args(plan, &droot, id);
        let child = procs::spawn_detached(&bin, &args, &plan.state.daemon_log(id))?;
        spawned.push(format!("daemon-{id}"), child);
        roots.push(droot);
    }
    let daemons = wait_ready(
        plan,
        &mut spawned.children,
        |i| format!("daemon {i}"),
        |i| read_ready(&roots[i]),
    )?;
    let dep = plan.deployment(daemons);
    verify_known(plan, &dep)?;
    Ok(dep)
}

fn local_daemon_args(plan: &Plan, root: &Path, id: u32) -> Vec<OsString> {
    DaemonLaunch {
        state: &plan.state,
        members: plan.daemons,
        user: plan.daemon_user.as_deref(),
    }
    .args(root, id, "127.0.0.1:0")
}

/// How a deployment's daemons are started: one path for `eddy start` and `eddy replace`, so
/// that a replacement runs as the user the others run as (`--user`), with the same secret,
/// config and peers.
pub struct DaemonLaunch<'a> {
    pub state: &'a StateDir,
    /// Number of daemons; their ids are 0..members.
    pub members: u32,
    /// User the daemons run as (`eddyd --user`), if not the caller.
    pub user: Option<&'a str>,
}

impl DaemonLaunch<'_> {
    /// The arguments of daemon `id` on `root`, listening on `listen`.
    pub fn args(&self, root: &Path, id: u32, listen: &str) -> Vec<OsString> {
        let members: Vec<String> = (0..self.members).map(|i| i.to_string()).collect();
        let mut args: Vec<OsString> = vec![
            "--root".into(),
            root.into(),
            "--id".into(),
            id.to_string().into(),
            "--listen".into(),
            listen.into(),
            "--secret-file".into(),
            self.state.secret_path().into(),
            "--config".into(),
            self.state.config_path().into(),
            "--members".into(),
            members.join(",").into(),
            // Where the daemons find each other for copies (written once all listen).
            "--peers".into(),
            self.state.deployment_path().into(),
        ];
        if let Some(user) = self.user {
            args.extend(["--user".into(), user.into()]);
        }
        args
    }
}

fn remove_stale(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot remove the stale {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Waits until daemon i is ready, by `ready(i)`; fails if a process (`what(i)`: the daemon,
/// or its launcher) exits first.
fn wait_ready(
    plan: &Plan,
    children: &mut [Child],
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
            check_alive(plan, child, to_id(i)?, &what(i))?;
        }
        if Instant::now() >= deadline {
            let missing: Vec<String> = ready
                .iter()
                .enumerate()
                .filter(|(_, r)| r.is_none())
                .map(|(i, _)| i.to_string())
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
fn read_ready_line(plan: &Plan, root: &Path, id: u32) -> Result<Option<DaemonEntry>> {
    let log = plan.state.daemon_log(id);
    let text = match std::fs::read(&log) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", log.display())),
    };
    let Some(info) = eddy_daemon::parse_announcement(&text) else {
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

/// The daemon's entry once it has written its ready file.
fn read_ready(root: &Path) -> Result<Option<DaemonEntry>> {
    let ready = eddy_daemon::read_ready(root)
        .with_context(|| format!("cannot read {}", eddy_daemon::ready_path(root).display()))?;
    Ok(ready.map(|r| ready_entry(r, root)))
}

/// A daemon's entry in the deployment from what it said when ready, and its root.
fn ready_entry(info: eddy_daemon::ReadyInfo, root: &Path) -> DaemonEntry {
    DaemonEntry {
        id: info.id,
        host: info.host,
        addr: info.addr,
        socket: info.socket.map(PathBuf::from),
        root: root.to_owned(),
    }
}

/// Fails with the tail of the log if the process (daemon or launcher) `id` has exited.
fn check_alive(plan: &Plan, child: &mut Child, id: u32, what: &str) -> Result<()> {
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
fn verify_known(plan: &Plan, dep: &Deployment) -> Result<()> {
    if dep.config.replicas <= 1 {
        return verify(dep);
    }
    plan.state.save_deployment(dep)?;
    verify(dep).inspect_err(|_| {
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

/// Parses a hosts file: `name [address]` per line, `#` starts a comment.
pub fn parse_hosts(text: &str) -> Result<Vec<HostLine>> {
    let mut hosts = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [] => {}
            [name] => hosts.push(HostLine {
                name: name.to_string(),
                address: name.to_string(),
            }),
            [name, address] => hosts.push(HostLine {
                name: name.to_string(),
                address: address.to_string(),
            }),
            _ => bail!("line {}: expected `name [address]`, found {raw:?}", n + 1),
        }
    }
    if hosts.is_empty() {
        bail!("it lists no hosts");
    }
    Ok(hosts)
}

fn read_hosts_file(file: &Path) -> Result<Vec<HostLine>> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the hosts file {}", file.display()))?;
    parse_hosts(&text).with_context(|| format!("hosts file {} is not valid", file.display()))
}

/// The nodes of the current Slurm job.
fn slurm_hosts() -> Result<Vec<HostLine>> {
    let nodelist = std::env::var("SLURM_JOB_NODELIST").context(
        "--slurm needs SLURM_JOB_NODELIST: run it inside a Slurm allocation, or use --hosts FILE",
    )?;
    let out = std::process::Command::new("scontrol")
        .args(["show", "hostnames", &nodelist])
        .output()
        .context("cannot run `scontrol show hostnames`: is Slurm installed on this node?")?;
    if !out.status.success() {
        bail!(
            "`scontrol show hostnames {nodelist}` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_hosts(&String::from_utf8_lossy(&out.stdout)).context("scontrol returned no host names")
}

/// The host with its address as an IP literal, since daemons listen on `ip:port`: a name
/// (a Slurm node, or a hosts file line without an address) is resolved here, IPv4 first.
fn resolve_host(host: HostLine) -> Result<HostLine> {
    if host.address.parse::<IpAddr>().is_ok() {
        return Ok(host);
    }
    let ips: Vec<IpAddr> = (host.address.as_str(), 0)
        .to_socket_addrs()
        .with_context(|| {
            format!(
                "cannot resolve the address of host {:?}; give it as `name address` in a hosts file",
                host.name
            )
        })?
        .map(|a| a.ip())
        .collect();
    let ip = ips
        .iter()
        .find(|ip| ip.is_ipv4())
        .or_else(|| ips.first())
        .with_context(|| format!("host {:?} resolves to no address", host.name))?;
    Ok(HostLine {
        address: ip.to_string(),
        ..host
    })
}

/// Replaces `{host}` and `{id}` in a template string.
pub fn fill(template: &str, host: &str, id: u32) -> String {
    template
        .replace("{host}", host)
        .replace("{id}", &id.to_string())
}

/// Launchers that hand their command to a shell on the other host, as one line of words
/// joined by spaces: each word of `{cmd}` must be quoted for that shell.
const REMOTE_SHELLS: &[&str] = &["ssh", "rsh", "pdsh", "clush", "mrsh"];

/// The launcher command line: the template split on whitespace, `{cmd}` replaced by the
/// daemon's arguments (as separate words; each quoted for the remote shell when the launcher
/// is one of `REMOTE_SHELLS`, so that no word, a path of a user's among them, is read as
/// shell syntax there) and `{host}`/`{id}` filled in.
pub fn launcher_argv(
    template: &str,
    host: &str,
    id: u32,
    cmd: &[OsString],
) -> Result<Vec<OsString>> {
    let words: Vec<&str> = template.split_whitespace().collect();
    if !words.contains(&"{cmd}") {
        bail!("launcher template {template:?} has no {{cmd}} word (e.g. `ssh {{host}} {{cmd}}`)");
    }
    let remote_shell = words.first().is_some_and(|w| {
        let name = Path::new(w).file_name().and_then(|n| n.to_str());
        name.is_some_and(|n| REMOTE_SHELLS.contains(&n))
    });
    let mut argv = Vec::new();
    for w in words {
        if w == "{cmd}" {
            if remote_shell {
                argv.extend(cmd.iter().map(|c| shell_quote(c)));
            } else {
                argv.extend(cmd.iter().cloned());
            }
        } else {
            argv.push(fill(w, host, id).into());
        }
    }
    Ok(argv)
}

/// One word for a POSIX shell: in single quotes, each `'` written as `'\''`.
pub fn shell_quote(word: &std::ffi::OsStr) -> OsString {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let mut out = Vec::with_capacity(word.len() + 2);
    out.push(b'\'');
    for &b in word.as_bytes() {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    OsString::from_vec(out)
}

fn remote_daemon_cmd(
    plan: &Plan,
    bin: &Path,
    root: &Path,
    id: u32,
    host: &HostLine,
    port: u16,
) -> Vec<OsString> {
    let launch = DaemonLaunch {
        state: &plan.state,
        members: plan.daemons,
        user: plan.daemon_user.as_deref(),
    };
    let mut cmd: Vec<OsString> = vec![bin.into()];
    cmd.extend(launch.args(root, id, &listen_addr(&host.address, port)));
    cmd.extend(["--host".into(), host.name.clone().into()]);
    cmd.extend(["--socket".into(), "none".into()]);
    cmd
}

/// `address:port`, bracketing IPv6 literals.
fn listen_addr(address: &str, port: u16) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

fn start_remote(
    plan: &Plan,
    hosts: &[HostLine],
    root: &Path,
    launcher: &str,
    port: u16,
) -> Result<Deployment> {
    let mut spawned = Spawned::default();
    let result = launch_remote(plan, hosts, root, launcher, port, &mut spawned);
    spawned.commit(plan, result)
}

fn launch_remote(
    plan: &Plan,
    hosts: &[HostLine],
    root: &Path,
    launcher: &str,
    port: u16,
    spawned: &mut Spawned,
) -> Result<Deployment> {
    let root_template = absolute(root).to_string_lossy().into_owned();
    let bin = procs::daemon_binary();
    let mut roots = Vec::new();
    for (i, host) in hosts.iter().enumerate() {
        let id = to_id(i)?;
        let droot = PathBuf::from(fill(&root_template, &host.name, id));
        let cmd = remote_daemon_cmd(plan, &bin, &droot, id, host, port);
        let argv = launcher_argv(launcher, &host.name, id, &cmd)?;
        let (program, rest) = argv.split_first().context("empty launcher template")?;
        let child = procs::spawn_detached(Path::new(program), rest, &plan.state.daemon_log(id))?;
        spawned.push(format!("launcher-{id}"), child);
        roots.push(droot);
    }
    // The addresses the daemons bound (port 0: any free one), from their ready lines.
    let daemons = wait_ready(
        plan,
        &mut spawned.children,
        |i| format!("the launcher of daemon {i} on {}", hosts[i].name),
        |i| read_ready_line(plan, &roots[i], to_id(i)?),
    )?;
    let dep = plan.deployment(daemons);
    dep.validate().context("the deployment is not valid")?;
    if dep.config.replicas > 1 {
        // Daemons that rejoin find their peers there (decision 0021).
        plan.state.save_deployment(&dep)?;
    }
    wait_serving(plan, &dep, &mut spawned.children).inspect_err(|_| {
        if dep.config.replicas > 1 {
            let _ = std::fs::remove_file(plan.state.deployment_path());
        }
    })?;
    Ok(dep)
}

/// Waits until a client reaches every daemon, failing early if a launcher fails.
fn wait_serving(plan: &Plan, dep: &Deployment, children: &mut [Child]) -> Result<()> {
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

    #[test]
    fn hosts_file_with_comments_and_addresses() {
        let hosts = parse_hosts("# nodes\nn0 10.0.0.1\n\nn1   # no address\n").unwrap();
        assert_eq!(
            hosts,
            vec![
                HostLine {
                    name: "n0".into(),
                    address: "10.0.0.1".into()
                },
                HostLine {
                    name: "n1".into(),
                    address: "n1".into()
                },
            ]
        );
        assert!(parse_hosts("# only a comment\n").is_err());
        let err = parse_hosts("a b c\n").unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn launcher_template_expands_host_and_cmd() {
        let cmd: Vec<OsString> = vec!["eddyd".into(), "--root".into(), "/r".into()];
        let argv = launcher_argv("ip netns exec {host} {cmd}", "ns0", 0, &cmd).unwrap();
        let words: Vec<&str> = argv.iter().map(|w| w.to_str().unwrap()).collect();
        assert_eq!(
            words,
            ["ip", "netns", "exec", "ns0", "eddyd", "--root", "/r"]
        );
        assert!(launcher_argv("ssh {host}", "h", 0, &cmd).is_err());
        // A remote shell gets every word quoted: `;`, `$( )` and spaces stay literal there.
        let evil: Vec<OsString> =
            vec!["eddyd".into(), "/d=/p/x;touch /tmp/y".into(), "it's".into()];
        let argv =
            launcher_argv("/usr/bin/ssh -o BatchMode=yes {host} {cmd}", "n1", 0, &evil).unwrap();
        assert_eq!(
            argv,
            [
                "/usr/bin/ssh",
                "-o",
                "BatchMode=yes",
                "n1",
                "'eddyd'",
                "'/d=/p/x;touch /tmp/y'",
                "'it'\\''s'"
            ]
            .map(OsString::from)
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(
                argv[4..]
                    .iter()
                    .map(|w| w.to_str().unwrap())
                    .collect::<Vec<_>>()
                    .join(" ")
                    .replacen("'eddyd'", "printf '%s\\n'", 1),
            )
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "/d=/p/x;touch /tmp/y\nit's\n"
        );
        assert_eq!(fill("/tmp/{host}/{id}", "n1", 3), "/tmp/n1/3");
        assert_eq!(listen_addr("::1", 7), "[::1]:7");
    }

    #[test]
    fn host_names_resolve_to_ip_literals() {
        let host = |address: &str| HostLine {
            name: "n0".into(),
            address: address.into(),
        };
        assert_eq!(
            resolve_host(host("localhost")).unwrap().address,
            "127.0.0.1"
        );
        assert_eq!(resolve_host(host("::1")).unwrap().address, "::1");
        let err = format!(
            "{:#}",
            resolve_host(host("no-such-host.invalid")).unwrap_err()
        );
        assert!(err.contains("\"n0\""), "{err}");
    }
}
