//! The stream hint a read carries (decision 0072): which stream it belongs to (this client's
//! random lock session mixed with the handle's number: one per open handle of one process)
//! and how the stream reads, from a detector per handle: sequential (each read starts near
//! where the last ended), strided (three reads in a row at the same distance, larger than
//! the read), random (neither), unknown (the first read). `posix_fadvise` overrides it
//! (`SEQUENTIAL`: sequential, `RANDOM`: random). `stream_hints = false`: no hint is sent.
//!
//! Writes carry a hint too (decision 0074), from a detector of their own per handle (the
//! same rules; advice is about reads and does not change it), for every file, linked or
//! not: a daemon preallocates the next chunks of a sequential writer.

use crate::data::{Data, RA_ALWAYS, RA_NEVER};
use crate::File;
use eddy_proto::{Pattern, StreamHint};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Numbers the handles of this process: the stream of a handle is its number mixed with
/// the client's session.
static HANDLES: AtomicU64 = AtomicU64::new(1);

/// Reads in a row at the same distance, after the first, that make a stride.
const STRIDE_REPEATS: u32 = 2;

/// A handle's stream: its number and what its reads have shown.
#[derive(Debug)]
pub(crate) struct Stream {
    handle: u64,
    seen: Mutex<Seen>,
    /// What its writes have shown (decision 0074).
    written: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// The last read's offset and length.
    last: Option<(u64, u64)>,
    /// The distance between the last two reads' starts, and how many times in a row it was
    /// the same.
    stride: u64,
    repeats: u32,
}

impl Default for Stream {
    fn default() -> Stream {
        Stream {
            handle: HANDLES.fetch_add(1, Ordering::Relaxed),
            seen: Mutex::new(Seen::default()),
            written: Mutex::new(Seen::default()),
        }
    }
}

impl Seen {
    /// Takes in a read of `len` bytes at `offset` and says how the stream reads; `near` is
    /// the distance under which a read counts as following the last one (a kernel reading
    /// ahead sends several reads at once, not always in order).
    fn observe(&mut self, offset: u64, len: u64, near: u64) -> Pattern {
        let Some((last, last_len)) = self.last.replace((offset, len)) else {
            return Pattern::Unknown;
        };
        let distance = offset.wrapping_sub(last);
        if offset > last && distance == self.stride {
            self.repeats = self.repeats.saturating_add(1);
        } else {
            self.stride = if offset > last { distance } else { 0 };
            self.repeats = 1;
        }
        if self.repeats >= STRIDE_REPEATS && self.stride > len.max(last_len) {
            return Pattern::Strided {
                stride: self.stride,
            };
        }
        if last.saturating_add(last_len).abs_diff(offset) <= near {
            Pattern::Sequential
        } else {
            Pattern::Random
        }
    }
}

/// Mixes the session and the handle's number into a stream id (splitmix64's finaliser).
fn stream_id(session: u128, handle: u64) -> u64 {
    let mut x =
        (session as u64) ^ ((session >> 64) as u64) ^ handle.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl Data<'_> {
    /// The hint of a read of `len` bytes at `offset` of `f`: none for a file that is not
    /// linked (its data is in the daemons, nothing to read ahead) or with `stream_hints`
    /// off. Every read of a linked file goes through the detector, hint or not.
    pub(crate) fn stream_hint(&self, f: &File, offset: u64, len: usize) -> Option<StreamHint> {
        let cfg = self.config();
        if !cfg.stream_hints || f.backing().is_none() {
            return None;
        }
        let stream = &f.0.stream;
        let seen =
            eddy_proto::sync::lock(&stream.seen).observe(offset, len as u64, 4 * cfg.chunk_size);
        let pattern = match f.0.ra_mode.load(Ordering::Relaxed) {
            RA_ALWAYS => Pattern::Sequential,
            RA_NEVER => Pattern::Random,
            _ => seen,
        };
        Some(StreamHint {
            stream: stream_id(self.lock_session(), stream.handle),
            pattern,
        })
    }

    /// The hint of a write of `len` bytes at `offset` of `f` (decision 0074): how the
    /// handle's writes go, for any file; none with `stream_hints` off.
    pub(crate) fn write_hint(&self, f: &File, offset: u64, len: usize) -> Option<StreamHint> {
        let cfg = self.config();
        if !cfg.stream_hints {
            return None;
        }
        let stream = &f.0.stream;
        let pattern =
            eddy_proto::sync::lock(&stream.written).observe(offset, len as u64, 4 * cfg.chunk_size);
        Some(StreamHint {
            stream: stream_id(self.lock_session(), stream.handle),
            pattern,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEAR: u64 = 4 << 20;

    #[test]
    fn a_constant_distance_larger_than_the_read_is_a_stride() {
        let mut s = Seen::default();
        let stride = 16 << 20;
        let seen: Vec<Pattern> = (0..5)
            .map(|i| s.observe(i * stride, 1 << 20, NEAR))
            .collect();
        assert_eq!(seen[0], Pattern::Unknown);
        assert_eq!(seen[1], Pattern::Random);
        for p in &seen[2..] {
            assert_eq!(*p, Pattern::Strided { stride });
        }
        // A jump elsewhere ends it.
        assert_eq!(s.observe(3, 1 << 20, NEAR), Pattern::Random);
    }

    #[test]
    fn reads_one_after_the_other_are_sequential_and_jumps_random() {
        let mut s = Seen::default();
        let len = 1 << 20;
        assert_eq!(s.observe(0, len, NEAR), Pattern::Unknown);
        for i in 1..6 {
            assert_eq!(s.observe(i * len, len, NEAR), Pattern::Sequential, "{i}");
        }
        assert_eq!(s.observe(900 << 20, len, NEAR), Pattern::Random);
        assert_eq!(s.observe(7 << 20, len, NEAR), Pattern::Random);
        // Out of order by a little, as a kernel's read-ahead: still sequential.
        assert_eq!(s.observe(9 << 20, len, NEAR), Pattern::Sequential);
        assert_eq!(s.observe(8 << 20, len, NEAR), Pattern::Sequential);
    }

    #[test]
    fn stream_ids_differ_by_handle_and_session() {
        assert_ne!(stream_id(1, 1), stream_id(1, 2));
        assert_ne!(stream_id(1, 1), stream_id(2, 1));
    }
}
