//! Descriptors of Eddy files. Each gets a real kernel descriptor, a memfd, so numbers never
//! collide with the kernel's. The memfd carries what must survive fork, dup and exec:
//! - its file offset is the Eddy file's offset (the kernel shares it between dup'ed and
//!   inherited descriptors, exactly as for any file);
//! - its contents are a header naming the Eddy path and the open flags (as of open), so that
//!   a program started by exec with such a descriptor (a shell redirection) finds it again at
//!   start; the memfd is then sealed and the descriptor made write-only, so a write that
//!   bypasses the library fails (EPERM) and so does a read (EBADF).
//!
//! Close-on-exec flags are the memfd's own.

use crate::real;
use crate::state::{run, R};
use eddy_client::{DirEntry, DirReader, Errno, File};
use parking_lot::{Mutex, RwLock};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;

const MEMFD_NAME: &[u8] = b"eddy-preload\0";
const MAGIC: &str = "eddy-preload 1\n";

/// A listing under way through a descriptor (readdir or getdents64).
#[derive(Default)]
pub struct Cursor {
    pub reader: Option<DirReader>,
    /// Entries fetched and not yet returned: (name, inode number, d_type).
    pub buf: VecDeque<(String, u64, u8)>,
    /// "." and ".." given; the reader has run dry.
    pub dots: bool,
    pub done: bool,
    /// Entries returned so far (d_off).
    pub pos: i64,
}

/// An open Eddy file or directory: shared by every descriptor dup'ed from the same open.
pub struct Open {
    pub path: String,
    pub flags: AtomicI32,
    /// The client's handle; `None` until first needed (after exec, or after F_SETFL
    /// changed O_APPEND, it is opened again by path).
    file: Mutex<Option<File>>,
    pub is_dir: bool,
    /// Serialises offset updates of read/write/lseek through this open.
    pub io: Mutex<()>,
    pub cursor: Mutex<Cursor>,
    /// Whether this process took record locks through it (released on close).
    pub locked: AtomicBool,
}

impl Open {
    pub fn new(path: String, flags: i32, file: Option<File>, is_dir: bool) -> Open {
        Open {
            path,
            flags: AtomicI32::new(flags),
            file: Mutex::new(file),
            is_dir,
            io: Mutex::new(()),
            cursor: Mutex::new(Cursor::default()),
            locked: AtomicBool::new(false),
        }
    }

    pub fn flags(&self) -> i32 {
        self.flags.load(Ordering::Relaxed)
    }

    /// The client's handle, opened again by path if this process has none yet.
    pub fn file(&self) -> R<File> {
        let mut f = self.file.lock();
        if let Some(file) = f.as_ref() {
            return Ok(file.clone());
        }
        let path = self.path.clone();
        let flags = self.flags() & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
        let creds = crate::state::creds();
        let file = run(move |c| async move { c.open(&path, flags, 0, creds).await })?;
        *f = Some(file.clone());
        Ok(file)
    }

    /// The handle if one is open (for close).
    pub fn take_file(&self) -> Option<File> {
        self.file.lock().take()
    }

    /// The path the open file is reached by now: its handle's, which follows renames and
    /// unlinks through this process (decision 0061), else the one it was opened by.
    pub fn path_now(&self) -> String {
        match self.file.lock().as_ref() {
            Some(f) => f.path().to_string(),
            None => self.path.clone(),
        }
    }

    /// Gives the open a new handle.
    pub fn set_file(&self, f: File) {
        *self.file.lock() = Some(f);
    }

    pub fn reset_file(&self) {
        *self.file.lock() = None;
    }
}

static TABLE: RwLock<Vec<Option<Arc<Open>>>> = parking_lot::const_rwlock(Vec::new());
/// Number of Eddy descriptors: 0 lets every descriptor call through at once.
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// The open behind `fd`, if it is an Eddy descriptor.
pub fn lookup(fd: i32) -> Option<Arc<Open>> {
    if fd < 0 || COUNT.load(Ordering::Acquire) == 0 {
        return None;
    }
    TABLE.read().get(fd as usize).and_then(|o| o.clone())
}

pub fn is_ours(fd: i32) -> bool {
    lookup(fd).is_some()
}

