//! Per-stream read-ahead (decision 0072): what a read's `StreamHint` says of its stream
//! (sequential, strided with its stride, random), kept per stream and file in a bounded
//! table (no data), turned into the chunks of a linked file this daemon owns that the
//! stream will read next and that are not here yet. The caller fetches them in the
//! background (`State::read_ahead`) through `Tier::prefetch`.
//!
//! The table holds at most `MAX_STREAMS` streams; a new stream past that takes the place of
//! the one least recently read. An evicted stream loses only where its read-ahead had got
//! to: its next read with a hint starts it again from that read (the chunks already fetched
//! are found here and not fetched twice).

use super::Tier;
use eddy_proto::{Backing, FileId, Pattern, Piece, StreamHint};
use std::collections::HashMap;

/// Streams (stream id, file) whose read-ahead state a daemon keeps at most.
pub const MAX_STREAMS: usize = 4096;

/// Where a stream's read-ahead has got to.
#[derive(Debug, Clone, Copy)]
struct Entry {
    pattern: Pattern,
    /// Start of the stream's last read with a hint (bytes).
    last: u64,
    /// Everything before this offset that the stream will read was asked for already.
    issued: u64,
    /// When it was last used (the table's clock).
    used: u64,
}

/// The table of streams.
#[derive(Debug, Default)]
pub struct Streams {
    map: HashMap<(u64, FileId), Entry>,
    clock: u64,
}

impl Streams {
    /// Streams held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }

    /// Records a read of `[start, end)` by `hint.stream` of `id` and returns the byte
    /// ranges the stream will read next, below `size`, that were not asked for before: the
    /// next `window` chunks (of `cs` bytes) after `end` for a sequential stream, the next
    /// records (as long as this read, a stride apart) until they touch `window` chunks for
    /// a strided one. Nothing for a random or unknown stream, or a stride that is no stride
    /// (not past the read) or leaves the file.
    fn plan(
        &mut self,
        id: FileId,
        hint: StreamHint,
        (start, end): (u64, u64),
        (window, cs): (u64, u64),
        size: u64,
    ) -> Vec<(u64, u64)> {
        self.clock += 1;
        let key = (hint.stream, id);
        if !self.map.contains_key(&key) && self.map.len() >= MAX_STREAMS {
            if let Some(oldest) = self.map.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| *k) {
                self.map.remove(&oldest);
            }
        }
        let fresh = Entry {
            pattern: hint.pattern,
            last: start,
            issued: 0,
            used: self.clock,
        };
        let e = self.map.entry(key).or_insert(fresh);
        if e.pattern != hint.pattern || start.saturating_add(window.saturating_mul(cs)) < e.last {
            // Another pattern, or the stream went back further than a kernel's reads out of
            // order: start over from this read.
            *e = fresh;
        }
        e.last = start;
        e.used = self.clock;
        let mut out = Vec::new();
        match hint.pattern {
            Pattern::Sequential => {
                let from = end.max(e.issued);
                let to = end.saturating_add(window.saturating_mul(cs)).min(size);
                if from < to {
                    out.push((from, to));
                    e.issued = to;
                }
            }
            Pattern::Strided { stride } => {
                let len = end - start;
                // A stride that is no stride (0, or not past the read) or that leaves the
                // file is ignored.
                if stride <= len || len == 0 {
                    return out;
                }
                let mut covered = 0u64;
                let mut at = start;
                while covered < window {
                    let Some(next) = at.checked_add(stride).filter(|n| *n < size) else {
                        break;
                    };
                    at = next;
                    let to = at.saturating_add(len).min(size);
                    covered = covered.saturating_add((to - 1) / cs - at / cs + 1);
                    if at < e.issued {
                        continue;
                    }
                    out.push((at, to));
                    e.issued = at + 1;
                }
            }
            Pattern::Random | Pattern::Unknown => e.issued = 0,
        }
        out
    }
}

