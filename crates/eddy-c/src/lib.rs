//! libeddy: Eddy for programs in C (and anything that calls C: Fortran, Julia, ...), without
//! a kernel mount or an interposed libc. A stable C ABI (`include/eddy.h`, generated from
//! this crate by cbindgen) over the one client core, `eddy_client::Client`, the façade the
//! mount, the preload library and the tools use: no logic of the file system is copied here,
//! only the translation between C and the client (decision 0066).
//!
//! Every object a C program holds is an opaque 64-bit handle (a slot number and the slot's
//! generation) into one table (`handles`), never a pointer: a closed or double-closed handle,
//! or a number that was never a handle, is EBADF, not a use of freed memory. Every call
//! returns 0 (or a count) or a negative errno, and leaves the message with its context for
//! `eddy_last_error()` on the calling thread; a panic inside is caught and becomes EIO.
//!
//! Calls run on the caller's thread, which drives the client's runtime while it waits (the
//! driver of decision 0052, as in the preload library); several threads may use one
//! connection and its files at once. A call waits at most the client's deadlines
//! (`rpc_timeout_ms` per request, default 10 s; a blocking lock and `eddy_batch_wait` as long
//! as asked).

#![allow(non_camel_case_types)]

mod batch;
mod handles;
mod posix;
mod run;
mod transfer;

pub use batch::*;
pub use posix::*;
pub use run::{eddy_connect, eddy_disconnect};
pub use transfer::*;

use eddy_client::Errno;
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A connection to a deployment (`eddy_connect`); 0 is never a valid handle.
pub type eddy_conn_t = u64;
/// An open file (`eddy_open`); 0 is never a valid handle.
pub type eddy_file_t = u64;
/// A submitted batch of operations (`eddy_batch_submit`); 0 is never a valid handle.
pub type eddy_batch_t = u64;

/// The version of this interface: calls are only ever added while it stays the same.
pub const EDDY_API_VERSION: u32 = 1;

thread_local! {
    /// The message of the last failed call on this thread.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

pub(crate) type R<T> = Result<T, Errno>;

fn set_last_error(msg: &str) {
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|l| *l.borrow_mut() = c);
}

/// Runs `f` as a call of the library: a panic is caught (EIO), an error becomes its negative
/// errno with its message kept for `eddy_last_error`, and `what` names the call in it.
pub(crate) fn call<T: Into<i64>>(what: &str, f: impl FnOnce() -> R<T>) -> i64 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v.into(),
        Ok(Err(e)) => {
            set_last_error(&format!("{what}: {}", e.msg));
            -i64::from(if e.errno > 0 { e.errno } else { libc::EIO })
        }
        Err(_) => {
            set_last_error(&format!("{what}: internal error (a panic, caught)"));
            -i64::from(libc::EIO)
        }
    }
}

/// `call` for the calls that return an `int`.
pub(crate) fn call_int(what: &str, f: impl FnOnce() -> R<i32>) -> i32 {
    let v = call(what, f);
    i32::try_from(v).unwrap_or(-libc::EIO)
}

/// A C string argument as UTF-8: NULL is EFAULT, bytes that are not UTF-8 are EINVAL.
///
/// # Safety
/// `p` is NULL or points at a NUL-terminated string.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char, name: &str) -> R<&'a str> {
    if p.is_null() {
        return Err(Errno::new(libc::EFAULT, format!("{name} is NULL")));
    }
    // SAFETY: the caller's promise.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map_err(|_| Errno::einval(format!("{name} is not UTF-8: {}", c.to_string_lossy())))
}

/// Writes `v` through `out`, which must not be NULL.
///
/// # Safety
/// `out` is NULL or points at writable memory for a `T`.
pub(crate) unsafe fn put<T>(out: *mut T, v: T, name: &str) -> R<()> {
    if out.is_null() {
        return Err(Errno::new(libc::EFAULT, format!("{name} is NULL")));
    }
    // SAFETY: the caller's promise.
    unsafe { out.write(v) };
    Ok(())
}

/// The message of the last call that failed on this thread, with its context (which call,
/// which path, what the daemons said), or "" when none has. The string stays valid until the
/// next call of the library on this thread. Never NULL; never blocks.
#[no_mangle]
pub extern "C" fn eddy_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|l| l.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// `EDDY_API_VERSION` of the library loaded (which may be newer than the header).
#[no_mangle]
pub extern "C" fn eddy_api_version() -> u32 {
    EDDY_API_VERSION
}
