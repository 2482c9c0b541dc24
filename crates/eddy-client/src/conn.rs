//! One authenticated, multiplexed connection to a daemon: many requests outstanding at once,
//! matched to their responses by request id. A broken connection fails every pending request
//! with EIO at once; the link reconnects on the next call.
//!
//! A call encodes its own frame, hands it to the connection's writer task over a channel and
//! awaits a oneshot: no lock is taken on the way. The writer registers each call's reply
//! slot with the reader (a second channel) before its frame goes out, then writes every frame
//! queued at that moment with one vectored write; the reader owns the map of pending replies
//! and takes the registrations in before it looks a reply up, so a registration always
//! arrives before its reply.

use bytes::Bytes;
use eddy_config::{Config, DaemonEntry};
use eddy_proto::auth::{self, HelloResult, ServerHello};
use eddy_proto::frame::{write_frames, FrameReader, OutFrame};
use eddy_proto::{
    decode_plain, response_from_frame, Errno, Reply, Request, Response, PROTOCOL_VERSION,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, watch};

/// What a caller waiting for a reply gets: the daemon's response, or why the connection
/// failed before it came.
type Outcome = Result<Response, String>;

/// A reply slot, as the writer hands it to the reader.
type Registration = (u64, oneshot::Sender<Outcome>);

/// Largest handshake frame read from a daemon: its hello and verdict are a few dozen bytes.
const HELLO_MAX: u32 = 4096;

/// Most calls the writer takes at once into one vectored write.
const BATCH: usize = 64;

/// One call on its way to the writer.
struct Call {
    id: u64,
    frame: OutFrame,
    reply: oneshot::Sender<Outcome>,
}

/// A live connection: the writer task's channel; the reader task owns the pending replies.
pub(crate) struct Conn {
    calls: mpsc::Sender<Call>,
    max_frame: u32,
    next_id: AtomicU64,
    dead: Arc<AtomicBool>,
    /// Set to why the connection is given up: the reader then fails every pending call.
    kill: Arc<watch::Sender<Option<String>>>,
}

impl Conn {
    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    fn kill(&self, why: &str) {
        self.dead.store(true, Ordering::Release);
        self.kill.send_replace(Some(why.to_string()));
    }

    /// Sends a request and waits for its response (no deadline here: the caller sets it; a
    /// caller that gives up drops its slot, and the reply, if it ever comes, is dropped).
    async fn call(&self, req: &Request) -> Outcome {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = match req.to_frame(id, self.max_frame) {
            Ok(f) => f,
            // Nothing was sent: this request fails, the connection is fine.
            Err(e) => return Ok(Err(e)),
        };
        let (reply, rx) = oneshot::channel();
        if self.calls.send(Call { id, frame, reply }).await.is_err() {
            return Err("connection broken".to_string());
        }
        rx.await
            .unwrap_or_else(|_| Err("connection lost".to_string()))
    }
}

/// Writes the calls' frames, batching those that queue up into one vectored write. Ends when
/// the connection is dropped (then the daemon sees the stream end) or a write fails.
async fn writer<W: AsyncWrite + Unpin>(
    mut w: W,
    mut calls: mpsc::Receiver<Call>,
    register: mpsc::UnboundedSender<Registration>,
    dead: Arc<AtomicBool>,
    kill: Arc<watch::Sender<Option<String>>>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut frames = Vec::with_capacity(BATCH);
    while calls.recv_many(&mut batch, BATCH).await > 0 {
        for call in batch.drain(..) {
            if call.reply.is_closed() {
                continue; // its caller gave up before it was sent
            }
            match register.send((call.id, call.reply)) {
                Ok(()) => frames.push(call.frame),
                Err(mpsc::error::SendError((_, reply))) => {
                    let _ = reply.send(Err("connection lost".to_string()));
                }
            }
        }
        if frames.is_empty() {
            continue;
        }
        if let Err(e) = write_frames(&mut w, &frames).await {
            dead.store(true, Ordering::Release);
            kill.send_replace(Some(format!("connection broken: {e}")));
            break;
        }
        frames.clear();
    }
    calls.close();
    while let Ok(call) = calls.try_recv() {
        let _ = call.reply.send(Err("connection broken".to_string()));
    }
}

