//! `Fs` over the Eddy client library: one runtime and one `Client` per process, every
//! operation driven on the calling thread (`Driver`, whose keeper drives the runtime between
//! operations), so the workloads measure the library without a kernel in the path.

use super::{Entry, Fs, Meta, OpenMode};
use eddy_client::{Client, Creds, File};
use eddy_config::Deployment;
use eddy_proto::{Errno, FileKind, Inode, SetAttr, SetTime, Timespec};
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The deployment file in a state directory, as `eddy start` writes it.
const DEPLOYMENT_FILE: &str = "deployment.toml";
/// What `eddy stop` renames it to.
const STOPPED_FILE: &str = "deployment.stopped.toml";
/// Mode of the files and directories the benchmark creates.
const FILE_MODE: u32 = 0o644;
const DIR_MODE: u32 = 0o755;

/// A deployment's namespace, through the client library.
pub struct EddyFs {
    /// The client's runtime, driven by the calls and, between them, by its keeper thread:
    /// a lease's recall is answered while the rank waits for the others (decision 0075).
    rt: std::sync::Arc<eddy_client::driver::Driver>,
    client: Client,
    creds: Creds,
    state: PathBuf,
}

fn errno(e: Errno) -> io::Error {
    io::Error::from(e)
}

/// Namespace paths are UTF-8 strings.
fn npath(path: &Path) -> io::Result<&str> {
    path.to_str().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not valid UTF-8", path.display()),
        )
    })
}

fn to_system_time(t: Timespec) -> SystemTime {
    let d = Duration::new(t.sec.unsigned_abs(), t.nsec);
    if t.sec >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH - d
    }
}

fn to_timespec(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec {
            sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nsec: d.subsec_nanos(),
        },
        Err(_) => Timespec { sec: 0, nsec: 0 },
    }
}

/// Loads the deployment of a state directory, saying clearly why there is none.
pub fn load_deployment(state: &Path) -> anyhow::Result<Deployment> {
    let file = state.join(DEPLOYMENT_FILE);
    if file.exists() {
        return Deployment::load(&file)
            .map_err(|e| anyhow::anyhow!("cannot load {}: {e}", file.display()));
    }
    if state.join(STOPPED_FILE).exists() {
        anyhow::bail!(
            "the deployment in {} is stopped (eddy stop was run); start it again with `eddy start`",
            state.display()
        );
    }
    anyhow::bail!(
        "no Eddy deployment is running in {} ({} does not exist): give the --state directory \
         of `eddy start`",
        state.display(),
        file.display()
    )
}

impl EddyFs {
    /// Connects to the deployment whose state directory is `state`.
    pub fn connect(state: &Path) -> anyhow::Result<EddyFs> {
        let dep = load_deployment(state)?;
        let rt = eddy_client::driver::Driver::runtime()
            .and_then(|rt| eddy_client::driver::Driver::start(rt, "eddy-bench", || {}))
            .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
        let client = rt.drive(Client::connect(dep)).map_err(|e| {
            anyhow::anyhow!(
                "cannot reach the Eddy deployment in {}: {e}",
                state.display()
            )
        })?;
        Ok(EddyFs {
            rt,
            client,
            creds: Creds::current(),
            state: state.to_path_buf(),
        })
    }

    /// The state directory this file system was reached through.
    pub fn state(&self) -> &Path {
        &self.state
    }

    /// What every daemon counts of the I/O it served (`eddy stats --json`), by daemon id;
    /// fails if one does not answer.
    pub fn daemon_stats(&self) -> anyhow::Result<Vec<eddy_proto::stats::DaemonStats>> {
        let mut out = Vec::new();
        for (id, r) in self.rt.drive(self.client.daemon_stats()) {
            out.push(r.map_err(|e| anyhow::anyhow!("daemon {id} gave no statistics: {e}"))?);
        }
        out.sort_by_key(|s| s.daemon);
        Ok(out)
    }

    fn run<T>(&self, f: impl Future<Output = Result<T, Errno>>) -> io::Result<T> {
        self.rt.drive(f).map_err(errno)
    }

    fn inode(&self, path: &Path) -> io::Result<Inode> {
        let p = npath(path)?;
        self.run(self.client.stat(p))
    }

    /// May the caller add entries to a directory with this inode? (W and X of its class.)
    fn may_write(&self, dir: &Inode) -> bool {
        let c = self.creds;
        if c.uid == 0 || !c.enforce {
            return true;
        }
        let bits = if dir.uid == c.uid {
            dir.mode >> 6
        } else if dir.gid == c.gid {
            dir.mode >> 3
        } else {
            dir.mode
        };
        bits & 0o3 == 0o3
    }
}

