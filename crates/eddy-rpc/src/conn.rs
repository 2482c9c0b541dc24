//! One authenticated, multiplexed connection to a daemon: many requests outstanding at once,
//! matched to their responses by request id. A broken connection fails every pending request
//! with EIO at once; the link reconnects on the next call.
//!
//! A call encodes its own frame, registers its reply slot with the reader (a channel the
//! reader drains before it looks a reply up, so a registration always arrives before its
//! reply) and writes the frame itself with a non-blocking vectored write, under a short lock:
//! no task hand-off on the way out. What the socket does not take at once waits in the
//! connection's send queue for the writer task, which sends it when the socket is writable;
//! later calls queue behind it, so frames never interleave.
//!
//! On a protected connection (`wire`, decision 0022) a frame is sealed as it joins the send
//! queue, under the same lock, so the sequence numbers follow the order on the wire, and the
//! reader checks every reply frame before it is decoded; one that fails closes the
//! connection and every call in flight fails with EIO naming the reason.
//!
//! `conn/open.rs` opens a connection: the socket and the handshake.

mod open;

use eddy_config::{Config, DaemonEntry, Wire};
use eddy_proto::frame::{FrameError, FrameReader, SendQueue};
use eddy_proto::wire::{Mode, Sealer};
use eddy_proto::{response_from_frame, Errno, Reply, Request, Response};
use std::collections::HashMap;
use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::io::AsyncRead;
use tokio::sync::{mpsc, oneshot, watch, Notify};

/// What a caller waiting for a reply gets: the daemon's response, or why the connection
/// failed before it came.
type Outcome = Result<Response, String>;

/// Why a call to one daemon failed: it answered with an error, or it could not be reached
/// (refused, connection lost, no answer in time, failed handshake).
#[derive(Debug, Clone)]
pub enum Failure {
    Daemon(Errno),
    Unreachable(Errno),
}

impl Failure {
    pub fn into_errno(self) -> Errno {
        match self {
            Failure::Daemon(e) | Failure::Unreachable(e) => e,
        }
    }

    pub fn errno(&self) -> &Errno {
        match self {
            Failure::Daemon(e) | Failure::Unreachable(e) => e,
        }
    }

    pub fn is_unreachable(&self) -> bool {
        matches!(self, Failure::Unreachable(_))
    }
}

/// The protection a connection uses under the `wire` setting: on TCP (`tcp`) or on the
/// Unix socket.
pub fn wire_mode(wire: Wire, tcp: bool) -> Mode {
    match wire.resolve(tcp) {
        Wire::Mac => Mode::Mac,
        Wire::Sealed => Mode::Sealed,
        Wire::Auto | Wire::Clear => Mode::Clear,
    }
}

/// Environment variables an MPI launcher or Slurm sets to the process's rank, in the order
/// they are looked at.
pub const RANK_VARS: [&str; 4] = [
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
    "SLURM_PROCID",
];

/// The variable Slurm sets in a job step to the name of the node it runs on.
pub const NODE_VAR: &str = "SLURMD_NODENAME";

/// Who this process is, as it identifies to every daemon it connects to (`Identify`): its
/// node (Slurm's name for it, `NODE_VAR`, in a job step: the node Slurm means, also where
/// several slurmd "nodes" share a host; else the host name), its pid (read each time: a
/// forked child is another client) and its rank (`RANK_VARS`) when it has one.
pub fn client_id() -> eddy_proto::stats::ClientId {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let host = HOST.get_or_init(|| {
        let slurm = std::env::var(NODE_VAR)
            .ok()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty());
        slurm.unwrap_or_else(|| {
            // privileged-path: the kernel's /proc
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "localhost".to_string())
        })
    });
    let rank = RANK_VARS
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse::<u32>().ok());
    eddy_proto::stats::ClientId {
        host: host.clone(),
        pid: std::process::id(),
        rank,
    }
}

