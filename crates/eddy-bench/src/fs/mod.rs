//! The file-system operations the workloads and the coordinator use, behind one trait, so the
//! same workload code runs on a mounted directory (`LocalFs`, std::fs) and directly through the
//! Eddy client library (`EddyFs`). Errors are `std::io::Error`, so callers add the same context
//! whatever the backend.

mod c;
mod eddy;
mod local;

pub use c::CFs;
pub(crate) use eddy::load_deployment;
pub use eddy::EddyFs;
pub use local::LocalFs;

use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::SystemTime;

/// Prefix of a target reached through the client library: `eddy:STATE_DIR[:/sub/dir]`.
pub const EDDY_PREFIX: &str = "eddy:";
/// Prefix of a target reached by the workers through `libeddy_preload.so`:
/// `preload:STATE_DIR[:/sub/dir]`.
pub const PRELOAD_TARGET: &str = "preload:";
/// Prefix of a target the workers reach through libeddy's C interface:
/// `c:STATE_DIR[:/sub/dir]`.
pub const C_TARGET: &str = "c:";
/// Where the workers see the namespace under the preload library (its `EDDY_PREFIX`).
pub const PRELOAD_PATH: &str = "/eddy-bench-preload";

/// What a run benchmarks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Target {
    /// A directory of any mounted file system (absolute after `Target::absolute`).
    Dir(PathBuf),
    /// A directory in the namespace of the Eddy deployment whose state directory is `state`,
    /// driven through the client library.
    Eddy { state: PathBuf, dir: String },
    /// The same, but the workers reach it through libeddy's C interface (`CFs`; the
    /// coordinator uses the client library).
    C { state: PathBuf, dir: String },
    /// The same, but the workers reach it with plain file calls through the LD_PRELOAD
    /// library `lib` under `PRELOAD_PATH` (the coordinator uses the client library).
    Preload {
        state: PathBuf,
        dir: String,
        lib: PathBuf,
    },
}

impl FromStr for Target {
    type Err = String;

    /// `eddy:STATE_DIR` (namespace root), `eddy:STATE_DIR:/sub/dir`, or a plain directory.
    fn from_str(s: &str) -> Result<Target, String> {
        if let Some(rest) = s.strip_prefix(PRELOAD_TARGET) {
            let Target::Eddy { state, dir } = format!("{EDDY_PREFIX}{rest}").parse()? else {
                unreachable!("an eddy: target parses as Target::Eddy");
            };
            return Target::preload(state, dir);
        }
        if let Some(rest) = s.strip_prefix(C_TARGET) {
            let Target::Eddy { state, dir } = format!("{EDDY_PREFIX}{rest}").parse()? else {
                unreachable!("an eddy: target parses as Target::Eddy");
            };
            return Ok(Target::C { state, dir });
        }
        let Some(rest) = s.strip_prefix(EDDY_PREFIX) else {
            return Ok(Target::Dir(PathBuf::from(s)));
        };
        let (state, dir) = match rest.rfind(":/") {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, "/"),
        };
        if state.is_empty() {
            return Err(format!(
                "{s:?}: expected {EDDY_PREFIX}STATE_DIR[:/sub/dir] (the --state of `eddy start`)"
            ));
        }
        Ok(Target::Eddy {
            state: PathBuf::from(state),
            dir: dir.to_string(),
        })
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Dir(d) => write!(f, "{}", d.display()),
            Target::Eddy { state, dir } if dir == "/" => {
                write!(f, "{EDDY_PREFIX}{}", state.display())
            }
            Target::Eddy { state, dir } => write!(f, "{EDDY_PREFIX}{}:{dir}", state.display()),
            Target::Preload { state, dir, .. } => {
                write!(f, "{PRELOAD_TARGET}{}:{dir}", state.display())
            }
            Target::C { state, dir } => write!(f, "{C_TARGET}{}:{dir}", state.display()),
        }
    }
}

