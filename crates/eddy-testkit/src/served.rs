//! What the daemons served, as the tests that count requests read it: snapshots of every
//! daemon's per-request counters and the difference of two.

use eddy_client::Client;
pub use eddy_proto::stats::LeaseStats;
use std::collections::BTreeMap;

/// Requests served by all daemons so far, by op name.
pub fn served(rt: &tokio::runtime::Runtime, c: &Client) -> BTreeMap<String, u64> {
    let mut all = BTreeMap::new();
    for (id, s) in rt.block_on(c.daemon_stats()) {
        let s = s.unwrap_or_else(|e| panic!("stats of daemon {id}: {e}"));
        assert!(s.counting, "daemon {id} does not count requests");
        for op in s.ops {
            *all.entry(op.op).or_insert(0) += op.count;
        }
    }
    all
}

/// The requests between two snapshots, leaving out directory-time updates (the first change
/// of an interval sends one alongside, so their number depends on the pace) and the
/// snapshots' own `stats` requests.
pub fn diff(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "touch_dir" | "stats"))
        .filter_map(|(k, n)| {
            let d = n - before.get(k).copied().unwrap_or(0);
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

/// Directory leases as every daemon counted them so far (decision 0075), summed.
pub async fn lease_stats(c: &Client) -> LeaseStats {
    let mut sum = LeaseStats::default();
    for (id, s) in c.daemon_stats().await {
        let l = s
            .unwrap_or_else(|e| panic!("stats of daemon {id}: {e}"))
            .leases;
        sum.grants += l.grants;
        sum.recalls += l.recalls;
        sum.revocations += l.revocations;
        sum.refused += l.refused;
        sum.batched_ops += l.batched_ops;
    }
    sum
}
