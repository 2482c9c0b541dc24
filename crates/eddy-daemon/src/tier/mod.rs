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
//! backend mtime a linked directory's children were imported at; `x<id>`, `w<id>` and
//! `h<id>`: a file in conflict with its backend copy, being written back, held back
//! (`conflicts.rs`); `m<id>`: a file being moved between two backends of its link
//! (`moves.rs`). Every chunk operation
//! runs under the chunk's lock in the chunk store, so concurrent readers of a missing chunk
//! cause one backend read, and a write racing a write-back is never marked clean.
//! No coordination with other daemons: each one evicts and writes back its own chunks.

mod conflicts;
mod evict;
mod finalize;
mod import;
mod lifecycle;
mod links;
mod moves;
mod stores;
mod streams;
mod write_through;
mod writers;
mod xattrs;

use crate::backend::Backend;
use crate::chunks::ChunkStore;
use crate::meta::LazyKeyspace;
use eddy_config::Config;
use eddy_placement::Placement;
use eddy_proto::path::PathLimits;
use eddy_proto::sync::lock;
use eddy_proto::{Backing, Errno, FileId, FileOutcome, Piece, TierStatus};
use std::collections::{BTreeSet, HashMap, HashSet};
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
    /// The backend it is in (an index of `Backend::stores_for`), once this daemon knows
    /// (not persisted): for the dirty bytes per backend in status.
    #[serde(skip)]
    store: Option<usize>,
}

#[derive(Default)]
struct Maps {
    chunks: HashMap<(FileId, u64), Chunk>,
    files: HashMap<FileId, FileRec>,
    /// Files whose dirty chunks are not written back (in conflict with their backend copy).
    held_back: HashSet<FileId>,
    /// Files with dirty chunks written back by eviction since their last stage-out.
    evicted_dirty: HashSet<FileId>,
}

