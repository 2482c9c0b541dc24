//! Frames: `[u32 len LE][u64 request id LE][u32 meta_len LE][meta][payload]`.
//!
//! `len` counts everything after itself (id, meta length, meta, payload); `meta` is the
//! bincode of the message with its bulk bytes left out, and `payload` is those bytes, raw
//! (the data of a `Write`, the bytes of a `Data` reply; empty for everything else). The
//! payload never passes through the encoder: it is read into the frame buffer and split off
//! it without a copy (`Bytes`), and written with the header and the meta in one vectored
//! write.
//!
//! Reading goes through tokio-util's codec machinery (`FramedRead` + `FrameCodec`): one
//! buffer per connection, read into uninitialised capacity, many frames per read when they
//! are small. The size limit is checked from the header, before any room is reserved for the
//! frame. A frame longer than the limit, shorter than its header, whose meta length does not
//! fit its length, or cut by the end of the stream is an error: the reader closes that
//! connection and nothing else.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::io::IoSlice;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::{Decoder, FramedRead};

/// Bytes of the header: the length prefix, the request id and the meta length.
pub const HEADER_BYTES: usize = 16;
/// Bytes `len` counts of the header (the id and the meta length).
const COUNTED_HEADER: u32 = 12;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge { len: u64, max: u32 },
    #[error("frame length {0} is shorter than its header")]
    TooShort(u32),
    #[error("garbled frame: its meta section of {meta} bytes does not fit its length {len}")]
    Garbled { meta: u32, len: u32 },
    #[error("connection closed in the middle of a frame ({have} of {want} bytes came)")]
    Truncated { have: usize, want: usize },
    #[error(
        "frame {seq} failed its check (wire = {mode}): it was changed, injected, replayed, \
         reordered or sent with another key on the way"
    )]
    Forged { seq: u64, mode: String },
    #[error("the connection has sent or received as many frames as its nonces allow")]
    Exhausted,
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// One frame read: the request id, the meta section and the payload, both views into the
/// connection's read buffer (no copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub id: u64,
    pub meta: Bytes,
    pub payload: Bytes,
}

/// The decoder of frames, with the size limit of the connection and, on a protected
/// connection (decision 0022), what checks each frame before it is handed out.
#[derive(Clone)]
pub struct FrameCodec {
    max: u32,
    opener: Option<crate::wire::Opener>,
    /// Bytes of the tag every frame carries (0 in clear).
    tag: u32,
}

impl FrameCodec {
    pub fn new(max: u32) -> FrameCodec {
        FrameCodec {
            max,
            opener: None,
            tag: 0,
        }
    }

    /// The same codec for a protected connection: every frame carries a tag (not counted by
    /// the size limit) and is checked, and for `Sealed` decrypted, before it is handed out;
    /// one that fails is `Forged`, and so is every frame after it.
    pub fn opening(self, opener: crate::wire::Opener) -> FrameCodec {
        let tag = opener.tag_bytes() as u32;
        FrameCodec {
            max: self.max.saturating_add(tag),
            opener: Some(opener),
            tag,
        }
    }

    /// Checks a header; returns the whole frame's size (with the length prefix) and the
    /// meta length.
    fn check_header(&self, head: &[u8]) -> Result<(usize, usize), FrameError> {
        let word =
            |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
        let len = word(0);
        if len < COUNTED_HEADER + self.tag {
            return Err(FrameError::TooShort(len));
        }
        let total = u64::from(len) + 4;
        if total > u64::from(self.max) {
            return Err(FrameError::TooLarge {
                len: total,
                max: self.max,
            });
        }
        let meta = word(12);
        if meta > len - COUNTED_HEADER - self.tag {
            return Err(FrameError::Garbled { meta, len });
        }
        // Both fit in u32, and so in usize on every platform Eddy runs on.
        Ok((total as usize, meta as usize))
    }
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if src.len() < 4 {
            return Ok(None);
        }
        // The length alone is checked as soon as it is there: an oversize or undersize frame
        // is refused before its id comes (and before anything is reserved for it).
        let mut head = [0u8; HEADER_BYTES];
        let have = src.len().min(HEADER_BYTES);
        head[..have].copy_from_slice(&src[..have]);
        if have < HEADER_BYTES {
            let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            if len < COUNTED_HEADER + self.tag {
                return Err(FrameError::TooShort(len));
            }
            if u64::from(len) + 4 > u64::from(self.max) {
                return Err(FrameError::TooLarge {
                    len: u64::from(len) + 4,
                    max: self.max,
                });
            }
            return Ok(None);
        }
        let (total, meta_len) = self.check_header(&head)?;
        if src.len() < total {
            // Room for the rest of this frame at once, so the payload lands in one buffer
            // that is split off without a copy.
            src.reserve(total - src.len());
            return Ok(None);
        }
        let mut frame = src.split_to(total);
        if let Some(opener) = &mut self.opener {
            // In place: the payload stays where the socket put it.
            opener.open(&mut frame)?;
        }
        let mut frame = frame.freeze();
        frame.advance(4);
        let id = frame.get_u64_le();
        frame.advance(4);
        let meta = frame.split_to(meta_len);
        Ok(Some(Frame {
            id,
            meta,
            payload: frame,
        }))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        match self.decode(src)? {
            Some(f) => Ok(Some(f)),
            None if src.is_empty() => Ok(None),
            None => {
                let want = if src.len() >= HEADER_BYTES {
                    self.check_header(&src[..HEADER_BYTES])?.0
                } else {
                    HEADER_BYTES
                };
                Err(FrameError::Truncated {
                    have: src.len(),
                    want,
                })
            }
        }
    }
}

