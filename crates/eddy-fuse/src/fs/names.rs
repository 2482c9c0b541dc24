//! Names: renames through the mount (their flags, and the open files that follow them), and
//! the files unlinked while open, which live on under a hidden name until their last close.

use super::*;

pub(crate) use eddy_config::{is_hidden_orphan, HIDDEN_ORPHAN};

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
        self.keep_replaced(req, from, to)?;
        self.run(self.client.rename(from, to, creds(req)))?;
        lock(&self.table).rename(from, to);
        self.rebind_files(from, to);
        Ok(())
    }

    /// A rename over a file that handles of this mount hold open replaces that name, as an
    /// unlink would: the file is first hidden like a file unlinked while open, so that its
    /// handles (fstat, reads, writes) keep reaching it until the last close (decision 0061).
    /// Nothing is done when no handle has `to` open (no request), or when `from` is another
    /// name of the same file (the rename then changes nothing).
    fn keep_replaced(&self, req: &Request, from: &str, to: &str) -> Result<(), Errno> {
        if is_hidden_orphan(to.rsplit('/').next().unwrap_or(to)) {
            return Ok(());
        }
        let open = lock(&self.files)
            .values()
            .find(|f| f.path() == to)
            .map(File::file_id);
        let Some(victim) = open else {
            return Ok(());
        };
        if self.run(self.client.stat(from))?.file_id == victim {
            return Ok(());
        }
        match self.hide_orphan(req, to, victim) {
            // Removed meanwhile (on another node): nothing left to replace.
            Err(e) if e.errno == libc::ENOENT => Ok(()),
            res => res,
        }
    }

    /// POSIX keeps an unlinked file alive while it is open. Like NFS, the mount renames a file
    /// unlinked while one of its handles is open to a hidden name in the same directory (left
    /// out of listings), and removes it when the last handle is released.
    pub(super) fn hide_orphan(
        &self,
        req: &Request,
        path: &str,
        file_id: u128,
    ) -> Result<(), Errno> {
        let hidden =
            eddy_proto::path::join(parent_of(path), &format!("{HIDDEN_ORPHAN}{file_id:032x}"));
        self.do_rename(req, path, &hidden, RenameFlags::empty())?;
        lock(&self.orphans).insert(hidden);
        Ok(())
    }

    /// Removes an orphan for good once no handle of this mount has it open.
    pub(super) fn reap_orphan(&self, path: &str) {
        if !lock(&self.orphans).contains(path)
            || lock(&self.files).values().any(|f| f.path() == path)
        {
            return;
        }
        lock(&self.orphans).remove(path);
        match self.run(self.client.unlink(path, Creds::root())) {
            Ok(()) => {
                lock(&self.table).remove(path);
            }
            Err(e) => debug!(
                path,
                "cannot remove an unlinked file after its last close: {e}"
            ),
        }
    }

    /// An open file keeps the path it was opened by, and the client reaches the file's
    /// metadata (size updates, stat) through it. After a rename, the handles of this mount
    /// open at or below the old path are reopened at the new one, so that their writes keep
    /// publishing the size (a log renamed away while its writer goes on, for instance).
    pub(super) fn rebind_files(&self, from: &str, to: &str) {
        let moved: Vec<(u64, File)> = lock(&self.files)
            .iter()
            .filter(|(_, f)| is_at_or_below(f.path(), from))
            .map(|(fh, f)| (*fh, f.clone()))
            .collect();
        for (fh, old) in moved {
            let path = format!("{to}{}", &old.path()[from.len()..]);
            match self.run(
                self.client
                    .open(&path, reopen_flags(&old), 0, Creds::root()),
            ) {
                Ok(new) if new.file_id() == old.file_id() => {
                    let mut files = lock(&self.files);
                    if files.contains_key(&fh) {
                        files.insert(fh, new);
                    }
                }
                Ok(_) => debug!(
                    path,
                    "renamed file was replaced meanwhile; handle not moved"
                ),
                Err(e) => debug!(path, "cannot reopen a renamed file: {e}"),
            }
        }
    }
}
