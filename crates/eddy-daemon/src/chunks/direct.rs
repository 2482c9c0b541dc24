//! Direct local I/O, the store's side (decision 0048): a client on this host reads and
//! writes a file's data file itself, through descriptors handed over by `crate::direct`, and
//! reports what it wrote (`direct_commit`).
//!
//! While a file has a direct writer, it is marked here and its whole range is announced in
//! the journal of changes in flight (one slot, every block: `Change::WHOLE`), so that a
//! daemon killed meanwhile adopts what the writer left at its next start: the chunks the
//! data file holds bytes in are recorded (found with SEEK_DATA/SEEK_HOLE) and every block is
//! checksummed again. A client gone without its last report (its connection closed) has its
//! file adopted the same way at once.
//!
//! Between a direct write and its report, the stored checksums of the blocks it changed are
//! stale. So, for a marked file, the daemon takes a block that does not match as a direct
//! write in flight, not damage: it checksums the block again from its bytes (reads, a cut)
//! and its own partial-block writes checksum the whole block from the data file instead of
//! patching. A report stores the client's checksums when the writer had the file alone;
//! when another writer (a second lease, or the daemon's own writes) shared it, the blocks
//! reported are checksummed from the data file instead.

use super::io::{io_err, pread_full};
use super::journal::Change;
use super::layout::sum_path;
use super::{lock, ChunkStore, Open};
use eddy_proto::checksum;
use eddy_proto::{Errno, FileId, Piece};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

/// A file written directly: its writers, whether anything else wrote it meanwhile, and its
/// journal slot.
#[derive(Debug, Default)]
pub(super) struct Marked {
    writers: u32,
    shared: bool,
    slot: Option<u64>,
}

impl ChunkStore {
    /// Descriptors for a direct client of file `id`: its data file (read-write with `write`,
    /// else read-only; made if missing for a write) and its sum file (read-only), when
    /// checksums are on. A write marks the file (see the module's header) until
    /// `direct_close`. ENOENT for a read of a file this daemon holds nothing of.
    pub fn direct_open(&self, id: FileId, write: bool) -> Result<(File, Option<File>), Errno> {
        let none = || {
            Errno::new(
                libc::ENOENT,
                format!("this daemon holds no data of file {id:032x}"),
            )
        };
        loop {
            let slot = match write {
                true => self.slot_or_new(id),
                false => self.slot(id).ok_or_else(none)?,
            };
            let gone = slot.gate.read().unwrap_or_else(|e| e.into_inner());
            if *gone {
                if write {
                    continue; // removed meanwhile: the next round makes a new slot
                }
                return Err(none());
            }
            let f = self.data_file(id, &slot, write)?.ok_or_else(none)?;
            let path = self.path_of(id);
            let data = if write {
                f.data.try_clone()
            } else {
                File::open(&path)
            }
            .map_err(|e| {
                Errno::from_io(&e, format!("data file of {id:032x} for a direct client"))
            })?;
            let sums = match &f.sums {
                Some(_) => Some(File::open(sum_path(&path)).map_err(|e| {
                    Errno::from_io(&e, format!("checksums of {id:032x} for a direct client"))
                })?),
                None => None,
            };
            if write {
                self.mark(id)?;
            }
            return Ok((data, sums));
        }
    }

    fn mark(&self, id: FileId) -> Result<(), Errno> {
        let mut marked = lock(&self.direct);
        let m = marked.entry(id).or_default();
        if m.slot.is_none() {
            match self.journal.begin(&Change::whole(id)) {
                Ok(slot) => m.slot = Some(slot),
                Err(e) => {
                    if m.writers == 0 {
                        marked.remove(&id);
                    }
                    return Err(e);
                }
            }
        }
        m.writers += 1;
        m.shared |= m.writers > 1;
        Ok(())
    }

    /// Whether file `id` has a direct writer now.
    pub(super) fn is_direct(&self, id: FileId) -> bool {
        lock(&self.direct).contains_key(&id)
    }

    /// Notes that the daemon itself changes file `id` (a write, a cut, an allocation): if
    /// it has a direct writer, that writer's next report is checksummed from the data.
    /// Returns whether the file has one.
    pub(super) fn daemon_changes(&self, id: FileId) -> bool {
        let mut marked = lock(&self.direct);
        match marked.get_mut(&id) {
            Some(m) => {
                m.shared = true;
                true
            }
            None => false,
        }
    }