/// Hands each response to the caller waiting for its id, until the stream ends, breaks or
/// the connection is given up; then fails every call still waiting.
async fn reader<R: AsyncRead + Unpin>(
    mut frames: FrameReader<R>,
    limit: u64,
    mut registrations: mpsc::UnboundedReceiver<Registration>,
    dead: Arc<AtomicBool>,
    mut kill: watch::Receiver<Option<String>>,
) {
    let mut pending: HashMap<u64, oneshot::Sender<Outcome>> = HashMap::new();
    // Slots whose callers gave up are swept when the map has doubled since the last sweep.
    let mut sweep_at = 1024;
    let why = loop {
        let frame = tokio::select! {
            biased;
            why = kill.wait_for(Option::is_some) => {
                break why.ok().and_then(|w| w.clone()).unwrap_or_else(|| "connection dropped".into());
            }
            f = frames.next() => f,
        };
        match frame {
            Ok(frame) => {
                while let Ok((id, tx)) = registrations.try_recv() {
                    pending.insert(id, tx);
                }
                let id = frame.id;
                let resp = response_from_frame(frame, limit).unwrap_or_else(Err);
                if let Some(tx) = pending.remove(&id) {
                    let _ = tx.send(Ok(resp));
                }
                if pending.len() >= sweep_at {
                    pending.retain(|_, tx| !tx.is_closed());
                    sweep_at = (pending.len() * 2).max(1024);
                }
            }
            Err(e) => break format!("connection to daemon lost: {e}"),
        }
    };
    dead.store(true, Ordering::Release);
    registrations.close();
    while let Ok((_, tx)) = registrations.try_recv() {
        let _ = tx.send(Err(why.clone()));
    }
    for (_, tx) in pending.drain() {
        let _ = tx.send(Err(why.clone()));
    }
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

/// The lazily (re)connected link to one daemon.
pub(crate) struct Link {
    pub entry: DaemonEntry,
    /// The current connection: read on every call (a read lock held for a clone, never
    /// across an await); replaced under `opening`.
    conn: RwLock<Option<Arc<Conn>>>,
    /// Held while a connection is opened, so concurrent callers open only one.
    opening: tokio::sync::Mutex<()>,
    /// Whether a connection was ever opened, and whether one has been opened since in place
    /// of an earlier one (taken by the client: see `take_reconnected`).
    connected: AtomicBool,
    reconnected: AtomicBool,
    /// Connections opened so far: the generation of the current one (decision 0015: an
    /// fsync fails when writes it covers were acknowledged on an earlier one).
    generation: AtomicU64,
    secret: Arc<Vec<u8>>,
    /// The chunk size of the deployment: a daemon announcing another is refused.
    chunk_size: u64,
    max_frame: u32,
    /// Calls that may wait for the writer (callers beyond it wait to queue).
    queue: usize,
    connect_timeout: Duration,
    rpc_timeout: Duration,
}

impl Link {
    pub fn new(entry: DaemonEntry, secret: Arc<Vec<u8>>, cfg: &Config) -> Link {
        Link {
            entry,
            conn: RwLock::new(None),
            opening: tokio::sync::Mutex::new(()),
            connected: AtomicBool::new(false),
            reconnected: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            secret,
            chunk_size: cfg.chunk_size,
            max_frame: cfg.max_frame_bytes,
            queue: cfg.max_requests_in_flight.max(1),
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
        let deadline = self.rpc_timeout;
        // Named only when something went wrong: not on the path of every RPC.
        let what = || format!("{} {}", req.op_name(), self.describe());
        let outcome = tokio::time::timeout(deadline, async {
            let conn = self.connection().await?;
            // Read while `conn` is current: a later connection replaces it only once it is
            // dead, and then this request fails.
            let generation = self.generation.load(Ordering::Acquire);
            Ok(conn
                .call(req)
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

    fn live(&self) -> Option<Arc<Conn>> {
        read(&self.conn).as_ref().filter(|c| !c.is_dead()).cloned()
    }

    async fn connection(&self) -> Result<Arc<Conn>, Errno> {
        if let Some(c) = self.live() {
            return Ok(c);
        }
        let _opening = self.opening.lock().await;
        if let Some(c) = self.live() {
            return Ok(c);
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
        *write(&self.conn) = Some(conn.clone());
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
        let taken = write(&self.conn).take();
        if let Some(c) = taken {
            c.kill("connection reset by the client");
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

    /// Reads the daemon's hello: its version first (so a daemon of any version is told
    /// apart), then checks that it is the daemon the deployment lists there, with the
    /// deployment's chunk size.
    fn check_server_hello(&self, frame: &eddy_proto::frame::Frame) -> Result<ServerHello, Errno> {
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
        Ok(hello)
    }

    async fn handshake<R, W>(&self, r: R, mut w: W) -> Result<Conn, Errno>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let proto = |e: eddy_proto::frame::FrameError| {
            Errno::eio(format!("handshake with {} failed: {e}", self.describe()))
        };
        let mut frames = FrameReader::new(r, HELLO_MAX);
        let first = frames.next().await.map_err(proto)?;
        let hello = self.check_server_hello(&first)?;
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
        frames.set_max(self.max_frame);

        let dead = Arc::new(AtomicBool::new(false));
        let (kill, kill_rx) = watch::channel(None);
        let kill = Arc::new(kill);
        let (calls, calls_rx) = mpsc::channel(self.queue);
        let (register, registrations) = mpsc::unbounded_channel();
        tokio::spawn(reader(
            frames,
            u64::from(self.max_frame),
            registrations,
            dead.clone(),
            kill_rx,
        ));
        tokio::spawn(writer(w, calls_rx, register, dead.clone(), kill.clone()));
        Ok(Conn {
            calls,
            max_frame: self.max_frame,
            next_id: AtomicU64::new(1),
            dead,
            kill,
        })
    }
}
