//! The backend tier (decision 0005): it owns the backend (`crate::backend`) and does every
//! backend I/O; the metadata store and the chunk store hold its records and data.
//!
//! The namespace side, for the metadata entries this daemon owns: `import.rs` (stubs of
//! backend entries, directory import, validation on open), `write_through.rs` (namespace
//! changes made in the backend, and `Through`, by which the store's operations on a linked
//! path reach the tier under the entry's key lock), `finalize.rs` (dirty files finalised at
//! stage-out).
//!
//! The cache side (here), for the chunks this daemon owns: which chunks of linked files it
//! holds, which are dirty (not yet written back) or pinned, the least recently used order,
//! and the operations on them — fetch on a miss, write-back, eviction.
//!
//! State lives in memory and in the fjall keyspace `tier` (same journal as the metadata, so
//! a Sync makes it durable with the data): `c<id><k>` → flags of a cached chunk, `f<id>` →
//! the file's namespace path and the chunks written back and evicted, `d<path>` → the
//! backend mtime a linked directory's children were imported at. Every chunk operation
//! runs under the chunk's lock in the chunk store, so concurrent readers of a missing chunk
//! cause one backend read, and a write racing a write-back is never marked clean.
//! No coordination with other daemons: each one evicts and writes back its own chunks.

mod finalize;
mod import;
mod write_through;

use crate::backend::Backend;
use crate::chunks::ChunkStore;
use eddy_config::Config;
use eddy_placement::Placement;
use eddy_proto::path::PathLimits;
use eddy_proto::sync::lock;
use eddy_proto::{Backing, Errno, FileId, FileOutcome, Piece, TierStatus};
use fjall::Keyspace;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Name of the keyspace holding the tier's records.
pub const TIER_KEYSPACE: &str = "tier";

const DIRTY: u8 = 1;
const PINNED: u8 = 2;

#[derive(Debug, Clone, Copy)]
struct Chunk {
    len: u64,
    dirty: bool,
    pinned: bool,
    last_use: u64,
    /// Bumped by every write: a write-back marks the chunk clean only if none came since.
    version: u64,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct FileRec {
    /// Namespace path (kept current by Rebind).
    path: String,
    /// Chunks written back (or fetched) and then evicted: fetched again on a miss even
    /// above the size the client knows of.
    evicted: BTreeSet<u64>,
    /// Chunks held here (not persisted: rebuilt from the chunk records).
    #[serde(skip)]
    held: BTreeSet<u64>,
}

#[derive(Default)]
struct Maps {
    chunks: HashMap<(FileId, u64), Chunk>,
    files: HashMap<FileId, FileRec>,
}

/// The tier's state on one daemon.
pub struct Tier {
    backend: Arc<Backend>,
    chunk_size: u64,
    records: Keyspace,
    maps: Mutex<Maps>,
    clock: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    fetches: AtomicU64,
    evictions: AtomicU64,
    capacity_cfg: u64,
    high_pct: u64,
    low_pct: u64,
    root: PathBuf,
    /// Held by the thread evicting; others go on (or wait, past the capacity).
    evicting: Mutex<()>,
    /// Time one write-back or finalisation request may take before it replies with what
    /// it did.
    flush_budget: Duration,
    /// The deployment's daemons and this one's id: which children of a linked directory
    /// this daemon imports.
    members: Option<(Placement, u32)>,
    /// The path limits names imported from the backend are checked against.
    limits: PathLimits,
}

fn rec_err(what: &str, e: fjall::Error) -> Errno {
    Errno::eio(format!("tier records: {what}: {e}"))
}

fn chunk_key(id: FileId, k: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(25);
    key.push(b'c');
    key.extend_from_slice(&id.to_be_bytes());
    key.extend_from_slice(&k.to_be_bytes());
    key
}

fn file_key(id: FileId) -> Vec<u8> {
    let mut key = Vec::with_capacity(17);
    key.push(b'f');
    key.extend_from_slice(&id.to_be_bytes());
    key
}

fn under(path: &str, prefix: &str) -> bool {
    eddy_proto::path::is_within(path, prefix)
}

impl Tier {
    /// Loads the records; chunk records whose chunk file is gone (a crash between the two)
    /// are dropped.
    pub fn open(
        records: Keyspace,
        backend: Arc<Backend>,
        config: &Config,
        root: &Path,
        chunks: &ChunkStore,
    ) -> Result<Tier, Errno> {
        let mut maps = Maps::default();
        for guard in records.prefix(b"f") {
            let (key, value) = guard.into_inner().map_err(|e| rec_err("load", e))?;
            let Ok(id_bytes) = <[u8; 16]>::try_from(&key[1..]) else {
                continue;
            };
            let rec: FileRec = bincode::deserialize(&value).unwrap_or_default();
            maps.files.insert(FileId::from_be_bytes(id_bytes), rec);
        }
        let mut stale = Vec::new();
        let mut clock = 0u64;
        for guard in records.prefix(b"c") {
            let (key, value) = guard.into_inner().map_err(|e| rec_err("load", e))?;
            if key.len() != 25 || value.is_empty() {
                stale.push(key.to_vec());
                continue;
            }
            let id = FileId::from_be_bytes(key[1..17].try_into().unwrap_or_default());
            let k = u64::from_be_bytes(key[17..25].try_into().unwrap_or_default());
            let Some(len) = chunks.len_locked(id, k)? else {
                stale.push(key.to_vec());
                continue;
            };
            clock += 1;
            maps.chunks.insert(
                (id, k),
                Chunk {
                    len,
                    dirty: value[0] & DIRTY != 0,
                    pinned: value[0] & PINNED != 0,
                    last_use: clock,
                    version: 0,
                },
            );
            maps.files.entry(id).or_default().held.insert(k);
        }
        for key in stale {
            records.remove(key).map_err(|e| rec_err("remove", e))?;
        }
        Ok(Tier {
            backend,
            chunk_size: config.chunk_size,
            records,
            maps: Mutex::new(maps),
            clock: AtomicU64::new(clock),
            read_bytes: AtomicU64::new(0),
            write_bytes: AtomicU64::new(0),
            fetches: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            capacity_cfg: config.cache_capacity_bytes,
            high_pct: u64::from(config.cache_high_watermark_pct),
            low_pct: u64::from(config.cache_low_watermark_pct),
            root: root.to_owned(),
            evicting: Mutex::new(()),
            flush_budget: Duration::from_millis(config.rpc_timeout_ms / 2),
            members: None,
            limits: PathLimits {
                max_path: config.max_path_bytes,
                max_name: config.max_name_bytes,
            },
        })
    }

