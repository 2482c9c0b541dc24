//! Extended attributes; mknod and umask.

use super::cstr;
use super::data::slice;
use super::lookup::follow_path;
use super::open::{close, open_ours};
use crate::real;
use crate::state::{creds, run, umask as cur_umask, R};
use eddy_client::{Errno, FileKind, XattrSet};
use libc::{c_char, c_int, c_void, mode_t, size_t, ssize_t};

/// The Eddy path a call that follows symbolic links reaches from `p`; a link that leads out
/// of Eddy is EOPNOTSUPP.
fn followed(p: String) -> R<String> {
    follow_path(p)?.map_err(|_| Errno::new(libc::EOPNOTSUPP, "link leaves Eddy"))
}

pub(super) fn getxattr_ours(
    p: String,
    name: *const c_char,
    v: *mut c_void,
    n: size_t,
    follow_links: bool,
) -> R<ssize_t> {
    // SAFETY: the caller's string.
    let name = unsafe { cstr(name) }?.to_string();
    let p = if follow_links { followed(p)? } else { p };
    let cr = creds();
    let val = run(move |c| async move { c.getxattr(&p, &name, cr).await })?;
    copy_out(&val, v.cast(), n)
}

pub(super) fn copy_out(val: &[u8], v: *mut c_char, n: size_t) -> R<ssize_t> {
    if n == 0 {
        return Ok(val.len() as ssize_t);
    }
    if val.len() > n {
        return Err(Errno::new(libc::ERANGE, "buffer too small"));
    }
    // SAFETY: the caller's buffer of n bytes.
    unsafe { std::ptr::copy_nonoverlapping(val.as_ptr(), v.cast(), val.len()) };
    Ok(val.len() as ssize_t)
}

pub(super) fn listxattr_ours(p: String, list: *mut c_char, n: size_t) -> R<ssize_t> {
    let cr = creds();
    let names = run(move |c| async move { c.listxattr(&p, cr).await })?;
    let mut out = Vec::new();
    for name in names {
        out.extend_from_slice(name.as_bytes());
        out.push(0);
    }
    copy_out(&out, list, n)
}

pub(super) fn setxattr_ours(
    p: String,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    flags: c_int,
) -> R<c_int> {
    // SAFETY: the caller's string and buffer.
    let name = unsafe { cstr(name) }?.to_string();
    // SAFETY: the caller's buffer of `n` bytes.
    let val = unsafe { slice(v, n) }.to_vec();
    let how = match flags {
        0 => XattrSet::Any,
        libc::XATTR_CREATE => XattrSet::Create,
        libc::XATTR_REPLACE => XattrSet::Replace,
        _ => return Err(Errno::einval("bad setxattr flags")),
    };
    let cr = creds();
    run(move |c| async move { c.setxattr(&p, &name, &val, how, cr).await })?;
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn getxattr(
    path: *const c_char,
    name: *const c_char,
    v: *mut c_void,
    n: size_t,
) -> ssize_t {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| getxattr_ours(p, name, v, n, true),
        |rp| real::getxattr(rp, name, v, n)
    )
}
#[no_mangle]
pub unsafe extern "C" fn lgetxattr(
    path: *const c_char,
    name: *const c_char,
    v: *mut c_void,
    n: size_t,
) -> ssize_t {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| getxattr_ours(p, name, v, n, false),
        |rp| real::lgetxattr(rp, name, v, n)
    )
}
#[no_mangle]
pub unsafe extern "C" fn fgetxattr(
    fd: c_int,
    name: *const c_char,
    v: *mut c_void,
    n: size_t,
) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| getxattr_ours(o.path_now(), name, v, n, false),
        real::fgetxattr(fd, name, v, n)
    )
}
#[no_mangle]
pub unsafe extern "C" fn listxattr(path: *const c_char, list: *mut c_char, n: size_t) -> ssize_t {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| listxattr_ours(followed(p)?, list, n),
        |rp| real::listxattr(rp, list, n)
    )
}
#[no_mangle]
pub unsafe extern "C" fn llistxattr(path: *const c_char, list: *mut c_char, n: size_t) -> ssize_t {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| listxattr_ours(p, list, n),
        |rp| real::llistxattr(rp, list, n)
    )
}
#[no_mangle]
pub unsafe extern "C" fn flistxattr(fd: c_int, list: *mut c_char, n: size_t) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| listxattr_ours(o.path_now(), list, n),
        real::flistxattr(fd, list, n)
    )
}
#[no_mangle]
pub unsafe extern "C" fn setxattr(
    path: *const c_char,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    flags: c_int,
) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| setxattr_ours(followed(p)?, name, v, n, flags),
        |rp| real::setxattr(rp, name, v, n, flags)
    )
}
#[no_mangle]
pub unsafe extern "C" fn lsetxattr(
    path: *const c_char,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    flags: c_int,
) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| setxattr_ours(p, name, v, n, flags),
        |rp| real::lsetxattr(rp, name, v, n, flags)
    )
}
#[no_mangle]
pub unsafe extern "C" fn fsetxattr(
    fd: c_int,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    flags: c_int,
) -> c_int {
    on_fd!(
        fd,
        -1,
        |o| setxattr_ours(o.path_now(), name, v, n, flags),
        real::fsetxattr(fd, name, v, n, flags)
    )
}

