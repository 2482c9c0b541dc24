//! How many clients write a file before its write-back (decision 0073): its I/O mode, for
//! the placement rules that ask for one (`io_mode`: `shared`, N-1, or `per-process`, N-N).
//! Every writing client publishes the file's size to the file's metadata owner, at its first
//! write and at close or fsync (`GrowSize`, or `ReserveAppend` for an append); this daemon
//! notes the connection each came on, per file, in memory: one client has one connection to
//! a daemon. At most `TRACKED` files are followed at once (those past it count as written by
//! one client); a file's entry goes when it is placed or written back, and all of them with
//! a restart of the daemon.

use super::Tier;
use eddy_proto::sync::lock;
use std::collections::HashMap;

/// Files whose writers are followed at once.
const TRACKED: usize = 65_536;

/// Per file (its normalised path): the connection of its first writer, and whether another
/// one wrote it too.
#[derive(Default)]
pub(super) struct Writers {
    files: HashMap<String, (u64, bool)>,
    warned: bool,
}

impl Tier {
    /// A size publication of `path` came on connection `conn`: counted when a placement
    /// rule asks for an I/O mode and the path is under a link with several backends.
    pub fn note_writer(&self, path: &str, conn: u64) {
        if !self.backend.placer.uses_io_mode() {
            return;
        }
        let Ok(norm) = eddy_proto::path::normalize(path, self.limits) else {
            return;
        };
        if !self.backend.is_multi(&norm) {
            return;
        }
        let mut w = lock(&self.writers);
        let full = w.files.len() >= TRACKED;
        match w.files.get_mut(&norm) {
            Some((first, several)) => *several |= *first != conn,
            None if !full => {
                w.files.insert(norm, (conn, false));
            }
            None => {
                if !std::mem::replace(&mut w.warned, true) {
                    tracing::warn!(
                        "the writers of {TRACKED} files are followed already; files written \
                         from now on count as written by one client until some are placed"
                    );
                }
            }
        }
    }

    /// Whether more than one client wrote the file at `norm` (its I/O mode is N-1).
    pub(super) fn written_by_several(&self, norm: &str) -> bool {
        lock(&self.writers)
            .files
            .get(norm)
            .is_some_and(|(_, several)| *several)
    }

    /// The file at `norm` was placed or written back: its writers are no longer followed.
    pub(super) fn forget_writers(&self, norm: &str) {
        let mut w = lock(&self.writers);
        if w.files.remove(norm).is_some() && w.files.len() < TRACKED {
            w.warned = false;
        }
    }
}