/// Why a request was not sent: its frame could not be made (the connection is fine), or
/// the connection is closed or broke.
enum NotSent {
    Refused(Errno),
    Closed(String),
}

/// A reply slot, as a call hands it to the reader.
type Registration = (u64, oneshot::Sender<Outcome>);

/// Largest handshake frame read from a daemon: its hello and verdict are a few dozen bytes.
const HELLO_MAX: u32 = 4096;

/// The writing side of a socket, written without blocking by callers and the writer task.
/// A Unix socket is registered for reading only (`eddy_proto::unixio`, decision 0051).
enum WriteHalf {
    Tcp(tokio::net::tcp::OwnedWriteHalf),
    Unix(eddy_proto::unixio::UnixWrite),
}

impl WriteHalf {
    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
        match self {
            WriteHalf::Tcp(w) => w.try_write_vectored(bufs),
            WriteHalf::Unix(w) => w.try_write_vectored(bufs),
        }
    }

    /// Closes the socket both ways at once (the daemon sees it closed), whoever still holds
    /// the connection.
    fn shut(&self) {
        use std::os::fd::AsRawFd;
        let fd = match self {
            WriteHalf::Tcp(w) => w.as_ref().as_raw_fd(),
            WriteHalf::Unix(w) => w.as_raw_fd(),
        };
        // SAFETY: shutdown(2) on a descriptor this half keeps open; it frees nothing.
        unsafe {
            libc::shutdown(fd, libc::SHUT_RDWR);
        }
    }

    async fn writable(&self) -> std::io::Result<()> {
        match self {
            WriteHalf::Tcp(w) => w.writable().await,
            WriteHalf::Unix(w) => w.writable().await,
        }
    }
}

/// What the callers and the writer task share: the socket's writing side and the frames
/// waiting for it.
struct Out {
    half: WriteHalf,
    state: Mutex<OutState>,
    /// Wakes the writer task: frames were queued, or the connection is closing.
    wake: Notify,
}

struct OutState {
    queue: SendQueue,
    /// Why nothing more can be sent, once that is so.
    closed: Option<String>,
}

impl Out {
    fn state(&self) -> std::sync::MutexGuard<'_, OutState> {
        eddy_proto::sync::lock(&self.state)
    }

    fn close(&self, why: String) {
        self.state().closed.get_or_insert(why);
        self.wake.notify_one();
    }
}

/// Tells when a connection is dead; holds none of it open.
pub struct Closed {
    ended: Arc<Notify>,
    dead: Arc<AtomicBool>,
}

impl Closed {
    /// Whether the connection is dead now.
    pub fn is_closed(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Returns once the connection is dead (at once if it is).
    pub async fn wait(self) {
        let ended = self.ended.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if self.dead.load(Ordering::Acquire) {
            return;
        }
        ended.await;
    }
}

/// A live connection: its sending side and the channel of reply slots to its reader.
pub(crate) struct Conn {
    out: Arc<Out>,
    register: mpsc::UnboundedSender<Registration>,
    max_frame: u32,
    next_id: AtomicU64,
    dead: Arc<AtomicBool>,
    /// Woken when the reader ends (the connection is dead then).
    ended: Arc<Notify>,
    /// Set to why the connection is given up: the reader then fails every pending call.
    kill: Arc<watch::Sender<Option<String>>>,
}

impl Drop for Conn {
    /// The last user gone: the writer task ends and the socket closes (the daemon sees the
    /// stream end).
    fn drop(&mut self) {
        self.out.close("connection dropped".to_string());
    }
}

impl Conn {
    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// What tells when this connection is dead, without holding it open.
    fn closed_signal(&self) -> Closed {
        Closed {
            ended: self.ended.clone(),
            dead: self.dead.clone(),
        }
    }

    fn kill(&self, why: &str) {
        self.dead.store(true, Ordering::Release);
        self.kill.send_replace(Some(why.to_string()));
    }

