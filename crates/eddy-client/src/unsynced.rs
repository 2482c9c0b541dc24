//! What an fsync has to reach (decision 0015): the daemons holding changes not yet made
//! durable, each with the generation of the connection the oldest of them was acknowledged
//! on. An open file keeps the daemons its writes went to; the client keeps the daemons its
//! other changes (entries, sizes, truncates...) went to. A Sync answered on a later
//! connection than a change it covers means the daemon may have restarted in between and
//! lost it: the fsync reports EIO instead of success.

use eddy_proto::Errno;
use std::collections::HashMap;
use std::sync::Mutex;

/// Daemon → generation of the connection of its oldest unsynced change.
pub(crate) type Pending = HashMap<u32, u64>;

#[derive(Default)]
pub(crate) struct Unsynced(Mutex<Pending>);

impl Unsynced {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        eddy_proto::sync::lock(&self.0)
    }

    /// A change acknowledged by `daemon` on connection `generation`.
    pub(crate) fn note(&self, daemon: u32, generation: u64) {
        let mut m = self.lock();
        let g = m.entry(daemon).or_insert(generation);
        *g = (*g).min(generation);
    }

    /// Takes what is pending (an fsync about to cover it).
    pub(crate) fn take(&self) -> Pending {
        std::mem::take(&mut *self.lock())
    }

    /// Gives back what an fsync that failed to reach its daemons took.
    pub(crate) fn restore(&self, pending: Pending) {
        for (d, g) in pending {
            self.note(d, g);
        }
    }
}

/// The daemons of `pending` whose Sync was answered on another connection than the changes
/// it covers, as an EIO; `answered`: daemon → generation of the Sync's connection.
pub(crate) fn check_generations(
    pending: &Pending,
    answered: &HashMap<u32, u64>,
    path: &str,
) -> Result<(), Errno> {
    let lost: Vec<u32> = pending
        .iter()
        .filter(|(d, g)| answered.get(d).is_some_and(|a| a != *g))
        .map(|(d, _)| *d)
        .collect();
    if lost.is_empty() {
        return Ok(());
    }
    Err(Errno::eio(format!(
        "fsync of {path}: the connection to daemon(s) {lost:?} was re-established after \
         changes it covers were acknowledged (the daemon may have restarted): they may be lost"
    )))
}
