//! chmod, chown and utimes in all their forms.

use super::lookup::follow_path;
use super::namespace::{real_result, setattr_path};
use crate::real;
use crate::state::R;
use eddy_client::{Errno, SetAttr, SetTime, Timespec};
use libc::{c_char, c_int, mode_t};
use std::ffi::CString;

pub(super) fn mode_attr(mode: mode_t) -> SetAttr {
    SetAttr {
        mode: Some(mode & 0o7777),
        ..SetAttr::default()
    }
}

pub(super) fn owner_attr(uid: libc::uid_t, gid: libc::gid_t) -> SetAttr {
    SetAttr {
        uid: (uid != u32::MAX).then_some(uid),
        gid: (gid != u32::MAX).then_some(gid),
        ..SetAttr::default()
    }
}

/// setattr after following symlinks (chmod, chown, utimensat without NOFOLLOW).
pub(super) fn setattr_follow(
    p: String,
    attr: SetAttr,
    real_call: impl FnOnce(&CString) -> c_int,
) -> R<c_int> {
    match follow_path(p)? {
        Ok(q) => setattr_path(q, attr),
        Err(c) => real_result(real_call(&c), "setattr"),
    }
}

#[no_mangle]
pub unsafe extern "C" fn chmod(path: *const c_char, mode: mode_t) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| setattr_follow(p, mode_attr(mode), |c| real::chmod(c.as_ptr(), mode)),
        |rp| real::chmod(rp, mode)
    )
}
#[no_mangle]
pub unsafe extern "C" fn fchmod(fd: c_int, mode: mode_t) -> c_int {
    on_fd!(
        fd,
        -1,
        |o| setattr_path(o.path_now(), mode_attr(mode)),
        real::fchmod(fd, mode)
    )
}
#[no_mangle]
pub unsafe extern "C" fn fchmodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    flags: c_int,
) -> c_int {
    at!(
        dirfd,
        path,
        -1,
        |p| if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
            setattr_path(p, mode_attr(mode))
        } else {
            setattr_follow(p, mode_attr(mode), |c| real::chmod(c.as_ptr(), mode))
        },
        |rp| real::fchmodat(dirfd, rp, mode, flags)
    )
}
#[no_mangle]
pub unsafe extern "C" fn chown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| setattr_follow(p, owner_attr(uid, gid), |c| real::chown(
            c.as_ptr(),
            uid,
            gid
        )),
        |rp| real::chown(rp, uid, gid)
    )
}
#[no_mangle]
pub unsafe extern "C" fn lchown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| setattr_path(p, owner_attr(uid, gid)),
        |rp| real::lchown(rp, uid, gid)
    )
}
#[no_mangle]
pub unsafe extern "C" fn fchown(fd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    on_fd!(
        fd,
        -1,
        |o| setattr_path(o.path_now(), owner_attr(uid, gid)),
        real::fchown(fd, uid, gid)
    )
}
#[no_mangle]
pub unsafe extern "C" fn fchownat(
    dirfd: c_int,
    path: *const c_char,
    uid: libc::uid_t,
    gid: libc::gid_t,
    flags: c_int,
) -> c_int {
    if flags & libc::AT_EMPTY_PATH != 0 && !path.is_null() && *path == 0 {
        return fchown(dirfd, uid, gid);
    }
    at!(
        dirfd,
        path,
        -1,
        |p| if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
            setattr_path(p, owner_attr(uid, gid))
        } else {
            setattr_follow(p, owner_attr(uid, gid), |c| {
                real::chown(c.as_ptr(), uid, gid)
            })
        },
        |rp| real::fchownat(dirfd, rp, uid, gid, flags)
    )
}

pub(super) fn time_of(t: &libc::timespec) -> R<Option<SetTime>> {
    match t.tv_nsec {
        libc::UTIME_NOW => Ok(Some(SetTime::Now)),
        libc::UTIME_OMIT => Ok(None),
        n if (0..1_000_000_000).contains(&n) => Ok(Some(SetTime::At(Timespec {
            sec: t.tv_sec,
            nsec: n as u32,
        }))),
        _ => Err(Errno::einval("bad tv_nsec")),
    }
}

pub(super) unsafe fn times_attr(times: *const libc::timespec) -> R<SetAttr> {
    if times.is_null() {
        return Ok(SetAttr {
            atime: Some(SetTime::Now),
            mtime: Some(SetTime::Now),
            ..SetAttr::default()
        });
    }
    // SAFETY: the caller's two timespecs.
    let (a, m) = unsafe { (&*times, &*times.add(1)) };
    Ok(SetAttr {
        atime: time_of(a)?,
        mtime: time_of(m)?,
        ..SetAttr::default()
    })
}

#[no_mangle]
pub unsafe extern "C" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    times: *const libc::timespec,
    flags: c_int,
) -> c_int {
    if path.is_null() {
        // Linux: utimensat(fd, NULL, ...) is futimens(fd).
        return futimens(dirfd, times);
    }
    at!(
        dirfd,
        path,
        -1,
        |p| {
            let attr = times_attr(times)?;
            if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
                setattr_path(p, attr)
            } else {
                setattr_follow(p, attr, |c| {
                    real::utimensat(libc::AT_FDCWD, c.as_ptr(), times, flags)
                })
            }
        },
        |rp| real::utimensat(dirfd, rp, times, flags)
    )
}
#[no_mangle]
pub unsafe extern "C" fn futimens(fd: c_int, times: *const libc::timespec) -> c_int {
    on_fd!(
        fd,
        -1,
        |o| setattr_path(o.path_now(), times_attr(times)?),
        real::futimens(fd, times)
    )
}

pub(super) unsafe fn timeval_attr(tv: *const libc::timeval) -> SetAttr {
    if tv.is_null() {
        return SetAttr {
            atime: Some(SetTime::Now),
            mtime: Some(SetTime::Now),
            ..SetAttr::default()
        };
    }
    // SAFETY: the caller's two timevals.
    let (a, m) = unsafe { (&*tv, &*tv.add(1)) };
    let t = |v: &libc::timeval| {
        Some(SetTime::At(Timespec {
            sec: v.tv_sec,
            nsec: (v.tv_usec.clamp(0, 999_999) * 1000) as u32,
        }))
    };
    SetAttr {
        atime: t(a),
        mtime: t(m),
        ..SetAttr::default()
    }
}

#[no_mangle]
pub unsafe extern "C" fn utimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| setattr_follow(p, timeval_attr(tv), |c| real::utimes(c.as_ptr(), tv)),
        |rp| real::utimes(rp, tv)
    )
}
#[no_mangle]
pub unsafe extern "C" fn utime(path: *const c_char, ut: *const libc::utimbuf) -> c_int {
    let attr = |ut: *const libc::utimbuf| {
        if ut.is_null() {
            return timeval_attr(std::ptr::null());
        }
        // SAFETY: the caller's utimbuf.
        let u = unsafe { &*ut };
        SetAttr {
            atime: Some(SetTime::At(Timespec {
                sec: u.actime,
                nsec: 0,
            })),
            mtime: Some(SetTime::At(Timespec {
                sec: u.modtime,
                nsec: 0,
            })),
            ..SetAttr::default()
        }
    };
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| setattr_follow(p, attr(ut), |c| real::utime(c.as_ptr(), ut)),
        |rp| real::utime(rp, ut)
    )
}
