//! Open files: the `File` handle and what it knows (its path, which follows renames, the
//! inode at open, the size it has seen, its read-ahead window, its direct leases), open and
//! create (symlinks followed, permissions checked, O_TRUNC), fstat, and the atime rule a read
//! follows. Its data is the data layer's (`data/read.rs`, `data/write.rs`, `data/sync.rs`,
//! `data/space.rs`); what an open asks of the namespace, the namespace layer's
//! (`namespace/open.rs`).

use crate::perm::{self, Access};
use crate::{new_inode, unsynced, Client, Creds, Errno, FileId, FileKind, Inode, SetAttr};
use eddy_config::Atime;
use eddy_proto::path;
use eddy_proto::Backing;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// Symlinks followed at most this many times when opening (ELOOP beyond).
const MAX_SYMLINK_HOPS: usize = 8;

/// Truncates done through this process (any client, any file): a handle whose known size
/// predates one asks the metadata again before it clamps a read (`FileInner::known_epoch`).
static TRUNCATIONS: AtomicU64 = AtomicU64::new(0);

pub(crate) fn truncations() -> u64 {
    TRUNCATIONS.load(Ordering::Acquire)
}

/// A truncate through this process is done (see `TRUNCATIONS`).
pub(crate) fn truncated() {
    TRUNCATIONS.fetch_add(1, Ordering::AcqRel);
}

pub(crate) struct FileInner {
    /// The path it reaches its metadata by: the one it was opened by, moved by the renames
    /// done through this client (`held`).
    pub(crate) path: std::sync::Mutex<Arc<str>>,
    pub(crate) inode: Inode,
    pub(crate) flags: i32,
    /// The largest size this handle knows the file to have (its own writes included).
    pub(crate) known_size: AtomicU64,
    /// `TRUNCATIONS` when `known_size` was last taken from the metadata: a truncate made
    /// since through this process (another handle of the file, a path) may have cut the
    /// file below it, and a read then asks again rather than return bytes past the end.
    pub(crate) known_epoch: AtomicU64,
    /// For a file under a linked prefix: what its chunks' daemons need to fetch it (its
    /// backend path follows renames; none once it is hidden, unlinked while open).
    pub(crate) backing: std::sync::Mutex<Option<Backing>>,
    /// Opening found the backend copy changed and took a new generation of it.
    pub(crate) renewed: bool,
    /// Read-ahead: the offset a sequential reader reads next, and the first chunk not yet
    /// asked for.
    pub(crate) ra_next: AtomicU64,
    pub(crate) ra_upto: AtomicU64,
    /// Read-ahead as advised (`posix_fadvise`): detected, always, never (`data::advice`).
    pub(crate) ra_mode: AtomicU8,
    /// The stream its reads belong to and what they have shown (decision 0072).
    pub(crate) stream: crate::data::Stream,
    /// Who opened the file: its writes and truncates by a caller without the privilege clear
    /// the file's set-id bits.
    pub(crate) creds: Creds,
    /// Whether a write through this handle has cleared the set-id bits already.
    pub(crate) setid_cleared: AtomicBool,
    /// The daemons that acknowledged writes through this handle since its last fsync
    /// (decision 0015).
    pub(crate) unsynced: unsynced::Unsynced,
    /// Its leases for direct local I/O, by daemon (decision 0048).
    pub(crate) direct: crate::direct::Handles,
    /// Whether a read through this handle has been considered for an atime update under
    /// relatime (once per handle, decision 0061).
    pub(crate) atime_checked: AtomicBool,
}

/// An open file. Cheap to clone.
#[derive(Clone)]
pub struct File(pub(crate) Arc<FileInner>);

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("path", &self.path())
            .field("file_id", &self.0.inode.file_id)
            .finish()
    }
}

