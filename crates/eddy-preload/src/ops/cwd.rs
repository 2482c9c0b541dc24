//! The process-local working directory (chdir, fchdir, getcwd), and exec, which carries it.

use super::lookup::follow;
use super::namespace::real_result;
use crate::path::{outside, Target};
use crate::real;
use crate::state::{enter, guarded, settings, CWD, R};
use eddy_client::{Errno, FileKind};
use libc::{c_char, c_int, size_t};
use std::ffi::{CStr, CString};

/// At start: a working directory under the prefix handed down by exec (EDDY_CWD).
pub fn adopt_cwd() {
    if let Ok(c) = std::env::var("EDDY_CWD") {
        if c.starts_with('/') {
            *CWD.write() = Some(c);
        }
    }
}

pub(super) fn chdir_ours(p: String) -> R<c_int> {
    match follow(p)? {
        (Target::Ours(q), Some(i)) => {
            if i.kind != FileKind::Dir {
                return Err(Errno::new(libc::ENOTDIR, format!("{q} is not a directory")));
            }
            *CWD.write() = Some(q);
            Ok(0)
        }
        (Target::RealAt(c), _) => {
            // SAFETY: a NUL-terminated path.
            real_result(unsafe { real::chdir(c.as_ptr()) }, "chdir")?;
            *CWD.write() = None;
            Ok(0)
        }
        _ => Err(Errno::eio("unexpected symlink resolution")),
    }
}

#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    at!(libc::AT_FDCWD, path, -1, |p| chdir_ours(p), |rp| {
        let r = real::chdir(rp);
        if r == 0 && !guarded() {
            *CWD.write() = None;
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    on_fd!(
        fd,
        -1,
        |o| {
            if !o.is_dir {
                return Err(Errno::new(
                    libc::ENOTDIR,
                    format!("{} is not a directory", o.path),
                ));
            }
            *CWD.write() = Some(o.path.clone());
            Ok(0)
        },
        {
            let r = real::fchdir(fd);
            if r == 0 && !guarded() {
                *CWD.write() = None;
            }
            r
        }
    )
}

pub(super) fn getcwd_ours(buf: *mut c_char, size: size_t) -> R<*mut c_char> {
    let Some(c) = CWD.read().clone() else {
        return Ok(std::ptr::null_mut());
    };
    let full = CString::new(outside(&c)).map_err(|_| Errno::einval("NUL in path"))?;
    let bytes = full.as_bytes_with_nul();
    if !buf.is_null() && size == 0 {
        return Err(Errno::einval("getcwd: size 0"));
    }
    if buf.is_null() {
        let n = if size == 0 { bytes.len() } else { size };
        if n < bytes.len() {
            return Err(Errno::new(libc::ERANGE, "buffer too small"));
        }
        // SAFETY: plain allocation the caller frees.
        let m = unsafe { libc::malloc(n) }.cast::<c_char>();
        if m.is_null() {
            return Err(Errno::new(libc::ENOMEM, "out of memory"));
        }
        // SAFETY: m holds n >= len bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), m.cast(), bytes.len()) };
        return Ok(m);
    }
    if size < bytes.len() {
        return Err(Errno::new(libc::ERANGE, "buffer too small"));
    }
    // SAFETY: the caller's buffer of `size` bytes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast(), bytes.len()) };
    Ok(buf)
}

pub(super) fn cwd_is_ours() -> bool {
    settings().is_some() && CWD.read().is_some()
}

#[no_mangle]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char {
    if guarded() || !cwd_is_ours() {
        return real::getcwd(buf, size);
    }
    enter(std::ptr::null_mut(), || getcwd_ours(buf, size))
}
#[no_mangle]
pub unsafe extern "C" fn __getcwd_chk(
    buf: *mut c_char,
    size: size_t,
    buflen: size_t,
) -> *mut c_char {
    if guarded() || !cwd_is_ours() {
        return real::__getcwd_chk(buf, size, buflen);
    }
    enter(std::ptr::null_mut(), || getcwd_ours(buf, size.min(buflen)))
}
#[no_mangle]
pub unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    if guarded() || !cwd_is_ours() {
        return real::get_current_dir_name();
    }
    enter(std::ptr::null_mut(), || {
        getcwd_ours(std::ptr::null_mut(), 0)
    })
}

/// The environment `envp` with EDDY_CWD set to the process-local working directory (or
/// removed when it is not under the prefix); `None` when `envp` already says so.
/// Allocation-free in that case (this may run in a vfork child).
pub(super) unsafe fn env_with_cwd(
    envp: *const *const c_char,
) -> Option<(Vec<*const c_char>, Option<CString>)> {
    if settings().is_none() || envp.is_null() {
        return None;
    }
    let cwd = CWD.read().clone();
    let mut present: Option<&[u8]> = None;
    let mut i = 0;
    loop {
        // SAFETY: the caller's NULL-terminated array of strings.
        let e = unsafe { *envp.add(i) };
        if e.is_null() {
            break;
        }
        // SAFETY: as above.
        let b = unsafe { CStr::from_ptr(e) }.to_bytes();
        if let Some(v) = b.strip_prefix(b"EDDY_CWD=") {
            present = Some(v);
        }
        i += 1;
    }
    if present == cwd.as_deref().map(str::as_bytes) {
        return None;
    }
    let mut keep: Vec<*const c_char> = Vec::with_capacity(i + 2);
    for k in 0..i {
        // SAFETY: as above.
        let e = unsafe { *envp.add(k) };
        // SAFETY: as above.
        if !unsafe { CStr::from_ptr(e) }
            .to_bytes()
            .starts_with(b"EDDY_CWD=")
        {
            keep.push(e);
        }
    }
    let extra = cwd.and_then(|c| CString::new(format!("EDDY_CWD={c}")).ok());
    if let Some(x) = &extra {
        keep.push(x.as_ptr());
    }
    keep.push(std::ptr::null());
    Some((keep, extra))
}

extern "C" {
    static environ: *const *const c_char;
}

/// execve with EDDY_CWD set to the process-local working directory (or removed when it is
/// not under the prefix), so that a program started from an Eddy directory starts there.
#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    if guarded() {
        return real::execve(path, argv, envp);
    }
    match env_with_cwd(envp) {
        None => real::execve(path, argv, envp),
        Some((env, _keep)) => real::execve(path, argv, env.as_ptr()),
    }
}

/// execv: execve with the process's environment (glibc's own execv does not call execve).
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    execve(path, argv, environ)
}

/// execvpe, with EDDY_CWD as execve sets it.
#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    if guarded() {
        return real::execvpe(file, argv, envp);
    }
    match env_with_cwd(envp) {
        None => real::execvpe(file, argv, envp),
        Some((env, _keep)) => real::execvpe(file, argv, env.as_ptr()),
    }
}

/// execvp: execvpe with the process's environment.
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    execvpe(file, argv, environ)
}