/// The reading side of a connection: frames out of a buffered stream.
pub struct FrameReader<R> {
    inner: FramedRead<R, FrameCodec>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(r: R, max: u32) -> FrameReader<R> {
        FrameReader {
            inner: FramedRead::new(r, FrameCodec::new(max)),
        }
    }

    /// Changes the size limit (after the handshake, which runs under a small one).
    pub fn set_max(&mut self, max: u32) {
        *self.inner.decoder_mut() = FrameCodec::new(max);
    }

    /// Changes the size limit and, when `opener` is given, checks every later frame with it
    /// (after the handshake, on a protected connection: decision 0022).
    pub fn protect(&mut self, max: u32, opener: Option<crate::wire::Opener>) {
        let codec = FrameCodec::new(max);
        *self.inner.decoder_mut() = match opener {
            Some(o) => codec.opening(o),
            None => codec,
        };
    }

    /// The next frame; `Closed` at a clean end of stream. Cancel-safe: bytes already read
    /// stay in the buffer for the next call.
    pub async fn next(&mut self) -> Result<Frame, FrameError> {
        use futures_core::Stream;
        let inner = &mut self.inner;
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut *inner).poll_next(cx))
            .await
            .unwrap_or(Err(FrameError::Closed))
    }

    /// The size of the next frame, length prefix included, as its header announces it:
    /// reads until the 4 bytes of the prefix are buffered, and never past them, so a caller
    /// can make room for the frame (or wait for room) before `next` buffers it. `None` when
    /// the stream ends first: `next` then says whether it ended cleanly. Cancel-safe.
    pub async fn next_len(&mut self) -> Result<Option<u64>, FrameError> {
        use tokio::io::AsyncReadExt;
        loop {
            let have = self.inner.read_buffer();
            if have.len() >= 4 {
                let len = u32::from_le_bytes([have[0], have[1], have[2], have[3]]);
                return Ok(Some(u64::from(len) + 4));
            }
            // At most the rest of the prefix: no frame is complete after it (a frame has at
            // least a header), so the codec's own reading resumes correctly.
            let mut part = [0u8; 4];
            let want = 4 - have.len();
            let n = self.inner.get_mut().read(&mut part[..want]).await?;
            if n == 0 {
                return Ok(None);
            }
            self.inner.read_buffer_mut().extend_from_slice(&part[..n]);
        }
    }

    /// Gives back the stream; bytes read past the last frame are lost.
    pub fn into_inner(self) -> R {
        self.inner.into_inner()
    }
}

/// One frame to write: the header and the meta in one small buffer, the payload as it is
/// (shared, not copied), and on a protected connection the tag (decision 0022).
#[derive(Debug, Clone)]
pub struct OutFrame {
    head: Bytes,
    payload: Bytes,
    tail: Bytes,
}

