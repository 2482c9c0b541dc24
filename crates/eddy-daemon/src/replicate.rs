//! Copies of metadata on the other owners (decision 0020), and the placement this daemon
//! follows. With `replicas` R > 1 the daemon that applies a metadata change (the first owner
//! of the path a client could reach) sends the resulting state of every key it changed to
//! the key's other R-1 owners before it replies: a path's key to the path's placement owners,
//! a shared file's identity record (decision 0009) to its holder's R-1 successors in id
//! order (the holder: the daemon its names point at while that is placed on, else the owner
//! of the record's hash, decision 0083). An owner that cannot be reached within half the RPC
//! deadline misses the change (it is marked down for `down_hold_ms`, and later changes are
//! not sent to it meanwhile).
//!
//! The placement is the membership's (decision 0081): the deployment file's daemons as
//! started (`--members`), then each membership the daemon adopts (`follow`). While items move
//! (`moving_from`), owners are those of the placement clients use (the daemons moved from),
//! and a key's first owner also sends each change to the key's owners among the members
//! that are not its owners now (`targets`): the copy of a move, with one copy as with several.
//!
//! The other daemons' addresses come from the membership adopted, else from the deployment
//! file (`--peers`, default `--deployment`), read when first needed and again when it changed:
//! `eddy start` writes it only once every daemon listens.

use eddy_config::{Config, DaemonEntry, Deployment};
use eddy_placement::{path_hash, Placement};
use eddy_proto::sync::lock;
use eddy_proto::{req, FileId, KeyState, Request};
use eddy_rpc::{Daemons, Failure};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

/// The placement in force here: who owns what now, and while items move, who owns it once
/// they have.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// Every daemon listed (those drained included): the peers.
    pub listed: Vec<u32>,
    /// The placement clients use now (the daemons moved from, while items move).
    pub placed: Option<Placement>,
    /// While items move: the members' placement, which they move to.
    pub to: Option<Placement>,
}

impl View {
    /// The view of a membership adopted.
    pub fn of(m: &req::Membership) -> View {
        let members: Vec<u32> = m
            .daemons
            .iter()
            .map(|d| d.id)
            .filter(|id| !m.draining.contains(id))
            .collect();
        let (placed, to) = match &m.moving_from {
            Some(from) => (from.clone(), Some(members)),
            None => (members, None),
        };
        let mut listed: Vec<u32> = m.daemons.iter().map(|d| d.id).collect();
        listed.sort_unstable();
        View {
            listed,
            placed: Placement::new(placed),
            to: to.and_then(Placement::new),
        }
    }

    /// The owners of a path's key now and, while items move, the new owners: those under
    /// the members that are not owners now.
    pub fn key_owners(&self, key: &[u8], r: usize) -> Option<(Vec<u32>, Vec<u32>)> {
        let placed = self.placed.as_ref()?;
        let h = path_hash(&eddy_proto::path::key_to_path(key)?);
        Some(split(
            placed.owners(h, r),
            self.to.as_ref().map(|t| t.owners(h, r)),
        ))
    }

    /// The owners of a metadata key held with `record`, now and to come: a path's key by
    /// its hash, an identity record by the daemon its names point at (its `shared`) or, when
    /// that is not placed on, by its hash (decision 0083). `None` for a key this placement
    /// cannot place (an identity record that does not decode).
    pub fn record_owners(
        &self,
        key: &[u8],
        record: &[u8],
        r: usize,
    ) -> Option<(Vec<u32>, Vec<u32>)> {
        let Some(file_id) = eddy_proto::path::identity_of_key(key) else {
            return self.key_owners(key, r);
        };
        let pointer = eddy_proto::Inode::from_record(record).ok()?.shared?;
        let placed = self.placed.as_ref()?;
        Some(split(
            placed.identity_owners(pointer, file_id, r),
            self.to
                .as_ref()
                .map(|t| t.identity_owners(pointer, file_id, r)),
        ))
    }

    /// The same for chunk `k` of a file.
    pub fn chunk_owners(&self, id: FileId, k: u64, r: usize) -> Option<(Vec<u32>, Vec<u32>)> {
        let placed = self.placed.as_ref()?;
        Some(split(
            placed.chunk_owners(id, k, r),
            self.to.as_ref().map(|t| t.chunk_owners(id, k, r)),
        ))
    }
}

/// Owners now, and the owners to come that are not among them.
fn split(now: Vec<u32>, to: Option<Vec<u32>>) -> (Vec<u32>, Vec<u32>) {
    let new = to
        .unwrap_or_default()
        .into_iter()
        .filter(|d| !now.contains(d))
        .collect();
    (now, new)
}

/// What a daemon needs to send copies of its changes to their other owners.
pub struct Replicator {
    me: u32,
    replicas: usize,
    view: RwLock<Arc<View>>,
    /// Whether items move (a view with `to`), and whether copies go to other owners as
    /// replicas (`sends_replicas`): read without a lock on every change.
    moving: AtomicBool,
    copies: AtomicBool,
    peers_file: Option<PathBuf>,
    /// The connections to the peers, and the modification time of the file they came from.
    peers: Mutex<Option<(Arc<Daemons>, Option<SystemTime>)>>,
    /// The connections made from the membership adopted, when one was (preferred).
    adopted: Mutex<Option<Arc<Daemons>>>,
    /// What connections made from a membership need besides its daemons.
    secret: String,
    config: Config,
}

