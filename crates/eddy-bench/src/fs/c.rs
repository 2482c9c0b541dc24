//! `Fs` over libeddy's C interface (crates/eddy-c, decision 0066): the workers' data and
//! namespace calls go through the `extern "C"` functions a C program calls (handles, raw
//! buffers, negative errno), so that `c:STATE` measures the C library beside the Rust one
//! (`eddy:STATE`) in the same run. What the C interface does not offer (setting times,
//! statfs, the permission check before a run) goes through the client library.

use super::{EddyFs, Entry, Fs, Meta, OpenMode};
use eddy::{eddy_conn_t, eddy_dirent, eddy_file_t, eddy_stat, EDDY_NAME_MAX};
use std::ffi::{CStr, CString};
use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const FILE_MODE: u32 = 0o644;
const DIR_MODE: u32 = 0o755;
/// Entries asked for per `eddy_readdir` call.
const PAGE: usize = 256;

/// A deployment's namespace, through libeddy.
pub struct CFs {
    conn: eddy_conn_t,
    lib: EddyFs,
}

/// A failed call: its errno, with libeddy's message.
fn err(rc: i64) -> io::Error {
    // SAFETY: never NULL, valid until the next call on this thread.
    let msg = unsafe { CStr::from_ptr(eddy::eddy_last_error()) }
        .to_string_lossy()
        .into_owned();
    let errno = i32::try_from(-rc).unwrap_or(libc::EIO);
    io::Error::new(
        io::Error::from_raw_os_error(errno).kind(),
        format!("{msg} (errno {errno})"),
    )
}

fn check(rc: i64) -> io::Result<i64> {
    if rc < 0 {
        Err(err(rc))
    } else {
        Ok(rc)
    }
}

fn cpath(path: &Path) -> io::Result<CString> {
    let s = path.to_str().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not valid UTF-8", path.display()),
        )
    })?;
    CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a path"))
}

fn meta_of(st: &eddy_stat) -> Meta {
    let kind = st.mode & libc::S_IFMT;
    Meta {
        is_dir: kind == libc::S_IFDIR,
        is_file: kind == libc::S_IFREG,
        len: st.size,
        mtime: UNIX_EPOCH
            + Duration::new(
                st.mtime_sec.max(0).unsigned_abs(),
                st.mtime_nsec.min(999_999_999),
            ),
    }
}

impl CFs {
    /// Connects to the deployment whose state directory is `state`.
    pub fn connect(state: &Path) -> anyhow::Result<CFs> {
        let lib = EddyFs::connect(state)?;
        let s = cpath(state)?;
        let mut conn = 0;
        // SAFETY: a C string and a place for the handle.
        let rc = unsafe { eddy::eddy_connect(s.as_ptr(), &mut conn) };
        check(rc.into()).map_err(|e| anyhow::anyhow!("libeddy: {e}"))?;
        Ok(CFs { conn, lib })
    }
}

impl Drop for CFs {
    fn drop(&mut self) {
        eddy::eddy_disconnect(self.conn);
    }
}

impl Fs for CFs {
    type File = eddy_file_t;

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<eddy_file_t> {
        let flags = match mode {
            OpenMode::Read => libc::O_RDONLY,
            OpenMode::Write => libc::O_WRONLY | libc::O_CREAT,
            OpenMode::CreateNew => libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            OpenMode::Truncate => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        };
        let p = cpath(path)?;
        let mut f = 0;
        // SAFETY: a C string and a place for the handle.
        check(unsafe { eddy::eddy_open(self.conn, p.as_ptr(), flags, FILE_MODE, &mut f) }.into())?;
        Ok(f)
    }

