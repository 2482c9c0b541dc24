//! What the other owners of the metadata keys need (decisions 0020, 0080): a key noted and
//! marked pending before a request writes it, the state of changed keys sent to the copies,
//! and the state another owner sent stored as given.

use super::{changes, fjall_err, pending, MetaStore};
use eddy_proto::{Errno, Inode};
use std::sync::atomic::Ordering;

impl MetaStore {
    /// Before `key` is written or removed by a request whose changes go to other owners:
    /// noted for them, and marked pending the first time (decision 0080).
    pub(crate) fn note_change(&self, key: &[u8]) -> Result<(), Errno> {
        if changes::note(key) {
            self.pending.begin(key)?;
        }
        Ok(())
    }

    /// The keys changed here whose copies may not have them yet (decision 0080).
    pub fn pending(&self) -> &pending::Pending {
        &self.pending
    }

    /// The current state of `keys` here (record, or `None` when absent): what the other
    /// owners of the keys are sent after a change (decision 0020).
    pub fn key_states(&self, keys: Vec<Vec<u8>>) -> Result<Vec<eddy_proto::KeyState>, Errno> {
        keys.into_iter()
            .map(|key| {
                let value = self
                    .meta
                    .get(&key)
                    .map_err(|e| fjall_err("get", e))?
                    .map(|v| v.to_vec());
                Ok(eddy_proto::KeyState { key, value })
            })
            .collect()
    }

    /// Stores the state of keys another owner changed (`Request::Replicate`): each record
    /// as given (checked to decode), or removed. Not noted as a change here.
    pub fn apply_replica(&self, changes: &[eddy_proto::KeyState]) -> Result<(), Errno> {
        for c in changes {
            if c.key.is_empty() {
                return Err(Errno::einval("replicated metadata key is empty"));
            }
            let _guard = self.locks.lock(&c.key);
            let existing = self.meta.get(&c.key).map_err(|e| fjall_err("get", e))?;
            match (&c.value, existing) {
                (Some(v), existing) => {
                    Inode::from_record(v)?;
                    self.meta
                        .insert(&c.key, v.as_slice())
                        .map_err(|e| fjall_err("insert", e))?;
                    if existing.is_none() {
                        self.entries.fetch_add(1, Ordering::Relaxed);
                        self.removals.forget(&c.key);
                    }
                }
                (None, Some(old)) => {
                    self.meta
                        .remove(c.key.as_slice())
                        .map_err(|e| fjall_err("remove", e))?;
                    self.entries.fetch_sub(1, Ordering::Relaxed);
                    self.removals.note(&c.key, old.to_vec());
                }
                (None, None) => {}
            }
        }
        Ok(())
    }

    /// Deletes the key's record here only: no change noted, no copy, no pending mark (a
    /// move's collect, decision 0081: the record now lives on its owners). Returns whether
    /// it was held.
    pub fn drop_local(&self, key: &[u8]) -> Result<bool, Errno> {
        let _guard = self.locks.lock(key);
        if self
            .meta
            .get(key)
            .map_err(|e| fjall_err("get", e))?
            .is_none()
        {
            return Ok(false);
        }
        self.meta.remove(key).map_err(|e| fjall_err("remove", e))?;
        self.entries.fetch_sub(1, Ordering::Relaxed);
        Ok(true)
    }
}
