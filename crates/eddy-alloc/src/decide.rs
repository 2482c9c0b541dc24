//! The rules (DFRA §3–5): anomaly screening, then the scaling rule (eligibility tests, then
//! S = ⌈N_A / F⌉ idle servers), else the interference rule (dedicated idle servers when the
//! default ones carry a neighbour it would disturb or that would disturb it), else the
//! default allocation. Every decision says which rule decided and the numbers it used.

use crate::policy::Policy;
use crate::pool::{Job, Load, RunningJob, Server, Traits};
use eddy_history::plot::human_bytes;
use eddy_history::{IoMode, JobProfile};
use serde::{Deserialize, Serialize};

/// Which rule decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rule {
    /// More (dedicated, idle) servers, for capacity: the scaling rule.
    Scaled,
    /// Dedicated idle servers of the default count, for isolation: the interference rule.
    Isolated,
    /// The default allocation.
    Default,
}

/// The first scaling test a job failed (Table 4's rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Test {
    /// No previous run of the application.
    History,
    /// Volume < V_min.
    Volume,
    /// N_A < N_min.
    IoNodes,
    /// Mean metadata queue ≥ W_metadata.
    Metadata,
}

impl Test {
    pub const ALL: [Test; 4] = [Test::History, Test::Volume, Test::IoNodes, Test::Metadata];

    pub fn describe(self) -> &'static str {
        match self {
            Test::History => "no history",
            Test::Volume => "I/O volume < V_min",
            Test::IoNodes => "I/O nodes < N_min",
            Test::Metadata => "metadata queue >= W_metadata",
        }
    }
}

/// What the policy decided for one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The servers' ids.
    pub servers: Vec<u32>,
    pub rule: Rule,
    /// Why, with the numbers used, in the order the rules ran.
    pub reasons: Vec<String>,
    /// The first scaling test the job failed (None when it passed them all).
    pub refused_at: Option<Test>,
    /// The servers the screening excluded (unhealthy or anomalous).
    pub excluded: Vec<u32>,
}

/// The α-thresholds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Thresholds {
    bandwidth: f64,
    iops: f64,
    metadata_rate: f64,
    w_metadata: f64,
}

impl Thresholds {
    /// The policy's thresholds, a server's peak throughput being `b_f` (the median of the
    /// usable servers' `peak_bandwidth`) unless the policy sets it.
    pub(crate) fn of(policy: &Policy, b_f: f64) -> Thresholds {
        Thresholds {
            bandwidth: policy.alpha * policy.server_peak_bandwidth.unwrap_or(b_f),
            iops: policy.alpha * policy.server_peak_iops,
            metadata_rate: policy.alpha * policy.server_peak_metadata_rate,
            w_metadata: policy.w_metadata,
        }
    }

    /// Why `t` (history) with `live` (overriding the rates) is interference-prone; empty when
    /// it is not.
    fn prone(&self, t: Option<&Traits>, live: Option<&Load>) -> Vec<String> {
        let mut why = Vec::new();
        if t.is_some_and(|t| t.io_mode == IoMode::N1) {
            why.push("N-1".to_string());
        }
        let queue = live
            .and_then(|l| l.metadata_queue)
            .or_else(|| t.and_then(|t| t.mean_metadata_queue));
        if let Some(q) = queue {
            if q > self.w_metadata {
                why.push(format!(
                    "metadata-heavy (queue {q:.1} > W_metadata {:.1})",
                    self.w_metadata
                ));
            }
        }
        let (bw, iops, md) = match (live, t) {
            (Some(l), _) => (l.bytes_per_s, l.iops, l.metadata_rate),
            (None, Some(t)) => (t.peak_bandwidth, t.peak_iops, t.peak_metadata_rate),
            (None, None) => return why,
        };
        if bw >= self.bandwidth {
            why.push(format!(
                "high throughput ({}/s >= {}/s)",
                human_bytes(bw),
                human_bytes(self.bandwidth)
            ));
        }
        if iops >= self.iops {
            why.push(format!("high IOPS ({iops:.0} >= {:.0})", self.iops));
        }
        if md >= self.metadata_rate {
            why.push(format!(
                "high metadata rate ({md:.0}/s >= {:.0}/s)",
                self.metadata_rate
            ));
        }
        why
    }

    /// A load below `ratio` of every threshold: no I/O to speak of.
    fn quiet(&self, l: &Load, ratio: f64) -> bool {
        l.bytes_per_s < ratio * self.bandwidth
            && l.iops < ratio * self.iops
            && l.metadata_rate < ratio * self.metadata_rate
    }

