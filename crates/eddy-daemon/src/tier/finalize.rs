//! The finalisation of dirty files at stage-out (see `Request::FinalizeDirty`), for the
//! metadata entries this daemon owns: the backend copy of each dirty file is created, sized
//! and stamped from its entry, then the entry is recorded clean, under the entry's key
//! lock. Every backend call goes through `Backend::run`, under its deadline.

use super::write_through::system_time;
use super::Tier;
use crate::backend::{read_entry, BackendEntry};
use crate::meta::MetaStore;
use eddy_proto::path;
use eddy_proto::{Errno, FileId, FileKind, FileOutcome, Inode, TierState};
use std::io::ErrorKind;
use std::path::Path;

impl Tier {
    /// Finalises the dirty files of `meta` under `prefix` in the backend: one outcome per
    /// file, and whether more remain.
    pub fn finalize_dirty(
        &self,
        meta: &MetaStore,
        prefix: &str,
        skip: &[FileId],
        after: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<FileOutcome>, bool), Errno> {
        let (norm, _) = meta.key_of(prefix)?;
        let (todo, mut more) = self.dirty_files(meta, prefix, skip, after, limit)?;
        // Linked files with several names, whose identity records this daemon holds: on
        // the first page, all of them (few), each through one of its names under `prefix`,
        // so that the cursor (the last path) stays one of the scan's.
        let mut outcomes = Vec::new();
        if after.is_none() {
            let mut dirty = Vec::new();
            meta.scan(&[0xFF], None, |_, inode| {
                if inode.kind == FileKind::File
                    && inode.tier.is_some_and(|t| t.dirty)
                    && !skip.contains(&inode.file_id)
                {
                    dirty.push(inode.file_id);
                }
                Ok(true)
            })?;
            for id in dirty {
                let names = self.linked_names(id)?;
                if let Some(name) = names.iter().find(|p| path::is_within(p, &norm)) {
                    outcomes.push(self.finalize_one(meta, path::identity_key(id), name));
                }
            }
        }
        let deadline = std::time::Instant::now() + self.flush_budget;
        for p in todo {
            if std::time::Instant::now() >= deadline {
                more = true;
                break;
            }
            outcomes.push(self.finalize_one(meta, path::meta_key(&p), &p));
        }
        Ok((outcomes, more))
    }

    /// The paths of the dirty files of `meta` under `prefix` (all but `skip`), after the
    /// path `after`, at most `limit`, and whether more remain.
    pub(super) fn dirty_files(
        &self,
        meta: &MetaStore,
        prefix: &str,
        skip: &[FileId],
        after: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<String>, bool), Errno> {
        let (norm, _) = meta.key_of(prefix)?;
        let mut todo: Vec<String> = Vec::new();
        let mut more = false;
        let mut visit = |key: &[u8], inode: Inode| {
            // A name of a linked file is finalised through its identity record (below).
            if inode.kind != FileKind::File
                || !inode.tier.is_some_and(|t| t.dirty)
                || inode.shared.is_some()
                || skip.contains(&inode.file_id)
            {
                return Ok(true);
            }
            // The scan of the entry's own key also meets siblings whose names extend it.
            let Some(p) = path::key_to_path(key).filter(|p| path::is_within(p, &norm)) else {
                return Ok(true);
            };
            if todo.len() >= limit as usize {
                more = true;
                return Ok(false);
            }
            todo.push(p);
            Ok(true)
        };
        let cursor = after.map(|a| meta.key_of(a).map(|(_, k)| k)).transpose()?;
        let prefixes: Vec<Vec<u8>> = if norm == "/" {
            vec![b"/".to_vec()]
        } else {
            let mut v = path::subtree_prefixes(&norm).to_vec();
            v.insert(0, path::meta_key(&norm));
            v
        };
        for pre in &prefixes {
            if !meta.scan(pre, cursor.as_deref(), &mut visit)? {
                break;
            }
        }
        Ok((todo, more))
    }

    /// Creates, sizes and stamps the backend copy at `p` of one dirty file (its record under
    /// `key`: its name's, or its identity's), then records it clean.
    fn finalize_one(&self, meta: &MetaStore, key: Vec<u8>, p: &str) -> FileOutcome {
        let _guard = meta.lock(&key);
        let mut out = FileOutcome {
            path: p.to_string(),
            file_id: 0,
            bytes: 0,
            error: None,
            complete: true,
        };
        let result = (|| {
            let Some(mut ino) = meta.get(&key)? else {
                return Ok(());
            };
            out.file_id = ino.file_id;
            self.refuse_conflict(ino.file_id)?;
            self.linked(p)
                .ok_or_else(|| Errno::einval(format!("{p} is not linked")))?;
            // Its backend (decision 0073): where the check placed it, or it was imported from.
            let (store, bp) = self.locate_for_write(p)?;
            let seen = self
                .backend
                .run("finalize", &bp, {
                    let (bp, ino) = (bp.clone(), ino.clone());
                    move || finalize_backend_file(&bp, &ino)
                })
                .map_err(|e| self.at_store(store, e))?;
            ino.tier = Some(TierState {
                backend_mtime: seen.stat.mtime,
                backend_size: seen.stat.size,
                dirty: false,
            });
            meta.put(&key, &ino, true)?;
            self.forget_writers(p);
            self.settled(ino.file_id)
        })();
        out.error = result.err();
        out
    }
}

/// Creates the backend file if missing, sets its size, mode, owner (where permitted) and
/// times from the inode, fsyncs it, and returns what the backend now shows.
fn finalize_backend_file(bp: &Path, ino: &Inode) -> std::io::Result<BackendEntry> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(ino.mode)
        .open(crate::backend::reach(bp)?.path())?;
    f.set_len(ino.size)?;
    f.set_permissions(std::fs::Permissions::from_mode(ino.mode))?;
    super::xattrs::finalize(&f, bp, &ino.xattrs)?;
    let meta = f.metadata()?;
    {
        use std::os::unix::fs::MetadataExt;
        if meta.uid() != ino.uid || meta.gid() != ino.gid {
            // Only root may give a file away; a daemon run by the job's user keeps its own.
            match std::os::unix::fs::fchown(&f, Some(ino.uid), Some(ino.gid)) {
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
                other => other?,
            }
        }
    }
    f.set_times(
        std::fs::FileTimes::new()
            .set_accessed(system_time(ino.atime))
            .set_modified(system_time(ino.mtime)),
    )?;
    f.sync_all()?;
    read_entry(bp)?.ok_or_else(|| std::io::Error::from(ErrorKind::NotFound))
}
