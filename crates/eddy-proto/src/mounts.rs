//! Unmounting a file system, and whether one is mounted (the kernel's mount table): what the
//! FUSE front-end (`eddy-fuse`), `eddy stop` (`eddy-deploy`) and the burst-buffer phases
//! (`eddy-bb`) share, here so that the latter two need not link the FUSE front-end.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use tracing::debug;

/// Why an unmount failed.
#[derive(Debug, thiserror::Error)]
pub enum UnmountError {
    #[error("cannot unmount {}: {reason} (close the files open under it, or unmount it lazily with `umount -l`)", mountpoint.display())]
    Unmount { mountpoint: PathBuf, reason: String },
    #[error("cannot read the mount table: {0}")]
    MountTable(io::Error),
}

/// One way of unmounting.
type UnmountAttempt = fn(&Path) -> Result<(), String>;

/// How an unmount went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmounted {
    NotMounted,
    /// Unmounted; the kernel has ended the connection.
    Gone,
    /// Detached from the tree while still busy; the connection lives on until the last
    /// open file under it is closed.
    Detached,
}

/// Unmounts the file system at `mountpoint`: `fusermount3 -u`, then umount(2), then a lazy
/// unmount. Ok if nothing is mounted there.
pub fn unmount(mountpoint: &Path) -> Result<(), UnmountError> {
    unmount_with(mountpoint).map(|_| ())
}

/// `unmount`, saying how it went.
pub fn unmount_with(mountpoint: &Path) -> Result<Unmounted, UnmountError> {
    let target = resolve(mountpoint);
    if !is_mounted(&target)? {
        return Ok(Unmounted::NotMounted);
    }
    let mut reason = String::from("still mounted");
    let attempts: [(&str, UnmountAttempt, Unmounted); 4] = [
        ("fusermount3 -u", |p| fusermount(p, false), Unmounted::Gone),
        ("umount", |p| umount2(p, 0), Unmounted::Gone),
        (
            "fusermount3 -u -z",
            |p| fusermount(p, true),
            Unmounted::Detached,
        ),
        (
            "umount -l",
            |p| umount2(p, libc::MNT_DETACH),
            Unmounted::Detached,
        ),
    ];
    for (what, attempt, outcome) in attempts {
        match attempt(&target) {
            Ok(()) if !is_mounted(&target)? => return Ok(outcome),
            Ok(()) => reason = format!("{what}: still mounted"),
            Err(e) => {
                debug!(mountpoint = %target.display(), "{what} failed: {e}");
                reason = format!("{what}: {e}");
            }
        }
    }
    Err(UnmountError::Unmount {
        mountpoint: mountpoint.to_owned(),
        reason,
    })
}

/// The absolute, symlink-free form of a mount point, computed without touching the mount
/// point itself (a dead FUSE mount answers every access with ENOTCONN).
fn resolve(mountpoint: &Path) -> PathBuf {
    let absolute = std::path::absolute(mountpoint).unwrap_or_else(|_| mountpoint.to_owned());
    match (absolute.parent(), absolute.file_name()) {
        // privileged-path: the mount point's parent, the caller's (eddy bb: trusted_mount_parent)
        (Some(parent), Some(name)) => match parent.canonicalize() {
            Ok(parent) => parent.join(name),
            Err(_) => absolute,
        },
        _ => absolute,
    }
}

/// Whether something is mounted exactly at `target` (per /proc/self/mountinfo).
fn is_mounted(target: &Path) -> Result<bool, UnmountError> {
    // privileged-path: the kernel's mount table
    let table =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(UnmountError::MountTable)?;
    Ok(mountinfo_has(&table, target))
}

/// Whether a mountinfo text lists `target` as a mount point.
fn mountinfo_has(table: &str, target: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let want = target.as_os_str().as_bytes();
    table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|field| unescape_mountinfo(field) == want)
}

/// Decodes the octal escapes (`\040` for a space, ...) of a mountinfo field.
fn unescape_mountinfo(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let s = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(s, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

fn fusermount(target: &Path, lazy: bool) -> Result<(), String> {
    let mut cmd = Command::new("fusermount3");
    cmd.arg("-u").arg("-q");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd
        .arg(target)
        .output()
        .map_err(|e| format!("cannot run fusermount3: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

fn umount2(target: &Path, flags: libc::c_int) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(target.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let rc = unsafe { libc::umount2(c.as_ptr(), flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_parsing_handles_escapes() {
        let table = "36 35 98:0 / /mnt/with\\040space rw,noatime master:1 - fuse.eddy eddy rw\n\
                     37 35 98:0 / /mnt/plain rw - ext4 /dev/sda1 rw\n";
        assert!(mountinfo_has(table, Path::new("/mnt/with space")));
        assert!(mountinfo_has(table, Path::new("/mnt/plain")));
        assert!(!mountinfo_has(table, Path::new("/mnt")));
        assert_eq!(unescape_mountinfo("a\\134b\\"), b"a\\b\\".to_vec());
    }

    #[test]
    fn unmount_of_a_plain_directory_is_ok() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(unmount_with(dir.path()).unwrap(), Unmounted::NotMounted);
        assert!(dir.path().exists());
    }
}