pub(super) fn removexattr_ours(p: String, name: *const c_char) -> R<c_int> {
    // SAFETY: the caller's string.
    let name = unsafe { cstr(name) }?.to_string();
    let cr = creds();
    run(move |c| async move { c.removexattr(&p, &name, cr).await })?;
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn removexattr(path: *const c_char, name: *const c_char) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| removexattr_ours(followed(p)?, name),
        |rp| real::removexattr(rp, name)
    )
}
#[no_mangle]
pub unsafe extern "C" fn lremovexattr(path: *const c_char, name: *const c_char) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| removexattr_ours(p, name),
        |rp| real::lremovexattr(rp, name)
    )
}
#[no_mangle]
pub unsafe extern "C" fn fremovexattr(fd: c_int, name: *const c_char) -> c_int {
    on_fd!(
        fd,
        -1,
        |o| removexattr_ours(o.path_now(), name),
        real::fremovexattr(fd, name)
    )
}

pub(super) fn mknod_ours(p: String, mode: mode_t, dev: libc::dev_t) -> R<c_int> {
    let kind = match mode & libc::S_IFMT {
        0 | libc::S_IFREG => {
            let fd = open_ours(
                p,
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                mode & 0o7777,
            )?;
            // SAFETY: the descriptor just opened.
            unsafe { close(fd) };
            return Ok(0);
        }
        libc::S_IFIFO => FileKind::Fifo,
        libc::S_IFSOCK => FileKind::Socket,
        libc::S_IFCHR => FileKind::CharDevice,
        libc::S_IFBLK => FileKind::BlockDevice,
        libc::S_IFDIR => return Err(Errno::new(libc::EPERM, "mknod of a directory")),
        _ => return Err(Errno::einval("bad mknod mode")),
    };
    let m = mode & 0o7777 & !cur_umask();
    let cr = creds();
    run(move |c| async move { c.mknod(&p, kind, m, dev, cr).await })?;
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn mknod(path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| mknod_ours(p, mode, dev),
        |rp| real::mknod(rp, mode, dev)
    )
}
#[no_mangle]
pub unsafe extern "C" fn mknodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: libc::dev_t,
) -> c_int {
    at!(dirfd, path, -1, |p| mknod_ours(p, mode, dev), |rp| {
        real::mknodat(dirfd, rp, mode, dev)
    })
}

// glibc's mkfifo and mkfifoat call its mknodat internally, where no interposer sees them.
#[no_mangle]
pub unsafe extern "C" fn mkfifo(path: *const c_char, mode: mode_t) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| mknod_ours(p, libc::S_IFIFO | (mode & 0o7777), 0),
        |rp| real::mkfifo(rp, mode)
    )
}
#[no_mangle]
pub unsafe extern "C" fn mkfifoat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    at!(
        dirfd,
        path,
        -1,
        |p| mknod_ours(p, libc::S_IFIFO | (mode & 0o7777), 0),
        |rp| real::mkfifoat(dirfd, rp, mode)
    )
}

#[no_mangle]
pub unsafe extern "C" fn umask(mask: mode_t) -> mode_t {
    let old = real::umask(mask);
    crate::state::set_umask(mask);
    old
}
