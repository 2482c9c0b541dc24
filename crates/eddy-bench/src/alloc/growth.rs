//! Scenario d of `eddy bench alloc`: growth (decisions 0081, 0082). A job of 4 ranks per
//! compute node (as an MPI job runs: one rank per node keeps one write in flight per node, too
//! few to fill 4 servers' links), whose bound is its 2 servers' links (every compute link at
//! twice a server's rate, so that the servers stay the bound at 4), runs on a deployment of 2
//! idle servers started with `direct_io = false` (a move refuses direct local I/O); meanwhile
//! the daemons' live counters are asked for every second. The run-time rule
//! (`eddy_alloc::judge`, the burst buffer's watcher's) judges the last snapshot against the
//! idle pool; `eddy grow --hosts` adds the servers it chose (the next 2 idle ones, if it held)
//! to the running deployment, `eddy status` must list their members, and the same job runs
//! again into a new directory: after ÷ before is what the grow gained.

use super::{eddy, workload, AllocArgs, Bench, Dep};
use crate::fs::EddyFs;
use crate::net;
use anyhow::{bail, Context, Result};
use eddy_alloc::{judge, Cap, GrowPolicy, GrowVerdict, Live, Observed, Policy, Server};
use eddy_proto::stats::DaemonStats;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the daemons' live counters are asked for while the job runs.
const POLL: Duration = Duration::from_secs(1);
/// The daemons' last seconds the live figures are taken over.
const LIVE_WINDOW_S: u64 = 3;
/// Ranks of the job per compute node.
const RANKS_PER_NODE: u32 = 4;

#[derive(Debug, Serialize)]
pub struct Growth {
    /// The deployment's servers at start, and the ones `eddy grow` added.
    pub servers_before: Vec<u32>,
    pub servers_added: Vec<u32>,
    /// Every compute link's rate in this scenario (twice a server's).
    pub compute_rate: String,
    pub before_mib_s: f64,
    pub after_mib_s: f64,
    /// after / before.
    pub ratio: f64,
    /// The wall time of `eddy grow` (daemons started, items moved, cut over).
    pub grow_s: f64,
    /// The members `eddy status` lists after the grow.
    pub members_after: usize,
    /// From the daemons' last counters during the run before the grow, over their last
    /// seconds: the bytes/s they served (summed) and their mean queue (requests queued or in
    /// flight at each arrival, averaged over the daemons).
    pub live_bytes_per_s: f64,
    pub live_queue_mean: f64,
    /// The run-time rule's verdict on those counters (default `[pool.grow]` knobs, B_c the
    /// compute links' rate).
    pub verdict: GrowVerdict,
}

/// Scenario d, after c: `slow` is the server c throttled (given its rate back here, and used
/// only if the pool has no 4 others).
pub(super) fn measure(
    bench: &Bench,
    a: &AllocArgs,
    slow: usize,
    policy: &Policy,
    pool: &[Server],
    rank_mib: u64,
    nodes: &[usize],
) -> Result<Growth> {
    let ranks = RANKS_PER_NODE * u32::try_from(nodes.len()).context("too many nodes")?;
    // The same bytes as scenario a's job, over 4 times its ranks.
    let job = &workload(ranks, (rank_mib / u64::from(RANKS_PER_NODE)).max(1), "n-n")?;
    let net = bench.net;
    net.limit_server(slow, &a.server_rate)?;
    let ids: Vec<u32> = (0..a.servers)
        .filter(|&i| i != slow)
        .chain([slow])
        .take(4)
        .map(|i| i as u32)
        .collect();
    if ids.len() < 4 {
        bail!("scenario d needs 4 servers, the pool has {}", a.servers);
    }
    let (before, added) = ids.split_at(2);
    let compute_rate = net::scaled_rate(&a.server_rate, 2.0)?;
    for &k in nodes {
        net.limit_compute(k, &compute_rate)?;
    }
    let mut dep = bench.start_with("d-grow", before, "direct_io = false\n")?;
    let stop = AtomicBool::new(false);
    let (before_mib_s, live) = std::thread::scope(|sc| {
        let poll = sc.spawn(|| live_during(&dep, &stop));
        let run = bench.run(&dep, "d-before", job, nodes);
        stop.store(true, Ordering::Relaxed);
        let live = poll
            .join()
            .map_err(|_| anyhow::anyhow!("the live counters' thread panicked"))?;
        anyhow::Ok((run?, live?))
    })?;
    let (live_bytes_per_s, live_queue_mean) = live_figures(&live, LIVE_WINDOW_S);
    let b_c = net::rate_bytes(&compute_rate)?;
    let verdict = judged(policy, b_c, pool, slow, before, &live);
    let added: Vec<u32> = if verdict.add.is_empty() {
        added.to_vec()
    } else {
        verdict.add.clone()
    };
    let added = added.as_slice();
    let hosts = dep.state.with_file_name("hosts-grow");
    std::fs::write(&hosts, bench.hosts_lines(added))
        .with_context(|| format!("cannot write {}", hosts.display()))?;
    note!("eddy bench alloc: d. grow onto {added:?}");
    let clock = Instant::now();
    crate::run_eddy(
        &eddy()?,
        &[
            "grow".as_ref(),
            "--state".as_ref(),
            dep.state.as_os_str(),
            "--hosts".as_ref(),
            hosts.as_os_str(),
        ],
    )?;
    let grow_s = clock.elapsed().as_secs_f64();
    let members_after = dep.members()?;
    let after_mib_s = bench.run(&dep, "d-after", job, nodes)?;
    dep.stop()?;
    Ok(Growth {
        servers_before: before.to_vec(),
        servers_added: added.to_vec(),
        compute_rate,
        before_mib_s,
        after_mib_s,
        ratio: after_mib_s / before_mib_s,
        grow_s,
        members_after,
        live_bytes_per_s,
        live_queue_mean,
        verdict,
    })
}