    /// The deployment's daemons and this daemon's id: needed to import the children of
    /// linked directories (those this daemon owns).
    pub fn with_members(self, members: Option<(Placement, u32)>) -> Tier {
        Tier { members, ..self }
    }

    fn maps(&self) -> MutexGuard<'_, Maps> {
        lock(&self.maps)
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn save_chunk(&self, id: FileId, k: u64, c: &Chunk) -> Result<(), Errno> {
        let flags = (if c.dirty { DIRTY } else { 0 }) | (if c.pinned { PINNED } else { 0 });
        self.records
            .insert(chunk_key(id, k), [flags])
            .map_err(|e| rec_err("insert", e))
    }

    fn save_file(&self, id: FileId, rec: &FileRec) -> Result<(), Errno> {
        let bytes = bincode::serialize(rec).unwrap_or_default();
        self.records
            .insert(file_key(id), bytes)
            .map_err(|e| rec_err("insert", e))
    }

    /// The backend path of a linked file's namespace path, which must be normalised: a path
    /// with `.`, `..` or empty components could name something outside the backend directory.
    fn backend_path(&self, path: &str) -> Result<PathBuf, Errno> {
        let form_only = eddy_proto::path::PathLimits {
            max_path: usize::MAX,
            max_name: usize::MAX,
        };
        if eddy_proto::path::normalize(path, form_only).as_deref() != Ok(path) {
            return Err(Errno::einval(format!(
                "backend path of {path:?}: not a normalised path"
            )));
        }
        self.backend.resolve_linked(path)
    }

    /// Records that chunk k of `id` is held here with `len` bytes, after a fetch (clean) or
    /// a write (dirty); `pin` pins it. Persists what changed.
    fn note(
        &self,
        id: FileId,
        k: u64,
        len: u64,
        dirty: bool,
        pin: bool,
        path: &str,
    ) -> Result<(), Errno> {
        let now = self.tick();
        let mut maps = self.maps();
        let (changed, snapshot) = {
            let existed = maps.chunks.contains_key(&(id, k));
            let c = maps.chunks.entry((id, k)).or_insert(Chunk {
                len,
                dirty: false,
                pinned: false,
                last_use: now,
                version: 0,
            });
            let before = (c.dirty, c.pinned);
            c.len = len;
            c.last_use = now;
            if dirty {
                c.dirty = true;
                c.version += 1;
            }
            c.pinned |= pin;
            (!existed || before != (c.dirty, c.pinned), *c)
        };
        let rec = maps.files.entry(id).or_default();
        let mut file_changed = false;
        if rec.path.is_empty() {
            rec.path = path.to_string();
            file_changed = true;
        }
        rec.held.insert(k);
        file_changed |= rec.evicted.remove(&k);
        let rec_copy = file_changed.then(|| rec.clone());
        drop(maps);
        if changed {
            self.save_chunk(id, k, &snapshot)?;
        }
        if let Some(r) = rec_copy {
            self.save_file(id, &r)?;
        }
        Ok(())
    }

    /// Marks chunk k of `id` as just used; whether it is recorded here, i.e. complete: a
    /// chunk is recorded only after its fetch or write has finished.
    fn touch(&self, id: FileId, k: u64) -> bool {
        let now = self.tick();
        match self.maps().chunks.get_mut(&(id, k)) {
            Some(c) => {
                c.last_use = now;
                true
            }
            None => false,
        }
    }

