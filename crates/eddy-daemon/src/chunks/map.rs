//! The chunk map: which chunks of each file this daemon holds and their lengths, in the
//! keyspace `chunks` (key id ‖ k, value the length) and mirrored in memory by slot; loaded
//! and reconciled with the data files at start; the usage counters and the capacity.

use super::layout::{is_subdir_name, mix, SUM_SUFFIX};
use super::{lock, ChunkStore};
use eddy_proto::{Errno, FileId, Piece};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Shards of the in-memory chunk map.
pub(super) const SHARDS: usize = 64;

/// One file's data on this daemon.
#[derive(Default)]
pub(super) struct Slot {
    /// Shared by reads and writes, exclusive to remove the data file; true once removed
    /// (a new slot is made for later writes).
    pub(super) gate: RwLock<bool>,
    /// Chunk index → length. Changed only under the chunk's stripe lock.
    pub(super) chunks: Mutex<BTreeMap<u64, u64>>,
    /// The data file was created since its last sync: its directory entry needs one.
    pub(super) fresh: AtomicBool,
    /// Held by a truncate from its first cut to the data file's new length, by a direct
    /// writer's report and by an adoption (`adopt_with`), taken before the gate and the
    /// chunk locks (decision 0059). A report that landed between a truncate's cuts and the
    /// data file's new length would record its chunks past the new size; an adoption records
    /// chunks from the data file's extents as it found them, and a truncate between that look
    /// and the records would have its cut chunks recorded again. Either way the data file
    /// would keep, past the size, bytes the cut was to drop (read back once the file grows
    /// again, and taken by the kernel as the file's end through passthrough, decision 0049).
    pub(super) sizing: Mutex<()>,
}

pub(super) fn rec_err(e: fjall::Error, id: FileId) -> Errno {
    Errno::eio(format!("chunk map of file {id:032x}: {e}"))
}

pub(super) fn record_key(id: FileId, k: u64) -> [u8; 24] {
    let mut key = [0u8; 24];
    key[..16].copy_from_slice(&id.to_be_bytes());
    key[16..].copy_from_slice(&k.to_be_bytes());
    key
}

