//! The backend side of the tier: mapping linked namespace paths to backend paths, and running
//! every backend operation on a pool of its own threads under a deadline. A hung backend (a
//! parallel file system that stopped answering) then holds at most `backend_threads`
//! threads, and every request that needs it fails with EIO naming the backend path within
//! `Config::backend_deadline`, while the daemon keeps serving everything else.

use eddy_config::{Config, Link};
use eddy_proto::{Errno, Timespec};
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod queues;

pub use queues::{CallCounts, Ticket};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The longest path handed to the kernel in one call (PATH_MAX counts the NUL).
const KERNEL_PATH: usize = libc::PATH_MAX as usize - 1;
/// How much of a long path one hop of `reach` opens.
const HOP: usize = 3072;

/// A backend path the kernel takes in one call, however long the path it stands for: for a
/// path past PATH_MAX, `/proc/self/fd/N/rest`, where N is a directory descriptor (`O_PATH`)
/// of an ancestor, opened hop by hop, each relative to the last. The descriptors live as long
/// as the `Reach`: use its path within the backend operation that made it. Resolution is
/// the kernel's own, component by component, as for the path itself (symlinks included).
pub struct Reach {
    _dirs: Vec<std::os::fd::OwnedFd>,
    path: PathBuf,
}

impl Reach {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A `Reach` of `p`, or `None` when one of its directories does not exist (ENOENT or
/// ENOTDIR on the way, as the operation itself would have met): for the operations that take
/// a missing entry as an answer.
pub fn reach_existing(p: &Path) -> std::io::Result<Option<Reach>> {
    match reach(p) {
        Ok(r) => Ok(Some(r)),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A `Reach` of `p`: `p` itself when it fits in PATH_MAX.
pub fn reach(p: &Path) -> std::io::Result<Reach> {
    use std::os::fd::{AsFd, AsRawFd};
    use std::os::unix::ffi::OsStrExt;
    let bytes = p.as_os_str().as_bytes();
    if bytes.len() <= KERNEL_PATH {
        return Ok(Reach {
            _dirs: Vec::new(),
            path: p.to_owned(),
        });
    }
    let mut dirs: Vec<std::os::fd::OwnedFd> = Vec::new();
    let mut rest = bytes;
    loop {
        let via = dirs
            .last()
            .map(|d| format!("/proc/self/fd/{}/", d.as_raw_fd()));
        if via.as_ref().map_or(0, String::len) + rest.len() <= KERNEL_PATH {
            let mut path = via.unwrap_or_default().into_bytes();
            path.extend_from_slice(rest);
            return Ok(Reach {
                _dirs: dirs,
                path: PathBuf::from(std::ffi::OsStr::from_bytes(&path)),
            });
        }
        // The next hop: the longest run of whole components within HOP bytes.
        let cut = rest[..HOP.min(rest.len())]
            .iter()
            .rposition(|&b| b == b'/')
            .filter(|&i| i > 0)
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENAMETOOLONG))?;
        let hop = std::ffi::OsStr::from_bytes(&rest[..cut]);
        let flags = nix::fcntl::OFlag::O_PATH
            | nix::fcntl::OFlag::O_DIRECTORY
            | nix::fcntl::OFlag::O_CLOEXEC;
        let mode = nix::sys::stat::Mode::empty();
        let fd = match dirs.last() {
            Some(d) => nix::fcntl::openat(d.as_fd(), hop, flags, mode),
            None => nix::fcntl::openat(nix::fcntl::AT_FDCWD, hop, flags, mode),
        }
        .map_err(std::io::Error::from)?;
        dirs.push(fd);
        rest = &rest[cut + 1..];
    }
}

/// The linked prefixes and the threads that reach their backends.
pub struct Backend {
    /// What the tier read from and wrote to the backend (decision 0032).
    pub io: Arc<crate::stats::BackendCounters>,
    /// Its data calls, always counted (decision 0074).
    pub calls: Arc<CallCounts>,
    links: Vec<Link>,
    /// Every link's backends and the placement rules (decision 0073); a link with one
    /// backend has its own directory only.
    pub placer: eddy_config::Placer,
    /// Per backend (in the placer's order of links, then of their backends): what the tier
    /// placed there, read and wrote back.
    pub per_store: Vec<crate::stats::StoreCounters>,
    /// The same backends, flattened: (prefix, backend); a link's are consecutive, the
    /// default first.
    stores: Vec<(String, eddy_config::Store)>,
    jobs: Mutex<mpsc::Sender<Job>>,
    deadline: Duration,
    /// The per-object queues of reads and writes; `None` with `backend_merge_window_us` 0.
    queues: Option<queues::Queues>,
    /// How long a queued request may wait for its turn before its call's deadline starts.
    window: Duration,
}

/// Reads up to `len` bytes at `offset` of the backend file at `p`; short at its end, empty
/// if it does not exist.
fn read_range(p: &Path, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let Some(reached) = reach_existing(p)? else {
        return Ok(Vec::new());
    };
    let f = match std::fs::File::open(reached.path()) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        match f.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(done);
    Ok(buf)
}

/// A write-back handing its writes over (`Backend::hold`); dropped: they go.
pub struct Held<'a> {
    backend: &'a Backend,
    file: &'a Arc<std::fs::File>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(q) = &self.backend.queues {
            q.kick_file(self.file);
        }
    }
}