    /// No job runs on `s` and its load is quiet: a server the rules may hand out.
    pub(crate) fn free(&self, s: &Server, ratio: f64) -> bool {
        s.idle() && self.quiet(&s.load, ratio)
    }
}

/// The median of the finite values of `v` (None when there is none).
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The servers the anomaly screening keeps (by id), the ones it excluded and why.
pub(crate) struct Screened<'a> {
    pub(crate) usable: Vec<&'a Server>,
    pub(crate) excluded: Vec<u32>,
    pub(crate) reasons: Vec<String>,
}

/// The anomaly screening: unhealthy servers, and those whose recent bandwidth
/// is below `anomaly_ratio` of the median of the healthy servers' now, are excluded.
pub(crate) fn screen<'a>(policy: &Policy, pool: &'a [Server]) -> Screened<'a> {
    let mut reasons = Vec::new();
    let mut excluded = Vec::new();
    let recent_median = median(
        pool.iter()
            .filter(|s| s.healthy)
            .filter_map(|s| s.recent_bandwidth)
            .collect(),
    );
    let mut usable: Vec<&Server> = Vec::new();
    for s in pool {
        if !s.healthy {
            reasons.push(format!(
                "server {} ({}) excluded: marked unhealthy",
                s.id, s.host
            ));
            excluded.push(s.id);
            continue;
        }
        if let (Some(recent), Some(med)) = (s.recent_bandwidth, recent_median) {
            if recent < policy.anomaly_ratio * med {
                reasons.push(format!(
                    "server {} ({}) excluded as anomalous: recent bandwidth {}/s < {:.2} x \
                     the pool's median {}/s",
                    s.id,
                    s.host,
                    human_bytes(recent),
                    policy.anomaly_ratio,
                    human_bytes(med)
                ));
                excluded.push(s.id);
                continue;
            }
        }
        usable.push(s);
    }
    usable.sort_by_key(|s| s.id);
    Screened {
        usable,
        excluded,
        reasons,
    }
}

