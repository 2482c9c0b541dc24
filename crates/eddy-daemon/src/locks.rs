//! A striped lock table: read-modify-write operations on one key take the stripe of the
//! key's hash, so operations on the same key are serialised while different keys rarely
//! wait on each other. Used from blocking threads only.

use eddy_proto::sync::lock;
use std::sync::{Mutex, MutexGuard};

/// Stripes per table: enough that unrelated keys rarely collide on a 32-thread pool.
pub const STRIPES: usize = 1024;

/// A fixed table of mutexes indexed by key hash.
pub struct StripedLocks {
    stripes: Vec<Mutex<()>>,
}

impl Default for StripedLocks {
    fn default() -> Self {
        StripedLocks {
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }
}

impl StripedLocks {
    /// Locks the stripe of `key`. A poisoned stripe is still usable: it guards no data.
    pub fn lock(&self, key: &[u8]) -> MutexGuard<'_, ()> {
        let idx = (xxhash_rust::xxh3::xxh3_64(key) % STRIPES as u64) as usize;
        lock(&self.stripes[idx])
    }
}
