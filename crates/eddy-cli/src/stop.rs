//! `eddy stop`: unmount, stop the daemons, wait for local processes, mark the state stopped.
//! Idempotent: with nothing running it says so and succeeds.

use crate::cli::StateArgs;
use crate::state::StateDir;
use anyhow::Result;
use eddy_client::Client;
use eddy_config::Deployment;
use std::time::Duration;

pub fn stop(args: StateArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.as_deref())?;
    if !state.has_deployment() {
        println!("eddy: nothing is running in {}", state.dir().display());
        return Ok(());
    }
    let dep = state.load_deployment()?;
    let mut problems = unmount_all(&state);
    problems.extend(shutdown_daemons(&dep));
    // A daemon that acknowledged shutdown is given one RPC timeout to exit before signals.
    let grace = Duration::from_millis(dep.config.rpc_timeout_ms);
    let killed = crate::procs::stop_processes(&state.read_pids()?, grace);
    problems.extend(
        killed
            .into_iter()
            .map(|p| format!("{p} did not exit after shutdown and was signalled")),
    );
    state.mark_stopped()?;
    for p in &problems {
        eprintln!("eddy: warning: {p}");
    }
    println!(
        "eddy: deployment {:?} stopped ({} daemons)",
        dep.name,
        dep.daemons.len()
    );
    Ok(())
}

/// Unmounts every recorded mount that is still mounted; returns what failed.
fn unmount_all(state: &StateDir) -> Vec<String> {
    let mounts = match state.mounts() {
        Ok(m) => m,
        Err(e) => return vec![format!("cannot list the mounts: {e:#}")],
    };
    let mut problems = Vec::new();
    for mnt in mounts {
        match crate::mounts::is_fuse_mounted(&mnt) {
            Ok(false) => {}
            Ok(true) => {
                if let Err(e) = eddy_fuse::unmount(&mnt) {
                    problems.push(format!(
                        "cannot unmount {}: {e}; try `fusermount -u {0}`",
                        mnt.display()
                    ));
                }
            }
            Err(e) => problems.push(format!("{e:#}")),
        }
    }
    problems
}

/// Asks every daemon to stop; returns the daemons that did not acknowledge.
fn shutdown_daemons(dep: &Deployment) -> Vec<String> {
    let rt = match crate::runtime() {
        Ok(rt) => rt,
        Err(e) => return vec![format!("{e:#}")],
    };
    rt.block_on(async {
        let client = match Client::new(dep.clone()) {
            Ok(c) => c,
            Err(e) => return vec![format!("cannot connect to the daemons to stop them: {e}")],
        };
        client
            .shutdown_daemons()
            .await
            .into_iter()
            .filter_map(|(id, r)| {
                r.err()
                    .map(|e| format!("daemon {id} did not acknowledge shutdown: {e}"))
            })
            .collect()
    })
}
