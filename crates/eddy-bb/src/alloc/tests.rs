//! The pool view without Slurm: neighbours on the pool's nodes, live load overriding what a
//! neighbour's history expects, a neighbour that cannot be reached, the `nodes=` cap, and the
//! Comment's bound.

use super::*;
use eddy_history::{IoMode, JobProfile};
use eddy_testkit::profiles::{profile, Run};
use std::path::Path;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

fn hosts() -> Vec<String> {
    ["io1", "io2", "io3"].map(String::from).to_vec()
}

/// What a history says of a job that writes hard, at `bw` bytes/s.
fn traits(mode: IoMode, bw: f64) -> Traits {
    Traits {
        io_mode: mode,
        peak_bandwidth: bw,
        peak_iops: 10.0,
        peak_metadata_rate: 1.0,
        mean_metadata_queue: Some(0.1),
    }
}

fn busy(bw: f64) -> Load {
    Load {
        bytes_per_s: bw,
        iops: 100.0,
        metadata_rate: 1.0,
        metadata_queue: Some(0.0),
    }
}

fn neighbour(
    job: u32,
    name: &str,
    host: &str,
    expected: Option<Traits>,
    live: Result<Load, String>,
) -> Neighbour {
    Neighbour {
        job,
        uid: 1000 + job,
        name: Some(name.into()),
        hosts: vec![host.into()],
        expected,
        live: live.map(|l| BTreeMap::from([(host.to_string(), l)])),
    }
}

/// An N-1 job's history (interference-prone), too small to be scaled.
fn n1_history() -> JobProfile {
    let mut p: JobProfile = serde_json::from_value(profile(&Run {
        key: "7",
        job_id: Some("7"),
        job_name: "shared",
        user: "u",
        script_hash: "h",
        start: 1_790_000_000.0,
        seconds: 10,
        nodes: 2,
        bytes_per_node: 1 << 20,
        mode: "N-1",
    }))
    .unwrap();
    p.io_mode = IoMode::N1;
    p
}

fn job() -> Job {
    Job {
        user: Some("u".into()),
        job_name: "shared".into(),
        script_hash: Some("h".into()),
        nodes: 2,
        default_servers: Vec::new(),
    }
}

