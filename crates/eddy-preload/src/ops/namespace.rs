//! Names: mkdir, rmdir, unlink, rename, link and their `at` forms; truncate and fsync.

use super::data::check_data;
use super::lookup::{follow_path, lstat_ours};
use super::{os_err, target, T, WROTE};
use crate::fds::Open;
use crate::real;
use crate::state::{creds, enter, guarded, run, set_errno, umask as cur_umask, R};
use eddy_client::{Errno, SetAttr};
use libc::{c_char, c_int, c_uint, mode_t, off64_t};
use std::sync::atomic::Ordering;

pub(super) fn mkdir_ours(p: String, mode: mode_t) -> R<c_int> {
    let m = mode & !cur_umask() & 0o7777;
    let cr = creds();
    run(move |c| async move { c.mkdir(&p, m, cr).await })?;
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    at!(libc::AT_FDCWD, path, -1, |p| mkdir_ours(p, mode), |rp| {
        real::mkdir(rp, mode)
    })
}
#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    at!(
        dirfd,
        path,
        -1,
        |p| mkdir_ours(p, mode),
        |rp| real::mkdirat(dirfd, rp, mode)
    )
}

pub(super) fn rmdir_ours(p: String) -> R<c_int> {
    let cr = creds();
    run(move |c| async move { c.rmdir(&p, cr).await })?;
    Ok(0)
}

pub(super) fn unlink_ours(p: String) -> R<c_int> {
    let cr = creds();
    run(move |c| async move { c.unlink(&p, cr).await })?;
    WROTE.store(true, Ordering::Relaxed);
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    at!(libc::AT_FDCWD, path, -1, |p| rmdir_ours(p), |rp| {
        real::rmdir(rp)
    })
}
#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    at!(libc::AT_FDCWD, path, -1, |p| unlink_ours(p), |rp| {
        real::unlink(rp)
    })
}
#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    at!(
        dirfd,
        path,
        -1,
        |p| if flags & libc::AT_REMOVEDIR != 0 {
            rmdir_ours(p)
        } else {
            unlink_ours(p)
        },
        |rp| real::unlinkat(dirfd, rp, flags)
    )
}

/// Two-path calls (rename, link): both Eddy's, both real, or EXDEV.
pub(super) unsafe fn two_paths(
    fd1: c_int,
    p1: *const c_char,
    fd2: c_int,
    p2: *const c_char,
    ours: impl FnOnce(String, String) -> R<c_int>,
    real_call: impl FnOnce(*const c_char, *const c_char) -> c_int,
) -> c_int {
    if guarded() {
        return real_call(p1, p2);
    }
    let (a, b) = (target(fd1, p1), target(fd2, p2));
    let real_ptr = |t: &T, orig: *const c_char| match t {
        T::RealAt(c) => c.as_ptr(),
        _ => orig,
    };
    match (&a, &b) {
        (T::Err(e), _) | (_, T::Err(e)) => {
            set_errno(*e);
            -1
        }
        (T::Ours(x), T::Ours(y)) => {
            let (x, y) = (x.clone(), y.clone());
            enter(-1, || ours(x, y))
        }
        (T::Ours(_), _) | (_, T::Ours(_)) => {
            set_errno(libc::EXDEV);
            -1
        }
        _ => real_call(real_ptr(&a, p1), real_ptr(&b, p2)),
    }
}

