//! The journal of block changes in flight (decision 0019, "Crash"): a change of a file's
//! data that its checksums must follow (a write, a cut, a deletion) stores the data first and
//! the checksums second, so a daemon killed between the two would leave blocks whose bytes no
//! longer match their checksum, unreadable afterwards though nothing is damaged. Before such
//! a change, the range of blocks it touches is written to a slot of `INFLIGHT` in the chunk
//! directory; after it, the slot is zeroed. At the next start, the blocks named by a slot
//! left behind get their checksums computed again from the bytes on disk, which are what
//! the interrupted change left (old bytes, new bytes, or new ones up to a page: all of them
//! what an unsynced write may leave), before anything is read. A change that fails on a
//! running daemon (ENOSPC half way through a write) has its blocks checksummed again at once.
//!
//! A slot is 64 bytes (never across a page, so it is written whole or not at all): a magic,
//! the file id, the first block (counted from the file's start, `sum_at`'s numbering) and the
//! number of blocks, and a CRC32C of those; a slot that does not check is ignored (it was
//! being written when the daemon died, before the change it announced began).

use super::cache::open_sums;
use super::io::pread_full;
use super::sums::SUM_BYTES;
use super::{ChunkStore, Open};
use eddy_proto::checksum;
use eddy_proto::sync::lock;
use eddy_proto::{Errno, FileId};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;

/// Name of the journal in the chunk directory.
pub(super) const JOURNAL_FILE: &str = "INFLIGHT";
const SLOT: u64 = 64;
/// Bytes read at once when blocks are checksummed again from a data file.
const RESUM_READ_BYTES: u64 = 256 * 1024;
const MAGIC: &[u8; 4] = b"EDJ1";
/// Bytes of a slot its checksum covers: magic, id, first block, blocks.
const BODY: usize = 4 + 16 + 8 + 8;

/// A range of a file's blocks being changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Change {
    pub(super) id: FileId,
    /// First block, counted from the start of the file (chunk k's block b is k × blocks per
    /// chunk + b).
    pub(super) first: u64,
    pub(super) blocks: u64,
}

impl Change {
    /// Every block of file `id`: a direct writer's slot (decision 0048), adopted at the next
    /// start if the daemon dies meanwhile.
    pub(super) fn whole(id: FileId) -> Change {
        Change {
            id,
            first: 0,
            blocks: u64::MAX,
        }
    }

    /// Whether this is a direct writer's slot (`whole`).
    pub(super) fn is_whole(&self) -> bool {
        self.first == 0 && self.blocks == u64::MAX
    }

    fn encode(&self) -> [u8; SLOT as usize] {
        let mut s = [0u8; SLOT as usize];
        s[..4].copy_from_slice(MAGIC);
        s[4..20].copy_from_slice(&self.id.to_le_bytes());
        s[20..28].copy_from_slice(&self.first.to_le_bytes());
        s[28..36].copy_from_slice(&self.blocks.to_le_bytes());
        let sum = checksum::crc(&s[..BODY]);
        s[BODY..BODY + 4].copy_from_slice(&sum.to_le_bytes());
        s
    }

    fn decode(s: &[u8]) -> Option<Change> {
        if s.len() < BODY + 4 || &s[..4] != MAGIC {
            return None;
        }
        let sum = u32::from_le_bytes(s[BODY..BODY + 4].try_into().ok()?);
        if checksum::crc(&s[..BODY]) != sum {
            return None;
        }
        Some(Change {
            id: FileId::from_le_bytes(s[4..20].try_into().ok()?),
            first: u64::from_le_bytes(s[20..28].try_into().ok()?),
            blocks: u64::from_le_bytes(s[28..36].try_into().ok()?),
        })
    }
}

/// The open journal: its file and the slots free for the next change.
pub(super) struct Journal {
    file: File,
    /// Free slots, and the number of slots the file has (a new slot is made past them).
    slots: Mutex<(Vec<u64>, u64)>,
}

