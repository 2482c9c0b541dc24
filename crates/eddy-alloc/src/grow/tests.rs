//! The run-time scaling rule: a job bound by its two servers grown onto the lowest idle ones,
//! each clause alone holding it, each cap named, the screening, non-finite inputs, and the
//! watcher's pacing and the `[pool.grow]` table.

use super::*;
use crate::pool::{Load, RunningJob};

const MB: f64 = 1e6;
const GB: f64 = 1e9;

/// V_min 1 GB, B_c 25 MB/s (= each server's peak, so F = 1).
fn policy() -> Policy {
    Policy {
        v_min_bytes: 1_000_000_000,
        compute_peak_bandwidth: Some(25.0 * MB),
        ..Policy::default()
    }
}

fn on_job() -> RunningJob {
    RunningJob {
        job: "j".into(),
        expected: None,
        live: None,
    }
}

/// Eight idle servers of 25 MB/s; the job runs on 0 and 1.
fn pool() -> Vec<Server> {
    let mut pool: Vec<Server> = (0..8).map(|i| Server::idle_of(i, 25.0 * MB)).collect();
    pool[0].jobs.push(on_job());
    pool[1].jobs.push(on_job());
    pool
}

fn server(id: u32) -> LiveServer {
    LiveServer {
        id,
        host: format!("io{id}"),
        bytes_per_s: 24.0 * MB,
        queue_mean: 3.0,
        metadata_queue_mean: 0.2,
        peak_bandwidth: 25.0 * MB,
    }
}

/// Bound by servers 0 and 1 (48 MB/s of 50), 4 nodes doing I/O: S = 4.
fn live() -> Live {
    Live {
        servers: vec![server(0), server(1)],
        active_nodes: 4,
        volume_bytes: 2_000_000_000,
        held_bytes: 1_000_000_000,
        elapsed_s: 100.0,
        remaining_s: Some(600.0),
        move_bandwidth: None,
    }
}

const MEMBERS: [u32; 2] = [0, 1];

fn run(live: &Live, pool: &[Server], caps: &[Cap]) -> GrowVerdict {
    judge(
        &policy(),
        &GrowPolicy::default(),
        live,
        pool,
        &MEMBERS,
        caps,
    )
}

fn cap(name: &str, servers: u32) -> Cap {
    Cap {
        name: name.into(),
        servers,
    }
}

fn has(v: &GrowVerdict, text: &str) -> bool {
    v.reasons.iter().any(|r| r.contains(text))
}

fn held(v: &GrowVerdict) -> &str {
    assert!(v.add.is_empty(), "{v:#?}");
    v.hold
        .as_deref()
        .unwrap_or_else(|| panic!("no hold: {v:#?}"))
}

#[test]
fn a_bound_job_grows_to_s_on_the_lowest_idle_servers() {
    let v = run(&live(), &pool(), &[]);
    assert_eq!((v.bound, v.add.clone(), v.target), (true, vec![2, 3], 4));
    assert_eq!(v.hold, None);
    assert!(
        has(
            &v,
            "bound by servers: 45.8 MiB/s >= 0.8 x 47.7 MiB/s over 2 server(s), queue 3.0 \
             >= 1.0, metadata queue 0.2 < W_metadata 32.0"
        ),
        "{:#?}",
        v.reasons
    );
    assert!(
        has(&v, "S = ceil(N_A 4 / F 1) = 4 > k 2"),
        "{:#?}",
        v.reasons
    );
    assert!(
        has(
            &v,
            "k' = min(S 4, 2k 4, k + idle 2 + 6 = 8) = 4, set by S 4, 2k 4"
        ),
        "{:#?}",
        v.reasons
    );
    // 1 GB x 2/4 at the two added servers' 50 MB/s: 10 s, under half of 600 s.
    assert!(
        has(&v, "moving 476.8 MiB (held 953.7 MiB x 2/4) at 47.7 MiB/s"),
        "{:#?}",
        v.reasons
    );
    assert!(has(&v, "takes 10 s < half the 600 s remaining"));
    // B_f 50 MB/s on each of the job's servers: F = 2, S = 2 = k.
    let mut l = live();
    for s in &mut l.servers {
        s.peak_bandwidth = 50.0 * MB;
        s.bytes_per_s = 45.0 * MB;
    }
    let v = run(&l, &pool(), &[]);
    assert!(v.bound);
    assert!(
        held(&v).contains("S = ceil(N_A 4 / F 2) = 2 <= k 2"),
        "{v:#?}"
    );
}

