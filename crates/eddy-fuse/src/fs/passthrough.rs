//! FUSE passthrough (decision 0049): an open of a regular file whose chunks all lie in one
//! data file of a daemon of this host is answered with a backing id of that data file, and
//! the kernel reads and writes it itself (file offset == data-file offset); the mount never
//! sees those bytes. The client gets the descriptor under a lease of the open file
//! (`Client::passthrough_open`) and tells the daemon at flush, fsync and release that the
//! whole file may have changed (`passthrough_flush`, `_fsync`, `_close`).
//!
//! The kernel ties one backing file to an inode while it has passthrough opens, and refuses
//! (EIO) a passthrough open while the inode has opens through the page cache and an open
//! without passthrough while it has a backing file. So the mode is per inode: while an
//! inode has a backing file, every open of it reuses it (a writable one takes a write lease
//! too, or fails with EBUSY); while it has other opens, none passes through.
//!
//! The kernel opens the backing file again for each passthrough open, with the credentials
//! of whoever registered it. The data file and the daemon that hands it over are the job's
//! user's, the mount may be root's: the client checks the descriptor (a regular file of the
//! daemon's user in the daemon's root, the access asked for: decision 0058), and the mount
//! registers it from a thread that has taken the file owner's file-system identity
//! (`register_as_owner`), so the kernel's opens are checked as that user's, never root's.
//!
//! An O_DIRECT open for writing of a passed-through inode is answered FOPEN_DIRECT_IO as well
//! (`files::passthrough_flags`): its reads and writes come to the mount, its mappings go to
//! the data file. The kernel's direct writes into a data file another open has mapped and
//! dirtied would make the data file's file system report EIO to that mapping's msync.
//!
//! Not taken: when the mount could not enable it at init (not root, old kernel), for
//! O_APPEND opens (Eddy reserves appended ranges at the metadata owner), for a file whose
//! backend copy was renewed, and for a file this mount has taken a lock on (the lock daemon
//! serves locks across nodes; the kernel's I/O would bypass the ordering they give).

use super::*;
use fuser::BackingId;

/// The mount's passthrough state.
#[derive(Default)]
pub(crate) struct Passthrough {
    /// Asked by the options (set at construction); granted at init.
    wanted: bool,
    on: std::sync::atomic::AtomicBool,
    state: Mutex<PassState>,
}

#[derive(Default)]
struct PassState {
    inodes: HashMap<u64, Modes>,
    /// Open files: their inode, and whether the kernel does their I/O.
    handles: HashMap<u64, (u64, bool)>,
}

/// How an inode is open through this mount.
#[derive(Default)]
struct Modes {
    /// Its backing file while it has passthrough opens, and the data file's descriptor.
    backing: Option<(Arc<BackingId>, std::fs::File)>,
    through: usize,
    served: usize,
}

impl Passthrough {
    pub(crate) fn new(wanted: bool) -> Passthrough {
        Passthrough {
            wanted,
            ..Default::default()
        }
    }

    /// At init: asks the kernel for passthrough when the options want it and this process
    /// may use it (the kernel wants CAP_SYS_ADMIN to register a backing file: root here).
    pub(crate) fn init(&self, config: &mut KernelConfig) {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !self.wanted || !root {
            if self.wanted {
                debug!("FUSE passthrough off: the mount does not run as root");
            }
            return;
        }
        if config
            .add_capabilities(InitFlags::FUSE_PASSTHROUGH)
            .is_err()
        {
            warn!("FUSE passthrough off: the kernel does not offer it");
            return;
        }
        if config.set_max_stack_depth(1).is_err() {
            warn!("FUSE passthrough off: the kernel refused a stack depth of 1");
            return;
        }
        self.on.store(true, Ordering::Release);
        debug!("FUSE passthrough on");
    }

    fn on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }
}

/// Registers `data` (`register`: the FUSE_DEV_IOC_BACKING_OPEN ioctl) with the
/// file-system identity of the file's owner when that is not this process's: on a thread of
/// its own that sets its fsuid and fsgid to the owner's and drops its supplementary groups
/// (thread-local system calls, not the process-wide libc wrappers) and then ends. The
/// kernel keeps the registering thread's credentials for the opens it makes of the file,
/// so a descriptor root was handed is opened with no more rights than its owner has.
fn register_as_owner(
    data: &std::fs::File,
    register: impl FnOnce(&std::fs::File) -> std::io::Result<BackingId> + Send,
) -> std::io::Result<BackingId> {
    use std::os::unix::fs::MetadataExt;
    let st = data.metadata()?;
    // SAFETY: geteuid has no preconditions.
    if st.uid() == unsafe { libc::geteuid() } {
        return register(data);
    }
    let (uid, gid) = (st.uid(), st.gid());
    std::thread::scope(|s| {
        s.spawn(move || {
            become_fs_user(uid, gid)?;
            register(data)
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the registering thread panicked")))
    })
}

/// This thread (only) takes `uid` and `gid` as its file-system identity, with no
/// supplementary groups; checked, since setfsuid and setfsgid report no failure.
fn become_fs_user(uid: u32, gid: u32) -> std::io::Result<()> {
    // SAFETY: raw system calls on this thread's own credentials, with a null list of length
    // 0 for setgroups; none touches memory of ours beyond its arguments.
    unsafe {
        if libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        libc::syscall(libc::SYS_setfsgid, gid);
        libc::syscall(libc::SYS_setfsuid, uid);
        // Each call returns the identity before it: asking again for the same one reads it.
        let fsgid = libc::syscall(libc::SYS_setfsgid, gid) as u32;
        let fsuid = libc::syscall(libc::SYS_setfsuid, uid) as u32;
        if fsuid != uid || fsgid != gid {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("cannot take uid {uid} and gid {gid} as the file-system identity"),
            ));
        }
    }
    Ok(())
}

