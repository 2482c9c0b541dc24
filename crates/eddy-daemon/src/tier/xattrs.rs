//! Extended attributes to and from the backend (decision 0029): read with a backend entry
//! when it is imported, written through by set and remove on a linked entry, and made equal
//! to the entry's at stage-out. Only regular files and directories carry them to and from
//! the backend (those of symlinks and special files stay in Eddy); every call goes through a
//! descriptor opened with `O_NOFOLLOW`, so a symlink swapped in for the entry in the backend
//! is never followed. Names Eddy does not store (`system.*`, other namespaces) are left
//! alone, and what passes Eddy's bounds (a value over `XATTR_SIZE_MAX`, more than
//! `XATTR_TOTAL_MAX` in all) is not imported and is logged.

use eddy_proto::{FileKind, Xattr, XATTR_NAME_MAX, XATTR_SIZE_MAX, XATTR_TOTAL_MAX};
use std::ffi::CString;
use std::io::{Error, ErrorKind};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// Namespaces Eddy stores (as `meta::xattr`).
const NAMESPACES: [&str; 3] = ["user.", "trusted.", "security."];

fn stored_name(name: &str) -> bool {
    name.len() <= XATTR_NAME_MAX
        && NAMESPACES
            .iter()
            .any(|ns| name.starts_with(ns) && name.len() > ns.len())
}

fn carried(kind: FileKind) -> bool {
    matches!(kind, FileKind::File | FileKind::Dir)
}

