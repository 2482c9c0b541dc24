//! read and write in all their forms, and lseek.

use super::stats::fstat_ours;
use super::{os_err, WROTE};
use crate::fds::Open;
use crate::state::{run_as_task, run_here, R};
use crate::{fds, real};
use eddy_client::{Errno, File};
use libc::{c_int, c_void, off64_t, size_t, ssize_t};
use std::sync::atomic::Ordering;

pub(super) fn check_data(o: &Open) -> R<()> {
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

pub(super) fn cur_offset(fd: c_int) -> R<u64> {
    // SAFETY: the reserved descriptor.
    let off = unsafe { real::lseek64(fd, 0, libc::SEEK_CUR) };
    if off < 0 {
        return Err(os_err("lseek"));
    }
    Ok(off as u64)
}

pub(super) fn set_offset(fd: c_int, off: u64) -> R<()> {
    // SAFETY: the reserved descriptor.
    if unsafe { real::lseek64(fd, off as i64, libc::SEEK_SET) } < 0 {
        return Err(os_err("lseek"));
    }
    Ok(())
}

/// Reads into `buf`: at `off`, or at the descriptor's offset (which then moves).
pub(super) fn read_ours(fd: c_int, o: &Open, buf: &mut [u8], off: Option<u64>) -> R<usize> {
    check_data(o)?;
    let f = o.file()?;
    let _held = off.is_none().then(|| o.io.lock());
    let pos = match off {
        Some(x) => x,
        None => cur_offset(fd)?,
    };
    let len = buf.len();
    // Into the caller's buffer on this thread, or through a copy as a task of the runtime.
    let (into, file) = (&mut *buf, &f);
    let here = run_here(|c| async move { c.pread_into(file, pos, into).await });
    let n = match here {
        Some(n) => n?,
        None => {
            let data = run_as_task(move |c| async move { c.pread(&f, pos, len).await })?;
            buf[..data.len()].copy_from_slice(&data);
            data.len()
        }
    };
    if off.is_none() {
        set_offset(fd, pos + n as u64)?;
    }
    Ok(n)
}

pub(super) fn write_ours(fd: c_int, o: &Open, data: &[u8], off: Option<u64>) -> R<usize> {
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
    // From the caller's buffer on this thread, or from a copy as a task of the runtime.
    let file = &f;
    let here = run_here(|c| async move { pwrite_at(&c, file, pos, data, sync, append).await });
    let (n, end) = match here {
        Some(r) => r?,
        None => {
            let data = data.to_vec();
            run_as_task(move |c| async move { pwrite_at(&c, &f, pos, &data, sync, append).await })?
        }
    };
    if off.is_none() {
        set_offset(fd, end)?;
    }
    Ok(n)
}

/// Writes `data` at `pos` (and syncs it, for O_SYNC); returns the bytes written and where the
/// descriptor's offset goes (the end of the file, for O_APPEND).
async fn pwrite_at(
    c: &eddy_client::Client,
    f: &File,
    pos: u64,
    data: &[u8],
    sync: bool,
    append: bool,
) -> R<(usize, u64)> {
    let n = c.pwrite(f, pos, data).await?;
    if sync {
        c.fsync(f).await?;
    }
    let end = if append {
        c.fstat(f).await?.size
    } else {
        pos + n as u64
    };
    Ok((n, end))
}

pub(super) unsafe fn slice_mut<'a>(buf: *mut c_void, n: size_t) -> &'a mut [u8] {
    if n == 0 || buf.is_null() {
        &mut []
    } else {
        // SAFETY: the caller's buffer of n bytes.
        unsafe { std::slice::from_raw_parts_mut(buf.cast(), n) }
    }
}

pub(super) unsafe fn slice<'a>(buf: *const c_void, n: size_t) -> &'a [u8] {
    if n == 0 || buf.is_null() {
        &[]
    } else {
        // SAFETY: the caller's buffer of n bytes.
        unsafe { std::slice::from_raw_parts(buf.cast(), n) }
    }
}

pub(super) fn offset(off: off64_t) -> R<Option<u64>> {
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
        |o| write_ours(fd, &o, slice(buf, n), None).map(|n| n as ssize_t),
        real::write(fd, buf, n)
    )
}
twins! {
    fn pread / pread64(
        fd: c_int,
        buf: *mut c_void,
        n: size_t,
        off: off64_t,
    ) -> ssize_t, real = next {
        on_fd!(
            fd,
            -1,
            |o| read_ours(fd, &o, slice_mut(buf, n), offset(off)?).map(|n| n as ssize_t),
            next(fd, buf, n, off)
        )
    }
}
twins! {
    fn __pread_chk / __pread64_chk(
        fd: c_int,
        buf: *mut c_void,
        n: size_t,
        off: off64_t,
        buflen: size_t,
    ) -> ssize_t, real = next {
        on_fd!(
            fd,
            -1,
            |o| read_ours(fd, &o, slice_mut(buf, n.min(buflen)), offset(off)?).map(|n| n as ssize_t),
            next(fd, buf, n, off, buflen)
        )
    }
}
twins! {
    fn pwrite / pwrite64(
        fd: c_int,
        buf: *const c_void,
        n: size_t,
        off: off64_t,
    ) -> ssize_t, real = next {
        on_fd!(
            fd,
            -1,
            |o| write_ours(fd, &o, slice(buf, n), offset(off)?).map(|n| n as ssize_t),
            next(fd, buf, n, off)
        )
    }
}

