//! The real libc functions, found with `dlsym(RTLD_NEXT, name)` on first use and kept.
//! dlsym may allocate (malloc is not interposed here) and does not open files, so resolving
//! cannot recurse into this library.

use libc::{c_char, c_int, c_uint, c_ulong, c_void, mode_t, off64_t, size_t, ssize_t, DIR};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The address of the next definition of `name` (NUL-terminated), 0 if there is none.
pub fn resolve(slot: &AtomicUsize, name: &'static [u8]) -> usize {
    let p = slot.load(Ordering::Acquire);
    if p != 0 {
        return p;
    }
    // SAFETY: `name` is NUL-terminated; RTLD_NEXT is a valid pseudo-handle.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    slot.store(p, Ordering::Release);
    p
}

macro_rules! real {
    ($( $name:ident ( $($a:ident : $t:ty),* ) -> $r:ty = $fail:expr ; )*) => {$(
        /// The real function (ENOSYS if the C library has none).
        #[allow(clippy::missing_safety_doc, clippy::unused_unit, dead_code)]
        pub unsafe fn $name($($a: $t),*) -> $r {
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            let p = resolve(&SLOT, concat!(stringify!($name), "\0").as_bytes());
            if p == 0 {
                crate::state::set_errno(libc::ENOSYS);
                return $fail;
            }
            // SAFETY: the symbol of that name in the C library has this signature.
            let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { std::mem::transmute(p) };
            // SAFETY: `f` is that function, called with the caller's arguments.
            unsafe { f($($a),*) }
        }
    )*};
}

macro_rules! real_variadic {
    ($( $name:ident ( $($a:ident : $t:ty),* ; $v:ident : $vt:ty ) -> $r:ty = $fail:expr ; )*) => {$(
        /// The real (variadic) function, called with its optional argument.
        #[allow(clippy::missing_safety_doc, clippy::unused_unit, dead_code)]
        pub unsafe fn $name($($a: $t),*, $v: $vt) -> $r {
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            let p = resolve(&SLOT, concat!(stringify!($name), "\0").as_bytes());
            if p == 0 {
                crate::state::set_errno(libc::ENOSYS);
                return $fail;
            }
            // SAFETY: the symbol of that name in the C library has this signature.
            let f: unsafe extern "C" fn($($t),*, ...) -> $r = unsafe { std::mem::transmute(p) };
            // SAFETY: `f` is that function, called with the caller's arguments.
            unsafe { f($($a),*, $v) }
        }
    )*};
}

real_variadic! {
    open(path: *const c_char, flags: c_int; mode: c_uint) -> c_int = -1;
    open64(path: *const c_char, flags: c_int; mode: c_uint) -> c_int = -1;
    openat(dirfd: c_int, path: *const c_char, flags: c_int; mode: c_uint) -> c_int = -1;
    openat64(dirfd: c_int, path: *const c_char, flags: c_int; mode: c_uint) -> c_int = -1;
    fcntl(fd: c_int, cmd: c_int; arg: c_ulong) -> c_int = -1;
    fcntl64(fd: c_int, cmd: c_int; arg: c_ulong) -> c_int = -1;
}

