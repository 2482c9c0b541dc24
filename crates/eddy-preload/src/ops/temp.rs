//! mkstemp and its family, and mkdtemp. glibc makes their files with its internal `open`,
//! which this library does not see; under the prefix they are made here, as glibc would:
//! the six X's before the suffix become random letters and digits, tried again while the name
//! exists.

use super::namespace::mkdir_ours;
use super::open::open_ours;
use super::os_err;
use crate::real;
use crate::state::R;
use eddy_client::Errno;
use libc::{c_char, c_int};
use std::ffi::CStr;

const LETTERS: &[u8; 62] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
/// Names tried before EEXIST (glibc tries 62^3).
const TRIES: u32 = 238_328;

/// Makes a temporary entry from `template` (its X's replaced in place) with `make`, which
/// is given the Eddy path of a candidate name and fails with EEXIST when it is taken.
///
/// # Safety
/// `template` is the caller's NUL-terminated, writable template.
unsafe fn make_temp<T>(
    p: String,
    template: *mut c_char,
    suffix_len: c_int,
    make: impl Fn(String) -> R<T>,
) -> R<T> {
    // SAFETY: the caller's NUL-terminated string.
    let len = unsafe { CStr::from_ptr(template) }.to_bytes().len();
    let suffix = usize::try_from(suffix_len).map_err(|_| Errno::einval("negative suffix"))?;
    let bad = || Errno::einval(format!("{p}: the template does not end in XXXXXX"));
    let start = len.checked_sub(suffix + 6).ok_or_else(bad)?;
    // SAFETY: `len` bytes of the caller's template.
    let tmpl = unsafe { std::slice::from_raw_parts_mut(template.cast::<u8>(), len) };
    if tmpl[start..start + 6] != *b"XXXXXX" {
        return Err(bad());
    }
    // The X's are in the last component, which the Eddy path ends with as well.
    let at = p.len().checked_sub(suffix + 6).ok_or_else(bad)?;
    if p.as_bytes()[at..] != tmpl[start..] {
        return Err(bad()); // a suffix that path resolution rewrote ("//", "/./")
    }
    let mut path = p.into_bytes();
    for _ in 0..TRIES {
        let mut random = [0u8; 6];
        // SAFETY: a buffer of 6 bytes.
        if unsafe { libc::getrandom(random.as_mut_ptr().cast(), 6, 0) } != 6 {
            return Err(os_err("getrandom"));
        }
        for (i, r) in random.iter().enumerate() {
            let c = LETTERS[usize::from(*r) % LETTERS.len()];
            tmpl[start + i] = c;
            path[at + i] = c;
        }
        let name = String::from_utf8(path.clone()).map_err(|_| Errno::einval("not UTF-8"))?;
        match make(name) {
            Err(e) if e.errno == libc::EEXIST => continue,
            other => return other,
        }
    }
    Err(Errno::new(libc::EEXIST, "no free temporary name"))
}

/// mkostemps64 and everything built on it.
unsafe fn mkostemps_any(template: *mut c_char, suffix_len: c_int, flags: c_int) -> c_int {
    let flags = flags & !libc::O_ACCMODE;
    at!(
        libc::AT_FDCWD,
        template.cast_const(),
        -1,
        // SAFETY: the caller's template, writable, NUL-terminated.
        |p| unsafe {
            make_temp(p, template, suffix_len, |q| {
                open_ours(
                    q,
                    libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | flags,
                    0o600,
                )
            })
        },
        // SAFETY: the caller's template, and the real path of it.
        |rp| unsafe {
            on_real_path(template, rp, suffix_len, |t| {
                real::mkostemps64(t, suffix_len, flags)
            })
        }
    )
}

/// Runs the real function on `rp`, the real path `template` resolves to: the template itself,
/// or (a link under the prefix leading out of it) another path, whose generated name is then
/// copied back into the caller's template.
///
/// # Safety
/// `template` is the caller's writable template; `rp` a NUL-terminated path.
unsafe fn on_real_path<T>(
    template: *mut c_char,
    rp: *const c_char,
    suffix_len: c_int,
    real_fn: impl FnOnce(*mut c_char) -> T,
) -> T {
    if rp == template.cast_const() {
        return real_fn(template);
    }
    // SAFETY: NUL-terminated strings.
    let mut resolved = unsafe { CStr::from_ptr(rp) }.to_bytes_with_nul().to_vec();
    let r = real_fn(resolved.as_mut_ptr().cast());
    // SAFETY: as above; the tails are the last component's X's and suffix in both.
    let len = unsafe { CStr::from_ptr(template) }.to_bytes().len();
    let tail = usize::try_from(suffix_len).unwrap_or(0) + 6;
    let rlen = resolved.len() - 1;
    if len >= tail && rlen >= tail {
        // SAFETY: `tail` bytes inside both strings.
        unsafe {
            std::ptr::copy_nonoverlapping(
                resolved[rlen - tail..].as_ptr(),
                template.cast::<u8>().add(len - tail),
                tail,
            )
        };
    }
    r
}

twins! {
    fn mkstemp / mkstemp64(template: *mut c_char) -> c_int {
        mkostemps_any(template, 0, 0)
    }
}

twins! {
    fn mkostemp / mkostemp64(template: *mut c_char, flags: c_int) -> c_int {
        mkostemps_any(template, 0, flags)
    }
}

twins! {
    fn mkstemps / mkstemps64(template: *mut c_char, suffix_len: c_int) -> c_int {
        mkostemps_any(template, suffix_len, 0)
    }
}

twins! {
    fn mkostemps / mkostemps64(template: *mut c_char, suffix_len: c_int, flags: c_int) -> c_int {
        mkostemps_any(template, suffix_len, flags)
    }
}

#[no_mangle]
pub unsafe extern "C" fn mkdtemp(template: *mut c_char) -> *mut c_char {
    at!(
        libc::AT_FDCWD,
        template.cast_const(),
        std::ptr::null_mut(),
        // SAFETY: the caller's template, writable, NUL-terminated.
        |p| unsafe { make_temp(p, template, 0, |q| mkdir_ours(q, 0o700)).map(|_| template) },
        // SAFETY: the caller's template, and the real path of it.
        |rp| unsafe {
            let made = on_real_path(template, rp, 0, |t| real::mkdtemp(t));
            if made.is_null() {
                made
            } else {
                template
            }
        }
    )
}
