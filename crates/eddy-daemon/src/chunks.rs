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

use crate::locks::StripedLocks;
use crate::DaemonError;
use eddy_proto::{Errno, FileId, Piece};
use fjall::Keyspace;
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
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
    /// Number of chunks.
    count: AtomicU64,
    slots: Vec<Mutex<HashMap<FileId, Arc<Slot>>>>,
    /// Open data files (read-write), most recently used kept. Inserted under the slot's
    /// gate held shared, removed under it held exclusively.
    fds: quick_cache::sync::Cache<FileId, Arc<File>>,
}

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
        std::fs::create_dir_all(dir).map_err(root_err)?;
        prepare_layout(dir)?;
        let store = ChunkStore {
            dir: dir.to_owned(),
            chunk_size,
            max_read,
            locks: StripedLocks::default(),
            records,
            bytes: AtomicU64::new(0),
            count: AtomicU64::new(0),
            slots: (0..SHARDS).map(|_| Mutex::default()).collect(),
            fds: quick_cache::sync::Cache::new(fd_cache_capacity()),
        };
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
                let known = name
                    .to_str()
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

    fn account(&self, old_len: u64, new_len: u64) {
        if new_len >= old_len {
            self.bytes.fetch_add(new_len - old_len, Ordering::Relaxed);
        } else {
            self.bytes.fetch_sub(old_len - new_len, Ordering::Relaxed);
        }
    }

    /// Records chunk k's length (`None`: absent) in the map, durable with the next Sync.
    fn record(&self, slot: &Slot, id: FileId, k: u64, len: Option<u64>) -> Result<(), Errno> {
        let old = lock(&slot.chunks).get(&k).copied();
        match len {
            Some(l) => self
                .records
                .insert(record_key(id, k), l.to_le_bytes())
                .map_err(|e| rec_err(e, id))?,
            None if old.is_some() => self
                .records
                .remove(record_key(id, k))
                .map_err(|e| rec_err(e, id))?,
            None => {}
        }
        {
            let mut chunks = lock(&slot.chunks);
            match len {
                Some(l) => chunks.insert(k, l),
                None => chunks.remove(&k),
            };
        }
        self.account(old.unwrap_or(0), len.unwrap_or(0));
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
    fn data_file(&self, id: FileId, slot: &Slot, create: bool) -> Result<Option<Arc<File>>, Errno> {
        if let Some(f) = self.fds.get(&id) {
            return Ok(Some(f));
        }
        let path = self.path_of(id);
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound && create => {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .map_err(|e| file_err(&e, id))?;
                slot.fresh.store(true, Ordering::Release);
                f
            }
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(file_err(&e, id)),
        };
        let file = Arc::new(file);
        self.fds.insert(id, Arc::clone(&file));
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
    /// piece, straight from `data`.
    pub fn write(&self, id: FileId, pieces: &[Piece], data: &[u8]) -> Result<(), Errno> {
        let total = self.check_pieces(pieces)?;
        if total != data.len() as u64 {
            return Err(Errno::einval(format!(
                "pieces cover {total} bytes but the write carries {} bytes",
                data.len()
            )));
        }
        let mut at = 0usize;
        for p in pieces {
            let len = p.len as usize;
            let _guard = self.lock(id, p.chunk);
            self.write_locked(id, p, &data[at..at + len])?;
            at += len;
        }
        Ok(())
    }

    /// Reserves storage for the pieces in the file's data file (fallocate, mode 0): each
    /// chunk's recorded length grows to cover its piece, as a write of zeros would, so the
    /// bytes read as zeros and count as held. ENOSPC when the device cannot hold them.
    pub fn allocate(&self, id: FileId, pieces: &[Piece]) -> Result<(), Errno> {
        self.check_pieces(pieces)?;
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
            nix::fcntl::fallocate(&*file, nix::fcntl::FallocateFlags::empty(), off, len)
                .map_err(|e| io_err(&std::io::Error::from(e), id, p.chunk))?;
            let old = lock(&slot.chunks).get(&p.chunk).copied();
            let new_len = old.unwrap_or(0).max(u64::from(p.offset) + u64::from(p.len));
            if old != Some(new_len) {
                self.record(&slot, id, p.chunk, Some(new_len))?;
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
        self.read_piece(id, &p, &mut buf)?;
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
            punch(&f, k * self.chunk_size, len).map_err(|e| io_err(&e, id, k))?;
        }
        self.record(&slot, id, k, None)?;
        Ok(len)
    }

    /// Writes one piece; the caller holds the chunk's lock. The chunk's new length is
    /// recorded before its bytes are written, and restored if the write fails.
    pub fn write_locked(&self, id: FileId, p: &Piece, bytes: &[u8]) -> Result<(), Errno> {
        self.check_pieces(std::slice::from_ref(p))?;
        loop {
            let slot = self.slot_or_new(id);
            let gone = slot.gate.read().unwrap_or_else(|e| e.into_inner());
            if *gone {
                continue; // removed meanwhile: the next round makes a new slot
            }
            let old = lock(&slot.chunks).get(&p.chunk).copied();
            let end = u64::from(p.offset) + bytes.len() as u64;
            let new_len = old.unwrap_or(0).max(end);
            if old != Some(new_len) {
                self.record(&slot, id, p.chunk, Some(new_len))?;
            }
            let at = p.chunk * self.chunk_size + u64::from(p.offset);
            let written = self.data_file(id, &slot, true).and_then(|f| {
                let f = f.ok_or_else(|| Errno::eio("data file vanished"))?;
                f.write_all_at(bytes, at).map_err(|e| {
                    // Bytes of a partial write past the old length read as zeros again.
                    let from = p.chunk * self.chunk_size + old.unwrap_or(0);
                    if at + bytes.len() as u64 > from {
                        let _ = punch(&f, from, at + bytes.len() as u64 - from);
                    }
                    io_err(&e, id, p.chunk)
                })
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
    /// past a chunk's end read as zeros (only those are zero-filled).
    pub fn read(&self, id: FileId, pieces: &[Piece]) -> Result<Vec<u8>, Errno> {
        let total = self.check_read(pieces)?;
        let mut out: Vec<u8> = Vec::with_capacity(total as usize);
        let slot = self.slot(id);
        let gone = slot
            .as_ref()
            .map(|s| s.gate.read().unwrap_or_else(|e| e.into_inner()));
        let file = match (&slot, &gone) {
            (Some(s), Some(g)) if !**g => self.data_file(id, s, false)?,
            _ => None,
        };
        for p in pieces {
            let len = p.len as usize;
            let dst = &mut out.spare_capacity_mut()[..len];
            let at = p.chunk * self.chunk_size + u64::from(p.offset);
            let done = match &file {
                Some(f) => pread_uninit(f, dst, at).map_err(|e| io_err(&e, id, p.chunk))?,
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
    pub fn read_piece(&self, id: FileId, p: &Piece, buf: &mut [u8]) -> Result<bool, Errno> {
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
            let len = f.metadata().map_err(|e| file_err(&e, id))?.len();
            if len > keep {
                f.set_len(keep).map_err(|e| file_err(&e, id))?;
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
            punch(&f, k * self.chunk_size + keep, len - keep).map_err(|e| io_err(&e, id, k))?;
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
        match std::fs::remove_file(self.path_of(id)) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(file_err(&e, id)),
        }
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
        f.sync_data().map_err(|e| file_err(&e, id))?;
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
    match std::fs::read_to_string(&marker) {
        Ok(s) if s == LAYOUT => return Ok(()),
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
    for sub in 0..FANOUT {
        let p = dir.join(format!("{sub:02x}"));
        std::fs::create_dir_all(&p).map_err(|e| io("making a subdirectory", e))?;
    }
    let tmp = dir.join(format!("{LAYOUT_FILE}.tmp"));
    std::fs::write(&tmp, LAYOUT).map_err(|e| io("writing the layout file", e))?;
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
        let db = Database::builder(dir.path().join("meta")).open().unwrap();
        let ks = db
            .keyspace(CHUNK_KEYSPACE, KeyspaceCreateOptions::default)
            .unwrap();
        let store = ChunkStore::open(&dir.path().join("chunks"), ks, CS, 1 << 20).unwrap();
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
        assert_eq!(entries.len(), 1, "one data file, no directory per file");
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
