//! The daemon's shared state, and the entry of a request: the checks every request passes
//! (rejoining, room) before its handler (`ops`) runs. Store work runs on the blocking pool,
//! at most `config.io_threads` at a time, so disk I/O overlaps with the network without
//! starving the async workers.

use crate::advisory::ConnId;
use crate::args::DaemonSettings;
use crate::backend::Backend;
use crate::chunks::ChunkStore;
use crate::meta::MetaStore;
use crate::tier::Tier;
use eddy_proto::path::normalize;
use eddy_proto::{Backing, DaemonStatus, Errno, Request, Response};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{watch, Semaphore};

/// Everything a request may touch.
pub struct State {
    pub settings: DaemonSettings,
    pub meta: MetaStore,
    pub chunks: ChunkStore,
    pub backend: Arc<Backend>,
    pub tier: Tier,
    /// Advisory file locks of the files whose lock owner this daemon is.
    pub file_locks: crate::advisory::LockTable,
    /// The waits-for graph, when clients take this daemon for their deadlock coordinator
    /// (decision 0028).
    pub lock_waits: crate::deadlock::WaitGraph,
    io_permits: Semaphore,
    /// The reserve kept on the metadata device.
    pub(crate) room: crate::room::Room,
    requests: AtomicU64,
    started: Instant,
    /// This process's instance number, announced in the hello (`ServerHello::instance`).
    pub instance: u64,
    /// Set to true to stop the daemon.
    pub shutdown: watch::Sender<bool>,
    /// The placement this daemon follows, and the copies of metadata changes it sends to
    /// their other owners (replicas > 1, or items moving: decision 0081).
    replicator: crate::replicate::Replicator,
    /// Hints, the repair loop and rejoining (decision 0021); with one copy, only the hints
    /// and pushes of a move (decision 0081).
    repair: Option<crate::repair::Repair>,
    /// A move's scan, pacing and count (decision 0081).
    pub(crate) mover: crate::moving::Mover,
    /// What this daemon counts of the I/O it serves (decision 0032).
    pub stats: crate::stats::Stats,
    /// Direct local I/O's leases and tokens (decision 0048).
    pub(crate) direct: crate::direct::Direct,
    /// Whether the descriptor socket is served.
    direct_socket: std::sync::atomic::AtomicBool,
    /// This state itself, for work a request leaves to the background (read-ahead of a
    /// stream, decision 0072); set when the state is made (`into_arc`).
    me: std::sync::Weak<State>,
    /// Read-ahead fetches of streams planned and not done (at most `READ_AHEAD_QUEUED`), and the
    /// turns of those that fetch at once (`read_ahead_at_once`).
    reading_ahead: std::sync::atomic::AtomicUsize,
    read_ahead_turns: Semaphore,
    /// Directory leases granted here and noted here (decision 0075).
    pub(crate) leases: crate::leases::Leases,
    /// The FUSE mounts connected, as they said (decision 0079).
    pub(crate) mounts: crate::mounts::Mounts,
    /// The membership and its epoch, and the epoch of each client's connection (decision
    /// 0081).
    pub(crate) members: crate::members::Members,
    /// The connections to the other daemons a recall is sent over: made from the
    /// deployment file when first needed (and, with one copy, again after a failure).
    /// (With the membership epoch they were made at: a newer one makes them again.)
    lease_peers: std::sync::Mutex<Option<(u64, Arc<eddy_rpc::Daemons>)>>,
}

/// Read-ahead fetches of streams one daemon runs at once (each fetches its chunks one after
/// the other, on the blocking pool): a quarter of the request threads, so that read-ahead
/// never holds more backend I/O than that.
fn read_ahead_at_once(io_threads: usize) -> usize {
    (io_threads / 4).max(1)
}

/// Read-ahead fetches planned and waiting for a turn at most; a read that finds this many
/// plans nothing, and its stream's next read plans again.
const READ_AHEAD_QUEUED: usize = 256;

