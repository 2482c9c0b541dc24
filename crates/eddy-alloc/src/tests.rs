//! The rules on the paper's published thresholds and profiles shaped like its Table 2
//! applications, each rule alone, the anomaly screening, the policy file and the replay.

use crate::decide::{decide, Rule, Test};
use crate::policy::Policy;
use crate::pool::{pick_history, Job, Load, RunningJob, Server, Traits};
use crate::replay::replay;
use eddy_history::{IoMode, JobProfile, Source};

const GB: f64 = 1e9;
const MB: f64 = 1e6;

/// TaihuLight (§2.1, §4): forwarding nodes of 2.5 GB/s; α 0.4 gives 1 GB/s, 10,000 IOPS and
/// 200 metadata operations/s; V_min 20 GB, N_min = F = 32, W_metadata 32.
fn paper() -> Policy {
    Policy {
        v_min_bytes: 20_000_000_000,
        n_min: Some(32),
        w_metadata: 32.0,
        alpha: 0.4,
        server_peak_bandwidth: Some(2.5 * GB),
        server_peak_iops: 25_000.0,
        server_peak_metadata_rate: 500.0,
        ..Policy::default()
    }
}

/// A run of 256 compute nodes (the paper's mid-size runs), one hour.
#[allow(clippy::too_many_arguments)]
fn app(
    name: &str,
    mode: IoMode,
    volume: f64,
    io_nodes: u32,
    bandwidth: f64,
    iops: f64,
    metadata_rate: f64,
    queue: f64,
) -> JobProfile {
    JobProfile {
        key: format!("{name}@1"),
        source: Source::Eddy,
        job_id: None,
        job_name: Some(name.into()),
        user: "u".into(),
        script_hash: Some(format!("sha256:{name}")),
        nodes: (0..256).map(|n| format!("cn{n}")).collect(),
        start: 1000.0,
        end: 4600.0,
        read_bytes: (volume / 2.0) as u64,
        written_bytes: (volume / 2.0) as u64,
        io_nodes: Some(io_nodes),
        io_processes: io_nodes * 4,
        // B_c: 2.5 GB/s / 78 MB/s gives F = 32, as on TaihuLight.
        peak_node_bandwidth: 78.2 * MB,
        mean_node_bandwidth: 50.0 * MB,
        peak_bandwidth: bandwidth,
        mean_bandwidth: bandwidth / 2.0,
        peak_iops: iops,
        mean_iops: iops / 2.0,
        peak_metadata_rate: metadata_rate,
        mean_metadata_rate: metadata_rate / 2.0,
        mean_metadata_queue: Some(queue),
        io_mode: mode,
        files: 256,
        shared_files: 0,
        data_ops: 1000,
        metadata_ops: 100,
        request_sizes: Vec::new(),
        daemons: Vec::new(),
        series: Vec::new(),
        allocation: None,
    }
}

fn xcfd() -> JobProfile {
    app(
        "xcfd",
        IoMode::NN,
        400.0 * GB,
        256,
        6.0 * GB,
        3_000.0,
        50.0,
        2.0,
    )
}
fn wrf1() -> JobProfile {
    app(
        "wrf1",
        IoMode::OneOne,
        30.0 * GB,
        1,
        0.3 * GB,
        500.0,
        20.0,
        1.0,
    )
}
fn awp() -> JobProfile {
    app(
        "awp",
        IoMode::N1,
        15.0 * GB,
        256,
        0.5 * GB,
        4_000.0,
        30.0,
        4.0,
    )
}
fn dndc() -> JobProfile {
    app(
        "dndc",
        IoMode::NN,
        25.0 * GB,
        256,
        0.2 * GB,
        2_000.0,
        900.0,
        60.0,
    )
}
fn cam() -> JobProfile {
    app(
        "cam",
        IoMode::OneOne,
        5.0 * GB,
        1,
        0.2 * GB,
        300.0,
        10.0,
        1.0,
    )
}