#[test]
fn each_bound_clause_alone_holds() {
    // Not saturated: 30 MB/s < 0.8 x 50 MB/s.
    let mut l = live();
    l.servers[0].bytes_per_s = 6.0 * MB;
    let v = run(&l, &pool(), &[]);
    assert!(!v.bound);
    assert_eq!(v.target, 2);
    assert!(
        held(&v).contains("not saturated, 28.6 MiB/s < 0.8 x 47.7 MiB/s over 2 server(s)"),
        "{v:#?}"
    );

    // Not waiting: the mean queue (0.5 + 0.3) / 2 < 1.
    let mut l = live();
    l.servers[0].queue_mean = 0.5;
    l.servers[1].queue_mean = 0.3;
    let v = run(&l, &pool(), &[]);
    assert!(!v.bound);
    assert!(held(&v).contains("queue 0.4 < 1.0"), "{v:#?}");

    // Metadata-bound: the worst server's metadata queue 40 >= 32.
    let mut l = live();
    l.servers[1].metadata_queue_mean = 40.0;
    let v = run(&l, &pool(), &[]);
    assert!(!v.bound);
    assert!(
        held(&v).contains("metadata queue 40.0 >= W_metadata 32.0"),
        "{v:#?}"
    );

    // Volume: 0 so far + 48 MB/s x 10 s left < V_min 1 GB (and not worth it either).
    let mut l = live();
    l.volume_bytes = 0;
    l.remaining_s = Some(10.0);
    let v = run(&l, &pool(), &[]);
    assert!(!v.bound);
    assert!(
        held(&v).contains(
            "volume 0 B + 45.8 MiB/s x 10 s remaining (predicted) = 457.8 MiB < V_min 953.7 MiB"
        ),
        "{v:#?}"
    );
    // Without a prediction the time left is the time run: 100 s x 48 MB/s passes.
    l.remaining_s = None;
    let v = run(&l, &pool(), &[]);
    assert!(v.bound, "{v:#?}");
    assert!(has(&v, "x 100 s remaining (assumed as long as it has run)"));

    // Every failing clause is listed, the first one is the hold.
    let mut l = live();
    l.servers[0].bytes_per_s = 0.0;
    l.servers[1].metadata_queue_mean = 40.0;
    let v = run(&l, &pool(), &[]);
    assert!(held(&v).contains("not saturated"));
    assert!(v.reasons[0].contains("not saturated"), "{:#?}", v.reasons);
    assert!(v.reasons[1].contains("metadata-bound"), "{:#?}", v.reasons);
    assert_eq!(v.reasons.len(), 2);
}

#[test]
fn scaling_needs_b_c_and_more_nodes_than_servers() {
    // N_A 2 with F 1: S = 2 = k.
    let mut l = live();
    l.active_nodes = 2;
    let v = run(&l, &pool(), &[]);
    assert!(v.bound);
    assert!(
        held(&v).contains("S = ceil(N_A 2 / F 1) = 2 <= k 2"),
        "{v:#?}"
    );
    // N_A 3: S = 3, one server added.
    l.active_nodes = 3;
    let v = run(&l, &pool(), &[]);
    assert_eq!((v.add.clone(), v.target), (vec![2], 3));
    // No B_c in the policy: held, said so.
    let p = Policy {
        compute_peak_bandwidth: None,
        ..policy()
    };
    let v = judge(&p, &GrowPolicy::default(), &live(), &pool(), &MEMBERS, &[]);
    assert!(v.bound);
    assert!(
        held(&v).starts_with("B_c unknown (alloc.compute_peak_bandwidth unset)"),
        "{v:#?}"
    );
}

