//! `eddy grow` and `eddy shrink`: change the members of a running deployment while its job
//! goes on (eddy-deploy's `resize`, decision 0081), and say what changed.

use crate::cli::StateArgs;
use crate::say;
use anyhow::Result;
use clap::Args;
use eddy_deploy::{Moving, Resized, StateDir};

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("where").required(true).args(["local", "hosts"])))]
pub struct GrowArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// Start K more daemons on this host (roots next to the deployment's), as `eddy start
    /// --local` started its own: same user, configuration and secret.
    #[arg(long, value_name = "K")]
    pub local: Option<u32>,
    /// Start one more daemon per host listed in FILE (`name [address]` per line, `#`
    /// comments), through the launcher, root and port the deployment was started with.
    #[arg(long, value_name = "FILE")]
    pub hosts: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub deadline: DeadlineArgs,
}

/// How long the command may carry a move before it gives up.
#[derive(Debug, Args)]
pub struct DeadlineArgs {
    /// Give up the move after this many seconds, whatever the daemons answer; the hosts file
    /// stays where the move got to, clients keep working, and the next `grow` or `shrink`
    /// finishes it. Default: no bound but a daemon that stops answering for 120 s.
    #[arg(long, value_name = "SECONDS")]
    pub deadline_s: Option<u64>,
}

impl DeadlineArgs {
    fn moving(&self) -> Moving<'static> {
        Moving {
            deadline: self
                .deadline_s
                .map(|s| std::time::Instant::now() + std::time::Duration::from_secs(s)),
            ..Moving::default()
        }
    }
}

#[derive(Debug, Args)]
pub struct ShrinkArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// A daemon to drain (its id, as `eddy status` shows); repeat for several.
    #[arg(long = "drain", value_name = "ID", required = true)]
    pub drain: Vec<u32>,
    #[command(flatten)]
    pub deadline: DeadlineArgs,
}

pub fn grow(args: GrowArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    let how = args.deadline.moving();
    let grown = match (args.local, &args.hosts) {
        (Some(k), _) => eddy_deploy::grow_local(&state, k, how, say())?,
        (None, Some(file)) => {
            let hosts = eddy_deploy::launch::read_hosts_file(file)?;
            eddy_deploy::grow_hosts(&state, hosts, how, say())?
        }
        (None, None) => anyhow::bail!("name where the daemons run: --local K or --hosts FILE"),
    };
    report(&grown);
    Ok(())
}

pub fn shrink(args: ShrinkArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    let how = args.deadline.moving();
    report(&eddy_deploy::shrink(&state, &args.drain, how, say())?);
    Ok(())
}

fn report(r: &Resized) {
    outln!(
        "eddy: {} members at epoch {}{}{}",
        r.members.len(),
        r.epoch,
        if r.added.is_empty() {
            String::new()
        } else {
            format!("; added {:?}", r.added)
        },
        if r.removed.is_empty() {
            String::new()
        } else {
            format!("; removed {:?}", r.removed)
        }
    );
}