impl File {
    /// The path the file is reached by now (it follows renames through this client, and a
    /// file unlinked or replaced while open moves to a hidden name: `held`).
    pub fn path(&self) -> Arc<str> {
        Arc::clone(&eddy_proto::sync::lock(&self.0.path))
    }
    /// Its path after a rename through this client (`held`): a linked file's backend path
    /// follows it, and a hidden name (a file unlinked or replaced while open) is not linked
    /// (decision 0031: the backend never sees it), as a new open there would find.
    pub(crate) fn set_path(&self, p: String) {
        let name = eddy_proto::path::split(&p).map_or(p.as_str(), |(_, n)| n);
        {
            let mut b = eddy_proto::sync::lock(&self.0.backing);
            if eddy_config::is_hidden_orphan(name) {
                *b = None;
            } else if let Some(b) = b.as_mut() {
                b.path = p.clone();
            }
        }
        *eddy_proto::sync::lock(&self.0.path) = p.into();
    }
    /// What a linked file's daemons need to fetch it (`None` for scratch files).
    pub(crate) fn backing(&self) -> Option<Backing> {
        eddy_proto::sync::lock(&self.0.backing).clone()
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
    /// Whether it was opened with O_DIRECT.
    pub fn direct(&self) -> bool {
        self.0.flags & libc::O_DIRECT != 0
    }
    /// Whether the file lies under a linked prefix (cached from the backend).
    pub fn is_linked(&self) -> bool {
        self.backing().is_some()
    }
    /// Whether opening it found its backend copy changed (size and times may differ from
    /// what a kernel cached before the open).
    pub fn renewed(&self) -> bool {
        self.0.renewed
    }
    /// The kind as of open.
    pub(crate) fn inode_kind(&self) -> FileKind {
        self.0.inode.kind
    }
    /// The mode as of open.
    pub(crate) fn inode_mode(&self) -> u32 {
        self.0.inode.mode
    }
    pub(crate) fn raise_known(&self, size: u64) {
        self.0.known_size.fetch_max(size, Ordering::AcqRel);
    }
}

impl Client {
    // ---------------------------------------------------------------- files

    /// open(2) with libc O_* flags. An open that met a daemon of a newer membership
    /// (EREMCHG: the view is followed by then) is made again from the start, under the new
    /// view (decision 0081).
    pub async fn open(
        &self,
        path: &str,
        flags: i32,
        mode: u32,
        creds: Creds,
    ) -> Result<File, Errno> {
        self.rpc()
            .retry_moved(|| self.open_once(path, flags, mode, creds))
            .await
    }

    async fn open_once(
        &self,
        path: &str,
        flags: i32,
        mode: u32,
        creds: Creds,
    ) -> Result<File, Errno> {
        let mut p = self.norm(path)?;
        let mut hops = 0;
        loop {
            let (inode, created, renewed) = self.open_entry(&p, flags, mode, creds).await?;
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
            return self
                .finish_open(p, inode, (created, renewed), flags, creds)
                .await;
        }
    }

    pub(crate) fn resolve_link(&self, link: &str, target: &str) -> Result<String, Errno> {
        let base = path::split(link).map(|(parent, _)| parent).unwrap_or("/");
        if target.starts_with('/') {
            self.norm(target)
        } else {
            self.norm(&path::join(base, target))
        }
    }

    /// Looks up or creates the entry; returns it, whether this call created it and whether
    /// it found the backend copy changed.
    pub(crate) async fn open_entry(
        &self,
        p: &str,
        flags: i32,
        mode: u32,
        creds: Creds,
    ) -> Result<(Inode, bool, bool), Errno> {
        if flags & libc::O_CREAT == 0 {
            let i = self.ns().stat_as(p, creds).await?;
            let (i, renewed) = self.ns().validate_linked(p, i, flags).await?;
            return Ok((i, false, renewed));
        }
        let exclusive = flags & libc::O_EXCL != 0;
        // Under a lease on the directory: answered here (decision 0075).
        if let Some((i, created)) = self.ns().create_leased(p, mode, exclusive, creds).await? {
            return Ok((i, created, false));
        }
        // An enforcing caller may open an existing file in a directory it cannot write to, so
        // look first; otherwise a non-exclusive Create returns the existing entry by itself.
        if !exclusive && creds.enforce {
            match self.ns().stat_as(p, creds).await {
                Ok(i) => {
                    let (i, renewed) = self.ns().validate_linked(p, i, flags).await?;
                    return Ok((i, false, renewed));
                }
                Err(e) if e.errno == libc::ENOENT => {}
                Err(e) => return Err(e),
            }
        }
        let fresh = new_inode(FileKind::File, mode, creds, None);
        let fresh_id = fresh.file_id;
        let got = self.ns().create_entry(p, fresh, exclusive, creds).await?;
        let created = got.file_id == fresh_id;
        if created {
            self.ns().created_without_lease(p).await;
            return Ok((got, true, false));
        }
        let (i, renewed) = self.ns().validate_linked(p, got, flags).await?;
        Ok((i, false, renewed))
    }

