//! One authenticated, multiplexed connection to a daemon: many requests outstanding at once,
//! matched to their responses by request id. A broken connection fails every pending request
//! with EIO at once; the link reconnects on the next call.

use eddy_config::{Config, DaemonEntry};
use eddy_proto::auth::{self, ClientHello, HelloResult, ServerHello};
use eddy_proto::frame::{read_frame, write_frame};
use eddy_proto::{decode, encode, Errno, Reply, Request, Response, PROTOCOL_VERSION};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, oneshot};

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Response>>>>;

/// Depth of the queue of frames waiting for the writer task.
const SEND_QUEUE: usize = 256;

/// A live connection.
pub(crate) struct Conn {
    tx: mpsc::Sender<(u64, Vec<u8>)>,
    pending: Pending,
    next_id: AtomicU64,
    dead: Arc<AtomicBool>,
}

impl Conn {
    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Sends a request and waits for its response (no deadline here: the caller sets it).
    async fn call(&self, body: Vec<u8>, what: &str) -> Response {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        // Dropped pending entry on early return is cleaned by the guard.
        let guard = PendingGuard {
            pending: &self.pending,
            id,
        };
        if self.tx.send((id, body)).await.is_err() {
            return Err(Errno::eio(format!("{what}: connection closed")));
        }
        let resp = rx
            .await
            .unwrap_or_else(|_| Err(Errno::eio(format!("{what}: connection lost"))));
        drop(guard);
        resp
    }
}

struct PendingGuard<'a> {
    pending: &'a Pending,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        lock(self.pending).remove(&self.id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The lazily (re)connected link to one daemon.
pub(crate) struct Link {
    pub entry: DaemonEntry,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    secret: Arc<Vec<u8>>,
    max_frame: u32,
    connect_timeout: Duration,
    rpc_timeout: Duration,
}

impl Link {
    pub fn new(entry: DaemonEntry, secret: Arc<Vec<u8>>, cfg: &Config) -> Link {
        Link {
            entry,
            conn: tokio::sync::Mutex::new(None),
            secret,
            max_frame: cfg.max_frame_bytes,
            connect_timeout: Duration::from_millis(cfg.connect_timeout_ms),
            rpc_timeout: Duration::from_millis(cfg.rpc_timeout_ms),
        }
    }

    fn describe(&self) -> String {
        format!("daemon {} ({})", self.entry.id, self.entry.addr)
    }

    /// Sends one request and waits for the reply, within the RPC deadline. Every failure to
    /// reach the daemon is EIO with a message naming it.
    pub async fn call(&self, req: &Request) -> Result<Reply, Errno> {
        let body = encode(req)?;
        let what = format!("{} {}", req.op_name(), self.describe());
        let deadline = self.rpc_timeout;
        match tokio::time::timeout(deadline, async {
            let conn = self.connection().await?;
            conn.call(body, &what).await
        })
        .await
        {
            Ok(resp) => resp,
            Err(_) => Err(Errno::eio(format!(
                "{what}: no answer within {} ms (is the daemon alive? try `eddy status`)",
                deadline.as_millis()
            ))),
        }
    }

