//! Looking at paths as a job's user sees them. The phases run as root (or SlurmUser), who can
//! see what the user cannot: asked by root, "does /root/.ssh/id_rsa exist?" would tell the
//! user what only root may know. So paths named by a user's directives are resolved by a
//! child of this program that has dropped to the user's uid, gid and groups first.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Bound on the child: a hung backend must not hold a phase forever.
const BOUND: Duration = Duration::from_secs(60);

/// One path as the user sees it: where it leads, or why it cannot be reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Seen {
    Resolved(PathBuf),
    Unreachable(String),
}

/// Resolves each of `paths` (links followed) as user `uid` with group `gid` and the user's
/// supplementary groups would.
pub fn resolve(uid: u32, gid: u32, paths: &[PathBuf]) -> Result<Vec<Seen>> {
    ask(uid, gid, &[], paths)
}

/// The bytes of each of `paths` as user `uid` sees them: a file's size, or the sum of the
/// regular files of a tree (links inside it not followed); `Unreachable` where the user
/// cannot reach it.
pub fn tree_bytes(uid: u32, gid: u32, paths: &[PathBuf]) -> Result<Vec<Sized>> {
    ask(uid, gid, &["--bytes"], paths)
}

/// The size of one path as the user sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Sized {
    Bytes(u64),
    Unreachable(String),
}

/// Runs `eddy bb resolve-paths FLAGS -- PATHS` as the user; one answer per path.
fn ask<T: serde::de::DeserializeOwned>(
    uid: u32,
    gid: u32,
    flags: &[&str],
    paths: &[PathBuf],
) -> Result<Vec<T>> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let groups = groups_of(uid, gid)?;
    let exe = std::env::current_exe().context("cannot find the eddy program")?;
    let mut cmd = Command::new(&exe);
    cmd.args(["bb", "resolve-paths"])
        .args(flags)
        .arg("--")
        .args(paths)
        .stdin(Stdio::null())
        .env_clear()
        .current_dir("/");
    // SAFETY: setgroups, setgid and setuid are async-signal-safe and touch only `groups`,
    // which the parent keeps alive and does not change.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = crate::nodes::output_bounded(cmd, BOUND)
        .with_context(|| format!("resolving paths as uid {uid}"))?;
    let seen: Vec<T> = out
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .context("the resolving child answered nonsense")?;
    if seen.len() != paths.len() {
        bail!(
            "the resolving child answered {} of {} paths",
            seen.len(),
            paths.len()
        );
    }
    Ok(seen)
}

/// The user's groups: `gid` and those the group database gives the user.
pub(crate) fn groups_of(uid: u32, gid: u32) -> Result<Vec<libc::gid_t>> {
    use nix::unistd::{getgrouplist, Gid, Uid, User};
    let user =
        User::from_uid(Uid::from_raw(uid)).with_context(|| format!("cannot look up uid {uid}"))?;
    let Some(user) = user else {
        return Ok(vec![gid]);
    };
    let name = CString::new(user.name).context("a user name with a NUL byte")?;
    let groups = getgrouplist(&name, Gid::from_raw(gid))
        .with_context(|| format!("cannot list the groups of uid {uid}"))?;
    Ok(groups.into_iter().map(Gid::as_raw).collect())
}

/// The answers of `eddy bb resolve-paths PATH...` (run by `resolve`, as the user), which
/// prints them one per line: one JSON `Seen` per path, resolved by this process.
pub fn resolve_paths_here(paths: &[PathBuf]) -> Result<Vec<String>> {
    paths
        .iter()
        .map(|p| {
            // privileged-path: as the job's user: `eddy bb resolve-paths` runs in a child that took the user's ids
            let seen = match std::fs::canonicalize(p) {
                Ok(c) => Seen::Resolved(c),
                Err(e) => Seen::Unreachable(e.to_string()),
            };
            serde_json::to_string(&seen).context("cannot encode an answer")
        })
        .collect()
}

/// The answers of `eddy bb resolve-paths --bytes PATH...`: one JSON `Sized` per path.
pub fn tree_bytes_here(paths: &[PathBuf]) -> Result<Vec<String>> {
    paths
        .iter()
        .map(|p| {
            let sized = match bytes_of(p) {
                Ok(b) => Sized::Bytes(b),
                Err(e) => Sized::Unreachable(e.to_string()),
            };
            serde_json::to_string(&sized).context("cannot encode an answer")
        })
        .collect()
}

/// A file's size, or the regular files' sizes summed over a tree (links followed at the top
/// only, as the stage-in does).
fn bytes_of(path: &std::path::Path) -> std::io::Result<u64> {
    // privileged-path: as the job's user: `eddy bb resolve-paths --bytes` runs in a child that took the user's ids
    let meta = std::fs::metadata(path)?;
    if !meta.is_dir() {
        return Ok(if meta.is_file() { meta.len() } else { 0 });
    }
    let mut total = 0u64;
    let mut dirs = vec![path.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        // privileged-path: as the job's user (the resolve-paths child)
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                dirs.push(entry.path());
            } else if meta.is_file() {
                total = total.saturating_add(meta.len());
            }
        }
    }
    Ok(total)
}
