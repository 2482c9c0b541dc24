//! End-to-end checksums (decision 0019): CRC32C (hardware-accelerated by the `crc32c`
//! crate) of each block-aligned segment of the pieces of a read or write. A piece is cut at
//! the block boundaries of its chunk; a `Write` carries one checksum per segment, computed by
//! the client, and so does a checked read reply, computed (or, for whole blocks, stored) by
//! the daemon. Both sides use these functions, so they cut the same way.

use crate::{Errno, Piece};

/// The CRC32C of `bytes`.
pub fn crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// The CRC32C of `len` zero bytes (a hole, a block never written).
pub fn zeros_crc(len: u64) -> u32 {
    const STEP: [u8; 4096] = [0u8; 4096];
    let mut sum = 0u32;
    let mut left = len;
    while left > 0 {
        let n = left.min(STEP.len() as u64) as usize;
        sum = crc32c::crc32c_append(sum, &STEP[..n]);
        left -= n as u64;
    }
    sum
}

/// The segments of a piece cut at the block boundaries of its chunk: (offset in the chunk,
/// length). An empty piece has none; `block` must be positive.
pub fn segments(p: &Piece, block: u64) -> impl Iterator<Item = (u64, u64)> {
    let block = block.max(1);
    let end = u64::from(p.offset) + u64::from(p.len);
    let mut at = u64::from(p.offset);
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let next = ((at / block) + 1).saturating_mul(block).min(end);
        let seg = (at, next - at);
        at = next;
        Some(seg)
    })
}

/// How many checksums the pieces take.
pub fn count(pieces: &[Piece], block: u64) -> usize {
    let block = block.max(1);
    pieces
        .iter()
        .filter(|p| p.len > 0)
        .map(|p| {
            let first = u64::from(p.offset) / block;
            let last = (u64::from(p.offset) + u64::from(p.len) - 1) / block;
            (last - first + 1) as usize
        })
        .sum()
}

/// The checksums of `data`, the pieces' bytes back to back (as many bytes as they cover).
pub fn sums(pieces: &[Piece], data: &[u8], block: u64) -> Vec<u32> {
    let mut out = Vec::with_capacity(count(pieces, block));
    let mut pos = 0usize;
    for p in pieces {
        for (_, len) in segments(p, block) {
            let end = (pos + len as usize).min(data.len());
            out.push(crc(&data[pos.min(end)..end]));
            pos = end;
        }
    }
    out
}

/// Where data and its checksums disagree: the first bad segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    pub chunk: u64,
    /// Offset of the segment inside its chunk.
    pub offset: u64,
    pub len: u64,
}

/// Checks `data` (the pieces' bytes back to back) against `sums`. A wrong number of
/// checksums or bytes is EPROTO; a bad segment is `Ok(Some(mismatch))`.
pub fn verify(
    pieces: &[Piece],
    data: &[u8],
    sums: &[u32],
    block: u64,
) -> Result<Option<Mismatch>, Errno> {
    let want = count(pieces, block);
    let bytes: u64 = pieces.iter().map(|p| u64::from(p.len)).sum();
    if sums.len() != want || bytes != data.len() as u64 {
        return Err(Errno::new(
            libc::EPROTO,
            format!(
                "malformed message: {} checksums for {} bytes, expected {want} for {bytes}",
                sums.len(),
                data.len()
            ),
        ));
    }
    let mut pos = 0usize;
    let mut i = 0usize;
    for p in pieces {
        for (offset, len) in segments(p, block) {
            let end = pos + len as usize;
            if crc(&data[pos..end]) != sums[i] {
                return Ok(Some(Mismatch {
                    chunk: p.chunk,
                    offset,
                    len,
                }));
            }
            pos = end;
            i += 1;
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(chunk: u64, offset: u32, len: u32) -> Piece {
        Piece { chunk, offset, len }
    }

    #[test]
    fn pieces_are_cut_at_block_boundaries() {
        let segs: Vec<_> = segments(&p(0, 100, 300), 128).collect();
        assert_eq!(segs, vec![(100, 28), (128, 128), (256, 128), (384, 16)]);
        assert_eq!(count(&[p(0, 100, 300), p(1, 0, 0), p(2, 0, 128)], 128), 5);
        assert_eq!(zeros_crc(5000), crc(&[0u8; 5000]));
        assert_eq!(zeros_crc(0), 0);
    }

    #[test]
    fn a_flipped_bit_is_found_and_a_wrong_count_is_a_protocol_error() {
        let pieces = [p(3, 10, 200), p(4, 0, 64)];
        let mut data: Vec<u8> = (0..264u32).map(|i| i as u8).collect();
        let sums = sums(&pieces, &data, 64);
        assert_eq!(verify(&pieces, &data, &sums, 64).unwrap(), None);
        data[150] ^= 4;
        assert_eq!(
            verify(&pieces, &data, &sums, 64).unwrap(),
            Some(Mismatch {
                chunk: 3,
                offset: 128,
                len: 64
            })
        );
        assert_eq!(
            verify(&pieces, &data, &sums[1..], 64).unwrap_err().errno,
            libc::EPROTO
        );
        assert!(verify(&pieces, &data[1..], &sums, 64).is_err());
    }

    proptest! {
        #[test]
        fn segments_cover_the_piece(offset in 0u32..10_000, len in 0u32..10_000, block in 1u64..3000) {
            let piece = p(1, offset, len);
            let segs: Vec<_> = segments(&piece, block).collect();
            prop_assert_eq!(segs.len(), count(&[piece], block));
            prop_assert_eq!(segs.iter().map(|s| s.1).sum::<u64>(), u64::from(len));
            for (at, n) in segs {
                prop_assert!(n > 0);
                prop_assert_eq!(at / block, (at + n - 1) / block);
            }
        }
    }
}