    /// Whether a missing chunk k of a file must come from the backend: below the size the
    /// client knows the backend copy to have, or written back and evicted by this daemon.
    fn in_backend(&self, id: FileId, k: u64, backing: &Backing) -> bool {
        k.saturating_mul(self.chunk_size) < backing.size
            || self
                .maps()
                .files
                .get(&id)
                .is_some_and(|f| f.evicted.contains(&k))
    }

    /// Fetches chunk k from the backend and keeps it; the caller holds the chunk's lock and
    /// knows it is missing. Returns the bytes (empty: nothing in the backend, nothing kept).
    fn fetch_locked(
        &self,
        chunks: &ChunkStore,
        id: FileId,
        k: u64,
        backing: &Backing,
        pin: bool,
    ) -> Result<Vec<u8>, Errno> {
        let bpath = self.backend_path(&backing.path)?;
        let data = self
            .backend
            .read_at(&bpath, k * self.chunk_size, self.chunk_size as usize)?;
        self.fetches.fetch_add(1, Ordering::Relaxed);
        self.read_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        if !data.is_empty() {
            let piece = Piece {
                chunk: k,
                offset: 0,
                len: data.len() as u32,
            };
            chunks.write_locked(id, &piece, &data)?;
            self.note(id, k, data.len() as u64, false, pin, &backing.path)?;
        }
        Ok(data)
    }

    /// Reads the pieces of a linked file; missing chunks are fetched (once) and kept.
    pub fn read(
        &self,
        chunks: &ChunkStore,
        id: FileId,
        pieces: &[Piece],
        backing: &Backing,
    ) -> Result<Vec<u8>, Errno> {
        let mut out = chunks.read_buffer(pieces)?;
        let mut at = 0usize;
        let mut grew = false;
        for p in pieces {
            let buf = &mut out[at..at + p.len as usize];
            at += p.len as usize;
            // Without the chunk's lock only a recorded chunk is read: a chunk file being
            // filled by a fetch exists before it holds its bytes.
            if self.touch(id, p.chunk) && chunks.read_piece(id, p, buf)? {
                continue;
            }
            let guard = chunks.lock(id, p.chunk);
            if chunks.exists_locked(id, p.chunk)? {
                // Fetched by a concurrent reader meanwhile.
                drop(guard);
                chunks.read_piece(id, p, buf)?;
                continue;
            }
            if !self.in_backend(id, p.chunk, backing) {
                continue; // a hole
            }
            let data = self.fetch_locked(chunks, id, p.chunk, backing, false)?;
            drop(guard);
            grew |= !data.is_empty();
            let from = (p.offset as usize).min(data.len());
            let to = (p.offset as usize + p.len as usize).min(data.len());
            buf[..to - from].copy_from_slice(&data[from..to]);
        }
        if grew {
            self.after_growth(chunks);
        }
        Ok(out)
    }

    /// Writes the pieces of a linked file: a chunk missing here that the write covers only
    /// in part is fetched first; written chunks are dirty.
    pub fn write(
        &self,
        chunks: &ChunkStore,
        id: FileId,
        pieces: &[Piece],
        data: &[u8],
        backing: &Backing,
    ) -> Result<(), Errno> {
        let total = chunks.check_pieces(pieces)?;
        if total != data.len() as u64 {
            return Err(Errno::einval(format!(
                "pieces cover {total} bytes but the write carries {} bytes",
                data.len()
            )));
        }
        let mut at = 0usize;
        for p in pieces {
            let bytes = &data[at..at + p.len as usize];
            at += p.len as usize;
            let _guard = chunks.lock(id, p.chunk);
            let whole = p.offset == 0 && u64::from(p.len) == self.chunk_size;
            if !whole
                && !chunks.exists_locked(id, p.chunk)?
                && self.in_backend(id, p.chunk, backing)
            {
                self.fetch_locked(chunks, id, p.chunk, backing, false)?;
            }
            chunks.write_locked(id, p, bytes)?;
            let len = chunks.len_locked(id, p.chunk)?.unwrap_or(0);
            self.note(id, p.chunk, len, true, false, &backing.path)?;
        }
        self.after_growth(chunks);
        Ok(())
    }

    /// Fetches the listed chunks that are missing here; pins them with `pin`. Returns the
    /// bytes fetched from the backend.
    pub fn prefetch(
        &self,
        chunks: &ChunkStore,
        id: FileId,
        list: &[u64],
        backing: &Backing,
        pin: bool,
    ) -> Result<u64, Errno> {
        let mut fetched = 0u64;
        for &k in list {
            let _guard = chunks.lock(id, k);
            if chunks.exists_locked(id, k)? {
                if pin {
                    let len = chunks.len_locked(id, k)?.unwrap_or(0);
                    let dirty = self.maps().chunks.get(&(id, k)).is_some_and(|c| c.dirty);
                    self.note(id, k, len, dirty, true, &backing.path)?;
                }
                continue;
            }
            if self.in_backend(id, k, backing) {
                fetched += self.fetch_locked(chunks, id, k, backing, pin)?.len() as u64;
            }
        }
        if fetched > 0 {
            self.after_growth(chunks);
        }
        Ok(fetched)
    }