impl Replicator {
    /// The placement of the deployment file the daemon started from (`--members`); copies
    /// are sent only with R > 1 and the other daemons known (`copies`).
    pub fn new(settings: &crate::DaemonSettings) -> Replicator {
        let replicas = settings.config.replicas.max(1);
        let listed = settings.members.clone().unwrap_or_default();
        let placed = settings.members.clone().and_then(Placement::new);
        if replicas > 1 && (placed.is_none() || settings.peers.is_none()) {
            tracing::warn!(
                "replicas = {replicas} but the daemon was not told the other daemons \
                 (--members and --peers or --deployment): no copies of metadata are sent"
            );
        }
        let copies = replicas > 1 && placed.is_some() && settings.peers.is_some();
        Replicator {
            me: settings.id,
            replicas,
            view: RwLock::new(Arc::new(View {
                listed,
                placed,
                to: None,
            })),
            moving: AtomicBool::new(false),
            copies: AtomicBool::new(copies),
            peers_file: settings.peers.clone(),
            peers: Mutex::new(None),
            adopted: Mutex::new(None),
            secret: hex::encode(&settings.secret),
            config: settings.config.clone(),
        }
    }

    /// Whether copies of metadata go to other owners as replicas (R > 1, the others known).
    pub fn sends_replicas(&self) -> bool {
        self.copies.load(Ordering::Acquire)
    }

    /// Whether items move to new owners (the membership adopted has `moving_from`).
    pub fn is_moving(&self) -> bool {
        self.moving.load(Ordering::Acquire)
    }

