//! Running a daemon started by root as the user whose job it serves (`eddyd --user`): the
//! storage root is made the user's and the process drops to the user's uid, gid and groups
//! before it opens anything, so the backend and the node's storage see the user's rights,
//! never root's.

use crate::DaemonError;
use nix::unistd::{chown, initgroups, setgid, setuid, Gid, Uid, User};
use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Looks up `spec` (a user name or a numeric uid).
fn lookup(spec: &str) -> Result<User, DaemonError> {
    let found = match spec.parse::<u32>() {
        Ok(uid) => User::from_uid(Uid::from_raw(uid)),
        Err(_) => User::from_name(spec),
    };
    found
        .map_err(|e| DaemonError::Args(format!("--user {spec}: cannot look it up: {e}")))?
        .ok_or_else(|| DaemonError::Args(format!("--user {spec}: no such user on this node")))
}

/// Creates `root` (mode 0700) owned by the user and becomes that user. Must run before any
/// thread is started.
pub fn become_user(spec: &str, root: &Path) -> Result<(), DaemonError> {
    let user = lookup(spec)?;
    let root_err = |source| DaemonError::Root {
        path: root.to_owned(),
        source,
    };
    std::fs::create_dir_all(root).map_err(root_err)?;
    chown(root, Some(user.uid), Some(user.gid)).map_err(|e| root_err(std::io::Error::from(e)))?;
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700)).map_err(root_err)?;
    let name = CString::new(user.name.clone())
        .map_err(|_| DaemonError::Args(format!("--user {spec}: a name with a NUL byte")))?;
    let drop = |what: &str, r: nix::Result<()>| {
        r.map_err(|e| DaemonError::Args(format!("--user {spec}: {what} failed: {e}")))
    };
    drop("initgroups", initgroups(&name, user.gid))?;
    drop("setgid", setgid(user.gid))?;
    drop("setuid", setuid(user.uid))?;
    // setuid to a non-root uid cannot be undone: check it held.
    if Uid::effective() != user.uid || Gid::effective() != user.gid {
        return Err(DaemonError::Args(format!(
            "--user {spec}: still running as uid {} gid {} after the switch",
            Uid::effective(),
            Gid::effective()
        )));
    }
    Ok(())
}
