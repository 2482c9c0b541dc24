//! access and its `at` forms.

use super::os_err;
use super::stats::{stat_path, Got};
use crate::real;
use crate::state::{creds, R};
use eddy_client::{Errno, FileKind};
use libc::{c_char, c_int};

pub(super) fn access_ours(p: String, mode: c_int, follow_links: bool) -> R<c_int> {
    let i = match stat_path(p, follow_links)? {
        Got::Inode(i) => i,
        Got::Real(c) => {
            // SAFETY: a NUL-terminated path.
            if unsafe { real::access(c.as_ptr(), mode) } < 0 {
                return Err(os_err("access"));
            }
            return Ok(0);
        }
    };
    if mode == libc::F_OK {
        return Ok(0);
    }
    let cr = creds();
    let bits = i.mode;
    let allowed = if cr.uid == 0 {
        let x = bits & 0o111 != 0 || i.kind == FileKind::Dir;
        (libc::R_OK | libc::W_OK) | if x { libc::X_OK } else { 0 }
    } else {
        let shift = if cr.uid == i.uid {
            6
        } else if cr.in_group(i.gid) {
            3
        } else {
            0
        };
        ((bits >> shift) & 7) as c_int
    };
    if mode & !allowed & 7 != 0 {
        return Err(Errno::new(libc::EACCES, "permission denied"));
    }
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| access_ours(p, mode, true),
        |rp| real::access(rp, mode)
    )
}
#[no_mangle]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| access_ours(p, mode, true),
        |rp| real::eaccess(rp, mode)
    )
}
#[no_mangle]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    at!(
        libc::AT_FDCWD,
        path,
        -1,
        |p| access_ours(p, mode, true),
        |rp| real::euidaccess(rp, mode)
    )
}
#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    let follow_links = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    at!(
        dirfd,
        path,
        -1,
        |p| access_ours(p, mode, follow_links),
        |rp| real::faccessat(dirfd, rp, mode, flags)
    )
}
