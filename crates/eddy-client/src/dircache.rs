//! Directories this client has looked up recently, so that creating, removing or resolving
//! an entry does not ask for its parent (and the parent's ancestors) again: one round trip
//! per metadata operation instead of two. An entry lives `dir_cache_ms` (as the kernel keeps
//! a mount's attributes); this client's own rmdir, rename and setattr of a directory drop it
//! and everything below it at once. What another node changes is seen when the entry expires:
//! within that time a create may land in a directory another node has just removed (as
//! through any kernel's dentry cache), and a chmod made elsewhere applies to this client's
//! checks a little later.

use eddy_proto::{path, FileKind, Inode};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Entries kept at most; past it the cache starts over (a working set of directories is
/// small; a tree walk over many is not helped by a cache).
const MAX_ENTRIES: usize = 4096;

pub(crate) struct DirCache {
    ttl: Duration,
    dirs: Mutex<HashMap<String, (Inode, Instant)>>,
}

impl DirCache {
    pub fn new(ttl: Duration) -> DirCache {
        DirCache {
            ttl,
            dirs: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Inode, Instant)>> {
        eddy_proto::sync::lock(&self.dirs)
    }

    /// The directory `p` if it was seen within the TTL.
    pub fn get(&self, p: &str) -> Option<Inode> {
        if self.ttl.is_zero() {
            return None;
        }
        let dirs = self.lock();
        let (inode, at) = dirs.get(p)?;
        (at.elapsed() < self.ttl).then(|| inode.clone())
    }

    /// Remembers `inode`, just answered by the owner of `p`, if it is a directory.
    pub fn put(&self, p: &str, inode: &Inode) {
        if self.ttl.is_zero() || inode.kind != FileKind::Dir {
            return;
        }
        let mut dirs = self.lock();
        if dirs.len() >= MAX_ENTRIES {
            dirs.clear();
        }
        dirs.insert(p.to_string(), (inode.clone(), Instant::now()));
    }

    /// Forgets `p` and everything below it: this client changed or removed it.
    pub fn forget_tree(&self, p: &str) {
        let mut dirs = self.lock();
        if dirs.is_empty() {
            return;
        }
        dirs.retain(|d, _| !path::is_within(d, p));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> Inode {
        Inode::new(FileKind::Dir, 1, 0o755, 0, 0)
    }

    #[test]
    fn directories_are_kept_for_the_ttl_and_dropped_with_their_tree() {
        let c = DirCache::new(Duration::from_secs(3600));
        c.put("/a", &dir());
        c.put("/a/b", &dir());
        c.put("/ab", &dir());
        c.put(
            "/f",
            &Inode {
                kind: FileKind::File,
                ..dir()
            },
        );
        assert!(c.get("/a/b").is_some() && c.get("/f").is_none());
        c.forget_tree("/a");
        assert!(c.get("/a").is_none() && c.get("/a/b").is_none());
        assert!(
            c.get("/ab").is_some(),
            "a sibling with the same prefix stays"
        );
        let off = DirCache::new(Duration::ZERO);
        off.put("/a", &dir());
        assert!(off.get("/a").is_none());
        let short = DirCache::new(Duration::from_millis(1));
        short.put("/a", &dir());
        std::thread::sleep(Duration::from_millis(5));
        assert!(short.get("/a").is_none(), "expired");
    }
}
