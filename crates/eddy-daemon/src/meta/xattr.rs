//! Extended attributes of the entries this daemon owns. They live inside the entry's record
//! (decision 0007): a change is one write of one key under its stripe lock, so it is atomic
//! and crash-safe, and the attributes move with the record on rename. Who may use which
//! namespace (root for `trusted.*` and `security.*`, the mode bits for `user.*`) is checked
//! by the caller (the kernel through FUSE, the library); the daemon checks what the entry
//! itself decides.

use super::{MetaStore, Through};
use eddy_proto::{
    Errno, FileKind, Inode, Timespec, Xattr, XattrSet, XATTR_NAME_MAX, XATTR_SIZE_MAX,
    XATTR_TOTAL_MAX,
};

/// Namespaces Eddy stores; `system.*` (POSIX ACLs) is not supported.
const NAMESPACES: [&str; 3] = ["user.", "trusted.", "security."];

/// Checks an attribute name: ERANGE when empty or too long, EOPNOTSUPP outside the stored
/// namespaces (ACLs included), EINVAL for a bare namespace prefix.
pub(crate) fn check_name(norm: &str, name: &str) -> Result<(), Errno> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(Errno::new(
            libc::ERANGE,
            format!("{norm}: attribute names are 1 to {XATTR_NAME_MAX} bytes"),
        ));
    }
    match NAMESPACES.iter().find(|ns| name.starts_with(*ns)) {
        Some(ns) if name.len() == ns.len() => Err(Errno::einval(format!(
            "{norm}: attribute name {name:?} has no name after its namespace"
        ))),
        Some(_) => Ok(()),
        None => Err(Errno::new(
            libc::EOPNOTSUPP,
            format!("{norm}: attribute {name:?}: only user.*, trusted.* and security.* are supported (no ACLs)"),
        )),
    }
}

/// `user.*` attributes exist only on regular files and directories (as on Linux).
fn user_allowed(ino: &Inode, name: &str) -> bool {
    !name.starts_with("user.") || matches!(ino.kind, FileKind::File | FileKind::Dir)
}

fn enodata(norm: &str, name: &str) -> Errno {
    Errno::new(libc::ENODATA, format!("{norm}: no attribute {name:?}"))
}

/// Sets `name` to `value` in `ino` as `how` says.
/// `user.eddy.placement` (decision 0043): a directory's, and `hashed` or `local` only
/// (anything else is EINVAL, so a typo is not silently taken for the default).
fn check_placement(norm: &str, ino: &Inode, name: &str, value: &[u8]) -> Result<(), Errno> {
    if name != eddy_config::PLACEMENT_XATTR {
        return Ok(());
    }
    if ino.kind != eddy_proto::FileKind::Dir {
        return Err(Errno::einval(format!(
            "{norm}: {name} is a directory's attribute (its files are placed by it)"
        )));
    }
    if eddy_config::PlacementMode::parse(value).is_none() {
        return Err(Errno::einval(format!(
            "{norm}: {name} is \"hashed\" or \"local\", not {:?}",
            String::from_utf8_lossy(value)
        )));
    }
    Ok(())
}

pub(crate) fn set(
    norm: &str,
    mut ino: Inode,
    name: &str,
    value: Vec<u8>,
    how: XattrSet,
) -> Result<Inode, Errno> {
    check_name(norm, name)?;
    if value.len() > XATTR_SIZE_MAX {
        return Err(Errno::new(
            libc::E2BIG,
            format!("{norm}: attribute values are at most {XATTR_SIZE_MAX} bytes"),
        ));
    }
    if !user_allowed(&ino, name) {
        return Err(Errno::new(
            libc::EPERM,
            format!("{norm}: user.* attributes are for regular files and directories only"),
        ));
    }
    check_placement(norm, &ino, name, &value)?;
    let at = ino.xattrs.binary_search_by(|x| x.name.as_str().cmp(name));
    let freed = match (&at, how) {
        (Ok(_), XattrSet::Create) => {
            return Err(Errno::new(
                libc::EEXIST,
                format!("{norm}: attribute {name:?} exists"),
            ))
        }
        (Err(_), XattrSet::Replace) => return Err(enodata(norm, name)),
        (Ok(i), _) => name.len() + ino.xattrs[*i].value.len(),
        (Err(_), _) => 0,
    };
    if ino.xattr_bytes() - freed + name.len() + value.len() > XATTR_TOTAL_MAX {
        return Err(Errno::new(
            libc::ENOSPC,
            format!("{norm}: the attributes of one entry are at most {XATTR_TOTAL_MAX} bytes"),
        ));
    }
    match at {
        Ok(i) => ino.xattrs[i].value = value,
        Err(i) => ino.xattrs.insert(
            i,
            Xattr {
                name: name.to_string(),
                value,
            },
        ),
    }
    ino.ctime = Timespec::now();
    Ok(ino)
}

