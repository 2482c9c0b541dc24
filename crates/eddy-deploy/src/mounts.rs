//! Mount points: whether a path is a FUSE mount (read from /proc/self/mountinfo, so that a
//! dead mount is never touched), and waiting for a mount to appear.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::procs::{log_tail, POLL_INTERVAL};

/// Lines of a log shown when a background process fails.
pub const LOG_TAIL_LINES: usize = 20;

/// The mount points of FUSE file systems, from /proc/self/mountinfo.
pub fn fuse_mounts() -> Result<Vec<PathBuf>> {
    // privileged-path: the kernel's mount table
    let text = std::fs::read_to_string("/proc/self/mountinfo")
        .context("cannot read /proc/self/mountinfo")?;
    Ok(text.lines().filter_map(parse_fuse_line).collect())
}

/// The mount point of a mountinfo line if its file system type is fuse.
fn parse_fuse_line(line: &str) -> Option<PathBuf> {
    let (left, right) = line.split_once(" - ")?;
    let fstype = right.split_whitespace().next()?;
    if fstype != "fuse" && !fstype.starts_with("fuse.") {
        return None;
    }
    let mountpoint = left.split_whitespace().nth(4)?;
    Some(PathBuf::from(unescape(mountpoint)))
}

/// Undoes the octal escapes (`\040` for a space...) of mountinfo.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `mnt` (absolute, canonical) is a FUSE mount point.
pub fn is_fuse_mounted(mnt: &Path) -> Result<bool> {
    Ok(fuse_mounts()?.iter().any(|m| m == mnt))
}

/// The canonical path of an existing directory to mount on, or a clear error.
pub fn mount_target(mnt: &Path) -> Result<PathBuf> {
    // privileged-path: the mount point the caller names (eddy bb: in a trusted_mount_parent)
    let canon = std::fs::canonicalize(mnt).with_context(|| {
        format!(
            "mount point {} is not usable; create the directory first",
            mnt.display()
        )
    })?;
    // privileged-path: the mount point the caller names, resolved just above
    if !canon.is_dir() {
        bail!("mount point {} is not a directory", mnt.display());
    }
    Ok(canon)
}

/// Waits until `mnt` is a FUSE mount, while `child` (the process serving it) runs.
pub fn wait_mounted(mnt: &Path, child: &mut Child, log: &Path, bound: Duration) -> Result<()> {
    let deadline = Instant::now() + bound;
    loop {
        if is_fuse_mounted(mnt)? {
            return Ok(());
        }
        if let Some(status) = child.try_wait().context("cannot check the mount process")? {
            bail!(
                "the mount process for {} exited ({status}) before mounting\n{}",
                mnt.display(),
                log_tail(log, LOG_TAIL_LINES)
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "{} was not mounted within {} s; see {}\n{}",
                mnt.display(),
                bound.as_secs(),
                log.display(),
                log_tail(log, LOG_TAIL_LINES)
            );
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fuse_lines_with_escapes() {
        let line = "50 30 0:45 / /tmp/my\\040mnt rw,nosuid,nodev - fuse eddy:job rw,user_id=0";
        assert_eq!(parse_fuse_line(line), Some(PathBuf::from("/tmp/my mnt")));
        let sub = "51 30 0:46 / /m rw - fuse.eddy eddy rw";
        assert_eq!(parse_fuse_line(sub), Some(PathBuf::from("/m")));
        let ext4 = "36 35 98:0 / / rw,noatime - ext4 /dev/root rw";
        assert_eq!(parse_fuse_line(ext4), None);
        assert_eq!(parse_fuse_line("garbage"), None);
    }
}