    /// Writes back this daemon's dirty chunks of files under `prefix` with ids after
    /// `after`, at most `limit` files; returns one outcome per file and whether more remain.
    pub fn flush_dirty(
        &self,
        chunks: &ChunkStore,
        prefix: &str,
        after: Option<FileId>,
        limit: u32,
    ) -> (Vec<FileOutcome>, bool) {
        let mut ids: Vec<(FileId, String)> = {
            let maps = self.maps();
            maps.files
                .iter()
                .filter(|(id, f)| {
                    after.is_none_or(|a| **id > a)
                        && under(&f.path, prefix)
                        && f.held
                            .iter()
                            .any(|k| maps.chunks.get(&(**id, *k)).is_some_and(|c| c.dirty))
                })
                .map(|(id, f)| (*id, f.path.clone()))
                .collect()
        };
        ids.sort_unstable_by_key(|(id, _)| *id);
        let mut more = ids.len() > limit as usize;
        ids.truncate(limit as usize);
        let deadline = Instant::now() + self.flush_budget;
        let mut outcomes = Vec::new();
        for (id, path) in ids {
            if Instant::now() >= deadline {
                more = true;
                break;
            }
            let (bytes, complete, error) = match self.flush_file(chunks, id, &path, None, deadline)
            {
                Ok((b, complete)) => (b, complete, None),
                Err(e) => (0, true, Some(e)),
            };
            outcomes.push(FileOutcome {
                path,
                file_id: id,
                bytes,
                error,
                complete,
            });
            if !complete {
                more = true;
                break;
            }
        }
        (outcomes, more)
    }

    /// Writes back the dirty chunks of one file (all, or only `only`), fsyncs the backend
    /// file, then marks clean the chunks no write touched meanwhile. Stops starting chunks
    /// at `deadline`. Returns the bytes written and whether every dirty chunk was.
    fn flush_file(
        &self,
        chunks: &ChunkStore,
        id: FileId,
        path: &str,
        only: Option<u64>,
        deadline: Instant,
    ) -> Result<(u64, bool), Errno> {
        let dirty: Vec<u64> = {
            let maps = self.maps();
            let Some(f) = maps.files.get(&id) else {
                return Ok((0, true));
            };
            f.held
                .iter()
                .copied()
                .filter(|k| only.is_none_or(|o| o == *k))
                .filter(|k| maps.chunks.get(&(id, *k)).is_some_and(|c| c.dirty))
                .collect()
        };
        if dirty.is_empty() {
            return Ok((0, true));
        }
        let bpath = self.backend_path(path)?;
        let file = self.backend.open_for_flush(&bpath)?;
        let mut written = Vec::new();
        let mut bytes = 0u64;
        let mut complete = true;
        for k in dirty {
            if Instant::now() >= deadline && !written.is_empty() {
                complete = false;
                break;
            }
            let _guard = chunks.lock(id, k);
            let version = match self.maps().chunks.get(&(id, k)) {
                Some(c) if c.dirty => c.version,
                _ => continue,
            };
            let Some(data) = chunks.read_whole_locked(id, k)? else {
                continue;
            };
            let n = data.len() as u64;
            self.backend
                .write_at(&file, &bpath, k * self.chunk_size, data)?;
            bytes += n;
            written.push((k, version));
        }
        self.backend.sync(&file, &bpath)?;
        self.write_bytes.fetch_add(bytes, Ordering::Relaxed);
        for (k, version) in written {
            let _guard = chunks.lock(id, k);
            let snapshot = {
                let mut maps = self.maps();
                match maps.chunks.get_mut(&(id, k)) {
                    Some(c) if c.version == version => {
                        c.dirty = false;
                        Some(*c)
                    }
                    _ => None,
                }
            };
            if let Some(c) = snapshot {
                self.save_chunk(id, k, &c)?;
            }
        }
        Ok((bytes, complete))
    }

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

    /// A linked entry moved from `from` to `to`: the records of files under it follow.
    pub fn rebind(&self, from: &str, to: &str) -> Result<(), Errno> {
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
        Ok(())
    }

