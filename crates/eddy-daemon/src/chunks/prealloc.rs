//! Space for sequential writers (decision 0074, DCFS3's reservation for sequential writers):
//! the slots of chunks a sequential stream will write next are allocated in the data file
//! ahead of its writes (`fallocate` with `FALLOC_FL_KEEP_SIZE`: the file's length, which
//! passthrough readers take as its end, does not change), so that the file system gives the
//! stream's data contiguous blocks rather than the blocks free when each write comes.
//!
//! The space is bounded and given back: at most `bound` bytes preallocated on this daemon at
//! once; none when the capacity or the device would be left short; counted against the
//! capacity (`check_capacity`), and every preallocation's unused part is released at the
//! first `ENOSPC` (`State::with_room` then tries again), by a truncate below it, and with
//! the data file at removal. A slot is forgotten (no longer counted) once its chunk is
//! whole. Files with direct writers (decision 0048) are left alone: their writes reach the
//! data file before the store records them, and a release could cut them.

use super::ChunkStore;
use eddy_proto::sync::lock;
use eddy_proto::FileId;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The chunk slots preallocated and not yet whole, per file.
#[derive(Default)]
pub(super) struct Preallocs {
    files: Mutex<HashMap<FileId, BTreeSet<u64>>>,
    /// Bytes of those slots (chunk size each).
    bytes: AtomicU64,
    /// Bytes ever preallocated (a counter).
    total: AtomicU64,
}

impl ChunkStore {
    /// Preallocates the slots of chunks `ks` of `id` that this store holds no bytes of yet,
    /// while the preallocated bytes stay within `bound`, the capacity and the device's room
    /// (a device less than an eighth free, or that would keep less than four times what is
    /// asked, gets none). Only for a file this store already holds chunks of. Returns the
    /// bytes preallocated. Failures are not errors: the writes allocate as they come.
    pub fn preallocate(&self, id: FileId, ks: &[u64], bound: u64) -> u64 {
        let cs = self.chunk_size;
        let Some(slot) = self.slot(id) else {
            return 0;
        };
        if ks.is_empty() || lock(&self.direct).contains_key(&id) {
            return 0;
        }
        let asked = cs.saturating_mul(ks.len() as u64);
        match nix::sys::statvfs::statvfs(&self.dir) {
            Ok(v) => {
                let unit = v.fragment_size();
                let avail = v.blocks_available().saturating_mul(unit);
                let size = v.blocks().saturating_mul(unit);
                if avail < size / 8 || avail < asked.saturating_mul(4) {
                    return 0;
                }
            }
            Err(_) => return 0,
        }
        let mut done = 0u64;
        for &k in ks {
            let held = self.prealloc.bytes.load(Ordering::Relaxed);
            if held.saturating_add(cs) > bound
                || (self.capacity > 0
                    && self
                        .bytes
                        .load(Ordering::Relaxed)
                        .saturating_add(held)
                        .saturating_add(cs)
                        > self.capacity)
            {
                break;
            }
            // The chunk's lock, then the gate, as writes take them.
            let _guard = self.lock(id, k);
            let gone = slot.gate.read().unwrap_or_else(|e| e.into_inner());
            if *gone {
                break;
            }
            let Ok(Some(f)) = self.data_file(id, &slot, false) else {
                break;
            };
            if lock(&slot.chunks).contains_key(&k) {
                continue;
            }
            let mut files = lock(&self.prealloc.files);
            let set = files.entry(id).or_default();
            if set.contains(&k) {
                continue;
            }
            let (Some(at), Ok(len)) = (
                k.checked_mul(cs).and_then(|a| i64::try_from(a).ok()),
                i64::try_from(cs),
            ) else {
                break;
            };
            let flags = nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE;
            if let Err(e) = nix::fcntl::fallocate(&f.data, flags, at, len) {
                tracing::debug!("cannot preallocate chunk {k} of file {id:032x}: {e}");
                break;
            }
            set.insert(k);
            self.prealloc.bytes.fetch_add(cs, Ordering::Relaxed);
            self.prealloc.total.fetch_add(cs, Ordering::Relaxed);
            done += cs;
        }
        done
    }

