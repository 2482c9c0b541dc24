//! The network side: TCP and unix listeners, the handshake, and per connection one task that
//! reads frames and drives that connection's requests (concurrently, at most
//! `max_requests_in_flight`; work that may block runs on the blocking pool) and one writer
//! task (replies out as they complete, the ones queued together in one vectored write).
//! A bad frame closes its own connection only. On a protected connection (`wire`, decision
//! 0022) every request frame is checked before it is decoded (one that fails closes the
//! connection: nothing of it runs), and the writer seals the replies in the order it writes
//! them. Stopping waits, bounded, for in-flight requests, then persists the metadata store
//! and removes the ready file and the socket.

use crate::args::DaemonSettings;
use crate::backend::Backend;
use crate::chunks::ChunkStore;
use crate::gate::Unproven;
use crate::meta::MetaStore;
use crate::state::State;
use crate::tier::Tier;
use crate::DaemonError;
use bytes::Bytes;
use eddy_config::ready::{self, ReadyInfo};
use eddy_proto::auth::{self, ClientHello, DaemonProof, HelloResult, ServerHello};
use eddy_proto::frame::{write_frames, FrameError, FrameReader, OutFrame};
use eddy_proto::wire::{Keys, Mode, Opener, Sealer};
use eddy_proto::{decode_plain, response_frame, Errno, Request, Response, PROTOCOL_VERSION};
use futures::stream::{FuturesUnordered, StreamExt};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// Directory of the metadata store inside the root.
pub const META_DIR: &str = "meta";
/// Directory of the chunk files inside the root (named where clients check descriptors).
pub use eddy_proto::fdpass::CHUNKS_DIR;
/// Largest frame accepted before the client has proven the secret: a ClientHello is a few
/// dozen bytes, and nobody unauthenticated may make the daemon allocate more.
const HELLO_FRAME_MAX: u32 = 4096;
/// Pause after a failed accept (e.g. out of file descriptors) before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Dropped by every connection and request task when it ends: the daemon stops once all
/// clones are gone (or the grace period passes).
type Alive = mpsc::Sender<()>;

/// A running daemon.
pub struct Daemon {
    addr: SocketAddr,
    socket: Option<PathBuf>,
    state: Arc<State>,
    supervisor: JoinHandle<Result<(), DaemonError>>,
    /// Copies of the listeners, for a restart in place (`respawn`).
    listeners: crate::respawn::Listeners,
}

