//! The `fuser::Filesystem` implementation: each request is translated into calls of the
//! client library, run to completion on the tokio runtime from the FUSE worker thread. This
//! file holds the mount's state, lookups, attributes and locks; `names.rs` (creating,
//! removing, renaming and linking entries, files unlinked while open), `files.rs` (open
//! files), `dirs.rs` (listings) and `xattrs.rs` serve the rest, each trait method here handing
//! its request to them.

use crate::attr::{file_attr, is_noop, set_attr};
use crate::dir::DirStream;
use crate::table::{join, parent_of, InodeTable};
use crate::xcache::{cacheable, XattrCache};
use crate::MountOptions;

use eddy_client::{Client, Creds, File};
use eddy_proto::{Errno, FileKind, Inode, Xattr, XattrSet};
use files::reopen_flags;
use fuser::{
    AccessFlags, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLock, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
pub(crate) use names::is_hidden_orphan;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};
use tokio::runtime::Handle;
use tracing::{debug, warn};

mod dirs;
mod files;
mod names;
mod xattrs;

/// Largest read and write request asked of the kernel. 1 MiB is what the kernel grants by
/// default (fs.fuse.max_pages_limit = 256 pages); fuser derives max_pages from it.
const MAX_REQUEST_BYTES: u32 = 1 << 20;

/// Capabilities requested from the kernel when it offers them: lock requests must reach us
/// so that they are served across nodes (decision 0008) instead of the kernel granting
/// local-only locks;
/// parallel lookups and readdirs in one directory; page cache invalidated when a file's
/// size or mtime changes (another node wrote it); O_TRUNC handled by `open` (the client then
/// truncates through the new handle, so that its cached size starts at 0).
///
/// Not FUSE_HANDLE_KILLPRIV(_V2): the kernel then clears set-id bits itself on a cached write,
/// a truncate and a chown (a setattr with the new mode), and asks for it on a write that
/// bypasses the page cache (FUSE_WRITE_KILL_SUIDGID, honoured by `write`); an open with
/// O_TRUNC (FUSE_ATOMIC_O_TRUNC) by anyone but root clears them in the library.
const WANTED_CAPS: [InitFlags; 6] = [
    InitFlags::FUSE_POSIX_LOCKS,
    InitFlags::FUSE_FLOCK_LOCKS,
    InitFlags::FUSE_PARALLEL_DIROPS,
    InitFlags::FUSE_AUTO_INVAL_DATA,
    InitFlags::FUSE_ATOMIC_O_TRUNC,
    // Listings carry every entry's attributes (the daemons send whole inodes with each page),
    // so `ls -l`, `find` and `du` need no lookup per entry.
    InitFlags::FUSE_DO_READDIRPLUS,
];

/// Generation of every inode number (the file system is not exported over NFS).
const GENERATION: Generation = Generation(0);

/// Locks a mutex, recovering the data if a panicking thread poisoned it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An Eddy error as a FUSE reply error.
fn fuse_errno(e: &Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.errno)
}

/// A name from the kernel as UTF-8 (Eddy paths are strings).
fn utf8(name: &OsStr) -> Result<&str, Errno> {
    name.to_str()
        .ok_or_else(|| Errno::einval(format!("{name:?} is not valid UTF-8")))
}

/// The credentials of a request: new entries belong to the caller; the kernel has checked
/// permissions (default_permissions) and resolved the parent directory already.
fn creds(req: &Request) -> Creds {
    Creds::kernel(req.uid(), req.gid())
}

/// Logs a failed operation at debug level and turns it into a reply error.
fn failed(op: &str, e: &Errno) -> fuser::Errno {
    debug!(op, errno = e.errno, "{e}");
    fuse_errno(e)
}

/// The Eddy file system as seen by the kernel.
pub(crate) struct EddyFs {
    client: Client,
    rt: Handle,
    ttl: Duration,
    blksize: u32,
    table: Mutex<InodeTable>,
    files: Mutex<HashMap<u64, File>>,
    /// Files unlinked while open through this mount: their hidden paths, removed for good
    /// when the last handle is released.
    orphans: Mutex<std::collections::HashSet<String>>,
    dirs: Mutex<HashMap<u64, Arc<Mutex<DirStream>>>>,
    next_fh: AtomicU64,
    /// Extended attributes of entries as replies carried them, for the attribute TTL.
    xattrs: XattrCache,
    /// How long the kernel may remember that a name does not exist.
    negative_ttl: Duration,
    locks: crate::locks::MountLocks,
}

