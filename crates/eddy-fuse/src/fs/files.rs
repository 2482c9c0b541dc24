//! Open files: open, create, read, write, flush, release, fsync, lseek, copy_file_range,
//! ioctl and fallocate, and how the kernel is told to treat each open file.

use super::*;

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
pub(super) fn fopen_flags(file: &File) -> FopenFlags {
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

/// Flags that reopen a file in the same mode, without creating or truncating anything.
pub(super) fn reopen_flags(file: &File) -> i32 {
    let access = match (file.readable(), file.writable()) {
        (true, true) => libc::O_RDWR,
        (false, true) => libc::O_WRONLY,
        _ => libc::O_RDONLY,
    };
    let append = if file.append() { libc::O_APPEND } else { 0 };
    access | append | libc::O_NOFOLLOW
}

// The methods take the arguments of the `Filesystem` methods they serve, as fuser passes them.
#[allow(clippy::too_many_arguments)]
impl EddyFs {
    pub(super) fn open_op(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
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

    pub(super) fn read_op(
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

    pub(super) fn write_op(
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

    pub(super) fn flush_op(
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

    pub(super) fn release_op(
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

    pub(super) fn fsync_op(
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

    pub(super) fn create_op(
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

    // lseek(SEEK_DATA/SEEK_HOLE) and copy_file_range: ENOSYS tells the kernel once and for
    // all that they are not implemented; it falls back to its generic lseek and copy.
    pub(super) fn lseek_op(
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

    pub(super) fn copy_file_range_op(
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

    pub(super) fn ioctl_op(
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

    pub(super) fn fallocate_op(
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

    /// fallocate: mode 0 and FALLOC_FL_KEEP_SIZE reserve real space on the daemons that
    /// hold the range; every other mode (punching holes, collapsing or inserting ranges,
    /// zeroing, unsharing) is EOPNOTSUPP, never a silent success.
    pub(super) fn do_fallocate(
        &self,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> Result<(), Errno> {
        let file = self.file(fh)?;
        self.run(self.client.fallocate(&file, offset, length, mode))
    }
}
