//! The cache of open data files (and their sum files), most recently used kept, sized to a
//! share of the descriptor limit. An entry is inserted under its slot's gate held shared and
//! removed under it held exclusively, so it never outlives its data file.

use super::io::file_err;
use super::layout::sum_path;
use super::map::Slot;
use super::ChunkStore;
use eddy_proto::{Errno, FileId};
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Open data files kept, at most: a quarter of the descriptor limit, up to this many.
pub(super) const FD_CACHE_MAX: usize = 4096;
/// Share of the descriptor limit the cache may use (1/n), leaving room for sockets and the
/// metadata store.
pub(super) const FD_CACHE_SHARE: u64 = 4;

/// A file's open data file and, with checksums on, its sum file.
pub(super) struct Open {
    pub(super) data: File,
    pub(super) sums: Option<File>,
}

impl ChunkStore {
    /// The open data file; opened (created with `create`) and cached if needed; `None` if
    /// missing. The caller holds the slot's gate shared.
    pub(super) fn data_file(
        &self,
        id: FileId,
        slot: &Slot,
        create: bool,
    ) -> Result<Option<Arc<Open>>, Errno> {
        if let Some(f) = self.fds.get(&id) {
            return Ok(Some(f));
        }
        let path = self.path_of(id);
        let data = self.open_data(id, slot, &path, create)?;
        let Some(data) = data else {
            return Ok(None);
        };
        let sums = match self.block {
            Some(_) => Some(open_sums(&path, id)?),
            None => None,
        };
        let file = Arc::new(Open { data, sums });
        self.fds.insert(id, Arc::clone(&file));
        Ok(Some(file))
    }

    pub(super) fn open_data(
        &self,
        id: FileId,
        slot: &Slot,
        path: &Path,
        create: bool,
    ) -> Result<Option<File>, Errno> {
        let file = match OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound && create => {
                let make = || {
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create(true)
                        .truncate(false)
                        .mode(0o600)
                        .open(path)
                };
                let f = match make() {
                    // Its subdirectory is made by the first data file that goes into it.
                    Err(e) if e.kind() == ErrorKind::NotFound => {
                        self.make_subdir(id).map_err(|e| file_err(&e, id))?;
                        make()
                    }
                    made => made,
                }
                .map_err(|e| file_err(&e, id))?;
                slot.fresh.store(true, Ordering::Release);
                f
            }
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(file_err(&e, id)),
        };
        Ok(Some(file))
    }

    /// Runs `op` with the file's data file (`None` if there is none) under its gate held
    /// shared.
    pub(super) fn with_file<T>(
        &self,
        id: FileId,
        op: impl FnOnce(Option<&Open>) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        let slot = self.slot(id);
        let gone = slot
            .as_ref()
            .map(|s| s.gate.read().unwrap_or_else(|e| e.into_inner()));
        let file = match (&slot, &gone) {
            (Some(s), Some(g)) if !**g => self.data_file(id, s, false)?,
            _ => None,
        };
        op(file.as_deref())
    }
}

/// Opens (made if missing, 0600) the sum file beside data file `path` of file `id`.
pub(super) fn open_sums(path: &Path, id: FileId) -> Result<File, Errno> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(sum_path(path))
        .map_err(|e| Errno::from_io(&e, format!("checksums of file {id:032x}")))
}

/// effort), then takes a share of it.
pub(super) fn fd_cache_capacity() -> usize {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let soft = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(_) => soft,
        },
        Ok((soft, _)) => soft,
        Err(_) => 0,
    };
    let share = usize::try_from(soft / FD_CACHE_SHARE).unwrap_or(FD_CACHE_MAX);
    share.clamp(1, FD_CACHE_MAX)
}

#[cfg(test)]
mod tests {
    use crate::chunks::fixture::*;

    #[test]
    fn cached_descriptors_never_outlive_a_removal_or_cut() {
        let f = open(tempfile::tempdir().unwrap());
        f.store.write(9, &[p(0, 0, 100)], &[7u8; 100]).unwrap();
        assert_eq!(f.store.read(9, &[p(0, 0, 100)]).unwrap(), vec![7u8; 100]);
        f.store.remove(9).unwrap();
        // A write after the removal lands in a new data file, visible on disk.
        f.store.write(9, &[p(0, 10, 5)], &[3u8; 5]).unwrap();
        let on_disk = std::fs::read(data_file(&f, 9)).unwrap();
        assert_eq!(on_disk, [vec![0u8; 10], vec![3u8; 5]].concat());
        assert_eq!(f.store.usage(), (15, 1));
        // After a cut, growing again is counted right and the cut bytes read as zeros.
        f.store.truncate(9, 12).unwrap();
        assert_eq!(f.store.usage(), (12, 1));
        f.store.write(9, &[p(0, 20, 4)], &[1u8; 4]).unwrap();
        assert_eq!(f.store.usage(), (24, 1));
        let got = f.store.read(9, &[p(0, 0, 30)]).unwrap();
        assert_eq!(
            got,
            [
                vec![0u8; 10],
                vec![3u8; 2],
                vec![0u8; 8],
                vec![1u8; 4],
                vec![0u8; 6]
            ]
            .concat()
        );
    }
}
