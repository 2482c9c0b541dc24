//! The client's size cache: for each file this client has written, the end of the furthest
//! write not yet published to the file's metadata owner.
//!
//! Publication is batched (DESIGN § Metadata): the first write to a file publishes at once (in
//! parallel with its data), later writes within `size_update_ms` are folded into one deferred
//! publication, and fsync and close publish whatever is pending. The owner merges with `max`,
//! so writers of a shared file never wait on each other. This client's own `stat` and reads
//! see its pending sizes at once; other clients see them within `size_update_ms`, or at once
//! after the writer's fsync or close.

use eddy_proto::FileId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Entry {
    /// Path the last write came through; deferred publications go there.
    path: String,
    /// End of the furthest unpublished write (0: nothing pending).
    pending: u64,
    /// Largest size sent to the owner and not yet acknowledged (0: none).
    in_flight: u64,
    /// When a size was last published for this file.
    last: Option<Instant>,
    /// Whether a deferred publication is scheduled.
    armed: bool,
    /// Value of the cache's epoch when a publication of this file last ended.
    done_epoch: u64,
    /// Held while a size is taken and sent, and while this client truncates the file, so a
    /// publication never lands after a truncate it predates.
    gate: Arc<tokio::sync::Mutex<()>>,
}

/// What a write should do about the size.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Publish this size now, with the data.
    Now(u64),
    /// Schedule a publication after this delay (no other one is scheduled).
    Arm(Duration),
    /// A publication is already scheduled.
    Wait,
}

pub(crate) struct SizeCache {
    interval: Duration,
    files: Mutex<HashMap<FileId, Entry>>,
    /// Counts ended publications, so that a reader can tell whether one of a file's ended
    /// while it was asking the owner (the owner's answer may then predate it).
    epoch: AtomicU64,
}