#[test]
fn neighbours_sit_on_their_servers_with_live_load_or_history_only() {
    let quiet_now = neighbour(
        10,
        "a",
        "io1",
        Some(traits(IoMode::N1, 2.0 * GIB)),
        Ok(Load::default()),
    );
    let writing = neighbour(11, "b", "io2", None, Ok(busy(GIB)));
    let gone = neighbour(
        12,
        "c",
        "io1",
        Some(traits(IoMode::NN, 2.0 * GIB)),
        Err("connection refused".into()),
    );
    let (servers, notes) = pool_view(&hosts(), &[GIB; 3], &[quiet_now, writing, gone]);
    assert_eq!(servers.iter().map(|s| s.id).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(servers[0].host, "io1");
    let on_io1: Vec<(&str, bool)> = servers[0]
        .jobs
        .iter()
        .map(|j| (j.job.as_str(), j.live.is_some()))
        .collect();
    assert_eq!(on_io1, [("job 10 (a)", true), ("job 12 (c)", false)]);
    assert_eq!(servers[1].jobs.len(), 1);
    assert_eq!(servers[1].load.bytes_per_s, GIB);
    assert!(servers[2].idle() && servers[2].recent_bandwidth.is_none());
    assert_eq!(
        notes,
        [
            "neighbour job 12 (c) cannot be reached (connection refused): listed with its history \
          only"
        ]
    );
}

/// The job is N-1 (prone); its default server io1 holds neighbour a, whose history says N-1
/// at 2 GiB/s but whose daemons say they are quiet now, and neighbour c, unreachable, whose
/// history says 2 GiB/s: both histories count (a's daemons are its user's: their quiet does
/// not lower what its history expects), isolated on the idle io3. Neighbours without history
/// that are quiet now are no clash: the default server.
#[test]
fn live_load_counts_never_below_history_and_the_unreachable_count_by_history() {
    let policy = Policy::default();
    let h = n1_history();
    let a = neighbour(
        10,
        "a",
        "io1",
        Some(traits(IoMode::N1, 2.0 * GIB)),
        Ok(Load::default()),
    );
    let b = neighbour(11, "b", "io2", None, Ok(busy(GIB)));
    let c = neighbour(
        12,
        "c",
        "io1",
        Some(traits(IoMode::NN, 2.0 * GIB)),
        Err("timed out".into()),
    );
    let (servers, _) = pool_view(&hosts(), &[GIB; 3], &[a.clone(), b.clone(), c]);
    assert_eq!(
        servers[0].load.bytes_per_s,
        2.0 * GIB,
        "a's history, not its quiet"
    );
    let d = decide_with(&policy, &job(), Some(&h), &servers, None);
    assert_eq!(d.rule, eddy_alloc::Rule::Isolated, "{:#?}", d.reasons);
    assert_eq!(d.servers, [2], "{:#?}", d.reasons);
    let text = d.reasons.join("\n");
    assert!(
        text.contains("neighbour job 12 (c) would disturb it (history: high throughput"),
        "{text}"
    );
    assert!(
        text.contains("neighbour job 10 (a) would disturb it (live: N-1, high throughput"),
        "a neighbour quiet by its own word is as its history says: {text}"
    );

    let quiet = |job, name: &str| neighbour(job, name, "io1", None, Ok(Load::default()));
    let (servers, notes) = pool_view(&hosts(), &[GIB; 3], &[quiet(10, "a"), b, quiet(12, "c")]);
    assert!(notes.is_empty());
    let d = decide_with(&policy, &job(), Some(&h), &servers, Some(3));
    assert_eq!(
        (d.rule, d.servers.clone()),
        (eddy_alloc::Rule::Default, vec![0]),
        "{:#?}",
        d.reasons
    );
    assert!(d
        .reasons
        .last()
        .unwrap()
        .starts_with("nodes=3: the job's directive allows at most 3"));
}

/// The site's caps: per job, and per user over the user's other jobs set up now.
#[test]
fn the_sites_caps_bound_a_job_and_a_user() {
    let mut d = Decision {
        servers: vec![0, 1, 2],
        rule: eddy_alloc::Rule::Scaled,
        reasons: Vec::new(),
        refused_at: None,
        excluded: Vec::new(),
    };
    site_cap(&mut d, 2, "the site's max_servers_per_job");
    assert_eq!(d.servers, [0, 1]);
    assert_eq!(
        d.reasons,
        ["the site's max_servers_per_job: at most 2 server(s), 3 decided: servers [0, 1]"]
    );
    site_cap(&mut d, 2, "again");
    assert_eq!(d.reasons.len(), 1, "within the cap: nothing to say");
    let mine = |job, hosts: &[&str]| Neighbour {
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        uid: 7,
        ..neighbour(job, "x", "io1", None, Ok(Load::default()))
    };
    let others = neighbour(3, "y", "io3", None, Ok(Load::default()));
    assert_eq!(
        held_by(&[mine(1, &["io1", "io2"]), others, mine(2, &["io3"])], 7),
        3
    );
}

#[test]
fn nodes_caps_the_servers_and_the_comment_is_one_bounded_line() {
    let pool: Pool = toml::from_str(
        "nodes = [\"io1\", \"io2 10.0.0.2\", \"io3\"]\nroot = \"/n/{job}\"\ncapacity = \"1T\"\n",
    )
    .unwrap();
    let mut d = Decision {
        servers: vec![0, 1, 2],
        rule: eddy_alloc::Rule::Scaled,
        reasons: vec!["scaling: S = 3\nwith \"quotes\"".into()],
        refused_at: None,
        excluded: Vec::new(),
    };
    cap(&mut d, Some(2));
    assert_eq!(d.servers, [0, 1]);
    assert_eq!(
        d.reasons[1],
        "nodes=2: the job's directive allows at most 2 server(s), 3 decided: servers [0, 1]"
    );
    assert_eq!(
        comment(&d, &pool),
        "eddy alloc: scaled 2 server(s) io1,io2: scaling: S = 3 with  quotes "
    );
    let a = allocation(&d, &pool);
    assert_eq!(
        (a.rule.as_str(), a.hosts.clone()),
        ("scaled", vec!["io1".to_string(), "io2".to_string()])
    );
    d.reasons = vec![format!("scaling: {}", "x".repeat(1000))];
    let long = comment(&d, &pool);
    assert!(
        long.len() <= COMMENT_MAX && long.ends_with("..."),
        "{}",
        long.len()
    );
}

#[test]
fn live_load_is_the_latest_window_of_counters() {
    let sample = |t_ms: u64, bytes: u64| eddy_proto::stats::Sample {
        t_ms,
        seconds: 1,
        written_bytes: bytes,
        ops: 4,
        metadata_ops: 2,
        metadata_queue_mean: 3.0,
        ..Default::default()
    };
    let s = DaemonStats {
        now_ms: 100_000,
        series: vec![
            sample(10_000, 1 << 30),
            sample(95_000, 100),
            sample(96_000, 300),
        ],
        ..DaemonStats::default()
    };
    let l = live_load(&s, 10);
    assert_eq!((l.bytes_per_s, l.iops, l.metadata_rate), (200.0, 4.0, 2.0));
    assert_eq!(l.metadata_queue, Some(3.0));
    assert_eq!(live_load(&s, 1), Load::default());
}

/// A site of three pool nodes with an inventory, from TOML as a site writes it.
fn site_with_inventory(dir: &Path, probe_bytes: &str, launcher: &str) -> (Site, Pool) {
    let text = format!(
        "launcher = {launcher:?}\ninventory = {:?}\nstate_dir = {:?}\n[pool]\n\
         nodes = [\"io1 127.0.0.1\", \"io2 127.0.0.1\", \"io3 192.0.2.1\"]\n\
         root = \"{}/{{host}}/job-{{job}}\"\ncapacity = \"1GiB\"\nprobe_bytes = {probe_bytes:?}\n\
         probe_bound_s = 2\n",
        dir.join("inventory.db"),
        dir.join("jobs"),
        dir.display()
    );
    std::fs::create_dir(dir.join("jobs")).unwrap();
    let site: Site = toml::from_str(&text).unwrap();
    let pool = site.pool.clone().unwrap();
    (site, pool)
}

fn probe(host: &str, bw: Option<f64>) -> eddy_sysmap::health::Probe {
    eddy_sysmap::health::Probe {
        host: host.into(),
        bandwidth: bw,
        error: bw.is_none().then(|| "connection refused".to_string()),
    }
}

#[test]
fn the_inventorys_health_screens_servers_without_a_probe() {
    let dir = tempfile::tempdir().unwrap();
    let (site, pool) = site_with_inventory(dir.path(), "0", "{cmd}");
    // Stored by an earlier probe: io2 at a tenth of its peers.
    eddy_sysmap::health::record(
        site.inventory.as_deref().unwrap(),
        &[
            probe("io1", Some(100e6)),
            probe("io2", Some(10e6)),
            probe("io3", Some(100e6)),
        ],
        0.5,
    )
    .unwrap();
    let (mut servers, _) = pool_view(&hosts(), &[2.0 * GIB; 3], &[]);
    let mut notes = Vec::new();
    let health = screen(&site, &pool, &servers, &mut notes);
    mark(&site, &mut servers, &health, &mut notes);
    assert_eq!(
        servers
            .iter()
            .map(|s| s.recent_bandwidth)
            .collect::<Vec<_>>(),
        [Some(100e6), Some(10e6), Some(100e6)]
    );
    assert!(
        notes.iter().any(|n| n.starts_with(
            "health probe: io2 measured 9.5 MiB/s, below 0.5 of its peers' median 95.4 MiB/s"
        )),
        "{notes:?}"
    );
    assert!(!notes.iter().any(|n| n.contains("probed")), "{notes:?}");
    // The decision leaves io2 out, even for a job of three servers.
    let policy = Policy {
        default_servers: 3,
        ..Policy::default()
    };
    let d = decide_with(&policy, &job(), None, &servers, None);
    assert_eq!(d.excluded, [1], "{d:?}");
    assert!(!d.servers.contains(&1), "{d:?}");
}

#[test]
fn a_probe_that_cannot_reach_a_server_marks_it_unhealthy_and_stores_it() {
    let dir = tempfile::tempdir().unwrap();
    // A launcher whose command fails at once: every idle server is down, within the bound.
    let (site, pool) = site_with_inventory(dir.path(), "1MiB", "false {cmd}");
    let (mut servers, _) = pool_view(&hosts(), &[2.0 * GIB; 3], &[]);
    let mut notes = Vec::new();
    let health = screen(&site, &pool, &servers, &mut notes);
    mark(&site, &mut servers, &health, &mut notes);
    assert!(servers.iter().all(|s| !s.healthy), "{servers:?}");
    assert!(
        notes
            .iter()
            .any(|n| n == "health probe: 3 idle server(s) probed (1.0 MiB each): io1 down, io2 down, io3 down"),
        "{notes:?}"
    );
    let stored = eddy_sysmap::health::latest(site.inventory.as_deref().unwrap(), &[]).unwrap();
    assert_eq!(stored.len(), 3);
    assert!(stored.iter().all(|h| h.anomalous && h.bandwidth.is_none()));
    let d = decide_with(&Policy::default(), &job(), None, &servers, None);
    assert!(d.servers.is_empty(), "{d:?}");

    // The next allocation within `probe_cache_s` judges them by that probe: no new round.
    let (mut again, _) = pool_view(&hosts(), &[2.0 * GIB; 3], &[]);
    let mut notes = Vec::new();
    let health = screen(&site, &pool, &again, &mut notes);
    mark(&site, &mut again, &health, &mut notes);
    assert!(again.iter().all(|s| !s.healthy), "{again:?}");
    assert!(!notes.iter().any(|n| n.contains("probed")), "{notes:?}");
    assert!(
        notes.iter().any(|n| n
            .starts_with("health probe: 3 idle server(s) judged by their probe of at most ")
            && n.ends_with("(kept 120 s): io1 down, io2 down, io3 down")),
        "{notes:?}"
    );
    let kept = std::fs::metadata(dir.path().join("jobs/probes.json")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&kept.permissions()) & 0o777,
        0o600
    );
}