fn job(p: &JobProfile) -> Job {
    Job {
        user: Some(p.user.clone()),
        job_name: p.job_name.clone().unwrap_or_default(),
        script_hash: p.script_hash.clone(),
        nodes: 256,
        default_servers: Vec::new(),
    }
}

/// Eight servers of 2.5 GB/s; server 0 (everyone's default) runs `on0`.
fn pool(on0: Vec<RunningJob>) -> Vec<Server> {
    let mut pool: Vec<Server> = (0..8).map(|i| Server::idle_of(i, 2.5 * GB)).collect();
    pool[0].jobs = on0;
    pool
}

fn running(p: &JobProfile, live: Option<Load>) -> RunningJob {
    RunningJob {
        job: p.job_name.clone().unwrap_or_default(),
        expected: Some(Traits::of(p)),
        live,
    }
}

#[test]
fn table_2_applications_get_the_papers_decisions() {
    let policy = paper();
    // A quiet-profile neighbour (CAM, Low/Low/Low 1-1) runs on the default server.
    let pool = pool(vec![running(&cam(), None)]);

    // XCFD, N-N, high throughput, 256 I/O nodes: scaled to ⌈256 / 32⌉ = 8 servers.
    let x = xcfd();
    let d = decide(&policy, &job(&x), Some(&x), &pool);
    assert_eq!(d.rule, Rule::Scaled, "{:#?}", d.reasons);
    // Seven idle servers (server 0 is busy): fewer if fewer are idle.
    assert_eq!(d.servers, vec![1, 2, 3, 4, 5, 6, 7]);
    assert!(
        d.reasons
            .iter()
            .any(|r| r.contains("F = ceil") && r.contains("= 32") && r.contains("= 8")),
        "{:#?}",
        d.reasons
    );
    assert_eq!(d.refused_at, None);

    // WRF₁, 1-1: one I/O node, not scaled, and low on everything: stays on the default.
    let w = wrf1();
    let d = decide(&policy, &job(&w), Some(&w), &pool);
    assert_eq!(d.rule, Rule::Default, "{:#?}", d.reasons);
    assert_eq!(d.refused_at, Some(Test::IoNodes));
    assert_eq!(d.servers, vec![0]);

    // AWP, N-1: below V_min, not scaled; isolated from CAM on a dedicated idle server.
    let a = awp();
    let d = decide(&policy, &job(&a), Some(&a), &pool);
    assert_eq!(d.rule, Rule::Isolated, "{:#?}", d.reasons);
    assert_eq!(d.refused_at, Some(Test::Volume));
    assert_eq!(d.servers, vec![1]);
    assert!(d.reasons.iter().any(|r| r.contains("N-1")));

    // DNDC, metadata-heavy: passes volume and nodes, refused as metadata-bound, isolated.
    let n = dndc();
    let d = decide(&policy, &job(&n), Some(&n), &pool);
    assert_eq!(d.rule, Rule::Isolated, "{:#?}", d.reasons);
    assert_eq!(d.refused_at, Some(Test::Metadata));
    assert_eq!(d.servers, vec![1]);
    assert!(d
        .reasons
        .iter()
        .any(|r| r.contains("queue 60.0 >= W_metadata 32.0")));
}

#[test]
fn scaling_takes_ceil_na_over_f_idle_servers() {
    // 8 servers of 2 GB/s, B_c 500 MB/s: F = 4; 10 I/O nodes: S = 3; N_min = F.
    let policy = Policy {
        v_min_bytes: 1_000_000_000,
        ..Policy::default()
    };
    let mut p = xcfd();
    p.io_nodes = Some(10);
    p.peak_node_bandwidth = 500.0 * MB;
    let pool: Vec<Server> = (0..8).map(|i| Server::idle_of(i, 2.0 * GB)).collect();
    let d = decide(&policy, &job(&p), Some(&p), &pool);
    assert_eq!((d.rule, d.servers.clone()), (Rule::Scaled, vec![0, 1, 2]));
    // N_A 3 < N_min = F = 4: refused there.
    p.io_nodes = Some(3);
    let d = decide(&policy, &job(&p), Some(&p), &pool);
    assert_eq!(d.refused_at, Some(Test::IoNodes));
    assert!(
        d.reasons
            .iter()
            .any(|r| r.contains("N_A 3 < N_min 4 (= F)")),
        "{:#?}",
        d.reasons
    );
    // No history: the default, refused at History.
    let d = decide(&policy, &job(&p), None, &pool);
    assert_eq!((d.rule, d.refused_at), (Rule::Default, Some(Test::History)));
    assert_eq!(d.servers, vec![0]);
}