/// Rounds of eviction a request that found no room waits for at most (`with_room`).
const ROOM_ROUNDS: usize = 64;
/// Pause of a round that found nothing to evict under the capacity: concurrent fetches may
/// hold the room until they are stored (64 rounds: at most 0.64 s before ENOSPC).
const ROOM_WAIT: std::time::Duration = std::time::Duration::from_millis(10);

impl State {
    pub fn new(
        settings: DaemonSettings,
        meta: MetaStore,
        chunks: ChunkStore,
        backend: Arc<Backend>,
        tier: Tier,
        hints: Option<crate::hints::Hints>,
        members: crate::members::Members,
    ) -> State {
        let io_threads = settings.config.io_threads;
        let room = crate::room::Room::new(
            settings.id,
            &settings.root.join(crate::META_DIR),
            &settings.root.join(crate::CHUNKS_DIR),
            settings.config.meta_reserve_bytes,
        );
        let replicator = crate::replicate::Replicator::new(&settings);
        if let Some(m) = members.adopted() {
            if let Err(e) = replicator.follow(&m) {
                tracing::warn!(epoch = m.epoch, "cannot follow the membership kept: {e}");
            }
        }
        // Rejoining takes what the other copies hold: with one copy there are none.
        let rejoin = settings.rejoin && replicator.sends_replicas();
        let repair = hints.map(|h| crate::repair::Repair::new(h, rejoin));
        let mover = crate::moving::Mover::new(&settings.config, replicator.is_moving());
        let stats =
            crate::stats::Stats::new(&settings.config, settings.id, &settings.host, &settings.job);
        let instance = rand::random();
        let leases = crate::leases::Leases::new(&settings.config, instance);
        State {
            stats,
            replicator,
            repair,
            mover,
            room,
            settings,
            meta,
            chunks,
            backend,
            tier,
            file_locks: Default::default(),
            lock_waits: Default::default(),
            io_permits: Semaphore::new(io_threads),
            requests: AtomicU64::new(0),
            started: Instant::now(),
            instance,
            leases,
            mounts: Default::default(),
            members,
            lease_peers: Default::default(),
            shutdown: watch::Sender::new(false),
            direct: Default::default(),
            direct_socket: Default::default(),
            me: std::sync::Weak::new(),
            reading_ahead: Default::default(),
            read_ahead_turns: Semaphore::new(read_ahead_at_once(io_threads)),
        }
    }

    /// The state in an `Arc` that knows itself (for background work).
    pub fn into_arc(self) -> Arc<State> {
        Arc::new_cyclic(|me| State {
            me: me.clone(),
            ..self
        })
    }