impl Daemon {
    /// Opens the stores under the root, binds the listeners, writes the ready file and starts
    /// serving. Returns once clients can connect.
    pub async fn start(settings: DaemonSettings) -> Result<Daemon, DaemonError> {
        let root = settings.root.clone();
        crate::rootdir::prepare_own(&root, &settings.secret)?;
        ready::remove_ready(&root).map_err(|source| DaemonError::Root {
            path: root.clone(),
            source,
        })?;
        // A store used before, with copies elsewhere: what it missed comes first.
        let mut settings = settings;
        let restarted = root.join(META_DIR).exists();
        if settings.config.replicas > 1 && restarted {
            settings.rejoin = true;
        }
        let grace = Duration::from_millis(settings.config.lock_grace_ms);
        let state = open_state(settings).await?;
        // A store used before: this daemon may have held locks whose holders are still
        // there; they take them back before anyone gets a new one (decision 0028).
        if restarted && !grace.is_zero() {
            state.file_locks.start_grace(grace);
            tracing::info!(
                grace_ms = grace.as_millis() as u64,
                "restarted: locks held before are taken back first"
            );
        }
        let (tcp, metrics, listeners) = crate::respawn::listen(&state.settings).await?;
        let addr = tcp.local_addr().map_err(|source| DaemonError::Listen {
            addr: state.settings.listen.to_string(),
            source,
        })?;
        let socket = state.settings.socket.clone();
        let unix = socket.as_deref().map(bind_unix).transpose()?;
        let info = ReadyInfo {
            id: state.settings.id,
            pid: std::process::id(),
            addr: addr.to_string(),
            socket: socket.as_ref().map(|p| p.display().to_string()),
            host: state.settings.host.clone(),
            metrics: metrics.as_ref().map(|(_, bound)| bound.to_string()),
        };
        ready::write_ready(&root, &info).map_err(|source| DaemonError::Ready {
            path: ready::ready_path(&root),
            source,
        })?;
        // The ready file says it too: a closed stdout is no reason to stop.
        if let Err(e) = ready::announce(&info) {
            tracing::warn!("cannot print the ready line on stdout: {e}");
        }
        tracing::info!(
            id = info.id,
            addr = %addr,
            socket = ?info.socket,
            metrics = ?info.metrics,
            root = %root.display(),
            chunk_size = state.settings.config.chunk_size,
            "eddyd ready"
        );
        if let Some((listener, _)) = metrics {
            tokio::spawn(crate::metrics::serve(
                listener,
                crate::metrics::Bounds::from_config(&state.settings.config),
                snapshot_of(&state),
                state.shutdown.subscribe(),
            ));
        }
        // Direct local I/O's descriptor socket in the root (decision 0048).
        if state.settings.config.direct_io {
            match crate::direct::bind(&root) {
                Ok(listener) => {
                    state.serving_direct();
                    crate::direct::serve(Arc::clone(&state), listener);
                }
                Err(e) => tracing::warn!(
                    "cannot bind the descriptor socket in {} (direct I/O off): {e}",
                    root.display()
                ),
            }
        }
        let supervisor = tokio::spawn(supervise(Arc::clone(&state), tcp, unix));
        tokio::spawn(crate::stats::sampler(Arc::clone(&state)));
        tokio::spawn(crate::stats::persister(Arc::clone(&state)));
        if state.placement().is_moving() {
            // Restarted during a move: what leaves this daemon is hinted again.
            let st = Arc::clone(&state);
            tokio::spawn(async move { st.scan_moves().await });
        }
        if state.repair().is_some() {
            tokio::spawn(crate::repair::repair_loop(Arc::clone(&state)));
            if state.repair().is_some_and(|r| r.is_rejoining()) {
                let full = state.settings.full;
                tokio::spawn(crate::repair::rejoin(Arc::clone(&state), full));
            }
        }
        Ok(Daemon {
            addr,
            socket,
            state,
            supervisor,
            listeners,
        })
    }

    /// Resolves when the daemon is to restart in place (`respawn::store_failed`).
    pub async fn store_failed(&self) {
        crate::respawn::store_failed(&self.state).await
    }

    /// The listeners' copies, for a restart in place (none are left to the daemon).
    pub fn take_listeners(&mut self) -> crate::respawn::Listeners {
        std::mem::take(&mut self.listeners)
    }

    /// The TCP address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The unix socket, if any.
    pub fn socket_path(&self) -> Option<&Path> {
        self.socket.as_deref()
    }

    /// Asks the daemon to stop (as SIGTERM does).
    pub fn shutdown(&self) {
        self.state.shutdown.send_replace(true);
    }

    /// Resolves once a stop has been asked for (by `shutdown` or a client's Shutdown).
    pub async fn stopped(&self) {
        stop_requested(&mut self.state.shutdown.subscribe()).await;
    }

    /// Waits until the daemon has stopped and cleaned up.
    pub async fn wait(self) -> Result<(), DaemonError> {
        self.supervisor
            .await
            .map_err(|e| DaemonError::Runtime(std::io::Error::other(e)))?
    }
}

/// What a scrape of the metrics endpoint reads: the daemon's counters at that moment.
fn snapshot_of(state: &Arc<State>) -> crate::metrics::Snapshot {
    let state = Arc::clone(state);
    Arc::new(move || state.snapshot())
}

