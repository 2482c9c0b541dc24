//! The interposed functions. Each checks the guard, then whether its path or descriptor is
//! Eddy's; if not, the real function is called at once.
#![allow(clippy::missing_safety_doc)]

use crate::fds::{self, Open};
use crate::path::{link_target, outside, resolve, Target};
use crate::real;
use crate::stat as st;
use crate::state::{
    creds, enter, global, guarded, run, run_sized, set_errno, settings, umask as cur_umask, CWD, R,
};
use eddy_client::{
    Errno, File, FileKind, Inode, LockKind, LockRange, LockRequest, SetAttr, SetTime, Timespec,
    XattrSet,
};
use libc::{c_char, c_int, c_long, c_uint, c_ulong, c_void, mode_t, off64_t, size_t, ssize_t};
use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Symlinks followed at most this many times (ELOOP beyond), as Linux.
const MAX_HOPS: usize = 40;

/// Whether this process wrote through an Eddy descriptor (sizes to publish at exit).
static WROTE: AtomicBool = AtomicBool::new(false);

enum T {
    Real,
    RealAt(CString),
    Ours(String),
    Err(i32),
}

unsafe fn target(dirfd: c_int, path: *const c_char) -> T {
    // SAFETY: the caller's path.
    match std::panic::catch_unwind(|| unsafe { resolve(dirfd, path) }) {
        Ok(Ok(Target::Real)) => T::Real,
        Ok(Ok(Target::RealAt(c))) => T::RealAt(c),
        Ok(Ok(Target::Ours(p))) => T::Ours(p),
        Ok(Err(e)) => T::Err(e.errno),
        Err(_) => T::Err(libc::EIO),
    }
}

/// Dispatches a path call: `$real` with `$rp` the real path, or `$ours` with `$p` the Eddy
/// path (inside `enter`).
macro_rules! at {
    ($dirfd:expr, $path:expr, $fail:expr, |$p:ident| $ours:expr, |$rp:ident| $real:expr) => {{
        let path = $path;
        if guarded() {
            let $rp = path;
            return $real;
        }
        match target($dirfd, path) {
            T::Real => {
                let $rp = path;
                $real
            }
            T::RealAt(c) => {
                let $rp = c.as_ptr();
                $real
            }
            T::Err(e) => {
                set_errno(e);
                $fail
            }
            T::Ours($p) => enter($fail, || $ours),
        }
    }};
}

/// Dispatches a descriptor call.
macro_rules! on_fd {
    ($fd:expr, $fail:expr, |$o:ident| $ours:expr, $real:expr) => {{
        if guarded() {
            return $real;
        }
        match fds::lookup($fd) {
            None => $real,
            Some($o) => enter($fail, || $ours),
        }
    }};
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn os_err(what: &str) -> Errno {
    Errno::new(errno(), what.to_string())
}

unsafe fn cstr<'a>(p: *const c_char) -> R<&'a str> {
    if p.is_null() {
        return Err(Errno::new(libc::EFAULT, "null string"));
    }
    // SAFETY: the caller's NUL-terminated string.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Errno::einval("not UTF-8"))
}

fn blksize() -> u64 {
    global()
        .map(|g| g.client.config().chunk_size)
        .unwrap_or(4096)
}

// ---------------------------------------------------------------- look-ups

fn lstat_ours(p: &str) -> R<Inode> {
    let p = p.to_string();
    run(move |c| async move { c.stat(&p).await })
}

/// Follows symlinks from Eddy path `p`: where the chain ends (an Eddy path, or a real path
/// when a link leads out of the prefix).
fn follow(mut p: String) -> R<(Target, Option<Inode>)> {
    for _ in 0..MAX_HOPS {
        let i = lstat_ours(&p)?;
        if i.kind != FileKind::Symlink {
            return Ok((Target::Ours(p), Some(i)));
        }
        match link_target(&p, i.target.as_deref().unwrap_or(""))? {
            Target::Ours(q) => p = q,
            other => return Ok((other, None)),
        }
    }
    Err(Errno::new(
        libc::ELOOP,
        format!("too many symbolic links at {p}"),
    ))
}

/// The path an Eddy operation that follows symlinks acts on; Err(real path) when the links
/// lead out of the prefix.
fn follow_path(p: String) -> R<Result<String, CString>> {
    match follow(p)? {
        (Target::Ours(q), _) => Ok(Ok(q)),
        (Target::RealAt(c), _) => Ok(Err(c)),
        (Target::Real, _) => Err(Errno::eio("unexpected real target")),
    }
}

// ---------------------------------------------------------------- open / close

fn open_ours(p: String, flags: c_int, mode: c_uint) -> R<c_int> {
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return Err(Errno::new(
            libc::EOPNOTSUPP,
            "O_TMPFILE is not supported on Eddy",
        ));
    }
    let creds = creds();
    let mode = mode & !cur_umask() & 0o7777;
    let mut path = p;
    for _ in 0..MAX_HOPS {
        if flags & libc::O_PATH != 0 {
            let i = lstat_ours(&path)?;
            if i.kind == FileKind::Symlink && flags & libc::O_NOFOLLOW == 0 {
                match link_target(&path, i.target.as_deref().unwrap_or(""))? {
                    Target::Ours(q) => {
                        path = q;
                        continue;
                    }
                    Target::RealAt(c) => return real_open(&c, flags, mode),
                    Target::Real => return Err(Errno::eio("unexpected real target")),
                }
            }
            if flags & libc::O_DIRECTORY != 0 && i.kind != FileKind::Dir {
                return Err(Errno::new(
                    libc::ENOTDIR,
                    format!("{path} is not a directory"),
                ));
            }
            let is_dir = i.kind == FileKind::Dir;
            return install(path, flags, None, is_dir);
        }
        let q = path.clone();
        let f = flags & !libc::O_CLOEXEC;
        let res = run(move |c| async move { c.open(&q, f | libc::O_NOFOLLOW, mode, creds).await });
        match res {
            Ok(file) => {
                let is_dir = file.inode().kind == FileKind::Dir;
                return install(path, flags, Some(file), is_dir);
            }
            Err(e) if e.errno == libc::ELOOP && flags & libc::O_NOFOLLOW == 0 => {
                let i = lstat_ours(&path)?;
                if i.kind != FileKind::Symlink {
                    return Err(e);
                }
                match link_target(&path, i.target.as_deref().unwrap_or(""))? {
                    Target::Ours(q) => path = q,
                    Target::RealAt(c) => return real_open(&c, flags, mode),
                    Target::Real => return Err(Errno::eio("unexpected real target")),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(Errno::new(
        libc::ELOOP,
        format!("too many symbolic links at {path}"),
    ))
}

fn real_open(c: &CString, flags: c_int, mode: c_uint) -> R<c_int> {
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { real::open64(c.as_ptr(), flags, mode) };
    if fd < 0 {
        Err(os_err("open"))
    } else {
        Ok(fd)
    }
}

fn install(path: String, flags: c_int, file: Option<File>, is_dir: bool) -> R<c_int> {
    let stored = if is_dir {
        flags | libc::O_DIRECTORY
    } else {
        flags
    };
    let fd = fds::reserve(&path, stored)?;
    fds::insert(fd, Arc::new(Open::new(path, stored, file, is_dir)));
    Ok(fd)
}

#[no_mangle]
pub unsafe extern "C" fn eddy_pl_openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
    which: c_int,
) -> c_int {
    let call_real = |rp: *const c_char| match which {
        // SAFETY: the caller's arguments.
        0 => unsafe { real::open(rp, flags, mode) },
        1 => unsafe { real::open64(rp, flags, mode) },
        2 => unsafe { real::openat(dirfd, rp, flags, mode) },
        _ => unsafe { real::openat64(dirfd, rp, flags, mode) },
    };
    at!(dirfd, path, -1, |p| open_ours(p, flags, mode), |rp| {
        call_real(rp)
    })
}

/// For the C fopen: -2 when the path is not Eddy's, -1 on failure (errno set), else a
/// descriptor (Eddy's, or a real one for a path resolved out of the prefix).
#[no_mangle]
pub unsafe extern "C" fn eddy_pl_open_for_stream(
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    if guarded() {
        return -2;
    }
    match target(libc::AT_FDCWD, path) {
        T::Real => -2,
        T::RealAt(c) => real::open64(c.as_ptr(), flags, mode),
        T::Err(e) => {
            set_errno(e);
            -1
        }
        T::Ours(p) => enter(-1, || open_ours(p, flags, mode)),
    }
}

#[no_mangle]
pub extern "C" fn eddy_pl_is_ours(fd: c_int) -> c_int {
    c_int::from(!guarded() && fds::is_ours(fd))
}

#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    at!(libc::AT_FDCWD, path, -1, |p| open_ours(p, flags, 0), |rp| {
        real::__open_2(rp, flags)
    })
}
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    at!(libc::AT_FDCWD, path, -1, |p| open_ours(p, flags, 0), |rp| {
        real::__open64_2(rp, flags)
    })
}
#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    at!(dirfd, path, -1, |p| open_ours(p, flags, 0), |rp| {
        real::__openat_2(dirfd, rp, flags)
    })
}
#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    at!(dirfd, path, -1, |p| open_ours(p, flags, 0), |rp| {
        real::__openat64_2(dirfd, rp, flags)
    })
}

