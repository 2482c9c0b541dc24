//! Splitting a byte range of a file into chunk pieces, grouped by the daemon that owns each
//! chunk and cut into messages no larger than the data limit of one RPC.

use eddy_placement::Placement;
use eddy_proto::{FileId, Piece};
use std::collections::BTreeMap;

/// A piece and where its bytes sit in the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub piece: Piece,
    pub buf_pos: usize,
}

/// One RPC's worth of pieces for one daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Batch {
    pub daemon: u32,
    pub spans: Vec<Span>,
    pub bytes: usize,
}

/// The chunk pieces covering `[offset, offset + len)`.
pub(crate) fn pieces(offset: u64, len: usize, chunk_size: u64) -> Vec<Span> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < len {
        let abs = offset + pos as u64;
        let chunk = abs / chunk_size;
        let in_chunk = abs % chunk_size;
        let n = ((chunk_size - in_chunk) as usize).min(len - pos);
        out.push(Span {
            piece: Piece {
                chunk,
                offset: in_chunk as u32,
                len: n as u32,
            },
            buf_pos: pos,
        });
        pos += n;
    }
    out
}

/// Groups the pieces of a range by owner daemon, in batches of at most `max_bytes` data bytes
/// (a single piece larger than that still goes alone).
pub(crate) fn batches(
    placement: &Placement,
    file_id: FileId,
    offset: u64,
    len: usize,
    chunk_size: u64,
    max_bytes: usize,
) -> Vec<Batch> {
    let mut by_daemon: BTreeMap<u32, Vec<Span>> = BTreeMap::new();
    for span in pieces(offset, len, chunk_size) {
        by_daemon
            .entry(placement.chunk_owner(file_id, span.piece.chunk))
            .or_default()
            .push(span);
    }
    cut(by_daemon, max_bytes)
}

/// Groups spans by every daemon `targets` names for each (a chunk with R copies goes to
/// each of its R owners), cut as `batches` cuts them.
pub(crate) fn batches_to(
    spans: impl IntoIterator<Item = Span>,
    targets: impl Fn(&Span) -> Vec<u32>,
    max_bytes: usize,
) -> Vec<Batch> {
    let mut by_daemon: BTreeMap<u32, Vec<Span>> = BTreeMap::new();
    for span in spans {
        for d in targets(&span) {
            by_daemon.entry(d).or_default().push(span);
        }
    }
    cut(by_daemon, max_bytes)
}

/// Cuts each daemon's spans into batches of at most `max_bytes` data bytes.
fn cut(by_daemon: BTreeMap<u32, Vec<Span>>, max_bytes: usize) -> Vec<Batch> {
    let mut out = Vec::new();
    for (daemon, spans) in by_daemon {
        let mut cur = Batch {
            daemon,
            spans: Vec::new(),
            bytes: 0,
        };
        for s in spans {
            if !cur.spans.is_empty() && cur.bytes + s.piece.len as usize > max_bytes {
                out.push(std::mem::replace(
                    &mut cur,
                    Batch {
                        daemon,
                        spans: Vec::new(),
                        bytes: 0,
                    },
                ));
            }
            cur.bytes += s.piece.len as usize;
            cur.spans.push(s);
        }
        if !cur.spans.is_empty() {
            out.push(cur);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pieces_cross_chunks() {
        let p = pieces(1000, 3000, 1024);
        let lens: Vec<u32> = p.iter().map(|s| s.piece.len).collect();
        assert_eq!(lens, vec![24, 1024, 1024, 928]);
        assert_eq!(p[0].piece.chunk, 0);
        assert_eq!(p[0].piece.offset, 1000);
        assert_eq!(p[3].piece.chunk, 3);
        assert_eq!(p[3].buf_pos, 24 + 2048);
        assert!(pieces(5, 0, 1024).is_empty());
    }

    proptest! {
        #[test]
        fn batches_cover_the_range_exactly(offset in 0u64..1_000_000, len in 0usize..200_000, cs in 1u64..5000, max in 1usize..50_000) {
            let placement = Placement::new(vec![0, 1, 2]).unwrap();
            let bs = batches(&placement, 7, offset, len, cs * 16, max);
            let mut covered = vec![false; len];
            for b in &bs {
                let mut sum = 0;
                for s in &b.spans {
                    prop_assert_eq!(placement.chunk_owner(7, s.piece.chunk), b.daemon);
                    prop_assert!(u64::from(s.piece.offset) + u64::from(s.piece.len) <= cs * 16);
                    prop_assert_eq!(offset + s.buf_pos as u64, s.piece.chunk * cs * 16 + u64::from(s.piece.offset));
                    for c in covered.iter_mut().skip(s.buf_pos).take(s.piece.len as usize) {
                        prop_assert!(!*c);
                        *c = true;
                    }
                    sum += s.piece.len as usize;
                }
                prop_assert_eq!(sum, b.bytes);
                prop_assert!(b.spans.len() == 1 || b.bytes <= max);
            }
            prop_assert!(covered.iter().all(|&c| c));
        }

        #[test]
        fn replicated_batches_give_each_piece_to_each_owner(offset in 0u64..1_000_000, len in 0usize..200_000, max in 1usize..50_000) {
            let placement = Placement::new(vec![0, 1, 2, 3]).unwrap();
            let cs = 64 * 1024;
            let owners = |s: &Span| placement.owners(eddy_placement::chunk_hash(7, s.piece.chunk), 2);
            let bs = batches_to(pieces(offset, len, cs), owners, max);
            let mut copies = vec![0u32; len];
            for b in &bs {
                for s in &b.spans {
                    prop_assert!(owners(s).contains(&b.daemon));
                    for c in copies.iter_mut().skip(s.buf_pos).take(s.piece.len as usize) {
                        *c += 1;
                    }
                }
            }
            prop_assert!(copies.iter().all(|&c| c == 2));
        }
    }
}
