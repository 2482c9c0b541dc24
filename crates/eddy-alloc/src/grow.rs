//! The scaling rule at run time: whether a pool job already running is bound by its I/O
//! servers and would gain from more of them (DFRA's scaling rule, judged on the job's live
//! counters instead of its history), how many and which idle servers to add, and the
//! watcher's pacing (`Watch`: a warm-up, a run of bound polls, a cool-down after each grow, a
//! cap on grows per job). Pure, as the rest of the crate: no I/O, no clock; the caller polls
//! the job's daemons and passes times in seconds.

use crate::decide::{median, screen, Screened, Thresholds};
use crate::policy::Policy;
use crate::pool::Server;
use eddy_history::plot::human_bytes;
use eddy_proto::stats::DaemonStats;
use serde::{Deserialize, Serialize};

/// The `[pool.grow]` knobs of a site's bb.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrowPolicy {
    /// Seconds between polls of the job's daemons.
    pub poll_s: u64,
    /// The window the live counters are taken over, seconds; None: the caller's default.
    pub window_s: Option<u64>,
    /// Consecutive polls the job must be bound by its servers before a grow.
    pub sustain: u32,
    /// Saturated: the job's servers move at least this share of their summed peak.
    pub busy_ratio: f64,
    /// Waiting: the mean request queue over the job's servers is at least this.
    pub min_queue: f64,
    /// No decision this soon after the job's start, seconds.
    pub warmup_s: u64,
    /// Nor this soon after the end of the last grow (done or failed), seconds.
    pub cooldown_s: u64,
    /// Grows per job, at most.
    pub max_grows: u32,
    /// A job's servers after growing, at most; None: the caller's per-job cap.
    pub max_servers: Option<u32>,
    /// Seconds a grow waits for the job's clients to stop before it gives up.
    pub stop_grace_s: u64,
    /// Seconds a grow's data move may take before it is abandoned.
    pub move_deadline_s: u64,
}

impl Default for GrowPolicy {
    fn default() -> Self {
        GrowPolicy {
            poll_s: 5,
            window_s: None,
            sustain: 2,
            busy_ratio: 0.8,
            min_queue: 1.0,
            warmup_s: 30,
            cooldown_s: 300,
            max_grows: 2,
            max_servers: None,
            stop_grace_s: 150,
            move_deadline_s: 900,
        }
    }
}

/// A TOML text's `[pool.grow]` table; the pool's other keys and the other tables are ignored.
#[derive(Debug, Default, Deserialize)]
struct File {
    #[serde(default)]
    pool: PoolTable,
}

#[derive(Debug, Default, Deserialize)]
struct PoolTable {
    #[serde(default)]
    grow: GrowPolicy,
}

impl GrowPolicy {
    /// The knobs of a TOML text's `[pool.grow]` table (the defaults without one), checked.
    pub fn from_toml(text: &str) -> Result<GrowPolicy, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        file.pool.grow.check()?;
        Ok(file.pool.grow)
    }

    /// Refuses knobs that make no sense.
    pub fn check(&self) -> Result<(), String> {
        if self.poll_s == 0 {
            return Err("pool.grow.poll_s = 0: give a positive number of seconds".into());
        }
        if self.window_s == Some(0) {
            return Err("pool.grow.window_s = 0: give a positive number of seconds".into());
        }
        if self.sustain == 0 {
            return Err("pool.grow.sustain = 0: a grow needs at least one bound poll".into());
        }
        if !(self.busy_ratio > 0.0 && self.busy_ratio <= 1.0) {
            return Err(format!(
                "pool.grow.busy_ratio = {}: give a share of the servers' peak in (0, 1]",
                self.busy_ratio
            ));
        }
        if !(self.min_queue.is_finite() && self.min_queue >= 0.0) {
            return Err(format!(
                "pool.grow.min_queue = {}: give a finite number of requests, 0 or more",
                self.min_queue
            ));
        }
        if self.max_servers == Some(0) {
            return Err("pool.grow.max_servers = 0: a job keeps at least one server".into());
        }
        if self.move_deadline_s == 0 {
            return Err("pool.grow.move_deadline_s = 0: give a positive number of seconds".into());
        }
        Ok(())
    }
}

