//! `eddy repair` and `eddy replace` (decision 0021).
//!
//! `repair` tells every daemon to push its hints now (with `--full`, to scan everything it
//! holds first), then follows the daemons' status until no hint is left and no daemon is
//! rejoining, with a progress bar on stderr (on a terminal). It fails, naming them, when the
//! items left wait for daemons that cannot be reached, or when nothing moves for a while.
//!
//! `replace` starts a fresh daemon on the empty root of a dead one, with its id and
//! address from the deployment file, as `eddy start` started it, plus `--rejoin --full`:
//! it takes a full copy of what it owns from the others before it serves clients. With
//! `--keep-root` it starts the dead daemon again on its root as it is (`--rejoin` only).

use crate::cli::{RepairArgs, ReplaceArgs};
use crate::procs::{self, log_tail, POLL_INTERVAL};
use crate::state::StateDir;
use anyhow::{bail, Context, Result};
use eddy_client::{Client, Failure};
use eddy_proto::{req, DaemonStatus};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How often `eddy repair` asks the daemons how much is left.
const STATUS_INTERVAL: Duration = Duration::from_millis(200);

#[derive(Debug, Serialize)]
struct RepairReport {
    /// Items pushed and verified while this command ran (hints held at the first status
    /// minus those left).
    repaired: u64,
    /// Items left (hints held), and per target daemon.
    left: u64,
    waiting_for: BTreeMap<u32, u64>,
    /// Daemons that did not answer.
    unreachable: Vec<u32>,
    seconds: f64,
}

/// What the daemons said in one status round.
struct Round {
    left: u64,
    waiting_for: BTreeMap<u32, u64>,
    rejoining: Vec<u32>,
    unreachable: Vec<u32>,
}

fn round(statuses: Vec<(u32, Result<DaemonStatus, eddy_client::Errno>)>) -> Round {
    let mut r = Round {
        left: 0,
        waiting_for: BTreeMap::new(),
        rejoining: Vec::new(),
        unreachable: Vec::new(),
    };
    for (id, s) in statuses {
        match s {
            Ok(s) => {
                r.left += s.hints;
                for (t, n) in s.hints_for {
                    *r.waiting_for.entry(t).or_insert(0) += n;
                }
                if s.rejoining {
                    r.rejoining.push(id);
                }
            }
            Err(_) => r.unreachable.push(id),
        }
    }
    r
}

pub fn repair(args: RepairArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    let dep = state.load_deployment()?;
    if dep.config.replicas <= 1 {
        bail!("the deployment keeps one copy of everything (replicas = 1): there is nothing to repair");
    }
    // No progress for this long (nothing pushed, nothing verified) ends the wait.
    let stall = Duration::from_millis(dep.config.rpc_timeout_ms * 3);
    let ids: Vec<u32> = dep.daemons.iter().map(|d| d.id).collect();
    let client = Client::new(dep).context("the deployment file is not usable")?;
    let rt = crate::runtime()?;
    let quiet = args.json || !std::io::stderr().is_terminal();
    let bar = ProgressBar::with_draw_target(
        None,
        if quiet {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        },
    );
    bar.set_style(
        ProgressStyle::with_template("repair {bar:30} {pos}/{len} items {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let outcome: Result<RepairReport> = rt.block_on(async {
        let full = args.full;
        let asks = ids.iter().map(|&id| {
            let client = client.clone();
            async move { (id, client.call_daemon(id, req::Repair { full }).await) }
        });
        for (id, r) in futures::future::join_all(asks).await {
            match r {
                Ok(()) => {}
                Err(Failure::Daemon(e)) => bail!("daemon {id} refused to repair: {e}"),
                // Reported below with what waits for it.
                Err(Failure::Unreachable(_)) => {}
            }
        }
        let first = round(client.daemon_status().await);
        let total = first.left;
        bar.set_length(total);
        let (mut best, mut since) = (first.left, Instant::now());
        let mut now = first;
        loop {
            bar.set_position(total.saturating_sub(now.left));
            bar.set_message(match now.rejoining.is_empty() {
                true => String::new(),
                false => format!("(rejoining: {:?})", now.rejoining),
            });
            let report = |r: &Round| RepairReport {
                repaired: total.saturating_sub(r.left),
                left: r.left,
                waiting_for: r.waiting_for.clone(),
                unreachable: r.unreachable.clone(),
                seconds: started.elapsed().as_secs_f64(),
            };
            if now.left == 0 && now.rejoining.is_empty() && now.unreachable.is_empty() {
                return Ok(report(&now));
            }
            // Everything left waits for daemons that cannot be reached: nothing to wait for.
            let for_reachable: u64 = now
                .waiting_for
                .iter()
                .filter(|(t, _)| !now.unreachable.contains(t))
                .map(|(_, n)| n)
                .sum();
            if !now.unreachable.is_empty() && for_reachable == 0 && now.rejoining.is_empty() {
                let waiting: Vec<String> = now
                    .unreachable
                    .iter()
                    .map(|d| {
                        format!(
                            "daemon {d}: {} item(s) wait for it",
                            now.waiting_for.get(d).copied().unwrap_or(0)
                        )
                    })
                    .collect();
                bail!(
                    "daemons cannot be reached ({}); start them again (they rejoin) or replace \
                     them with `eddy replace ID`, then run `eddy repair` again",
                    waiting.join("; ")
                );
            }
            if now.left < best {
                (best, since) = (now.left, Instant::now());
            } else if since.elapsed() > stall {
                let per: Vec<String> = now
                    .waiting_for
                    .iter()
                    .map(|(d, n)| format!("{n} for daemon {d}"))
                    .collect();
                bail!(
                    "repair makes no progress: {} item(s) left ({}){}; see the daemons' logs",
                    now.left,
                    per.join(", "),
                    if now.rejoining.is_empty() {
                        String::new()
                    } else {
                        format!(", daemons still rejoining: {:?}", now.rejoining)
                    }
                );
            }
            tokio::time::sleep(STATUS_INTERVAL).await;
            now = round(client.daemon_status().await);
        }
    });
    bar.finish_and_clear();
    let report = outcome?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else if std::io::stdout().is_terminal() {
        outln!(
            "eddy: repair done: {} item(s) pushed and verified in {:.1} s; every copy is in place",
            report.repaired,
            report.seconds
        );
    }
    Ok(())
}