impl SizeCache {
    pub fn new(interval: Duration) -> SizeCache {
        SizeCache {
            interval,
            files: Mutex::new(HashMap::new()),
            epoch: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<FileId, Entry>> {
        eddy_proto::sync::lock(&self.files)
    }

    /// Records a write of `file` through `path` that reached `end`.
    pub fn record(&self, file: FileId, path: &str, end: u64) -> Plan {
        let now = Instant::now();
        let mut files = self.lock();
        let e = files.entry(file).or_insert_with(|| Entry {
            path: String::new(),
            pending: 0,
            in_flight: 0,
            last: None,
            armed: false,
            done_epoch: 0,
            gate: Arc::default(),
        });
        if e.path != path {
            e.path = path.to_string();
        }
        e.pending = e.pending.max(end);
        let since = e.last.map(|t| now.duration_since(t));
        match since {
            Some(s) if s < self.interval => {
                if e.armed {
                    Plan::Wait
                } else {
                    e.armed = true;
                    Plan::Arm(self.interval - s)
                }
            }
            _ => {
                e.last = Some(now);
                let size = std::mem::take(&mut e.pending);
                e.in_flight = e.in_flight.max(size);
                Plan::Now(size)
            }
        }
    }

    /// The file was renamed through this client: deferred publications go to `path`.
    pub fn moved(&self, file: FileId, path: &str) {
        if let Some(e) = self.lock().get_mut(&file) {
            e.path = path.to_string();
        }
    }

    /// Takes what is pending for publication: the path to publish at and the size, which
    /// stays visible to `pending` until `done`. `disarm` is set by the deferred publication.
    pub fn take(&self, file: FileId, disarm: bool) -> Option<(String, u64)> {
        let mut files = self.lock();
        let e = files.get_mut(&file)?;
        if disarm {
            e.armed = false;
        }
        if e.pending == 0 {
            return None;
        }
        e.last = Some(Instant::now());
        let size = std::mem::take(&mut e.pending);
        e.in_flight = e.in_flight.max(size);
        Some((e.path.clone(), size))
    }

    /// Holds the file's publication gate, if this client has written it: a publication
    /// under way ends first, and none starts while the guard lives.
    pub async fn hold(&self, file: FileId) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        let gate = self.lock().get(&file).map(|e| Arc::clone(&e.gate))?;
        Some(gate.lock_owned().await)
    }

    /// Whether this client has written the file (and not forgotten it since).
    pub fn written(&self, file: FileId) -> bool {
        self.lock().contains_key(&file)
    }

    /// Ends the publication of `size`: acknowledged by the owner, or failed, in which case it
    /// is pending again, for the next try (fsync or close).
    pub fn done(&self, file: FileId, size: u64, ok: bool) {
        if let Some(e) = self.lock().get_mut(&file) {
            e.done_epoch = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
            if !ok {
                e.pending = e.pending.max(size);
            }
            if e.in_flight <= size {
                e.in_flight = 0;
            }
        }
    }

    /// The current epoch: read it before asking the owner for a size.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Whether a publication of `file` ended after `epoch` was read.
    pub fn ended_since(&self, file: FileId, epoch: u64) -> bool {
        self.lock().get(&file).is_some_and(|e| e.done_epoch > epoch)
    }

    /// The end of this client's furthest write to `file` the owner has not acknowledged yet
    /// (0 if none).
    pub fn pending(&self, file: FileId) -> u64 {
        self.lock()
            .get(&file)
            .map_or(0, |e| e.pending.max(e.in_flight))
    }

    /// Drops the file's entry if nothing is pending or scheduled (a close), so the cache only
    /// holds files being written.
    pub fn release(&self, file: FileId) {
        let mut files = self.lock();
        if files
            .get(&file)
            .is_some_and(|e| e.pending == 0 && e.in_flight == 0 && !e.armed)
        {
            files.remove(&file);
        }
    }

    /// Forgets the file: it was truncated or removed by this client, so sizes reached by
    /// earlier writes no longer hold.
    pub fn forget(&self, file: FileId) {
        self.lock().remove(&file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_write_publishes_later_ones_are_batched() {
        let c = SizeCache::new(Duration::from_secs(3600));
        assert_eq!(c.record(1, "/f", 10), Plan::Now(10));
        assert!(matches!(c.record(1, "/f", 30), Plan::Arm(_)));
        assert_eq!(c.record(1, "/f", 20), Plan::Wait);
        assert_eq!(c.pending(1), 30);
        assert_eq!(c.take(1, true), Some(("/f".to_string(), 30)));
        assert_eq!(c.take(1, false), None);
        // Sent but not acknowledged: still this client's view.
        assert_eq!(c.pending(1), 30);
        c.done(1, 10, true);
        assert_eq!(
            c.pending(1),
            30,
            "an older acknowledgement does not clear a newer size"
        );
        c.done(1, 30, true);
        assert_eq!(c.pending(1), 0);
        // After a deferred publication, the next write is batched again (the interval runs).
        assert!(matches!(c.record(1, "/g", 40), Plan::Arm(_)));
        let (_, size) = c.take(1, false).unwrap();
        let before = c.epoch();
        assert!(!c.ended_since(1, before));
        c.done(1, size, false);
        assert!(c.ended_since(1, before) && !c.ended_since(2, before));
        assert_eq!(c.pending(1), 40, "a failed publication is pending again");
        assert_eq!(c.take(1, false), Some(("/g".to_string(), 40)));
    }

    #[test]
    fn zero_interval_publishes_every_write() {
        let c = SizeCache::new(Duration::ZERO);
        assert_eq!(c.record(1, "/f", 10), Plan::Now(10));
        assert_eq!(c.record(1, "/f", 5), Plan::Now(5));
    }

    #[test]
    fn forget_drops_pending() {
        let c = SizeCache::new(Duration::from_secs(3600));
        c.record(7, "/f", 10);
        c.done(7, 10, true);
        c.record(7, "/f", 99);
        c.release(7);
        assert_eq!(c.pending(7), 99, "release keeps what is pending");
        c.forget(7);
        assert_eq!(c.pending(7), 0);
        assert_eq!(c.take(7, false), None);
        assert_eq!(c.pending(8), 0);
    }
}