impl EddyFs {
    pub(crate) fn new(client: Client, rt: Handle, opts: &MountOptions) -> EddyFs {
        let blksize = u32::try_from(client.config().chunk_size).unwrap_or(u32::MAX);
        EddyFs {
            client,
            rt,
            ttl: opts.attr_ttl,
            blksize,
            table: Mutex::new(InodeTable::new()),
            files: Mutex::new(HashMap::new()),
            orphans: Mutex::default(),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            xattrs: XattrCache::new(opts.attr_ttl),
            negative_ttl: opts.negative_ttl,
            locks: Default::default(),
        }
    }

    pub(crate) fn locks(&self) -> &crate::locks::MountLocks {
        &self.locks
    }

    pub(crate) fn client_ref(&self) -> &Client {
        &self.client
    }

    /// Runs a client future to completion on the runtime.
    pub(crate) fn run<T>(&self, fut: impl Future<Output = Result<T, Errno>>) -> Result<T, Errno> {
        self.rt.block_on(fut)
    }

    /// The current path of an inode; ENOENT if the kernel names one we no longer know.
    fn path(&self, ino: INodeNo) -> Result<String, Errno> {
        lock(&self.table)
            .path(ino.0)
            .ok_or_else(|| Errno::enoent(format!("inode {}", ino.0)))
    }

    /// The path of entry `name` in directory `parent`.
    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<String, Errno> {
        let dir = self.path(parent)?;
        Ok(join(&dir, utf8(name)?))
    }

    /// Registers a kernel lookup of `path` and builds its attributes.
    fn entry(&self, path: &str, inode: &Inode) -> fuser::FileAttr {
        let ino = lock(&self.table).lookup_entry(path, shared_id(inode));
        self.xattrs.put(ino, &inode.xattrs);
        file_attr(ino, inode, self.blksize)
    }

    /// The attributes of `inode`, the entry the kernel knows as `ino`.
    fn attr(&self, ino: INodeNo, inode: &Inode) -> fuser::FileAttr {
        self.xattrs.put(ino.0, &inode.xattrs);
        file_attr(ino.0, inode, self.blksize)
    }

    fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    fn add_file(&self, file: File) -> u64 {
        let fh = self.new_fh();
        lock(&self.files).insert(fh, file);
        fh
    }

    fn file(&self, fh: FileHandle) -> Result<File, Errno> {
        lock(&self.files)
            .get(&fh.0)
            .cloned()
            .ok_or_else(|| Errno::new(libc::EBADF, format!("unknown file handle {}", fh.0)))
    }

    fn do_setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        attr: eddy_proto::SetAttr,
        size: Option<u64>,
        fh: Option<FileHandle>,
    ) -> Result<Inode, Errno> {
        let file = fh.and_then(|h| self.file(h).ok());
        let mut inode = None;
        if let Some(size) = size {
            inode = Some(match &file {
                Some(f) if f.writable() => self.run(self.client.ftruncate(f, size))?,
                _ => self.truncate_path(req, &self.path(ino)?, size)?,
            });
        }
        if !is_noop(&attr) {
            inode = Some(self.run(self.client.setattr(&self.path(ino)?, attr, creds(req)))?);
        }
        match (inode, file) {
            (Some(inode), _) => Ok(inode),
            (None, Some(f)) => self.run(self.client.fstat(&f)),
            (None, None) => self.run(self.client.stat(&self.path(ino)?)),
        }
    }

    /// Truncates by path. Writable handles of this mount open on that path truncate
    /// through themselves, so that the sizes they have cached follow (a handle that believes
    /// the file larger would not publish the size of its next writes).
    fn truncate_path(&self, req: &Request, path: &str, size: u64) -> Result<Inode, Errno> {
        let open: Vec<File> = lock(&self.files)
            .values()
            .filter(|f| f.writable() && f.path() == path)
            .cloned()
            .collect();
        let mut inode = None;
        for f in &open {
            inode = Some(self.run(self.client.ftruncate(f, size))?);
        }
        match inode {
            Some(inode) => Ok(inode),
            None => self.run(self.client.truncate(path, size, creds(req))),
        }
    }
}