    /// Read-ahead for the stream of a read with a hint (decision 0072): plans the chunks of
    /// a linked file this daemon owns that the stream reads next, and fetches them in the
    /// background, on the blocking pool, at most `read_ahead_at_once` at a time, after the
    /// read's reply. Does nothing with `stream_hints` off or `stream_readahead_chunks` 0,
    /// or while `READ_AHEAD_QUEUED` fetches wait.
    pub(crate) fn read_ahead(
        &self,
        id: eddy_proto::FileId,
        pieces: &[eddy_proto::Piece],
        backing: &Backing,
        hint: eddy_proto::StreamHint,
    ) {
        let cfg = &self.settings.config;
        if !cfg.stream_hints || cfg.stream_readahead_chunks == 0 {
            return;
        }
        if self.reading_ahead.load(Ordering::Relaxed) >= READ_AHEAD_QUEUED {
            return;
        }
        let (Some(st), Ok(rt)) = (self.me.upgrade(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        let ks = self
            .tier
            .plan_read_ahead(id, pieces, backing, hint, cfg.stream_readahead_chunks);
        if ks.is_empty() {
            return;
        }
        self.reading_ahead.fetch_add(1, Ordering::AcqRel);
        let backing = backing.clone();
        rt.spawn(async move {
            let fetched = match st.read_ahead_turns.acquire().await {
                Ok(_permit) => {
                    let s = Arc::clone(&st);
                    tokio::task::spawn_blocking(move || {
                        s.with_room(|| s.tier.prefetch(&s.chunks, id, &ks, &backing, false))
                    })
                    .await
                    .map_err(|e| Errno::eio(format!("read-ahead failed unexpectedly: {e}")))
                    .and_then(|r| r)
                }
                Err(_) => Err(Errno::eio("the daemon is stopping")),
            };
            match fetched {
                Ok(bytes) => st.tier.read_ahead_done(bytes),
                Err(e) => tracing::debug!("read-ahead of a stream failed (its reads fetch): {e}"),
            }
            st.reading_ahead.fetch_sub(1, Ordering::AcqRel);
        });
    }

    /// Whether this daemon serves a descriptor socket (direct local I/O, decision 0048).
    pub(crate) fn direct_socket(&self) -> bool {
        self.direct_socket
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Notes that the descriptor socket is served.
    pub(crate) fn serving_direct(&self) {
        self.direct_socket
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// The hints and their pushes (repair with replicas > 1, a move with any).
    pub(crate) fn repair(&self) -> Option<&crate::repair::Repair> {
        self.repair.as_ref()
    }

    /// The placement this daemon follows and its connections to the others.
    pub(crate) fn placement(&self) -> &crate::replicate::Replicator {
        &self.replicator
    }

    /// The copier of metadata as replication knows it: replicas > 1 and the other daemons
    /// known.
    pub(crate) fn replicator(&self) -> Option<&crate::replicate::Replicator> {
        self.replicator.sends_replicas().then_some(&self.replicator)
    }

    /// Repair as replication knows it (replicas > 1, the other daemons known): what
    /// `RepairFor`, `Repair`, `Hint` and rejoining use.
    pub(crate) fn copies_repair(&self) -> Option<&crate::repair::Repair> {
        self.replicator().and(self.repair())
    }

    /// Whether the metadata keys a request changes go to other daemons: copies, or a move.
    pub(crate) fn sends_changes(&self) -> bool {
        self.replicator.is_moving() || self.replicator().is_some()
    }

    /// Executes one request that came over connection `conn`, by its handler (`ops`). A
    /// client's request on a connection of an older membership epoch is refused (decision
    /// 0081); a rejoining daemon answers clients as if it were down (decision 0021); a request that
    /// adds entries or data is refused when the room is gone. Never panics; every failure
    /// is an errno for the client.
    pub async fn serve(self: &Arc<Self>, conn: ConnId, req: Request) -> Response {
        if !req.op().props().rejoining() {
            if let Some(refused) = self.members.refusal(conn) {
                return Err(refused);
            }
        }
        if let Some(r) = &self.repair {
            if r.is_rejoining() && !req.op().props().rejoining() {
                return Err(Errno::new(
                    libc::EHOSTDOWN,
                    format!(
                        "daemon {} is rejoining (taking the changes it missed); use another copy",
                        self.settings.id
                    ),
                ));
            }
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        let props = req.op().props();
        if props.changes() || props.grows() {
            self.room.relieve();
        }
        if let Some(bytes) = req.adds_bytes() {
            if let Err(e) = self.room.check(bytes) {
                if !self.served_when_full(&req) {
                    return Err(e);
                }
            }
        }
        if !self.leases.any_registered() {
            if !adds_name(req.op()) {
                return self.route(conn, req).await;
            }
            // Under the gate, so that a registration that begins meanwhile lists this name
            // (it waits for the gate) or this request sees the registration (it was
            // installed before the gate was asked for).
            let gate = self.leases.gate.read().await;
            if !self.leases.any_registered() {
                return self.route(conn, req).await;
            }
            drop(gate);
        }
        let Some((dir, adds)) = self.lease_key(&req) else {
            return self.route(conn, req).await;
        };
        loop {
            self.clear_leases(conn, &dir).await;
            if !adds {
                return self.route(conn, req).await;
            }
            // A request that may add a name runs under the gate: a lease registered from now
            // on lists the names only once it ended (`Leases::gate`).
            let _gate = self.leases.gate.read().await;
            if self.leases.registered(&dir).is_none_or(|r| r.conn == conn) {
                return self.route(conn, req).await;
            }
        }
    }

    /// Routes a client's request to its handler; one that touches what moves (`touches_moving`)
    /// is admitted at this daemon's membership epoch first and holds the admission until it
    /// is answered (`Members::admit`: an adoption waits for it, decision 0081).
    async fn route(self: &Arc<Self>, conn: ConnId, req: Request) -> Response {
        let _admitted = match touches_moving(req.op()) {
            true => Some(self.members.admit(conn).await?),
            false => None,
        };
        crate::ops::route(self, conn, req).await
    }

    /// The directory whose lease a request of another client than its holder recalls (the
    /// parent of the name it is about, or the directory it lists), and whether it may add a
    /// name there. `None` for a request about no name (or about a directory's own record:
    /// its times, its link count).
    fn lease_key(&self, req: &Request) -> Option<(String, bool)> {
        use eddy_proto::Op;
        let op = req.op();
        let path = match op {
            Op::TouchDir | Op::CountSubdirs | Op::Accessed => return None,
            _ => normalize(req.path()?, self.meta.limits()).ok()?,
        };
        match op {
            Op::Readdir | Op::HasChildren | Op::ListSubtree => Some((path, false)),
            _ => {
                let (parent, _) = eddy_proto::path::split(&path)?;
                let adds = adds_name(op);
                Some((parent.to_string(), adds))
            }
        }
    }

    /// Before a request of connection `conn` about names in `dir`: while a lease of another
    /// connection is registered on `dir`, its granter takes it back (the holder flushes what
    /// it queued and gives it back, or it is revoked after `lease_recall_timeout_ms`); then
    /// the registration is dropped here. A granter that cannot be reached has lost its
    /// leases with its connections: the registration is dropped too, once the holder has
    /// stopped answering from the lease for want of news from it (`Config::lease_fence`,
    /// decision 0075, *Replication*). With copies, a granter
    /// found unreachable lately (by a recall or a copy of metadata) is not asked again: the
    /// client's request must not give up on this daemon meanwhile (`recall_at`).
    pub(crate) async fn clear_leases(self: &Arc<Self>, conn: ConnId, dir: &str) {
        while let Some(r) = self.leases.registered(dir) {
            if r.conn == conn {
                return;
            }
            let granter = r.lease.daemon;
            if granter == self.settings.id {
                self.leases.recall(dir, r.lease.id).await;
            } else if let Err(e) = self.recall_at(granter, dir, r.lease.id).await {
                // The holder may still answer from the lease until `lease_valid_for` after
                // it last heard from the granter, which was before the granter became
                // unreachable, so before now: the registration goes once that has passed
                // for certain (`lease_fence`, measured here from now, on this host's clock).
                let fence = self.settings.config.lease_fence();
                tracing::warn!(
                    dir,
                    granter,
                    "cannot recall a lease from its granter ({e}): its holder has stopped \
                     answering from it in {fence:?}"
                );
                tokio::time::sleep(fence).await;
            }
            self.leases.unregister(dir, r.lease);
        }
    }

    /// Sends a `Recall` to the granter `daemon`, unless it was found unreachable lately (by
    /// a recall, or by a copy of metadata: replication's down marks). A granter that cannot
    /// be reached is then marked down for the copies too, so that the request the recall
    /// came before does not wait for it a second time.
    async fn recall_at(&self, daemon: u32, dir: &str, id: u64) -> Result<(), Errno> {
        let copies = self.replicator().and_then(|r| r.peers(false));
        let peers = self.lease_peers()?;
        if peers.is_down(daemon) || copies.as_ref().is_some_and(|c| c.is_down(daemon)) {
            return Err(Errno::eio(format!(
                "daemon {daemon} was found unreachable lately"
            )));
        }
        let req = eddy_proto::req::Recall {
            dir: dir.to_string(),
            id,
        };
        match peers.try_call(daemon, req).await {
            Ok(()) => Ok(()),
            Err(e) => {
                if matches!(e, eddy_rpc::Failure::Unreachable(_)) {
                    if let Some(c) = &copies {
                        c.mark_down(daemon);
                    }
                    if self.replicator().is_none() {
                        // The deployment file may have changed: read again next time (with
                        // copies the down mark is kept instead, until it expires).
                        *eddy_proto::sync::lock(&self.lease_peers) = None;
                    }
                }
                Err(e.into_errno())
            }
        }
    }

    /// The connections to the other daemons a recall is sent over, made from the membership
    /// adopted (decision 0081), else from the deployment file; made again once a newer
    /// membership is adopted. A recall must cost the client's request less than the client's
    /// own deadline: its connect timeout is at most half of it, as a copy's. Its answer may
    /// take as long as the granter waits for the holder (`lease_recall_timeout_ms`, at most
    /// half the RPC deadline), so it is waited for three quarters of it: a granter that
    /// answers in time is never taken for unreachable.
    fn lease_peers(&self) -> Result<Arc<eddy_rpc::Daemons>, Errno> {
        let mut peers = eddy_proto::sync::lock(&self.lease_peers);
        let epoch = self.members.epoch();
        if let Some((at, p)) = peers.as_ref() {
            if *at == epoch {
                return Ok(p.clone());
            }
        }
        let deadlines = |mut c: eddy_config::Config| {
            let rpc = c.rpc_timeout_ms;
            c.rpc_timeout_ms = (rpc / 4 * 3).max(1);
            c.connect_timeout_ms = c.connect_timeout_ms.min((rpc / 2).max(1));
            c
        };
        let daemons = match self.members.adopted() {
            Some(m) => self.replicator.daemons_of(&m, deadlines)?,
            None => {
                let file = self.settings.peers.as_ref().ok_or_else(|| {
                    Errno::eio(
                        "the daemon was not told the other daemons (--peers or --deployment)",
                    )
                })?;
                let mut dep = eddy_config::Deployment::load(file)
                    .map_err(|e| Errno::eio(format!("cannot read {}: {e}", file.display())))?;
                dep.config = deadlines(dep.config);
                eddy_rpc::Daemons::new(&dep)?
            }
        };
        let daemons = Arc::new(daemons);
        *peers = Some((epoch, daemons.clone()));
        Ok(daemons)
    }

    /// Whether a request the room check refused would add nothing after all: a non-exclusive
    /// `Create` of an entry this daemon holds answers that entry (a client connecting makes
    /// sure of the root that way, an `open(O_CREAT)` of an existing file too), so it is served
    /// on a full device like any lookup; and the hidden name a mount gives a file unlinked
    /// while open (the half of an unlink: the entry moves, one is removed at its last close)
    /// is taken from the reserve, so that files can be removed from a full deployment
    /// (decision 0060).
    fn served_when_full(&self, req: &Request) -> bool {
        match req {
            Request::Insert(i) => i
                .path
                .rsplit('/')
                .next()
                .is_some_and(eddy_config::is_hidden_orphan),
            // Removals only: a directory can be emptied on a full device.
            Request::Batch(b) => b
                .ops
                .iter()
                .all(|o| matches!(o, eddy_proto::BatchOp::Remove(_))),
            Request::Create(c) if !c.exclusive => self
                .meta
                .key_of(&c.path)
                .and_then(|(_, key)| self.meta.get(&key))
                .is_ok_and(|i| i.is_some()),
            _ => false,
        }
    }

    /// Sends the current state of the changed keys to their other owners, before the reply.
    pub(crate) async fn replicate(&self, changed: Vec<Vec<u8>>) {
        if changed.is_empty() {
            return;
        }
        let accounted = match self.sends_changes() {
            true => self.forward(&self.replicator, changed.clone()).await,
            false => true,
        };
        // Every other owner has the changes now, or a hint says it missed them; else the
        // marks stay for the next start (decision 0080).
        self.meta.pending().end(&changed, accounted);
    }

    /// Sends `changed` to their other owners, with hints for those that missed them; false
    /// when some change is neither on its owners nor in a hint.
    async fn forward(
        &self,
        replicator: &crate::replicate::Replicator,
        changed: Vec<Vec<u8>>,
    ) -> bool {
        let states = match self.meta.key_states(changed) {
            Ok(states) => states,
            Err(e) => {
                tracing::warn!("cannot read the changed keys to copy them: {e}");
                return false;
            }
        };
        let mut accounted = true;
        for (daemon, missed) in replicator.forward(states).await {
            tracing::debug!(daemon, keys = missed.len(), "a copy missed changes");
            let Some(repair) = &self.repair else {
                accounted = false;
                continue;
            };
            let items = missed.into_iter().map(|s| crate::hints::Item::Key(s.key));
            if let Err(e) = repair.hints.add(daemon, items) {
                tracing::warn!(daemon, "cannot record what a copy missed: {e}");
                accounted = false;
            }
        }
        accounted
    }

    /// Runs `f` on the blocking pool under an I/O permit.
    pub(crate) async fn blocking_any<T, F>(self: &Arc<Self>, f: F) -> Result<T, Errno>
    where
        T: Send + 'static,
        F: FnOnce(&State) -> T + Send + 'static,
    {
        let _permit = self
            .io_permits
            .acquire()
            .await
            .map_err(|_| Errno::eio("the daemon is stopping"))?;
        // The permit is held: the request's queue wait ends here.
        self.stats.started();
        let st = Arc::clone(self);
        tokio::task::spawn_blocking(move || f(&st))
            .await
            .map_err(|e| Errno::eio(format!("request failed unexpectedly: {e}")))
    }

    /// The backing of a data request on a linked file, as the tier uses it: its path
    /// normalised (so that no `..` leads outside the backend directory) and linked.
    pub(crate) fn linked(&self, b: Backing) -> Result<Backing, Errno> {
        let path = normalize(&b.path, self.meta.limits())?;
        self.backend.resolve_linked(&path)?;
        Ok(Backing { path, ..b })
    }

    /// Runs something that stores chunks (a write, a fetch, an allocation); refused with
    /// ENOSPC, room is made by evicting cached backend chunks and it is tried once more:
    /// clean ones only when the capacity refused it (`capacity_bytes`, decision 0023), clean
    /// and then written-back dirty ones when the device is full.
    pub(crate) fn with_room<T>(&self, attempt: impl Fn() -> Result<T, Errno>) -> Result<T, Errno> {
        let mut refusals = self.chunks.capacity_refusals();
        let mut result = attempt();
        // Space preallocated for sequential writers is given back first (decision 0074).
        if matches!(&result, Err(e) if e.errno == libc::ENOSPC)
            && self.chunks.release_preallocated() > 0
        {
            refusals = self.chunks.capacity_refusals();
            result = attempt();
        }
        // Concurrent fetches and writes may take the room made before this one retries:
        // evicting goes on while it frees something, a bounded number of rounds.
        for _ in 0..ROOM_ROUNDS {
            match result {
                Err(ref e) if e.errno == libc::ENOSPC && self.backend.is_active() => {
                    match self.chunks.capacity_limit() {
                        Some(limit) if self.chunks.capacity_refusals() != refusals => {
                            // Nothing evictable now may only mean that the room is held by
                            // concurrent fetches not yet done (a chunk is evictable once
                            // stored): wait a little for them, a bounded number of rounds.
                            if !self.tier.make_room_within(&self.chunks, limit) {
                                std::thread::sleep(ROOM_WAIT);
                            }
                        }
                        _ => {
                            if !matches!(self.tier.make_room(&self.chunks), Ok(n) if n > 0) {
                                return result;
                            }
                        }
                    }
                    refusals = self.chunks.capacity_refusals();
                    result = attempt();
                }
                _ => return result,
            }
        }
        result
    }

    /// What this daemon counted of the I/O it served so far (the `Stats` reply; the
    /// Prometheus endpoint reads it too). Touches no storage.
    pub fn snapshot(&self) -> eddy_proto::stats::DaemonStats {
        let mut s = self.stats.snapshot(&self.backend);
        s.leases = self.leases.stats();
        s
    }

    /// What `Status` replies: storage use, the tier's figures, integrity and repair counters.
    pub(crate) fn status(&self) -> Result<DaemonStatus, Errno> {
        let root = &self.settings.root;
        let vfs = nix::sys::statvfs::statvfs(root)
            .map_err(|e| Errno::new(e as i32, format!("statvfs {}: {e}", root.display())))?;
        let frag = vfs.fragment_size() as u64;
        let (chunk_bytes, chunks) = self.chunks.usage();
        let (preallocated_bytes, preallocated_total_bytes) = self.chunks.preallocated();
        let (checksum_errors, corrupt_payloads) = self.chunks.integrity_counters();
        let (mounts, mounts_unlisted) = self.mounts.listed();
        Ok(DaemonStatus {
            id: self.settings.id,
            host: self.settings.host.clone(),
            pid: std::process::id(),
            root: root.display().to_string(),
            fs_total_bytes: vfs.blocks() as u64 * frag,
            // The reserve file's blocks are the store's: counted free, as before it held
            // them, and the reserve is taken off what writers are offered (`reserve_bytes`).
            fs_free_bytes: (vfs.blocks_free() as u64 * frag).saturating_add(self.room.held()),
            fs_avail_bytes: (vfs.blocks_available() as u64 * frag).saturating_add(self.room.held()),
            fs_files: vfs.files() as u64,
            fs_files_free: vfs.files_free() as u64,
            chunk_bytes,
            preallocated_bytes,
            preallocated_total_bytes,
            chunks,
            tier: {
                let mut t = self.tier.status(&self.chunks);
                (t.conflict_paths, t.conflicts) = self.tier.conflicts(&self.meta);
                t
            },
            entries: self.meta.entries(),
            uptime_s: self.started.elapsed().as_secs(),
            requests: self.requests.load(Ordering::Relaxed),
            checksum_errors,
            corrupt_payloads,
            corrupt_chunks: self.chunks.corrupt().len() as u64,
            hints: self.repair.as_ref().map_or(0, |r| r.hints.total()),
            hints_for: self
                .repair
                .as_ref()
                .map_or_else(Vec::new, |r| r.hints.per_target()),
            rejoining: self.repair.as_ref().is_some_and(|r| r.is_rejoining()),
            device: device_of(root),
            capacity_bytes: self.chunks.capacity_limit().unwrap_or(0),
            reserve_bytes: self.room.reserve_of(vfs.blocks() as u64 * frag),
            mounts,
            mounts_unlisted,
        })
    }
}

/// A name of the file system under `root` that every daemon whose root is on it, on this
/// machine, gives alike and no other does: the machine's boot id (network namespaces share
/// it, and their daemons share the disks too) and the device number. `statfs` counts each
/// device once by it (decision 0060).
fn device_of(root: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let machine = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| crate::args::system_host_name());
    match std::fs::metadata(root) {
        Ok(m) => format!("{machine}:{}", m.dev()),
        // Unknown: a name of its own, so it is counted alone.
        Err(_) => format!("{machine}:{}", root.display()),
    }
}

/// Whether a client's request reads or changes what a move copies (data, names,
/// attributes): the requests of clients (not `REJOINING`) that change, grow or reach the
/// storage. Leases, lock waits and statuses are not held up by an adoption.
fn touches_moving(op: eddy_proto::Op) -> bool {
    let p = op.props();
    !p.rejoining() && (p.changes() || p.grows() || p.storage())
}

/// Whether a request may add a name to a directory (a lease's registration lists names
/// only once those that began before it ended: `Leases::gate`).
fn adds_name(op: eddy_proto::Op) -> bool {
    use eddy_proto::Op;
    matches!(op, Op::Create | Op::Link | Op::Insert)
}