pub fn replace(args: ReplaceArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    let dep = state.load_deployment()?;
    if dep.config.replicas <= 1 && !args.keep_root {
        bail!(
            "the deployment keeps one copy of everything (replicas = 1): a replaced daemon \
             would come back empty, with nothing to copy from (--keep-root starts the dead \
             one again on its root)"
        );
    }
    let entry = dep
        .daemons
        .iter()
        .find(|d| d.id == args.id)
        .cloned()
        .with_context(|| format!("daemon {} is not part of the deployment", args.id))?;
    let rt = crate::runtime()?;
    let client = Client::new(dep.clone()).context("the deployment file is not usable")?;
    if rt
        .block_on(client.call_daemon(args.id, req::Status))
        .is_ok()
    {
        bail!(
            "daemon {} ({}) answers: replace only a daemon that is dead (stop it first)",
            args.id,
            entry.addr
        );
    }
    let root = &entry.root;
    let empty = match std::fs::read_dir(root) {
        Ok(mut d) => d.next().is_none(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", root.display())),
    };
    if !empty && !args.keep_root {
        bail!(
            "the root {} of daemon {} is not empty: a replacement starts on an empty root \
             (remove it, or start the old daemon again with --keep-root: it rejoins with what \
             it has)",
            root.display(),
            args.id
        );
    }
    if entry.socket.is_none() {
        bail!(
            "daemon {} runs on another host ({}): start `eddyd --root {} --id {} --listen {} \
             --secret-file {} --config {} --peers {} --rejoin --full` there",
            args.id,
            entry.host,
            root.display(),
            args.id,
            entry.addr,
            state.secret_path().display(),
            state.config_path().display(),
            state.deployment_path().display()
        );
    }
    // The daemon makes its root itself (as the user it runs as, when there is one).
    let user = state.daemon_user()?;
    let members = dep.daemons.len() as u32;
    let launch = crate::start::DaemonLaunch {
        state: &state,
        members,
        user: user.as_deref(),
    };
    let mut argv = launch.args(root, args.id, &entry.addr);
    argv.push("--rejoin".into());
    // A fresh root has nothing: every peer sends everything it owns.
    if empty {
        argv.push("--full".into());
    }
    let log = state.daemon_log(args.id);
    if log.exists() {
        let _ = std::fs::rename(&log, log.with_extension("log.old"));
    }
    // A dead daemon's ready file is stale: the new one writes its own once it listens.
    match std::fs::remove_file(eddy_daemon::ready_path(root)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).context("cannot remove the dead daemon's ready file")
        }
        _ => {}
    }
    let mut child = procs::spawn_detached(&procs::daemon_binary(), &argv, &log)?;
    let deadline = Instant::now() + Duration::from_secs(dep.config.start_timeout_s);
    loop {
        if let Some(ready) = eddy_daemon::read_ready(root)
            .with_context(|| format!("cannot read {}", eddy_daemon::ready_path(root).display()))?
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
                args.id,
                log_tail(&log, crate::mounts::LOG_TAIL_LINES)
            );
        }
        if Instant::now() >= deadline {
            procs::kill_children(std::slice::from_mut(&mut child));
            bail!(
                "the replacement of daemon {} was not ready within {} s; see {}",
                args.id,
                dep.config.start_timeout_s,
                log.display()
            );
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    let label = format!("daemon-{}", args.id);
    let mut pids = state.read_pids()?;
    pids.retain(|p| p.label != label);
    pids.push(procs::record(label, &child));
    state.write_pids(&pids)?;
    outln!(
        "eddy: daemon {} {} on {} ({}); it takes {} before serving; `eddy repair` waits for it",
        args.id,
        if empty { "replaced" } else { "started again" },
        root.display(),
        entry.addr,
        if empty {
            "a full copy of what it owns"
        } else {
            "what it missed"
        }
    );
    Ok(())
}
