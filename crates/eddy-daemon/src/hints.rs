//! Hints (decision 0021): the items this daemon holds that another owner missed because it
//! could not be reached, kept durably in the keyspace `hints` of the daemon's store (same
//! journal as the metadata) until the repair loop has pushed them and verified the copy.
//!
//! Key = target daemon id (u32 big-endian) ‖ kind ‖ item; value empty. Kind 0: a metadata
//! key (the key's bytes follow); kind 1: a chunk (file id u128 BE ‖ chunk index u64 BE).
//! A chunk hint means "make the target's chunk what this daemon holds", which for a removed
//! file is "this chunk should not exist on the target".

use crate::meta::LazyKeyspace;
use eddy_proto::sync::lock;
use eddy_proto::{Errno, FileId};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

const KIND_KEY: u8 = 0;
const KIND_CHUNK: u8 = 1;

/// One item another owner missed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Item {
    /// A metadata key.
    Key(Vec<u8>),
    /// A chunk of a file.
    Chunk(FileId, u64),
}

/// The key of a hint for `target`.
pub fn hint_key(target: u32, item: &Item) -> Vec<u8> {
    let mut k = Vec::with_capacity(5 + 24);
    k.extend_from_slice(&target.to_be_bytes());
    match item {
        Item::Key(key) => {
            k.push(KIND_KEY);
            k.extend_from_slice(key);
        }
        Item::Chunk(id, chunk) => {
            k.push(KIND_CHUNK);
            k.extend_from_slice(&id.to_be_bytes());
            k.extend_from_slice(&chunk.to_be_bytes());
        }
    }
    k
}

/// The target and item of a hint's key; `None` for a key of no known layout.
pub fn parse_hint(k: &[u8]) -> Option<(u32, Item)> {
    let target = u32::from_be_bytes(k.get(..4)?.try_into().ok()?);
    let rest = k.get(5..)?;
    match *k.get(4)? {
        KIND_KEY if !rest.is_empty() => Some((target, Item::Key(rest.to_vec()))),
        KIND_CHUNK if rest.len() == 24 => {
            let id = FileId::from_be_bytes(rest[..16].try_into().ok()?);
            let chunk = u64::from_be_bytes(rest[16..].try_into().ok()?);
            Some((target, Item::Chunk(id, chunk)))
        }
        _ => None,
    }
}

fn err(what: &str, e: fjall::Error) -> Errno {
    Errno::eio(format!("hints: {what}: {e}"))
}

/// The hints of one daemon, and how many it holds per target (counted at open, kept by
/// every insert and removal under `counts`).
pub struct Hints {
    records: LazyKeyspace,
    counts: Mutex<BTreeMap<u32, u64>>,
    /// The last sequence number given, and the number of the last `add` of each hint held
    /// already when it was added again (renewed) since the daemon started (under `counts`):
    /// a push drops a hint only when no add renewed it after the push began (`mark`,
    /// `done`) — a change applied while its copy was on the way is pushed again, not
    /// forgotten. A hint first recorded after a push's mark is either not in the page that
    /// push read or read by it after the change that recorded it (the push pages after its
    /// mark, and reads what it sends after the page), so only renewals are kept here.
    renewed: Mutex<(u64, HashMap<Vec<u8>, u64>)>,
}

