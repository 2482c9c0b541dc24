//! Copies of metadata on the other owners (decision 0020). With `replicas` R > 1 the daemon
//! that applies a metadata change (the first owner of the path a client could reach) sends
//! the resulting state of every key it changed to the key's other R-1 owners before it
//! replies: a path's key to the path's placement owners, a shared file's identity record
//! (decision 0009) to this daemon's R-1 successors in id order. An owner that cannot be
//! reached within half the RPC deadline misses the change (it is marked down for
//! `down_hold_ms`, and later changes are not sent to it meanwhile).
//!
//! The other daemons' addresses come from the deployment file (`--peers`, default
//! `--deployment`), read when first needed and again when it changed: `eddy start` writes
//! it only once every daemon listens.

use eddy_config::Deployment;
use eddy_placement::{path_hash, Placement};
use eddy_proto::sync::lock;
use eddy_proto::{req, KeyState, Request};
use eddy_rpc::{Daemons, Failure};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// What a daemon needs to send copies of its changes to their other owners.
pub struct Replicator {
    me: u32,
    replicas: usize,
    placement: Placement,
    peers_file: PathBuf,
    /// The connections to the peers, and the modification time of the file they came from.
    peers: Mutex<Option<(Arc<Daemons>, Option<SystemTime>)>>,
}

impl Replicator {
    /// `None` with one copy (nothing to send), or when the daemon does not know the other
    /// daemons (no --members or no deployment file: warned).
    pub fn new(settings: &crate::DaemonSettings) -> Option<Replicator> {
        let replicas = settings.config.replicas;
        if replicas <= 1 {
            return None;
        }
        let placement = settings.members.clone().and_then(Placement::new);
        match (placement, &settings.peers) {
            (Some(placement), Some(peers_file)) => Some(Replicator {
                me: settings.id,
                replicas,
                placement,
                peers_file: peers_file.clone(),
                peers: Mutex::new(None),
            }),
            _ => {
                tracing::warn!(
                    "replicas = {replicas} but the daemon was not told the other daemons \
                     (--members and --peers or --deployment): no copies of metadata are sent"
                );
                None
            }
        }
    }

    /// The other owners of a metadata key (this daemon left out).
    pub fn targets(&self, key: &[u8]) -> Vec<u32> {
        let owners = if eddy_proto::path::is_identity_key(key) {
            let ids = self.placement.ids();
            let start = ids.iter().position(|&d| d == self.me).unwrap_or(0);
            (0..self.replicas.min(ids.len()))
                .map(|i| ids[(start + i) % ids.len()])
                .collect()
        } else {
            match eddy_proto::path::key_to_path(key) {
                Some(p) => self.placement.owners(path_hash(&p), self.replicas),
                None => Vec::new(),
            }
        };
        owners.into_iter().filter(|&d| d != self.me).collect()
    }

    /// The first owner of a path's record: the only daemon that grants a lease on it as a
    /// directory (decision 0075).
    pub fn first_owner(&self, path: &str) -> u32 {
        self.placement.meta_owner(path)
    }

    /// The deployment's daemons.
    pub fn members(&self) -> &[u32] {
        self.placement.ids()
    }

    /// The other owners of a metadata key held here with `record` (a full resync, decision
    /// 0021): as `targets`, except that an identity record names the daemon that holds it
    /// (`Inode::shared`), whose ring successors hold its copies.
    pub fn key_targets(&self, key: &[u8], record: &[u8]) -> Vec<u32> {
        if !eddy_proto::path::is_identity_key(key) {
            return self.targets(key);
        }
        let holder = eddy_proto::Inode::from_record(record)
            .ok()
            .and_then(|i| i.shared)
            .unwrap_or(self.me);
        let ids = self.placement.ids();
        let start = ids.iter().position(|&d| d == holder).unwrap_or(0);
        (0..self.replicas.min(ids.len()))
            .map(|i| ids[(start + i) % ids.len()])
            .filter(|&d| d != self.me)
            .collect()
    }

    /// The other owners of chunk `k` of a file.
    pub fn chunk_targets(&self, file_id: eddy_proto::FileId, k: u64) -> Vec<u32> {
        self.placement
            .chunk_owners(file_id, k, self.replicas)
            .into_iter()
            .filter(|&d| d != self.me)
            .collect()
    }

    fn file_time(&self) -> Option<SystemTime> {
        std::fs::metadata(&self.peers_file)
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
        let mut peers = lock(&self.peers);
        let now = self.file_time();
        if let Some((client, at)) = peers.as_ref() {
            if !fresh || *at == now {
                return Some(client.clone());
            }
        }
        let loaded = Deployment::load(&self.peers_file)
            .map_err(|e| e.to_string())
            .and_then(|mut dep| {
                // A copy that cannot be reached must cost the client's request well less
                // than the client's own deadline (it would give up on this daemon too).
                let c = &mut dep.config;
                c.rpc_timeout_ms = (c.rpc_timeout_ms / 2).max(1);
                c.connect_timeout_ms = c.connect_timeout_ms.min(c.rpc_timeout_ms);
                Daemons::new(&dep).map_err(|e| e.to_string())
            });
        match loaded {
            Ok(daemons) => {
                let daemons = Arc::new(daemons);
                *peers = Some((daemons.clone(), now));
                Some(daemons)
            }
            Err(e) => {
                tracing::warn!(file = %self.peers_file.display(), "cannot read the other daemons: {e}");
                None
            }
        }
    }

    /// Sends the states to the other owners of their keys, all at once; returns the owners
    /// that missed them (could not be reached).
    pub async fn forward(&self, states: Vec<KeyState>) -> Vec<(u32, Vec<KeyState>)> {
        let mut by_target: BTreeMap<u32, Vec<KeyState>> = BTreeMap::new();
        for s in states {
            for t in self.targets(&s.key) {
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
