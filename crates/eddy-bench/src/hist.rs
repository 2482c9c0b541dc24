//! A mergeable latency histogram with log-spaced buckets (about 4.4 % wide), so that
//! workers can send their latencies to the coordinator in a few hundred numbers and the
//! coordinator can compute p50/p99 over all ranks.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Buckets per power of two.
const SUB: f64 = 16.0;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "Vec<(u32, u64)>", into = "Vec<(u32, u64)>")]
pub struct Histogram {
    /// bucket index -> count.
    buckets: BTreeMap<u32, u64>,
}

impl From<Vec<(u32, u64)>> for Histogram {
    fn from(v: Vec<(u32, u64)>) -> Self {
        let mut h = Histogram::default();
        for (b, c) in v {
            *h.buckets.entry(b).or_insert(0) += c;
        }
        h
    }
}

impl From<Histogram> for Vec<(u32, u64)> {
    fn from(h: Histogram) -> Self {
        h.buckets.into_iter().collect()
    }
}

fn bucket_of(ns: u64) -> u32 {
    let ns = ns.max(1) as f64;
    (ns.log2() * SUB).floor() as u32
}

fn value_of(bucket: u32) -> f64 {
    2f64.powf((f64::from(bucket) + 0.5) / SUB)
}

impl Histogram {
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        *self.buckets.entry(bucket_of(ns)).or_insert(0) += 1;
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (b, c) in &other.buckets {
            *self.buckets.entry(*b).or_insert(0) += c;
        }
    }

    pub fn count(&self) -> u64 {
        self.buckets.values().sum()
    }

    /// The latency at quantile `q` (0..=1) in microseconds, or None if empty.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (b, c) in &self.buckets {
            seen += c;
            if seen >= rank {
                return Some(value_of(*b) / 1000.0);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_bucket_precision() {
        let mut h = Histogram::default();
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let p50 = h.quantile_us(0.5).unwrap();
        let p99 = h.quantile_us(0.99).unwrap();
        assert!((p50 - 500.0).abs() / 500.0 < 0.05, "p50 {p50}");
        assert!((p99 - 990.0).abs() / 990.0 < 0.05, "p99 {p99}");
        assert_eq!(Histogram::default().quantile_us(0.5), None);
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = Histogram::default();
        let mut b = Histogram::default();
        a.record(Duration::from_micros(10));
        b.record(Duration::from_micros(10));
        b.record(Duration::from_millis(10));
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert!(a.quantile_us(1.0).unwrap() > 9000.0);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<Histogram>(&json).unwrap(), a);
    }
}
