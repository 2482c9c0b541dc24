//! Permission checks done by the library for callers that ask for them (`Creds::enforce`).
//! The FUSE mount leaves them to the kernel (default_permissions) and passes enforce = false.

use eddy_proto::{Errno, Inode, SetAttr};

/// Who performs an operation and what the caller has already checked: the owner of new
/// entries; with `enforce`, the subject of permission checks; with `parent_resolved`, the
/// caller (a kernel, through FUSE) has already resolved the parent directory, so the library
/// need not look it up again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    pub enforce: bool,
    pub parent_resolved: bool,
}

impl Creds {
    /// The calling process's effective ids; checks enforced unless it is root.
    pub fn current() -> Creds {
        // SAFETY: geteuid/getegid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Creds {
            uid,
            gid,
            enforce: uid != 0,
            parent_resolved: false,
        }
    }

    /// A request the kernel has vetted (FUSE with default_permissions): no permission checks,
    /// no parent lookups.
    pub fn kernel(uid: u32, gid: u32) -> Creds {
        Creds {
            uid,
            gid,
            enforce: false,
            parent_resolved: true,
        }
    }

    /// Root, no checks.
    pub fn root() -> Creds {
        Creds {
            uid: 0,
            gid: 0,
            enforce: false,
            parent_resolved: false,
        }
    }
}

/// Requested access, as the r/w/x bits of one class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Access(u32);

impl Access {
    pub const READ: Access = Access(4);
    pub const WRITE: Access = Access(2);
    pub const EXEC: Access = Access(1);
    pub fn empty() -> Access {
        Access(0)
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

impl std::ops::BitOrAssign for Access {
    fn bitor_assign(&mut self, o: Access) {
        self.0 |= o.0;
    }
}

/// EACCES unless `creds` may access `inode` as `want` (owner, then group, then other bits).
pub(crate) fn check(inode: &Inode, creds: Creds, want: Access, path: &str) -> Result<(), Errno> {
    if !creds.enforce || creds.uid == 0 || want.0 == 0 {
        return Ok(());
    }
    let bits = if creds.uid == inode.uid {
        (inode.mode >> 6) & 7
    } else if creds.gid == inode.gid {
        (inode.mode >> 3) & 7
    } else {
        inode.mode & 7
    };
    if bits & want.0 == want.0 {
        Ok(())
    } else {
        Err(Errno::new(
            libc::EACCES,
            format!("{path}: permission denied"),
        ))
    }
}

/// chmod needs ownership, chown needs root, truncate needs write permission, setting times to
/// explicit values needs ownership.
pub(crate) fn check_setattr(
    inode: &Inode,
    attr: &SetAttr,
    creds: Creds,
    path: &str,
) -> Result<(), Errno> {
    if !creds.enforce || creds.uid == 0 {
        return Ok(());
    }
    let owner = creds.uid == inode.uid;
    let eperm = |what: &str| {
        Err(Errno::new(
            libc::EPERM,
            format!("{path}: only the owner may {what}"),
        ))
    };
    if attr.mode.is_some() && !owner {
        return eperm("change the mode");
    }
    if attr.uid.is_some_and(|u| u != inode.uid)
        || attr.gid.is_some_and(|g| g != inode.gid && !owner)
    {
        return Err(Errno::new(
            libc::EPERM,
            format!("{path}: only root may change the owner"),
        ));
    }
    let explicit_time =
        |t: &Option<eddy_proto::SetTime>| matches!(t, Some(eddy_proto::SetTime::At(_)));
    if (explicit_time(&attr.atime) || explicit_time(&attr.mtime)) && !owner {
        return eperm("set explicit times");
    }
    if attr.size.is_some() {
        check(inode, creds, Access::WRITE, path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_proto::FileKind;

    fn inode(mode: u32) -> Inode {
        Inode::new(FileKind::File, 1, mode, 10, 20)
    }

    #[test]
    fn classes_are_checked_in_order() {
        let owner = Creds {
            uid: 10,
            gid: 99,
            enforce: true,
            parent_resolved: false,
        };
        let group = Creds {
            uid: 11,
            gid: 20,
            enforce: true,
            parent_resolved: false,
        };
        let other = Creds {
            uid: 12,
            gid: 21,
            enforce: true,
            parent_resolved: false,
        };
        let i = inode(0o640);
        assert!(check(&i, owner, Access::READ | Access::WRITE, "/f").is_ok());
        assert!(check(&i, group, Access::READ, "/f").is_ok());
        assert_eq!(
            check(&i, group, Access::WRITE, "/f").unwrap_err().errno,
            libc::EACCES
        );
        assert_eq!(
            check(&i, other, Access::READ, "/f").unwrap_err().errno,
            libc::EACCES
        );
        assert!(check(
            &i,
            Creds {
                enforce: false,
                ..other
            },
            Access::READ,
            "/f"
        )
        .is_ok());
        assert!(check(
            &i,
            Creds {
                uid: 0,
                gid: 0,
                enforce: true,
                parent_resolved: false,
            },
            Access::WRITE,
            "/f"
        )
        .is_ok());
    }

    #[test]
    fn chmod_and_chown_rules() {
        let i = inode(0o644);
        let other = Creds {
            uid: 12,
            gid: 21,
            enforce: true,
            parent_resolved: false,
        };
        let owner = Creds {
            uid: 10,
            gid: 20,
            enforce: true,
            parent_resolved: false,
        };
        let chmod = SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        };
        assert_eq!(
            check_setattr(&i, &chmod, other, "/f").unwrap_err().errno,
            libc::EPERM
        );
        assert!(check_setattr(&i, &chmod, owner, "/f").is_ok());
        let chown = SetAttr {
            uid: Some(12),
            ..SetAttr::default()
        };
        assert_eq!(
            check_setattr(&i, &chown, owner, "/f").unwrap_err().errno,
            libc::EPERM
        );
    }
}
