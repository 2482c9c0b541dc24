//! Directories: opendir, readdir, getdents64 and friends.

use super::data::slice_mut;
use super::open::{close, open_ours};
use crate::fds::Open;
use crate::state::{enter, guarded, R};
use crate::{fds, real};
use eddy_client::Errno;
use libc::{c_char, c_int, c_long, c_void, size_t, ssize_t};
use std::sync::atomic::{AtomicUsize, Ordering};

/// What an Eddy `DIR *` points to.
pub(super) struct EDir {
    fd: c_int,
    ent: libc::dirent64,
}

pub(super) static DIRS: parking_lot::Mutex<Vec<usize>> = parking_lot::const_mutex(Vec::new());
pub(super) static NDIRS: AtomicUsize = AtomicUsize::new(0);

pub(super) fn our_dir(d: *mut libc::DIR) -> Option<*mut EDir> {
    if d.is_null() || NDIRS.load(Ordering::Acquire) == 0 {
        return None;
    }
    DIRS.lock().contains(&(d as usize)).then_some(d.cast())
}

pub(super) fn make_dir(fd: c_int) -> R<*mut libc::DIR> {
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
pub(super) fn next_entry(d: *mut EDir) -> R<*mut libc::dirent64> {
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

pub(super) fn getdents_ours(o: &Open, buf: *mut c_void, n: size_t) -> R<ssize_t> {
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
