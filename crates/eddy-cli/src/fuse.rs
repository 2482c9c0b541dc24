//! The FUSE front-end as `eddy` uses it (temporary stand-in until eddy-fuse exposes its API).

use std::path::Path;
use std::time::Duration;

#[derive(Debug)]
pub struct FuseError(String);
impl std::fmt::Display for FuseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for FuseError {}

pub struct MountOptions {
    pub allow_other: bool,
    pub fsname: String,
    pub threads: usize,
    pub attr_ttl: Duration,
}

pub fn mount(
    _client: eddy_client::Client,
    _rt: tokio::runtime::Handle,
    mountpoint: &Path,
    _opts: MountOptions,
) -> Result<(), FuseError> {
    Err(FuseError(format!("cannot mount {}: FUSE support is not built in yet", mountpoint.display())))
}

pub fn unmount(mountpoint: &Path) -> Result<(), FuseError> {
    Err(FuseError(format!("cannot unmount {}: FUSE support is not built in yet", mountpoint.display())))
}