#[test]
fn interference_both_ways_and_live_load_overrides_history() {
    let policy = paper();
    let w = wrf1();
    // A quiet job (WRF₁) beside AWP (N-1 by history): AWP would disturb it.
    let d = decide(
        &policy,
        &job(&w),
        Some(&w),
        &pool(vec![running(&awp(), None)]),
    );
    assert_eq!(d.rule, Rule::Isolated, "{:#?}", d.reasons);
    assert!(d
        .reasons
        .iter()
        .any(|r| r.contains("neighbour awp would disturb it (history: N-1)")));
    // AWP's live load is nil this run: it turned its I/O off, WRF₁ stays.
    let off = Load::default();
    let d = decide(
        &policy,
        &job(&w),
        Some(&w),
        &pool(vec![running(&awp(), Some(off))]),
    );
    assert_eq!(d.rule, Rule::Default, "{:#?}", d.reasons);
    // CAM's history is quiet, but live it does 2 GB/s (>= 1 GB/s): WRF₁ is moved.
    let hot = Load {
        bytes_per_s: 2.0 * GB,
        ..Load::default()
    };
    let d = decide(
        &policy,
        &job(&w),
        Some(&w),
        &pool(vec![running(&cam(), Some(hot))]),
    );
    assert_eq!(d.rule, Rule::Isolated, "{:#?}", d.reasons);
    assert!(d
        .reasons
        .iter()
        .any(|r| r.contains("live: high throughput")));
    // No idle server to move to: the default, said so.
    let mut full = pool(vec![running(&awp(), None)]);
    for s in &mut full[1..] {
        s.jobs.push(running(&cam(), None));
    }
    let d = decide(&policy, &job(&w), Some(&w), &full);
    assert_eq!((d.rule, d.servers.clone()), (Rule::Default, vec![0]));
    assert!(d.reasons.iter().any(|r| r.contains("no idle server")));
}

#[test]
fn anomalous_and_unhealthy_servers_are_excluded_and_listed() {
    let policy = paper();
    let mut pool: Vec<Server> = (0..6).map(|i| Server::idle_of(i, 2.5 * GB)).collect();
    for s in &mut pool {
        s.recent_bandwidth = Some(2.0 * GB);
    }
    // Server 0 at 10 % of its peers (below 0.5 x the median), server 3 marked down, server 4
    // at 60 % (kept).
    pool[0].recent_bandwidth = Some(0.2 * GB);
    pool[3].healthy = false;
    pool[4].recent_bandwidth = Some(1.2 * GB);
    let x = xcfd();
    let d = decide(&policy, &job(&x), Some(&x), &pool);
    assert_eq!(d.excluded, vec![0, 3]);
    assert_eq!(d.servers, vec![1, 2, 4, 5]);
    assert!(d
        .reasons
        .iter()
        .any(|r| r.contains("server 0 (io0) excluded as anomalous")));
    // The default allocation skips it too.
    let w = wrf1();
    let d = decide(&policy, &job(&w), Some(&w), &pool);
    assert_eq!(d.servers, vec![1]);
}

