//! What runs on each of a job's nodes, through srun as root: the mount of the job's deployment
//! (under a lock, in a directory made safely under a trusted parent) and the clean-up of its mount
//! and daemon roots.

use crate::nodes;
use anyhow::{bail, Context, Result};
use eddy_deploy::secure::DirFd;
use eddy_deploy::{Say, StateDir};
use std::path::Path;
use std::time::Duration;

/// Mounts the deployment of `state` on `mount` on this node (made if missing; nothing to
/// do if this deployment is mounted there already).
pub fn node_mount(state: &Path, mount: &Path) -> Result<()> {
    let state = StateDir::new(state);
    let parent = trusted_mount_parent(mount)?;
    let name = mount
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("mount point {} has no name", mount.display()))?;
    let target = parent.path().join(name);
    let _held = MountLock::take(&target)?;
    if eddy_deploy::mounts::is_fuse_mounted(&target)? {
        // Only root mounts in the trusted parent: is it this deployment's?
        if state.mounts()?.contains(&target) {
            return Ok(());
        }
        bail!(
            "{} is mounted already, by another deployment",
            target.display()
        );
    }
    make_mount_point(&parent, name)?;
    let dep = state.load_deployment()?;
    eddy_deploy::mount::mount_background(
        &state,
        &target,
        true,
        Duration::from_secs(dep.config.start_timeout_s),
    )
}

/// The directory holding the mount point `mount` (made if missing), checked to be one no
/// other user can change: mount(2) follows links, so a link planted at a mount point would
/// put the job's file system anywhere root can reach. Returns it resolved, open.
fn trusted_mount_parent(mount: &Path) -> Result<DirFd> {
    let parent = mount
        .parent()
        .with_context(|| format!("mount point {} has no parent", mount.display()))?;
    eddy_deploy::secure::trusted_dir(parent)
        .with_context(|| format!("the site's mount points under {}", parent.display()))
}

/// Makes the mount point `name` (root's) in its trusted parent, or checks the one there is a
/// directory of root's, not a link.
fn make_mount_point(parent: &DirFd, name: &str) -> Result<()> {
    let (me, my_group) = eddy_deploy::secure::me();
    parent.child_dir(name, 0o755, me, my_group)?;
    Ok(())
}

/// Unmounts `mount` (if given and mounted) and removes its directory if empty; stops what
/// still serves `root` (if given) and removes it. Idempotent.
pub fn node_clean(mount: Option<&Path>, root: Option<&Path>, say: Say) -> Result<()> {
    if let Some(mount) = mount {
        // privileged-path: the site's mount point, in a parent trusted_mount_parent checked at node-mount
        if mount.exists() {
            let _held = MountLock::take(mount)?;
            if eddy_deploy::mounts::is_fuse_mounted(mount)? {
                eddy_proto::mounts::unmount(mount)
                    .or_else(|_| lazy_unmount(mount))
                    .with_context(|| format!("cannot unmount {}", mount.display()))?;
            }
            // Only an empty directory goes; a busy or non-empty one stays.
            // privileged-path: the site's mount point; rmdir removes an empty directory only, never follows a link
            let _ = std::fs::remove_dir(mount);
        }
    }
    if let Some(root) = root {
        let left = eddy_deploy::procs::serving_root(root);
        for p in eddy_deploy::procs::terminate(&left, Duration::from_secs(5)) {
            say.err(&format!(
                "eddy: stopped {p}, still serving after the deployment stopped"
            ));
        }
        // privileged-path: the daemon root's parents are the site's node_root/pool root (eddyd's rootdir walk checks them); remove_dir_all unlinks links, never follows them
        match std::fs::remove_dir_all(root) {
            // Never made (a start that failed early): nothing to remove.
            Err(e)
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                return Err(e).with_context(|| format!("cannot remove {}", root.display()));
            }
            _ => {}
        }
    }
    Ok(())
}

/// An exclusive lock on the directory holding a mount point, so that mounts and unmounts
/// of it on one node happen one at a time (a retried phase, or nodes that share a host).
struct MountLock {
    /// Holds the lock while open.
    _dir: std::fs::File,
}

impl MountLock {
    fn take(mount: &Path) -> Result<MountLock> {
        let parent = mount
            .parent()
            .with_context(|| format!("mount point {} has no parent", mount.display()))?;
        // privileged-path: the mount point's parent, root's (trusted_mount_parent)
        let dir = std::fs::File::open(parent)
            .with_context(|| format!("cannot open {}", parent.display()))?;
        lock_exclusive(&dir, parent)?;
        Ok(MountLock { _dir: dir })
    }
}

/// flock(LOCK_EX) on an open file or directory (`path` names it in errors); released when
/// the file is closed.
pub(crate) fn lock_exclusive(file: &std::fs::File, path: &Path) -> Result<()> {
    // SAFETY: flock on a descriptor the caller owns.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(file), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("cannot lock {}", path.display()));
    }
    Ok(())
}

fn lazy_unmount(mount: &Path) -> Result<()> {
    nodes::run_bounded(
        Path::new("umount"),
        &["-l".into(), mount.into()],
        Duration::from_secs(10),
    )
    .map(|_| ())
}
