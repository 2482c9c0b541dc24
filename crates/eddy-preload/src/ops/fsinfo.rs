//! statfs and statvfs.

#[allow(unused_imports)]
use super::*;

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

#[no_mangle]
pub unsafe extern "C" fn statfs(path: *const c_char, buf: *mut libc::statfs) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| {
            lstat_ours(&p)?;
            statfs_ours(buf)
        },
        |rp| real::statfs(rp, buf)
    )
}
#[no_mangle]
pub unsafe extern "C" fn statfs64(path: *const c_char, buf: *mut libc::statfs) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| {
            lstat_ours(&p)?;
            statfs_ours(buf)
        },
        |rp| real::statfs64(rp, buf)
    )
}
#[no_mangle]
pub unsafe extern "C" fn fstatfs(fd: c_int, buf: *mut libc::statfs) -> c_int {
    on_fd!(fd, -1, |_o| statfs_ours(buf), real::fstatfs(fd, buf))
}
#[no_mangle]
pub unsafe extern "C" fn fstatfs64(fd: c_int, buf: *mut libc::statfs) -> c_int {
    on_fd!(fd, -1, |_o| statfs_ours(buf), real::fstatfs64(fd, buf))
}
#[no_mangle]
pub unsafe extern "C" fn statvfs(path: *const c_char, buf: *mut libc::statvfs) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| {
            lstat_ours(&p)?;
            statvfs_ours(buf)
        },
        |rp| real::statvfs(rp, buf)
    )
}
#[no_mangle]
pub unsafe extern "C" fn statvfs64(path: *const c_char, buf: *mut libc::statvfs) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| {
            lstat_ours(&p)?;
            statvfs_ours(buf)
        },
        |rp| real::statvfs64(rp, buf)
    )
}
#[no_mangle]
pub unsafe extern "C" fn fstatvfs(fd: c_int, buf: *mut libc::statvfs) -> c_int {
    on_fd!(fd, -1, |_o| statvfs_ours(buf), real::fstatvfs(fd, buf))
}
#[no_mangle]
pub unsafe extern "C" fn fstatvfs64(fd: c_int, buf: *mut libc::statvfs) -> c_int {
    on_fd!(fd, -1, |_o| statvfs_ours(buf), real::fstatvfs64(fd, buf))
}
