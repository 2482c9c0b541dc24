//! symlink and readlink.

use super::lookup::follow_path;
use super::{cstr, os_err};
use crate::path::outside;
use crate::real;
use crate::state::{creds, run, R};
use eddy_client::Errno;
use libc::{c_char, c_int, size_t, ssize_t};
use std::ffi::CString;

pub(super) fn symlink_ours(target_path: *const c_char, p: String) -> R<c_int> {
    // SAFETY: the caller's string.
    let t = unsafe { cstr(target_path) }?.to_string();
    let cr = creds();
    run(move |c| async move { c.symlink(&t, &p, cr).await })?;
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn symlink(target_path: *const c_char, path: *const c_char) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| symlink_ours(target_path, p),
        |rp| real::symlink(target_path, rp)
    )
}
#[no_mangle]
pub unsafe extern "C" fn symlinkat(
    target_path: *const c_char,
    dirfd: c_int,
    path: *const c_char,
) -> c_int {
    at!(dirfd, path, -1, |p| symlink_ours(target_path, p), |rp| {
        real::symlinkat(target_path, dirfd, rp)
    })
}

pub(super) fn readlink_ours(p: String, buf: *mut c_char, n: size_t) -> R<ssize_t> {
    let t = run(move |c| async move { c.readlink(&p).await })?;
    let k = t.len().min(n);
    // SAFETY: the caller's buffer of n bytes.
    unsafe { std::ptr::copy_nonoverlapping(t.as_ptr(), buf.cast(), k) };
    Ok(k as ssize_t)
}

#[no_mangle]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| readlink_ours(p, buf, n),
        |rp| real::readlink(rp, buf, n)
    )
}
#[no_mangle]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    n: size_t,
) -> ssize_t {
    at!(dirfd, path, -1, |p| readlink_ours(p, buf, n), |rp| {
        real::readlinkat(dirfd, rp, buf, n)
    })
}
#[no_mangle]
pub unsafe extern "C" fn __readlink_chk(
    path: *const c_char,
    buf: *mut c_char,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| readlink_ours(p, buf, n.min(buflen)),
        |rp| real::__readlink_chk(rp, buf, n, buflen)
    )
}
#[no_mangle]
pub unsafe extern "C" fn __readlinkat_chk(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    at!(
        dirfd,
        path,
        -1,
        |p| readlink_ours(p, buf, n.min(buflen)),
        |rp| real::__readlinkat_chk(dirfd, rp, buf, n, buflen)
    )
}

pub(super) fn realpath_ours(p: String, out: *mut c_char) -> R<*mut c_char> {
    let full = match follow_path(p)? {
        Ok(q) => CString::new(outside(&q)).map_err(|_| Errno::einval("NUL in path"))?,
        // SAFETY: a NUL-terminated path; `out` is the caller's.
        Err(c) => {
            // SAFETY: a NUL-terminated path; `out` is the caller's.
            let r = unsafe { real::realpath(c.as_ptr(), out) };
            return if r.is_null() {
                Err(os_err("realpath"))
            } else {
                Ok(r)
            };
        }
    };
    let bytes = full.as_bytes_with_nul();
    // A caller's buffer holds PATH_MAX bytes; an allocated result may be longer, as glibc's.
    if !out.is_null() && bytes.len() > libc::PATH_MAX as usize {
        return Err(Errno::new(libc::ENAMETOOLONG, "path too long"));
    }
    let dst = if out.is_null() {
        // SAFETY: plain allocation, the caller frees it.
        let m = unsafe { libc::malloc(bytes.len()) }.cast::<c_char>();
        if m.is_null() {
            return Err(Errno::new(libc::ENOMEM, "out of memory"));
        }
        m
    } else {
        out
    };
    // SAFETY: dst holds at least bytes.len() (PATH_MAX for a caller's buffer).
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.cast(), bytes.len()) };
    Ok(dst)
}

#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, out: *mut c_char) -> *mut c_char {
    at!(
        libc::AT_FDCWD,
        path,
        std::ptr::null_mut(),
        |p| realpath_ours(p, out),
        |rp| real::realpath(rp, out)
    )
}
#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    realpath(path, std::ptr::null_mut())
}
