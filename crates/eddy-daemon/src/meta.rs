//! The metadata store: one fjall keyspace mapping `path::meta_key(path)` to
//! `Inode::to_record()`. Every read-modify-write of one key runs under that key's stripe of a
//! lock table, so concurrent operations on one path never lose an update. All functions
//! block: call them from the blocking pool. The intents of unfinished directory renames live
//! beside it (`intents.rs`).
//!
//! The store holds records only: it does no backend I/O. An operation that may meet a path
//! under a linked prefix takes the backend tier as a `Through` (`through.rs`), which it calls
//! under the key's lock to import an entry not held yet or to write a change through before
//! the record is stored (`NoBackend`, in tests, is the store alone). The tier's own operations on
//! records (directory import, validation, finalisation) use the primitives here: keys, the
//! key locks, get, put, delete and scans.

pub mod changes;
mod copies;
mod intents;
mod lazy;
mod links;
pub mod pending;
mod removals;
mod stamp;
mod through;
mod xattr;

pub use lazy::LazyKeyspace;
pub use links::{ESHARED, LINK_MAX};
#[cfg(test)]
pub use through::NoBackend;
pub use through::Through;

use crate::locks::StripedLocks;
use crate::DaemonError;
use eddy_config::Config;
use eddy_proto::path::{self, PathLimits};
use eddy_proto::{
    DirEntry, Errno, FileKind, Inode, RemoveKind, SetAttr, SetTime, SubtreeEntry, Timespec,
};
use fjall::{Database, PersistMode};
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::MutexGuard;

/// Name of the keyspace holding the metadata records.
pub const META_KEYSPACE: &str = "meta";

/// Permission bits kept by `SetAttr` (and stored in an inode).
const MODE_BITS: u32 = 0o7777;

/// A page of a listing: the items and whether further ones exist.
pub struct Page<T> {
    pub items: Vec<T>,
    pub more: bool,
}

/// The metadata store of one daemon.
pub struct MetaStore {
    db: Database,
    /// The records (made on the first one: a fresh daemon holds none).
    meta: LazyKeyspace,
    /// The backend tier's keyspace, opened here in the same journal and handed to the tier
    /// (made on its first record).
    records: LazyKeyspace,
    /// Unfinished directory renames of paths this daemon owns (decision 0010).
    intents: intents::Intents,
    locks: StripedLocks,
    /// Entries held; counted exactly at open and kept by every insert and remove.
    entries: AtomicU64,
    limits: PathLimits,
    /// Budget of encoded bytes for one listing reply, so a page always fits a frame.
    reply_budget: usize,
    /// Records of removals copied here from another owner, for a retried remove.
    removals: removals::Removals,
    /// Keys changed here whose copies may not have them yet (decision 0080).
    pending: pending::Pending,
}

pub(crate) fn fjall_err(what: &str, e: fjall::Error) -> Errno {
    if matches!(e, fjall::Error::Poisoned) {
        // fjall refuses every write after one of its journal writes failed.
        return Errno::eio(format!(
            "metadata store: {what}: the store refuses writes since one failed (was its device \
             full?): the daemon restarts itself once its device has room (one that root started \
             with --user must be restarted)"
        ));
    }
    Errno::eio(format!("metadata store: {what}: {e}"))
}

