//! Two writers on different caches of one backend file (decision 0030). A dirty entry keeps
//! the stamp (mtime, size) its backend copy had when this deployment took it; a backend copy
//! with another stamp (or one that appeared or went) was changed by someone else, and
//! writing this deployment's copy back would silently lose their bytes. The metadata owner
//! checks its dirty entries before every stage-out writes anything back (`check_dirty`; on
//! an open of a dirty entry it only warns in the log, `note_if_moved`); a conflict is
//! recorded (`x` + file id → path), shown by `eddy status`, reported as the file's stage-out error, and its chunks are
//! held back on the daemons that hold them (`hold_back`: neither a stage-out nor eviction
//! writes them) until `eddy stage-out --overwrite` lets this copy win.
//!
//! This deployment's own write-backs move the backend stamp too: the check marks a file it
//! lets through (`w` + file id) and the finalisation that ends the stage-out records the new
//! stamp and clears the mark; eviction, which writes dirty chunks back outside a stage-out,
//! marks the file on the daemon that did it (`e` + file id, asked by `WrittenBack`), and the
//! client hands those files to the check as this deployment's own. A stage-out cut short
//! between the check and the finalisation leaves the `w` mark: until the next finalisation,
//! a change by another writer is not told from this deployment's own; so is one made before
//! an eviction wrote the file back in part.

use super::{rec_err, Tier};
use crate::backend::BackendEntry;
use crate::meta::MetaStore;
use eddy_proto::path;
use eddy_proto::{Errno, FileId, FileKind, FileOutcome, Inode, TierState};
use std::collections::HashSet;

/// The conflicts listed per daemon by `eddy status` (their count is not bounded).
const LISTED: usize = 32;

fn mark_key(tag: u8, id: FileId) -> Vec<u8> {
    let mut key = Vec::with_capacity(17);
    key.push(tag);
    key.extend_from_slice(&id.to_be_bytes());
    key
}

const CONFLICT: u8 = b'x';
const WRITING: u8 = b'w';
pub(super) const HELD: u8 = b'h';
pub(super) const EVICTED: u8 = b'e';

/// Whether the backend copy `now` is another than the one the entry's stamp names: changed,
/// appeared (the entry was new here) or gone.
fn moved(base: &TierState, now: Option<&BackendEntry>) -> bool {
    let existed = base.backend_mtime != eddy_proto::Timespec::default();
    match now {
        Some(e) => {
            !existed || (e.stat.mtime, e.stat.size) != (base.backend_mtime, base.backend_size)
        }
        None => existed,
    }
}

impl Tier {
    fn has_mark(&self, tag: u8, id: FileId) -> Result<bool, Errno> {
        self.records
            .contains_key(mark_key(tag, id))
            .map_err(|e| rec_err("read", e))
    }

    fn set_mark(&self, tag: u8, id: FileId, value: &[u8]) -> Result<(), Errno> {
        self.records
            .insert(mark_key(tag, id), value)
            .map_err(|e| rec_err("insert", e))
    }

    fn clear_mark(&self, tag: u8, id: FileId) -> Result<(), Errno> {
        self.records
            .remove(mark_key(tag, id))
            .map_err(|e| rec_err("remove", e))
    }

    /// A file in conflict is not finalised (whoever asks).
    pub(super) fn refuse_conflict(&self, id: FileId) -> Result<(), Errno> {
        if self.has_mark(CONFLICT, id)? {
            return Err(Errno::new(
                libc::EBUSY,
                "in conflict with its backend copy (another writer); not finalised",
            ));
        }
        Ok(())
    }

    /// The finalisation of a file wrote this deployment's copy back and recorded the new
    /// stamp: it is in conflict with nothing.
    pub(super) fn settled(&self, id: FileId) -> Result<(), Errno> {
        self.clear_mark(WRITING, id)?;
        self.clear_mark(CONFLICT, id)
    }

