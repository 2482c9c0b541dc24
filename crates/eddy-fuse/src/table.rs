//! The inode table: FUSE speaks inode numbers, the Eddy namespace speaks paths.
//!
//! Every inode the kernel knows of (it got it from `lookup`, `create`, `mkdir`, ...) has an
//! entry here mapping its number to its current path, with the kernel's lookup count; `forget`
//! lowers the count and drops the entry at zero. The root is inode 1 and is never dropped.
//!
//! Inode numbers are derived from a stable hash of the path (so that every node of a
//! deployment, and `readdir` before any lookup, report the same number for the same path);
//! when that number is already taken by another entry (an entry renamed away from its
//! original path, or a hash collision), a number from a separate counter range is used.
//! `readdir` reports the number of a known entry, or the hash-derived number otherwise,
//! without creating an entry: a listing of millions of names adds nothing to the table.
//!
//! A file with several names (hard links, decision 0009) is one inode with several paths:
//! the table also maps its file id to its number, so that every name reports the same one;
//! a shared file not known yet gets the number hashed from its file id.
//!
//! A removed or replaced entry is detached from its path but kept, under its number, until
//! the kernel forgets it, so that its number is never handed to another file meanwhile.

use std::collections::{BTreeMap, HashMap};

/// Inode number of the root directory.
pub const ROOT_INO: u64 = 1;

/// First inode number of the fallback range (hash-derived numbers stay below it).
const FALLBACK_BASE: u64 = 1 << 63;

/// One inode known to the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    /// Current paths (several for a file with several names); empty once the entry was
    /// removed or replaced. The first is the one requests go by.
    paths: Vec<String>,
    /// Lookups the kernel has not forgotten yet.
    lookups: u64,
    /// File id of a file with several names.
    shared: Option<u128>,
}

/// Bidirectional map between inode numbers and paths, with lookup counts.
#[derive(Debug)]
pub struct InodeTable {
    nodes: HashMap<u64, Node>,
    /// Path -> inode number, ordered so that a directory's descendants form one range.
    by_path: BTreeMap<String, u64>,
    /// File id -> inode number of the shared files known.
    by_file: HashMap<u128, u64>,
    next_fallback: u64,
}

impl Default for InodeTable {
    fn default() -> Self {
        InodeTable::new()
    }
}

/// The hash-derived inode number of a path: in `2..FALLBACK_BASE`.
pub fn hashed_ino(path: &str) -> u64 {
    if path == "/" {
        return ROOT_INO;
    }
    hash_to_ino(xxhash_rust::xxh3::xxh3_64(path.as_bytes()))
}

/// The hash-derived inode number of a shared file, from its file id.
fn file_ino(file_id: u128) -> u64 {
    hash_to_ino(xxhash_rust::xxh3::xxh3_64(&file_id.to_le_bytes()))
}

fn hash_to_ino(h: u64) -> u64 {
    (h & (FALLBACK_BASE - 1)).max(2)
}

/// Joins a directory path and an entry name.
pub fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// The parent directory of a normalised path ("/" for "/" itself).
pub fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

impl InodeTable {
    /// A table holding only the root.
    pub fn new() -> InodeTable {
        let mut t = InodeTable {
            nodes: HashMap::new(),
            by_path: BTreeMap::new(),
            by_file: HashMap::new(),
            next_fallback: FALLBACK_BASE,
        };
        t.nodes.insert(
            ROOT_INO,
            Node {
                paths: vec!["/".to_string()],
                lookups: 1,
                shared: None,
            },
        );
        t.by_path.insert("/".to_string(), ROOT_INO);
        t
    }

    /// The current path of an inode; `None` if unknown or removed.
    pub fn path(&self, ino: u64) -> Option<String> {
        self.nodes.get(&ino).and_then(|n| n.paths.first().cloned())
    }

    /// Records one kernel lookup of `path` and returns its inode number, creating the entry
    /// if needed.
    #[cfg(test)]
    pub fn lookup(&mut self, path: &str) -> u64 {
        self.lookup_entry(path, None)
    }