/// Decides the servers of `job`, whose history is `history` (see `pool::pick_history`), on
/// `pool`.
pub fn decide(
    policy: &Policy,
    job: &Job,
    history: Option<&JobProfile>,
    pool: &[Server],
) -> Decision {
    // Anomaly screening: unhealthy servers, and those far slower than their peers now.
    let Screened {
        usable,
        excluded,
        mut reasons,
    } = screen(policy, pool);
    let decision = |servers: Vec<u32>, rule, reasons, refused_at| Decision {
        servers,
        rule,
        reasons,
        refused_at,
        excluded: excluded.clone(),
    };
    let Some(b_f) = median(usable.iter().map(|s| s.peak_bandwidth).collect()) else {
        reasons.push("no usable server in the pool".into());
        return decision(Vec::new(), Rule::Default, reasons, None);
    };
    let th = Thresholds::of(policy, b_f);
    let idle: Vec<u32> = usable
        .iter()
        .filter(|s| th.free(s, policy.quiet_ratio))
        .map(|s| s.id)
        .collect();

    // The default allocation: the site's mapping, a screened-out server replaced by the next
    // usable one; else the first D usable servers.
    let d = if job.default_servers.is_empty() {
        policy.default_servers as usize
    } else {
        job.default_servers.len()
    };
    let mut defaults: Vec<u32> = job
        .default_servers
        .iter()
        .copied()
        .filter(|id| usable.iter().any(|s| s.id == *id))
        .collect();
    for s in &usable {
        if defaults.len() >= d {
            break;
        }
        if !defaults.contains(&s.id) {
            defaults.push(s.id);
        }
    }

    // The scaling rule.
    let Some(h) = history else {
        reasons.push(format!(
            "no history of {} (script {}): the default allocation, {} server(s)",
            job.job_name,
            job.script_hash.as_deref().unwrap_or("-"),
            defaults.len()
        ));
        return decision(defaults, Rule::Default, reasons, Some(Test::History));
    };
    reasons.push(format!("history: run {} (start {:.0})", h.key, h.start));
    let b_c = policy
        .compute_peak_bandwidth
        .unwrap_or(h.peak_node_bandwidth);
    let f = if b_c > 0.0 && b_c.is_finite() {
        ((b_f / b_c).ceil() as u32).max(1)
    } else {
        1
    };
    let n_min = policy.n_min.unwrap_or(f);
    // N_A: the nodes that did I/O; unknown (Darshan): its I/O processes, at most the nodes
    // requested.
    let n_a = h
        .io_nodes
        .unwrap_or_else(|| h.io_processes.min(job.nodes.max(1)));
    let volume = h.volume();
    let refused = if volume < policy.v_min_bytes {
        reasons.push(format!(
            "not scaled: volume {} < V_min {}",
            human_bytes(volume as f64),
            human_bytes(policy.v_min_bytes as f64)
        ));
        Some(Test::Volume)
    } else if n_a < n_min {
        reasons.push(format!(
            "not scaled: volume {} >= V_min {}, but I/O nodes N_A {n_a} < N_min {n_min}{}",
            human_bytes(volume as f64),
            human_bytes(policy.v_min_bytes as f64),
            if policy.n_min.is_none() { " (= F)" } else { "" }
        ));
        Some(Test::IoNodes)
    } else if let Some(q) = h.mean_metadata_queue.filter(|q| *q >= policy.w_metadata) {
        reasons.push(format!(
            "not scaled: metadata-bound, mean metadata queue {q:.1} >= W_metadata {:.1}",
            policy.w_metadata
        ));
        Some(Test::Metadata)
    } else {
        None
    };
    if refused.is_none() {
        let s = n_a.div_ceil(f).max(1);
        reasons.push(format!(
            "scaling: volume {} >= V_min {}, N_A {n_a} >= N_min {n_min}, metadata queue {} < \
             W_metadata {:.1}; F = ceil(B_f {}/s / B_c {}/s) = {f}, S = ceil(N_A {n_a} / F {f}) \
             = {s}",
            human_bytes(volume as f64),
            human_bytes(policy.v_min_bytes as f64),
            h.mean_metadata_queue
                .map_or("unknown".into(), |q| format!("{q:.1}")),
            policy.w_metadata,
            human_bytes(b_f),
            human_bytes(b_c)
        ));
        if idle.is_empty() {
            reasons.push("no idle server: the default allocation".into());
            return decision(defaults, Rule::Default, reasons, None);
        }
        let take = (s as usize).min(idle.len());
        if take < s as usize {
            reasons.push(format!("only {} idle server(s): all of them", idle.len()));
        }
        return decision(idle[..take].to_vec(), Rule::Scaled, reasons, None);
    }

    // The interference rule, on the default servers' neighbours.
    let mine = th.prone(Some(&Traits::of(h)), None);
    if !mine.is_empty() {
        reasons.push(format!("interference-prone: {}", mine.join(", ")));
    }
    let mut clash = Vec::new();
    for s in pool.iter().filter(|s| defaults.contains(&s.id)) {
        for n in &s.jobs {
            if let Some(why) = clash_with(&th, policy, n, !mine.is_empty()) {
                clash.push(format!("server {}: {}", s.id, why));
            }
        }
    }
    if clash.is_empty() {
        reasons.push(format!(
            "no interference expected on the default server(s) {defaults:?}: the default \
             allocation"
        ));
        return decision(defaults, Rule::Default, reasons, refused);
    }
    reasons.extend(clash);
    if idle.is_empty() {
        reasons.push("no idle server to isolate it: the default allocation".into());
        return decision(defaults, Rule::Default, reasons, refused);
    }
    let take = d.min(idle.len());
    reasons.push(format!(
        "isolated on {take} dedicated idle server(s) instead of {defaults:?}"
    ));
    decision(idle[..take].to_vec(), Rule::Isolated, reasons, refused)
}

/// Why a neighbour and the job would interfere (None when they would not): the job is prone
/// and the neighbour does I/O, or the neighbour is prone. A neighbour's live load overrides
/// its history (quiet now: no interference; more than its history: its live rates).
fn clash_with(th: &Thresholds, policy: &Policy, n: &RunningJob, me_prone: bool) -> Option<String> {
    if let Some(l) = &n.live {
        if th.quiet(l, policy.quiet_ratio) {
            return None;
        }
    }
    let theirs = th.prone(n.expected.as_ref(), n.live.as_ref());
    let src = if n.live.is_some() { "live" } else { "history" };
    if !theirs.is_empty() {
        return Some(format!(
            "neighbour {} would disturb it ({src}: {})",
            n.job,
            theirs.join(", ")
        ));
    }
    me_prone.then(|| format!("it would disturb neighbour {} (doing I/O, {src})", n.job))
}
