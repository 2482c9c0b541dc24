//! Tests of the health probes: the anomaly verdict, the prober's server (probes received, written,
//! removed; strangers dropped) and the bound on an unreachable host.

use super::*;

fn p(host: &str, bw: Option<f64>) -> Probe {
    Probe {
        host: host.into(),
        bandwidth: bw,
        error: bw.is_none().then(|| "down".to_string()),
    }
}

#[test]
fn below_the_share_of_the_peers_median_is_anomalous() {
    let probes: Vec<Probe> = [100.0, 90.0, 110.0, 105.0, 9.0]
        .iter()
        .enumerate()
        .map(|(i, bw)| p(&format!("s{i}"), Some(*bw)))
        .chain([p("s5", None)])
        .collect();
    let h = assess(&probes, &[], 0.5, 7);
    let flags: Vec<bool> = h.iter().map(|h| h.anomalous).collect();
    assert_eq!(flags, [false, false, false, false, true, true]);
    // s4's peers: 90, 100, 105, 110 → median 102.5.
    assert_eq!(h[4].peer_median, Some(102.5));
    assert!(h.iter().all(|h| h.measured_at == 7));
    // One host alone has no peers: not anomalous.
    assert!(!assess(&[p("a", Some(1.0))], &[], 0.5, 0)[0].anomalous);
}

#[test]
fn stored_peers_count_and_a_recovered_host_is_readmitted() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inv.db");
    let all: Vec<Probe> = (0..4)
        .map(|i| p(&format!("s{i}"), Some(if i == 3 { 10.0 } else { 100.0 })))
        .collect();
    let rows = record(&db, &all, 0.5).unwrap();
    assert!(rows[3].anomalous && !rows[0].anomalous);
    // Probing s3 alone compares it with the stored peers: still slow, still anomalous.
    record(&db, &[p("s3", Some(20.0))], 0.5).unwrap();
    let h = latest(&db, &["s3".into()]).unwrap();
    assert!(h[0].anomalous, "{h:?}");
    // Back to speed: re-admitted.
    record(&db, &[p("s3", Some(95.0))], 0.5).unwrap();
    let h = latest(&db, &[]).unwrap();
    assert_eq!(h.len(), 4);
    assert!(h.iter().all(|h| !h.anomalous), "{h:?}");
    // The inventory file is private.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&db).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o077, 0, "inventory mode {mode:o}");
    // fill() gives the allocation the bandwidth, and a down host is unhealthy.
    record(&db, &[p("s1", None)], 0.5).unwrap();
    let h = latest(&db, &[]).unwrap();
    let mut servers: Vec<eddy_alloc::Server> = (0..4)
        .map(|i| {
            let mut s = eddy_alloc::Server::idle_of(i, 100.0);
            s.host = format!("s{i}");
            s
        })
        .collect();
    fill(&mut servers, &h);
    assert_eq!(servers[0].recent_bandwidth, Some(100.0));
    assert!(!servers[1].healthy);
    assert_eq!(servers[3].recent_bandwidth, Some(95.0));
}

fn serve_in_thread(
    dir: &Path,
    nonce: &Nonce,
    max: u64,
    bound: Duration,
) -> (String, std::thread::JoinHandle<Result<u64>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let dir = dir.to_path_buf();
    let nonce = nonce.clone();
    let peer = source_address("127.0.0.1").unwrap();
    (
        addr,
        std::thread::spawn(move || serve(&dir, l, &nonce, peer, max, bound, &mut |_| {})),
    )
}

fn left_of(deadline: Instant) -> impl Fn() -> Result<Duration> {
    move || Ok(deadline.saturating_duration_since(Instant::now()))
}