    fn write_all_at(&self, f: &eddy_file_t, buf: &[u8], off: u64) -> io::Result<()> {
        // SAFETY: `buf` is `buf.len()` readable bytes.
        let n = check(unsafe { eddy::eddy_pwrite(*f, buf.as_ptr().cast(), buf.len(), off) })?;
        if n as usize != buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("wrote {n} of {} bytes", buf.len()),
            ));
        }
        Ok(())
    }

    fn read_exact_at(&self, f: &eddy_file_t, buf: &mut [u8], off: u64) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let at = off + done as u64;
            let rest = &mut buf[done..];
            // SAFETY: `rest` is `rest.len()` writable bytes.
            let n =
                check(unsafe { eddy::eddy_pread(*f, rest.as_mut_ptr().cast(), rest.len(), at) })?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("end of file at {at}"),
                ));
            }
            done += n as usize;
        }
        Ok(())
    }

    fn read_to_end(&self, f: &eddy_file_t, buf: &mut Vec<u8>) -> io::Result<usize> {
        let mut st = eddy_stat::default();
        // SAFETY: a place for the attributes.
        check(unsafe { eddy::eddy_fstat(*f, &mut st) }.into())?;
        let size = usize::try_from(st.size)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
        let start = buf.len();
        buf.resize(start + size, 0);
        let rest = &mut buf[start..];
        // SAFETY: `rest` is `size` writable bytes.
        let n = unsafe { eddy::eddy_pread(*f, rest.as_mut_ptr().cast(), size, 0) };
        buf.truncate(start + usize::try_from(n).unwrap_or(0));
        check(n).map(|n| n as usize)
    }

    fn fsync(&self, f: &eddy_file_t) -> io::Result<()> {
        check(eddy::eddy_fsync(*f).into()).map(|_| ())
    }

    fn close(&self, f: eddy_file_t) -> io::Result<()> {
        check(eddy::eddy_close(f).into()).map(|_| ())
    }

    fn stat(&self, path: &Path) -> io::Result<Meta> {
        let p = cpath(path)?;
        let mut st = eddy_stat::default();
        // SAFETY: a C string and a place for the attributes.
        check(unsafe { eddy::eddy_stat(self.conn, p.as_ptr(), &mut st) }.into())?;
        Ok(meta_of(&st))
    }

    fn unlink(&self, path: &Path) -> io::Result<()> {
        let p = cpath(path)?;
        // SAFETY: a C string.
        check(unsafe { eddy::eddy_unlink(self.conn, p.as_ptr()) }.into()).map(|_| ())
    }

    fn mkdir(&self, path: &Path) -> io::Result<()> {
        let p = cpath(path)?;
        // SAFETY: a C string.
        check(unsafe { eddy::eddy_mkdir(self.conn, p.as_ptr(), DIR_MODE) }.into()).map(|_| ())
    }

    fn rmdir(&self, path: &Path) -> io::Result<()> {
        let p = cpath(path)?;
        // SAFETY: a C string.
        check(unsafe { eddy::eddy_rmdir(self.conn, p.as_ptr()) }.into()).map(|_| ())
    }

    fn readdir(&self, path: &Path) -> io::Result<Vec<Entry>> {
        let p = cpath(path)?;
        let blank = eddy_dirent {
            name: [0; EDDY_NAME_MAX],
            mode: 0,
            reserved: 0,
            ino: 0,
            size: 0,
        };
        let mut page = vec![blank; PAGE];
        let mut out = Vec::new();
        let mut after: Option<CString> = None;
        loop {
            let a = after.as_ref().map_or(std::ptr::null(), |a| a.as_ptr());
            // SAFETY: C strings and `PAGE` writable entries.
            let n = check(unsafe {
                eddy::eddy_readdir(self.conn, p.as_ptr(), a, page.as_mut_ptr(), PAGE)
            })?;
            if n == 0 {
                return Ok(out);
            }
            for e in &page[..n as usize] {
                // SAFETY: NUL-terminated by the library.
                let name = unsafe { CStr::from_ptr(e.name.as_ptr()) };
                let kind = e.mode & libc::S_IFMT;
                out.push(Entry {
                    name: name.to_string_lossy().into_owned(),
                    is_dir: kind == libc::S_IFDIR,
                    meta: None,
                });
                after = Some(name.to_owned());
            }
        }
    }

    fn set_mtime(&self, path: &Path, when: SystemTime) -> io::Result<()> {
        self.lib.set_mtime(path, when)
    }

    fn set_xattr(&self, path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
        let p = cpath(path)?;
        let n = CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a name"))?;
        // SAFETY: C strings and `value.len()` readable bytes.
        check(
            unsafe {
                eddy::eddy_setxattr(
                    self.conn,
                    p.as_ptr(),
                    n.as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    0,
                )
            }
            .into(),
        )
        .map(|_| ())
    }

    fn check_writable(&self, dir: &Path) -> io::Result<()> {
        self.lib.check_writable(dir)
    }

    fn avail_bytes(&self, dir: &Path) -> io::Result<Option<u64>> {
        self.lib.avail_bytes(dir)
    }
}
