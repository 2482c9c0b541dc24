//! Opening a connection to a daemon: the socket (Unix on this host, TCP elsewhere), the handshake
//! (protocol version, proof of the deployment's secret, the wire's protection) and the check of the
//! daemon's hello.

use super::{wire_mode, Conn, Link, WriteHalf, HELLO_MAX};
use bytes::Bytes;
use eddy_proto::auth::{self, HelloResult, ServerHello};
use eddy_proto::frame::{write_frames, FrameReader, OutFrame};
use eddy_proto::wire::{Keys, Mode};
use eddy_proto::{decode_plain, Errno, PROTOCOL_VERSION};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

impl Link {
    pub(super) async fn open(&self) -> Result<(Conn, u64), Errno> {
        let fail = |e: std::io::Error| {
            Errno::eio(format!(
                "cannot reach {}: {e} (is it running? try `eddy status`)",
                self.describe()
            ))
        };
        // privileged-path: only whether to try the socket; connect_unix opens it without following a link
        if let Some(sock) = self.entry.socket.as_ref().filter(|p| p.exists()) {
            let s = connect_unix(sock).await.map_err(fail)?;
            eddy_proto::frame::widen_send_buffer(&s);
            let (r, w) = eddy_proto::unixio::split(s).map_err(fail)?;
            return self.handshake(r, w, wire_mode(self.wire, false)).await;
        }
        let s = tokio::net::TcpStream::connect(&self.entry.addr)
            .await
            .map_err(fail)?;
        let _ = s.set_nodelay(true);
        detect_dead_daemon(&s, self.rpc_timeout);
        let (r, w) = s.into_split();
        self.handshake(r, w, wire_mode(self.wire, true)).await
    }

    /// Reads the daemon's hello: its version first (so a daemon of any version is told
    /// apart), then checks that it is the daemon the deployment lists there, with the
    /// deployment's chunk size.
    fn check_server_hello(
        &self,
        frame: &eddy_proto::frame::Frame,
        mode: Mode,
    ) -> Result<ServerHello, Errno> {
        let limit = u64::from(HELLO_MAX);
        let version = decode_plain::<auth::Version>(frame, limit)?.version;
        if version != PROTOCOL_VERSION {
            return Err(Errno::new(
                libc::EPROTO,
                format!(
                    "{} speaks protocol {version} but this client speaks {PROTOCOL_VERSION}: \
                     use matching versions of eddy and eddyd",
                    self.describe(),
                ),
            ));
        }
        let hello: ServerHello = decode_plain(frame, limit)?;
        if hello.daemon_id != self.entry.id {
            return Err(Errno::new(
                libc::EPROTO,
                format!(
                    "daemon at {} says it is daemon {} but the deployment file lists daemon {} \
                     there: the deployment file is stale or its addresses are swapped",
                    self.entry.addr, hello.daemon_id, self.entry.id
                ),
            ));
        }
        if hello.chunk_size != self.chunk_size {
            return Err(Errno::new(
                libc::EPROTO,
                format!(
                    "{} stores chunks of {} bytes but the deployment says {}: the daemon was \
                     started with another configuration; restart it or fix the deployment file",
                    self.describe(),
                    hello.chunk_size,
                    self.chunk_size
                ),
            ));
        }
        if hello.wire != mode {
            return Err(Errno::new(
                libc::EPROTO,
                format!(
                    "{} requires wire = {} on this connection but this client's deployment \
                     says {} (setting wire = {}): both ends must use the same wire setting",
                    self.describe(),
                    hello.wire,
                    mode,
                    self.wire.name()
                ),
            ));
        }
        Ok(hello)
    }