    /// Records what a direct writer of file `id` wrote: the byte ranges (each inside one or
    /// more chunks; the caller checked this daemon owns them) and the checksums it computed
    /// of the whole blocks they touch, by block index from the file's start. A range whose
    /// chunk passes the capacity is recorded still (the bytes are on the device already; a
    /// writer is only handed descriptors with `direct_batch_bytes` of room left).
    pub fn direct_commit(
        &self,
        id: FileId,
        ranges: &[(u64, u64)],
        sums: &[(u64, u32)],
    ) -> Result<(), Errno> {
        let Some(slot) = self.slot(id) else {
            return Ok(()); // removed meanwhile: nothing to record
        };
        // Not between a truncate's cuts and its new length of the data file (`Slot::sizing`):
        // before it, the cut drops what was reported; after it, the bytes a truncate dropped
        // are zeros, checksummed from the data (a truncate shares the file).
        let _sizing = lock(&slot.sizing);
        // Read under that lock: a truncate that went first has shared the file.
        let shared = lock(&self.direct).get(&id).is_none_or(|m| m.shared);
        // Each chunk's new end, and the blocks touched per chunk.
        let cs = self.chunk_size;
        let mut ends: BTreeMap<u64, u64> = BTreeMap::new();
        for &(off, len) in ranges.iter().filter(|r| r.1 > 0) {
            let end = off
                .checked_add(len)
                .filter(|e| *e <= i64::MAX as u64)
                .ok_or_else(|| Errno::einval("a reported range passes the largest file size"))?;
            for k in off / cs..=(end - 1) / cs {
                let in_chunk = end.min((k + 1) * cs) - k * cs;
                let e = ends.entry(k).or_default();
                *e = (*e).max(in_chunk);
            }
        }
        let given: BTreeMap<u64, u32> = sums.iter().copied().collect();
        let block = self.block;
        for (&k, &end) in &ends {
            let _guard = self.lock(id, k);
            let gone = slot.gate.read().unwrap_or_else(|e| e.into_inner());
            if *gone {
                return Ok(());
            }
            let old = lock(&slot.chunks).get(&k).copied();
            let new_len = old.unwrap_or(0).max(end);
            if old != Some(new_len) {
                self.record_forced(&slot, id, k, Some(new_len))?;
            }
            let (Some(block), Some(f)) = (block, self.data_file(id, &slot, false)?) else {
                continue;
            };
            // The blocks of this chunk the ranges touch.
            let per_chunk = cs / block;
            let mut touched: Vec<u64> = Vec::new();
            for &(off, len) in ranges.iter().filter(|r| r.1 > 0) {
                let (a, e) = (off.max(k * cs), (off + len).min((k + 1) * cs));
                if a < e {
                    touched.extend(a / block..e.div_ceil(block));
                }
            }
            touched.sort_unstable();
            touched.dedup();
            let mut new = Vec::with_capacity(touched.len());
            for &g in &touched {
                let sum = match given.get(&g) {
                    Some(s) if !shared => *s,
                    _ => self.block_crc(&f, id, k, g * block, block)?,
                };
                new.push((g, sum));
            }
            // Stored in runs of consecutive blocks.
            let mut i = 0;
            while i < new.len() {
                let mut j = i + 1;
                while j < new.len() && new[j].0 == new[j - 1].0 + 1 {
                    j += 1;
                }
                let run: Vec<u32> = new[i..j].iter().map(|(_, s)| *s).collect();
                self.store_sums(&f, id, k, new[i].0 - k * per_chunk, &run)?;
                i = j;
            }
            let mut bad = lock(&self.bad);
            for (g, _) in &new {
                bad.remove(&(id, k, (g - k * per_chunk) * block));
            }
        }
        Ok(())
    }

    /// The CRC32C of the block at data-file offset `at` as it is now (zeros past the end).
    fn block_crc(&self, f: &Open, id: FileId, k: u64, at: u64, block: u64) -> Result<u32, Errno> {
        let mut buf = vec![0u8; block as usize];
        pread_full(&f.data, &mut buf, at).map_err(|e| io_err(&e, id, k))?;
        Ok(checksum::crc(&buf))
    }

