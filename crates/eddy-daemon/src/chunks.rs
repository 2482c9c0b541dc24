//! Chunk files: chunk k of file `id` is `chunks/<id as 32 hex>/<k>` under the root, written
//! and read with pwrite/pread at offsets inside the chunk. Operations that create, cut or
//! delete a chunk run under the chunk's stripe lock, so the usage counters stay exact and the
//! cache of open chunk files never holds a descriptor of a deleted chunk. All functions
//! block: call them from the blocking pool.

use crate::locks::StripedLocks;
use crate::DaemonError;
use eddy_proto::{Errno, FileId, Piece};
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Open chunk files kept, at most: a quarter of the descriptor limit, up to this many.
const FD_CACHE_MAX: usize = 4096;
/// Share of the descriptor limit the cache may use (1/n), leaving room for sockets and the
/// metadata store.
const FD_CACHE_SHARE: u64 = 4;

type ChunkKey = (FileId, u64);

/// An open chunk file and its length. The length changes only under the chunk's stripe
/// lock, so it is exact while the entry is cached.
struct OpenChunk {
    file: File,
    len: AtomicU64,
}

impl OpenChunk {
    fn new(file: File, id: FileId, k: u64) -> Result<Arc<OpenChunk>, Errno> {
        let len = file.metadata().map_err(|e| io_err(&e, id, k))?.len();
        Ok(Arc::new(OpenChunk {
            file,
            len: AtomicU64::new(len),
        }))
    }
}

/// The chunk files of one daemon.
pub struct ChunkStore {
    dir: PathBuf,
    chunk_size: u64,
    /// Largest read reply, in bytes.
    max_read: u64,
    locks: StripedLocks,
    /// Sum of the lengths of the chunk files (apparent size, holes included).
    bytes: AtomicU64,
    /// Number of chunk files.
    count: AtomicU64,
    /// Open chunk files (read-write), most recently used kept. Entries are inserted and
    /// removed only under the chunk's stripe lock.
    fds: quick_cache::sync::Cache<ChunkKey, Arc<OpenChunk>>,
}

fn io_err(e: &std::io::Error, id: FileId, k: u64) -> Errno {
    Errno::from_io(e, format!("chunk {k} of file {id:032x}"))
}

impl ChunkStore {
    /// Opens the chunk directory `dir` (created if missing) and counts what it holds.
    pub fn open(dir: &Path, chunk_size: u64, max_read: u64) -> Result<ChunkStore, DaemonError> {
        let root_err = |source| DaemonError::Root {
            path: dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(root_err)?;
        let (bytes, count) = scan_usage(dir).map_err(root_err)?;
        Ok(ChunkStore {
            dir: dir.to_owned(),
            chunk_size,
            max_read,
            locks: StripedLocks::default(),
            bytes: AtomicU64::new(bytes),
            count: AtomicU64::new(count),
            fds: quick_cache::sync::Cache::new(fd_cache_capacity()),
        })
    }

    /// Bytes held in chunk files and their number.
    pub fn usage(&self) -> (u64, u64) {
        (
            self.bytes.load(Ordering::Relaxed),
            self.count.load(Ordering::Relaxed),
        )
    }

    fn file_dir(&self, id: FileId) -> PathBuf {
        self.dir.join(format!("{id:032x}"))
    }

    fn chunk_path(&self, id: FileId, k: u64) -> PathBuf {
        self.file_dir(id).join(k.to_string())
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
            total += u64::from(p.len);
        }
        Ok(total)
    }