impl Fs for EddyFs {
    type File = File;

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<File> {
        let flags = match mode {
            OpenMode::Read => libc::O_RDONLY,
            OpenMode::Write => libc::O_WRONLY | libc::O_CREAT,
            OpenMode::CreateNew => libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            OpenMode::Truncate => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        };
        let p = npath(path)?;
        self.run(self.client.open(p, flags, FILE_MODE, self.creds))
    }

    fn write_all_at(&self, f: &File, buf: &[u8], off: u64) -> io::Result<()> {
        let n = self.run(self.client.pwrite(f, off, buf))?;
        if n != buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("wrote {n} of {} bytes", buf.len()),
            ));
        }
        Ok(())
    }

    fn read_exact_at(&self, f: &File, buf: &mut [u8], off: u64) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let at = off + done as u64;
            let n = self.run(self.client.pread_into(f, at, &mut buf[done..]))?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("end of file at {at}"),
                ));
            }
            done += n;
        }
        Ok(())
    }

    /// Reads up to the size the file had at open (as a kernel read would, from the cached
    /// attributes), in one call.
    fn read_to_end(&self, f: &File, buf: &mut Vec<u8>) -> io::Result<usize> {
        let size = usize::try_from(f.inode().size)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
        if size == 0 {
            return Ok(0);
        }
        let start = buf.len();
        buf.resize(start + size, 0);
        let n = self.run(self.client.pread_into(f, 0, &mut buf[start..]));
        buf.truncate(start + n.as_ref().map_or(0, |n| *n));
        n
    }

    fn fsync(&self, f: &File) -> io::Result<()> {
        self.run(self.client.fsync(f))
    }

    fn close(&self, f: File) -> io::Result<()> {
        self.run(self.client.close(&f))
    }

    fn stat(&self, path: &Path) -> io::Result<Meta> {
        Ok(meta_of(&self.inode(path)?))
    }

    fn unlink(&self, path: &Path) -> io::Result<()> {
        let p = npath(path)?;
        self.run(self.client.unlink(p, self.creds))
    }

    fn mkdir(&self, path: &Path) -> io::Result<()> {
        let p = npath(path)?;
        self.run(self.client.mkdir(p, DIR_MODE, self.creds))
            .map(|_| ())
    }

    fn rmdir(&self, path: &Path) -> io::Result<()> {
        let p = npath(path)?;
        self.run(self.client.rmdir(p, self.creds))
    }

    fn readdir(&self, path: &Path) -> io::Result<Vec<Entry>> {
        let p = npath(path)?;
        let mut reader = self.client.readdir(p, None).map_err(errno)?;
        let mut out = Vec::new();
        while let Some(page) = self.run(reader.next_page())? {
            out.extend(page.into_iter().map(|e| Entry {
                is_dir: e.inode.kind == FileKind::Dir,
                // A symlink's own attributes are not what stat (which follows it) returns.
                meta: (e.inode.kind != FileKind::Symlink).then(|| meta_of(&e.inode)),
                name: e.name,
            }));
        }
        Ok(out)
    }

    fn set_mtime(&self, path: &Path, when: SystemTime) -> io::Result<()> {
        let p = npath(path)?;
        let attr = SetAttr {
            mtime: Some(SetTime::At(to_timespec(when))),
            ..SetAttr::default()
        };
        self.run(self.client.setattr(p, attr, self.creds))
            .map(|_| ())
    }

    fn set_xattr(&self, path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
        let p = npath(path)?;
        self.run(
            self.client
                .setxattr(p, name, value, eddy_client::XattrSet::Any, self.creds),
        )
    }

    fn check_writable(&self, dir: &Path) -> io::Result<()> {
        let i = self.inode(dir)?;
        if self.may_write(&i) {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "mode {:o}, owner {}:{}, you are {}:{}",
                    i.mode, i.uid, i.gid, self.creds.uid, self.creds.gid
                ),
            ))
        }
    }

    fn avail_bytes(&self, _dir: &Path) -> io::Result<Option<u64>> {
        let s = self.run(self.client.statfs())?;
        Ok((s.total_bytes > 0).then_some(s.avail_bytes))
    }
}

/// The workloads' view of an inode.
fn meta_of(i: &eddy_client::Inode) -> Meta {
    Meta {
        is_dir: i.kind == FileKind::Dir,
        is_file: i.kind == FileKind::File,
        len: i.size,
        mtime: to_system_time(i.mtime),
    }
}
