//! Room in the cache: the capacity the tier works against, and eviction of least recently
//! used clean chunks (dirty ones written back first when the device is full) between the
//! watermarks, or within the configured capacity (decision 0023).

use super::*;

impl Tier {
    /// Capacity and use, in bytes: the configured capacity against the chunk bytes held, or,
    /// with none configured, the room this daemon may grow into: what it holds plus what its
    /// file system has free (others' files on a shared device neither count as its use nor
    /// make it evict what it just fetched).
    pub(super) fn capacity(&self, chunks: &ChunkStore) -> (u64, u64) {
        let held = chunks.usage().0;
        if self.capacity_cfg > 0 {
            (self.capacity_cfg, held)
        } else {
            (self.room(held), held)
        }
    }

    /// What is held plus what the file system under the root has free.
    pub(super) fn room(&self, held: u64) -> u64 {
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
        let maps = self.maps();
        let mut candidates: Vec<(bool, u64, FileId, u64)> = maps
            .chunks
            .iter()
            .filter(|((id, _), c)| {
                !c.pinned && (!c.dirty || (write_back && !maps.held_back.contains(id)))
            })
            .map(|((id, k), c)| (c.dirty, c.last_use, *id, *k))
            .collect();
        drop(maps);
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
    /// it is pinned, gone, or dirty without `write_back` or held back.
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
                (Some(c), Some(f))
                    if !c.pinned && (!c.dirty || (write_back && !maps.held_back.contains(&id))) =>
                {
                    (c.dirty, f.path.clone())
                }
                _ => return Ok(false),
            }
        };
        // A name two backends hold is being moved between them (`moves.rs`), or shadows a
        // later backend's copy: its dirty chunks wait for a stage-out, whose check settles
        // which copy is the file's.
        if dirty && self.backend.is_multi(&path) && self.backend.holders(&path)?.len() > 1 {
            return Ok(false);
        }
        if dirty {
            let no_limit = Instant::now() + Duration::from_secs(3600);
            self.flush_file(chunks, id, &path, Some(k), no_limit)?;
            self.written_back_by_eviction(id)?;
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
}
