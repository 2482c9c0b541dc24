//! Opening a connection to a daemon: the socket (Unix on this host, TCP elsewhere), the handshake
//! (protocol version, proof of the deployment's secret, the wire's protection) and the check of the
//! daemon's hello.

use super::{connect_unix, detect_dead_daemon, wire_mode, Conn, Link, WriteHalf, HELLO_MAX};
use bytes::Bytes;
use eddy_proto::auth::{self, HelloResult, ServerHello};
use eddy_proto::frame::{write_frames, FrameReader, OutFrame};
use eddy_proto::wire::{Keys, Mode};
use eddy_proto::{decode_plain, Errno, PROTOCOL_VERSION};
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
