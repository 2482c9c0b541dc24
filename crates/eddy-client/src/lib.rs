//! eddy-client: the library every access path (FUSE mount, preload library, tools) uses to
//! reach an Eddy deployment.
//!
//! It computes placement itself (no lookup RPC), splits reads and writes by chunk, groups
//! them by daemon and sends all groups at once, and offers a POSIX-shaped API
//! (open/pread/pwrite/stat/readdir/rename/...). Errors are `Errno` values with context; a
//! dead daemon gives EIO within the RPC deadline, never a hang.
//!
//! The connections, the calls with their deadline, the down marks, the owners of an item and
//! the fan-out are the rpc layer's (`eddy_rpc::Daemons`, `Client::rpc`). Above it the client
//! is in layers (decision 0068): `Client` is the façade the front-ends call (`facade.rs`: each
//! operation handed to a layer); two layers send the requests, each its own: `namespace`
//! (names and the records they lead to, to a path's metadata owner or a file's identity
//! record) and `data` (a file's bytes and the daemons that store them); the other modules
//! keep the client's own state and call into the layers, sending nothing
//! (`scripts/check-client-layers.py`). That state is in subsystems that keep it behind their
//! methods: the size cache (`size`), directory times (`dirtimes`), recent directories
//! (`dircache`), renames under way (`rename::Renames`), what an fsync must reach
//! (`unsynced`), the lock session (`locks`), the open files (`file`, `held`).
//!
//! It must not keep state that other clients need to see: everything shared lives on the
//! daemons (the intents of directory renames too). Its caches are bounded in time: the sizes
//! its own writes reached, published within `size_update_ms` (`size`), and the directories it
//! looked up, trusted for `dir_cache_ms` (`dircache`); file data is never cached here. What
//! it knows of a directory it holds a lease on (`leases`: the names there, its queued creates
//! and unlinks) lasts until another client's request recalls the lease (decision 0075).

mod access;
mod data;
mod dircache;
pub mod driver;
mod facade;
mod file;
mod held;
mod leases;
mod namespace;
mod paging;
mod perm;
pub mod session;
mod size;
mod unsynced;

use data::{direct, integrity, layout, locality, tier};
use namespace::{dir, dirtimes, locks, rename};

pub use data::Advice;
pub use dir::DirReader;
pub use eddy_proto::{
    DaemonStatus, DirEntry, Errno, FileId, FileKind, Inode, SetAttr, SetTime, Timespec, XattrSet,
};
pub use eddy_proto::{LockInfo, LockKind, LockRange};
pub use eddy_rpc::{membership_of, wire_mode, Daemons, Failure};
pub use file::File;
pub use leases::LeaseReturnHook;
pub use locks::{LockRequest, Waiting};
pub use perm::{Creds, Groups};
pub use tier::FileResult;

use eddy_config::{Config, Deployment};
use eddy_proto::path::{self, PathLimits};
use eddy_proto::Request;
use std::path::PathBuf;
use std::sync::{Arc, Weak};

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
    /// The connections to the daemons, the down marks, the placement and the request
    /// counters (eddy-rpc); it tells `Watch` of every answer and reconnection.
    rpc: Daemons,
    sizes: size::SizeCache,
    /// Times of directories this client changed, not yet published to their owners.
    dirs: dirtimes::DirTimes,
    limits: PathLimits,
    /// Random identity of this client in lock owners: two clients never share an owner.
    locks: locks::LockSession,
    /// Directory renames under way here or left unfinished (decision 0010).
    renames: rename::Renames,
    /// Directories looked up recently (see `dircache`).
    dircache: dircache::DirCache,
    /// Files that may hold chunks past their size: a write or fallocate that failed after
    /// reaching some daemons, a `KEEP_SIZE` fallocate. Their removal here drops their data on
    /// every daemon, not only on the owners of the chunks below the size (decision 0060).
    spilled: std::sync::Mutex<std::collections::HashSet<FileId>>,
    /// Daemons holding this client's changes other than file data not yet synced (an
    /// fsync reaches them; decision 0015).
    unsynced: Arc<unsynced::Unsynced>,
    /// The daemons of this client's host, for placement by locality (decision 0043).
    local: locality::LocalView,
    /// The daemons of this client's host that hand out descriptors (decision 0048).
    direct: direct::Local,
    /// The files open through this client, and the hidden names of those unlinked or
    /// replaced while open (decision 0061).
    held: held::Held,
    /// Turns of the background fetches advised with `WillNeed` (`data::advice`).
    willneed: Arc<tokio::sync::Semaphore>,
    /// The directory leases this client holds (decision 0075).
    leases: leases::Leases,
}

/// What the client learns of every call through its rpc layer: a change other than a write
/// is noted for the next fsync (decision 0015), and a connection re-established to a daemon
/// makes it complete unfinished renames (cut off there, or completable now; decision 0010).
struct Watch {
    unsynced: Arc<unsynced::Unsynced>,
    client: Weak<Inner>,
}

impl eddy_rpc::Observer for Watch {
    fn answered(&self, daemon: u32, req: &Request, generation: u64) {
        if req.op().props().changes() {
            self.unsynced.note(daemon, generation);
        }
    }

