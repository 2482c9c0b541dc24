//! What becomes of a file's chunk records on this daemon when the file's pins are released,
//! it is renamed, its chunks are dropped (unlink, new generation) or it is cut short.

use super::{chunk_key, file_key, rec_err, under, Chunk, FileRec, Tier};
use eddy_proto::{Errno, FileId};

impl Tier {
    /// Releases the pins of chunks of files under `prefix`; returns how many were pinned.
    pub fn unpin(&self, prefix: &str) -> Result<u64, Errno> {
        let changed: Vec<((FileId, u64), Chunk)> = {
            let mut maps = self.maps();
            let ids: Vec<FileId> = maps
                .files
                .iter()
                .filter(|(_, f)| under(&f.path, prefix))
                .map(|(id, _)| *id)
                .collect();
            let mut out = Vec::new();
            for id in ids {
                let held: Vec<u64> = maps.files[&id].held.iter().copied().collect();
                for k in held {
                    if let Some(c) = maps.chunks.get_mut(&(id, k)) {
                        if c.pinned {
                            c.pinned = false;
                            out.push(((id, k), *c));
                        }
                    }
                }
            }
            out
        };
        for ((id, k), c) in &changed {
            self.save_chunk(*id, *k, c)?;
        }
        Ok(changed.len() as u64)
    }

    /// A linked entry moved from `from` to `to`: the records of files under it follow. When
    /// `to` is not linked (a hidden name of Eddy's own, `eddy_config::HIDDEN_ORPHAN`), the
    /// files leave the tier: their records are forgotten and their chunks stay in the chunk
    /// store as scratch data, never written back nor evicted.
    pub fn rebind(&self, from: &str, to: &str) -> Result<(), Errno> {
        if self.backend.link_for(to).is_none() {
            let leaving: Vec<FileId> = self
                .maps()
                .files
                .iter()
                .filter(|(_, f)| under(&f.path, from))
                .map(|(id, _)| *id)
                .collect();
            for id in leaving {
                self.forget(id)?;
            }
            return Ok(());
        }
        let moved: Vec<(FileId, FileRec)> = {
            let mut maps = self.maps();
            let mut out = Vec::new();
            for (id, f) in maps.files.iter_mut() {
                if under(&f.path, from) {
                    f.path = format!("{to}{}", &f.path[from.len()..]);
                    out.push((*id, f.clone()));
                }
            }
            out
        };
        for (id, rec) in &moved {
            self.save_file(*id, rec)?;
        }
        self.rebind_names(from, to)
    }

    /// The file's chunks are gone (unlink, new generation): forget them.
    pub fn forget(&self, id: FileId) -> Result<(), Errno> {
        self.hold_back(&[id], false)?;
        self.clear_moving(id)?;
        self.written_back_whole(id)?;
        let held = {
            let mut maps = self.maps();
            let Some(f) = maps.files.remove(&id) else {
                return Ok(());
            };
            for k in &f.held {
                maps.chunks.remove(&(id, *k));
            }
            f.held
        };
        for k in held {
            self.records
                .remove(chunk_key(id, k))
                .map_err(|e| rec_err("remove", e))?;
        }
        self.records
            .remove(file_key(id))
            .map_err(|e| rec_err("remove", e))
    }

    /// The file was cut to `size` bytes (its chunks too): forget what lies beyond.
    pub fn truncated(&self, id: FileId, size: u64) -> Result<(), Errno> {
        let cs = self.chunk_size;
        let (gone, rec) = {
            let mut maps = self.maps();
            let Some(f) = maps.files.get_mut(&id) else {
                return Ok(());
            };
            let gone: Vec<u64> = f.held.iter().copied().filter(|k| k * cs >= size).collect();
            for k in &gone {
                f.held.remove(k);
            }
            f.evicted.retain(|k| k * cs < size);
            let rec = f.clone();
            for k in &gone {
                maps.chunks.remove(&(id, *k));
            }
            if !size.is_multiple_of(cs) {
                let k = size / cs;
                if let Some(c) = maps.chunks.get_mut(&(id, k)) {
                    c.len = c.len.min(size - k * cs);
                }
            }
            (gone, rec)
        };
        for k in gone {
            self.records
                .remove(chunk_key(id, k))
                .map_err(|e| rec_err("remove", e))?;
        }
        self.save_file(id, &rec)
    }
}
