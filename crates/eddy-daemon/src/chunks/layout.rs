//! Where a file's data lives: the layout marker of the chunk directory, its 256 hashed
//! subdirectories (each made when the first data file goes into it, decision 0076), a data
//! file's path `<hh>/<id as 32 hex>` and its sum file's beside it.

use super::io::sync_dir;
use super::ChunkStore;
use crate::DaemonError;
use eddy_proto::FileId;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The file naming the layout of a chunk directory; a directory without it that holds
/// per-file chunk directories is of the first layout, which this version refuses.
pub(super) const LAYOUT_FILE: &str = "LAYOUT";
pub(super) const LAYOUT: &str =
    "eddy chunk layout 2: one sparse data file per file id in <hh>/<id hex>, \
chunk k at k * chunk_size, lengths in the store's keyspace `chunks` (decision 0015)\n";
// The names are the clients' too: a client checks that a descriptor it was handed is the
// data file it asked for (decision 0058).
pub(super) use eddy_proto::fdpass::{data_subdir as subdir_of, mix, SUM_SUFFIX};

impl ChunkStore {
    pub(super) fn path_of(&self, id: FileId) -> PathBuf {
        self.dir.join(subdir_of(id)).join(format!("{id:032x}"))
    }

    /// Makes the subdirectory data file `id` goes into (private, 0700), if it is missing,
    /// and its name durable in the chunk directory: the subdirectories are made when the
    /// first data file goes into each, not at start (decision 0076), so that a sync of the
    /// data file and of its subdirectory (`sync`) finds it after a crash.
    pub(super) fn make_subdir(&self, id: FileId) -> Result<(), std::io::Error> {
        use std::os::unix::fs::DirBuilderExt;
        let sub = self.dir.join(subdir_of(id));
        // As the daemon's user, in its own chunk directory; never follows a link at `sub`.
        match std::fs::DirBuilder::new().mode(0o700).create(&sub) {
            Ok(()) => {}
            // Made by a writer of another file of the same subdirectory meanwhile.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(()),
            Err(e) => return Err(e),
        }
        File::open(&self.dir).and_then(|d| d.sync_all())
    }
}

