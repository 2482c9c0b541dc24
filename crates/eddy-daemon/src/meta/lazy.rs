//! A keyspace of the metadata store's database made when the first record goes into it
//! (decision 0076, "Keyspaces made as records arrive").
//!
//! Creating a keyspace costs fjall a dozen synced writes (its folder, version and manifest
//! files, and its entry in the database's own keyspace of keyspaces); a fresh daemon that
//! made all of its keyspaces at start paid for those of the metadata records, the chunk
//! map, the backend tier's records and the intents of renames, before any request. A
//! keyspace here that does not exist yet reads as empty; the first write creates it
//! through `Database::keyspace` (synced before it returns, as fjall makes every keyspace),
//! then writes into it. A keyspace that exists when the store opens is opened then, so a
//! restart finds what was written before. Records in it are as durable as before: the same
//! journal, the same writes; only when the keyspace appears changes.

use fjall::{Database, Guard, Keyspace, KeyspaceCreateOptions, UserKey, UserValue};
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex, OnceLock};

/// A keyspace made on its first write; cloning shares it.
#[derive(Clone)]
pub struct LazyKeyspace {
    inner: Arc<Inner>,
}

struct Inner {
    db: Database,
    name: &'static str,
    made: OnceLock<Keyspace>,
    /// Serialises the creation (fjall's own lock makes a second caller open the first's).
    making: Mutex<()>,
}

impl LazyKeyspace {
    /// The keyspace `name` of `db`: opened now if it exists, else made on its first write.
    pub fn open(db: &Database, name: &'static str) -> Result<LazyKeyspace, fjall::Error> {
        let made = OnceLock::new();
        if db.keyspace_exists(name) {
            let _ = made.set(db.keyspace(name, KeyspaceCreateOptions::default)?);
        }
        Ok(LazyKeyspace {
            inner: Arc::new(Inner {
                db: db.clone(),
                name,
                made,
                making: Mutex::new(()),
            }),
        })
    }

    /// The keyspace if it exists.
    pub fn existing(&self) -> Option<&Keyspace> {
        self.inner.made.get()
    }

    /// The keyspace, made now if it does not exist yet.
    pub fn made(&self) -> Result<&Keyspace, fjall::Error> {
        if let Some(ks) = self.inner.made.get() {
            return Ok(ks);
        }
        let _making = eddy_proto::sync::lock(&self.inner.making);
        if let Some(ks) = self.inner.made.get() {
            return Ok(ks);
        }
        let ks = self
            .inner
            .db
            .keyspace(self.inner.name, KeyspaceCreateOptions::default)?;
        Ok(self.inner.made.get_or_init(|| ks))
    }

    pub fn get<K: AsRef<[u8]>>(&self, key: K) -> Result<Option<UserValue>, fjall::Error> {
        match self.existing() {
            Some(ks) => ks.get(key),
            None => Ok(None),
        }
    }

    pub fn contains_key<K: AsRef<[u8]>>(&self, key: K) -> Result<bool, fjall::Error> {
        match self.existing() {
            Some(ks) => ks.contains_key(key),
            None => Ok(false),
        }
    }

    pub fn len(&self) -> Result<usize, fjall::Error> {
        match self.existing() {
            Some(ks) => ks.len(),
            None => Ok(0),
        }
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Guard> + 'static {
        self.existing().map(Keyspace::iter).into_iter().flatten()
    }

    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        range: R,
    ) -> impl DoubleEndedIterator<Item = Guard> + 'static {
        self.existing()
            .map(|ks| ks.range(range))
            .into_iter()
            .flatten()
    }

    pub fn prefix<K: AsRef<[u8]>>(
        &self,
        prefix: K,
    ) -> impl DoubleEndedIterator<Item = Guard> + 'static {
        self.existing()
            .map(|ks| ks.prefix(prefix))
            .into_iter()
            .flatten()
    }

    pub fn insert<K: Into<UserKey>, V: Into<UserValue>>(
        &self,
        key: K,
        value: V,
    ) -> Result<(), fjall::Error> {
        self.made()?.insert(key, value)
    }

    /// Removes `key`; nothing to do in a keyspace not made yet.
    pub fn remove<K: Into<UserKey>>(&self, key: K) -> Result<(), fjall::Error> {
        match self.existing() {
            Some(ks) => ks.remove(key),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_on_first_write_and_found_on_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Database::builder(dir.path()).open().unwrap();
            let lazy = LazyKeyspace::open(&db, "later").unwrap();
            assert!(lazy.existing().is_none());
            assert_eq!(lazy.get(b"k").unwrap(), None);
            assert!(!lazy.contains_key(b"k").unwrap());
            assert_eq!(lazy.iter().count(), 0);
            assert_eq!(lazy.prefix(b"k").count(), 0);
            assert_eq!(lazy.range::<&[u8], _>(..).count(), 0);
            lazy.remove(b"k".as_slice()).unwrap();
            assert!(
                !db.keyspace_exists("later"),
                "a read or removal makes nothing"
            );
            let shared = lazy.clone();
            shared.insert(b"k".as_slice(), b"v".as_slice()).unwrap();
            assert!(db.keyspace_exists("later"));
            assert_eq!(lazy.get(b"k").unwrap().as_deref(), Some(b"v".as_slice()));
            assert_eq!(lazy.iter().count(), 1);
            db.persist(fjall::PersistMode::SyncAll).unwrap();
        }
        let db = Database::builder(dir.path()).open().unwrap();
        let lazy = LazyKeyspace::open(&db, "later").unwrap();
        assert!(lazy.existing().is_some());
        assert_eq!(lazy.get(b"k").unwrap().as_deref(), Some(b"v".as_slice()));
    }
}
