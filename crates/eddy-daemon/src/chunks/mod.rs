//! Chunk storage (decision 0015): one sparse data file per file id, `<hh>/<id as 32 hex>`
//! under the chunk directory (`hh`: one of 256 subdirectories chosen by a hash of the id,
//! each made when the first data file goes into it), with chunk k at offset k × chunk_size. Which chunks of a file this daemon
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
//! its checksum), and a block found bad is remembered (`corrupt`) and counted once. A change
//! of data and checksums is announced in the journal of changes in flight first, so that a
//! daemon killed between the two finds and re-checksums those blocks at its next start.
//!
//! The store is cut along these lines: `layout.rs` where data and sum files live and the
//! layout marker, `map.rs` the chunk map (slots, the records, the usage counters and the
//! capacity), `cache.rs` the cache of open data files, `sums.rs` the checksum files and
//! verified reads, `journal.rs` the changes in flight, `scrub.rs` the scrub, `io.rs`
//! positioned reads, hole punching and directory syncs, `direct.rs` the files written directly
//! by a client on this host (decision 0048), `allocate.rs` storage reserved ahead of writes;
//! this file holds the store itself and its reads and writes.

mod allocate;
mod cache;
mod direct;
#[cfg(test)]
mod fixture;
mod io;
mod journal;
mod layout;
mod map;
mod prealloc;
mod scrub;
mod sums;

use crate::locks::StripedLocks;
use crate::meta::LazyKeyspace;
use crate::DaemonError;
use cache::{fd_cache_capacity, Open};
use eddy_proto::checksum;
use eddy_proto::sync::lock;
use eddy_proto::{Errno, FileId, Piece};
use io::{file_err, io_err, pread_full, pread_uninit, punch, sync_dir};
use journal::{Change, Journal};
use layout::{prepare_layout, subdir_of, sum_path};
use map::{Slot, SHARDS};
use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use sums::{DEFAULT_BLOCK, SUM_BYTES};

/// Name of the keyspace holding the chunk map.
pub const CHUNK_KEYSPACE: &str = "chunks";

/// The chunks of one daemon.
pub struct ChunkStore {
    dir: PathBuf,
    chunk_size: u64,
    /// Largest read reply, in bytes.
    max_read: u64,
    locks: StripedLocks,
    records: LazyKeyspace,
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
    /// Block changes in flight (`journal.rs`), and those a killed daemon left, until
    /// `recover_torn` deals with them.
    journal: Journal,
    left: Mutex<Vec<Change>>,
    /// Files with direct writers (decision 0048, `direct.rs`).
    direct: Mutex<HashMap<FileId, direct::Marked>>,
    /// Chunk slots preallocated for sequential writers (decision 0074, `prealloc.rs`).
    prealloc: prealloc::Preallocs,
}

/// Bytes read and the checksums of their block-aligned segments.
pub type Checked = (Vec<u8>, Vec<u32>);

