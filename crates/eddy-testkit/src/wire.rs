//! A minimal asynchronous wire client for the daemon tests: handshake, then requests matched
//! by id; and daemons started in the test's own process ([`start`]).

use eddy_config::Config;
use eddy_daemon::{Daemon, DaemonSettings};
use eddy_proto::auth::{self, HelloResult, ServerHello};
use eddy_proto::frame::{read_frame, write_frame, write_frames};
use eddy_proto::req;
use eddy_proto::{
    decode_plain, encode, response_from_frame, FileKind, Inode, Reply, Request, Response, Timespec,
    PROTOCOL_VERSION,
};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

pub const SECRET: &[u8] = b"test secret of the deployment";
pub const MAX: u32 = 64 * 1024 * 1024;
/// Guard against a hang in a test; never an assertion on speed.
pub const GUARD: Duration = Duration::from_secs(30);

/// The daemons of these tests run `wire = "clear"`: this client writes frames by hand, as
/// they are (the protected modes are tested in eddy-proto and eddy-cli's `wire.rs`).
pub fn config(chunk_size: u64) -> Config {
    Config {
        chunk_size,
        wire: eddy_config::Wire::Clear,
        ..Config::default()
    }
}

pub async fn start(root: &Path, chunk_size: u64) -> Daemon {
    let settings = DaemonSettings::new(
        root,
        "127.0.0.1:0".parse().unwrap(),
        SECRET.to_vec(),
        config(chunk_size),
    );
    Daemon::start(settings).await.unwrap()
}

pub struct Conn<S> {
    pub stream: S,
    next_id: u64,
    pending: HashMap<u64, Response>,
}

/// Connects and authenticates; the handshake verdict is returned as is.
pub async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    secret: &[u8],
) -> (Conn<S>, HelloResult) {
    let frame = read_frame(&mut stream, MAX).await.unwrap();
    assert_eq!(frame.id, 0);
    let hello: ServerHello = decode_plain(&frame, MAX as u64).unwrap();
    assert_eq!(hello.version, PROTOCOL_VERSION);
    let reply = auth::answer(secret, &hello);
    write_frame(&mut stream, 0, &encode(&reply).unwrap(), &[], MAX)
        .await
        .unwrap();
    let frame = read_frame(&mut stream, MAX).await.unwrap();
    assert_eq!(frame.id, 0);
    let verdict: HelloResult = decode_plain(&frame, MAX as u64).unwrap();
    if let Ok(proof) = &verdict {
        assert!(
            auth::verify_daemon(
                secret,
                &reply.nonce,
                &hello.nonce,
                hello.daemon_id,
                hello.wire,
                &proof.proof
            ),
            "the daemon proves the secret"
        );
    }
    (
        Conn {
            stream,
            next_id: 1,
            pending: HashMap::new(),
        },
        verdict,
    )
}

pub async fn connect(addr: std::net::SocketAddr) -> Conn<tokio::net::TcpStream> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (conn, verdict) = handshake(stream, SECRET).await;
    verdict.unwrap();
    conn
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// Sends a request without waiting; returns its id.
    pub async fn send(&mut self, req: &Request) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        write_frames(&mut self.stream, &[req.to_frame(id, MAX).unwrap()])
            .await
            .unwrap();
        id
    }

    /// Waits for the response to request `id` (others are kept for later).
    pub async fn recv(&mut self, id: u64) -> Response {
        loop {
            if let Some(r) = self.pending.remove(&id) {
                return r;
            }
            let frame = tokio::time::timeout(GUARD, read_frame(&mut self.stream, MAX))
                .await
                .expect("daemon did not answer")
                .unwrap();
            self.pending
                .insert(frame.id, response_from_frame(frame, MAX as u64).unwrap());
        }
    }

    pub async fn call(&mut self, req: Request) -> Response {
        let id = self.send(&req).await;
        self.recv(id).await
    }

    pub async fn ok(&mut self, req: Request) -> Reply {
        let op = req.op_name();
        self.call(req)
            .await
            .unwrap_or_else(|e| panic!("{op} failed: {e}"))
    }

    pub async fn errno(&mut self, req: Request) -> i32 {
        let op = req.op_name();
        match self.call(req).await {
            Ok(r) => panic!("{op} succeeded with {r:?}, expected an error"),
            Err(e) => e.errno,
        }
    }

    pub async fn inode(&mut self, req: Request) -> Inode {
        match self.ok(req).await {
            Reply::Inode(i) => i,
            other => panic!("expected an inode, got {other:?}"),
        }
    }

    pub async fn data(&mut self, req: Request) -> Vec<u8> {
        match self.ok(req).await {
            Reply::Data(d) | Reply::Checked { data: d, .. } => d.to_vec(),
            other => panic!("expected data, got {other:?}"),
        }
    }
}

pub fn inode(kind: FileKind, file_id: u128) -> Inode {
    let t = Timespec { sec: 1, nsec: 0 };
    Inode {
        atime: t,
        mtime: t,
        ctime: t,
        ..Inode::new(kind, file_id, 0o644, 1000, 1000)
    }
}

pub fn file(file_id: u128) -> Inode {
    inode(FileKind::File, file_id)
}

pub fn dir() -> Inode {
    inode(FileKind::Dir, 0)
}

pub fn create(path: &str, inode: Inode) -> Request {
    Request::Create(req::Create {
        path: path.into(),
        inode,
        exclusive: true,
    })
}

pub fn stat(path: &str) -> Request {
    Request::Stat(req::Stat { path: path.into() })
}