    async fn connection(&self) -> Result<Arc<Conn>, Errno> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.is_dead() {
                return Ok(c.clone());
            }
        }
        let conn = tokio::time::timeout(self.connect_timeout, self.open())
            .await
            .map_err(|_| {
                Errno::eio(format!(
                    "cannot reach {}: connect timed out after {} ms",
                    self.describe(),
                    self.connect_timeout.as_millis()
                ))
            })??;
        let conn = Arc::new(conn);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    async fn open(&self) -> Result<Conn, Errno> {
        let fail = |e: std::io::Error| {
            Errno::eio(format!(
                "cannot reach {}: {e} (is it running? try `eddy status`)",
                self.describe()
            ))
        };
        if let Some(sock) = self.entry.socket.as_ref().filter(|p| p.exists()) {
            let s = tokio::net::UnixStream::connect(sock).await.map_err(fail)?;
            let (r, w) = s.into_split();
            return self.handshake(r, w).await;
        }
        let s = tokio::net::TcpStream::connect(&self.entry.addr)
            .await
            .map_err(fail)?;
        let _ = s.set_nodelay(true);
        let (r, w) = s.into_split();
        self.handshake(r, w).await
    }

    async fn handshake<R, W>(&self, mut r: R, mut w: W) -> Result<Conn, Errno>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let proto = |e: eddy_proto::frame::FrameError| {
            Errno::eio(format!("handshake with {} failed: {e}", self.describe()))
        };
        let (_, body) = read_frame(&mut r, self.max_frame).await.map_err(proto)?;
        let hello: ServerHello = decode(&body, 4096)?;
        if hello.version != PROTOCOL_VERSION {
            return Err(Errno::new(
                libc::EPROTO,
                format!(
                    "{} speaks protocol {} but this client speaks {}: use matching versions",
                    self.describe(),
                    hello.version,
                    PROTOCOL_VERSION
                ),
            ));
        }
        let reply = ClientHello {
            version: PROTOCOL_VERSION,
            proof: auth::prove(&self.secret, &hello.nonce),
        };
        write_frame(&mut w, 0, &encode(&reply)?, self.max_frame)
            .await
            .map_err(proto)?;
        w.flush().await.map_err(|e| proto(e.into()))?;
        let (_, body) = read_frame(&mut r, self.max_frame).await.map_err(proto)?;
        let verdict: HelloResult = decode(&body, 4096)?;
        verdict.map_err(|e| {
            Errno::new(
                e.errno,
                format!("{} refused the connection: {}", self.describe(), e.msg),
            )
        })?;

        let pending: Pending = Arc::new(Mutex::new(HashMap::new()));
        let dead = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel(SEND_QUEUE);
        tokio::spawn(writer(w, rx, self.max_frame, dead.clone(), pending.clone()));
        tokio::spawn(reader(r, self.max_frame, dead.clone(), pending.clone()));
        Ok(Conn {
            tx,
            pending,
            next_id: AtomicU64::new(1),
            dead,
        })
    }
}

fn fail_all(dead: &AtomicBool, pending: &Pending, why: &str) {
    dead.store(true, Ordering::Release);
    for (_, tx) in lock(pending).drain() {
        let _ = tx.send(Err(Errno::eio(why.to_string())));
    }
}

async fn writer<W: AsyncWrite + Unpin>(
    w: W,
    mut rx: mpsc::Receiver<(u64, Vec<u8>)>,
    max_frame: u32,
    dead: Arc<AtomicBool>,
    pending: Pending,
) {
    let mut w = BufWriter::with_capacity(256 * 1024, w);
    while let Some((id, body)) = rx.recv().await {
        let mut res = write_frame(&mut w, id, &body, max_frame)
            .await
            .map_err(|e| e.to_string());
        // Batch whatever else is queued before flushing.
        while res.is_ok() {
            match rx.try_recv() {
                Ok((id, body)) => {
                    res = write_frame(&mut w, id, &body, max_frame)
                        .await
                        .map_err(|e| e.to_string())
                }
                Err(_) => break,
            }
        }
        if res.is_ok() {
            res = w.flush().await.map_err(|e| e.to_string());
        }
        if let Err(e) = res {
            fail_all(
                &dead,
                &pending,
                &format!("connection to daemon broken: {e}"),
            );
            return;
        }
    }
}

async fn reader<R: AsyncRead + Unpin>(
    mut r: R,
    max_frame: u32,
    dead: Arc<AtomicBool>,
    pending: Pending,
) {
    loop {
        match read_frame(&mut r, max_frame).await {
            Ok((id, body)) => {
                let resp: Response = decode(&body, u64::from(max_frame)).unwrap_or_else(Err);
                if let Some(tx) = lock(&pending).remove(&id) {
                    let _ = tx.send(resp);
                }
            }
            Err(e) => {
                fail_all(&dead, &pending, &format!("connection to daemon lost: {e}"));
                return;
            }
        }
    }
}
