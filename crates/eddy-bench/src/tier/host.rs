//! What the benchmark asks of the machine: the page cache emptied, free room, the read-ahead
//! of the mount, CPU use by other work, file system types.

use super::{mib, DROP_CACHES};
use anyhow::bail;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Empties the page cache between the sides of a phase.
pub(super) struct PageCache {
    /// Why /proc/sys/vm/drop_caches could not be used (None: it works, or was not tried).
    pub(super) refused: Option<String>,
    /// Where the benchmark's files are, for posix_fadvise when dropping is refused (never the
    /// mount: walking it would touch Eddy).
    pub(super) dirs: Vec<PathBuf>,
}

impl PageCache {
    pub(super) fn drop_all(&mut self) {
        // SAFETY: sync(2) has no arguments and cannot fail.
        unsafe { libc::sync() };
        if self.refused.is_none() {
            match std::fs::write(DROP_CACHES, "3") {
                Ok(()) => return,
                Err(e) => {
                    note!(
                        "eddy bench tier: warning: cannot drop the page cache ({DROP_CACHES}: \
                         {e}); using posix_fadvise(DONTNEED) on the benchmark's files instead"
                    );
                    self.refused = Some(e.to_string());
                }
            }
        }
        for d in &self.dirs {
            fadvise_tree(d);
        }
    }

    pub(super) fn dropped(&self) -> bool {
        self.refused.is_none()
    }

    pub(super) fn describe(&self) -> String {
        match &self.refused {
            None => format!(
                "dropped before each side of cold-read, warm-read, stage-in and prefetched-read \
                 (sync; echo 3 > {DROP_CACHES})"
            ),
            Some(e) => format!(
                "NOT dropped ({DROP_CACHES}: {e}); posix_fadvise(DONTNEED) on the benchmark's \
                 files instead (caches of a network backend's servers may remain)"
            ),
        }
    }
}

/// posix_fadvise(DONTNEED) on every regular file under `dir` (errors ignored).
pub(super) fn fadvise_tree(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            fadvise_tree(&e.path());
        } else if ft.is_file() {
            if let Ok(f) = File::open(e.path()) {
                use std::os::fd::AsRawFd;
                // SAFETY: a valid open descriptor; the call only advises the kernel.
                unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            }
        }
    }
}

/// The type of the file system holding `p` (the longest mount point above it).
pub(crate) fn fs_type(p: &Path) -> String {
    let Ok(canon) = p.canonicalize() else {
        return "unknown".into();
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return "unknown".into();
    };
    let mut best: Option<(usize, String)> = None;
    for line in info.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(point), Some(kind)) = (fields.get(4), fields.get(dash + 1)) else {
            continue;
        };
        let point = point.replace("\\040", " ");
        if canon.starts_with(&point) && best.as_ref().is_none_or(|(n, _)| point.len() >= *n) {
            best = Some((point.len(), kind.to_string()));
        }
    }
    best.map_or_else(|| "unknown".into(), |(_, k)| k)
}

/// Free bytes for the caller under `dir` (None if statvfs fails).
pub(super) fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: a valid C string and a zeroed out-struct; statvfs only writes into it.
    let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `v` a writable statvfs, both alive for the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut v) } != 0 {
        return None;
    }
    Some(v.f_bavail as u64 * v.f_frsize as u64)
}

pub(super) fn check_room(dir: &Path, need: u64, what: &str) -> anyhow::Result<()> {
    if let Some(free) = free_bytes(dir) {
        if free < need {
            bail!(
                "{what} {} has {} free, the run needs about {} (lower --size or --rounds)",
                dir.display(),
                mib(free),
                mib(need)
            );
        }
    }
    Ok(())
}

/// Read-ahead of the file system mounted at `mount`, from its backing device info.
pub(super) fn read_ahead_kb(mount: &Path) -> Option<u64> {
    let canon = mount.canonicalize().ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let dev = info.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.get(4).map(|m| m.replace("\\040", " ")) == Some(canon.to_string_lossy().into()))
            .then(|| f.get(2).map(|d| d.to_string()))
            .flatten()
    })?;
    std::fs::read_to_string(format!("/sys/class/bdi/{dev}/read_ahead_kb"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// (busy, all) jiffies of every CPU so far, from /proc/stat; iowait counts as idle.
pub(super) fn cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let all: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4).unwrap_or(&0);
    Some((all - idle, all))
}

/// Percent of the CPUs busy during `window` (other work competing with the run).
pub(super) fn cpu_busy_pct(window: Duration) -> Option<f64> {
    let (b0, a0) = cpu_jiffies()?;
    std::thread::sleep(window);
    let (b1, a1) = cpu_jiffies()?;
    (a1 > a0).then(|| 100.0 * (b1 - b0) as f64 / (a1 - a0) as f64)
}

pub(super) fn sync_all() {
    // SAFETY: sync(2) has no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// Where a tier benchmark's run works: `base`, a fresh directory in the storage (the caches,
/// mount points, state directories), and `work`, where the backend's files go: a fresh
/// sub-directory of the backend (removed with this), else `base/backend`.
pub(super) struct Scratch {
    pub base: tempfile::TempDir,
    pub work: std::path::PathBuf,
    _backend: Option<tempfile::TempDir>,
}

/// Checks the room a run needs (`backend_need` bytes in the backend, `storage_need` in the
/// storage; both in the storage without a backend), then makes the run's directories, their
/// names starting with `prefix`.
pub(super) fn scratch(
    storage: &Path,
    backend: Option<&std::path::PathBuf>,
    (backend_need, storage_need): (u64, u64),
    prefix: &str,
) -> anyhow::Result<Scratch> {
    use anyhow::Context;
    match backend {
        Some(b) => {
            check_room(b, backend_need, "the backend")?;
            check_room(storage, storage_need, "the storage")?;
        }
        None => check_room(storage, backend_need + storage_need, "the storage")?,
    }
    let fresh = |dir: &Path, what: &str| {
        tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(dir)
            .with_context(|| {
                format!(
                    "cannot create a directory in {what}{} (missing or not writable?)",
                    dir.display()
                )
            })
    };
    let base = fresh(storage, "")?;
    let backend = backend.map(|b| fresh(b, "the backend ")).transpose()?;
    let work = match &backend {
        Some(d) => d.path().to_path_buf(),
        None => base.path().join("backend"),
    };
    Ok(Scratch {
        base,
        work,
        _backend: backend,
    })
}
