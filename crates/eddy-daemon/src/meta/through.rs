//! What a store operation asks of the backend tier, under the key's lock, for a path under a
//! linked prefix: the import of an entry not held yet, and the write-through of a change
//! before its record is stored. The store does no backend I/O itself; the tier
//! (`crate::tier`) implements this; the store's own tests use `NoBackend`, the store without
//! a tier.

use eddy_proto::{Errno, FileKind, Inode, SetAttr};

/// The backend side of the store's operations on one normalised path. Each method is called
/// with the key's lock held, before the record is read or written; on a path that is not
/// linked, each does nothing.
pub trait Through: Sync {
    /// Whether `norm` is under a linked prefix.
    fn linked(&self, norm: &str) -> bool;

    /// The backend's entry of `norm` as a stub to hold (metadata only), if `norm` is linked
    /// and the backend has an entry of a kind Eddy holds.
    fn import(&self, norm: &str) -> Result<Option<Inode>, Errno>;

    /// Write-through of a new entry; `inode` gets its record of the backend copy.
    fn create(&self, norm: &str, inode: &mut Inode) -> Result<(), Errno>;

    /// Write-through of an unlink or rmdir of an entry of `kind`.
    fn remove(&self, norm: &str, kind: FileKind) -> Result<(), Errno>;

    /// Write-through of an attribute change; `new` is the entry after the change, whose
    /// record of the backend copy is refreshed.
    fn set_attr(&self, norm: &str, attr: &SetAttr, new: &mut Inode) -> Result<(), Errno>;

    /// Write-through of a set (`Some`) or removal (`None`) of the extended attribute `name`
    /// of an entry of `kind`.
    fn xattr(
        &self,
        _norm: &str,
        _kind: FileKind,
        _name: &str,
        _value: Option<&[u8]>,
    ) -> Result<(), Errno> {
        Ok(())
    }
}

/// The store alone: no path is linked.
#[cfg(test)]
pub struct NoBackend;

#[cfg(test)]
impl Through for NoBackend {
    fn linked(&self, _: &str) -> bool {
        false
    }

    fn import(&self, _: &str) -> Result<Option<Inode>, Errno> {
        Ok(None)
    }

    fn create(&self, _: &str, _: &mut Inode) -> Result<(), Errno> {
        Ok(())
    }

    fn remove(&self, _: &str, _: FileKind) -> Result<(), Errno> {
        Ok(())
    }

    fn set_attr(&self, _: &str, _: &SetAttr, _: &mut Inode) -> Result<(), Errno> {
        Ok(())
    }
}