const CREAT: c_int = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;

#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| open_ours(p, CREAT, mode),
        |rp| real::creat(rp, mode)
    )
}
#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| open_ours(p, CREAT, mode),
        |rp| real::creat64(rp, mode)
    )
}

/// After a descriptor of `o` went away: record locks of this process released (POSIX: any
/// close does), and at the last descriptor the handle closed (its size published).
fn release(o: Arc<Open>) -> R<()> {
    let mut first: R<()> = Ok(());
    if o.locked.load(Ordering::Relaxed) {
        if let Ok(f) = o.file() {
            let pid = std::process::id() as u64;
            first = run(move |c| async move { c.release_locks(&f, Some(pid), None).await });
        }
    }
    if Arc::strong_count(&o) == 1 {
        if let Some(f) = o.take_file() {
            let r = run(move |c| async move { c.close(&f).await });
            first = first.and(r);
        }
    }
    first
}

extern "C" {
    fn eddy_shim_std_stream(fd: c_int);
    fn eddy_shim_flush_std(fd: c_int);
}

/// When fd 0, 1 or 2 becomes an Eddy descriptor: its stdio stream goes through this library.
pub fn std_stream(fd: c_int) {
    if (0..=2).contains(&fd) {
        // SAFETY: replaces the standard stream by a cookie stream over the descriptor.
        unsafe { eddy_shim_std_stream(fd) };
    }
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if guarded() {
        fds::internal_closed(fd);
        return real::close(fd);
    }
    if fds::is_internal(fd) {
        // The library's own descriptor (its runtime's, its connections'): not the program's.
        set_errno(libc::EBADF);
        return -1;
    }
    match fds::remove(fd) {
        None => real::close(fd),
        Some(o) => enter(-1, || {
            // SAFETY: the reserved descriptor.
            unsafe { real::close(fd) };
            release(o)?;
            Ok(0)
        }),
    }
}

/// The process the library state belongs to: a vfork child (which runs no fork handlers and
/// shares the parent's memory) publishes nothing at `_exit`; its parent owns the files.
static PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

pub fn set_pid() {
    // SAFETY: getpid cannot fail.
    PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
}

/// In a forked child: nothing written by this process yet.
pub fn reset_after_fork() {
    WROTE.store(false, Ordering::Relaxed);
    set_pid();
}