    /// Writes `data` (the pieces' bytes back to back) into the chunks.
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
            self.write_piece(id, p, &data[at..at + len])?;
            at += len;
        }
        Ok(())
    }

    fn write_piece(&self, id: FileId, p: &Piece, bytes: &[u8]) -> Result<(), Errno> {
        let _guard = self.lock(id, p.chunk);
        self.write_locked(id, p, bytes)
    }

    /// Locks chunk `k` of `id` against creation, cutting and deletion by others.
    pub fn lock(&self, id: FileId, k: u64) -> std::sync::MutexGuard<'_, ()> {
        self.locks.lock(&Self::lock_key(id, k))
    }

    /// Whether the chunk exists here; the caller holds its lock.
    pub fn exists_locked(&self, id: FileId, k: u64) -> Result<bool, Errno> {
        if self.fds.get(&(id, k)).is_some() {
            return Ok(true);
        }
        match std::fs::symlink_metadata(self.chunk_path(id, k)) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_err(&e, id, k)),
        }
    }

    /// The chunk's length, if it exists; the caller holds its lock.
    pub fn len_locked(&self, id: FileId, k: u64) -> Result<Option<u64>, Errno> {
        Ok(self
            .cached(id, k, false)?
            .map(|c| c.len.load(Ordering::Relaxed)))
    }

    /// The whole chunk's bytes, if it exists; the caller holds its lock.
    pub fn read_whole_locked(&self, id: FileId, k: u64) -> Result<Option<Vec<u8>>, Errno> {
        let Some(c) = self.cached(id, k, false)? else {
            return Ok(None);
        };
        let len = c.len.load(Ordering::Relaxed) as usize;
        let mut buf = vec![0u8; len];
        let mut done = 0usize;
        while done < len {
            match c.file.read_at(&mut buf[done..], done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(&e, id, k)),
            }
        }
        buf.truncate(done);
        Ok(Some(buf))
    }

    /// Deletes the chunk; returns the bytes it held. The caller holds its lock.
    pub fn delete_locked(&self, id: FileId, k: u64) -> Result<u64, Errno> {
        let path = self.chunk_path(id, k);
        let before = self.bytes.load(Ordering::Relaxed);
        self.delete_chunk(id, k, &path)?;
        Ok(before.saturating_sub(self.bytes.load(Ordering::Relaxed)))
    }

    /// Writes one piece; the caller holds the chunk's lock.
    pub fn write_locked(&self, id: FileId, p: &Piece, bytes: &[u8]) -> Result<(), Errno> {
        let chunk = match self.fds.get(&(id, p.chunk)) {
            Some(c) => c,
            None => {
                let (f, created) = self.open_for_write(id, p.chunk)?;
                if created {
                    self.count.fetch_add(1, Ordering::Relaxed);
                }
                let c = OpenChunk::new(f, id, p.chunk)?;
                self.fds.insert((id, p.chunk), Arc::clone(&c));
                c
            }
        };
        let old_len = chunk.len.load(Ordering::Relaxed);
        let start = u64::from(p.offset);
        let result = chunk.file.write_all_at(bytes, start);
        let new_len = match &result {
            Ok(()) => old_len.max(start + bytes.len() as u64),
            // After a failed (maybe partial) write, account for what is on disk.
            Err(_) => chunk.file.metadata().map(|m| m.len()).unwrap_or(old_len),
        };
        chunk.len.store(new_len, Ordering::Relaxed);
        self.account(old_len, new_len);
        result.map_err(|e| io_err(&e, id, p.chunk))
    }

    /// Opens a chunk for writing, creating it (and its directory) if missing.
    pub(crate) fn open_for_write(&self, id: FileId, k: u64) -> Result<(File, bool), Errno> {
        let path = self.chunk_path(id, k);
        match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => return Ok((f, false)),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&e, id, k)),
        }
        std::fs::create_dir_all(self.file_dir(id)).map_err(|e| io_err(&e, id, k))?;
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path);
        f.map(|f| (f, true)).map_err(|e| io_err(&e, id, k))
    }

    /// Reads the pieces back to back; holes and bytes past a chunk's end read as zeros.
    pub fn read(&self, id: FileId, pieces: &[Piece]) -> Result<Vec<u8>, Errno> {
        let mut out = self.read_buffer(pieces)?;
        let mut at = 0usize;
        for p in pieces {
            let len = p.len as usize;
            self.read_piece(id, p, &mut out[at..at + len])?;
            at += len;
        }
        Ok(out)
    }

    /// A zeroed buffer for a read of the pieces, after checking them and the size limit.
    pub fn read_buffer(&self, pieces: &[Piece]) -> Result<Vec<u8>, Errno> {
        let total = self.check_pieces(pieces)?;
        if total > self.max_read {
            return Err(Errno::einval(format!(
                "read of {total} bytes exceeds the limit of {} bytes per request",
                self.max_read
            )));
        }
        Ok(vec![0u8; total as usize])
    }

    /// The open chunk file, from the cache or opened (and cached); `None` if missing.
    /// `lock`: take the chunk's lock to open it (false when the caller holds it).
    fn cached(&self, id: FileId, k: u64, lock: bool) -> Result<Option<Arc<OpenChunk>>, Errno> {
        if let Some(f) = self.fds.get(&(id, k)) {
            return Ok(Some(f));
        }
        let _guard = lock.then(|| self.lock(id, k));
        if let Some(f) = self.fds.get(&(id, k)) {
            return Ok(Some(f));
        }
        match OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.chunk_path(id, k))
        {
            Ok(f) => {
                let c = OpenChunk::new(f, id, k)?;
                self.fds.insert((id, k), Arc::clone(&c));
                Ok(Some(c))
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&e, id, k)),
        }
    }

    /// Reads one piece into `buf`; false (and `buf` untouched) if the chunk does not exist.
    pub fn read_piece(&self, id: FileId, p: &Piece, buf: &mut [u8]) -> Result<bool, Errno> {
        let Some(chunk) = self.cached(id, p.chunk, true)? else {
            return Ok(false);
        };
        let mut done = 0usize;
        while done < buf.len() {
            match chunk
                .file
                .read_at(&mut buf[done..], u64::from(p.offset) + done as u64)
            {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(&e, id, p.chunk)),
            }
        }
        Ok(true)
    }

    /// The chunk files of `id` as (index, path); empty if the file has none here.
    fn list_chunks(&self, id: FileId) -> Result<Vec<(u64, PathBuf)>, Errno> {
        let dir = self.file_dir(id);
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(Errno::from_io(
                    &e,
                    format!("chunk directory of file {id:032x}"),
                ))
            }
        };
        let mut out = Vec::new();
        for entry in rd {
            let entry = entry
                .map_err(|e| Errno::from_io(&e, format!("listing chunks of file {id:032x}")))?;
            if let Some(k) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u64>().ok())
            {
                out.push((k, entry.path()));
            }
        }
        out.sort_unstable_by_key(|(k, _)| *k);
        Ok(out)
    }

    /// Drops the data at and after byte `size` of the file: chunks entirely at or after it
    /// are deleted, the chunk containing it is cut.
    pub fn truncate(&self, id: FileId, size: u64) -> Result<(), Errno> {
        for (k, path) in self.list_chunks(id)? {
            let _guard = self.locks.lock(&Self::lock_key(id, k));
            let start = k.saturating_mul(self.chunk_size);
            if start >= size {
                self.delete_chunk(id, k, &path)?;
            } else if size - start < self.chunk_size {
                self.cut_chunk(id, k, &path, size - start)?;
            }
        }
        Ok(())
    }

    fn cut_chunk(&self, id: FileId, k: u64, path: &Path, keep: u64) -> Result<(), Errno> {
        // The cached length would be stale: the next use reopens the chunk.
        self.fds.remove(&(id, k));
        let file = match OpenOptions::new().write(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(&e, id, k)),
        };
        let len = file.metadata().map_err(|e| io_err(&e, id, k))?.len();
        if len > keep {
            file.set_len(keep).map_err(|e| io_err(&e, id, k))?;
            self.account(len, keep);
        }
        Ok(())
    }

    fn delete_chunk(&self, id: FileId, k: u64, path: &Path) -> Result<(), Errno> {
        self.fds.remove(&(id, k));
        let len = match std::fs::metadata(path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(&e, id, k)),
        };
        match std::fs::remove_file(path) {
            Ok(()) => {
                self.account(len, 0);
                self.count.fetch_sub(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(&e, id, k)),
        }
    }

    /// Deletes every chunk of the file and its directory; nothing there is fine.
    pub fn remove(&self, id: FileId) -> Result<(), Errno> {
        for (k, path) in self.list_chunks(id)? {
            let _guard = self.locks.lock(&Self::lock_key(id, k));
            self.delete_chunk(id, k, &path)?;
        }
        match std::fs::remove_dir(self.file_dir(id)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            // A write racing with the removal recreated a chunk: it stays, as written.
            Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => Ok(()),
            Err(e) => Err(Errno::from_io(
                &e,
                format!("chunk directory of file {id:032x}"),
            )),
        }
    }

    /// Makes the file's chunks and their directory entries durable.
    pub fn sync(&self, id: FileId) -> Result<(), Errno> {
        let chunks = self.list_chunks(id)?;
        if chunks.is_empty() {
            return Ok(());
        }
        for (k, _) in &chunks {
            if let Some(c) = self.cached(id, *k, true)? {
                c.file.sync_all().map_err(|e| io_err(&e, id, *k))?;
            }
        }
        sync_dir(&self.file_dir(id))?;
        sync_dir(&self.dir)
    }

    /// Makes everything under the chunk directory durable (syncfs of its file system).
    pub fn sync_all(&self) -> Result<(), Errno> {
        let dir =
            File::open(&self.dir).map_err(|e| Errno::from_io(&e, "opening the chunk directory"))?;
        nix::unistd::syncfs(&dir)
            .map_err(|e| Errno::new(e as i32, format!("syncing the chunk file system: {e}")))
    }
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