#[test]
fn a_probe_is_received_written_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let nonce = Nonce::random();
    let (addr, t) = serve_in_thread(dir.path(), &nonce, 1 << 20, Duration::from_secs(30));
    let left = left_of(Instant::now() + Duration::from_secs(30));
    let bw = send(&addr, &nonce, 300_000, &left).unwrap();
    assert!(bw.is_finite() && bw > 0.0);
    assert_eq!(t.join().unwrap().unwrap(), 300_000);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn connections_before_the_probers_are_answered_and_the_prober_still_served() {
    let dir = tempfile::tempdir().unwrap();
    let nonce = Nonce::random();
    let (addr, t) = serve_in_thread(dir.path(), &nonce, 1 << 20, Duration::from_secs(30));
    // Garbage first: answered with an error, and the server waits on.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    BufReader::new(&s).read_line(&mut answer).unwrap();
    assert!(answer.starts_with("ERR "), "{answer}");
    // A header with the magic but another nonce: the same.
    let mut forged = TcpStream::connect(&addr).unwrap();
    let mut header = MAGIC.to_vec();
    header.extend_from_slice(&[0u8; NONCE_LEN]);
    header.extend_from_slice(&1000u64.to_be_bytes());
    forged.write_all(&header).unwrap();
    let mut answer = String::new();
    BufReader::new(&forged).read_line(&mut answer).unwrap();
    assert_eq!(answer, "ERR not this probe's nonce\n");
    // One that says nothing and stays: it holds nothing up.
    let _silent = TcpStream::connect(&addr).unwrap();
    let left = left_of(Instant::now() + Duration::from_secs(30));
    send(&addr, &nonce, 100_000, &left).unwrap();
    assert_eq!(t.join().unwrap().unwrap(), 100_000);

    // The prober announcing more than the server takes is refused in words.
    let (addr, t) = serve_in_thread(dir.path(), &nonce, 1000, Duration::from_secs(30));
    let left = left_of(Instant::now() + Duration::from_secs(30));
    let err = send(&addr, &nonce, 5000, &left).unwrap_err();
    assert!(format!("{err:#}").contains("at most 1000"), "{err:#}");
    assert!(t.join().unwrap().is_err());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_connection_from_another_address_is_dropped_unread() {
    let dir = tempfile::tempdir().unwrap();
    let nonce = Nonce::random();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let dir2 = dir.path().to_path_buf();
    let n2 = nonce.clone();
    // The prober is said to be at 192.0.2.1: this host's connection is not it.
    let t = std::thread::spawn(move || {
        serve(
            &dir2,
            l,
            &n2,
            "192.0.2.1".parse().unwrap(),
            1 << 20,
            Duration::from_secs(2),
            &mut |_| {},
        )
    });
    let left = left_of(Instant::now() + Duration::from_secs(30));
    assert!(send(&addr, &nonce, 1000, &left).is_err());
    let err = format!("{:#}", t.join().unwrap().unwrap_err());
    assert!(err.contains("no prober connected"), "{err}");
}

#[test]
fn the_nonce_is_read_as_one_line_of_hex() {
    let n = Nonce::random();
    assert_eq!(Nonce::read_line(n.line().as_bytes()).unwrap(), n);
    assert_eq!(format!("{n:?}"), "Nonce(..)");
    for bad in ["", "\n", "abcd\n", &"zz".repeat(NONCE_LEN)] {
        assert!(Nonce::read_line(bad.as_bytes()).is_err(), "{bad:?}");
    }
    // A line longer than a nonce's is not read on.
    let long = format!("{}{}", "00".repeat(NONCE_LEN), "0".repeat(1 << 20));
    assert!(Nonce::read_line(long.as_bytes()).is_err());
}

#[test]
fn an_unreachable_host_is_down_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let bound = Duration::from_secs(2);
    // A launcher that never starts the server (it sleeps), and one that fails at once.
    let hosts = [
        Host {
            name: "hang".into(),
            address: "127.0.0.1".into(),
        },
        Host {
            name: "gone".into(),
            address: "127.0.0.1".into(),
        },
    ];
    let script = dir.path().join("hang.sh");
    std::fs::write(&script, "#!/bin/sh\nexec sleep 600\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).unwrap();
    let hang = format!("{} {{host}} {{cmd}}", script.display());
    let sleepy = ProbeSpec {
        launcher: &hang,
        program: "eddy".into(),
        dir: &dir.path().to_string_lossy(),
        bytes: 1000,
        bound,
    };
    let r = probe(&sleepy, &hosts);
    let failing = ProbeSpec {
        launcher: "false {host} {cmd}",
        ..sleepy.clone()
    };
    let r2 = probe(&failing, &hosts);
    for x in r.iter().chain(&r2) {
        assert_eq!(x.bandwidth, None, "{x:?}");
        assert!(x.error.is_some());
    }
    assert!(r[0].error.as_deref().unwrap().contains("within"), "{r:?}");
}