    /// Sends a request and waits for its response (no deadline here: the caller sets it; a
    /// caller that gives up drops its slot, and the reply, if it ever comes, is dropped).
    async fn call(&self, req: &Request) -> Outcome {
        match self.send(req) {
            Ok(rx) => rx
                .await
                .unwrap_or_else(|_| Err("connection lost".to_string())),
            Err(NotSent::Refused(e)) => Ok(Err(e)),
            Err(NotSent::Closed(why)) => Err(why),
        }
    }

    /// Sends a request now (its frame is queued in order before this returns) and returns
    /// where its response will come; or why it could not be sent.
    fn send(&self, req: &Request) -> Result<oneshot::Receiver<Outcome>, NotSent> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = match req.to_frame(id, self.max_frame) {
            Ok(f) => f,
            // Nothing was sent: this request fails, the connection is fine.
            Err(e) => return Err(NotSent::Refused(e)),
        };
        let (reply, rx) = oneshot::channel();
        {
            let mut st = self.out.state();
            if let Some(why) = &st.closed {
                return Err(NotSent::Closed(why.clone()));
            }
            if self.register.send((id, reply)).is_err() {
                return Err(NotSent::Closed("connection lost".to_string()));
            }
            let idle = st.queue.is_empty();
            if let Err(e) = st.queue.push(frame) {
                let why = format!("cannot send: {e}");
                st.closed = Some(why.clone());
                drop(st);
                self.kill(&why);
                return Err(NotSent::Closed(why));
            }
            if idle {
                match st.queue.send_with(|b| self.out.half.try_write_vectored(b)) {
                    Ok(true) => {}
                    // The socket is full: the writer task sends the rest.
                    Ok(false) => self.out.wake.notify_one(),
                    Err(e) => {
                        let why = format!("connection broken: {e}");
                        st.closed = Some(why.clone());
                        drop(st);
                        self.kill(&why);
                        return Err(NotSent::Closed(why));
                    }
                }
            }
            // Otherwise the writer task was woken by whoever queued the first waiting frame.
        }
        Ok(rx)
    }
}

/// Sends what the callers could not, when the socket is writable again. Ends when the
/// connection is dropped or a write fails (then every pending call fails).
async fn writer(out: Arc<Out>, dead: Arc<AtomicBool>, kill: Arc<watch::Sender<Option<String>>>) {
    loop {
        out.wake.notified().await;
        loop {
            let sent = {
                let mut st = out.state();
                if st.closed.is_some() {
                    return; // dropped, or broken and given up by a caller
                }
                st.queue.send_with(|b| out.half.try_write_vectored(b))
            };
            let failed = match sent {
                Ok(true) => break,
                Ok(false) => out.half.writable().await.err(),
                Err(e) => Some(e),
            };
            if let Some(e) = failed {
                let why = format!("connection broken: {e}");
                out.state().closed.get_or_insert_with(|| why.clone());
                dead.store(true, Ordering::Release);
                kill.send_replace(Some(why));
                return;
            }
        }
    }
}

