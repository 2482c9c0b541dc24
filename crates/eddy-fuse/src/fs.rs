//! The `fuser::Filesystem` implementation: each request is translated into calls of the
//! client library, run to completion on the tokio runtime from the FUSE worker thread.

use crate::attr::{file_attr, is_noop, set_attr};
use crate::dir::DirStream;
use crate::table::{join, parent_of, InodeTable};
use crate::xcache::{cacheable, XattrCache};
use crate::MountOptions;
use eddy_client::{Client, Creds, File};
use eddy_proto::{Errno, FileKind, Inode, Xattr, XattrSet};
use fuser::{
    AccessFlags, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLock, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};
use tokio::runtime::Handle;
use tracing::{debug, warn};

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

/// Answers getxattr/listxattr: the size when asked with size 0, ERANGE when the caller's
/// buffer is too small, the bytes otherwise.
fn reply_xattr(bytes: Vec<u8>, size: u32, reply: ReplyXattr) {
    match u32::try_from(bytes.len()) {
        Ok(len) if size == 0 => reply.size(len),
        Ok(len) if len <= size => reply.data(&bytes),
        _ => reply.error(fuser::Errno::ERANGE),
    }
}

/// The value of attribute `name` among cached attributes, as the library would answer
/// `uid` (trusted.* does not exist for anyone but root).
fn cached_value(xattrs: &[Xattr], name: &str, uid: u32) -> Result<Vec<u8>, Errno> {
    xattrs
        .iter()
        .find(|x| x.name == name && (uid == 0 || !name.starts_with("trusted.")))
        .map(|x| x.value.clone())
        .ok_or_else(|| Errno::new(libc::ENODATA, format!("no attribute {name:?}")))
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

    fn do_rename(
        &self,
        req: &Request,
        from: &str,
        to: &str,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        if !RenameFlags::RENAME_NOREPLACE.contains(flags) {
            // RENAME_EXCHANGE and RENAME_WHITEOUT are not supported: renameat2(2) says EINVAL.
            return Err(Errno::einval(format!(
                "rename flags {flags} are not supported"
            )));
        }
        if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            match self.run(self.client.stat(to)) {
                Ok(_) => return Err(Errno::new(libc::EEXIST, format!("{to} exists"))),
                Err(e) if e.errno == libc::ENOENT => {}
                Err(e) => return Err(e),
            }
        }
        self.run(self.client.rename(from, to, creds(req)))?;
        lock(&self.table).rename(from, to);
        self.rebind_files(from, to);
        Ok(())
    }

    /// POSIX keeps an unlinked file alive while it is open. Like NFS, the mount renames a file
    /// unlinked while one of its handles is open to a hidden name in the same directory (left
    /// out of listings), and removes it when the last handle is released.
    fn hide_orphan(&self, req: &Request, path: &str, file_id: u128) -> Result<(), Errno> {
        let hidden =
            eddy_proto::path::join(parent_of(path), &format!("{HIDDEN_ORPHAN}{file_id:032x}"));
        self.do_rename(req, path, &hidden, RenameFlags::empty())?;
        lock(&self.orphans).insert(hidden);
        Ok(())
    }

    /// Removes an orphan for good once no handle of this mount has it open.
    fn reap_orphan(&self, path: &str) {
        if !lock(&self.orphans).contains(path)
            || lock(&self.files).values().any(|f| f.path() == path)
        {
            return;
        }
        lock(&self.orphans).remove(path);
        match self.run(self.client.unlink(path, Creds::root())) {
            Ok(()) => {
                lock(&self.table).remove(path);
            }
            Err(e) => debug!(
                path,
                "cannot remove an unlinked file after its last close: {e}"
            ),
        }
    }

    /// An open file keeps the path it was opened by, and the client reaches the file's
    /// metadata (size updates, stat) through it. After a rename, the handles of this mount
    /// open at or below the old path are reopened at the new one, so that their writes keep
    /// publishing the size (a log renamed away while its writer goes on, for instance).
    fn rebind_files(&self, from: &str, to: &str) {
        let moved: Vec<(u64, File)> = lock(&self.files)
            .iter()
            .filter(|(_, f)| is_at_or_below(f.path(), from))
            .map(|(fh, f)| (*fh, f.clone()))
            .collect();
        for (fh, old) in moved {
            let path = format!("{to}{}", &old.path()[from.len()..]);
            match self.run(
                self.client
                    .open(&path, reopen_flags(&old), 0, Creds::root()),
            ) {
                Ok(new) if new.file_id() == old.file_id() => {
                    let mut files = lock(&self.files);
                    if files.contains_key(&fh) {
                        files.insert(fh, new);
                    }
                }
                Ok(_) => debug!(
                    path,
                    "renamed file was replaced meanwhile; handle not moved"
                ),
                Err(e) => debug!(path, "cannot reopen a renamed file: {e}"),
            }
        }
    }

    /// The cursor of an open directory.
    fn dir_stream(&self, fh: FileHandle) -> Result<Arc<Mutex<DirStream>>, Errno> {
        lock(&self.dirs)
            .get(&fh.0)
            .cloned()
            .ok_or_else(|| Errno::new(libc::EBADF, format!("unknown directory handle {}", fh.0)))
    }

    fn do_readdir(
        &self,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectory,
    ) -> Result<(), Errno> {
        let stream = self.dir_stream(fh)?;
        let mut stream = lock(&stream);
        stream.seek(offset, &self.client, &self.rt)?;
        while let Some(item) = stream.current(&self.client, &self.rt)? {
            let ino = match item.ino {
                Some(ino) => ino,
                None => lock(&self.table).peek(
                    &join(stream.path(), &item.name),
                    item.entry.as_ref().and_then(|e| shared_id(&e.inode)),
                ),
            };
            if reply.add(INodeNo(ino), stream.position() + 1, item.kind, &item.name) {
                break; // the reply buffer is full: this entry comes first next time
            }
            stream.advance();
        }
        Ok(())
    }

    /// Like `do_readdir`, with each entry's attributes; every entry but "." and ".." counts as
    /// a lookup for the kernel, so it enters the inode table (and leaves it on forget).
    fn do_readdirplus(
        &self,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectoryPlus,
    ) -> Result<(), Errno> {
        let stream = self.dir_stream(fh)?;
        let mut stream = lock(&stream);
        stream.seek(offset, &self.client, &self.rt)?;
        while let Some(item) = stream.current(&self.client, &self.rt)? {
            let next = stream.position() + 1;
            let full = match (&item.entry, item.ino) {
                (Some(entry), _) => {
                    let inode = self.run(self.client.entry_inode(stream.path(), entry))?;
                    let path = join(stream.path(), &item.name);
                    let ino = lock(&self.table).lookup_entry(&path, shared_id(&inode));
                    let attr = self.attr(INodeNo(ino), &inode);
                    let full =
                        reply.add(INodeNo(ino), next, &item.name, &self.ttl, &attr, GENERATION);
                    if full {
                        // Not sent: the kernel holds no reference to it.
                        lock(&self.table).forget(ino, 1);
                    }
                    full
                }
                // "." and "..": the kernel takes no reference and ignores their attributes.
                (None, Some(ino)) => {
                    let attr = file_attr(ino, &dot_inode(), self.blksize);
                    reply.add(
                        INodeNo(ino),
                        next,
                        &item.name,
                        &Duration::ZERO,
                        &attr,
                        GENERATION,
                    )
                }
                (None, None) => false,
            };
            if full {
                break; // the reply buffer is full: this entry comes first next time
            }
            stream.advance();
        }
        Ok(())
    }

    fn do_fallocate(
        &self,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> Result<(), Errno> {
        if mode != 0 {
            return Err(Errno::new(
                libc::EOPNOTSUPP,
                format!("fallocate mode {mode:#x} is not supported"),
            ));
        }
        let end = offset
            .checked_add(length)
            .ok_or_else(|| Errno::new(libc::EFBIG, "fallocate range overflows"))?;
        let file = self.file(fh)?;
        let size = self.run(self.client.fstat(&file))?.size;
        if end > size {
            self.run(self.client.ftruncate(&file, end))?;
        }
        Ok(())
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
        let kind = match mode & libc::S_IFMT {
            0 | libc::S_IFREG => FileKind::File,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            _ => {
                let e = Errno::einval(format!("mknod: unknown file type {mode:o}"));
                return reply.error(failed("mknod", &e));
            }
        };
        let res = self.child(parent, name).and_then(|path| {
            // The kernel has checked CAP_MKNOD for device nodes.
            let inode = if kind == FileKind::File {
                let file = self.run(self.client.create(&path, mode & 0o7777, true, creds(req)))?;
                let inode = file.inode();
                self.run(self.client.close(&file))?;
                inode
            } else {
                let rdev = crate::attr::dev_t(rdev);
                self.run(
                    self.client
                        .mknod(&path, kind, mode & 0o7777, rdev, creds(req)),
                )?
            };
            Ok(self.entry(&path, &inode))
        });
        match res {
            Ok(attr) => reply.entry(&self.ttl, &attr, GENERATION),
            Err(e) => reply.error(failed("mknod", &e)),
        }
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
        let res = self.child(parent, name).and_then(|path| {
            let inode = self.run(self.client.mkdir(&path, mode & 0o7777, creds(req)))?;
            Ok(self.entry(&path, &inode))
        });
        match res {
            Ok(attr) => reply.entry(&self.ttl, &attr, GENERATION),
            Err(e) => reply.error(failed("mkdir", &e)),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = self.child(parent, name).and_then(|path| {
            let open = lock(&self.files)
                .values()
                .find(|f| f.path() == path)
                .map(File::file_id);
            match open {
                Some(file_id) => self.hide_orphan(req, &path, file_id),
                None => {
                    self.run(self.client.unlink(&path, creds(req)))?;
                    lock(&self.table).remove(&path);
                    Ok(())
                }
            }
        });
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("unlink", &e)),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = self.child(parent, name).and_then(|path| {
            self.run(self.client.rmdir(&path, creds(req)))?;
            lock(&self.table).remove(&path);
            Ok(())
        });
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("rmdir", &e)),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let res = self.child(parent, link_name).and_then(|path| {
            let target = utf8(target.as_os_str())?;
            let inode = self.run(self.client.symlink(target, &path, creds(req)))?;
            Ok(self.entry(&path, &inode))
        });
        match res {
            Ok(attr) => reply.entry(&self.ttl, &attr, GENERATION),
            Err(e) => reply.error(failed("symlink", &e)),
        }
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
        let res = self
            .child(parent, name)
            .and_then(|from| Ok((from, self.child(newparent, newname)?)))
            .and_then(|(from, to)| self.do_rename(req, &from, &to, flags));
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("rename", &e)),
        }
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let res = self.path(ino).and_then(|old| {
            let new = self.child(newparent, newname)?;
            let inode = self.run(self.client.link(&old, &new, creds(req)))?;
            // The new name is the same inode for the kernel: one page cache, one st_ino.
            lock(&self.table).link(ino.0, &new, inode.file_id);
            Ok(self.attr(ino, &inode))
        });
        match res {
            Ok(attr) => reply.entry(&self.ttl, &attr, GENERATION),
            Err(e) => reply.error(failed("link", &e)),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        // O_CREAT/O_EXCL go to `create`; O_TRUNC comes here (FUSE_ATOMIC_O_TRUNC).
        let flags = flags.0 & !(libc::O_CREAT | libc::O_EXCL);
        // The file is asked for again, though the kernel has just looked it up: a file
        // removed on another node since must give ESTALE (below), not an open of a dead file.
        let res = self
            .path(ino)
            .and_then(|p| self.run(self.client.open(&p, flags, 0, creds(req))));
        match res {
            Ok(file) => {
                let fopen = fopen_flags(&file);
                reply.opened(FileHandle(self.add_file(file)), fopen)
            }
            // The kernel's cached entry outlived the file (removed on another node within the
            // entry TTL): ESTALE makes it look the path up again and retry once, so that an
            // O_CREAT open creates the file anew (SQLite's journal between two mounts).
            Err(e) if e.errno == libc::ENOENT => {
                reply.error(failed("open", &Errno::new(libc::ESTALE, e.msg.clone())))
            }
            Err(e) => reply.error(failed("open", &e)),
        }
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
        let res = self
            .file(fh)
            .and_then(|f| self.run(self.client.pread(&f, offset, size as usize)));
        match res {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(failed("read", &e)),
        }
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
        // A write that bypasses the page cache (write-only and append opens) by a process
        // without CAP_FSETID: the kernel asks us to clear the set-id bits. (Through the page
        // cache, the kernel clears them itself with a setattr: no FUSE_HANDLE_KILLPRIV.)
        let clear = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let res = self
            .file(fh)
            .and_then(|f| self.run(self.client.pwrite_clearing(&f, offset, data, clear)));
        match res {
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => reply.error(failed("write", &e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) of one descriptor: publish the size so that other nodes see it, and drop
        // the closing process's POSIX locks on the file.
        let res = self.file(fh).and_then(|f| {
            let closed = self.run(self.client.close(&f));
            self.release_owner_locks(&f, lock_owner.0).and(closed)
        });
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("flush", &e)),
        }
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
        let file = lock(&self.files).remove(&fh.0);
        let closed = file.as_ref().map(|f| {
            let closed = self.run(self.client.close(f));
            let owner = lock_owner.map(|o| o.0);
            self.release_handle_locks(f, fh.0, owner).and(closed)
        });
        if let Some(f) = &file {
            self.reap_orphan(f.path());
        }
        match closed {
            Some(Err(e)) => reply.error(failed("release", &e)),
            Some(Ok(())) | None => reply.ok(),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.file(fh).and_then(|f| self.run(self.client.fsync(&f))) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("fsync", &e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let res = self.path(ino).map(|path| {
            let table = lock(&self.table);
            let parent = table.peek(parent_of(&path), None);
            DirStream::new(path, ino.0, parent)
        });
        match res {
            Ok(stream) => {
                let fh = self.new_fh();
                lock(&self.dirs).insert(fh, Arc::new(Mutex::new(stream)));
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(failed("opendir", &e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.do_readdir(fh, offset, &mut reply) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("readdir", &e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        match self.do_readdirplus(fh, offset, &mut reply) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("readdirplus", &e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        lock(&self.dirs).remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // The client offers no per-directory sync: make every daemon's metadata durable.
        match self.run(self.client.sync_all()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("fsyncdir", &e)),
        }
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
        let res = self.child(parent, name).and_then(|path| {
            let file = self.run(self.client.open(
                &path,
                flags | libc::O_CREAT,
                mode & 0o7777,
                creds(req),
            ))?;
            let attr = self.entry(&path, &file.inode());
            let fopen = fopen_flags(&file);
            Ok((attr, self.add_file(file), fopen))
        });
        match res {
            Ok((attr, fh, fopen)) => {
                reply.created(&self.ttl, &attr, GENERATION, FileHandle(fh), fopen)
            }
            Err(e) => reply.error(failed("create", &e)),
        }
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
        let how = if flags & libc::XATTR_CREATE != 0 {
            XattrSet::Create
        } else if flags & libc::XATTR_REPLACE != 0 {
            XattrSet::Replace
        } else {
            XattrSet::Any
        };
        let res = self.path(ino).and_then(|p| {
            let name = utf8(name)?;
            self.run(self.client.setxattr(&p, name, value, how, creds(req)))
        });
        self.xattrs.drop_entry(ino.0);
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("setxattr", &e)),
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let res = utf8(name).and_then(|name| match self.xattrs.get(ino.0) {
            Some(cached) if cacheable(name) => cached_value(&cached, name, req.uid()),
            _ => {
                let p = self.path(ino)?;
                self.run(self.client.getxattr(&p, name, creds(req)))
            }
        });
        match res {
            Ok(value) => reply_xattr(value, size, reply),
            Err(e) => reply.error(failed("getxattr", &e)),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let res = match self.xattrs.get(ino.0) {
            Some(cached) => Ok(cached
                .iter()
                .filter(|x| req.uid() == 0 || !x.name.starts_with("trusted."))
                .map(|x| x.name.clone())
                .collect()),
            None => self
                .path(ino)
                .and_then(|p| self.run(self.client.listxattr(&p, creds(req)))),
        };
        match res {
            Ok(names) => {
                let mut list = Vec::new();
                for n in names {
                    list.extend_from_slice(n.as_bytes());
                    list.push(0);
                }
                reply_xattr(list, size, reply)
            }
            Err(e) => reply.error(failed("listxattr", &e)),
        }
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = self.path(ino).and_then(|p| {
            let name = utf8(name)?;
            self.run(self.client.removexattr(&p, name, creds(req)))
        });
        self.xattrs.drop_entry(ino.0);
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("removexattr", &e)),
        }
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
        reply.error(fuser::Errno::ENOSYS);
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
        reply.error(fuser::Errno::ENOSYS);
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
        reply.error(fuser::Errno::ENOTTY);
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
        match self.do_fallocate(fh, offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("fallocate", &e)),
        }
    }
}

/// How the kernel should treat an open file. Never FOPEN_KEEP_CACHE: the page cache is
/// dropped on open, so that data written by other nodes is seen after an open. O_APPEND
/// files bypass the page cache: the client appends at the end the metadata owner reserves,
/// which may differ from the offset the kernel assumed (another node appended meanwhile),
/// so cached pages would hold the data at the wrong place.
///
/// - Read-only opens: no FLUSH on close (there is no size to publish), which saves a kernel
///   round trip per close. Writable opens keep it: close publishes the size writes reached.
/// - Write-only and append-only opens bypass the page cache: nothing is read back through
///   them, and through the cache the kernel splits an unaligned write in two requests (the
///   partial first page alone). Writers to one file may then proceed in parallel.
fn fopen_flags(file: &File) -> FopenFlags {
    if file.renewed() {
        // The kernel's cached size predates the backend's change: read around the page cache,
        // so the new end of the file is not cut at the old one.
        return FopenFlags::FOPEN_DIRECT_IO;
    }
    // Read-only opens keep FLUSH too: a close must release the closing process's POSIX
    // locks at once (decision 0008), and with FOPEN_NOFLUSH only the later, asynchronous
    // release of the open file would.
    if file.append() || !file.readable() {
        return FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
    }
    FopenFlags::empty()
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

/// Prefix of the hidden name a file unlinked while open lives on under.
const HIDDEN_ORPHAN: &str = ".eddy-unlinked-";

/// Whether a directory entry is a file unlinked while open (left out of listings).
pub(crate) fn is_hidden_orphan(name: &str) -> bool {
    name.starts_with(HIDDEN_ORPHAN)
}

/// Flags that reopen a file in the same mode, without creating or truncating anything.
fn reopen_flags(file: &File) -> i32 {
    let access = match (file.readable(), file.writable()) {
        (true, true) => libc::O_RDWR,
        (false, true) => libc::O_WRONLY,
        _ => libc::O_RDONLY,
    };
    let append = if file.append() { libc::O_APPEND } else { 0 };
    access | append | libc::O_NOFOLLOW
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
