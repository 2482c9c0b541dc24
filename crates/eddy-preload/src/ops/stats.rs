//! The stat family.

use super::lookup::{follow, lstat_ours};
use super::{blksize, os_err};
use crate::fds::Open;
use crate::path::Target;
use crate::state::{enter, guarded, run, R};
use crate::{fds, real, stat as st};
use eddy_client::{Errno, Inode};
use libc::{c_char, c_int, c_uint};
use std::ffi::CString;

pub(super) fn fstat_ours(o: &Open) -> R<Inode> {
    if o.is_dir || o.flags() & libc::O_PATH != 0 {
        return lstat_ours(&o.path);
    }
    let f = o.file()?;
    run(move |c| async move { c.fstat(&f).await })
}

pub(super) enum Got {
    Inode(Inode),
    Real(CString),
}

pub(super) fn stat_path(p: String, follow_links: bool) -> R<Got> {
    if !follow_links {
        return Ok(Got::Inode(lstat_ours(&p)?));
    }
    match follow(p)? {
        (_, Some(i)) => Ok(Got::Inode(i)),
        (Target::RealAt(c), None) => Ok(Got::Real(c)),
        _ => Err(Errno::eio("unexpected symlink resolution")),
    }
}

pub(super) fn stat_into(got: Got, buf: *mut libc::stat) -> R<c_int> {
    if buf.is_null() {
        return Err(Errno::new(libc::EFAULT, "null stat buffer"));
    }
    match got {
        Got::Inode(i) => {
            // SAFETY: the caller's stat buffer.
            st::fill_stat(&i, blksize(), unsafe { &mut *buf });
            Ok(0)
        }
        Got::Real(c) => {
            // SAFETY: a NUL-terminated path and the caller's buffer.
            if unsafe { real::stat64(c.as_ptr(), buf) } < 0 {
                return Err(os_err("stat"));
            }
            Ok(0)
        }
    }
}

twins! {
    fn stat / stat64(path: *const c_char, buf: *mut libc::stat) -> c_int, real = next {
        at!(
            libc::AT_FDCWD,
            path,
            -1,
            |p| stat_into(stat_path(p, true)?, buf),
            |rp| next(rp, buf)
        )
    }
}
twins! {
    fn lstat / lstat64(path: *const c_char, buf: *mut libc::stat) -> c_int, real = next {
        at!(
            libc::AT_FDCWD,
            path,
            -1,
            |p| stat_into(stat_path(p, false)?, buf),
            |rp| next(rp, buf)
        )
    }
}
twins! {
    fn fstat / fstat64(fd: c_int, buf: *mut libc::stat) -> c_int, real = next {
        on_fd!(
            fd,
            -1,
            |o| stat_into(Got::Inode(fstat_ours(&o)?), buf),
            next(fd, buf)
        )
    }
}

/// The `*at` stat calls: AT_EMPTY_PATH on a descriptor, else the path.
pub(super) unsafe fn fstatat_common(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    ours: impl FnOnce(Got) -> R<c_int>,
    real_call: impl FnOnce(*const c_char) -> c_int,
) -> c_int {
    // SAFETY: the caller's path.
    let empty = !path.is_null() && unsafe { *path } == 0;
    if empty && flags & libc::AT_EMPTY_PATH != 0 {
        if guarded() {
            return real_call(path);
        }
        return match fds::lookup(dirfd) {
            Some(o) => enter(-1, || ours(Got::Inode(fstat_ours(&o)?))),
            None => real_call(path),
        };
    }
    let follow_links = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    at!(
        dirfd,
        path,
        -1,
        |p| ours(stat_path(p, follow_links)?),
        |rp| real_call(rp)
    )
}

twins! {
    fn fstatat / fstatat64(
        dirfd: c_int,
        path: *const c_char,
        buf: *mut libc::stat,
        flags: c_int,
    ) -> c_int, real = next {
        fstatat_common(
            dirfd,
            path,
            flags,
            |g| stat_into(g, buf),
            |rp| next(dirfd, rp, buf, flags),
        )
    }
}
twins! {
    fn __xstat / __xstat64(
        ver: c_int,
        path: *const c_char,
        buf: *mut libc::stat,
    ) -> c_int, real = next {
        at!(
            libc::AT_FDCWD,
            path,
            -1,
            |p| stat_into(stat_path(p, true)?, buf),
            |rp| next(ver, rp, buf)
        )
    }
}
twins! {
    fn __lxstat / __lxstat64(
        ver: c_int,
        path: *const c_char,
        buf: *mut libc::stat,
    ) -> c_int, real = next {
        at!(
            libc::AT_FDCWD,
            path,
            -1,
            |p| stat_into(stat_path(p, false)?, buf),
            |rp| next(ver, rp, buf)
        )
    }
}
twins! {
    fn __fxstat / __fxstat64(ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int, real = next {
        on_fd!(
            fd,
            -1,
            |o| stat_into(Got::Inode(fstat_ours(&o)?), buf),
            next(ver, fd, buf)
        )
    }
}
twins! {
    fn __fxstatat / __fxstatat64(
        ver: c_int,
        dirfd: c_int,
        path: *const c_char,
        buf: *mut libc::stat,
        flags: c_int,
    ) -> c_int, real = next {
        fstatat_common(
            dirfd,
            path,
            flags,
            |g| stat_into(g, buf),
            |rp| next(ver, dirfd, rp, buf, flags),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    buf: *mut libc::statx,
) -> c_int {
    let ours = |g: Got| -> R<c_int> {
        if buf.is_null() {
            return Err(Errno::new(libc::EFAULT, "null statx buffer"));
        }
        match g {
            Got::Inode(i) => {
                // SAFETY: the caller's buffer.
                st::fill_statx(&i, blksize(), unsafe { &mut *buf });
                Ok(0)
            }
            Got::Real(c) => {
                // SAFETY: a NUL-terminated path and the caller's buffer.
                if unsafe { real::statx(libc::AT_FDCWD, c.as_ptr(), flags, mask, buf) } < 0 {
                    return Err(os_err("statx"));
                }
                Ok(0)
            }
        }
    };
    fstatat_common(dirfd, path, flags, ours, |rp| {
        real::statx(dirfd, rp, flags, mask, buf)
    })
}
