//! The reserve kept on the metadata device. fjall poisons its whole database when a journal
//! write fails (every later write answers `Poisoned` until the process restarts), so the
//! store must never meet a full device: requests that add entries or data are refused with
//! ENOSPC while the device's free space is under `meta_reserve_bytes` (data only when the
//! chunk files share the metadata device). Removals, updates and reads still run, so
//! deleting files makes room and the daemon recovers by itself.
//!
//! Refusing requests keeps the reserve only from writers that ask: the kernel writing a data
//! file itself (FUSE passthrough, decision 0049) asks nobody, and fills the device to its
//! last block. So when the chunk files share the device, the reserve is held as a file
//! (`RESERVE_FILE` in the daemon's root, fallocated) and counted as free. When the device
//! has run out (`relieve`, before every request that changes state), the file is emptied
//! and the store writes into its blocks; it is taken again once the device has room for it
//! three times over (decision 0060).

use eddy_proto::sync::lock;
use eddy_proto::Errno;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The file that holds the reserve, in the daemon's root (beside the store, not in its
/// directory).
pub const RESERVE_FILE: &str = "meta-reserve";

/// Free bytes under which a device counts as run out, for a reserve of `want` bytes: the
/// reserve is given to the store then (`relieve`), and a store may open again above it
/// (`give_last`).
fn least_room(want: u64) -> u64 {
    (want / 16).max(1)
}

/// The part of the reserve (one in this many) that a full device does not get: it is given to
/// the store only when the daemon restarts in place (`give_last`).
const LAST_PART: u64 = 8;

pub(crate) struct Room {
    id: u32,
    meta_dir: PathBuf,
    reserve: u64,
    /// Whether the chunk files live on the metadata device (their writes use the reserve).
    shared: bool,
    /// The reserve file and the bytes it holds now (0: given to the store).
    held: Mutex<(Option<std::fs::File>, u64)>,
}

impl Room {
    pub fn new(id: u32, meta_dir: &Path, chunks_dir: &Path, reserve: u64) -> Room {
        let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).ok();
        let shared = match (dev(meta_dir), dev(chunks_dir)) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        let file = match reserve > 0 && shared {
            true => {
                let path = meta_dir.parent().unwrap_or(meta_dir).join(RESERVE_FILE);
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&path)
                    .map_err(|e| {
                        tracing::warn!(
                            "cannot make {}: the reserve is kept by refusals only: {e}",
                            path.display()
                        )
                    })
                    .ok()
            }
            false => None,
        };
        let room = Room {
            id,
            meta_dir: meta_dir.to_owned(),
            reserve,
            shared,
            held: Mutex::new((file, 0)),
        };
        room.relieve();
        room
    }

    /// Free bytes of the metadata device for an unprivileged writer, and its size; `None`
    /// if unknown. The reserve file's bytes count as free: they are the store's.
    fn space(&self) -> Option<(u64, u64)> {
        let (free, size) = self.device()?;
        Some((free.saturating_add(self.held()), size))
    }

    /// Free bytes of the metadata device for an unprivileged writer, and its size, as the
    /// device says.
    fn device(&self) -> Option<(u64, u64)> {
        let st = nix::sys::statvfs::statvfs(&self.meta_dir).ok()?;
        let unit = st.fragment_size() as u64;
        Some((
            (st.blocks_available() as u64).saturating_mul(unit),
            (st.blocks() as u64).saturating_mul(unit),
        ))
    }

    /// The bytes the reserve file holds now (free for the store, not for writers).
    pub fn held(&self) -> u64 {
        lock(&self.held).1
    }

    /// Before a request that changes state: a device that has (nearly) run out gets the
    /// reserve file's blocks, so that the store never meets a full device; a device with
    /// room for the reserve three times over has it taken again.
    pub fn relieve(&self) {
        let mut held = lock(&self.held);
        let (Some(file), Some((free, size))) = (held.0.as_ref(), self.device()) else {
            return;
        };
        let want = self.reserve_of(size);
        // The last part is kept for a restart in place (`give_last`).
        let last = want / LAST_PART;
        if held.1 > last && free < least_room(want) {
            match file.set_len(last) {
                Ok(()) => {
                    tracing::warn!(
                        "daemon {}: its metadata device is full ({free} bytes free): {} of \
                         the bytes held in reserve are the store's now; remove files to make room",
                        self.id,
                        held.1 - last
                    );
                    held.1 = last;
                }
                Err(e) => tracing::warn!("daemon {}: cannot empty the reserve file: {e}", self.id),
            }
        } else if held.1 < want && free >= want.saturating_mul(3) {
            let flags = nix::fcntl::FallocateFlags::empty();
            match nix::fcntl::fallocate(file, flags, 0, want as i64) {
                Ok(()) => held.1 = want,
                Err(e) => {
                    let _ = file.set_len(0);
                    tracing::debug!(
                        "daemon {}: cannot take the reserve file again: {e}",
                        self.id
                    );
                }
            }
        }
    }

    /// Before the daemon restarts in place because its store refuses every write
    /// (`respawn`): what is left of the reserve is given to the store, to open again and
    /// journal the removals that make room. Whether the store has room to open again: bytes
    /// were given, or the device has a sixteenth of the reserve free (other daemons' files
    /// were removed meanwhile).
    pub fn give_last(&self) -> bool {
        let mut held = lock(&self.held);
        if let (Some(file), true) = (held.0.as_ref(), held.1 > 0) {
            match file.set_len(0) {
                Ok(()) => {
                    held.1 = 0;
                    return true;
                }
                Err(e) => tracing::warn!("daemon {}: cannot empty the reserve file: {e}", self.id),
            }
        }
        self.device()
            .is_some_and(|(free, size)| free >= least_room(self.reserve_of(size)))
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