#[test]
fn each_cap_binds_and_is_named() {
    // The per-job cap of 3 limits the grow to one server.
    let v = run(&live(), &pool(), &[cap("max_servers_per_job", 3)]);
    assert_eq!((v.add.clone(), v.target), (vec![2], 3));
    assert!(
        has(&v, "set by cap max_servers_per_job 3"),
        "{:#?}",
        v.reasons
    );
    // The per-user cap at k: held, naming it (not the looser per-job cap).
    let v = run(
        &live(),
        &pool(),
        &[
            cap("max_servers_per_job", 4),
            cap("max_servers_per_user", 2),
        ],
    );
    assert_eq!(v.target, 2);
    let h = held(&v);
    assert!(
        h.contains("not grown: k' 2 <= k 2: cap max_servers_per_user 2"),
        "{v:#?}"
    );
    assert!(!h.contains("max_servers_per_job"));
    // pool.grow.max_servers.
    let g = GrowPolicy {
        max_servers: Some(2),
        ..GrowPolicy::default()
    };
    let v = judge(&policy(), &g, &live(), &pool(), &MEMBERS, &[]);
    assert!(held(&v).contains("cap pool.grow.max_servers 2"), "{v:#?}");
    // 2k: one server, 4 nodes: S = 4, but at most doubled (server 1 runs a job).
    let mut l = live();
    l.servers.truncate(1);
    l.servers[0].bytes_per_s = 24.0 * MB;
    let v = judge(&policy(), &GrowPolicy::default(), &l, &pool(), &[0], &[]);
    assert_eq!((v.add.clone(), v.target), (vec![2], 2));
    assert!(has(&v, "set by 2k 2"), "{:#?}", v.reasons);
}

#[test]
fn idle_servers_only_screened_free_and_lowest_first() {
    // No idle server: every other one runs a job.
    let mut busy = pool();
    for s in &mut busy[2..] {
        s.jobs.push(on_job());
    }
    let v = run(&live(), &busy, &[]);
    assert!(v.bound);
    assert!(held(&v).contains("no idle server"), "{v:#?}");
    // Only one: k' = k + 1.
    busy[6].jobs.clear();
    let v = run(&live(), &busy, &[]);
    assert_eq!((v.add.clone(), v.target), (vec![6], 3));
    assert!(has(&v, "set by k + idle 2 + 1 = 3"), "{:#?}", v.reasons);

    // 2 unhealthy, 3 anomalous (recent 2 MB/s of the others' 20), 4 runs a job, 5 idle but
    // loaded (20 MB/s >= 5 % of α x B_f): 6 and 7 are picked.
    let mut p = pool();
    for s in &mut p {
        s.recent_bandwidth = Some(20.0 * MB);
    }
    p[2].healthy = false;
    p[3].recent_bandwidth = Some(2.0 * MB);
    p[4].jobs.push(on_job());
    p[5].load = Load {
        bytes_per_s: 20.0 * MB,
        ..Load::default()
    };
    let v = run(&live(), &p, &[]);
    assert_eq!((v.add.clone(), v.target), (vec![6, 7], 4), "{v:#?}");
    assert!(has(&v, "server 2 (io2) excluded: marked unhealthy"));
    assert!(has(&v, "server 3 (io3) excluded as anomalous"));
    // The pool listed out of order: still the lowest ids.
    let mut p = pool();
    p.reverse();
    let v = run(&live(), &p, &[]);
    assert_eq!(v.add, vec![2, 3]);
    // The job's own servers are never added, even idle-looking.
    let mut p = pool();
    p[0].jobs.clear();
    p[1].jobs.clear();
    let v = run(&live(), &p, &[]);
    assert_eq!(v.add, vec![2, 3]);
}

