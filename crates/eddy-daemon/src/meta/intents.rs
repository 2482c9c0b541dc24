//! Directory rename intents of the paths this daemon owns (decision 0010). A client renaming
//! a directory first records `from → to` here, at the owner of `from`, and clears it once
//! everything has moved; every step in between is idempotent, so an intent found unfinished
//! is completed by running them again (roll forward).
//!
//! Records live in the fjall keyspace `intents` (normalised `from` → versioned record) and
//! are made durable (journal fsync) before a reply, recorded or cleared. Which connection
//! holds an intent (is completing it) is kept in memory only: an intent whose renamer died,
//! gave up or was cut off by a restart of this daemon is free for any client to take over.

use super::{fjall_err, MetaStore};
use crate::advisory::ConnId;
use bincode::Options;
use eddy_proto::path;
use eddy_proto::{Errno, FileId, RenameIntent};
use fjall::{Database, PersistMode};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// Name of the keyspace holding the intents.
pub const INTENTS_KEYSPACE: &str = "intents";

/// Version byte in front of every stored intent record.
const INTENT_RECORD_VERSION: u8 = 1;

/// What is stored under the normalised `from`.
#[derive(Serialize, Deserialize)]
struct IntentRecord {
    to: String,
    dir_id: FileId,
}

impl IntentRecord {
    fn encode(&self) -> Vec<u8> {
        let mut out = vec![INTENT_RECORD_VERSION];
        // Serialising a plain struct into a Vec cannot fail.
        out.extend(bincode::serialize(self).unwrap_or_default());
        out
    }

    fn decode(bytes: &[u8]) -> Result<IntentRecord, Errno> {
        match bytes.split_first() {
            Some((&INTENT_RECORD_VERSION, rest)) => bincode::DefaultOptions::new()
                .with_fixint_encoding()
                .allow_trailing_bytes()
                .with_limit(rest.len() as u64)
                .deserialize(rest)
                .map_err(|e| Errno::eio(format!("damaged rename intent record: {e}"))),
            Some((v, _)) => Err(Errno::eio(format!(
                "rename intent record version {v} is not supported"
            ))),
            None => Err(Errno::eio("empty rename intent record")),
        }
    }
}

/// The intents keyspace and who holds which intent now.
pub(crate) struct Intents {
    /// Made on the first intent.
    records: super::LazyKeyspace,
    /// `from` → the connection completing it. Guards every read-modify-write of the records.
    holders: Mutex<HashMap<String, ConnId>>,
}

impl Intents {
    pub(crate) fn open(db: &Database) -> Result<Intents, fjall::Error> {
        Ok(Intents {
            records: super::LazyKeyspace::open(db, INTENTS_KEYSPACE)?,
            holders: Mutex::new(HashMap::new()),
        })
    }

    fn holders(&self) -> MutexGuard<'_, HashMap<String, ConnId>> {
        eddy_proto::sync::lock(&self.holders)
    }
}

impl MetaStore {
    /// Normalises the two paths of a directory rename and checks they make one.
    fn rename_pair(&self, from: &str, to: &str) -> Result<(String, String), Errno> {
        let (from, _) = self.key_of(from)?;
        let (to, _) = self.key_of(to)?;
        if from == "/" || to == "/" {
            return Err(Errno::new(libc::EBUSY, "cannot rename the root directory"));
        }
        if path::is_within(&to, &from) {
            return Err(Errno::einval(format!(
                "cannot move {from} into itself ({to})"
            )));
        }
        Ok((from, to))
    }

    /// The recorded intent of the normalised `from`.
    fn intent_of(&self, from: &str) -> Result<Option<IntentRecord>, Errno> {
        match self
            .intents
            .records
            .get(from.as_bytes())
            .map_err(|e| fjall_err("get intent", e))?
        {
            Some(v) => IntentRecord::decode(&v).map(Some),
            None => Ok(None),
        }
    }