/// One of the job's servers now, from its daemon's live counters over the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveServer {
    /// Its pool id.
    pub id: u32,
    pub host: String,
    /// Bytes read and written per second.
    pub bytes_per_s: f64,
    /// Mean requests waiting.
    pub queue_mean: f64,
    /// Mean metadata requests waiting.
    pub metadata_queue_mean: f64,
    /// B_f: its peak bandwidth, bytes/s.
    pub peak_bandwidth: f64,
}

/// The job now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Live {
    /// Its servers (k of them).
    pub servers: Vec<LiveServer>,
    /// N_A: compute nodes that did I/O in the window.
    pub active_nodes: u32,
    /// Bytes read and written so far.
    pub volume_bytes: u64,
    /// The chunk data its servers hold (a grow moves a share of it).
    pub held_bytes: u64,
    /// Seconds since the job started.
    pub elapsed_s: f64,
    /// Predicted seconds left; None: assumed as long as it has run.
    pub remaining_s: Option<f64>,
    /// Bytes/s a move may use; None: the added servers' summed peak bandwidth.
    pub move_bandwidth: Option<f64>,
}

/// One of the job's servers as its daemon counted it: its pool id and host, its B_f, and the
/// daemon's counters (`Live::observed`).
pub struct Observed<'a> {
    pub id: u32,
    pub host: String,
    pub peak_bandwidth: f64,
    pub stats: &'a DaemonStats,
}

impl Live {
    /// The job as its daemons' counters show it over their last `window_s` seconds: each
    /// server's rate and queues, the compute nodes that did I/O in the window (those `counts`
    /// accepts: the caller's own), the bytes read and written so far, and what was written as
    /// what the servers hold (at most that: a grow moves a share of it). The times and the
    /// move's bandwidth are the caller's to set (here: none elapsed, none known).
    pub fn observed(servers: &[Observed], window_s: u64, counts: impl Fn(&str) -> bool) -> Live {
        let mut nodes = std::collections::BTreeSet::new();
        let (mut volume, mut written) = (0u64, 0u64);
        let mut live = Vec::with_capacity(servers.len());
        for o in servers {
            let r = o.stats.recent(window_s);
            live.push(LiveServer {
                id: o.id,
                host: o.host.clone(),
                bytes_per_s: r.bytes_per_s,
                queue_mean: r.queue_mean,
                metadata_queue_mean: r.metadata_queue_mean,
                peak_bandwidth: o.peak_bandwidth,
            });
            let from = o.stats.now_ms.saturating_sub(window_s.saturating_mul(1000));
            for c in &o.stats.clients {
                volume = volume
                    .saturating_add(c.read_bytes)
                    .saturating_add(c.written_bytes);
                written = written.saturating_add(c.written_bytes);
                if c.last_ms >= from && counts(&c.client.host) {
                    nodes.insert(c.client.host.as_str());
                }
            }
        }
        Live {
            servers: live,
            active_nodes: u32::try_from(nodes.len()).unwrap_or(u32::MAX),
            volume_bytes: volume,
            held_bytes: written,
            elapsed_s: 0.0,
            remaining_s: None,
            move_bandwidth: None,
        }
    }
}

/// A cap on the job's server count, named for the reasons ("max_servers_per_job",
/// "max_servers_per_user", "pool.grow.max_servers").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cap {
    pub name: String,
    pub servers: u32,
}

/// One poll's judgement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrowVerdict {
    /// The job is bound by its servers on this poll: saturated, waiting, not metadata-bound,
    /// and of enough volume.
    pub bound: bool,
    /// Pool ids to add, lowest first; empty: hold.
    pub add: Vec<u32>,
    /// k': the job's servers after the grow (k when holding).
    pub target: u32,
    /// Why, with the numbers used, in the order the clauses ran.
    pub reasons: Vec<String>,
    /// Why not grown (None when `add` is not empty).
    pub hold: Option<String>,
}

/// A rate, a queue or a time as the rule counts it: a non-finite or negative value counts 0.
fn finite(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x
    } else {
        0.0
    }
}