impl ChunkStore {
    /// Opens the chunk directory `dir` (made if missing; its subdirectories are made as
    /// data files go into them) and the
    /// chunk map in `records`; drops map entries whose data file is gone and data files the
    /// map does not know (a crash between the two). Refuses a directory of the first layout.
    pub fn open(
        dir: &Path,
        records: LazyKeyspace,
        chunk_size: u64,
        max_read: u64,
    ) -> Result<ChunkStore, DaemonError> {
        let root_err = |source| DaemonError::Root {
            path: dir.to_owned(),
            source,
        };
        crate::rootdir::private_dir(dir).map_err(root_err)?;
        prepare_layout(dir)?;
        let (journal, left) = Journal::open(dir).map_err(|e| DaemonError::Meta {
            path: dir.to_owned(),
            message: e.to_string(),
        })?;
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
            journal,
            left: Mutex::new(left),
            direct: Mutex::default(),
            prealloc: Default::default(),
        }
        .checksums(Some(DEFAULT_BLOCK.min(chunk_size)));
        store.load().map_err(|e| DaemonError::Meta {
            path: dir.to_owned(),
            message: format!("loading the chunk map: {e}"),
        })?;
        Ok(store)
    }

    fn lock_key(id: FileId, k: u64) -> [u8; 24] {
        let mut key = [0u8; 24];
        key[..16].copy_from_slice(&id.to_le_bytes());
        key[16..].copy_from_slice(&k.to_le_bytes());
        key
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
        self.read_piece_with(id, &p, &mut buf, Some(true))?;
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
            let per_chunk = self.chunk_size / self.block.unwrap_or(self.chunk_size);
            self.journaled(&f, self.change(id, k, 0, per_chunk), || {
                punch(&f.data, k * self.chunk_size, len).map_err(|e| io_err(&e, id, k))?;
                if let Some(sf) = &f.sums {
                    punch(sf, self.sum_at(k, 0), per_chunk * SUM_BYTES)
                        .map_err(|e| io_err(&e, id, k))?;
                }
                Ok(())
            })?;
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
        let direct = self.daemon_changes(id);
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
                    self.block_sums_for_write(f, id, p, bytes, block, seg_sums, held, direct)?
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
                    let block = self.block.unwrap_or(self.chunk_size);
                    let first = u64::from(p.offset) / block;
                    let change = self.change(id, p.chunk, first, new_sums.len() as u64);
                    self.journaled(&f, change, || {
                        f.data.write_all_at(bytes, at).map_err(|e| {
                            // Bytes of a partial write past the old length read as zeros
                            // again.
                            let from = p.chunk * self.chunk_size + old.unwrap_or(0);
                            if at + bytes.len() as u64 > from {
                                let _ = punch(&f.data, from, at + bytes.len() as u64 - from);
                            }
                            io_err(&e, id, p.chunk)
                        })?;
                        if !new_sums.is_empty() {
                            self.store_sums(&f, id, p.chunk, first, &new_sums)?;
                            let mut bad = lock(&self.bad);
                            for b in 0..new_sums.len() as u64 {
                                bad.remove(&(id, p.chunk, (first + b) * block));
                            }
                        }
                        Ok(())
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
            self.prealloc_written(id, p.chunk, new_len);
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
        self.read_piece_with(id, p, buf, None)
    }

    /// `read_piece`; `locked`: the caller holds the chunk's lock (`Some`), and may have
    /// blocks of a direct writer checksummed again once (`Some(true)`).
    fn read_piece_with(
        &self,
        id: FileId,
        p: &Piece,
        buf: &mut [u8],
        locked: Option<bool>,
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
            // Under the chunk's lock, a direct writer's unreported blocks (decision 0048)
            // are checksummed from the bytes this read returns (`read_piece_checked`).
            let in_flight = locked.is_some() && self.is_direct(id);
            match self.read_piece_checked(Some(&f), id, p, block, &mut out, &mut sums, in_flight)? {
                None => {
                    buf.copy_from_slice(&out);
                    return Ok(true);
                }
                Some(at) if locked.is_some() => {
                    drop((f, gone));
                    return Err(self.found_bad(id, p.chunk, at));
                }
                Some(_) => {
                    // Checked again under the chunk's lock (taken before the gate).
                    drop((f, gone));
                    let _guard = self.lock(id, p.chunk);
                    return self.read_piece_with(id, p, buf, Some(true));
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
        let _sizing = lock(&slot.sizing);
        self.daemon_changes(id);
        self.prealloc_truncated(id, size);
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
            let block = self.block.unwrap_or(self.chunk_size);
            // The blocks from the one `keep` falls in to the end of the sum file.
            let (from, sums_len) = match &f.sums {
                Some(sf) => (
                    keep / block,
                    sf.metadata().map_err(|e| file_err(&e, id))?.len() / SUM_BYTES,
                ),
                None => (0, 0),
            };
            let change = Change {
                id,
                first: from,
                blocks: sums_len.saturating_sub(from),
            };
            self.journaled(&f, change, || {
                let len = f.data.metadata().map_err(|e| file_err(&e, id))?.len();
                if len > keep {
                    f.data.set_len(keep).map_err(|e| file_err(&e, id))?;
                }
                if let Some(sf) = &f.sums {
                    let keep_sums = keep.div_ceil(block) * SUM_BYTES;
                    if sums_len * SUM_BYTES > keep_sums {
                        sf.set_len(keep_sums).map_err(|e| file_err(&e, id))?;
                    }
                }
                Ok(())
            })?;
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
                    if checksum::crc(&whole) != self.load_sums(&f, id, k, b, 1)?[0]
                        && !self.daemon_changes(id)
                    {
                        return Err(self.found_bad(id, k, b * block));
                    }
                    whole[(keep - b * block) as usize..].fill(0);
                    Some((b, checksum::crc(&whole)))
                }
                _ => None,
            };
            let block = self.block.unwrap_or(self.chunk_size);
            let (cut, per_chunk) = (keep / block, self.chunk_size / block);
            self.journaled(&f, self.change(id, k, cut, per_chunk - cut), || {
                punch(&f.data, k * self.chunk_size + keep, len - keep)
                    .map_err(|e| io_err(&e, id, k))?;
                if let Some(sf) = &f.sums {
                    let from = keep.div_ceil(block);
                    if from < per_chunk {
                        punch(sf, self.sum_at(k, from), (per_chunk - from) * SUM_BYTES)
                            .map_err(|e| io_err(&e, id, k))?;
                    }
                    if let Some((b, sum)) = tail {
                        self.store_sums(&f, id, k, b, &[sum])?;
                    }
                }
                Ok(())
            })?;
        }
        self.record(slot, id, k, Some(keep))
    }

    /// Deletes every chunk of the file: one unlink of its data file; nothing there is fine.
    pub fn remove(&self, id: FileId) -> Result<(), Errno> {
        self.prealloc_forget(id);
        let Some(slot) = self.slot(id) else {
            // No chunk recorded here, yet a data file may be: one written by a direct or
            // passthrough writer whose chunk map could not be stored (a full device, a store
            // that refused writes; decision 0060).
            return self.unlink_files(id);
        };
        let mut gone = slot.gate.write().unwrap_or_else(|e| e.into_inner());
        if *gone {
            return Ok(());
        }
        self.unlink_files(id)?;
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

    /// Unlinks the file's data and checksum files (absent ones are fine) and forgets its
    /// open descriptors.
    fn unlink_files(&self, id: FileId) -> Result<(), Errno> {
        self.fds.remove(&id);
        let path = self.path_of(id);
        for p in [sum_path(&path), path] {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(file_err(&e, id)),
            }
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
}

#[cfg(test)]
mod tests;
