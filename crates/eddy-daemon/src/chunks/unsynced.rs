//! Files written since their last sync, so that a kill -9 between a write's data and its
//! checksums costs nothing (decision 0019). A write stores its data, then its blocks'
//! checksums: a process killed between the two leaves blocks whose checksum does not match
//! their bytes, and every later read of them would be EIO, although no sync had promised
//! them. So, with checksums on, a file is marked in the chunk map's keyspace (a 17-byte key,
//! apart from the 24-byte chunk records) before its first write since its last sync; a sync
//! of the file (or of everything) clears the mark when no write ran meanwhile, as does a
//! clean stop for files with no write in flight; and at open, the checksums of
//! every file still marked (the daemon stopped uncleanly) are computed again from its data,
//! then the mark goes. Blocks a sync made durable are not changed by that: their data and
//! checksums were synced together and no write touched them since.

use super::io::{file_err, pread_full};
use super::ChunkStore;
use eddy_proto::sync::lock;
use eddy_proto::{checksum, Errno, FileId};

/// First byte of a mark's key (chunk records start with a file id and are 24 bytes long).
const MARK: u8 = 0xFE;

/// The key of the mark of file `id`.
pub(super) fn mark_key(id: FileId) -> [u8; 17] {
    let mut key = [0u8; 17];
    key[0] = MARK;
    key[1..].copy_from_slice(&id.to_be_bytes());
    key
}

/// The file a key marks, if it is a mark.
pub(super) fn marked(key: &[u8]) -> Option<FileId> {
    match key {
        [MARK, id @ ..] => <[u8; 16]>::try_from(id).ok().map(FileId::from_be_bytes),
        _ => None,
    }
}

/// Writes in flight and writes begun, per marked file.
#[derive(Default)]
pub(super) struct Pending {
    in_flight: u32,
    begun: u64,
}

/// A write in flight on a marked file; ends when dropped.
pub(super) struct Writing<'a> {
    store: &'a ChunkStore,
    id: FileId,
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        if let Some(p) = lock(&self.store.unsynced).get_mut(&self.id) {
            p.in_flight = p.in_flight.saturating_sub(1);
        }
    }
}