impl OutFrame {
    /// Encodes `msg` as the meta section (bincode, see `msg::encode`) behind the header, with
    /// `payload` after it; a frame over `max` bytes is `TooLarge`.
    pub fn new<T: serde::Serialize>(
        id: u64,
        msg: &T,
        payload: Bytes,
        max: u32,
    ) -> Result<OutFrame, crate::Errno> {
        let mut head = BytesMut::with_capacity(128);
        head.put_bytes(0, HEADER_BYTES);
        let mut w = head.writer();
        crate::msg::encode_into(&mut w, msg)?;
        let head = w.into_inner();
        let meta = head.len() - HEADER_BYTES;
        let frame = OutFrame::assemble(id, head, meta, payload, max)
            .map_err(|e| crate::Errno::eio(format!("cannot send: {e}")))?;
        Ok(frame)
    }

    /// A frame of raw sections (tests, and callers that encoded the meta themselves).
    pub fn raw(id: u64, meta: &[u8], payload: Bytes, max: u32) -> Result<OutFrame, FrameError> {
        let mut head = BytesMut::with_capacity(HEADER_BYTES + meta.len());
        head.put_bytes(0, HEADER_BYTES);
        head.extend_from_slice(meta);
        OutFrame::assemble(id, head, meta.len(), payload, max)
    }

    fn assemble(
        id: u64,
        mut head: BytesMut,
        meta: usize,
        payload: Bytes,
        max: u32,
    ) -> Result<OutFrame, FrameError> {
        let total = (HEADER_BYTES + meta) as u64 + payload.len() as u64;
        if total > u64::from(max) {
            return Err(FrameError::TooLarge { len: total, max });
        }
        // total fits in u32 (max does).
        head[..4].copy_from_slice(&((total - 4) as u32).to_le_bytes());
        head[4..12].copy_from_slice(&id.to_le_bytes());
        head[12..16].copy_from_slice(&(meta as u32).to_le_bytes());
        Ok(OutFrame {
            head: head.freeze(),
            payload,
            tail: Bytes::new(),
        })
    }

    /// The frame as `sealer` protects it: it must go on the wire next after the frames
    /// sealed before it (its sequence number is taken now).
    pub fn sealed(self, sealer: &mut crate::wire::Sealer) -> Result<OutFrame, FrameError> {
        let (head, payload, tail) = sealer.seal(self.head, self.payload)?;
        Ok(OutFrame {
            head,
            payload,
            tail,
        })
    }

    /// The frame's pieces in the order they go on the wire.
    fn parts(&self) -> [&[u8]; 3] {
        [&self.head, &self.payload, &self.tail]
    }

    /// The frame's bytes in one buffer (tests and tools; the connections write the pieces).
    pub fn to_vec(&self) -> Vec<u8> {
        self.parts().concat()
    }