#[test]
fn the_move_must_take_under_half_the_time_left() {
    // 100 GB held: half of it at 50 MB/s is 1000 s >= 300 s.
    let mut l = live();
    l.held_bytes = 100_000_000_000;
    let v = run(&l, &pool(), &[]);
    assert!(v.bound);
    assert!(
        held(&v).contains("not worth it: moving 46.6 GiB (held 93.1 GiB x 2/4) at 47.7 MiB/s (the added servers' peak) takes 1000 s >= half the 600 s remaining"),
        "{v:#?}"
    );
    // At a given 1 GB/s: 50 s.
    l.move_bandwidth = Some(GB);
    let v = run(&l, &pool(), &[]);
    assert_eq!(v.add, vec![2, 3]);
    assert!(has(&v, "takes 50 s < half the 600 s remaining"));
    // Only 80 s left (the volume is already past V_min): not worth it.
    l.remaining_s = Some(80.0);
    let v = run(&l, &pool(), &[]);
    assert!(held(&v).contains("takes 50 s >= half the 80 s remaining"));
    // No bandwidth to move at.
    l.move_bandwidth = Some(0.0);
    l.remaining_s = Some(600.0);
    let v = run(&l, &pool(), &[]);
    assert!(
        held(&v).contains("no bandwidth to move the data at"),
        "{v:#?}"
    );
}

#[test]
fn non_finite_and_empty_inputs_never_grow() {
    type Spoil = fn(&mut Live, &mut Policy, &mut [Server]);
    let spoils: [(&str, Spoil); 11] = [
        ("rate NaN", |l, _, _| l.servers[0].bytes_per_s = f64::NAN),
        ("rate inf", |l, _, _| {
            l.servers[1].bytes_per_s = f64::INFINITY
        }),
        ("peak NaN", |l, _, _| l.servers[0].peak_bandwidth = f64::NAN),
        ("peak inf", |l, _, _| {
            l.servers[0].peak_bandwidth = f64::INFINITY
        }),
        ("queue NaN", |l, _, _| {
            l.servers[0].queue_mean = f64::NAN;
            l.servers[1].queue_mean = 1.5;
        }),
        ("metadata NaN", |l, _, _| {
            l.servers[0].metadata_queue_mean = f64::NAN
        }),
        ("remaining NaN", |l, _, _| l.remaining_s = Some(f64::NAN)),
        ("move bandwidth inf", |l, _, _| {
            l.move_bandwidth = Some(f64::INFINITY)
        }),
        ("B_c NaN", |_, p, _| {
            p.compute_peak_bandwidth = Some(f64::NAN)
        }),
        ("pool peaks NaN", |_, _, pool| {
            for s in &mut pool[2..] {
                s.peak_bandwidth = f64::NAN;
            }
        }),
        ("pool recent NaN", |_, _, pool| {
            for s in &mut pool[2..] {
                s.recent_bandwidth = Some(f64::NAN);
            }
        }),
    ];
    for (what, spoil) in spoils {
        let (mut l, mut p, mut pool) = (live(), policy(), pool());
        spoil(&mut l, &mut p, &mut pool);
        let v = judge(&p, &GrowPolicy::default(), &l, &pool, &MEMBERS, &[]);
        assert!(v.add.is_empty(), "{what}: {v:#?}");
        assert_eq!(v.target, 2, "{what}");
        assert!(v.hold.is_some(), "{what}");
    }
    // A busy_ratio NaN (a policy not checked) neither.
    let g = GrowPolicy {
        busy_ratio: f64::NAN,
        ..GrowPolicy::default()
    };
    let v = judge(&policy(), &g, &live(), &pool(), &MEMBERS, &[]);
    assert!(!v.bound && v.add.is_empty());
    // Nothing at all.
    let mut l = live();
    l.servers.clear();
    let v = judge(&policy(), &GrowPolicy::default(), &l, &[], &[], &[]);
    assert_eq!((v.bound, v.target), (false, 0));
    assert_eq!(v.hold.as_deref(), Some("no server of the job reported"));
    // The job's servers and no pool.
    let v = judge(
        &policy(),
        &GrowPolicy::default(),
        &live(),
        &[],
        &MEMBERS,
        &[],
    );
    assert!(held(&v).contains("no idle server"));
}