impl ChunkStore {
    /// Marks file `id` (durably enough for a process crash: fjall's journal) before a write
    /// of its data; `None` without checksums, where nothing needs it.
    pub(super) fn begin_write(&self, id: FileId) -> Result<Option<Writing<'_>>, Errno> {
        if self.block.is_none() {
            return Ok(None);
        }
        let mut marks = lock(&self.unsynced);
        let p = match marks.get_mut(&id) {
            Some(p) => p,
            None => {
                self.records
                    .insert(mark_key(id), [])
                    .map_err(|e| Errno::eio(format!("marking file {id:032x} written: {e}")))?;
                marks.entry(id).or_default()
            }
        };
        p.in_flight += 1;
        p.begun += 1;
        Ok(Some(Writing { store: self, id }))
    }

    /// How many writes of `id` have begun (read before a sync).
    pub(super) fn writes_begun(&self, id: FileId) -> Option<u64> {
        lock(&self.unsynced).get(&id).map(|p| p.begun)
    }

    /// After a sync of `id` that began when `begun` writes had: its mark goes, unless a
    /// write ran since (or still runs).
    pub(super) fn synced(&self, id: FileId, begun: Option<u64>) -> Result<(), Errno> {
        let mut marks = lock(&self.unsynced);
        match (marks.get(&id), begun) {
            (Some(p), Some(b)) if p.in_flight == 0 && p.begun == b => {}
            _ => return Ok(()),
        }
        self.records
            .remove(mark_key(id))
            .map_err(|e| Errno::eio(format!("clearing the mark of file {id:032x}: {e}")))?;
        marks.remove(&id);
        Ok(())
    }

    /// The marked files and how many writes of each had begun (read before a sync of
    /// everything).
    pub(super) fn marks_begun(&self) -> Vec<(FileId, u64)> {
        lock(&self.unsynced)
            .iter()
            .map(|(&id, p)| (id, p.begun))
            .collect()
    }

    /// At a clean stop, once the requests drained: the marks of files with no write in
    /// flight go (each write stored its data and its checksums; only a write cut in the
    /// middle leaves them apart).
    pub fn settle_marks(&self) -> Result<(), Errno> {
        let settled: Vec<FileId> = lock(&self.unsynced)
            .iter()
            .filter(|(_, p)| p.in_flight == 0)
            .map(|(&id, _)| id)
            .collect();
        for id in settled {
            self.synced(id, self.writes_begun(id))?;
        }
        Ok(())
    }

    /// A removed file's mark goes with it.
    pub(super) fn unmark(&self, id: FileId) -> Result<(), Errno> {
        lock(&self.unsynced).remove(&id);
        self.records
            .remove(mark_key(id))
            .map_err(|e| Errno::eio(format!("clearing the mark of file {id:032x}: {e}")))
    }

    /// After an unclean stop (at open, once the checksum block is set): the checksums of
    /// each file still marked are computed again from its data and synced, and the mark
    /// goes. Returns the files done.
    pub fn recover_unsynced(&self) -> Result<usize, Errno> {
        let ids = std::mem::take(&mut *lock(&self.marked_at_open));
        let mut done = 0;
        for id in ids {
            if let (Some(block), Some(slot)) = (self.block, self.slot(id)) {
                if let Some(f) = self.data_file(id, &slot, false)? {
                    let chunks: Vec<(u64, u64)> =
                        lock(&slot.chunks).iter().map(|(&k, &l)| (k, l)).collect();
                    let mut buf = vec![0u8; block as usize];
                    for (k, len) in chunks {
                        let mut sums = Vec::new();
                        for b in 0..len.div_ceil(block) {
                            pread_full(&f.data, &mut buf, k * self.chunk_size + b * block)
                                .map_err(|e| file_err(&e, id))?;
                            sums.push(checksum::crc(&buf));
                        }
                        self.store_sums(&f, id, k, 0, &sums)?;
                    }
                    if let Some(sf) = &f.sums {
                        sf.sync_data().map_err(|e| file_err(&e, id))?;
                    }
                    done += 1;
                }
            }
            self.records
                .remove(mark_key(id))
                .map_err(|e| Errno::eio(format!("clearing the mark of file {id:032x}: {e}")))?;
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use crate::chunks::fixture::*;
    use std::os::unix::fs::FileExt;

    /// A write cut between its data and its checksums (the block's checksum put back as it
    /// was, as a kill -9 between the two pwrites leaves it) reads as EIO; reopened, the
    /// store recomputes the marked file's checksums and reads it whole. A file synced since
    /// has no mark: damage to it stays visible.
    #[test]
    fn a_write_cut_before_its_checksums_reads_whole_after_a_restart() {
        let f = open(tempfile::tempdir().unwrap());
        let piece = [p(0, 0, CS as u32)];
        f.store.write(1, &piece, &[7u8; CS as usize]).unwrap();
        f.store.write(2, &piece, &[7u8; CS as usize]).unwrap();
        f.store.sync(2).unwrap();
        let slot = f.store.slot(1).unwrap();
        let open1 = f.store.data_file(1, &slot, false).unwrap().unwrap();
        let before = f.store.load_sums(&open1, 1, 0, 0, 1).unwrap();
        f.store.write(1, &piece, &[9u8; CS as usize]).unwrap();
        // The crash: the new data is there, the block's checksum is the old one.
        f.store.store_sums(&open1, 1, 0, 0, &before).unwrap();
        drop((open1, slot));
        assert_eq!(f.store.read(1, &piece).unwrap_err().errno, libc::EIO);
        // File 2, damaged after its sync, is not marked: never "healed".
        std::fs::OpenOptions::new()
            .write(true)
            .open(data_file(&f, 2))
            .unwrap()
            .write_all_at(&[1u8; 16], 0)
            .unwrap();
        let f = reopen(f);
        assert_eq!(f.store.recover_unsynced().unwrap(), 1);
        assert_eq!(f.store.read(1, &piece).unwrap(), vec![9u8; CS as usize]);
        assert_eq!(f.store.read(2, &piece).unwrap_err().errno, libc::EIO);
        // The mark went with the recovery.
        let f = reopen(f);
        assert_eq!(f.store.recover_unsynced().unwrap(), 0);
        // A sync of everything, or a clean stop, settles the marks of files not being
        // written: nothing is recomputed at the next open.
        f.store.write(3, &piece, &[5u8; CS as usize]).unwrap();
        f.store.sync_all().unwrap();
        f.store.write(4, &piece, &[6u8; CS as usize]).unwrap();
        f.store.settle_marks().unwrap();
        let f = reopen(f);
        assert_eq!(f.store.recover_unsynced().unwrap(), 0);
        assert_eq!(f.store.read(4, &piece).unwrap(), vec![6u8; CS as usize]);
    }
}
