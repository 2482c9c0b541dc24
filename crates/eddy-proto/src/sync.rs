//! Locking shared by the crates.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking the data over if a thread panicked while holding it (poisoned it).
///
/// Poisoning is tolerated on purpose. What Eddy keeps under a mutex (tables, caches, maps of
/// pending work, counters) is changed by short critical sections that leave it usable at
/// every step; a panic while holding one is a bug that has already been reported where it
/// happened. Passing the poison on would make every later caller panic as well, so that one
/// failed request would take the whole daemon, mount or preloaded program down with it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::lock;
    use std::sync::Mutex;

    #[test]
    fn a_poisoned_mutex_still_gives_its_data() {
        let m = Mutex::new(1);
        let poisoner = std::panic::catch_unwind(|| {
            let mut g = m.lock().unwrap();
            *g = 2;
            panic!("poisoning on purpose");
        });
        assert!(poisoner.is_err());
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 3);
    }
}