    /// Returns the connection and the instance of the daemon it reached.
    async fn handshake<R, W>(&self, r: R, mut w: W, mode: Mode) -> Result<(Conn, u64), Errno>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static + Into<WriteHalf>,
    {
        let proto = |e: eddy_proto::frame::FrameError| {
            Errno::eio(format!("handshake with {} failed: {e}", self.describe()))
        };
        let mut frames = FrameReader::new(r, HELLO_MAX);
        let first = frames.next().await.map_err(proto)?;
        let hello = self.check_server_hello(&first, mode)?;
        // The daemon's mode is this client's (checked above).
        let reply = auth::answer(&self.secret, &hello);
        let frame = OutFrame::new(0, &reply, Bytes::new(), self.max_frame)?;
        write_frames(&mut w, &[frame])
            .await
            .map_err(|e| proto(e.into()))?;
        let verdict: HelloResult =
            decode_plain(&frames.next().await.map_err(proto)?, u64::from(HELLO_MAX))?;
        let proof = verdict.map_err(|e| {
            Errno::new(
                e.errno,
                format!("{} refused the connection: {}", self.describe(), e.msg),
            )
        })?;
        if !auth::verify_daemon(
            &self.secret,
            &reply.nonce,
            &hello.nonce,
            hello.daemon_id,
            mode,
            &proof.proof,
        ) {
            return Err(Errno::new(
                libc::EACCES,
                format!(
                    "{} could not prove the deployment secret: whatever listens at {} is not \
                     a daemon of this deployment (another deployment's daemon took the port, or \
                     the deployment file is stale)",
                    self.describe(),
                    self.entry.addr
                ),
            ));
        }
        let (sealer, opener) = match Keys::derive(&self.secret, mode, &hello.nonce, &reply.nonce) {
            Some(keys) => {
                let (s, o) = keys.client();
                (Some(s), Some(o))
            }
            None => (None, None),
        };
        frames.protect(self.max_frame, opener);
        Ok((
            Conn::start(frames, w.into(), self.max_frame, sealer),
            hello.instance,
        ))
    }
}

/// Connects to a daemon's Unix socket `sock` without trusting the directory it lies in,
/// which is the daemon's user's (its storage root) while the client may be root: the
/// directory is opened without following a link, the socket with `O_PATH|O_NOFOLLOW` in it
/// (a link planted in its place is refused, never followed to another program's socket), the
/// connection made to that very inode (`/proc/self/fd/N`), and the peer's uid
/// (`SO_PEERCRED`) must be the socket's owner, who must own the directory too (or the
/// directory is root's). A socket of root's planted there (a hard link) or a program of
/// another user behind it is refused. Errors name the path.
async fn connect_unix(sock: &std::path::Path) -> std::io::Result<tokio::net::UnixStream> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let refuse = |why: String| {
        std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{}: {why}", sock.display()),
        )
    };
    let (Some(dir), Some(name)) = (sock.parent(), sock.file_name()) else {
        return Err(refuse("not a socket path".into()));
    };
    // privileged-path: the last component is not followed (O_NOFOLLOW); the directories above are root's record (the deployment's roots)
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| {
            refuse(format!(
                "cannot open its directory without following a link: {e}"
            ))
        })?;
    // privileged-path: fstat of the directory held open just above
    let dir_uid = dir.metadata()?.uid();
    let sock = eddy_proto::fdpass::socket_beneath(&dir.into(), name)
        .map_err(|e| refuse(format!("{e}")))?;
    if sock.uid != dir_uid && dir_uid != 0 {
        return Err(refuse(format!(
            "belongs to uid {} but its directory to uid {dir_uid}: refused",
            sock.uid
        )));
    }
    // privileged-path: /proc/self/fd of the socket inode opened O_PATH|O_NOFOLLOW and checked above
    let stream = tokio::net::UnixStream::connect(sock.proc_path()).await?;
    let owner = sock.uid;
    drop(sock);
    let peer = stream.peer_cred()?.uid();
    if peer != owner {
        return Err(refuse(format!(
            "served by uid {peer}, not by the socket's owner uid {owner}: refused"
        )));
    }
    Ok(stream)
}

/// TCP keepalive and a user timeout on a connection to a daemon, so that a daemon cut off
/// the network (no FIN or RST ever comes) costs the connection within the RPC deadline:
/// the kernel gives it up when the daemon has acknowledged nothing for a whole deadline (sent
/// requests, or keepalive probes, which start after a quarter of the deadline of silence, two
/// an eighth apart). The reader then fails what is pending and the next call connects anew.
/// Without them the connection outlived the cut by minutes (TCP's retransmissions): once the
/// network was back, calls still went to it and failed with EIO until a retransmission, on
/// its backoff, met the daemon's reset.
fn detect_dead_daemon(stream: &tokio::net::TcpStream, rpc_timeout: Duration) {
    if let Err(e) = eddy_proto::keepalive::detect_dead_peer(stream, rpc_timeout, rpc_timeout) {
        tracing::warn!(error = %e, "cannot set TCP keepalive on a connection to a daemon");
    }
}