    /// Checksums again, from their bytes, the blocks piece `p` of a file with a direct
    /// writer touches: a mismatch there is a direct write not reported yet. False (nothing
    /// done) when the file has none: the mismatch is damage. The caller holds the chunk's
    /// lock.
    pub(super) fn resum_if_direct(&self, id: FileId, p: &Piece) -> Result<bool, Errno> {
        let Some(block) = self.block else {
            return Ok(false);
        };
        if !self.is_direct(id) {
            return Ok(false);
        }
        let Some(slot) = self.slot(id) else {
            return Ok(false);
        };
        let gone = slot.gate.read().unwrap_or_else(|e| e.into_inner());
        if *gone {
            return Ok(false);
        }
        let Some(f) = self.data_file(id, &slot, false)? else {
            return Ok(false);
        };
        let (k, off) = (p.chunk, u64::from(p.offset));
        let (first, end) = (
            off / block,
            (off + u64::from(p.len))
                .div_ceil(block)
                .max(off / block + 1),
        );
        let mut sums = Vec::with_capacity((end - first) as usize);
        for b in first..end {
            sums.push(self.block_crc(&f, id, k, k * self.chunk_size + b * block, block)?);
        }
        self.store_sums(&f, id, k, first, &sums)?;
        Ok(true)
    }

    /// A direct writer of file `id` is done: with `adopt` (it left without reporting
    /// everything), what the data file holds is adopted (`adopt`). The last writer's end
    /// clears the file's journal slot.
    pub fn direct_close(&self, id: FileId, adopt: bool) -> Result<(), Errno> {
        let adopted = if adopt {
            self.adopt(id).map(|_| ())
        } else {
            Ok(())
        };
        let mut marked = lock(&self.direct);
        if let Some(m) = marked.get_mut(&id) {
            m.writers = m.writers.saturating_sub(1);
            if m.writers == 0 {
                if let Some(slot) = m.slot.take() {
                    if adopted.is_ok() {
                        self.journal.end(slot);
                    } else {
                        m.slot = Some(slot); // kept: the next start adopts it
                    }
                }
                if m.slot.is_none() {
                    marked.remove(&id);
                }
            }
        }
        adopted
    }

    /// Takes what the data file of `id` holds as written: every chunk with bytes in it (by
    /// SEEK_DATA/SEEK_HOLE) is recorded at least up to them, and every block is checksummed
    /// again. Returns the bytes the recorded chunks grew by.
    pub(crate) fn adopt(&self, id: FileId) -> Result<u64, Errno> {
        self.adopt_with(id, true)
    }

    /// What the kernel wrote (FUSE passthrough, decision 0049), taken in two steps: now,
    /// the chunks the data file holds bytes in are recorded (so a Sync that follows makes
    /// them durable), and the file stays marked (held as by a writer) until
    /// `adopt_checksums`, which the caller runs later, off the client's path.
    pub(crate) fn adopt_chunks(&self, id: FileId) -> Result<u64, Errno> {
        let grown = self.adopt_with(id, false)?;
        self.mark(id)?;
        Ok(grown)
    }

    /// The second step of `adopt_chunks`: every block checksummed again, then the hold on
    /// the file's mark ends. On failure the mark and its journal slot stay (the next start
    /// adopts the file).
    pub(crate) fn adopt_checksums(&self, id: FileId) -> Result<(), Errno> {
        self.adopt_with(id, true)?;
        self.direct_close(id, false)
    }

    fn adopt_with(&self, id: FileId, sums: bool) -> Result<u64, Errno> {
        let slot = self.slot_or_new(id);
        // No truncate between the look at the extents and the records (`Slot::sizing`).
        let _sizing = lock(&slot.sizing);
        let gone = slot.gate.read().unwrap_or_else(|e| e.into_inner());
        if *gone {
            return Ok(0);
        }
        let Some(f) = self.data_file(id, &slot, false)? else {
            return Ok(0);
        };
        let cs = self.chunk_size;
        let mut grown = 0u64;
        for (start, end) in extents(&f.data).map_err(|e| io_err(&e, id, 0))? {
            for k in start / cs..=(end - 1) / cs {
                let in_chunk = end.min((k + 1) * cs) - k * cs;
                let _guard = self.lock(id, k);
                let old = lock(&slot.chunks).get(&k).copied();
                if old.is_none_or(|o| o < in_chunk) {
                    self.record_forced(&slot, id, k, Some(in_chunk))?;
                    grown += in_chunk - old.unwrap_or(0);
                }
            }
        }
        if let (Some(block), true) = (self.block, sums) {
            // Chunk by chunk, each under its lock: the daemon serves meanwhile, and its own
            // writes of the file (another client's, decision 0043's local files written
            // from several hosts) store their blocks' checksums under the same locks. One
            // pass over the whole file without them read a block, let such a write store
            // its checksum, then stored the block's old one over it: once the file's mark
            // was gone, the block read as damage.
            let len = f.data.metadata().map_err(|e| io_err(&e, id, 0))?.len();
            let per_chunk = cs / block;
            for k in 0..len.div_ceil(cs) {
                let _guard = self.lock(id, k);
                let change = Change {
                    id,
                    first: k * per_chunk,
                    blocks: per_chunk,
                };
                self.resum(&f, &change, false)?;
            }
            if let Some(sf) = &f.sums {
                sf.sync_data()
                    .map_err(|e| Errno::from_io(&e, format!("checksums of file {id:032x}")))?;
            }
        }
        if sums {
            self.forget_bad(id, None);
        }
        Ok(grown)
    }
}