/// The tier's state on one daemon.
pub struct Tier {
    backend: Arc<Backend>,
    chunk_size: u64,
    records: LazyKeyspace,
    maps: Mutex<Maps>,
    clock: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    fetches: AtomicU64,
    evictions: AtomicU64,
    /// Bytes fetched ahead of streams on their hints (decision 0072).
    read_ahead_bytes: AtomicU64,
    /// The streams' read-ahead state (decision 0072).
    streams: Mutex<streams::Streams>,
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
    /// The clients writing each file not yet placed, for rules by I/O mode (`writers.rs`).
    writers: Mutex<writers::Writers>,
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
        records: LazyKeyspace,
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
        for (tag, set) in [
            (conflicts::HELD, &mut maps.held_back),
            (conflicts::EVICTED, &mut maps.evicted_dirty),
        ] {
            for guard in records.prefix([tag]) {
                let (key, _) = guard.into_inner().map_err(|e| rec_err("load", e))?;
                if let Ok(id) = <[u8; 16]>::try_from(&key[1..]) {
                    set.insert(FileId::from_be_bytes(id));
                }
            }
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
            read_ahead_bytes: AtomicU64::new(0),
            streams: Mutex::new(streams::Streams::default()),
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
            writers: Mutex::default(),
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

    /// Checks that a linked file's namespace path is normalised: a path with `.`, `..` or
    /// empty components could name something outside the backend directory.
    fn check_form(&self, path: &str) -> Result<(), Errno> {
        let form_only = eddy_proto::path::PathLimits {
            max_path: usize::MAX,
            max_name: usize::MAX,
        };
        if eddy_proto::path::normalize(path, form_only).as_deref() != Ok(path) {
            return Err(Errno::einval(format!(
                "backend path of {path:?}: not a normalised path"
            )));
        }
        self.backend.resolve_linked(path).map(|_| ())
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
        if rec.store.is_none() {
            rec.store = self
                .backend
                .stores_for(path)
                .filter(|(_, r)| r.len() == 1)
                .map(|(_, r)| r.start);
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

    /// This daemon learnt that the file `id` is in backend `store`.
    fn known_store(&self, id: FileId, store: usize) {
        if let Some(f) = self.maps().files.get_mut(&id) {
            f.store = Some(store);
        }
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
        self.check_form(&backing.path)?;
        // Not in any backend of its link (a new file not placed yet): nothing there.
        let Some((store, bpath)) = self.locate(&backing.path)? else {
            return Ok(Vec::new());
        };
        let data = self
            .backend
            .read_at(&bpath, k * self.chunk_size, self.chunk_size as usize)
            .map_err(|e| self.at_store(store, e))?;
        self.backend.per_store[store].read(data.len() as u64);
        self.known_store(id, store);
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

    /// Counts bytes fetched ahead of a stream on its hint (decision 0072).
    pub fn read_ahead_done(&self, bytes: u64) {
        self.read_ahead_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.backend.io.read_ahead(bytes);
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
                        && !maps.held_back.contains(id)
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
                Ok((b, true)) => match self.written_back_whole(id) {
                    Ok(()) => (b, true, None),
                    Err(e) => (b, true, Some(e)),
                },
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
        self.check_form(path)?;
        let (store, bpath) = self.locate_for_write(path)?;
        self.known_store(id, store);
        let (bytes, complete) = self
            .flush_to(chunks, id, &bpath, dirty, deadline)
            .map_err(|e| self.at_store(store, e))?;
        self.backend.per_store[store].wrote(bytes);
        Ok((bytes, complete))
    }

    /// `flush_file`'s writing: the dirty chunks `dirty` of `id` into the backend file at
    /// `bpath`, then fsync, then the chunks no write touched meanwhile marked clean.
    fn flush_to(
        &self,
        chunks: &ChunkStore,
        id: FileId,
        bpath: &Path,
        dirty: Vec<u64>,
        deadline: Instant,
    ) -> Result<(u64, bool), Errno> {
        let bpath = bpath.to_path_buf();
        let file = self.backend.open_for_flush(&bpath)?;
        // Each chunk is read and handed to the file's queue under its lock (decision 0074):
        // adjacent ones go as one pwrite, two write-backs of a chunk in the order they read it.
        let mut handed = Vec::new();
        let mut complete = true;
        let mut failed = None;
        let held = self.backend.hold(&file);
        for k in dirty {
            if Instant::now() >= deadline && !handed.is_empty() {
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
            match self
                .backend
                .write_at(&file, &bpath, k * self.chunk_size, data)
            {
                Ok(pending) => handed.push((k, version, n, pending)),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        drop(held);
        let mut written = Vec::new();
        let mut bytes = 0u64;
        for (k, version, n, pending) in handed {
            match self.backend.finish(pending, &bpath) {
                Ok(()) => {
                    bytes += n;
                    written.push((k, version));
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
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

    /// The tier's figures for status (without the conflicts: `conflicts`).
    pub fn status(&self, chunks: &ChunkStore) -> TierStatus {
        let (cap, _) = self.capacity(chunks);
        let mut s = TierStatus {
            backend_read_bytes: self.read_bytes.load(Ordering::Relaxed),
            backend_write_bytes: self.write_bytes.load(Ordering::Relaxed),
            fetches: self.fetches.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            read_ahead_bytes: self.read_ahead_bytes.load(Ordering::Relaxed),
            backend_reads: self.backend.calls.reads.load(Ordering::Relaxed),
            backend_writes: self.backend.calls.writes.load(Ordering::Relaxed),
            merged_reads: self.backend.calls.merged_reads.load(Ordering::Relaxed),
            merged_writes: self.backend.calls.merged_writes.load(Ordering::Relaxed),
            capacity_bytes: cap,
            high_watermark_bytes: cap / 100 * self.high_pct,
            low_watermark_bytes: cap / 100 * self.low_pct,
            held_back: self.maps().held_back.len() as u64,
            backends: self.backend.store_stats(),
            ..TierStatus::default()
        };
        let maps = self.maps();
        for ((id, _), c) in maps.chunks.iter() {
            s.cached_chunks += 1;
            s.cached_bytes += c.len;
            if c.dirty {
                s.dirty_bytes += c.len;
                let store = maps.files.get(id).and_then(|f| f.store);
                if let Some(b) = store.and_then(|i| s.backends.get_mut(i)) {
                    b.dirty_bytes += c.len;
                }
            }
            if c.pinned {
                s.pinned_bytes += c.len;
            }
        }
        drop(maps);
        s
    }
}

#[cfg(test)]
mod tests;
