//! Descriptors passed over a Unix socket (SCM_RIGHTS), for direct local I/O (decision
//! 0048): on the daemon's descriptor socket (`eddyd.fd` in its root, served whether or
//! not the daemon has a Unix socket for requests), the client sends the 16-byte token of a `DirectGrant` on the daemon's descriptor
//! socket; the daemon answers one byte, the number of descriptors, with the descriptors
//! attached. Blocking calls on std sockets with timeouts set by the caller: the exchange is
//! local and short.

use crate::Errno;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// Most descriptors one answer carries.
pub const MAX_FDS: usize = 4;

/// The name of a daemon's descriptor socket in its storage root (private to the
/// daemon's user, as the root is).
pub const SOCKET_FILE: &str = "eddyd.fd";

/// A daemon's descriptor socket, in its storage root `root`.
pub fn socket_path(root: &std::path::Path) -> std::path::PathBuf {
    root.join(SOCKET_FILE)
}

/// Client side: redeems `token` on the descriptor socket `stream`; returns the descriptors.
pub fn redeem(stream: &mut UnixStream, token: u128) -> Result<Vec<OwnedFd>, Errno> {
    stream
        .write_all(&token.to_le_bytes())
        .map_err(|e| Errno::from_io(&e, "sending a token on the daemon's descriptor socket"))?;
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let msg = recvmsg::<()>(
        stream.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|e| Errno::new(e as i32, "receiving descriptors from the daemon"))?;
    let mut fds = Vec::new();
    for cmsg in msg
        .cmsgs()
        .map_err(|e| Errno::new(e as i32, "reading descriptors"))?
    {
        if let ControlMessageOwned::ScmRights(got) = cmsg {
            // SAFETY: the kernel installed these descriptors in this process for us; each is
            // owned from here on, once.
            fds.extend(
                got.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    if msg.bytes != 1 {
        return Err(Errno::eio(
            "the daemon's descriptor socket closed without answering",
        ));
    }
    if fds.len() != usize::from(byte[0]) {
        return Err(Errno::eio(format!(
            "the daemon announced {} descriptors and sent {}",
            byte[0],
            fds.len()
        )));
    }
    Ok(fds)
}

/// Daemon side: reads the token a client sends on `stream`.
pub fn read_token(stream: &mut UnixStream) -> Result<u128, Errno> {
    let mut raw = [0u8; 16];
    stream
        .read_exact(&mut raw)
        .map_err(|e| Errno::from_io(&e, "reading a token on the descriptor socket"))?;
    Ok(u128::from_le_bytes(raw))
}

/// Daemon side: sends `fds` (at most `MAX_FDS`; none answers a refused token).
pub fn hand_over(stream: &UnixStream, fds: &[BorrowedFd<'_>]) -> Result<(), Errno> {
    if fds.len() > MAX_FDS {
        return Err(Errno::einval("too many descriptors for one answer"));
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let byte = [fds.len() as u8];
    let iov = [IoSlice::new(&byte)];
    let rights = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &rights };
    sendmsg::<()>(stream.as_raw_fd(), &iov, cmsgs, MsgFlags::empty(), None)
        .map_err(|e| Errno::new(e as i32, "handing descriptors over"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn descriptors_cross_a_socket_pair_and_read_what_the_sender_wrote() {
        let (mut client, mut daemon) = UnixStream::pair().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        std::fs::write(&path, b"direct bytes").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let token = 0x1234_5678_9abc_def0_1122_3344_5566_7788u128;
        let t = std::thread::spawn(move || {
            let got = read_token(&mut daemon).unwrap();
            assert_eq!(got, token);
            hand_over(&daemon, &[file.as_fd()]).unwrap();
        });
        let fds = redeem(&mut client, token).unwrap();
        t.join().unwrap();
        assert_eq!(fds.len(), 1);
        let mut f = std::fs::File::from(fds.into_iter().next().unwrap());
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "direct bytes");
    }

    #[test]
    fn a_refusal_carries_no_descriptor_and_a_closed_socket_is_an_error() {
        let (mut client, daemon) = UnixStream::pair().unwrap();
        hand_over(&daemon, &[]).unwrap();
        assert!(redeem(&mut client, 1).unwrap().is_empty());
        drop(daemon);
        let e = redeem(&mut client, 2).unwrap_err();
        assert!(e.msg.contains("closed") || e.errno == libc::EPIPE, "{e:?}");
    }
}
