//! Hard links (decision 0009): a file with several names keeps its attributes, size, link
//! count and extended attributes in one identity record, keyed by its file id
//! (`path::identity_key`) on the daemon that held its first name when it was linked; each
//! name's record says where that is (`Inode::shared`). A file with one name pays nothing.
//!
//! The link count is raised before a new name is inserted and lowered after a name is
//! removed, so a crash between the two steps leaves a count one too high (the identity, and
//! the data, outlive the last name: space leaks), never one too low (data lost while a name
//! remains).

use super::{fjall_err, MetaStore};
use eddy_proto::path;
use eddy_proto::{Errno, FileId, FileKind, Inode, Reply, Timespec};
use std::sync::atomic::Ordering;

/// Internal errno of an operation that reached a name of a shared file: the request goes
/// on to the identity record (`Reply::Shared`). The message is the normalised path. Never
/// sent to a client.
pub const ESHARED: i32 = 1 << 16;

/// The most names a file may have (ext4's limit); one more is EMLINK.
pub const LINK_MAX: u32 = 65_000;

/// `Err` for an operation on the record of a name of a shared file.
pub(super) fn redirect(norm: &str) -> Errno {
    Errno::new(ESHARED, norm)
}

impl MetaStore {
    /// An entry's record for an operation on the entry itself: a name of a shared file is
    /// ESHARED (the operation belongs to the identity record). Identity records pass.
    pub(crate) fn not_a_name(&self, norm: &str, key: &[u8], ino: Inode) -> Result<Inode, Errno> {
        if ino.shared.is_some() && !path::is_identity_key(key) {
            return Err(redirect(norm));
        }
        Ok(ino)
    }

    /// The reply that sends a request on the name `norm` (an ESHARED result) on to the
    /// identity record.
    pub fn shared_reply(&self, norm: &str) -> Result<Reply, Errno> {
        let key = path::meta_key(norm);
        match self.get(&key)? {
            Some(Inode {
                shared: Some(daemon),
                file_id,
                ..
            }) => Ok(Reply::Shared { daemon, file_id }),
            // Removed or replaced meanwhile by an unlinked entry: the caller asks again.
            _ => Err(Errno::new(
                libc::ESTALE,
                format!("{norm}: changed while the request was served; try again"),
            )),
        }
    }

    /// Counts one more name of the file at `p` (see `Request::Link`); `me` is this daemon's
    /// id, recorded in the names of a file whose identity record it creates. A linked path
    /// is imported through `via` first.
    pub fn link(&self, p: &str, me: u32, via: &dyn super::Through) -> Result<Inode, Errno> {
        let (norm, key) = self.key_of(p)?;
        let _guard = self.locks.lock(&key);
        let ino = self
            .get_or_import(&norm, &key, via)?
            .ok_or_else(|| Errno::enoent(&norm))?;
        if ino.kind == FileKind::Dir {
            return Err(Errno::new(
                libc::EPERM,
                format!("{norm}: a directory cannot have another name"),
            ));
        }
        let now = Timespec::now();
        if path::is_identity_key(&key) {
            if ino.nlink >= LINK_MAX {
                return Err(Errno::new(
                    libc::EMLINK,
                    format!("{norm}: the file has {LINK_MAX} names already"),
                ));
            }
            let ino = Inode {
                nlink: ino.nlink + 1,
                ctime: now,
                ..ino
            };
            self.put(&key, &ino, true)?;
            return Ok(ino);
        }
        // Under a linked prefix the client makes the link in the backend next (decision
        // 0029, `Request::BackendLink`).
        let ino = self.not_a_name(&norm, &key, ino)?;
        let identity = Inode {
            nlink: 2,
            shared: Some(me),
            ctime: now,
            ..ino
        };
        self.note_change(&path::identity_key(identity.file_id))?;
        self.note_change(&key)?;
        let meta = self.meta.made().map_err(|e| fjall_err("link", e))?;
        // Written to the system at once, as every single write is (fjall keeps a batch in
        // its buffer otherwise: a kill -9 would lose an acknowledged link).
        let mut batch = self.db.batch().durability(Some(fjall::PersistMode::Buffer));
        batch.insert(
            meta,
            path::identity_key(identity.file_id),
            identity.to_record(),
        );
        batch.insert(meta, key, identity.to_record());
        batch.commit().map_err(|e| fjall_err("link", e))?;
        self.entries.fetch_add(1, Ordering::Relaxed);
        Ok(identity)
    }