impl Journal {
    /// Opens (or makes) the journal of chunk directory `dir`; returns it with the changes a
    /// killed daemon left in it (`recover` deals with them and empties it).
    pub(super) fn open(dir: &Path) -> Result<(Journal, Vec<Change>), Errno> {
        let path = dir.join(JOURNAL_FILE);
        let err = |e: std::io::Error| Errno::from_io(&e, format!("journal {}", path.display()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(err)?;
        let len = file.metadata().map_err(err)?.len();
        let mut raw = vec![0u8; usize::try_from(len).map_err(|_| Errno::eio("journal too big"))?];
        pread_full(&file, &mut raw, 0).map_err(err)?;
        let left = raw
            .chunks(SLOT as usize)
            .filter_map(Change::decode)
            .collect();
        let journal = Journal {
            file,
            slots: Mutex::new((Vec::new(), len.div_ceil(SLOT))),
        };
        Ok((journal, left))
    }

    /// Records `c` in a free slot; returns the slot.
    pub(super) fn begin(&self, c: &Change) -> Result<u64, Errno> {
        let slot = {
            let mut slots = lock(&self.slots);
            match slots.0.pop() {
                Some(s) => s,
                None => {
                    slots.1 += 1;
                    slots.1 - 1
                }
            }
        };
        match self.file.write_all_at(&c.encode(), slot * SLOT) {
            Ok(()) => Ok(slot),
            Err(e) => {
                lock(&self.slots).0.push(slot);
                Err(Errno::from_io(
                    &e,
                    "recording a change in the chunk journal",
                ))
            }
        }
    }

    /// Zeroes slot `slot`: its change is complete. A slot that cannot be zeroed is not used
    /// again (its blocks are only checksummed again at the next start).
    pub(super) fn end(&self, slot: u64) {
        match self.file.write_all_at(&[0u8; SLOT as usize], slot * SLOT) {
            Ok(()) => lock(&self.slots).0.push(slot),
            Err(e) => tracing::warn!("cannot clear slot {slot} of the chunk journal: {e}"),
        }
    }

    /// Empties the journal (after `recover`).
    fn clear(&self) -> Result<(), Errno> {
        let err = |e: std::io::Error| Errno::from_io(&e, "emptying the chunk journal");
        self.file.set_len(0).map_err(err)?;
        self.file.sync_all().map_err(err)?;
        *lock(&self.slots) = (Vec::new(), 0);
        Ok(())
    }
}

impl ChunkStore {
    /// The change of `blocks` blocks of chunk `k` of file `id` from its block `b`.
    pub(super) fn change(&self, id: FileId, k: u64, b: u64, blocks: u64) -> Change {
        let block = self.block.unwrap_or(self.chunk_size);
        Change {
            id,
            first: k * (self.chunk_size / block) + b,
            blocks,
        }
    }

    /// Runs `op`, a change of blocks `[first, first + blocks)` of file `id` (data, then
    /// checksums), with the range in the journal meanwhile; if `op` fails, the blocks are
    /// checksummed again from what it left. Without checksums, just runs `op`.
    pub(super) fn journaled<T>(
        &self,
        f: &Open,
        c: Change,
        op: impl FnOnce() -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        if self.block.is_none() || c.blocks == 0 {
            return op();
        }
        let slot = self.journal.begin(&c)?;
        let out = op();
        if out.is_err() {
            if let Err(e) = self.resum(f, &c, true) {
                tracing::warn!(
                    "cannot checksum again blocks {}..{} of file {:032x} after a failed \
                     change: {e}",
                    c.first,
                    c.first + c.blocks,
                    c.id
                );
                return out; // the slot stays: the next start tries again
            }
        }
        self.journal.end(slot);
        out
    }

    /// Computes again, from the data file, the checksums of the blocks of `c` that lie in
    /// it; with `trim`, the checksums of blocks past its end are cut from the sum file. No
    /// lock is taken: the caller keeps writers of those blocks out (the daemon is not
    /// serving yet, or it holds their chunks' locks), or else a checksum a writer stores
    /// between this read and this store is overwritten with that of the block before.
    pub(super) fn resum(&self, f: &Open, c: &Change, trim: bool) -> Result<(), Errno> {
        let (Some(block), Some(sf)) = (self.block, &f.sums) else {
            return Ok(());
        };
        let ctx = |what: &str| format!("{what} of file {:032x} (journal recovery)", c.id);
        let data_len = f
            .data
            .metadata()
            .map_err(|e| Errno::from_io(&e, ctx("data file")))?
            .len();
        let in_data = data_len.div_ceil(block);
        // Several blocks per read (a whole file is checksummed this way after passthrough
        // writes), few enough to stay in the core's cache for the checksum that follows.
        let per_read = (RESUM_READ_BYTES / block).max(1);
        let mut buf = vec![0u8; (per_read * block) as usize];
        let end = c.first.saturating_add(c.blocks).min(in_data);
        let mut sums = Vec::new();
        let mut b = c.first;
        while b < end {
            let n = per_read.min(end - b);
            let piece = &mut buf[..(n * block) as usize];
            pread_full(&f.data, piece, b * block)
                .map_err(|e| Errno::from_io(&e, ctx("data file")))?;
            sums.extend(
                piece
                    .chunks(block as usize)
                    .map(|blk| checksum::crc(blk) ^ self.zero_sum),
            );
            b += n;
        }
        if !sums.is_empty() {
            let raw: Vec<u8> = sums.iter().flat_map(|s| s.to_le_bytes()).collect();
            sf.write_all_at(&raw, c.first * SUM_BYTES)
                .map_err(|e| Errno::from_io(&e, ctx("checksums")))?;
        }
        let sum_len = sf
            .metadata()
            .map_err(|e| Errno::from_io(&e, ctx("checksums")))?
            .len();
        if trim && c.first.saturating_add(c.blocks) > in_data && sum_len > in_data * SUM_BYTES {
            sf.set_len(in_data * SUM_BYTES)
                .map_err(|e| Errno::from_io(&e, ctx("checksums")))?;
        }
        Ok(())
    }

    /// Deals with the changes a killed daemon left in the journal: their blocks are
    /// checksummed again from the bytes on disk, the sum files synced, the journal emptied.
    /// Call once, after `checksums`, before serving. Returns the blocks checksummed again.
    pub fn recover_torn(&self) -> Result<u64, Errno> {
        let left = std::mem::take(&mut *lock(&self.left));
        let mut by_file: BTreeMap<FileId, Vec<Change>> = BTreeMap::new();
        let mut adopted = std::collections::BTreeSet::new();
        for c in left {
            if c.is_whole() {
                adopted.insert(c.id);
            } else {
                by_file.entry(c.id).or_default().push(c);
            }
        }
        // Files a direct writer had when this daemon stopped (decision 0048): what their
        // data files hold is adopted whole, which covers any other change of them.
        for id in &adopted {
            by_file.remove(id);
            let grown = self.adopt(*id)?;
            tracing::warn!(
                "adopted file {id:032x}, written directly when this daemon stopped: chunks \
                 grown by {grown} bytes from its data file, every block checksummed again"
            );
        }
        let mut blocks = 0u64;
        if self.block.is_some() {
            for (id, changes) in &by_file {
                let path = self.path_of(*id);
                let data = match OpenOptions::new().read(true).open(&path) {
                    Ok(d) => d,
                    Err(e) if e.kind() == ErrorKind::NotFound => continue,
                    Err(e) => return Err(Errno::from_io(&e, format!("{}", path.display()))),
                };
                let f = Open {
                    data,
                    sums: Some(open_sums(&path, *id)?),
                };
                for c in changes {
                    self.resum(&f, c, true)?;
                    blocks += c.blocks;
                }
                if let Some(sf) = &f.sums {
                    sf.sync_data()
                        .map_err(|e| Errno::from_io(&e, format!("checksums of file {id:032x}")))?;
                }
            }
            if !by_file.is_empty() {
                tracing::warn!(
                    "checksummed again {blocks} blocks of {} files that were being changed \
                     when this daemon stopped",
                    by_file.len()
                );
            }
        }
        self.journal.clear()?;
        Ok(blocks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunks::fixture::*;
    use crate::chunks::layout::sum_path;

    #[test]
    fn slots_decode_what_they_encode_and_refuse_a_torn_one() {
        let c = Change {
            id: 0xabcdef,
            first: 17,
            blocks: 3,
        };
        let s = c.encode();
        assert_eq!(Change::decode(&s), Some(c));
        let mut torn = s;
        torn[30] ^= 1;
        assert_eq!(Change::decode(&torn), None);
        assert_eq!(Change::decode(&[0u8; 64]), None);
    }

    /// A daemon killed between a write's data and its checksums: the block reads back (old
    /// or new bytes) after the restart, not EIO; a block damaged outside any change still
    /// reads EIO.
    #[test]
    fn a_write_cut_between_data_and_checksums_reads_back_after_a_restart() {
        let f = open_blocks(tempfile::tempdir().unwrap(), Some(1024));
        let old: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        f.store.write(5, &[p(0, 0, 4096)], &old).unwrap();
        f.store.write(6, &[p(0, 0, 2048)], &old[..2048]).unwrap();
        // The journal records the change, the data lands, the daemon dies before the
        // checksums (as a kill -9 would leave it: the slot is never cleared).
        let c = Change {
            id: 5,
            first: 1,
            blocks: 2,
        };
        f.store.journal.begin(&c).unwrap();
        let file = OpenOptions::new()
            .write(true)
            .open(data_file(&f, 5))
            .unwrap();
        file.write_all_at(&[0xEE; 1500], 1100).unwrap();
        flip(&data_file(&f, 6), 1500);
        assert!(f.store.read(5, &[p(0, 1024, 10)]).is_err(), "torn now");

        let f = reopen(f);
        let f = Fixture {
            store: f.store.checksums(Some(1024)),
            ..f
        };
        assert_eq!(f.store.recover_torn().unwrap(), 2);
        let mut want = old.clone();
        want[1100..2600].fill(0xEE);
        assert_eq!(f.store.read(5, &[p(0, 0, 4096)]).unwrap(), want);
        let e = f.store.read(6, &[p(0, 1024, 10)]).unwrap_err();
        assert!(e.msg.contains("checksum mismatch"), "{e}");
        // The journal is empty again, and a normal write leaves nothing in it.
        f.store.write(5, &[p(0, 10, 10)], &[1u8; 10]).unwrap();
        let raw = std::fs::read(f.dir.path().join("chunks").join(JOURNAL_FILE)).unwrap();
        assert!(raw.chunks(64).all(|s| Change::decode(s).is_none()));
        assert_eq!(
            std::fs::metadata(f.dir.path().join("chunks").join(JOURNAL_FILE))
                .unwrap()
                .len()
                % 64,
            0
        );
    }

    /// A truncate cut after the data file was shortened and before its sum file was: the
    /// checksums past the data's end go at the next start.
    #[test]
    fn a_cut_interrupted_before_the_sum_file_is_finished_at_the_next_start() {
        let f = open_blocks(tempfile::tempdir().unwrap(), Some(1024));
        f.store
            .write(8, &[p(0, 0, 4096), p(1, 0, 4096)], &[3u8; 8192])
            .unwrap();
        f.store
            .journal
            .begin(&Change {
                id: 8,
                first: 1,
                blocks: 7,
            })
            .unwrap();
        let file = OpenOptions::new()
            .write(true)
            .open(data_file(&f, 8))
            .unwrap();
        file.set_len(1500).unwrap();
        let f = reopen(f);
        let f = Fixture {
            store: f.store.checksums(Some(1024)),
            ..f
        };
        f.store.recover_torn().unwrap();
        let sums = std::fs::metadata(sum_path(&data_file(&f, 8)))
            .unwrap()
            .len();
        assert_eq!(sums, 2 * SUM_BYTES);
        let mut want = vec![3u8; 1500];
        want.resize(2048, 0);
        assert_eq!(f.store.read(8, &[p(0, 0, 2048)]).unwrap(), want);
    }
}