/// One bound on k'.
struct Limit {
    /// In the k' reason: "cap max_servers_per_job 4".
    label: String,
    servers: u32,
    /// Why nothing is added when it is at most k.
    held: String,
}

/// One poll's judgement of the job `live` on `pool` (every server of the pool with its live
/// load and running jobs; the job's own, `members`, among them) under `caps`.
pub fn judge(
    policy: &Policy,
    grow: &GrowPolicy,
    live: &Live,
    pool: &[Server],
    members: &[u32],
    caps: &[Cap],
) -> GrowVerdict {
    let k = u32::try_from(live.servers.len()).unwrap_or(u32::MAX);
    let mut reasons = Vec::new();
    let hold = |bound: bool, mut reasons: Vec<String>, why: String| {
        reasons.push(why.clone());
        GrowVerdict {
            bound,
            add: Vec::new(),
            target: k,
            reasons,
            hold: Some(why),
        }
    };
    if k == 0 {
        return hold(false, reasons, "no server of the job reported".into());
    }

    // Bound by its servers: saturated, waiting, not metadata-bound, of enough volume.
    let rate: f64 = live.servers.iter().map(|s| finite(s.bytes_per_s)).sum();
    let peak: f64 = live.servers.iter().map(|s| s.peak_bandwidth).sum();
    let queue = live
        .servers
        .iter()
        .map(|s| finite(s.queue_mean))
        .sum::<f64>()
        / f64::from(k);
    // The worst server's; NaN when any is not finite (f64::max would drop a NaN).
    let metadata = live.servers.iter().fold(0.0_f64, |m, s| {
        if m.is_finite() && s.metadata_queue_mean.is_finite() {
            m.max(s.metadata_queue_mean)
        } else {
            f64::NAN
        }
    });
    let (remaining, predicted) = match live.remaining_s {
        Some(r) => (finite(r), "predicted"),
        None => (finite(live.elapsed_s), "assumed as long as it has run"),
    };
    let projected = live.volume_bytes as f64 + rate * remaining;
    let v_min = policy.v_min_bytes as f64;

    // Each false on a NaN: a non-finite input never makes the job bound.
    let saturated = rate >= grow.busy_ratio * peak;
    let waiting = queue >= grow.min_queue;
    let not_metadata_bound = metadata < policy.w_metadata;
    let enough_volume = projected >= v_min;
    let mut unbound = Vec::new();
    if !(peak.is_finite() && peak > 0.0) {
        unbound.push(format!(
            "not bound: the peak bandwidth of its {k} server(s) is unknown ({peak})"
        ));
    } else if !saturated {
        unbound.push(format!(
            "not bound: not saturated, {}/s < {} x {}/s over {k} server(s)",
            human_bytes(rate),
            grow.busy_ratio,
            human_bytes(peak)
        ));
    }
    if !waiting {
        unbound.push(format!(
            "not bound: not waiting, queue {queue:.1} < {:.1}",
            grow.min_queue
        ));
    }
    if !not_metadata_bound {
        unbound.push(format!(
            "not bound: metadata-bound, metadata queue {metadata:.1} >= W_metadata {:.1}",
            policy.w_metadata
        ));
    }
    if !enough_volume {
        unbound.push(format!(
            "not bound: volume {} + {}/s x {remaining:.0} s remaining ({predicted}) = {} < \
             V_min {}",
            human_bytes(live.volume_bytes as f64),
            human_bytes(rate),
            human_bytes(projected),
            human_bytes(v_min)
        ));
    }
    if !unbound.is_empty() {
        let why = unbound.remove(0);
        let mut v = hold(false, reasons, why);
        v.reasons.extend(unbound);
        return v;
    }
    reasons.push(format!(
        "bound by servers: {}/s >= {} x {}/s over {k} server(s), queue {queue:.1} >= {:.1}, \
         metadata queue {metadata:.1} < W_metadata {:.1}",
        human_bytes(rate),
        grow.busy_ratio,
        human_bytes(peak),
        grow.min_queue,
        policy.w_metadata
    ));
    reasons.push(format!(
        "volume {} + {}/s x {remaining:.0} s remaining ({predicted}) = {} >= V_min {}",
        human_bytes(live.volume_bytes as f64),
        human_bytes(rate),
        human_bytes(projected),
        human_bytes(v_min)
    ));

    // The scaling rule: S = ⌈N_A / F⌉ servers, F = ⌈B_f / B_c⌉.
    let Some(b_c) = policy
        .compute_peak_bandwidth
        .filter(|b| b.is_finite() && *b > 0.0)
    else {
        return hold(
            true,
            reasons,
            format!(
                "B_c unknown (alloc.compute_peak_bandwidth {}): a running job is grown only \
                 with a compute node's peak bandwidth set",
                policy
                    .compute_peak_bandwidth
                    .map_or("unset".into(), |b| format!("= {b}"))
            ),
        );
    };
    let Some(b_f) = median(live.servers.iter().map(|s| s.peak_bandwidth).collect()) else {
        return hold(
            true,
            reasons,
            "B_f unknown: no server's peak bandwidth".into(),
        );
    };
    let f = ((b_f / b_c).ceil().min(f64::from(u32::MAX)) as u32).max(1);
    let n_a = live.active_nodes;
    let s = n_a.div_ceil(f);
    let scaling = format!(
        "F = ceil(B_f {}/s / B_c {}/s) = {f}, S = ceil(N_A {n_a} / F {f}) = {s}",
        human_bytes(b_f),
        human_bytes(b_c)
    );
    if s <= k {
        return hold(
            true,
            reasons,
            format!("{scaling} <= k {k}: more servers would not be used"),
        );
    }
    reasons.push(format!("{scaling} > k {k}"));

    // The idle usable servers: screened as `decide` screens, not the job's, idle and quiet.
    let Screened {
        usable,
        reasons: screened,
        ..
    } = screen(policy, pool);
    reasons.extend(screened);
    let idle: Vec<&Server> = match median(usable.iter().map(|s| s.peak_bandwidth).collect()) {
        None => Vec::new(),
        Some(pool_b_f) => {
            let th = Thresholds::of(policy, pool_b_f);
            usable
                .iter()
                .copied()
                .filter(|s| !members.contains(&s.id))
                .filter(|s| !live.servers.iter().any(|m| m.id == s.id))
                .filter(|s| s.peak_bandwidth.is_finite() && s.peak_bandwidth > 0.0)
                .filter(|s| s.recent_bandwidth.is_none_or(f64::is_finite))
                .filter(|s| th.free(s, policy.quiet_ratio))
                .collect()
        }
    };

    // k' = min(S, 2k, every cap, k + the idle servers).
    let idle_n = u32::try_from(idle.len()).unwrap_or(u32::MAX);
    let mut limits = vec![
        Limit {
            label: format!("S {s}"),
            servers: s,
            held: format!("S {s}"),
        },
        Limit {
            label: format!("2k {}", k.saturating_mul(2)),
            servers: k.saturating_mul(2),
            held: format!("2k {}", k.saturating_mul(2)),
        },
    ];
    let named = caps.iter().map(|c| (c.name.clone(), c.servers));
    let own = grow
        .max_servers
        .map(|m| ("pool.grow.max_servers".to_string(), m));
    for (name, servers) in named.chain(own) {
        limits.push(Limit {
            label: format!("cap {name} {servers}"),
            servers,
            held: format!("cap {name} {servers}"),
        });
    }
    limits.push(Limit {
        label: format!("k + idle {k} + {idle_n} = {}", k.saturating_add(idle_n)),
        servers: k.saturating_add(idle_n),
        held: if idle_n == 0 {
            "no idle server".into()
        } else {
            format!("only {idle_n} idle server(s)")
        },
    });
    let target = limits.iter().map(|l| l.servers).min().unwrap_or(k);
    let labels: Vec<&str> = limits.iter().map(|l| l.label.as_str()).collect();
    let min = format!("k' = min({}) = {target}", labels.join(", "));
    if target <= k {
        let by: Vec<&str> = limits
            .iter()
            .filter(|l| l.servers <= k)
            .map(|l| l.held.as_str())
            .collect();
        reasons.push(min);
        return hold(
            true,
            reasons,
            format!("not grown: k' {target} <= k {k}: {}", by.join(", ")),
        );
    }
    let by: Vec<&str> = limits
        .iter()
        .filter(|l| l.servers == target)
        .map(|l| l.label.as_str())
        .collect();
    reasons.push(format!("{min}, set by {}", by.join(", ")));
    let added: Vec<&Server> = idle.into_iter().take((target - k) as usize).collect();

    // Worth it: moving the added servers' share of the held data takes less than half the
    // time left.
    let summed: f64 = added.iter().map(|s| s.peak_bandwidth).sum();
    let (bandwidth, of) = match live.move_bandwidth {
        Some(b) => (b, "given"),
        None => (summed, "the added servers' peak"),
    };
    if !(bandwidth.is_finite() && bandwidth > 0.0) {
        return hold(
            true,
            reasons,
            format!("not grown: no bandwidth to move the data at ({bandwidth} bytes/s, {of})"),
        );
    }
    let moved = live.held_bytes as f64 * f64::from(target - k) / f64::from(target);
    let seconds = moved / bandwidth;
    let worth_it = seconds < remaining / 2.0;
    let how = format!(
        "moving {} (held {} x {}/{target}) at {}/s ({of}) takes {seconds:.0} s",
        human_bytes(moved),
        human_bytes(live.held_bytes as f64),
        target - k,
        human_bytes(bandwidth)
    );
    if !worth_it {
        return hold(
            true,
            reasons,
            format!("not worth it: {how} >= half the {remaining:.0} s remaining"),
        );
    }
    reasons.push(format!(
        "worth it: {how} < half the {remaining:.0} s remaining"
    ));
    GrowVerdict {
        bound: true,
        add: added.iter().map(|s| s.id).collect(),
        target,
        reasons,
        hold: None,
    }
}

