//! open, creat and close; what a process publishes when it exits.

use super::lookup::lstat_ours;
use super::{os_err, target, MAX_HOPS, T, WROTE};
use crate::fds::Open;
use crate::path::{link_target, Target};
use crate::state::{creds, enter, global, guarded, run, set_errno, umask as cur_umask, R};
use crate::{fds, real};
use eddy_client::{Errno, File, FileKind};
use libc::{c_char, c_int, c_uint, mode_t};
use std::collections::HashSet;
use std::ffi::CString;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(super) fn open_ours(p: String, flags: c_int, mode: c_uint) -> R<c_int> {
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
        let (res, early) = open_file(&path, flags, mode, creds)?;
        // The descriptor made early names the path with the caller's flags: a directory
        // opened without O_DIRECTORY needs a header saying so, made again below.
        let early = match (res.as_ref(), early) {
            (Ok(file), Some(fd)) => {
                let fd = fd?;
                if file.inode().kind == FileKind::Dir && flags & libc::O_DIRECTORY == 0 {
                    // SAFETY: the descriptor made for this open, not yet anyone's.
                    unsafe { real::close(fd) };
                    None
                } else {
                    Some(fd)
                }
            }
            (Err(_), Some(Ok(fd))) => {
                // SAFETY: as above.
                unsafe { real::close(fd) };
                None
            }
            _ => None,
        };
        match res {
            Ok(file) => {
                let is_dir = file.inode().kind == FileKind::Dir;
                return install_at(early, path, flags, Some(file), is_dir);
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

pub(super) fn real_open(c: &CString, flags: c_int, mode: c_uint) -> R<c_int> {
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { real::open64(c.as_ptr(), flags, mode) };
    if fd < 0 {
        Err(os_err("open"))
    } else {
        Ok(fd)
    }
}

/// An open's outcome and the descriptor made for it meanwhile, if one was.
type Opened = (R<File>, Option<R<c_int>>);

/// The client's open of Eddy path `path` (symlinks not followed) and, with
/// `preload_early_descriptor`, the descriptor for it, made while the request is at the daemon
/// (decision 0046): the open is polled once, which sends its request, then the descriptor's
/// six system calls run on this thread while the daemon works, then the reply is awaited.
/// For a program's single thread the numbering is the same as after the reply: nothing else
/// of the program runs meanwhile. The caller closes the descriptor if the open failed.
fn open_file(path: &str, flags: c_int, mode: c_uint, creds: eddy_client::Creds) -> R<Opened> {
    let early = global()?.client.config().preload_early_descriptor;
    let q = path.to_string();
    let f = (flags & !libc::O_CLOEXEC) | libc::O_NOFOLLOW;
    if !early {
        return Ok((
            run(move |c| async move { c.open(&q, f, mode, creds).await }),
            None,
        ));
    }
    run(move |c| async move {
        use std::future::Future;
        let mut open = std::pin::pin!(c.open(&q, f, mode, creds));
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(open.as_mut().poll(cx))).await;
        if let std::task::Poll::Ready(res) = first {
            return Ok((res, None));
        }
        let fd = fds::reserve(&q, flags);
        Ok((open.await, Some(fd)))
    })
}

pub(super) fn install(path: String, flags: c_int, file: Option<File>, is_dir: bool) -> R<c_int> {
    install_at(None, path, flags, file, is_dir)
}

/// Enters an open in the table at `early` (a descriptor made for it already) or at a new one.
pub(super) fn install_at(
    early: Option<c_int>,
    path: String,
    flags: c_int,
    file: Option<File>,
    is_dir: bool,
) -> R<c_int> {
    let stored = if is_dir {
        flags | libc::O_DIRECTORY
    } else {
        flags
    };
    let fd = match early {
        Some(fd) => fd,
        None => fds::reserve(&path, stored)?,
    };
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
        // SAFETY: the caller's arguments.
        1 => unsafe { real::open64(rp, flags, mode) },
        // SAFETY: the caller's arguments.
        2 => unsafe { real::openat(dirfd, rp, flags, mode) },
        // SAFETY: the caller's arguments.
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

twins! {
    fn __open_2 / __open64_2(path: *const c_char, flags: c_int) -> c_int, real = next {
        at!(libc::AT_FDCWD, path, -1, |p| open_ours(p, flags, 0), |rp| {
            next(rp, flags)
        })
    }
}
twins! {
    fn __openat_2 / __openat64_2(
        dirfd: c_int,
        path: *const c_char,
        flags: c_int,
    ) -> c_int, real = next {
        at!(dirfd, path, -1, |p| open_ours(p, flags, 0), |rp| {
            next(dirfd, rp, flags)
        })
    }
}

pub(super) const CREAT: c_int = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;

twins! {
    fn creat / creat64(path: *const c_char, mode: mode_t) -> c_int, real = next {
        at!(
            libc::AT_FDCWD,
            path,
            -1,
            |p| open_ours(p, CREAT, mode),
            |rp| next(rp, mode)
        )
    }
}

/// After a descriptor of `o` went away: record locks of this process released (POSIX: any
/// close does), and at the last descriptor the handle closed (its size published).
pub(super) fn release(o: Arc<Open>) -> R<()> {
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
    pub(super) fn eddy_shim_std_stream(fd: c_int);
    pub(super) fn eddy_shim_flush_std(fd: c_int);
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
pub(super) static PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

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
    let wrote = WROTE.load(Ordering::Relaxed);
    // Creates and unlinks queued under directory leases (decision 0075) go too.
    let leases = crate::state::connected();
    if guarded() || !(wrote || leases) {
        return;
    }
    // SAFETY: getpid cannot fail.
    if unsafe { libc::getpid() } != PID.load(Ordering::Relaxed) {
        return;
    }
    enter((), || {
        if wrote {
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
        }
        if leases {
            let _ = run(|c| async move {
                c.flush_leases().await;
                Ok(())
            });
        }
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
