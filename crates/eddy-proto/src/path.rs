//! Paths inside an Eddy namespace and the metadata key layout.
//!
//! A normalised path is absolute, has no empty, `.` or `..` components and no trailing slash
//! (the root is `/`). `..` above the root stays at the root, so no path escapes the namespace.
//!
//! The metadata key of a path is `parent \0 name` (the root's key is `\0`), so the children
//! of a directory form one contiguous key range, `dir \0 ...`, and a readdir scans exactly
//! them, never the subtree.

use crate::Errno;

/// The longest symbolic link target, in bytes: Linux's (PATH_MAX with its NUL), whatever
/// `max_path` is (a FUSE readlink answers at most a page).
pub const MAX_SYMLINK_TARGET: usize = 4095;

/// Limits applied by `normalize`.
#[derive(Debug, Clone, Copy)]
pub struct PathLimits {
    pub max_path: usize,
    pub max_name: usize,
}

impl Default for PathLimits {
    fn default() -> Self {
        PathLimits {
            max_path: 32 * 1024,
            max_name: 255,
        }
    }
}

/// Normalises a path: EINVAL for a relative path or a NUL byte, ENAMETOOLONG for a path or
/// a component over the limits.
pub fn normalize(path: &str, limits: PathLimits) -> Result<String, Errno> {
    if path.len() > limits.max_path {
        return Err(Errno::new(
            libc::ENAMETOOLONG,
            format!(
                "path of {} bytes exceeds {} bytes",
                path.len(),
                limits.max_path
            ),
        ));
    }
    if path.contains('\0') {
        return Err(Errno::einval("path contains a NUL byte"));
    }
    if !path.starts_with('/') {
        return Err(Errno::einval(format!("path {path:?} is not absolute")));
    }
    let mut parts: Vec<&str> = Vec::new();
    for comp in path.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            name => {
                check_name_len(name, limits)?;
                parts.push(name);
            }
        }
    }
    if parts.is_empty() {
        return Ok("/".to_string());
    }
    let mut out = String::with_capacity(path.len());
    for p in parts {
        out.push('/');
        out.push_str(p);
    }
    Ok(out)
}

/// Checks that a single name is valid for a directory entry.
pub fn check_name(name: &str, limits: PathLimits) -> Result<(), Errno> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(Errno::einval(format!("{name:?} is not a valid file name")));
    }
    if name.contains('\0') {
        return Err(Errno::einval("file name contains a NUL byte"));
    }
    check_name_len(name, limits)
}

/// ENAMETOOLONG for a name over the limit.
fn check_name_len(name: &str, limits: PathLimits) -> Result<(), Errno> {
    if name.len() > limits.max_name {
        return Err(Errno::new(
            libc::ENAMETOOLONG,
            format!(
                "name of {} bytes exceeds {} bytes",
                name.len(),
                limits.max_name
            ),
        ));
    }
    Ok(())
}

/// Joins a normalised directory and a name.
pub fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Splits a normalised path into parent and name; `None` for the root.
pub fn split(path: &str) -> Option<(&str, &str)> {
    if path == "/" {
        return None;
    }
    let idx = path.rfind('/')?;
    let parent = if idx == 0 { "/" } else { &path[..idx] };
    Some((parent, &path[idx + 1..]))
}

