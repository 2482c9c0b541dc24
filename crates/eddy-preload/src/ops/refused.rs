//! mmap, copy_file_range, sendfile and fallocate on Eddy descriptors: served where Eddy can,
//! else a clear errno.

#[allow(unused_imports)]
use super::*;

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