/// Opens the stores under the root (metadata, chunks, the backend tier).
pub(crate) async fn open_state(settings: DaemonSettings) -> Result<Arc<State>, DaemonError> {
    tokio::task::spawn_blocking(move || {
        let root = &settings.root;
        crate::rootdir::private_dir(&root.join(META_DIR)).map_err(|source| DaemonError::Root {
            path: root.join(META_DIR),
            source,
        })?;
        let backend = Backend::new(&settings.config);
        let members = settings
            .members
            .clone()
            .and_then(eddy_placement::Placement::new);
        let meta = MetaStore::open(&root.join(META_DIR), &settings.config)?;
        let chunk_records = meta.chunk_records().map_err(|e| DaemonError::Meta {
            path: root.join(META_DIR),
            message: e.to_string(),
        })?;
        let chunks = ChunkStore::open(
            &root.join(CHUNKS_DIR),
            chunk_records,
            settings.config.chunk_size,
            u64::from(settings.config.max_rpc_data_bytes),
        )?
        .capacity(settings.config.capacity_bytes)
        .checksums(
            settings
                .config
                .checksums
                .then(|| settings.config.checksum_block()),
        );
        chunks.recover_torn().map_err(|e| DaemonError::Meta {
            path: root.join(CHUNKS_DIR),
            message: format!("finishing the changes a stopped daemon left: {e}"),
        })?;
        let tier = Tier::open(
            meta.tier_records(),
            Arc::clone(&backend),
            &settings.config,
            root,
            &chunks,
        )
        .map_err(|e| DaemonError::Meta {
            path: root.join(META_DIR),
            message: e.to_string(),
        })?
        .with_members(members.map(|p| (p, settings.id)));
        // With one copy too: a move's copies are hints (decision 0081).
        let hints = Some(
            meta.hint_records()
                .and_then(crate::hints::Hints::open)
                .map_err(|e| DaemonError::Meta {
                    path: root.join(META_DIR),
                    message: e.to_string(),
                })?,
        );
        let members =
            crate::members::Members::open(settings.id, root, settings.epoch).map_err(|e| {
                DaemonError::Meta {
                    path: root.join(crate::members::MEMBERSHIP_FILE),
                    message: e.to_string(),
                }
            })?;
        Ok(State::new(settings, meta, chunks, backend, tier, hints, members).into_arc())
    })
    .await
    .map_err(|e| DaemonError::Runtime(std::io::Error::other(e)))?
}

/// Binds the unix socket, replacing a stale socket file left by a dead daemon.
fn bind_unix(path: &Path) -> Result<UnixListener, DaemonError> {
    let sock_err = |message: String| DaemonError::Socket {
        path: path.to_owned(),
        message,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(sock_err(
                "a file that is not a socket is in the way; remove it or pass --socket".into(),
            ));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(sock_err(
                "another daemon is listening on it; stop it or pass --socket".into(),
            ));
        }
        std::fs::remove_file(path)
            .map_err(|e| sock_err(format!("cannot remove the stale socket: {e}")))?;
    }
    UnixListener::bind(path).map_err(|e| sock_err(format!("{e}; pass --socket PATH (or none)")))
}

/// Serves until a stop is asked for, then drains and cleans up.
async fn supervise(
    state: Arc<State>,
    tcp: TcpListener,
    unix: Option<UnixListener>,
) -> Result<(), DaemonError> {
    let (alive, mut all_done) = mpsc::channel::<()>(1);
    let unproven = Unproven::new(state.settings.config.max_unauthenticated);
    let tcp_task = tokio::spawn(accept_tcp(
        Arc::clone(&state),
        tcp,
        Arc::clone(&unproven),
        alive.clone(),
    ));
    let unix_task = unix.map(|u| {
        tokio::spawn(accept_unix(
            Arc::clone(&state),
            u,
            Arc::clone(&unproven),
            alive.clone(),
        ))
    });
    drop(alive);
    let mut stop = state.shutdown.subscribe();
    stop_requested(&mut stop).await;
    tracing::info!("eddyd stopping: no new connections, waiting for in-flight requests");
    let grace = Duration::from_millis(state.settings.config.rpc_timeout_ms);
    if tokio::time::timeout(grace, all_done.recv()).await.is_err() {
        tracing::warn!(
            grace_ms = grace.as_millis() as u64,
            "in-flight requests did not finish in time"
        );
    }
    tcp_task.abort();
    if let Some(t) = unix_task {
        t.abort();
    }
    cleanup(&state).await
}

