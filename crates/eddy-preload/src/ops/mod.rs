//! The interposed functions, one module per family. Each checks the guard, then whether its
//! path or descriptor is Eddy's; if not, the real function is called at once. This module
//! holds what they share: the dispatch macros, `twins!` (a function and its 64-bit twin from
//! one definition), the path and errno helpers.
#![allow(clippy::missing_safety_doc)]

use crate::path::{resolve, Target};
use crate::state::{global, R};
use eddy_client::Errno;
use libc::{c_char, c_int};
use std::ffi::{CStr, CString};
use std::sync::atomic::AtomicBool;

/// Symlinks followed at most this many times (ELOOP beyond), as Linux.
const MAX_HOPS: usize = 40;

/// Whether this process wrote through an Eddy descriptor (sizes to publish at exit), or
/// unlinked or renamed a name (a file it holds open may live on under a hidden name until
/// its handles are closed, at exit at the latest: decision 0061).
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
        if $crate::state::guarded() {
            let $rp = path;
            return $real;
        }
        match $crate::ops::target($dirfd, path) {
            $crate::ops::T::Real => {
                let $rp = path;
                $real
            }
            $crate::ops::T::RealAt(c) => {
                let $rp = c.as_ptr();
                $real
            }
            $crate::ops::T::Err(e) => {
                $crate::state::set_errno(e);
                $fail
            }
            $crate::ops::T::Ours($p) => $crate::state::enter($fail, || $ours),
        }
    }};
}

/// Dispatches a descriptor call.
macro_rules! on_fd {
    ($fd:expr, $fail:expr, |$o:ident| $ours:expr, $real:expr) => {{
        if $crate::state::guarded() {
            return $real;
        }
        match $crate::fds::lookup($fd) {
            None => $real,
            Some($o) => $crate::state::enter($fail, || $ours),
        }
    }};
}

/// Defines an interposed function and its twin of the 64-bit file offset ABI (`stat` and
/// `stat64`, `pread` and `pread64`, `__open_2` and `__open64_2`, ...) from one definition:
/// both symbols are exported with the same signature and the same body. (On the 64-bit
/// targets this library is built for, `off_t` is `off64_t` and `struct stat` is `struct
/// stat64`, so the glibc twins differ only in name.) With `real = NAME`, NAME in the body is
/// the real function of the symbol being defined: `real::stat` in `stat`, `real::stat64` in
/// `stat64`.
macro_rules! twins {
    (
        fn $name:ident / $name64:ident ($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty,
        real = $next:ident $body:block
    ) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            let $next = $crate::real::$name;
            $body
        }
        #[no_mangle]
        pub unsafe extern "C" fn $name64($($arg: $ty),*) -> $ret {
            let $next = $crate::real::$name64;
            $body
        }
    };
    (fn $name:ident / $name64:ident ($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret $body
        #[no_mangle]
        pub unsafe extern "C" fn $name64($($arg: $ty),*) -> $ret $body
    };
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

mod access;
mod attrs;
mod cwd;
mod data;
mod descriptors;
mod dirs;
mod fsinfo;
mod internal;
mod lookup;
mod namespace;
mod open;
mod refused;
mod stats;
mod symlinks;
mod temp;
mod xattrs;

// What the library's start, fork handling and exit call (lib.rs, state.rs).
pub(crate) use cwd::adopt_cwd;
pub(crate) use open::{publish_all, reset_after_fork, set_pid, std_stream};
