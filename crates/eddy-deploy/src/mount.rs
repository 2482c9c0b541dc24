//! Mounting a deployment's namespace in the background: the executable running this (the
//! `eddy` command) is run again as `eddy mount --foreground`, detached, and waited for until
//! the mount is up. The process that serves the mount records it in the state directory.

use crate::mounts::{is_fuse_mounted, mount_target, wait_mounted};
use crate::state::StateDir;
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

/// Runs `eddy mount --foreground` detached (output in STATE/mount.log) and waits, at most
/// `bound`, until the mount is up.
pub fn mount_background(
    state: &StateDir,
    mnt: &Path,
    allow_other: bool,
    bound: Duration,
) -> Result<()> {
    mount_background_with(state, mnt, allow_other, &[], bound)
}

/// `mount_background` with more arguments for `eddy mount --foreground` (`--atime`,
/// `--dev`, `--suid`).
pub fn mount_background_with(
    state: &StateDir,
    mnt: &Path,
    allow_other: bool,
    extra: &[OsString],
    bound: Duration,
) -> Result<()> {
    let target = mount_target(mnt)?;
    if is_fuse_mounted(&target)? {
        bail!(
            "{} is already a mount point; unmount it first with `eddy umount {0}`",
            target.display()
        );
    }
    let exe =
        std::env::current_exe().context("cannot find the eddy executable to run the mount")?;
    let mut args: Vec<OsString> = vec!["mount".into(), "--state".into(), state.dir().into()];
    args.extend([target.clone().into(), "--foreground".into()]);
    args.push(
        if allow_other {
            "--allow-other"
        } else {
            "--owner-only"
        }
        .into(),
    );
    args.extend(extra.iter().cloned());
    let log = state.mount_log();
    let mut child = crate::procs::spawn_detached(&exe, &args, &log)?;
    wait_mounted(&target, &mut child, &log, bound)
}
