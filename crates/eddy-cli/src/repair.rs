//! `eddy repair` and `eddy replace` (decision 0021).
//!
//! `repair` tells every daemon to push its hints now (with `--full`, to scan everything it
//! holds first), then follows the daemons' status until no hint is left and no daemon is
//! rejoining, with a progress bar on stderr (on a terminal). It fails, naming them, when the
//! items left wait for daemons that cannot be reached, or when nothing moves for a while.
//!
//! `replace` starts a fresh daemon on the empty root of a dead one (`eddy_deploy::replace`)
//! and says what it did.

use crate::cli::{RepairArgs, ReplaceArgs};
use anyhow::{bail, Context, Result};
use eddy_client::{Client, Failure};
use eddy_deploy::StateDir;
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
    let client = Client::new_following(dep, state.deployment_path())
        .context("the deployment file is not usable")?;
    let rt = eddy_deploy::runtime()?;
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
    let r = eddy_deploy::replace(&state, args.id, args.keep_root)?;
    outln!(
        "eddy: daemon {} {} on {} ({}); it takes {} before serving; `eddy repair` waits for it",
        r.id,
        if r.fresh { "replaced" } else { "started again" },
        r.root.display(),
        r.addr,
        if r.fresh {
            "a full copy of what it owns"
        } else {
            "what it missed"
        }
    );
    Ok(())
}
