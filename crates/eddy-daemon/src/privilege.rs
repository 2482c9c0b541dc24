//! Running a daemon started by root as the user whose job it serves (`eddyd --user`): the
//! storage root is made the user's and the process drops to the user's uid, gid and groups
//! before it opens anything, so the backend and the node's storage see the user's rights,
//! never root's. The root is made or accepted by `rootdir::prepare` (decision 0023): walked
//! from `/` without following links others could plant, made with an exclusive `mkdirat`,
//! an existing one accepted only when private and this deployment's, handed over with
//! `fchown` on its descriptor.

use crate::rootdir::{self, RootOwner};
use crate::DaemonError;
use nix::unistd::{initgroups, setgid, setuid, Gid, Uid, User};
use std::ffi::CString;
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

/// Makes `root` (mode 0700) the user's, safely (`rootdir::prepare`; `mark` is the
/// deployment's root mark), and becomes that user. Must run before any thread is started.
pub fn become_user(spec: &str, root: &Path, mark: &[u8]) -> Result<(), DaemonError> {
    let user = lookup(spec)?;
    let owner = RootOwner {
        uid: user.uid,
        gid: user.gid,
        for_user: true,
    };
    rootdir::prepare(root, owner, mark)?;
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
