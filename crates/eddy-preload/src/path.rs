//! Which paths are Eddy's: an absolute path under the prefix, or a relative one while the
//! process-local working directory (or the directory descriptor given) is under it.

use crate::fds;
use crate::state::{settings, CWD, R};
use eddy_client::Errno;
use libc::{c_char, c_int};
use std::ffi::{CStr, CString};

pub enum Target {
    /// Not Eddy's: the real function, with the caller's arguments.
    Real,
    /// Not Eddy's, but resolved here (a relative path from an Eddy directory leading out of
    /// the prefix): the real function with this absolute path.
    RealAt(CString),
    /// An Eddy path ("/" is the prefix itself).
    Ours(String),
}

/// Lexical normalisation of an absolute path: "." and ".." and repeated slashes resolved.
fn normalize(abs: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in abs.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut out = String::with_capacity(abs.len());
    for p in parts {
        out.push('/');
        out.push_str(p);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// An absolute real path, normalised, as an Eddy target or a real one.
fn classify(abs: &str, prefix: &str) -> R<Target> {
    let n = normalize(abs);
    match under(n.as_bytes(), prefix.as_bytes()) {
        Some(rest) => Ok(Target::Ours(eddy_path(rest)?)),
        None => Ok(Target::RealAt(
            CString::new(n).map_err(|_| Errno::einval("path holds a NUL byte"))?,
        )),
    }
}

/// The part of `path` after `prefix` when `path` is `prefix` or under it.
fn under<'a>(path: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    if !path.starts_with(prefix) {
        return None;
    }
    let rest = &path[prefix.len()..];
    (rest.is_empty() || rest[0] == b'/').then_some(rest)
}

fn eddy_path(rest: &[u8]) -> R<String> {
    let s = std::str::from_utf8(rest).map_err(|_| Errno::einval("Eddy paths must be UTF-8"))?;
    Ok(if s.is_empty() {
        "/".to_string()
    } else {
        s.to_string()
    })
}

/// Where `path` (relative to `dirfd`, or to the working directory with AT_FDCWD) lies.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
pub unsafe fn resolve(dirfd: c_int, path: *const c_char) -> R<Target> {
    let Some(s) = settings() else {
        return Ok(Target::Real);
    };
    if path.is_null() {
        return Ok(Target::Real);
    }
    // SAFETY: the caller's NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    if bytes.first() == Some(&b'/') {
        if under(bytes, s.prefix.as_bytes()).is_none() {
            // "/tmp/../eddy/x" is Eddy's too, as "../eddy/x" from /tmp is; any other path
            // outside the prefix goes to the real function as the caller gave it.
            let dotdot = bytes.windows(3).any(|w| w == b"/..");
            if !dotdot {
                return Ok(Target::Real);
            }
            let Ok(abs) = std::str::from_utf8(bytes) else {
                return Ok(Target::Real);
            };
            return ours_or_real(abs, &s.prefix);
        }
        let abs =
            std::str::from_utf8(bytes).map_err(|_| Errno::einval("Eddy paths must be UTF-8"))?;
        return classify(abs, &s.prefix);
    }
    if bytes.is_empty() {
        return Ok(Target::Real);
    }
    let base = if dirfd == libc::AT_FDCWD {
        match CWD.read().as_ref() {
            Some(c) => c.clone(),
            None => return from_real_dir(None, bytes, &s.prefix),
        }
    } else {
        match fds::lookup(dirfd) {
            Some(o) => o.path.clone(),
            None => return from_real_dir(Some(dirfd), bytes, &s.prefix),
        }
    };
    let rel = std::str::from_utf8(bytes).map_err(|_| Errno::einval("Eddy paths must be UTF-8"))?;
    let abs = format!(
        "{}{}/{}",
        s.prefix,
        if base == "/" { "" } else { &base },
        rel
    );
    classify(&abs, &s.prefix)
}

/// A relative path from a real directory (`dirfd`, or the real working directory) that may
/// lead into the prefix: "eddy/x" from "/", or a walk one component at a time by `openat`
/// and `fstatat` from a descriptor of "/" (rsync does this). Only a path whose first
/// component (after "./") names a component of the prefix, or is "..", costs a look at the
/// directory's own path; every other one is the real function's at once.
fn from_real_dir(dirfd: Option<c_int>, rel: &[u8], prefix: &str) -> R<Target> {
    let mut rest = rel;
    while let Some(r) = rest.strip_prefix(b"./") {
        rest = r;
    }
    let first = rest.split(|&b| b == b'/').next().unwrap_or_default();
    let may_enter = first == b".."
        || prefix
            .split('/')
            .any(|c| !c.is_empty() && c.as_bytes() == first);
    if !may_enter {
        return Ok(Target::Real);
    }
    let Some(dir) = real_dir_path(dirfd) else {
        return Ok(Target::Real);
    };
    let Ok(rel) = std::str::from_utf8(rel) else {
        return Ok(Target::Real);
    };
    ours_or_real(&format!("{dir}/{rel}"), prefix)
}