pub(super) unsafe fn iovecs<'a>(iov: *const libc::iovec, cnt: c_int) -> R<&'a [libc::iovec]> {
    if !(0..=1024).contains(&cnt) {
        return Err(Errno::einval("iovec count out of range"));
    }
    if cnt == 0 || iov.is_null() {
        return Ok(&[]);
    }
    // SAFETY: the caller's array of cnt iovecs.
    Ok(unsafe { std::slice::from_raw_parts(iov, cnt as usize) })
}

pub(super) fn readv_ours(fd: c_int, o: &Open, iov: &[libc::iovec], off: Option<u64>) -> R<ssize_t> {
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

pub(super) fn writev_ours(
    fd: c_int,
    o: &Open,
    iov: &[libc::iovec],
    off: Option<u64>,
) -> R<ssize_t> {
    let mut data = Vec::new();
    for v in iov {
        // SAFETY: the caller's buffer of iov_len bytes.
        data.extend_from_slice(unsafe { slice(v.iov_base, v.iov_len) });
    }
    Ok(write_ours(fd, o, &data, off)? as ssize_t)
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
twins! {
    fn preadv / preadv64(
        fd: c_int,
        iov: *const libc::iovec,
        cnt: c_int,
        off: off64_t,
    ) -> ssize_t, real = next {
        on_fd!(
            fd,
            -1,
            |o| readv_ours(fd, &o, iovecs(iov, cnt)?, offset(off)?),
            next(fd, iov, cnt, off)
        )
    }
}
twins! {
    fn pwritev / pwritev64(
        fd: c_int,
        iov: *const libc::iovec,
        cnt: c_int,
        off: off64_t,
    ) -> ssize_t, real = next {
        on_fd!(
            fd,
            -1,
            |o| writev_ours(fd, &o, iovecs(iov, cnt)?, offset(off)?),
            next(fd, iov, cnt, off)
        )
    }
}
pub(super) fn v2_offset(off: off64_t) -> R<Option<u64>> {
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

pub(super) fn size_of_open(o: &Open) -> R<u64> {
    Ok(fstat_ours(o)?.size)
}

pub(super) fn lseek_ours(fd: c_int, o: &Open, off: off64_t, whence: c_int) -> R<off64_t> {
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

twins! {
    fn lseek / lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t, real = next {
        on_fd!(
            fd,
            -1,
            |o| lseek_ours(fd, &o, off, whence),
            next(fd, off, whence)
        )
    }
}

/// `posix_fadvise` on a file of ours: the client's read-ahead and background fetch
/// (`eddy_client::Advice`). Answers 0 or an error number, as `posix_fadvise` does.
fn fadvise_ours(o: &Open, offset: off64_t, len: off64_t, advice: c_int) -> R<c_int> {
    check_data(o)?;
    let advice = eddy_client::Advice::from_posix(advice)?;
    let (Ok(offset), Ok(len)) = (u64::try_from(offset), u64::try_from(len)) else {
        return Err(Errno::einval("posix_fadvise: a negative offset or length"));
    };
    let f = o.file()?;
    crate::state::run(move |c| async move { c.advise(&f, offset, len, advice).await })?;
    Ok(0)
}

twins! {
    fn posix_fadvise / posix_fadvise64(
        fd: c_int,
        offset: off64_t,
        len: off64_t,
        advice: c_int,
    ) -> c_int, real = next {
        // `on_fd!` fails with -1 and errno; posix_fadvise answers the error number itself
        // (the real one never answers -1).
        match on_fd!(fd, -1, |o| fadvise_ours(&o, offset, len, advice), next(fd, offset, len, advice)) {
            -1 => super::errno(),
            r => r,
        }
    }
}
