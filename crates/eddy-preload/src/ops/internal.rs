//! The library's own descriptors (its sockets, epoll and eventfd), moved out of the program's way.

use crate::state::guarded;
use crate::{fds, real};
use libc::{c_int, c_uint, c_ulong};

/// Descriptors the library's runtime makes (epoll, eventfd, sockets) move to high numbers,
/// out of the way of programs that dup2 onto small ones (a shell's `exec 3>file`).
pub(super) fn relocate(fd: c_int) -> c_int {
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
