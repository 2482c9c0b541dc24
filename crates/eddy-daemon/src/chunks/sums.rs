//! Checksum files (decision 0019): one CRC32C per block beside each data file, stored XOR
//! the checksum of a zero block; verified reads, the checksums of a write, the blocks found
//! bad and the integrity counters.

use super::io::{io_err, pread_full, pread_uninit};
use super::{lock, Checked, ChunkStore, Open};
use eddy_proto::checksum;
use eddy_proto::{Errno, FileId, Piece};
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

/// Bytes of one stored checksum.
pub(super) const SUM_BYTES: u64 = 4;
/// Checksums are on by default, one per this many bytes (or per chunk, if smaller).
pub(super) const DEFAULT_BLOCK: u64 = 64 * 1024;

impl ChunkStore {
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
    pub(super) fn read_verified(
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
            // A file with a direct writer (decision 0048): a block that does not match is a
            // direct write not reported yet. It is checksummed from the very bytes this read
            // returns, in the same pass: a second read could meet the next direct write (the
            // writers take no lock of the daemon's), which is a race, not damage.
            let in_flight = self.is_direct(id);
            let bad = self.with_file(id, |f| {
                self.read_piece_checked(f, id, p, block, &mut out, &mut sums, in_flight)
            })?;
            if let Some(at) = bad {
                return Err(self.found_bad(id, p.chunk, at));
            }
        }
        Ok(Some((out, sums)))
    }

    /// Appends piece `p`'s bytes to `out` and its segments' checksums to `sums`, after
    /// verifying the stored blocks it touches; returns the offset (in the chunk) of a block
    /// that does not match instead (what was appended is then garbage).
    pub(super) fn read_piece_verified(
        &self,
        f: Option<&Open>,
        id: FileId,
        p: &Piece,
        block: u64,
        out: &mut Vec<u8>,
        sums: &mut Vec<u32>,
    ) -> Result<Option<u64>, Errno> {
        self.read_piece_checked(f, id, p, block, out, sums, false)
    }

    /// `read_piece_verified`; with `in_flight` (the caller holds the chunk's lock and the
    /// file has a direct writer), a block that does not match is taken as a direct write
    /// not reported yet: its checksum is stored as computed over the bytes just read, which
    /// are returned with it (the writer's report, which follows its write, stores the
    /// checksum of what it wrote after this).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn read_piece_checked(
        &self,
        f: Option<&Open>,
        id: FileId,
        p: &Piece,
        block: u64,
        out: &mut Vec<u8>,
        sums: &mut Vec<u32>,
        in_flight: bool,
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
                match f {
                    Some(f) if in_flight => self.store_sums(f, id, p.chunk, at / block, &[sum])?,
                    _ => return Ok(Some(at)),
                }
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
    pub(super) fn load_sums(
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
    pub(super) fn store_sums(
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
    pub(super) fn sum_at(&self, k: u64, b: u64) -> u64 {
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
    pub(super) fn block_sums_for_write(
        &self,
        f: &Open,
        id: FileId,
        p: &Piece,
        bytes: &[u8],
        block: u64,
        seg_sums: Option<&[u32]>,
        held: u64,
        direct: bool,
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
            // A piece that replaces every byte the block holds (a short last block rewritten
            // whole, or grown): the block is the piece's bytes and zeros after, so its
            // checksum is fresh. Nothing of the old block is left to carry damage, and a
            // block known to be damaged is repaired this way as by a whole-block write.
            if so == b * block && so + sl >= held.min((b + 1) * block) {
                let after = (b + 1) * block - (so + sl);
                out.push(if after == 0 {
                    new
                } else {
                    checksum::combine(new, checksum::zeros_crc(after), after)
                });
                continue;
            }
            if lock(&self.bad).contains(&(id, p.chunk, b * block)) {
                return Err(self.found_bad(id, p.chunk, b * block));
            }
            // A file with a direct writer (decision 0048): its stored checksum may not be
            // the block's yet, so the whole block is checksummed as it will be.
            if direct {
                let mut whole = vec![0u8; block as usize];
                pread_full(&f.data, &mut whole, base + b * block)
                    .map_err(|e| io_err(&e, id, p.chunk))?;
                let from = (so - b * block) as usize;
                whole[from..from + sl as usize].copy_from_slice(seg);
                out.push(checksum::crc(&whole));
                continue;
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
    pub(super) fn found_bad(&self, id: FileId, k: u64, at: u64) -> Errno {
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
    pub(super) fn forget_bad(&self, id: FileId, k: Option<u64>) {
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
}

#[cfg(test)]
mod tests {
    use crate::chunks::fixture::*;
    use crate::chunks::layout::sum_path;

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

    #[test]
    fn a_short_last_block_rewritten_whole_is_repaired() {
        let f = open_blocks(tempfile::tempdir().unwrap(), Some(1024));
        let data: Vec<u8> = (0..1500u32).map(|i| (i * 7) as u8).collect();
        f.store.write(5, &[p(0, 0, 1500)], &data).unwrap();
        // The short last block (1024..1500) damaged, and found damaged by a read ...
        flip(&data_file(&f, 5), 1100);
        assert!(f.store.read(5, &[p(0, 1024, 476)]).is_err());
        // ... a write of part of what it holds is still refused; one of all of it repairs
        // it, as a whole-block write does, and so does one that grows it.
        assert!(f.store.write(5, &[p(0, 1024, 100)], &[1u8; 100]).is_err());
        f.store.write(5, &[p(0, 1024, 476)], &[2u8; 476]).unwrap();
        let mut want = data.clone();
        want[1024..].fill(2);
        assert_eq!(f.store.read(5, &[p(0, 0, 1500)]).unwrap(), want);
        flip(&data_file(&f, 5), 1200);
        assert!(f.store.read(5, &[p(0, 1024, 476)]).is_err());
        f.store.write(5, &[p(0, 1024, 600)], &[3u8; 600]).unwrap();
        want[1024..].fill(3);
        want.resize(1624, 3);
        assert_eq!(f.store.read(5, &[p(0, 0, 1624)]).unwrap(), want);
        assert!(f.store.corrupt().is_empty());
        // A write that starts inside the block still patches: damage before it stays seen.
        flip(&data_file(&f, 5), 1030);
        f.store.write(5, &[p(0, 1100, 524)], &[4u8; 524]).unwrap();
        assert!(f.store.read(5, &[p(0, 1024, 10)]).is_err());
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
}
