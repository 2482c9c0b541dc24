//! The FUSE file system. This file holds the mount's state (`EddyFs`: the inode table, open
//! files and directories, files unlinked while open, cached extended attributes, locks) and
//! what the requests share: paths of inodes, entries and attributes, setattr. The
//! `fuser::Filesystem` implementation is `requests.rs`: the namespace and directory requests
//! are answered there in place, those of open files (`io_requests.rs`), of locks
//! (`lock_requests.rs`) and of extended attributes (`xattr_requests.rs`) by the files of
//! their concern; `names.rs` (renames, files unlinked while open), `files.rs` (how the kernel
//! treats an open file, fallocate), `dirs.rs` (listings) and `xattrs.rs` hold what they use
//! beyond.

use crate::attr::{file_attr, is_noop, set_attr};
use crate::dir::DirStream;
use crate::fresh::FreshDirs;
use crate::table::{join, parent_of, InodeTable};
use crate::xcache::XattrCache;
use crate::MountOptions;

use eddy_client::driver::Driver;
use eddy_client::{Client, Creds, File};
use eddy_proto::sync::lock;
use eddy_proto::{Errno, FileKind, Inode, Xattr};
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
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tracing::{debug, warn};

mod dirs;
mod files;
mod io_requests;
mod leases;
mod lock_requests;
mod names;
mod passthrough;
mod requests;
mod xattr_requests;
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
    /// The client's runtime, driven by the FUSE threads in their calls (decision 0052).
    driver: Arc<Driver>,
    ttl: Duration,
    blksize: u32,
    table: Mutex<InodeTable>,
    files: Mutex<HashMap<u64, File>>,
    dirs: Mutex<HashMap<u64, Arc<Mutex<DirStream>>>>,
    next_fh: AtomicU64,
    /// Extended attributes of entries as replies carried them, for the attribute TTL.
    xattrs: XattrCache,
    /// How long the kernel may remember that a name does not exist.
    negative_ttl: Duration,
    /// Directories this mount made within the negative TTL, whose missing names it knows.
    fresh: FreshDirs,
    locks: crate::locks::MountLocks,
    /// FUSE passthrough (decision 0049).
    passthrough: passthrough::Passthrough,
    /// Negative entries handed to the kernel on a directory lease's word (decision 0077).
    negatives: Arc<crate::negatives::LeaseNegatives>,
    /// Directories this mount is removing or renaming (their lease goes back meanwhile).
    changing: Arc<leases::Changing>,
}

impl EddyFs {
    pub(crate) fn new(client: Client, driver: Arc<Driver>, opts: &MountOptions) -> EddyFs {
        let blksize = u32::try_from(client.config().chunk_size).unwrap_or(u32::MAX);
        EddyFs {
            client,
            driver,
            ttl: opts.attr_ttl,
            blksize,
            table: Mutex::new(InodeTable::new()),
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            xattrs: XattrCache::new(opts.attr_ttl),
            negative_ttl: opts.negative_ttl,
            fresh: FreshDirs::new(opts.negative_ttl, opts.fresh_dirs),
            locks: Default::default(),
            passthrough: passthrough::Passthrough::new(opts.passthrough),
            negatives: Arc::new(crate::negatives::LeaseNegatives::new(
                crate::negatives::MAX_TRACKED,
            )),
            changing: Arc::default(),
        }
    }

    pub(crate) fn locks(&self) -> &crate::locks::MountLocks {
        &self.locks
    }

    pub(crate) fn client_ref(&self) -> &Client {
        &self.client
    }

    /// Runs a client future to completion on this FUSE thread, which drives the client's
    /// runtime meanwhile.
    pub(crate) fn run<T>(&self, fut: impl Future<Output = T>) -> T {
        self.driver.drive(fut)
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
        self.fresh.seen(path);
        self.entry_replaced(path);
        let ino = lock(&self.table).lookup_entry(path, shared_id(inode));
        self.xattrs.put(ino, &inode.xattrs);
        file_attr(ino, inode, self.blksize)
    }

    /// The attributes of `inode`, the entry the kernel knows as `ino`.
    fn attr(&self, ino: INodeNo, inode: &Inode) -> fuser::FileAttr {
        self.xattrs.put(ino.0, &inode.xattrs);
        let mut inode = inode.clone();
        self.pass_size(ino.0, &mut inode);
        file_attr(ino.0, &inode, self.blksize)
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
            self.pass_truncated(ino.0, size);
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
            .filter(|f| f.writable() && *f.path() == *path)
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

/// The file id of a file with several names, which its inode number follows.
fn shared_id(inode: &Inode) -> Option<u128> {
    inode.shared.map(|_| inode.file_id)
}

/// Attributes for "." and ".." in a readdirplus reply, which the kernel ignores.
fn dot_inode() -> Inode {
    Inode::new(FileKind::Dir, 0, 0o755, 0, 0)
}
