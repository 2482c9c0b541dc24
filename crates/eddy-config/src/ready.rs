//! The ready file `ROOT/eddyd.ready`: written atomically by the daemon once both listeners
//! are bound, so a launcher polling for it learns the address actually bound; removed on
//! clean exit. The same information is printed on stdout (`READY_LINE`) for launchers on
//! other hosts. The format lives here, in the crate the daemon and its launchers share, so
//! that a launcher (`eddy start`) reads it without linking the daemon.

use serde::{Deserialize, Serialize};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// Name of the ready file inside the root.
pub const READY_FILE: &str = "eddyd.ready";

/// Contents of the ready file (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyInfo {
    pub id: u32,
    pub pid: u32,
    /// TCP address actually bound, `ip:port`.
    pub addr: String,
    /// Unix socket path, if any.
    pub socket: Option<String>,
    pub host: String,
    /// Address of the metrics endpoint actually bound, `ip:port`, if it serves one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
}

/// Path of the ready file of a root.
pub fn ready_path(root: &Path) -> PathBuf {
    root.join(READY_FILE)
}

/// The largest ready file read (a few hundred bytes are written).
pub const MAX_READY_BYTES: u64 = 64 * 1024;

/// Reads the ready file of a root; `None` if there is none (yet). The root is the daemon's
/// user's, and root reads it (`eddy start`, `eddy replace`): the file is opened without
/// following a link and without blocking (a link, FIFO or socket planted there is an error,
/// never followed or waited on), must be a regular file, and is read up to
/// `MAX_READY_BYTES`.
pub fn read_ready(root: &Path) -> std::io::Result<Option<ReadyInfo>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let path = ready_path(root);
    // privileged-path: the ready file is opened O_NOFOLLOW|O_NONBLOCK and checked to be a regular file on its descriptor; the root above it is root's record
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
        .open(&path);
    let file = match file {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(std::io::Error::new(
                ErrorKind::InvalidData,
                format!("{} is a symbolic link: refused", path.display()),
            ))
        }
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            format!("{} is not a regular file: refused", path.display()),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_READY_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_READY_BYTES {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            format!(
                "{} is larger than {MAX_READY_BYTES} bytes: refused",
                path.display()
            ),
        ));
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))
}

/// Writes the ready file atomically (temp file + rename), readable by the daemon's user only.
pub fn write_ready(root: &Path, info: &ReadyInfo) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = ready_path(root);
    let tmp = path.with_extension("ready.tmp");
    let json = serde_json::to_vec(info).map_err(std::io::Error::other)?;
    // privileged-path: as the daemon's user: write_ready runs in eddyd after become_user
    let _ = std::fs::remove_file(&tmp);
    // privileged-path: as the daemon's user: write_ready runs in eddyd after become_user
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?
        .write_all(&json)?;
    // privileged-path: as the daemon's user: write_ready runs in eddyd after become_user
    std::fs::rename(&tmp, &path)
}

/// What a daemon prints on stdout, at the start of a line, once it listens: then its
/// `ReadyInfo` as JSON. A launcher that starts daemons on other hosts (whose ready files it
/// cannot read) learns the addresses they bound from their output, so that they can bind
/// port 0: no port is known, or squatted, in advance.
pub const READY_LINE: &str = "eddyd ready: ";

/// Prints the ready line (see `READY_LINE`).
pub fn announce(info: &ReadyInfo) -> std::io::Result<()> {
    use std::io::Write;
    let json = serde_json::to_string(info).map_err(std::io::Error::other)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{READY_LINE}{json}")?;
    out.flush()
}

/// The ready information in a daemon's output (see `READY_LINE`), if it has printed it.
pub fn parse_announcement(output: &str) -> Option<Result<ReadyInfo, serde_json::Error>> {
    output
        .lines()
        .find_map(|l| l.strip_prefix(READY_LINE))
        .map(serde_json::from_str)
}

/// Removes the ready file; a missing one is fine.
pub fn remove_ready(root: &Path) -> std::io::Result<()> {
    // privileged-path: unlink removes the name itself, never follows a link
    match std::fs::remove_file(ready_path(root)) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `read_ready` on a root where `plant` made the ready file, within a bound: a FIFO
    /// must not be waited on.
    fn read_planted(plant: impl FnOnce(&Path)) -> std::io::Result<Option<ReadyInfo>> {
        let dir = tempfile::tempdir().unwrap();
        plant(&ready_path(dir.path()));
        let root = dir.path().to_owned();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(read_ready(&root));
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("read_ready waited on what was planted");
        drop(dir);
        got
    }

    #[test]
    fn planted_ready_files_are_refused_never_followed_or_waited_on() {
        let info = ReadyInfo {
            id: 1,
            pid: 2,
            addr: "127.0.0.1:1".into(),
            socket: None,
            host: "h".into(),
            metrics: None,
        };
        let dir = tempfile::tempdir().unwrap();
        write_ready(dir.path(), &info).unwrap();
        assert_eq!(read_ready(dir.path()).unwrap(), Some(info.clone()));
        assert_eq!(read_planted(|_| {}).unwrap(), None);
        // A link to a good ready file elsewhere is refused all the same.
        let good = ready_path(dir.path());
        let e = read_planted(|p| std::os::unix::fs::symlink(&good, p).unwrap()).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let e = read_planted(|p| {
            let made = std::process::Command::new("mkfifo")
                .arg(p)
                .status()
                .unwrap();
            assert!(made.success());
        })
        .unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = read_planted(|p| std::fs::write(p, vec![b' '; 1 << 20]).unwrap()).unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");
    }
}