#[test]
fn an_allocation_that_finds_a_probe_round_under_way_does_not_wait_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let (site, pool) = site_with_inventory(dir.path(), "1MiB", "false {cmd}");
    // Another allocation's round holds the lock.
    let held = std::fs::File::create(dir.path().join("jobs/probes.lock")).unwrap();
    // SAFETY: flock on a file this test owns.
    assert_eq!(
        // SAFETY: flock on the descriptor of a file this test owns and keeps open.
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&held), libc::LOCK_EX) },
        0
    );
    let (servers, _) = pool_view(&hosts(), &[2.0 * GIB; 3], &[]);
    let mut notes = Vec::new();
    let health = screen(&site, &pool, &servers, &mut notes);
    assert!(health.is_empty(), "{health:?}");
    assert!(
        notes.iter().any(|n| n
            == "health probe: another allocation is probing the pool: 3 idle server(s) \
                judged by their stored health"),
        "{notes:?}"
    );
    // With probe_cache_s = 0 every allocation probes.
    drop(held);
    let pool = Pool {
        probe_cache_s: 0,
        ..pool
    };
    for _ in 0..2 {
        let mut notes = Vec::new();
        screen(&site, &pool, &servers, &mut notes);
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("health probe: 3 idle server(s) probed")),
            "{notes:?}"
        );
    }
}