/// The watcher's pacing of one job's grows; times in seconds on the caller's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Watch {
    started_s: f64,
    bound_polls: u32,
    grows: u32,
    last_end_s: Option<f64>,
}

impl Watch {
    /// A job started at `started_s`.
    pub fn new(started_s: f64) -> Watch {
        Watch {
            started_s,
            bound_polls: 0,
            grows: 0,
            last_end_s: None,
        }
    }

    /// Err(why) while no decision may be taken: `max_grows` reached, the warm-up after the
    /// job's start, the cool-down after the last grow's end.
    pub fn may_decide(&self, g: &GrowPolicy, now_s: f64) -> Result<(), String> {
        if self.grows >= g.max_grows {
            return Err(format!(
                "grown {} time(s): pool.grow.max_grows = {}",
                self.grows, g.max_grows
            ));
        }
        let since = now_s - self.started_s;
        let warm = since >= g.warmup_s as f64; // false when NaN
        if !warm {
            return Err(format!(
                "warming up: {since:.0} s since the job's start < pool.grow.warmup_s {}",
                g.warmup_s
            ));
        }
        if let Some(end) = self.last_end_s {
            let since = now_s - end;
            let cool = since >= g.cooldown_s as f64;
            if !cool {
                return Err(format!(
                    "cooling down: {since:.0} s since the last grow ended < \
                     pool.grow.cooldown_s {}",
                    g.cooldown_s
                ));
            }
        }
        Ok(())
    }

    /// Records one poll's verdict; true when it adds servers and the job has been bound
    /// `sustain` polls in a row (a poll not bound starts the count again).
    pub fn sustained(&mut self, g: &GrowPolicy, v: &GrowVerdict) -> bool {
        self.bound_polls = if v.bound {
            self.bound_polls.saturating_add(1)
        } else {
            0
        };
        !v.add.is_empty() && self.bound_polls >= g.sustain
    }

    /// A grow ended (done or failed) at `end_s`: counts it, starts the cool-down and the count
    /// of bound polls again.
    pub fn ended(&mut self, end_s: f64) {
        self.grows = self.grows.saturating_add(1);
        self.last_end_s = Some(end_s);
        self.bound_polls = 0;
    }

    /// Grows ended so far.
    pub fn grows(&self) -> u32 {
        self.grows
    }

    /// Bound polls in a row so far.
    pub fn bound_polls(&self) -> u32 {
        self.bound_polls
    }
}

#[cfg(test)]
mod tests;
