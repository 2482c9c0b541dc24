//! The client's operations as the front-ends call them (the mount, the preload library,
//! libeddy, the CLI and the benchmarks): each one hands the call to the layer that sends its
//! requests, `namespace` (names and the records they lead to) or `data` (chunks and daemons
//! as stores). What the client keeps for itself (open files and the handles held, the size
//! cache, recent directories) is in the modules beside this one; none of them sends a request.

use crate::{
    Advice, Client, Creds, DaemonStatus, DirEntry, DirReader, Errno, Failure, File, FileId,
    FileKind, FileResult, FsStats, Inode, LockInfo, LockKind, LockRange, LockRequest, SetAttr,
    Waiting, XattrSet,
};
use eddy_proto::{Reply, Request, Rpc};
use std::time::Duration;

impl Client {
    // ---------------------------------------------------------------- copies

    /// Copies of everything (the deployment's `replicas`).
    pub fn replicas(&self) -> usize {
        self.rpc().replicas()
    }

    /// Whether this client found `daemon` unreachable lately (only tracked with R > 1).
    pub fn is_down(&self, daemon: u32) -> bool {
        self.rpc().is_down(daemon)
    }

    /// Forgets that `daemon` was found unreachable (it told the caller it is up again).
    pub fn mark_up(&self, daemon: u32) {
        self.rpc().mark_up(daemon);
    }

    // ---------------------------------------------------------------- namespace/entries

    /// lstat: the entry itself (a symlink is not followed).
    pub async fn stat(&self, path: &str) -> Result<Inode, Errno> {
        self.ns().stat(path).await
    }

    /// Like `stat`, for a caller that knows the parent is a directory (a kernel looking up a
    /// name in a directory it holds): a missing entry is ENOENT at the cost of one RPC, with no
    /// look at the ancestors.
    pub async fn lookup(&self, path: &str) -> Result<Inode, Errno> {
        self.ns().lookup(path).await
    }

    /// Like `stat`, for a mount answering the kernel's GETATTR (decision 0050): a directory
    /// this client has seen within `dir_cache_ms`, and not changed since but for its times
    /// (which this client's stats show at once), is answered from its cache of recent
    /// directories; anything else is asked for, and a directory remembered. A change another
    /// client made to the directory shows within `dir_cache_ms`.
    pub async fn stat_recent(&self, path: &str) -> Result<Inode, Errno> {
        self.ns().stat_recent(path).await
    }

    pub async fn mkdir(&self, path: &str, mode: u32, creds: Creds) -> Result<Inode, Errno> {
        self.ns().mkdir(path, mode, creds).await
    }

    pub async fn symlink(
        &self,
        target: &str,
        linkpath: &str,
        creds: Creds,
    ) -> Result<Inode, Errno> {
        self.ns().symlink(target, linkpath, creds).await
    }

    pub async fn readlink(&self, path: &str) -> Result<String, Errno> {
        self.ns().readlink(path).await
    }

    /// unlink(2). A file a handle of this client holds open lives on under a hidden name
    /// until the last of them is closed (`held`, decision 0061).
    pub async fn unlink(&self, path: &str, creds: Creds) -> Result<(), Errno> {
        self.ns().unlink(path, creds).await
    }

    pub async fn rmdir(&self, path: &str, creds: Creds) -> Result<(), Errno> {
        self.ns().rmdir(path, creds).await
    }

    pub async fn truncate(&self, path: &str, size: u64, creds: Creds) -> Result<Inode, Errno> {
        self.ns().truncate(path, size, creds).await
    }

    /// chmod, chown, utimens and truncate in one call; returns the new inode.
    pub async fn setattr(&self, path: &str, attr: SetAttr, creds: Creds) -> Result<Inode, Errno> {
        self.ns().setattr(path, attr, creds).await
    }

    /// The inode of an entry listed in `dir` as this client sees it: the listing's own, or, for
    /// a file this client is writing, a fresh stat that counts its unpublished writes (the
    /// listing may predate them).
    pub async fn entry_inode(&self, dir: &str, entry: &DirEntry) -> Result<Inode, Errno> {
        self.ns().entry_inode(dir, entry).await
    }

    /// A cursor over the entries of `dir`, resuming after the name `after`.
    pub fn readdir(&self, dir: &str, after: Option<String>) -> Result<DirReader, Errno> {
        self.ns().readdir(dir, after)
    }

