//! Protection of the frames that follow the handshake (decision 0022).
//!
//! Three modes, agreed in the handshake (both hellos carry the mode and both proofs cover it):
//!
//! - `Clear`: frames as they are (decision 0014); nothing added, nothing checked.
//! - `Mac`: every frame carries a 32-byte tag after its payload, keyed BLAKE3 (the `blake3`
//!   crate's keyed mode, a PRF and so a MAC) over the direction, the frame's sequence number
//!   in that direction and the whole frame (length prefix, id, meta length, meta, payload; the
//!   length counts the tag). The tag is computed over the frame's pieces as they are, so the
//!   payload is not copied; BLAKE3 hashes a large payload with SIMD across its 1 KiB chunks,
//!   several times faster than HMAC-SHA256 (decision 0022 has the figures).
//! - `Sealed`: the meta and payload are encrypted with AES-256-GCM (`ring`'s, which uses the
//!   CPU's AES and carry-less multiply instructions), nonce = direction ‖ sequence number; the
//!   16-byte header stays in clear as associated data and the 16-byte GCM tag follows the
//!   ciphertext. The frame is assembled into one buffer and encrypted in place there.
//!
//! Keys are per connection and per direction: HKDF-SHA256 with the deployment secret as the
//! input key material, the daemon's nonce followed by the client's as the salt, and a label
//! naming the mode and the direction as the info. The sequence numbers are implicit: each
//! side counts the frames it sent and received since the handshake, from 0. A frame that was
//! changed, injected, replayed, dropped (the next one then carries the wrong number),
//! reordered, sent the other way or made with another key fails its check; the reader
//! reports `FrameError::Forged` and refuses every later frame, and its owner closes the
//! connection.

use bytes::{BufMut, Bytes, BytesMut};
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::sync::Arc;

/// Bytes of a `Mac` tag (keyed BLAKE3, not truncated).
pub const MAC_TAG_BYTES: usize = 32;
/// Bytes of a `Sealed` tag (the GCM tag).
pub const SEAL_TAG_BYTES: usize = 16;

/// How the frames after the handshake are protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mode {
    Clear,
    Mac,
    Sealed,
}

impl Mode {
    /// Bytes this mode adds to every frame.
    pub fn tag_bytes(self) -> usize {
        match self {
            Mode::Clear => 0,
            Mode::Mac => MAC_TAG_BYTES,
            Mode::Sealed => SEAL_TAG_BYTES,
        }
    }