    /// The file's chunks are gone (unlink, new generation): forget them.
    pub fn forget(&self, id: FileId) -> Result<(), Errno> {
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

    /// Capacity and use, in bytes: the configured capacity against the chunk bytes held, or,
    /// with none configured, the room this daemon may grow into: what it holds plus what its
    /// file system has free (others' files on a shared device neither count as its use nor
    /// make it evict what it just fetched).
    fn capacity(&self, chunks: &ChunkStore) -> (u64, u64) {
        let held = chunks.usage().0;
        if self.capacity_cfg > 0 {
            (self.capacity_cfg, held)
        } else {
            (self.room(held), held)
        }
    }

    /// What is held plus what the file system under the root has free.
    fn room(&self, held: u64) -> u64 {
        match nix::sys::statvfs::statvfs(&self.root) {
            Ok(v) => held.saturating_add(v.blocks_available().saturating_mul(v.fragment_size())),
            Err(_) => u64::MAX,
        }
    }

    /// After the cache grew: above the high watermark, evict down to the low one (one
    /// thread at a time; past the capacity itself every writer waits for room).
    pub fn after_growth(&self, chunks: &ChunkStore) {
        let (cap, used) = self.capacity(chunks);
        if used <= cap / 100 * self.high_pct {
            return;
        }
        let guard = if used > cap {
            Some(lock(&self.evicting))
        } else {
            self.evicting.try_lock().ok()
        };
        if let Some(_g) = guard {
            if let Err(e) = self.evict_to(chunks, cap / 100 * self.low_pct, true) {
                tracing::warn!("eviction stopped: {e}");
            }
        }
    }

    /// Frees room (a full device): evicts down to the low watermark of the capacity, or of
    /// the room there is when the device holds less than the configured capacity, now.
    pub fn make_room(&self, chunks: &ChunkStore) -> Result<u64, Errno> {
        let (cap, held) = self.capacity(chunks);
        let _g = lock(&self.evicting);
        self.evict_to(chunks, cap.min(self.room(held)) / 100 * self.low_pct, true)
    }

    /// Frees room under the deployment's capacity (`capacity_bytes`, decision 0023): evicts
    /// clean unpinned chunks, least recently used first, down to the low watermark of
    /// `limit`. Dirty chunks are kept (not written back): data written past the capacity is
    /// refused, not moved to the backend behind the writer's back. Whether the use is now
    /// down there (by this eviction or a concurrent one): a refused request may try again.
    pub fn make_room_within(&self, chunks: &ChunkStore, limit: u64) -> bool {
        let _g = lock(&self.evicting);
        let target = limit / 100 * self.low_pct;
        if let Err(e) = self.evict_to(chunks, target, false) {
            tracing::warn!("eviction for the capacity stopped: {e}");
        }
        chunks.usage().0 <= target
    }

    /// Evicts unpinned chunks, clean ones least recently used first, then dirty ones (written
    /// back first; only with `write_back`), until the use is at most `target`. Returns the
    /// chunks evicted.
    fn evict_to(&self, chunks: &ChunkStore, target: u64, write_back: bool) -> Result<u64, Errno> {
        let mut candidates: Vec<(bool, u64, FileId, u64)> = self
            .maps()
            .chunks
            .iter()
            .filter(|(_, c)| !c.pinned && (write_back || !c.dirty))
            .map(|((id, k), c)| (c.dirty, c.last_use, *id, *k))
            .collect();
        candidates.sort_unstable();
        let mut evicted = 0u64;
        let mut last_err = None;
        for (_, _, id, k) in candidates {
            if self.capacity(chunks).1 <= target {
                break;
            }
            match self.evict_chunk(chunks, id, k, write_back) {
                Ok(true) => evicted += 1,
                Ok(false) => {}
                Err(e) => last_err = Some(e),
            }
        }
        self.evictions.fetch_add(evicted, Ordering::Relaxed);
        match (evicted, last_err) {
            (0, Some(e)) => Err(e),
            _ => Ok(evicted),
        }
    }

    /// Evicts one chunk, writing it back first if dirty (only with `write_back`); false if
    /// it is pinned, gone, or dirty without `write_back`.
    fn evict_chunk(
        &self,
        chunks: &ChunkStore,
        id: FileId,
        k: u64,
        write_back: bool,
    ) -> Result<bool, Errno> {
        let (dirty, path) = {
            let maps = self.maps();
            match (maps.chunks.get(&(id, k)), maps.files.get(&id)) {
                (Some(c), Some(f)) if !c.pinned && (write_back || !c.dirty) => {
                    (c.dirty, f.path.clone())
                }
                _ => return Ok(false),
            }
        };
        if dirty {
            let no_limit = Instant::now() + Duration::from_secs(3600);
            self.flush_file(chunks, id, &path, Some(k), no_limit)?;
        }
        let _guard = chunks.lock(id, k);
        let rec = {
            let mut maps = self.maps();
            match maps.chunks.get(&(id, k)) {
                Some(c) if !c.dirty && !c.pinned => {}
                _ => return Ok(false),
            }
            maps.chunks.remove(&(id, k));
            let f = maps.files.entry(id).or_default();
            f.held.remove(&k);
            f.evicted.insert(k);
            f.clone()
        };
        chunks.delete_locked(id, k)?;
        self.records
            .remove(chunk_key(id, k))
            .map_err(|e| rec_err("remove", e))?;
        self.save_file(id, &rec)?;
        Ok(true)
    }

    /// The tier's figures for status.
    pub fn status(&self, chunks: &ChunkStore) -> TierStatus {
        let (cap, _) = self.capacity(chunks);
        let mut s = TierStatus {
            backend_read_bytes: self.read_bytes.load(Ordering::Relaxed),
            backend_write_bytes: self.write_bytes.load(Ordering::Relaxed),
            fetches: self.fetches.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            capacity_bytes: cap,
            high_watermark_bytes: cap / 100 * self.high_pct,
            low_watermark_bytes: cap / 100 * self.low_pct,
            ..TierStatus::default()
        };
        for c in self.maps().chunks.values() {
            s.cached_chunks += 1;
            s.cached_bytes += c.len;
            if c.dirty {
                s.dirty_bytes += c.len;
            }
            if c.pinned {
                s.pinned_bytes += c.len;
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_config::Link;
    use fjall::{Database, KeyspaceCreateOptions};
    use std::sync::atomic::AtomicBool;

    const CS: u64 = 4096;

    struct Fixture {
        dir: tempfile::TempDir,
        config: Config,
        db: Database,
        chunks: ChunkStore,
        tier: Tier,
    }

    fn fixture(capacity: u64) -> Fixture {
        fixture_with(capacity, CS)
    }

    fn fixture_with(capacity: u64, chunk_size: u64) -> Fixture {
        fixture_in(tempfile::tempdir().unwrap(), capacity, chunk_size)
    }

    fn fixture_in(dir: tempfile::TempDir, capacity: u64, chunk_size: u64) -> Fixture {
        std::fs::create_dir(dir.path().join("pfs")).unwrap();
        let config = Config {
            chunk_size,
            cache_capacity_bytes: capacity,
            links: vec![Link {
                prefix: "/".into(),
                backend: dir.path().join("pfs"),
            }],
            ..Config::default()
        };
        let (db, chunks, tier) = open(dir.path(), &config);
        Fixture {
            dir,
            config,
            db,
            chunks,
            tier,
        }
    }

    fn open(root: &Path, config: &Config) -> (Database, ChunkStore, Tier) {
        let db = Database::builder(root.join("meta")).open().unwrap();
        let ks = db
            .keyspace(TIER_KEYSPACE, KeyspaceCreateOptions::default)
            .unwrap();
        let cks = db
            .keyspace(
                crate::chunks::CHUNK_KEYSPACE,
                KeyspaceCreateOptions::default,
            )
            .unwrap();
        let chunks =
            ChunkStore::open(&root.join("chunks"), cks, config.chunk_size, 1 << 20).unwrap();
        let tier = Tier::open(ks, Backend::new(config), config, root, &chunks).unwrap();
        (db, chunks, tier)
    }

    fn backing(path: &str, size: u64) -> Backing {
        Backing {
            path: path.into(),
            size,
        }
    }

    fn piece(chunk: u64, offset: u32, len: u32) -> Piece {
        Piece { chunk, offset, len }
    }

    fn bytes(seed: u8, n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn a_miss_is_fetched_once_and_kept() {
        let f = fixture(0);
        let data = bytes(1, 3 * CS as usize + 100);
        std::fs::write(f.dir.path().join("pfs/a"), &data).unwrap();
        let b = backing("/a", data.len() as u64);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let got = f.tier.read(&f.chunks, 7, &[piece(1, 10, 100)], &b).unwrap();
                    assert_eq!(got, &data[CS as usize + 10..CS as usize + 110]);
                });
            }
        });
        assert_eq!(
            f.tier.status(&f.chunks).fetches,
            1,
            "four readers, one fetch"
        );
        // The last chunk is short: bytes past the backend's end read as zeros.
        let tail = f.tier.read(&f.chunks, 7, &[piece(3, 0, 200)], &b).unwrap();
        assert_eq!(&tail[..100], &data[3 * CS as usize..]);
        assert_eq!(&tail[100..], &[0u8; 100]);
        let st = f.tier.status(&f.chunks);
        assert_eq!((st.fetches, st.cached_chunks, st.dirty_bytes), (2, 2, 0));
        assert_eq!(st.backend_read_bytes, CS + 100);
    }