/// Publishes what this process wrote (at exit): every open handle closed.
pub fn publish_all() {
    if guarded() || !WROTE.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: getpid cannot fail.
    if unsafe { libc::getpid() } != PID.load(Ordering::Relaxed) {
        return;
    }
    enter((), || {
        let mut seen = HashSet::new();
        for fd in 0..65536 {
            if let Some(o) = fds::lookup(fd) {
                if seen.insert(Arc::as_ptr(&o) as usize) {
                    if let Some(f) = o.take_file() {
                        let _ = run(move |c| async move { c.close(&f).await });
                    }
                }
            }
        }
        WROTE.store(false, Ordering::Relaxed);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    publish_all();
    // SAFETY: the process ends here.
    unsafe { libc::syscall(libc::SYS_exit_group, status) };
    unreachable!()
}

#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    publish_all();
    // SAFETY: the process ends here.
    unsafe { libc::syscall(libc::SYS_exit_group, status) };
    unreachable!()
}

// ---------------------------------------------------------------- data

fn check_data(o: &Open) -> R<()> {
    if o.flags() & libc::O_PATH != 0 {
        return Err(Errno::new(
            libc::EBADF,
            format!("{} is open with O_PATH", o.path),
        ));
    }
    if o.is_dir {
        return Err(Errno::new(
            libc::EISDIR,
            format!("{} is a directory", o.path),
        ));
    }
    Ok(())
}

fn cur_offset(fd: c_int) -> R<u64> {
    // SAFETY: the reserved descriptor.
    let off = unsafe { real::lseek64(fd, 0, libc::SEEK_CUR) };
    if off < 0 {
        return Err(os_err("lseek"));
    }
    Ok(off as u64)
}

fn set_offset(fd: c_int, off: u64) -> R<()> {
    // SAFETY: the reserved descriptor.
    if unsafe { real::lseek64(fd, off as i64, libc::SEEK_SET) } < 0 {
        return Err(os_err("lseek"));
    }
    Ok(())
}

/// Reads into `buf`: at `off`, or at the descriptor's offset (which then moves).
fn read_ours(fd: c_int, o: &Open, buf: &mut [u8], off: Option<u64>) -> R<usize> {
    check_data(o)?;
    let f = o.file()?;
    let _held = off.is_none().then(|| o.io.lock());
    let pos = match off {
        Some(x) => x,
        None => cur_offset(fd)?,
    };
    let len = buf.len();
    let data = run_sized(len, move |c| async move { c.pread(&f, pos, len).await })?;
    buf[..data.len()].copy_from_slice(&data);
    if off.is_none() {
        set_offset(fd, pos + data.len() as u64)?;
    }
    Ok(data.len())
}

fn write_ours(fd: c_int, o: &Open, data: Vec<u8>, off: Option<u64>) -> R<usize> {
    check_data(o)?;
    let f = o.file()?;
    let flags = o.flags();
    let append = flags & libc::O_APPEND != 0;
    let sync = flags & (libc::O_SYNC | libc::O_DSYNC) != 0;
    let _held = off.is_none().then(|| o.io.lock());
    let pos = match off {
        Some(x) => x,
        None if append => 0,
        None => cur_offset(fd)?,
    };
    WROTE.store(true, Ordering::Relaxed);
    let (n, end) = run_sized(data.len(), move |c| async move {
        let n = c.pwrite(&f, pos, &data).await?;
        if sync {
            c.fsync(&f).await?;
        }
        let end = if append {
            c.fstat(&f).await?.size
        } else {
            pos + n as u64
        };
        Ok((n, end))
    })?;
    if off.is_none() {
        set_offset(fd, end)?;
    }
    Ok(n)
}

unsafe fn slice_mut<'a>(buf: *mut c_void, n: size_t) -> &'a mut [u8] {
    if n == 0 || buf.is_null() {
        &mut []
    } else {
        // SAFETY: the caller's buffer of n bytes.
        unsafe { std::slice::from_raw_parts_mut(buf.cast(), n) }
    }
}

unsafe fn slice<'a>(buf: *const c_void, n: size_t) -> &'a [u8] {
    if n == 0 || buf.is_null() {
        &[]
    } else {
        // SAFETY: the caller's buffer of n bytes.
        unsafe { std::slice::from_raw_parts(buf.cast(), n) }
    }
}

fn offset(off: off64_t) -> R<Option<u64>> {
    if off < 0 {
        return Err(Errno::einval("negative offset"));
    }
    Ok(Some(off as u64))
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| read_ours(fd, &o, slice_mut(buf, n), None).map(|n| n as ssize_t),
        real::read(fd, buf, n)
    )
}
#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| read_ours(fd, &o, slice_mut(buf, n.min(buflen)), None).map(|n| n as ssize_t),
        real::__read_chk(fd, buf, n, buflen)
    )
}
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| write_ours(fd, &o, slice(buf, n).to_vec(), None).map(|n| n as ssize_t),
        real::write(fd, buf, n)
    )
}
#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| read_ours(fd, &o, slice_mut(buf, n), offset(off)?).map(|n| n as ssize_t),
        real::pread(fd, buf, n, off)
    )
}
#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| read_ours(fd, &o, slice_mut(buf, n), offset(off)?).map(|n| n as ssize_t),
        real::pread64(fd, buf, n, off)
    )
}
#[no_mangle]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off64_t,
    buflen: size_t,
) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| read_ours(fd, &o, slice_mut(buf, n.min(buflen)), offset(off)?).map(|n| n as ssize_t),
        real::__pread_chk(fd, buf, n, off, buflen)
    )
}
#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off64_t,
    buflen: size_t,
) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| read_ours(fd, &o, slice_mut(buf, n.min(buflen)), offset(off)?).map(|n| n as ssize_t),
        real::__pread64_chk(fd, buf, n, off, buflen)
    )
}
#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| write_ours(fd, &o, slice(buf, n).to_vec(), offset(off)?).map(|n| n as ssize_t),
        real::pwrite(fd, buf, n, off)
    )
}
#[no_mangle]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: off64_t,
) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| write_ours(fd, &o, slice(buf, n).to_vec(), offset(off)?).map(|n| n as ssize_t),
        real::pwrite64(fd, buf, n, off)
    )
}

unsafe fn iovecs<'a>(iov: *const libc::iovec, cnt: c_int) -> R<&'a [libc::iovec]> {
    if !(0..=1024).contains(&cnt) {
        return Err(Errno::einval("iovec count out of range"));
    }
    if cnt == 0 || iov.is_null() {
        return Ok(&[]);
    }
    // SAFETY: the caller's array of cnt iovecs.
    Ok(unsafe { std::slice::from_raw_parts(iov, cnt as usize) })
}

fn readv_ours(fd: c_int, o: &Open, iov: &[libc::iovec], off: Option<u64>) -> R<ssize_t> {
    let total: usize = iov.iter().map(|v| v.iov_len).sum();
    let mut buf = vec![0u8; total];
    let n = read_ours(fd, o, &mut buf, off)?;
    let mut done = 0;
    for v in iov {
        if done >= n {
            break;
        }
        let k = v.iov_len.min(n - done);
        // SAFETY: the caller's buffer of iov_len bytes.
        unsafe { std::ptr::copy_nonoverlapping(buf[done..].as_ptr(), v.iov_base.cast(), k) };
        done += k;
    }
    Ok(n as ssize_t)
}

fn writev_ours(fd: c_int, o: &Open, iov: &[libc::iovec], off: Option<u64>) -> R<ssize_t> {
    let mut data = Vec::new();
    for v in iov {
        // SAFETY: the caller's buffer of iov_len bytes.
        data.extend_from_slice(unsafe { slice(v.iov_base, v.iov_len) });
    }
    Ok(write_ours(fd, o, data, off)? as ssize_t)
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| readv_ours(fd, &o, iovecs(iov, cnt)?, None),
        real::readv(fd, iov, cnt)
    )
}
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| writev_ours(fd, &o, iovecs(iov, cnt)?, None),
        real::writev(fd, iov, cnt)
    )
}
#[no_mangle]
pub unsafe extern "C" fn preadv(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off64_t,
) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| readv_ours(fd, &o, iovecs(iov, cnt)?, offset(off)?),
        real::preadv(fd, iov, cnt, off)
    )
}
#[no_mangle]
pub unsafe extern "C" fn preadv64(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off64_t,
) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| readv_ours(fd, &o, iovecs(iov, cnt)?, offset(off)?),
        real::preadv64(fd, iov, cnt, off)
    )
}
#[no_mangle]
pub unsafe extern "C" fn pwritev(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off64_t,
) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| writev_ours(fd, &o, iovecs(iov, cnt)?, offset(off)?),
        real::pwritev(fd, iov, cnt, off)
    )
}
#[no_mangle]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off64_t,
) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| writev_ours(fd, &o, iovecs(iov, cnt)?, offset(off)?),
        real::pwritev64(fd, iov, cnt, off)
    )
}
fn v2_offset(off: off64_t) -> R<Option<u64>> {
    if off == -1 {
        Ok(None)
    } else {
        offset(off)
    }
}
#[no_mangle]
pub unsafe extern "C" fn preadv2(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| readv_ours(fd, &o, iovecs(iov, cnt)?, v2_offset(off)?),
        real::preadv2(fd, iov, cnt, off, flags)
    )
}
#[no_mangle]
pub unsafe extern "C" fn pwritev2(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| writev_ours(fd, &o, iovecs(iov, cnt)?, v2_offset(off)?),
        real::pwritev2(fd, iov, cnt, off, flags)
    )
}