    // ---------------------------------------------------------------- namespace/links

    /// link(2): `new` becomes one more name of the file at `old` (any entry but a
    /// directory). Both names then show the same file: one inode, one size, one link count.
    /// Returns the file's inode.
    pub async fn link(&self, old: &str, new: &str, creds: Creds) -> Result<Inode, Errno> {
        self.ns().settle_path(old).await;
        self.ns().settle_path(new).await;
        let i = self.ns().link(old, new, creds).await?;
        self.ns().made_leased(new);
        Ok(i)
    }

    // ---------------------------------------------------------------- namespace/locks

    /// This client's lock session (part of every lock owner it uses).
    pub fn lock_session(&self) -> u128 {
        self.ns().lock_session()
    }

    /// One lock attempt. With `wait` zero, a conflict is EAGAIN; otherwise the daemon waits
    /// up to `wait` (at most half the RPC deadline) and `Ok(false)` means still blocked: the
    /// caller decides whether to ask again (FUSE checks for a signal in between). In the
    /// grace period of a restarted lock daemon, an attempt without a wait waits for its end
    /// (never a spurious EAGAIN; ENOLCK if it lasts past `lock_grace_ms`), one with a wait
    /// is still blocked.
    pub async fn lock_once(
        &self,
        f: &File,
        req: &LockRequest,
        wait: Duration,
    ) -> Result<bool, Errno> {
        self.ns().settle_open(&f.path()).await?;
        self.ns().lock_once(f, req, wait).await
    }

    /// F_SETLK (`wait` false: EAGAIN on conflict) or F_SETLKW (`wait` true: asks again until
    /// granted, EDEADLK when the wait would close a cycle of owners; dropping the future
    /// stops waiting).
    pub async fn lock(&self, f: &File, req: &LockRequest, wait: bool) -> Result<(), Errno> {
        self.ns().settle_open(&f.path()).await?;
        self.ns().lock(f, req, wait).await
    }

    /// A new wait for a lock (see `Waiting`).
    pub fn waiting(&self) -> Waiting {
        self.ns().waiting()
    }

    /// After a blocked slice of a wait: asks the file's lock daemon which owners hold the
    /// conflicting locks and records at the coordinator that this owner waits for them.
    /// EDEADLK when that would close a cycle (some holder waits, through any chain, for
    /// this owner) and one more attempt still finds the range held; `Ok(true)` when that
    /// attempt got the lock. A coordinator or lock daemon that does not answer leaves the
    /// wait undetected (`Ok(false)`: wait on).
    pub async fn check_deadlock(
        &self,
        f: &File,
        req: &LockRequest,
        w: &mut Waiting,
    ) -> Result<bool, Errno> {
        self.ns().check_deadlock(f, req, w).await
    }

    /// Ends a wait at the coordinator (granted, failed or given up); a wait never ended
    /// there expires.
    pub async fn stop_waiting(&self, w: &Waiting) {
        self.ns().stop_waiting(w).await
    }

    /// F_GETLK: the lock of another owner that would stop `owner` taking `kind` over `range`
    /// (after the grace period of a restarted lock daemon).
    pub async fn test_lock(
        &self,
        f: &File,
        owner: u64,
        kind: LockKind,
        range: LockRange,
    ) -> Result<Option<LockInfo>, Errno> {
        self.ns().test_lock(f, owner, kind, range).await
    }

    /// Drops this client's locks of the file held by `owner` (a close: POSIX locks) and/or
    /// taken through `handle` (the last close of an open file: OFD locks and flock).
    pub async fn release_locks(
        &self,
        f: &File,
        owner: Option<u64>,
        handle: Option<u64>,
    ) -> Result<(), Errno> {
        self.ns().release_locks(f, owner, handle).await
    }

    // ---------------------------------------------------------------- namespace/open

    /// After a read through `f`: moves the file's atime when the rule says so (`atime_due`,
    /// or the first read of a handle that may have written), with one metadata request; the
    /// owner decides again under the entry's lock. Under relatime a handle asks once. Also
    /// called by the mount at the open of a handle the kernel reads through itself (FUSE
    /// passthrough) when `atime_due`. A failure is logged: the read itself succeeded.
    pub async fn note_read(&self, f: &File) {
        self.ns().note_read(f).await
    }

    // ---------------------------------------------------------------- namespace/rename

