//! Length-prefixed frames: `[u32 len LE][u64 request id LE][body]`, where `len` counts the id
//! and the body. A frame longer than the limit, or shorter than its header, is an error: the
//! reader closes that connection and nothing else.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Bytes of the length prefix plus the request id.
pub const HEADER_BYTES: usize = 12;

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge { len: u64, max: u32 },
    #[error("frame of {0} bytes is shorter than its header")]
    TooShort(u32),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
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

/// Reads one frame; returns the request id and the body.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max: u32,
) -> Result<(u64, Vec<u8>), FrameError> {
    let mut len_buf = [0u8; 4];
    match r.read_exact(&mut len_buf).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_le_bytes(len_buf);
    if len < 8 {
        return Err(FrameError::TooShort(len));
    }
    if u64::from(len) + 4 > u64::from(max) {
        return Err(FrameError::TooLarge {
            len: u64::from(len) + 4,
            max,
        });
    }
    let mut id_buf = [0u8; 8];
    r.read_exact(&mut id_buf).await?;
    let mut body = vec![0u8; len as usize - 8];
    r.read_exact(&mut body).await?;
    Ok((u64::from_le_bytes(id_buf), body))
}

/// Writes one frame (not flushed).
pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    id: u64,
    body: &[u8],
    max: u32,
) -> Result<(), FrameError> {
    let total = body.len() as u64 + HEADER_BYTES as u64;
    if total > u64::from(max) {
        return Err(FrameError::TooLarge { len: total, max });
    }
    let mut header = [0u8; HEADER_BYTES];
    header[..4].copy_from_slice(&((body.len() + 8) as u32).to_le_bytes());
    header[4..].copy_from_slice(&id.to_le_bytes());
    w.write_all(&header).await?;
    w.write_all(body).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn round_trip() {
        let mut buf = Vec::new();
        write_frame(&mut buf, 7, b"hello", 1024).await.unwrap();
        let mut r = &buf[..];
        let (id, body) = read_frame(&mut r, 1024).await.unwrap();
        assert_eq!((id, body.as_slice()), (7, &b"hello"[..]));
        assert!(matches!(
            read_frame(&mut r, 1024).await,
            Err(FrameError::Closed)
        ));
    }

    #[tokio::test]
    async fn oversize_and_undersize_are_rejected() {
        let mut buf = Vec::new();
        buf.extend_from_slice(&u32::MAX.to_le_bytes());
        let mut r = &buf[..];
        assert!(matches!(
            read_frame(&mut r, 1024).await,
            Err(FrameError::TooLarge { .. })
        ));
        let small = 3u32.to_le_bytes();
        let mut r = &small[..];
        assert!(matches!(
            read_frame(&mut r, 1024).await,
            Err(FrameError::TooShort(3))
        ));
        let mut out = Vec::new();
        assert!(write_frame(&mut out, 1, &[0u8; 2000], 1024).await.is_err());
    }

    #[tokio::test]
    async fn truncated_body_is_an_error_not_a_hang() {
        let mut buf = Vec::new();
        write_frame(&mut buf, 1, b"0123456789", 1024).await.unwrap();
        buf.truncate(buf.len() - 3);
        let mut r = &buf[..];
        assert!(read_frame(&mut r, 1024).await.is_err());
    }
}
