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
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

/// What a caller waiting for a reply gets: the daemon's response, or why the connection
/// failed before it came.
type Outcome = Result<Response, String>;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Outcome>>>>;

type Writer = Box<dyn AsyncWrite + Unpin + Send>;

/// A live connection. Callers write their own frames (under a lock, so frames never
/// interleave); one reader task hands each response to the caller waiting for its id.
pub(crate) struct Conn {
    writer: tokio::sync::Mutex<Writer>,
    max_frame: u32,
    pending: Pending,
    next_id: AtomicU64,
    dead: Arc<AtomicBool>,
}

impl Conn {
    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Sends a request and waits for its response (no deadline here: the caller sets it).
    async fn call(&self, body: Vec<u8>) -> Outcome {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        // Dropped pending entry on early return is cleaned by the guard.
        let guard = PendingGuard {
            pending: &self.pending,
            id,
        };
        if let Err(e) = self.send(id, &body).await {
            let why = format!("connection broken: {e}");
            fail_all(&self.dead, &self.pending, &why);
            return Err(why);
        }
        let outcome = rx
            .await
            .unwrap_or_else(|_| Err("connection lost".to_string()));
        drop(guard);
        outcome
    }

    /// Writes one frame. If this future is dropped half-way (a deadline), the stream holds a
    /// partial frame: the guard marks the connection dead so nobody writes after it.
    async fn send(&self, id: u64, body: &[u8]) -> Result<(), String> {
        let mut w = self.writer.lock().await;
        let cut = CutGuard {
            dead: &self.dead,
            armed: true,
        };
        write_frame(&mut *w, id, body, self.max_frame)
            .await
            .map_err(|e| e.to_string())?;
        w.flush().await.map_err(|e| e.to_string())?;
        cut.disarm();
        Ok(())
    }
}

struct CutGuard<'a> {
    dead: &'a AtomicBool,
    armed: bool,
}

impl CutGuard<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for CutGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.dead.store(true, Ordering::Release);
        }
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
    /// Whether a connection was ever opened, and whether one has been opened since in place
    /// of an earlier one (taken by the client: see `take_reconnected`).
    connected: AtomicBool,
    reconnected: AtomicBool,
    /// Connections opened so far: the generation of the current one (decision 0015: an
    /// fsync fails when writes it covers were acknowledged on an earlier one).
    generation: AtomicU64,
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
            connected: AtomicBool::new(false),
            reconnected: AtomicBool::new(false),
            generation: AtomicU64::new(0),
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
    /// Also returns the generation of the connection that carried the request.
    pub async fn call_tracked(&self, req: &Request) -> Result<(Reply, u64), Errno> {
        let body = encode(req)?;
        let deadline = self.rpc_timeout;
        // Named only when something went wrong: not on the path of every RPC.
        let what = || format!("{} {}", req.op_name(), self.describe());
        let outcome = tokio::time::timeout(deadline, async {
            let conn = self.connection().await?;
            // Read while `conn` is current: a later connection replaces it only once it is
            // dead, and then this request fails.
            let generation = self.generation.load(Ordering::Acquire);
            Ok(conn
                .call(body)
                .await
                .map(|r| r.map(|reply| (reply, generation))))
        })
        .await;
        match outcome {
            Ok(Ok(Ok(resp))) => resp,
            Ok(Ok(Err(why))) => Err(Errno::eio(format!("{}: {why}", what()))),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Errno::eio(format!(
                "{}: no answer within {} ms (is the daemon alive? try `eddy status`)",
                what(),
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
        self.generation.fetch_add(1, Ordering::AcqRel);
        if self.connected.swap(true, Ordering::AcqRel) {
            self.reconnected.store(true, Ordering::Release);
        }
        Ok(conn)
    }

    /// True once after a connection replaced an earlier one (the daemon restarted, or the
    /// connection broke or was reset).
    pub fn take_reconnected(&self) -> bool {
        self.reconnected.swap(false, Ordering::AcqRel)
    }

    /// Gives up the current connection: its pending requests fail, and it closes once they
    /// have returned (the daemon then sees it closed); the next call opens a new one.
    pub async fn reset(&self) {
        if let Some(c) = self.conn.lock().await.take() {
            fail_all(&c.dead, &c.pending, "connection reset by the client");
        }
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
            eddy_proto::frame::widen_send_buffer(&s);
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
        tokio::spawn(reader(r, self.max_frame, dead.clone(), pending.clone()));
        Ok(Conn {
            writer: tokio::sync::Mutex::new(Box::new(w)),
            max_frame: self.max_frame,
            pending,
            next_id: AtomicU64::new(1),
            dead,
        })
    }
}

fn fail_all(dead: &AtomicBool, pending: &Pending, why: &str) {
    dead.store(true, Ordering::Release);
    for (_, tx) in lock(pending).drain() {
        let _ = tx.send(Err(why.to_string()));
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
                    let _ = tx.send(Ok(resp));
                }
            }
            Err(e) => {
                fail_all(&dead, &pending, &format!("connection to daemon lost: {e}"));
                return;
            }
        }
    }
}