/// A write handed to the backend: done already (no queues), or waiting in its file's queue.
pub enum Pending {
    Done,
    Queued(Ticket),
}

/// What a backend stat tells the tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendStat {
    pub kind: BackendKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    /// Device number of a device node, 0 otherwise.
    pub rdev: u64,
    /// Link count (for a directory: 2 and its subdirectories).
    pub nlink: u64,
    /// The backend's device and inode numbers: names of one backend file share them.
    pub dev: u64,
    pub ino: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    File,
    Dir,
    Symlink,
    /// FIFOs, sockets, devices: imported as metadata entries of that kind.
    Special(eddy_proto::FileKind),
}

impl BackendStat {
    pub fn of(m: &std::fs::Metadata) -> BackendStat {
        let ft = m.file_type();
        let kind = if ft.is_file() {
            BackendKind::File
        } else if ft.is_dir() {
            BackendKind::Dir
        } else if ft.is_symlink() {
            BackendKind::Symlink
        } else {
            use std::os::unix::fs::FileTypeExt;
            BackendKind::Special(if ft.is_fifo() {
                eddy_proto::FileKind::Fifo
            } else if ft.is_socket() {
                eddy_proto::FileKind::Socket
            } else if ft.is_char_device() {
                eddy_proto::FileKind::CharDevice
            } else {
                eddy_proto::FileKind::BlockDevice
            })
        };
        let ts = |sec: i64, nsec: i64| Timespec {
            sec,
            nsec: nsec.clamp(0, 999_999_999) as u32,
        };
        BackendStat {
            kind,
            mode: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
            size: if ft.is_dir() { 0 } else { m.size() },
            atime: ts(m.atime(), m.atime_nsec()),
            mtime: ts(m.mtime(), m.mtime_nsec()),
            ctime: ts(m.ctime(), m.ctime_nsec()),
            rdev: m.rdev(),
            nlink: m.nlink(),
            dev: m.dev(),
            ino: m.ino(),
        }
    }
}

/// A backend entry as the import needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendEntry {
    pub stat: BackendStat,
    pub target: Option<String>,
}

/// lstat (and readlink for a symlink) of a backend path; `None` if it does not exist.
pub fn read_entry(p: &Path) -> std::io::Result<Option<BackendEntry>> {
    let Some(reached) = reach_existing(p)? else {
        return Ok(None);
    };
    let p = reached.path();
    let m = match std::fs::symlink_metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let stat = BackendStat::of(&m);
    let target = if stat.kind == BackendKind::Symlink {
        Some(std::fs::read_link(p)?.to_string_lossy().into_owned())
    } else {
        None
    };
    Ok(Some(BackendEntry { stat, target }))
}

