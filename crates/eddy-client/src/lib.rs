//! eddy-client: the library every access path (FUSE mount, preload library, tools) uses to
//! reach an Eddy deployment.
//!
//! It computes placement itself (no lookup RPC), keeps one multiplexed connection per daemon,
//! splits reads and writes by chunk, groups them by daemon and sends all groups at once, and
//! offers a POSIX-shaped API (open/pread/pwrite/stat/readdir/rename/...). Errors are `Errno`
//! values with context; a dead daemon gives EIO within the RPC deadline, never a hang.
//!
//! It must not keep state that other clients need to see: everything shared lives on the
//! daemons (the intents of directory renames too). The only client-side cache is the size
//! each open file is known to have reached.

mod access;
mod conn;
mod dir;
mod dircache;
mod dirtimes;
mod file;
mod integrity;
mod layout;
mod links;
mod locks;
mod ns;
mod perm;
mod rename;
mod replica;
mod size;
mod special;
mod tier;
mod unsynced;

pub use conn::{wire_mode, Failure};
pub use dir::DirReader;
pub use eddy_proto::{
    DaemonStatus, DirEntry, Errno, FileId, FileKind, Inode, SetAttr, SetTime, Timespec, XattrSet,
};
pub use eddy_proto::{LockInfo, LockKind, LockRange};
pub use file::File;
pub use locks::LockRequest;
pub use perm::{Creds, Groups};
pub use tier::FileResult;

use conn::Link;
use eddy_config::{Config, Deployment};
use eddy_placement::Placement;
use eddy_proto::path::{self, PathLimits};
use eddy_proto::{req, typed_reply, Reply, Request, Rpc};
use futures::future::join_all;
use std::collections::HashMap;
use std::sync::Arc;

/// Aggregated statfs over all daemons.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsStats {
    pub block_size: u32,
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub avail_bytes: u64,
    pub files: u64,
    pub files_free: u64,
}

struct Inner {
    dep: Deployment,
    sizes: size::SizeCache,
    /// Times of directories this client changed, not yet published to their owners.
    dirs: dirtimes::DirTimes,
    placement: Placement,
    links: HashMap<u32, Link>,
    limits: PathLimits,
    /// Random identity of this client in lock owners: two clients never share an owner.
    lock_session: u128,
    /// Directory renames under way here or left unfinished (decision 0010).
    renames: rename::Renames,
    /// Directories looked up recently (see `dircache`).
    dircache: dircache::DirCache,
    /// Requests sent, by kind (`Client::rpc_counts`).
    rpcs: [std::sync::atomic::AtomicU64; eddy_proto::OP_NAMES.len()],
    /// Daemons holding this client's changes other than file data not yet synced (an
    /// fsync reaches them; decision 0015).
    unsynced: unsynced::Unsynced,
    /// Daemons found unreachable lately (with replicas > 1; see `replica`).
    down: replica::Down,
}

/// A connection to a deployment. Cloning shares the connections.
#[derive(Clone)]
pub struct Client(Arc<Inner>);

impl Client {
    /// Prepares links to every daemon (connected lazily, Unix socket where the daemon's socket
    /// exists on this host, TCP otherwise), makes sure the root directory exists, and
    /// completes the directory renames that dead or failed clients left unfinished (one
    /// request per daemon when there are none; decision 0010).
    pub async fn connect(dep: Deployment) -> Result<Client, Errno> {
        let client = Client::new(dep)?;
        client.ensure_root().await?;
        client.complete_unfinished_renames().await;
        Ok(client)
    }

    /// Prepares the links without contacting any daemon: for tools (status, stop) that must
    /// work while some daemons are down.
    pub fn new(dep: Deployment) -> Result<Client, Errno> {
        dep.validate().map_err(|e| Errno::einval(e.to_string()))?;
        let secret = Arc::new(
            dep.secret_bytes()
                .map_err(|e| Errno::einval(e.to_string()))?,
        );
        let placement = Placement::new(dep.daemons.iter().map(|d| d.id).collect())
            .ok_or_else(|| Errno::einval("deployment lists no daemons"))?;
        let links = dep
            .daemons
            .iter()
            .map(|d| (d.id, Link::new(d.clone(), secret.clone(), &dep.config)))
            .collect();
        let limits = PathLimits {
            max_path: dep.config.max_path_bytes,
            max_name: dep.config.max_name_bytes,
        };
        let sizes =
            size::SizeCache::new(std::time::Duration::from_millis(dep.config.size_update_ms));
        let dirs = dirtimes::DirTimes::new(std::time::Duration::from_millis(
            dep.config.dir_time_update_ms,
        ));
        Ok(Client(Arc::new(Inner {
            sizes,
            dirs,
            placement,
            links,
            limits,
            lock_session: rand::random::<u128>(),
            renames: rename::Renames::default(),
            dircache: dircache::DirCache::new(std::time::Duration::from_millis(
                dep.config.dir_cache_ms,
            )),
            rpcs: std::array::from_fn(|_| Default::default()),
            unsynced: Default::default(),
            down: replica::Down::new(std::time::Duration::from_millis(dep.config.down_hold_ms)),
            dep,
        })))
    }