    /// rename(2): files, symlinks and directories. A file replaces a file; a directory
    /// replaces an empty directory. Atomic for files as seen by readers: the new name exists
    /// before the old one goes. Data never moves (it is named by file id). A directory rename
    /// that stops half-way (EIO) is completed later, never left split (decision 0010).
    /// rename(2). A file a handle of this client holds open at `to` lives on under a hidden
    /// name until the last of them is closed, and the handles open at or below `from` follow
    /// the rename (`held`, decision 0061).
    pub async fn rename(&self, from: &str, to: &str, creds: Creds) -> Result<(), Errno> {
        self.ns().settle_rename(from, to).await;
        self.ns().rename(from, to, creds).await?;
        self.ns().renamed_leased(from, to);
        Ok(())
    }

    // ---------------------------------------------------------------- namespace/special

    /// mknod(2) of a special file: `kind` is a FIFO, a socket or a device node (`rdev` is
    /// its device number, Linux encoding). Device nodes need root (CAP_MKNOD): EPERM for
    /// others when checks are enforced. Regular files are made by `create`.
    pub async fn mknod(
        &self,
        path: &str,
        kind: FileKind,
        mode: u32,
        rdev: u64,
        creds: Creds,
    ) -> Result<Inode, Errno> {
        self.ns().mknod(path, kind, mode, rdev, creds).await
    }

    /// setxattr(2): `how` is `Any`, `Create` (XATTR_CREATE: EEXIST if present) or `Replace`
    /// (XATTR_REPLACE: ENODATA if absent). Names over 255 bytes give ERANGE, values over
    /// 64 KiB E2BIG, `system.*` (ACLs) EOPNOTSUPP, `user.*` on anything but regular files and
    /// directories EPERM.
    pub async fn setxattr(
        &self,
        path: &str,
        name: &str,
        value: &[u8],
        how: XattrSet,
        creds: Creds,
    ) -> Result<(), Errno> {
        self.ns().settle_path(path).await;
        self.ns().setxattr(path, name, value, how, creds).await
    }

    /// getxattr(2): the value, or ENODATA.
    pub async fn getxattr(&self, path: &str, name: &str, creds: Creds) -> Result<Vec<u8>, Errno> {
        self.ns().getxattr(path, name, creds).await
    }

    /// listxattr(2): the names in name order; `trusted.*` only for root. As on Linux, no
    /// read permission is needed.
    pub async fn listxattr(&self, path: &str, creds: Creds) -> Result<Vec<String>, Errno> {
        self.ns().listxattr(path, creds).await
    }

    /// removexattr(2): ENODATA if the attribute is absent.
    pub async fn removexattr(&self, path: &str, name: &str, creds: Creds) -> Result<(), Errno> {
        self.ns().settle_path(path).await;
        self.ns().removexattr(path, name, creds).await
    }

    // ---------------------------------------------------------------- data/daemons

    /// Sends one request to one daemon, telling an error answer apart from an unreachable
    /// daemon: for tools.
    pub async fn call_daemon<R: Rpc>(&self, daemon: u32, req: R) -> Result<R::Reply, Failure> {
        self.data().call_daemon(daemon, req).await
    }

    /// `call_daemon` for a request as it travels (kept by the caller, e.g. to be sent
    /// again), answered with the reply as it came.
    pub async fn call_daemon_raw(&self, daemon: u32, req: &Request) -> Result<Reply, Failure> {
        self.data().call_daemon_raw(daemon, req).await
    }

    pub async fn statfs(&self) -> Result<FsStats, Errno> {
        self.data().statfs().await
    }

    /// Status of every daemon, in id order.
    pub async fn daemon_status(&self) -> Vec<(u32, Result<DaemonStatus, Errno>)> {
        self.data().daemon_status().await
    }

    /// Tells every daemon that this client serves a FUSE mount at `mountpoint`, running on
    /// `transport` (`Mounted`, decision 0079): on the connections open now and on every one
    /// opened later; `eddy status` lists the mounts the daemons know. Returns once sent.
    pub async fn announce_mount(&self, mountpoint: String, transport: eddy_proto::MountTransport) {
        self.data().announce_mount(mountpoint, transport).await
    }

    /// What every daemon counted of the I/O it served (`Request::Stats`, decision 0032).
    pub async fn daemon_stats(&self) -> Vec<(u32, Result<eddy_proto::stats::DaemonStats, Errno>)> {
        self.data().daemon_stats().await
    }

