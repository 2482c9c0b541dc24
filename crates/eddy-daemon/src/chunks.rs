//! Chunk storage (decision 0015): one sparse data file per file id, `<hh>/<id as 32 hex>`
//! under the chunk directory (`hh`: one of 256 subdirectories, made once, chosen by a hash
//! of the id), with chunk k at offset k × chunk_size. Which chunks of a file this daemon
//! holds and their lengths are the chunk map: the keyspace `chunks` of the daemon's store
//! (key id ‖ k, value the length; same journal as the metadata, so a Sync persists both),
//! mirrored in memory. A map entry is written before the bytes it covers (write-ahead): a
//! chunk on disk is always in the map unless the store lost unsynced records, and data
//! files the map does not know are removed at start (they hold nothing fsync'd).
//!
//! Operations that create, cut or delete a chunk run under the chunk's stripe lock, so the
//! usage counters stay exact. A file's data file lives as long as its slot: reads and
//! writes hold the slot's gate shared, removing the file (one unlink) and the last step of
//! a truncate hold it exclusively, so the cache of open data files never holds a
//! descriptor of a removed file. All functions block: call them from the blocking pool.
//!
//! Checksums (decision 0019): beside each data file, `<hh>/<id hex>.sum` holds one CRC32C
//! per block of `block` bytes (chunk k's block b at (k × blocks per chunk + b) × 4), stored
//! XOR the checksum of a zero block, so that a hole of the sum file (a block never written)
//! stands for the zeros a hole of the data file reads as. Written with the data under the
//! chunk's lock, synced with it; every read verifies the blocks it touches (a mismatch seen
//! without the chunk's lock is checked again under it: a write may be between its data and
//! its checksum), and a block found bad is remembered (`corrupt`) and counted once.

use crate::locks::StripedLocks;
use crate::DaemonError;
use eddy_proto::checksum;
use eddy_proto::{BadBlock, Errno, FileId, Piece, ScrubPage};
use fjall::Keyspace;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// Name of the keyspace holding the chunk map.
pub const CHUNK_KEYSPACE: &str = "chunks";
/// The file naming the layout of a chunk directory; a directory without it that holds
/// per-file chunk directories is of the first layout, which this version refuses.
const LAYOUT_FILE: &str = "LAYOUT";
const LAYOUT: &str = "eddy chunk layout 2: one sparse data file per file id in <hh>/<id hex>, \
chunk k at k * chunk_size, lengths in the store's keyspace `chunks` (decision 0015)\n";
/// Hashed subdirectories of the chunk directory.
const FANOUT: u64 = 256;
/// Suffix of a data file's companion holding its block checksums.
const SUM_SUFFIX: &str = ".sum";
/// Bytes of one stored checksum.
const SUM_BYTES: u64 = 4;
/// Shards of the in-memory chunk map.
const SHARDS: usize = 64;

/// Open data files kept, at most: a quarter of the descriptor limit, up to this many.
const FD_CACHE_MAX: usize = 4096;
/// Share of the descriptor limit the cache may use (1/n), leaving room for sockets and the
/// metadata store.
const FD_CACHE_SHARE: u64 = 4;