impl Tier {
    /// The chunks of `id` that the stream of a read of `pieces` will read next, that this
    /// daemon owns (first copy), holds not, and that lie in the backend copy: the read-ahead
    /// of that read, for the caller to fetch in the background. `window_chunks`: how far
    /// ahead (`stream_readahead_chunks`).
    pub fn plan_read_ahead(
        &self,
        id: FileId,
        pieces: &[Piece],
        backing: &Backing,
        hint: StreamHint,
        window_chunks: u32,
    ) -> Vec<u64> {
        let cs = self.chunk_size;
        let (Some(first), Some(last)) = (pieces.first(), pieces.last()) else {
            return Vec::new();
        };
        let at = |p: &Piece, extra: u64| {
            p.chunk
                .checked_mul(cs)
                .and_then(|b| b.checked_add(u64::from(p.offset)))
                .and_then(|b| b.checked_add(extra))
        };
        let (Some(start), Some(end)) = (at(first, 0), at(last, u64::from(last.len))) else {
            return Vec::new();
        };
        if end < start || window_chunks == 0 {
            return Vec::new();
        }
        let window = (u64::from(window_chunks), cs);
        let ranges = super::lock(&self.streams).plan(id, hint, (start, end), window, backing.size);
        let mut ks: Vec<u64> = Vec::new();
        for (from, to) in ranges {
            for k in from / cs..to.div_ceil(cs) {
                if ks.last() != Some(&k) {
                    ks.push(k);
                }
            }
        }
        ks.sort_unstable();
        ks.dedup();
        let maps = self.maps();
        ks.retain(|&k| {
            self.owns(id, k)
                && !maps.chunks.contains_key(&(id, k))
                && k.saturating_mul(cs) < backing.size
        });
        ks
    }

    /// Whether this daemon is the first owner of chunk k of `id` by the placement (every
    /// chunk, without the deployment's members): whose chunks it reads ahead, and
    /// preallocates for a sequential writer (decision 0074).
    pub fn owns_chunk(&self, id: FileId, k: u64) -> bool {
        self.owns(id, k)
    }

    /// Whether this daemon is the first owner of chunk k of `id` (all chunks, without the
    /// deployment's members).
    fn owns(&self, id: FileId, k: u64) -> bool {
        self.members
            .as_ref()
            .is_none_or(|(p, me)| p.chunk_owner(id, k) == *me)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn hint(pattern: Pattern) -> StreamHint {
        StreamHint { stream: 7, pattern }
    }

    #[test]
    fn sequential_streams_are_read_ahead_once_across_chunks() {
        let mut s = Streams::default();
        let h = hint(Pattern::Sequential);
        assert_eq!(
            s.plan(1, h, (0, MIB), (4, MIB), 100 * MIB),
            vec![(MIB, 5 * MIB)]
        );
        // The next read asks only for what lies past what was asked for.
        assert_eq!(
            s.plan(1, h, (MIB, 2 * MIB), (4, MIB), 100 * MIB),
            vec![(5 * MIB, 6 * MIB)]
        );
        // Never past the file.
        assert_eq!(
            s.plan(1, h, (98 * MIB, 99 * MIB), (4, MIB), 100 * MIB),
            vec![(99 * MIB, 100 * MIB)]
        );
        // Random stops it.
        assert!(s
            .plan(1, hint(Pattern::Random), (3, 4), (4, MIB), 100 * MIB)
            .is_empty());
    }

    #[test]
    fn strided_streams_get_their_next_records() {
        let mut s = Streams::default();
        let h = hint(Pattern::Strided { stride: 10 * MIB });
        assert_eq!(
            s.plan(1, h, (0, MIB), (2, MIB), 100 * MIB),
            vec![(10 * MIB, 11 * MIB), (20 * MIB, 21 * MIB)]
        );
        // Two records ahead of the next read, one of them asked for already.
        assert_eq!(
            s.plan(1, h, (10 * MIB, 11 * MIB), (2, MIB), 100 * MIB),
            vec![(30 * MIB, 31 * MIB)]
        );
    }

    #[test]
    fn absurd_strides_are_ignored() {
        let mut s = Streams::default();
        for stride in [0, 1, MIB, u64::MAX, u64::MAX / 2, 200 * MIB] {
            let h = hint(Pattern::Strided { stride });
            assert!(
                s.plan(1, h, (0, MIB), (4, MIB), 100 * MIB).is_empty(),
                "{stride}"
            );
        }
    }

    #[test]
    fn the_table_is_bounded_and_forgets_the_least_recently_read() {
        let mut s = Streams::default();
        for i in 0..(MAX_STREAMS as u64 + 10) {
            let h = StreamHint {
                stream: i,
                pattern: Pattern::Sequential,
            };
            s.plan(1, h, (0, MIB), (1, MIB), 100 * MIB);
        }
        assert_eq!(s.len(), MAX_STREAMS);
        assert!(!s.map.contains_key(&(0, 1)));
        assert!(s.map.contains_key(&(MAX_STREAMS as u64 + 9, 1)));
    }
}
