//! Hard links under a linked prefix (decision 0029), on the daemon holding the file's
//! identity record: the link made in the backend too (`backend_link`), and the names the
//! identity is written back through. The names are kept in the tier's records (`n<file id>`
//! → the backend file's (st_dev, st_ino) and the namespace paths given to it), follow
//! renames (`rebind_names`), and are checked against the backend when used: a name whose
//! backend entry is gone or is another file (unlinked, replaced) is no longer one.

use super::{rec_err, under, Tier};
use crate::meta::MetaStore;
use eddy_proto::path;
use eddy_proto::{Errno, FileId, FileKind, Inode};
use std::os::unix::fs::MetadataExt;

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Names {
    dev: u64,
    ino: u64,
    paths: Vec<String>,
}

fn names_key(id: FileId) -> Vec<u8> {
    let mut key = Vec::with_capacity(17);
    key.push(b'n');
    key.extend_from_slice(&id.to_be_bytes());
    key
}

impl Tier {
    fn names(&self, id: FileId) -> Result<Option<Names>, Errno> {
        Ok(self
            .records
            .get(names_key(id))
            .map_err(|e| rec_err("get", e))?
            .and_then(|v| bincode::deserialize(&v).ok()))
    }

    fn save_names(&self, id: FileId, names: &Names) -> Result<(), Errno> {
        let bytes = bincode::serialize(names).unwrap_or_default();
        self.records
            .insert(names_key(id), bytes)
            .map_err(|e| rec_err("insert", e))
    }