/// The byte ranges of `file` that hold data (not holes), by SEEK_DATA/SEEK_HOLE.
///
/// A file with as many blocks allocated as its length needs is taken whole without them:
/// SEEK_HOLE walks every page of the file (on tmpfs, 2.5 % of a passthrough write's samples
/// for a file written densely, the common case). Blocks allocated past the end (fallocate
/// with KEEP_SIZE) or the file system's own may then hide a hole inside; its chunk is then
/// recorded as holding zeros, which is what a read of a hole inside the size returns.
fn extents(file: &File) -> std::io::Result<Vec<(u64, u64)>> {
    let fd = file.as_raw_fd();
    let meta = file.metadata()?;
    let len = meta.len();
    if len == 0 {
        return Ok(Vec::new());
    }
    if meta.blocks().saturating_mul(512) >= len {
        return Ok(vec![(0, len)]);
    }
    let mut out = Vec::new();
    let mut pos: i64 = 0;
    while (pos as u64) < len {
        // SAFETY: lseek on a descriptor this function borrows; no memory is passed.
        let data = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
        if data < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                break;
            }
            return Err(e);
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if hole > data {
            out.push((data as u64, hole as u64));
        }
        pos = hole;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::chunks::fixture::*;
    use eddy_proto::checksum;
    use std::os::unix::fs::FileExt;

    fn with_blocks(f: Fixture) -> Fixture {
        Fixture {
            store: f.store.checksums(Some(1024)),
            ..f
        }
    }

    /// A densely written file is one extent without walking its pages; a hole inside a
    /// file is still found, and an empty file has none.
    #[test]
    fn extents_are_the_data_and_a_dense_file_is_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let open = |name: &str| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(dir.path().join(name))
                .expect("open")
        };
        let dense = open("dense");
        dense.write_all_at(&vec![7u8; 1 << 20], 0).expect("write");
        assert_eq!(super::extents(&dense).expect("extents"), vec![(0, 1 << 20)]);

        let sparse = open("sparse");
        sparse.write_all_at(&[1u8; 4096], 0).expect("write");
        sparse.write_all_at(&[2u8; 4096], 8 << 20).expect("write");
        let got = super::extents(&sparse).expect("extents");
        assert_eq!(got.first(), Some(&(0, 4096)), "{got:?}");
        assert_eq!(got.last(), Some(&(8 << 20, (8 << 20) + 4096)), "{got:?}");
        assert!(
            got.iter().all(|&(a, b)| b <= 4096 || a >= 8 << 20),
            "{got:?}"
        );

        assert!(super::extents(&open("empty")).expect("extents").is_empty());
    }

    /// A daemon killed while a client wrote directly and reported nothing: at the next
    /// start the chunks the data file holds are recorded and every block checksummed, so
    /// the bytes read back (and the journal slot is gone).
    #[test]
    fn what_a_writer_left_unreported_is_adopted_at_the_next_start() {
        let f = with_blocks(open(tempfile::tempdir().unwrap()));
        let (data, _) = f.store.direct_open(7, true).unwrap();
        data.write_all_at(&[0xAB; 3000], 0).unwrap();
        data.write_all_at(&[0xCD; 50], 2 * CS + 100).unwrap();
        drop(data);
        let f = with_blocks(reopen(f));
        f.store.recover_torn().unwrap();
        let got = f
            .store
            .read(7, &[p(0, 0, CS as u32), p(2, 0, 200)])
            .unwrap();
        assert!(got[..3000].iter().all(|b| *b == 0xAB));
        assert!(got[3000..CS as usize].iter().all(|b| *b == 0));
        assert!(got[CS as usize + 100..CS as usize + 150]
            .iter()
            .all(|b| *b == 0xCD));
        assert_eq!(f.store.usage().1, 2, "chunks 0 and 2 recorded");
        assert!(f.store.direct.lock().unwrap().is_empty());
    }

    /// A lone writer's checksums are stored as reported (a wrong one is then found as
    /// damage once the writer is gone); with another writer sharing the file, the blocks
    /// reported are checksummed from the data instead.
    #[test]
    fn a_lone_writers_checksums_are_stored_a_shared_files_computed() {
        let f = with_blocks(open(tempfile::tempdir().unwrap()));
        let block = vec![0x5Au8; 1024];
        let good = checksum::crc(&block);
        let (data, _) = f.store.direct_open(1, true).unwrap();
        data.write_all_at(&block, 0).unwrap();
        data.write_all_at(&block, 1024).unwrap();
        f.store
            .direct_commit(1, &[(0, 2048)], &[(0, good), (1, good ^ 1)])
            .unwrap();
        f.store.direct_close(1, false).unwrap();
        assert_eq!(f.store.read(1, &[p(0, 0, 1024)]).unwrap(), block);
        let e = f.store.read(1, &[p(0, 1024, 10)]).unwrap_err();
        assert!(e.msg.contains("checksum mismatch"), "{e}");

        let (a, _) = f.store.direct_open(2, true).unwrap();
        let (_b, _) = f.store.direct_open(2, true).unwrap();
        a.write_all_at(&block, 0).unwrap();
        f.store
            .direct_commit(2, &[(0, 1024)], &[(0, good ^ 1)])
            .unwrap();
        f.store.direct_close(2, false).unwrap();
        f.store.direct_close(2, false).unwrap();
        assert_eq!(f.store.read(2, &[p(0, 0, 1024)]).unwrap(), block);
    }

    /// Before its writer reports, a block that does not match is the write in flight: it
    /// reads (checksummed again), and the daemon's own partial write beside it keeps the
    /// block whole. Once the writer is done, damage is damage again.
    #[test]
    fn unreported_blocks_read_while_the_writer_holds_the_file() {
        let f = with_blocks(open(tempfile::tempdir().unwrap()));
        f.store.write(3, &[p(0, 0, 2048)], &[1u8; 2048]).unwrap();
        let (data, _) = f.store.direct_open(3, true).unwrap();
        data.write_all_at(&[2u8; 100], 10).unwrap();
        f.store.write(3, &[p(0, 500, 10)], &[3u8; 10]).unwrap();
        let got = f.store.read(3, &[p(0, 0, 2048)]).unwrap();
        assert!(got[10..110].iter().all(|b| *b == 2));
        assert!(got[500..510].iter().all(|b| *b == 3));
        f.store.direct_commit(3, &[(10, 100)], &[]).unwrap();
        f.store.direct_close(3, false).unwrap();
        assert_eq!(f.store.read(3, &[p(0, 0, 2048)]).unwrap(), got);
        flip(&data_file(&f, 3), 1500);
        let e = f.store.read(3, &[p(0, 1024, 1024)]).unwrap_err();
        assert!(e.msg.contains("checksum mismatch"), "{e}");
    }

    /// The checksumming of a whole file after its passthrough writes (`adopt_checksums`)
    /// while the daemon writes parts of blocks of it for another client: no checksum the
    /// daemon stored meanwhile may be overwritten with that of the block before the write,
    /// so every block reads once the file's mark is gone.
    #[test]
    fn a_files_adoption_never_undoes_the_daemons_writes_meanwhile() {
        let f = with_blocks(open(tempfile::tempdir().unwrap()));
        let chunks = 512u64;
        let (data, _) = f.store.direct_open(4, true).unwrap();
        data.write_all_at(&vec![1u8; (chunks * CS) as usize], 0)
            .unwrap();
        f.store.adopt_chunks(4).unwrap();
        f.store.adopt_checksums(4).unwrap();
        f.store.direct_close(4, false).unwrap();
        let mut want = vec![1u8; (chunks * CS) as usize];
        for round in 0..20u8 {
            f.store.adopt_chunks(4).unwrap();
            std::thread::scope(|s| {
                let adoption = s.spawn(|| f.store.adopt_checksums(4).unwrap());
                // Parts of blocks, from the file's end backwards (the adoption goes forwards).
                for k in (0..chunks).rev() {
                    let at = 100 + u32::from(round);
                    f.store
                        .write(4, &[p(k, at, 700)], &[round + 2; 700])
                        .unwrap();
                    let from = (k * CS) as usize + at as usize;
                    want[from..from + 700].fill(round + 2);
                }
                adoption.join().unwrap();
            });
            assert!(!f.store.is_direct(4));
            for k in 0..chunks {
                let got = f
                    .store
                    .read(4, &[p(k, 0, CS as u32)])
                    .unwrap_or_else(|e| panic!("round {round}, chunk {k}: {e}"));
                assert!(got[..] == want[(k * CS) as usize..((k + 1) * CS) as usize]);
            }
        }
    }
}