/// Removes `name` from `ino`; ENODATA if it is not there.
pub(crate) fn remove(norm: &str, mut ino: Inode, name: &str) -> Result<Inode, Errno> {
    check_name(norm, name)?;
    if !user_allowed(&ino, name) {
        return Err(Errno::new(
            libc::EPERM,
            format!("{norm}: user.* attributes are for regular files and directories only"),
        ));
    }
    let i = ino
        .xattrs
        .binary_search_by(|x| x.name.as_str().cmp(name))
        .map_err(|_| enodata(norm, name))?;
    ino.xattrs.remove(i);
    ino.ctime = Timespec::now();
    Ok(ino)
}

/// The value of `name` in `ino`; ENODATA if it is not there.
pub(crate) fn get(norm: &str, ino: &Inode, name: &str) -> Result<Vec<u8>, Errno> {
    check_name(norm, name)?;
    ino.xattrs
        .iter()
        .find(|x| x.name == name)
        .map(|x| x.value.clone())
        .ok_or_else(|| enodata(norm, name))
}

impl MetaStore {
    pub fn set_xattr(
        &self,
        p: &str,
        name: &str,
        value: Vec<u8>,
        how: XattrSet,
        via: &dyn Through,
    ) -> Result<Inode, Errno> {
        self.update(p, via, |norm, old| {
            let before = old
                .xattrs
                .iter()
                .find(|x| x.name == name)
                .map(|x| x.value.clone());
            let mut new = set(norm, old, name, value, how)?;
            // Another backend named for a linked file (decision 0073): the check before its
            // next write-back moves it there, so that write-back must happen.
            if name == eddy_config::BACKEND_XATTR && new.kind == FileKind::File {
                let named = new.xattrs.iter().find(|x| x.name == name);
                if named.map(|x| &x.value) != before.as_ref() {
                    if let Some(t) = new.tier.as_mut() {
                        t.dirty = true;
                    }
                }
            }
            let value = new
                .xattrs
                .iter()
                .find(|x| x.name == name)
                .map(|x| &x.value[..]);
            via.xattr(norm, new.kind, name, value)?;
            Ok((new.clone(), new))
        })
    }

    pub fn remove_xattr(&self, p: &str, name: &str, via: &dyn Through) -> Result<Inode, Errno> {
        self.update(p, via, |norm, old| {
            let new = remove(norm, old, name)?;
            via.xattr(norm, new.kind, name, None)?;
            Ok((new.clone(), new))
        })
    }

    pub fn get_xattr(&self, p: &str, name: &str, via: &dyn Through) -> Result<Vec<u8>, Errno> {
        let ino = self.stat(p, via)?;
        let (norm, _) = self.key_of(p)?;
        get(&norm, &ino, name)
    }