    fn sync_journal(&self) -> Result<(), Errno> {
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| fjall_err("persist rename intent", e))
    }

    /// Records the rename of the directory `from` (id `dir_id`) to `to`, held by `conn`.
    /// Returns nothing when recorded; an unfinished rename of `from` not held by another
    /// connection is taken over and returned instead.
    pub fn begin_rename(
        &self,
        conn: ConnId,
        from: &str,
        to: &str,
        dir_id: FileId,
    ) -> Result<Vec<RenameIntent>, Errno> {
        let (from, to) = self.rename_pair(from, to)?;
        let mut holders = self.intents.holders();
        if let Some(rec) = self.intent_of(&from)? {
            if let Some(&h) = holders.get(&from) {
                if h != conn {
                    return Err(Errno::new(
                        libc::EBUSY,
                        format!("{from} is being renamed to {} by another client", rec.to),
                    ));
                }
            }
            holders.insert(from.clone(), conn);
            return Ok(vec![RenameIntent {
                from,
                to: rec.to,
                dir_id: rec.dir_id,
            }]);
        }
        let rec = IntentRecord { to, dir_id };
        self.intents
            .records
            .insert(from.as_bytes(), rec.encode())
            .map_err(|e| fjall_err("insert intent", e))?;
        if let Err(e) = self.sync_journal() {
            // Not durable, so not begun: the caller gives up and nothing may complete it.
            let _ = self.intents.records.remove(from.as_bytes());
            return Err(e);
        }
        holders.insert(from, conn);
        Ok(Vec::new())
    }

    /// Takes over, for `conn`, up to `limit` intents no connection holds, or only the intent
    /// of `from` (also when `conn` holds it already).
    pub fn claim_renames(
        &self,
        conn: ConnId,
        from: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RenameIntent>, Errno> {
        let mut holders = self.intents.holders();
        if let Some(from) = from {
            let (from, _) = self.key_of(from)?;
            let free = holders.get(&from).is_none_or(|&h| h == conn);
            return match self.intent_of(&from)? {
                Some(rec) if free => {
                    holders.insert(from.clone(), conn);
                    Ok(vec![RenameIntent {
                        from,
                        to: rec.to,
                        dir_id: rec.dir_id,
                    }])
                }
                _ => Ok(Vec::new()),
            };
        }
        let mut out = Vec::new();
        for guard in self.intents.records.iter() {
            if out.len() >= limit.max(1) as usize {
                break;
            }
            let (key, value) = guard
                .into_inner()
                .map_err(|e| fjall_err("scan intents", e))?;
            let Ok(from) = String::from_utf8(key.to_vec()) else {
                tracing::warn!(key = ?key, "skipping a rename intent with a malformed key");
                continue;
            };
            if holders.contains_key(&from) {
                continue;
            }
            match IntentRecord::decode(&value) {
                Ok(rec) => {
                    holders.insert(from.clone(), conn);
                    out.push(RenameIntent {
                        from,
                        to: rec.to,
                        dir_id: rec.dir_id,
                    });
                }
                Err(e) => tracing::warn!(%from, "skipping a rename intent: {e}"),
            }
        }
        Ok(out)
    }

    /// The rename of `from` to `to` is over: its intent goes, durably. An intent of `from`
    /// to another path stays.
    pub fn end_rename(&self, from: &str, to: &str) -> Result<(), Errno> {
        let (from, _) = self.key_of(from)?;
        let (to, _) = self.key_of(to)?;
        let mut holders = self.intents.holders();
        match self.intent_of(&from)? {
            Some(rec) if rec.to == to => {
                self.intents
                    .records
                    .remove(from.as_bytes())
                    .map_err(|e| fjall_err("remove intent", e))?;
                holders.remove(&from);
                self.sync_journal()
            }
            _ => Ok(()),
        }
    }

    /// `conn` gives up its hold on the intent of `from`.
    pub fn release_rename(&self, conn: ConnId, from: &str) -> Result<(), Errno> {
        let (from, _) = self.key_of(from)?;
        let mut holders = self.intents.holders();
        if holders.get(&from) == Some(&conn) {
            holders.remove(&from);
        }
        Ok(())
    }

    /// Connection `conn` closed: the intents it held are free. Returns how many.
    pub fn release_renames_of(&self, conn: ConnId) -> usize {
        let mut holders = self.intents.holders();
        let before = holders.len();
        holders.retain(|_, h| *h != conn);
        before - holders.len()
    }

    /// Whether a rename of the normalised `from` to `to` is recorded (the backend rename of
    /// a linked directory then treats a missing source as already renamed).
    pub(crate) fn renaming(&self, from: &str, to: &str) -> bool {
        matches!(self.intent_of(from), Ok(Some(rec)) if rec.to == to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_config::Config;

    fn open(dir: &std::path::Path) -> MetaStore {
        let config = Config::default();
        MetaStore::open(dir, &config).unwrap()
    }

    fn intent(from: &str, to: &str, dir_id: FileId) -> RenameIntent {
        RenameIntent {
            from: from.into(),
            to: to.into(),
            dir_id,
        }
    }

    #[test]
    fn intents_survive_a_reopen_until_ended() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = open(dir.path());
            assert!(store.begin_rename(1, "/a", "/b", 7).unwrap().is_empty());
            assert!(store.begin_rename(1, "//c/d/", "/e", 8).unwrap().is_empty());
            assert!(store.begin_rename(1, "/f", "/g", 9).unwrap().is_empty());
            store.end_rename("/f", "/g").unwrap();
            // Each record was fsync'd before its call returned.
        }
        let store = open(dir.path());
        // After a restart no connection holds anything: every intent is free to take over.
        let mut got = store.claim_renames(5, None, 10).unwrap();
        got.sort_by(|x, y| x.from.cmp(&y.from));
        assert_eq!(got, [intent("/a", "/b", 7), intent("/c/d", "/e", 8)]);
        // Taken now: not listed again, not even to the same connection.
        assert!(store.claim_renames(5, None, 10).unwrap().is_empty());
        store.end_rename("/a", "/b").unwrap();
        // An end naming another target keeps the intent; ending twice is fine.
        store.end_rename("/c/d", "/x").unwrap();
        store.end_rename("/a", "/b").unwrap();
        drop(store);
        let store = open(dir.path());
        assert_eq!(
            store.claim_renames(6, None, 10).unwrap(),
            [intent("/c/d", "/e", 8)]
        );
    }

    #[test]
    fn holders_exclude_others_until_released_or_closed() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        assert!(store.begin_rename(1, "/a", "/b", 7).unwrap().is_empty());
        // Another connection: busy; not free to claim either.
        let busy = store.begin_rename(2, "/a", "/c", 3).unwrap_err();
        assert_eq!(busy.errno, libc::EBUSY);
        assert!(store.claim_renames(2, None, 10).unwrap().is_empty());
        assert!(store.claim_renames(2, Some("/a"), 10).unwrap().is_empty());
        // The holder asks again (a retry): it gets the recorded intent back.
        assert_eq!(
            store.claim_renames(1, Some("/a"), 10).unwrap(),
            [intent("/a", "/b", 7)]
        );
        assert_eq!(
            store.begin_rename(1, "/a", "/z", 1).unwrap(),
            [intent("/a", "/b", 7)]
        );
        // Released: free for another connection, which takes it over.
        store.release_rename(2, "/a").unwrap();
        assert!(store.claim_renames(2, None, 10).unwrap().is_empty());
        store.release_rename(1, "/a").unwrap();
        assert_eq!(
            store.begin_rename(2, "/a", "/c", 3).unwrap(),
            [intent("/a", "/b", 7)]
        );
        // Its connection closes: free again, for a page of at most `limit`.
        assert!(store.begin_rename(2, "/p", "/q", 4).unwrap().is_empty());
        assert_eq!(store.release_renames_of(2), 2);
        assert_eq!(store.claim_renames(3, None, 1).unwrap().len(), 1);
        assert_eq!(store.claim_renames(3, None, 1).unwrap().len(), 1);
        assert!(store.claim_renames(3, None, 1).unwrap().is_empty());
    }

    #[test]
    fn bad_intents_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let errno = |r: Result<Vec<RenameIntent>, Errno>| r.unwrap_err().errno;
        assert_eq!(errno(store.begin_rename(1, "/", "/b", 1)), libc::EBUSY);
        assert_eq!(errno(store.begin_rename(1, "/a", "/", 1)), libc::EBUSY);
        assert_eq!(errno(store.begin_rename(1, "/a", "/a/b", 1)), libc::EINVAL);
        assert_eq!(errno(store.begin_rename(1, "/a", "/a", 1)), libc::EINVAL);
        assert_eq!(errno(store.begin_rename(1, "a", "/b", 1)), libc::EINVAL);
        assert_eq!(errno(store.begin_rename(1, "/a\0", "/b", 1)), libc::EINVAL);
        let long = format!("/{}", "x".repeat(300));
        assert_eq!(
            errno(store.begin_rename(1, "/a", &long, 1)),
            libc::ENAMETOOLONG
        );
        assert!(store.end_rename("relative", "/b").is_err());
        assert!(store.claim_renames(1, None, 10).unwrap().is_empty());
        // A damaged record is skipped, never a panic.
        store.intents.records.insert("/bad", [9u8, 1, 2]).unwrap();
        store.intents.records.insert("/empty", []).unwrap();
        assert!(store.claim_renames(1, None, 10).unwrap().is_empty());
        assert!(!store.renaming("/bad", "/b"));
    }
}