    /// The name the configuration uses.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Clear => "clear",
            Mode::Mac => "mac",
            Mode::Sealed => "sealed",
        }
    }

    fn label(self) -> u8 {
        match self {
            Mode::Clear => 0,
            Mode::Mac => 1,
            Mode::Sealed => 2,
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which way a frame travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    ToDaemon,
    ToClient,
}

impl Direction {
    fn label(self) -> u8 {
        match self {
            Direction::ToDaemon => 1,
            Direction::ToClient => 2,
        }
    }
}

/// A connection's key for one direction.
#[derive(Clone)]
enum Key {
    /// Keyed once; cloned per frame.
    Mac(Box<blake3::Hasher>),
    Sealed(Arc<LessSafeKey>),
}

/// One direction of a protected connection: its key, its direction and the number of the
/// next frame. The sender keeps a `Sealer`, the receiver an `Opener` of the same keys.
#[derive(Clone)]
struct Stream {
    key: Key,
    dir: Direction,
    seq: u64,
}

impl Stream {
    fn new(secret: &[u8], mode: Mode, salt: &[u8], dir: Direction) -> Option<Stream> {
        let mut okm = [0u8; 32];
        let info = [b"eddy wire v1 ".as_slice(), &[mode.label(), dir.label()]].concat();
        hkdf::Hkdf::<Sha256>::new(Some(salt), secret)
            .expand(&info, &mut okm)
            .ok()?;
        let key = match mode {
            Mode::Clear => return None,
            Mode::Mac => Key::Mac(Box::new(blake3::Hasher::new_keyed(&okm))),
            Mode::Sealed => Key::Sealed(Arc::new(LessSafeKey::new(
                UnboundKey::new(&AES_256_GCM, &okm).ok()?,
            ))),
        };
        Some(Stream { key, dir, seq: 0 })
    }

    fn tag_bytes(&self) -> usize {
        match self.key {
            Key::Mac(_) => MAC_TAG_BYTES,
            Key::Sealed(_) => SEAL_TAG_BYTES,
        }
    }

    /// The number of this frame; the next one gets the following number.
    fn next_seq(&mut self) -> Result<u64, super::frame::FrameError> {
        let seq = self.seq;
        // 2^64 frames is beyond any connection's life; a nonce is never used twice.
        self.seq = seq
            .checked_add(1)
            .ok_or(super::frame::FrameError::Exhausted)?;
        Ok(seq)
    }

    fn nonce(&self, seq: u64) -> Nonce {
        let mut n = [0u8; 12];
        n[3] = self.dir.label();
        n[4..].copy_from_slice(&seq.to_le_bytes());
        Nonce::assume_unique_for_key(n)
    }

    fn mac(key: &blake3::Hasher, dir: Direction, seq: u64, pieces: &[&[u8]]) -> blake3::Hash {
        let mut m = key.clone();
        m.update(&[dir.label()]);
        m.update(&seq.to_le_bytes());
        for p in pieces {
            m.update(p);
        }
        m.finalize()
    }
}

/// The keys of one connection, from the handshake's secret and nonces. `None` for `Clear`.
pub struct Keys {
    mode: Mode,
    to_daemon: Stream,
    to_client: Stream,
}

impl Keys {
    /// Derives both directions' keys (HKDF-SHA256; see the module's comment).
    pub fn derive(
        secret: &[u8],
        mode: Mode,
        daemon_nonce: &[u8],
        client_nonce: &[u8],
    ) -> Option<Keys> {
        let salt = [daemon_nonce, client_nonce].concat();
        Some(Keys {
            mode,
            to_daemon: Stream::new(secret, mode, &salt, Direction::ToDaemon)?,
            to_client: Stream::new(secret, mode, &salt, Direction::ToClient)?,
        })
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The client's ends: it seals what goes to the daemon and opens what comes back.
    pub fn client(self) -> (Sealer, Opener) {
        (Sealer(self.to_daemon), Opener::new(self.to_client))
    }

    /// The daemon's ends.
    pub fn daemon(self) -> (Sealer, Opener) {
        (Sealer(self.to_client), Opener::new(self.to_daemon))
    }
}

/// Protects the frames one side sends, in the order they go on the wire.
pub struct Sealer(Stream);

impl Sealer {
    /// Bytes added to every frame.
    pub fn tag_bytes(&self) -> usize {
        self.0.tag_bytes()
    }

    /// The protected form of the next frame to be sent, given its header (length prefix, id,
    /// meta length), meta and payload. Returns the new header-and-meta buffer, the payload
    /// and the tail (the tag) to send in that order.
    pub(crate) fn seal(
        &mut self,
        head: Bytes,
        payload: Bytes,
    ) -> Result<(Bytes, Bytes, Bytes), super::frame::FrameError> {
        let tag_bytes = self.tag_bytes();
        let seq = self.0.next_seq()?;
        let dir = self.0.dir;
        let mut head = head
            .try_into_mut()
            .unwrap_or_else(|b| BytesMut::from(&b[..]));
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let len = len
            .checked_add(tag_bytes as u32)
            .ok_or(super::frame::FrameError::TooLarge {
                len: u64::from(len) + tag_bytes as u64,
                max: u32::MAX,
            })?;
        head[..4].copy_from_slice(&len.to_le_bytes());
        match &self.0.key {
            Key::Mac(key) => {
                let tag = Stream::mac(key, dir, seq, &[&head, &payload]);
                let tail = Bytes::copy_from_slice(tag.as_bytes());
                Ok((head.freeze(), payload, tail))
            }
            Key::Sealed(aead) => {
                let mut buf = head;
                buf.reserve(payload.len() + SEAL_TAG_BYTES);
                buf.put_slice(&payload);
                let nonce = self.0.nonce(seq);
                let (aad, body) = buf.split_at_mut(super::frame::HEADER_BYTES);
                let tag = aead
                    .seal_in_place_separate_tag(nonce, Aad::from(&*aad), body)
                    .map_err(|_| super::frame::FrameError::Exhausted)?;
                buf.put_slice(tag.as_ref());
                Ok((buf.freeze(), Bytes::new(), Bytes::new()))
            }
        }
    }
}

/// Checks (and for `Sealed` decrypts) the frames one side receives, in the order they come.
/// Once a frame failed, every later one fails too.
#[derive(Clone)]
pub struct Opener {
    stream: Stream,
    failed: bool,
}

impl Opener {
    fn new(stream: Stream) -> Opener {
        Opener {
            stream,
            failed: false,
        }
    }

    /// Bytes every frame carries beyond its header, meta and payload.
    pub fn tag_bytes(&self) -> usize {
        self.stream.tag_bytes()
    }

    /// Checks one whole frame as it came off the wire (length prefix to tag; the caller
    /// checked its header) and strips its tag; for `Sealed`, the meta and payload are
    /// decrypted in place. The length prefix is left as it came.
    pub(crate) fn open(&mut self, frame: &mut BytesMut) -> Result<(), super::frame::FrameError> {
        let forged = |seq: u64, mode: &str| super::frame::FrameError::Forged {
            seq,
            mode: mode.to_string(),
        };
        let seq = self.stream.seq;
        let (mode, ok) = if self.failed {
            ("an earlier frame", false)
        } else {
            let tag_at = frame.len().saturating_sub(self.tag_bytes());
            match &self.stream.key {
                Key::Mac(key) => {
                    let (body, tag) = frame.split_at(tag_at);
                    let m = Stream::mac(key, self.stream.dir, seq, &[body]);
                    // blake3::Hash compares in constant time.
                    let ok = <[u8; MAC_TAG_BYTES]>::try_from(tag)
                        .is_ok_and(|t| m == blake3::Hash::from_bytes(t));
                    ("mac", ok)
                }
                Key::Sealed(aead) => {
                    let nonce = self.stream.nonce(seq);
                    let (body, tag) = frame.split_at_mut(tag_at);
                    let (aad, text) = body.split_at_mut(super::frame::HEADER_BYTES);
                    let ok = Tag::try_from(&*tag).is_ok_and(|tag| {
                        aead.open_in_place_separate_tag(nonce, Aad::from(&*aad), tag, text, 0..)
                            .is_ok()
                    });
                    ("sealed", ok)
                }
            }
        };
        if !ok {
            self.failed = true;
            return Err(forged(seq, mode));
        }
        self.stream.next_seq()?;
        frame.truncate(frame.len() - self.tag_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{FrameCodec, FrameError, OutFrame};
    use tokio_util::codec::Decoder;

    const MAX: u32 = 1 << 20;
    const SECRET: &[u8] = b"the deployment secret";

    fn keys(mode: Mode) -> (Keys, Keys) {
        let (d, c) = (crate::auth::new_nonce(), crate::auth::new_nonce());
        (
            Keys::derive(SECRET, mode, &d, &c).unwrap(),
            Keys::derive(SECRET, mode, &d, &c).unwrap(),
        )
    }

    /// The bytes of frames as the sealer puts them on the wire.
    fn wire(sealer: &mut Sealer, frames: &[(u64, &[u8], &[u8])]) -> Vec<Vec<u8>> {
        frames
            .iter()
            .map(|(id, m, p)| {
                let f = OutFrame::raw(*id, m, Bytes::copy_from_slice(p), MAX)
                    .unwrap()
                    .sealed(sealer)
                    .unwrap();
                f.to_vec()
            })
            .collect()
    }

    /// Decodes `bytes` with a codec that opens frames; the frames read, then how it ended.
    fn read(opener: Opener, bytes: &[u8]) -> (Vec<crate::frame::Frame>, Option<FrameError>) {
        let mut codec = FrameCodec::new(MAX).opening(opener);
        let mut buf = BytesMut::from(bytes);
        let mut got = Vec::new();
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(f)) => got.push(f),
                Ok(None) => return (got, None),
                Err(e) => return (got, Some(e)),
            }
        }
    }

    fn sample() -> Vec<(u64, &'static [u8], &'static [u8])> {
        vec![
            (1, b"meta one", b"payload one"),
            (2, b"", b""),
            (3, b"m", &[7u8; 5000]),
        ]
    }

    #[test]
    fn every_mode_round_trips_and_clear_adds_nothing() {
        for mode in [Mode::Mac, Mode::Sealed] {
            for client_sends in [true, false] {
                let (a, b) = keys(mode);
                let ((mut sealer, _), (_, opener)) = match client_sends {
                    true => (a.client(), b.daemon()),
                    false => (a.daemon(), b.client()),
                };
                let bytes = wire(&mut sealer, &sample()).concat();
                let (got, end) = read(opener, &bytes);
                assert!(end.is_none(), "{mode}: {end:?}");
                assert_eq!(got.len(), 3, "{mode}");
                for (g, (id, m, p)) in got.iter().zip(sample()) {
                    assert_eq!((g.id, &g.meta[..], &g.payload[..]), (id, m, p), "{mode}");
                }
                let plain: usize = sample()
                    .iter()
                    .map(|(_, m, p)| 16 + m.len() + p.len())
                    .sum();
                assert_eq!(bytes.len(), plain + 3 * mode.tag_bytes());
                if mode == Mode::Sealed {
                    // The payload does not appear in clear.
                    assert!(!bytes.windows(11).any(|w| w == b"payload one"));
                }
            }
        }
        assert!(Keys::derive(SECRET, Mode::Clear, &[0; 32], &[1; 32]).is_none());
    }

    /// Every way of spoiling the stream of frames 1, 2, 3, and the index of the first frame
    /// that must fail.
    fn spoiled(frames: &[Vec<u8>]) -> Vec<(&'static str, Vec<u8>, usize)> {
        let mut out = Vec::new();
        // A flipped bit in each part of frame 0: length prefix excepted (it frames the rest),
        // id, meta length, meta, payload, tag.
        for (what, at) in [
            ("id", 5),
            ("meta length", 13),
            ("meta", 17),
            ("payload", 24),
            ("tag", frames[0].len() - 1),
        ] {
            let mut f = frames.to_vec();
            f[0][at] ^= 0x10;
            out.push((what, f.concat(), 0));
        }
        // Frame 0 replayed after frame 1.
        out.push((
            "replay",
            [&frames[0][..], &frames[1], &frames[0]].concat(),
            2,
        ));
        // Frames 1 and 2 swapped; frame 1 dropped.
        out.push((
            "reorder",
            [&frames[0][..], &frames[2], &frames[1]].concat(),
            1,
        ));
        out.push(("drop", [&frames[0][..], &frames[2]].concat(), 1));
        out
    }

    #[test]
    fn tampered_replayed_reordered_dropped_frames_are_refused() {
        // One pair of keys made twice from the same nonces: the sender's and a fresh
        // receiver's for each spoiled stream.
        for mode in [Mode::Mac, Mode::Sealed] {
            let (d, c) = (crate::auth::new_nonce(), crate::auth::new_nonce());
            let make = || Keys::derive(SECRET, mode, &d, &c).unwrap();
            let (mut sealer, _) = make().client();
            let frames = wire(&mut sealer, &sample());
            for (what, bytes, bad) in spoiled(&frames) {
                let (_, opener) = make().daemon();
                let (got, end) = read(opener, &bytes);
                assert_eq!(
                    got.len(),
                    bad,
                    "{mode} {what}: frames before the bad one pass"
                );
                assert!(
                    matches!(
                        end,
                        Some(FrameError::Forged { .. }) | Some(FrameError::Garbled { .. })
                    ),
                    "{mode} {what}: {end:?}"
                );
            }
        }
    }

    #[test]
    fn wrong_key_wrong_direction_and_injection_are_refused() {
        for mode in [Mode::Mac, Mode::Sealed] {
            let (a, _) = keys(mode);
            let (mut sealer, _) = a.client();
            let frames = wire(&mut sealer, &sample()).concat();
            // Another connection's keys (other nonces).
            let (other, _) = keys(mode);
            let (_, opener) = other.daemon();
            assert!(matches!(
                read(opener, &frames).1,
                Some(FrameError::Forged { .. })
            ));
            // Another secret, same nonces.
            let (d, c) = (crate::auth::new_nonce(), crate::auth::new_nonce());
            let (mut s1, _) = Keys::derive(SECRET, mode, &d, &c).unwrap().client();
            let bytes = wire(&mut s1, &sample()).concat();
            let (_, o2) = Keys::derive(b"another secret", mode, &d, &c)
                .unwrap()
                .daemon();
            assert!(matches!(
                read(o2, &bytes).1,
                Some(FrameError::Forged { .. })
            ));
            // The client's own frames reflected back to it (the other direction's key).
            let (_, o3) = Keys::derive(SECRET, mode, &d, &c).unwrap().client();
            assert!(matches!(
                read(o3, &bytes).1,
                Some(FrameError::Forged { .. })
            ));
            // A frame in clear injected where a protected one is due, even with room for a
            // tag's worth of bytes.
            let injected = OutFrame::raw(9, b"injected", Bytes::from(vec![0u8; 64]), MAX)
                .unwrap()
                .to_vec();
            let (_, o4) = Keys::derive(SECRET, mode, &d, &c).unwrap().daemon();
            let (got, end) = read(o4, &injected);
            assert!(got.is_empty());
            assert!(matches!(end, Some(FrameError::Forged { .. })), "{end:?}");
            // The other mode's frames do not pass either.
            let other_mode = if mode == Mode::Mac {
                Mode::Sealed
            } else {
                Mode::Mac
            };
            let (_, o5) = Keys::derive(SECRET, other_mode, &d, &c).unwrap().daemon();
            assert!(read(o5, &bytes).1.is_some());
        }
    }

    #[test]
    fn after_a_bad_frame_nothing_passes() {
        let (d, c) = (crate::auth::new_nonce(), crate::auth::new_nonce());
        let (mut sealer, _) = Keys::derive(SECRET, Mode::Mac, &d, &c).unwrap().client();
        let frames = wire(&mut sealer, &sample());
        let mut codec = FrameCodec::new(MAX)
            .opening(Keys::derive(SECRET, Mode::Mac, &d, &c).unwrap().daemon().1);
        let mut bad = BytesMut::from(&frames[0][..]);
        bad[20] ^= 1;
        assert!(codec.decode(&mut bad).is_err());
        // The genuine frame 0 (and what follows) is refused on the same reader.
        let mut good = BytesMut::from(&frames.concat()[..]);
        assert!(matches!(
            codec.decode(&mut good),
            Err(FrameError::Forged { .. })
        ));
    }
}