    pub fn config(&self) -> &Config {
        &self.0.dep.config
    }

    pub fn deployment(&self) -> &Deployment {
        &self.0.dep
    }

    /// Requests this client (and its clones) sent so far, by kind (`Request::op_name`): what
    /// an operation costs in round trips.
    pub fn rpc_counts(&self) -> std::collections::BTreeMap<&'static str, u64> {
        eddy_proto::OP_NAMES
            .iter()
            .zip(&self.0.rpcs)
            .map(|(&name, n)| (name, n.load(std::sync::atomic::Ordering::Relaxed)))
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    /// A directory on the way to an entry: from the cache of recent directories, else asked
    /// for (and remembered).
    pub(crate) async fn dir_inode(&self, d: &str) -> Result<Inode, Errno> {
        if let Some(i) = self.0.dircache.get(d) {
            return Ok(i);
        }
        let i = self.stat_raw(d).await?;
        self.0.dircache.put(d, &i);
        Ok(i)
    }

    // ---------------------------------------------------------------- plumbing

    pub(crate) fn norm(&self, p: &str) -> Result<String, Errno> {
        path::normalize(p, self.0.limits)
    }

    /// Sends a request to one daemon; its reply, typed.
    pub(crate) async fn call<R: Rpc>(&self, daemon: u32, req: R) -> Result<R::Reply, Errno> {
        typed_reply::<R>(self.call_raw(daemon, &req.into()).await?)
    }

    /// Sends a request (as it travels) to one daemon; its reply as it came.
    pub(crate) async fn call_raw(&self, daemon: u32, req: &Request) -> Result<Reply, Errno> {
        self.call_tracked(daemon, req).await.map(|(reply, _)| reply)
    }

    /// Sends a request; returns the reply and the generation of the connection that carried
    /// it. A change other than a write is noted for the next fsync (decision 0015).
    pub(crate) async fn call_tracked(
        &self,
        daemon: u32,
        req: &Request,
    ) -> Result<(Reply, u64), Errno> {
        self.try_call(daemon, req)
            .await
            .map_err(Failure::into_errno)
    }

    /// `call`, telling an error answer apart from a daemon that cannot be reached.
    pub(crate) async fn try_call_as<R: Rpc>(
        &self,
        daemon: u32,
        req: R,
    ) -> Result<R::Reply, Failure> {
        let (reply, _) = self.try_call(daemon, &req.into()).await?;
        typed_reply::<R>(reply).map_err(Failure::Daemon)
    }