impl Target {
    /// The same target with absolute local paths, so workers started elsewhere agree.
    pub fn absolute(&self) -> io::Result<Target> {
        Ok(match self {
            Target::Dir(d) => Target::Dir(std::path::absolute(d)?),
            Target::Eddy { state, dir } => Target::Eddy {
                state: std::path::absolute(state)?,
                dir: dir.clone(),
            },
            Target::C { state, dir } => Target::C {
                state: std::path::absolute(state)?,
                dir: dir.clone(),
            },
            Target::Preload { state, dir, lib } => Target::Preload {
                state: std::path::absolute(state)?,
                dir: dir.clone(),
                lib: std::path::absolute(lib)?,
            },
        })
    }

    /// A preload target, with the library found beside this program (`target/<profile>/`,
    /// or its `deps/`), or named by `EDDY_PRELOAD_LIB`.
    pub fn preload(state: PathBuf, dir: String) -> Result<Target, String> {
        let lib = match std::env::var_os("EDDY_PRELOAD_LIB") {
            Some(p) => PathBuf::from(p),
            None => {
                let exe = std::env::current_exe().map_err(|e| e.to_string())?;
                let here = exe.parent().map(Path::to_path_buf).unwrap_or_default();
                [
                    here.join("libeddy_preload.so"),
                    here.join("deps/libeddy_preload.so"),
                ]
                .into_iter()
                .find(|p| p.is_file())
                .ok_or_else(|| {
                    format!(
                        "libeddy_preload.so is not beside {} (build it: `cargo build \
                             --release -p eddy-preload`, or name it with EDDY_PRELOAD_LIB)",
                        exe.display()
                    )
                })?
            }
        };
        Ok(Target::Preload { state, dir, lib })
    }

    /// The benchmarked directory as a path of the target's file system.
    pub fn dir(&self) -> PathBuf {
        match self {
            Target::Dir(d) => d.clone(),
            Target::Eddy { dir, .. } | Target::Preload { dir, .. } | Target::C { dir, .. } => {
                PathBuf::from(dir)
            }
        }
    }
}

/// How a file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only.
    Read,
    /// Write; created if missing, kept as it is otherwise.
    Write,
    /// Write; must not exist yet (O_EXCL).
    CreateNew,
    /// Write; created or truncated.
    Truncate,
}

/// What the workloads need to know of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub is_dir: bool,
    pub is_file: bool,
    pub len: u64,
    pub mtime: SystemTime,
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub is_dir: bool,
    /// The entry's attributes when the listing carries them (Eddy's listings do; a POSIX
    /// `readdir` does not, and the caller must stat).
    pub meta: Option<Meta>,
}

/// The operations the benchmark performs. Paths are absolute paths of the target's file
/// system (a local path for `LocalFs`, a namespace path for `EddyFs`).
pub trait Fs {
    type File;

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Self::File>;
    fn write_all_at(&self, f: &Self::File, buf: &[u8], off: u64) -> io::Result<()>;
    /// Fills `buf` from `off`; a file too short gives `UnexpectedEof`.
    fn read_exact_at(&self, f: &Self::File, buf: &mut [u8], off: u64) -> io::Result<()>;
    /// Appends the whole file to `buf`; returns the bytes read.
    fn read_to_end(&self, f: &Self::File, buf: &mut Vec<u8>) -> io::Result<usize>;
    fn fsync(&self, f: &Self::File) -> io::Result<()>;
    fn close(&self, f: Self::File) -> io::Result<()>;
    /// stat (following symbolic links).
    fn stat(&self, path: &Path) -> io::Result<Meta>;
    fn unlink(&self, path: &Path) -> io::Result<()>;
    fn mkdir(&self, path: &Path) -> io::Result<()>;
    fn rmdir(&self, path: &Path) -> io::Result<()>;
    /// Every entry of a directory (without `.` and `..`), in no particular order.
    fn readdir(&self, path: &Path) -> io::Result<Vec<Entry>>;
    fn set_mtime(&self, path: &Path, when: SystemTime) -> io::Result<()>;
    /// setxattr(2) of `name` (created or replaced) on `path`.
    fn set_xattr(&self, path: &Path, name: &str, value: &[u8]) -> io::Result<()>;
    /// Fails with `PermissionDenied` when the caller may not create entries in `dir`.
    fn check_writable(&self, dir: &Path) -> io::Result<()>;
    /// Bytes available to the caller on the file system of `dir`; None when it does not say.
    fn avail_bytes(&self, dir: &Path) -> io::Result<Option<u64>>;

