//! The extended-attribute requests of the `fuser::Filesystem` implementation
//! (`requests.rs`): set, get, list and remove, answered from the mount's cache of an entry's
//! attributes where it holds them.

use super::xattrs::{cached_value, reply_xattr};
use super::{creds, failed, utf8, EddyFs};
use crate::xcache::cacheable;
use eddy_proto::XattrSet;
use fuser::{INodeNo, ReplyEmpty, ReplyXattr, Request};
use std::ffi::OsStr;

impl EddyFs {
    /// Extended attributes of the entry itself; the kernel has checked the namespaces
    /// (trusted.* and security.* changes need CAP_SYS_ADMIN) and the mode bits
    /// (default_permissions). Size 0 asks for the size the answer needs.
    pub(super) fn setxattr_request(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
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

    /// The kernel's `getxattr` request (`Filesystem::getxattr` in `requests.rs`).
    pub(super) fn getxattr_request(
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

    /// The kernel's `listxattr` request (`Filesystem::listxattr` in `requests.rs`).
    pub(super) fn listxattr_request(
        &self,
        req: &Request,
        ino: INodeNo,
        size: u32,
        reply: ReplyXattr,
    ) {
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

    /// The kernel's `removexattr` request (`Filesystem::removexattr` in `requests.rs`).
    pub(super) fn removexattr_request(
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