    /// Counts one name less of the shared file `file_id` (see `Request::DropName`).
    pub fn drop_name(&self, file_id: FileId) -> Result<Inode, Errno> {
        let key = path::identity_key(file_id);
        let _guard = self.locks.lock(&key);
        let ino = self
            .get(&key)?
            .ok_or_else(|| Errno::enoent(format!("identity record of file {file_id:032x}")))?;
        let ino = Inode {
            nlink: ino.nlink.saturating_sub(1),
            ctime: Timespec::now(),
            ..ino
        };
        if ino.nlink == 0 {
            self.delete(&key)?;
        } else {
            self.put(&key, &ino, true)?;
        }
        Ok(ino)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::NoBackend;
    use eddy_config::Config;
    use eddy_proto::{RemoveKind, SetAttr};

    fn open(dir: &std::path::Path) -> MetaStore {
        let config = Config::default();
        MetaStore::open(dir, &config).unwrap()
    }

    fn errno<T: std::fmt::Debug>(r: Result<T, Errno>) -> i32 {
        r.unwrap_err().errno
    }

    #[test]
    fn linking_makes_an_identity_record_and_a_name_that_points_at_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        store
            .create(
                "/f",
                Inode::new(FileKind::File, 9, 0o644, 1, 1),
                true,
                &NoBackend,
            )
            .unwrap();
        store
            .create(
                "/d",
                Inode::new(FileKind::Dir, 8, 0o755, 1, 1),
                true,
                &NoBackend,
            )
            .unwrap();
        assert_eq!(errno(store.link("/d", 4, &NoBackend)), libc::EPERM);
        assert_eq!(errno(store.link("/nope", 4, &NoBackend)), libc::ENOENT);
        let identity = store.link("/f", 4, &NoBackend).unwrap();
        assert_eq!((identity.nlink, identity.shared), (2, Some(4)));
        assert_eq!(store.entries(), 3);
        // Operations on the name belong to the identity record now.
        assert_eq!(errno(store.stat("/f", &NoBackend)), ESHARED);
        assert_eq!(errno(store.grow_size("/f", 10, &NoBackend)), ESHARED);
        assert_eq!(errno(store.link("/f", 4, &NoBackend)), ESHARED);
        assert_eq!(
            store.shared_reply("/f").unwrap(),
            Reply::Shared {
                daemon: 4,
                file_id: 9
            }
        );
        let id = path::identity_path(9);
        assert_eq!(store.grow_size(&id, 10, &NoBackend).unwrap().size, 10);
        let chmod = SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        };
        assert_eq!(store.set_attr(&id, &chmod, &NoBackend).unwrap().mode, 0o600);
        assert_eq!(store.link(&id, 4, &NoBackend).unwrap().nlink, 3);
        // Removing the name gives back where the identity is; the count goes down apart.
        let name = store.remove("/f", RemoveKind::NotDir, &NoBackend).unwrap();
        assert_eq!((name.shared, name.file_id), (Some(4), 9));
        assert_eq!(store.drop_name(9).unwrap().nlink, 2);
        assert_eq!(store.drop_name(9).unwrap().nlink, 1);
        let last = store.drop_name(9).unwrap();
        assert_eq!((last.nlink, last.size, last.mode), (0, 10, 0o600));
        assert_eq!(errno(store.stat(&id, &NoBackend)), libc::ENOENT);
        assert_eq!(errno(store.drop_name(9)), libc::ENOENT);
        assert_eq!(store.entries(), 1);
    }

    #[test]
    fn the_count_stops_at_link_max() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        store
            .create(
                "/f",
                Inode::new(FileKind::File, 3, 0o644, 1, 1),
                true,
                &NoBackend,
            )
            .unwrap();
        store.link("/f", 0, &NoBackend).unwrap();
        let key = path::identity_key(3);
        let full = Inode {
            nlink: LINK_MAX,
            ..store.get(&key).unwrap().unwrap()
        };
        store.put(&key, &full, true).unwrap();
        assert_eq!(
            errno(store.link(&path::identity_path(3), 0, &NoBackend)),
            libc::EMLINK
        );
    }

    #[test]
    fn identity_and_names_are_kept_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = open(dir.path());
            store
                .create(
                    "/f",
                    Inode::new(FileKind::File, 5, 0o644, 1, 1),
                    true,
                    &NoBackend,
                )
                .unwrap();
            let identity = store.link("/f", 1, &NoBackend).unwrap();
            store.insert("/g", identity, false).unwrap();
            store.persist().unwrap();
        }
        let store = open(dir.path());
        assert_eq!(store.entries(), 3);
        assert_eq!(errno(store.stat("/g", &NoBackend)), ESHARED);
        assert_eq!(
            store
                .stat(&path::identity_path(5), &NoBackend)
                .unwrap()
                .nlink,
            2
        );
        // Identity records are in no directory's listing.
        let names: Vec<String> = store
            .readdir("/", None, 100)
            .unwrap()
            .items
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["f", "g"]);
        assert_eq!(store.list_subtree("/", None, 100).unwrap().items.len(), 2);
    }
}