impl Filesystem for EddyFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if let Err(max) = config.set_max_write(MAX_REQUEST_BYTES) {
            let _ = config.set_max_write(max);
        }
        if let Err(max) = config.set_max_readahead(MAX_REQUEST_BYTES) {
            let _ = config.set_max_readahead(max);
        }
        for cap in WANTED_CAPS {
            if config.add_capabilities(cap).is_err() {
                warn!(?cap, "the kernel does not offer this FUSE capability");
            }
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let res = self.child(parent, name).and_then(|path| {
            let inode = self.run(self.client.lookup(&path))?;
            Ok(self.entry(&path, &inode))
        });
        match res {
            Ok(attr) => reply.entry(&self.ttl, &attr, GENERATION),
            // A negative entry (node id 0): the kernel remembers the name is missing for the
            // negative TTL; a create through this mount replaces it at once, one made on
            // another node is seen when it expires.
            Err(e) if e.errno == libc::ENOENT && !self.negative_ttl.is_zero() => {
                let missing = file_attr(0, &dot_inode(), self.blksize);
                reply.entry_with_ttls(&self.ttl, &self.negative_ttl, &missing, GENERATION)
            }
            Err(e) => reply.error(failed("lookup", &e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut table = lock(&self.table);
        table.forget(ino.0, nlookup);
        if table.path(ino.0).is_none() {
            self.xattrs.drop_entry(ino.0);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        // By the current path (an open file's own path is the one it was opened by); the
        // open file only serves an entry that has no path any more.
        let res = match (self.path(ino), fh.and_then(|h| self.file(h).ok())) {
            (Ok(p), _) => self.run(self.client.stat(&p)).map(|mut inode| {
                // A file unlinked while open lives on under a hidden name that is not one of
                // its names: fstat counts it out (0 for a file with no name left).
                if lock(&self.orphans).contains(&p) {
                    inode.nlink = inode.nlink.saturating_sub(1);
                }
                inode
            }),
            (Err(_), Some(f)) => self.run(self.client.fstat(&f)),
            (Err(e), None) => Err(e),
        };
        match res {
            Ok(inode) => reply.attr(&self.ttl, &self.attr(ino, &inode)),
            Err(e) => reply.error(failed("getattr", &e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let attr = set_attr(mode, uid, gid, atime, mtime);
        match self.do_setattr(req, ino, attr, size, fh) {
            Ok(inode) => reply.attr(&self.ttl, &self.attr(ino, &inode)),
            Err(e) => reply.error(failed("setattr", &e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self
            .path(ino)
            .and_then(|p| self.run(self.client.readlink(&p)))
        {
            Ok(target) => reply.data(target.as_bytes()),
            Err(e) => reply.error(failed("readlink", &e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.mknod_op(req, parent, name, mode, _umask, rdev, reply)
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.mkdir_op(req, parent, name, mode, _umask, reply)
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.unlink_op(req, parent, name, reply)
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.rmdir_op(req, parent, name, reply)
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.symlink_op(req, parent, link_name, target, reply)
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.rename_op(req, parent, name, newparent, newname, flags, reply)
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.link_op(req, ino, newparent, newname, reply)
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.open_op(req, ino, flags, reply)
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.read_op(_req, _ino, fh, offset, size, _flags, _lock_owner, reply)
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.write_op(
            _req,
            _ino,
            fh,
            offset,
            data,
            write_flags,
            _flags,
            _lock_owner,
            reply,
        )
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.flush_op(_req, _ino, fh, lock_owner, reply)
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.release_op(_req, _ino, fh, _flags, lock_owner, _flush, reply)
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.fsync_op(_req, _ino, fh, _datasync, reply)
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.opendir_op(_req, ino, _flags, reply)
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.readdir_op(_req, _ino, fh, offset, reply)
    }

    fn readdirplus(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        self.readdirplus_op(_req, _ino, fh, offset, reply)
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.releasedir_op(_req, _ino, fh, _flags, reply)
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.fsyncdir_op(_req, _ino, _fh, _datasync, reply)
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.run(self.client.statfs()) {
            Ok(s) => {
                let bsize = s.block_size.max(1);
                let blocks = |bytes: u64| bytes / u64::from(bsize);
                let namelen =
                    u32::try_from(self.client.config().max_name_bytes).unwrap_or(u32::MAX);
                reply.statfs(
                    blocks(s.total_bytes),
                    blocks(s.free_bytes),
                    blocks(s.avail_bytes),
                    s.files,
                    s.files_free,
                    bsize,
                    namelen,
                    bsize,
                );
            }
            Err(e) => reply.error(failed("statfs", &e)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // With default_permissions the kernel checks the mode bits itself and rarely asks;
        // answer whether the entry still exists.
        match self.path(ino).and_then(|p| self.run(self.client.stat(&p))) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(failed("access", &e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.create_op(req, parent, name, mode, _umask, flags, reply)
    }

    fn getlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        reply: ReplyLock,
    ) {
        use crate::locks::{kernel_end, kind_of, range_of, typ_of};
        let res = self.file(fh).and_then(|f| {
            let (kind, range) = (kind_of(typ)?, range_of(start, end)?);
            self.run(self.client.test_lock(&f, lock_owner.0, kind, range))
        });
        match res {
            Ok(Some(h)) => reply.locked(
                h.range.start,
                kernel_end(h.range.end),
                typ_of(h.kind),
                h.pid,
            ),
            Ok(None) => reply.locked(start, end, libc::F_UNLCK, 0),
            Err(e) => reply.error(failed("getlk", &e)),
        }
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        // Also reached by flock(2) (FUSE_FLOCK_LOCKS): a whole-file lock owned by the open file.
        use crate::locks::{invalidate, kind_of, range_of, wait_for_lock};
        let ask = self.file(fh).and_then(|f| {
            let lr = eddy_client::LockRequest {
                owner: lock_owner.0,
                handle: fh.0,
                pid,
                kind: kind_of(typ)?,
                range: range_of(start, end)?,
            };
            Ok((f, lr))
        });
        let (f, lr) = match ask {
            Ok(x) => x,
            Err(e) => return reply.error(failed("setlk", &e)),
        };
        self.note_lock(f.file_id());
        // Whoever gets the range next must see the size this node's writes reached.
        if let Err(e) = self.run(self.client.close(&f)) {
            return reply.error(failed("setlk", &e));
        }
        let slot = self.locks().notifier_slot();
        let taking = lr.kind != eddy_client::LockKind::Unlock;
        if !sleep || !taking {
            return match self.run(self.client.lock(&f, &lr, false)) {
                Ok(()) => {
                    if taking {
                        invalidate(&slot, ino);
                    }
                    reply.ok()
                }
                Err(e) => reply.error(failed("setlk", &e)),
            };
        }
        // A blocking lock waits on the runtime, so that it holds no FUSE thread.
        let (client, tid) = (self.client.clone(), req.pid());
        self.rt.spawn(async move {
            match wait_for_lock(client, f, lr, tid, || invalidate(&slot, ino)).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(failed("setlk", &e)),
            }
        });
    }

    // Extended attributes of the entry itself; the kernel has checked the namespaces
    // (trusted.* and security.* changes need CAP_SYS_ADMIN) and the mode bits
    // (default_permissions). Size 0 asks for the size the answer needs.
    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.setxattr_op(req, ino, name, value, flags, _position, reply)
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.getxattr_op(req, ino, name, size, reply)
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.listxattr_op(req, ino, size, reply)
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.removexattr_op(req, ino, name, reply)
    }

    // lseek(SEEK_DATA/SEEK_HOLE) and copy_file_range: ENOSYS tells the kernel once and for
    // all that they are not implemented; it falls back to its generic lseek and copy.
    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: i64,
        _whence: i32,
        reply: ReplyLseek,
    ) {
        self.lseek_op(_req, _ino, _fh, _offset, _whence, reply)
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: FileHandle,
        _offset_in: u64,
        _ino_out: INodeNo,
        _fh_out: FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.copy_file_range_op(
            _req,
            _ino_in,
            _fh_in,
            _offset_in,
            _ino_out,
            _fh_out,
            _offset_out,
            _len,
            _flags,
            reply,
        )
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        self.ioctl_op(_req, _ino, _fh, _flags, _cmd, _in_data, _out_size, reply)
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.fallocate_op(_req, _ino, fh, offset, length, mode, reply)
    }
}

/// Whether `path` is `dir` or below it.
fn is_at_or_below(path: &str, dir: &str) -> bool {
    path == dir || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

/// The file id of a file with several names, which its inode number follows.
fn shared_id(inode: &Inode) -> Option<u128> {
    inode.shared.map(|_| inode.file_id)
}

/// Attributes for "." and ".." in a readdirplus reply, which the kernel ignores.
fn dot_inode() -> Inode {
    Inode::new(FileKind::Dir, 0, 0o755, 0, 0)
}

#[cfg(test)]
mod tests {
    use super::is_at_or_below;

    #[test]
    fn at_or_below() {
        assert!(is_at_or_below("/a", "/a"));
        assert!(is_at_or_below("/a/b", "/a"));
        assert!(!is_at_or_below("/ab", "/a"));
        assert!(!is_at_or_below("/b", "/a"));
    }
}
