//! eddy-client: the library every access path (FUSE mount, preload library, tools) uses to
//! reach an Eddy deployment.
//!
//! It computes placement itself (no lookup RPC), keeps one multiplexed connection per daemon,
//! splits reads and writes by chunk, groups them by daemon and sends all groups at once, and
//! offers a POSIX-shaped API (open/pread/pwrite/stat/readdir/rename/...). Errors are `Errno`
//! values with context; a dead daemon gives EIO within the RPC deadline, never a hang.
//!
//! It must not keep state that other clients need to see: everything shared lives on the
//! daemons. The only client-side cache is the size each open file is known to have reached.

mod conn;
mod dir;
mod layout;
mod perm;
mod size;

pub use dir::DirReader;
pub use eddy_proto::{
    DaemonStatus, DirEntry, Errno, FileId, FileKind, Inode, SetAttr, SetTime, Timespec,
};
pub use perm::Creds;

use conn::Link;
use eddy_config::{Config, Deployment};
use eddy_placement::Placement;
use eddy_proto::path::{self, PathLimits};
use eddy_proto::{Piece, RemoveKind, Reply, Request};
use futures::future::join_all;
use perm::Access;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Symlinks followed at most this many times when opening (ELOOP beyond).
const MAX_SYMLINK_HOPS: usize = 8;

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

struct FileInner {
    path: String,
    inode: Inode,
    flags: i32,
    /// The largest size this handle knows the file to have (its own writes included).
    known_size: AtomicU64,
}

/// An open file. Cheap to clone.
#[derive(Clone)]
pub struct File(Arc<FileInner>);

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("path", &self.0.path)
            .field("file_id", &self.0.inode.file_id)
            .finish()
    }
}

impl File {
    pub fn path(&self) -> &str {
        &self.0.path
    }
    pub fn file_id(&self) -> FileId {
        self.0.inode.file_id
    }
    /// The inode as of open.
    pub fn inode(&self) -> Inode {
        self.0.inode.clone()
    }
    pub fn readable(&self) -> bool {
        self.0.flags & libc::O_ACCMODE != libc::O_WRONLY
    }
    pub fn writable(&self) -> bool {
        self.0.flags & libc::O_ACCMODE != libc::O_RDONLY
    }
    pub fn append(&self) -> bool {
        self.0.flags & libc::O_APPEND != 0
    }
    fn raise_known(&self, size: u64) {
        self.0.known_size.fetch_max(size, Ordering::AcqRel);
    }
}

struct Inner {
    dep: Deployment,
    sizes: size::SizeCache,
    placement: Placement,
    links: HashMap<u32, Link>,
    limits: PathLimits,
}

/// A connection to a deployment. Cloning shares the connections.
#[derive(Clone)]
pub struct Client(Arc<Inner>);

impl Client {
    /// Prepares links to every daemon (connected lazily, Unix socket where the daemon's socket
    /// exists on this host, TCP otherwise) and makes sure the root directory exists.
    pub async fn connect(dep: Deployment) -> Result<Client, Errno> {
        let client = Client::new(dep)?;
        client.ensure_root().await?;
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
        Ok(Client(Arc::new(Inner {
            sizes,
            dep,
            placement,
            links,
            limits,
        })))
    }

    pub fn config(&self) -> &Config {
        &self.0.dep.config
    }

    pub fn deployment(&self) -> &Deployment {
        &self.0.dep
    }

    // ---------------------------------------------------------------- plumbing

    fn norm(&self, p: &str) -> Result<String, Errno> {
        path::normalize(p, self.0.limits)
    }

    async fn call(&self, daemon: u32, req: Request) -> Result<Reply, Errno> {
        match self.0.links.get(&daemon) {
            Some(link) => link.call(&req).await,
            None => Err(Errno::eio(format!(
                "daemon {daemon} is not part of this deployment"
            ))),
        }
    }

