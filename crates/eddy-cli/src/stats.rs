//! `eddy stats`: what the daemons of a deployment count of the I/O they serve (decision
//! 0032), as a top-like view: per daemon and per client, the rates of bytes, operations and
//! metadata operations over the last second (from two snapshots a second apart), the queue
//! now and the service latency (p50/p99 of the interval). `--watch` refreshes every second
//! until interrupted; `--json` prints the raw snapshots (`DaemonStats` of every daemon);
//! `--job` the job's profile so far (eddy-history's `JobProfile`). A daemon moving far less
//! than its peers (below the allocation policy's `anomaly_ratio` × their median) while it
//! has requests queued is flagged "slow" (decision 0039).

use crate::cli::StatsArgs;
use anyhow::{bail, Context, Result};
use eddy_client::Client;
use eddy_config::Deployment;
use eddy_deploy::{human_bytes, StateDir};
use eddy_history::{profile_from_stats, JobProfile};
use eddy_proto::stats::{DaemonStats, Histogram};
use std::collections::BTreeMap;
use std::time::Duration;

/// The pause between the two snapshots rates are computed from, and between frames.
const INTERVAL: Duration = Duration::from_secs(1);

pub fn stats(args: StatsArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    let dep = state.load_deployment()?;
    let client = Client::new_following(dep.clone(), state.deployment_path())
        .map_err(|e| anyhow::anyhow!("the deployment file is not usable: {e}"))?;
    let rt = eddy_deploy::runtime()?;
    rt.block_on(async {
        if !args.watch {
            return once(&client, &dep, &args).await;
        }
        // Registered once, before the first frame: a Ctrl-C that comes while a frame is
        // fetched or drawn is kept for the next wait (a `ctrl_c()` future made anew each
        // wait would miss it, and the process, its default handler replaced, would run on).
        let mut interrupt =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .context("cannot watch for Ctrl-C")?;
        let mut before = snapshots(&client).await?;
        loop {
            tokio::select! {
                _ = interrupt.recv() => return Ok(()),
                _ = tokio::time::sleep(INTERVAL) => {}
            }
            let now = snapshots(&client).await?;
            if !args.json {
                // Clear the screen, cursor home.
                outln!("\x1b[2J\x1b[H{}", name_line(&dep));
            }
            show(&dep, &args, &before, &now)?;
            before = now;
        }
    })
}

/// One frame: the snapshots (JSON: one; the table: two, a second apart).
async fn once(client: &Client, dep: &Deployment, args: &StatsArgs) -> Result<()> {
    if args.json {
        let now = snapshots(client).await?;
        return show(dep, args, &[], &now);
    }
    let before = snapshots(client).await?;
    tokio::time::sleep(INTERVAL).await;
    let now = snapshots(client).await?;
    outln!("{}", name_line(dep));
    show(dep, args, &before, &now)
}

fn name_line(dep: &Deployment) -> String {
    format!(
        "deployment {:?}, job {}",
        dep.name,
        dep.job.label(&dep.name)
    )
}

/// Prints one frame from the snapshots `before` (empty: none) and `now`.
fn show(
    dep: &Deployment,
    args: &StatsArgs,
    before: &[DaemonStats],
    now: &[DaemonStats],
) -> Result<()> {
    match (args.job, args.json) {
        (true, true) => outln!("{}", serde_json::to_string(&job_profile(dep, now))?),
        (true, false) => print_profile(&job_profile(dep, now)),
        (false, true) => outln!("{}", serde_json::to_string(now)?),
        (false, false) => print_tables(before, now),
    }
    Ok(())
}

/// Every daemon's snapshot (`Client::stats_snapshots`); daemons that do not answer are named
/// on stderr and left out.
async fn snapshots(client: &Client) -> Result<Vec<DaemonStats>> {
    let (out, failed) = client.stats_snapshots().await;
    for (id, e) in failed {
        errln!("eddy: daemon {id} gave no statistics: {e}");
    }
    if out.is_empty() {
        bail!("no daemon of the deployment answered (is it running? try `eddy status`)");
    }
    Ok(out)
}

fn job_profile(dep: &Deployment, now: &[DaemonStats]) -> JobProfile {
    profile_from_stats(now, &eddy_deploy::profile::job_meta(dep))
}

/// Counters of one row (a daemon, or a client over every daemon).
#[derive(Default, Clone)]
struct Row {
    read: u64,
    written: u64,
    ops: u64,
    metadata_ops: u64,
    service: Histogram,
}

impl Row {
    fn of_daemon(s: &DaemonStats) -> Row {
        let mut r = Row::default();
        for o in &s.ops {
            match o.op.as_str() {
                "read" => r.read += o.bytes,
                "write" | "direct_commit" => r.written += o.bytes,
                _ => {}
            }
            if o.op != "stats" && o.op != "identify" {
                r.ops += o.count;
                r.service.merge(&o.service_us);
            }
            if o.metadata {
                r.metadata_ops += o.count;
            }
        }
        r
    }