/// Hands each response to the caller waiting for its id, until the stream ends, breaks or
/// the connection is given up; then fails every call still waiting.
async fn reader<R: AsyncRead + Unpin>(
    mut frames: FrameReader<R>,
    out: Arc<Out>,
    limit: u64,
    mut registrations: mpsc::UnboundedReceiver<Registration>,
    dead: Arc<AtomicBool>,
    ended: Arc<Notify>,
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
            Err(e @ FrameError::Forged { .. }) => {
                tracing::warn!(error = %e, "a reply frame failed its check; closing the connection");
                let why = format!("connection to daemon closed: {e}");
                out.close(why.clone());
                out.half.shut();
                break why;
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
    ended.notify_waiters();
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
    /// Daemon instances connected to so far: the generation of the current connection
    /// (decision 0015: an fsync fails when writes it covers were acknowledged by an earlier
    /// instance, which may have died with them). A new connection to the same instance (the
    /// old one broke, or was reset) keeps the generation.
    generation: AtomicU64,
    /// The instance the current or last connection reached (0 before the first).
    instance: AtomicU64,
    secret: Arc<Vec<u8>>,
    /// The chunk size of the deployment: a daemon announcing another is refused.
    chunk_size: u64,
    /// The `wire` setting of the deployment: a daemon announcing another mode is refused.
    wire: Wire,
    max_frame: u32,
    connect_timeout: Duration,
    rpc_timeout: Duration,
    /// What this client says of itself beyond `Identify` on each of its connections, once it
    /// has something to say (a mount's `Mounted`, decision 0079): shared by every link of
    /// the client.
    announced: Announced,
    /// The membership epoch this client places by, as each new connection announces it
    /// (`Epoch`, right after `Identify`; decision 0081); raised by `tell_epoch`.
    epoch: AtomicU64,
}

/// A request a client sends first on each of its connections, after `Identify`, once set
/// (`Daemons::announce_mount`).
pub(crate) type Announced = Arc<RwLock<Option<Request>>>;

impl Link {
    pub fn new(
        entry: DaemonEntry,
        secret: Arc<Vec<u8>>,
        cfg: &Config,
        announced: Announced,
        epoch: u64,
    ) -> Link {
        Link {
            entry,
            conn: RwLock::new(None),
            opening: tokio::sync::Mutex::new(()),
            connected: AtomicBool::new(false),
            reconnected: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            instance: AtomicU64::new(0),
            secret,
            chunk_size: cfg.chunk_size,
            wire: cfg.wire,
            max_frame: cfg.max_frame_bytes,
            connect_timeout: Duration::from_millis(cfg.connect_timeout_ms),
            rpc_timeout: Duration::from_millis(cfg.rpc_timeout_ms),
            announced,
            epoch: AtomicU64::new(epoch),
        }
    }

    /// Whether this link reaches the daemon `entry` names at the same address.
    pub fn reaches(&self, entry: &DaemonEntry) -> bool {
        self.entry.id == entry.id
            && self.entry.addr == entry.addr
            && self.entry.socket == entry.socket
    }

    fn describe(&self) -> String {
        format!("daemon {} ({})", self.entry.id, self.entry.addr)
    }

    /// Sends one request and waits for the reply, within the RPC deadline; also returns the
    /// generation of the connection that carried the request. Every failure to reach the
    /// daemon is EIO with a message naming it, told apart from an error the daemon answered
    /// (the other copies are tried then; decision 0020).
    pub async fn call_classified(&self, req: &Request) -> Result<(Reply, u64), Failure> {
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
            Ok(Ok(Ok(resp))) => resp.map_err(|e| match e.errno {
                // A daemon rejoining after a restart serves no client yet (decision 0021):
                // as good as down, the other copies answer.
                libc::EHOSTDOWN => Failure::Unreachable(e),
                _ => Failure::Daemon(e),
            }),
            Ok(Ok(Err(why))) => Err(Failure::Unreachable(Errno::eio(format!(
                "{}: {why}",
                what()
            )))),
            Ok(Err(e)) => Err(Failure::Unreachable(e)),
            Err(_) => Err(Failure::Unreachable(Errno::eio(format!(
                "{}: no answer within {} ms (is the daemon alive? try `eddy status`)",
                what(),
                deadline.as_millis()
            )))),
        }
    }

    /// Sends one request (its frame queued on the connection in order, written at once
    /// unless the socket is full) and returns, without its reply: the future that waits for
    /// the reply within the RPC deadline, as `call_classified` would. Requests started one
    /// after the other on a link go out in that order.
    pub async fn start(
        &self,
        req: &Request,
    ) -> Result<
        impl std::future::Future<Output = Result<(Reply, u64), Failure>> + Send + 'static,
        Failure,
    > {
        let deadline = self.rpc_timeout;
        let what = format!("{} {}", req.op_name(), self.describe());
        let conn = tokio::time::timeout(deadline, self.connection())
            .await
            .map_err(|_| {
                Failure::Unreachable(Errno::eio(format!(
                    "{what}: no connection within {} ms",
                    deadline.as_millis()
                )))
            })?
            .map_err(Failure::Unreachable)?;
        let generation = self.generation.load(Ordering::Acquire);
        let rx = match conn.send(req) {
            Ok(rx) => rx,
            Err(NotSent::Refused(e)) => return Err(Failure::Daemon(e)),
            Err(NotSent::Closed(why)) => {
                return Err(Failure::Unreachable(Errno::eio(format!("{what}: {why}"))))
            }
        };
        Ok(async move {
            let _conn = conn;
            match tokio::time::timeout(deadline, rx).await {
                Ok(Ok(Ok(resp))) => resp.map(|r| (r, generation)).map_err(|e| match e.errno {
                    libc::EHOSTDOWN => Failure::Unreachable(e),
                    _ => Failure::Daemon(e),
                }),
                Ok(Ok(Err(why))) => Err(Failure::Unreachable(Errno::eio(format!("{what}: {why}")))),
                Ok(Err(_)) => Err(Failure::Unreachable(Errno::eio(format!(
                    "{what}: connection lost"
                )))),
                Err(_) => Err(Failure::Unreachable(Errno::eio(format!(
                    "{what}: no answer within {} ms",
                    deadline.as_millis()
                )))),
            }
        })
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
        let (conn, instance) = (Arc::new(conn.0), conn.1);
        self.identify(&conn);
        let epoch = self.epoch.load(Ordering::Acquire);
        // At epoch 0, the epoch a daemon assumes of a connection that said none, there is
        // nothing to say. Otherwise the epoch must be noted before any other request of this
        // connection is looked at (the daemon runs a connection's requests concurrently, and
        // one sent right behind it could be refused for the epoch it has not seen yet): the
        // reply is awaited before the connection is used. New connections are rare; this
        // costs one round trip each.
        if epoch > 0 {
            tokio::time::timeout(self.rpc_timeout, self.announce_epoch(&conn, epoch))
                .await
                .map_err(|_| {
                    Errno::eio(format!(
                        "{}: the membership epoch was not acknowledged within {} ms",
                        self.describe(),
                        self.rpc_timeout.as_millis()
                    ))
                })??;
        }
        *write(&self.conn) = Some(conn.clone());
        if self.instance.swap(instance, Ordering::AcqRel) != instance {
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        if self.connected.swap(true, Ordering::AcqRel) {
            self.reconnected.store(true, Ordering::Release);
        }
        Ok(conn)
    }

    /// Tells the daemon who this client is (`Identify`), first on a new connection, before
    /// any other request can be queued on it; the reply is awaited in the background. A
    /// failure is logged and the connection goes on: the daemon then counts its requests
    /// under an unknown client (decision 0032).
    fn identify(&self, conn: &Conn) {
        let req = Request::Identify(eddy_proto::req::Identify {
            client: client_id(),
        });
        self.send_unawaited(conn, &req);
        let announced = read(&self.announced).clone();
        if let Some(req) = announced {
            self.send_unawaited(conn, &req);
        }
    }

    /// Sends what the client announces (`Daemons::announce_mount`) on the current connection,
    /// if there is one: a connection opened from now on sends it itself (`identify`). Waits
    /// for a connection being opened, so that none is missed.
    pub async fn announce(&self) {
        let _opening = self.opening.lock().await;
        let announced = read(&self.announced).clone();
        if let (Some(conn), Some(req)) = (self.live(), announced) {
            self.send_unawaited(&conn, &req);
        }
    }

    /// Tells the daemon over `conn` that this client places by `epoch` and waits for its
    /// reply. A daemon that refuses it is logged and the connection goes on (its requests
    /// may then be refused for their epoch, which the caller follows); a connection that
    /// breaks is an error.
    async fn announce_epoch(&self, conn: &Conn, epoch: u64) -> Result<(), Errno> {
        let req = Request::Epoch(eddy_proto::req::Epoch { epoch });
        match conn.call(&req).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                tracing::debug!(epoch, daemon = self.entry.id, error = %e, "a daemon refused the membership epoch");
                Ok(())
            }
            Err(why) => Err(Errno::eio(format!("epoch to {}: {why}", self.describe()))),
        }
    }

    /// This client places by `epoch` from now on (a newer hosts file was read): a connection
    /// opened from now on says so, and the current one, if any, is told before this returns
    /// (waiting for a connection being opened, so that none is missed). A connection that
    /// cannot be told is given up: the next call opens one that says it first.
    pub async fn tell_epoch(&self, epoch: u64) {
        let _opening = self.opening.lock().await;
        self.epoch.store(epoch, Ordering::Release);
        let Some(conn) = self.live() else { return };
        let told = tokio::time::timeout(self.rpc_timeout, self.announce_epoch(&conn, epoch)).await;
        if !matches!(told, Ok(Ok(()))) {
            tracing::debug!(
                epoch,
                daemon = self.entry.id,
                "the membership epoch could not be told; the connection is given up"
            );
            conn.kill("the membership epoch could not be told");
        }
    }

    /// Sends `req` on `conn` and awaits its reply in the background: a failure is logged and
    /// the connection goes on.
    fn send_unawaited(&self, conn: &Conn, req: &Request) {
        let what = format!("{} to {}", req.op_name(), self.describe());
        let failed = move |why: String| tracing::debug!("{what} failed: {why}");
        match conn.send(req) {
            Ok(rx) => {
                tokio::spawn(async move {
                    match rx.await {
                        Ok(Ok(Ok(_))) => {}
                        Ok(Ok(Err(e))) => failed(e.to_string()),
                        Ok(Err(why)) => failed(why),
                        Err(_) => failed("connection lost".to_string()),
                    }
                });
            }
            Err(NotSent::Refused(e)) => failed(e.to_string()),
            Err(NotSent::Closed(why)) => failed(why),
        }
    }

    /// What tells when the current connection is dead (`None` when there is none): what a
    /// caller that must act when it is lost waits for.
    pub fn closed_signal(&self) -> Option<Closed> {
        read(&self.conn).as_ref().map(|c| c.closed_signal())
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
}