/// One file's data on this daemon.
#[derive(Default)]
struct Slot {
    /// Shared by reads and writes, exclusive to remove the data file; true once removed
    /// (a new slot is made for later writes).
    gate: RwLock<bool>,
    /// Chunk index → length. Changed only under the chunk's stripe lock.
    chunks: Mutex<BTreeMap<u64, u64>>,
    /// The data file was created since its last sync: its directory entry needs one.
    fresh: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The chunks of one daemon.
pub struct ChunkStore {
    dir: PathBuf,
    chunk_size: u64,
    /// Largest read reply, in bytes.
    max_read: u64,
    locks: StripedLocks,
    records: Keyspace,
    /// Sum of the chunks' lengths (apparent size, holes included).
    bytes: AtomicU64,
    /// Most `bytes` may reach (`capacity_bytes`; 0: no limit), and the growths refused.
    capacity: u64,
    refusals: AtomicU64,
    /// Number of chunks.
    count: AtomicU64,
    slots: Vec<Mutex<HashMap<FileId, Arc<Slot>>>>,
    /// Open data files (read-write), most recently used kept. Inserted under the slot's
    /// gate held shared, removed under it held exclusively.
    fds: quick_cache::sync::Cache<FileId, Arc<Open>>,
    /// Bytes one checksum covers; `None`: checksums off.
    block: Option<u64>,
    /// The checksum of a zero block (what a hole of the sum file stands for).
    zero_sum: u32,
    /// Blocks found not to match their checksum: (file, chunk, offset of the block).
    bad: Mutex<BTreeSet<(FileId, u64, u64)>>,
    /// Blocks found bad (each once) and writes refused for a corrupted payload.
    checksum_errors: AtomicU64,
    corrupt_payloads: AtomicU64,
}

/// Bytes read and the checksums of their block-aligned segments.
pub type Checked = (Vec<u8>, Vec<u32>);

/// A file's open data file and, with checksums on, its sum file.
struct Open {
    data: File,
    sums: Option<File>,
}

/// Checksums are on by default, one per this many bytes (or per chunk, if smaller).
const DEFAULT_BLOCK: u64 = 64 * 1024;

fn io_err(e: &std::io::Error, id: FileId, k: u64) -> Errno {
    Errno::from_io(e, format!("chunk {k} of file {id:032x}"))
}

fn file_err(e: &std::io::Error, id: FileId) -> Errno {
    Errno::from_io(e, format!("data file of file {id:032x}"))
}

fn rec_err(e: fjall::Error, id: FileId) -> Errno {
    Errno::eio(format!("chunk map of file {id:032x}: {e}"))
}

fn record_key(id: FileId, k: u64) -> [u8; 24] {
    let mut key = [0u8; 24];
    key[..16].copy_from_slice(&id.to_be_bytes());
    key[16..].copy_from_slice(&k.to_be_bytes());
    key
}

fn mix(id: FileId) -> u64 {
    ((id as u64) ^ ((id >> 64) as u64)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The hashed subdirectory of a file's data file.
fn subdir_of(id: FileId) -> String {
    format!("{:02x}", (mix(id) >> 56) % FANOUT)
}

impl ChunkStore {
    /// Opens the chunk directory `dir` (made with its subdirectories if missing) and the
    /// chunk map in `records`; drops map entries whose data file is gone and data files the
    /// map does not know (a crash between the two). Refuses a directory of the first layout.
    pub fn open(
        dir: &Path,
        records: Keyspace,
        chunk_size: u64,
        max_read: u64,
    ) -> Result<ChunkStore, DaemonError> {
        let root_err = |source| DaemonError::Root {
            path: dir.to_owned(),
            source,
        };
        crate::rootdir::private_dir(dir).map_err(root_err)?;
        prepare_layout(dir)?;
        let store = ChunkStore {
            dir: dir.to_owned(),
            chunk_size,
            max_read,
            locks: StripedLocks::default(),
            records,
            bytes: AtomicU64::new(0),
            capacity: 0,
            refusals: AtomicU64::new(0),
            count: AtomicU64::new(0),
            slots: (0..SHARDS).map(|_| Mutex::default()).collect(),
            fds: quick_cache::sync::Cache::new(fd_cache_capacity()),
            block: None,
            zero_sum: 0,
            bad: Mutex::default(),
            checksum_errors: AtomicU64::new(0),
            corrupt_payloads: AtomicU64::new(0),
        }
        .checksums(Some(DEFAULT_BLOCK.min(chunk_size)));
        store.load().map_err(|e| DaemonError::Meta {
            path: dir.to_owned(),
            message: format!("loading the chunk map: {e}"),
        })?;
        Ok(store)
    }

    fn load(&self) -> Result<(), Errno> {
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
        for sub in 0..FANOUT {
            let sub = self.dir.join(format!("{sub:02x}"));
            let rd = std::fs::read_dir(&sub)
                .map_err(|e| Errno::from_io(&e, format!("listing {}", sub.display())))?;
            for entry in rd {
                let entry =
                    entry.map_err(|e| Errno::from_io(&e, format!("listing {}", sub.display())))?;
                let name = entry.file_name();
                // A sum file goes and stays with its data file.
                let known = name
                    .to_str()
                    .map(|n| n.strip_suffix(SUM_SUFFIX).unwrap_or(n))
                    .and_then(|n| u128::from_str_radix(n, 16).ok())
                    .is_some_and(|id| map.get(&id).is_some_and(|c| !c.is_empty()));
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

    /// Bytes held in chunks and their number.
    pub fn usage(&self) -> (u64, u64) {
        (
            self.bytes.load(Ordering::Relaxed),
            self.count.load(Ordering::Relaxed),
        )
    }

    fn shard(&self, id: FileId) -> &Mutex<HashMap<FileId, Arc<Slot>>> {
        &self.slots[(mix(id) as usize) % SHARDS]
    }

    fn path_of(&self, id: FileId) -> PathBuf {
        self.dir.join(subdir_of(id)).join(format!("{id:032x}"))
    }

    fn slot(&self, id: FileId) -> Option<Arc<Slot>> {
        lock(self.shard(id)).get(&id).cloned()
    }

    fn slot_or_new(&self, id: FileId) -> Arc<Slot> {
        Arc::clone(lock(self.shard(id)).entry(id).or_default())
    }

    fn lock_key(id: FileId, k: u64) -> [u8; 24] {
        let mut key = [0u8; 24];
        key[..16].copy_from_slice(&id.to_le_bytes());
        key[16..].copy_from_slice(&k.to_le_bytes());
        key
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

    fn over_capacity(&self, held: u64, more: u64) -> Errno {
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
    fn reserve(&self, more: u64) -> Result<(), Errno> {
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
    fn check_capacity(&self, id: FileId, pieces: &[Piece]) -> Result<(), Errno> {
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
        let held = self.bytes.load(Ordering::Relaxed);
        if held.saturating_add(more) > self.capacity {
            return Err(self.over_capacity(held, more));
        }
        Ok(())
    }

    /// Records chunk k's length (`None`: absent) in the map, durable with the next Sync.
    /// A growth is counted first and refused with ENOSPC past the capacity.
    fn record(&self, slot: &Slot, id: FileId, k: u64, len: Option<u64>) -> Result<(), Errno> {
        let old = lock(&slot.chunks).get(&k).copied();
        let (before, after) = (old.unwrap_or(0), len.unwrap_or(0));
        if after > before {
            self.reserve(after - before)?;
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

    /// The open data file; opened (created with `create`) and cached if needed; `None` if
    /// missing. The caller holds the slot's gate shared.
    fn data_file(&self, id: FileId, slot: &Slot, create: bool) -> Result<Option<Arc<Open>>, Errno> {
        if let Some(f) = self.fds.get(&id) {
            return Ok(Some(f));
        }
        let path = self.path_of(id);
        let data = self.open_data(id, slot, &path, create)?;
        let Some(data) = data else {
            return Ok(None);
        };
        let sums = match self.block {
            Some(_) => Some(
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .mode(0o600)
                    .open(sum_path(&path))
                    .map_err(|e| Errno::from_io(&e, format!("checksums of file {id:032x}")))?,
            ),
            None => None,
        };
        let file = Arc::new(Open { data, sums });
        self.fds.insert(id, Arc::clone(&file));
        Ok(Some(file))
    }

    fn open_data(
        &self,
        id: FileId,
        slot: &Slot,
        path: &Path,
        create: bool,
    ) -> Result<Option<File>, Errno> {
        let file = match OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound && create => {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .mode(0o600)
                    .open(path)
                    .map_err(|e| file_err(&e, id))?;
                slot.fresh.store(true, Ordering::Release);
                f
            }
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(file_err(&e, id)),
        };
        Ok(Some(file))
    }

    /// Checks every piece lies inside a chunk; returns the sum of their lengths.
    pub fn check_pieces(&self, pieces: &[Piece]) -> Result<u64, Errno> {
        let mut total = 0u64;
        for p in pieces {
            if u64::from(p.offset) + u64::from(p.len) > self.chunk_size {
                return Err(Errno::einval(format!(
                    "piece at offset {} of {} bytes crosses the end of chunk {} (chunk size {})",
                    p.offset, p.len, p.chunk, self.chunk_size
                )));
            }
            if p.chunk
                .checked_mul(self.chunk_size)
                .and_then(|o| o.checked_add(self.chunk_size))
                .is_none_or(|end| end > i64::MAX as u64)
            {
                return Err(Errno::new(
                    libc::EFBIG,
                    format!("chunk {} lies beyond the largest file size", p.chunk),
                ));
            }
            total += u64::from(p.len);
        }
        Ok(total)
    }

    /// Writes `data` (the pieces' bytes back to back) into the chunks: one pwrite per
    /// piece, straight from `data`; the checksums stored are computed here.
    #[cfg(test)]
    pub fn write(&self, id: FileId, pieces: &[Piece], data: &[u8]) -> Result<(), Errno> {
        self.write_with_sums(id, pieces, data, None)
    }

    /// `write`; `sums`, when given, are the segments' checksums the caller verified
    /// (`verify_payload`): stored as they are for whole blocks.
    pub fn write_with_sums(
        &self,
        id: FileId,
        pieces: &[Piece],
        data: &[u8],
        sums: Option<&[u32]>,
    ) -> Result<(), Errno> {
        let total = self.check_pieces(pieces)?;
        if total != data.len() as u64 {
            return Err(Errno::einval(format!(
                "pieces cover {total} bytes but the write carries {} bytes",
                data.len()
            )));
        }
        self.check_capacity(id, pieces)?;
        let block = self.block.unwrap_or(self.chunk_size);
        let sums = sums.filter(|s| s.len() == checksum::count(pieces, block));
        let (mut at, mut si) = (0usize, 0usize);
        for p in pieces {
            let len = p.len as usize;
            let n = checksum::count(std::slice::from_ref(p), block);
            let _guard = self.lock(id, p.chunk);
            self.write_locked_with(id, p, &data[at..at + len], sums.map(|s| &s[si..si + n]))?;
            at += len;
            si += n;
        }
        Ok(())
    }

    /// Checks a write's data against the checksums it came with (`checksum::sums`); a
    /// mismatch is EIO and counted, a wrong number of checksums EPROTO.
    pub fn verify_payload(
        &self,
        id: FileId,
        pieces: &[Piece],
        data: &[u8],
        sums: &[u32],
    ) -> Result<(), Errno> {
        let block = self.block.unwrap_or(self.chunk_size);
        self.check_pieces(pieces)?;
        match checksum::verify(pieces, data, sums, block)? {
            None => Ok(()),
            Some(m) => {
                self.corrupt_payloads.fetch_add(1, Ordering::Relaxed);
                Err(Errno::eio(format!(
                    "payload corrupted in flight: {} bytes at offset {} of chunk {} of file \
                     {id:032x} do not match their checksum; nothing written",
                    m.len, m.offset, m.chunk
                )))
            }
        }
    }

    /// Reserves storage for the pieces in the file's data file (fallocate, mode 0): each
    /// chunk's recorded length grows to cover its piece, as a write of zeros would, so the
    /// bytes read as zeros and count as held. ENOSPC when the device cannot hold them or
    /// they would pass the capacity.
    pub fn allocate(&self, id: FileId, pieces: &[Piece]) -> Result<(), Errno> {
        self.check_pieces(pieces)?;
        self.check_capacity(id, pieces)?;
        for p in pieces.iter().filter(|p| p.len > 0) {
            let _guard = self.lock(id, p.chunk);
            self.allocate_locked(id, p)?;
        }
        Ok(())
    }

    fn allocate_locked(&self, id: FileId, p: &Piece) -> Result<(), Errno> {
        loop {
            let slot = self.slot_or_new(id);
            let gone = slot.gate.read().unwrap_or_else(|e| e.into_inner());
            if *gone {
                continue; // removed meanwhile: the next round makes a new slot
            }
            let at = p.chunk * self.chunk_size + u64::from(p.offset);
            let file = self
                .data_file(id, &slot, true)?
                .ok_or_else(|| Errno::eio("data file vanished"))?;
            let (off, len) = (
                i64::try_from(at).map_err(|_| Errno::new(libc::EFBIG, "offset too large"))?,
                i64::from(p.len),
            );
            // Recorded (and counted against the capacity) first, restored if it fails.
            let old = lock(&slot.chunks).get(&p.chunk).copied();
            let new_len = old.unwrap_or(0).max(u64::from(p.offset) + u64::from(p.len));
            if old != Some(new_len) {
                self.record(&slot, id, p.chunk, Some(new_len))?;
            }
            let made =
                nix::fcntl::fallocate(&file.data, nix::fcntl::FallocateFlags::empty(), off, len)
                    .map_err(|e| io_err(&std::io::Error::from(e), id, p.chunk));
            if let Err(e) = made {
                if old != Some(new_len) {
                    if let Err(undo) = self.record(&slot, id, p.chunk, old) {
                        tracing::warn!(
                            "cannot restore the chunk map after a failed fallocate: {undo}"
                        );
                    }
                }
                return Err(e);
            }
            return Ok(());
        }
    }

    /// Locks chunk `k` of `id` against creation, cutting and deletion by others.
    pub fn lock(&self, id: FileId, k: u64) -> MutexGuard<'_, ()> {
        self.locks.lock(&Self::lock_key(id, k))
    }

    /// Whether the chunk exists here; the caller holds its lock.
    pub fn exists_locked(&self, id: FileId, k: u64) -> Result<bool, Errno> {
        Ok(self.len_locked(id, k)?.is_some())
    }

    /// The chunk's length, if it exists; the caller holds its lock.
    pub fn len_locked(&self, id: FileId, k: u64) -> Result<Option<u64>, Errno> {
        Ok(self.slot(id).and_then(|s| lock(&s.chunks).get(&k).copied()))
    }

    /// The whole chunk's bytes, if it exists; the caller holds its lock.
    pub fn read_whole_locked(&self, id: FileId, k: u64) -> Result<Option<Vec<u8>>, Errno> {
        let Some(len) = self.len_locked(id, k)? else {
            return Ok(None);
        };
        let Ok(len32) = u32::try_from(len) else {
            return Err(Errno::eio(format!(
                "chunk {k} of file {id:032x} records {len} bytes"
            )));
        };
        let mut buf = vec![0u8; len as usize];
        let p = Piece {
            chunk: k,
            offset: 0,
            len: len32,
        };
        self.read_piece_with(id, &p, &mut buf, true)?;
        Ok(Some(buf))
    }

    /// Deletes the chunk (its range of the data file becomes a hole); returns the bytes it
    /// held. The caller holds its lock.
    pub fn delete_locked(&self, id: FileId, k: u64) -> Result<u64, Errno> {
        let Some(slot) = self.slot(id) else {
            return Ok(0);
        };
        let gone = slot.gate.read().unwrap_or_else(|e| e.into_inner());
        if *gone {
            return Ok(0);
        }
        let Some(len) = lock(&slot.chunks).get(&k).copied() else {
            return Ok(0);
        };
        if let Some(f) = self.data_file(id, &slot, false)? {
            punch(&f.data, k * self.chunk_size, len).map_err(|e| io_err(&e, id, k))?;
            if let (Some(block), Some(sf)) = (self.block, &f.sums) {
                let per_chunk = self.chunk_size / block;
                punch(sf, self.sum_at(k, 0), per_chunk * SUM_BYTES)
                    .map_err(|e| io_err(&e, id, k))?;
            }
        }
        self.record(&slot, id, k, None)?;
        self.forget_bad(id, Some(k));
        Ok(len)
    }

    /// Writes one piece; the caller holds the chunk's lock. The chunk's new length is
    /// recorded before its bytes are written, and restored if the write fails.
    pub fn write_locked(&self, id: FileId, p: &Piece, bytes: &[u8]) -> Result<(), Errno> {
        self.write_locked_with(id, p, bytes, None)
    }

    /// `write_locked` with the checksums of the piece's segments, when the caller has them.
    /// With checksums on, a block the piece covers in part is read and verified first, and
    /// every block's new checksum is stored after the data.
    fn write_locked_with(
        &self,
        id: FileId,
        p: &Piece,
        bytes: &[u8],
        seg_sums: Option<&[u32]>,
    ) -> Result<(), Errno> {
        self.check_pieces(std::slice::from_ref(p))?;
        if bytes.len() != p.len as usize {
            return Err(Errno::einval("a piece's length differs from its bytes"));
        }
        loop {
            let slot = self.slot_or_new(id);
            let gone = slot.gate.read().unwrap_or_else(|e| e.into_inner());
            if *gone {
                continue; // removed meanwhile: the next round makes a new slot
            }
            let file = self.data_file(id, &slot, true)?;
            let old = lock(&slot.chunks).get(&p.chunk).copied();
            let new_sums = match (self.block, &file) {
                (Some(block), Some(f)) => {
                    let held = old.unwrap_or(0);
                    self.block_sums_for_write(f, id, p, bytes, block, seg_sums, held)?
                }
                _ => Vec::new(),
            };
            // (`old` was read above, before the blocks the write completes.)
            let end = u64::from(p.offset) + bytes.len() as u64;
            let new_len = old.unwrap_or(0).max(end);
            if old != Some(new_len) {
                self.record(&slot, id, p.chunk, Some(new_len))?;
            }
            let at = p.chunk * self.chunk_size + u64::from(p.offset);
            let written = file
                .ok_or_else(|| Errno::eio("data file vanished"))
                .and_then(|f| {
                    f.data.write_all_at(bytes, at).map_err(|e| {
                        // Bytes of a partial write past the old length read as zeros again.
                        let from = p.chunk * self.chunk_size + old.unwrap_or(0);
                        if at + bytes.len() as u64 > from {
                            let _ = punch(&f.data, from, at + bytes.len() as u64 - from);
                        }
                        io_err(&e, id, p.chunk)
                    })?;
                    if let (Some(block), false) = (self.block, new_sums.is_empty()) {
                        let first = u64::from(p.offset) / block;
                        self.store_sums(&f, id, p.chunk, first, &new_sums)?;
                        let mut bad = lock(&self.bad);
                        for b in 0..new_sums.len() as u64 {
                            bad.remove(&(id, p.chunk, (first + b) * block));
                        }
                    }
                    Ok(())
                });
            if let Err(e) = written {
                if old != Some(new_len) {
                    if let Err(undo) = self.record(&slot, id, p.chunk, old) {
                        tracing::warn!("cannot restore the chunk map after a failed write: {undo}");
                    }
                }
                return Err(e);
            }
            return Ok(());
        }
    }

    /// Reads the pieces back to back into one buffer, each with one pread; holes and bytes
    /// past a chunk's end read as zeros (only those are zero-filled). With checksums on, the
    /// blocks read are verified (see `read_checked`).
    pub fn read(&self, id: FileId, pieces: &[Piece]) -> Result<Vec<u8>, Errno> {
        if self.block.is_some() {
            return self.read_checked(id, pieces).map(|(data, _)| data);
        }
        let total = self.check_read(pieces)?;
        self.with_file(id, |file| {
            let mut out: Vec<u8> = Vec::with_capacity(total as usize);
            for p in pieces {
                let len = p.len as usize;
                let dst = &mut out.spare_capacity_mut()[..len];
                let at = p.chunk * self.chunk_size + u64::from(p.offset);
                let done = match file {
                    Some(f) => {
                        pread_uninit(&f.data, dst, at).map_err(|e| io_err(&e, id, p.chunk))?
                    }
                    None => 0,
                };
                for b in &mut dst[done..] {
                    b.write(0);
                }
                // SAFETY: `pread_uninit` initialised dst[..done], the loop above the rest, and
                // dst is the `len` bytes of spare capacity right after `out.len()`.
                unsafe { out.set_len(out.len() + len) };
            }
            Ok(out)
        })
    }

    /// Reads the pieces as `read` does and verifies every stored block they touch; returns
    /// the bytes and the checksums of their block-aligned segments (`checksum::sums`: the
    /// stored checksum of a whole block, one computed over the verified bytes of a part). A
    /// block that does not match is EIO naming the file id, chunk and offset (checked again
    /// under the chunk's lock first: a write may be between its data and its checksum).
    pub fn read_checked(&self, id: FileId, pieces: &[Piece]) -> Result<Checked, Errno> {
        let total = self.check_read(pieces)?;
        if let Some(read) = self.read_verified(id, pieces, total, false)? {
            return Ok(read);
        }
        self.read_verified(id, pieces, total, true)?
            .ok_or_else(|| Errno::eio("a checksum mismatch was not reported"))
    }

    /// One attempt of `read_checked`: `None` when a block did not match without the chunk's
    /// lock; with `locked` (each piece under its chunk's lock) a mismatch is an error.
    fn read_verified(
        &self,
        id: FileId,
        pieces: &[Piece],
        total: u64,
        locked: bool,
    ) -> Result<Option<Checked>, Errno> {
        let block = self.block.unwrap_or(self.chunk_size);
        // Room for the whole blocks of the piece being read (`read_piece_verified`).
        let mut out: Vec<u8> = Vec::with_capacity((total + 2 * block) as usize);
        let mut sums = Vec::with_capacity(checksum::count(pieces, block));
        if !locked {
            let bad = self.with_file(id, |f| {
                for p in pieces {
                    if let Some(b) =
                        self.read_piece_verified(f, id, p, block, &mut out, &mut sums)?
                    {
                        return Ok(Some(b));
                    }
                }
                Ok(None)
            })?;
            return Ok(if bad.is_some() {
                None
            } else {
                Some((out, sums))
            });
        }
        for p in pieces {
            let _guard = self.lock(id, p.chunk);
            let bad = self.with_file(id, |f| {
                self.read_piece_verified(f, id, p, block, &mut out, &mut sums)
            })?;
            if let Some(at) = bad {
                return Err(self.found_bad(id, p.chunk, at));
            }
        }
        Ok(Some((out, sums)))
    }

    /// Runs `op` with the file's data file (`None` if there is none) under its gate held
    /// shared.
    fn with_file<T>(
        &self,
        id: FileId,
        op: impl FnOnce(Option<&Open>) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        let slot = self.slot(id);
        let gone = slot
            .as_ref()
            .map(|s| s.gate.read().unwrap_or_else(|e| e.into_inner()));
        let file = match (&slot, &gone) {
            (Some(s), Some(g)) if !**g => self.data_file(id, s, false)?,
            _ => None,
        };
        op(file.as_deref())
    }

    /// Appends piece `p`'s bytes to `out` and its segments' checksums to `sums`, after
    /// verifying the stored blocks it touches; returns the offset (in the chunk) of a block
    /// that does not match instead (what was appended is then garbage).
    fn read_piece_verified(
        &self,
        f: Option<&Open>,
        id: FileId,
        p: &Piece,
        block: u64,
        out: &mut Vec<u8>,
        sums: &mut Vec<u32>,
    ) -> Result<Option<u64>, Errno> {
        if p.len == 0 {
            return Ok(None);
        }
        let (off, end) = (u64::from(p.offset), u64::from(p.offset) + u64::from(p.len));
        let first = off / block;
        let (a, e) = (first * block, end.div_ceil(block) * block);
        let base = p.chunk * self.chunk_size;
        let start = out.len();
        // The whole blocks, read with one pread into `out` (the piece's bytes are moved to
        // `start` once verified).
        let span = (e - a) as usize;
        out.reserve(span);
        let dst = &mut out.spare_capacity_mut()[..span];
        let done = match f {
            Some(f) => pread_uninit(&f.data, dst, base + a).map_err(|e| io_err(&e, id, p.chunk))?,
            None => 0,
        };
        for b in &mut dst[done..] {
            b.write(0);
        }
        // SAFETY: pread_uninit initialised dst[..done], the loop the rest; dst is the `span`
        // bytes of spare capacity right after `out.len()`.
        unsafe { out.set_len(start + span) };
        let n = ((e - a) / block) as usize;
        let stored = match f {
            Some(f) => self.load_sums(f, id, p.chunk, first, n)?,
            None => vec![self.zero_sum; n],
        };
        // One pass over each block: a block the piece covers in part is checksummed in
        // three parts (before, in and after the piece), the one in the piece is the
        // segment's checksum, the block's is put together from the parts.
        for (j, bytes) in out[start..].chunks(block as usize).enumerate() {
            let at = a + j as u64 * block;
            let from = (off.max(at) - at) as usize;
            let to = (end.min(at + block) - at) as usize;
            let seg = checksum::crc(&bytes[from..to]);
            let sum = if from == 0 && to == bytes.len() {
                seg
            } else {
                let head = checksum::crc(&bytes[..from]);
                let through = checksum::combine(head, seg, (to - from) as u64);
                checksum::crc_append(through, &bytes[to..])
            };
            if sum != stored[j] {
                return Ok(Some(at));
            }
            sums.push(seg);
        }
        if off != a || end != e {
            let (from, to) = (start + (off - a) as usize, start + (end - a) as usize);
            out.copy_within(from..to, start);
            out.truncate(start + p.len as usize);
        }
        Ok(None)
    }

    /// The stored checksums of `n` blocks of chunk `k` from block `first` (decoded: a hole
    /// of the sum file is a zero block's checksum).
    fn load_sums(
        &self,
        f: &Open,
        id: FileId,
        k: u64,
        first: u64,
        n: usize,
    ) -> Result<Vec<u32>, Errno> {
        let Some(sf) = &f.sums else {
            return Ok(vec![self.zero_sum; n]);
        };
        let mut raw = vec![0u8; n * SUM_BYTES as usize];
        pread_full(sf, &mut raw, self.sum_at(k, first))
            .map_err(|e| Errno::from_io(&e, format!("checksums of chunk {k} of file {id:032x}")))?;
        Ok(raw
            .chunks_exact(SUM_BYTES as usize)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) ^ self.zero_sum)
            .collect())
    }

    /// Stores the checksums of consecutive blocks of chunk `k` from block `first`.
    fn store_sums(
        &self,
        f: &Open,
        id: FileId,
        k: u64,
        first: u64,
        sums: &[u32],
    ) -> Result<(), Errno> {
        let Some(sf) = &f.sums else {
            return Ok(());
        };
        let raw: Vec<u8> = sums
            .iter()
            .flat_map(|s| (s ^ self.zero_sum).to_le_bytes())
            .collect();
        sf.write_all_at(&raw, self.sum_at(k, first))
            .map_err(|e| Errno::from_io(&e, format!("checksums of chunk {k} of file {id:032x}")))
    }

    /// Offset in the sum file of the checksum of chunk `k`'s block `b`.
    fn sum_at(&self, k: u64, b: u64) -> u64 {
        let block = self.block.unwrap_or(self.chunk_size);
        (k * (self.chunk_size / block) + b) * SUM_BYTES
    }

    /// The new checksums of the blocks piece `p` touches, from its first block on: whole
    /// blocks from `seg_sums` (verified by the caller) or computed; a block covered in part
    /// gets its stored checksum patched (`checksum::patch`) with the checksums of the bytes
    /// the piece replaces and of the piece's, so only the bytes replaced are read (none at
    /// or past the chunk's length `held`: zeros), and damage elsewhere in the block stays
    /// as visible as it was. A block already known to be damaged is refused (EIO). The
    /// caller holds the chunk's lock.
    #[allow(clippy::too_many_arguments)]
    fn block_sums_for_write(
        &self,
        f: &Open,
        id: FileId,
        p: &Piece,
        bytes: &[u8],
        block: u64,
        seg_sums: Option<&[u32]>,
        held: u64,
    ) -> Result<Vec<u32>, Errno> {
        let n = checksum::count(std::slice::from_ref(p), block);
        let mut out = Vec::with_capacity(n);
        let base = p.chunk * self.chunk_size;
        let first = u64::from(p.offset) / block;
        let partial = u64::from(p.offset) % block != 0
            || (u64::from(p.offset) + u64::from(p.len)) % block != 0;
        // The stored checksums of the blocks covered in part (the first and the last), read
        // with one pread.
        let stored = if partial {
            self.load_sums(f, id, p.chunk, first, n)?
        } else {
            Vec::new()
        };
        let mut old = Vec::new();
        let mut pos = 0usize;
        for (i, (so, sl)) in checksum::segments(p, block).enumerate() {
            let seg = &bytes[pos..pos + sl as usize];
            pos += sl as usize;
            let new = seg_sums
                .and_then(|s| s.get(i).copied())
                .unwrap_or_else(|| checksum::crc(seg));
            if sl == block {
                out.push(new);
                continue;
            }
            let b = so / block;
            if lock(&self.bad).contains(&(id, p.chunk, b * block)) {
                return Err(self.found_bad(id, p.chunk, b * block));
            }
            // The checksum of the bytes replaced: those below `held` read, zeros after.
            // (A data file that ends early reads as zeros too.)
            let below = held.saturating_sub(so).min(sl);
            let (mut was, mut have) = (0u32, 0u64);
            if below > 0 {
                old.clear();
                old.reserve(below as usize);
                let dst = &mut old.spare_capacity_mut()[..below as usize];
                let done =
                    pread_uninit(&f.data, dst, base + so).map_err(|e| io_err(&e, id, p.chunk))?;
                // SAFETY: pread_uninit initialised the first `done` bytes of the spare capacity.
                unsafe { old.set_len(done) };
                (was, have) = (checksum::crc(&old), done as u64);
            }
            if have < sl {
                let (gap, zeros) = (sl - have, checksum::zeros_crc(sl - have));
                was = if have == 0 {
                    zeros
                } else {
                    checksum::combine(was, zeros, gap)
                };
            }
            let after = (b + 1) * block - (so + sl);
            out.push(checksum::patch(
                stored[(b - first) as usize],
                was,
                new,
                after,
            ));
        }
        Ok(out)
    }

    /// Records a block found not to match its checksum (counted the first time) and returns
    /// the error naming it.
    fn found_bad(&self, id: FileId, k: u64, at: u64) -> Errno {
        if lock(&self.bad).insert((id, k, at)) {
            self.checksum_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!("checksum mismatch: file {id:032x} chunk {k} offset {at}");
        }
        Errno::eio(format!(
            "checksum mismatch in file {id:032x}, chunk {k}, offset {at} (file offset {}): \
             the stored data is damaged",
            k * self.chunk_size + at
        ))
    }

    /// Sets the checksum block (`None`: checksums off). Call before any use.
    pub fn checksums(mut self, block: Option<u64>) -> ChunkStore {
        self.block = block.filter(|b| *b > 0 && self.chunk_size.is_multiple_of(*b));
        self.zero_sum = self.block.map(checksum::zeros_crc).unwrap_or(0);
        self
    }

    /// The bytes one checksum covers, when checksums are on.
    pub fn checksum_block(&self) -> Option<u64> {
        self.block
    }

    /// Blocks found bad (each once) and corrupted payloads refused, since start.
    pub fn integrity_counters(&self) -> (u64, u64) {
        (
            self.checksum_errors.load(Ordering::Relaxed),
            self.corrupt_payloads.load(Ordering::Relaxed),
        )
    }

    /// The chunks with a block found not to match its checksum (and not rewritten, cut or
    /// deleted since), in order: what a repair from a replica restores.
    pub fn corrupt(&self) -> Vec<(FileId, u64)> {
        let mut v: Vec<(FileId, u64)> =
            lock(&self.bad).iter().map(|(id, k, _)| (*id, *k)).collect();
        v.dedup();
        v
    }

    /// Forgets the bad blocks of chunk `k` (deleted), or of every chunk (`None`) of `id`.
    fn forget_bad(&self, id: FileId, k: Option<u64>) {
        let mut bad = lock(&self.bad);
        if bad.is_empty() {
            return;
        }
        let (lo, hi) = match k {
            Some(k) => ((id, k, 0), (id, k, u64::MAX)),
            None => ((id, 0, 0), (id, u64::MAX, u64::MAX)),
        };
        let gone: Vec<_> = bad.range(lo..=hi).copied().collect();
        for g in gone {
            bad.remove(&g);
        }
    }

    /// Verifies every stored block of up to `limit` chunks after `after`, in (file id,
    /// chunk) order, each under its lock (I/O goes on around it).
    pub fn scrub(&self, after: Option<(FileId, u64)>, limit: u32) -> Result<ScrubPage, Errno> {
        let mut page = ScrubPage {
            total_chunks: self.count.load(Ordering::Relaxed),
            ..ScrubPage::default()
        };
        let Some(block) = self.block else {
            return Ok(page);
        };
        let start = after
            .map(|(id, k)| record_key(id, k).to_vec())
            .unwrap_or_default();
        let mut listed = Vec::new();
        for guard in self.records.range(start..) {
            if listed.len() >= limit.max(1) as usize {
                break;
            }
            let key = guard
                .key()
                .map_err(|e| Errno::eio(format!("reading the chunk map: {e}")))?;
            let (Ok(id), Ok(k)) = (
                <[u8; 16]>::try_from(key.get(..16).unwrap_or_default()),
                <[u8; 8]>::try_from(key.get(16..).unwrap_or_default()),
            ) else {
                continue;
            };
            let (id, k) = (FileId::from_be_bytes(id), u64::from_be_bytes(k));
            if Some((id, k)) == after {
                continue;
            }
            listed.push((id, k));
        }
        let full = listed.len() >= limit.max(1) as usize;
        for (id, k) in listed {
            page.next = Some((id, k));
            let _guard = self.lock(id, k);
            let Some(len) = self.len_locked(id, k)? else {
                continue; // deleted meanwhile
            };
            let n = len.div_ceil(block);
            let bad = self.with_file(id, |f| {
                let Some(f) = f else {
                    return Ok(Vec::new());
                };
                let stored = self.load_sums(f, id, k, 0, n as usize)?;
                let mut buf = vec![0u8; block as usize];
                let mut bad = Vec::new();
                for b in 0..n {
                    pread_full(&f.data, &mut buf, k * self.chunk_size + b * block)
                        .map_err(|e| io_err(&e, id, k))?;
                    if checksum::crc(&buf) != stored[b as usize] {
                        bad.push(b * block);
                    }
                }
                Ok(bad)
            })?;
            page.chunks += 1;
            page.blocks += n;
            page.bytes += len;
            for at in bad {
                self.found_bad(id, k, at);
                page.bad.push(BadBlock {
                    file_id: id,
                    chunk: k,
                    offset: at,
                });
            }
        }
        if !full {
            page.next = None;
        }
        Ok(page)
    }

    fn check_read(&self, pieces: &[Piece]) -> Result<u64, Errno> {
        let total = self.check_pieces(pieces)?;
        if total > self.max_read {
            return Err(Errno::einval(format!(
                "read of {total} bytes exceeds the limit of {} bytes per request",
                self.max_read
            )));
        }
        Ok(total)
    }

    /// A zeroed buffer for a read of the pieces, after checking them and the size limit.
    pub fn read_buffer(&self, pieces: &[Piece]) -> Result<Vec<u8>, Errno> {
        Ok(vec![0u8; self.check_read(pieces)? as usize])
    }

    /// Reads one piece into `buf` (zeros past what the data file holds); false (and `buf`
    /// untouched) if the chunk does not exist.
    /// With checksums on, the blocks it touches are verified (as `read_checked` does).
    pub fn read_piece(&self, id: FileId, p: &Piece, buf: &mut [u8]) -> Result<bool, Errno> {
        self.read_piece_with(id, p, buf, false)
    }

    /// `read_piece`; `locked`: the caller holds the chunk's lock.
    fn read_piece_with(
        &self,
        id: FileId,
        p: &Piece,
        buf: &mut [u8],
        locked: bool,
    ) -> Result<bool, Errno> {
        if buf.len() != p.len as usize {
            return Err(Errno::einval("a piece's length differs from its buffer"));
        }
        let Some(slot) = self.slot(id) else {
            return Ok(false);
        };
        let gone = slot.gate.read().unwrap_or_else(|e| e.into_inner());
        if *gone || !lock(&slot.chunks).contains_key(&p.chunk) {
            return Ok(false);
        }
        let Some(f) = self.data_file(id, &slot, false)? else {
            return Ok(false);
        };
        if let Some(block) = self.block {
            let room = buf.len() + 2 * block as usize;
            let (mut out, mut sums) = (Vec::with_capacity(room), Vec::new());
            match self.read_piece_verified(Some(&f), id, p, block, &mut out, &mut sums)? {
                None => {
                    buf.copy_from_slice(&out);
                    return Ok(true);
                }
                Some(at) if locked => return Err(self.found_bad(id, p.chunk, at)),
                Some(_) => {
                    // Checked again under the chunk's lock (taken before the gate).
                    drop((f, gone));
                    let _guard = self.lock(id, p.chunk);
                    return self.read_piece_with(id, p, buf, true);
                }
            }
        }
        let f = &f.data;
        let at = p.chunk * self.chunk_size + u64::from(p.offset);
        let mut done = 0usize;
        while done < buf.len() {
            match f.read_at(&mut buf[done..], at + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(&e, id, p.chunk)),
            }
        }
        buf[done..].fill(0);
        Ok(true)
    }

    /// Drops the data at and after byte `size` of the file: chunks entirely at or after it
    /// are deleted, the chunk containing it is cut (each under its lock); then the data
    /// file is cut after the last chunk left, so bytes the map lost in a crash go too.
    pub fn truncate(&self, id: FileId, size: u64) -> Result<(), Errno> {
        let Some(slot) = self.slot(id) else {
            return Ok(());
        };
        let listed: Vec<(u64, u64)> = lock(&slot.chunks).iter().map(|(k, l)| (*k, *l)).collect();
        for (k, _) in listed {
            let start = k.saturating_mul(self.chunk_size);
            if start >= size {
                let _guard = self.lock(id, k);
                self.delete_locked(id, k)?;
            } else if size - start < self.chunk_size {
                let _guard = self.lock(id, k);
                self.cut_locked(&slot, id, k, size - start)?;
            }
        }
        let gone = slot.gate.write().unwrap_or_else(|e| e.into_inner());
        if *gone {
            return Ok(());
        }
        let keep = lock(&slot.chunks)
            .iter()
            .map(|(k, l)| k * self.chunk_size + l)
            .max()
            .unwrap_or(0)
            .max(size);
        if let Some(f) = self.data_file(id, &slot, false)? {
            let len = f.data.metadata().map_err(|e| file_err(&e, id))?.len();
            if len > keep {
                f.data.set_len(keep).map_err(|e| file_err(&e, id))?;
            }
            if let (Some(block), Some(sf)) = (self.block, &f.sums) {
                let keep_sums = keep.div_ceil(block) * SUM_BYTES;
                let len = sf.metadata().map_err(|e| file_err(&e, id))?.len();
                if len > keep_sums {
                    sf.set_len(keep_sums).map_err(|e| file_err(&e, id))?;
                }
            }
        }
        drop(gone);
        Ok(())
    }

    fn cut_locked(&self, slot: &Slot, id: FileId, k: u64, keep: u64) -> Result<(), Errno> {
        let gone = slot.gate.read().unwrap_or_else(|e| e.into_inner());
        let Some(len) = lock(&slot.chunks).get(&k).copied() else {
            return Ok(());
        };
        if *gone || len <= keep {
            return Ok(());
        }
        if let Some(f) = self.data_file(id, slot, false)? {
            let tail = match self.block {
                Some(block) if !keep.is_multiple_of(block) => {
                    // The block the cut falls in: verified, then its checksum recomputed.
                    let b = keep / block;
                    let mut whole = vec![0u8; block as usize];
                    pread_full(&f.data, &mut whole, k * self.chunk_size + b * block)
                        .map_err(|e| io_err(&e, id, k))?;
                    if checksum::crc(&whole) != self.load_sums(&f, id, k, b, 1)?[0] {
                        return Err(self.found_bad(id, k, b * block));
                    }
                    whole[(keep - b * block) as usize..].fill(0);
                    Some((b, checksum::crc(&whole)))
                }
                _ => None,
            };
            punch(&f.data, k * self.chunk_size + keep, len - keep)
                .map_err(|e| io_err(&e, id, k))?;
            if let (Some(block), Some(sf)) = (self.block, &f.sums) {
                let from = keep.div_ceil(block);
                let per_chunk = self.chunk_size / block;
                if from < per_chunk {
                    punch(sf, self.sum_at(k, from), (per_chunk - from) * SUM_BYTES)
                        .map_err(|e| io_err(&e, id, k))?;
                }
                if let Some((b, sum)) = tail {
                    self.store_sums(&f, id, k, b, &[sum])?;
                }
            }
        }
        self.record(slot, id, k, Some(keep))
    }

    /// Deletes every chunk of the file: one unlink of its data file; nothing there is fine.
    pub fn remove(&self, id: FileId) -> Result<(), Errno> {
        let Some(slot) = self.slot(id) else {
            return Ok(());
        };
        let mut gone = slot.gate.write().unwrap_or_else(|e| e.into_inner());
        if *gone {
            return Ok(());
        }
        self.fds.remove(&id);
        let path = self.path_of(id);
        for p in [sum_path(&path), path] {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(file_err(&e, id)),
            }
        }
        self.forget_bad(id, None);
        let listed: Vec<u64> = lock(&slot.chunks).keys().copied().collect();
        for k in listed {
            self.record(&slot, id, k, None)?;
        }
        *gone = true;
        let mut shard = lock(self.shard(id));
        if shard.get(&id).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
            shard.remove(&id);
        }
        Ok(())
    }

    /// Makes the file's data here and its directory entry durable: one fdatasync (and one
    /// directory sync after the data file was created). The chunk map is made durable by
    /// the store's persist, which the caller does next.
    pub fn sync(&self, id: FileId) -> Result<(), Errno> {
        let Some(slot) = self.slot(id) else {
            return Ok(());
        };
        let gone = slot.gate.read().unwrap_or_else(|e| e.into_inner());
        if *gone {
            return Ok(());
        }
        let Some(f) = self.data_file(id, &slot, false)? else {
            return Ok(());
        };
        f.data.sync_data().map_err(|e| file_err(&e, id))?;
        if let Some(sf) = &f.sums {
            sf.sync_data().map_err(|e| file_err(&e, id))?;
        }
        if slot.fresh.swap(false, Ordering::AcqRel) {
            if let Err(e) = sync_dir(&self.dir.join(subdir_of(id))) {
                slot.fresh.store(true, Ordering::Release);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Makes everything under the chunk directory durable (syncfs of its file system).
    pub fn sync_all(&self) -> Result<(), Errno> {
        let dir =
            File::open(&self.dir).map_err(|e| Errno::from_io(&e, "opening the chunk directory"))?;
        nix::unistd::syncfs(&dir)
            .map_err(|e| Errno::new(e as i32, format!("syncing the chunk file system: {e}")))
    }

    /// The whole chunk as held here (verified, with checksums on), `None` when absent: what
    /// a repair pushes (decision 0021).
    pub fn whole(&self, id: FileId, k: u64) -> Result<Option<Vec<u8>>, Errno> {
        let _guard = self.lock(id, k);
        self.read_whole_locked(id, k)
    }

    /// Makes chunk k exactly `data` (`None`: absent), under its lock: written whole, then
    /// cut to the new length if it was longer; `sums` are the checksums of the chunk's
    /// segments when the sender had them (verified by the caller). Returns the digest of
    /// the chunk as held afterwards.
    pub fn put_whole(
        &self,
        id: FileId,
        k: u64,
        data: Option<&[u8]>,
        sums: Option<&[u32]>,
    ) -> Result<eddy_proto::repair::Digest, Errno> {
        let _guard = self.lock(id, k);
        let Some(data) = data else {
            self.delete_locked(id, k)?;
            return Ok(None);
        };
        let len = u32::try_from(data.len())
            .map_err(|_| Errno::einval("a chunk's content is larger than a chunk"))?;
        let p = Piece {
            chunk: k,
            offset: 0,
            len,
        };
        match self.write_locked_with(id, &p, data, sums) {
            // A damaged block of the old copy (read back by a partial write): start over.
            Err(e) if e.errno == libc::EIO => {
                self.delete_locked(id, k)?;
                self.write_locked_with(id, &p, data, sums)?;
            }
            other => other?,
        }
        if let Some(slot) = self.slot(id) {
            self.cut_locked(&slot, id, k, u64::from(len))?;
        }
        let now = self.read_whole_locked(id, k)?;
        Ok(eddy_proto::repair::digest(now.as_deref()))
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
}

/// Checks the layout of the chunk directory: writes the layout file into a new (or empty)
/// one and makes the subdirectories; refuses a directory of another layout.
fn prepare_layout(dir: &Path) -> Result<(), DaemonError> {
    let refuse = |message: String| DaemonError::Layout {
        path: dir.to_owned(),
        message,
    };
    let io = |what: &str, e: std::io::Error| refuse(format!("{what}: {e}"));
    let marker = dir.join(LAYOUT_FILE);
    let private_subdirs = || {
        (0..FANOUT).try_for_each(|sub| {
            crate::rootdir::private_dir(&dir.join(format!("{sub:02x}")))
                .map_err(|e| io("making a subdirectory private", e))
        })
    };
    match std::fs::read_to_string(&marker) {
        // Subdirectories made before they were private are closed now (decision 0023).
        Ok(s) if s == LAYOUT => return private_subdirs(),
        Ok(s) => {
            return Err(refuse(format!(
                "its {LAYOUT_FILE} file names a layout this eddyd does not know: {:?}",
                s.trim_end()
            )))
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(io("reading the layout file", e)),
    }
    let rd = std::fs::read_dir(dir).map_err(|e| io("listing", e))?;
    for entry in rd {
        let entry = entry.map_err(|e| io("listing", e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(refuse(
                "it holds chunks in the first layout (chunks/<file id>/<k>, before decision \
                 0015), which this eddyd does not read: stage the data out with the eddyd that \
                 wrote it, or remove the root to start empty"
                    .into(),
            ));
        }
    }
    private_subdirs()?;
    let tmp = dir.join(format!("{LAYOUT_FILE}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, LAYOUT.as_bytes()))
        .map_err(|e| io("writing the layout file", e))?;
    File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| io("syncing the layout file", e))?;
    std::fs::rename(&tmp, &marker).map_err(|e| io("writing the layout file", e))?;
    sync_dir(dir).map_err(|e| refuse(e.to_string()))
}

/// Makes `len` bytes at `at` a hole (zeros): punched where the file system can, written as
/// zeros where it cannot.
fn punch(f: &File, at: u64, len: u64) -> std::io::Result<()> {
    use nix::fcntl::{fallocate, FallocateFlags};
    let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    let (Ok(off), Ok(n)) = (i64::try_from(at), i64::try_from(len)) else {
        return Err(std::io::Error::from_raw_os_error(libc::EFBIG));
    };
    match fallocate(f, flags, off, n) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EOPNOTSUPP) => {
            let file_len = f.metadata()?.len();
            let end = (at + len).min(file_len);
            let zeros = vec![0u8; 1 << 16];
            let mut pos = at;
            while pos < end {
                let n = ((end - pos) as usize).min(zeros.len());
                f.write_all_at(&zeros[..n], pos)?;
                pos += n as u64;
            }
            Ok(())
        }
        Err(e) => Err(std::io::Error::from_raw_os_error(e as i32)),
    }
}

/// The sum file beside data file `path`.
fn sum_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(SUM_SUFFIX);
    PathBuf::from(name)
}

/// pread until `buf` is full or the file ends; the rest of `buf` is zeroed. Returns the
/// bytes read.
fn pread_full(f: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    let mut done = 0usize;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf[done..].fill(0);
    Ok(done)
}

/// pread into uninitialised memory until it is full or the file ends; returns the bytes
/// read (initialised).
fn pread_uninit(f: &File, dst: &mut [MaybeUninit<u8>], at: u64) -> std::io::Result<usize> {
    let mut done = 0usize;
    while done < dst.len() {
        let Ok(off) = libc::off_t::try_from(at + done as u64) else {
            return Err(std::io::Error::from_raw_os_error(libc::EFBIG));
        };
        let rest = &mut dst[done..];
        // SAFETY: the pointer and length describe `rest`, writable memory we own; pread only
        // writes bytes into it (initialising what it reports).
        let n = unsafe {
            libc::pread(
                f.as_raw_fd(),
                rest.as_mut_ptr().cast::<libc::c_void>(),
                rest.len(),
                off,
            )
        };
        match n {
            0 => break,
            n if n > 0 => done += n as usize,
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(done)
}

/// Entries of the open-file cache: raises the soft descriptor limit to the hard one (best
/// effort), then takes a share of it.
fn fd_cache_capacity() -> usize {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let soft = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(_) => soft,
        },
        Ok((soft, _)) => soft,
        Err(_) => 0,
    };
    let share = usize::try_from(soft / FD_CACHE_SHARE).unwrap_or(FD_CACHE_MAX);
    share.clamp(1, FD_CACHE_MAX)
}

fn sync_dir(dir: &Path) -> Result<(), Errno> {
    match File::open(dir) {
        Ok(d) => d
            .sync_all()
            .map_err(|e| Errno::from_io(&e, format!("syncing {}", dir.display()))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Errno::from_io(&e, format!("opening {}", dir.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjall::{Database, KeyspaceCreateOptions};

    const CS: u64 = 4096;

    struct Fixture {
        dir: tempfile::TempDir,
        db: Database,
        store: ChunkStore,
    }

    fn open(dir: tempfile::TempDir) -> Fixture {
        open_with(dir, 0)
    }

    fn open_with(dir: tempfile::TempDir, capacity: u64) -> Fixture {
        let db = Database::builder(dir.path().join("meta")).open().unwrap();
        let ks = db
            .keyspace(CHUNK_KEYSPACE, KeyspaceCreateOptions::default)
            .unwrap();
        let store = ChunkStore::open(&dir.path().join("chunks"), ks, CS, 1 << 20)
            .unwrap()
            .capacity(capacity);
        Fixture { dir, db, store }
    }

    /// Drops the store and its database (as a stopped daemon would) and opens them again.
    fn reopen(f: Fixture) -> Fixture {
        f.db.persist(fjall::PersistMode::SyncAll).unwrap();
        let Fixture { dir, db, store } = f;
        drop((store, db));
        open(dir)
    }

    fn p(chunk: u64, offset: u32, len: u32) -> Piece {
        Piece { chunk, offset, len }
    }

    fn data_file(f: &Fixture, id: FileId) -> PathBuf {
        f.dir
            .path()
            .join("chunks")
            .join(subdir_of(id))
            .join(format!("{id:032x}"))
    }

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
    fn chunk_directories_and_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let f = open(tempfile::tempdir().unwrap());
        f.store.write(9, &[p(0, 0, 10)], &[1u8; 10]).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let dir = f.dir.path().join("chunks");
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join(subdir_of(9))), 0o700);
        assert_eq!(mode(&data_file(&f, 9)), 0o600);
        assert_eq!(mode(&sum_path(&data_file(&f, 9))), 0o600);
        // A directory of an older eddyd, open to others, is closed when opened again.
        std::fs::set_permissions(dir.join("00"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let f = reopen(f);
        assert_eq!(mode(&f.dir.path().join("chunks/00")), 0o700);
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
    fn one_data_file_per_file_with_chunks_at_their_offsets_and_holes_as_zeros() {
        let f = open(tempfile::tempdir().unwrap());
        f.store.write(7, &[p(3, 10, 4)], b"abcd").unwrap();
        f.store.write(7, &[p(1, 0, 2)], b"xy").unwrap();
        let entries: Vec<_> = std::fs::read_dir(f.dir.path().join("chunks").join(subdir_of(7)))
            .unwrap()
            .collect();
        assert_eq!(
            entries.len(),
            2,
            "one data file and its sum file, no directory per file"
        );
        let raw = std::fs::read(data_file(&f, 7)).unwrap();
        assert_eq!(&raw[(3 * CS + 10) as usize..], b"abcd");
        assert_eq!(&raw[CS as usize..CS as usize + 2], b"xy");
        assert_eq!(f.store.usage(), (14 + 2, 2));
        // Holes (chunk 0, 2, the start of chunk 3) and bytes past a chunk's end: zeros.
        let got = f
            .store
            .read(7, &[p(0, 0, 8), p(1, 0, 4), p(2, 0, 4), p(3, 8, 8)])
            .unwrap();
        let want = [
            vec![0u8; 8],
            b"xy\0\0".to_vec(),
            vec![0u8; 4],
            b"\0\0abcd\0\0".to_vec(),
        ]
        .concat();
        assert_eq!(got, want);
        // A file never written reads as zeros.
        assert_eq!(f.store.read(8, &[p(0, 0, 5)]).unwrap(), vec![0u8; 5]);
        // Presence and length as the tier sees them.
        let _g = f.store.lock(7, 2);
        assert!(!f.store.exists_locked(7, 2).unwrap());
        assert_eq!(f.store.len_locked(7, 3).unwrap(), Some(14));
        assert_eq!(
            f.store.read_whole_locked(7, 3).unwrap().unwrap(),
            [vec![0u8; 10], b"abcd".to_vec()].concat()
        );
    }

    #[test]
    fn cached_descriptors_never_outlive_a_removal_or_cut() {
        let f = open(tempfile::tempdir().unwrap());
        f.store.write(9, &[p(0, 0, 100)], &[7u8; 100]).unwrap();
        assert_eq!(f.store.read(9, &[p(0, 0, 100)]).unwrap(), vec![7u8; 100]);
        f.store.remove(9).unwrap();
        // A write after the removal lands in a new data file, visible on disk.
        f.store.write(9, &[p(0, 10, 5)], &[3u8; 5]).unwrap();
        let on_disk = std::fs::read(data_file(&f, 9)).unwrap();
        assert_eq!(on_disk, [vec![0u8; 10], vec![3u8; 5]].concat());
        assert_eq!(f.store.usage(), (15, 1));
        // After a cut, growing again is counted right and the cut bytes read as zeros.
        f.store.truncate(9, 12).unwrap();
        assert_eq!(f.store.usage(), (12, 1));
        f.store.write(9, &[p(0, 20, 4)], &[1u8; 4]).unwrap();
        assert_eq!(f.store.usage(), (24, 1));
        let got = f.store.read(9, &[p(0, 0, 30)]).unwrap();
        assert_eq!(
            got,
            [
                vec![0u8; 10],
                vec![3u8; 2],
                vec![0u8; 8],
                vec![1u8; 4],
                vec![0u8; 6]
            ]
            .concat()
        );
    }

    #[test]
    fn deleting_one_chunk_leaves_a_hole_and_the_others() {
        let f = open(tempfile::tempdir().unwrap());
        f.store
            .write(4, &[p(0, 0, 4096), p(1, 0, 4096), p(2, 0, 1)], &[9u8; 8193])
            .unwrap();
        let freed = {
            let _g = f.store.lock(4, 1);
            f.store.delete_locked(4, 1).unwrap()
        };
        assert_eq!(freed, 4096);
        assert_eq!(f.store.usage(), (4097, 2));
        let got = f
            .store
            .read(4, &[p(0, 4090, 6), p(1, 0, 4), p(2, 0, 2)])
            .unwrap();
        assert_eq!(got, [vec![9u8; 6], vec![0u8; 4], vec![9u8, 0]].concat());
        // Truncating inside the first chunk drops everything after it.
        f.store.truncate(4, 100).unwrap();
        assert_eq!(f.store.usage(), (100, 1));
        assert_eq!(std::fs::metadata(data_file(&f, 4)).unwrap().len(), 100);
        // A growing truncate keeps everything.
        f.store.truncate(4, 1 << 20).unwrap();
        assert_eq!(f.store.usage(), (100, 1));
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
        std::fs::write(&orphan, b"junk").unwrap();
        std::fs::remove_file(&lost).unwrap();
        let f = reopen(f);
        assert!(!orphan.exists());
        assert_eq!(f.store.usage(), (3, 1));
        assert_eq!(f.store.read(1, &[p(0, 0, 3)]).unwrap(), b"one");
        assert_eq!(f.store.read(2, &[p(2, 0, 3)]).unwrap(), vec![0u8; 3]);
        f.store.sync(1).unwrap();
    }

    #[test]
    fn a_root_of_the_first_layout_is_refused_with_a_clear_message() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("chunks").join(format!("{:032x}", 5u128));
        std::fs::create_dir_all(&old).unwrap();
        std::fs::write(old.join("0"), b"old").unwrap();
        let db = Database::builder(dir.path().join("meta")).open().unwrap();
        let ks = db
            .keyspace(CHUNK_KEYSPACE, KeyspaceCreateOptions::default)
            .unwrap();
        let Err(e) = ChunkStore::open(&dir.path().join("chunks"), ks, CS, 1 << 20) else {
            panic!("a root of the first layout was opened");
        };
        let msg = e.to_string();
        assert!(msg.contains("first layout"), "{msg}");
        assert!(old.join("0").exists(), "nothing of the old root is touched");
    }

    fn open_blocks(dir: tempfile::TempDir, block: Option<u64>) -> Fixture {
        let f = open(dir);
        let Fixture { dir, db, store } = f;
        Fixture {
            dir,
            db,
            store: store.checksums(block),
        }
    }

    fn flip(path: &Path, at: u64) {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, at).unwrap();
        b[0] ^= 0x10;
        f.write_all_at(&b, at).unwrap();
    }

    #[test]
    fn a_flipped_bit_is_eio_counted_once_remembered_and_found_by_scrub() {
        let f = open_blocks(tempfile::tempdir().unwrap(), Some(1024));
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        f.store.write(6, &[p(1, 100, 3000)], &data).unwrap();
        f.store.sync(6).unwrap();
        let f = reopen(f);
        let f = Fixture {
            store: f.store.checksums(Some(1024)),
            ..f
        };
        let (got, sums) = f.store.read_checked(6, &[p(1, 0, 4096)]).unwrap();
        assert_eq!(&got[100..3100], &data[..]);
        assert_eq!(
            sums,
            eddy_proto::checksum::sums(&[p(1, 0, 4096)], &got, 1024)
        );
        // A bit flipped in block 2 of chunk 1.
        flip(&data_file(&f, 6), CS + 2048 + 5);
        for _ in 0..2 {
            let e = f.store.read(6, &[p(1, 2000, 100)]).unwrap_err();
            assert_eq!(e.errno, libc::EIO);
            assert!(
                e.msg.contains(&format!("{:032x}", 6)) && e.msg.contains("chunk 1, offset 2048"),
                "{e}"
            );
        }
        assert_eq!(f.store.integrity_counters(), (1, 0), "counted once");
        assert_eq!(f.store.corrupt(), vec![(6, 1)]);
        // Blocks 0, 1 and 3 still read.
        assert_eq!(
            f.store.read(6, &[p(1, 1000, 1048)]).unwrap(),
            data[900..1948]
        );
        assert_eq!(f.store.read(6, &[p(1, 3072, 28)]).unwrap(), data[2972..]);
        // A partial write into the bad block is refused, nothing written.
        assert!(f.store.write(6, &[p(1, 2050, 4)], b"abcd").is_err());
        let page = f.store.scrub(None, 10).unwrap();
        assert_eq!((page.chunks, page.blocks, page.bytes), (1, 4, 3100));
        assert_eq!(
            page.bad,
            vec![BadBlock {
                file_id: 6,
                chunk: 1,
                offset: 2048
            }]
        );
        assert_eq!(page.next, None);
        // Rewriting the whole block repairs it.
        f.store
            .write(6, &[p(1, 2048, 1024)], &data[1948..2972])
            .unwrap();
        assert!(f.store.corrupt().is_empty());
        assert_eq!(f.store.read(6, &[p(1, 100, 3000)]).unwrap(), data);
        assert!(f.store.scrub(None, 10).unwrap().bad.is_empty());
        assert_eq!(f.store.integrity_counters(), (1, 0));
    }

    #[test]
    fn a_flip_in_the_sum_file_is_found_and_a_bad_payload_writes_nothing() {
        let f = open_blocks(tempfile::tempdir().unwrap(), Some(1024));
        f.store.write(3, &[p(0, 0, 2048)], &[5u8; 2048]).unwrap();
        let sums = sum_path(&data_file(&f, 3));
        flip(&sums, 4 + 2);
        let e = f.store.read(3, &[p(0, 0, 10)]).unwrap();
        assert_eq!(e, vec![5u8; 10], "block 0 is fine");
        let e = f.store.read(3, &[p(0, 1500, 10)]).unwrap_err();
        assert!(e.msg.contains("offset 1024"), "{e}");
        // A payload that does not match its checksums.
        let pieces = [p(2, 0, 1500)];
        let good = vec![1u8; 1500];
        let mut sums = eddy_proto::checksum::sums(&pieces, &good, 1024);
        let e = f
            .store
            .verify_payload(3, &pieces, &[2u8; 1500], &sums)
            .unwrap_err();
        assert!(e.msg.contains("corrupted in flight"), "{e}");
        sums.pop();
        assert_eq!(
            f.store
                .verify_payload(3, &pieces, &good, &sums)
                .unwrap_err()
                .errno,
            libc::EPROTO
        );
        assert_eq!(f.store.integrity_counters(), (1, 1));
        assert_eq!(f.store.usage(), (2048, 1), "nothing written");
        // Removing the file removes its sum file too.
        f.store.remove(3).unwrap();
        assert!(!sums_exists(&f, 3));
        assert!(f.store.corrupt().is_empty());
    }

    #[test]
    fn a_partial_write_into_a_block_with_unnoticed_damage_leaves_the_damage_visible() {
        let f = open_blocks(tempfile::tempdir().unwrap(), Some(1024));
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 13) as u8).collect();
        f.store.write(4, &[p(0, 0, 4096)], &data).unwrap();
        // Block 1 damaged on disk, not read since: a write of part of it succeeds (only the
        // bytes it replaces are read) ...
        flip(&data_file(&f, 4), 1024 + 900);
        f.store.write(4, &[p(0, 1100, 50)], &[9u8; 50]).unwrap();
        // ... and the block still reads as damaged, the others as written.
        let e = f.store.read(4, &[p(0, 1024, 10)]).unwrap_err();
        assert!(e.msg.contains("chunk 0, offset 1024"), "{e}");
        assert_eq!(f.store.read(4, &[p(0, 0, 1024)]).unwrap(), data[..1024]);
        assert_eq!(f.store.read(4, &[p(0, 2048, 2048)]).unwrap(), data[2048..]);
        let page = f.store.scrub(None, 10).unwrap();
        assert_eq!(
            page.bad.iter().map(|b| b.offset).collect::<Vec<_>>(),
            [1024]
        );
        // Damage the write replaced leaves the checksum wrong as well (the block reads as
        // damaged, as it was): never a fresh checksum over damaged bytes.
        flip(&data_file(&f, 4), 3000);
        f.store.write(4, &[p(0, 2990, 20)], &[7u8; 20]).unwrap();
        assert!(f.store.read(4, &[p(0, 2048, 10)]).is_err());
        // A partial write into a block known to be damaged is refused; whole blocks repair.
        assert!(f.store.write(4, &[p(0, 1030, 4)], b"abcd").is_err());
        f.store
            .write(4, &[p(0, 1024, 2048)], &data[1024..3072])
            .unwrap();
        assert_eq!(f.store.read(4, &[p(0, 0, 4096)]).unwrap(), data);
        assert!(f.store.corrupt().is_empty());
    }

    fn sums_exists(f: &Fixture, id: FileId) -> bool {
        sum_path(&data_file(f, id)).exists()
    }

    #[test]
    fn without_checksums_nothing_is_verified_or_stored() {
        let f = open_blocks(tempfile::tempdir().unwrap(), None);
        f.store.write(2, &[p(0, 0, 100)], &[4u8; 100]).unwrap();
        assert!(!sums_exists(&f, 2));
        flip(&data_file(&f, 2), 3);
        assert_eq!(f.store.read(2, &[p(0, 3, 1)]).unwrap(), vec![0x14]);
        assert_eq!(f.store.scrub(None, 10).unwrap().blocks, 0);
    }

    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Write(u64, Vec<u8>),
        Truncate(u64),
        Delete(u64),
        Reopen,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..5 * CS, proptest::collection::vec(any::<u8>(), 1..6000))
                .prop_map(|(at, d)| Op::Write(at, d)),
            1 => (0u64..5 * CS).prop_map(Op::Truncate),
            1 => (0u64..5).prop_map(Op::Delete),
            1 => Just(Op::Reopen),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn random_writes_truncates_and_deletes_always_verify(ops in proptest::collection::vec(op(), 1..12)) {
            let mut f = open_blocks(tempfile::tempdir().unwrap(), Some(1024));
            let mut model: Vec<u8> = Vec::new();
            for op in ops {
                match op {
                    Op::Write(at, d) => {
                        let spans = pieces_of(at, d.len());
                        f.store.write(1, &spans, &d).unwrap();
                        let end = at as usize + d.len();
                        if model.len() < end {
                            model.resize(end, 0);
                        }
                        model[at as usize..end].copy_from_slice(&d);
                    }
                    Op::Truncate(size) => {
                        f.store.truncate(1, size).unwrap();
                        model.truncate(size as usize);
                    }
                    Op::Delete(k) => {
                        let _g = f.store.lock(1, k);
                        f.store.delete_locked(1, k).unwrap();
                        let (a, b) = ((k * CS) as usize, ((k + 1) * CS) as usize);
                        if model.len() > a {
                            let b = b.min(model.len());
                            model[a..b].fill(0);
                        }
                    }
                    Op::Reopen => {
                        f = reopen(f);
                        f = Fixture { store: f.store.checksums(Some(1024)), ..f };
                    }
                }
                let spans = pieces_of(0, (6 * CS) as usize);
                let (got, sums) = f.store.read_checked(1, &spans).unwrap();
                let mut want = model.clone();
                want.resize((6 * CS) as usize, 0);
                prop_assert_eq!(&got, &want);
                prop_assert_eq!(eddy_proto::checksum::verify(&spans, &got, &sums, 1024).unwrap(), None);
                prop_assert!(f.store.scrub(None, 100).unwrap().bad.is_empty());
            }
            prop_assert_eq!(f.store.integrity_counters(), (0, 0));
        }
    }

    /// The pieces of `len` bytes at `at` in chunks of CS bytes.
    fn pieces_of(at: u64, len: usize) -> Vec<Piece> {
        let mut out = Vec::new();
        let (mut pos, end) = (at, at + len as u64);
        while pos < end {
            let k = pos / CS;
            let n = ((k + 1) * CS).min(end) - pos;
            out.push(p(k, (pos - k * CS) as u32, n as u32));
            pos += n;
        }
        out
    }

    #[test]
    fn bad_pieces_are_errors_not_panics() {
        let f = open(tempfile::tempdir().unwrap());
        assert!(f.store.write(1, &[p(0, 4000, 200)], &[0u8; 200]).is_err());
        assert!(f.store.write(1, &[p(u64::MAX, 0, 1)], &[0u8; 1]).is_err());
        assert!(f.store.read(1, &[p(u64::MAX / 2, 0, 1)]).is_err());
        assert!(f.store.write(1, &[p(0, 0, 2)], &[0u8; 1]).is_err());
        assert_eq!(f.store.usage(), (0, 0));
    }
}