/// Opens a backend file or directory for its attributes, never following a symlink and never
/// blocking; `None` if it does not exist or is no longer a file or directory.
fn open_entry(p: &Path) -> std::io::Result<Option<OwnedFd>> {
    use std::os::unix::ffi::OsStrExt;
    let Some(reached) = crate::backend::reach_existing(p)? else {
        return Ok(None);
    };
    let p = reached.path();
    let c =
        CString::new(p.as_os_str().as_bytes()).map_err(|_| Error::from(ErrorKind::InvalidInput))?;
    let flags =
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    // SAFETY: `c` is a valid NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    if fd < 0 {
        let e = Error::last_os_error();
        return match e.raw_os_error() {
            // ELOOP: a symlink now stands there.
            Some(libc::ENOENT) | Some(libc::ELOOP) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an all-zero stat is a valid buffer for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` is a valid buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(Error::last_os_error());
    }
    let fmt = st.st_mode & libc::S_IFMT;
    Ok((fmt == libc::S_IFREG || fmt == libc::S_IFDIR).then_some(fd))
}

/// The names of the attributes of an open backend entry.
fn list(fd: &impl AsRawFd) -> std::io::Result<Vec<String>> {
    loop {
        // SAFETY: a null buffer of size 0 asks for the size.
        let size = unsafe { libc::flistxattr(fd.as_raw_fd(), std::ptr::null_mut(), 0) };
        if size < 0 {
            return Err(Error::last_os_error());
        }
        let mut buf = vec![0u8; size as usize];
        // SAFETY: `buf` has room for `buf.len()` bytes.
        let got = unsafe { libc::flistxattr(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if got < 0 {
            let e = Error::last_os_error();
            if e.raw_os_error() == Some(libc::ERANGE) {
                continue; // grew meanwhile
            }
            return Err(e);
        }
        buf.truncate(got as usize);
        return Ok(buf
            .split(|b| *b == 0)
            .filter(|n| !n.is_empty())
            .filter_map(|n| std::str::from_utf8(n).ok().map(str::to_string))
            .collect());
    }
}

/// The value of one attribute of an open backend entry; `None` if it is gone or larger than
/// Eddy holds.
fn get(fd: &impl AsRawFd, name: &str) -> std::io::Result<Option<Vec<u8>>> {
    let c = CString::new(name).map_err(|_| Error::from(ErrorKind::InvalidInput))?;
    let mut buf = vec![0u8; XATTR_SIZE_MAX];
    // SAFETY: `buf` has room for `buf.len()` bytes; `c` is NUL-terminated.
    let got = unsafe {
        libc::fgetxattr(
            fd.as_raw_fd(),
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if got < 0 {
        let e = Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENODATA) | Some(libc::ERANGE) | Some(libc::E2BIG) => Ok(None),
            _ => Err(e),
        };
    }
    buf.truncate(got as usize);
    Ok(Some(buf))
}

/// The attributes of the backend entry at `p` that Eddy holds, sorted by name (as the
/// record keeps them). Those past Eddy's bounds are left out and logged; a backend that has
/// no attributes (ENOTSUP) gives none, and one that cannot be read (an entry the daemon may
/// stat but not open) is imported without them, logged: the entry itself is still seen.
pub(super) fn read(p: &Path, kind: FileKind) -> Vec<Xattr> {
    match read_all(p, kind) {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!("backend {}: attributes not imported: {e}", p.display());
            Vec::new()
        }
    }
}

fn read_all(p: &Path, kind: FileKind) -> std::io::Result<Vec<Xattr>> {
    if !carried(kind) {
        return Ok(Vec::new());
    }
    let Some(fd) = open_entry(p)? else {
        return Ok(Vec::new());
    };
    let mut names = match list(&fd) {
        Ok(n) => n,
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    names.retain(|n| stored_name(n));
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    let mut total = 0usize;
    for name in names {
        let Some(value) = get(&fd, &name)? else {
            tracing::warn!(
                "backend {}: attribute {name:?} not imported: gone, or its value is over {XATTR_SIZE_MAX} bytes",
                p.display()
            );
            continue;
        };
        if total + name.len() + value.len() > XATTR_TOTAL_MAX {
            tracing::warn!(
                "backend {}: attribute {name:?} not imported: the attributes of one entry are at most {XATTR_TOTAL_MAX} bytes",
                p.display()
            );
            continue;
        }
        total += name.len() + value.len();
        out.push(Xattr { name, value });
    }
    Ok(out)
}

/// Sets (`Some`) or removes (`None`) one attribute of an open backend entry; removing one
/// that is not there is fine.
fn put(fd: &impl AsRawFd, name: &str, value: Option<&[u8]>) -> std::io::Result<()> {
    let c = CString::new(name).map_err(|_| Error::from(ErrorKind::InvalidInput))?;
    // SAFETY: `c` is NUL-terminated and `v` is valid for `v.len()` bytes.
    let r = unsafe {
        match value {
            Some(v) => libc::fsetxattr(fd.as_raw_fd(), c.as_ptr(), v.as_ptr().cast(), v.len(), 0),
            None => libc::fremovexattr(fd.as_raw_fd(), c.as_ptr()),
        }
    };
    if r != 0 {
        let e = Error::last_os_error();
        if value.is_none() && e.raw_os_error() == Some(libc::ENODATA) {
            return Ok(());
        }
        return Err(e);
    }
    Ok(())
}

/// Write-through of a set or removal of one attribute of the linked entry whose backend copy
/// is `p`: nothing if that copy does not exist yet (stage-out sets them all) or the entry is
/// not a file or directory.
pub(super) fn write_through(
    p: &Path,
    kind: FileKind,
    name: &str,
    value: Option<&[u8]>,
) -> std::io::Result<()> {
    if !carried(kind) {
        return Ok(());
    }
    match open_entry(p)? {
        Some(fd) => put(&fd, name, value),
        None => Ok(()),
    }
}

/// At stage-out: the backend file `fd` (at `p`) gets the entry's attributes, and loses the
/// `user.*` ones the entry no longer has. A `trusted.*` or `security.*` attribute the
/// backend refuses to a daemon that is not root (EPERM) stays in Eddy only, logged.
pub(super) fn finalize(fd: &impl AsRawFd, p: &Path, xattrs: &[Xattr]) -> std::io::Result<()> {
    let present = match list(fd) {
        Ok(n) => n,
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) && xattrs.is_empty() => return Ok(()),
        Err(e) => return Err(e),
    };
    for name in present.iter().filter(|n| n.starts_with("user.")) {
        if !xattrs.iter().any(|x| &x.name == name) {
            put(fd, name, None)?;
        }
    }
    for x in xattrs {
        match put(fd, &x.name, Some(&x.value)) {
            Err(e) if e.raw_os_error() == Some(libc::EPERM) && !x.name.starts_with("user.") => {
                tracing::warn!(
                    "backend {}: attribute {:?} kept in Eddy only: {e}",
                    p.display(),
                    x.name
                );
            }
            other => other?,
        }
    }
    Ok(())
}