    /// `to` becomes another backend name of the file `id`, whose identity record `meta`
    /// holds: link(2) in the backend from `from`. A file never written back has no backend
    /// copy yet: it is created empty first (its data, size, mode and times come at
    /// stage-out), so that every name is a name of one backend file from the start.
    pub fn backend_link(
        &self,
        meta: &MetaStore,
        id: FileId,
        from: &str,
        to: &str,
    ) -> Result<(), Errno> {
        let (from, _) = meta.key_of(from)?;
        let (to, _) = meta.key_of(to)?;
        let identity = path::identity_key(id);
        let _guard = meta.lock(&identity);
        let ino = meta
            .get(&identity)?
            .ok_or_else(|| Errno::enoent(format!("identity record of file {id:032x}")))?;
        let (Some(bf), Some(bt)) = (self.linked(&from), self.linked(&to)) else {
            return Err(Errno::new(
                libc::EXDEV,
                format!("{from} and {to} are not both under a linked prefix"),
            ));
        };
        if ino.kind != FileKind::File {
            return Err(Errno::einval(format!(
                "{from}: only regular files are linked in the backend"
            )));
        }
        // With several backends, both names in the file's (decision 0073).
        let (bf, bt, refused) = self.link_store(&ino, &from, &to)?.unwrap_or((bf, bt, None));
        let (f, t) = (bf.clone(), bt);
        let only_source = refused.is_some();
        let seen = self.backend.run("link", &bf, move || {
            use std::os::unix::fs::OpenOptionsExt;
            let (reached_f, reached_t) = (crate::backend::reach(&f)?, crate::backend::reach(&t)?);
            let (f, t) = (reached_f.path(), reached_t.path());
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(f)
            {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                other => drop(other?),
            }
            if only_source {
                return std::fs::symlink_metadata(f);
            }
            std::fs::hard_link(f, t)?;
            std::fs::symlink_metadata(t)
        })?;
        let mut names = self.names(id)?.unwrap_or_default();
        if (names.dev, names.ino) != (seen.dev(), seen.ino()) {
            names = Names {
                dev: seen.dev(),
                ino: seen.ino(),
                paths: Vec::new(),
            };
        }
        let made: &[String] = if refused.is_some() {
            &[from]
        } else {
            &[from, to]
        };
        for p in made {
            if !names.paths.contains(p) {
                names.paths.push(p.clone());
            }
        }
        self.save_names(id, &names)?;
        match refused {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The names of the file `id` that still name its backend file (checked there).
    pub fn linked_names(&self, id: FileId) -> Result<Vec<String>, Errno> {
        let Some(names) = self.names(id)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for p in &names.paths {
            // With several backends, where the name is (decision 0073).
            let Some((_, bp)) = self.locate(p)? else {
                continue;
            };
            let q = bp.clone();
            let m = self.backend.run("lstat", &bp, move || {
                let Some(reached) = crate::backend::reach_existing(&q)? else {
                    return Ok(None);
                };
                match std::fs::symlink_metadata(reached.path()) {
                    Ok(m) => Ok(Some((m.dev(), m.ino()))),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(e),
                }
            })?;
            if m == Some((names.dev, names.ino)) {
                out.push(p.clone());
            }
        }
        Ok(out)
    }

    /// A linked entry moved from `from` to `to`: the names under it follow.
    pub(super) fn rebind_names(&self, from: &str, to: &str) -> Result<(), Errno> {
        let mut changed = Vec::new();
        for guard in self.records.prefix(b"n") {
            let (key, value) = guard.into_inner().map_err(|e| rec_err("scan", e))?;
            let Ok(mut names) = bincode::deserialize::<Names>(&value) else {
                continue;
            };
            let mut moved = false;
            for p in names.paths.iter_mut() {
                if under(p, from) {
                    *p = format!("{to}{}", &p[from.len()..]);
                    moved = true;
                }
            }
            if moved {
                changed.push((key.to_vec(), names));
            }
        }
        for (key, names) in changed {
            let bytes = bincode::serialize(&names).unwrap_or_default();
            self.records
                .insert(key, bytes)
                .map_err(|e| rec_err("insert", e))?;
        }
        Ok(())
    }

    /// The file `id` lost its last name: its names go too.
    pub(crate) fn forget_names(&self, id: FileId) -> Result<(), Errno> {
        self.records
            .remove(names_key(id))
            .map_err(|e| rec_err("remove", e))
    }
}

/// The file id of a backend file with several names: the same from any of its names, on
/// any daemon (decision 0029).
pub(super) fn backend_file_id(dev: u64, ino: u64) -> FileId {
    let mut bytes = Vec::with_capacity(32);
    bytes.extend_from_slice(b"eddy backend file\0");
    bytes.extend_from_slice(&dev.to_be_bytes());
    bytes.extend_from_slice(&ino.to_be_bytes());
    eddy_placement::hashed_file_id(xxhash_rust::xxh3::xxh3_128(&bytes))
}

impl Tier {
    /// An imported stub of a backend file with several names (`import_stub`) becomes a name
    /// of one Eddy file, whose identity record lives on the daemon placement gives its
    /// identity path and is made there when a request first reaches it
    /// (`identity_of_name`). Without the deployment's members: a file of its own.
    pub(super) fn share(&self, mut inode: Inode) -> Inode {
        if inode.kind != FileKind::File || inode.nlink <= 1 {
            return inode;
        }
        match &self.members {
            Some((placement, _)) => {
                inode.shared = Some(placement.meta_owner(&path::identity_path(inode.file_id)));
            }
            None => {
                inode.file_id = eddy_placement::hashed_file_id(rand::random::<u128>());
                inode.nlink = 1;
            }
        }
        inode
    }

    /// A request on the identity record of the file `id` came through its name `name`: an
    /// identity of a backend file with several names not held yet is made from the backend
    /// (if `name` is still a name of that backend file), and `name` is recorded as one its
    /// data may be written back through. Nothing for a name that is not linked.
    pub fn identity_of_name(&self, meta: &MetaStore, id: FileId, name: &str) -> Result<(), Errno> {
        let Ok((norm, _)) = meta.key_of(name) else {
            return Ok(());
        };
        let Some((_, bp)) = self.locate(&norm)? else {
            return Ok(());
        };
        let key = path::identity_key(id);
        let _guard = meta.lock(&key);
        if meta.get(&key)?.is_none() {
            let Some((_, me)) = &self.members else {
                return Ok(());
            };
            let p = bp.clone();
            let found = self.backend.run("lstat", &bp, move || {
                let Some(inode) = super::import::import_stub(&p)? else {
                    return Ok(None);
                };
                let m = std::fs::symlink_metadata(crate::backend::reach(&p)?.path())?;
                Ok(Some((inode, m.dev(), m.ino())))
            })?;
            let Some((inode, dev, ino)) = found.filter(|(i, _, _)| i.file_id == id) else {
                return Ok(()); // not that file any more: the request meets no identity (ENOENT)
            };
            let identity = Inode {
                shared: Some(*me),
                ..inode
            };
            meta.put(&key, &identity, false)?;
            let names = Names {
                dev,
                ino,
                paths: vec![norm],
            };
            return self.save_names(id, &names);
        }
        if let Some(mut names) = self.names(id)? {
            if !names.paths.contains(&norm) {
                names.paths.push(norm);
                self.save_names(id, &names)?;
            }
        }
        Ok(())
    }
}

impl Tier {
    /// The backend path a change of the entry `norm` is written through to: its own, or for
    /// the identity record of a linked file with several names, that of one of its names
    /// checked in the backend (none: the change reaches the backend at stage-out).
    pub(super) fn through_path(&self, norm: &str) -> Result<Option<std::path::PathBuf>, Errno> {
        let Some(id) = path::parse_identity(norm) else {
            return Ok(self.linked(norm));
        };
        match self.linked_names(id)?.first() {
            Some(name) => Ok(self.locate(name)?.map(|(_, p)| p)),
            None => Ok(None),
        }
    }
}
