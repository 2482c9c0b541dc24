//! Special files (FIFOs, sockets, device nodes: metadata entries with no data in Eddy) and
//! extended attributes.
//!
//! Extended attributes are those of the entry itself: a symlink is not followed (the
//! `l*xattr` calls). Who may touch which namespace is checked here for callers that ask
//! (`Creds::enforce`): `trusted.*` is root's only, `security.*` may be changed by root only,
//! `user.*` needs read permission to get and write permission to set or remove (listing
//! needs none, as on Linux).
//! Listings leave `trusted.*` out for anyone but root, whatever `enforce` says (the kernel
//! does not filter them for a FUSE file system).

use crate::namespace::Namespace;
use crate::perm::{self, Access};
use crate::{new_inode, Creds, Errno, FileKind, Inode};
use eddy_proto::{req, Rpc, XattrSet};

/// A namespace reserved to root for an operation (`write`: set or remove).
fn root_only(name: &str, write: bool) -> bool {
    name.starts_with("trusted.") || (write && name.starts_with("security."))
}

impl Namespace<'_> {
    /// mknod(2) of a special file: `kind` is a FIFO, a socket or a device node (`rdev` is
    /// its device number, Linux encoding). Device nodes need root (CAP_MKNOD): EPERM for
    /// others when checks are enforced. Regular files are made by `create`.
    pub async fn mknod(
        &self,
        path: &str,
        kind: FileKind,
        mode: u32,
        rdev: u64,
        creds: Creds,
    ) -> Result<Inode, Errno> {
        let p = self.norm(path)?;
        if !kind.is_special() {
            return Err(Errno::einval(format!(
                "{p}: mknod makes FIFOs, sockets and device nodes (files: create, directories: mkdir)"
            )));
        }
        let device = matches!(kind, FileKind::CharDevice | FileKind::BlockDevice);
        if device && creds.enforce && creds.uid != 0 {
            return Err(Errno::new(
                libc::EPERM,
                format!("{p}: only root may make device nodes"),
            ));
        }
        let mut inode = new_inode(kind, mode, creds, None);
        inode.rdev = if device { rdev } else { 0 };
        self.create_entry(&p, inode, true, creds).await
    }

    /// Checks that the caller may access attribute `name` of `p` as `want` (when checks are
    /// enforced): EPERM for root's namespaces, the mode bits for `user.*`.
    async fn xattr_entry(
        &self,
        p: &str,
        name: &str,
        want: Access,
        creds: Creds,
    ) -> Result<(), Errno> {
        if !creds.enforce || creds.uid == 0 {
            return Ok(());
        }
        if name.starts_with("user.") {
            let inode = self.stat_as(p, creds).await?;
            return perm::check(&inode, creds, want, p);
        }
        self.check_path(p, creds).await?;
        if want == Access::WRITE && root_only(name, true) {
            return Err(Errno::new(
                libc::EPERM,
                format!("{p}: attribute {name:?}: only root may use this namespace"),
            ));
        }
        Ok(())
    }

    /// setxattr(2): `how` is `Any`, `Create` (XATTR_CREATE: EEXIST if present) or `Replace`
    /// (XATTR_REPLACE: ENODATA if absent). Names over 255 bytes give ERANGE, values over
    /// 64 KiB E2BIG, `system.*` (ACLs) EOPNOTSUPP, `user.*` on anything but regular files and
    /// directories EPERM.
    pub async fn setxattr(
        &self,
        path: &str,
        name: &str,
        value: &[u8],
        how: XattrSet,
        creds: Creds,
    ) -> Result<(), Errno> {
        let p = self.norm(path)?;
        self.xattr_entry(&p, name, Access::WRITE, creds).await?;
        let req = req::SetXattr {
            path: p.clone(),
            name: name.to_string(),
            value: value.to_vec(),
            how,
        };
        self.xattr_call(&p, req).await?;
        self.placement_changed(&p, name);
        Ok(())
    }

    /// An attribute of `p` changed here (its ctime moved, an ACL may have moved its mode):
    /// it is not answered from the cache of recent directories (decision 0050). A
    /// directory's placement attribute: this client's next create in it must not go by the
    /// directory as cached (decision 0043).
    fn placement_changed(&self, p: &str, name: &str) {
        if name == eddy_config::PLACEMENT_XATTR || name == eddy_config::BACKEND_XATTR {
            self.0.dircache.forget_tree(p);
        } else {
            self.0.dircache.forget(p);
        }
    }

    /// getxattr(2): the value, or ENODATA.
    pub async fn getxattr(&self, path: &str, name: &str, creds: Creds) -> Result<Vec<u8>, Errno> {
        let p = self.norm(path)?;
        self.xattr_entry(&p, name, Access::READ, creds).await?;
        if root_only(name, false) && creds.uid != 0 {
            // As on Linux: trusted.* does not exist for others.
            return Err(Errno::new(
                libc::ENODATA,
                format!("{p}: no attribute {name:?} (trusted.* is root's only)"),
            ));
        }
        let req = req::GetXattr {
            path: p.clone(),
            name: name.to_string(),
        };
        self.xattr_call(&p, req).await.map(Vec::from)
    }

    /// listxattr(2): the names in name order; `trusted.*` only for root. As on Linux, no
    /// read permission is needed.
    pub async fn listxattr(&self, path: &str, creds: Creds) -> Result<Vec<String>, Errno> {
        let p = self.norm(path)?;
        let req = req::ListXattr { path: p.clone() };
        let names = self.xattr_call(&p, req).await?;
        Ok(names
            .into_iter()
            .filter(|n| creds.uid == 0 || !n.starts_with("trusted."))
            .collect())
    }

    /// removexattr(2): ENODATA if the attribute is absent.
    pub async fn removexattr(&self, path: &str, name: &str, creds: Creds) -> Result<(), Errno> {
        let p = self.norm(path)?;
        self.xattr_entry(&p, name, Access::WRITE, creds).await?;
        let req = req::RemoveXattr {
            path: p.clone(),
            name: name.to_string(),
        };
        self.xattr_call(&p, req).await?;
        self.placement_changed(&p, name);
        Ok(())
    }

    /// Sends an attribute request to the owner of `p`; ENOENT says which ancestor is missing.
    async fn xattr_call<R: Rpc>(&self, p: &str, req: R) -> Result<R::Reply, Errno> {
        match self.meta(p, req).await {
            Err(e) if e.errno == libc::ENOENT => Err(self.refine_enoent(p, e).await),
            other => other,
        }
    }
}
