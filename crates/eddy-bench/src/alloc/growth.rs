//! Scenario d of `eddy bench alloc`: growth (decision 0081). A job whose bound is its 2
//! servers' links (every compute link at twice a server's rate, so that the servers stay the
//! bound at 4) runs on a deployment of 2 idle servers, started with `direct_io = false` (a
//! move refuses direct local I/O); meanwhile the daemons' live counters are asked for every
//! second. Then `eddy grow --hosts` adds the next 2 servers to the running deployment (its
//! items move, then it cuts over), `eddy status` must list 4 members, and the same job runs
//! again into a new directory: after ÷ before is what the grow gained.

use super::{eddy, AllocArgs, Bench, Dep};
use crate::args::WorkloadOpts;
use crate::fs::EddyFs;
use crate::net;
use anyhow::{bail, Context, Result};
use eddy_proto::stats::DaemonStats;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the daemons' live counters are asked for while the job runs.
const POLL: Duration = Duration::from_secs(1);
/// The daemons' last seconds the live figures are taken over.
const LIVE_WINDOW_S: u64 = 3;

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
}

/// Scenario d, after c: `slow` is the server c throttled (given its rate back here, and used
/// only if the pool has no 4 others).
pub(super) fn measure(
    bench: &Bench,
    a: &AllocArgs,
    slow: usize,
    job: &WorkloadOpts,
    nodes: &[usize],
) -> Result<Growth> {
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
    // judge: the run-time rule's verdict on `live` (grow or not, by how many) goes here; the
    // scenario grows by 2 whatever it would say.
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
    })
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
    let mut bytes = 0.0;
    let mut queue = 0.0;
    for s in stats {
        let from = s.now_ms.saturating_sub(window_s.saturating_mul(1000));
        let recent: Vec<_> = s.series.iter().filter(|x| x.t_ms >= from).collect();
        let seconds: f64 = recent.iter().map(|x| f64::from(x.seconds.max(1))).sum();
        if seconds == 0.0 {
            continue;
        }
        bytes += recent
            .iter()
            .map(|x| x.read_bytes.saturating_add(x.written_bytes) as f64)
            .sum::<f64>()
            / seconds;
        queue += recent
            .iter()
            .map(|x| f64::from(x.queue_mean) * f64::from(x.seconds.max(1)))
            .sum::<f64>()
            / seconds;
    }
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