/// Sums the lengths and counts the chunk files under `dir`.
fn scan_usage(dir: &Path) -> std::io::Result<(u64, u64)> {
    let (mut bytes, mut count) = (0u64, 0u64);
    for file_dir in std::fs::read_dir(dir)? {
        let file_dir = file_dir?;
        if !file_dir.file_type()?.is_dir() {
            continue;
        }
        for chunk in std::fs::read_dir(file_dir.path())? {
            let meta = chunk?.metadata()?;
            if meta.is_file() {
                bytes += meta.len();
                count += 1;
            }
        }
    }
    Ok((bytes, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_counters_follow_writes_truncates_and_removes() {
        let dir = tempfile::tempdir().unwrap();
        let cs = 4096;
        let store = ChunkStore::open(dir.path(), cs, 1 << 20).unwrap();
        let pieces = [
            Piece {
                chunk: 0,
                offset: 0,
                len: 4096,
            },
            Piece {
                chunk: 1,
                offset: 100,
                len: 10,
            },
        ];
        store.write(5, &pieces, &[1u8; 4106]).unwrap();
        assert_eq!(store.usage(), (4096 + 110, 2));
        store.truncate(5, 50).unwrap();
        assert_eq!(store.usage(), (50, 1));
        let reopened = ChunkStore::open(dir.path(), cs, 1 << 20).unwrap();
        assert_eq!(reopened.usage(), (50, 1));
        store.remove(5).unwrap();
        assert_eq!(store.usage(), (0, 0));
        assert!(!dir.path().join(format!("{:032x}", 5u128)).exists());
    }

    #[test]
    fn cached_descriptors_never_outlive_a_removal_or_cut() {
        let dir = tempfile::tempdir().unwrap();
        let store = ChunkStore::open(dir.path(), 4096, 1 << 20).unwrap();
        let p = |offset, len| Piece {
            chunk: 0,
            offset,
            len,
        };
        store.write(9, &[p(0, 100)], &[7u8; 100]).unwrap();
        assert_eq!(store.read(9, &[p(0, 100)]).unwrap(), vec![7u8; 100]);
        store.remove(9).unwrap();
        // A write after the removal lands in a new chunk file, visible on disk.
        store.write(9, &[p(10, 5)], &[3u8; 5]).unwrap();
        let on_disk = std::fs::read(dir.path().join(format!("{:032x}", 9u128)).join("0")).unwrap();
        assert_eq!(on_disk, [vec![0u8; 10], vec![3u8; 5]].concat());
        assert_eq!(store.usage(), (15, 1));
        // After a cut, the cached length is not trusted: growing again is counted right.
        store.truncate(9, 12).unwrap();
        assert_eq!(store.usage(), (12, 1));
        store.write(9, &[p(20, 4)], &[1u8; 4]).unwrap();
        assert_eq!(store.usage(), (24, 1));
        let got = store.read(9, &[p(0, 30)]).unwrap();
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
}
