//! Names: renames through the mount (their flags, and the inode table that follows them). The
//! client keeps a file unlinked or replaced while open alive under a hidden name until its
//! last close, and moves the open handles with a rename (`eddy_client` `held`, decision 0061);
//! the mount's inode table follows.

use super::*;

pub(crate) use eddy_config::is_hidden_orphan;

impl EddyFs {
    pub(super) fn do_rename(
        &self,
        req: &Request,
        from: &str,
        to: &str,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        // Names and whole directories may move anywhere: forget which names are missing.
        self.fresh.forget_all();
        if !RenameFlags::RENAME_NOREPLACE.contains(flags) {
            // RENAME_EXCHANGE and RENAME_WHITEOUT are not supported: renameat2(2) says EINVAL.
            return Err(Errno::einval(format!(
                "rename flags {flags} are not supported"
            )));
        }
        if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            match self.run(self.client.stat(to)) {
                Ok(_) => return Err(Errno::new(libc::EEXIST, format!("{to} exists"))),
                Err(e) if e.errno == libc::ENOENT => {}
                Err(e) => return Err(e),
            }
        }
        // A file a handle has open at `to` is hidden by the client first (decision 0061);
        // the kernel's inode of it follows to its hidden name.
        let victim = self.open_at(to);
        let _changing = (self.changing(from), self.changing(to));
        self.run(self.client.rename(from, to, creds(req)))?;
        let mut table = lock(&self.table);
        if let Some(hidden) = victim.map(|f| f.path()).filter(|h| **h != *to) {
            table.rename(to, &hidden);
        }
        table.rename(from, to);
        Ok(())
    }

    /// A handle of this mount open at `path`, if any.
    pub(super) fn open_at(&self, path: &str) -> Option<File> {
        lock(&self.files)
            .values()
            .find(|f| *f.path() == *path)
            .cloned()
    }

    /// The release of a handle on the hidden name of a file unlinked or replaced while open
    /// (its `close` done): once the client has removed that name (at the last close), the
    /// mount's inode table forgets it.
    pub(super) fn forget_orphan(&self, hidden: &str) {
        if !self.client.unlinked_while_open(hidden) {
            lock(&self.table).remove(hidden);
        }
    }
}