fn size_of_open(o: &Open) -> R<u64> {
    Ok(fstat_ours(o)?.size)
}

fn lseek_ours(fd: c_int, o: &Open, off: off64_t, whence: c_int) -> R<off64_t> {
    let _held = o.io.lock();
    if o.is_dir {
        if whence == libc::SEEK_SET && off == 0 {
            *o.cursor.lock() = fds::Cursor::default();
            return Ok(0);
        }
        if whence == libc::SEEK_CUR && off == 0 {
            return Ok(o.cursor.lock().pos);
        }
        return Err(Errno::einval("directories seek only back to their start"));
    }
    let new = match whence {
        libc::SEEK_SET => off,
        libc::SEEK_CUR => (cur_offset(fd)? as i64).saturating_add(off),
        libc::SEEK_END => (size_of_open(o)? as i64).saturating_add(off),
        libc::SEEK_DATA | libc::SEEK_HOLE => {
            let size = size_of_open(o)? as i64;
            if off < 0 || off >= size {
                return Err(Errno::new(libc::ENXIO, "offset past the end of file"));
            }
            if whence == libc::SEEK_DATA {
                off
            } else {
                size
            }
        }
        _ => return Err(Errno::einval("bad whence")),
    };
    if new < 0 {
        return Err(Errno::einval("negative offset"));
    }
    set_offset(fd, new as u64)?;
    Ok(new)
}

#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
    on_fd!(
        fd,
        -1,
        |o| lseek_ours(fd, &o, off, whence),
        real::lseek(fd, off, whence)
    )
}
#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
    on_fd!(
        fd,
        -1,
        |o| lseek_ours(fd, &o, off, whence),
        real::lseek64(fd, off, whence)
    )
}

// ---------------------------------------------------------------- stat

fn fstat_ours(o: &Open) -> R<Inode> {
    if o.is_dir || o.flags() & libc::O_PATH != 0 {
        return lstat_ours(&o.path);
    }
    let f = o.file()?;
    run(move |c| async move { c.fstat(&f).await })
}

enum Got {
    Inode(Inode),
    Real(CString),
}

fn stat_path(p: String, follow_links: bool) -> R<Got> {
    if !follow_links {
        return Ok(Got::Inode(lstat_ours(&p)?));
    }
    match follow(p)? {
        (_, Some(i)) => Ok(Got::Inode(i)),
        (Target::RealAt(c), None) => Ok(Got::Real(c)),
        _ => Err(Errno::eio("unexpected symlink resolution")),
    }
}

fn stat_into(got: Got, buf: *mut libc::stat) -> R<c_int> {
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

#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| stat_into(stat_path(p, true)?, buf),
        |rp| real::stat(rp, buf)
    )
}
#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, buf: *mut libc::stat) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| stat_into(stat_path(p, true)?, buf),
        |rp| real::stat64(rp, buf)
    )
}
#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| stat_into(stat_path(p, false)?, buf),
        |rp| real::lstat(rp, buf)
    )
}
#[no_mangle]
pub unsafe extern "C" fn lstat64(path: *const c_char, buf: *mut libc::stat) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| stat_into(stat_path(p, false)?, buf),
        |rp| real::lstat64(rp, buf)
    )
}
#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    on_fd!(
        fd,
        -1,
        |o| stat_into(Got::Inode(fstat_ours(&o)?), buf),
        real::fstat(fd, buf)
    )
}
#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, buf: *mut libc::stat) -> c_int {
    on_fd!(
        fd,
        -1,
        |o| stat_into(Got::Inode(fstat_ours(&o)?), buf),
        real::fstat64(fd, buf)
    )
}

/// The `*at` stat calls: AT_EMPTY_PATH on a descriptor, else the path.
unsafe fn fstatat_common(
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

#[no_mangle]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    fstatat_common(
        dirfd,
        path,
        flags,
        |g| stat_into(g, buf),
        |rp| real::fstatat(dirfd, rp, buf, flags),
    )
}
#[no_mangle]
pub unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    fstatat_common(
        dirfd,
        path,
        flags,
        |g| stat_into(g, buf),
        |rp| real::fstatat64(dirfd, rp, buf, flags),
    )
}
#[no_mangle]
pub unsafe extern "C" fn __xstat(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| stat_into(stat_path(p, true)?, buf),
        |rp| real::__xstat(ver, rp, buf)
    )
}
#[no_mangle]
pub unsafe extern "C" fn __xstat64(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| stat_into(stat_path(p, true)?, buf),
        |rp| real::__xstat64(ver, rp, buf)
    )
}
#[no_mangle]
pub unsafe extern "C" fn __lxstat(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| stat_into(stat_path(p, false)?, buf),
        |rp| real::__lxstat(ver, rp, buf)
    )
}
#[no_mangle]
pub unsafe extern "C" fn __lxstat64(
    ver: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| stat_into(stat_path(p, false)?, buf),
        |rp| real::__lxstat64(ver, rp, buf)
    )
}
#[no_mangle]
pub unsafe extern "C" fn __fxstat(ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int {
    on_fd!(
        fd,
        -1,
        |o| stat_into(Got::Inode(fstat_ours(&o)?), buf),
        real::__fxstat(ver, fd, buf)
    )
}
#[no_mangle]
pub unsafe extern "C" fn __fxstat64(ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int {
    on_fd!(
        fd,
        -1,
        |o| stat_into(Got::Inode(fstat_ours(&o)?), buf),
        real::__fxstat64(ver, fd, buf)
    )
}
#[no_mangle]
pub unsafe extern "C" fn __fxstatat(
    ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    fstatat_common(
        dirfd,
        path,
        flags,
        |g| stat_into(g, buf),
        |rp| real::__fxstatat(ver, dirfd, rp, buf, flags),
    )
}
#[no_mangle]
pub unsafe extern "C" fn __fxstatat64(
    ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    fstatat_common(
        dirfd,
        path,
        flags,
        |g| stat_into(g, buf),
        |rp| real::__fxstatat64(ver, dirfd, rp, buf, flags),
    )
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

// ---------------------------------------------------------------- access

fn access_ours(p: String, mode: c_int, follow_links: bool) -> R<c_int> {
    let i = match stat_path(p, follow_links)? {
        Got::Inode(i) => i,
        Got::Real(c) => {
            // SAFETY: a NUL-terminated path.
            if unsafe { real::access(c.as_ptr(), mode) } < 0 {
                return Err(os_err("access"));
            }
            return Ok(0);
        }
    };
    if mode == libc::F_OK {
        return Ok(0);
    }
    let cr = creds();
    let bits = i.mode;
    let allowed = if cr.uid == 0 {
        let x = bits & 0o111 != 0 || i.kind == FileKind::Dir;
        (libc::R_OK | libc::W_OK) | if x { libc::X_OK } else { 0 }
    } else {
        let shift = if cr.uid == i.uid {
            6
        } else if cr.in_group(i.gid) {
            3
        } else {
            0
        };
        ((bits >> shift) & 7) as c_int
    };
    if mode & !allowed & 7 != 0 {
        return Err(Errno::new(libc::EACCES, "permission denied"));
    }
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| access_ours(p, mode, true),
        |rp| real::access(rp, mode)
    )
}
#[no_mangle]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| access_ours(p, mode, true),
        |rp| real::eaccess(rp, mode)
    )
}
#[no_mangle]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| access_ours(p, mode, true),
        |rp| real::euidaccess(rp, mode)
    )
}
#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    let follow_links = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    at!(
        dirfd,
        path,
        -1,
        |p| access_ours(p, mode, follow_links),
        |rp| real::faccessat(dirfd, rp, mode, flags)
    )
}

