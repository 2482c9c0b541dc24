//! The open-file requests of the `fuser::Filesystem` implementation (`requests.rs`):
//! open and create (passthrough or served by the mount), read, write, flush and release
//! (what a close publishes, the locks it drops), fsync and fallocate.

use super::files::{fopen_flags, passthrough_flags};
use super::{creds, failed, EddyFs, GENERATION};
use eddy_client::File;
use eddy_proto::sync::lock;
use eddy_proto::Errno;
use fuser::{
    FileHandle, INodeNo, LockOwner, OpenFlags, ReplyCreate, ReplyData, ReplyEmpty, ReplyOpen,
    ReplyWrite, Request, WriteFlags,
};
use std::ffi::OsStr;

impl EddyFs {
    /// The kernel's `open` request (`Filesystem::open` in `requests.rs`).
    pub(super) fn open_request(
        &self,
        req: &Request,
        ino: INodeNo,
        flags: OpenFlags,
        reply: ReplyOpen,
    ) {
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
                let fh = self.add_file(file.clone());
                // The kernel reads a passthrough file without asking the mount, and leaves
                // its atime to the mount (decision 0061): a read-only open whose first read
                // must move the atime is served by the mount, whose READ moves it; one the
                // kernel reads itself anyway (the inode is passed through already, or it
                // is open for writing too) moves it at open.
                let atime_due = self.client.atime_due(&file);
                let wanted = !atime_due || file.writable();
                match self.pass_open(ino.0, fh, &file, wanted, |d| reply.open_backing(d)) {
                    Ok(Some(id)) => {
                        if atime_due {
                            self.run(self.client.note_read(&file));
                        }
                        reply.opened_passthrough(FileHandle(fh), passthrough_flags(&file), &id)
                    }
                    Ok(None) => reply.opened(FileHandle(fh), fopen),
                    Err(e) => {
                        lock(&self.files).remove(&fh);
                        let _ = self.run(self.client.close(&file));
                        reply.error(failed("open", &e))
                    }
                }
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

    /// The kernel's `read` request (`Filesystem::read` in `requests.rs`).
    pub(super) fn read_request(&self, fh: FileHandle, offset: u64, size: u32, reply: ReplyData) {
        let res = self.file(fh).and_then(|f| {
            // An O_DIRECT writer of a passed-through file (`passthrough_flags`): the kernel
            // wrote the file through its other opens, past the size this client knows.
            if self.pass_handle(fh.0) {
                self.run(self.client.passthrough_settle(&f))?;
            }
            self.run(self.client.pread(&f, offset, size as usize))
        });
        match res {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(failed("read", &e)),
        }
    }

    /// The kernel's `write` request (`Filesystem::write` in `requests.rs`).
    pub(super) fn write_request(
        &self,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
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

    /// The kernel's `flush` request (`Filesystem::flush` in `requests.rs`).
    pub(super) fn flush_request(&self, fh: FileHandle, lock_owner: LockOwner, reply: ReplyEmpty) {
        // close(2) of one descriptor: publish the size so that other nodes see it, and drop
        // the closing process's POSIX locks on the file. A file this client never wrote and
        // never locked has neither: answered at once, without entering the runtime.
        let res = self.file(fh).and_then(|f| {
            if !self.close_has_work(&f) {
                return Ok(());
            }
            let closed = match self.pass_handle(fh.0) {
                true => self.run(self.client.passthrough_flush(&f)),
                false => self.run(self.client.flush(&f)),
            };
            self.release_owner_locks(&f, lock_owner.0).and(closed)
        });
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("flush", &e)),
        }
    }

    /// The kernel's `release` request (`Filesystem::release` in `requests.rs`).
    pub(super) fn release_request(
        &self,
        fh: FileHandle,
        lock_owner: Option<LockOwner>,
        reply: ReplyEmpty,
    ) {
        let file = lock(&self.files).remove(&fh.0);
        let through = self.pass_handle(fh.0);
        // A hidden name (unlinked or replaced while open) before the close, which may remove it.
        let hidden = file
            .as_ref()
            .map(File::path)
            .filter(|p| self.client.unlinked_while_open(p));
        let closed = file.as_ref().map(|f| {
            if !self.close_has_work(f) {
                self.client.let_go(f);
                return Ok(());
            }
            let closed = match through {
                true => self.run(self.client.passthrough_close(f)),
                false => self.run(self.client.close(f)),
            };
            let owner = lock_owner.map(|o| o.0);
            self.release_handle_locks(f, fh.0, owner).and(closed)
        });
        self.pass_release(fh.0);
        if let Some(p) = hidden {
            self.forget_orphan(&p);
        }
        match closed {
            Some(Err(e)) => reply.error(failed("release", &e)),
            Some(Ok(())) | None => reply.ok(),
        }
    }

    /// The kernel's `fsync` request (`Filesystem::fsync` in `requests.rs`).
    pub(super) fn fsync_request(&self, fh: FileHandle, reply: ReplyEmpty) {
        let res = self.file(fh).and_then(|f| match self.pass_handle(fh.0) {
            true => self.run(self.client.passthrough_fsync(&f)),
            false => self.run(self.client.fsync(&f)),
        });
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("fsync", &e)),
        }
    }

    /// The kernel's `create` request (`Filesystem::create` in `requests.rs`).
    pub(super) fn create_request(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
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
            let fh = self.add_file(file.clone());
            match self.pass_open(attr.ino.0, fh, &file, true, |d| reply.open_backing(d)) {
                Ok(Some(id)) => Ok((attr, fh, passthrough_flags(&file), Some(id))),
                Ok(None) => Ok((attr, fh, fopen, None)),
                Err(e) => {
                    lock(&self.files).remove(&fh);
                    let _ = self.run(self.client.close(&file));
                    Err(e)
                }
            }
        });
        match res {
            Ok((attr, fh, fopen, Some(id))) => {
                reply.created_passthrough(&self.ttl, &attr, GENERATION, FileHandle(fh), fopen, &id)
            }
            Ok((attr, fh, fopen, None)) => {
                reply.created(&self.ttl, &attr, GENERATION, FileHandle(fh), fopen)
            }
            Err(e) => reply.error(failed("create", &e)),
        }
    }

    /// The kernel's `fallocate` request (`Filesystem::fallocate` in `requests.rs`).
    pub(super) fn fallocate_request(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        match self.do_fallocate(fh, offset, length, mode) {
            Ok(()) => {
                // The file grew: a data file the kernel reads (passthrough) grows with it.
                if mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
                    self.pass_truncated(ino.0, offset.saturating_add(length));
                }
                reply.ok()
            }
            Err(e) => reply.error(failed("fallocate", &e)),
        }
    }
}