/// Puts `o` at `fd`; returns what was there.
pub fn insert(fd: i32, o: Arc<Open>) -> Option<Arc<Open>> {
    let mut t = TABLE.write();
    let i = fd as usize;
    if t.len() <= i {
        t.resize(i + 1, None);
    }
    let old = t[i].replace(o);
    if old.is_none() {
        COUNT.fetch_add(1, Ordering::AcqRel);
    }
    old
}

pub fn remove(fd: i32) -> Option<Arc<Open>> {
    if fd < 0 || COUNT.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut t = TABLE.write();
    let old = t.get_mut(fd as usize).and_then(|o| o.take());
    if old.is_some() {
        COUNT.fetch_sub(1, Ordering::AcqRel);
    }
    old
}

pub fn lock_for_fork() {
    std::mem::forget(TABLE.write());
}

/// # Safety
/// Only after `lock_for_fork` on this thread.
pub unsafe fn unlock_after_fork() {
    // SAFETY: the caller holds the write lock taken in lock_for_fork.
    unsafe { TABLE.force_unlock_write() };
}

/// A new kernel descriptor for an Eddy open, its header written.
pub fn reserve(path: &str, flags: i32) -> R<i32> {
    let mfd_flags = libc::MFD_ALLOW_SEALING
        | if flags & libc::O_CLOEXEC != 0 {
            libc::MFD_CLOEXEC
        } else {
            0
        };
    // SAFETY: NUL-terminated name.
    let fd = unsafe { libc::syscall(libc::SYS_memfd_create, MEMFD_NAME.as_ptr(), mfd_flags) };
    if fd < 0 {
        return Err(Errno::new(errno(), "reserving a descriptor (memfd_create)"));
    }
    let fd = fd as i32;
    if let Err(e) = write_header(fd, path, flags) {
        // SAFETY: our own descriptor.
        unsafe { real::close(fd) };
        return Err(e);
    }
    write_only(fd, flags & libc::O_CLOEXEC != 0);
    Ok(fd)
}

/// Makes `fd` a write-only description of the same memfd (reopened through /proc), so that a
/// read behind the library's back fails (EBADF) like a write does (EPERM: sealed), instead of
/// returning the header. The number stays (the lowest free one, as open promises). Without
/// /proc the read-write memfd stays.
fn write_only(fd: i32, cloexec: bool) {
    let Ok(proc_path) = std::ffi::CString::new(format!("/proc/self/fd/{fd}")) else {
        return;
    };
    // SAFETY: a NUL-terminated path; descriptors of our own.
    unsafe {
        let w = real::open64(proc_path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC, 0);
        if w < 0 {
            return;
        }
        let keep = if cloexec { libc::O_CLOEXEC } else { 0 };
        real::dup3(w, fd, keep);
        real::close(w);
    }
}

fn write_header(fd: i32, path: &str, flags: i32) -> R<()> {
    let text = format!("{MAGIC}{flags}\n{path}");
    // SAFETY: a buffer of that length.
    let n = unsafe { real::pwrite64(fd, text.as_ptr().cast(), text.len(), 0) };
    if n != text.len() as isize {
        return Err(Errno::new(errno(), "writing a descriptor's header"));
    }
    // Sealed: a program writing to the descriptor behind the library's back (a raw system
    // call, glibc's internal write) gets EPERM rather than a silent success.
    let seals = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: our own descriptor.
    if unsafe { real::fcntl(fd, libc::F_ADD_SEALS, seals as libc::c_ulong) } < 0 {
        return Err(Errno::new(errno(), "sealing a descriptor's header"));
    }
    Ok(())
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// At start: the Eddy descriptors this process inherited through exec (memfds named
/// eddy-preload with a header), entered in the table. Their handles open on first use.
pub fn adopt_inherited() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for e in dir.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        if !target.to_string_lossy().starts_with("/memfd:eddy-preload") {
            continue;
        }
        // The descriptor itself is write-only: the header is read through a new description.
        let Ok(buf) = std::fs::read(e.path()) else {
            continue;
        };
        let Ok(text) = String::from_utf8(buf) else {
            continue;
        };
        let Some(rest) = text.strip_prefix(MAGIC) else {
            continue;
        };
        let Some((flags, path)) = rest.split_once('\n') else {
            continue;
        };
        let Ok(flags) = flags.parse::<i32>() else {
            continue;
        };
        let is_dir = flags & libc::O_DIRECTORY != 0;
        insert(
            fd,
            Arc::new(Open::new(path.to_string(), flags, None, is_dir)),
        );
    }
}