impl From<tokio::net::tcp::OwnedWriteHalf> for WriteHalf {
    fn from(w: tokio::net::tcp::OwnedWriteHalf) -> WriteHalf {
        WriteHalf::Tcp(w)
    }
}

impl From<eddy_proto::unixio::UnixWrite> for WriteHalf {
    fn from(w: eddy_proto::unixio::UnixWrite) -> WriteHalf {
        WriteHalf::Unix(w)
    }
}

impl Conn {
    /// A connection past its handshake: starts its reader and writer tasks.
    fn start<R: AsyncRead + Unpin + Send + 'static>(
        frames: FrameReader<R>,
        half: WriteHalf,
        max_frame: u32,
        sealer: Option<Sealer>,
    ) -> Conn {
        let dead = Arc::new(AtomicBool::new(false));
        let ended = Arc::new(Notify::new());
        let (kill, kill_rx) = watch::channel(None);
        let kill = Arc::new(kill);
        let (register, registrations) = mpsc::unbounded_channel();
        let out = Arc::new(Out {
            half,
            state: Mutex::new(OutState {
                queue: SendQueue::sealing(sealer),
                closed: None,
            }),
            wake: Notify::new(),
        });
        tokio::spawn(reader(
            frames,
            out.clone(),
            u64::from(max_frame),
            registrations,
            dead.clone(),
            ended.clone(),
            kill_rx,
        ));
        tokio::spawn(writer(out.clone(), dead.clone(), kill.clone()));
        Conn {
            out,
            register,
            max_frame,
            next_id: AtomicU64::new(1),
            dead,
            ended,
            kill,
        }
    }
}
