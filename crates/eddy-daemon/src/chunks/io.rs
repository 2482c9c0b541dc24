//! Positioned reads that retry (into initialised or uninitialised memory), holes punched
//! (or written as zeros), directory syncs, and the errors of chunk and data file I/O.

use eddy_proto::{Errno, FileId};
use std::fs::File;
use std::io::ErrorKind;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

pub(super) fn io_err(e: &std::io::Error, id: FileId, k: u64) -> Errno {
    Errno::from_io(e, format!("chunk {k} of file {id:032x}"))
}

pub(super) fn file_err(e: &std::io::Error, id: FileId) -> Errno {
    Errno::from_io(e, format!("data file of file {id:032x}"))
}

/// zeros where it cannot.
pub(super) fn punch(f: &File, at: u64, len: u64) -> std::io::Result<()> {
    use nix::fcntl::{fallocate, FallocateFlags};
    let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    let (Ok(off), Ok(n)) = (i64::try_from(at), i64::try_from(len)) else {
        return Err(std::io::Error::from_raw_os_error(libc::EFBIG));
    };
    match fallocate(f, flags, off, n) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EOPNOTSUPP) => {
            let file_len = f.metadata()?.len();
            let end = (at + len).min(file_len);
            let zeros = vec![0u8; 1 << 16];
            let mut pos = at;
            while pos < end {
                let n = ((end - pos) as usize).min(zeros.len());
                f.write_all_at(&zeros[..n], pos)?;
                pos += n as u64;
            }
            Ok(())
        }
        Err(e) => Err(std::io::Error::from_raw_os_error(e as i32)),
    }
}

/// pread until `buf` is full or the file ends; the rest of `buf` is zeroed. Returns the
/// bytes read.
pub(super) fn pread_full(f: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    let mut done = 0usize;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf[done..].fill(0);
    Ok(done)
}

/// pread into uninitialised memory until it is full or the file ends; returns the bytes
/// read (initialised).
pub(super) fn pread_uninit(
    f: &File,
    dst: &mut [MaybeUninit<u8>],
    at: u64,
) -> std::io::Result<usize> {
    let mut done = 0usize;
    while done < dst.len() {
        let Ok(off) = libc::off_t::try_from(at + done as u64) else {
            return Err(std::io::Error::from_raw_os_error(libc::EFBIG));
        };
        let rest = &mut dst[done..];
        // SAFETY: the pointer and length describe `rest`, writable memory we own; pread only
        // writes bytes into it (initialising what it reports).
        let n = unsafe {
            libc::pread(
                f.as_raw_fd(),
                rest.as_mut_ptr().cast::<libc::c_void>(),
                rest.len(),
                off,
            )
        };
        match n {
            0 => break,
            n if n > 0 => done += n as usize,
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(done)
}

pub(super) fn sync_dir(dir: &Path) -> Result<(), Errno> {
    match File::open(dir) {
        Ok(d) => d
            .sync_all()
            .map_err(|e| Errno::from_io(&e, format!("syncing {}", dir.display()))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Errno::from_io(&e, format!("opening {}", dir.display()))),
    }
}