/// The next page of a listing into its cursor; false at the end.
pub fn fill(o: &Open, cur: &mut Cursor) -> R<bool> {
    if !cur.buf.is_empty() {
        return Ok(true);
    }
    if !cur.dots {
        cur.buf.push_back((".".into(), 1, libc::DT_DIR));
        cur.buf.push_back(("..".into(), 1, libc::DT_DIR));
        cur.dots = true;
        return Ok(true);
    }
    if cur.done {
        return Ok(false);
    }
    let reader = match cur.reader.take() {
        Some(r) => r,
        None => {
            let path = o.path.clone();
            run(move |c| async move { c.readdir(&path, None) })?
        }
    };
    let (reader, page) = run(move |_c| async move {
        let mut reader = reader;
        let page = reader.next_page().await;
        Ok((reader, page))
    })?;
    let page: Option<Vec<DirEntry>> = page?;
    cur.reader = Some(reader);
    match page {
        Some(entries) => {
            // Files unlinked or replaced while open live on under a hidden name until their
            // last close (decision 0061): not listed.
            for e in entries
                .into_iter()
                .filter(|e| !eddy_config::is_hidden_orphan(&e.name))
            {
                let t = crate::stat::dtype(e.inode.kind);
                cur.buf.push_back((e.name, e.inode.st_ino(), t));
            }
            Ok(true)
        }
        None => {
            cur.done = true;
            Ok(false)
        }
    }
}

// ---------------------------------------------------------------- the library's own descriptors

/// Descriptors below this bound are tracked (a bit each).
const TRACKED: usize = 65536;
static INTERNAL: [std::sync::atomic::AtomicU64; TRACKED / 64] =
    [const { std::sync::atomic::AtomicU64::new(0) }; TRACKED / 64];
static N_INTERNAL: AtomicUsize = AtomicUsize::new(0);

pub fn internal_opened(fd: i32) {
    if (0..TRACKED as i32).contains(&fd) {
        let (w, b) = (fd as usize / 64, fd as usize % 64);
        if INTERNAL[w].fetch_or(1 << b, Ordering::AcqRel) & (1 << b) == 0 {
            N_INTERNAL.fetch_add(1, Ordering::AcqRel);
        }
    }
}

pub fn internal_closed(fd: i32) {
    if N_INTERNAL.load(Ordering::Acquire) == 0 || !(0..TRACKED as i32).contains(&fd) {
        return;
    }
    let (w, b) = (fd as usize / 64, fd as usize % 64);
    if INTERNAL[w].fetch_and(!(1 << b), Ordering::AcqRel) & (1 << b) != 0 {
        N_INTERNAL.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether `fd` belongs to the library (its runtime or its connections).
pub fn is_internal(fd: i32) -> bool {
    if N_INTERNAL.load(Ordering::Acquire) == 0 || !(0..TRACKED as i32).contains(&fd) {
        return false;
    }
    INTERNAL[fd as usize / 64].load(Ordering::Acquire) & (1 << (fd as usize % 64)) != 0
}

/// In a forked child: the parent's runtime descriptors are of no use here; closed.
pub fn close_internal_after_fork() {
    for (w, word) in INTERNAL.iter().enumerate() {
        let bits = word.swap(0, Ordering::AcqRel);
        for b in 0..64 {
            if bits & (1 << b) != 0 {
                // SAFETY: a descriptor the library made.
                unsafe { real::close((w * 64 + b) as i32) };
            }
        }
    }
    N_INTERNAL.store(0, Ordering::Release);
}

/// Where the library's own descriptors go: well above those programs use.
pub fn high_base() -> i32 {
    static BASE: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *BASE.get_or_init(|| {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: a plain query into a local.
        let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0 {
            r.rlim_cur.min(65536) as i32
        } else {
            1024
        };
        (soft * 3 / 4).max(64)
    })
}
