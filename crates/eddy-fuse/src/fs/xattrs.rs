//! Extended attributes: the replies to get and list, and values answered from the last reply
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
