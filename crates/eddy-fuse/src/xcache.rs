//! Extended attributes of the entries the kernel holds, as the last reply about each entry
//! carried them (every inode Eddy returns has its attributes), kept for the attribute TTL.
//! `ls -l` asks `security.selinux` of every entry it lists: from the listing's inodes this
//! costs no request. The staleness allowed is the same as the kernel's for attributes.

use eddy_proto::Xattr;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Entries kept at most; past it, expired ones are dropped (and all, if none expired).
const MAX_ENTRIES: usize = 1 << 16;

/// Inode number → when the attributes were seen, and the attributes.
type Entries = HashMap<u64, (Instant, Arc<Vec<Xattr>>)>;

pub(crate) struct XattrCache {
    ttl: Duration,
    map: Mutex<Entries>,
}

impl XattrCache {
    pub(crate) fn new(ttl: Duration) -> XattrCache {
        XattrCache {
            ttl,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, Entries> {
        eddy_proto::sync::lock(&self.map)
    }

    /// Records the attributes of `ino` as a reply just gave them.
    pub(crate) fn put(&self, ino: u64, xattrs: &[Xattr]) {
        if self.ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut map = self.map();
        if map.len() >= MAX_ENTRIES && !map.contains_key(&ino) {
            let ttl = self.ttl;
            map.retain(|_, (at, _)| now.duration_since(*at) < ttl);
            if map.len() >= MAX_ENTRIES {
                map.clear();
            }
        }
        map.insert(ino, (now, Arc::new(xattrs.to_vec())));
    }

    /// The attributes of `ino` if a reply gave them within the TTL.
    pub(crate) fn get(&self, ino: u64) -> Option<Arc<Vec<Xattr>>> {
        let mut map = self.map();
        match map.get(&ino) {
            Some((at, x)) if at.elapsed() < self.ttl => Some(Arc::clone(x)),
            Some(_) => {
                map.remove(&ino);
                None
            }
            None => None,
        }
    }

    /// Forgets `ino` (its attributes changed here, or the kernel forgot it).
    pub(crate) fn drop_entry(&self, ino: u64) {
        self.map().remove(&ino);
    }
}

/// Whether a cached answer can stand for the daemon's for attribute `name`: only the stored
/// namespaces (anything else gets the daemon's error).
pub(crate) fn cacheable(name: &str) -> bool {
    ["user.", "trusted.", "security."]
        .iter()
        .any(|ns| name.len() > ns.len() && name.starts_with(ns))
        && name.len() <= eddy_proto::XATTR_NAME_MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_answers_expire_and_drop() {
        let c = XattrCache::new(Duration::from_millis(50));
        let x = vec![Xattr {
            name: "user.a".into(),
            value: b"1".to_vec(),
        }];
        c.put(1, &x);
        c.put(2, &[]);
        assert_eq!(*c.get(1).unwrap(), x);
        assert!(c.get(2).unwrap().is_empty());
        assert!(c.get(3).is_none());
        c.drop_entry(1);
        assert!(c.get(1).is_none());
        std::thread::sleep(Duration::from_millis(60));
        assert!(c.get(2).is_none());
        let off = XattrCache::new(Duration::ZERO);
        off.put(1, &x);
        assert!(off.get(1).is_none());
        assert!(
            cacheable("user.a") && !cacheable("user.") && !cacheable("system.posix_acl_access")
        );
    }
}