// ---------------------------------------------------------------- namespace

fn mkdir_ours(p: String, mode: mode_t) -> R<c_int> {
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

fn rmdir_ours(p: String) -> R<c_int> {
    let cr = creds();
    run(move |c| async move { c.rmdir(&p, cr).await })?;
    Ok(0)
}

fn unlink_ours(p: String) -> R<c_int> {
    let cr = creds();
    run(move |c| async move { c.unlink(&p, cr).await })?;
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
unsafe fn two_paths(
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

fn rename_ours(from: String, to: String, flags: c_uint) -> R<c_int> {
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

fn link_ours(from: String, to: String) -> R<c_int> {
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

fn setattr_path(p: String, attr: SetAttr) -> R<c_int> {
    let cr = creds();
    run(move |c| async move { c.setattr(&p, attr, cr).await })?;
    Ok(0)
}

fn truncate_ours(p: String, len: off64_t) -> R<c_int> {
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

fn real_result(r: c_int, what: &str) -> R<c_int> {
    if r < 0 {
        Err(os_err(what))
    } else {
        Ok(r)
    }
}

fn ftruncate_ours(o: &Open, len: off64_t) -> R<c_int> {
    check_data(o)?;
    if len < 0 {
        return Err(Errno::einval("negative length"));
    }
    let f = o.file()?;
    WROTE.store(true, Ordering::Relaxed);
    run(move |c| async move { c.ftruncate(&f, len as u64).await })?;
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn truncate(path: *const c_char, len: off64_t) -> c_int {
    at!(libc::AT_FDCWD, path, -1, |p| truncate_ours(p, len), |rp| {
        real::truncate(rp, len)
    })
}
#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: off64_t) -> c_int {
    at!(libc::AT_FDCWD, path, -1, |p| truncate_ours(p, len), |rp| {
        real::truncate64(rp, len)
    })
}
#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: off64_t) -> c_int {
    on_fd!(
        fd,
        -1,
        |o| ftruncate_ours(&o, len),
        real::ftruncate(fd, len)
    )
}
#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off64_t) -> c_int {
    on_fd!(
        fd,
        -1,
        |o| ftruncate_ours(&o, len),
        real::ftruncate64(fd, len)
    )
}

fn fsync_ours(o: &Open) -> R<c_int> {
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

// ---------------------------------------------------------------- attributes

fn mode_attr(mode: mode_t) -> SetAttr {
    SetAttr {
        mode: Some(mode & 0o7777),
        ..SetAttr::default()
    }
}

fn owner_attr(uid: libc::uid_t, gid: libc::gid_t) -> SetAttr {
    SetAttr {
        uid: (uid != u32::MAX).then_some(uid),
        gid: (gid != u32::MAX).then_some(gid),
        ..SetAttr::default()
    }
}

/// setattr after following symlinks (chmod, chown, utimensat without NOFOLLOW).
fn setattr_follow(p: String, attr: SetAttr, real_call: impl FnOnce(&CString) -> c_int) -> R<c_int> {
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
        |o| setattr_path(o.path.clone(), mode_attr(mode)),
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
        |o| setattr_path(o.path.clone(), owner_attr(uid, gid)),
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

fn time_of(t: &libc::timespec) -> R<Option<SetTime>> {
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

unsafe fn times_attr(times: *const libc::timespec) -> R<SetAttr> {
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
        |o| setattr_path(o.path.clone(), times_attr(times)?),
        real::futimens(fd, times)
    )
}

unsafe fn timeval_attr(tv: *const libc::timeval) -> SetAttr {
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

// ---------------------------------------------------------------- symlinks

fn symlink_ours(target_path: *const c_char, p: String) -> R<c_int> {
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

fn readlink_ours(p: String, buf: *mut c_char, n: size_t) -> R<ssize_t> {
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

fn realpath_ours(p: String, out: *mut c_char) -> R<*mut c_char> {
    let full = match follow_path(p)? {
        Ok(q) => CString::new(outside(&q)).map_err(|_| Errno::einval("NUL in path"))?,
        // SAFETY: a NUL-terminated path; `out` is the caller's.
        Err(c) => {
            let r = unsafe { real::realpath(c.as_ptr(), out) };
            return if r.is_null() {
                Err(os_err("realpath"))
            } else {
                Ok(r)
            };
        }
    };
    let bytes = full.as_bytes_with_nul();
    if bytes.len() > libc::PATH_MAX as usize {
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

// ---------------------------------------------------------------- statfs

fn fsstats() -> R<(eddy_client::FsStats, u64)> {
    let max_name = global()?.client.config().max_name_bytes as u64;
    let s = run(|c| async move { c.statfs().await })?;
    Ok((s, max_name))
}

fn statfs_ours(buf: *mut libc::statfs) -> R<c_int> {
    let (s, n) = fsstats()?;
    // SAFETY: the caller's buffer.
    st::fill_statfs(&s, n, unsafe { &mut *buf });
    Ok(0)
}

fn statvfs_ours(buf: *mut libc::statvfs) -> R<c_int> {
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

// ---------------------------------------------------------------- descriptors

/// `newfd` now names what `oldfd` names (after the real dup); what `newfd` named is released.
fn after_dup(oldfd: Option<Arc<Open>>, newfd: c_int) -> R<c_int> {
    let replaced = match oldfd {
        Some(o) => {
            let old = fds::insert(newfd, o);
            std_stream(newfd);
            old
        }
        None => fds::remove(newfd),
    };
    if let Some(old) = replaced {
        release(old)?;
    }
    Ok(newfd)
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    on_fd!(
        fd,
        -1,
        |o| {
            let n = real_result(real::dup(fd), "dup")?;
            after_dup(Some(o), n)
        },
        real::dup(fd)
    )
}

unsafe fn dup2_common(fd: c_int, fd2: c_int, real_call: impl FnOnce() -> c_int) -> c_int {
    if guarded() {
        return real_call();
    }
    if fds::is_internal(fd2) {
        set_errno(libc::EBADF);
        return -1;
    }
    let src = fds::lookup(fd);
    if src.is_none() && !fds::is_ours(fd2) {
        return real_call();
    }
    if fd == fd2 {
        return real_call();
    }
    if src.is_some() && (0..=2).contains(&fd2) {
        // Unguarded: a stream over an Eddy descriptor flushes through this library.
        eddy_shim_flush_std(fd2);
    }
    enter(-1, || {
        real_result(real_call(), "dup2")?;
        after_dup(src, fd2)
    })
}

#[no_mangle]
pub unsafe extern "C" fn dup2(fd: c_int, fd2: c_int) -> c_int {
    dup2_common(fd, fd2, || real::dup2(fd, fd2))
}
#[no_mangle]
pub unsafe extern "C" fn dup3(fd: c_int, fd2: c_int, flags: c_int) -> c_int {
    dup2_common(fd, fd2, || real::dup3(fd, fd2, flags))
}

fn lock_kind(t: i16) -> R<LockKind> {
    match c_int::from(t) {
        libc::F_RDLCK => Ok(LockKind::Read),
        libc::F_WRLCK => Ok(LockKind::Write),
        libc::F_UNLCK => Ok(LockKind::Unlock),
        _ => Err(Errno::einval("bad l_type")),
    }
}

fn lock_range(fd: c_int, o: &Open, fl: &libc::flock) -> R<LockRange> {
    let base = match c_int::from(fl.l_whence) {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => cur_offset(fd)? as i64,
        libc::SEEK_END => size_of_open(o)? as i64,
        _ => return Err(Errno::einval("bad l_whence")),
    };
    let start = base
        .checked_add(fl.l_start)
        .ok_or_else(|| Errno::einval("overflow"))?;
    let (s, e) = match fl.l_len {
        0 => (start, u64::MAX),
        l if l > 0 => (start, (start + l - 1) as u64),
        l => (start + l, (start - 1) as u64),
    };
    if s < 0 {
        return Err(Errno::einval("lock before the start of the file"));
    }
    Ok(LockRange {
        start: s as u64,
        end: e,
    })
}

fn lock_ours(fd: c_int, o: &Arc<Open>, cmd: c_int, arg: c_ulong) -> R<c_int> {
    if arg == 0 {
        return Err(Errno::new(libc::EFAULT, "null flock"));
    }
    // SAFETY: the caller's struct flock.
    let fl = unsafe { &mut *(arg as *mut libc::flock) };
    let ofd = matches!(
        cmd,
        libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW
    );
    let handle = Arc::as_ptr(o) as u64;
    let owner = if ofd {
        handle
    } else {
        std::process::id() as u64
    };
    let kind = lock_kind(fl.l_type)?;
    let range = lock_range(fd, o, fl)?;
    let f = o.file()?;
    match cmd {
        libc::F_GETLK | libc::F_OFD_GETLK => {
            if kind == LockKind::Unlock {
                return Err(Errno::einval("F_GETLK with F_UNLCK"));
            }
            let got = run(move |c| async move { c.test_lock(&f, owner, kind, range).await })?;
            match got {
                None => fl.l_type = libc::F_UNLCK as i16,
                Some(info) => {
                    fl.l_type = match info.kind {
                        LockKind::Read => libc::F_RDLCK,
                        _ => libc::F_WRLCK,
                    } as i16;
                    fl.l_whence = libc::SEEK_SET as i16;
                    fl.l_start = info.range.start as i64;
                    fl.l_len = if info.range.end == u64::MAX {
                        0
                    } else {
                        (info.range.end - info.range.start + 1) as i64
                    };
                    fl.l_pid = if ofd { -1 } else { info.pid as i32 };
                }
            }
            Ok(0)
        }
        _ => {
            if ofd && fl.l_pid != 0 {
                return Err(Errno::einval("OFD locks need l_pid 0"));
            }
            let wait = matches!(cmd, libc::F_SETLKW | libc::F_OFD_SETLKW);
            let req = LockRequest {
                owner,
                handle,
                pid: std::process::id(),
                kind,
                range,
            };
            o.locked.store(true, Ordering::Relaxed);
            run(move |c| async move { c.lock(&f, &req, wait).await })?;
            Ok(0)
        }
    }
}

fn fcntl_ours(fd: c_int, o: Arc<Open>, cmd: c_int, arg: c_ulong) -> R<c_int> {
    match cmd {
        libc::F_GETFD | libc::F_SETFD => {
            // SAFETY: the reserved descriptor: its close-on-exec flag is the kernel's.
            real_result(unsafe { real::fcntl(fd, cmd, arg) }, "fcntl")
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            // SAFETY: as above.
            let n = real_result(unsafe { real::fcntl(fd, cmd, arg) }, "fcntl")?;
            after_dup(Some(o), n)
        }
        libc::F_GETFL => Ok(o.flags()
            & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_NOCTTY | libc::O_CLOEXEC)
            | libc::O_LARGEFILE),
        libc::F_SETFL => {
            let settable = libc::O_APPEND
                | libc::O_NONBLOCK
                | libc::O_DIRECT
                | libc::O_NOATIME
                | libc::O_ASYNC;
            let new = (o.flags() & !settable) | (arg as c_int & settable);
            let append_changed = (new ^ o.flags()) & libc::O_APPEND != 0;
            o.flags.store(new, Ordering::Relaxed);
            if append_changed {
                // The client's handle carries O_APPEND: a new one is opened on next use.
                if let Some(f) = o.take_file() {
                    run(move |c| async move { c.close(&f).await })?;
                }
                o.reset_file();
            }
            Ok(0)
        }
        libc::F_GETLK
        | libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_OFD_GETLK
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW => lock_ours(fd, &o, cmd, arg),
        _ => Err(Errno::einval(format!(
            "fcntl command {cmd} is not supported on Eddy"
        ))),
    }
}

#[no_mangle]
pub unsafe extern "C" fn eddy_pl_fcntl(fd: c_int, cmd: c_int, arg: c_ulong, which: c_int) -> c_int {
    let call_real = || {
        if which == 0 {
            real::fcntl(fd, cmd, arg)
        } else {
            real::fcntl64(fd, cmd, arg)
        }
    };
    on_fd!(fd, -1, |o| fcntl_ours(fd, o, cmd, arg), call_real())
}

// ---------------------------------------------------------------- refused on Eddy descriptors

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    if flags & libc::MAP_ANONYMOUS == 0 && !guarded() && fds::is_ours(fd) {
        set_errno(libc::ENODEV);
        return libc::MAP_FAILED;
    }
    real::mmap(addr, len, prot, flags, fd, off)
}
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    if flags & libc::MAP_ANONYMOUS == 0 && !guarded() && fds::is_ours(fd) {
        set_errno(libc::ENODEV);
        return libc::MAP_FAILED;
    }
    real::mmap64(addr, len, prot, flags, fd, off)
}
#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    if !guarded() && (fds::is_ours(fd_in) || fds::is_ours(fd_out)) {
        // Callers fall back to read and write.
        set_errno(libc::EXDEV);
        return -1;
    }
    real::copy_file_range(fd_in, off_in, fd_out, off_out, len, flags)
}
#[no_mangle]
pub unsafe extern "C" fn sendfile(
    out_fd: c_int,
    in_fd: c_int,
    off: *mut off64_t,
    n: size_t,
) -> ssize_t {
    if !guarded() && (fds::is_ours(in_fd) || fds::is_ours(out_fd)) {
        set_errno(libc::EINVAL);
        return -1;
    }
    real::sendfile(out_fd, in_fd, off, n)
}
#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out_fd: c_int,
    in_fd: c_int,
    off: *mut off64_t,
    n: size_t,
) -> ssize_t {
    if !guarded() && (fds::is_ours(in_fd) || fds::is_ours(out_fd)) {
        set_errno(libc::EINVAL);
        return -1;
    }
    real::sendfile64(out_fd, in_fd, off, n)
}
#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int {
    on_fd!(
        fd,
        -1,
        |o| fallocate_ours(&o, mode, off, len),
        real::fallocate(fd, mode, off, len)
    )
}
#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int {
    on_fd!(
        fd,
        -1,
        |o| fallocate_ours(&o, mode, off, len),
        real::fallocate64(fd, mode, off, len)
    )
}

/// fallocate: mode 0 and FALLOC_FL_KEEP_SIZE reserve real space on the daemons that hold
/// the range; other modes are EOPNOTSUPP.
fn fallocate_ours(o: &Open, mode: c_int, off: off64_t, len: off64_t) -> R<c_int> {
    check_data(o)?;
    if off < 0 || len <= 0 {
        return Err(Errno::einval("bad range"));
    }
    let f = o.file()?;
    WROTE.store(true, Ordering::Relaxed);
    run(move |c| async move { c.fallocate(&f, off as u64, len as u64, mode).await })?;
    Ok(0)
}

/// posix_fallocate: reserves real space for the range and grows the file to cover it.
/// Returns an error number, as POSIX says.
fn posix_fallocate_ours(o: &Open, off: off64_t, len: off64_t) -> R<c_int> {
    fallocate_ours(o, 0, off, len)
}
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, off: off64_t, len: off64_t) -> c_int {
    if guarded() {
        return real::posix_fallocate(fd, off, len);
    }
    match fds::lookup(fd) {
        None => real::posix_fallocate(fd, off, len),
        Some(o) => match enter(-1, || posix_fallocate_ours(&o, off, len)) {
            0 => 0,
            _ => errno(),
        },
    }
}
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, off: off64_t, len: off64_t) -> c_int {
    if guarded() {
        return real::posix_fallocate64(fd, off, len);
    }
    match fds::lookup(fd) {
        None => real::posix_fallocate64(fd, off, len),
        Some(o) => match enter(-1, || posix_fallocate_ours(&o, off, len)) {
            0 => 0,
            _ => errno(),
        },
    }
}

// ---------------------------------------------------------------- extended attributes

fn getxattr_ours(
    p: String,
    name: *const c_char,
    v: *mut c_void,
    n: size_t,
    follow_links: bool,
) -> R<ssize_t> {
    // SAFETY: the caller's string.
    let name = unsafe { cstr(name) }?.to_string();
    let p = if follow_links {
        follow_path(p)?.map_err(|_| Errno::new(libc::EOPNOTSUPP, "link leaves Eddy"))?
    } else {
        p
    };
    let cr = creds();
    let val = run(move |c| async move { c.getxattr(&p, &name, cr).await })?;
    copy_out(&val, v.cast(), n)
}

fn copy_out(val: &[u8], v: *mut c_char, n: size_t) -> R<ssize_t> {
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

fn listxattr_ours(p: String, list: *mut c_char, n: size_t) -> R<ssize_t> {
    let cr = creds();
    let names = run(move |c| async move { c.listxattr(&p, cr).await })?;
    let mut out = Vec::new();
    for name in names {
        out.extend_from_slice(name.as_bytes());
        out.push(0);
    }
    copy_out(&out, list, n)
}

fn setxattr_ours(
    p: String,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    flags: c_int,
) -> R<c_int> {
    // SAFETY: the caller's string and buffer.
    let name = unsafe { cstr(name) }?.to_string();
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
        |o| getxattr_ours(o.path.clone(), name, v, n, false),
        real::fgetxattr(fd, name, v, n)
    )
}
#[no_mangle]
pub unsafe extern "C" fn listxattr(path: *const c_char, list: *mut c_char, n: size_t) -> ssize_t {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| {
            let q =
                follow_path(p)?.map_err(|_| Errno::new(libc::EOPNOTSUPP, "link leaves Eddy"))?;
            listxattr_ours(q, list, n)
        },
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
        |o| listxattr_ours(o.path.clone(), list, n),
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
        |p| {
            let q =
                follow_path(p)?.map_err(|_| Errno::new(libc::EOPNOTSUPP, "link leaves Eddy"))?;
            setxattr_ours(q, name, v, n, flags)
        },
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
        |o| setxattr_ours(o.path.clone(), name, v, n, flags),
        real::fsetxattr(fd, name, v, n, flags)
    )
}

fn mknod_ours(p: String, mode: mode_t, dev: libc::dev_t) -> R<c_int> {
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

#[no_mangle]
pub unsafe extern "C" fn umask(mask: mode_t) -> mode_t {
    let old = real::umask(mask);
    crate::state::set_umask(mask);
    old
}

// ---------------------------------------------------------------- directories

/// What an Eddy `DIR *` points to.
struct EDir {
    fd: c_int,
    ent: libc::dirent64,
}

static DIRS: parking_lot::Mutex<Vec<usize>> = parking_lot::const_mutex(Vec::new());
static NDIRS: AtomicUsize = AtomicUsize::new(0);

fn our_dir(d: *mut libc::DIR) -> Option<*mut EDir> {
    if d.is_null() || NDIRS.load(Ordering::Acquire) == 0 {
        return None;
    }
    DIRS.lock().contains(&(d as usize)).then_some(d.cast())
}

fn make_dir(fd: c_int) -> R<*mut libc::DIR> {
    let o = fds::lookup(fd).ok_or_else(|| Errno::new(libc::EBADF, "not an Eddy descriptor"))?;
    if !o.is_dir {
        return Err(Errno::new(
            libc::ENOTDIR,
            format!("{} is not a directory", o.path),
        ));
    }
    let d = Box::into_raw(Box::new(EDir {
        fd,
        // SAFETY: a plain C struct.
        ent: unsafe { std::mem::zeroed() },
    }));
    DIRS.lock().push(d as usize);
    NDIRS.fetch_add(1, Ordering::AcqRel);
    Ok(d.cast())
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut libc::DIR {
    at!(
        libc::AT_FDCWD,
        path,
        std::ptr::null_mut(),
        |p| {
            let fd = open_ours(p, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0)?;
            make_dir(fd).inspect_err(|_| {
                // SAFETY: the descriptor just opened.
                unsafe { close(fd) };
            })
        },
        |rp| real::opendir(rp)
    )
}

#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut libc::DIR {
    on_fd!(
        fd,
        std::ptr::null_mut(),
        |_o| make_dir(fd),
        real::fdopendir(fd)
    )
}

/// The next entry into the DIR's dirent; null at the end (errno untouched).
fn next_entry(d: *mut EDir) -> R<*mut libc::dirent64> {
    // SAFETY: one of our DIRs, used by one thread at a time (as POSIX asks of callers).
    let d = unsafe { &mut *d };
    let o =
        fds::lookup(d.fd).ok_or_else(|| Errno::new(libc::EBADF, "directory descriptor closed"))?;
    let mut cur = o.cursor.lock();
    if !fds::fill(&o, &mut cur)? {
        return Ok(std::ptr::null_mut());
    }
    let Some((name, ino, t)) = cur.buf.pop_front() else {
        return Ok(std::ptr::null_mut());
    };
    cur.pos += 1;
    let e = &mut d.ent;
    e.d_ino = ino;
    e.d_off = cur.pos;
    e.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
    e.d_type = t;
    let bytes = name.as_bytes();
    let k = bytes.len().min(e.d_name.len() - 1);
    for (dst, src) in e.d_name.iter_mut().zip(&bytes[..k]) {
        *dst = *src as c_char;
    }
    e.d_name[k] = 0;
    Ok(e)
}

#[no_mangle]
pub unsafe extern "C" fn readdir(d: *mut libc::DIR) -> *mut libc::dirent {
    if guarded() {
        return real::readdir(d);
    }
    match our_dir(d) {
        None => real::readdir(d),
        Some(e) => enter(std::ptr::null_mut(), || next_entry(e)).cast(),
    }
}
#[no_mangle]
pub unsafe extern "C" fn readdir64(d: *mut libc::DIR) -> *mut libc::dirent64 {
    if guarded() {
        return real::readdir64(d);
    }
    match our_dir(d) {
        None => real::readdir64(d),
        Some(e) => enter(std::ptr::null_mut(), || next_entry(e)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut libc::DIR) -> c_int {
    if guarded() {
        return real::closedir(d);
    }
    match our_dir(d) {
        None => real::closedir(d),
        Some(e) => {
            DIRS.lock().retain(|&x| x != d as usize);
            NDIRS.fetch_sub(1, Ordering::AcqRel);
            // SAFETY: made by make_dir, now out of the set.
            let b = Box::from_raw(e);
            close(b.fd)
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn dirfd(d: *mut libc::DIR) -> c_int {
    if guarded() {
        return real::dirfd(d);
    }
    match our_dir(d) {
        None => real::dirfd(d),
        Some(e) => (*e).fd,
    }
}
#[no_mangle]
pub unsafe extern "C" fn rewinddir(d: *mut libc::DIR) {
    if guarded() {
        return real::rewinddir(d);
    }
    match our_dir(d) {
        None => real::rewinddir(d),
        Some(e) => {
            if let Some(o) = fds::lookup((*e).fd) {
                *o.cursor.lock() = fds::Cursor::default();
            }
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn telldir(d: *mut libc::DIR) -> c_long {
    if guarded() {
        return real::telldir(d);
    }
    match our_dir(d) {
        None => real::telldir(d),
        Some(e) => fds::lookup((*e).fd).map_or(-1, |o| o.cursor.lock().pos as c_long),
    }
}
#[no_mangle]
pub unsafe extern "C" fn seekdir(d: *mut libc::DIR, pos: c_long) {
    if guarded() {
        return real::seekdir(d, pos);
    }
    match our_dir(d) {
        None => real::seekdir(d, pos),
        Some(e) => {
            // The listing starts again and skips `pos` entries (names are listed in a fixed
            // order, so this lands where telldir was while the directory is unchanged).
            let Some(o) = fds::lookup((*e).fd) else {
                return;
            };
            enter((), || {
                let mut cur = o.cursor.lock();
                *cur = fds::Cursor::default();
                while cur.pos < pos && fds::fill(&o, &mut cur)? {
                    cur.buf.pop_front();
                    cur.pos += 1;
                }
                Ok(())
            })
        }
    }
}

fn getdents_ours(o: &Open, buf: *mut c_void, n: size_t) -> R<ssize_t> {
    if !o.is_dir {
        return Err(Errno::new(
            libc::ENOTDIR,
            format!("{} is not a directory", o.path),
        ));
    }
    let mut cur = o.cursor.lock();
    let mut used = 0usize;
    // SAFETY: the caller's buffer of n bytes.
    let out = unsafe { slice_mut(buf, n) };
    loop {
        if !fds::fill(o, &mut cur)? {
            break;
        }
        let Some((name, ino, t)) = cur.buf.front() else {
            break;
        };
        let reclen = (19 + name.len() + 1).next_multiple_of(8);
        if used + reclen > out.len() {
            if used == 0 {
                return Err(Errno::einval("getdents64 buffer too small"));
            }
            break;
        }
        let rec = &mut out[used..used + reclen];
        rec.fill(0);
        rec[0..8].copy_from_slice(&ino.to_ne_bytes());
        rec[8..16].copy_from_slice(&(cur.pos + 1).to_ne_bytes());
        rec[16..18].copy_from_slice(&(reclen as u16).to_ne_bytes());
        rec[18] = *t;
        rec[19..19 + name.len()].copy_from_slice(name.as_bytes());
        used += reclen;
        cur.buf.pop_front();
        cur.pos += 1;
    }
    Ok(used as ssize_t)
}

#[no_mangle]
pub unsafe extern "C" fn getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    on_fd!(
        fd,
        -1,
        |o| getdents_ours(&o, buf, n),
        real::getdents64(fd, buf, n)
    )
}

// ---------------------------------------------------------------- working directory

/// At start: a working directory under the prefix handed down by exec (EDDY_CWD).
pub fn adopt_cwd() {
    if let Ok(c) = std::env::var("EDDY_CWD") {
        if c.starts_with('/') {
            *CWD.write() = Some(c);
        }
    }
}

fn chdir_ours(p: String) -> R<c_int> {
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

fn getcwd_ours(buf: *mut c_char, size: size_t) -> R<*mut c_char> {
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

fn cwd_is_ours() -> bool {
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
unsafe fn env_with_cwd(
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
// ---------------------------------------------------------------- the library's own descriptors

/// Descriptors the library's runtime makes (epoll, eventfd, sockets) move to high numbers,
/// out of the way of programs that dup2 onto small ones (a shell's `exec 3>file`).
fn relocate(fd: c_int) -> c_int {
    if fd < 0 {
        return fd;
    }
    // SAFETY: our own new descriptor.
    let n = unsafe { real::fcntl(fd, libc::F_DUPFD_CLOEXEC, fds::high_base() as c_ulong) };
    if n < 0 {
        fds::internal_opened(fd);
        return fd;
    }
    // SAFETY: as above; `n` replaces it.
    unsafe { real::close(fd) };
    fds::internal_opened(n);
    n
}

#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    let fd = real::socket(domain, ty, proto);
    if guarded() {
        relocate(fd)
    } else {
        fd
    }
}
#[no_mangle]
pub unsafe extern "C" fn epoll_create1(flags: c_int) -> c_int {
    let fd = real::epoll_create1(flags);
    if guarded() {
        relocate(fd)
    } else {
        fd
    }
}
#[no_mangle]
pub unsafe extern "C" fn eventfd(init: c_uint, flags: c_int) -> c_int {
    let fd = real::eventfd(init, flags);
    if guarded() {
        relocate(fd)
    } else {
        fd
    }
}
