//! A histogram of power-of-two buckets (`eddy_proto::stats::Histogram`'s buckets) made of
//! atomics, so that recording a value is one relaxed add, from any thread, without a lock.

use eddy_proto::stats::{Histogram, BUCKETS};
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) struct AtomicHistogram {
    counts: [AtomicU64; BUCKETS],
}

impl Default for AtomicHistogram {
    fn default() -> Self {
        AtomicHistogram {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl AtomicHistogram {
    pub fn record(&self, v: u64) {
        self.counts[Histogram::bucket(v)].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now, trailing empty buckets dropped (as on the wire).
    pub fn snapshot(&self) -> Histogram {
        let mut counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        while counts.last() == Some(&0) {
            counts.pop();
        }
        Histogram { counts }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_in_the_shared_buckets_and_trims() {
        let h = AtomicHistogram::default();
        assert!(h.snapshot().counts.is_empty());
        h.record(0);
        h.record(4096);
        h.record(4097);
        let s = h.snapshot();
        assert_eq!(s.counts.len(), 14);
        assert_eq!(s.counts[0], 1);
        assert_eq!(s.counts[13], 2);
        assert_eq!(s.total(), 3);
    }
}
