//! `eddy start`: turn the arguments into a plan (`eddy_deploy::Plan`), start it, say so, and
//! optionally mount the namespace.

use crate::cli::StartArgs;
use anyhow::{bail, Context, Result};
use eddy_config::{Config, Link};
use eddy_deploy::launch::{read_hosts_file, slurm_hosts, SRUN_LAUNCHER, SSH_LAUNCHER};
use eddy_deploy::start::{configure, end_dead, refuse_running, start_bound, Overrides};
use eddy_deploy::{Placement, Plan, StateDir};
use std::path::Path;

pub fn start(args: StartArgs) -> Result<()> {
    let state = start_state_dir(&args)?;
    // A deployment killed here before: its profile goes to the history, then it is ended.
    end_dead(&state, crate::say())?;
    refuse_running(&state)?;
    let config = start_config(&args)?;
    let placement = placement(&args, &config)?;
    let allow_other = crate::mount::allow_other(args.allow_other, args.owner_only)?;
    if let Some(mnt) = &args.mount {
        eddy_deploy::mounts::mount_target(mnt)?;
    }
    let name = args
        .name
        .clone()
        .or_else(|| std::env::var("SLURM_JOB_ID").ok())
        .unwrap_or_else(|| "eddy".to_string());
    let mut job = eddy_config::JobInfo::from_env();
    if let Some(script) = &args.script {
        // privileged-path: the job script the caller names on its own command line
        let text = std::fs::read(script)
            .with_context(|| format!("cannot read the job script {}", script.display()))?;
        job.script_hash = Some(eddy_config::JobInfo::script_hash(&text));
    }
    let plan = Plan {
        state,
        config,
        name,
        placement,
        daemon_user: args.daemon_user.clone(),
        job,
    };
    let dep = eddy_deploy::start(&plan)?;
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
        return Placement::local(n, args.root.clone());
    }
    let hosts = match &args.hosts {
        Some(file) => read_hosts_file(file)?,
        None => slurm_hosts()?,
    };
    let default_launcher = if args.slurm {
        SRUN_LAUNCHER
    } else {
        SSH_LAUNCHER
    };
    let launcher = args
        .launcher
        .clone()
        .unwrap_or_else(|| default_launcher.to_string());
    let port = args.listen_port.unwrap_or(config.port);
    Placement::remote(hosts, args.root.clone(), launcher, port)
}

fn mount_after_start(plan: &Plan, mnt: &Path, allow_other: bool) -> Result<()> {
    eddy_deploy::mount::mount_background(&plan.state, mnt, allow_other, start_bound(&plan.config))
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

/// The --config file (or defaults) with --metrics, --chunk-size, --wire, --replicas,
/// --backend and --link applied, validated (`eddy_deploy::start::configure`).
fn start_config(args: &StartArgs) -> Result<Config> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)
            .with_context(|| format!("fix the configuration file {}", path.display()))?,
        None => Config::default(),
    };
    if let Some(addr) = &args.metrics {
        eddy_config::metrics_socket_addr(addr).context("--metrics")?;
        config.metrics_addr = Some(addr.clone());
    }
    let mut links = Vec::new();
    if let Some(dir) = &args.backend {
        links.push(Link {
            prefix: "/".into(),
            backend: dir.clone(),
        });
    }
    for text in &args.link {
        links.push(Link::parse(text).with_context(|| format!("--link {text}"))?);
    }
    configure(
        config,
        Overrides {
            chunk_size: args.chunk_size,
            wire: args.wire,
            replicas: args.replicas,
            links,
        },
    )
}