    /// Removes `path` and everything below it.
    fn remove_tree(&self, path: &Path) -> io::Result<()> {
        for e in self.readdir(path)? {
            let p = path.join(&e.name);
            if e.is_dir {
                self.remove_tree(&p)?;
            } else {
                self.unlink(&p)?;
            }
        }
        self.rmdir(path)
    }

    /// Creates or replaces a whole file.
    fn write_file(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let f = self.open(path, OpenMode::Truncate)?;
        if !data.is_empty() {
            self.write_all_at(&f, data, 0)?;
        }
        self.close(f)
    }

    /// Reads a whole file.
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        let f = self.open(path, OpenMode::Read)?;
        let mut buf = Vec::new();
        self.read_to_end(&f, &mut buf)?;
        self.close(f)?;
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_and_print_back() {
        let t: Target = "/mnt/x".parse().unwrap();
        assert_eq!(t, Target::Dir("/mnt/x".into()));
        let t: Target = "eddy:/s/state".parse().unwrap();
        assert_eq!(
            t,
            Target::Eddy {
                state: "/s/state".into(),
                dir: "/".into()
            }
        );
        assert_eq!(t.to_string(), "eddy:/s/state");
        let t: Target = "eddy:st:/a/b".parse().unwrap();
        assert_eq!(
            t,
            Target::Eddy {
                state: "st".into(),
                dir: "/a/b".into()
            }
        );
        assert_eq!(t.to_string(), "eddy:st:/a/b");
        assert_eq!(t.dir(), PathBuf::from("/a/b"));
        let t: Target = "c:st:/a".parse().unwrap();
        assert_eq!(
            t,
            Target::C {
                state: "st".into(),
                dir: "/a".into()
            }
        );
        assert_eq!(t.to_string(), "c:st:/a");
        assert!("eddy:".parse::<Target>().is_err());
        assert!("eddy::/x".parse::<Target>().is_err());
    }

    #[test]
    fn local_fs_round_trip_and_remove_tree() {
        let d = tempfile::tempdir().unwrap();
        let fs = LocalFs;
        let sub = d.path().join("a");
        fs.mkdir(&sub).unwrap();
        fs.mkdir(&sub.join("b")).unwrap();
        fs.write_file(&sub.join("b/f"), b"hello").unwrap();
        assert_eq!(fs.read_file(&sub.join("b/f")).unwrap(), b"hello");
        let f = fs.open(&sub.join("b/f"), OpenMode::Read).unwrap();
        let mut two = [0u8; 2];
        fs.read_exact_at(&f, &mut two, 3).unwrap();
        assert_eq!(&two, b"lo");
        let short = fs.read_exact_at(&f, &mut two, 4).unwrap_err();
        assert_eq!(short.kind(), io::ErrorKind::UnexpectedEof);
        let e = fs.open(&sub.join("b/f"), OpenMode::CreateNew).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        let m = fs.stat(&sub.join("b/f")).unwrap();
        assert!(m.is_file && !m.is_dir && m.len == 5);
        let names: Vec<_> = fs.readdir(&sub).unwrap();
        assert_eq!(
            names,
            vec![Entry {
                name: "b".into(),
                is_dir: true,
                meta: None,
            }]
        );
        fs.remove_tree(&sub).unwrap();
        assert!(!sub.exists());
    }
}
