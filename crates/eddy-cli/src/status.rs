//! `eddy status`: one line (or JSON object) per daemon; fails if any daemon is down. With a
//! backend linked, the links and a second table with each daemon's backend-tier figures.
//! With `--inventory`, a daemon whose host the latest health probe marked anomalous is
//! flagged (decision 0039). Then the FUSE mounts the daemons know, with the transport each
//! runs on (decision 0079). The membership (decision 0081): the epoch, the members, and while
//! items move, how many each daemon still has to copy.

use crate::cli::StatusArgs;
use anyhow::{bail, Result};
use eddy_client::Client;
use eddy_config::{Deployment, Link};
use eddy_deploy::human_bytes;
use eddy_deploy::StateDir;
use eddy_proto::{req, DaemonStatus, MembershipState, MountSeen, MountTransport, TierStatus};
use serde::Serialize;

/// What `status` reports about one daemon.
#[derive(Debug, Serialize)]
struct DaemonRow {
    id: u32,
    host: String,
    addr: String,
    /// Where it serves `/metrics` for Prometheus (`eddy start --metrics`), if it does.
    metrics: Option<String>,
    up: bool,
    /// Why the daemon is considered down.
    error: Option<String>,
    storage_used_bytes: Option<u64>,
    storage_free_bytes: Option<u64>,
    chunk_bytes: Option<u64>,
    chunks: Option<u64>,
    /// Bytes preallocated for sequential writers now, and ever (decision 0074).
    preallocated_bytes: Option<u64>,
    preallocated_total_bytes: Option<u64>,
    entries: Option<u64>,
    uptime_s: Option<u64>,
    /// Requests served since the daemon started.
    requests: Option<u64>,
    /// Stored blocks found not to match their checksum since start (each counted once).
    checksum_errors: Option<u64>,
    /// Writes refused since start because their data was damaged in flight.
    corrupt_payloads: Option<u64>,
    /// Items this daemon holds that other owners missed (hints, decision 0021), and per
    /// target daemon.
    hints: Option<u64>,
    hints_for: Vec<(u32, u64)>,
    /// Whether the daemon is rejoining (taking what it missed; clients use other copies).
    rejoining: Option<bool>,
    /// The backend tier: cached, dirty and pinned bytes, bytes read from (read ahead for
    /// streams among them) and written to the backend, fetches, evictions, capacity and
    /// watermarks (all zero when nothing is linked).
    tier: Option<TierStatus>,
    /// Its membership: the epoch it adopted, whether items move, how many of its items are
    /// still to be copied (decision 0081).
    membership: Option<MembershipState>,
    /// Being drained (`eddy shrink`): its items move to their next owners, then it stops.
    draining: bool,
    /// Its host's latest health probe (`--inventory`), when the host was probed.
    host_health: Option<eddy_sysmap::health::Health>,
    /// The mounts connected to it (shown per mount in `Report::mounts`).
    #[serde(skip)]
    mounts: Vec<MountSeen>,
    #[serde(skip)]
    mounts_unlisted: u64,
}

/// A FUSE mount of the deployment, as the daemons it is connected to report it (decision
/// 0079): who serves it, where, on which transport. What the mount told the daemons, shown
/// as it came (untrusted text, escaped in the table).
#[derive(Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
struct MountRow {
    host: String,
    pid: u32,
    mountpoint: String,
    /// `io_uring` or `dev_fuse`.
    transport: MountTransport,
    /// The daemons it is connected to.
    daemons: Vec<u32>,
}

#[derive(Debug, Serialize)]
struct Report {
    name: String,
    state: String,
    /// Namespace prefixes linked to backend directories.
    links: Vec<Link>,
    /// Copies of every item (decision 0020).
    replicas: usize,
    /// "healthy", "degraded: ..." (daemons down, every item still has a copy up, or items
    /// under-replicated: hints held, daemons rejoining) or "unavailable: ..." (some items
    /// have no copy up).
    health: String,
    /// Items under-replicated: the hints held by every daemon that answered.
    under_replicated: u64,
    /// The membership's epoch (decision 0081), the members, and while items move the daemons
    /// clients still place by.
    epoch: u64,
    members: Vec<u32>,
    moving_from: Option<Vec<u32>>,
    daemons: Vec<DaemonRow>,
    /// The FUSE mounts connected to the daemons that answered, and how many more a daemon
    /// knows than it lists (`MOUNTS_LISTED`).
    mounts: Vec<MountRow>,
    mounts_unlisted: u64,
}