/// An absolute path that reaches the prefix only once normalised: Eddy's, or else the real
/// function's with the caller's own arguments.
fn ours_or_real(abs: &str, prefix: &str) -> R<Target> {
    let n = normalize(abs);
    match under(n.as_bytes(), prefix.as_bytes()) {
        Some(inside) => Ok(Target::Ours(eddy_path(inside)?)),
        None => Ok(Target::Real),
    }
}

/// The absolute path of a real directory: `dirfd`'s (through /proc), or the working
/// directory's; `None` when it has none (deleted, not a path).
fn real_dir_path(dirfd: Option<c_int>) -> Option<String> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    let len = match dirfd {
        Some(fd) => {
            let link = CString::new(format!("/proc/self/fd/{fd}")).ok()?;
            // SAFETY: a NUL-terminated path and a buffer of that size.
            let n = unsafe {
                crate::real::readlink(link.as_ptr(), buf.as_mut_ptr().cast(), buf.len() - 1)
            };
            usize::try_from(n).ok()?
        }
        None => {
            // SAFETY: a buffer of that size.
            let p = unsafe { crate::real::getcwd(buf.as_mut_ptr().cast(), buf.len()) };
            if p.is_null() {
                return None;
            }
            buf.iter().position(|&b| b == 0)?
        }
    };
    buf.truncate(len);
    let path = String::from_utf8(buf).ok()?;
    path.starts_with('/')
        .then_some(path)
        .filter(|p| !p.ends_with(" (deleted)"))
}

/// An Eddy path as the program sees it (prefix prepended).
pub fn outside(p: &str) -> String {
    let prefix = settings().map(|s| s.prefix.as_str()).unwrap_or("");
    if p == "/" {
        prefix.to_string()
    } else {
        format!("{prefix}{p}")
    }
}

/// A symlink's target, read from Eddy path `link`, as an absolute real path (a relative
/// target is relative to the link's directory; an absolute one is a real path, as on a mount).
pub fn link_target(link: &str, target: &str) -> R<Target> {
    let s = settings().ok_or_else(|| Errno::einval("inactive"))?;
    let abs = if target.starts_with('/') {
        target.to_string()
    } else {
        let dir = link.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        format!("{}{}/{}", s.prefix, dir, target)
    };
    classify(&abs, &s.prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(t: R<Target>) -> Option<String> {
        match t.expect("classify") {
            Target::Ours(p) => Some(p),
            _ => None,
        }
    }

    #[test]
    fn normalisation_is_lexical() {
        assert_eq!(normalize("/a//b/./c/../d/"), "/a/b/d");
        assert_eq!(normalize("/../.."), "/");
        assert_eq!(normalize("/"), "/");
    }

    #[test]
    fn the_prefix_is_a_whole_component() {
        assert_eq!(under(b"/eddy", b"/eddy"), Some(&b""[..]));
        assert_eq!(under(b"/eddy/x", b"/eddy"), Some(&b"/x"[..]));
        assert_eq!(under(b"/eddyx", b"/eddy"), None);
        assert_eq!(under(b"/tmp/eddy", b"/eddy"), None);
    }

    #[test]
    fn relative_paths_from_real_directories_into_the_prefix_are_ours() {
        let open = |p: &str| {
            let c = CString::new(p).unwrap();
            // SAFETY: a NUL-terminated path.
            let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY) };
            assert!(fd >= 0, "open {p}");
            fd
        };
        let (root, tmp) = (open("/"), open("/tmp"));
        let of = |fd, rel: &str| ours(from_real_dir(Some(fd), rel.as_bytes(), "/eddy"));
        assert_eq!(of(root, "eddy/x/y").as_deref(), Some("/x/y"));
        assert_eq!(of(root, "./eddy").as_deref(), Some("/"));
        assert_eq!(of(tmp, "../eddy/z").as_deref(), Some("/z"));
        // Not into the prefix: the real function with the caller's arguments.
        assert_eq!(of(root, "etc/hostname"), None);
        assert_eq!(of(tmp, "eddy/x"), None);
        assert_eq!(of(tmp, "../etc"), None);
        // SAFETY: our own descriptors.
        unsafe {
            libc::close(root);
            libc::close(tmp);
        }
    }

    #[test]
    fn paths_leaving_the_prefix_are_real() {
        assert_eq!(
            ours(classify("/eddy/a/../b", "/eddy")).as_deref(),
            Some("/b")
        );
        assert_eq!(ours(classify("/eddy", "/eddy")).as_deref(), Some("/"));
        assert_eq!(ours(classify("/eddy/..", "/eddy")), None);
        match classify("/eddy/../etc/hostname", "/eddy").unwrap() {
            Target::RealAt(c) => assert_eq!(c.to_str().unwrap(), "/etc/hostname"),
            _ => panic!("expected a real path"),
        }
    }
}
