//! Request execution: the daemon's shared state and the dispatch from a `Request` to the
//! stores. Store work runs on the blocking pool, at most `config.io_threads` at a time, so
//! disk I/O overlaps with the network without starving the async workers.

use crate::advisory::ConnId;
use crate::args::DaemonSettings;
use crate::backend::Backend;
use crate::chunks::ChunkStore;
use crate::meta::MetaStore;
use crate::tier::Tier;
use eddy_proto::path::normalize;
use eddy_proto::{Backing, DaemonStatus, Errno, Reply, Request, Response};
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
    io_permits: Semaphore,
    /// The reserve kept on the metadata device.
    room: crate::room::Room,
    requests: AtomicU64,
    started: Instant,
    /// This process's instance number, announced in the hello (`ServerHello::instance`).
    pub instance: u64,
    /// Set to true to stop the daemon.
    pub shutdown: watch::Sender<bool>,
    /// Sends copies of metadata changes to their other owners (replicas > 1).
    replicator: Option<crate::replicate::Replicator>,
    /// Hints, the repair loop and rejoining (replicas > 1; decision 0021).
    repair: Option<crate::repair::Repair>,
}

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
    ) -> State {
        let io_threads = settings.config.io_threads;
        let room = crate::room::Room::new(
            settings.id,
            &settings.root.join(crate::META_DIR),
            &settings.root.join(crate::CHUNKS_DIR),
            settings.config.meta_reserve_bytes,
        );
        let replicator = crate::replicate::Replicator::new(&settings);
        let repair = match (&replicator, hints) {
            (Some(_), Some(h)) => Some(crate::repair::Repair::new(h, settings.rejoin)),
            _ => None,
        };
        State {
            replicator,
            repair,
            room,
            settings,
            meta,
            chunks,
            backend,
            tier,
            file_locks: Default::default(),
            io_permits: Semaphore::new(io_threads),
            requests: AtomicU64::new(0),
            started: Instant::now(),
            instance: rand::random(),
            shutdown: watch::Sender::new(false),
        }
    }

    /// The repair side (replicas > 1).
    pub(crate) fn repair(&self) -> Option<&crate::repair::Repair> {
        self.repair.as_ref()
    }

    /// The copier of metadata (replicas > 1).
    pub(crate) fn replicator(&self) -> Option<&crate::replicate::Replicator> {
        self.replicator.as_ref()
    }

    /// Executes one request that came over connection `conn`: lock and rename intent
    /// requests are held by their connection, the others are not. A rejoining daemon
    /// answers clients as if it were down (decision 0021).
    pub async fn serve(self: &Arc<Self>, conn: ConnId, req: Request) -> Response {
        if let Some(r) = &self.repair {
            if r.is_rejoining() && !req.served_while_rejoining() {
                return Err(Errno::new(
                    libc::EHOSTDOWN,
                    format!(
                        "daemon {} is rejoining (taking the changes it missed); use another copy",
                        self.settings.id
                    ),
                ));
            }
        }
        if req.is_lock() {
            self.handle_lock(conn, req).await
        } else if req.is_rename_intent() {
            self.handle_intent(conn, req).await
        } else {
            self.handle(req).await
        }
    }

    /// Executes one request. Never panics; every failure is an errno for the client.
    pub async fn handle(self: &Arc<Self>, req: Request) -> Response {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if let Some(bytes) = req.adds_bytes() {
            self.room.check(bytes)?;
        }
        match req {
            Request::Shutdown => {
                tracing::info!("shutdown requested by a client");
                self.shutdown.send_replace(true);
                Ok(Reply::Ok)
            }
            Request::RepairFor { target, full } => self.repair_for(target, full).await,
            Request::Repair { full } => self.repair_all(full).await,
            // Disk-bound work goes to the blocking pool, so disk and network overlap; so does
            // metadata work that may reach the backend.
            other if other.is_storage_io() || self.may_reach_backend(&other) => {
                let (resp, changed) = self
                    .blocking_any(move |st| st.execute_captured(other))
                    .await
                    .unwrap_or_else(|e| (Err(e), Vec::new()));
                self.replicate(changed).await;
                resp
            }
            // Metadata operations are memtable-speed KV operations: a thread hand-off would
            // cost more than the work itself.
            other => {
                let (resp, changed) = self.execute_captured(other);
                self.replicate(changed).await;
                resp
            }
        }
    }

    /// Executes a request, noting the metadata keys it changed when they have copies on
    /// other daemons (decision 0020).
    fn execute_captured(&self, req: Request) -> (Response, Vec<Vec<u8>>) {
        if self.replicator.is_none() {
            return (self.execute(req), Vec::new());
        }
        crate::meta::changes::capture(|| self.execute(req))
    }

    /// Sends the current state of the changed keys to their other owners, before the reply.
    async fn replicate(&self, changed: Vec<Vec<u8>>) {
        let Some(replicator) = &self.replicator else {
            return;
        };
        if changed.is_empty() {
            return;
        }
        match self.meta.key_states(changed) {
            Ok(states) => {
                for (daemon, missed) in replicator.forward(states).await {
                    tracing::debug!(daemon, keys = missed.len(), "a copy missed changes");
                    let Some(repair) = &self.repair else { continue };
                    let items = missed.into_iter().map(|s| crate::hints::Item::Key(s.key));
                    if let Err(e) = repair.hints.add(daemon, items) {
                        tracing::warn!(daemon, "cannot record what a copy missed: {e}");
                    }
                }
            }
            Err(e) => tracing::warn!("cannot read the changed keys to copy them: {e}"),
        }
    }

    /// Whether a metadata request names a linked path (import or write-through may follow).
    fn may_reach_backend(&self, req: &Request) -> bool {
        if !self.backend.is_active() {
            return false;
        }
        let path = match req {
            Request::Create { path, .. }
            | Request::Stat { path }
            | Request::Link { path }
            | Request::Remove { path, .. }
            | Request::SetAttr { path, .. }
            | Request::GrowSize { path, .. }
            | Request::ReserveAppend { path, .. }
            | Request::SetXattr { path, .. }
            | Request::GetXattr { path, .. }
            | Request::ListXattr { path }
            | Request::RemoveXattr { path, .. }
            | Request::TouchDir { path, .. }
            | Request::ClearSetId { path } => path,
            Request::Readdir { dir, .. }
            | Request::HasChildren { dir }
            | Request::CountSubdirs { dir, .. } => dir,
            _ => return false,
        };
        eddy_proto::path::normalize(path, self.meta.limits())
            .map(|p| self.backend.link_for(&p).is_some())
            .unwrap_or(false)
    }

    /// Runs `f` on the blocking pool under an I/O permit.
    async fn blocking<F>(self: &Arc<Self>, f: F) -> Response
    where
        F: FnOnce(&State) -> Response + Send + 'static,
    {
        self.blocking_any(f).await?
    }

    /// `blocking` for any result.
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
        let st = Arc::clone(self);
        tokio::task::spawn_blocking(move || f(&st))
            .await
            .map_err(|e| Errno::eio(format!("request failed unexpectedly: {e}")))
    }

    /// Executes a request; one that reached a name of a shared file is answered with where
    /// its identity record is (`Reply::Shared`).
    fn execute(&self, req: Request) -> Response {
        match self.dispatch(req) {
            Err(e) if e.errno == crate::meta::ESHARED => self.meta.shared_reply(&e.msg),
            other => other,
        }
    }

    /// `op` (encoded), applied to the identity record of the shared file `file_id`: the
    /// path-addressed requests on an entry, with the identity record's name for the path.
    fn on_identity(&self, file_id: eddy_proto::FileId, op: &[u8]) -> Response {
        let op: Request = eddy_proto::decode(op, op.len() as u64)?;
        let path = eddy_proto::path::identity_path(file_id);
        let op = match op {
            // An existing file opened (O_CREAT without O_EXCL): the identity record as it is.
            Request::Stat { .. } | Request::Create { .. } => Request::Stat { path },
            Request::SetAttr { attr, .. } => Request::SetAttr { path, attr },
            Request::GrowSize { size, .. } => Request::GrowSize { path, size },
            Request::ReserveAppend { len, .. } => Request::ReserveAppend { path, len },
            Request::Link { .. } => Request::Link { path },
            Request::Validate { for_write, .. } => Request::Validate { path, for_write },
            Request::SetXattr {
                name, value, how, ..
            } => Request::SetXattr {
                path,
                name,
                value,
                how,
            },
            Request::GetXattr { name, .. } => Request::GetXattr { path, name },
            Request::ListXattr { .. } => Request::ListXattr { path },
            Request::RemoveXattr { name, .. } => Request::RemoveXattr { path, name },
            Request::ClearSetId { .. } => Request::ClearSetId { path },
            other => {
                return Err(Errno::einval(format!(
                    "{} does not apply to a file's identity record",
                    other.op_name()
                )))
            }
        };
        self.dispatch(op)
    }

    fn dispatch(&self, req: Request) -> Response {
        let (meta, chunks) = (&self.meta, &self.chunks);
        match req {
            Request::Create {
                path,
                inode,
                exclusive,
            } => meta.create(&path, inode, exclusive).map(Reply::Inode),
            Request::Stat { path } => meta.stat(&path).map(Reply::Inode),
            Request::Remove { path, kind } => meta.remove(&path, kind).map(Reply::Inode),
            Request::SetAttr { path, attr } => meta.set_attr(&path, &attr).map(Reply::Inode),
            Request::GrowSize { path, size } => meta.grow_size(&path, size).map(Reply::Inode),
            Request::ReserveAppend { path, len } => {
                meta.reserve_append(&path, len).map(Reply::Offset)
            }
            Request::Insert {
                path,
                inode,
                replace,
            } => meta.insert(&path, inode, replace).map(|()| Reply::Ok),
            Request::Link { path } => meta.link(&path, self.settings.id).map(Reply::Inode),
            Request::DropName { file_id } => meta.drop_name(file_id).map(Reply::Inode),
            Request::OnIdentity { file_id, op } => self.on_identity(file_id, &op),
            Request::Readdir { dir, after, limit } => meta
                .readdir(&dir, after.as_deref(), limit)
                .map(|p| Reply::Entries {
                    entries: p.items,
                    more: p.more,
                }),
            Request::HasChildren { dir } => meta.has_children(&dir).map(Reply::Bool),
            Request::ListSubtree { dir, after, limit } => meta
                .list_subtree(&dir, after.as_deref(), limit)
                .map(|p| Reply::Subtree {
                    entries: p.items,
                    more: p.more,
                }),
            Request::Write {
                file_id,
                pieces,
                sums,
                data,
                backing,
            } => {
                let backing = backing.map(|b| self.linked(b)).transpose()?;
                let sums = (!sums.is_empty()).then_some(&sums[..]);
                if let Some(sums) = sums {
                    chunks.verify_payload(file_id, &pieces, &data, sums)?;
                }
                self.write(file_id, &pieces, &data, sums, backing.as_ref())
                    .map(|()| Reply::Ok)
            }
            Request::Read {
                file_id,
                pieces,
                backing: Some(b),
            } => {
                let b = self.linked(b)?;
                let data = self.with_room(|| self.tier.read(chunks, file_id, &pieces, &b))?;
                // The tier verified what it read from the chunks (and checksummed what it
                // fetched): the reply's checksums are computed over the verified bytes.
                Ok(match chunks.checksum_block() {
                    Some(block) => Reply::Checked {
                        sums: eddy_proto::checksum::sums(&pieces, &data, block),
                        data: data.into(),
                    },
                    None => Reply::Data(data.into()),
                })
            }
            Request::Read {
                file_id,
                pieces,
                backing: None,
            } => match chunks.checksum_block() {
                Some(_) => {
                    chunks
                        .read_checked(file_id, &pieces)
                        .map(|(data, sums)| Reply::Checked {
                            data: data.into(),
                            sums,
                        })
                }
                None => chunks.read(file_id, &pieces).map(|v| Reply::Data(v.into())),
            },
            Request::Scrub { after, limit } => {
                let limit = limit.min(self.settings.config.scrub_page_chunks);
                chunks.scrub(after, limit).map(Reply::Scrubbed)
            }
            Request::Prefetch {
                file_id,
                chunks: list,
                backing,
                pin,
            } => {
                let backing = self.linked(backing)?;
                self.with_room(|| self.tier.prefetch(chunks, file_id, &list, &backing, pin))
                    .map(Reply::Count)
            }
            Request::FlushDirty {
                prefix,
                after,
                limit,
            } => {
                let (files, more) = self.tier.flush_dirty(chunks, &prefix, after, limit);
                Ok(Reply::Flushed { files, more })
            }
            Request::Unpin { prefix } => self.tier.unpin(&prefix).map(Reply::Count),
            Request::Rebind { from, to } => {
                let limits = meta.limits();
                let (from, to) = (normalize(&from, limits)?, normalize(&to, limits)?);
                self.tier.rebind(&from, &to).map(|()| Reply::Ok)
            }
            Request::Validate { path, for_write } => meta
                .validate(&path, for_write)
                .map(|(inode, dropped)| Reply::Revalidated { inode, dropped }),
            Request::BackendRename { from, to } => {
                meta.backend_rename(&from, &to).map(|()| Reply::Ok)
            }
            Request::FinalizeDirty {
                prefix,
                skip,
                after,
                limit,
            } => meta
                .finalize_dirty(&prefix, &skip, after.as_deref(), limit)
                .map(|(files, more)| Reply::Flushed { files, more }),
            Request::SetXattr {
                path,
                name,
                value,
                how,
            } => meta.set_xattr(&path, &name, value, how).map(Reply::Inode),
            Request::GetXattr { path, name } => {
                meta.get_xattr(&path, &name).map(|v| Reply::Data(v.into()))
            }
            Request::ListXattr { path } => meta.list_xattr(&path).map(Reply::Names),
            Request::RemoveXattr { path, name } => {
                meta.remove_xattr(&path, &name).map(Reply::Inode)
            }
            Request::TruncateData { file_id, size } => chunks
                .truncate(file_id, size)
                .and_then(|()| self.tier.truncated(file_id, size))
                .map(|()| Reply::Ok),
            Request::Allocate { file_id, pieces } => self
                .with_room(|| chunks.allocate(file_id, &pieces))
                .map(|()| Reply::Ok),
            Request::RemoveData { file_id } => chunks
                .remove(file_id)
                .and_then(|()| self.tier.forget(file_id))
                .map(|()| Reply::Ok),
            Request::Sync { file_id } => self.sync(file_id).map(|()| Reply::Ok),
            Request::TouchDir { path, time } => meta.touch_dir(&path, time).map(|()| Reply::Ok),
            Request::ClearSetId { path } => meta.clear_setid(&path).map(Reply::Inode),
            Request::CountSubdirs { dir, delta } => {
                meta.count_subdirs(&dir, delta).map(|()| Reply::Ok)
            }
            Request::Replicate { changes } => {
                meta.apply_replica(&changes)?;
                let keys = changes.into_iter().map(|c| c.key).collect();
                let held = meta.key_states(keys)?;
                Ok(Reply::Digests(
                    held.iter()
                        .map(|s| eddy_proto::repair::digest(s.value.as_deref()))
                        .collect(),
                ))
            }
            Request::Hint {
                target,
                file_id,
                chunks: list,
            } => self.add_chunk_hints(target, file_id, &list),
            Request::PutChunk {
                file_id,
                chunk,
                present,
                sums,
                data,
            } => {
                let sums = (!sums.is_empty() && present).then_some(&sums[..]);
                if !present && !data.is_empty() {
                    return Err(Errno::einval("a chunk removed carries no data"));
                }
                if present {
                    let len = u32::try_from(data.len())
                        .map_err(|_| Errno::einval("a chunk's content exceeds a chunk"))?;
                    let p = [eddy_proto::Piece {
                        chunk,
                        offset: 0,
                        len,
                    }];
                    chunks.check_pieces(&p)?;
                    if let Some(sums) = sums {
                        chunks.verify_payload(file_id, &p, &data, sums)?;
                    }
                }
                self.with_room(|| {
                    chunks.put_whole(file_id, chunk, present.then_some(&data[..]), sums)
                })
                .map(|d| Reply::Digests(vec![d]))
            }
            Request::RepairFor { .. } | Request::Repair { .. } => Err(Errno::einval(
                "a repair request runs asynchronously; served by handle",
            )),
            Request::Status => self.status().map(Reply::Status),
            Request::Shutdown => Ok(Reply::Ok),
            Request::Lock { .. } | Request::TestLock { .. } | Request::ReleaseLocks { .. } => Err(
                Errno::einval("a lock request needs its connection; served by handle_lock"),
            ),
            Request::BeginRename { .. }
            | Request::ClaimRenames { .. }
            | Request::EndRename { .. }
            | Request::ReleaseRename { .. } => Err(Errno::einval(
                "a rename intent request needs its connection; served by handle_intent",
            )),
        }
    }

    /// Serves a rename intent request that came over connection `conn` (which holds the
    /// intents it records or takes over), on the blocking pool: records and ends are fsync'd.
    pub async fn handle_intent(self: &Arc<Self>, conn: ConnId, req: Request) -> Response {
        let resp = self
            .blocking(move |st| {
                let meta = &st.meta;
                match req {
                    Request::BeginRename { from, to, dir_id } => meta
                        .begin_rename(conn, &from, &to, dir_id)
                        .map(Reply::Renames),
                    Request::ClaimRenames { from, limit } => meta
                        .claim_renames(conn, from.as_deref(), limit)
                        .map(Reply::Renames),
                    Request::EndRename { from, to } => {
                        meta.end_rename(&from, &to).map(|()| Reply::Ok)
                    }
                    Request::ReleaseRename { from } => {
                        meta.release_rename(conn, &from).map(|()| Reply::Ok)
                    }
                    other => Err(Errno::einval(format!(
                        "{} is not a rename intent request",
                        other.op_name()
                    ))),
                }
            })
            .await;
        // A request that finished after its connection closed holds nothing: the close
        // released the connection's intents before (or releases them after) this check.
        if !self.file_locks.is_open(conn) {
            self.meta.release_renames_of(conn);
        }
        resp
    }

    /// The backing of a data request on a linked file, as the tier uses it: its path
    /// normalised (so that no `..` leads outside the backend directory) and linked.
    fn linked(&self, b: Backing) -> Result<Backing, Errno> {
        let path = normalize(&b.path, self.meta.limits())?;
        self.backend.resolve_linked(&path)?;
        Ok(Backing { path, ..b })
    }

    /// A write: through the tier for a linked file.
    fn write(
        &self,
        file_id: eddy_proto::FileId,
        pieces: &[eddy_proto::Piece],
        data: &[u8],
        sums: Option<&[u32]>,
        backing: Option<&eddy_proto::Backing>,
    ) -> Result<(), Errno> {
        self.with_room(|| match backing {
            Some(b) => self.tier.write(&self.chunks, file_id, pieces, data, b),
            None => self.chunks.write_with_sums(file_id, pieces, data, sums),
        })?;
        if backing.is_none() && self.backend.is_active() {
            self.tier.after_growth(&self.chunks);
        }
        Ok(())
    }

    /// Runs something that stores chunks (a write, a fetch, an allocation); refused with
    /// ENOSPC, room is made by evicting cached backend chunks and it is tried once more:
    /// clean ones only when the capacity refused it (`capacity_bytes`, decision 0023), clean
    /// and then written-back dirty ones when the device is full.
    fn with_room<T>(&self, attempt: impl Fn() -> Result<T, Errno>) -> Result<T, Errno> {
        let mut refusals = self.chunks.capacity_refusals();
        let mut result = attempt();
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

    /// Sync of one file's chunks, or of everything; the metadata store is persisted either way.
    fn sync(&self, file_id: Option<eddy_proto::FileId>) -> Result<(), Errno> {
        match file_id {
            Some(id) => self.chunks.sync(id)?,
            None => self.chunks.sync_all()?,
        }
        self.meta.persist()
    }

    fn status(&self) -> Result<DaemonStatus, Errno> {
        let root = &self.settings.root;
        let vfs = nix::sys::statvfs::statvfs(root)
            .map_err(|e| Errno::new(e as i32, format!("statvfs {}: {e}", root.display())))?;
        let frag = vfs.fragment_size() as u64;
        let (chunk_bytes, chunks) = self.chunks.usage();
        let (checksum_errors, corrupt_payloads) = self.chunks.integrity_counters();
        Ok(DaemonStatus {
            id: self.settings.id,
            host: self.settings.host.clone(),
            pid: std::process::id(),
            root: root.display().to_string(),
            fs_total_bytes: vfs.blocks() as u64 * frag,
            fs_free_bytes: vfs.blocks_free() as u64 * frag,
            fs_avail_bytes: vfs.blocks_available() as u64 * frag,
            fs_files: vfs.files() as u64,
            fs_files_free: vfs.files_free() as u64,
            chunk_bytes,
            chunks,
            tier: self.tier.status(&self.chunks),
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
        })
    }
}
