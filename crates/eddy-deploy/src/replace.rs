//! `replace` (decision 0021): start a fresh daemon on the empty root of a dead one, with
//! its id and address from the deployment file, as `start` started it, plus `--rejoin
//! --full`: it takes a full copy of what it owns from the others before it serves clients.
//! With `keep_root` it starts the dead daemon again on its root as it is (`--rejoin` only).

use crate::launch::DaemonLaunch;
use crate::mounts::LOG_TAIL_LINES;
use crate::procs::{self, log_tail, POLL_INTERVAL};
use crate::state::StateDir;
use anyhow::{bail, Context, Result};
use eddy_client::Client;
use eddy_config::ready;
use eddy_proto::req;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A daemon started again by `replace`.
#[derive(Debug, Clone)]
pub struct Replaced {
    pub id: u32,
    /// Started on an empty root (it takes a full copy of what it owns), not on its old one
    /// (it takes what it missed).
    pub fresh: bool,
    pub root: PathBuf,
    pub addr: String,
}

/// Starts daemon `id` of the deployment in `state` again, which must be dead: on an empty
/// root, or with `keep_root` on its root as it is; returns once it is ready (it then takes
/// what it owns from the others before serving clients).
pub fn replace(state: &StateDir, id: u32, keep_root: bool) -> Result<Replaced> {
    let dep = state.load_deployment()?;
    if dep.config.replicas <= 1 && !keep_root {
        bail!(
            "the deployment keeps one copy of everything (replicas = 1): a replaced daemon \
             would come back empty, with nothing to copy from (--keep-root starts the dead \
             one again on its root)"
        );
    }
    let entry = dep
        .daemons
        .iter()
        .find(|d| d.id == id)
        .cloned()
        .with_context(|| format!("daemon {} is not part of the deployment", id))?;
    let rt = crate::runtime()?;
    let client = Client::new(dep.clone()).context("the deployment file is not usable")?;
    if rt.block_on(client.call_daemon(id, req::Status)).is_ok() {
        bail!(
            "daemon {} ({}) answers: replace only a daemon that is dead (stop it first)",
            id,
            entry.addr
        );
    }
    let root = &entry.root;
    // privileged-path: only whether the dead daemon's root is empty; its parent is the deployment's root, root's
    let empty = match std::fs::read_dir(root) {
        Ok(mut d) => d.next().is_none(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", root.display())),
    };
    if !empty && !keep_root {
        bail!(
            "the root {} of daemon {} is not empty: a replacement starts on an empty root \
             (remove it, or start the old daemon again with --keep-root: it rejoins with what \
             it has)",
            root.display(),
            id
        );
    }
    if entry.socket.is_none() {
        bail!(
            "daemon {} runs on another host ({}): start `eddyd --root {} --id {} --listen {} \
             --secret-file {} --config {} --peers {} --rejoin --full{}` there",
            id,
            entry.host,
            root.display(),
            id,
            entry.addr,
            state.secret_path().display(),
            state.config_path().display(),
            state.deployment_path().display(),
            entry
                .metrics
                .as_deref()
                .map(|m| format!(" --metrics {m}"))
                .unwrap_or_default()
        );
    }
    // The daemon makes its root itself (as the user it runs as, when there is one).
    let user = state.daemon_user()?;
    let members = dep.members();
    let job = dep.job.label(&dep.name);
    let launch = DaemonLaunch {
        state,
        members: &members,
        user: user.as_deref(),
        job: &job,
    };
    // Metrics where the dead one served them (scrape configs name that address).
    let mut argv = launch.args(root, id, &entry.addr, entry.metrics.as_deref());
    argv.push("--rejoin".into());
    // A fresh root has nothing: every peer sends everything it owns.
    if empty {
        argv.push("--full".into());
    }
    let log = state.daemon_log(id);
    // privileged-path: a log in the caller's state directory
    if log.exists() {
        // privileged-path: a log in the caller's state directory
        let _ = std::fs::rename(&log, log.with_extension("log.old"));
    }
    // A dead daemon's ready file is stale: the new one writes its own once it listens.
    // privileged-path: unlink removes the name itself, never follows a link
    match std::fs::remove_file(ready::ready_path(root)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).context("cannot remove the dead daemon's ready file")
        }
        _ => {}
    }
    let mut child = procs::spawn_detached(&procs::daemon_binary(), &argv, &log)?;
    let deadline = Instant::now() + Duration::from_secs(dep.config.start_timeout_s);
    loop {
        if let Some(ready) = ready::read_ready(root)
            .with_context(|| format!("cannot read {}", ready::ready_path(root).display()))?
        {
            if ready.addr != entry.addr {
                procs::kill_children(std::slice::from_mut(&mut child));
                bail!(
                    "the replacement listens on {}, not {}",
                    ready.addr,
                    entry.addr
                );
            }
            break;
        }
        if let Some(status) = child
            .try_wait()
            .context("cannot check the daemon process")?
        {
            bail!(
                "the replacement of daemon {} exited ({status}) before it was ready\n{}",
                id,
                log_tail(&log, LOG_TAIL_LINES)
            );
        }
        if Instant::now() >= deadline {
            procs::kill_children(std::slice::from_mut(&mut child));
            bail!(
                "the replacement of daemon {} was not ready within {} s; see {}",
                id,
                dep.config.start_timeout_s,
                log.display()
            );
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    let label = format!("daemon-{}", id);
    let mut pids = state.read_pids()?;
    pids.retain(|p| p.label != label);
    pids.push(procs::record(label, &child));
    state.write_pids(&pids)?;
    Ok(Replaced {
        id,
        fresh: empty,
        root: root.clone(),
        addr: entry.addr,
    })
}