    pub fn list_xattr(&self, p: &str, via: &dyn Through) -> Result<Vec<String>, Errno> {
        let ino = self.stat(p, via)?;
        Ok(ino.xattrs.into_iter().map(|x| x.name).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::NoBackend;
    use eddy_config::Config;
    use eddy_proto::RemoveKind;

    fn entry(kind: FileKind) -> Inode {
        Inode::new(kind, 3, 0o644, 0, 0)
    }

    fn errno<T: std::fmt::Debug>(r: Result<T, Errno>) -> i32 {
        r.unwrap_err().errno
    }

    #[test]
    fn flags_sizes_and_namespaces() {
        let f = entry(FileKind::File);
        let a = set("/f", f, "user.b", b"2".to_vec(), XattrSet::Any).unwrap();
        let a = set("/f", a, "user.a", b"1".to_vec(), XattrSet::Create).unwrap();
        let names: Vec<_> = a.xattrs.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["user.a", "user.b"]);
        assert_eq!(get("/f", &a, "user.a").unwrap(), b"1");
        let x = || b"x".to_vec();
        assert_eq!(
            errno(set("/f", a.clone(), "user.a", x(), XattrSet::Create)),
            libc::EEXIST
        );
        assert_eq!(
            errno(set("/f", a.clone(), "user.c", x(), XattrSet::Replace)),
            libc::ENODATA
        );
        let r = set("/f", a.clone(), "user.a", b"11".to_vec(), XattrSet::Replace).unwrap();
        assert_eq!(get("/f", &r, "user.a").unwrap(), b"11");
        assert_eq!(errno(get("/f", &a, "user.zz")), libc::ENODATA);
        assert_eq!(errno(remove("/f", a.clone(), "user.zz")), libc::ENODATA);
        let long = format!("user.{}", "n".repeat(251));
        assert_eq!(
            errno(set("/f", a.clone(), &long, x(), XattrSet::Any)),
            libc::ERANGE
        );
        assert_eq!(
            errno(set("/f", a.clone(), "", x(), XattrSet::Any)),
            libc::ERANGE
        );
        let big = vec![0; XATTR_SIZE_MAX + 1];
        assert_eq!(
            errno(set("/f", a.clone(), "user.big", big, XattrSet::Any)),
            libc::E2BIG
        );
        let acl = "system.posix_acl_access";
        assert_eq!(
            errno(set("/f", a.clone(), acl, x(), XattrSet::Any)),
            libc::EOPNOTSUPP
        );
        assert_eq!(errno(get("/f", &a, acl)), libc::EOPNOTSUPP);
        assert_eq!(
            errno(set("/f", a.clone(), "user.", x(), XattrSet::Any)),
            libc::EINVAL
        );
        let gone = remove("/f", a, "user.a").unwrap();
        assert_eq!(gone.xattrs.len(), 1);
    }

    #[test]
    fn total_size_is_bounded() {
        let mut f = entry(FileKind::File);
        let value = vec![7; XATTR_SIZE_MAX];
        for i in 0..3 {
            f = set("/f", f, &format!("user.{i}"), value.clone(), XattrSet::Any).unwrap();
        }
        assert_eq!(
            errno(set("/f", f.clone(), "user.3", value.clone(), XattrSet::Any)),
            libc::ENOSPC
        );
        // Replacing a value counts the old one as freed.
        set("/f", f, "user.0", value, XattrSet::Any).unwrap();
    }

    #[test]
    fn user_attributes_only_on_files_and_dirs() {
        for kind in [
            FileKind::Symlink,
            FileKind::Fifo,
            FileKind::Socket,
            FileKind::CharDevice,
        ] {
            let e = entry(kind);
            assert_eq!(
                errno(set("/s", e.clone(), "user.a", b"1".to_vec(), XattrSet::Any)),
                libc::EPERM
            );
            assert_eq!(errno(remove("/s", e.clone(), "user.a")), libc::EPERM);
            let t = set("/s", e, "trusted.a", b"1".to_vec(), XattrSet::Any).unwrap();
            assert_eq!(get("/s", &t, "trusted.a").unwrap(), b"1");
        }
        let d = set("/d", entry(FileKind::Dir), "user.a", vec![], XattrSet::Any).unwrap();
        assert_eq!(get("/d", &d, "user.a").unwrap(), b"");
    }

    #[test]
    fn stored_with_the_record_and_kept_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::default();
        {
            let store = MetaStore::open(dir.path(), &config).unwrap();
            store
                .create("/f", entry(FileKind::File), true, &NoBackend)
                .unwrap();
            store
                .set_xattr("/f", "user.k", b"v".to_vec(), XattrSet::Any, &NoBackend)
                .unwrap();
            store
                .set_xattr("/f", "trusted.t", b"w".to_vec(), XattrSet::Any, &NoBackend)
                .unwrap();
            assert_eq!(
                errno(store.get_xattr("/nope", "user.k", &NoBackend)),
                libc::ENOENT
            );
            store.persist().unwrap();
        }
        let store = MetaStore::open(dir.path(), &config).unwrap();
        assert_eq!(store.get_xattr("/f", "user.k", &NoBackend).unwrap(), b"v");
        assert_eq!(
            store.list_xattr("/f", &NoBackend).unwrap(),
            ["trusted.t", "user.k"]
        );
        // The second half of a rename carries them: Insert of the record at the new path.
        let moved = store.stat("/f", &NoBackend).unwrap();
        store.insert("/g", moved, false).unwrap();
        store.remove("/f", RemoveKind::Any, &NoBackend).unwrap();
        assert_eq!(store.get_xattr("/g", "user.k", &NoBackend).unwrap(), b"v");
        store.remove_xattr("/g", "user.k", &NoBackend).unwrap();
        assert_eq!(store.list_xattr("/g", &NoBackend).unwrap(), ["trusted.t"]);
    }
}
