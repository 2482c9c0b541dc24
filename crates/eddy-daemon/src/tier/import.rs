//! The lazy import of backend entries, for the metadata entries this daemon owns: an entry
//! of a linked path not held yet becomes a stub (metadata only) when it is met (stat,
//! lookup, a change: `Through::import`, under the key's lock in the store), the children of
//! a linked directory this daemon owns when the directory is listed (`import_dir`), and the
//! validation of a linked file's entry against its backend copy on open (`validate`).
//! Every backend call goes through `Backend::run`, under its deadline; the records are the
//! metadata store's.

use super::Tier;
use crate::backend::{read_entry, BackendEntry, BackendKind};
use crate::meta::{fjall_err, MetaStore};
use eddy_proto::path;
use eddy_proto::{Errno, FileId, FileKind, Inode, TierState};
use std::path::PathBuf;

/// Backend entries stat'ed per backend job when a directory is imported.
const IMPORT_BATCH: usize = 256;
/// Backend jobs of one directory import in flight at once.
const IMPORT_PARALLEL: usize = 8;

/// The stub of a backend entry: its metadata, no data. `None` for kinds Eddy does not hold.
pub(super) fn stub(e: &BackendEntry) -> Option<Inode> {
    let kind = match e.stat.kind {
        BackendKind::File => FileKind::File,
        BackendKind::Dir => FileKind::Dir,
        BackendKind::Symlink => FileKind::Symlink,
        BackendKind::Special(kind) => kind,
    };
    Some(Inode {
        kind,
        file_id: eddy_placement::hashed_file_id(rand::random::<u128>()),
        mode: e.stat.mode,
        uid: e.stat.uid,
        gid: e.stat.gid,
        size: e.stat.size,
        atime: e.stat.atime,
        mtime: e.stat.mtime,
        ctime: e.stat.ctime,
        target: e.target.clone(),
        tier: Some(TierState {
            backend_mtime: e.stat.mtime,
            backend_size: e.stat.size,
            dirty: false,
        }),
        rdev: e.stat.rdev,
        xattrs: Vec::new(),
        // Each backend name is imported as a file of its own; a directory counts the
        // subdirectories the backend has (those made here count themselves in).
        nlink: match kind {
            FileKind::Dir => u32::try_from(e.stat.nlink).unwrap_or(u32::MAX).max(2),
            _ => 1,
        },
        shared: None,
    })
}

/// The stub of the backend entry at `bp` with its extended attributes (decision 0029), if
/// it exists and is of a kind Eddy holds. Runs on a backend thread.
/// A backend file with several names gets the file id its (st_dev, st_ino) gives and the
/// backend's link count, for `Tier::share` to make it a name of one Eddy file.
pub(super) fn import_stub(bp: &std::path::Path) -> std::io::Result<Option<Inode>> {
    let Some(entry) = read_entry(bp)? else {
        return Ok(None);
    };
    let Some(mut inode) = stub(&entry) else {
        return Ok(None);
    };
    inode.xattrs = super::xattrs::read(bp, inode.kind);
    if inode.kind == FileKind::File && entry.stat.nlink > 1 {
        inode.file_id = super::links::backend_file_id(entry.stat.dev, entry.stat.ino);
        inode.nlink = u32::try_from(entry.stat.nlink)
            .unwrap_or(u32::MAX)
            .min(crate::meta::LINK_MAX);
    }
    Ok(Some(inode))
}

/// The stub of the first of `candidates` (backend, path) holding an entry, and its backend.
/// Runs on a backend thread.
pub(super) fn import_first(
    candidates: &[(usize, PathBuf)],
) -> std::io::Result<Option<(Inode, usize)>> {
    for (store, p) in candidates {
        if let Some(inode) = import_stub(p)? {
            return Ok(Some((inode, *store)));
        }
    }
    Ok(None)
}

/// The tier's record of the backend mtime a linked directory was imported at.
fn dir_marker_key(norm: &str) -> Vec<u8> {
    [b"d".as_slice(), norm.as_bytes()].concat()
}

impl Tier {
    /// The backend path of a normalised namespace path, if it is linked.
    pub(super) fn linked(&self, norm: &str) -> Option<PathBuf> {
        self.backend.resolve(norm)
    }

