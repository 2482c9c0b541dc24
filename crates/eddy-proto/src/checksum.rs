//! End-to-end checksums (decision 0019): CRC32C (hardware-accelerated by the `crc-fast`
//! crate: folding with VPCLMULQDQ where the CPU has it, SSE 4.2 otherwise) of each block-aligned segment of the pieces of a read or write. A piece is cut at
//! the block boundaries of its chunk; a `Write` carries one checksum per segment, computed by
//! the client, and so does a checked read reply, computed (or, for whole blocks, stored) by
//! the daemon. Both sides use these functions, so they cut the same way.

use crate::{Errno, Piece};

/// The CRC32C of `bytes`.
pub fn crc(bytes: &[u8]) -> u32 {
    // CRC-32/ISCSI is CRC32C; the 64-bit result holds the 32-bit checksum.
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

/// The CRC32C of `a ‖ bytes` from the CRC32C of `a`.
pub fn crc_append(crc_a: u32, bytes: &[u8]) -> u32 {
    combine(crc_a, crc(bytes), bytes.len() as u64)
}

/// The CRC32C of `len` zero bytes (a hole, a block never written), without reading them.
pub fn zeros_crc(len: u64) -> u32 {
    // The register starts at all ones, zero bytes only shift it, the result is inverted.
    !shift(!0, len)
}

/// The CRC32C of `a ‖ b` from the CRC32C of `a`, that of `b` and the length of `b`.
pub fn combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    shift(crc_a, len_b) ^ crc_b
}

/// The checksum of a block after `n` of its bytes, ending `after` bytes before the block's
/// end, are replaced: `sum` is the block's checksum before, `old` and `new` those of the
/// `n` bytes replaced and of the `n` bytes replacing them. Only those bytes are read, and
/// damage elsewhere in the block is carried into the result, never hidden by it: the CRC is
/// linear, so the new checksum is the old one plus the checksum of the change (the XOR of
/// old and new bytes, zeros elsewhere); leading zeros do not change a CRC's linear part and
/// the `after` trailing ones shift it.
pub fn patch(sum: u32, old: u32, new: u32, after: u64) -> u32 {
    sum ^ shift(old ^ new, after)
}

/// CRC32C's polynomial, bit-reversed (as the SSE 4.2 instruction uses it).
const POLY: u32 = 0x82F6_3B78;

/// a × b modulo the polynomial, both bit-reversed (x⁰ is the top bit); without branches
/// on the bits (they would be mispredicted half the time).
const fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut p = 0u32;
    let mut i = 0;
    while i < 32 {
        p ^= b & 0u32.wrapping_sub((a >> (31 - i)) & 1);
        b = (b >> 1) ^ (POLY & 0u32.wrapping_sub(b & 1));
        i += 1;
    }
    p
}

/// `X8N[j][d]` = x^(8·d·16^j) modulo the polynomial: what d·16^j zero bytes multiply a CRC
/// by, j = 0..16, d = 0..16 (a shift by n bytes takes one multiplication per non-zero hex
/// digit of n).
const X8N: [[u32; 16]; 16] = {
    let mut t = [[0u32; 16]; 16];
    let mut step = 1u32 << 23; // x⁸: one zero byte
    let mut j = 0;
    while j < 16 {
        let mut p = 1u32 << 31; // x⁰
        let mut d = 0;
        while d < 16 {
            t[j][d] = p;
            p = mul_mod(p, step);
            d += 1;
        }
        step = p; // x^(8·16^(j+1))
        j += 1;
    }
    t
};

/// `crc` after `len` zero bytes pass through the register: × x^(8·len) modulo the
/// polynomial, a few multiplications (zlib's `crc32_combine` does the same by powers of
/// two; the `crc32c` crate's combine squares 32×32 matrices instead, some 15 µs a call).
fn shift(crc: u32, len: u64) -> u32 {
    let mut p = crc;
    let (mut n, mut j) = (len, 0usize);
    while n != 0 {
        let d = (n & 15) as usize;
        if d != 0 {
            p = mul_mod(X8N[j][d], p);
        }
        n >>= 4;
        j += 1;
    }
    p
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
    let bytes = Piece::total(pieces);
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

    #[test]
    fn combine_and_patch_agree_with_computing_the_checksum() {
        let data: Vec<u8> = (0..70_000u32).map(|i| (i * 31 + i / 7) as u8).collect();
        for (a, b) in [(0, 0), (0, 10), (10, 0), (1, 65_536), (47_008, 22_992)] {
            let (x, y) = data[..a + b].split_at(a);
            assert_eq!(combine(crc(x), crc(y), b as u64), crc(&data[..a + b]));
            assert_eq!(
                combine(crc(x), crc(y), b as u64),
                crc32c::crc32c_combine(crc(x), crc(y), b)
            );
        }
        for n in [0u64, 1, 7, 4096, 65_536, 1 << 20] {
            assert_eq!(zeros_crc(n), crc(&vec![0u8; n as usize]));
        }
        // An independent implementation (the `crc32c` crate) agrees on every length the
        // vector paths cut differently, and on appending.
        for n in [
            0usize, 1, 15, 16, 63, 64, 255, 256, 4095, 4096, 65_536, 69_999,
        ] {
            assert_eq!(crc(&data[..n]), crc32c::crc32c(&data[..n]), "length {n}");
            let (x, y) = data[..n].split_at(n / 3);
            assert_eq!(crc_append(crc(x), y), crc32c::crc32c(&data[..n]));
        }
    }

    proptest! {
        #[test]
        fn a_patched_checksum_is_that_of_the_patched_block(
            block in proptest::collection::vec(any::<u8>(), 1..5000),
            at in any::<proptest::sample::Index>(),
            new in proptest::collection::vec(any::<u8>(), 0..5000),
            flip in any::<Option<proptest::sample::Index>>(),
        ) {
            let from = at.index(block.len());
            let n = new.len().min(block.len() - from);
            let new = &new[..n];
            let mut stored = block.clone();
            // A bit flipped somewhere (on disk) after the checksum was taken.
            if let Some(i) = flip {
                stored[i.index(block.len())] ^= 0x20;
            }
            let sum = patch(crc(&block), crc(&stored[from..from + n]), crc(new), (block.len() - from - n) as u64);
            let mut patched = stored.clone();
            patched[from..from + n].copy_from_slice(new);
            if flip.is_none() {
                prop_assert_eq!(sum, crc(&patched));
            } else {
                // Damage outside the patched bytes stays visible; damage the patch overwrote
                // leaves the checksum wrong too (the block reads as damaged, as it was):
                // never a fresh checksum over damaged bytes.
                prop_assert_ne!(sum, crc(&patched));
            }
        }

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
