//! The types of the settings' values, with their parsers and checks: the atime rule, the placement
//! of new files (and the directory attribute that sets it), the metrics address, file modes, the
//! wire's protection, hidden orphan names and the links of namespace prefixes to backend
//! directories.

use crate::ConfigError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The extended attribute of a directory that sets the placement of the files created in
/// it (decision 0043): `hashed` or `local`.
pub const PLACEMENT_XATTR: &str = "user.eddy.placement";

/// The `atime` setting and `eddy mount --atime`: when reads move a file's atime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Atime {
    /// When the atime is not later than the mtime or the ctime, or is a day old.
    #[default]
    Relatime,
    /// At every read.
    Strictatime,
    /// Never.
    Noatime,
}

impl Atime {
    /// How long an atime stands under `relatime` when the file does not change (Linux's).
    pub const RELATIME_STALE_S: i64 = 24 * 60 * 60;

    /// The setting a name (`relatime`, `strictatime`, `noatime`) means.
    pub fn parse(name: &str) -> Option<Atime> {
        match name {
            "relatime" => Some(Atime::Relatime),
            "strictatime" => Some(Atime::Strictatime),
            "noatime" => Some(Atime::Noatime),
            _ => None,
        }
    }

    /// Whether a read at `now` (seconds) moves the atime of a file with these times
    /// (seconds and nanoseconds each).
    pub fn due(self, atime: (i64, u32), mtime: (i64, u32), ctime: (i64, u32), now: i64) -> bool {
        match self {
            Atime::Noatime => false,
            Atime::Strictatime => true,
            Atime::Relatime => {
                atime <= mtime
                    || atime <= ctime
                    || now.saturating_sub(atime.0) >= Atime::RELATIME_STALE_S
            }
        }
    }
}

/// The `fuse_transport` setting: how the mount's requests and replies cross to the kernel
/// (decision 0078).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FuseTransport {
    /// FUSE over io_uring when the kernel offers it (Linux 6.14+ with
    /// `fuse.enable_uring=Y`), else `/dev/fuse`.
    Auto,
    /// FUSE over io_uring; the mount fails, with the reason, when the kernel does not offer it.
    IoUring,
    /// `read(2)` and `write(2)` on `/dev/fuse`, as before io_uring.
    #[default]
    DevFuse,
}

impl FuseTransport {
    /// The setting a name (`auto`, `io_uring`, `dev_fuse`) means.
    pub fn parse(name: &str) -> Option<FuseTransport> {
        match name {
            "auto" => Some(FuseTransport::Auto),
            "io_uring" => Some(FuseTransport::IoUring),
            "dev_fuse" => Some(FuseTransport::DevFuse),
            _ => None,
        }
    }
}

/// The `placement` setting and the `user.eddy.placement` attribute's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementMode {
    /// Chunk k of a file on `owner(hash(file id, k))`.
    #[default]
    Hashed,
    /// Every chunk on the daemon of the host that created the file.
    Local,
}

impl PlacementMode {
    /// The mode an attribute value names (`hashed` or `local`, a trailing NUL or newline
    /// allowed, as `setfattr` and `echo` leave them); anything else is `None`.
    pub fn parse(value: &[u8]) -> Option<PlacementMode> {
        let v = value
            .strip_suffix(b"\0")
            .or_else(|| value.strip_suffix(b"\n"))
            .unwrap_or(value);
        match v {
            b"hashed" => Some(PlacementMode::Hashed),
            b"local" => Some(PlacementMode::Local),
            _ => None,
        }
    }

    /// The attribute value of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            PlacementMode::Hashed => "hashed",
            PlacementMode::Local => "local",
        }
    }
}

/// A `metrics_addr` (or `--metrics`) value as a socket address: `IP:PORT` (IPv6 in
/// brackets); a host name is refused, since the daemon binds it.
pub fn metrics_socket_addr(text: &str) -> Result<std::net::SocketAddr, ConfigError> {
    text.trim().parse().map_err(|e| {
        ConfigError::Invalid(format!(
            "metrics_addr {text:?} is not an IP:PORT address ({e}); e.g. 0.0.0.0:9400 or \
             127.0.0.1:9400"
        ))
    })
}

/// The metrics address of the `nth` daemon (counted from 0) of a host, from the configured
/// `metrics_addr`: its port plus `nth`; port 0 (any free port) stays 0.
pub fn metrics_addr_of(base: &str, nth: u32) -> Result<std::net::SocketAddr, ConfigError> {
    let mut addr = metrics_socket_addr(base)?;
    if addr.port() != 0 {
        let port = u16::try_from(u32::from(addr.port()) + nth)
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "metrics_addr {base:?}: daemon {nth} of a host would listen past port 65535; \
                     choose a lower port"
                ))
            })?;
        addr.set_port(port);
    }
    Ok(addr)
}

/// Permission bits (at most 0o7777), written in TOML as an octal string such as `"0755"`
/// or as an integer (`0o755`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMode(pub u32);

impl FileMode {
    /// Parses an octal mode: `"0755"`, `"755"` or `"0o755"`.
    pub fn parse(text: &str) -> Result<FileMode, ConfigError> {
        let digits = text.trim();
        let digits = digits.strip_prefix("0o").unwrap_or(digits);
        u32::from_str_radix(digits, 8)
            .ok()
            .filter(|m| *m <= 0o7777)
            .map(FileMode)
            .ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "mode {text:?} must be octal permission bits such as \"0755\""
                ))
            })
    }
}

impl std::fmt::Display for FileMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04o}", self.0)
    }
}