    /// The stub of the backend entry of `norm`, if it is linked and the backend has one.
    /// With several backends (decision 0073), the first holding it, and a file records
    /// the backend's name in its `user.eddy.backend`.
    pub(super) fn import_entry(&self, norm: &str) -> Result<Option<Inode>, Errno> {
        let Some(bp) = self.linked(norm) else {
            return Ok(None);
        };
        let candidates = self.candidates(norm);
        let inode = self
            .backend
            .run("lstat", &bp, move || import_first(&candidates))?;
        Ok(inode.map(|(i, store)| self.share(self.named_store(i, store))))
    }

    /// The backends an entry of `norm` may be imported from, in order, with its path there
    /// (the link's own directory only, for a link with one backend), and their names when
    /// there are several.
    fn candidates(&self, norm: &str) -> Vec<(usize, PathBuf)> {
        match self.backend.stores_for(norm) {
            Some((_, range)) => range
                .map(|i| (i, self.backend.store_path(i, norm)))
                .collect(),
            None => Vec::new(),
        }
    }

    /// An imported stub of backend `store`: a file of a link with several backends records
    /// its backend's name (decision 0073).
    fn named_store(&self, mut inode: Inode, store: usize) -> Inode {
        if inode.kind == FileKind::File && self.backend.store_is_multi(store) {
            super::stores::record_name(&mut inode, &self.backend.store(store).name);
        }
        inode
    }

    /// Makes sure the children of the linked directory `dir` that this daemon owns are in
    /// `meta`: once per backend mtime of the directory. Entries already held are kept as
    /// they are. Nothing for a path that is not linked.
    pub fn import_dir(&self, meta: &MetaStore, dir: &str) -> Result<(), Errno> {
        let (norm, _) = meta.key_of(dir)?;
        let Some(bp) = self.linked(&norm) else {
            return Ok(());
        };
        // Every backend of the link holding the directory (decision 0073): the listing is
        // the union of theirs; the marker, their mtimes (the one backend's alone, as before,
        // for a link with one).
        let candidates = self.candidates(&norm);
        let dirs: Vec<(PathBuf, eddy_proto::Timespec)> =
            self.backend.run("lstat", &bp, move || {
                let mut out = Vec::new();
                for (_, p) in candidates {
                    if let Some(e) = read_entry(&p)? {
                        if e.stat.kind == BackendKind::Dir {
                            out.push((p, e.stat.mtime));
                        }
                    }
                }
                Ok(out)
            })?;
        if dirs.is_empty() {
            return Ok(());
        }
        let marker = dir_marker_key(&norm);
        let seen = if dirs.len() == 1 {
            bincode::serialize(&dirs[0].1).unwrap_or_default()
        } else {
            bincode::serialize(&dirs.iter().map(|d| d.1).collect::<Vec<_>>()).unwrap_or_default()
        };
        if let Some(old) = self.records.get(&marker).map_err(|e| fjall_err("get", e))? {
            if *old == *seen {
                return Ok(());
            }
        }
        let (placement, me) = self.members.as_ref().ok_or_else(|| {
            Errno::eio(
                "this daemon was started without --members, so it cannot import linked directories",
            )
        })?;
        let listed: Vec<PathBuf> = dirs.into_iter().map(|d| d.0).collect();
        let names: Vec<String> = self.backend.run("readdir", &bp, move || {
            let mut out = std::collections::BTreeSet::new();
            for dir in listed {
                for e in std::fs::read_dir(crate::backend::reach(&dir)?.path())? {
                    if let Ok(name) = e?.file_name().into_string() {
                        out.insert(name);
                    }
                }
            }
            Ok(out.into_iter().collect())
        })?;
        let missing: Vec<String> = names
            .into_iter()
            .filter(|n| path::check_name(n, self.limits).is_ok())
            .map(|n| path::join(&norm, &n))
            .filter(|p| placement.meta_owner(p) == *me)
            .filter(|p| matches!(meta.get(&path::meta_key(p)), Ok(None)))
            .collect();
        self.import_batch(meta, &missing)?;
        self.records
            .insert(marker, seen)
            .map_err(|e| fjall_err("insert", e))
    }

