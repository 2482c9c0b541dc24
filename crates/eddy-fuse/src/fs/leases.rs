//! The mount's part of directory leases (decisions 0075, 0077): the kernel's LOOKUP of a name
//! the client's lease knows absent is answered as missing with a negative entry the kernel
//! keeps (for `fuse_negative_ttl_ms`, as any negative entry), tracked in `LeaseNegatives`;
//! before the lease is given back (the client's return hook) every such entry of that
//! directory is invalidated in the kernel, so a name another client creates after the recall
//! is found at once. Creates go through the client's lease path as they are (`create`).

use super::*;
use eddy_client::LeaseReturnHook;
use fuser::Notifier;
use std::collections::HashSet;
use std::sync::OnceLock;

/// Directories this mount is removing or renaming itself: the client gives their leases back
/// from inside that request, while the kernel holds the directory's lock, which an
/// invalidation in it waits for. Their hook does not wait for it.
#[derive(Default)]
pub(crate) struct Changing(Mutex<HashSet<String>>);

impl Changing {
    fn contains(&self, dir: &str) -> bool {
        lock(&self.0).contains(dir)
    }
}

/// Marks `path` as being changed by this mount while it lives.
pub(super) struct ChangingGuard<'a> {
    set: &'a Changing,
    path: String,
}

impl Drop for ChangingGuard<'_> {
    fn drop(&mut self) {
        lock(&self.set.0).remove(&self.path);
    }
}

impl EddyFs {
    /// The entry time of a negative entry for `path` (name `name` in directory inode
    /// `parent`) when the lease knows it absent: `None` when it does not (ask the daemons).
    /// The entry is tracked first, then the lease asked again: a return that began in between
    /// takes it and invalidates it once this LOOKUP is answered (the kernel's invalidation
    /// waits for the directory's lock, which the LOOKUP holds).
    pub(super) fn lease_negative(
        &self,
        parent: INodeNo,
        path: &str,
        name: &str,
    ) -> Option<Duration> {
        if !self.client.leases_on() || !self.client.known_absent(path) {
            return None;
        }
        let kept =
            !self.negative_ttl.is_zero() && self.negatives.record(parent_of(path), parent.0, name);
        self.client.known_absent(path).then_some(if kept {
            self.negative_ttl
        } else {
            Duration::ZERO
        })
    }

    /// The kernel made an entry for `path` itself (a reply with its attributes): no negative
    /// entry of it is left to invalidate.
    pub(super) fn entry_replaced(&self, path: &str) {
        let dir = parent_of(path);
        let name = &path[(dir.len() + 1).min(path.len())..];
        self.negatives.replaced(dir, name);
    }

    /// Marks directory `path` as being removed or renamed by this mount until the guard drops.
    pub(super) fn changing<'a>(&'a self, path: &str) -> ChangingGuard<'a> {
        lock(&self.changing.0).insert(path.to_string());
        ChangingGuard {
            set: &self.changing,
            path: path.to_string(),
        }
    }

    /// The hook the client runs before it gives a lease back: the kernel's negative entries of
    /// that directory handed out under the lease are invalidated, off the runtime's thread
    /// (the kernel may wait for the directory's lock), and awaited for at most a quarter of
    /// `lease_recall_timeout_ms` (past it the return goes on and the invalidation finishes
    /// behind it); not awaited for a directory this mount is itself removing or renaming.
    pub(crate) fn lease_return_hook(&self) -> LeaseReturnHook {
        let negatives = Arc::clone(&self.negatives);
        let changing = Arc::clone(&self.changing);
        let notifier = self.locks().notifier_slot();
        // The recall timeout as the daemons apply it: at most half the RPC deadline.
        let cfg = self.client.config();
        let recall_ms = cfg.lease_recall_timeout_ms.min(cfg.rpc_timeout_ms / 2);
        let bound = Duration::from_millis(recall_ms / 4);
        Arc::new(move |dir: String| {
            let negatives = Arc::clone(&negatives);
            let changing = Arc::clone(&changing);
            let notifier = Arc::clone(&notifier);
            Box::pin(async move {
                let Some((parent, names)) = negatives.take(&dir) else {
                    return;
                };
                let wait = !changing.contains(&dir);
                let job =
                    tokio::task::spawn_blocking(move || invalidate(&notifier, parent, &names));
                if wait && tokio::time::timeout(bound, job).await.is_err() {
                    warn!(dir, "the kernel's negative entries of a leased directory were not invalidated within {bound:?}; the lease goes back meanwhile");
                }
            })
        })
    }
}

/// Invalidates the kernel's entries `names` in directory inode `parent`.
fn invalidate(slot: &OnceLock<Notifier>, parent: u64, names: &[String]) {
    let Some(n) = slot.get() else { return };
    for name in names {
        // ENOENT: the kernel holds no entry of that name (dropped, or replaced and gone).
        if let Err(e) = n.inval_entry(INodeNo(parent), OsStr::new(name)) {
            debug!(parent, name, error = %e, "negative entry invalidation");
        }
    }
}
