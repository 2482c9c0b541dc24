//! Hidden `eddy debug` helpers: copy a file into or out of the namespace through the client
//! library, so that scripts and tests can move data without a FUSE mount.

use crate::cli::DebugCommand;
use anyhow::{Context, Result};
use eddy_client::{Client, Creds};
use eddy_deploy::StateDir;
use std::path::Path;

pub fn debug(cmd: DebugCommand) -> Result<()> {
    match cmd {
        DebugCommand::Put { state, local, path } => {
            let state = StateDir::from_arg(state.state.as_deref())?;
            let dep = (state.load_deployment()?, state.deployment_path());
            // privileged-path: a file the caller names on its own command line
            let data = std::fs::read(&local)
                .with_context(|| format!("cannot read {}", local.display()))?;
            eddy_deploy::runtime()?.block_on(put(dep, &path, &data))?;
            outln!("eddy: wrote {} bytes to {path}", data.len());
            Ok(())
        }
        DebugCommand::Get { state, path, local } => {
            let state = StateDir::from_arg(state.state.as_deref())?;
            let dep = (state.load_deployment()?, state.deployment_path());
            let data = eddy_deploy::runtime()?.block_on(get(dep, &path))?;
            write_local(&local, &data)?;
            outln!("eddy: read {} bytes from {path}", data.len());
            Ok(())
        }
    }
}

/// A deployment and the hosts file it was read from.
type Hosts = (eddy_config::Deployment, std::path::PathBuf);

async fn put((dep, hosts): Hosts, path: &str, data: &[u8]) -> Result<()> {
    let client = Client::connect_following(dep, hosts)
        .await
        .context("cannot connect to the deployment")?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC;
    let file = client
        .open(path, flags, 0o644, Creds::current())
        .await
        .with_context(|| format!("cannot create {path}"))?;
    let piece = piece_len(&client);
    let mut offset = 0usize;
    for part in data.chunks(piece) {
        client
            .pwrite(&file, offset as u64, part)
            .await
            .with_context(|| format!("cannot write {path} at {offset}"))?;
        offset += part.len();
    }
    client
        .fsync(&file)
        .await
        .with_context(|| format!("cannot fsync {path}"))?;
    client
        .close(&file)
        .await
        .with_context(|| format!("cannot close {path}"))
}

async fn get((dep, hosts): Hosts, path: &str) -> Result<Vec<u8>> {
    let client = Client::connect_following(dep, hosts)
        .await
        .context("cannot connect to the deployment")?;
    let file = client
        .open(path, libc::O_RDONLY, 0, Creds::current())
        .await
        .with_context(|| format!("cannot open {path}"))?;
    let piece = piece_len(&client);
    let mut data = Vec::new();
    loop {
        let part = client
            .pread(&file, data.len() as u64, piece)
            .await
            .with_context(|| format!("cannot read {path}"))?;
        if part.is_empty() {
            break;
        }
        data.extend_from_slice(&part);
    }
    client
        .close(&file)
        .await
        .with_context(|| format!("cannot close {path}"))?;
    Ok(data)
}

/// Bytes moved per call: the largest payload of one RPC.
fn piece_len(client: &Client) -> usize {
    usize::try_from(client.config().max_rpc_data_bytes)
        .unwrap_or(usize::MAX)
        .max(1)
}

fn write_local(local: &Path, data: &[u8]) -> Result<()> {
    // privileged-path: a file the caller names on its own command line
    std::fs::write(local, data).with_context(|| format!("cannot write {}", local.display()))
}