    /// Stats the backend copies of `paths` (in parallel batches) and inserts their stubs
    /// where no entry exists yet.
    fn import_batch(&self, meta: &MetaStore, paths: &[String]) -> Result<(), Errno> {
        let batches: Vec<&[String]> = paths.chunks(IMPORT_BATCH).collect();
        let results: Vec<Result<(), Errno>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..IMPORT_PARALLEL.min(batches.len()))
                .map(|w| {
                    let mine: Vec<&[String]> = batches
                        .iter()
                        .skip(w)
                        .step_by(IMPORT_PARALLEL)
                        .copied()
                        .collect();
                    scope.spawn(move || {
                        for batch in mine {
                            self.import_one_batch(meta, batch)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(Errno::eio("an import worker failed")))
                })
                .collect()
        });
        results.into_iter().collect()
    }

    fn import_one_batch(&self, meta: &MetaStore, batch: &[String]) -> Result<(), Errno> {
        let Some(first) = batch.first() else {
            return Ok(());
        };
        let targets: Vec<(String, Vec<(usize, PathBuf)>)> = batch
            .iter()
            .map(|p| (p.clone(), self.candidates(p)))
            .filter(|(_, c)| !c.is_empty())
            .collect();
        let first_bp = self.linked(first).unwrap_or_default();
        let entries = self.backend.run("lstat", &first_bp, move || {
            let mut out = Vec::with_capacity(targets.len());
            for (p, c) in targets {
                out.push((p, import_first(&c)?));
            }
            Ok(out)
        })?;
        for (p, e) in entries {
            let Some(inode) = e.map(|(i, store)| self.share(self.named_store(i, store))) else {
                continue;
            };
            let key = path::meta_key(&p);
            let _guard = meta.lock(&key);
            if meta.get(&key)?.is_none() {
                meta.put(&key, &inode, false)?;
            }
        }
        Ok(())
    }

    /// Validation on open (see `Request::Validate`) of the entry of `p` in `meta`: returns
    /// the entry and the generation it replaced, if any. Runs under the key's lock.
    pub fn validate(
        &self,
        meta: &MetaStore,
        p: &str,
        for_write: bool,
    ) -> Result<(Inode, Option<(FileId, u64)>), Errno> {
        let (norm, key) = meta.key_of(p)?;
        let _guard = meta.lock(&key);
        let ino = meta
            .get_or_import(&norm, &key, self)?
            .ok_or_else(|| Errno::enoent(&norm))?;
        let mut ino = meta.not_a_name(&norm, &key, ino)?;
        if path::is_identity_key(&key) {
            // A linked file with several names (decision 0029): an open for writing marks
            // its identity dirty; the backend copy is not compared (it has no one name).
            if let (Some(t), true) = (ino.tier.as_mut(), for_write) {
                if !t.dirty {
                    t.dirty = true;
                    meta.put(&key, &ino, true)?;
                }
            }
            return Ok((ino, None));
        }
        let (Some(tier), FileKind::File, Some(_)) = (ino.tier, ino.kind, self.linked(&norm)) else {
            return Ok((ino, None));
        };
        // Where it is (with several backends, the first holding it; none: as if gone from
        // the one backend, unless it is a new file here).
        let located = self.locate(&norm)?;
        let bp = match &located {
            Some((_, p)) => p.clone(),
            None => self.linked(&norm).unwrap_or_default(),
        };
        let multi_unplaced = located.is_none();
        let mut dropped = None;
        if !tier.dirty {
            let now = if multi_unplaced {
                None
            } else {
                self.backend.entry(&bp)?
            };
            match now {
                None => {
                    // The backend copy is gone and nothing here is unsaved: so is the entry.
                    meta.delete(&key)?;
                    return Err(Errno::enoent(format!("{norm} (removed from the backend)")));
                }
                Some(e)
                    if (e.stat.mtime, e.stat.size) != (tier.backend_mtime, tier.backend_size) =>
                {
                    let p = bp.clone();
                    let xattrs = self.backend.run("getxattr", &bp, move || {
                        Ok(super::xattrs::read(&p, FileKind::File))
                    })?;
                    if let Some(fresh) = stub(&e) {
                        dropped = Some((ino.file_id, ino.size));
                        ino = Inode {
                            mode: ino.mode,
                            uid: ino.uid,
                            gid: ino.gid,
                            xattrs,
                            ..fresh
                        };
                        if let Some((store, _)) = located {
                            ino = self.named_store(ino, store);
                        }
                    }
                }
                Some(_) => {}
            }
        } else {
            let now = if multi_unplaced {
                None
            } else {
                self.backend.entry(&bp)?
            };
            self.note_if_moved(&norm, &ino, now.as_ref())?;
        }
        if for_write {
            if let Some(t) = ino.tier.as_mut() {
                t.dirty = true;
            }
        }
        if dropped.is_some() || for_write {
            meta.put(&key, &ino, true)?;
        }
        Ok((ino, dropped))
    }
}