    /// A tmpfs of its own, unmounted on drop.
    struct SmallDevice(tempfile::TempDir);

    impl SmallDevice {
        fn new(size: &str) -> SmallDevice {
            let dir = tempfile::tempdir().unwrap();
            let status = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(dir.path())
                .status()
                .expect("mount(8) runs");
            assert!(status.success(), "this test mounts a tmpfs: run it as root");
            SmallDevice(dir)
        }

        fn free(&self) -> u64 {
            let v = nix::sys::statvfs::statvfs(self.0.path()).unwrap();
            v.blocks_available() * v.fragment_size()
        }

        /// Leaves about `left` bytes free with a file that is not Eddy's.
        fn fill_to(&self, name: &str, left: u64) {
            let n = self.free().saturating_sub(left);
            std::fs::write(self.0.path().join(name), vec![7u8; n as usize]).unwrap();
        }
    }

    impl Drop for SmallDevice {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg(self.0.path())
                .status();
        }
    }

    #[test]
    fn an_unset_capacity_is_the_room_to_grow_not_the_devices_use() {
        // A shared device 90 % full of others' files: what the daemon fetches stays until
        // the free room itself runs short; then it evicts its own chunks, and only those.
        let dev = SmallDevice::new("32m");
        let f = fixture_in(tempfile::tempdir_in(dev.0.path()).unwrap(), 0, CS);
        let data = bytes(3, 64 * CS as usize);
        std::fs::write(f.dir.path().join("pfs/a"), &data).unwrap();
        let b = backing("/a", data.len() as u64);
        dev.fill_to("others-1", 3 << 20);
        for k in 0..32 {
            let got = f
                .tier
                .read(&f.chunks, 5, &[piece(k, 0, CS as u32)], &b)
                .unwrap();
            assert_eq!(got, &data[(k * CS) as usize..((k + 1) * CS) as usize]);
        }
        let st = f.tier.status(&f.chunks);
        assert_eq!((st.cached_chunks, st.evictions), (32, 0), "{st:?}");
        let held = f.chunks.usage().0;
        assert_eq!(held, 32 * CS);
        assert!(st.capacity_bytes >= held + dev.free() / 2, "{st:?}");
        // Others take the room: held is now far above 90 % of held + free.
        dev.fill_to("others-2", 2 * CS);
        let got = f
            .tier
            .read(&f.chunks, 5, &[piece(40, 0, CS as u32)], &b)
            .unwrap();
        assert_eq!(got, &data[(40 * CS) as usize..(41 * CS) as usize]);
        let st = f.tier.status(&f.chunks);
        assert!(st.evictions > 0, "{st:?}");
        assert!(st.cached_bytes <= st.low_watermark_bytes, "{st:?}");
        assert!(dev.0.path().join("others-2").exists());
        // What was evicted comes back from the backend, intact.
        let got = f
            .tier
            .read(&f.chunks, 5, &[piece(0, 0, CS as u32)], &b)
            .unwrap();
        assert_eq!(got, &data[..CS as usize]);
        drop(f);
    }