impl Serialize for FileMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for FileMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<FileMode, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u32),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(m) if m <= 0o7777 => Ok(FileMode(m)),
            Raw::Number(m) => Err(serde::de::Error::custom(format!(
                "mode {m:o} (octal) has bits beyond 0o7777"
            ))),
            Raw::Text(t) => FileMode::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

/// The `wire` setting: how the frames of a connection are protected after its handshake.
/// TOML: `wire = "auto"` (or `"clear"`, `"mac"`, `"sealed"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Wire {
    /// `mac` on TCP connections, `clear` on the local Unix socket (where only processes of
    /// the node reach the daemon, through a socket file they must be allowed to open).
    #[default]
    Auto,
    /// Frames as they are: the handshake authenticates the connection, nothing protects what
    /// follows. A host on the path can read and change the traffic.
    Clear,
    /// Every frame carries a keyed-BLAKE3 tag under a per-connection, per-direction key with
    /// an implicit sequence number: a changed, injected, replayed, dropped or reordered frame
    /// closes the connection. The contents travel readable.
    Mac,
    /// As `mac`, and the contents (meta and payload) are encrypted with AES-256-GCM; only the
    /// frame header (length, request id, meta length) travels readable.
    Sealed,
}

impl Wire {
    /// The protection a connection uses: the setting itself, or for `auto` what it means on
    /// a TCP connection (`tcp`) or on the Unix socket. Never `Auto`.
    pub fn resolve(self, tcp: bool) -> Wire {
        match (self, tcp) {
            (Wire::Auto, true) => Wire::Mac,
            (Wire::Auto, false) => Wire::Clear,
            (w, _) => w,
        }
    }

    /// The name the configuration uses.
    pub fn name(self) -> &'static str {
        match self {
            Wire::Auto => "auto",
            Wire::Clear => "clear",
            Wire::Mac => "mac",
            Wire::Sealed => "sealed",
        }
    }
}

impl std::str::FromStr for Wire {
    type Err = String;
    fn from_str(s: &str) -> Result<Wire, String> {
        match s {
            "auto" => Ok(Wire::Auto),
            "clear" => Ok(Wire::Clear),
            "mac" => Ok(Wire::Mac),
            "sealed" => Ok(Wire::Sealed),
            _ => Err(format!(
                "wire must be auto, clear, mac or sealed, not {s:?}"
            )),
        }
    }
}

/// Prefix of the hidden name a file unlinked through the mount while open lives on under
/// until its last close (as on NFS). Names with it are Eddy's own: left out of listings, and
/// under a linked prefix never written to the backend nor imported from it.
pub const HIDDEN_ORPHAN: &str = ".eddy-unlinked-";

/// Whether a name is one of Eddy's hidden names for files unlinked while open.
pub fn is_hidden_orphan(name: &str) -> bool {
    name.starts_with(HIDDEN_ORPHAN)
}

/// A namespace prefix linked to a backend directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// Absolute, normalised namespace path ("/" links the whole namespace).
    pub prefix: String,
    /// Absolute backend directory; every daemon must see it at this path.
    pub backend: PathBuf,
}

impl Link {
    /// Parses `PREFIX=DIR` (the `--link` syntax).
    pub fn parse(text: &str) -> Result<Link, ConfigError> {
        let (prefix, backend) = text.split_once('=').ok_or_else(|| {
            ConfigError::Invalid(format!(
                "link {text:?} must be PREFIX=DIR, e.g. /in=/pfs/in"
            ))
        })?;
        let link = Link {
            prefix: prefix.trim_end_matches('/').to_string(),
            backend: PathBuf::from(backend),
        };
        let link = if link.prefix.is_empty() {
            Link {
                prefix: "/".into(),
                ..link
            }
        } else {
            link
        };
        link.validate()?;
        Ok(link)
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let p = &self.prefix;
        let bad_prefix = !p.starts_with('/')
            || (p.len() > 1 && p.ends_with('/'))
            || p.contains("//")
            || p.contains('\0')
            || p.split('/').any(|c| c == "." || c == "..");
        if bad_prefix {
            return Err(ConfigError::Invalid(format!(
                "link prefix {p:?} must be an absolute, normalised namespace path such as /data"
            )));
        }
        if !self.backend.is_absolute() {
            return Err(ConfigError::Invalid(format!(
                "backend {} of link {p} must be an absolute directory",
                self.backend.display()
            )));
        }
        // A `..` would take the backend out of a directory it was checked to lie under.
        if self
            .backend
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        {
            return Err(ConfigError::Invalid(format!(
                "backend {} of link {p} must not contain `..`",
                self.backend.display()
            )));
        }
        Ok(())
    }

    /// Whether the normalised path `path` lies at or under this link's prefix. A path with
    /// a hidden name of Eddy's own (`is_hidden_orphan`) is not covered: it stays in Eddy and
    /// never reaches the backend.
    pub fn covers(&self, path: &str) -> bool {
        let under = self.prefix == "/"
            || path == self.prefix
            || (path.starts_with(&self.prefix) && path.as_bytes()[self.prefix.len()] == b'/');
        under && !path.split('/').any(is_hidden_orphan)
    }

    /// The backend path of a normalised namespace path this link covers.
    pub fn backend_path(&self, path: &str) -> PathBuf {
        let rest = if self.prefix == "/" {
            path
        } else {
            &path[self.prefix.len()..]
        };
        let rest = rest.trim_start_matches('/');
        if rest.is_empty() {
            self.backend.clone()
        } else {
            self.backend.join(rest)
        }
    }
}