    /// Bytes of the whole frame.
    pub fn len(&self) -> usize {
        self.head.len() + self.payload.len() + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

/// Most slices handed to one `writev` (Linux's IOV_MAX is 1024).
const MAX_SLICES: usize = 512;

/// Frames waiting for a non-blocking socket, sent in order across as many writes as the
/// socket needs: whoever holds the queue (under its owner's lock) sends what the socket takes
/// now and leaves the rest for later, so a sender whose frame goes out at once never waits
/// for another task.
#[derive(Default)]
pub struct SendQueue {
    frames: std::collections::VecDeque<OutFrame>,
    /// Bytes of the front frame already written.
    sent: usize,
    /// On a protected connection: seals each frame as it joins the queue, which is the order
    /// it goes on the wire in.
    sealer: Option<crate::wire::Sealer>,
}

impl SendQueue {
    /// A queue that seals every frame pushed with `sealer` (none: frames go as they are).
    pub fn sealing(sealer: Option<crate::wire::Sealer>) -> SendQueue {
        SendQueue {
            sealer,
            ..SendQueue::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Queues a frame (sealed first on a protected connection). An error leaves the queue
    /// as it was but the connection unusable: a sequence number was spent.
    pub fn push(&mut self, frame: OutFrame) -> Result<(), FrameError> {
        let frame = match &mut self.sealer {
            Some(s) => frame.sealed(s)?,
            None => frame,
        };
        self.frames.push_back(frame);
        Ok(())
    }

    /// Hands the queued bytes to `write` (a non-blocking vectored write) until all are sent
    /// (`Ok(true)`) or it would block (`Ok(false)`); an error is the socket's.
    pub fn send_with(
        &mut self,
        mut write: impl FnMut(&[IoSlice<'_>]) -> std::io::Result<usize>,
    ) -> std::io::Result<bool> {
        while !self.frames.is_empty() {
            let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(self.frames.len() * 2);
            let mut skip = self.sent;
            for f in self.frames.iter() {
                for part in f.parts() {
                    if skip >= part.len() {
                        skip -= part.len();
                    } else {
                        slices.push(IoSlice::new(&part[skip..]));
                        skip = 0;
                    }
                }
                if slices.len() >= MAX_SLICES {
                    break;
                }
            }
            let n = match write(&slices) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.sent += n;
            while let Some(f) = self.frames.front() {
                if self.sent < f.len() {
                    break;
                }
                self.sent -= f.len();
                self.frames.pop_front();
            }
        }
        Ok(true)
    }
}

/// Writes the frames with vectored writes: one `writev` for all of them when the socket takes
/// them (header, meta and payload of each, no copy), more only for what it did not take. Not
/// cancel-safe: a caller dropped half-way leaves a partial frame on the stream, so callers are
/// tasks that own their connection's writing side and end it on error.
pub async fn write_frames<W: AsyncWrite + Unpin>(
    w: &mut W,
    frames: &[OutFrame],
) -> std::io::Result<()> {
    let mut segs: Vec<&[u8]> = Vec::with_capacity(frames.len() * 2);
    for f in frames {
        segs.extend(f.parts().into_iter().filter(|p| !p.is_empty()));
    }
    let mut first = 0;
    while first < segs.len() {
        let slices: Vec<IoSlice<'_>> = segs[first..]
            .iter()
            .take(MAX_SLICES)
            .map(|s| IoSlice::new(s))
            .collect();
        let mut n = w.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let seg = &mut segs[first];
            if n >= seg.len() {
                n -= seg.len();
                first += 1;
            } else {
                *seg = &seg[n..];
                n = 0;
            }
        }
    }
    w.flush().await
}

/// Reads one frame from an unbuffered stream, for tests and tools that speak the protocol by
/// hand (a connection's reader keeps a `FrameReader` instead: this one may read past the
/// frame only into a buffer it then drops, so it reads the header and the rest exactly).
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, max: u32) -> Result<Frame, FrameError> {
    use tokio::io::AsyncReadExt;
    let codec = FrameCodec::new(max);
    let mut head = [0u8; HEADER_BYTES];
    let mut got = 0;
    while got < HEADER_BYTES {
        let n = r.read(&mut head[got..]).await?;
        if n == 0 {
            return Err(if got == 0 {
                FrameError::Closed
            } else {
                FrameError::Truncated {
                    have: got,
                    want: HEADER_BYTES,
                }
            });
        }
        got += n;
        if (4..HEADER_BYTES).contains(&got) {
            // Refuse a bad length before waiting for the rest of the header.
            let mut probe = BytesMut::from(&head[..got]);
            codec.clone().decode(&mut probe)?;
        }
    }
    let (total, _) = codec.check_header(&head)?;
    let mut buf = BytesMut::with_capacity(total);
    buf.extend_from_slice(&head);
    while buf.len() < total {
        let mut rest = (&mut *r).take((total - buf.len()) as u64);
        if rest.read_buf(&mut buf).await? == 0 {
            return Err(FrameError::Truncated {
                have: buf.len(),
                want: total,
            });
        }
    }
    let mut c = codec;
    c.decode(&mut buf)?.ok_or(FrameError::Truncated {
        have: total,
        want: total,
    })
}

/// Writes one frame of raw sections (flushed).
pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    id: u64,
    meta: &[u8],
    payload: &[u8],
    max: u32,
) -> Result<(), FrameError> {
    let f = OutFrame::raw(id, meta, Bytes::copy_from_slice(payload), max)?;
    write_frames(w, std::slice::from_ref(&f)).await?;
    Ok(())
}

/// Send buffer asked for on local (Unix) sockets: a whole chunk fits, so a chunk crosses in
/// one wake-up of the reader instead of several.
pub const LOCAL_SEND_BUFFER: libc::c_int = 4 * 1024 * 1024;

/// Widens a socket's send buffer to `LOCAL_SEND_BUFFER`; the kernel may grant less (its
/// limit is `net.core.wmem_max`), which is harmless.
pub fn widen_send_buffer<S: std::os::fd::AsRawFd>(sock: &S) {
    let size = LOCAL_SEND_BUFFER;
    // SAFETY: setsockopt on a descriptor the caller owns, with a pointer to a live c_int.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

#[cfg(test)]
mod tests;