    /// The growth from `before` to `self` (a daemon that restarted: from zero).
    fn since(&self, before: Option<&Row>) -> Row {
        let Some(b) = before else { return self.clone() };
        if self.ops < b.ops {
            return self.clone();
        }
        let mut service = Histogram::default();
        for (i, c) in self.service.counts.iter().enumerate() {
            let old = b.service.counts.get(i).copied().unwrap_or(0);
            service.counts.push(c.saturating_sub(old));
        }
        Row {
            read: self.read.saturating_sub(b.read),
            written: self.written.saturating_sub(b.written),
            ops: self.ops - b.ops,
            metadata_ops: self.metadata_ops.saturating_sub(b.metadata_ops),
            service,
        }
    }
}

fn rate(v: u64, secs: f64) -> f64 {
    v as f64 / secs.max(0.001)
}

fn latency(h: &Histogram, q: f64) -> String {
    match h.total() {
        0 => "-".into(),
        _ => format!("{}µs", h.quantile(q)),
    }
}

fn print_tables(before: &[DaemonStats], now: &[DaemonStats]) {
    outln!(
        "{:>6} {:<16} {:>11} {:>11} {:>9} {:>9} {:>6} {:>6} {:>9} {:>9}",
        "DAEMON",
        "HOST",
        "READ/s",
        "WRITE/s",
        "OPS/s",
        "META/s",
        "QUEUE",
        "INFL",
        "P50",
        "P99"
    );
    let mut rates: Vec<(f64, u64)> = Vec::new();
    for s in now {
        let old = before.iter().find(|b| b.daemon == s.daemon);
        let secs = old.map_or((s.now_ms.saturating_sub(s.started_ms)) as f64 / 1e3, |b| {
            (s.now_ms.saturating_sub(b.now_ms)) as f64 / 1e3
        });
        let d = Row::of_daemon(s).since(old.map(Row::of_daemon).as_ref());
        outln!(
            "{:>6} {:<16} {:>11} {:>11} {:>9.1} {:>9.1} {:>6} {:>6} {:>9} {:>9}",
            s.daemon,
            s.host,
            human_bytes(rate(d.read, secs) as u64),
            human_bytes(rate(d.written, secs) as u64),
            rate(d.ops, secs),
            rate(d.metadata_ops, secs),
            s.queued,
            s.in_flight,
            latency(&d.service, 0.5),
            latency(&d.service, 0.99)
        );
        if !s.counting {
            outln!("       (counting is switched off on this daemon: stats_counting = false)");
        }
        rates.push((rate(d.read + d.written, secs), s.queued));
    }
    let ratio = eddy_alloc::Policy::default().anomaly_ratio;
    for (s, (i, m)) in now.iter().zip(slow(&rates, ratio).into_iter().enumerate()) {
        if let Some(median) = m {
            outln!(
                "daemon {} on {} is slow: {}/s with {} requests queued, its peers' median {}/s",
                s.daemon,
                s.host,
                human_bytes(rates[i].0 as u64),
                rates[i].1,
                human_bytes(median as u64)
            );
        }
    }
    let secs = interval_secs(before, now);
    let (old, new) = (clients(before), clients(now));
    outln!("");
    outln!(
        "{:<32} {:>11} {:>11} {:>9} {:>9} {:>12} {:>12}",
        "CLIENT",
        "READ/s",
        "WRITE/s",
        "OPS/s",
        "META/s",
        "READ",
        "WRITTEN"
    );
    for (name, row) in &new {
        let d = row.since(old.get(name));
        outln!(
            "{:<32} {:>11} {:>11} {:>9.1} {:>9.1} {:>12} {:>12}",
            name,
            human_bytes(rate(d.read, secs) as u64),
            human_bytes(rate(d.written, secs) as u64),
            rate(d.ops, secs),
            rate(d.metadata_ops, secs),
            human_bytes(row.read),
            human_bytes(row.written)
        );
    }
    print_backends(now);
}

/// Per backend of the linked prefixes (decision 0073), summed over the daemons since they
/// started: shown when `[[backends]]` name some.
fn print_backends(now: &[DaemonStats]) {
    let mut sums: BTreeMap<(String, String), [u64; 5]> = BTreeMap::new();
    for b in now.iter().flat_map(|s| &s.backends) {
        let e = sums.entry((b.prefix.clone(), b.name.clone())).or_default();
        for (v, add) in e.iter_mut().zip([
            b.read_bytes,
            b.written_bytes,
            b.placed_files,
            b.placed_bytes,
            b.failures,
        ]) {
            *v += add;
        }
    }
    if sums.keys().all(|(_, name)| name.starts_with('/')) {
        return;
    }
    outln!("");
    outln!(
        "{:<12} {:<16} {:>12} {:>12} {:>8} {:>12} {:>8}",
        "PREFIX",
        "BACKEND",
        "READ",
        "WRITTEN",
        "PLACED",
        "PLACED B",
        "FAILURES"
    );
    for ((prefix, name), [read, written, files, bytes, failures]) in &sums {
        outln!(
            "{:<12} {:<16} {:>12} {:>12} {:>8} {:>12} {:>8}",
            prefix,
            name,
            human_bytes(*read),
            human_bytes(*written),
            files,
            human_bytes(*bytes),
            failures
        );
    }
}