    fn reconnected(&self, _daemon: u32) {
        if let Some(inner) = self.client.upgrade() {
            Client(inner).ns().complete_unfinished_renames_later();
        }
    }
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
        client.ns().ensure_root().await?;
        client.ns().complete_unfinished_renames().await;
        Ok(client)
    }

    /// `connect` for a deployment read from the hosts file `hosts_file`: when the
    /// deployment's membership moves on (decision 0081), the client reads the file again and
    /// follows it (`Daemons::with_hosts_file`).
    pub async fn connect_following(dep: Deployment, hosts_file: PathBuf) -> Result<Client, Errno> {
        let client = Client::new_following(dep, hosts_file)?;
        client.ns().ensure_root().await?;
        client.ns().complete_unfinished_renames().await;
        Ok(client)
    }

    /// Prepares the links without contacting any daemon: for tools (status, stop) that must
    /// work while some daemons are down. A client made so cannot follow a change of the
    /// deployment's membership (its requests then fail with EIO): see `new_following`.
    pub fn new(dep: Deployment) -> Result<Client, Errno> {
        Client::with_rpc(Daemons::new(&dep)?, dep)
    }

    /// `new` for a deployment read from the hosts file `hosts_file`, which is read again
    /// when the membership moves on.
    pub fn new_following(dep: Deployment, hosts_file: PathBuf) -> Result<Client, Errno> {
        Client::with_rpc(Daemons::new(&dep)?.with_hosts_file(hosts_file), dep)
    }

    fn with_rpc(rpc: Daemons, dep: Deployment) -> Result<Client, Errno> {
        let limits = PathLimits {
            max_path: dep.config.max_path_bytes,
            max_name: dep.config.max_name_bytes,
        };
        let sizes =
            size::SizeCache::new(std::time::Duration::from_millis(dep.config.size_update_ms));
        let dirs = dirtimes::DirTimes::new(std::time::Duration::from_millis(
            dep.config.dir_time_update_ms,
        ));
        let dircache =
            dircache::DirCache::new(std::time::Duration::from_millis(dep.config.dir_cache_ms));
        let unsynced = Arc::new(unsynced::Unsynced::default());
        let host = locality::this_host(&dep.config);
        let local = locality::LocalView::new(&dep, &host);
        let direct = direct::Local::new(&dep, &host);
        Ok(Client(Arc::new_cyclic(|me| Inner {
            rpc: rpc.observed(Box::new(Watch {
                unsynced: unsynced.clone(),
                client: me.clone(),
            })),
            sizes,
            dirs,
            limits,
            locks: locks::LockSession::new(),
            renames: rename::Renames::default(),
            dircache,
            spilled: Default::default(),
            unsynced,
            local,
            direct,
            held: held::Held::default(),
            willneed: data::willneed_turns(),
            leases: leases::Leases::new(&dep.config),
            dep,
        })))
    }

    pub fn config(&self) -> &Config {
        &self.0.dep.config
    }

    pub fn deployment(&self) -> &Deployment {
        &self.0.dep
    }

    /// The rpc layer: the connections to the daemons, shared by this client's clones.
    pub fn rpc(&self) -> &Daemons {
        &self.0.rpc
    }

    /// Requests this client (and its clones) sent so far, by kind (`Request::op_name`): what
    /// an operation costs in round trips.
    pub fn rpc_counts(&self) -> std::collections::BTreeMap<&'static str, u64> {
        self.rpc().rpc_counts()
    }

    // ---------------------------------------------------------------- plumbing

    /// A directory on the way to an entry: from the cache of recent directories, else asked
    /// for (and remembered).
    pub(crate) async fn dir_inode(&self, d: &str) -> Result<Inode, Errno> {
        if let Some(i) = self.0.dircache.get(d) {
            return Ok(i);
        }
        let since = self.0.dircache.epoch();
        let i = self.ns().stat_raw(d).await?;
        self.0.dircache.put(d, &i, since);
        Ok(i)
    }

    pub(crate) fn norm(&self, p: &str) -> Result<String, Errno> {
        path::normalize(p, self.0.limits)
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

    /// Whether `close(f)` has anything to do: this client has written the file (a size may be
    /// pending or in flight), or the handle holds direct leases (their reports and their end,
    /// decision 0048). When false, `close` sends nothing and changes nothing, so a front-end
    /// may skip it (the mount answers FLUSH and RELEASE of a clean file without entering the
    /// runtime).
    pub fn close_has_work(&self, f: &File) -> bool {
        self.0.sizes.written(f.file_id())
            || !f.0.direct.is_empty()
            || self.holds_hidden(f)
            || self.ns().lease_pending(&f.path())
    }

    /// Publishes the size this client's writes to `f` reached, if any is pending.
    pub(crate) async fn publish_size(&self, f: &File) -> Result<(), Errno> {
        let Some(_held) = self.0.sizes.hold(f.file_id()).await else {
            return Ok(());
        };
        match self.0.sizes.take(f.file_id(), false) {
            Some((_, size)) => self.ns().send_size(f.file_id(), &f.path(), size).await,
            None => Ok(()),
        }
    }

    /// The deferred publication of a file's size, `delay` after a write.
    pub(crate) fn schedule_size_publication(&self, file_id: FileId, delay: std::time::Duration) {
        let client = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let Some(_held) = client.0.sizes.hold(file_id).await else {
                return;
            };
            let Some((path, size)) = client.0.sizes.take(file_id, true) else {
                return;
            };
            match client.ns().send_size(file_id, &path, size).await {
                Ok(()) => {}
                // Removed meanwhile: nothing to publish to.
                Err(e) if e.errno == libc::ENOENT => client.0.sizes.forget(file_id),
                Err(e) => {
                    tracing::warn!(%path, "size publication failed, retried at fsync/close: {e}")
                }
            }
        });
    }
}

fn new_inode(kind: FileKind, mode: u32, creds: Creds, target: Option<String>) -> Inode {
    let now = Timespec::now();
    Inode {
        kind,
        // Never one that reads as placed by locality; `place_new` makes those.
        file_id: eddy_placement::hashed_file_id(rand::random::<u128>()),
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