pub(super) fn rename_ours(from: String, to: String, flags: c_uint) -> R<c_int> {
    if flags & !libc::RENAME_NOREPLACE != 0 {
        return Err(Errno::einval(
            "renameat2: only RENAME_NOREPLACE is supported on Eddy",
        ));
    }
    if flags & libc::RENAME_NOREPLACE != 0 {
        match lstat_ours(&to) {
            Ok(_) => return Err(Errno::new(libc::EEXIST, format!("{to} exists"))),
            Err(e) if e.errno == libc::ENOENT => {}
            Err(e) => return Err(e),
        }
    }
    let cr = creds();
    run(move |c| async move { c.rename(&from, &to, cr).await })?;
    WROTE.store(true, Ordering::Relaxed);
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn rename(from: *const c_char, to: *const c_char) -> c_int {
    two_paths(
        libc::AT_FDCWD,
        from,
        libc::AT_FDCWD,
        to,
        |a, b| rename_ours(a, b, 0),
        |x, y| real::rename(x, y),
    )
}
#[no_mangle]
pub unsafe extern "C" fn renameat(
    fd1: c_int,
    from: *const c_char,
    fd2: c_int,
    to: *const c_char,
) -> c_int {
    two_paths(
        fd1,
        from,
        fd2,
        to,
        |a, b| rename_ours(a, b, 0),
        |x, y| real::renameat(fd1, x, fd2, y),
    )
}
#[no_mangle]
pub unsafe extern "C" fn renameat2(
    fd1: c_int,
    from: *const c_char,
    fd2: c_int,
    to: *const c_char,
    flags: c_uint,
) -> c_int {
    two_paths(
        fd1,
        from,
        fd2,
        to,
        |a, b| rename_ours(a, b, flags),
        |x, y| real::renameat2(fd1, x, fd2, y, flags),
    )
}

pub(super) fn link_ours(from: String, to: String) -> R<c_int> {
    let cr = creds();
    run(move |c| async move { c.link(&from, &to, cr).await })?;
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn link(from: *const c_char, to: *const c_char) -> c_int {
    two_paths(
        libc::AT_FDCWD,
        from,
        libc::AT_FDCWD,
        to,
        link_ours,
        |x, y| real::link(x, y),
    )
}
#[no_mangle]
pub unsafe extern "C" fn linkat(
    fd1: c_int,
    from: *const c_char,
    fd2: c_int,
    to: *const c_char,
    flags: c_int,
) -> c_int {
    two_paths(
        fd1,
        from,
        fd2,
        to,
        |a, b| {
            let a = if flags & libc::AT_SYMLINK_FOLLOW != 0 {
                follow_path(a)?.map_err(|_| Errno::new(libc::EXDEV, "link target leaves Eddy"))?
            } else {
                a
            };
            link_ours(a, b)
        },
        |x, y| real::linkat(fd1, x, fd2, y, flags),
    )
}

pub(super) fn setattr_path(p: String, attr: SetAttr) -> R<c_int> {
    let cr = creds();
    run(move |c| async move { c.setattr(&p, attr, cr).await })?;
    Ok(0)
}

pub(super) fn truncate_ours(p: String, len: off64_t) -> R<c_int> {
    if len < 0 {
        return Err(Errno::einval("negative length"));
    }
    match follow_path(p)? {
        Ok(q) => {
            let cr = creds();
            run(move |c| async move { c.truncate(&q, len as u64, cr).await })?;
            Ok(0)
        }
        // SAFETY: a NUL-terminated path.
        Err(c) => real_result(unsafe { real::truncate64(c.as_ptr(), len) }, "truncate"),
    }
}

pub(super) fn real_result(r: c_int, what: &str) -> R<c_int> {
    if r < 0 {
        Err(os_err(what))
    } else {
        Ok(r)
    }
}

pub(super) fn ftruncate_ours(o: &Open, len: off64_t) -> R<c_int> {
    check_data(o)?;
    if len < 0 {
        return Err(Errno::einval("negative length"));
    }
    let f = o.file()?;
    WROTE.store(true, Ordering::Relaxed);
    run(move |c| async move { c.ftruncate(&f, len as u64).await })?;
    Ok(0)
}

twins! {
    fn truncate / truncate64(path: *const c_char, len: off64_t) -> c_int, real = next {
        at!(libc::AT_FDCWD, path, -1, |p| truncate_ours(p, len), |rp| {
            next(rp, len)
        })
    }
}
twins! {
    fn ftruncate / ftruncate64(fd: c_int, len: off64_t) -> c_int, real = next {
        on_fd!(
            fd,
            -1,
            |o| ftruncate_ours(&o, len),
            next(fd, len)
        )
    }
}

pub(super) fn fsync_ours(o: &Open) -> R<c_int> {
    if o.is_dir || o.flags() & libc::O_PATH != 0 {
        // Directory entries are durable on their owners when the call that made them returns.
        return Ok(0);
    }
    let f = o.file()?;
    run(move |c| async move { c.fsync(&f).await })?;
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    on_fd!(fd, -1, |o| fsync_ours(&o), real::fsync(fd))
}
#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    on_fd!(fd, -1, |o| fsync_ours(&o), real::fdatasync(fd))
}
