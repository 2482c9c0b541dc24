//! Removals copied here from another owner, remembered for a short while (decision 0020,
//! "ambiguous retries"). A client sends an unlink, rmdir or the source half of a rename to
//! the first owner of the path it can reach. When that owner applies the removal, copies it
//! to the other owners (this daemon) and dies before it replies, the client retries here —
//! and would get `ENOENT` for its own removal, without the record it needs to drop the
//! file's data. So a removal that arrives as a copy keeps the record it removed for
//! `hold`; a remove request that finds the entry absent takes that record as its answer,
//! once. Requests reach a copy only when the first owner cannot be reached, so a removal
//! answered this way is the retry of one that happened.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Records remembered at most, whatever their age (the oldest go first).
const MAX_REMEMBERED: usize = 65_536;

/// The records of removals received as copies, for `hold`.
pub(crate) struct Removals {
    hold: Duration,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    records: HashMap<Vec<u8>, (Vec<u8>, Instant)>,
    /// Keys in the order they were noted, for pruning.
    order: VecDeque<(Vec<u8>, Instant)>,
}

impl Removals {
    pub fn new(hold: Duration) -> Removals {
        Removals {
            hold,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        eddy_proto::sync::lock(&self.inner)
    }

    /// Notes that the entry `key`, holding `record`, was removed by a copied change.
    pub fn note(&self, key: &[u8], record: Vec<u8>) {
        let now = Instant::now();
        let mut inner = self.inner();
        inner.prune(now, self.hold);
        inner.records.insert(key.to_vec(), (record, now));
        inner.order.push_back((key.to_vec(), now));
    }

    /// Forgets `key` (it was created again).
    pub fn forget(&self, key: &[u8]) {
        let mut inner = self.inner();
        if !inner.records.is_empty() {
            inner.records.remove(key);
        }
    }

    /// The record removed under `key` within `hold`, taken (a second retry gets `None`).
    pub fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let mut inner = self.inner();
        if inner.records.is_empty() {
            return None;
        }
        let (record, at) = inner.records.remove(key)?;
        (at.elapsed() <= self.hold).then_some(record)
    }
}

impl Inner {
    fn prune(&mut self, now: Instant, hold: Duration) {
        while let Some((key, at)) = self.order.front() {
            let old = now.duration_since(*at) > hold;
            if !old && self.order.len() < MAX_REMEMBERED {
                break;
            }
            // Drop the key's record only when it is this note's (not a later one's).
            if self.records.get(key).is_some_and(|(_, t)| t == at) {
                self.records.remove(key);
            }
            self.order.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removal_is_taken_once_within_the_hold() {
        let r = Removals::new(Duration::from_secs(60));
        assert_eq!(r.take(b"k"), None);
        r.note(b"k", b"rec".to_vec());
        assert_eq!(r.take(b"k"), Some(b"rec".to_vec()));
        assert_eq!(r.take(b"k"), None);
        r.note(b"k", b"rec".to_vec());
        r.forget(b"k");
        assert_eq!(r.take(b"k"), None);
    }

    #[test]
    fn old_removals_are_forgotten() {
        let r = Removals::new(Duration::from_millis(20));
        r.note(b"a", b"1".to_vec());
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(r.take(b"a"), None);
        r.note(b"b", b"2".to_vec());
        std::thread::sleep(Duration::from_millis(30));
        r.note(b"c", b"3".to_vec());
        let inner = r.inner();
        assert!(!inner.records.contains_key(b"b".as_slice()));
        assert_eq!(inner.order.len(), 1);
    }
}