    /// `call_tracked`, telling an error answer apart from a daemon that cannot be reached.
    pub(crate) async fn try_call(
        &self,
        daemon: u32,
        req: &Request,
    ) -> Result<(Reply, u64), Failure> {
        self.0.rpcs[req.op() as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match self.0.links.get(&daemon) {
            Some(link) => {
                let reply = link.call_classified(req).await;
                if let Ok((_, generation)) = &reply {
                    if req.op().props().changes() {
                        self.0.unsynced.note(daemon, *generation);
                    }
                }
                self.note_outcome(daemon, &reply);
                // The daemon restarted or the connection broke: renames may have been cut
                // off there, or may be completed now.
                if link.take_reconnected() {
                    self.complete_unfinished_renames_later();
                }
                reply
            }
            None => Err(Failure::Daemon(Errno::eio(format!(
                "daemon {daemon} is not part of this deployment"
            )))),
        }
    }

    /// Closes the connection to a daemon that did not answer (the next request opens a new
    /// one); the daemon then drops what this connection held.
    pub(crate) async fn drop_connection(&self, daemon: u32) {
        if let Some(link) = self.0.links.get(&daemon) {
            link.reset().await;
        }
    }

    /// Sends a metadata request to the owner of `path` (the path is only hashed, not kept).
    /// A path naming a file with several names is answered with where its identity record is
    /// (decision 0009): the request goes on there.
    async fn meta<R: Rpc>(&self, path: &str, req: R) -> Result<R::Reply, Errno> {
        typed_reply::<R>(self.meta_raw(path, req.into()).await?)
    }

    /// `meta` for a request as it travels, answered with the reply as it came.
    async fn meta_raw(&self, path: &str, req: Request) -> Result<Reply, Errno> {
        let owners = self.meta_owners(path);
        let reply = match owners.as_slice() {
            [owner] => self.call_raw(*owner, &req).await?,
            _ => self.failover(&owners, &req).await?,
        };
        match reply {
            Reply::Shared { daemon, file_id } => self.on_identity_raw(daemon, file_id, &req).await,
            reply => Ok(reply),
        }
    }

    /// Sends a request built per daemon to every daemon at once; results in id order.
    pub(crate) async fn all<R: Rpc, F: Fn() -> R>(
        &self,
        make: F,
    ) -> Vec<(u32, Result<R::Reply, Errno>)> {
        self.all_classified(make)
            .await
            .into_iter()
            .map(|(id, r)| (id, r.map_err(Failure::into_errno)))
            .collect()
    }

    async fn all_classified<R: Rpc, F: Fn() -> R>(
        &self,
        make: F,
    ) -> Vec<(u32, Result<R::Reply, Failure>)> {
        let ids = self.0.placement.ids().to_vec();
        let futs = ids.iter().map(|&id| {
            let req = make().into();
            async move {
                let (reply, _) = self.try_call(id, &req).await?;
                typed_reply::<R>(reply).map_err(Failure::Daemon)
            }
        });
        ids.iter().copied().zip(join_all(futs).await).collect()
    }

    /// Like `all`, but the first error wins. With R copies, up to R-1 daemons that cannot be
    /// reached are left out (what they hold has a copy on the others).
    pub(crate) async fn all_ok<R: Rpc, F: Fn() -> R>(
        &self,
        make: F,
    ) -> Result<Vec<R::Reply>, Errno> {
        let results = self.all_classified(make).await;
        let unreachable = results
            .iter()
            .filter(|(_, r)| matches!(r, Err(Failure::Unreachable(_))))
            .count();
        let tolerated = unreachable < self.replicas();
        results
            .into_iter()
            .filter(|(_, r)| !(tolerated && matches!(r, Err(Failure::Unreachable(_)))))
            .map(|(_, r)| r.map_err(Failure::into_errno))
            .collect()
    }

    /// Makes sure the root directory exists, and that every linked prefix is an entry of
    /// the namespace (its scratch ancestors made, the prefix imported from its backend), so
    /// that listings show the links.
    pub(crate) async fn ensure_root(&self) -> Result<(), Errno> {
        let me = Creds::current();
        let cfg = self.config();
        let creds = Creds::user(
            cfg.root_uid.unwrap_or(me.uid),
            cfg.root_gid.unwrap_or(me.gid),
        );
        let prefixes: Vec<String> = self
            .config()
            .links
            .iter()
            .map(|l| l.prefix.clone())
            .collect();
        let mut dirs = vec!["/".to_string()];
        for prefix in &prefixes {
            let mut ancestors = Vec::new();
            let mut cur = prefix.as_str();
            while let Some((parent, _)) = path::split(cur) {
                ancestors.push(parent.to_string());
                cur = parent;
            }
            dirs.extend(ancestors.into_iter().rev().skip(1));
        }
        // The root and the scratch directories above linked prefixes are as closed as
        // `root_mode` says (0700 by default, decision 0023): on a mount every user of the
        // node can reach, they are the gate to the whole namespace.
        let mode = cfg.root_mode.0 & 0o7777;
        for dir in dirs {
            let inode = new_inode(FileKind::Dir, mode, creds, None);
            let req = req::Create {
                path: dir.clone(),
                inode,
                exclusive: false,
            };
            self.meta(&dir, req).await?;
        }
        for prefix in prefixes {
            self.stat_raw(&prefix).await.map_err(|e| {
                Errno::new(
                    e.errno,
                    format!("linked prefix {prefix}: its backend directory: {e}"),
                )
            })?;
        }
        Ok(())
    }

    pub(crate) async fn stat_norm(&self, path: &str) -> Result<Inode, Errno> {
        match self.stat_raw(path).await {
            Err(e) if e.errno == libc::ENOENT => Err(self.refine_enoent(path, e).await),
            other => other,
        }
    }

    /// Asks the owner for an entry and adds this client's unpublished writes to a file's
    /// size (see `merge_pending`), asking again while a publication ends in between.
    pub(crate) async fn stat_raw(&self, path: &str) -> Result<Inode, Errno> {
        const TRIES: usize = 4;
        let mut tries = 0;
        loop {
            let epoch = self.0.sizes.epoch();
            let req = req::Stat {
                path: path.to_string(),
            };
            let i = self.meta(path, req).await?;
            tries += 1;
            let (i, settled) = self.merge_pending(i, epoch);
            if settled || tries == TRIES {
                return Ok(self.with_dir_times(path, i));
            }
        }
    }

    /// A file's inode, as its owner answered a request sent after `epoch` was read, with this
    /// client's unpublished writes counted, and whether that size is settled: not if a
    /// publication of the file ended since, as the answer may predate it while the cache no
    /// longer holds it (the caller should ask again). The pending size is read before the
    /// check, so a publication ending between the two is caught.
    pub(crate) fn merge_pending(&self, mut i: Inode, epoch: u64) -> (Inode, bool) {
        if i.kind != FileKind::File {
            return (i, true);
        }
        i.size = i.size.max(self.0.sizes.pending(i.file_id));
        let settled = !self.0.sizes.ended_since(i.file_id, epoch);
        (i, settled)
    }

    /// Sends a size to the file's owner (merged there with max) and settles the size cache:
    /// acknowledged, or pending again on failure.
    pub(crate) async fn send_size(
        &self,
        file_id: FileId,
        path: &str,
        size: u64,
    ) -> Result<(), Errno> {
        let req = req::GrowSize {
            path: path.to_string(),
            size,
        };
        let res = self.meta(path, req).await;
        self.0.sizes.done(file_id, size, res.is_ok());
        res.map(|_| ())
    }

    /// Publishes the size this client's writes to `f` reached, if any is pending.
    pub(crate) async fn publish_size(&self, f: &File) -> Result<(), Errno> {
        let Some(gate) = self.0.sizes.gate(f.file_id()) else {
            return Ok(());
        };
        let _held = gate.lock().await;
        match self.0.sizes.take(f.file_id(), false) {
            Some((_, size)) => self.send_size(f.file_id(), f.path(), size).await,
            None => Ok(()),
        }
    }

    /// The deferred publication of a file's size, `delay` after a write.
    pub(crate) fn schedule_size_publication(&self, file_id: FileId, delay: std::time::Duration) {
        let client = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let Some(gate) = client.0.sizes.gate(file_id) else {
                return;
            };
            let _held = gate.lock().await;
            let Some((path, size)) = client.0.sizes.take(file_id, true) else {
                return;
            };
            match client.send_size(file_id, &path, size).await {
                Ok(()) => {}
                // Removed meanwhile: nothing to publish to.
                Err(e) if e.errno == libc::ENOENT => client.0.sizes.forget(file_id),
                Err(e) => {
                    tracing::warn!(%path, "size publication failed, retried at fsync/close: {e}")
                }
            }
        });
    }

    /// Turns ENOENT into ENOTDIR when an ancestor is not a directory, as POSIX wants.
    pub(crate) async fn refine_enoent(&self, path: &str, e: Errno) -> Errno {
        let mut cur = path;
        while let Some((parent, _)) = path::split(cur) {
            if let Ok(i) = self
                .meta(
                    parent,
                    req::Stat {
                        path: parent.to_string(),
                    },
                )
                .await
            {
                if i.kind != FileKind::Dir {
                    return Errno::new(libc::ENOTDIR, format!("{parent} is not a directory"));
                }
                return e;
            }
            cur = parent;
        }
        e
    }

    /// Checks that the parent of `path` is a directory the caller may add entries to (see
    /// `parent_dir`).
    pub(crate) async fn check_parent(&self, path: &str, creds: Creds) -> Result<(), Errno> {
        self.parent_dir(path, creds).await.map(|_| ())
    }
}

fn new_inode(kind: FileKind, mode: u32, creds: Creds, target: Option<String>) -> Inode {
    let now = Timespec::now();
    Inode {
        kind,
        file_id: rand::random::<u128>(),
        mode: mode & 0o7777,
        uid: creds.uid,
        gid: creds.gid,
        size: target.as_ref().map_or(0, |t| t.len() as u64),
        atime: now,
        mtime: now,
        ctime: now,
        target,
        tier: None,
        rdev: 0,
        xattrs: Vec::new(),
        // A directory: "." and its name in the parent; each subdirectory's ".." adds one.
        nlink: if kind == FileKind::Dir { 2 } else { 1 },
        shared: None,
    }
}