/// Which daemons are slow, given each one's (bytes/s, requests queued): below `ratio` × the
/// median of its peers' bandwidth while it has requests queued (a daemon that idles is not
/// slow, and peers that idle give no yardstick). `Some(peers' median)` for a slow one.
fn slow(rates: &[(f64, u64)], ratio: f64) -> Vec<Option<f64>> {
    (0..rates.len())
        .map(|i| {
            let (bw, queued) = rates[i];
            let mut peers: Vec<f64> = (0..rates.len())
                .filter(|&j| j != i)
                .map(|j| rates[j].0)
                .filter(|b| b.is_finite())
                .collect();
            if queued == 0 || peers.is_empty() {
                return None;
            }
            peers.sort_by(f64::total_cmp);
            let n = peers.len();
            let median = if n % 2 == 1 {
                peers[n / 2]
            } else {
                (peers[n / 2 - 1] + peers[n / 2]) / 2.0
            };
            (median > 0.0 && bw < ratio * median).then_some(median)
        })
        .collect()
}

/// Seconds between the two sets of snapshots (their mean per daemon).
fn interval_secs(before: &[DaemonStats], now: &[DaemonStats]) -> f64 {
    let spans: Vec<f64> = now
        .iter()
        .filter_map(|s| {
            let b = before.iter().find(|b| b.daemon == s.daemon)?;
            Some(s.now_ms.saturating_sub(b.now_ms) as f64 / 1e3)
        })
        .collect();
    match spans.len() {
        0 => INTERVAL.as_secs_f64(),
        n => spans.iter().sum::<f64>() / n as f64,
    }
}

/// The clients over every daemon, by name (`host:pid`, `[rank]` when known).
fn clients(snaps: &[DaemonStats]) -> BTreeMap<String, Row> {
    let mut out: BTreeMap<String, Row> = BTreeMap::new();
    for c in snaps.iter().flat_map(|s| &s.clients) {
        let name = match (&c.client.host, c.client.rank) {
            (h, _) if h.is_empty() => "(not identified)".to_string(),
            (h, Some(r)) => format!("{h}:{}[{r}]", c.client.pid),
            (h, None) => format!("{h}:{}", c.client.pid),
        };
        let r = out.entry(name).or_default();
        r.read += c.read_bytes;
        r.written += c.written_bytes;
        r.ops += c.ops;
        r.metadata_ops += c.metadata_ops;
    }
    out
}

fn print_profile(p: &JobProfile) {
    let mode = serde_json::to_value(p.io_mode)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    outln!(
        "job {} (user {}), {:.0} s so far",
        p.key,
        p.user,
        p.seconds()
    );
    outln!(
        "volume: {} read, {} written; {} data ops, {} metadata ops",
        human_bytes(p.read_bytes),
        human_bytes(p.written_bytes),
        p.data_ops,
        p.metadata_ops
    );
    outln!(
        "I/O mode {mode}: {} files ({} shared), {} processes on {} nodes did I/O",
        p.files,
        p.shared_files,
        p.io_processes,
        p.io_nodes.unwrap_or(0)
    );
    outln!(
        "bandwidth: peak {}/s, mean {}/s; per node: peak {}/s, mean {}/s",
        human_bytes(p.peak_bandwidth as u64),
        human_bytes(p.mean_bandwidth as u64),
        human_bytes(p.peak_node_bandwidth as u64),
        human_bytes(p.mean_node_bandwidth as u64)
    );
    outln!(
        "IOPS: peak {:.0}, mean {:.1}; metadata ops/s: peak {:.0}, mean {:.1}; metadata queue {}",
        p.peak_iops,
        p.mean_iops,
        p.peak_metadata_rate,
        p.mean_metadata_rate,
        p.mean_metadata_queue
            .map_or_else(|| "-".to_string(), |q| format!("{q:.2}"))
    );
    for d in &p.daemons {
        outln!(
            "  daemon {} ({}): {} read, {} written, {} ops ({} metadata)",
            d.daemon,
            d.host,
            human_bytes(d.read_bytes),
            human_bytes(d.written_bytes),
            d.ops,
            d.metadata_ops
        );
    }
}

#[cfg(test)]
mod tests {
    use super::slow;

    #[test]
    fn a_daemon_far_below_its_peers_with_requests_queued_is_slow() {
        let mb = 1e6;
        let rates = [
            (100.0 * mb, 3),
            (90.0 * mb, 0),
            (110.0 * mb, 1),
            (8.0 * mb, 12), // slow and queued: flagged
            (5.0 * mb, 0),  // slow but idle: not flagged
        ];
        let got = slow(&rates, 0.5);
        // Its peers: 5, 90, 100, 110 MB/s → median 95 MB/s.
        assert_eq!(got[3], Some(95.0 * mb));
        assert!(got.iter().enumerate().all(|(i, g)| g.is_some() == (i == 3)));
        // All idle: nothing to compare with, nothing flagged.
        assert!(slow(&[(0.0, 4), (0.0, 0)], 0.5).iter().all(Option::is_none));
    }
}
