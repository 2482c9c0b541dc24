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

/// Reads the ready file of a root; `None` if there is none (yet).
pub fn read_ready(root: &Path) -> std::io::Result<Option<ReadyInfo>> {
    match std::fs::read(ready_path(root)) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes the ready file atomically (temp file + rename), readable by the daemon's user only.
pub fn write_ready(root: &Path, info: &ReadyInfo) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = ready_path(root);
    let tmp = path.with_extension("ready.tmp");
    let json = serde_json::to_vec(info).map_err(std::io::Error::other)?;
    let _ = std::fs::remove_file(&tmp);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?
        .write_all(&json)?;
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
    match std::fs::remove_file(ready_path(root)) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
