//! A Unix stream socket registered with the runtime for reading only (decision 0051).
//!
//! tokio registers a socket for both directions, edge-triggered. On a Unix stream socket the
//! kernel signals "writable" every time the peer takes a message off it (its write-space
//! callback has no low-water mark, unlike TCP's), so each request a daemon read woke the
//! client's runtime thread, and each reply a client read woke a daemon worker, for nothing:
//! two spurious wake-ups per round trip (measured on a metadata benchmark: 3.8 `epoll_wait`
//! and 3.6 context switches per operation where two of each do the work).
//!
//! Here the socket is registered for readability alone. Writes go straight to the
//! non-blocking socket; only a write that finds it full waits for room, through a duplicate
//! of the descriptor registered for writability while writes keep finding it full (a fresh
//! registration reports the socket's state at once, so no room freed in between is missed).

use std::io::{self, IoSlice, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// The reading half: a socket registered for readability only.
pub struct UnixRead(Arc<AsyncFd<UnixStream>>);

/// The writing half: writes without a registration until the socket is full.
pub struct UnixWrite {
    sock: Arc<AsyncFd<UnixStream>>,
    /// A duplicate of the socket registered for writability, while writes find it full.
    room: Option<AsyncFd<UnixStream>>,
}

/// Registers `sock` with the runtime for `interest` alone.
fn register(sock: UnixStream, interest: Interest) -> io::Result<AsyncFd<UnixStream>> {
    // SAFETY: a `UnixStream` owns its descriptor, keeps it open until dropped (with the
    // `AsyncFd`) and always answers the same one from `as_raw_fd`.
    unsafe { AsyncFd::register_with_interest(sock, interest) }.map_err(io::Error::from)
}

/// Splits a connected socket into its halves, registered as above.
pub fn split(stream: tokio::net::UnixStream) -> io::Result<(UnixRead, UnixWrite)> {
    let std = stream.into_std()?;
    std.set_nonblocking(true)?;
    let sock = Arc::new(register(std, Interest::READABLE)?);
    Ok((UnixRead(Arc::clone(&sock)), UnixWrite { sock, room: None }))
}

impl AsRawFd for UnixRead {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl AsRawFd for UnixWrite {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

impl AsyncRead for UnixRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut ready = ready!(self.0.poll_read_ready(cx))?;
            let want = buf.remaining();
            let res = ready.try_io(|s| {
                // SAFETY: nothing uninitialised is written into the unfilled part: read(2)
                // writes bytes, and only the `n` bytes it reports are marked initialised.
                let dst = unsafe { buf.unfilled_mut() };
                // SAFETY: `dst` is valid for `want` bytes (its length) for the whole call.
                let n = unsafe { libc::read(s.as_raw_fd(), dst.as_mut_ptr().cast(), want) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match res {
                Ok(Ok(n)) => {
                    // SAFETY: the kernel initialised these `n` bytes.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    // A short read emptied the socket: wait for the next edge rather than
                    // read again for EAGAIN (as tokio's own sockets do).
                    if n > 0 && n < want {
                        ready.clear_ready();
                    }
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                // Would block: readiness was cleared, wait for the next edge.
                Err(_) => continue,
            }
        }
    }
}

impl UnixWrite {
    /// Writes what the socket takes now, without waiting.
    pub fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.sock.get_ref().write_vectored(bufs)
    }

    /// Waits until the socket has room (a duplicate registered for writability meanwhile).
    pub async fn writable(&self) -> io::Result<()> {
        let room = register(self.sock.get_ref().try_clone()?, Interest::WRITABLE)?;
        let _ready = room.writable().await?;
        Ok(())
    }
}

impl AsyncWrite for UnixWrite {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut waited = false;
        loop {
            match self.try_write_vectored(bufs) {
                Ok(n) => {
                    // Written at the first try: the socket is not full any more, the
                    // registration for room goes (it would wake the runtime at every reply
                    // the peer reads).
                    if !waited {
                        self.room = None;
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.room.is_none() {
                        let dup = self.sock.get_ref().try_clone()?;
                        self.room = Some(register(dup, Interest::WRITABLE)?);
                    }
                    let Some(room) = self.room.as_ref() else {
                        continue;
                    };
                    let mut ready = ready!(room.poll_write_ready(cx))?;
                    ready.clear_ready();
                    waited = true;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(
            self.sock
                .get_ref()
                .shutdown(std::net::Shutdown::Write)
                .or_else(|e| match e.kind() {
                    io::ErrorKind::NotConnected => Ok(()),
                    _ => Err(e),
                }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn frames_cross_both_ways_and_a_full_socket_waits_for_room() {
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        let (mut ar, mut aw) = split(a).unwrap();
        let (mut br, mut bw) = split(b).unwrap();
        aw.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        br.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        // Far more than a socket buffer (some 200 KiB): the writer must wait for room, or
        // write_all would fail with WouldBlock.
        let big: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
        let sent = big.clone();
        let writer = tokio::spawn(async move {
            bw.write_all(&sent).await.unwrap();
            bw
        });
        let mut back = vec![0u8; big.len()];
        ar.read_exact(&mut back).await.unwrap();
        assert!(back == big, "the bytes came through intact and in order");
        let mut bw = writer.await.unwrap();
        // A write that goes through at once drops the registration for room.
        bw.write_all(b"x").await.unwrap();
        assert!(bw.room.is_none());
        ar.read_exact(&mut got[..1]).await.unwrap();
        assert_eq!(got[0], b'x');
        bw.shutdown().await.unwrap();
        assert_eq!(
            ar.read(&mut got).await.unwrap(),
            0,
            "shut down: the stream ends"
        );
    }

    #[tokio::test]
    async fn the_peer_closing_ends_the_stream() {
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        let (mut ar, _aw) = split(a).unwrap();
        drop(b);
        let mut buf = Vec::new();
        assert_eq!(ar.read_to_end(&mut buf).await.unwrap(), 0);
    }
}