fn verdict(bound: bool, add: Vec<u32>) -> GrowVerdict {
    GrowVerdict {
        bound,
        target: 2 + add.len() as u32,
        add,
        reasons: Vec::new(),
        hold: None,
    }
}

#[test]
fn the_watch_paces_grows() {
    let g = GrowPolicy::default(); // warm-up 30 s, cool-down 300 s, 2 grows, sustain 2
    let mut w = Watch::new(1000.0);
    let e = w.may_decide(&g, 1010.0).unwrap_err();
    assert_eq!(
        e,
        "warming up: 10 s since the job's start < pool.grow.warmup_s 30"
    );
    assert!(w.may_decide(&g, f64::NAN).is_err());
    assert_eq!(w.may_decide(&g, 1030.0), Ok(()));

    // Sustain: bound, not bound (count reset), bound, bound.
    assert!(!w.sustained(&g, &verdict(true, vec![2])));
    assert!(!w.sustained(&g, &verdict(false, vec![])));
    assert_eq!(w.bound_polls(), 0);
    assert!(!w.sustained(&g, &verdict(true, vec![2])));
    assert!(w.sustained(&g, &verdict(true, vec![2])));
    // Bound but holding counts the poll, and is no grow.
    assert!(!w.sustained(&g, &verdict(true, vec![])));
    assert_eq!(w.bound_polls(), 3);

    // A grow ends at 1100: cool-down until 1400, the count starts again.
    w.ended(1100.0);
    assert_eq!((w.grows(), w.bound_polls()), (1, 0));
    let e = w.may_decide(&g, 1200.0).unwrap_err();
    assert_eq!(
        e,
        "cooling down: 100 s since the last grow ended < pool.grow.cooldown_s 300"
    );
    assert_eq!(w.may_decide(&g, 1400.0), Ok(()));
    assert!(!w.sustained(&g, &verdict(true, vec![2])));

    // The second (failed) grow ends: max_grows reached for good.
    w.ended(1500.0);
    assert_eq!(w.grows(), 2);
    let e = w.may_decide(&g, 1_000_000.0).unwrap_err();
    assert_eq!(e, "grown 2 time(s): pool.grow.max_grows = 2");

    // sustain 1: the first bound poll grows.
    let one = GrowPolicy {
        sustain: 1,
        ..GrowPolicy::default()
    };
    let mut w = Watch::new(0.0);
    assert!(w.sustained(&one, &verdict(true, vec![3])));
}