/// Errors of a reachable backend keep their errno (EACCES, EROFS, ENOSPC...); those that say
/// the backend is unreachable become EIO. Either way the message names the backend path.
pub fn backend_err(e: &std::io::Error, what: &str, path: &Path) -> Errno {
    let unreachable = matches!(
        e.raw_os_error(),
        Some(libc::ENOTCONN) | Some(libc::ETIMEDOUT) | Some(libc::ESTALE) | Some(libc::EHOSTDOWN)
    );
    let errno = if unreachable {
        libc::EIO
    } else {
        e.raw_os_error().unwrap_or(libc::EIO)
    };
    Errno::new(errno, format!("backend {what} {}: {e}", path.display()))
}

impl Backend {
    /// Starts the backend threads (none are started when nothing is linked).
    pub fn new(config: &Config) -> Arc<Backend> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let threads = if config.links.is_empty() {
            0
        } else {
            config.backend_threads
        };
        for i in 0..threads {
            let rx = Arc::clone(&rx);
            let spawned = std::thread::Builder::new()
                .name(format!("eddyd-backend-{i}"))
                .spawn(move || loop {
                    let job = match rx.lock() {
                        Ok(guard) => guard.recv(),
                        Err(poisoned) => poisoned.into_inner().recv(),
                    };
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                });
            if let Err(e) = spawned {
                tracing::error!("cannot start backend thread {i}: {e}");
            }
        }
        // The configuration was checked at start (`Config::validate`); should it not
        // compile here, each link keeps its own directory only.
        let placer = config.placer().unwrap_or_else(|e| {
            tracing::error!(
                "backends and placement rules: {e}; each link keeps its own backend only"
            );
            eddy_config::Placer::links_only(&config.links)
        });
        let per_store = placer
            .links()
            .flat_map(|(_, stores)| stores.iter())
            .map(crate::stats::StoreCounters::new)
            .collect();
        let stores = placer
            .links()
            .flat_map(|(prefix, stores)| stores.iter().map(|s| (prefix.to_string(), s.clone())))
            .collect();
        let io = Arc::new(crate::stats::BackendCounters::new(config.stats_counting));
        let calls = Arc::new(CallCounts::default());
        let window = Duration::from_micros(config.backend_merge_window_us);
        let queues = (threads > 0 && !window.is_zero()).then(|| {
            queues::Queues::new(
                window,
                config.backend_merge_max_bytes,
                threads,
                tx.clone(),
                Arc::clone(&calls),
                Arc::clone(&io),
            )
        });
        Arc::new(Backend {
            io,
            calls,
            stores,
            placer,
            per_store,
            links: config.links.clone(),
            jobs: Mutex::new(tx),
            deadline: config.backend_deadline(),
            queues,
            window,
        })
    }

    /// Whether anything is linked.
    pub fn is_active(&self) -> bool {
        !self.links.is_empty()
    }

    /// The link covering a normalised namespace path.
    pub fn link_for(&self, path: &str) -> Option<&Link> {
        self.links.iter().find(|l| l.covers(path))
    }

    /// The backend path of a normalised namespace path, if it is linked.
    pub fn resolve(&self, path: &str) -> Option<PathBuf> {
        self.link_for(path).map(|l| l.backend_path(path))
    }

    /// Like `resolve`, for a path a client said is linked: EINVAL if it is not.
    pub fn resolve_linked(&self, path: &str) -> Result<PathBuf, Errno> {
        self.resolve(path)
            .ok_or_else(|| Errno::einval(format!("{path} is not under a linked prefix")))
    }

    /// The backends of the link covering `norm` (indexes into every link's backends, the
    /// default first) and the link's prefix.
    pub fn stores_for(&self, norm: &str) -> Option<(&str, std::ops::Range<usize>)> {
        let link = self.link_for(norm)?;
        let start = self.stores.iter().position(|(p, _)| *p == link.prefix)?;
        let len = self.stores[start..]
            .iter()
            .take_while(|(p, _)| *p == link.prefix)
            .count();
        Some((link.prefix.as_str(), start..start + len))
    }

    /// Whether the link covering `norm` has several backends (decision 0073).
    pub fn is_multi(&self, norm: &str) -> bool {
        self.stores_for(norm).is_some_and(|(_, r)| r.len() > 1)
    }

    /// Whether backend `i` is one of several of its link.
    pub fn store_is_multi(&self, i: usize) -> bool {
        self.placer.is_multi(&self.stores[i].0)
    }

    /// Backend `i` (an index of `stores_for`).
    pub fn store(&self, i: usize) -> &eddy_config::Store {
        &self.stores[i].1
    }

    /// The path in backend `i` of the normalised namespace path `norm`.
    pub fn store_path(&self, i: usize, norm: &str) -> PathBuf {
        let (prefix, store) = &self.stores[i];
        store.path_of(prefix, norm)
    }

    /// How one names backend `i` in errors: its name, kind and directory.
    pub fn store_label(&self, i: usize) -> String {
        let s = self.store(i);
        let kind = if s.kind.is_empty() {
            String::new()
        } else {
            format!("{}, ", s.kind)
        };
        format!("backend {} ({kind}{})", s.name, s.path.display())
    }

    /// The backends of `norm`'s link holding an entry at `norm` (lstat in each, in their
    /// order, on one backend thread), with its path there; empty when none does (or `norm`
    /// is not linked).
    pub fn holders(&self, norm: &str) -> Result<Vec<(usize, PathBuf)>, Errno> {
        let Some((_, range)) = self.stores_for(norm) else {
            return Ok(Vec::new());
        };
        let paths: Vec<(usize, PathBuf)> = range.map(|i| (i, self.store_path(i, norm))).collect();
        let first = paths[0].1.clone();
        self.run("lstat", &first, move || {
            let mut out = Vec::new();
            for (i, p) in paths {
                if reach_existing(&p)?.is_some_and(|r| std::fs::symlink_metadata(r.path()).is_ok())
                {
                    out.push((i, p));
                }
            }
            Ok(out)
        })
    }

    /// Every backend's figures (decision 0073), without the dirty bytes (the tier's).
    pub fn store_stats(&self) -> Vec<eddy_proto::stats::StoreStats> {
        self.stores
            .iter()
            .zip(&self.per_store)
            .map(|((prefix, _), c)| c.snapshot(prefix))
            .collect()
    }

    /// Runs `f` on a backend thread and waits at most the backend deadline for it. `what`
    /// and `path` name the operation in errors.
    pub fn run<T, F>(&self, what: &str, path: &Path, f: F) -> Result<T, Errno>
    where
        T: Send + 'static,
        F: FnOnce() -> std::io::Result<T> + Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        let sent = match self.jobs.lock() {
            Ok(jobs) => jobs.send(job).is_ok(),
            Err(poisoned) => poisoned.into_inner().send(job).is_ok(),
        };
        if !sent {
            return Err(Errno::eio(format!(
                "backend {what} {}: no backend thread is running",
                path.display()
            )));
        }
        match rx.recv_timeout(self.deadline) {
            Ok(result) => result.map_err(|e| backend_err(&e, what, path)),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(Errno::eio(format!(
                "backend {what} {}: no answer within {} ms (is the parallel file system \
                 reachable?)",
                path.display(),
                self.deadline.as_millis()
            ))),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(Errno::eio(format!(
                "backend {what} {}: the backend thread failed",
                path.display()
            ))),
        }
    }

    /// lstat of a backend path and, for a symlink, its target; `None` if it does not exist.
    pub fn entry(&self, path: &Path) -> Result<Option<BackendEntry>, Errno> {
        let p = path.to_owned();
        self.run("lstat", path, move || read_entry(reach(&p)?.path()))
    }

    /// Reads up to `len` bytes at `offset` of a backend file; short at its end, empty if the
    /// file does not exist (a file created in Eddy and not yet written back). Through the
    /// file's queue when there are queues: adjacent reads asked for meanwhile go in one call.
    pub fn read_at(&self, path: &Path, offset: u64, len: usize) -> Result<Vec<u8>, Errno> {
        if let Some(q) = &self.queues {
            let ticket = q.read(path.to_owned(), offset, len, self.deadline);
            return self
                .answer(ticket, "read", path)
                .map_err(|e| Errno::eio(e.msg));
        }
        let p = path.to_owned();
        self.run("read", path, move || read_range(&p, offset, len))
            .inspect(|buf| {
                self.calls.read(1);
                self.io.read(buf.len() as u64, 1);
            })
            .map_err(|e| Errno::eio(e.msg))
    }

    /// The answer of a queued request: it may wait its window and the batches of its file
    /// ahead of it (at most `backend_merge_max_bytes` each), then its call's deadline.
    fn answer(&self, ticket: Ticket, what: &str, path: &Path) -> Result<Vec<u8>, Errno> {
        match ticket.wait(self.window + self.deadline * 2) {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(backend_err(&e, what, path)),
            None => Err(Errno::eio(format!(
                "backend {what} {}: no answer within {} ms (is the parallel file system \
                 reachable?)",
                path.display(),
                (self.window + self.deadline * 2).as_millis()
            ))),
        }
    }

    /// Opens a backend file for writing back, creating it (mode 0600 until finalised) if it
    /// does not exist yet.
    pub fn open_for_flush(&self, path: &Path) -> Result<Arc<std::fs::File>, Errno> {
        let p = path.to_owned();
        self.run("open", path, move || {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(reach(&p)?.path())
                .map(Arc::new)
        })
    }

    /// pwrite of `data` at `offset` into an open backend file, handed to the file's queue
    /// (when there are queues) without waiting: wait for it with `finish`, once the `hold`
    /// on the file is dropped.
    pub fn write_at(
        &self,
        file: &Arc<std::fs::File>,
        path: &Path,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<Pending, Errno> {
        if let Some(q) = &self.queues {
            return Ok(Pending::Queued(q.write(file, offset, data, self.deadline)));
        }
        let f = Arc::clone(file);
        let len = data.len() as u64;
        self.run("write", path, move || {
            use std::os::unix::fs::FileExt;
            f.write_all_at(&data, offset)
        })
        .inspect(|_| {
            self.calls.wrote(1);
            self.io.wrote(len, 1);
        })
        .map(|()| Pending::Done)
    }

    /// Holds the queue of `file`'s writes open while a write-back hands its chunks over
    /// (they go when the queue is full, or all at once when the guard is dropped), however
    /// long it takes to read them.
    pub fn hold<'a>(&'a self, file: &'a Arc<std::fs::File>) -> Held<'a> {
        if let Some(q) = &self.queues {
            q.hold_file(file);
        }
        Held {
            backend: self,
            file,
        }
    }

    /// Waits for a write handed over by `write_at`.
    pub fn finish(&self, pending: Pending, path: &Path) -> Result<(), Errno> {
        match pending {
            Pending::Done => Ok(()),
            Pending::Queued(t) => self.answer(t, "write", path).map(|_| ()),
        }
    }

    /// fsync of an open backend file.
    pub fn sync(&self, file: &Arc<std::fs::File>, path: &Path) -> Result<(), Errno> {
        let f = Arc::clone(file);
        self.run("fsync", path, move || f.sync_all())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_past_path_max_is_reached_hop_by_hop() {
        let top = tempfile::tempdir().unwrap();
        let short = top.path().join("a");
        assert_eq!(reach(&short).unwrap().path(), short.as_path());
        let name = "d".repeat(200);
        let mut deep = top.path().to_path_buf();
        while deep.as_os_str().len() < 9000 {
            deep.push(&name);
            std::fs::create_dir(reach(&deep).unwrap().path()).unwrap();
        }
        let file = deep.join("f");
        let r = reach(&file).unwrap();
        assert!(
            r.path().starts_with("/proc/self/fd"),
            "{}",
            r.path().display()
        );
        assert!(r.path().as_os_str().len() < 4096);
        std::fs::write(r.path(), b"deep").unwrap();
        drop(r);
        let e = read_entry(&file).unwrap().unwrap();
        assert_eq!(e.stat.size, 4);
        assert!(read_entry(&deep.join("missing")).unwrap().is_none());
        // A directory missing on the way: the entry is missing, as the kernel would say.
        let mut lost = top.path().join("nope");
        while lost.as_os_str().len() < 9000 {
            lost.push(&name);
        }
        assert!(reach_existing(&lost).unwrap().is_none());
        assert!(read_entry(&lost).unwrap().is_none());
        // A name longer than a hop cannot be cut: ENAMETOOLONG, as the kernel says.
        let odd = top.path().join("x".repeat(5000));
        let err = reach(&odd).err().unwrap();
        assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG));
    }
}
