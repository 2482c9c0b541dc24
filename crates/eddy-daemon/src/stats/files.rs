//! Who wrote and read each file's data on this daemon, bounded: per file at most
//! `FILE_CLIENTS` distinct client keys per direction, then "many"; at most `max` files
//! (`stats_max_files`), past which a file is counted in `files_untracked` instead (an
//! approximate distinct count: one bit per hashed file id). Only data requests (`Read`,
//! `Write`) touch it, under one of `SHARDS` mutexes chosen by the file id, so concurrent
//! requests on different files rarely meet.

use eddy_proto::stats::{FileAccess, FILE_CLIENTS};
use eddy_proto::FileId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Mutexes the map is split over.
const SHARDS: usize = 64;
/// Bits of the approximate set of untracked files (8 KiB).
const UNTRACKED_BITS: usize = 1 << 16;

/// A bounded set of client keys: the first `FILE_CLIENTS` distinct ones, then `many`.
#[derive(Debug, Default, Clone)]
pub(crate) struct ClientSet {
    pub keys: Vec<u64>,
    pub many: bool,
}

impl ClientSet {
    pub fn add(&mut self, key: u64) {
        if self.many || self.keys.contains(&key) {
            return;
        }
        if self.keys.len() < FILE_CLIENTS {
            self.keys.push(key);
        } else {
            self.many = true;
        }
    }
}

#[derive(Debug, Default)]
struct Entry {
    writers: ClientSet,
    readers: ClientSet,
    read_bytes: u64,
    written_bytes: u64,
}

pub(crate) struct FileSets {
    shards: Box<[Mutex<HashMap<FileId, Entry>>]>,
    max: usize,
    tracked: AtomicUsize,
    untracked_bits: Box<[AtomicU64]>,
    untracked: AtomicU64,
}

impl FileSets {
    pub fn new(max: usize) -> FileSets {
        FileSets {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            max,
            tracked: AtomicUsize::new(0),
            untracked_bits: (0..UNTRACKED_BITS / 64)
                .map(|_| AtomicU64::new(0))
                .collect(),
            untracked: AtomicU64::new(0),
        }
    }

    fn shard(file: FileId) -> usize {
        // File ids are random: their low bits spread evenly.
        (file as usize) % SHARDS
    }

    /// Notes `bytes` of data of `file` written (or read) by the client `key`.
    pub fn record(&self, file: FileId, key: u64, write: bool, bytes: u64) {
        let mut map = eddy_proto::sync::lock(&self.shards[Self::shard(file)]);
        let entry = match map.get_mut(&file) {
            Some(e) => e,
            None => {
                // Taken before inserting: concurrent inserts never pass the bound.
                if self.tracked.fetch_add(1, Ordering::Relaxed) >= self.max {
                    self.tracked.fetch_sub(1, Ordering::Relaxed);
                    drop(map);
                    self.untracked_file(file);
                    return;
                }
                map.entry(file).or_default()
            }
        };
        if write {
            entry.writers.add(key);
            entry.written_bytes += bytes;
        } else {
            entry.readers.add(key);
            entry.read_bytes += bytes;
        }
    }

    /// Counts a file past the bound once (approximately: files whose hashes share a bit
    /// count once).
    fn untracked_file(&self, file: FileId) {
        let h = xxhash_rust::xxh3::xxh3_64(&file.to_le_bytes()) as usize % UNTRACKED_BITS;
        let bit = 1u64 << (h % 64);
        if self.untracked_bits[h / 64].fetch_or(bit, Ordering::Relaxed) & bit == 0 {
            self.untracked.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn untracked(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }

    /// Every tracked file, by file id.
    pub fn snapshot(&self) -> Vec<FileAccess> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let map = eddy_proto::sync::lock(shard);
            out.extend(map.iter().map(|(id, e)| FileAccess {
                file_id: *id,
                writers: e.writers.keys.clone(),
                many_writers: e.writers.many,
                readers: e.readers.keys.clone(),
                many_readers: e.readers.many,
                read_bytes: e.read_bytes,
                written_bytes: e.written_bytes,
            }));
        }
        out.sort_by_key(|f| f.file_id);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_sets_hold_a_few_keys_then_many() {
        let files = FileSets::new(16);
        for key in 0..FILE_CLIENTS as u64 {
            files.record(7, key, true, 10);
            files.record(7, key, true, 10);
        }
        let f = &files.snapshot()[0];
        assert_eq!(f.writers.len(), FILE_CLIENTS);
        assert!(!f.many_writers);
        assert_eq!(f.written_bytes, 20 * FILE_CLIENTS as u64);
        files.record(7, 99, true, 1);
        files.record(7, 5, false, 3);
        let f = &files.snapshot()[0];
        assert!(f.many_writers);
        assert_eq!(f.writers.len(), FILE_CLIENTS);
        assert_eq!(f.readers, vec![5]);
        assert!(!f.many_readers);
        assert_eq!(f.read_bytes, 3);
    }

    #[test]
    fn files_past_the_bound_are_counted_not_tracked() {
        let files = FileSets::new(3);
        for file in 1..=10u128 {
            files.record(file << 70 | file, 1, true, 1);
            // Again: still one untracked file each.
            files.record(file << 70 | file, 1, false, 1);
        }
        let snap = files.snapshot();
        assert_eq!(snap.len(), 3);
        assert!(snap
            .iter()
            .all(|f| f.written_bytes == 1 && f.read_bytes == 1));
        // Seven distinct files past the bound (the hashes are fixed: none share a bit).
        assert_eq!(files.untracked(), 7);
    }
}
