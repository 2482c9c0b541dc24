//! Tests of the framing: round trips, frames arriving in pieces, announced lengths, bounds,
//! truncation, the send queue and garbage.

use super::*;
use proptest::prelude::*;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::ReadBuf;

const MAX: u32 = 1 << 20;

fn bytes_of(frames: &[OutFrame]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        out.extend_from_slice(&f.head);
        out.extend_from_slice(&f.payload);
    }
    out
}

/// A stream that hands out its bytes `step` at a time.
struct Trickle {
    data: Vec<u8>,
    at: usize,
    step: usize,
}

impl AsyncRead for Trickle {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = self
            .step
            .min(self.data.len() - self.at)
            .min(buf.remaining());
        let at = self.at;
        buf.put_slice(&self.data[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

async fn read_all(data: Vec<u8>, step: usize, max: u32) -> (Vec<Frame>, FrameError) {
    let mut r = FrameReader::new(Trickle { data, at: 0, step }, max);
    let mut frames = Vec::new();
    loop {
        match r.next().await {
            Ok(f) => frames.push(f),
            Err(e) => return (frames, e),
        }
    }
}

fn frame(id: u64, meta: &[u8], payload: &[u8]) -> OutFrame {
    OutFrame::raw(id, meta, Bytes::copy_from_slice(payload), MAX).unwrap()
}

#[tokio::test]
async fn round_trip() {
    let frames = [
        frame(7, b"meta", b"payload"),
        frame(8, b"", b""),
        frame(9, b"m", b""),
    ];
    let mut buf = Vec::new();
    write_frames(&mut buf, &frames).await.unwrap();
    assert_eq!(buf, bytes_of(&frames));
    let (got, end) = read_all(buf.clone(), usize::MAX, MAX).await;
    assert!(matches!(end, FrameError::Closed));
    let want = |id, m: &'static [u8], p: &'static [u8]| Frame {
        id,
        meta: Bytes::from_static(m),
        payload: Bytes::from_static(p),
    };
    assert_eq!(
        got,
        vec![
            want(7, b"meta", b"payload"),
            want(8, b"", b""),
            want(9, b"m", b"")
        ]
    );
    // The unbuffered reader agrees.
    let mut r = &buf[..];
    assert_eq!(read_frame(&mut r, MAX).await.unwrap(), got[0]);
}

#[tokio::test]
async fn a_frame_arriving_one_byte_at_a_time() {
    let frames = [frame(1, b"abc", &[5u8; 300]), frame(2, b"de", b"")];
    for step in [1, 2, 3, 7, 17, 4096] {
        let (got, end) = read_all(bytes_of(&frames), step, MAX).await;
        assert!(matches!(end, FrameError::Closed), "step {step}: {end}");
        assert_eq!(got.len(), 2, "step {step}");
        assert_eq!(&got[0].payload[..], &[5u8; 300][..]);
        assert_eq!((&got[1].meta[..], got[1].id), (&b"de"[..], 2));
    }
}

#[tokio::test]
async fn next_len_announces_each_frame_before_it_is_read() {
    let frames = [frame(1, b"abc", &[5u8; 300]), frame(2, b"de", b"")];
    let sizes: Vec<u64> = frames
        .iter()
        .map(|f| (f.head.len() + f.payload.len()) as u64)
        .collect();
    for step in [1, 2, 3, 5, 4096] {
        let data = bytes_of(&frames);
        let mut r = FrameReader::new(Trickle { data, at: 0, step }, MAX);
        for (i, want) in sizes.iter().enumerate() {
            assert_eq!(r.next_len().await.unwrap(), Some(*want), "step {step}");
            assert_eq!(r.next().await.unwrap().id, i as u64 + 1, "step {step}");
        }
        assert_eq!(r.next_len().await.unwrap(), None);
        assert!(matches!(r.next().await, Err(FrameError::Closed)));
    }
    // Cut inside a length prefix: no length, and `next` reports the truncation.
    let mut r = FrameReader::new(
        Trickle {
            data: vec![9, 0],
            at: 0,
            step: 1,
        },
        MAX,
    );
    assert_eq!(r.next_len().await.unwrap(), None);
    assert!(matches!(r.next().await, Err(FrameError::Truncated { .. })));
}

#[tokio::test]
async fn a_payload_split_over_reads_is_one_buffer() {
    // 200 KiB of payload through 8 KiB reads: whole, in order, and not copied out of the
    // frame buffer (the payload points into the frame's allocation).
    let payload: Vec<u8> = (0..200 * 1024u32).map(|i| (i % 251) as u8).collect();
    let (got, _) = read_all(bytes_of(&[frame(3, b"w", &payload)]), 8192, MAX).await;
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].payload[..], &payload[..]);
    let meta_end = got[0].meta.as_ptr() as usize + got[0].meta.len();
    assert_eq!(got[0].payload.as_ptr() as usize, meta_end);
}

#[tokio::test]
async fn oversize_undersize_and_garbled_are_rejected() {
    let too_big = u32::MAX.to_le_bytes().to_vec();
    let (_, e) = read_all(too_big.clone(), 1, 1024).await;
    assert!(matches!(e, FrameError::TooLarge { .. }), "{e}");
    let mut r = &too_big[..];
    assert!(matches!(
        read_frame(&mut r, 1024).await,
        Err(FrameError::TooLarge { .. })
    ));
    let (_, e) = read_all(3u32.to_le_bytes().to_vec(), 1, 1024).await;
    assert!(matches!(e, FrameError::TooShort(3)), "{e}");
    // A meta length past the frame's end.
    let mut garbled = 20u32.to_le_bytes().to_vec();
    garbled.extend_from_slice(&1u64.to_le_bytes());
    garbled.extend_from_slice(&9u32.to_le_bytes());
    garbled.extend_from_slice(&[0u8; 8]);
    let (_, e) = read_all(garbled, 1, 1024).await;
    assert!(matches!(e, FrameError::Garbled { meta: 9, len: 20 }), "{e}");
    // Writing an oversize frame is refused too.
    assert!(OutFrame::raw(1, &[0u8; 2000], Bytes::new(), 1024).is_err());
    assert!(OutFrame::raw(1, b"", Bytes::from(vec![0u8; 2000]), 1024).is_err());
}

#[tokio::test]
async fn truncated_frame_is_an_error_not_a_hang() {
    let mut buf = bytes_of(&[frame(1, b"0123456789", b"abc")]);
    buf.truncate(buf.len() - 3);
    let (got, e) = read_all(buf.clone(), 4, MAX).await;
    assert!(got.is_empty());
    assert!(matches!(e, FrameError::Truncated { .. }), "{e}");
    let mut r = &buf[..];
    assert!(matches!(
        read_frame(&mut r, MAX).await,
        Err(FrameError::Truncated { .. })
    ));
}

proptest! {
    #[test]
    fn frames_round_trip(
        frames in proptest::collection::vec(
            (any::<u64>(),
             proptest::collection::vec(any::<u8>(), 0..64),
             proptest::collection::vec(any::<u8>(), 0..3000)),
            0..6),
        step in 1usize..5000,
    ) {
        let out: Vec<OutFrame> = frames.iter().map(|(id, m, p)| frame(*id, m, p)).collect();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let (got, end) = rt.block_on(read_all(bytes_of(&out), step, MAX));
        prop_assert!(matches!(end, FrameError::Closed));
        prop_assert_eq!(got.len(), frames.len());
        for (g, (id, m, p)) in got.iter().zip(&frames) {
            prop_assert_eq!(g.id, *id);
            prop_assert_eq!(&g.meta[..], &m[..]);
            prop_assert_eq!(&g.payload[..], &p[..]);
        }
    }

    #[test]
    fn a_send_queue_sends_every_byte_in_order_whatever_the_socket_takes(
        frames in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..64),
             proptest::collection::vec(any::<u8>(), 0..3000)),
            1..8),
        takes in proptest::collection::vec(0usize..2000, 1..64)
            .prop_filter("the socket takes something", |t| t.iter().any(|&n| n > 0)),
    ) {
        // A socket that takes `takes[i]` bytes on its i-th write (0: would block).
        let out: Vec<OutFrame> =
            frames.iter().enumerate().map(|(i, (m, p))| frame(i as u64, m, p)).collect();
        let want = bytes_of(&out);
        let mut q = SendQueue::default();
        let mut got = Vec::new();
        let mut turn = 0usize;
        let mut pushed = out.into_iter();
        loop {
            if let Some(f) = pushed.next() {
                q.push(f).unwrap();
            }
            let done = q
                .send_with(|slices| {
                    let take = takes[turn % takes.len()];
                    turn += 1;
                    if take == 0 {
                        return Err(std::io::ErrorKind::WouldBlock.into());
                    }
                    let mut n = 0;
                    for s in slices {
                        let k = s.len().min(take - n);
                        got.extend_from_slice(&s[..k]);
                        n += k;
                        if n == take {
                            break;
                        }
                    }
                    Ok(n)
                })
                .unwrap();
            prop_assert_eq!(done, q.is_empty());
            if done && pushed.len() == 0 {
                break;
            }
            prop_assert!(turn < 100_000, "no progress");
        }
        prop_assert_eq!(got, want);
    }

    #[test]
    fn garbage_never_panics_nor_hangs(
        bytes in proptest::collection::vec(any::<u8>(), 0..2048),
        step in 1usize..64,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        // Ends with an error or at the end of the stream, whatever the bytes.
        let (got, _) = rt.block_on(read_all(bytes.clone(), step, 4096));
        prop_assert!(got.len() <= bytes.len() / HEADER_BYTES);
        let mut r = &bytes[..];
        let _ = rt.block_on(read_frame(&mut r, 4096));
    }
}