impl MetaStore {
    /// Opens (or creates, or recovers) the store in `dir`.
    pub fn open(dir: &Path, config: &Config) -> Result<MetaStore, DaemonError> {
        let meta_err = |message: String| DaemonError::Meta {
            path: dir.to_owned(),
            message,
        };
        let db = Database::builder(dir).open().map_err(|e| match e {
            fjall::Error::Locked => meta_err(
                "it is locked by another process; is another eddyd running on this root?".into(),
            ),
            e => meta_err(e.to_string()),
        })?;
        let meta = LazyKeyspace::open(&db, META_KEYSPACE).map_err(|e| meta_err(e.to_string()))?;
        let records = LazyKeyspace::open(&db, crate::tier::TIER_KEYSPACE)
            .map_err(|e| meta_err(e.to_string()))?;
        let intents = intents::Intents::open(&db).map_err(|e| meta_err(e.to_string()))?;
        let pending = LazyKeyspace::open(&db, pending::PENDING_KEYSPACE)
            .map(pending::Pending::new)
            .map_err(|e| meta_err(e.to_string()))?;
        let count = meta
            .len()
            .map_err(|e| meta_err(format!("cannot count entries: {e}")))?;
        Ok(MetaStore {
            db,
            meta,
            records,
            intents,
            locks: StripedLocks::default(),
            entries: AtomicU64::new(count as u64),
            limits: PathLimits {
                max_path: config.max_path_bytes,
                max_name: config.max_name_bytes,
            },
            reply_budget: config.max_rpc_data_bytes as usize,
            // A client retries on the next copy within its deadline of the first attempt.
            removals: removals::Removals::new(std::time::Duration::from_millis(
                2 * (config.rpc_timeout_ms + config.connect_timeout_ms),
            )),
            pending,
        })
    }

    /// Whether the store refuses every write since one of its journal writes or flushes
    /// failed (fjall's poisoned state, which lasts until the store is opened again).
    pub fn refuses_writes(&self) -> bool {
        matches!(
            self.db.persist(PersistMode::Buffer),
            Err(fjall::Error::Poisoned)
        )
    }

    /// The chunk map's keyspace (decision 0015): in the same journal as the metadata, made
    /// on its first record.
    pub fn chunk_records(&self) -> Result<LazyKeyspace, Errno> {
        LazyKeyspace::open(&self.db, crate::chunks::CHUNK_KEYSPACE)
            .map_err(|e| fjall_err("chunk map", e))
    }

    /// The hints keyspace (decision 0021): in the same journal as the metadata, made on its
    /// first record.
    pub fn hint_records(&self) -> Result<LazyKeyspace, Errno> {
        LazyKeyspace::open(&self.db, crate::HINTS_KEYSPACE).map_err(|e| fjall_err("hints", e))
    }

    /// Every metadata key held and its record, in key order, to `f` (a full resync,
    /// decision 0021); `f` returns false to stop.
    pub fn each_key(&self, mut f: impl FnMut(&[u8], &[u8]) -> bool) -> Result<(), Errno> {
        for guard in self.meta.iter() {
            let (k, v) = guard.into_inner().map_err(|e| fjall_err("scan", e))?;
            if !f(&k, &v) {
                break;
            }
        }
        Ok(())
    }

    /// The backend tier's keyspace (shared with the chunk side of the tier).
    pub fn tier_records(&self) -> LazyKeyspace {
        self.records.clone()
    }

    /// The path limits the store checks.
    pub fn limits(&self) -> PathLimits {
        self.limits
    }

    /// Number of entries held.
    pub fn entries(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }

