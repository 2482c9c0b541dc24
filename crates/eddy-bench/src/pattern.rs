//! The data pattern every write phase writes and every read phase verifies.
//!
//! A byte's value is a pure function of (file, offset, writer rank): the file's path relative
//! to the work directory and the writer's rank give a 64-bit key, and each aligned 8-byte word
//! at offset `o` is `mix(key, o / 8)`. Any offset can be generated without the bytes before it,
//! so shared-file and random-read phases verify exactly what they read.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Size of the scratch buffer used while verifying.
const VERIFY_CHUNK: usize = 64 * 1024;

/// The key of the pattern written by `rank` into the file at `rel_path`.
pub fn key(rel_path: &str, rank: u32) -> u64 {
    xxh3_64_with_seed(
        rel_path.as_bytes(),
        0x00ed_d7be_0000_0000_u64 ^ u64::from(rank),
    )
}

/// Words per block: each 4 KiB block of a file gets its own mixed seed.
const WORDS_PER_BLOCK: u64 = 512;
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// splitmix64 finaliser: a cheap, well-distributed 64-bit mixer.
fn mix(key: u64, word: u64) -> u64 {
    let mut z = key.wrapping_add(word.wrapping_mul(GOLDEN));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 8-byte word number `w` of the pattern: a per-block seed (one full mix per 4 KiB)
/// combined with the word's place in the block, cheap enough not to dominate a write phase.
fn word(block_seed: u64, w: u64) -> [u8; 8] {
    (block_seed ^ ((w % WORDS_PER_BLOCK) + 1).wrapping_mul(GOLDEN)).to_le_bytes()
}

fn block_seed(key: u64, w: u64) -> u64 {
    mix(key, w / WORDS_PER_BLOCK)
}

/// Fills `buf` with the pattern of `key` as it appears at file offset `offset`.
pub fn fill(buf: &mut [u8], key: u64, offset: u64) {
    let mut pos = 0usize;
    let mut w = offset / 8;
    let lead = (offset % 8) as usize;
    if lead != 0 {
        let bytes = word(block_seed(key, w), w);
        let n = (8 - lead).min(buf.len());
        buf[..n].copy_from_slice(&bytes[lead..lead + n]);
        pos += n;
        w += 1;
    }
    let mut seed = block_seed(key, w);
    let mut chunks = buf[pos..].chunks_exact_mut(8);
    for c in &mut chunks {
        if w.is_multiple_of(WORDS_PER_BLOCK) {
            seed = block_seed(key, w);
        }
        c.copy_from_slice(&word(seed, w));
        w += 1;
    }
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let n = rest.len();
        rest.copy_from_slice(&word(block_seed(key, w), w)[..n]);
    }
}

/// A verification failure: the first byte that differs from the pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("data mismatch at file offset {offset}: expected byte {expected:#04x}, read {found:#04x}")]
pub struct Mismatch {
    pub offset: u64,
    pub expected: u8,
    pub found: u8,
}

/// Checks that `data`, read at file offset `offset`, is the pattern of `key`.
pub fn verify(data: &[u8], key: u64, offset: u64) -> Result<(), Mismatch> {
    let mut scratch = vec![0u8; VERIFY_CHUNK.min(data.len())];
    let mut done = 0usize;
    while done < data.len() {
        let n = (data.len() - done).min(VERIFY_CHUNK);
        let expect = &mut scratch[..n];
        fill(expect, key, offset + done as u64);
        let got = &data[done..done + n];
        if expect != got {
            let i = expect
                .iter()
                .zip(got)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Err(Mismatch {
                offset: offset + (done + i) as u64,
                expected: expect[i],
                found: got[i],
            });
        }
        done += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_offset_matches_the_whole_buffer() {
        let k = key("ior-easy/file.3", 3);
        let mut whole = vec![0u8; 1000];
        fill(&mut whole, k, 0);
        for start in [0usize, 1, 7, 8, 9, 13, 500, 993] {
            for len in [0usize, 1, 5, 8, 17, 64] {
                let end = (start + len).min(whole.len());
                let mut part = vec![0u8; end - start];
                fill(&mut part, k, start as u64);
                assert_eq!(part, whole[start..end], "start {start} len {len}");
            }
        }
    }

    #[test]
    fn verify_accepts_pattern_and_reports_first_bad_byte() {
        let k = key("mdt-hard/f.0.1", 0);
        let mut buf = vec![0u8; 200_000];
        fill(&mut buf, k, 4093);
        assert_eq!(verify(&buf, k, 4093), Ok(()));
        buf[150_001] ^= 0x40;
        let err = verify(&buf, k, 4093).unwrap_err();
        assert_eq!(err.offset, 4093 + 150_001);
        assert_eq!(err.found, err.expected ^ 0x40);
    }

    #[test]
    fn pattern_depends_on_file_rank_and_offset() {
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 64];
        fill(&mut a, key("x", 0), 0);
        fill(&mut b, key("x", 1), 0);
        assert_ne!(a, b);
        fill(&mut b, key("y", 0), 0);
        assert_ne!(a, b);
        fill(&mut b, key("x", 0), 8);
        assert_ne!(a, b);
        assert!(verify(&a, key("x", 1), 0).is_err());
    }

    #[test]
    fn long_buffers_cross_blocks_consistently() {
        let k = key("ior-easy/shared", 1);
        let mut whole = vec![0u8; 3 * 4096 + 100];
        fill(&mut whole, k, 0);
        let mut part = vec![0u8; 4096 + 33];
        fill(&mut part, k, 4095);
        assert_eq!(part, whole[4095..4095 + 4096 + 33]);
        // Distinct blocks differ.
        assert_ne!(whole[..4096], whole[4096..8192]);
    }

    #[test]
    fn zeros_never_verify() {
        let zeros = vec![0u8; 4096];
        assert!(verify(&zeros, key("f", 0), 0).is_err());
    }
}
