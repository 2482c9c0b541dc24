//! Descriptor calls: dup, fcntl, locks.

use super::data::{cur_offset, size_of_open};
use super::namespace::real_result;
use super::open::{eddy_shim_flush_std, release, std_stream};
use crate::fds::Open;
use crate::state::{enter, guarded, run, set_errno, R};
use crate::{fds, real};
use eddy_client::{Errno, LockKind, LockRange, LockRequest};
use libc::{c_int, c_ulong};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// `newfd` now names what `oldfd` names (after the real dup); what `newfd` named is released.
pub(super) fn after_dup(oldfd: Option<Arc<Open>>, newfd: c_int) -> R<c_int> {
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

pub(super) unsafe fn dup2_common(
    fd: c_int,
    fd2: c_int,
    real_call: impl FnOnce() -> c_int,
) -> c_int {
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

pub(super) fn lock_kind(t: i16) -> R<LockKind> {
    match c_int::from(t) {
        libc::F_RDLCK => Ok(LockKind::Read),
        libc::F_WRLCK => Ok(LockKind::Write),
        libc::F_UNLCK => Ok(LockKind::Unlock),
        _ => Err(Errno::einval("bad l_type")),
    }
}

pub(super) fn lock_range(fd: c_int, o: &Open, fl: &libc::flock) -> R<LockRange> {
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

pub(super) fn lock_ours(fd: c_int, o: &Arc<Open>, cmd: c_int, arg: c_ulong) -> R<c_int> {
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

pub(super) fn fcntl_ours(fd: c_int, o: Arc<Open>, cmd: c_int, arg: c_ulong) -> R<c_int> {
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
                // Reopened where the old handle is now (a rename or an unlink through this
                // process moved it), and only then the old one closed: a file unlinked while
                // open lives on until its last handle is closed (decision 0061).
                match o.take_file() {
                    Some(old) => {
                        let path = old.path().to_string();
                        let flags = new & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
                        let creds = crate::state::creds();
                        let reopened =
                            run(move |c| async move { c.open(&path, flags, 0, creds).await });
                        if let Ok(f) = &reopened {
                            o.set_file(f.clone());
                        }
                        let closed = run(move |c| async move { c.close(&old).await });
                        reopened?;
                        closed?;
                    }
                    None => o.reset_file(),
                }
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