/// Whether `name` is one of the hashed subdirectories' names (`00` .. `ff`).
pub(super) fn is_subdir_name(name: &str) -> bool {
    name.len() == 2 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Checks the layout of the chunk directory: writes the layout file into a new (or empty)
/// one; refuses a directory of another layout. The subdirectories are not made here but by
/// the first write into each (`make_subdir`; decision 0076); those an older eddyd made, all
/// 256 and maybe open to others, are made private.
pub(super) fn prepare_layout(dir: &Path) -> Result<(), DaemonError> {
    let refuse = |message: String| DaemonError::Layout {
        path: dir.to_owned(),
        message,
    };
    let io = |what: &str, e: std::io::Error| refuse(format!("{what}: {e}"));
    let marker = dir.join(LAYOUT_FILE);
    let private_subdirs = || -> Result<(), DaemonError> {
        let rd = std::fs::read_dir(dir).map_err(|e| io("listing", e))?;
        for entry in rd {
            let entry = entry.map_err(|e| io("listing", e))?;
            let name = entry.file_name();
            if name.to_str().is_some_and(is_subdir_name) {
                crate::rootdir::private_dir(&entry.path())
                    .map_err(|e| io("making a subdirectory private", e))?;
            }
        }
        Ok(())
    };
    match std::fs::read_to_string(&marker) {
        // Subdirectories made before they were private are closed now (decision 0023).
        Ok(s) if s == LAYOUT => return private_subdirs(),
        Ok(s) => {
            return Err(refuse(format!(
                "its {LAYOUT_FILE} file names a layout this eddyd does not know: {:?}",
                s.trim_end()
            )))
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(io("reading the layout file", e)),
    }
    let rd = std::fs::read_dir(dir).map_err(|e| io("listing", e))?;
    for entry in rd {
        let entry = entry.map_err(|e| io("listing", e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(refuse(
                "it holds chunks in the first layout (chunks/<file id>/<k>, before decision \
                 0015), which this eddyd does not read: stage the data out with the eddyd that \
                 wrote it, or remove the root to start empty"
                    .into(),
            ));
        }
    }
    let tmp = dir.join(format!("{LAYOUT_FILE}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, LAYOUT.as_bytes()))
        .map_err(|e| io("writing the layout file", e))?;
    File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| io("syncing the layout file", e))?;
    std::fs::rename(&tmp, &marker).map_err(|e| io("writing the layout file", e))?;
    sync_dir(dir).map_err(|e| refuse(e.to_string()))
}

/// The sum file beside data file `path`.
pub(super) fn sum_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(SUM_SUFFIX);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunks::fixture::*;
    use crate::chunks::CHUNK_KEYSPACE;
    use eddy_proto::fdpass::FANOUT;
    use fjall::Database;

    #[test]
    fn chunk_directories_and_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let f = open(tempfile::tempdir().unwrap());
        f.store.write(9, &[p(0, 0, 10)], &[1u8; 10]).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let dir = f.dir.path().join("chunks");
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join(subdir_of(9))), 0o700);
        assert_eq!(mode(&data_file(&f, 9)), 0o600);
        assert_eq!(mode(&sum_path(&data_file(&f, 9))), 0o600);
        // A directory of an older eddyd, open to others, is closed when opened again.
        std::fs::set_permissions(
            dir.join(subdir_of(9)),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let f = reopen(f);
        assert_eq!(mode(&f.dir.path().join("chunks").join(subdir_of(9))), 0o700);
    }

    #[test]
    fn subdirectories_are_made_by_the_first_data_file_that_goes_into_each() {
        let subdirs = |f: &Fixture| -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(f.dir.path().join("chunks"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| is_subdir_name(n))
                .collect();
            names.sort();
            names
        };
        let f = open(tempfile::tempdir().unwrap());
        assert_eq!(subdirs(&f), Vec::<String>::new(), "a new store makes none");
        assert!(
            !f.db.keyspace_exists(CHUNK_KEYSPACE),
            "nor its chunk map's keyspace"
        );
        // Two files of one subdirectory and one of another.
        let ids: Vec<FileId> = (1..4000u128).collect();
        let a = ids[0];
        let b = *ids[1..]
            .iter()
            .find(|&&i| subdir_of(i) == subdir_of(a))
            .unwrap();
        let c = *ids[1..]
            .iter()
            .find(|&&i| subdir_of(i) != subdir_of(a))
            .unwrap();
        for id in [a, b, c] {
            f.store.write(id, &[p(0, 0, 10)], &[3u8; 10]).unwrap();
            f.store.sync(id).unwrap();
        }
        let mut want = vec![subdir_of(a), subdir_of(c)];
        want.sort();
        assert_eq!(subdirs(&f), want);
        assert!(
            f.db.keyspace_exists(CHUNK_KEYSPACE),
            "made by the first chunk"
        );
        // Reopened (the start's check of the data files walks the subdirectories there are),
        // every file reads back.
        let f = reopen(f);
        for id in [a, b, c] {
            assert_eq!(f.store.read(id, &[p(0, 0, 10)]).unwrap(), vec![3u8; 10]);
        }
        // A store of an older eddyd that made all 256 at once opens as before.
        for sub in 0..FANOUT {
            let _ = std::fs::create_dir(f.dir.path().join("chunks").join(format!("{sub:02x}")));
        }
        let f = reopen(f);
        assert_eq!(subdirs(&f).len(), FANOUT as usize);
        assert_eq!(f.store.read(c, &[p(0, 0, 10)]).unwrap(), vec![3u8; 10]);
    }

    #[test]
    fn a_root_of_the_first_layout_is_refused_with_a_clear_message() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("chunks").join(format!("{:032x}", 5u128));
        std::fs::create_dir_all(&old).unwrap();
        std::fs::write(old.join("0"), b"old").unwrap();
        let db = Database::builder(dir.path().join("meta")).open().unwrap();
        let ks = crate::meta::LazyKeyspace::open(&db, CHUNK_KEYSPACE).unwrap();
        let Err(e) = ChunkStore::open(&dir.path().join("chunks"), ks, CS, 1 << 20) else {
            panic!("a root of the first layout was opened");
        };
        let msg = e.to_string();
        assert!(msg.contains("first layout"), "{msg}");
        assert!(old.join("0").exists(), "nothing of the old root is touched");
    }
}
