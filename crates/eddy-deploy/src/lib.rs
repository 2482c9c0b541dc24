//! eddy-deploy: the typed operations on a deployment that the `eddy` command and the Slurm
//! burst buffer (eddy-bb) share. A [`Plan`] says what to start (daemons here or on listed
//! hosts, configuration, state directory, the user the daemons run as); [`start()`] launches
//! the daemons (`launch`: their command lines and launchers), waits until every one is
//! ready and serves, and records them in the state directory ([`StateDir`]); [`replace`]
//! starts one again; [`grow_local`] and [`shrink`] change the members of a running
//! deployment, moving the items whose owners change (`resize`, decision 0081); [`stop()`] writes back, unmounts, leaves the job profile in the I/O
//! history (`profile`) and stops; [`stage`] moves data
//! between the backend and the cache, [`prefetch`] fetches into it in the background. `procs` spawns and stops processes without ever
//! signalling a reused pid; `secure` does root's file work where users may be watching;
//! `mounts` reads the FUSE mounts of this host and `mount` starts the one that serves a
//! namespace.
//!
//! Nothing here prints to standard output: operations return what they did, and the few
//! that report progress as they go (stop, the burst-buffer phases over them) hand their
//! lines to a [`Say`] the caller chooses. Progress bars go to standard error, on a terminal.

pub mod launch;
pub mod mount;
pub mod mounts;
pub mod prefetch;
pub mod procs;
pub mod profile;
pub mod replace;
pub mod resize;
pub mod secure;
pub mod stage;
pub mod start;
pub mod state;
pub mod stop;
pub mod writeback;

pub use launch::{DaemonLaunch, HostLine};
pub use replace::{replace, Replaced};
pub use resize::{grow_hosts, grow_local, shrink, Moving, Resized};
pub use start::{start, Placement, Plan};
pub use state::StateDir;
pub use stop::{stop, StopOptions, Stopped};

use anyhow::{Context, Result};

/// Where the lines an operation reports as it goes are sent: `out` for what the command
/// says on standard output, `err` for warnings on standard error. Each call is one line.
#[derive(Clone, Copy)]
pub struct Say<'a> {
    pub out: &'a dyn Fn(&str),
    pub err: &'a dyn Fn(&str),
}

impl Say<'_> {
    pub fn out(&self, line: &str) {
        (self.out)(line)
    }
    pub fn err(&self, line: &str) {
        (self.err)(line)
    }
}

/// The tokio runtime the client library runs in.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Bytes with a binary unit, e.g. "1.5 GiB".
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