/// Whether `path` is `dir` or lies below it (both normalised).
pub fn is_within(path: &str, dir: &str) -> bool {
    dir == "/"
        || path == dir
        || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

/// The metadata key of a normalised path.
pub fn meta_key(path: &str) -> Vec<u8> {
    match split(path) {
        None => vec![0],
        Some((parent, name)) => {
            let mut k = Vec::with_capacity(path.len() + 1);
            k.extend_from_slice(parent.as_bytes());
            k.push(0);
            k.extend_from_slice(name.as_bytes());
            k
        }
    }
}

/// The name of the identity record of a shared file (decision 0009) where requests take a
/// path: `#` and the file id in 32 hex digits. It is not absolute, so no user path is one.
pub fn identity_path(file_id: u128) -> String {
    format!("#{file_id:032x}")
}

/// The file id of an identity record's name (`identity_path`), `None` for anything else.
pub fn parse_identity(p: &str) -> Option<u128> {
    let hex = p.strip_prefix('#')?;
    if hex.len() != 32 {
        return None;
    }
    u128::from_str_radix(hex, 16).ok()
}

/// The metadata key of a shared file's identity record: 0xFF and the id, big-endian. No
/// path key starts with 0xFF (they start with `/` or are the root's `\0`), so identity
/// records never fall in a directory's or a subtree's key range.
pub fn identity_key(file_id: u128) -> Vec<u8> {
    let mut k = Vec::with_capacity(17);
    k.push(0xFF);
    k.extend_from_slice(&file_id.to_be_bytes());
    k
}

/// The file id of an identity record's key (`identity_key`), `None` for any other key.
pub fn identity_of_key(key: &[u8]) -> Option<u128> {
    match key {
        [0xFF, id @ ..] => Some(u128::from_be_bytes(id.try_into().ok()?)),
        _ => None,
    }
}

/// Whether a metadata key is an identity record's (`identity_key`).
pub fn is_identity_key(key: &[u8]) -> bool {
    key.first() == Some(&0xFF)
}

/// The key prefix shared by exactly the children of a directory.
pub fn children_prefix(dir: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(dir.len() + 1);
    k.extend_from_slice(dir.as_bytes());
    k.push(0);
    k
}

/// The key prefixes covering every entry strictly below a directory other than the root:
/// its children (`dir \0`) and the deeper entries (`dir /`).
pub fn subtree_prefixes(dir: &str) -> [Vec<u8>; 2] {
    let mut deeper = dir.as_bytes().to_vec();
    deeper.push(b'/');
    [children_prefix(dir), deeper]
}

/// The path a metadata key stands for; `None` if the key is malformed.
pub fn key_to_path(key: &[u8]) -> Option<String> {
    if key == [0] {
        return Some("/".to_string());
    }
    let idx = key.iter().position(|&b| b == 0)?;
    let parent = std::str::from_utf8(&key[..idx]).ok()?;
    let name = std::str::from_utf8(&key[idx + 1..]).ok()?;
    Some(join(parent, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn identity_names_round_trip_and_are_no_paths() {
        let id = 0x0123_4567_89ab_cdef_0011_2233_4455_6677u128;
        let p = identity_path(id);
        assert_eq!(parse_identity(&p), Some(id));
        assert_eq!(n(&p), Err(libc::EINVAL));
        assert_eq!(parse_identity("/#00"), None);
        assert_eq!(parse_identity("#xyz"), None);
        let k = identity_key(id);
        assert_eq!(k.len(), 17);
        assert!(!k.starts_with(b"/") && k != meta_key("/"));
    }

    fn n(p: &str) -> Result<String, i32> {
        normalize(p, PathLimits::default()).map_err(|e| e.errno)
    }

    #[test]
    fn normalisation() {
        assert_eq!(n("/").unwrap(), "/");
        assert_eq!(n("//a///b/").unwrap(), "/a/b");
        assert_eq!(n("/a/./b/../c").unwrap(), "/a/c");
        assert_eq!(n("/../../etc/passwd").unwrap(), "/etc/passwd");
        assert_eq!(n("/a/.."), Ok("/".to_string()));
        assert_eq!(n("a/b"), Err(libc::EINVAL));
        assert_eq!(n(""), Err(libc::EINVAL));
        assert_eq!(n("/a\0b"), Err(libc::EINVAL));
        assert_eq!(n(&format!("/{}", "x".repeat(256))), Err(libc::ENAMETOOLONG));
        assert_eq!(n(&"/abcdefgh".repeat(600)).map(|p| p.len()), Ok(5400));
        assert_eq!(n(&"/abcdefgh".repeat(3700)), Err(libc::ENAMETOOLONG));
        assert!(n(&format!("/{}", "x".repeat(255))).is_ok());
    }

    #[test]
    fn keys() {
        assert_eq!(meta_key("/"), b"\0");
        assert_eq!(meta_key("/a"), b"/\0a");
        assert_eq!(meta_key("/a/b"), b"/a\0b");
        assert!(meta_key("/a/b").starts_with(&children_prefix("/a")));
        assert!(!meta_key("/a/b/c").starts_with(&children_prefix("/a")));
        assert!(!meta_key("/ab").starts_with(&children_prefix("/a")));
        let [c, d] = subtree_prefixes("/a");
        assert!(meta_key("/a/b/c").starts_with(&d));
        assert!(meta_key("/a/b").starts_with(&c));
        assert!(!meta_key("/ab/c").starts_with(&d));
        assert_eq!(key_to_path(b"\0").unwrap(), "/");
        assert_eq!(key_to_path(b"no separator"), None);
        assert!(is_identity_key(&identity_key(7)));
        assert_eq!(
            identity_of_key(&identity_key(u128::MAX - 3)),
            Some(u128::MAX - 3)
        );
        assert_eq!(identity_of_key(&meta_key("/a")), None);
        assert_eq!(identity_of_key(&[0xFF, 1, 2]), None);
        assert!(!is_identity_key(&meta_key("/a")) && !is_identity_key(&meta_key("/")));
    }

    #[test]
    fn within() {
        assert!(is_within("/a/b", "/a"));
        assert!(is_within("/a", "/a"));
        assert!(!is_within("/ab", "/a"));
        assert!(is_within("/x", "/"));
    }

    #[test]
    fn names() {
        let l = PathLimits::default();
        assert!(check_name("ok", l).is_ok());
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert!(check_name(bad, l).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn normalize_is_idempotent_and_keys_invert(p in "(/[a-z.]{0,4}){0,6}") {
            if let Ok(a) = normalize(&p, PathLimits::default()) {
                prop_assert_eq!(normalize(&a, PathLimits::default()).unwrap(), a.clone());
                prop_assert!(!a.contains("/./") && !a.contains("/../") && !a.contains("//"));
                prop_assert_eq!(key_to_path(&meta_key(&a)).unwrap(), a.clone());
                if let Some((parent, name)) = split(&a) {
                    prop_assert_eq!(join(parent, name), a);
                }
            }
        }
    }
}
