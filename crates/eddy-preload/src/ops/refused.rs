//! mmap (as a copy), copy_file_range, sendfile and fallocate on Eddy descriptors: served
//! where Eddy can, else a clear errno.

use super::data::{check_data, read_ours};
use super::{errno, os_err, WROTE};
use crate::fds::Open;
use crate::state::{enter, guarded, run, set_errno, R};
use crate::{fds, real};
use eddy_client::Errno;
use libc::{c_int, c_uint, c_void, off64_t, size_t, ssize_t};
use std::sync::atomic::Ordering;

/// The bits of mmap's flags that hold the mapping's type (Linux's MAP_TYPE).
const MAP_TYPE: c_int = 0x0f;

/// Bytes of the file copied into a mapping per read.
const MAP_READ_BYTES: usize = 8 << 20;

/// mmap of an Eddy descriptor: an anonymous mapping holding a copy of the file's bytes from
/// `off` (zeros past its end). That is what a private mapping promises (MAP_PRIVATE: git's
/// packs and index, loaders, most readers), and what a read-only shared one is used for
/// (memmap2, Python's `mmap` with ACCESS_READ), except that the file's later changes do not
/// show in it. A writable shared mapping would have to carry its stores to the file and to
/// other processes' mappings, which a library cannot do: `ENODEV`, as for any file system
/// without mmap.
fn map_copy(
    o: &Open,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    off: off64_t,
) -> R<*mut c_void> {
    // The mapping's type is a field, not bits: MAP_SHARED_VALIDATE includes MAP_PRIVATE's bit.
    let kind = flags & MAP_TYPE;
    let shared = kind == libc::MAP_SHARED || kind == libc::MAP_SHARED_VALIDATE;
    if shared && prot & libc::PROT_WRITE != 0 {
        return Err(Errno::new(
            libc::ENODEV,
            format!(
                "{}: writable shared mappings of Eddy files are not supported",
                o.path
            ),
        ));
    }
    check_data(o).map_err(|e| Errno::new(libc::ENODEV, e.msg))?;
    if o.flags() & libc::O_ACCMODE == libc::O_WRONLY {
        return Err(Errno::new(
            libc::EACCES,
            format!("{} is not open for reading", o.path),
        ));
    }
    // SAFETY: sysconf cannot fail for _SC_PAGESIZE.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as i64;
    if len == 0 || off < 0 || off % page != 0 {
        return Err(Errno::einval("mmap: zero length or unaligned offset"));
    }
    let keep = flags & !MAP_TYPE;
    // SAFETY: an anonymous mapping where the caller asked (MAP_FIXED honoured).
    let map = unsafe {
        real::mmap64(
            addr,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            keep | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return Err(os_err("mmap (the copy of an Eddy file)"));
    }
    let fill = || -> R<()> {
        // SAFETY: the mapping just made, `len` bytes, read-write.
        let buf = unsafe { std::slice::from_raw_parts_mut(map.cast::<u8>(), len) };
        let mut done = 0;
        while done < len {
            let end = (done + MAP_READ_BYTES).min(len);
            let n = read_ours(-1, o, &mut buf[done..end], Some(off as u64 + done as u64))?;
            if n == 0 {
                break; // the end of the file: the rest stays zero
            }
            done += n;
        }
        // SAFETY: the same mapping, now with the protection asked for.
        if prot != libc::PROT_READ | libc::PROT_WRITE
            // SAFETY: the same mapping, now with the protection asked for.
            && unsafe { libc::mprotect(map, len, prot) } != 0
        {
            return Err(os_err("mprotect (the copy of an Eddy file)"));
        }
        Ok(())
    };
    if let Err(e) = fill() {
        // SAFETY: our own mapping, not yet handed out.
        unsafe { libc::munmap(map, len) };
        return Err(e);
    }
    Ok(map)
}

twins! {
    fn mmap / mmap64(
        addr: *mut c_void,
        len: size_t,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        off: off64_t,
    ) -> *mut c_void, real = next {
        if flags & libc::MAP_ANONYMOUS != 0 {
            return next(addr, len, prot, flags, fd, off);
        }
        on_fd!(
            fd,
            libc::MAP_FAILED,
            |o| map_copy(&o, addr, len, prot, flags, off),
            next(addr, len, prot, flags, fd, off)
        )
    }
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
twins! {
    fn sendfile / sendfile64(
        out_fd: c_int,
        in_fd: c_int,
        off: *mut off64_t,
        n: size_t,
    ) -> ssize_t, real = next {
        if !guarded() && (fds::is_ours(in_fd) || fds::is_ours(out_fd)) {
            set_errno(libc::EINVAL);
            return -1;
        }
        next(out_fd, in_fd, off, n)
    }
}
twins! {
    fn fallocate / fallocate64(
        fd: c_int,
        mode: c_int,
        off: off64_t,
        len: off64_t,
    ) -> c_int, real = next {
        on_fd!(
            fd,
            -1,
            |o| fallocate_ours(&o, mode, off, len),
            next(fd, mode, off, len)
        )
    }
}

/// fallocate: mode 0 and FALLOC_FL_KEEP_SIZE reserve real space on the daemons that hold
/// the range; other modes are EOPNOTSUPP.
pub(super) fn fallocate_ours(o: &Open, mode: c_int, off: off64_t, len: off64_t) -> R<c_int> {
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
pub(super) fn posix_fallocate_ours(o: &Open, off: off64_t, len: off64_t) -> R<c_int> {
    fallocate_ours(o, 0, off, len)
}
twins! {
    fn posix_fallocate / posix_fallocate64(
        fd: c_int,
        off: off64_t,
        len: off64_t,
    ) -> c_int, real = next {
        if guarded() {
            return next(fd, off, len);
        }
        match fds::lookup(fd) {
            None => next(fd, off, len),
            Some(o) => match enter(-1, || posix_fallocate_ours(&o, off, len)) {
                0 => 0,
                _ => errno(),
            },
        }
    }
}
