//! `eddy grow` and `eddy shrink`: change the members of a running deployment while its job
//! goes on (eddy-deploy's `resize`, decision 0081), and say what changed.

use crate::cli::StateArgs;
use crate::say;
use anyhow::Result;
use clap::Args;
use eddy_deploy::{Resized, StateDir};

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
}

#[derive(Debug, Args)]
pub struct ShrinkArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// A daemon to drain (its id, as `eddy status` shows); repeat for several.
    #[arg(long = "drain", value_name = "ID", required = true)]
    pub drain: Vec<u32>,
}

pub fn grow(args: GrowArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    let grown = match (args.local, &args.hosts) {
        (Some(k), _) => eddy_deploy::grow_local(&state, k, say())?,
        (None, Some(file)) => {
            eddy_deploy::grow_hosts(&state, eddy_deploy::launch::read_hosts_file(file)?, say())?
        }
        (None, None) => anyhow::bail!("name where the daemons run: --local K or --hosts FILE"),
    };
    report(&grown);
    Ok(())
}

pub fn shrink(args: ShrinkArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    report(&eddy_deploy::shrink(&state, &args.drain, say())?);
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