/// The mounts the daemons report, one row per mount (host, pid, mount point, transport) with
/// the daemons it is connected to.
fn mount_rows(rows: &[DaemonRow]) -> Vec<MountRow> {
    let mut by_mount: std::collections::BTreeMap<(String, u32, String, MountTransport), Vec<u32>> =
        Default::default();
    for r in rows {
        for m in &r.mounts {
            let key = (
                m.client.host.clone(),
                m.client.pid,
                m.mountpoint.clone(),
                m.transport,
            );
            by_mount.entry(key).or_default().push(r.id);
        }
    }
    by_mount
        .into_iter()
        .map(|((host, pid, mountpoint, transport), daemons)| MountRow {
            host,
            pid,
            mountpoint,
            transport,
            daemons,
        })
        .collect()
}

/// The deployment's health from the daemons that are down, the copies kept, the items
/// under-replicated (hints held) and the daemons rejoining.
fn health(rows: &[DaemonRow], replicas: usize) -> String {
    let down: Vec<String> = rows
        .iter()
        .filter(|r| !r.up)
        .map(|r| r.id.to_string())
        .collect();
    let waiting = under_replicated(rows);
    let rejoining: Vec<String> = rows
        .iter()
        .filter(|r| r.rejoining == Some(true))
        .map(|r| r.id.to_string())
        .collect();
    if down.is_empty() {
        if waiting == 0 && rejoining.is_empty() {
            return "healthy".into();
        }
        let mut why = Vec::new();
        if waiting > 0 {
            why.push(format!(
                "{waiting} item{} under-replicated (being repaired; `eddy repair` waits for it)",
                if waiting == 1 { "" } else { "s" }
            ));
        }
        if !rejoining.is_empty() {
            why.push(format!("daemons rejoining: {}", rejoining.join(", ")));
        }
        return format!("degraded: {}", why.join("; "));
    }
    let list = down.join(", ");
    if down.len() < replicas {
        format!(
            "degraded: daemons down: {list}; every item still has a copy up ({replicas} copies \
             kept), the items of the daemons down are under-replicated{}",
            if waiting > 0 {
                format!(" ({waiting} changes missed are held for them)")
            } else {
                String::new()
            }
        )
    } else {
        format!(
            "unavailable: daemons down: {list}; with {replicas} cop{} some items have none up",
            if replicas == 1 { "y" } else { "ies" }
        )
    }
}

/// The hints held by the daemons that answered.
fn under_replicated(rows: &[DaemonRow]) -> u64 {
    rows.iter().filter_map(|r| r.hints).sum()
}

