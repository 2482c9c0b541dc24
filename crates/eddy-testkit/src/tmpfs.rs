//! A tmpfs mounted for one test: a device of a known size whose fullness the test controls,
//! whatever the host's disks hold. Needs root; unmounted (lazily) when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted at a directory; unmounted when dropped.
pub struct Tmpfs {
    at: PathBuf,
    /// The directory it is mounted on, when the tmpfs made it (removed after the unmount).
    _dir: Option<tempfile::TempDir>,
}

impl Tmpfs {
    /// Mounts a tmpfs of `bytes` at `at` (made if missing). Fails the test without root.
    #[track_caller]
    pub fn mount(at: &Path, bytes: u64) -> Tmpfs {
        crate::require::root("mount a tmpfs");
        if let Err(e) = std::fs::create_dir_all(at) {
            panic!("cannot make {}: {e}", at.display());
        }
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={bytes},mode=0700"))
            .arg("eddy-test")
            .arg(at)
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!(
                "cannot mount a tmpfs at {}: {}",
                at.display(),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => panic!("cannot run mount: {e}"),
        }
        Tmpfs {
            at: at.to_owned(),
            _dir: None,
        }
    }

    /// A tmpfs of `bytes` on a new temporary directory.
    #[track_caller]
    pub fn new(bytes: u64) -> Tmpfs {
        let dir = tempfile::tempdir().expect("tempdir for a tmpfs");
        let mut t = Tmpfs::mount(dir.path(), bytes);
        t._dir = Some(dir);
        t
    }

    pub fn path(&self) -> &Path {
        &self.at
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}
