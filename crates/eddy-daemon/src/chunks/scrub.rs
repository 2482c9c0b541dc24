//! The scrub: every stored block of a page of chunks verified against its checksum, in
//! (file id, chunk) order, each chunk under its lock.

use super::io::{io_err, pread_full};
use super::map::record_key;
use super::ChunkStore;
use eddy_proto::checksum;
use eddy_proto::{BadBlock, Errno, FileId, ScrubPage};
use std::sync::atomic::Ordering;

impl ChunkStore {
    /// Verifies every stored block of up to `limit` chunks after `after`, in (file id,
    /// chunk) order, each under its lock (I/O goes on around it).
    pub fn scrub(&self, after: Option<(FileId, u64)>, limit: u32) -> Result<ScrubPage, Errno> {
        let mut page = ScrubPage {
            total_chunks: self.count.load(Ordering::Relaxed),
            ..ScrubPage::default()
        };
        let Some(block) = self.block else {
            return Ok(page);
        };
        let start = after
            .map(|(id, k)| record_key(id, k).to_vec())
            .unwrap_or_default();
        let mut listed = Vec::new();
        for guard in self.records.range(start..) {
            if listed.len() >= limit.max(1) as usize {
                break;
            }
            let key = guard
                .key()
                .map_err(|e| Errno::eio(format!("reading the chunk map: {e}")))?;
            let (Ok(id), Ok(k)) = (
                <[u8; 16]>::try_from(key.get(..16).unwrap_or_default()),
                <[u8; 8]>::try_from(key.get(16..).unwrap_or_default()),
            ) else {
                continue;
            };
            let (id, k) = (FileId::from_be_bytes(id), u64::from_be_bytes(k));
            if Some((id, k)) == after {
                continue;
            }
            listed.push((id, k));
        }
        let full = listed.len() >= limit.max(1) as usize;
        for (id, k) in listed {
            page.next = Some((id, k));
            let _guard = self.lock(id, k);
            let Some(len) = self.len_locked(id, k)? else {
                continue; // deleted meanwhile
            };
            let n = len.div_ceil(block);
            let bad = self.with_file(id, |f| {
                let Some(f) = f else {
                    return Ok(Vec::new());
                };
                let stored = self.load_sums(f, id, k, 0, n as usize)?;
                let mut buf = vec![0u8; block as usize];
                let mut bad = Vec::new();
                for b in 0..n {
                    pread_full(&f.data, &mut buf, k * self.chunk_size + b * block)
                        .map_err(|e| io_err(&e, id, k))?;
                    if checksum::crc(&buf) != stored[b as usize] {
                        bad.push(b * block);
                    }
                }
                Ok(bad)
            })?;
            page.chunks += 1;
            page.blocks += n;
            page.bytes += len;
            for at in bad {
                // A block a direct writer (or the kernel, through passthrough) has not
                // reported yet is checksummed again, not damage (decision 0048).
                let piece = eddy_proto::Piece {
                    chunk: k,
                    offset: at as u32,
                    len: block as u32,
                };
                if self.resum_if_direct(id, &piece)? {
                    continue;
                }
                self.found_bad(id, k, at);
                page.bad.push(BadBlock {
                    file_id: id,
                    chunk: k,
                    offset: at,
                });
            }
        }
        if !full {
            page.next = None;
        }
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunks::fixture::*;

    #[test]
    fn a_flipped_bit_is_eio_counted_once_remembered_and_found_by_scrub() {
        let f = open_blocks(tempfile::tempdir().unwrap(), Some(1024));
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        f.store.write(6, &[p(1, 100, 3000)], &data).unwrap();
        f.store.sync(6).unwrap();
        let f = reopen(f);
        let f = Fixture {
            store: f.store.checksums(Some(1024)),
            ..f
        };
        let (got, sums) = f.store.read_checked(6, &[p(1, 0, 4096)]).unwrap();
        assert_eq!(&got[100..3100], &data[..]);
        assert_eq!(
            sums,
            eddy_proto::checksum::sums(&[p(1, 0, 4096)], &got, 1024)
        );
        // A bit flipped in block 2 of chunk 1.
        flip(&data_file(&f, 6), CS + 2048 + 5);
        for _ in 0..2 {
            let e = f.store.read(6, &[p(1, 2000, 100)]).unwrap_err();
            assert_eq!(e.errno, libc::EIO);
            assert!(
                e.msg.contains(&format!("{:032x}", 6)) && e.msg.contains("chunk 1, offset 2048"),
                "{e}"
            );
        }
        assert_eq!(f.store.integrity_counters(), (1, 0), "counted once");
        assert_eq!(f.store.corrupt(), vec![(6, 1)]);
        // Blocks 0, 1 and 3 still read.
        assert_eq!(
            f.store.read(6, &[p(1, 1000, 1048)]).unwrap(),
            data[900..1948]
        );
        assert_eq!(f.store.read(6, &[p(1, 3072, 28)]).unwrap(), data[2972..]);
        // A partial write into the bad block is refused, nothing written.
        assert!(f.store.write(6, &[p(1, 2050, 4)], b"abcd").is_err());
        let page = f.store.scrub(None, 10).unwrap();
        assert_eq!((page.chunks, page.blocks, page.bytes), (1, 4, 3100));
        assert_eq!(
            page.bad,
            vec![BadBlock {
                file_id: 6,
                chunk: 1,
                offset: 2048
            }]
        );
        assert_eq!(page.next, None);
        // Rewriting the whole block repairs it.
        f.store
            .write(6, &[p(1, 2048, 1024)], &data[1948..2972])
            .unwrap();
        assert!(f.store.corrupt().is_empty());
        assert_eq!(f.store.read(6, &[p(1, 100, 3000)]).unwrap(), data);
        assert!(f.store.scrub(None, 10).unwrap().bad.is_empty());
        assert_eq!(f.store.integrity_counters(), (1, 0));
    }
}
