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
            return Ok(Target::Real);
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
            None => return Ok(Target::Real),
        }
    } else {
        match fds::lookup(dirfd) {
            Some(o) => o.path.clone(),
            None => return Ok(Target::Real),
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
