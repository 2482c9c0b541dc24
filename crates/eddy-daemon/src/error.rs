//! Errors that stop the daemon from starting or make it exit. Each says what failed and,
//! where it is not obvious, what to do about it. Per-request failures are `Errno` values
//! sent to the client instead, never one of these.

use std::path::PathBuf;

/// Why the daemon could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("invalid arguments: {0}")]
    Args(String),
    #[error(
        "no secret given: pass --secret-file FILE, set EDDY_SECRET (hex) or use --deployment FILE"
    )]
    NoSecret,
    #[error("invalid secret from {source_name}: {message}")]
    Secret {
        source_name: String,
        message: String,
    },
    #[error(transparent)]
    Config(#[from] eddy_config::ConfigError),
    #[error("storage root {path} is not usable: {source}; check the path and its permissions")]
    Root {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("storage root {path} refused: {reason}")]
    UnsafeRoot { path: PathBuf, reason: String },
    #[error("cannot use the chunk directory {path}: {message}")]
    Layout { path: PathBuf, message: String },
    #[error("cannot open the metadata store in {path}: {message}")]
    Meta { path: PathBuf, message: String },
    #[error("cannot listen on {addr}: {source}; pick another address with --listen (port 0 = any free port) or stop the process using it")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot serve metrics on {addr}: {source}; pick another address with --metrics (or metrics_addr; port 0 = any free port) or stop the process using it")]
    Metrics {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot bind the unix socket {path}: {message}")]
    Socket { path: PathBuf, message: String },
    #[error("cannot write the ready file {path}: {source}")]
    Ready {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot persist the metadata store at shutdown: {0}")]
    Persist(String),
}
