//! Where a file's data lives: the layout marker of the chunk directory, its 256 hashed
//! subdirectories, a data file's path `<hh>/<id as 32 hex>` and its sum file's beside it.

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
pub(super) use eddy_proto::fdpass::{data_subdir as subdir_of, mix, FANOUT, SUM_SUFFIX};

impl ChunkStore {
    pub(super) fn path_of(&self, id: FileId) -> PathBuf {
        self.dir.join(subdir_of(id)).join(format!("{id:032x}"))
    }
}

/// Checks the layout of the chunk directory: writes the layout file into a new (or empty)
/// one and makes the subdirectories; refuses a directory of another layout.
pub(super) fn prepare_layout(dir: &Path) -> Result<(), DaemonError> {
    let refuse = |message: String| DaemonError::Layout {
        path: dir.to_owned(),
        message,
    };
    let io = |what: &str, e: std::io::Error| refuse(format!("{what}: {e}"));
    let marker = dir.join(LAYOUT_FILE);
    let private_subdirs = || {
        (0..FANOUT).try_for_each(|sub| {
            crate::rootdir::private_dir(&dir.join(format!("{sub:02x}")))
                .map_err(|e| io("making a subdirectory private", e))
        })
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
    private_subdirs()?;
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
    use fjall::{Database, KeyspaceCreateOptions};

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
        std::fs::set_permissions(dir.join("00"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let f = reopen(f);
        assert_eq!(mode(&f.dir.path().join("chunks/00")), 0o700);
    }

    #[test]
    fn a_root_of_the_first_layout_is_refused_with_a_clear_message() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("chunks").join(format!("{:032x}", 5u128));
        std::fs::create_dir_all(&old).unwrap();
        std::fs::write(old.join("0"), b"old").unwrap();
        let db = Database::builder(dir.path().join("meta")).open().unwrap();
        let ks = db
            .keyspace(CHUNK_KEYSPACE, KeyspaceCreateOptions::default)
            .unwrap();
        let Err(e) = ChunkStore::open(&dir.path().join("chunks"), ks, CS, 1 << 20) else {
            panic!("a root of the first layout was opened");
        };
        let msg = e.to_string();
        assert!(msg.contains("first layout"), "{msg}");
        assert!(old.join("0").exists(), "nothing of the old root is touched");
    }
}