async fn cleanup(state: &Arc<State>) -> Result<(), DaemonError> {
    // The counters' last word, for a profile made after this stop (decision 0032).
    crate::stats::persist_now(state).await;
    let st = Arc::clone(state);
    let persisted = tokio::task::spawn_blocking(move || st.meta.persist())
        .await
        .map_err(|e| DaemonError::Persist(e.to_string()))?;
    let root = &state.settings.root;
    if let Err(e) = ready::remove_ready(root) {
        tracing::warn!(error = %e, "cannot remove the ready file");
    }
    if let Some(sock) = &state.settings.socket {
        if let Err(e) = std::fs::remove_file(sock) {
            tracing::warn!(error = %e, socket = %sock.display(), "cannot remove the socket");
        }
    }
    if state.direct_socket() {
        // Woken (it sees the stop) and removed.
        let fd_sock = eddy_proto::fdpass::socket_path(root);
        let _ = std::os::unix::net::UnixStream::connect(&fd_sock);
        if let Err(e) = std::fs::remove_file(&fd_sock) {
            tracing::warn!(error = %e, socket = %fd_sock.display(), "cannot remove the descriptor socket");
        }
    }
    persisted.map_err(|e| DaemonError::Persist(e.to_string()))?;
    tracing::info!("eddyd stopped");
    Ok(())
}