impl Hints {
    /// Opens the keyspace and counts what it holds; hints of no known layout are dropped.
    pub fn open(records: LazyKeyspace) -> Result<Hints, Errno> {
        let mut counts = BTreeMap::new();
        let mut bad = Vec::new();
        for guard in records.iter() {
            let k = guard.key().map_err(|e| err("scan", e))?;
            match parse_hint(&k) {
                Some((t, _)) => *counts.entry(t).or_insert(0) += 1,
                None => bad.push(k.to_vec()),
            }
        }
        for k in bad {
            records.remove(k).map_err(|e| err("remove", e))?;
        }
        Ok(Hints {
            records,
            counts: Mutex::new(counts),
            renewed: Mutex::default(),
        })
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, u64>> {
        lock(&self.counts)
    }

    /// Records that `target` missed `items` (each once, however often it missed it); a hint
    /// already held is renewed (a push under way does not drop it).
    pub fn add(&self, target: u32, items: impl IntoIterator<Item = Item>) -> Result<(), Errno> {
        let mut counts = self.counts();
        let mut renewed = lock(&self.renewed);
        for item in items {
            let k = hint_key(target, &item);
            renewed.0 += 1;
            let seq = renewed.0;
            if self.records.contains_key(&k).map_err(|e| err("get", e))? {
                renewed.1.insert(k, seq);
            } else {
                self.records.insert(&k, []).map_err(|e| err("insert", e))?;
                *counts.entry(target).or_insert(0) += 1;
            }
        }
        Ok(())
    }

    /// The mark a push takes before it reads what it pushes: `done` with it keeps a hint
    /// renewed since.
    pub fn mark(&self) -> u64 {
        lock(&self.renewed).0
    }

    /// Drops the hint of `item` for `target` (verified on the target by a push that began at
    /// `mark`), unless an `add` renewed it after the mark (`u64::MAX`: whatever happened).
    pub fn done(&self, target: u32, item: &Item, mark: u64) -> Result<(), Errno> {
        let mut counts = self.counts();
        let k = hint_key(target, item);
        let mut renewed = lock(&self.renewed);
        if renewed.1.get(&k).is_some_and(|&seq| seq > mark) {
            return Ok(());
        }
        renewed.1.remove(&k);
        drop(renewed);
        if !self.records.contains_key(&k).map_err(|e| err("get", e))? {
            return Ok(());
        }
        self.records.remove(k).map_err(|e| err("remove", e))?;
        if let Some(c) = counts.get_mut(&target) {
            *c = c.saturating_sub(1);
            if *c == 0 {
                counts.remove(&target);
            }
        }
        Ok(())
    }

    /// Another owner pushed its copy of the metadata key `key` here: what this daemon held
    /// for the others on that key is superseded (the pusher answers for them).
    pub fn drop_key(&self, key: &[u8]) -> Result<(), Errno> {
        let targets: Vec<u32> = self.counts().keys().copied().collect();
        let item = Item::Key(key.to_vec());
        for t in targets {
            self.done(t, &item, u64::MAX)?;
        }
        Ok(())
    }

    /// Up to `limit` items held for `target`, in key order, after `after` (exclusive).
    pub fn page(
        &self,
        target: u32,
        after: Option<&Item>,
        limit: usize,
    ) -> Result<Vec<Item>, Errno> {
        let prefix = target.to_be_bytes();
        let mut out = Vec::new();
        let start = match after {
            Some(a) => std::ops::Bound::Excluded(hint_key(target, a)),
            None => std::ops::Bound::Included(prefix.to_vec()),
        };
        for guard in self
            .records
            .range::<Vec<u8>, _>((start, std::ops::Bound::Unbounded))
        {
            let k = guard.key().map_err(|e| err("scan", e))?;
            if !k.starts_with(&prefix) || out.len() >= limit {
                break;
            }
            if let Some((_, item)) = parse_hint(&k) {
                out.push(item);
            }
        }
        Ok(out)
    }

    /// Hints held per target.
    pub fn per_target(&self) -> Vec<(u32, u64)> {
        self.counts().iter().map(|(t, c)| (*t, *c)).collect()
    }

    /// Hints held for `target`.
    pub fn count_for(&self, target: u32) -> u64 {
        self.counts().get(&target).copied().unwrap_or(0)
    }

    /// Hints held in all.
    pub fn total(&self) -> u64 {
        self.counts().values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hint_keys_round_trip_and_sort_by_target() {
        let items = [
            Item::Key(b"/d\0f".to_vec()),
            Item::Key(vec![0]),
            Item::Key(eddy_proto::path::identity_key(7)),
            Item::Chunk(0x0123_4567_89ab_cdef_0011_2233_4455_6677, 9),
            Item::Chunk(1, u64::MAX),
        ];
        for t in [0u32, 3, u32::MAX] {
            for item in &items {
                let k = hint_key(t, item);
                assert_eq!(&k[..4], &t.to_be_bytes());
                assert_eq!(parse_hint(&k), Some((t, item.clone())));
            }
        }
        let chunk = hint_key(2, &Item::Chunk(5, 1));
        assert_eq!(chunk.len(), 4 + 1 + 16 + 8);
        assert_eq!(chunk[4], KIND_CHUNK);
        // A target's hints are one contiguous range of keys.
        assert!(hint_key(1, &Item::Chunk(u128::MAX, u64::MAX)) < hint_key(2, &Item::Key(vec![0])));
        assert_eq!(parse_hint(&[0, 0, 0, 1]), None);
        assert_eq!(parse_hint(&[0, 0, 0, 1, KIND_KEY]), None);
        assert_eq!(parse_hint(&[0, 0, 0, 1, KIND_CHUNK, 1, 2]), None);
        assert_eq!(parse_hint(&[0, 0, 0, 1, 9, 1]), None);
    }

    #[test]
    fn hints_are_counted_once_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let open = |dir: &std::path::Path| {
            let db = fjall::Database::builder(dir).open().unwrap();
            let ks = crate::meta::LazyKeyspace::open(&db, "hints").unwrap();
            (db, Hints::open(ks).unwrap())
        };
        {
            let (db, h) = open(dir.path());
            h.add(1, [Item::Chunk(5, 0), Item::Chunk(5, 1), Item::Chunk(5, 0)])
                .unwrap();
            h.add(2, [Item::Key(b"/\0a".to_vec())]).unwrap();
            assert_eq!(h.per_target(), vec![(1, 2), (2, 1)]);
            let page = h.page(1, None, 10).unwrap();
            assert_eq!(page, vec![Item::Chunk(5, 0), Item::Chunk(5, 1)]);
            assert_eq!(
                h.page(1, Some(&page[0]), 10).unwrap(),
                vec![Item::Chunk(5, 1)]
            );
            h.done(1, &Item::Chunk(5, 0), u64::MAX).unwrap();
            h.done(1, &Item::Chunk(5, 0), u64::MAX).unwrap();
            assert_eq!(h.count_for(1), 1);
            db.persist(fjall::PersistMode::SyncAll).unwrap();
        }
        let (_db, h) = open(dir.path());
        assert_eq!(h.per_target(), vec![(1, 1), (2, 1)]);
        assert_eq!(h.total(), 2);
    }

    #[test]
    fn a_hint_renewed_while_its_push_was_under_way_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let ks = crate::meta::LazyKeyspace::open(&db, "hints").unwrap();
        let h = Hints::open(ks).unwrap();
        let item = Item::Chunk(7, 3);
        h.add(4, [item.clone()]).unwrap();
        let push = h.mark();
        h.add(4, [item.clone()]).unwrap(); // a write while the copy was on its way
        h.done(4, &item, push).unwrap();
        assert_eq!(h.count_for(4), 1, "the renewed hint stays");
        let again = h.mark();
        h.done(4, &item, again).unwrap();
        assert_eq!(h.count_for(4), 0);
        assert!(h.page(4, None, 10).unwrap().is_empty());
    }
}