#[test]
fn the_neighbours_daemons_are_asked_together_and_each_answers_for_itself() {
    // Two neighbours' deployments of real daemons, and one whose daemons are not started.
    let one = eddy_testkit::Cluster::start(2);
    let two = eddy_testkit::Cluster::start(1);
    let none = tempfile::tempdir().unwrap();
    let states = [one.dir.path(), two.dir.path(), none.path()]
        .map(eddy_deploy::StateDir::new)
        .to_vec();
    let lives = lives_of(states, 10);
    assert_eq!(lives.len(), 3);
    for live in &lives[..2] {
        let by_host = live.as_ref().unwrap();
        assert_eq!(
            by_host.keys().collect::<Vec<_>>(),
            ["localhost"],
            "{by_host:?}"
        );
    }
    assert_eq!(
        lives[2].as_ref().unwrap_err(),
        "its daemons are not started yet"
    );
}

/// The Comment, which other users may read (`PrivateData=jobs` or not), says the job's own
/// rule, servers and rule line, never a line naming a neighbour or another job's history run,
/// and comes after the user's own comment.
#[test]
fn the_comment_names_no_other_job_and_keeps_the_users() {
    let pool: Pool =
        toml::from_str("nodes = [\"io1\", \"io2\"]\nroot = \"/n/{job}\"\ncapacity = \"1T\"\n")
            .unwrap();
    let d = Decision {
        servers: vec![1],
        rule: eddy_alloc::Rule::Isolated,
        reasons: vec![
            "job 4242 (theirs) on io1: its daemons could not be asked".into(),
            "history: run slurm:4141@1700000000 (start 1700000000)".into(),
            "server 0: neighbour 4242 would disturb it (live: bandwidth)".into(),
            "nodes=1: the job's directive allows at most 1 server(s); 1 decided".into(),
        ],
        refused_at: None,
        excluded: Vec::new(),
    };
    let c = comment(&d, &pool);
    assert_eq!(c, "eddy alloc: isolated 1 server(s) io2");
    assert!(!c.contains("4242") && !c.contains("4141"), "{c}");

    let note = "eddy alloc: default 1 server(s) io1: no history of app";
    assert_eq!(with_note("(null)\n", note).as_deref(), Some(note));
    assert_eq!(with_note("", note).as_deref(), Some(note));
    assert_eq!(
        with_note("my run 7\n", note).as_deref(),
        Some("my run 7 | eddy alloc: default 1 server(s) io1: no history of app")
    );
    assert_eq!(with_note(&format!("my run 7 | {note}\n"), note), None);
}
