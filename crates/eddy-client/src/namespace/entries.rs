//! Namespace operations: stat, create (with its directory's times: `create_in_parent`),
//! mkdir, symlink, unlink and rmdir, setattr and truncate, the set-id bits a truncate or a
//! write by an unprivileged caller clears, and listings of entries (rename is in
//! `rename.rs`, hard links in `links.rs`).

use crate::namespace::dirtimes::parent;
use crate::namespace::Namespace;
use crate::perm;
use crate::{
    new_inode, Creds, DirEntry, DirReader, Errno, File, FileKind, Inode, SetAttr, Timespec,
};
use eddy_proto::path;
use eddy_proto::{req, RemoveKind};
use std::sync::atomic::Ordering;

impl Namespace<'_> {
    // ---------------------------------------------------------------- metadata

    /// lstat: the entry itself (a symlink is not followed).
    pub async fn stat(&self, path: &str) -> Result<Inode, Errno> {
        let p = self.norm(path)?;
        self.stat_norm(&p).await
    }

    /// Like `stat`, for a caller that knows the parent is a directory (a kernel looking up a
    /// name in a directory it holds): a missing entry is ENOENT at the cost of one RPC, with no
    /// look at the ancestors.
    pub async fn lookup(&self, path: &str) -> Result<Inode, Errno> {
        let p = self.norm(path)?;
        self.stat_raw(&p).await
    }

    /// Like `stat`, for a mount answering the kernel's GETATTR (decision 0050): a directory
    /// this client has seen within `dir_cache_ms`, and not changed since but for its times
    /// (which this client's stats show at once), is answered from its cache of recent
    /// directories; anything else is asked for, and a directory remembered. A change another
    /// client made to the directory shows within `dir_cache_ms`.
    pub async fn stat_recent(&self, path: &str) -> Result<Inode, Errno> {
        let p = self.norm(path)?;
        if let Some(dir) = self.0.dircache.get_exact(&p) {
            return Ok(self.with_dir_times(&p, dir));
        }
        let since = self.0.dircache.epoch();
        let i = self.stat_norm(&p).await?;
        self.0.dircache.put(&p, &i, since);
        Ok(i)
    }

    pub async fn mkdir(&self, path: &str, mode: u32, creds: Creds) -> Result<Inode, Errno> {
        let p = self.norm(path)?;
        let inode = new_inode(FileKind::Dir, mode, creds, None);
        // In a directory known to exist, the parent's link count goes up alongside the
        // create (one round trip) and back down if the create fails; elsewhere after it.
        let parent_known = path::split(&p).is_some_and(|(d, _)| self.0.dircache.get(d).is_some());
        let made = if parent_known {
            let up = [(p.as_str(), 1)];
            let (made, ()) = futures::join!(
                self.create_entry(&p, inode, true, creds),
                self.count_subdirs(&up)
            );
            if made.is_err() {
                self.count_subdirs(&[(&p, -1)]).await;
            }
            made?
        } else {
            let made = self.create_entry(&p, inode, true, creds).await?;
            self.count_subdirs(&[(&p, 1)]).await;
            made
        };
        // Just made by this exclusive create: as its owner has it (a stat may answer it).
        self.0.dircache.put(&p, &made, self.0.dircache.epoch());
        // Empty and made here: every name in it is known absent under a lease.
        if self.0.leases.on() {
            self.acquire_lease(&p).await;
        }
        Ok(made)
    }

    /// Creates an entry at its owner after checking its parent; without `exclusive`, an
    /// existing entry is returned as it is.
    pub(crate) async fn create_entry(
        &self,
        p: &str,
        mut inode: Inode,
        exclusive: bool,
        creds: Creds,
    ) -> Result<Inode, Errno> {
        let dir = self.parent_dir(p, creds).await?;
        if matches!(inode.kind, FileKind::File | FileKind::Dir) {
            // The placement the parent asks (decision 0043): the parent as checked, else
            // as recently seen, else looked up (once per `dir_cache_ms`).
            let dir = match dir {
                Some(d) => Some(d),
                None => self.parent_for_placement(p).await,
            };
            self.data().place_new(dir.as_ref(), &mut inode).await;
        }
        self.create_in_parent(p, inode, exclusive).await
    }

    /// Creates the entry `p` at its owner (see `Request::Create`) and moves its directory's
    /// times: alongside when `exclusive` (the entry is new if it succeeds); otherwise, since
    /// the entry may be there already, deferred and only if this call made it.
    pub(crate) async fn create_in_parent(
        &self,
        p: &str,
        inode: Inode,
        exclusive: bool,
    ) -> Result<Inode, Errno> {
        let (fresh, time) = (inode.file_id, Timespec::now());
        let create = self.meta(
            p,
            req::Create {
                path: p.to_string(),
                inode,
                exclusive,
            },
        );
        if exclusive {
            let made = self.changing_parents(&[p], create).await?;
            self.note_present(p);
            return Ok(made);
        }
        let got = create.await?;
        self.note_present(p);
        if let (true, Some(dir)) = (got.file_id == fresh, parent(p)) {
            self.changed_dir_later(dir, time);
        }
        Ok(got)
    }

    /// The parent of `p` for its placement attribute, from the directory cache or its owner;
    /// `None` if it cannot be looked up (the create then finds out why).
    pub(crate) async fn parent_for_placement(&self, p: &str) -> Option<Inode> {
        let (parent, _) = path::split(p)?;
        if let Some(d) = self.0.dircache.get(parent) {
            return Some(d);
        }
        let since = self.0.dircache.epoch();
        let d = self.stat_norm(parent).await.ok()?;
        self.0.dircache.put(parent, &d, since);
        Some(d)
    }

    pub async fn symlink(
        &self,
        target: &str,
        linkpath: &str,
        creds: Creds,
    ) -> Result<Inode, Errno> {
        let p = self.norm(linkpath)?;
        if target.is_empty() || target.contains('\0') {
            return Err(Errno::einval(
                "symlink target must be non-empty and NUL-free",
            ));
        }
        if target.len() > eddy_proto::path::MAX_SYMLINK_TARGET {
            return Err(Errno::new(
                libc::ENAMETOOLONG,
                format!(
                    "symlink target of {} bytes exceeds {} bytes",
                    target.len(),
                    eddy_proto::path::MAX_SYMLINK_TARGET
                ),
            ));
        }
        let inode = new_inode(FileKind::Symlink, 0o777, creds, Some(target.to_string()));
        self.create_entry(&p, inode, true, creds).await
    }

    pub async fn readlink(&self, path: &str) -> Result<String, Errno> {
        let i = self.stat(path).await?;
        match (i.kind, i.target) {
            (FileKind::Symlink, Some(t)) => Ok(t),
            _ => Err(Errno::einval(format!("{path} is not a symbolic link"))),
        }
    }

    /// unlink(2). A file a handle of this client holds open lives on under a hidden name
    /// until the last of them is closed (`held`, decision 0061).
    pub async fn unlink(&self, path: &str, creds: Creds) -> Result<(), Errno> {
        let p = self.norm(path)?;
        self.check_remove(&p, None, creds).await?;
        if self.unlink_leased(&p).await {
            return Ok(());
        }
        if self.hide_if_open(&p, creds).await? {
            // The name is gone (the file lives on under its hidden name): a lease on its
            // directory must not count it present, or an O_EXCL create of it gets EEXIST.
            self.note_absent(&p);
            return Ok(());
        }
        self.remove_name(&p).await
    }

    /// Removes the name `path` (normalised) of a non-directory, whatever is open.
    pub(crate) async fn unlink_now(&self, path: &str, creds: Creds) -> Result<(), Errno> {
        let p = self.norm(path)?;
        self.check_remove(&p, None, creds).await?;
        self.remove_name(&p).await
    }

    async fn remove_name(&self, p: &str) -> Result<(), Errno> {
        self.settle_name(p).await;
        let p = p.to_string();
        let remove = self.meta(
            &p,
            req::Remove {
                path: p.clone(),
                kind: RemoveKind::NotDir,
            },
        );
        let removed = match self.changing_parents(&[&p], remove).await {
            Ok(r) => r,
            Err(e) if e.errno == libc::ENOENT => return Err(self.refine_enoent(&p, e).await),
            Err(e) => return Err(e),
        };
        self.note_absent(&p);
        self.release_name(Some(&p), &removed).await
    }

    pub async fn rmdir(&self, path: &str, creds: Creds) -> Result<(), Errno> {
        let p = self.norm(path)?;
        if p == "/" {
            return Err(Errno::new(libc::EBUSY, "cannot remove the root directory"));
        }
        // Its own lease (and those below) go back first; its name is settled in its parent.
        self.give_back_within(&p).await;
        self.settle_name(&p).await;
        self.check_remove(&p, None, creds).await?;
        let dir = self.stat_norm(&p).await?;
        if dir.kind != FileKind::Dir {
            return Err(Errno::new(libc::ENOTDIR, format!("{p} is not a directory")));
        }
        self.ensure_empty(&p).await?;
        let remove = self.meta(
            &p,
            req::Remove {
                path: p.clone(),
                kind: RemoveKind::Dir,
            },
        );
        self.0.dircache.forget_tree(&p);
        let removed = self.changing_parents(&[&p], remove).await;
        // A stat that crossed the remove is not kept either.
        self.0.dircache.forget_tree(&p);
        removed?;
        self.note_absent(&p);
        self.count_subdirs(&[(&p, -1)]).await;
        Ok(())
    }

    pub(crate) async fn ensure_empty(&self, dir: &str) -> Result<(), Errno> {
        self.settle_dir(dir).await;
        for r in self
            .rpc()
            .all_ok(|| req::HasChildren {
                dir: dir.to_string(),
            })
            .await?
        {
            if r {
                return Err(Errno::new(libc::ENOTEMPTY, format!("{dir} is not empty")));
            }
        }
        Ok(())
    }

    pub async fn truncate(&self, path: &str, size: u64, creds: Creds) -> Result<Inode, Errno> {
        self.setattr(
            path,
            SetAttr {
                size: Some(size),
                ..SetAttr::default()
            },
            creds,
        )
        .await
    }

    /// chmod, chown, utimens and truncate in one call; returns the new inode.
    pub async fn setattr(&self, path: &str, attr: SetAttr, creds: Creds) -> Result<Inode, Errno> {
        let p = self.norm(path)?;
        self.settle_name(&p).await;
        let cur = self.stat_as(&p, creds).await?;
        let attr = perm::check_setattr(&cur, &attr, creds, &p)?;
        if cur.kind == FileKind::Dir {
            self.0.dircache.forget_tree(&p);
        }
        let truncated = attr.size.is_some();
        if truncated && cur.kind == FileKind::File {
            // Whatever handle of this client wrote the file directly, its writes are reported
            // before the daemons cut the chunks, so that the cut drops their bytes past the
            // new size (decision 0059).
            self.report_every_handle(cur.file_id).await?;
        }
        // Under the file's publication gate: a publication under way ends first and none
        // starts meanwhile. A truncate then drops the sizes reached before it; any other change
        // first publishes them, so that the inode the owner replies with is the whole file
        // (a kernel takes that size as the file's).
        let held = match cur.kind {
            FileKind::File => self.0.sizes.hold(cur.file_id).await,
            _ => None,
        };
        let _dir_held = match cur.kind {
            FileKind::Dir => self.settle_dir_times(&p).await,
            _ => None,
        };
        if attr.size.is_none() && held.is_some() {
            if let Some((_, size)) = self.0.sizes.take(cur.file_id, false) {
                self.send_size(cur.file_id, &p, size).await?;
            }
        }
        let attr_size = attr.size.is_some();
        if let Some(size) = attr.size {
            if cur.kind == FileKind::Dir {
                return Err(Errno::new(libc::EISDIR, format!("{p} is a directory")));
            }
            if cur.kind != FileKind::File {
                return Err(Errno::einval(format!("{p} is not a regular file")));
            }
            // Sizes this client's earlier writes reached no longer hold.
            self.0.sizes.forget(cur.file_id);
            self.data()
                .truncate_data(cur.file_id, size, cur.size)
                .await?;
        }
        let req = req::SetAttr {
            path: p.clone(),
            attr,
        };
        let i = self.meta(&p, req).await;
        if attr_size {
            crate::file::truncated();
        }
        let i = i?;
        let res = self.clear_setid_after(&p, i, truncated, creds).await;
        if cur.kind == FileKind::Dir {
            // A stat that crossed the change is not kept either.
            self.0.dircache.forget(&p);
        }
        res
    }

    /// After a truncate (`truncated`) by a caller without the privilege to keep set-id bits,
    /// clears those the new inode `i` still has; returns the inode as it is then.
    pub(crate) async fn clear_setid_after(
        &self,
        p: &str,
        i: Inode,
        truncated: bool,
        creds: Creds,
    ) -> Result<Inode, Errno> {
        if !truncated || creds.keeps_setid() || i.kind != FileKind::File || !perm::has_setid(i.mode)
        {
            return Ok(i);
        }
        let req = req::ClearSetId {
            path: p.to_string(),
        };
        self.meta(p, req).await
    }

    /// Clears the set-id bits of an open file on the first write through `f` by a writer
    /// without the privilege to keep them, when the file had some at open; a no-op otherwise.
    /// Sent alongside the write's data. (A bit set after the open is not seen by the writer:
    /// asking the owner with every write would double the metadata requests of writes.)
    pub(crate) async fn clear_setid_on_write(&self, f: &File, clear: bool) -> Result<(), Errno> {
        if !clear
            || !perm::has_setid(f.inode_mode())
            || f.0.setid_cleared.swap(true, Ordering::AcqRel)
        {
            return Ok(());
        }
        self.settle_open(&f.path()).await?;
        let req = req::ClearSetId {
            path: f.path().to_string(),
        };
        self.meta(&f.path(), req).await.map(|_| ())
    }

    /// The inode of an entry listed in `dir` as this client sees it: the listing's own, or, for
    /// a file this client is writing, a fresh stat that counts its unpublished writes (the
    /// listing may predate them).
    pub async fn entry_inode(&self, dir: &str, entry: &DirEntry) -> Result<Inode, Errno> {
        let i = &entry.inode;
        if i.kind == FileKind::Dir {
            return Ok(self.with_dir_times(&path::join(dir, &entry.name), i.clone()));
        }
        if i.kind == FileKind::File && self.0.sizes.written(i.file_id) {
            return self.stat_raw(&path::join(dir, &entry.name)).await;
        }
        Ok(i.clone())
    }

    /// A cursor over the entries of `dir`, resuming after the name `after`.
    pub fn readdir(&self, dir: &str, after: Option<String>) -> Result<DirReader, Errno> {
        let p = self.norm(dir)?;
        Ok(DirReader::new(self.client(), p, after))
    }
}