impl ChunkStore {
    pub(super) fn load(&self) -> Result<(), Errno> {
        let mut map: HashMap<FileId, BTreeMap<u64, u64>> = HashMap::new();
        let mut bad = Vec::new();
        for guard in self.records.iter() {
            let (key, value) = guard
                .into_inner()
                .map_err(|e| Errno::eio(format!("reading the chunk map: {e}")))?;
            let (Ok(id), Ok(k), Ok(len)) = (
                <[u8; 16]>::try_from(key.get(..16).unwrap_or_default()),
                <[u8; 8]>::try_from(key.get(16..).unwrap_or_default()),
                <[u8; 8]>::try_from(&value[..]),
            ) else {
                bad.push(key.to_vec());
                continue;
            };
            map.entry(FileId::from_be_bytes(id))
                .or_default()
                .insert(u64::from_be_bytes(k), u64::from_le_bytes(len));
        }
        // Files a direct writer had when the daemon stopped are adopted (`recover_torn`),
        // whatever the map says of them.
        let adopted: std::collections::HashSet<FileId> = lock(&self.left)
            .iter()
            .filter(|c| c.is_whole())
            .map(|c| c.id)
            .collect();
        let (mut gone, mut orphans) = (0usize, 0usize);
        for (id, chunks) in &map {
            if !self.path_of(*id).exists() {
                gone += 1;
                bad.extend(chunks.keys().map(|k| record_key(*id, *k).to_vec()));
            }
        }
        for key in bad {
            self.records
                .remove(key)
                .map_err(|e| Errno::eio(format!("cleaning the chunk map: {e}")))?;
        }
        for sub in self.existing_subdirs()? {
            let sub = self.dir.join(format!("{sub:02x}"));
            let rd = match std::fs::read_dir(&sub) {
                Ok(rd) => rd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Errno::from_io(&e, format!("listing {}", sub.display()))),
            };
            for entry in rd {
                let entry =
                    entry.map_err(|e| Errno::from_io(&e, format!("listing {}", sub.display())))?;
                let name = entry.file_name();
                // A sum file goes and stays with its data file.
                let known = name
                    .to_str()
                    .map(|n| n.strip_suffix(SUM_SUFFIX).unwrap_or(n))
                    .and_then(|n| u128::from_str_radix(n, 16).ok())
                    .is_some_and(|id| {
                        adopted.contains(&id) || map.get(&id).is_some_and(|c| !c.is_empty())
                    });
                if !known {
                    // No chunk of it was ever recorded durably: nothing fsync'd is lost.
                    orphans += 1;
                    std::fs::remove_file(entry.path()).map_err(|e| {
                        Errno::from_io(&e, format!("removing {}", entry.path().display()))
                    })?;
                }
            }
        }
        let (mut bytes, mut count) = (0u64, 0u64);
        for (id, chunks) in map {
            if chunks.is_empty() || !self.path_of(id).exists() {
                continue;
            }
            bytes += chunks.values().sum::<u64>();
            count += chunks.len() as u64;
            let slot = Slot {
                chunks: Mutex::new(chunks),
                ..Slot::default()
            };
            lock(self.shard(id)).insert(id, Arc::new(slot));
        }
        self.bytes.store(bytes, Ordering::Relaxed);
        self.count.store(count, Ordering::Relaxed);
        if gone + orphans > 0 {
            tracing::info!(
                gone,
                orphans,
                "chunk map reconciled with the data files after an unclean stop"
            );
        }
        Ok(())
    }

    /// The subdirectories of the chunk directory that exist, in order: each is made by the
    /// first data file that goes into it (decision 0076), so a fresh root has none. One
    /// listing of the directory instead of a failed lookup of each absent one.
    fn existing_subdirs(&self) -> Result<Vec<u64>, Errno> {
        let listing_err =
            |e: std::io::Error| Errno::from_io(&e, format!("listing {}", self.dir.display()));
        let mut subs = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(listing_err)? {
            let name = entry.map_err(listing_err)?.file_name();
            let sub = name
                .to_str()
                .filter(|n| is_subdir_name(n))
                .and_then(|n| u64::from_str_radix(n, 16).ok());
            subs.extend(sub);
        }
        subs.sort_unstable();
        Ok(subs)
    }

    /// Bytes held in chunks and their number.
    pub fn usage(&self) -> (u64, u64) {
        (
            self.bytes.load(Ordering::Relaxed),
            self.count.load(Ordering::Relaxed),
        )
    }

    pub(super) fn shard(&self, id: FileId) -> &Mutex<HashMap<FileId, Arc<Slot>>> {
        &self.slots[(mix(id) as usize) % SHARDS]
    }

    pub(super) fn slot(&self, id: FileId) -> Option<Arc<Slot>> {
        lock(self.shard(id)).get(&id).cloned()
    }

    pub(super) fn slot_or_new(&self, id: FileId) -> Arc<Slot> {
        Arc::clone(lock(self.shard(id)).entry(id).or_default())
    }

    /// Sets the most bytes of chunks this store may hold (`capacity_bytes`; 0: no limit).
    /// Call before any use.
    pub fn capacity(mut self, bytes: u64) -> ChunkStore {
        self.capacity = bytes;
        self
    }

    /// Growths refused for the capacity since start: a caller that got ENOSPC tells the
    /// capacity's refusal from a full device by this count.
    pub fn capacity_refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    /// The most bytes this store may hold; `None`: no limit.
    pub fn capacity_limit(&self) -> Option<u64> {
        (self.capacity > 0).then_some(self.capacity)
    }

    pub(super) fn over_capacity(&self, held: u64, more: u64) -> Errno {
        self.refusals.fetch_add(1, Ordering::Relaxed);
        Errno::new(
            libc::ENOSPC,
            format!(
                "this daemon holds {held} bytes of chunks and {more} more would pass its \
                 capacity of {} bytes (capacity_bytes): remove files to make room",
                self.capacity
            ),
        )
    }

    /// Counts `more` bytes as held; ENOSPC if that would pass the capacity (nothing
    /// counted then). Atomic, so concurrent growths never pass it together.
    pub(super) fn reserve(&self, more: u64) -> Result<(), Errno> {
        if self.capacity == 0 {
            self.bytes.fetch_add(more, Ordering::Relaxed);
            return Ok(());
        }
        self.bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                b.checked_add(more).filter(|n| *n <= self.capacity)
            })
            .map(|_| ())
            .map_err(|held| self.over_capacity(held, more))
    }

    /// Refuses, before anything is written, pieces whose growth of the chunks (by the
    /// lengths held now) would pass the capacity; each chunk's growth is still counted
    /// against it exactly when recorded (`record`).
    pub(super) fn check_capacity(&self, id: FileId, pieces: &[Piece]) -> Result<(), Errno> {
        if self.capacity == 0 {
            return Ok(());
        }
        let slot = self.slot(id);
        let mut ends: BTreeMap<u64, u64> = BTreeMap::new();
        for p in pieces {
            let end = ends.entry(p.chunk).or_default();
            *end = (*end).max(u64::from(p.offset) + u64::from(p.len));
        }
        let more: u64 = match &slot {
            Some(slot) => {
                let chunks = lock(&slot.chunks);
                ends.iter()
                    .map(|(k, end)| end.saturating_sub(chunks.get(k).copied().unwrap_or(0)))
                    .sum()
            }
            None => ends.values().sum(),
        };
        // Preallocated slots count (decision 0074): a refusal releases them first
        // (`State::with_room`), and the write is tried again.
        let held = self
            .bytes
            .load(Ordering::Relaxed)
            .saturating_add(self.preallocated().0);
        if held.saturating_add(more) > self.capacity {
            return Err(self.over_capacity(held, more));
        }
        Ok(())
    }

    /// Records chunk k's length (`None`: absent) in the map, durable with the next Sync.
    /// A growth is counted first and refused with ENOSPC past the capacity.
    pub(super) fn record(
        &self,
        slot: &Slot,
        id: FileId,
        k: u64,
        len: Option<u64>,
    ) -> Result<(), Errno> {
        self.record_with(slot, id, k, len, false)
    }

    /// `record`, counting a growth even past the capacity: for bytes already on the device
    /// (a direct writer's, decision 0048).
    pub(super) fn record_forced(
        &self,
        slot: &Slot,
        id: FileId,
        k: u64,
        len: Option<u64>,
    ) -> Result<(), Errno> {
        self.record_with(slot, id, k, len, true)
    }

    fn record_with(
        &self,
        slot: &Slot,
        id: FileId,
        k: u64,
        len: Option<u64>,
        forced: bool,
    ) -> Result<(), Errno> {
        let old = lock(&slot.chunks).get(&k).copied();
        let (before, after) = (old.unwrap_or(0), len.unwrap_or(0));
        if after > before {
            if forced {
                self.bytes.fetch_add(after - before, Ordering::Relaxed);
            } else {
                self.reserve(after - before)?;
            }
        }
        let stored = match len {
            Some(l) => self
                .records
                .insert(record_key(id, k), l.to_le_bytes())
                .map_err(|e| rec_err(e, id)),
            None if old.is_some() => self
                .records
                .remove(record_key(id, k))
                .map_err(|e| rec_err(e, id)),
            None => Ok(()),
        };
        if let Err(e) = stored {
            if after > before {
                self.bytes.fetch_sub(after - before, Ordering::Relaxed);
            }
            return Err(e);
        }
        {
            let mut chunks = lock(&slot.chunks);
            match len {
                Some(l) => chunks.insert(k, l),
                None => chunks.remove(&k),
            };
        }
        if after < before {
            self.bytes.fetch_sub(before - after, Ordering::Relaxed);
        }
        match (old.is_some(), len.is_some()) {
            (false, true) => {
                self.count.fetch_add(1, Ordering::Relaxed);
            }
            (true, false) => {
                self.count.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
        Ok(())
    }

    /// Every chunk held, in (file id, chunk) order (a full resync, decision 0021).
    pub fn held(&self) -> Vec<(FileId, u64)> {
        let mut out = Vec::new();
        for shard in &self.slots {
            for (id, slot) in lock(shard).iter() {
                out.extend(lock(&slot.chunks).keys().map(|k| (*id, *k)));
            }
        }
        out.sort_unstable();
        out
    }

    /// The chunks of one file held here, ascending.
    pub fn held_of(&self, id: FileId) -> Vec<u64> {
        let Some(slot) = self.slot(id) else {
            return Vec::new();
        };
        let mut out: Vec<u64> = lock(&slot.chunks).keys().copied().collect();
        out.sort_unstable();
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::chunks::fixture::*;

    #[test]
    fn the_capacity_bounds_growth_not_overwrites_and_removal_frees_it() {
        let f = open_with(tempfile::tempdir().unwrap(), 2 * CS + 100);
        f.store.write(1, &[p(0, 0, 4096)], &[1u8; 4096]).unwrap();
        f.store.write(1, &[p(1, 0, 100)], &[2u8; 100]).unwrap();
        // Overwrites add nothing; growth up to the capacity is taken.
        f.store.write(1, &[p(0, 10, 20)], &[3u8; 20]).unwrap();
        f.store.write(1, &[p(1, 100, 3996)], &[4u8; 3996]).unwrap();
        assert_eq!(f.store.usage().0, 2 * CS);
        // Past it: refused before anything is written, whole or in pieces, and counted.
        let e = f.store.write(2, &[p(0, 0, 101)], &[5u8; 101]).unwrap_err();
        assert_eq!(e.errno, libc::ENOSPC, "{e}");
        assert!(e.msg.contains("capacity_bytes"), "{e}");
        let e = f
            .store
            .write(2, &[p(0, 0, 50), p(1, 0, 51)], &[5u8; 101])
            .unwrap_err();
        assert_eq!(e.errno, libc::ENOSPC);
        let e = f.store.allocate(2, &[p(0, 0, 4096)]).unwrap_err();
        assert_eq!(e.errno, libc::ENOSPC);
        assert_eq!(f.store.capacity_refusals(), 3);
        assert_eq!(f.store.read(2, &[p(0, 0, 10)]).unwrap(), vec![0u8; 10]);
        assert_eq!(f.store.usage(), (2 * CS, 2));
        f.store.write(2, &[p(0, 0, 100)], &[6u8; 100]).unwrap();
        let e = f.store.put_whole(3, 0, Some(&[7u8; 1]), None).unwrap_err();
        assert_eq!(e.errno, libc::ENOSPC);
        // Removing a file frees its bytes for others.
        f.store.remove(1).unwrap();
        f.store.allocate(3, &[p(0, 0, 4096)]).unwrap();
        f.store.put_whole(3, 1, Some(&[7u8; 4096]), None).unwrap();
        assert_eq!(f.store.usage(), (2 * CS + 100, 3));
        assert_eq!(f.store.read(2, &[p(0, 0, 100)]).unwrap(), vec![6u8; 100]);
    }

    #[test]
    fn usage_counters_follow_writes_truncates_and_removes() {
        let f = open(tempfile::tempdir().unwrap());
        let pieces = [p(0, 0, 4096), p(1, 100, 10)];
        f.store.write(5, &pieces, &[1u8; 4106]).unwrap();
        assert_eq!(f.store.usage(), (4096 + 110, 2));
        f.store.truncate(5, 50).unwrap();
        assert_eq!(f.store.usage(), (50, 1));
        let f = reopen(f);
        assert_eq!(f.store.usage(), (50, 1));
        assert_eq!(f.store.read(5, &[p(0, 0, 60)]).unwrap(), {
            let mut v = vec![1u8; 50];
            v.resize(60, 0);
            v
        });
        f.store.remove(5).unwrap();
        assert_eq!(f.store.usage(), (0, 0));
        assert!(!data_file(&f, 5).exists());
        let f = reopen(f);
        assert_eq!(f.store.usage(), (0, 0));
    }

    #[test]
    fn a_restart_drops_data_files_and_records_without_each_other() {
        let f = open(tempfile::tempdir().unwrap());
        f.store.write(1, &[p(0, 0, 3)], b"one").unwrap();
        f.store.write(2, &[p(2, 0, 3)], b"two").unwrap();
        let (orphan, lost) = (data_file(&f, 3), data_file(&f, 2));
        let f = reopen(f);
        // A data file the map does not know (its records were not persisted), and a map
        // entry whose data file is gone.
        std::fs::create_dir_all(orphan.parent().unwrap()).unwrap();
        std::fs::write(&orphan, b"junk").unwrap();
        std::fs::remove_file(&lost).unwrap();
        let f = reopen(f);
        assert!(!orphan.exists());
        assert_eq!(f.store.usage(), (3, 1));
        assert_eq!(f.store.read(1, &[p(0, 0, 3)]).unwrap(), b"one");
        assert_eq!(f.store.read(2, &[p(2, 0, 3)]).unwrap(), vec![0u8; 3]);
        f.store.sync(1).unwrap();
    }
}