    /// Records one kernel lookup of `path`, a name of the shared file `shared` if given, and
    /// returns its inode number: the one its other names have, if one is known.
    pub fn lookup_entry(&mut self, path: &str, shared: Option<u128>) -> u64 {
        let ino = match self.by_path.get(path) {
            Some(&ino) => ino,
            None => {
                let known = shared.and_then(|id| self.by_file.get(&id).copied());
                let ino = match known {
                    Some(ino) => ino,
                    None => {
                        let wanted = shared.map_or_else(|| hashed_ino(path), file_ino);
                        let ino = self.free_ino(wanted);
                        self.nodes.insert(
                            ino,
                            Node {
                                paths: Vec::new(),
                                lookups: 0,
                                shared: None,
                            },
                        );
                        ino
                    }
                };
                self.add_path(ino, path);
                ino
            }
        };
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.lookups = node.lookups.saturating_add(1);
        }
        if let Some(id) = shared {
            self.mark_shared(ino, id);
        }
        ino
    }

    /// `path` became one more name of the inode `ino`, the shared file `file_id` (link(2));
    /// counts as a lookup, like the entry the kernel gets back.
    pub fn link(&mut self, ino: u64, path: &str, file_id: u128) {
        if !self.nodes.contains_key(&ino) {
            return;
        }
        self.remove(path);
        self.add_path(ino, path);
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.lookups = node.lookups.saturating_add(1);
        }
        self.mark_shared(ino, file_id);
    }

    /// The inode number to report for `path` in a directory listing: the known entry's, or
    /// the hash-derived one. Creates nothing and counts no lookup.
    pub fn peek(&self, path: &str, shared: Option<u128>) -> u64 {
        if let Some(&ino) = self.by_path.get(path) {
            return ino;
        }
        match shared {
            Some(id) => self
                .by_file
                .get(&id)
                .copied()
                .unwrap_or_else(|| file_ino(id)),
            None => hashed_ino(path),
        }
    }

    /// The kernel forgot `n` lookups of `ino`; drops the entry when none remain.
    pub fn forget(&mut self, ino: u64, n: u64) {
        if ino == ROOT_INO {
            return;
        }
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups > 0 {
            return;
        }
        for path in std::mem::take(&mut node.paths) {
            if self.by_path.get(&path) == Some(&ino) {
                self.by_path.remove(&path);
            }
        }
        self.drop_node(ino);
    }

    /// `path` was removed (unlink, rmdir, or replaced by a rename): detaches it and every
    /// entry below it from their paths. Their numbers stay reserved until forgotten.
    pub fn remove(&mut self, path: &str) {
        for (p, ino) in self.take_subtree(path) {
            self.detach(ino, &p);
        }
    }

    /// `from` was renamed to `to`: whatever was at `to` is detached, and `from` and all its
    /// descendants are re-keyed under `to`, keeping their inode numbers.
    pub fn rename(&mut self, from: &str, to: &str) {
        if from == to {
            return;
        }
        self.remove(to);
        for (old, ino) in self.take_subtree(from) {
            let new = format!("{to}{}", &old[from.len()..]);
            if let Some(node) = self.nodes.get_mut(&ino) {
                match node.paths.iter_mut().find(|p| **p == old) {
                    Some(p) => *p = new.clone(),
                    None => node.paths.push(new.clone()),
                }
            }
            self.by_path.insert(new, ino);
        }
    }

    /// Number of entries (the root included).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether only the root is known.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.nodes.len() <= 1
    }

    /// Adds `path` to the names of `ino`.
    fn add_path(&mut self, ino: u64, path: &str) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            if !node.paths.iter().any(|p| p == path) {
                node.paths.push(path.to_string());
            }
        }
        self.by_path.insert(path.to_string(), ino);
    }

    /// Records that `ino` is the shared file `file_id`.
    fn mark_shared(&mut self, ino: u64, file_id: u128) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            if node.shared.is_none() {
                node.shared = Some(file_id);
                self.by_file.entry(file_id).or_insert(ino);
            }
        }
    }

    /// Removes and returns the path mappings of `path` and of every path below it.
    fn take_subtree(&mut self, path: &str) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        if path == "/" {
            return out; // the root is never removed or renamed
        }
        if let Some(ino) = self.by_path.remove(path) {
            out.push((path.to_string(), ino));
        }
        let prefix = format!("{path}/");
        let below: Vec<String> = self
            .by_path
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix))
            .map(|(p, _)| p.clone())
            .collect();
        for p in below {
            if let Some(ino) = self.by_path.remove(&p) {
                out.push((p, ino));
            }
        }
        out
    }

    /// Detaches an entry from the path `path` (its mapping is already gone from `by_path`).
    fn detach(&mut self, ino: u64, path: &str) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.paths.retain(|p| p != path);
            if node.paths.is_empty() && node.lookups == 0 {
                self.drop_node(ino);
            }
        }
    }

    /// Forgets an inode for good.
    fn drop_node(&mut self, ino: u64) {
        if let Some(Node {
            shared: Some(id), ..
        }) = self.nodes.remove(&ino)
        {
            if self.by_file.get(&id) == Some(&ino) {
                self.by_file.remove(&id);
            }
        }
    }

    /// An unused inode number: `wanted` if free, else one from the fallback range.
    fn free_ino(&mut self, wanted: u64) -> u64 {
        if !self.nodes.contains_key(&wanted) {
            return wanted;
        }
        loop {
            let ino = self.next_fallback;
            self.next_fallback = self.next_fallback.checked_add(1).unwrap_or(FALLBACK_BASE);
            if !self.nodes.contains_key(&ino) {
                return ino;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_one_and_never_forgotten() {
        let mut t = InodeTable::new();
        assert_eq!(t.path(ROOT_INO).as_deref(), Some("/"));
        assert_eq!(t.lookup("/"), ROOT_INO);
        t.forget(ROOT_INO, 100);
        assert_eq!(t.path(ROOT_INO).as_deref(), Some("/"));
        t.remove("/");
        assert_eq!(t.path(ROOT_INO).as_deref(), Some("/"));
    }

    #[test]
    fn lookup_is_stable_and_matches_peek() {
        let mut t = InodeTable::new();
        let before = t.peek("/a/b", None);
        let a = t.lookup("/a/b");
        assert_eq!(a, before);
        assert_eq!(t.lookup("/a/b"), a);
        assert_ne!(a, ROOT_INO);
        assert_eq!(t.path(a).as_deref(), Some("/a/b"));
        assert_ne!(t.lookup("/a/c"), a);
    }

    #[test]
    fn forget_honours_lookup_counts() {
        let mut t = InodeTable::new();
        let a = t.lookup("/f");
        t.lookup("/f");
        t.lookup("/f");
        t.forget(a, 2);
        assert_eq!(t.path(a).as_deref(), Some("/f"));
        t.forget(a, 1);
        assert_eq!(t.path(a), None);
        assert_eq!(t.len(), 1);
        assert!(t.is_empty());
        // Forgetting an unknown inode is harmless.
        t.forget(12345, 1);
    }

    #[test]
    fn rename_of_a_directory_rekeys_descendants() {
        let mut t = InodeTable::new();
        let d = t.lookup("/d");
        let f = t.lookup("/d/f");
        let s = t.lookup("/d/sub");
        let g = t.lookup("/d/sub/g");
        let other = t.lookup("/dx"); // shares the prefix "/d" but is not below "/d"
        t.rename("/d", "/e");
        assert_eq!(t.path(d).as_deref(), Some("/e"));
        assert_eq!(t.path(f).as_deref(), Some("/e/f"));
        assert_eq!(t.path(s).as_deref(), Some("/e/sub"));
        assert_eq!(t.path(g).as_deref(), Some("/e/sub/g"));
        assert_eq!(t.path(other).as_deref(), Some("/dx"));
        assert_eq!(t.peek("/e/sub/g", None), g);
        // A new entry at the old path gets a fresh number, not the renamed one's.
        let new_d = t.lookup("/d");
        assert_ne!(new_d, d);
        assert_eq!(t.path(new_d).as_deref(), Some("/d"));
        // The new "/d" is empty as far as the table knows.
        let new_f = t.lookup("/d/f");
        assert_ne!(new_f, f);
    }

    #[test]
    fn rename_over_an_existing_entry_detaches_the_target() {
        let mut t = InodeTable::new();
        let a = t.lookup("/a");
        let b = t.lookup("/b");
        t.rename("/a", "/b");
        assert_eq!(t.path(a).as_deref(), Some("/b"));
        assert_eq!(t.path(b), None);
        // The replaced inode stays reserved until the kernel forgets it.
        assert_eq!(t.len(), 3);
        t.forget(b, 1);
        assert_eq!(t.len(), 2);
        assert_eq!(t.path(a).as_deref(), Some("/b"));
    }

    #[test]
    fn rename_into_a_subdirectory_path() {
        let mut t = InodeTable::new();
        let x = t.lookup("/x");
        let y = t.lookup("/x/y");
        t.rename("/x", "/z/x");
        assert_eq!(t.path(x).as_deref(), Some("/z/x"));
        assert_eq!(t.path(y).as_deref(), Some("/z/x/y"));
    }

    #[test]
    fn unlink_detaches_and_number_is_not_reused_while_held() {
        let mut t = InodeTable::new();
        let a = t.lookup("/a");
        t.remove("/a");
        assert_eq!(t.path(a), None);
        let a2 = t.lookup("/a");
        assert_ne!(a2, a, "the old number is still held by the kernel");
        t.forget(a, 1);
        assert_eq!(t.path(a2).as_deref(), Some("/a"));
        t.remove("/a");
        t.forget(a2, 1);
        assert!(t.is_empty());
    }

    #[test]
    fn rmdir_detaches_stale_descendants() {
        let mut t = InodeTable::new();
        let d = t.lookup("/d");
        let f = t.lookup("/d/f");
        t.remove("/d");
        assert_eq!(t.path(d), None);
        assert_eq!(t.path(f), None);
    }

    #[test]
    fn names_of_a_shared_file_are_one_inode() {
        let mut t = InodeTable::new();
        // Linked through this mount: the new name joins the old name's inode.
        let a = t.lookup("/a");
        t.link(a, "/d/b", 42);
        assert_eq!(t.lookup_entry("/d/b", Some(42)), a);
        assert_eq!(t.peek("/d/b", Some(42)), a);
        assert_eq!(t.peek("/d/c", Some(42)), a, "a name not looked up yet");
        // Removing the first name leaves the other to go by.
        t.remove("/a");
        assert_eq!(t.path(a).as_deref(), Some("/d/b"));
        t.rename("/d", "/e");
        assert_eq!(t.path(a).as_deref(), Some("/e/b"));
        t.forget(a, 3);
        assert!(t.is_empty());
        assert_eq!(t.peek("/e/b", Some(42)), file_ino(42));
        // Linked elsewhere: both names get the number of the file id.
        let x = t.lookup_entry("/x", Some(7));
        let y = t.lookup_entry("/y", Some(7));
        assert_eq!((x, y), (file_ino(7), file_ino(7)));
        t.remove("/x");
        t.remove("/y");
        assert_eq!(t.path(x), None);
        t.forget(x, 2);
        assert!(t.is_empty());
    }

    #[test]
    fn path_helpers() {
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
        assert_eq!(parent_of("/a/b"), "/a");
        assert_eq!(parent_of("/a"), "/");
        assert_eq!(parent_of("/"), "/");
        assert_eq!(hashed_ino("/"), ROOT_INO);
        assert!(hashed_ino("/a") >= 2 && hashed_ino("/a") < FALLBACK_BASE);
    }
}