    /// Makes every acknowledged metadata change durable (journal fsync).
    pub fn persist(&self) -> Result<(), Errno> {
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| fjall_err("persist", e))
    }

    /// The normalised path and the key of an entry; an identity record's name
    /// (`path::identity_path`) gives its identity key.
    pub(crate) fn key_of(&self, p: &str) -> Result<(String, Vec<u8>), Errno> {
        if let Some(id) = path::parse_identity(p) {
            return Ok((p.to_string(), path::identity_key(id)));
        }
        let norm = path::normalize(p, self.limits)?;
        let key = path::meta_key(&norm);
        Ok((norm, key))
    }

    /// Locks the stripe of `key`: a read-modify-write of the key runs under it.
    pub(crate) fn lock(&self, key: &[u8]) -> MutexGuard<'_, ()> {
        self.locks.lock(key)
    }

    /// The entry under `key`, if held.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Inode>, Errno> {
        match self.meta.get(key).map_err(|e| fjall_err("get", e))? {
            Some(v) => Inode::from_record(&v).map(Some),
            None => Ok(None),
        }
    }

    /// Stores `inode` under `key`; `existed` says whether the key was present before.
    pub(crate) fn put(&self, key: &[u8], inode: &Inode, existed: bool) -> Result<(), Errno> {
        self.note_change(key)?;
        self.meta
            .insert(key, inode.to_record())
            .map_err(|e| fjall_err("insert", e))?;
        if !existed {
            self.entries.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Removes the entry under `key`, which is present.
    pub(crate) fn delete(&self, key: &[u8]) -> Result<(), Errno> {
        self.note_change(key)?;
        self.meta.remove(key).map_err(|e| fjall_err("remove", e))?;
        self.entries.fetch_sub(1, Ordering::Relaxed);
        Ok(())
    }

    /// The entry of `norm`, imported through `via` if it is linked and not held yet.
    /// The caller holds the key's lock.
    pub(crate) fn get_or_import(
        &self,
        norm: &str,
        key: &[u8],
        via: &dyn Through,
    ) -> Result<Option<Inode>, Errno> {
        if let Some(i) = self.get(key)? {
            return Ok(Some(i));
        }
        let Some(inode) = via.import(norm)? else {
            return Ok(None);
        };
        self.put(key, &inode, false)?;
        Ok(Some(inode))
    }

    /// Runs a read-modify-write on the entry of `p` under its stripe lock: `f` gets the
    /// current inode and returns the new one (stored) and the reply value.
    fn update<R>(
        &self,
        p: &str,
        via: &dyn Through,
        f: impl FnOnce(&str, Inode) -> Result<(Inode, R), Errno>,
    ) -> Result<R, Errno> {
        let (norm, key) = self.key_of(p)?;
        let _guard = self.locks.lock(&key);
        let old = self
            .get_or_import(&norm, &key, via)?
            .ok_or_else(|| Errno::enoent(&norm))?;
        let old = self.not_a_name(&norm, &key, old)?;
        let (new, reply) = f(&norm, old)?;
        self.put(&key, &new, true)?;
        Ok(reply)
    }

    /// Create: EEXIST with `exclusive` if present; without, an existing entry is returned
    /// as is, whatever its kind (the client interprets it). A new entry is written through
    /// `via` before its record is stored.
    pub fn create(
        &self,
        p: &str,
        inode: Inode,
        exclusive: bool,
        via: &dyn Through,
    ) -> Result<Inode, Errno> {
        let (norm, key) = self.key_of(p)?;
        let _guard = self.locks.lock(&key);
        if let Some(existing) = self.get_or_import(&norm, &key, via)? {
            if exclusive {
                return Err(Errno::new(libc::EEXIST, format!("{norm}: file exists")));
            }
            return self.not_a_name(&norm, &key, existing);
        }
        let mut inode = Inode {
            mode: inode.mode & MODE_BITS,
            ..inode
        };
        via.create(&norm, &mut inode)?;
        self.put(&key, &inode, false)?;
        Ok(inode)
    }

    /// The entry of `p`, imported through `via` if it is linked and not held yet.
    pub fn stat(&self, p: &str, via: &dyn Through) -> Result<Inode, Errno> {
        let (norm, key) = self.key_of(p)?;
        if let Some(i) = self.get(&key)? {
            return self.not_a_name(&norm, &key, i);
        }
        if !via.linked(&norm) {
            return Err(Errno::enoent(&norm));
        }
        let _guard = self.locks.lock(&key);
        let i = self
            .get_or_import(&norm, &key, via)?
            .ok_or_else(|| Errno::enoent(&norm))?;
        self.not_a_name(&norm, &key, i)
    }

    /// Removes an entry; unlink and rmdir (not `Any`, the half of a rename) are written
    /// through `via` (to the backend of a linked path) before the record goes.
    pub fn remove(&self, p: &str, kind: RemoveKind, via: &dyn Through) -> Result<Inode, Errno> {
        let (norm, key) = self.key_of(p)?;
        let _guard = self.locks.lock(&key);
        let old = match kind {
            RemoveKind::Any => self.get(&key)?,
            _ => self.get_or_import(&norm, &key, via)?,
        };
        let Some(old) = old else {
            // The retry of a removal the first owner applied and copied here before it
            // died: answered with the record it removed (`removals.rs`).
            return match self.removals.take(&key) {
                Some(record) => removed_kind_ok(&norm, kind, Inode::from_record(&record)?),
                None => Err(Errno::enoent(&norm)),
            };
        };
        let old = removed_kind_ok(&norm, kind, old)?;
        if kind != RemoveKind::Any {
            via.remove(&norm, old.kind)?;
        }
        self.delete(&key)?;
        Ok(old)
    }

    /// Changes attributes, written through `via` (to the backend of a linked path) before
    /// the record is stored.
    pub fn set_attr(&self, p: &str, attr: &SetAttr, via: &dyn Through) -> Result<Inode, Errno> {
        self.update(p, via, |norm, old| {
            let mut new = apply_attr(old, attr, Timespec::now());
            via.set_attr(norm, attr, &mut new)?;
            Ok((new.clone(), new))
        })
    }

    /// Raises the size to at least `size`; mtime and ctime become now.
    pub fn grow_size(&self, p: &str, size: u64, via: &dyn Through) -> Result<Inode, Errno> {
        self.update(p, via, |norm, mut ino| {
            not_dir(norm, &ino)?;
            let now = Timespec::now();
            ino.size = ino.size.max(size);
            ino.mtime = now;
            ino.ctime = now;
            Ok((ino.clone(), ino))
        })
    }

    /// Reserves `len` bytes at the end: returns the old size, which grows by `len`.
    pub fn reserve_append(&self, p: &str, len: u64, via: &dyn Through) -> Result<u64, Errno> {
        self.update(p, via, |norm, mut ino| {
            not_dir(norm, &ino)?;
            let offset = ino.size;
            ino.size = offset
                .checked_add(len)
                .ok_or_else(|| Errno::new(libc::EFBIG, format!("{norm}: size would overflow")))?;
            let now = Timespec::now();
            ino.mtime = now;
            ino.ctime = now;
            Ok((ino, offset))
        })
    }

    /// Inserts an entry as given; without `replace`, an existing entry gives EEXIST.
    pub fn insert(&self, p: &str, inode: Inode, replace: bool) -> Result<(), Errno> {
        let (norm, key) = self.key_of(p)?;
        let _guard = self.locks.lock(&key);
        let existed = self.get(&key)?.is_some();
        if existed && !replace {
            return Err(Errno::new(libc::EEXIST, format!("{norm}: file exists")));
        }
        self.put(&key, &inode, existed)
    }

    /// Whether `dir` has entries here (a linked directory's are imported by the tier first).
    pub fn has_children(&self, dir: &str) -> Result<bool, Errno> {
        let (norm, _) = self.key_of(dir)?;
        match self.meta.prefix(path::children_prefix(&norm)).next() {
            Some(guard) => guard.key().map(|_| true).map_err(|e| fjall_err("scan", e)),
            None => Ok(false),
        }
    }

    /// Children of `dir` with names strictly after `after`, in name order (a linked
    /// directory's are imported by the tier before the first page).
    pub fn readdir(
        &self,
        dir: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Page<DirEntry>, Errno> {
        let (norm, _) = self.key_of(dir)?;
        let prefix = path::children_prefix(&norm);
        let cursor = after.map(|a| [prefix.as_slice(), a.as_bytes()].concat());
        let mut page = Page {
            items: Vec::new(),
            more: false,
        };
        let mut budget = self.reply_budget;
        self.scan(&prefix, cursor.as_deref(), |key, inode| {
            let name = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
            push_limited(
                &mut page,
                &mut budget,
                limit,
                name.len() + variable_bytes(&inode),
                DirEntry { name, inode },
            )
        })?;
        Ok(page)
    }

    /// Entries strictly below `dir`, in metadata key order (parent path, then name),
    /// continuing strictly after the entry of the path `after`.
    pub fn list_subtree(
        &self,
        dir: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Page<SubtreeEntry>, Errno> {
        let (norm, _) = self.key_of(dir)?;
        let prefixes: Vec<Vec<u8>> = if norm == "/" {
            vec![b"/".to_vec()]
        } else {
            path::subtree_prefixes(&norm).to_vec()
        };
        let cursor = after.map(|a| self.key_of(a).map(|(_, k)| k)).transpose()?;
        let mut page = Page {
            items: Vec::new(),
            more: false,
        };
        let mut budget = self.reply_budget;
        for prefix in &prefixes {
            let go_on = self.scan(prefix, cursor.as_deref(), |key, inode| {
                let Some(path) = path::key_to_path(key) else {
                    tracing::warn!(key = ?key, "skipping a malformed metadata key");
                    return Ok(true);
                };
                push_limited(
                    &mut page,
                    &mut budget,
                    limit,
                    path.len() + variable_bytes(&inode),
                    SubtreeEntry { path, inode },
                )
            })?;
            if !go_on {
                break;
            }
        }
        Ok(page)
    }

    /// Visits the entries whose key starts with `prefix` and is after `cursor`, in key
    /// order, while `visit` returns true. Returns false if `visit` stopped the scan.
    pub(crate) fn scan(
        &self,
        prefix: &[u8],
        cursor: Option<&[u8]>,
        mut visit: impl FnMut(&[u8], Inode) -> Result<bool, Errno>,
    ) -> Result<bool, Errno> {
        let start = match cursor {
            Some(c) if c >= prefix => Bound::Excluded(c.to_vec()),
            _ => Bound::Included(prefix.to_vec()),
        };
        for guard in self.meta.range::<Vec<u8>, _>((start, Bound::Unbounded)) {
            let (key, value) = guard.into_inner().map_err(|e| fjall_err("scan", e))?;
            if !key.starts_with(prefix) {
                break;
            }
            if !visit(&key, Inode::from_record(&value)?)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Bytes of an inode beyond its fixed size: symlink target and extended attributes (with
/// their length prefixes).
fn variable_bytes(inode: &Inode) -> usize {
    inode.target.as_ref().map_or(0, String::len) + inode.xattr_bytes() + 16 * inode.xattrs.len()
}

/// Adds an item to a page unless the page is full (by count or by bytes); a full page
/// marks `more` and stops the scan.
fn push_limited<T>(
    page: &mut Page<T>,
    budget: &mut usize,
    limit: u32,
    name_len: usize,
    item: T,
) -> Result<bool, Errno> {
    let cost = name_len + std::mem::size_of::<Inode>();
    if page.items.len() >= limit as usize || (cost > *budget && !page.items.is_empty()) {
        page.more = true;
        return Ok(false);
    }
    *budget = budget.saturating_sub(cost);
    page.items.push(item);
    Ok(true)
}

/// `old`, when a removal of `kind` may remove it: unlink refuses a directory, rmdir
/// anything else.
fn removed_kind_ok(norm: &str, kind: RemoveKind, old: Inode) -> Result<Inode, Errno> {
    match (kind, old.kind) {
        (RemoveKind::NotDir, FileKind::Dir) => {
            Err(Errno::new(libc::EISDIR, format!("{norm}: is a directory")))
        }
        (RemoveKind::Dir, k) if k != FileKind::Dir => Err(Errno::new(
            libc::ENOTDIR,
            format!("{norm}: not a directory"),
        )),
        _ => Ok(old),
    }
}

fn not_dir(norm: &str, ino: &Inode) -> Result<(), Errno> {
    if ino.kind == FileKind::Dir {
        return Err(Errno::new(libc::EISDIR, format!("{norm}: is a directory")));
    }
    Ok(())
}

fn resolve_time(t: SetTime, now: Timespec) -> Timespec {
    match t {
        SetTime::Now => now,
        SetTime::At(ts) => ts,
    }
}

/// Applies attribute changes; ctime becomes `now` if anything was asked to change, and so does
/// mtime with a new size unless the request sets it. A chown
/// or chgrp of anything but a directory clears the set-id bits (set-group-ID only with group
/// execute), whoever asks, as Linux does, unless the same request sets the mode (the kernel
/// sends the mode it computed with the owner).
fn apply_attr(mut ino: Inode, attr: &SetAttr, now: Timespec) -> Inode {
    if let Some(mode) = attr.mode {
        ino.mode = mode & MODE_BITS;
    } else if (attr.uid.is_some() || attr.gid.is_some()) && ino.kind != FileKind::Dir {
        ino.mode = stamp::without_setid(ino.mode);
    }
    if let Some(uid) = attr.uid {
        ino.uid = uid;
    }
    if let Some(gid) = attr.gid {
        ino.gid = gid;
    }
    if let Some(size) = attr.size {
        ino.size = size;
    }
    if let Some(t) = attr.atime {
        ino.atime = resolve_time(t, now);
    }
    match attr.mtime {
        Some(t) => ino.mtime = resolve_time(t, now),
        // A truncate (`truncate`, `ftruncate`, `O_TRUNC`) moves the mtime too, even to the
        // size the file had, as Linux does; the kernel sends a FUSE setattr with the size only.
        None if attr.size.is_some() => ino.mtime = now,
        None => {}
    }
    if *attr != SetAttr::default() {
        ino.ctime = now;
    }
    ino
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(size: u64) -> Inode {
        Inode {
            size,
            ..Inode::new(FileKind::File, 7, 0o644, 1, 1)
        }
    }

    #[test]
    fn a_fresh_store_makes_its_keyspaces_with_their_first_records_and_finds_them_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::default();
        let made = |store: &MetaStore| {
            let mut names: Vec<String> = store
                .db
                .list_keyspace_names()
                .iter()
                .map(|n| n.to_string())
                .collect();
            names.sort();
            names
        };
        {
            let store = MetaStore::open(dir.path(), &config).unwrap();
            assert_eq!(made(&store), Vec::<String>::new(), "none at open");
            assert_eq!(store.entries(), 0);
            assert!(store.stat("/f", &NoBackend).is_err());
            store.create("/f", file(3), true, &NoBackend).unwrap();
            assert_eq!(made(&store), vec![META_KEYSPACE.to_string()]);
            store.persist().unwrap();
        }
        let store = MetaStore::open(dir.path(), &config).unwrap();
        assert_eq!(store.entries(), 1);
        assert_eq!(store.stat("/f", &NoBackend).unwrap().size, 3);
    }

    #[test]
    fn apply_attr_masks_mode_and_touches_ctime() {
        let now = Timespec { sec: 100, nsec: 1 };
        let attr = SetAttr {
            mode: Some(0o170755),
            mtime: Some(SetTime::At(Timespec { sec: 5, nsec: 0 })),
            ..Default::default()
        };
        let ino = apply_attr(file(3), &attr, now);
        assert_eq!(ino.mode, 0o755);
        assert_eq!(ino.mtime.sec, 5);
        assert_eq!(ino.ctime, now);
        let untouched = apply_attr(file(3), &SetAttr::default(), now);
        assert_eq!(untouched, file(3));
    }

    #[test]
    fn a_truncate_moves_mtime_unless_the_request_sets_it() {
        let now = Timespec { sec: 100, nsec: 1 };
        let same_size = SetAttr {
            size: Some(3),
            ..Default::default()
        };
        let ino = apply_attr(file(3), &same_size, now);
        assert_eq!((ino.mtime, ino.ctime, ino.atime), (now, now, file(3).atime));
        let given = SetAttr {
            size: Some(0),
            mtime: Some(SetTime::At(Timespec { sec: 5, nsec: 0 })),
            ..Default::default()
        };
        assert_eq!(apply_attr(file(3), &given, now).mtime.sec, 5);
        let chmod = SetAttr {
            mode: Some(0o600),
            ..Default::default()
        };
        assert_eq!(apply_attr(file(3), &chmod, now).mtime, file(3).mtime);
    }

    #[test]
    fn chown_clears_setid_bits_of_files_only() {
        let now = Timespec { sec: 100, nsec: 1 };
        let chown = SetAttr {
            uid: Some(5),
            ..Default::default()
        };
        let setid = Inode {
            mode: 0o6755,
            ..file(0)
        };
        assert_eq!(apply_attr(setid.clone(), &chown, now).mode, 0o755);
        let chgrp = SetAttr {
            gid: Some(5),
            ..Default::default()
        };
        assert_eq!(apply_attr(setid.clone(), &chgrp, now).mode, 0o755);
        // The mode the same request sets wins.
        let both = SetAttr {
            mode: Some(0o4755),
            ..chown.clone()
        };
        assert_eq!(apply_attr(setid, &both, now).mode, 0o4755);
        let dir = Inode::new(FileKind::Dir, 8, 0o2775, 1, 1);
        assert_eq!(apply_attr(dir, &chown, now).mode, 0o2775);
    }

    /// The longest path a configuration may allow is a key the store holds, in the entries
    /// and in the hints that name it (`hint_key` adds 5 bytes); one byte more: ENAMETOOLONG.
    #[test]
    fn the_longest_allowed_path_fits_the_stores_keys() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            max_path_bytes: eddy_config::MAX_PATH_BYTES_LIMIT,
            ..Config::default()
        };
        let store = MetaStore::open(dir.path(), &config).unwrap();
        let mut p = String::new();
        while p.len() + 256 < config.max_path_bytes {
            p.push('/');
            p.push_str(&"x".repeat(255));
        }
        let last = config.max_path_bytes - p.len() - 1;
        p.push('/');
        p.push_str(&"y".repeat(last));
        assert_eq!(p.len(), config.max_path_bytes);
        store.create(&p, file(0), true, &NoBackend).unwrap();
        assert_eq!(store.stat(&p, &NoBackend).unwrap().kind, FileKind::File);
        let key = path::meta_key(&p);
        let hints = crate::hints::Hints::open(store.hint_records().unwrap()).unwrap();
        hints
            .add(u32::MAX, [crate::hints::Item::Key(key.clone())])
            .unwrap();
        assert_eq!(
            hints.page(u32::MAX, None, 1).unwrap(),
            vec![crate::hints::Item::Key(key)]
        );
        let over = format!("{p}z");
        assert_eq!(
            store
                .create(&over, file(0), true, &NoBackend)
                .unwrap_err()
                .errno,
            libc::ENAMETOOLONG
        );
    }

    #[test]
    fn subtree_of_root_and_of_dir_in_key_order() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::default();
        let store = MetaStore::open(dir.path(), &config).unwrap();
        for p in ["/", "/a", "/a/b", "/a/b/c", "/ab", "/a/z"] {
            store.create(p, file(0), true, &NoBackend).unwrap();
        }
        assert_eq!(store.entries(), 6);
        let all = store.list_subtree("/", None, 100).unwrap();
        let paths: Vec<_> = all.items.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["/a", "/ab", "/a/b", "/a/z", "/a/b/c"]);
        let under_a = store.list_subtree("/a", None, 2).unwrap();
        let paths: Vec<_> = under_a.items.iter().map(|e| e.path.clone()).collect();
        assert_eq!(paths, ["/a/b", "/a/z"]);
        assert!(under_a.more);
        let rest = store.list_subtree("/a", Some("/a/z"), 2).unwrap();
        let paths: Vec<_> = rest.items.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["/a/b/c"]);
        assert!(!rest.more);
    }
}