    /// Sends a metadata request to the owner of `path` (the path is only hashed, not kept).
    fn meta(
        &self,
        path: &str,
        req: Request,
    ) -> impl std::future::Future<Output = Result<Reply, Errno>> + '_ {
        self.call(self.0.placement.meta_owner(path), req)
    }

    /// Sends a request built per daemon to every daemon at once; results in id order.
    async fn all<F: Fn() -> Request>(&self, make: F) -> Vec<(u32, Result<Reply, Errno>)> {
        let ids = self.0.placement.ids().to_vec();
        let futs = ids.iter().map(|&id| self.call(id, make()));
        ids.iter().copied().zip(join_all(futs).await).collect()
    }

    /// Like `all`, but the first error wins.
    async fn all_ok<F: Fn() -> Request>(&self, make: F) -> Result<Vec<Reply>, Errno> {
        self.all(make).await.into_iter().map(|(_, r)| r).collect()
    }

    async fn ensure_root(&self) -> Result<(), Errno> {
        let creds = Creds::current();
        let root = new_inode(FileKind::Dir, 0o755, creds, None);
        self.meta(
            "/",
            Request::Create {
                path: "/".into(),
                inode: root,
                exclusive: false,
            },
        )
        .await
        .map(|_| ())
    }

    async fn stat_norm(&self, path: &str) -> Result<Inode, Errno> {
        match self.stat_raw(path).await {
            Err(e) if e.errno == libc::ENOENT => Err(self.refine_enoent(path, e).await),
            other => other,
        }
    }

    /// Asks the owner for an entry and adds this client's unpublished writes to a file's
    /// size. If a publication of that file ended meanwhile, the owner's answer may predate it
    /// and the cache no longer holds it: ask again.
    async fn stat_raw(&self, path: &str) -> Result<Inode, Errno> {
        const TRIES: usize = 4;
        let mut tries = 0;
        loop {
            let epoch = self.0.sizes.epoch();
            let req = Request::Stat {
                path: path.to_string(),
            };
            let i = expect_inode(self.meta(path, req).await?)?;
            tries += 1;
            if i.kind == FileKind::File
                && self.0.sizes.ended_since(i.file_id, epoch)
                && tries < TRIES
            {
                continue;
            }
            return Ok(self.with_pending_size(i));
        }
    }

    /// A file's inode as this client sees it: its own unpublished writes count.
    fn with_pending_size(&self, mut i: Inode) -> Inode {
        if i.kind == FileKind::File {
            i.size = i.size.max(self.0.sizes.pending(i.file_id));
        }
        i
    }

    /// Sends a size to the file's owner (merged there with max) and settles the size cache:
    /// acknowledged, or pending again on failure.
    async fn send_size(&self, file_id: FileId, path: &str, size: u64) -> Result<(), Errno> {
        let req = Request::GrowSize {
            path: path.to_string(),
            size,
        };
        let res = self.meta(path, req).await;
        self.0.sizes.done(file_id, size, res.is_ok());
        res.map(|_| ())
    }

    /// Publishes the size this client's writes to `f` reached, if any is pending.
    async fn publish_size(&self, f: &File) -> Result<(), Errno> {
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
    fn schedule_size_publication(&self, file_id: FileId, delay: std::time::Duration) {
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
    async fn refine_enoent(&self, path: &str, e: Errno) -> Errno {
        let mut cur = path;
        while let Some((parent, _)) = path::split(cur) {
            if let Ok(Reply::Inode(i)) = self
                .meta(
                    parent,
                    Request::Stat {
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

    /// Checks that the parent of `path` is a directory the caller may add entries to.
    async fn check_parent(&self, path: &str, creds: Creds) -> Result<(), Errno> {
        if creds.parent_resolved && !creds.enforce {
            return Ok(());
        }
        let Some((parent, _)) = path::split(path) else {
            return Err(Errno::new(libc::EEXIST, "/ already exists"));
        };
        let dir = self.stat_norm(parent).await?;
        if dir.kind != FileKind::Dir {
            return Err(Errno::new(
                libc::ENOTDIR,
                format!("{parent} is not a directory"),
            ));
        }
        perm::check(&dir, creds, Access::WRITE | Access::EXEC, parent)
    }

    // ---------------------------------------------------------------- metadata

    /// lstat: the entry itself (a symlink is not followed).
    pub async fn stat(&self, path: &str) -> Result<Inode, Errno> {
        let p = self.norm(path)?;
        self.stat_norm(&p).await
    }

    /// Like `stat`, for a caller that knows the parent is a directory (a kernel looking up a
    /// name in a directory it holds): a missing entry is ENOENT at the cost of one RPC, with no
    /// look at the ancestors.
    pub async fn lookup(&self, path: &str) -> Result<Inode, Errno> {
        let p = self.norm(path)?;
        self.stat_raw(&p).await
    }

    pub async fn mkdir(&self, path: &str, mode: u32, creds: Creds) -> Result<Inode, Errno> {
        let p = self.norm(path)?;
        let inode = new_inode(FileKind::Dir, mode, creds, None);
        self.create_entry(&p, inode, true, creds).await
    }

    /// Creates an entry at its owner after checking its parent; without `exclusive`, an
    /// existing entry is returned as it is.
    async fn create_entry(
        &self,
        p: &str,
        inode: Inode,
        exclusive: bool,
        creds: Creds,
    ) -> Result<Inode, Errno> {
        self.check_parent(p, creds).await?;
        let req = Request::Create {
            path: p.to_string(),
            inode,
            exclusive,
        };
        expect_inode(self.meta(p, req).await?)
    }

    pub async fn symlink(
        &self,
        target: &str,
        linkpath: &str,
        creds: Creds,
    ) -> Result<Inode, Errno> {
        let p = self.norm(linkpath)?;
        if target.is_empty() || target.contains('\0') || target.len() > self.0.limits.max_path {
            return Err(Errno::einval(
                "symlink target must be non-empty, NUL-free and within the path limit",
            ));
        }
        let inode = new_inode(FileKind::Symlink, 0o777, creds, Some(target.to_string()));
        self.create_entry(&p, inode, true, creds).await
    }

    pub async fn readlink(&self, path: &str) -> Result<String, Errno> {
        let i = self.stat(path).await?;
        match (i.kind, i.target) {
            (FileKind::Symlink, Some(t)) => Ok(t),
            _ => Err(Errno::einval(format!("{path} is not a symbolic link"))),
        }
    }

    pub async fn unlink(&self, path: &str, creds: Creds) -> Result<(), Errno> {
        let p = self.norm(path)?;
        if creds.enforce {
            self.check_parent(&p, creds).await?;
        }
        let removed = match self
            .meta(
                &p,
                Request::Remove {
                    path: p.clone(),
                    kind: RemoveKind::NotDir,
                },
            )
            .await
        {
            Ok(r) => expect_inode(r)?,
            Err(e) if e.errno == libc::ENOENT => return Err(self.refine_enoent(&p, e).await),
            Err(e) => return Err(e),
        };
        self.0.sizes.forget(removed.file_id);
        // A file of size 0 holds no chunk: the first write of every client publishes its size
        // at once, and truncation drops the chunks past the new size. Only a write racing with
        // this unlink, or one that failed half-way, can leave unreachable chunks behind
        // (garbage, never visible).
        if removed.kind == FileKind::File && removed.size > 0 {
            self.drop_data(removed.file_id, removed.size).await?;
        }
        Ok(())
    }

    pub async fn rmdir(&self, path: &str, creds: Creds) -> Result<(), Errno> {
        let p = self.norm(path)?;
        if p == "/" {
            return Err(Errno::new(libc::EBUSY, "cannot remove the root directory"));
        }
        if creds.enforce {
            self.check_parent(&p, creds).await?;
        }
        let dir = self.stat_norm(&p).await?;
        if dir.kind != FileKind::Dir {
            return Err(Errno::new(libc::ENOTDIR, format!("{p} is not a directory")));
        }
        self.ensure_empty(&p).await?;
        self.meta(
            &p,
            Request::Remove {
                path: p.clone(),
                kind: RemoveKind::Dir,
            },
        )
        .await
        .map(|_| ())
    }

    async fn ensure_empty(&self, dir: &str) -> Result<(), Errno> {
        for r in self
            .all_ok(|| Request::HasChildren {
                dir: dir.to_string(),
            })
            .await?
        {
            if r == Reply::Bool(true) {
                return Err(Errno::new(libc::ENOTEMPTY, format!("{dir} is not empty")));
            }
        }
        Ok(())
    }

    /// Drops every chunk of a file of `size` bytes.
    async fn drop_data(&self, file_id: FileId, size: u64) -> Result<(), Errno> {
        self.to_chunk_holders(file_id, 0, size, || Request::RemoveData { file_id })
            .await
    }

    /// Drops the data of a file at and after byte `size`, for a file known to reach `old`.
    async fn truncate_data(&self, file_id: FileId, size: u64, old: u64) -> Result<(), Errno> {
        let (from, to) = (size.min(old), size.max(old));
        self.to_chunk_holders(file_id, from, to, || Request::TruncateData {
            file_id,
            size,
        })
        .await
    }

    /// Sends a request to every daemon that may hold a chunk of `file_id` overlapping bytes
    /// `[from, to)` (at least the chunk holding `from`): the chunks' owners, as placement names
    /// them, or every daemon when the range covers more chunks than there are daemons. An
    /// unlink or truncate of a small file so costs one RPC, not one per daemon.
    async fn to_chunk_holders<F: Fn() -> Request>(
        &self,
        file_id: FileId,
        from: u64,
        to: u64,
        make: F,
    ) -> Result<(), Errno> {
        let cs = self.config().chunk_size;
        let first = from / cs;
        let last = if to > from { (to - 1) / cs } else { first };
        let ids = self.0.placement.ids();
        if last - first >= ids.len() as u64 {
            return self.all_ok(make).await.map(|_| ());
        }
        let mut holders: Vec<u32> = (first..=last)
            .map(|k| self.0.placement.chunk_owner(file_id, k))
            .collect();
        holders.sort_unstable();
        holders.dedup();
        for r in join_all(holders.into_iter().map(|id| self.call(id, make()))).await {
            r?;
        }
        Ok(())
    }

    /// rename(2): files, symlinks and directories. A file replaces a file; a directory
    /// replaces an empty directory. Atomic for files as seen by readers: the new name exists
    /// before the old one goes. Data never moves (it is named by file id).
    pub async fn rename(&self, from: &str, to: &str, creds: Creds) -> Result<(), Errno> {
        let from = self.norm(from)?;
        let to = self.norm(to)?;
        if from == "/" || to == "/" {
            return Err(Errno::new(libc::EBUSY, "cannot rename the root directory"));
        }
        if from == to {
            self.stat_norm(&from).await?;
            return Ok(());
        }
        if path::is_within(&to, &from) {
            return Err(Errno::einval(format!(
                "cannot move {from} into itself ({to})"
            )));
        }
        let src = self.stat_norm(&from).await?;
        if creds.enforce {
            self.check_parent(&from, creds).await?;
        }
        self.check_parent(&to, creds).await?;
        let dst = match self.stat_norm(&to).await {
            Ok(i) => Some(i),
            Err(e) if e.errno == libc::ENOENT => None,
            Err(e) => return Err(e),
        };
        if let Some(d) = &dst {
            match (src.kind == FileKind::Dir, d.kind == FileKind::Dir) {
                (true, false) => {
                    return Err(Errno::new(
                        libc::ENOTDIR,
                        format!("{to} is not a directory"),
                    ))
                }
                (false, true) => {
                    return Err(Errno::new(libc::EISDIR, format!("{to} is a directory")))
                }
                (true, true) => self.ensure_empty(&to).await?,
                (false, false) => {}
            }
        }
        let mut moved = src.clone();
        moved.ctime = Timespec::now();
        self.meta(
            &to,
            Request::Insert {
                path: to.clone(),
                inode: moved,
                replace: true,
            },
        )
        .await?;
        if src.kind == FileKind::Dir {
            self.move_subtree(&from, &to).await?;
        }
        self.meta(
            &from,
            Request::Remove {
                path: from.clone(),
                kind: RemoveKind::Any,
            },
        )
        .await?;
        if let Some(d) = dst {
            if d.kind == FileKind::File && d.file_id != src.file_id {
                self.drop_data(d.file_id, d.size).await?;
            }
        }
        Ok(())
    }

    /// Re-inserts every entry below `from` under `to`, then removes the old entries.
    async fn move_subtree(&self, from: &str, to: &str) -> Result<(), Errno> {
        let page = self.config().readdir_page;
        let mut old_paths = Vec::new();
        for &id in self.0.placement.ids() {
            let mut after = None;
            loop {
                let req = Request::ListSubtree {
                    dir: from.to_string(),
                    after: after.clone(),
                    limit: page,
                };
                let Reply::Subtree { entries, more } = self.call(id, req).await? else {
                    return Err(Errno::eio("unexpected reply to list_subtree"));
                };
                let inserts = entries.iter().map(|e| {
                    let new_path = format!("{to}{}", &e.path[from.len()..]);
                    self.meta(
                        &new_path,
                        Request::Insert {
                            path: new_path.clone(),
                            inode: e.inode.clone(),
                            replace: true,
                        },
                    )
                });
                for r in join_all(inserts).await {
                    r?;
                }
                after = entries.last().map(|e| e.path.clone());
                old_paths.extend(entries.into_iter().map(|e| e.path));
                if !more || after.is_none() {
                    break;
                }
            }
        }
        // Deepest first, so no directory is ever left without its parent.
        old_paths.sort_by_key(|p| std::cmp::Reverse(p.len()));
        let removes = old_paths.iter().map(|p| {
            self.meta(
                p,
                Request::Remove {
                    path: p.clone(),
                    kind: RemoveKind::Any,
                },
            )
        });
        for r in join_all(removes).await {
            r?;
        }
        Ok(())
    }

    pub async fn truncate(&self, path: &str, size: u64, creds: Creds) -> Result<Inode, Errno> {
        self.setattr(
            path,
            SetAttr {
                size: Some(size),
                ..SetAttr::default()
            },
            creds,
        )
        .await
    }

    /// chmod, chown, utimens and truncate in one call; returns the new inode.
    pub async fn setattr(&self, path: &str, attr: SetAttr, creds: Creds) -> Result<Inode, Errno> {
        let p = self.norm(path)?;
        let cur = self.stat_norm(&p).await?;
        perm::check_setattr(&cur, &attr, creds, &p)?;
        // Under the file's publication gate: a publication under way ends first and none
        // starts meanwhile. A truncate then drops the sizes reached before it; any other change
        // first publishes them, so that the inode the owner replies with is the whole file
        // (a kernel takes that size as the file's).
        let gate = match cur.kind {
            FileKind::File => self.0.sizes.gate(cur.file_id),
            _ => None,
        };
        let _held = match &gate {
            Some(g) => Some(g.lock().await),
            None => None,
        };
        if attr.size.is_none() && gate.is_some() {
            if let Some((_, size)) = self.0.sizes.take(cur.file_id, false) {
                self.send_size(cur.file_id, &p, size).await?;
            }
        }
        if let Some(size) = attr.size {
            if cur.kind == FileKind::Dir {
                return Err(Errno::new(libc::EISDIR, format!("{p} is a directory")));
            }
            if cur.kind != FileKind::File {
                return Err(Errno::einval(format!("{p} is not a regular file")));
            }
            // Sizes this client's earlier writes reached no longer hold.
            self.0.sizes.forget(cur.file_id);
            self.truncate_data(cur.file_id, size, cur.size).await?;
        }
        expect_inode(
            self.meta(
                &p,
                Request::SetAttr {
                    path: p.clone(),
                    attr,
                },
            )
            .await?,
        )
    }

    pub async fn statfs(&self) -> Result<FsStats, Errno> {
        let mut s = FsStats {
            block_size: 4096,
            ..FsStats::default()
        };
        for r in self.all_ok(|| Request::Status).await? {
            if let Reply::Status(d) = r {
                s.total_bytes += d.fs_total_bytes;
                s.free_bytes += d.fs_free_bytes;
                s.avail_bytes += d.fs_avail_bytes;
                s.files += d.fs_files;
                s.files_free += d.fs_files_free;
            }
        }
        Ok(s)
    }

    /// The inode of an entry listed in `dir` as this client sees it: the listing's own, or, for
    /// a file this client is writing, a fresh stat that counts its unpublished writes (the
    /// listing may predate them).
    pub async fn entry_inode(&self, dir: &str, entry: &DirEntry) -> Result<Inode, Errno> {
        let i = &entry.inode;
        if i.kind == FileKind::File && self.0.sizes.gate(i.file_id).is_some() {
            return self.stat_raw(&path::join(dir, &entry.name)).await;
        }
        Ok(i.clone())
    }

    /// A cursor over the entries of `dir`, resuming after the name `after`.
    pub fn readdir(&self, dir: &str, after: Option<String>) -> Result<DirReader, Errno> {
        let p = self.norm(dir)?;
        Ok(DirReader::new(self.clone(), p, after))
    }

    /// Status of every daemon, in id order.
    pub async fn daemon_status(&self) -> Vec<(u32, Result<DaemonStatus, Errno>)> {
        self.all(|| Request::Status)
            .await
            .into_iter()
            .map(|(id, r)| {
                let s = r.and_then(|r| match r {
                    Reply::Status(s) => Ok(s),
                    other => Err(Errno::eio(format!("unexpected reply to status: {other:?}"))),
                });
                (id, s)
            })
            .collect()
    }

    /// Asks every daemon to stop.
    pub async fn shutdown_daemons(&self) -> Vec<(u32, Result<(), Errno>)> {
        self.all(|| Request::Shutdown)
            .await
            .into_iter()
            .map(|(id, r)| (id, r.map(|_| ())))
            .collect()
    }

    /// Makes every daemon's metadata and chunks durable.
    pub async fn sync_all(&self) -> Result<(), Errno> {
        self.all_ok(|| Request::Sync { file_id: None })
            .await
            .map(|_| ())
    }

    // ---------------------------------------------------------------- files

    /// open(2) with libc O_* flags.
    pub async fn open(
        &self,
        path: &str,
        flags: i32,
        mode: u32,
        creds: Creds,
    ) -> Result<File, Errno> {
        let mut p = self.norm(path)?;
        let mut hops = 0;
        loop {
            let (inode, created) = self.open_entry(&p, flags, mode, creds).await?;
            if inode.kind == FileKind::Symlink {
                if flags & libc::O_NOFOLLOW != 0 {
                    return Err(Errno::new(
                        libc::ELOOP,
                        format!("{p} is a symbolic link (O_NOFOLLOW)"),
                    ));
                }
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(Errno::new(
                        libc::ELOOP,
                        format!("too many symbolic links at {p}"),
                    ));
                }
                p = self.resolve_link(&p, inode.target.as_deref().unwrap_or(""))?;
                continue;
            }
            return self.finish_open(p, inode, created, flags, creds).await;
        }
    }

    fn resolve_link(&self, link: &str, target: &str) -> Result<String, Errno> {
        let base = path::split(link).map(|(parent, _)| parent).unwrap_or("/");
        if target.starts_with('/') {
            self.norm(target)
        } else {
            self.norm(&path::join(base, target))
        }
    }

    /// Looks up or creates the entry; returns it and whether this call created it.
    async fn open_entry(
        &self,
        p: &str,
        flags: i32,
        mode: u32,
        creds: Creds,
    ) -> Result<(Inode, bool), Errno> {
        if flags & libc::O_CREAT == 0 {
            return Ok((self.stat_norm(p).await?, false));
        }
        let exclusive = flags & libc::O_EXCL != 0;
        // An enforcing caller may open an existing file in a directory it cannot write to, so
        // look first; otherwise a non-exclusive Create returns the existing entry by itself.
        if !exclusive && creds.enforce {
            match self.stat_norm(p).await {
                Ok(i) => return Ok((i, false)),
                Err(e) if e.errno == libc::ENOENT => {}
                Err(e) => return Err(e),
            }
        }
        let fresh = new_inode(FileKind::File, mode, creds, None);
        let fresh_id = fresh.file_id;
        let got = self.create_entry(p, fresh, exclusive, creds).await?;
        let created = got.file_id == fresh_id;
        Ok((got, created))
    }

    async fn finish_open(
        &self,
        p: String,
        mut inode: Inode,
        created: bool,
        flags: i32,
        creds: Creds,
    ) -> Result<File, Errno> {
        let acc = flags & libc::O_ACCMODE;
        let wants_write = acc != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        if inode.kind == FileKind::Dir {
            if wants_write || flags & libc::O_CREAT != 0 {
                return Err(Errno::new(libc::EISDIR, format!("{p} is a directory")));
            }
        } else if flags & libc::O_DIRECTORY != 0 {
            return Err(Errno::new(libc::ENOTDIR, format!("{p} is not a directory")));
        }
        if !created {
            let mut want = Access::empty();
            if acc != libc::O_WRONLY {
                want |= Access::READ;
            }
            if wants_write {
                want |= Access::WRITE;
            }
            perm::check(&inode, creds, want, &p)?;
        }
        if inode.kind == FileKind::File
            && flags & libc::O_TRUNC != 0
            && acc != libc::O_RDONLY
            && inode.size > 0
        {
            let attr = SetAttr {
                size: Some(0),
                ..SetAttr::default()
            };
            // Permission to write was checked above; truncate as setattr does.
            inode = self.setattr(&p, attr, Creds::root()).await?;
        }
        let known = AtomicU64::new(inode.size);
        Ok(File(Arc::new(FileInner {
            path: p,
            inode,
            flags,
            known_size: known,
        })))
    }

    /// Creates a regular file and opens it read-write.
    pub async fn create(
        &self,
        path: &str,
        mode: u32,
        exclusive: bool,
        creds: Creds,
    ) -> Result<File, Errno> {
        let excl = if exclusive { libc::O_EXCL } else { 0 };
        self.open(path, libc::O_RDWR | libc::O_CREAT | excl, mode, creds)
            .await
    }

    pub async fn fstat(&self, f: &File) -> Result<Inode, Errno> {
        let i = self.stat_norm(f.path()).await?;
        f.raise_known(i.size);
        Ok(i)
    }

    /// Reads up to `len` bytes at `offset`; short at end of file; holes read as zeros.
    pub async fn pread(&self, f: &File, offset: u64, len: usize) -> Result<Vec<u8>, Errno> {
        if !f.readable() {
            return Err(Errno::new(
                libc::EBADF,
                format!("{} is not open for reading", f.path()),
            ));
        }
        if f.0.inode.kind == FileKind::Dir {
            return Err(Errno::new(
                libc::EISDIR,
                format!("{} is a directory", f.path()),
            ));
        }
        let end = offset.saturating_add(len as u64);
        let mut size = f.0.known_size.load(Ordering::Acquire);
        if end > size {
            // The range reaches past what we know: another writer may have extended the file.
            size = self.stat_norm(f.path()).await?.size;
            f.0.known_size.store(size, Ordering::Release);
        }
        if offset >= size {
            return Ok(Vec::new());
        }
        let len = (size - offset).min(len as u64) as usize;
        let mut out = vec![0u8; len];
        let cfg = self.config();
        let batches = layout::batches(
            &self.0.placement,
            f.file_id(),
            offset,
            len,
            cfg.chunk_size,
            cfg.max_rpc_data_bytes as usize,
        );
        let reads = batches.iter().map(|b| {
            let pieces: Vec<Piece> = b.spans.iter().map(|s| s.piece).collect();
            self.call(
                b.daemon,
                Request::Read {
                    file_id: f.file_id(),
                    pieces,
                },
            )
        });
        for (b, r) in batches.iter().zip(join_all(reads).await) {
            let Reply::Data(data) = r? else {
                return Err(Errno::eio("unexpected reply to read"));
            };
            if data.len() != b.bytes {
                return Err(Errno::eio(format!(
                    "daemon {} returned {} bytes, expected {}",
                    b.daemon,
                    data.len(),
                    b.bytes
                )));
            }
            let mut pos = 0;
            for s in &b.spans {
                let n = s.piece.len as usize;
                out[s.buf_pos..s.buf_pos + n].copy_from_slice(&data[pos..pos + n]);
                pos += n;
            }
        }
        Ok(out)
    }

    /// Writes `data` at `offset` (at the end, reserved atomically, with O_APPEND). The data
    /// RPCs and the size update go out together; writers never wait on each other's data.
    pub async fn pwrite(&self, f: &File, offset: u64, data: &[u8]) -> Result<usize, Errno> {
        if !f.writable() {
            return Err(Errno::new(
                libc::EBADF,
                format!("{} is not open for writing", f.path()),
            ));
        }
        if data.is_empty() {
            return Ok(0);
        }
        let offset = if f.append() {
            match self
                .meta(
                    f.path(),
                    Request::ReserveAppend {
                        path: f.path().to_string(),
                        len: data.len() as u64,
                    },
                )
                .await?
            {
                Reply::Offset(o) => o,
                other => {
                    return Err(Errno::eio(format!(
                        "unexpected reply to reserve_append: {other:?}"
                    )))
                }
            }
        } else {
            offset
        };
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(|| Errno::new(libc::EFBIG, "write beyond the largest file size"))?;
        let cfg = self.config();
        let batches = layout::batches(
            &self.0.placement,
            f.file_id(),
            offset,
            data.len(),
            cfg.chunk_size,
            cfg.max_rpc_data_bytes as usize,
        );
        let writes = batches.iter().map(|b| {
            let mut buf = Vec::with_capacity(b.bytes);
            for s in &b.spans {
                buf.extend_from_slice(&data[s.buf_pos..s.buf_pos + s.piece.len as usize]);
            }
            let pieces = b.spans.iter().map(|s| s.piece).collect();
            self.call(
                b.daemon,
                Request::Write {
                    file_id: f.file_id(),
                    pieces,
                    data: buf,
                },
            )
        });
        // The size this write reached goes to the owner with the data, or later in a batch
        // (see `size`); O_APPEND reserved its range, and so the size, already.
        let plan = if f.append() {
            size::Plan::Wait
        } else {
            self.0.sizes.record(f.file_id(), f.path(), end)
        };
        let grow = async {
            match plan {
                size::Plan::Now(size) => self.send_size(f.file_id(), f.path(), size).await,
                size::Plan::Arm(delay) => {
                    self.schedule_size_publication(f.file_id(), delay);
                    Ok(())
                }
                size::Plan::Wait => Ok(()),
            }
        };
        let (results, grown) = futures::join!(join_all(writes), grow);
        for r in results {
            r?;
        }
        grown?;
        f.raise_known(end);
        Ok(data.len())
    }

    /// Makes the file's data and metadata durable on every daemon.
    pub async fn fsync(&self, f: &File) -> Result<(), Errno> {
        self.publish_size(f).await?;
        let file_id = Some(f.file_id());
        self.all_ok(|| Request::Sync { file_id }).await.map(|_| ())
    }

    /// Closes the handle: publishes the size its writes reached, so that every client sees
    /// it from now on (close-to-open).
    pub async fn close(&self, f: &File) -> Result<(), Errno> {
        self.publish_size(f).await?;
        self.0.sizes.release(f.file_id());
        Ok(())
    }

    pub async fn ftruncate(&self, f: &File, size: u64) -> Result<Inode, Errno> {
        if !f.writable() {
            return Err(Errno::new(
                libc::EINVAL,
                format!("{} is not open for writing", f.path()),
            ));
        }
        let i = self
            .setattr(
                f.path(),
                SetAttr {
                    size: Some(size),
                    ..SetAttr::default()
                },
                Creds::root(),
            )
            .await?;
        f.0.known_size.store(size, Ordering::Release);
        Ok(i)
    }
}

fn expect_inode(r: Reply) -> Result<Inode, Errno> {
    match r {
        Reply::Inode(i) => Ok(i),
        other => Err(Errno::eio(format!("unexpected reply: {other:?}"))),
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
    }
}
