//! The `fuser::Filesystem` implementation: every request the kernel sends arrives here and
//! is answered by calls of the client library run to completion on the tokio runtime from
//! the FUSE worker thread, with the mount's state (`mod.rs`). The namespace and directory
//! requests are answered in place (with the helpers of `names.rs` and `dirs.rs`); those of
//! open files, locks and extended attributes by `io_requests.rs`, `lock_requests.rs` and
//! `xattr_requests.rs`.

use super::*;

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
        self.passthrough.init(config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let path = match self.child(parent, name) {
            Ok(path) => path,
            Err(e) => return reply.error(failed("lookup", &e)),
        };
        // In a directory this mount made within the negative TTL, a name it has not made or
        // seen is missing: the lookup before a create needs no round trip. A name or path
        // too long is left to the client (ENAMETOOLONG, not ENOENT).
        let cfg = self.client.config();
        let valid = name.len() <= cfg.max_name_bytes && path.len() <= cfg.max_path_bytes;
        if let Some(left) = self.fresh.missing(&path).filter(|_| valid) {
            let missing = file_attr(0, &dot_inode(), self.blksize);
            let ttl = left.min(self.negative_ttl);
            return reply.entry_with_ttls(&self.ttl, &ttl, &missing, GENERATION);
        }
        // A name the client's lease on the directory knows absent: missing, and the kernel
        // may keep that until the lease goes back (decision 0077).
        if let Some(ttl) = utf8(name)
            .ok()
            .filter(|_| valid)
            .and_then(|n| self.lease_negative(parent, &path, n))
        {
            let missing = file_attr(0, &dot_inode(), self.blksize);
            return reply.entry_with_ttls(&self.ttl, &ttl, &missing, GENERATION);
        }
        let res = self
            .run(self.client.lookup(&path))
            .map(|inode| self.entry(&path, &inode));
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
        // open file only serves an entry that has no path any more. A directory this mount
        // saw within `dir_cache_ms` is answered from the client's cache (decision 0050): the
        // kernel asks again after every create or remove in it.
        let res = match (self.path(ino), fh.and_then(|h| self.file(h).ok())) {
            (Ok(p), _) => self.run(self.client.stat_recent(&p)).map(|mut inode| {
                // A file unlinked while open lives on under a hidden name that is not one of
                // its names: fstat counts it out (0 for a file with no name left).
                if self.client.unlinked_while_open(&p) {
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
            let started = std::time::Instant::now();
            let inode = self.run(self.client.mkdir(&path, mode & 0o7777, creds(req)))?;
            let attr = self.entry(&path, &inode);
            self.fresh.made(&path, started);
            Ok(attr)
        });
        match res {
            Ok(attr) => reply.entry(&self.ttl, &attr, GENERATION),
            Err(e) => reply.error(failed("mkdir", &e)),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = self.child(parent, name).and_then(|path| {
            // A file a handle has open lives on under a hidden name (the client's, decision
            // 0061); the kernel's inode of it follows there.
            let open = self.open_at(&path);
            self.run(self.client.unlink(&path, creds(req)))?;
            let mut table = lock(&self.table);
            match open.map(|f| f.path()).filter(|h| **h != *path) {
                Some(hidden) => table.rename(&path, &hidden),
                None => table.remove(&path),
            }
            Ok(())
        });
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("unlink", &e)),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = self.child(parent, name).and_then(|path| {
            let _changing = self.changing(&path);
            self.run(self.client.rmdir(&path, creds(req)))?;
            self.fresh.forget(&path);
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
            self.fresh.seen(&new);
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
        self.open_request(req, ino, flags, reply)
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
        self.read_request(fh, offset, size, reply)
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
        self.write_request(fh, offset, data, write_flags, reply)
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.flush_request(fh, lock_owner, reply)
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
        self.release_request(fh, lock_owner, reply)
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.fsync_request(fh, reply)
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let res = self.path(ino).map(|path| {
            // A listing shows names the kernel may look up later: no longer answered here.
            self.fresh.forget(&path);
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
        match self
            .path(ino)
            .and_then(|p| self.run(self.client.stat_recent(&p)))
        {
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
        self.create_request(req, parent, name, mode, flags, reply)
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
        self.getlk_request(fh, lock_owner, start, end, typ, reply)
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
        self.setlk_request(req, ino, fh, lock_owner, start, end, typ, pid, sleep, reply)
    }

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
        self.setxattr_request(req, ino, name, value, flags, reply)
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.getxattr_request(req, ino, name, size, reply)
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.listxattr_request(req, ino, size, reply)
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.removexattr_request(req, ino, name, reply)
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
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.fallocate_request(ino, fh, offset, length, mode, reply)
    }
}