    /// On open of a dirty entry (`validate`, under the key's lock): warns in the log once if
    /// its backend copy moved and no stage-out of this deployment's is under way. Only a
    /// warning: this daemon cannot tell another writer from its peers' eviction, which writes
    /// dirty chunks back; the check before the next stage-out, which can, decides.
    pub(super) fn note_if_moved(
        &self,
        norm: &str,
        ino: &Inode,
        now: Option<&BackendEntry>,
    ) -> Result<(), Errno> {
        let Some(base) = ino.tier.filter(|t| t.dirty) else {
            return Ok(());
        };
        if ino.kind != FileKind::File
            || !moved(&base, now)
            || self.has_mark(WRITING, ino.file_id)?
        {
            return Ok(());
        }
        tracing::warn!(
            path = norm,
            "the backend copy changed while this deployment holds unsaved changes of it: another writer on another cache, unless eviction wrote it back; the next stage-out checks, and does not overwrite another writer's copy"
        );
        Ok(())
    }

    /// Checks this daemon's dirty files under `prefix` against their backend copies (see
    /// `Request::CheckBackend`): one outcome per file, an error for a conflict, and whether
    /// more remain.
    pub fn check_dirty(
        &self,
        meta: &MetaStore,
        prefix: &str,
        after: Option<&str>,
        limit: u32,
        (overwrite, ours): (bool, &[FileId]),
    ) -> Result<(Vec<FileOutcome>, bool), Errno> {
        let (todo, mut more) = self.dirty_files(meta, prefix, &[], after, limit)?;
        let ours: HashSet<FileId> = ours.iter().copied().collect();
        let deadline = std::time::Instant::now() + self.flush_budget;
        let mut outcomes = Vec::new();
        for p in todo {
            if std::time::Instant::now() >= deadline {
                more = true;
                break;
            }
            let mut out = FileOutcome {
                path: p.clone(),
                file_id: 0,
                bytes: 0,
                error: None,
                complete: true,
            };
            if let Err(e) = self.check_one(meta, &p, (overwrite, &ours), deadline, &mut out) {
                out.error = Some(e);
            }
            outcomes.push(out);
        }
        Ok((outcomes, more))
    }

    fn check_one(
        &self,
        meta: &MetaStore,
        p: &str,
        (overwrite, ours): (bool, &HashSet<FileId>),
        deadline: std::time::Instant,
        out: &mut FileOutcome,
    ) -> Result<(), Errno> {
        let key = path::meta_key(p);
        let _guard = meta.lock(&key);
        let Some(mut ino) = meta.get(&key)? else {
            return Ok(());
        };
        out.file_id = ino.file_id;
        let (Some(_), Some(mut bp)) = (ino.tier.filter(|t| t.dirty), self.linked(p)) else {
            return Ok(());
        };
        // With several backends (decision 0073), a move between two whose copy was made
        // is finished first; a file not in any yet is placed now (its record then holds the
        // new backend file's stamp); one that is stays where it is until the conflict check
        // let it through (below).
        let placed = match self.resume_move(meta, &key, &mut ino, p)? {
            Some(moved) => Some(moved),
            None => self.place(meta, &key, &mut ino, p)?,
        };
        let now = match placed {
            Some((i, entry)) => {
                bp = self.backend.store_path(i, p);
                Some(entry)
            }
            None => self.backend.entry(&bp)?,
        };
        let Some(base) = ino.tier.filter(|t| t.dirty) else {
            return Ok(());
        };
        let conflict = moved(&base, now.as_ref())
            && !ours.contains(&ino.file_id)
            && !self.has_mark(WRITING, ino.file_id)?;
        if conflict && !overwrite {
            self.set_mark(CONFLICT, ino.file_id, p.as_bytes())?;
            return Err(Errno::new(
                libc::EBUSY,
                format!(
                    "its backend copy {} changed since this deployment took it (another writer, on another cache); not written back, so that neither copy is lost: `eddy stage-out --overwrite` writes this one over it",
                    bp.display()
                ),
            ));
        }
        if !conflict {
            self.clear_mark(CONFLICT, ino.file_id)?;
        } else {
            // This copy wins: the stamp it is checked against becomes the backend's.
            ino.tier = Some(TierState {
                backend_mtime: now.as_ref().map(|e| e.stat.mtime).unwrap_or_default(),
                backend_size: now.as_ref().map_or(0, |e| e.stat.size),
                dirty: true,
            });
            meta.put(&key, &ino, true)?;
            self.clear_mark(CONFLICT, ino.file_id)?;
        }
        // A rename or `setfattr` asked for another backend (`moves.rs`): the copy there
        // now, before any chunk is written back.
        if self.backend.is_multi(p) {
            if let Some((from, _)) = self.backend.holders(p)?.into_iter().next() {
                if let Some(to) = self.move_target(&ino, p, from) {
                    self.move_file(meta, &key, &mut ino, p, (from, to), deadline)?;
                }
            }
        }
        self.set_mark(WRITING, ino.file_id, &[])
    }

