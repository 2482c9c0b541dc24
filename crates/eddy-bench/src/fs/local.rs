//! `Fs` over std::fs: any mounted directory (raw storage, the FUSE mount, ...).

use super::{Entry, Fs, Meta, OpenMode};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::SystemTime;

/// The local file system, through the kernel.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalFs;

fn cpath(path: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

impl Fs for LocalFs {
    type File = File;

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<File> {
        let mut o = OpenOptions::new();
        match mode {
            OpenMode::Read => o.read(true),
            OpenMode::Write => o.write(true).create(true).truncate(false),
            OpenMode::CreateNew => o.write(true).create_new(true),
            OpenMode::Truncate => o.write(true).create(true).truncate(true),
        };
        o.open(path)
    }

    fn write_all_at(&self, f: &File, buf: &[u8], off: u64) -> io::Result<()> {
        f.write_all_at(buf, off)
    }

    fn read_exact_at(&self, f: &File, buf: &mut [u8], off: u64) -> io::Result<()> {
        f.read_exact_at(buf, off)
    }

    fn read_to_end(&self, mut f: &File, buf: &mut Vec<u8>) -> io::Result<usize> {
        f.read_to_end(buf)
    }

    fn fsync(&self, f: &File) -> io::Result<()> {
        f.sync_all()
    }

    fn close(&self, f: File) -> io::Result<()> {
        drop(f);
        Ok(())
    }

    fn stat(&self, path: &Path) -> io::Result<Meta> {
        let md = fs::metadata(path)?;
        Ok(Meta {
            is_dir: md.is_dir(),
            is_file: md.is_file(),
            len: md.len(),
            mtime: md.modified()?,
        })
    }

    fn unlink(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn mkdir(&self, path: &Path) -> io::Result<()> {
        fs::create_dir(path)
    }

    fn rmdir(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir(path)
    }

    fn readdir(&self, path: &Path) -> io::Result<Vec<Entry>> {
        fs::read_dir(path)?
            .map(|e| {
                let e = e?;
                Ok(Entry {
                    name: e.file_name().to_string_lossy().into_owned(),
                    is_dir: e.file_type()?.is_dir(),
                    meta: None,
                })
            })
            .collect()
    }

    fn set_mtime(&self, path: &Path, when: SystemTime) -> io::Result<()> {
        OpenOptions::new()
            .write(true)
            .open(path)?
            .set_modified(when)
    }

    fn set_xattr(&self, path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
        let c = cpath(path)?;
        let n = std::ffi::CString::new(name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: c and n are valid NUL-terminated strings, value a valid buffer of its length.
        let rc = unsafe {
            libc::setxattr(
                c.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn check_writable(&self, dir: &Path) -> io::Result<()> {
        let c = cpath(dir)?;
        // SAFETY: c is a valid NUL-terminated string.
        if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn avail_bytes(&self, dir: &Path) -> io::Result<Option<u64>> {
        let c = cpath(dir)?;
        // SAFETY: statvfs is plain data, for which all zeros is a valid value.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: c is valid and st is a properly sized out-parameter.
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 || st.f_blocks == 0 {
            return Ok(None); // no statfs, or the file system does not report its size
        }
        // The statvfs field types differ between platforms; on 64-bit Linux they are u64.
        #[allow(clippy::useless_conversion)]
        let avail = u64::from(st.f_bavail).saturating_mul(u64::from(st.f_frsize));
        Ok(Some(avail))
    }

    fn remove_tree(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir_all(path)
    }
}