impl EddyFs {
    /// Decides how the kernel does the I/O of the open file `fh` (inode `ino`): `Some`
    /// backing id to answer with (passthrough), or `None` (served by the mount).
    /// `register` makes a backing id of a descriptor. Without `wanted` (a read-only open
    /// whose first read must move the atime, decision 0061) a new backing is not taken.
    pub(super) fn pass_open(
        &self,
        ino: u64,
        fh: u64,
        file: &File,
        wanted: bool,
        register: impl FnOnce(&std::fs::File) -> std::io::Result<BackingId> + Send,
    ) -> Result<Option<Arc<BackingId>>, Errno> {
        let pt = &self.passthrough;
        let mut st = lock(&pt.state);
        let modes = st.inodes.entry(ino).or_default();
        if let Some((id, _)) = &modes.backing {
            let id = Arc::clone(id);
            if file.writable() && self.run(self.client.passthrough_open(file)).is_none() {
                return Err(Errno::new(
                    libc::EBUSY,
                    format!(
                        "{}: open through FUSE passthrough, and no direct write lease for this \
                         open",
                        file.path()
                    ),
                ));
            }
            modes.through += 1;
            st.handles.insert(fh, (ino, true));
            return Ok(Some(id));
        }
        let eligible = pt.on()
            && wanted
            && modes.served == 0
            && !file.append()
            && !file.renewed()
            && !self.locked(file.file_id());
        let data = match eligible {
            true => self.run(self.client.passthrough_open(file)),
            false => None,
        };
        let registered = data.map(|d| (register_as_owner(&d, register), d));
        match registered {
            Some((Ok(id), data)) => {
                let id = Arc::new(id);
                modes.backing = Some((Arc::clone(&id), data));
                modes.through += 1;
                st.handles.insert(fh, (ino, true));
                debug!(path = &*file.path(), "FUSE passthrough");
                Ok(Some(id))
            }
            Some((Err(e), _)) => {
                // Not allowed after all (no CAP_SYS_ADMIN in the initial namespace, a data
                // file the kernel cannot stack on): off for this mount.
                warn!("FUSE passthrough off: cannot register a backing file: {e}");
                pt.on.store(false, Ordering::Release);
                modes.served += 1;
                st.handles.insert(fh, (ino, false));
                Ok(None)
            }
            None => {
                modes.served += 1;
                st.handles.insert(fh, (ino, false));
                Ok(None)
            }
        }
    }

    /// Whether the kernel does the I/O of open file `fh`.
    pub(super) fn pass_handle(&self, fh: u64) -> bool {
        lock(&self.passthrough.state)
            .handles
            .get(&fh)
            .is_some_and(|h| h.1)
    }

    /// Open file `fh` is released; the inode's backing file goes with its last passthrough
    /// open.
    pub(super) fn pass_release(&self, fh: u64) {
        let mut st = lock(&self.passthrough.state);
        let Some((ino, through)) = st.handles.remove(&fh) else {
            return;
        };
        let Some(m) = st.inodes.get_mut(&ino) else {
            return;
        };
        if through {
            m.through = m.through.saturating_sub(1);
            if m.through == 0 {
                m.backing = None;
            }
        } else {
            m.served = m.served.saturating_sub(1);
        }
        if m.through == 0 && m.served == 0 {
            st.inodes.remove(&ino);
        }
    }

    /// A truncate of inode `ino` to `size` is done: while the kernel reads the inode's data
    /// file itself (passthrough), that file must reach the new size, or the kernel's reads of
    /// the zeros a truncate that grows the file adds end early at the data file's old length
    /// (the daemon keeps a file's size in its metadata and its data files sparse). Grown as a
    /// hole, which reads as zeros and whose checksums are those of zeros (decision 0019).
    pub(super) fn pass_truncated(&self, ino: u64, size: u64) {
        let st = lock(&self.passthrough.state);
        let Some((_, data)) = st.inodes.get(&ino).and_then(|m| m.backing.as_ref()) else {
            return;
        };
        if data.metadata().is_ok_and(|m| m.len() < size) {
            if let Err(e) = data.set_len(size) {
                warn!("cannot grow the data file of inode {ino} to {size} for passthrough: {e}");
            }
        }
    }

    /// The size of inode `ino` as the kernel wrote it through passthrough: its data file's
    /// length, when larger than what the metadata owner knows (published at flush).
    pub(super) fn pass_size(&self, ino: u64, inode: &mut Inode) {
        let st = lock(&self.passthrough.state);
        let len = st
            .inodes
            .get(&ino)
            .and_then(|m| m.backing.as_ref())
            .and_then(|(_, data)| data.metadata().ok())
            .map(|m| m.len());
        if let Some(len) = len {
            inode.size = inode.size.max(len);
        }
    }
}
