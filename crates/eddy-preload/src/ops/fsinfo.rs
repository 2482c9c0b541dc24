//! statfs and statvfs.

use super::lookup::lstat_ours;
use crate::stat as st;
use crate::state::{global, run, R};
use libc::{c_char, c_int};

pub(super) fn fsstats() -> R<(eddy_client::FsStats, u64)> {
    let max_name = global()?.client.config().max_name_bytes as u64;
    let s = run(|c| async move { c.statfs().await })?;
    Ok((s, max_name))
}

pub(super) fn statfs_ours(buf: *mut libc::statfs) -> R<c_int> {
    let (s, n) = fsstats()?;
    // SAFETY: the caller's buffer.
    st::fill_statfs(&s, n, unsafe { &mut *buf });
    Ok(0)
}

pub(super) fn statvfs_ours(buf: *mut libc::statvfs) -> R<c_int> {
    let (s, n) = fsstats()?;
    // SAFETY: the caller's buffer.
    st::fill_statvfs(&s, n, unsafe { &mut *buf });
    Ok(0)
}

twins! {
    fn statfs / statfs64(path: *const c_char, buf: *mut libc::statfs) -> c_int, real = next {
        at!(
            libc::AT_FDCWD,
            path,
            -1,
            |p| {
                lstat_ours(&p)?;
                statfs_ours(buf)
            },
            |rp| next(rp, buf)
        )
    }
}
twins! {
    fn fstatfs / fstatfs64(fd: c_int, buf: *mut libc::statfs) -> c_int, real = next {
        on_fd!(fd, -1, |_o| statfs_ours(buf), next(fd, buf))
    }
}
twins! {
    fn statvfs / statvfs64(path: *const c_char, buf: *mut libc::statvfs) -> c_int, real = next {
        at!(
            libc::AT_FDCWD,
            path,
            -1,
            |p| {
                lstat_ours(&p)?;
                statvfs_ours(buf)
            },
            |rp| next(rp, buf)
        )
    }
}
twins! {
    fn fstatvfs / fstatvfs64(fd: c_int, buf: *mut libc::statvfs) -> c_int, real = next {
        on_fd!(fd, -1, |_o| statvfs_ours(buf), next(fd, buf))
    }
}