pub fn status(args: StatusArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    let dep = state.load_deployment()?;
    if args.prometheus {
        outln!(
            "{}",
            serde_json::to_string_pretty(&prometheus_targets(&dep))?
        );
        return Ok(());
    }
    let mut rows = collect(&dep)?;
    if let Some(db) = &args.inventory {
        let hosts: Vec<String> = rows.iter().map(|r| r.host.clone()).collect();
        let health = eddy_sysmap::health::latest(db, &hosts)?;
        for r in &mut rows {
            r.host_health = health.iter().find(|h| h.host == r.host).cloned();
        }
    }
    let down = rows.iter().filter(|r| !r.up).count();
    let replicas = dep.config.replicas;
    let report = Report {
        name: dep.name.clone(),
        state: state.dir().display().to_string(),
        links: dep.config.links.clone(),
        replicas,
        health: health(&rows, replicas),
        under_replicated: under_replicated(&rows),
        epoch: dep.epoch,
        members: dep.members(),
        moving_from: dep.moving_from.clone(),
        mounts: mount_rows(&rows),
        mounts_unlisted: rows.iter().map(|r| r.mounts_unlisted).max().unwrap_or(0),
        daemons: rows,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    if down > 0 {
        bail!(
            "{down} of {} daemons are down ({}); see their logs in {}",
            report.daemons.len(),
            report.health,
            state.dir().display()
        );
    }
    Ok(())
}

/// The deployment's metrics endpoints as Prometheus file-based service discovery has target
/// groups: one group, labelled `job` (the job as the deployment records it: the Slurm job id,
/// else its name) and `eddy_deployment`. Scraped with `honor_labels: false`, these labels are
/// the scrape's and a daemon's own `job` becomes `exported_job`: a job's daemons (its user's)
/// cannot put their series under another job (decision 0056).
fn prometheus_targets(dep: &Deployment) -> serde_json::Value {
    let targets: Vec<&str> = dep
        .daemons
        .iter()
        .filter_map(|d| d.metrics.as_deref())
        .collect();
    serde_json::json!([{
        "targets": targets,
        "labels": {
            "job": dep.job.label(&dep.name),
            "eddy_deployment": dep.name,
        },
    }])
}

/// Every listed daemon's status and membership (those being drained or joining too).
fn collect(dep: &Deployment) -> Result<Vec<DaemonRow>> {
    type Answer = (Result<DaemonStatus, String>, Option<MembershipState>);
    let rt = eddy_deploy::runtime()?;
    let results: Vec<Answer> = rt.block_on(async {
        match Client::new(dep.clone()) {
            Ok(client) => {
                let client = &client;
                futures::future::join_all(dep.daemons.iter().map(|d| async move {
                    let status = client
                        .call_daemon(d.id, req::Status)
                        .await
                        .map_err(|e| e.errno().to_string());
                    let membership = match status {
                        Ok(_) => client
                            .call_daemon(d.id, req::Membership::question())
                            .await
                            .ok(),
                        Err(_) => None,
                    };
                    (status, membership)
                }))
                .await
            }
            Err(e) => {
                let msg = format!("the deployment file is not usable: {e}");
                dep.daemons
                    .iter()
                    .map(|_| (Err(msg.clone()), None))
                    .collect()
            }
        }
    });
    Ok(dep
        .daemons
        .iter()
        .zip(results)
        .map(|(d, (status, membership))| {
            let mut r = row(d, status);
            r.membership = membership;
            r.draining = dep.draining.contains(&d.id);
            r
        })
        .collect())
}

fn row(d: &eddy_config::DaemonEntry, result: Result<DaemonStatus, String>) -> DaemonRow {
    let mut row = DaemonRow {
        id: d.id,
        host: d.host.clone(),
        addr: d.addr.clone(),
        metrics: d.metrics.clone(),
        up: result.is_ok(),
        error: None,
        storage_used_bytes: None,
        storage_free_bytes: None,
        chunk_bytes: None,
        chunks: None,
        preallocated_bytes: None,
        preallocated_total_bytes: None,
        entries: None,
        uptime_s: None,
        requests: None,
        checksum_errors: None,
        corrupt_payloads: None,
        hints: None,
        hints_for: Vec::new(),
        rejoining: None,
        membership: None,
        draining: false,
        tier: None,
        host_health: None,
        mounts: Vec::new(),
        mounts_unlisted: 0,
    };
    match result {
        Ok(s) => {
            row.storage_used_bytes = Some(s.fs_total_bytes.saturating_sub(s.fs_free_bytes));
            row.storage_free_bytes = Some(s.fs_avail_bytes);
            row.chunk_bytes = Some(s.chunk_bytes);
            row.chunks = Some(s.chunks);
            row.preallocated_bytes = Some(s.preallocated_bytes);
            row.preallocated_total_bytes = Some(s.preallocated_total_bytes);
            row.entries = Some(s.entries);
            row.uptime_s = Some(s.uptime_s);
            row.requests = Some(s.requests);
            row.checksum_errors = Some(s.checksum_errors);
            row.corrupt_payloads = Some(s.corrupt_payloads);
            row.hints = Some(s.hints);
            row.hints_for = s.hints_for;
            row.rejoining = Some(s.rejoining);
            row.tier = Some(s.tier);
            row.mounts = s.mounts;
            row.mounts_unlisted = s.mounts_unlisted;
        }
        Err(e) => row.error = Some(e),
    }
    row
}

fn print_table(report: &Report) {
    outln!("deployment {:?} (state {})", report.name, report.state);
    outln!("copies {}: {}", report.replicas, report.health);
    print_membership(report);
    for l in &report.links {
        outln!("link {} -> {}", l.prefix, l.backend.display());
    }
    outln!(
        "{:>4}  {:<16} {:<22} {:<9} {:>10} {:>10} {:>11} {:>8} {:>8} {:>9} {:>9} {:>9} {:>7}",
        "ID",
        "HOST",
        "ADDRESS",
        "STATE",
        "USED",
        "FREE",
        "CHUNK DATA",
        "CHUNKS",
        "ENTRIES",
        "UPTIME",
        "SUM ERRS",
        "BAD WRITES",
        "HINTS"
    );
    for r in &report.daemons {
        let opt = |v: Option<u64>, f: fn(u64) -> String| v.map(f).unwrap_or_else(|| "-".into());
        outln!(
            "{:>4}  {:<16} {:<22} {:<9} {:>10} {:>10} {:>11} {:>8} {:>8} {:>9} {:>9} {:>9} {:>7}",
            r.id,
            r.host,
            r.addr,
            match (r.up, r.rejoining) {
                (false, _) => "down",
                (true, Some(true)) => "rejoining",
                (true, _) => "up",
            },
            opt(r.storage_used_bytes, human_bytes),
            opt(r.storage_free_bytes, human_bytes),
            opt(r.chunk_bytes, human_bytes),
            opt(r.chunks, |v| v.to_string()),
            opt(r.entries, |v| v.to_string()),
            opt(r.uptime_s, human_duration),
            opt(r.checksum_errors, |v| v.to_string()),
            opt(r.corrupt_payloads, |v| v.to_string()),
            opt(r.hints, |v| v.to_string()),
        );
        if let Some(e) = &r.error {
            outln!("      daemon {} is down: {e}", r.id);
        }
        if let Some(line) = r.host_health.as_ref().and_then(anomaly_line) {
            outln!("      daemon {} {line}", r.id);
        }
    }
    print_metrics(&report.daemons);
    print_mounts(report);
    if !report.links.is_empty() {
        print_tier_table(&report.daemons);
        print_backends(&report.daemons);
        print_conflicts(&report.daemons);
    }
}

/// The membership (decision 0081): the epoch and members, and a move's progress.
fn print_membership(report: &Report) {
    let ids = |v: &[u32]| {
        v.iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    outln!(
        "membership: epoch {}, members {}",
        report.epoch,
        ids(&report.members)
    );
    let left: u64 = report
        .daemons
        .iter()
        .filter_map(|r| r.membership.map(|m| m.left))
        .sum();
    let draining: Vec<u32> = report
        .daemons
        .iter()
        .filter(|r| r.draining)
        .map(|r| r.id)
        .collect();
    if let Some(from) = &report.moving_from {
        outln!(
            "moving: clients place by {} while items move; {left} items left to copy",
            ids(from)
        );
    }
    if !draining.is_empty() {
        outln!("draining: {}", ids(&draining));
    }
    for r in &report.daemons {
        if let Some(m) = r.membership.filter(|m| m.epoch != report.epoch) {
            outln!(
                "      daemon {} is at epoch {} (the hosts file at {})",
                r.id,
                m.epoch,
                report.epoch
            );
        }
    }
}

/// Per backend of the linked prefixes, summed over the daemons that answered (decision
/// 0073): shown when `[[backends]]` name some.
fn print_backends(rows: &[DaemonRow]) {
    let mut sums: Vec<eddy_proto::stats::StoreStats> = Vec::new();
    for t in rows.iter().filter_map(|r| r.tier.as_ref()) {
        for (i, b) in t.backends.iter().enumerate() {
            if sums.len() <= i {
                sums.push(eddy_proto::stats::StoreStats {
                    name: b.name.clone(),
                    prefix: b.prefix.clone(),
                    kind: b.kind.clone(),
                    read_only: b.read_only,
                    ..Default::default()
                });
            }
            let s = &mut sums[i];
            s.placed_files += b.placed_files;
            s.placed_bytes += b.placed_bytes;
            s.dirty_bytes += b.dirty_bytes;
            s.read_bytes += b.read_bytes;
            s.written_bytes += b.written_bytes;
            s.failures += b.failures;
        }
    }
    if sums.iter().all(|b| b.name.starts_with('/')) {
        return;
    }
    outln!("backends");
    outln!(
        "{:<16} {:<12} {:<10} {:>7} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "NAME",
        "PREFIX",
        "KIND",
        "PLACED",
        "PLACED B",
        "DIRTY",
        "READ",
        "WRITTEN",
        "FAILURES"
    );
    for b in &sums {
        let kind = match (b.kind.as_str(), b.read_only) {
            ("", true) => "read-only".to_string(),
            ("", false) => "-".to_string(),
            (k, true) => format!("{k},ro"),
            (k, false) => k.to_string(),
        };
        outln!(
            "{:<16} {:<12} {:<10} {:>7} {:>10} {:>10} {:>10} {:>10} {:>8}",
            b.name,
            b.prefix,
            kind,
            b.placed_files,
            human_bytes(b.placed_bytes),
            human_bytes(b.dirty_bytes),
            human_bytes(b.read_bytes),
            human_bytes(b.written_bytes),
            b.failures
        );
    }
}

/// "on an anomalous host: ..." for a host the inventory marks anomalous.
fn anomaly_line(h: &eddy_sysmap::health::Health) -> Option<String> {
    if !h.anomalous {
        return None;
    }
    let bw = |v: f64| format!("{}/s", human_bytes(v as u64));
    Some(match (h.bandwidth, h.peer_median) {
        (None, _) => format!(
            "is on an anomalous host: {} was down at its last probe ({})",
            h.host,
            h.error.as_deref().unwrap_or("no answer")
        ),
        (Some(b), Some(m)) => format!(
            "is on an anomalous host: {} probed at {} against its peers' median {}",
            h.host,
            bw(b),
            bw(m)
        ),
        (Some(b), None) => format!("is on an anomalous host: {} probed at {}", h.host, bw(b)),
    })
}

/// The FUSE mounts connected to the daemons, with their transport (decision 0079).
fn print_mounts(report: &Report) {
    if report.mounts.is_empty() {
        outln!("mounts: none connected");
        return;
    }
    outln!("mounts");
    outln!(
        "{:<16} {:>8} {:<10} {:<12} MOUNT POINT",
        "HOST",
        "PID",
        "TRANSPORT",
        "DAEMONS"
    );
    for m in &report.mounts {
        let daemons: Vec<String> = m.daemons.iter().map(u32::to_string).collect();
        // What a mount sent, escaped: no control character reaches the terminal.
        outln!(
            "{:<16} {:>8} {:<10} {:<12} {}",
            m.host.escape_debug().to_string(),
            m.pid,
            m.transport.name(),
            daemons.join(","),
            m.mountpoint.escape_debug()
        );
    }
    if report.mounts_unlisted > 0 {
        outln!(
            "  ... and {} more not listed by a daemon",
            report.mounts_unlisted
        );
    }
}

/// Where the daemons serve `/metrics`, when they do (`eddy start --metrics`).
fn print_metrics(rows: &[DaemonRow]) {
    if rows.iter().all(|r| r.metrics.is_none()) {
        return;
    }
    outln!("metrics (Prometheus)");
    for r in rows {
        let at = r.metrics.as_deref().map(|m| format!("http://{m}/metrics"));
        outln!("{:>4}  {}", r.id, at.as_deref().unwrap_or("-"));
    }
}

/// The backend tier's figures of every daemon that answered.
fn print_tier_table(rows: &[DaemonRow]) {
    outln!("backend tier");
    outln!(
        "{:>4}  {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>15} {:>9} {:>21}",
        "ID",
        "CACHED",
        "DIRTY",
        "PINNED",
        "BE READ",
        "READ AHEAD",
        "BE WRITTEN",
        "WRITES(+MERGED)",
        "EVICTIONS",
        "WATERMARKS HIGH/LOW"
    );
    for r in rows {
        let Some(t) = &r.tier else {
            outln!("{:>4}  -", r.id);
            continue;
        };
        outln!(
            "{:>4}  {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>15} {:>9} {:>21}",
            r.id,
            human_bytes(t.cached_bytes),
            human_bytes(t.dirty_bytes),
            human_bytes(t.pinned_bytes),
            human_bytes(t.backend_read_bytes),
            human_bytes(t.read_ahead_bytes),
            human_bytes(t.backend_write_bytes),
            format!("{}(+{})", t.backend_writes, t.merged_writes),
            t.evictions,
            watermarks(t),
        );
    }
}

/// The dirty files whose backend copy another writer changed (decision 0030), if any.
fn print_conflicts(rows: &[DaemonRow]) {
    let tiers = || rows.iter().filter_map(|r| r.tier.as_ref());
    let count: u64 = tiers().map(|t| t.conflicts).sum();
    if count == 0 {
        return;
    }
    let (files, them) = if count == 1 {
        ("file", "it")
    } else {
        ("files", "them")
    };
    outln!(
        "conflicts: {count} {files} changed in the backend by another writer while this deployment holds unsaved changes; a stage-out does not write {them} (`eddy stage-out --overwrite` does):"
    );
    let mut listed = 0;
    for p in tiers().flat_map(|t| &t.conflict_paths) {
        outln!("  {p}");
        listed += 1;
    }
    if (listed as u64) < count {
        outln!("  ... and {} more", count - listed as u64);
    }
}

/// "9.0 GiB/7.5 GiB" (high/low), "-" without a capacity.
fn watermarks(t: &TierStatus) -> String {
    if t.capacity_bytes == 0 {
        return "-".into();
    }
    format!(
        "{}/{}",
        human_bytes(t.high_watermark_bytes),
        human_bytes(t.low_watermark_bytes)
    )
}

/// Seconds as "1h02m03s", "4m05s" or "6s".
pub fn human_duration(s: u64) -> String {
    let (h, m, sec) = (s / 3600, (s / 60) % 60, s % 60);
    if h > 0 {
        format!("{h}h{m:02}m{sec:02}s")
    } else if m > 0 {
        format!("{m}m{sec:02}s")
    } else {
        format!("{sec}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(65), "1m05s");
        assert_eq!(human_duration(3723), "1h02m03s");
    }
}