    #[test]
    fn a_full_device_below_the_configured_capacity_still_gets_room() {
        // The configured capacity is more than the device has: when the device fills,
        // making room evicts down to the low watermark of the room there is.
        let dev = SmallDevice::new("16m");
        let f = fixture_in(tempfile::tempdir_in(dev.0.path()).unwrap(), 1 << 30, CS);
        let data = bytes(4, 64 * CS as usize);
        std::fs::write(f.dir.path().join("pfs/a"), &data).unwrap();
        let b = backing("/a", data.len() as u64);
        for k in 0..64 {
            f.tier
                .read(&f.chunks, 6, &[piece(k, 0, CS as u32)], &b)
                .unwrap();
        }
        assert_eq!(f.tier.status(&f.chunks).evictions, 0);
        dev.fill_to("others", 0);
        let held = f.chunks.usage().0;
        assert!(f.tier.make_room(&f.chunks).unwrap() > 0);
        let room = f.tier.room(f.chunks.usage().0);
        assert!(
            f.chunks.usage().0 <= room * 3 / 4,
            "held {held}, room {room}"
        );
        let got = f
            .tier
            .read(&f.chunks, 6, &[piece(0, 0, CS as u32)], &b)
            .unwrap();
        assert_eq!(got, &data[..CS as usize]);
        drop(f);
    }