#[test]
fn history_picks_the_newest_run_at_the_same_scale() {
    let mut a = xcfd();
    a.start = 10.0;
    let mut b = xcfd();
    b.start = 20.0;
    b.nodes.truncate(64);
    let runs = vec![b.clone(), a.clone()];
    assert_eq!(pick_history(&runs, 256).map(|p| p.start), Some(10.0));
    assert_eq!(pick_history(&runs, 128).map(|p| p.start), Some(20.0));
    assert!(pick_history(&[], 1).is_none());
}

#[test]
fn policy_file_sets_thresholds_and_refuses_nonsense() {
    let p = Policy::from_toml("[alloc]\nv_min_bytes = 5\nn_min = 2\nalpha = 0.5\n").unwrap();
    assert_eq!((p.v_min_bytes, p.n_min, p.alpha), (5, Some(2), 0.5));
    assert_eq!(p.w_metadata, 32.0);
    assert_eq!(Policy::from_toml("").unwrap(), Policy::default());
    assert!(Policy::from_toml("[alloc]\nalpha = -1\n").is_err());
    assert!(Policy::from_toml("[alloc]\nvmin = 3\n").is_err());
}

#[test]
fn replay_gives_table_4() {
    let policy = paper();
    // XCFD twice as long as the others.
    let mut x = xcfd();
    x.end = x.start + 7200.0;
    let jobs = vec![x, wrf1(), awp(), dndc(), cam()];
    let r = replay(&policy, &jobs, 16, 2.5 * GB);
    assert_eq!(r.jobs, 5);
    assert_eq!(r.upgraded.jobs, 1);
    assert!((r.upgraded.share - 0.2).abs() < 1e-9);
    // Node-hours: 256 x 2 h for XCFD of 256 x (2 + 4 x 1) h.
    assert!(
        (r.upgraded.node_hours_share - 2.0 / 6.0).abs() < 1e-9,
        "{r:?}"
    );
    let count = |t: Test| {
        r.refused
            .iter()
            .find(|row| row.category == t.describe())
            .unwrap()
            .jobs
    };
    assert_eq!(count(Test::Volume), 2); // AWP, CAM
    assert_eq!(count(Test::IoNodes), 1); // WRF₁
    assert_eq!(count(Test::Metadata), 1); // DNDC
    assert_eq!(count(Test::History), 0);
    // XCFD 8 servers, the others 1: 12 / 5 per job; over the 2 h span, 8 x 2 + 4 x 1 = 20
    // server-hours: 10 in use.
    assert!((r.mean_servers_per_job - 2.4).abs() < 1e-9);
    assert!((r.mean_servers_in_use - 10.0).abs() < 1e-9, "{r:?}");
}

#[test]
fn the_policys_compute_peak_overrides_the_historys_b_c() {
    // The history ran on one 2 GB/s server with 8 nodes: each node measured 250 MB/s, so
    // F = 8 and S = 1. With B_c = the nodes' 1 GB/s links, F = 2 and S = 4.
    let mut policy = Policy {
        v_min_bytes: 1_000_000_000,
        n_min: Some(2),
        ..Policy::default()
    };
    let mut p = xcfd();
    p.io_nodes = Some(8);
    p.peak_node_bandwidth = 250.0 * MB;
    let pool: Vec<Server> = (0..8).map(|i| Server::idle_of(i, 2.0 * GB)).collect();
    let d = decide(&policy, &job(&p), Some(&p), &pool);
    assert_eq!(d.servers, vec![0]);
    policy.compute_peak_bandwidth = Some(1.0 * GB);
    let d = decide(&policy, &job(&p), Some(&p), &pool);
    assert_eq!(
        (d.rule, d.servers.clone()),
        (Rule::Scaled, vec![0, 1, 2, 3])
    );
    assert!(
        d.reasons.iter().any(|r| r.contains("= 2, S = ")),
        "{:#?}",
        d.reasons
    );
    assert!(Policy::from_toml("[alloc]\ncompute_peak_bandwidth = 1e9\n").is_ok());
    assert!(Policy::from_toml("[alloc]\ncompute_peak_bandwidth = -1.0\n").is_err());
}
