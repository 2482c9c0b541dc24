//! The reserve kept on the metadata device. fjall poisons its whole database when a journal
//! write fails (every later write answers `Poisoned` until the process restarts), so the
//! store must never meet a full device: requests that add entries or data are refused with
//! ENOSPC while the device's free space is under `meta_reserve_bytes` (data only when the
//! chunk files share the metadata device). Removals, updates and reads still run, so
//! deleting files makes room and the daemon recovers by itself.

use eddy_proto::Errno;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub(crate) struct Room {
    id: u32,
    meta_dir: PathBuf,
    reserve: u64,
    /// Whether the chunk files live on the metadata device (their writes use the reserve).
    shared: bool,
}

impl Room {
    pub fn new(id: u32, meta_dir: &Path, chunks_dir: &Path, reserve: u64) -> Room {
        let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).ok();
        let shared = match (dev(meta_dir), dev(chunks_dir)) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        Room {
            id,
            meta_dir: meta_dir.to_owned(),
            reserve,
            shared,
        }
    }

    /// Free bytes of the metadata device for an unprivileged writer, and its size; `None`
    /// if unknown.
    fn space(&self) -> Option<(u64, u64)> {
        let st = nix::sys::statvfs::statvfs(&self.meta_dir).ok()?;
        let unit = st.fragment_size() as u64;
        Some((
            (st.blocks_available() as u64).saturating_mul(unit),
            (st.blocks() as u64).saturating_mul(unit),
        ))
    }

    /// The bytes kept in reserve on a metadata device of `size` bytes (0: none kept).
    pub fn reserve_of(&self, size: u64) -> u64 {
        // A small device keeps a tenth of itself.
        self.reserve.min(size / 10)
    }

    /// ENOSPC when a request adding `data` bytes of chunks (0 for an entry) would leave the
    /// metadata device under the reserve.
    pub fn check(&self, data: u64) -> Result<(), Errno> {
        if self.reserve == 0 {
            return Ok(());
        }
        let Some((free, size)) = self.space() else {
            return Ok(());
        };
        let reserve = self.reserve_of(size);
        let need = reserve.saturating_add(if self.shared { data } else { 0 });
        if free >= need {
            return Ok(());
        }
        Err(Errno::new(
            libc::ENOSPC,
            format!(
                "daemon {}: its metadata device ({}) has {free} bytes free, and {} are kept in \
                 reserve (meta_reserve_bytes): remove files to make room",
                self.id,
                self.meta_dir.display(),
                reserve
            ),
        ))
    }
}
