//! The daemons' Prometheus endpoint (decision 0035) end to end: `eddy start --metrics`, the
//! addresses in the deployment and in `eddy status`, `/metrics` fetched directly (checked by
//! `promtool`) and scraped by a real Prometheus server of the test's own, which must report
//! the bytes and operations of a known workload; the endpoint's bounds; a start that cannot
//! bind its metrics address fails naming it.

use eddy_testkit::cli::{eddy, fails, free_ports, ok, s, text};
use eddy_testkit::prometheus::{http_get, Prometheus};
use eddy_testkit::require;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long Prometheus may take to see what the daemons counted (1 s scrapes).
const SCRAPE_BOUND: Duration = Duration::from_secs(60);
/// The workload: `WRITES` writes of one chunk each (chunk-aligned, so each is one `Write`
/// request at one daemon) and one short write.
const CHUNK: usize = 65536;
const WRITES: usize = 12;
const SHORT: usize = 1000;
const NAME: &str = "metrics-t";

/// Stops the deployment in `state` when the test ends, whatever happened.
struct StopGuard(PathBuf);

impl Drop for StopGuard {
    fn drop(&mut self) {
        let _ = eddy(&["stop", "--state", s(&self.0)]);
    }
}

fn start(dir: &Path, extra: &[&str]) -> (PathBuf, StopGuard) {
    let root = dir.join("root");
    let guard = StopGuard(root.clone());
    let mut args = vec![
        "start",
        "--local",
        "3",
        "--root",
        s(&root),
        "--chunk-size",
        "65536",
        "--name",
        NAME,
    ];
    args.extend_from_slice(extra);
    ok(&args);
    (root, guard)
}

fn metrics_addrs(state: &Path) -> Vec<String> {
    let dep = eddy_config::Deployment::load(&state.join("deployment.toml")).unwrap();
    dep.daemons
        .iter()
        .map(|d| {
            d.metrics
                .clone()
                .expect("a metrics address in the deployment")
        })
        .collect()
}

/// Writes `WRITES` chunks over four files and `SHORT` bytes into a fifth through the client
/// library, then reads everything back; returns the bytes written.
fn workload(state: &Path) -> usize {
    let mut dep = eddy_config::Deployment::load(&state.join("deployment.toml")).unwrap();
    // Every write a request the daemons count by size: not written directly into their data
    // files, which this client, on their host, would do otherwise (decision 0048).
    dep.config.direct_io = false;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = eddy_client::Client::connect(dep).await.unwrap();
        let me = eddy_client::Creds::root();
        let chunk = vec![7u8; CHUNK];
        for i in 0..WRITES {
            let path = format!("/f{}", i % 4);
            let f = c.create(&path, 0o644, false, me).await.unwrap();
            let offset = (i / 4 * CHUNK) as u64;
            assert_eq!(c.pwrite(&f, offset, &chunk).await.unwrap(), CHUNK);
            c.close(&f).await.unwrap();
        }
        let f = c.create("/short", 0o644, true, me).await.unwrap();
        assert_eq!(c.pwrite(&f, 0, &[1u8; SHORT]).await.unwrap(), SHORT);
        c.close(&f).await.unwrap();
        for path in ["/f0", "/f1", "/f2", "/f3", "/short"] {
            let f = c.open(path, libc::O_RDONLY, 0, me).await.unwrap();
            let data = c.pread(&f, 0, 4 * CHUNK).await.unwrap();
            assert!(!data.is_empty(), "{path} reads back");
            c.close(&f).await.unwrap();
        }
    });
    WRITES * CHUNK + SHORT
}

#[test]
fn prometheus_scrapes_every_daemon_and_finds_the_workload() {
    let promtool = require::program("promtool", "prometheus");
    let dir = tempfile::tempdir().unwrap();
    let base = free_ports(3);
    let (state, _guard) = start(dir.path(), &["--metrics", &format!("127.0.0.1:{base}")]);

    // Daemon i of the host listens on PORT + i; the deployment and status say so.
    let addrs = metrics_addrs(&state);
    let want: Vec<String> = (0..3).map(|i| format!("127.0.0.1:{}", base + i)).collect();
    assert_eq!(addrs, want);
    let status = ok(&["status", "--state", s(&state)]);
    let status_text = String::from_utf8_lossy(&status.stdout);
    for a in &addrs {
        assert!(
            status_text.contains(&format!("http://{a}/metrics")),
            "{status_text}"
        );
    }
    let json = ok(&["status", "--state", s(&state), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["daemons"][2]["metrics"], want[2].as_str());

    // Fetched directly: the text format (promtool's check passes), and 404 elsewhere.
    let (code, body) = http_get(&format!("http://{}/metrics", addrs[0])).unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("# TYPE eddy_requests_in_flight gauge"),
        "{body}"
    );
    let mut check = std::process::Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let checked = check.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool check metrics: {}{}\n{body}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    let (code, _) = http_get(&format!("http://{}/other", addrs[1])).unwrap();
    assert_eq!(code, 404);

    // The targets as Eddy gives them to Prometheus, labelled with the deployment's job.
    let groups = ok(&["status", "--state", s(&state), "--prometheus"]);
    let prom = Prometheus::start(&[String::from_utf8(groups.stdout).unwrap()]);
    prom.wait_for("sum(up)", SCRAPE_BOUND, |v| v == 3.0);
    let written = workload(&state) as f64;

    // Exactly the bytes written, at least one write request per write call, every daemon
    // under the deployment's name (the target group's `job` label, `eddy status --prometheus`).
    prom.wait_for("sum(eddy_bytes_written_total)", SCRAPE_BOUND, |v| {
        v == written
    });
    let writes = (WRITES + 1) as f64;
    prom.wait_for(
        "sum(eddy_operations_total{op=\"write\"})",
        SCRAPE_BOUND,
        |v| v >= writes,
    );
    prom.wait_for(
        &format!("sum(eddy_bytes_written_total{{job=\"{NAME}\"}})"),
        SCRAPE_BOUND,
        |v| v == written,
    );
    prom.wait_for(
        "count(count by (daemon) (eddy_operations_total))",
        SCRAPE_BOUND,
        |v| v == 3.0,
    );
    prom.wait_for("sum(eddy_bytes_read_total)", SCRAPE_BOUND, |v| v >= written);
    // The request-size histogram: the chunk writes are above le=65535 and within
    // le=262143 (a bucket bound is the largest size it holds); the short one within 1023.
    let bucket =
        |le: &str| format!("sum(eddy_request_size_bytes_bucket{{op=\"write\",le=\"{le}\"}})");
    prom.wait_for(&bucket("+Inf"), SCRAPE_BOUND, |v| v >= writes);
    let small = prom.wait_for(&bucket("1023"), SCRAPE_BOUND, |v| v >= 1.0);
    let below_chunk = prom.wait_for(&bucket("65535"), SCRAPE_BOUND, |_| true);
    assert_eq!(small, below_chunk, "no write of a size in 1024..=65535");
    let chunks = prom.wait_for(&bucket("262143"), SCRAPE_BOUND, |_| true);
    assert!(
        chunks - below_chunk >= WRITES as f64,
        "{chunks} - {below_chunk}"
    );
}

