//! Changes applied here that the other owners may not have yet (decision 0080).
//!
//! With copies, a request's changed keys go to their other owners after the request changed
//! them here (decision 0020); a copy that cannot be reached gets a hint (decision 0021). A
//! daemon killed between the two left its copy of the key changed and the others not, and
//! nothing recorded it: the copies disagreed for good (a name listed by one, absent on the
//! other: a directory that could never be removed). So a key is marked *pending* in the
//! store's own journal before its record is written (`begin`), and unmarked once the change
//! went to every other owner or became a hint (`end`). A mark found at start (`leftover`) is a
//! change that may never have left: once the daemon has rejoined (taken what the others hold
//! for it, which is newer), each leftover mark becomes a hint for the key's other owners. A
//! copy of the key pushed here by another owner meanwhile supersedes the mark (`forget`).
//!
//! Marks of keys changed by requests still in flight are counted in memory, so that the end of
//! one request does not unmark a key another is changing.

use super::LazyKeyspace;
use eddy_proto::sync::lock;
use eddy_proto::Errno;
use std::collections::HashMap;
use std::sync::Mutex;

/// Name of the keyspace of the marks (in the metadata store's journal; made on the first).
pub const PENDING_KEYSPACE: &str = "pending";

fn err(what: &str, e: fjall::Error) -> Errno {
    Errno::eio(format!("pending copies: {what}: {e}"))
}

/// The keys whose change may not have reached their other owners yet.
pub struct Pending {
    records: LazyKeyspace,
    /// Requests in flight per marked key.
    in_flight: Mutex<HashMap<Vec<u8>, u32>>,
}

impl Pending {
    pub fn new(records: LazyKeyspace) -> Pending {
        Pending {
            records,
            in_flight: Mutex::new(HashMap::new()),
        }
    }

    /// Marks `key` before its record is written: the mark reaches the journal first, so a
    /// daemon killed after the record was written finds it.
    pub fn begin(&self, key: &[u8]) -> Result<(), Errno> {
        let mut in_flight = lock(&self.in_flight);
        let n = in_flight.entry(key.to_vec()).or_insert(0);
        if *n == 0 {
            self.records.insert(key, []).map_err(|e| err("mark", e))?;
        }
        *n += 1;
        Ok(())
    }

    /// One request's changes to `keys` were sent to their other owners: when `unmark` (each
    /// reached them or became a hint), unmarked unless another request is changing them;
    /// else the marks stay, left over for the next start. A mark that cannot be removed
    /// stays too (at worst, the key is pushed once more after a restart).
    pub fn end(&self, keys: &[Vec<u8>], unmark: bool) {
        let mut in_flight = lock(&self.in_flight);
        for key in keys {
            let Some(n) = in_flight.get_mut(key) else {
                continue;
            };
            *n -= 1;
            if *n > 0 {
                continue;
            }
            in_flight.remove(key);
            if !unmark {
                continue;
            }
            if let Err(e) = self.records.remove(key.as_slice()) {
                tracing::warn!(
                    "cannot unmark a change its copies have: {}",
                    err("unmark", e)
                );
            }
        }
    }

    /// The marks left from before this process (no request of it changes their keys).
    pub fn leftover(&self) -> Result<Vec<Vec<u8>>, Errno> {
        let in_flight = lock(&self.in_flight);
        let mut out = Vec::new();
        for guard in self.records.iter() {
            let k = guard.key().map_err(|e| err("scan", e))?;
            if !in_flight.contains_key(k.as_ref()) {
                out.push(k.to_vec());
            }
        }
        Ok(out)
    }

    /// Another owner pushed its copy of `key` here: a mark left from before this process is
    /// superseded (the key is now what that owner holds, and it answers for the others).
    pub fn forget(&self, key: &[u8]) -> Result<(), Errno> {
        if self.records.existing().is_none() {
            return Ok(());
        }
        let in_flight = lock(&self.in_flight);
        if in_flight.contains_key(key) {
            return Ok(());
        }
        if self.records.contains_key(key).map_err(|e| err("get", e))? {
            self.records.remove(key).map_err(|e| err("unmark", e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &std::path::Path) -> (fjall::Database, Pending) {
        let db = fjall::Database::builder(dir).open().unwrap();
        let ks = LazyKeyspace::open(&db, PENDING_KEYSPACE).unwrap();
        (db, Pending::new(ks))
    }

    #[test]
    fn a_key_stays_marked_until_its_last_request_ends_and_marks_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (db, p) = open(dir.path());
            p.begin(b"a").unwrap();
            p.begin(b"a").unwrap();
            p.begin(b"b").unwrap();
            // In flight: not leftovers, and a push does not unmark them.
            assert!(p.leftover().unwrap().is_empty());
            p.forget(b"a").unwrap();
            p.end(&[b"a".to_vec()], true);
            p.end(&[b"b".to_vec(), b"never".to_vec()], true);
            p.begin(b"c").unwrap();
            p.end(&[b"c".to_vec()], false);
            // "a" is still changed by one request; "b" went to its copies; "c" may not
            // have: left over, as after a restart.
            assert_eq!(p.leftover().unwrap(), vec![b"c".to_vec()]);
            db.persist(fjall::PersistMode::SyncAll).unwrap();
        }
        let (_db, p) = open(dir.path());
        assert_eq!(p.leftover().unwrap(), vec![b"a".to_vec(), b"c".to_vec()]);
        p.forget(b"a").unwrap();
        assert_eq!(p.leftover().unwrap(), vec![b"c".to_vec()]);
    }
}