    /// Copies per item.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// The placement in force.
    pub fn view(&self) -> Arc<View> {
        self.view.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Follows the membership `m` adopted: its placement, and connections to its daemons
    /// (`prepare`d, connected when first used).
    pub fn follow(&self, m: &req::Membership) -> Result<(), eddy_proto::Errno> {
        let (view, peers) = self.prepare(m)?;
        let copies = self.replicas > 1 && view.placed.is_some();
        *lock(&self.adopted) = Some(Arc::new(peers));
        self.moving.store(view.to.is_some(), Ordering::Release);
        *self.view.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(view);
        self.copies.store(copies, Ordering::Release);
        Ok(())
    }

    /// The placement of membership `m` and the connections to its daemons: refused when
    /// they cannot be made (checked before `m` is adopted).
    pub fn prepare(&self, m: &req::Membership) -> Result<(View, Daemons), eddy_proto::Errno> {
        Ok((View::of(m), self.daemons_of(m, copy_deadlines)?))
    }

    /// Connections to the daemons of membership `m`, with the daemon's config as `deadlines`
    /// makes it (their deadlines).
    pub fn daemons_of(
        &self,
        m: &req::Membership,
        deadlines: impl FnOnce(Config) -> Config,
    ) -> Result<Daemons, eddy_proto::Errno> {
        let dep = Deployment {
            name: "peers".into(),
            job: Default::default(),
            epoch: m.epoch,
            moving_from: m.moving_from.clone(),
            draining: m.draining.clone(),
            secret: self.secret.clone(),
            config: deadlines(self.config.clone()),
            daemons: m
                .daemons
                .iter()
                .map(|d| DaemonEntry {
                    id: d.id,
                    host: d.host.clone(),
                    addr: d.addr.clone(),
                    socket: d.socket.as_ref().map(PathBuf::from),
                    root: PathBuf::from(&d.root),
                    metrics: None,
                })
                .collect(),
        };
        let mut daemons = dep.daemons.clone();
        daemons.sort_by_key(|d| d.id);
        let dep = Deployment { daemons, ..dep };
        Daemons::new(&dep)
    }

    /// The other owners of a metadata key (this daemon left out) whose state here is
    /// `record` (`None`: removed); while items move, the key's first owner adds the key's new
    /// owners. An identity record is placed by the daemon its record names (decision 0083);
    /// one removed is sent to the ring after this daemon (its holder) and, while items move,
    /// to every daemon listed: where it went is no longer known, and a removal of what a
    /// daemon does not hold is nothing.
    pub fn targets(&self, key: &[u8], record: Option<&[u8]>) -> Vec<u32> {
        let view = self.view();
        let Some(placement) = view.placed.as_ref() else {
            return Vec::new();
        };
        let owners = match (record, eddy_proto::path::identity_of_key(key)) {
            (Some(record), _) => view.record_owners(key, record, self.replicas),
            (None, Some(_)) if view.to.is_some() => {
                let mut all = view.listed.clone();
                all.retain(|&d| d != self.me);
                return all;
            }
            (None, Some(file_id)) => Some((
                placement.identity_owners(self.me, file_id, self.replicas),
                Vec::new(),
            )),
            (None, None) => view.key_owners(key, self.replicas),
        };
        let mut owners = match owners {
            Some((now, new)) => {
                let first = now.first() == Some(&self.me);
                let mut owners = if self.replicas > 1 { now } else { Vec::new() };
                if first {
                    owners.extend(new);
                }
                owners
            }
            None => Vec::new(),
        };
        owners.retain(|&d| d != self.me);
        owners
    }

    /// The first owner of a path's record: the only daemon that grants a lease on it as a
    /// directory (decision 0075).
    pub fn first_owner(&self, path: &str) -> u32 {
        self.view()
            .placed
            .as_ref()
            .map_or(self.me, |p| p.meta_owner(path))
    }

    /// The deployment's daemons (every daemon listed).
    pub fn members(&self) -> Vec<u32> {
        self.view().listed.clone()
    }

    /// The other owners of chunk `k` of a file.
    pub fn chunk_targets(&self, file_id: FileId, k: u64) -> Vec<u32> {
        self.view()
            .placed
            .as_ref()
            .map(|p| p.chunk_owners(file_id, k, self.replicas))
            .unwrap_or_default()
            .into_iter()
            .filter(|&d| d != self.me)
            .collect()
    }

    fn file_time(&self) -> Option<SystemTime> {
        std::fs::metadata(self.peers_file.as_ref()?)
            .and_then(|m| m.modified())
            .ok()
    }

    /// The modification time of the deployment file the connections were made from.
    fn loaded_at(&self) -> Option<Option<SystemTime>> {
        let peers = lock(&self.peers);
        peers.as_ref().map(|(_, at)| *at)
    }

    /// The connections to the peers (eddy-rpc): made from the deployment file when first
    /// needed, and again when `fresh` and the file changed since.
    pub fn peers(&self, fresh: bool) -> Option<Arc<Daemons>> {
        if let Some(adopted) = lock(&self.adopted).as_ref() {
            return Some(adopted.clone());
        }
        let file = self.peers_file.as_ref()?;
        let mut peers = lock(&self.peers);
        let now = self.file_time();
        if let Some((client, at)) = peers.as_ref() {
            if !fresh || *at == now {
                return Some(client.clone());
            }
        }
        let loaded = Deployment::load(file)
            .map_err(|e| e.to_string())
            .and_then(|mut dep| {
                dep.config = copy_deadlines(dep.config);
                Daemons::new(&dep).map_err(|e| e.to_string())
            });
        match loaded {
            Ok(daemons) => {
                let daemons = Arc::new(daemons);
                *peers = Some((daemons.clone(), now));
                Some(daemons)
            }
            Err(e) => {
                tracing::warn!(file = %file.display(), "cannot read the other daemons: {e}");
                None
            }
        }
    }

    /// Sends the states to the other owners of their keys, all at once; returns the owners
    /// that missed them (could not be reached).
    pub async fn forward(&self, states: Vec<KeyState>) -> Vec<(u32, Vec<KeyState>)> {
        let mut by_target: BTreeMap<u32, Vec<KeyState>> = BTreeMap::new();
        for s in states {
            for t in self.targets(&s.key, s.value.as_deref()) {
                by_target.entry(t).or_default().push(s.clone());
            }
        }
        if by_target.is_empty() {
            return Vec::new();
        }
        let Some(peers) = self.peers(false) else {
            return by_target.into_iter().collect();
        };
        let sends = by_target.into_iter().map(|(t, changes)| {
            let peers = peers.clone();
            async move {
                if peers.is_down(t) {
                    // Found unreachable lately: not waited for again until the mark expires.
                    return Some((t, changes));
                }
                let req = Request::Replicate(req::Replicate { changes });
                let mut r = peers.send(t, &req).await.map(|(r, _)| r);
                if matches!(r, Err(Failure::Unreachable(_))) {
                    // The daemon may have moved (the deployment file rewritten): once more
                    // with the file as it is now, only if it changed (else the change would
                    // wait twice on a daemon that is gone).
                    let before = self.loaded_at();
                    if let Some(fresh) = self.peers(true).filter(|_| self.loaded_at() != before) {
                        r = fresh.send(t, &req).await.map(|(r, _)| r);
                    }
                }
                let Request::Replicate(req::Replicate { changes }) = req else {
                    return None;
                };
                match r {
                    Ok(_) => None,
                    Err(Failure::Unreachable(e)) => {
                        tracing::debug!(daemon = t, "copy of metadata missed: {e}");
                        Some((t, changes))
                    }
                    Err(Failure::Daemon(e)) => {
                        tracing::warn!(daemon = t, "copy of metadata refused: {e}");
                        Some((t, changes))
                    }
                }
            }
        });
        futures::future::join_all(sends)
            .await
            .into_iter()
            .flatten()
            .collect()
    }
}

/// The deadlines of a copy's connections: a copy that cannot be reached must cost the
/// client's request well less than the client's own deadline (it would give up on this
/// daemon too).
fn copy_deadlines(mut c: Config) -> Config {
    c.rpc_timeout_ms = (c.rpc_timeout_ms / 2).max(1);
    c.connect_timeout_ms = c.connect_timeout_ms.min(c.rpc_timeout_ms);
    c
}