/// Reads from `stream` until the peer closes it; true if it did within the stream's read
/// timeout.
fn closed_by_peer(stream: &mut std::net::TcpStream) -> bool {
    let mut buf = [0u8; 512];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn the_endpoint_bounds_its_connections_and_cuts_slow_ones() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("eddy.toml");
    std::fs::write(
        &config,
        "metrics_max_connections = 2\nmetrics_timeout_ms = 2000\n",
    )
    .unwrap();
    // Port 0: each daemon any free port, recorded in the deployment.
    let (state, _guard) = start(
        dir.path(),
        &["--config", s(&config), "--metrics", "127.0.0.1:0"],
    );
    let addrs = metrics_addrs(&state);
    assert!(addrs.iter().all(|a| !a.ends_with(":0")), "{addrs:?}");
    let url = format!("http://{}/metrics", addrs[0]);
    assert_eq!(http_get(&url).unwrap().0, 200);

    // Two silent connections hold both slots: a scrape pushes out the one that waited
    // longest for its request and is served (decision 0056).
    let connect = || {
        let c = std::net::TcpStream::connect(&addrs[0]).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        c
    };
    let mut silent = [connect(), connect()];
    assert_eq!(http_get(&url).unwrap().0, 200);
    assert!(
        closed_by_peer(&mut silent[0]),
        "the oldest silent connection was not pushed out"
    );
    // The other is cut after metrics_timeout_ms, and scrapes are served again.
    assert!(
        closed_by_peer(&mut silent[1]),
        "a silent scraper was not cut off"
    );
    assert_eq!(http_get(&url).unwrap().0, 200);
}

#[test]
fn a_start_whose_metrics_address_is_taken_or_invalid_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let root = dir.path().join("root");
    let _guard = StopGuard(root.clone());
    let err = fails(&[
        "start",
        "--local",
        "3",
        "--root",
        s(&root),
        "--metrics",
        &addr,
    ]);
    assert!(
        err.contains(&format!("cannot serve metrics on {addr}")),
        "{err}"
    );
    // Nothing is left running: a start that fails stops what it started.
    let st = eddy(&["status", "--state", s(&root)]);
    assert!(!st.status.success(), "{}", text(&st));

    let err = fails(&[
        "start",
        "--local",
        "3",
        "--root",
        s(&dir.path().join("other")),
        "--metrics",
        "localhost:9400",
    ]);
    assert!(
        err.contains("--metrics") && err.contains("IP:PORT"),
        "{err}"
    );
}

#[test]
fn daemons_sharing_a_host_count_up_from_its_port_and_record_a_reachable_address() {
    // Three lines naming one host: launched as remote daemons are (here through `env`),
    // they are daemons 0, 1 and 2 of that host.
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "h 127.0.0.1\nh 127.0.0.1\nh 127.0.0.1\n").unwrap();
    let state = dir.path().join("state");
    let _guard = StopGuard(state.clone());
    let base = free_ports(3);
    ok(&[
        "start",
        "--hosts",
        s(&hosts),
        "--launcher",
        "env {cmd}",
        "--root",
        s(&dir.path().join("r{id}")),
        "--state",
        s(&state),
        "--listen-port",
        "0",
        "--metrics",
        &format!("0.0.0.0:{base}"),
    ]);
    // Bound on every address; recorded with the daemon's own IP, which scrapers reach.
    let addrs = metrics_addrs(&state);
    let want: Vec<String> = (0..3).map(|i| format!("127.0.0.1:{}", base + i)).collect();
    assert_eq!(addrs, want);
    for a in &addrs {
        let (code, body) = http_get(&format!("http://{a}/metrics")).unwrap();
        assert_eq!(code, 200, "{body}");
    }
}