    /// Bytes preallocated now (slots not yet whole), and ever.
    pub fn preallocated(&self) -> (u64, u64) {
        (
            self.prealloc.bytes.load(Ordering::Relaxed),
            self.prealloc.total.load(Ordering::Relaxed),
        )
    }

    /// Chunk k of `id` was written, now `len` bytes long: a whole chunk's slot is no longer
    /// preallocated space (it is the chunk's). The caller holds the chunk's lock.
    pub(super) fn prealloc_written(&self, id: FileId, k: u64, len: u64) {
        if len < self.chunk_size || self.prealloc.bytes.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut files = lock(&self.prealloc.files);
        if let Some(set) = files.get_mut(&id) {
            if set.remove(&k) {
                self.prealloc
                    .bytes
                    .fetch_sub(self.chunk_size, Ordering::Relaxed);
            }
            if set.is_empty() {
                files.remove(&id);
            }
        }
    }

    /// The data file of `id` is gone: its preallocations with it.
    pub(super) fn prealloc_forget(&self, id: FileId) {
        if let Some(set) = lock(&self.prealloc.files).remove(&id) {
            let n = self.chunk_size.saturating_mul(set.len() as u64);
            self.prealloc.bytes.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// `id` was cut to `size`: the preallocated space past it is given back.
    pub(super) fn prealloc_truncated(&self, id: FileId, size: u64) {
        let cs = self.chunk_size;
        let cut: Vec<u64> = match lock(&self.prealloc.files).get(&id) {
            Some(set) => set
                .iter()
                .copied()
                .filter(|k| k.saturating_add(1).saturating_mul(cs) > size)
                .collect(),
            None => return,
        };
        for k in cut {
            let from = size.max(k.saturating_mul(cs));
            self.release_slot(id, k, Some(from));
        }
    }

    /// Gives back the unused part of every preallocation (files with direct writers
    /// excepted); the bytes released.
    pub fn release_preallocated(&self) -> u64 {
        let all: Vec<(FileId, u64)> = lock(&self.prealloc.files)
            .iter()
            .flat_map(|(id, set)| set.iter().map(move |k| (*id, *k)))
            .collect();
        let mut freed = 0;
        for (id, k) in all {
            if lock(&self.direct).contains_key(&id) {
                continue;
            }
            freed += self.release_slot(id, k, None);
        }
        freed
    }

    /// Punches chunk k's slot of `id` from `from` (or from the chunk's recorded end) to the
    /// slot's end and forgets the preallocation; the bytes the slot counted.
    fn release_slot(&self, id: FileId, k: u64, from: Option<u64>) -> u64 {
        let cs = self.chunk_size;
        let _guard = self.lock(id, k);
        {
            let mut files = lock(&self.prealloc.files);
            let Some(set) = files.get_mut(&id) else {
                return 0;
            };
            if !set.remove(&k) {
                return 0;
            }
            if set.is_empty() {
                files.remove(&id);
            }
        }
        self.prealloc.bytes.fetch_sub(cs, Ordering::Relaxed);
        let Some(slot) = self.slot(id) else {
            return cs;
        };
        let gone = slot.gate.read().unwrap_or_else(|e| e.into_inner());
        if *gone {
            return cs;
        }
        let start = k.saturating_mul(cs);
        let from = from.unwrap_or_else(|| {
            start.saturating_add(lock(&slot.chunks).get(&k).copied().unwrap_or(0))
        });
        let end = start.saturating_add(cs);
        if from < end {
            if let Ok(Some(f)) = self.data_file(id, &slot, false) {
                if let Err(e) = super::io::punch(&f.data, from, end - from) {
                    tracing::debug!("cannot release chunk {k} of file {id:032x}: {e}");
                }
            }
        }
        cs
    }
}
