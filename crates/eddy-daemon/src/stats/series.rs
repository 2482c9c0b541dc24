//! The time series of one daemon: one-second samples in a ring of at most `max`
//! (`stats_series_max`). When it is full, the older half is merged pairwise (each pair
//! becomes one sample twice as wide), so the whole life of the deployment is kept, coarser
//! the older it is, in bounded memory.

use eddy_proto::stats::Sample;
use std::collections::VecDeque;

pub(crate) struct Series {
    max: usize,
    samples: VecDeque<Sample>,
}

impl Series {
    /// A ring of at most `max` samples (at least 4).
    pub fn new(max: usize) -> Series {
        let max = max.max(4);
        Series {
            max,
            samples: VecDeque::with_capacity(max),
        }
    }

    pub fn push(&mut self, s: Sample) {
        if self.samples.len() >= self.max {
            self.downsample();
        }
        self.samples.push_back(s);
    }

    /// Merges the older half pairwise: the ring is then three quarters full.
    fn downsample(&mut self) {
        let half = self.samples.len() / 2;
        let older: Vec<Sample> = self.samples.drain(..half).collect();
        let mut merged = Vec::with_capacity(half.div_ceil(2));
        for pair in older.chunks(2) {
            merged.push(match pair {
                [a, b] => a.merge(b),
                [a] => a.clone(),
                _ => continue,
            });
        }
        for s in merged.into_iter().rev() {
            self.samples.push_front(s);
        }
    }

    pub fn to_vec(&self) -> Vec<Sample> {
        self.samples.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(i: u64) -> Sample {
        Sample {
            t_ms: 1_000 * i,
            seconds: 1,
            read_bytes: i,
            written_bytes: 2 * i,
            ops: 1,
            metadata_ops: 1,
            queue_max: i as u32,
            queue_mean: 1.0,
            metadata_queue_mean: 0.5,
        }
    }

    #[test]
    fn a_full_ring_merges_its_older_half_and_keeps_everything() {
        let mut ring = Series::new(16);
        let n = 1_000u64;
        for i in 0..n {
            ring.push(second(i));
        }
        let s = ring.to_vec();
        assert!(s.len() <= 16, "{}", s.len());
        // Nothing lost: every second is covered once, in order, contiguously.
        assert_eq!(s.iter().map(|x| u64::from(x.seconds)).sum::<u64>(), n);
        assert_eq!(s.iter().map(|x| x.read_bytes).sum::<u64>(), n * (n - 1) / 2);
        assert_eq!(s.iter().map(|x| x.ops).sum::<u64>(), n);
        assert_eq!(s[0].t_ms, 0);
        for w in s.windows(2) {
            assert_eq!(w[0].t_ms + 1_000 * u64::from(w[0].seconds), w[1].t_ms);
        }
        // Older is coarser; the newest is still one second wide.
        assert!(s[0].seconds > s[s.len() - 1].seconds);
        assert_eq!(s[s.len() - 1].seconds, 1);
        assert_eq!(s[s.len() - 1].t_ms, 1_000 * (n - 1));
        // Maxima and means survive merging.
        assert_eq!(s.iter().map(|x| x.queue_max).max(), Some((n - 1) as u32));
        assert!(s
            .iter()
            .all(|x| x.queue_mean == 1.0 && x.metadata_queue_mean == 0.5));
    }

    #[test]
    fn merging_weights_means_by_requests() {
        let a = Sample {
            ops: 3,
            queue_mean: 2.0,
            seconds: 1,
            ..Sample::default()
        };
        let b = Sample {
            ops: 1,
            queue_mean: 6.0,
            seconds: 1,
            t_ms: 1_000,
            ..Sample::default()
        };
        let m = a.merge(&b);
        assert_eq!(m.queue_mean, 3.0);
        assert_eq!(m.seconds, 2);
        assert_eq!(m.metadata_queue_mean, 0.0);
    }
}
