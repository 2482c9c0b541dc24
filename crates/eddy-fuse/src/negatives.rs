//! Negative entries the mount handed the kernel on a directory lease's word (decisions 0075,
//! 0077): while this mount's client holds the lease on a directory, a name it knows absent
//! there is answered to the kernel's LOOKUP as missing, and the kernel keeps that negative
//! entry (so the lookup before the next create of it costs nothing). Before the lease is
//! given back every such entry is invalidated in the kernel (`Notifier::inval_entry`), so a
//! name another client creates after the recall is found at once. Tracked per directory and
//! bounded in all: past the bound an answer is given with no entry time (the kernel keeps
//! nothing it would have to be told to drop).

use eddy_proto::sync::lock;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Negative entries handed out under leases, in all directories, at most.
pub(crate) const MAX_TRACKED: usize = 65_536;

struct Dir {
    /// The directory's inode number as the kernel knows it.
    parent: u64,
    names: HashSet<String>,
}

#[derive(Default)]
struct Inner {
    dirs: HashMap<String, Dir>,
    total: usize,
}

pub(crate) struct LeaseNegatives {
    max: usize,
    inner: Mutex<Inner>,
}

impl LeaseNegatives {
    pub(crate) fn new(max: usize) -> LeaseNegatives {
        LeaseNegatives {
            max,
            inner: Mutex::default(),
        }
    }

    /// Records that the kernel is told `name` is missing in directory `dir` (inode `parent`)
    /// and may keep that; false when the bound is reached (then it must not keep it).
    pub(crate) fn record(&self, dir: &str, parent: u64, name: &str) -> bool {
        let mut g = lock(&self.inner);
        if g.total >= self.max {
            return false;
        }
        let d = g.dirs.entry(dir.to_string()).or_insert_with(|| Dir {
            parent,
            names: HashSet::new(),
        });
        if d.parent != parent {
            // The directory's inode changed (renamed over, looked up again): a kernel entry
            // under the old number is not one this mount can name any more, so do not hand
            // one out under the new one either.
            return false;
        }
        if d.names.insert(name.to_string()) {
            g.total += 1;
        }
        true
    }

    /// The kernel replaced the negative entry itself (a create, mkdir, link or rename to the
    /// name through this mount): nothing to invalidate for it.
    pub(crate) fn replaced(&self, dir: &str, name: &str) {
        let mut g = lock(&self.inner);
        let gone = g.dirs.get_mut(dir).is_some_and(|d| d.names.remove(name));
        if gone {
            g.total -= 1;
        }
    }

    /// Every negative entry handed out in `dir`, forgotten here: the caller invalidates them
    /// in the kernel.
    pub(crate) fn take(&self, dir: &str) -> Option<(u64, Vec<String>)> {
        let mut g = lock(&self.inner);
        let d = g.dirs.remove(dir)?;
        g.total -= d.names.len();
        Some((d.parent, d.names.into_iter().collect()))
    }

    #[cfg(test)]
    fn total(&self) -> usize {
        lock(&self.inner).total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_taken_once_per_directory_and_bounded() {
        let n = LeaseNegatives::new(3);
        assert!(n.record("/d", 7, "a"));
        assert!(n.record("/d", 7, "a"));
        assert!(n.record("/d", 7, "b"));
        assert!(n.record("/e", 8, "a"));
        assert_eq!(n.total(), 3);
        // At the bound: not kept.
        assert!(!n.record("/e", 8, "z"));
        n.replaced("/d", "b");
        assert_eq!(n.total(), 2);
        let (parent, names) = n.take("/d").unwrap();
        assert_eq!((parent, names), (7, vec!["a".to_string()]));
        assert!(n.take("/d").is_none());
        assert_eq!(n.total(), 1);
        // Another inode for the same path: nothing handed out under it.
        assert!(!n.record("/e", 9, "y"));
    }
}