    pub(crate) async fn finish_open(
        &self,
        p: String,
        mut inode: Inode,
        (created, renewed): (bool, bool),
        flags: i32,
        creds: Creds,
    ) -> Result<File, Errno> {
        let acc = flags & libc::O_ACCMODE;
        let wants_write = acc != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        if inode.kind.is_special() {
            return Err(Errno::new(
                libc::ENXIO,
                format!("{p} is a special file: it has no data in Eddy (open it on a mount)"),
            ));
        }
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
        // O_TRUNC of an existing file truncates it even when it looks empty (another client's
        // unpublished writes may have grown it, and Linux moves its mtime and ctime anyway).
        if inode.kind == FileKind::File
            && flags & libc::O_TRUNC != 0
            && acc != libc::O_RDONLY
            && !created
        {
            let attr = SetAttr {
                size: Some(0),
                ..SetAttr::default()
            };
            // Permission to write was checked above; truncate as setattr does (an unprivileged
            // caller's truncate clears set-id bits).
            let unchecked = Creds {
                enforce: false,
                ..creds
            };
            inode = self.setattr(&p, attr, unchecked).await?;
        }
        let known = AtomicU64::new(inode.size);
        let backing = match (&inode.tier, inode.kind) {
            (Some(t), FileKind::File) => Some(Backing {
                path: p.clone(),
                size: t.backend_size,
            }),
            _ => None,
        };
        let f = File(Arc::new(FileInner {
            path: std::sync::Mutex::new(p.into()),
            inode,
            flags,
            known_size: known,
            known_epoch: AtomicU64::new(truncations()),
            backing: std::sync::Mutex::new(backing),
            renewed,
            ra_next: AtomicU64::new(0),
            ra_upto: AtomicU64::new(0),
            ra_mode: AtomicU8::new(crate::data::RA_DETECT),
            stream: Default::default(),
            creds,
            setid_cleared: AtomicBool::new(false),
            unsynced: Default::default(),
            direct: Default::default(),
            atime_checked: AtomicBool::new(false),
        }));
        self.0.held.add(&f);
        Ok(f)
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
        let p = f.path();
        let mut i = self.ns().stat_norm(&p).await?;
        f.raise_known(i.size);
        // Unlinked or replaced while open: its hidden name is not one of its names.
        if self.unlinked_while_open(&p) {
            i.nlink = i.nlink.saturating_sub(1);
        }
        Ok(i)
    }

    /// Whether a read through `f` now would move the file's atime under the `atime`
    /// setting, as far as its attributes at open tell (decision 0061): always under
    /// strictatime, never under noatime; under relatime when the atime is not later than the
    /// mtime or the ctime, or is a day old, and only until a read through `f` asked.
    pub fn atime_due(&self, f: &File) -> bool {
        self.atime_rule(f, false)
    }

    /// `atime_due`, where under relatime a handle open for writing too always asks at its
    /// first read (its own writes may have moved the mtime since open).
    pub(crate) fn atime_rule(&self, f: &File, after_own_writes: bool) -> bool {
        let rule = self.config().atime;
        if f.0.inode.kind != FileKind::File || !f.readable() {
            return false;
        }
        match rule {
            Atime::Noatime => false,
            Atime::Strictatime => true,
            Atime::Relatime => {
                if f.0.atime_checked.load(Ordering::Acquire) {
                    return false;
                }
                let i = &f.0.inode;
                let t = |ts: eddy_proto::Timespec| (ts.sec, ts.nsec);
                (after_own_writes && f.writable())
                    || rule.due(
                        t(i.atime),
                        t(i.mtime),
                        t(i.ctime),
                        eddy_proto::Timespec::now().sec,
                    )
            }
        }
    }
}