    /// The conflicts recorded here whose entries are still dirty (at most `LISTED` paths)
    /// and their count; marks of entries gone or saved since are dropped.
    pub fn conflicts(&self, meta: &MetaStore) -> (Vec<String>, u64) {
        let mut listed = Vec::new();
        let mut count = 0u64;
        let mut stale = Vec::new();
        for guard in self.records.prefix([CONFLICT]) {
            let Ok((key, value)) = guard.into_inner() else {
                continue;
            };
            let Ok(id) = <[u8; 16]>::try_from(&key[1..]).map(FileId::from_be_bytes) else {
                stale.push(key.to_vec());
                continue;
            };
            let p = String::from_utf8_lossy(&value).into_owned();
            let live = meta
                .get(&path::meta_key(&p))
                .ok()
                .flatten()
                .is_some_and(|i| i.file_id == id && i.tier.is_some_and(|t| t.dirty));
            if !live {
                stale.push(key.to_vec());
                continue;
            }
            count += 1;
            if listed.len() < LISTED {
                listed.push(p);
            }
        }
        for key in stale {
            if let Err(e) = self.records.remove(key) {
                tracing::warn!("tier records: remove a stale conflict mark: {e}");
            }
        }
        (listed, count)
    }

    /// Sets (`on`) or clears the flag `tag` (`HELD` or `EVICTED`) of `id`: its record, then
    /// the set in memory the records are loaded into.
    fn flag(&self, tag: u8, id: FileId, on: bool) -> Result<(), Errno> {
        fn set_of(maps: &mut super::Maps, tag: u8) -> &mut HashSet<FileId> {
            if tag == HELD {
                &mut maps.held_back
            } else {
                &mut maps.evicted_dirty
            }
        }
        if set_of(&mut self.maps(), tag).contains(&id) == on {
            return Ok(());
        }
        if on {
            self.set_mark(tag, id, &[])?;
        } else {
            self.clear_mark(tag, id)?;
        }
        let mut maps = self.maps();
        let set = set_of(&mut maps, tag);
        if on {
            set.insert(id);
        } else {
            set.remove(&id);
        }
        Ok(())
    }

    /// Eviction wrote back dirty chunks of `id` (outside a stage-out, without the check).
    pub(super) fn written_back_by_eviction(&self, id: FileId) -> Result<(), Errno> {
        self.flag(EVICTED, id, true)
    }

    /// A stage-out wrote back every dirty chunk of `id` here (or the file is gone).
    pub(super) fn written_back_whole(&self, id: FileId) -> Result<(), Errno> {
        self.flag(EVICTED, id, false)
    }

    /// The files under `prefix` whose dirty chunks eviction wrote back here since their last
    /// stage-out (see `Request::WrittenBack`).
    pub fn written_back(&self, prefix: &str) -> Vec<FileOutcome> {
        let maps = self.maps();
        maps.evicted_dirty
            .iter()
            .filter_map(|id| {
                let f = maps.files.get(id)?;
                super::under(&f.path, prefix).then(|| FileOutcome {
                    path: f.path.clone(),
                    file_id: *id,
                    bytes: 0,
                    error: None,
                    complete: true,
                })
            })
            .collect()
    }

    /// Holds back (or lets go) the write-back of this daemon's chunks of `files`; returns
    /// how many files are held back here now.
    pub fn hold_back(&self, files: &[FileId], hold: bool) -> Result<u64, Errno> {
        for &id in files {
            self.flag(HELD, id, hold)?;
        }
        Ok(self.maps().held_back.len() as u64)
    }
}
