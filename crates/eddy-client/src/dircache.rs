//! Directories this client has looked up recently, so that creating, removing or resolving
//! an entry does not ask for its parent (and the parent's ancestors) again: one round trip
//! per metadata operation instead of two. An entry lives `dir_cache_ms` (as the kernel keeps
//! a mount's attributes); this client's own rmdir, rename and setattr of a directory drop it
//! and everything below it at once. What another node changes is seen when the entry expires:
//! within that time a create may land in a directory another node has just removed (as
//! through any kernel's dentry cache), and a chmod made elsewhere applies to this client's
//! checks a little later.
//!
//! An entry also answers a mount's GETATTR of the directory (`Client::stat_recent`, decision
//! 0050) when it is exact: stored from an answer no change of this client's overtook (every
//! forget and change moves an epoch; an answer asked for before it is kept for checks only),
//! and not marked since by a change of the directory's link count, which only this answer's
//! user (st_nlink) reads. Own creates and removes move its times: a touch sent with the
//! change moves the cached times (`touched`), a deferred one is overlaid by `dirtimes` when
//! the entry is read.

use eddy_proto::{path, FileKind, Inode, Timespec};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Entries kept at most; past it the cache starts over (a working set of directories is
/// small; a tree walk over many is not helped by a cache).
const MAX_ENTRIES: usize = 4096;

struct Entry {
    inode: Inode,
    at: Instant,
    /// Whether the inode is the directory's as its owner has it (apart from this client's
    /// unpublished times): what a stat may answer.
    exact: bool,
}

#[derive(Default)]
struct Dirs {
    map: HashMap<String, Entry>,
    /// Moved by every forget and change: an answer asked for before is not exact.
    epoch: u64,
}

pub(crate) struct DirCache {
    ttl: Duration,
    dirs: Mutex<Dirs>,
}

impl DirCache {
    pub fn new(ttl: Duration) -> DirCache {
        DirCache {
            ttl,
            dirs: Mutex::new(Dirs::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Dirs> {
        eddy_proto::sync::lock(&self.dirs)
    }

    /// To read before asking for a directory that is then `put`.
    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    fn fresh(&self, p: &str, exact: bool) -> Option<Inode> {
        if self.ttl.is_zero() {
            return None;
        }
        let dirs = self.lock();
        let e = dirs.map.get(p)?;
        (e.at.elapsed() < self.ttl && (e.exact || !exact)).then(|| e.inode.clone())
    }

    /// The directory `p` if it was seen within the TTL (its existence, kind, mode, owner
    /// and placement, for checks of entries below it).
    pub fn get(&self, p: &str) -> Option<Inode> {
        self.fresh(p, false)
    }

    /// The directory `p` if it was seen within the TTL and nothing this client did since
    /// changed its attributes (its times aside): what a stat may answer.
    pub fn get_exact(&self, p: &str) -> Option<Inode> {
        self.fresh(p, true)
    }

    /// Remembers `inode`, just answered by the owner of `p`, if it is a directory; asked
    /// for when the epoch was `since`.
    pub fn put(&self, p: &str, inode: &Inode, since: u64) {
        if self.ttl.is_zero() || inode.kind != FileKind::Dir {
            return;
        }
        let mut dirs = self.lock();
        if dirs.map.len() >= MAX_ENTRIES {
            dirs.map.clear();
        }
        let exact = dirs.epoch == since;
        let entry = Entry {
            inode: inode.clone(),
            at: Instant::now(),
            exact,
        };
        dirs.map.insert(p.to_string(), entry);
    }

    /// Forgets `p` and everything below it: this client changed or removed it.
    pub fn forget_tree(&self, p: &str) {
        let mut dirs = self.lock();
        dirs.epoch += 1;
        if !dirs.map.is_empty() {
            dirs.map.retain(|d, _| !path::is_within(d, p));
        }
    }

    /// Forgets `p` alone: this client changed its attributes (not those below it).
    pub fn forget(&self, p: &str) {
        let mut dirs = self.lock();
        dirs.epoch += 1;
        dirs.map.remove(p);
    }

    /// A touch of `p` at `time` reached its owner (merged there with max): the cached times
    /// follow. An answer asked for before is not exact (it may predate the touch).
    pub fn touched(&self, p: &str, time: Timespec) {
        let mut dirs = self.lock();
        dirs.epoch += 1;
        if let Some(e) = dirs.map.get_mut(p) {
            e.inode.mtime = e.inode.mtime.max(time);
            e.inode.ctime = e.inode.ctime.max(time);
        }
    }

    /// This client changed the link count of `p`: it stays known for checks of entries
    /// below it, but a stat asks its owner again.
    pub fn inexact(&self, p: &str) {
        let mut dirs = self.lock();
        dirs.epoch += 1;
        if let Some(e) = dirs.map.get_mut(p) {
            e.exact = false;
        }
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
        c.put("/a", &dir(), 0);
        c.put("/a/b", &dir(), 0);
        c.put("/ab", &dir(), 0);
        c.put(
            "/f",
            &Inode {
                kind: FileKind::File,
                ..dir()
            },
            0,
        );
        assert!(c.get("/a/b").is_some() && c.get("/f").is_none());
        c.forget_tree("/a");
        assert!(c.get("/a").is_none() && c.get("/a/b").is_none());
        assert!(
            c.get("/ab").is_some(),
            "a sibling with the same prefix stays"
        );
        let off = DirCache::new(Duration::ZERO);
        off.put("/a", &dir(), 0);
        assert!(off.get("/a").is_none());
        let short = DirCache::new(Duration::from_millis(1));
        short.put("/a", &dir(), 0);
        std::thread::sleep(Duration::from_millis(5));
        assert!(short.get("/a").is_none(), "expired");
    }

    #[test]
    fn only_answers_no_change_overtook_are_exact() {
        let c = DirCache::new(Duration::from_secs(3600));
        let since = c.epoch();
        c.put("/a", &dir(), since);
        assert!(c.get_exact("/a").is_some());
        // A subdirectory made: known for checks, asked for by a stat.
        c.inexact("/a");
        assert!(c.get("/a").is_some() && c.get_exact("/a").is_none());
        // An answer asked for before a change is not exact; one asked for after is.
        let before = c.epoch();
        c.forget("/b");
        c.put("/a", &dir(), before);
        assert!(c.get("/a").is_some() && c.get_exact("/a").is_none());
        c.put("/a", &dir(), c.epoch());
        assert!(c.get_exact("/a").is_some());
        // A touch sent moves the cached times, never back.
        let t = |sec| Timespec { sec, nsec: 0 };
        c.touched("/a", t(50));
        c.touched("/a", t(40));
        let a = c.get_exact("/a").unwrap();
        assert_eq!((a.mtime, a.ctime), (t(50), t(50)));
        c.forget("/a");
        assert!(c.get("/a").is_none());
    }
}