    #[test]
    fn readers_beside_a_fetch_never_see_a_chunk_half_filled() {
        // A fetch counts itself once it has read the backend, then fills the chunk file:
        // readers aim at the chunk whose file is being filled (large chunks widen that
        // window). They must wait for the fetch rather than read zeros.
        const BIG: u64 = 4 << 20;
        const MIB: u64 = 1 << 20;
        const N: u64 = 12;
        let f = fixture_with(0, BIG);
        let data = bytes(9, (N * BIG) as usize);
        std::fs::write(f.dir.path().join("pfs/big"), &data).unwrap();
        let b = backing("/big", data.len() as u64);
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                for k in 0..N {
                    f.tier.prefetch(&f.chunks, 3, &[k], &b, false).unwrap();
                }
                done.store(true, Ordering::SeqCst);
            });
            for _ in 0..2 {
                s.spawn(|| {
                    while !done.load(Ordering::SeqCst) {
                        let Some(k) = f.tier.fetches.load(Ordering::SeqCst).checked_sub(1) else {
                            continue;
                        };
                        // The chunk's last MiB: what a half-filled chunk file lacks.
                        let tail = piece(k, (BIG - MIB) as u32, MIB as u32);
                        let got = f.tier.read(&f.chunks, 3, &[tail], &b).unwrap();
                        let at = ((k + 1) * BIG - MIB) as usize;
                        assert!(got == data[at..at + MIB as usize], "chunk {k}: wrong bytes");
                    }
                });
            }
        });
        assert_eq!(
            f.tier.status(&f.chunks).fetches,
            N,
            "each chunk fetched once"
        );
    }

    #[test]
    fn partial_writes_merge_with_the_backend_and_flush_back() {
        let f = fixture(0);
        let data = bytes(2, 2 * CS as usize);
        let path = f.dir.path().join("pfs/b");
        std::fs::write(&path, &data).unwrap();
        let b = backing("/b", data.len() as u64);
        f.tier
            .write(&f.chunks, 9, &[piece(0, 100, 4)], b"WXYZ", &b)
            .unwrap();
        // Beyond the backend copy: no fetch, a hole before the bytes.
        f.tier
            .write(&f.chunks, 9, &[piece(3, 10, 2)], b"ok", &b)
            .unwrap();
        let st = f.tier.status(&f.chunks);
        assert_eq!(st.fetches, 1);
        assert_eq!(st.dirty_bytes, CS + 12);
        let (outcomes, more) = f.tier.flush_dirty(&f.chunks, "/", None, 10);
        assert!(!more);
        assert_eq!(outcomes.len(), 1);
        assert_eq!(outcomes[0].error, None);
        let mut want = data.clone();
        want[100..104].copy_from_slice(b"WXYZ");
        want.resize(3 * CS as usize + 10, 0);
        want.extend_from_slice(b"ok");
        assert_eq!(std::fs::read(&path).unwrap(), want);
        assert_eq!(f.tier.status(&f.chunks).dirty_bytes, 0);
        // Nothing left to flush.
        assert!(f.tier.flush_dirty(&f.chunks, "/", None, 10).0.is_empty());
    }

    #[test]
    fn dirty_state_survives_a_reopen_and_follows_a_rename() {
        let f = fixture(0);
        let b = backing("/d/new", 0);
        f.tier
            .write(&f.chunks, 5, &[piece(0, 0, 5)], b"hello", &b)
            .unwrap();
        f.tier.rebind("/d", "/e").unwrap();
        f.db.persist(fjall::PersistMode::SyncAll).unwrap();
        let root = f.dir.path().to_owned();
        let config = f.config.clone();
        drop((f.tier, f.chunks, f.db));
        let (_db, chunks, tier) = open(&root, &config);
        assert_eq!(tier.status(&chunks).dirty_bytes, 5);
        std::fs::create_dir(root.join("pfs/e")).unwrap();
        let (outcomes, _) = tier.flush_dirty(&chunks, "/", None, 10);
        assert_eq!(outcomes[0].path, "/e/new");
        assert_eq!(std::fs::read(root.join("pfs/e/new")).unwrap(), b"hello");
    }

    #[test]
    fn eviction_keeps_pinned_and_writes_dirty_back_first() {
        let f = fixture(8 * CS);
        let data = bytes(3, 6 * CS as usize);
        std::fs::write(f.dir.path().join("pfs/pinned"), &data).unwrap();
        let pb = backing("/pinned", data.len() as u64);
        f.tier
            .prefetch(&f.chunks, 1, &[0, 1, 2, 3], &pb, true)
            .unwrap();
        // Clean reads beyond the capacity: the least recently used go, the pinned stay.
        let big = bytes(5, 12 * CS as usize);
        std::fs::write(f.dir.path().join("pfs/big"), &big).unwrap();
        let bb = backing("/big", big.len() as u64);
        for k in 0..12 {
            let got = f
                .tier
                .read(&f.chunks, 3, &[piece(k, 0, CS as u32)], &bb)
                .unwrap();
            assert_eq!(got, &big[(k * CS) as usize..((k + 1) * CS) as usize]);
        }
        let st = f.tier.status(&f.chunks);
        assert!(st.evictions > 0);
        assert_eq!(st.pinned_bytes, 4 * CS, "pinned chunks stay");
        // Dirty data of a new file beyond the capacity: written back, then evicted.
        let nb = backing("/new", 0);
        let fresh = bytes(4, 16 * CS as usize);
        for k in 0..16u64 {
            let part = &fresh[(k * CS) as usize..((k + 1) * CS) as usize];
            f.tier
                .write(&f.chunks, 2, &[piece(k, 0, CS as u32)], part, &nb)
                .unwrap();
        }
        assert!(
            f.chunks.usage().0 <= 8 * CS,
            "use {} above the capacity",
            f.chunks.usage().0
        );
        assert_eq!(f.tier.status(&f.chunks).pinned_bytes, 4 * CS);
        // Evicted dirty chunks are in the backend, and fetched again on a miss although the
        // client thinks the backend copy is empty.
        let in_backend = std::fs::read(f.dir.path().join("pfs/new")).unwrap();
        assert!(in_backend.len() >= 8 * CS as usize);
        for k in 0..16u64 {
            let got = f
                .tier
                .read(&f.chunks, 2, &[piece(k, 0, CS as u32)], &nb)
                .unwrap();
            assert_eq!(
                got,
                &fresh[(k * CS) as usize..((k + 1) * CS) as usize],
                "chunk {k}"
            );
        }
        assert_eq!(f.tier.unpin("/").unwrap(), 4);
    }

    #[test]
    fn a_truncate_forgets_what_lies_beyond() {
        let f = fixture(0);
        let b = backing("/t", 0);
        let data = bytes(6, 3 * CS as usize);
        f.tier
            .write(
                &f.chunks,
                4,
                &[
                    piece(0, 0, CS as u32),
                    piece(1, 0, CS as u32),
                    piece(2, 0, CS as u32),
                ],
                &data,
                &b,
            )
            .unwrap();
        f.chunks.truncate(4, CS + 10).unwrap();
        f.tier.truncated(4, CS + 10).unwrap();
        let st = f.tier.status(&f.chunks);
        assert_eq!((st.cached_chunks, st.dirty_bytes), (2, CS + 10));
        f.tier.forget(4).unwrap();
        assert_eq!(f.tier.status(&f.chunks).cached_chunks, 0);
    }
}