async fn accept_tcp(
    state: Arc<State>,
    listener: TcpListener,
    unproven: Arc<Unproven>,
    alive: Alive,
) {
    let mut stop = state.shutdown.subscribe();
    loop {
        tokio::select! {
            _ = stop_requested(&mut stop) => return,
            res = listener.accept() => match res {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    detect_dead_peer(&stream, state.settings.config.rpc_timeout_ms);
                    tracing::debug!(%peer, "tcp connection");
                    let (r, w) = stream.into_split();
                    let place = unproven.admit();
                    tokio::spawn(serve_connection(Arc::clone(&state), r, w, (peer.to_string(), true), place, alive.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "tcp accept failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            }
        }
    }
}

async fn accept_unix(
    state: Arc<State>,
    listener: UnixListener,
    unproven: Arc<Unproven>,
    alive: Alive,
) {
    let mut stop = state.shutdown.subscribe();
    loop {
        tokio::select! {
            _ = stop_requested(&mut stop) => return,
            res = listener.accept() => match res {
                Ok((stream, _)) => {
                    eddy_proto::frame::widen_send_buffer(&stream);
                    // Registered for reading only (decision 0051).
                    let (r, w) = match eddy_proto::unixio::split(stream) {
                        Ok(halves) => halves,
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot register a unix connection");
                            continue;
                        }
                    };
                    let place = unproven.admit();
                    tokio::spawn(serve_connection(Arc::clone(&state), r, w, ("unix".to_string(), false), place, alive.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "unix accept failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            }
        }
    }
}

/// TCP keepalive and a user timeout on a client connection, so that a client whose node died
/// (no FIN ever comes) is noticed within the RPC deadline and its file locks are released:
/// probes start after a quarter of the deadline, two more follow an eighth apart, and the
/// connection is given up when the peer has acknowledged nothing for half the deadline (on
/// Linux that timeout also governs keepalive failure).
fn detect_dead_peer(stream: &tokio::net::TcpStream, rpc_timeout_ms: u64) {
    let rpc = std::time::Duration::from_millis(rpc_timeout_ms);
    if let Err(e) = eddy_proto::keepalive::detect_dead_peer(stream, rpc, rpc / 2) {
        tracing::warn!(error = %e, "cannot set TCP keepalive on a client connection");
    }
}

/// Replies the writer takes at once into one vectored write.
const REPLY_BATCH: usize = 64;

/// Serves one connection (`peer` names it; `tcp` tells TCP from the Unix socket): handshake,
/// then frames until the peer closes, a frame is bad or the daemon stops; the requests under
/// way then finish (their replies go out if they can).
async fn serve_connection<R, W>(
    state: Arc<State>,
    r: R,
    mut w: W,
    (peer, tcp): (String, bool),
    place: crate::gate::Place,
    alive: Alive,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut frames = FrameReader::new(r, HELLO_FRAME_MAX);
    let deadline = Duration::from_millis(state.settings.config.connect_timeout_ms);
    let pushed_out = Arc::clone(&place.pushed_out);
    let mode = eddy_rpc::wire_mode(state.settings.config.wire, tcp);
    let (sealer, opener) = tokio::select! {
        done = tokio::time::timeout(deadline, handshake(&state, &mut frames, &mut w, mode)) => match done {
            Ok(Ok(ends)) => ends,
            Ok(Err(why)) => {
                tracing::warn!(%peer, "handshake refused: {why}");
                return;
            }
            Err(_) => {
                tracing::warn!(%peer, "handshake timed out");
                return;
            }
        },
        _ = pushed_out.notified() => {
            tracing::warn!(
                %peer,
                max = state.settings.config.max_unauthenticated,
                "closing a connection that had not authenticated: newer ones pushed it out (max_unauthenticated)"
            );
            return;
        }
    };
    drop(place);
    let max = state.settings.config.max_frame_bytes;
    frames.protect(max, opener);
    // A permit per unanswered request, held until its reply is written: a client that sends
    // without reading replies stalls its own connection, never the daemon's memory.
    let in_flight = Arc::new(Semaphore::new(state.settings.config.max_requests_in_flight));
    // And the bytes of its frames and of the replies they are owed, likewise.
    let budget = connection_budget(&state.settings.config);
    let bytes = Arc::new(Semaphore::new(budget as usize));
    let conn = state.file_locks.open_conn();
    // Its client, once it identifies (decision 0032).
    let counted = Arc::new(crate::stats::ConnStats::default());
    let (tx, rx) = mpsc::unbounded_channel::<Outgoing>();
    tokio::spawn(write_loop(w, rx, sealer, peer.clone(), alive.clone()));
    let mut stop = state.shutdown.subscribe();
    // This connection's requests under way, driven by this task: no task per request.
    let mut running = FuturesUnordered::new();
    let mut permit: Option<OwnedSemaphorePermit> = None;
    loop {
        tokio::select! {
            biased;
            _ = stop_requested(&mut stop) => break,
            Some(()) = running.next(), if !running.is_empty() => continue,
            p = Arc::clone(&in_flight).acquire_owned(), if permit.is_none() => match p {
                Ok(p) => permit = Some(p),
                Err(_) => break,
            },
            frame = admit_frame(&mut frames, &bytes, budget), if permit.is_some() => {
                let (frame, held) = match frame {
                    Ok(f) => f,
                    Err(FrameError::Closed) => break,
                    Err(e @ FrameError::Forged { .. }) => {
                        tracing::warn!(%peer, error = %e, "a request frame failed its check; closing the connection, nothing of it is run");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(%peer, error = %e, "bad frame; closing the connection");
                        break;
                    }
                };
                let id = frame.id;
                let req = match Request::from_frame(frame, u64::from(max)) {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!(%peer, error = %e, "undecodable request; closing the connection");
                        break;
                    }
                };
                tracing::debug!(%peer, id, op = req.op_name(), "request");
                // Checked by the branch's condition.
                let Some(p) = permit.take() else { continue };
                let held = Held { _request: p, bytes: held };
                // Queued from now until its handler starts.
                let ctx = state.stats.arrive(&counted, req.op());
                let run = run_request(&state, conn, id, req, tx.clone(), held, (Arc::clone(&bytes), budget));
                running.push(crate::stats::REQUEST.scope(ctx, run));
            }
        }
    }
    // The client is gone (its mount stopped, its node died) or the daemon stops: its locks go,
    // and the renames it was completing are free for another client to complete.
    let dropped = state.file_locks.close_conn(conn);
    if dropped > 0 {
        tracing::info!(%peer, dropped, "connection closed; its file locks are released");
    }
    let leases = state.leases.close_conn(conn);
    if leases > 0 {
        tracing::info!(%peer, leases, "connection closed; the directory leases it held end");
    }
    state.mounts.close_conn(conn);
    state.members.close_conn(conn);
    let renames = state.meta.release_renames_of(conn);
    if renames > 0 {
        tracing::warn!(%peer, renames, "connection closed during directory renames; they are completed by the next client that connects");
    }
    drop(tx);
    while running.next().await.is_some() {}
    // Its direct leases end; a file it wrote without reporting all is adopted (0048).
    crate::direct::closed(&state, conn).await;
}

/// What a request holds of its connection's bounds until its reply is written.
struct Held {
    _request: OwnedSemaphorePermit,
    bytes: OwnedSemaphorePermit,
}

/// A reply on its way out, with what its request held (released once written).
type Outgoing = (OutFrame, Held);

/// The bytes one connection may have in flight: the configured bound, but at least one
/// frame of the largest size, and no more than a semaphore can count.
fn connection_budget(cfg: &eddy_config::Config) -> u32 {
    let want = cfg.max_connection_bytes.max(u64::from(cfg.max_frame_bytes));
    u32::try_from(want.min(Semaphore::MAX_PERMITS as u64)).unwrap_or(u32::MAX)
}

/// The next frame, once the bytes its header announces fit in the connection's budget:
/// the frame is not buffered before then. Returns it with those bytes held. Cancel-safe
/// (what was read stays buffered; a budget taken is given back).
async fn admit_frame<R: AsyncRead + Unpin>(
    frames: &mut FrameReader<R>,
    bytes: &Arc<Semaphore>,
    budget: u32,
) -> Result<(eddy_proto::frame::Frame, OwnedSemaphorePermit), FrameError> {
    // No length (the stream ended): `next` says how, and nothing is held.
    let want = frames.next_len().await?.unwrap_or(0);
    let want = u32::try_from(want).unwrap_or(u32::MAX).min(budget);
    let held = Arc::clone(bytes)
        .acquire_many_owned(want)
        .await
        .map_err(|_| FrameError::Closed)?;
    let frame = frames.next().await?;
    Ok((frame, held))
}

/// Bytes a request's reply may carry beyond its own frame: a read's data (the table's
/// `bulk: [reads(..)]`).
fn reply_bytes(req: &Request) -> u64 {
    req.bulk().reply.unwrap_or(0)
}

async fn run_request(
    state: &Arc<State>,
    conn: crate::advisory::ConnId,
    id: u64,
    req: Request,
    tx: mpsc::UnboundedSender<Outgoing>,
    mut held: Held,
    (bytes, budget): (Arc<Semaphore>, u32),
) {
    // Room for the reply before it is made; never more than the whole budget.
    let extra = reply_bytes(&req).saturating_sub(u64::from(held.bytes.num_permits() as u32));
    let extra = u32::try_from(extra)
        .unwrap_or(u32::MAX)
        .min(budget.saturating_sub(held.bytes.num_permits() as u32));
    if extra > 0 {
        match bytes.acquire_many_owned(extra).await {
            Ok(more) => held.bytes.merge(more),
            Err(_) => return,
        }
    }
    let carried = crate::stats::carried(&req);
    let resp = state
        .serve(conn, req)
        .await
        .map_err(|e| name_a_full_device(state.settings.id, e));
    let _ = crate::stats::REQUEST.try_with(|r| state.stats.finish(r, carried, &resp));
    let Some(frame) = reply_frame(id, &resp, state.settings.config.max_frame_bytes) else {
        return;
    };
    // The writer is gone only if the connection broke; the reply has nowhere to go.
    let _ = tx.send((frame, held));
}

/// An ENOSPC says which daemon's device is full: the room check names it, a write the device
/// itself refused (past the room check: a data file's last blocks) gets the name here.
fn name_a_full_device(id: u32, e: Errno) -> Errno {
    if e.errno == libc::ENOSPC && !e.msg.starts_with("daemon ") {
        Errno::new(libc::ENOSPC, format!("daemon {id}: {}", e.msg))
    } else {
        e
    }
}

/// The frame of a response; one that cannot be encoded or would not fit a frame becomes EIO.
fn reply_frame(id: u64, resp: &Response, max: u32) -> Option<OutFrame> {
    match response_frame(id, resp, max) {
        Ok(f) => Some(f),
        Err(e) => {
            let resp: Response = Err(Errno::eio(format!("cannot send the reply: {}", e.msg)));
            response_frame(id, &resp, max)
                .inspect_err(|e| tracing::error!(id, error = %e, "cannot send a reply"))
                .ok()
        }
    }
}

/// Writes replies as they complete: all those queued at that moment in one vectored write,
/// each sealed first on a protected connection (in the order they are written).
async fn write_loop<W>(
    mut w: W,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    mut sealer: Option<Sealer>,
    peer: String,
    _alive: Alive,
) where
    W: AsyncWrite + Unpin,
{
    let mut batch = Vec::with_capacity(REPLY_BATCH);
    let mut frames = Vec::with_capacity(REPLY_BATCH);
    while rx.recv_many(&mut batch, REPLY_BATCH).await > 0 {
        // The permits go once the write is done: these requests are answered.
        let mut permits: Vec<Held> = Vec::with_capacity(batch.len());
        for (f, p) in batch.drain(..) {
            let f = match &mut sealer {
                Some(s) => match f.sealed(s) {
                    Ok(f) => f,
                    Err(e) => {
                        tracing::warn!(%peer, error = %e, "cannot seal a reply; closing the connection");
                        return;
                    }
                },
                None => f,
            };
            frames.push(f);
            permits.push(p);
        }
        if let Err(e) = write_frames(&mut w, &frames).await {
            tracing::debug!(%peer, error = %e, "connection write failed");
            return;
        }
        frames.clear();
        drop(permits);
    }
    let _ = w.shutdown().await;
}

/// The daemon's side of the handshake; on refusal the client gets the reason as an errno.
/// Returns the connection's protection: what seals the replies and checks the requests
/// (none in clear).
async fn handshake<R, W>(
    state: &State,
    r: &mut FrameReader<R>,
    w: &mut W,
    mode: Mode,
) -> Result<(Option<Sealer>, Option<Opener>), String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let max = HELLO_FRAME_MAX;
    let nonce = auth::new_nonce();
    let id = state.settings.id;
    let hello = ServerHello {
        version: PROTOCOL_VERSION,
        daemon_id: id,
        nonce,
        chunk_size: state.settings.config.chunk_size,
        instance: state.instance,
        wire: mode,
    };
    send_frame(w, &hello, max).await?;
    let frame = r.next().await.map_err(|e| e.to_string())?;
    let secret = &state.settings.secret;
    let verdict = check_client(secret, &nonce, id, mode, &frame);
    let sent: HelloResult = verdict
        .as_ref()
        .map(|(p, _)| p.clone())
        .map_err(Clone::clone);
    send_frame(w, &sent, max).await?;
    let (_, client_nonce) = verdict.map_err(|e| e.to_string())?;
    Ok(match Keys::derive(secret, mode, &nonce, &client_nonce) {
        Some(keys) => {
            let (s, o) = keys.daemon();
            (Some(s), Some(o))
        }
        None => (None, None),
    })
}

/// Checks a client's hello: its version first (read alone, so a peer of any version gets
/// EPROTO), then its wire mode (the daemon's `mode`, or EPROTO), then its proof; on success,
/// the daemon's own proof and the client's nonce.
fn check_client(
    secret: &[u8],
    nonce: &[u8],
    id: u32,
    mode: Mode,
    frame: &eddy_proto::frame::Frame,
) -> Result<(DaemonProof, [u8; auth::NONCE_BYTES]), Errno> {
    let limit = u64::from(HELLO_FRAME_MAX);
    let version = decode_plain::<auth::Version>(frame, limit)?.version;
    if version != PROTOCOL_VERSION {
        return Err(Errno::new(
            libc::EPROTO,
            format!(
                "client speaks protocol {version}, this daemon speaks {PROTOCOL_VERSION}: use matching versions of eddy and eddyd"
            ),
        ));
    }
    let h: ClientHello = decode_plain(frame, limit)?;
    if h.wire != mode {
        return Err(Errno::new(
            libc::EPROTO,
            format!(
                "client uses wire = {} but this daemon requires wire = {mode} on this \
                 connection: both ends must use the same wire setting",
                h.wire
            ),
        ));
    }
    if !auth::verify_client(secret, nonce, &h.nonce, mode, &h.proof) {
        return Err(Errno::new(libc::EACCES, "wrong deployment secret"));
    }
    let proof = DaemonProof {
        proof: auth::daemon_proof(secret, &h.nonce, nonce, id, mode),
    };
    Ok((proof, h.nonce))
}

async fn send_frame<W, T>(w: &mut W, msg: &T, max: u32) -> Result<(), String>
where
    W: AsyncWrite + Unpin,
    T: serde::Serialize,
{
    let frame = OutFrame::new(0, msg, Bytes::new(), max).map_err(|e| e.to_string())?;
    write_frames(w, &[frame]).await.map_err(|e| e.to_string())
}

/// Resolves once a stop has been asked for.
async fn stop_requested(rx: &mut watch::Receiver<bool>) {
    // The sender lives in the daemon state, which outlives every receiver's task.
    let _ = rx.wait_for(|stop| *stop).await;
}