real! {
    __open_2(path: *const c_char, flags: c_int) -> c_int = -1;
    __open64_2(path: *const c_char, flags: c_int) -> c_int = -1;
    __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int = -1;
    __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int = -1;
    creat(path: *const c_char, mode: mode_t) -> c_int = -1;
    creat64(path: *const c_char, mode: mode_t) -> c_int = -1;
    close(fd: c_int) -> c_int = -1;
    read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t = -1;
    write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t = -1;
    __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t = -1;
    pread(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t = -1;
    pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t = -1;
    __pread_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t, buflen: size_t) -> ssize_t = -1;
    __pread64_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t, buflen: size_t) -> ssize_t = -1;
    pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t = -1;
    pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t = -1;
    readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t = -1;
    writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t = -1;
    preadv(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off64_t) -> ssize_t = -1;
    preadv64(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off64_t) -> ssize_t = -1;
    pwritev(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off64_t) -> ssize_t = -1;
    pwritev64(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off64_t) -> ssize_t = -1;
    preadv2(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off64_t, flags: c_int) -> ssize_t = -1;
    pwritev2(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off64_t, flags: c_int) -> ssize_t = -1;
    lseek(fd: c_int, off: off64_t, whence: c_int) -> off64_t = -1;
    lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t = -1;
    stat(path: *const c_char, buf: *mut libc::stat) -> c_int = -1;
    stat64(path: *const c_char, buf: *mut libc::stat) -> c_int = -1;
    lstat(path: *const c_char, buf: *mut libc::stat) -> c_int = -1;
    lstat64(path: *const c_char, buf: *mut libc::stat) -> c_int = -1;
    fstat(fd: c_int, buf: *mut libc::stat) -> c_int = -1;
    fstat64(fd: c_int, buf: *mut libc::stat) -> c_int = -1;
    fstatat(dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int = -1;
    fstatat64(dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int = -1;
    __xstat(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int = -1;
    __xstat64(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int = -1;
    __lxstat(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int = -1;
    __lxstat64(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int = -1;
    __fxstat(ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int = -1;
    __fxstat64(ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int = -1;
    __fxstatat(ver: c_int, dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int = -1;
    __fxstatat64(ver: c_int, dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int = -1;
    statx(dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, buf: *mut libc::statx) -> c_int = -1;
    access(path: *const c_char, mode: c_int) -> c_int = -1;
    faccessat(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int = -1;
    eaccess(path: *const c_char, mode: c_int) -> c_int = -1;
    euidaccess(path: *const c_char, mode: c_int) -> c_int = -1;
    mkdir(path: *const c_char, mode: mode_t) -> c_int = -1;
    mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int = -1;
    rmdir(path: *const c_char) -> c_int = -1;
    unlink(path: *const c_char) -> c_int = -1;
    unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int = -1;
    rename(from: *const c_char, to: *const c_char) -> c_int = -1;
    renameat(fd1: c_int, from: *const c_char, fd2: c_int, to: *const c_char) -> c_int = -1;
    renameat2(fd1: c_int, from: *const c_char, fd2: c_int, to: *const c_char, flags: c_uint) -> c_int = -1;
    link(from: *const c_char, to: *const c_char) -> c_int = -1;
    linkat(fd1: c_int, from: *const c_char, fd2: c_int, to: *const c_char, flags: c_int) -> c_int = -1;
    truncate(path: *const c_char, len: off64_t) -> c_int = -1;
    truncate64(path: *const c_char, len: off64_t) -> c_int = -1;
    ftruncate(fd: c_int, len: off64_t) -> c_int = -1;
    ftruncate64(fd: c_int, len: off64_t) -> c_int = -1;
    fsync(fd: c_int) -> c_int = -1;
    fdatasync(fd: c_int) -> c_int = -1;
    posix_fadvise(fd: c_int, offset: off64_t, len: off64_t, advice: c_int) -> c_int = libc::ENOSYS;
    posix_fadvise64(fd: c_int, offset: off64_t, len: off64_t, advice: c_int) -> c_int = libc::ENOSYS;
    opendir(path: *const c_char) -> *mut DIR = std::ptr::null_mut();
    fdopendir(fd: c_int) -> *mut DIR = std::ptr::null_mut();
    readdir(d: *mut DIR) -> *mut libc::dirent = std::ptr::null_mut();
    readdir64(d: *mut DIR) -> *mut libc::dirent64 = std::ptr::null_mut();
    closedir(d: *mut DIR) -> c_int = -1;
    dirfd(d: *mut DIR) -> c_int = -1;
    rewinddir(d: *mut DIR) -> () = ();
    telldir(d: *mut DIR) -> libc::c_long = -1;
    seekdir(d: *mut DIR, pos: libc::c_long) -> () = ();
    getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t = -1;
    dup(fd: c_int) -> c_int = -1;
    dup2(fd: c_int, fd2: c_int) -> c_int = -1;
    dup3(fd: c_int, fd2: c_int, flags: c_int) -> c_int = -1;
    chdir(path: *const c_char) -> c_int = -1;
    fchdir(fd: c_int) -> c_int = -1;
    getcwd(buf: *mut c_char, size: size_t) -> *mut c_char = std::ptr::null_mut();
    __getcwd_chk(buf: *mut c_char, size: size_t, buflen: size_t) -> *mut c_char = std::ptr::null_mut();
    get_current_dir_name() -> *mut c_char = std::ptr::null_mut();
    chmod(path: *const c_char, mode: mode_t) -> c_int = -1;
    fchmod(fd: c_int, mode: mode_t) -> c_int = -1;
    fchmodat(dirfd: c_int, path: *const c_char, mode: mode_t, flags: c_int) -> c_int = -1;
    chown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int = -1;
    fchown(fd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int = -1;
    lchown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int = -1;
    fchownat(dirfd: c_int, path: *const c_char, uid: libc::uid_t, gid: libc::gid_t, flags: c_int) -> c_int = -1;
    utimensat(dirfd: c_int, path: *const c_char, times: *const libc::timespec, flags: c_int) -> c_int = -1;
    futimens(fd: c_int, times: *const libc::timespec) -> c_int = -1;
    utime(path: *const c_char, times: *const libc::utimbuf) -> c_int = -1;
    utimes(path: *const c_char, times: *const libc::timeval) -> c_int = -1;
    symlink(target: *const c_char, path: *const c_char) -> c_int = -1;
    symlinkat(target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int = -1;
    readlink(path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t = -1;
    readlinkat(dirfd: c_int, path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t = -1;
    __readlink_chk(path: *const c_char, buf: *mut c_char, n: size_t, buflen: size_t) -> ssize_t = -1;
    __readlinkat_chk(dirfd: c_int, path: *const c_char, buf: *mut c_char, n: size_t, buflen: size_t) -> ssize_t = -1;
    statfs(path: *const c_char, buf: *mut libc::statfs) -> c_int = -1;
    statfs64(path: *const c_char, buf: *mut libc::statfs) -> c_int = -1;
    fstatfs(fd: c_int, buf: *mut libc::statfs) -> c_int = -1;
    fstatfs64(fd: c_int, buf: *mut libc::statfs) -> c_int = -1;
    statvfs(path: *const c_char, buf: *mut libc::statvfs) -> c_int = -1;
    statvfs64(path: *const c_char, buf: *mut libc::statvfs) -> c_int = -1;
    fstatvfs(fd: c_int, buf: *mut libc::statvfs) -> c_int = -1;
    fstatvfs64(fd: c_int, buf: *mut libc::statvfs) -> c_int = -1;
    mmap(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off64_t) -> *mut c_void = libc::MAP_FAILED;
    mmap64(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off64_t) -> *mut c_void = libc::MAP_FAILED;
    copy_file_range(fd_in: c_int, off_in: *mut off64_t, fd_out: c_int, off_out: *mut off64_t, len: size_t, flags: c_uint) -> ssize_t = -1;
    sendfile(out_fd: c_int, in_fd: c_int, off: *mut off64_t, n: size_t) -> ssize_t = -1;
    sendfile64(out_fd: c_int, in_fd: c_int, off: *mut off64_t, n: size_t) -> ssize_t = -1;
    fallocate(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int = -1;
    fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int = -1;
    posix_fallocate(fd: c_int, off: off64_t, len: off64_t) -> c_int = libc::ENOSYS;
    posix_fallocate64(fd: c_int, off: off64_t, len: off64_t) -> c_int = libc::ENOSYS;
    getxattr(path: *const c_char, name: *const c_char, v: *mut c_void, n: size_t) -> ssize_t = -1;
    lgetxattr(path: *const c_char, name: *const c_char, v: *mut c_void, n: size_t) -> ssize_t = -1;
    fgetxattr(fd: c_int, name: *const c_char, v: *mut c_void, n: size_t) -> ssize_t = -1;
    listxattr(path: *const c_char, list: *mut c_char, n: size_t) -> ssize_t = -1;
    llistxattr(path: *const c_char, list: *mut c_char, n: size_t) -> ssize_t = -1;
    flistxattr(fd: c_int, list: *mut c_char, n: size_t) -> ssize_t = -1;
    setxattr(path: *const c_char, name: *const c_char, v: *const c_void, n: size_t, flags: c_int) -> c_int = -1;
    lsetxattr(path: *const c_char, name: *const c_char, v: *const c_void, n: size_t, flags: c_int) -> c_int = -1;
    fsetxattr(fd: c_int, name: *const c_char, v: *const c_void, n: size_t, flags: c_int) -> c_int = -1;
    removexattr(path: *const c_char, name: *const c_char) -> c_int = -1;
    lremovexattr(path: *const c_char, name: *const c_char) -> c_int = -1;
    fremovexattr(fd: c_int, name: *const c_char) -> c_int = -1;
    mknod(path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int = -1;
    mknodat(dirfd: c_int, path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int = -1;
    mkfifo(path: *const c_char, mode: mode_t) -> c_int = -1;
    mkfifoat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int = -1;
    umask(mask: mode_t) -> mode_t = 0o022;
    socket(domain: c_int, ty: c_int, proto: c_int) -> c_int = -1;
    epoll_create1(flags: c_int) -> c_int = -1;
    eventfd(init: c_uint, flags: c_int) -> c_int = -1;
    execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int = -1;
    execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int = -1;
    realpath(path: *const c_char, out: *mut c_char) -> *mut c_char = std::ptr::null_mut();
    mkostemps64(template: *mut c_char, suffix_len: c_int, flags: c_int) -> c_int = -1;
    mkdtemp(template: *mut c_char) -> *mut c_char = std::ptr::null_mut();
}