    /// The snapshots of the daemons that answered, in daemon order (what `eddy stats --json`
    /// prints and libeddy's `eddy_stats_json` returns), and the daemons that did not, with
    /// why.
    pub async fn stats_snapshots(
        &self,
    ) -> (Vec<eddy_proto::stats::DaemonStats>, Vec<(u32, Errno)>) {
        self.data().stats_snapshots().await
    }

    /// One page of a scrub on `daemon`: its stored blocks of up to `limit` chunks after
    /// `after` verified (`Request::Scrub`).
    pub async fn scrub_page(
        &self,
        daemon: u32,
        after: Option<(FileId, u64)>,
        limit: u32,
    ) -> Result<eddy_proto::ScrubPage, Errno> {
        self.data().scrub_page(daemon, after, limit).await
    }

    /// Asks every daemon to stop.
    pub async fn shutdown_daemons(&self) -> Vec<(u32, Result<(), Errno>)> {
        self.data().shutdown_daemons().await
    }

    /// Asks every daemon to stop, each answering with its counters as it stops (decision
    /// 0076).
    pub async fn shutdown_daemons_with_stats(
        &self,
    ) -> Vec<(u32, Result<eddy_proto::stats::DaemonStats, Errno>)> {
        self.data().shutdown_daemons_with_stats().await
    }

    /// Makes every daemon's metadata and chunks durable.
    pub async fn sync_all(&self) -> Result<(), Errno> {
        self.ns().flush_all_leases().await;
        self.data().sync_all().await
    }

    // ---------------------------------------------------------------- data/direct

    /// The data file the kernel may read and write for `f` (a descriptor of the daemon's
    /// own file, at file offset == data-file offset), under a lease of this handle: a write
    /// lease for a writable open (it makes the data file of a new file), a read lease
    /// otherwise. `None`: the file does not qualify (linked, R > 1, chunks on several or
    /// remote daemons, direct I/O off), or the daemon refused; the mount then serves it.
    pub async fn passthrough_open(&self, f: &File) -> Option<std::fs::File> {
        self.data().passthrough_open(f).await
    }

    /// Before a flush, fsync or close of a file the kernel writes, and before a read the
    /// mount serves of one (an O_DIRECT writer's, decision 0059): a lease lost meanwhile
    /// (the daemon restarted) is asked for again, so that the report that follows reaches
    /// the daemon; and the size the file reached (its data file's length: the kernel wrote
    /// past what this client knows) is recorded for publication, and known to the handle.
    pub async fn passthrough_settle(&self, f: &File) -> Result<(), Errno> {
        self.data().passthrough_settle(f).await
    }

    /// flush (a close of one descriptor) of a file the kernel writes: the size is published
    /// (close-to-open); the lease stays, since the kernel may write through other
    /// descriptors of the open file until its release.
    pub async fn passthrough_flush(&self, f: &File) -> Result<(), Errno> {
        self.data().passthrough_flush(f).await
    }

    /// fsync of a file the kernel writes: `passthrough_flush`, then `fsync`.
    pub async fn passthrough_fsync(&self, f: &File) -> Result<(), Errno> {
        self.data().passthrough_fsync(f).await
    }

    /// The release of a file the kernel wrote: the last report (whole), the size, the
    /// lease ended (`close`).
    pub async fn passthrough_close(&self, f: &File) -> Result<(), Errno> {
        self.data().passthrough_close(f).await
    }

    // ---------------------------------------------------------------- data/io

    /// Reads up to `len` bytes at `offset`; short at end of file; holes read as zeros.
    pub async fn pread(&self, f: &File, offset: u64, len: usize) -> Result<Vec<u8>, Errno> {
        self.data().pread(f, offset, len).await
    }

    /// Reads up to `buf.len()` bytes at `offset` straight into `buf`; returns how many (short
    /// at end of file; holes read as zeros, bytes past the end are left alone). For callers that
    /// own a buffer already: no allocation, no copy beyond the one out of the replies.
    pub async fn pread_into(&self, f: &File, offset: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        self.data().pread_into(f, offset, buf).await
    }

    /// `posix_fadvise`: how the program will read `[offset, offset + len)` of `f` (`len` 0: to
    /// the end). `WillNeed` starts a background fetch of a linked file's range from the
    /// backend and returns at once; `Sequential` and `Random` turn the handle's read-ahead
    /// on for every read and off (decision 0070).
    pub async fn advise(
        &self,
        f: &File,
        offset: u64,
        len: u64,
        advice: Advice,
    ) -> Result<(), Errno> {
        self.data().advise(f, offset, len, advice).await
    }

