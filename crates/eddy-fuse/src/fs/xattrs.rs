//! Extended attributes: set, get, list and remove, get and list answered from the last reply
//! about the entry while it is fresh.

use super::*;

/// Answers getxattr/listxattr: the size when asked with size 0, ERANGE when the caller's
/// buffer is too small, the bytes otherwise.
pub(super) fn reply_xattr(bytes: Vec<u8>, size: u32, reply: ReplyXattr) {
    match u32::try_from(bytes.len()) {
        Ok(len) if size == 0 => reply.size(len),
        Ok(len) if len <= size => reply.data(&bytes),
        _ => reply.error(fuser::Errno::ERANGE),
    }
}

/// The value of attribute `name` among cached attributes, as the library would answer
/// `uid` (trusted.* does not exist for anyone but root).
pub(super) fn cached_value(xattrs: &[Xattr], name: &str, uid: u32) -> Result<Vec<u8>, Errno> {
    xattrs
        .iter()
        .find(|x| x.name == name && (uid == 0 || !name.starts_with("trusted.")))
        .map(|x| x.value.clone())
        .ok_or_else(|| Errno::new(libc::ENODATA, format!("no attribute {name:?}")))
}

// The methods take the arguments of the `Filesystem` methods they serve, as fuser passes them.
#[allow(clippy::too_many_arguments)]
impl EddyFs {
    // Extended attributes of the entry itself; the kernel has checked the namespaces
    // (trusted.* and security.* changes need CAP_SYS_ADMIN) and the mode bits
    // (default_permissions). Size 0 asks for the size the answer needs.
    pub(super) fn setxattr_op(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let how = if flags & libc::XATTR_CREATE != 0 {
            XattrSet::Create
        } else if flags & libc::XATTR_REPLACE != 0 {
            XattrSet::Replace
        } else {
            XattrSet::Any
        };
        let res = self.path(ino).and_then(|p| {
            let name = utf8(name)?;
            self.run(self.client.setxattr(&p, name, value, how, creds(req)))
        });
        self.xattrs.drop_entry(ino.0);
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("setxattr", &e)),
        }
    }

    pub(super) fn getxattr_op(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        let res = utf8(name).and_then(|name| match self.xattrs.get(ino.0) {
            Some(cached) if cacheable(name) => cached_value(&cached, name, req.uid()),
            _ => {
                let p = self.path(ino)?;
                self.run(self.client.getxattr(&p, name, creds(req)))
            }
        });
        match res {
            Ok(value) => reply_xattr(value, size, reply),
            Err(e) => reply.error(failed("getxattr", &e)),
        }
    }

    pub(super) fn listxattr_op(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let res = match self.xattrs.get(ino.0) {
            Some(cached) => Ok(cached
                .iter()
                .filter(|x| req.uid() == 0 || !x.name.starts_with("trusted."))
                .map(|x| x.name.clone())
                .collect()),
            None => self
                .path(ino)
                .and_then(|p| self.run(self.client.listxattr(&p, creds(req)))),
        };
        match res {
            Ok(names) => {
                let mut list = Vec::new();
                for n in names {
                    list.extend_from_slice(n.as_bytes());
                    list.push(0);
                }
                reply_xattr(list, size, reply)
            }
            Err(e) => reply.error(failed("listxattr", &e)),
        }
    }

    pub(super) fn removexattr_op(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        reply: ReplyEmpty,
    ) {
        let res = self.path(ino).and_then(|p| {
            let name = utf8(name)?;
            self.run(self.client.removexattr(&p, name, creds(req)))
        });
        self.xattrs.drop_entry(ino.0);
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("removexattr", &e)),
        }
    }
}
