//! Reserving storage for pieces ahead of their writes (fallocate, mode 0), and giving it back when
//! a reservation fails half-way.

use super::io::io_err;
use super::ChunkStore;
use eddy_proto::sync::lock;
use eddy_proto::{Errno, FileId, Piece};

impl ChunkStore {
    /// Reserves storage for the pieces in the file's data file (fallocate, mode 0): each
    /// chunk's recorded length grows to cover its piece, as a write of zeros would, so the
    /// bytes read as zeros and count as held. ENOSPC when the device cannot hold them or
    /// they would pass the capacity.
    pub fn allocate(&self, id: FileId, pieces: &[Piece]) -> Result<(), Errno> {
        self.check_pieces(pieces)?;
        self.daemon_changes(id);
        self.check_capacity(id, pieces)?;
        // The chunks this request grew: (chunk, length before, length after).
        let mut grown = Vec::new();
        for p in pieces.iter().filter(|p| p.len > 0) {
            let _guard = self.lock(id, p.chunk);
            match self.allocate_locked(id, p) {
                Ok(Some(g)) => grown.push(g),
                Ok(None) => {}
                Err(e) => {
                    // All or nothing: a refused fallocate gives back what it took here
                    // (decision 0060).
                    drop(_guard);
                    self.unallocate(id, &grown);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Undoes the growth of chunks an allocation made (`grown`: chunk, length before, length
    /// after): each chunk still as long as the allocation left it (nothing was written past
    /// it since) gets its length back and the blocks past it are released.
    fn unallocate(&self, id: FileId, grown: &[(u64, Option<u64>, u64)]) {
        let Some(slot) = self.slot(id) else {
            return;
        };
        for &(k, old, new_len) in grown {
            let _guard = self.lock(id, k);
            if lock(&slot.chunks).get(&k).copied() != Some(new_len) {
                continue;
            }
            if let Err(e) = self.record(&slot, id, k, old) {
                tracing::warn!("cannot restore the chunk map after a failed fallocate: {e}");
                continue;
            }
            let keep = old.unwrap_or(0);
            if let Ok(Some(file)) = self.data_file(id, &slot, false) {
                let flags = nix::fcntl::FallocateFlags::FALLOC_FL_PUNCH_HOLE
                    | nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE;
                let (Ok(at), Ok(len)) = (
                    i64::try_from(k * self.chunk_size + keep),
                    i64::try_from(new_len - keep),
                ) else {
                    continue;
                };
                if let Err(e) = nix::fcntl::fallocate(&file.data, flags, at, len) {
                    tracing::debug!("cannot release the blocks of a failed fallocate: {e}");
                }
            }
        }
    }

    /// Allocates one piece under its chunk's lock; the chunk's growth, if it grew.
    fn allocate_locked(
        &self,
        id: FileId,
        p: &Piece,
    ) -> Result<Option<(u64, Option<u64>, u64)>, Errno> {
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
            // Keeping the data file's length: a chunk's length is the map's, and the kernel
            // takes the data file's length for the file's size while it reads it through FUSE
            // passthrough (an allocation that keeps the file's size must not grow it there;
            // the mount grows the data file for one that extends the file).
            let keep = nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE;
            let made = nix::fcntl::fallocate(&file.data, keep, off, len)
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
            return Ok((old != Some(new_len)).then_some((p.chunk, old, new_len)));
        }
    }
}
