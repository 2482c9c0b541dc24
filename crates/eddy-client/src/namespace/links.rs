//! Hard links (decision 0009): `link`, and what removing a name does to a file with several
//! names. Such a file's attributes live in one identity record, on the daemon that held its
//! first name when it was linked; each name's record points there, and a request on a name
//! is sent on to it (`Namespace::meta` follows `Reply::Shared`). The data of a file that lost
//! its last name is dropped by the data layer (`data/chunks.rs`).

use crate::namespace::Namespace;
use crate::perm::{self, Access};
use crate::{Creds, Errno, FileId, FileKind, Inode};
use eddy_proto::{req, typed_reply, Reply, Request, Rpc};

impl Namespace<'_> {
    /// link(2): `new` becomes one more name of the file at `old` (any entry but a
    /// directory). Both names then show the same file: one inode, one size, one link count.
    /// Returns the file's inode.
    pub async fn link(&self, old: &str, new: &str, creds: Creds) -> Result<Inode, Errno> {
        let old = self.norm(old)?;
        let new = self.norm(new)?;
        // Under one linked prefix the link is made in the backend too (decision 0029);
        // between a linked prefix and the rest, EXDEV.
        let linked = self.same_tier(&old, &new)?;
        let src = self.stat_as(&old, creds).await?;
        if src.kind == FileKind::Dir {
            return Err(Errno::new(
                libc::EPERM,
                format!("{old}: a directory cannot have another name"),
            ));
        }
        // Linux's protected_hardlinks: only the owner, or a caller who may read and write
        // the file, adds a name to it.
        if creds.enforce
            && creds.uid != src.uid
            && perm::check(&src, creds, Access::READ | Access::WRITE, &old).is_err()
        {
            return Err(Errno::new(
                libc::EPERM,
                format!("{old}: only its owner or who may read and write it may link it"),
            ));
        }
        self.check_parent(&new, creds).await?;
        if linked {
            // A backend entry at the new name is imported now, so the insert meets it (EEXIST).
            match self.stat_raw(&new).await {
                Ok(_) => {
                    return Err(Errno::new(libc::EEXIST, format!("{new}: file exists")));
                }
                Err(e) if e.errno == libc::ENOENT => {}
                Err(e) => return Err(e),
            }
        }
        // The count first, then the name: a failure in between leaves the count one too
        // high (the file outlives its last name), never one too low.
        let req = req::Link { path: old.clone() };
        let epoch = self.0.sizes.epoch();
        let file = self.meta(&old, req).await?;
        let Some(daemon) = file.shared else {
            return Err(Errno::eio(format!(
                "{old}: the daemon linked it without an identity record"
            )));
        };
        let insert = req::Insert {
            path: new.clone(),
            inode: file.clone(),
            replace: false,
        };
        let inserted = self
            .changing_parents(&[&new], self.meta(&new, insert))
            .await;
        if let Err(e) = inserted {
            if let Err(undo) = self.drop_name(daemon, file.file_id).await {
                tracing::warn!(%old, %new, "link failed and its count stays one too high: {undo}");
            }
            return Err(e);
        }
        if linked {
            // The backend's link after the name: a refusal takes the name out again.
            let req = req::BackendLink {
                file_id: file.file_id,
                from: old.clone(),
                to: new.clone(),
            };
            if let Err(e) = self.to_identity(daemon, file.file_id, req).await {
                let removed = self.meta(
                    &new,
                    req::Remove {
                        path: new.clone(),
                        kind: eddy_proto::RemoveKind::NotDir,
                    },
                );
                if let Err(undo) = removed.await {
                    tracing::warn!(%old, %new, "backend link failed and the new name stays: {undo}");
                } else if let Err(undo) = self.drop_name(daemon, file.file_id).await {
                    tracing::warn!(%old, %new, "link failed and its count stays one too high: {undo}");
                }
                return Err(e);
            }
        }
        match self.merge_pending(file, epoch) {
            (file, true) => Ok(file),
            _ => self.stat_raw(&new).await,
        }
    }

    /// `req`, a request on an entry's path, sent to the identity record of the shared file
    /// `file_id` that `daemon` holds.
    pub(crate) async fn on_identity<R: Rpc>(
        &self,
        daemon: u32,
        file_id: FileId,
        req: R,
    ) -> Result<R::Reply, Errno> {
        typed_reply::<R>(self.on_identity_raw(daemon, file_id, &req.into()).await?)
    }

    /// `on_identity` for a request as it travels, answered with the reply as it came.
    pub(crate) async fn on_identity_raw(
        &self,
        daemon: u32,
        file_id: FileId,
        req: &Request,
    ) -> Result<Reply, Errno> {
        let op = eddy_proto::encode(req)?;
        let req = req::OnIdentity { file_id, op }.into();
        self.to_identity_raw(daemon, file_id, &req).await
    }

    /// `req` sent to the daemons holding the identity record of the shared file `file_id`
    /// whose names point at `daemon`. A refusal for this client's epoch (not applied) is
    /// sent again to the holders under the new view: the record moves with a deployment
    /// that drains its daemon (decision 0083).
    async fn to_identity<R: Rpc>(
        &self,
        daemon: u32,
        file_id: FileId,
        req: R,
    ) -> Result<R::Reply, Errno> {
        typed_reply::<R>(self.to_identity_raw(daemon, file_id, &req.into()).await?)
    }

    /// `to_identity` for a request as it travels, answered with the reply as it came.
    async fn to_identity_raw(
        &self,
        daemon: u32,
        file_id: FileId,
        req: &Request,
    ) -> Result<Reply, Errno> {
        self.rpc()
            .retry_moved(|| async {
                self.failover(&self.rpc().identity_holders(daemon, file_id), req)
                    .await
            })
            .await
    }

    /// What removing the name `name` whose record was `removed` leaves to do: a shared file
    /// counts one name less and loses its data with the last one; any other file loses its
    /// data. Under a linked prefix, the dirty data of a shared file that keeps other names
    /// is written back through one of them from now on (decision 0029); `None` when the
    /// name now names another file (a rename over it).
    pub(crate) async fn release_name(
        &self,
        name: Option<&str>,
        removed: &Inode,
    ) -> Result<(), Errno> {
        let Some(daemon) = removed.shared else {
            return self.data().drop_file(removed).await;
        };
        let left = self.drop_name_left(daemon, removed.file_id).await?;
        let Some(name) = name else {
            return Ok(());
        };
        if left > 0 && self.config().link_for(name).is_some() {
            let req = req::LinkedNames {
                file_id: removed.file_id,
            };
            let names = self.to_identity(daemon, removed.file_id, req).await?;
            if let Some(other) = names.iter().find(|n| n.as_str() != name) {
                self.rebind(name, other).await?;
            }
        }
        Ok(())
    }

    /// Counts one name less of a shared file; at zero its data goes.
    async fn drop_name(&self, daemon: u32, file_id: FileId) -> Result<(), Errno> {
        self.drop_name_left(daemon, file_id).await.map(|_| ())
    }

    /// `drop_name`, answering the names left.
    async fn drop_name_left(&self, daemon: u32, file_id: FileId) -> Result<u32, Errno> {
        let req = req::DropName { file_id };
        let left = self.to_identity(daemon, file_id, req).await?;
        if left.nlink == 0 {
            self.data().drop_file(&left).await?;
        }
        Ok(left.nlink)
    }
}
