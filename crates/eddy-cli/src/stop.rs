//! `eddy stop`: `eddy_deploy::stop` with the deployment of --state, saying what it does.

use crate::cli::StopArgs;
use anyhow::Result;
use eddy_deploy::{StateDir, StopOptions};

pub fn stop(args: StopArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    let options = StopOptions {
        discard: args.discard,
        ..StopOptions::default()
    };
    eddy_deploy::stop(&state, options, crate::say())?;
    Ok(())
}