    /// Writes `data` at `offset` (at the end, reserved atomically, with O_APPEND). The size
    /// update follows the data RPCs once they are acknowledged (another client that sees the
    /// size finds the bytes); writers never wait on each other's data.
    /// The first write through a handle opened by a caller other than root clears the file's
    /// set-id bits (set-group-ID only with group execute), as POSIX allows and Linux does.
    pub async fn pwrite(&self, f: &File, offset: u64, data: &[u8]) -> Result<usize, Errno> {
        self.data().pwrite(f, offset, data).await
    }

    /// `pwrite`, where the caller says whether the write clears the file's set-id bits: a
    /// kernel knows the writing process's privilege (through FUSE: FUSE_WRITE_KILL_SUIDGID).
    pub async fn pwrite_clearing(
        &self,
        f: &File,
        offset: u64,
        data: &[u8],
        clear_setid: bool,
    ) -> Result<usize, Errno> {
        self.data()
            .pwrite_clearing(f, offset, data, clear_setid)
            .await
    }

    /// Makes the file's data and metadata durable: publishes its size, then sends
    /// `Sync{file_id}` to the daemons that acknowledged writes through this handle since its
    /// last fsync, to its metadata owner, and to the daemons holding other unsynced changes
    /// of this client (its entries, sizes, truncates; decision 0015). EIO if one of them
    /// answers on a newer connection than a change it covers (it may have restarted and
    /// lost it).
    pub async fn fsync(&self, f: &File) -> Result<(), Errno> {
        self.ns().fsync_leased(&f.path()).await?;
        self.data().fsync(f).await
    }

    /// Closes the handle: `flush`, and the last handle of a file unlinked or replaced while
    /// open through this client removes it for good (its data freed; decision 0061).
    pub async fn close(&self, f: &File) -> Result<(), Errno> {
        let closed = self.data().close(f).await;
        let sent = self.ns().close_leased(&f.path()).await;
        closed.and(sent)
    }

    /// What the close of one descriptor does while the handle may stay open (a mount's
    /// FLUSH): publishes the size its writes reached, so that every client sees it from now
    /// on (close-to-open), and reports and ends its direct leases (later I/O takes new ones).
    pub async fn flush(&self, f: &File) -> Result<(), Errno> {
        let flushed = self.data().flush(f).await;
        let sent = self.ns().close_leased(&f.path()).await;
        flushed.and(sent)
    }

    // ---------------------------------------------------------------- namespace/leases

    /// Whether this client takes directory leases (decision 0075): the config's `leases`
    /// unless a front end said otherwise (`set_leases`).
    pub fn leases_on(&self) -> bool {
        self.0.leases.on()
    }

    /// Lets this client take directory leases, or not (the mount turns them off until it
    /// answers the kernel's lookups with them). Turning them off gives none back: see
    /// `return_leases`.
    pub fn set_leases(&self, on: bool) {
        self.0.leases.set_on(on);
    }

    /// Whether `path` is known absent under a lease this client holds on its directory:
    /// then no other client can create it without the lease being recalled first (and the
    /// hook of `on_lease_return` runs before it goes back), so a front end may answer a
    /// lookup of it with a negative entry it keeps until then. False when unknown.
    pub fn known_absent(&self, path: &str) -> bool {
        let Ok(p) = self.norm(path) else {
            return false;
        };
        let Some((dir, name)) = eddy_proto::path::split(&p) else {
            return false;
        };
        self.0.leases.get(dir).is_some_and(|l| l.knows_absent(name))
    }

    /// Registers (or, with `None`, removes) what runs before this client gives a lease back
    /// (recalled by another client, or given back by this one): it is called with the
    /// directory's path (normalised) and awaited; the lease answers nothing from the time it
    /// is called. A front end that cached negative entries of the directory drops them there.
    pub fn on_lease_return(&self, hook: Option<crate::LeaseReturnHook>) {
        self.0.leases.set_hook(hook);
    }

    /// Sends everything queued under this client's leases and waits for the replies (what
    /// an fsync of every directory does); failures are reported by the calls that depend
    /// on them.
    pub async fn flush_leases(&self) {
        self.ns().flush_all_leases().await;
    }