/// The run-time rule on the live counters of the deployment on `before` (daemon i on pool
/// server `before[i]`), the pool's other servers idle but `slow` (c's throttled one, marked
/// unhealthy), B_c `b_c`, the rule's default knobs.
fn judged(
    policy: &Policy,
    b_c: f64,
    pool: &[Server],
    slow: usize,
    before: &[u32],
    live: &[DaemonStats],
) -> GrowVerdict {
    let policy = Policy {
        compute_peak_bandwidth: Some(b_c),
        ..policy.clone()
    };
    let mut pool = pool.to_vec();
    if let Some(s) = pool.get_mut(slow) {
        s.healthy = false;
    }
    let mut servers = Vec::new();
    let mut elapsed_ms = 0u64;
    for s in live {
        let Some(&id) = before.get(s.daemon as usize) else {
            continue;
        };
        servers.push(Observed {
            id,
            host: s.host.clone(),
            peak_bandwidth: pool.get(id as usize).map_or(0.0, |p| p.peak_bandwidth),
            stats: s,
        });
        elapsed_ms = elapsed_ms.max(s.now_ms.saturating_sub(s.started_ms));
    }
    let now = Live {
        elapsed_s: elapsed_ms as f64 / 1000.0,
        ..Live::observed(&servers, LIVE_WINDOW_S, |_| true)
    };
    let caps = [Cap {
        name: "the pool's size".into(),
        servers: u32::try_from(pool.len()).unwrap_or(u32::MAX),
    }];
    judge(&policy, &GrowPolicy::default(), &now, &pool, before, &caps)
}

impl Dep {
    /// The members `eddy status --json` lists.
    fn members(&self) -> Result<usize> {
        let (_, out) = crate::run_eddy(
            &eddy()?,
            &[
                "status".as_ref(),
                "--json".as_ref(),
                "--state".as_ref(),
                self.state.as_os_str(),
            ],
        )?;
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).context("eddy status --json")?;
        v["members"]
            .as_array()
            .map(|m| m.len())
            .context("eddy status --json lists no members")
    }
}

/// Every daemon's live counters (`eddy stats`), asked for every second until `stop` is set
/// and once more then: the last snapshot, by daemon id.
fn live_during(dep: &Dep, stop: &AtomicBool) -> Result<Vec<DaemonStats>> {
    let fs = EddyFs::connect(&dep.state)?;
    loop {
        let next = Instant::now() + POLL;
        while Instant::now() < next && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let last = fs.daemon_stats()?;
        if stop.load(Ordering::Relaxed) {
            return Ok(last);
        }
    }
}

/// Over each daemon's samples of its last `window_s` seconds (to its snapshot's time): the
/// bytes/s read and written, summed over the daemons, and the queue (requests queued or in
/// flight at each arrival), weighted by the samples' widths and averaged over the daemons.
fn live_figures(stats: &[DaemonStats], window_s: u64) -> (f64, f64) {
    let recent: Vec<_> = stats.iter().map(|s| s.recent(window_s)).collect();
    let bytes = recent.iter().map(|r| r.bytes_per_s).sum();
    let queue = recent.iter().map(|r| r.queue_mean).sum::<f64>();
    (bytes, queue / stats.len().max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_proto::stats::Sample;

    fn sample(t_ms: u64, seconds: u32, written: u64, queue: f32) -> Sample {
        Sample {
            t_ms,
            seconds,
            written_bytes: written,
            queue_mean: queue,
            ..Sample::default()
        }
    }

    #[test]
    fn live_figures_sum_bytes_and_average_queues_over_the_last_seconds() {
        let one = DaemonStats {
            now_ms: 10_000,
            series: vec![
                // Before the window: not counted.
                sample(5_000, 1, 1 << 30, 99.0),
                sample(7_000, 1, 100, 1.0),
                sample(8_000, 2, 200, 4.0),
            ],
            ..DaemonStats::default()
        };
        let two = DaemonStats {
            now_ms: 10_000,
            series: vec![sample(9_000, 1, 300, 2.0)],
            ..DaemonStats::default()
        };
        let idle = DaemonStats {
            now_ms: 10_000,
            ..DaemonStats::default()
        };
        let (bytes, queue) = live_figures(&[one, two, idle], 3);
        // 300 B over 3 s, plus 300 B over 1 s.
        assert!((bytes - 400.0).abs() < 1e-9, "{bytes}");
        // (1 + 4·2) / 3 = 3, 2, and 0 for the idle one: 5 / 3.
        assert!((queue - 5.0 / 3.0).abs() < 1e-6, "{queue}");
    }
}
