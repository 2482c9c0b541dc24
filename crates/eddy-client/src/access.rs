//! What the library looks up to apply the rules of `perm.rs`: the directories a path resolves
//! through (search permission on each), the parent of an entry created or removed (write and
//! search permission), the entry itself in a sticky directory. Callers the library does not
//! check (root, the kernel through FUSE) pay no lookup here. The lookups are the namespace
//! layer's (`Client::ns`); the set-id bits a truncate or a write clears are cleared there too
//! (`namespace/entries.rs`).

use crate::perm::{self, Access};
use crate::{Client, Creds, Errno, FileKind, Inode};
use eddy_proto::path;
use futures::future::join_all;

/// The directories a path resolves through, from the root to its parent.
fn ancestors(p: &str) -> Vec<&str> {
    let mut dirs = Vec::new();
    let mut cur = p;
    while let Some((parent, _)) = path::split(cur) {
        dirs.push(parent);
        cur = parent;
    }
    dirs.reverse();
    dirs
}

impl Client {
    /// The directories `p` resolves through, from the root to its parent, for a caller the
    /// library checks: each must exist (ENOENT), be a directory (ENOTDIR) and be searchable
    /// (EACCES); the first failing one from the root decides. They are asked for at once.
    async fn resolve_dirs(&self, p: &str, creds: Creds) -> Result<Vec<Inode>, Errno> {
        let dirs = ancestors(p);
        let stats = join_all(dirs.iter().map(|d| self.dir_inode(d))).await;
        let mut out = Vec::with_capacity(dirs.len());
        for (d, stat) in dirs.iter().zip(stats) {
            let dir = stat?;
            perm::check_search(&dir, creds, d)?;
            out.push(dir);
        }
        Ok(out)
    }

    /// Search permission on every directory above `p`, for a caller the library checks.
    pub(crate) async fn check_path(&self, p: &str, creds: Creds) -> Result<(), Errno> {
        if !creds.checked() {
            return Ok(());
        }
        self.resolve_dirs(p, creds).await.map(|_| ())
    }

    /// The entry of `p` for `creds`: a failure to resolve the path (EACCES on a directory
    /// above) comes before the entry's own (ENOENT). Both are asked for at once.
    pub(crate) async fn stat_as(&self, p: &str, creds: Creds) -> Result<Inode, Errno> {
        let ns = self.ns();
        let (entry, searched) = futures::join!(ns.stat_norm(p), self.check_path(p, creds));
        searched?;
        entry
    }

    /// The parent directory of `p`, about to get or lose an entry: a directory (ENOTDIR)
    /// the caller may write and search (EACCES), below directories it may search. `None`
    /// when the caller has resolved it itself (the kernel through FUSE) and is not checked.
    pub(crate) async fn parent_dir(&self, p: &str, creds: Creds) -> Result<Option<Inode>, Errno> {
        if creds.parent_resolved && !creds.enforce {
            return Ok(None);
        }
        let Some((parent, _)) = path::split(p) else {
            return Err(Errno::new(libc::EEXIST, "/ already exists"));
        };
        let dir = if creds.checked() {
            let mut dirs = self.resolve_dirs(p, creds).await?;
            dirs.pop()
                .ok_or_else(|| Errno::eio(format!("{p}: no parent directory")))?
        } else {
            let dir = match self.0.dircache.get(parent) {
                Some(dir) => dir,
                None => {
                    let since = self.0.dircache.epoch();
                    let dir = self.ns().stat_norm(parent).await?;
                    self.0.dircache.put(parent, &dir, since);
                    dir
                }
            };
            if dir.kind != FileKind::Dir {
                return Err(Errno::new(
                    libc::ENOTDIR,
                    format!("{parent} is not a directory"),
                ));
            }
            dir
        };
        perm::check(&dir, creds, Access::WRITE | Access::EXEC, parent)?;
        Ok(Some(dir))
    }

    /// Checks that an enforcing caller may remove the entry `p` (unlink, rmdir, the source of
    /// a rename) or replace it (the target of a rename): the parent as `parent_dir` says and,
    /// in a sticky directory, the entry's owner (EPERM). `entry` is the entry if the caller
    /// has it; otherwise it is looked up, only when the sticky bit makes it matter.
    pub(crate) async fn check_remove(
        &self,
        p: &str,
        entry: Option<&Inode>,
        creds: Creds,
    ) -> Result<(), Errno> {
        if !creds.enforce {
            return Ok(());
        }
        let Some(dir) = self.parent_dir(p, creds).await? else {
            return Ok(());
        };
        if !creds.checked() || !perm::is_sticky(&dir) || creds.uid == dir.uid {
            return Ok(());
        }
        let entry = match entry {
            Some(e) => e.clone(),
            None => self.ns().stat_norm(p).await?,
        };
        perm::check_sticky(&dir, &entry, creds, p)
    }

    /// The rules of rename(2) for an enforcing caller, besides the target's parent (checked
    /// for every caller): the source may leave its directory and the target, if any, may be
    /// replaced (`check_remove`); a directory moved to another parent needs write permission
    /// on itself (its ".." changes).
    pub(crate) async fn check_rename(
        &self,
        (from, src): (&str, &Inode),
        (to, dst): (&str, Option<&Inode>),
        creds: Creds,
    ) -> Result<(), Errno> {
        if !creds.enforce {
            return Ok(());
        }
        self.check_remove(from, Some(src), creds).await?;
        if let Some(d) = dst {
            self.check_remove(to, Some(d), creds).await?;
        }
        let parent = |p| path::split(p).map(|(d, _)| d);
        if src.kind == FileKind::Dir && parent(from) != parent(to) {
            perm::check(src, creds, Access::WRITE, from)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::ancestors;

    #[test]
    fn ancestors_from_the_root() {
        assert_eq!(ancestors("/a/b/c"), ["/", "/a", "/a/b"]);
        assert_eq!(ancestors("/a"), ["/"]);
        assert!(ancestors("/").is_empty());
    }
}