    /// Gives every lease this client holds back (after flushing it).
    pub async fn return_leases(&self) {
        self.ns().give_back_all().await;
    }

    /// Truncates an open file (permission was checked at open); by a caller other than root,
    /// it clears the file's set-id bits.
    pub async fn ftruncate(&self, f: &File, size: u64) -> Result<Inode, Errno> {
        self.data().ftruncate(f, size).await
    }

    /// fallocate(2) with its `mode`: 0 and `FALLOC_FL_KEEP_SIZE` reserve space (`allocate`);
    /// other modes (punching, zeroing, collapsing, inserting) are EOPNOTSUPP.
    pub async fn fallocate(&self, f: &File, offset: u64, len: u64, mode: i32) -> Result<(), Errno> {
        self.data().fallocate(f, offset, len, mode).await
    }

    pub async fn allocate(
        &self,
        f: &File,
        offset: u64,
        len: u64,
        keep_size: bool,
    ) -> Result<(), Errno> {
        self.data().allocate(f, offset, len, keep_size).await
    }

    // ---------------------------------------------------------------- data/tier

    /// Prefetches the files under `paths` (files or trees of linked prefixes) into the cache;
    /// `pin` keeps their chunks from eviction. `progress` sees each file's result as it
    /// ends. A path that is not linked, or does not exist, is a failed result.
    pub async fn stage_in(
        &self,
        paths: &[String],
        pin: bool,
        progress: &(dyn Fn(&FileResult) + Sync),
    ) -> Vec<FileResult> {
        self.data().stage_in(paths, pin, progress).await
    }

    /// `stage_in` without pins and with fewer files at once (`prefetch_files`): what
    /// `eddy prefetch` and a job's `#EDDY prefetch` run beside the job's own reads.
    pub async fn prefetch(
        &self,
        paths: &[String],
        progress: &(dyn Fn(&FileResult) + Sync),
    ) -> Vec<FileResult> {
        self.data().prefetch(paths, progress).await
    }

    /// Writes every dirty file under `paths` (all linked prefixes when empty) back to the
    /// backend and returns when it is durable there: first every daemon writes back its own
    /// dirty chunks (pwrite + fsync into the backend file), in parallel; then the metadata
    /// owners finalise the files (create, size, mode, times). One result per file is
    /// returned; `progress` sees each daemon's part of a file as it ends (bytes add up).
    ///
    /// A dirty file whose backend copy changed since this deployment took it (another writer,
    /// on another cache: decision 0030) is not written back: its result is the conflict
    /// (EBUSY), and its chunks are held back until a stage-out `with overwrite` lets this
    /// copy win.
    pub async fn stage_out(
        &self,
        paths: &[String],
        progress: &(dyn Fn(&FileResult) + Sync),
    ) -> Result<Vec<FileResult>, Errno> {
        self.data().stage_out(paths, progress).await
    }

    /// `stage_out`; with `overwrite`, the files in conflict with their backend copy are
    /// written over it.
    pub async fn stage_out_with(
        &self,
        paths: &[String],
        overwrite: bool,
        progress: &(dyn Fn(&FileResult) + Sync),
    ) -> Result<Vec<FileResult>, Errno> {
        self.data().stage_out_with(paths, overwrite, progress).await
    }

    /// Early write-back (decision 0041): the dirty data of the files under `paths` (all
    /// linked prefixes when empty) goes to the backend while the job may still be writing,
    /// and the files stay dirty, to be finalised by the stage-out at the job's end. The
    /// files are checked against their backend copies as a stage-out checks them (decision
    /// 0030): those in conflict are held back and reported (EBUSY), and only the files that
    /// passed the check, which marks them as being written back by this deployment, have
    /// their dirty chunks written back, one file at a time on every daemon at once. A chunk
    /// written to after a pass read it stays dirty (the tier's chunk versions), so nothing
    /// written meanwhile is marked clean. One result per file (bytes add up over daemons).
    pub async fn write_back_early(
        &self,
        paths: &[String],
        progress: &(dyn Fn(&FileResult) + Sync),
    ) -> Result<Vec<FileResult>, Errno> {
        self.data().write_back_early(paths, progress).await
    }

    /// Releases the pins of cached chunks under `paths` (all linked prefixes when empty);
    /// returns how many chunks were pinned.
    pub async fn unpin(&self, paths: &[String]) -> Result<u64, Errno> {
        self.data().unpin(paths).await
    }
}