#[test]
fn the_pool_grow_table_is_parsed_and_checked() {
    let text = "[pool]\nname = \"io\"\nmax_servers_per_job = 4\n\n[pool.grow]\npoll_s = 10\n\
                sustain = 3\nbusy_ratio = 0.9\nmax_servers = 6\nwindow_s = 20\n";
    let g = GrowPolicy::from_toml(text).unwrap();
    assert_eq!(
        (g.poll_s, g.sustain, g.busy_ratio, g.max_servers, g.window_s),
        (10, 3, 0.9, Some(6), Some(20))
    );
    assert_eq!(
        (g.cooldown_s, g.max_grows, g.move_deadline_s),
        (300, 2, 900)
    );
    assert_eq!(GrowPolicy::from_toml("").unwrap(), GrowPolicy::default());
    assert_eq!(
        GrowPolicy::from_toml("[pool]\nname = \"io\"\n").unwrap(),
        GrowPolicy::default()
    );
    let e = GrowPolicy::from_toml("[pool.grow]\npoll_s = 5\ncooldown = 60\n").unwrap_err();
    assert!(e.contains("unknown field `cooldown`"), "{e}");
    let e = GrowPolicy::from_toml("[pool.grow]\nsustain = 0\n").unwrap_err();
    assert_eq!(
        e,
        "pool.grow.sustain = 0: a grow needs at least one bound poll"
    );

    let bad = |f: fn(&mut GrowPolicy)| {
        let mut g = GrowPolicy::default();
        f(&mut g);
        g.check().unwrap_err()
    };
    assert!(bad(|g| g.poll_s = 0).starts_with("pool.grow.poll_s = 0:"));
    assert!(bad(|g| g.busy_ratio = 0.0).starts_with("pool.grow.busy_ratio = 0:"));
    assert!(bad(|g| g.busy_ratio = 1.5).starts_with("pool.grow.busy_ratio = 1.5:"));
    assert!(bad(|g| g.busy_ratio = f64::NAN).starts_with("pool.grow.busy_ratio = NaN:"));
    assert!(bad(|g| g.min_queue = -1.0).starts_with("pool.grow.min_queue = -1:"));
    assert!(bad(|g| g.min_queue = f64::INFINITY).starts_with("pool.grow.min_queue = inf:"));
    assert!(bad(|g| g.max_servers = Some(0)).starts_with("pool.grow.max_servers = 0:"));
    assert!(bad(|g| g.move_deadline_s = 0).starts_with("pool.grow.move_deadline_s = 0:"));
    assert!(bad(|g| g.window_s = Some(0)).starts_with("pool.grow.window_s = 0:"));
    let ok = GrowPolicy {
        busy_ratio: 1.0,
        min_queue: 0.0,
        ..GrowPolicy::default()
    };
    assert_eq!(ok.check(), Ok(()));
    assert_eq!(GrowPolicy::default().check(), Ok(()));
}

#[test]
fn live_is_observed_over_the_window_and_counts_only_the_callers_nodes() {
    use eddy_proto::stats::{ClientId, ClientStats, Sample};
    let client = |host: &str, last_ms: u64, written: u64| ClientStats {
        client: ClientId {
            host: host.into(),
            pid: 1,
            rank: None,
        },
        read_bytes: 10,
        written_bytes: written,
        last_ms,
        ..ClientStats::default()
    };
    let stats = DaemonStats {
        now_ms: 10_000,
        series: vec![
            // Before the 3 s window: not counted.
            Sample {
                t_ms: 5_000,
                seconds: 1,
                written_bytes: 1 << 30,
                ..Sample::default()
            },
            Sample {
                t_ms: 8_000,
                seconds: 2,
                written_bytes: 600,
                queue_mean: 3.0,
                metadata_queue_mean: 1.0,
                ..Sample::default()
            },
        ],
        clients: vec![
            client("n1", 9_000, 100),
            // Quiet in the window: its bytes count, it does not.
            client("n2", 1_000, 200),
            // Not one of the caller's nodes.
            client("forged", 9_500, 300),
        ],
        ..DaemonStats::default()
    };
    let servers = [Observed {
        id: 4,
        host: "io5".into(),
        peak_bandwidth: 25.0 * MB,
        stats: &stats,
    }];
    let live = Live::observed(&servers, 3, |h| h != "forged");
    assert_eq!(live.servers.len(), 1);
    let s = &live.servers[0];
    assert_eq!(
        (s.id, s.host.as_str(), s.peak_bandwidth),
        (4, "io5", 25.0 * MB)
    );
    assert_eq!(
        (s.bytes_per_s, s.queue_mean, s.metadata_queue_mean),
        (300.0, 3.0, 1.0)
    );
    assert_eq!(live.active_nodes, 1);
    assert_eq!((live.volume_bytes, live.held_bytes), (630, 600));
    assert_eq!(
        (live.elapsed_s, live.remaining_s, live.move_bandwidth),
        (0.0, None, None)
    );
}
