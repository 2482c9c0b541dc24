//! Bounds on what a peer can hold at a daemon, against real daemons over real sockets: many
//! connections that never authenticate, and an authenticated client that asks for replies
//! it never reads or announces a frame larger than allowed. The daemon keeps its sockets and
//! memory bounded and serves a good client meanwhile.

use eddy_config::Deployment;
use eddy_proto::req;
use eddy_testkit::raw::{get_frame, put_frame};
use eddy_testkit::Cluster;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Guard against a hang; never an assertion on speed.
const GUARD: Duration = Duration::from_secs(60);

fn daemon_pid(cl: &Cluster, i: usize) -> i32 {
    let text = std::fs::read_to_string(cl.root_of(i).join("eddyd.ready")).expect("ready file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("ready json");
    v["pid"].as_i64().expect("pid") as i32
}

/// A field of /proc/PID/status in KiB (VmRSS, VmHWM).
fn vm_kib(pid: i32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Sockets the process holds open.
fn sockets(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("proc fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.to_string_lossy().starts_with("socket:"))
        .count()
}

/// A connection that has done the handshake, reads bounded by the hang guard.
fn authenticated(dep: &Deployment, i: usize) -> TcpStream {
    let s = eddy_testkit::raw::authenticated(dep, i);
    s.set_read_timeout(Some(GUARD)).unwrap();
    s
}

/// True once the connection is closed by the peer (reads end or fail).
fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_never_authenticate_are_bounded() {
    const MAX_UNAUTH: usize = 16;
    const HELD: usize = 600;
    let config = eddy_config::Config {
        max_unauthenticated: MAX_UNAUTH,
        // Long enough that no held connection reaches it during the test: what bounds them
        // is the count.
        connect_timeout_ms: 120_000,
        rpc_timeout_ms: 120_000,
        ..eddy_testkit::test_config()
    };
    let cl = Cluster::start_with(3, config);
    let pid = daemon_pid(&cl, 0);
    let good = cl.client().await;
    good.daemon_status().await;
    let (rss_before, sockets_before) = (vm_kib(pid, "VmRSS"), sockets(pid));

    // Connections that say nothing, and connections that send half a hello.
    let mut held = Vec::with_capacity(HELD);
    for n in 0..HELD {
        let mut s = TcpStream::connect(&cl.dep.daemons[0].addr).expect("connect");
        if n % 2 == 1 {
            s.write_all(&[200, 0, 0, 0, 0, 0]).unwrap();
        }
        held.push(s);
    }
    // A good client connecting after all of them is served (over TCP, as from another node).
    let mut dep = cl.dep.clone();
    for d in &mut dep.daemons {
        d.socket = None;
    }
    let late = eddy_client::Client::connect(dep)
        .await
        .expect("a good client connects");
    let f = late
        .create("/served", 0o644, true, eddy_client::Creds::root())
        .await
        .unwrap();
    late.pwrite(&f, 0, b"served").await.unwrap();
    for (id, st) in late.daemon_status().await {
        st.unwrap_or_else(|e| panic!("daemon {id}: {e}"));
    }

    // The daemon holds at most MAX_UNAUTH of them (the pushed-out ones are closed as their
    // tasks run; the guard only keeps a broken bound from hanging the test).
    let bound = sockets_before + MAX_UNAUTH + 8;
    eddy_testkit::eventually::eventually_within(
        GUARD,
        format!(
            "daemon 0 holds at most {bound} sockets with {HELD} unauthenticated connections open"
        ),
        || (sockets(pid) <= bound).then_some(()),
    );
    // Those pushed out see their connection closed; the newest still wait.
    assert!(closed(&mut held[0]), "the oldest connection was closed");
    let rss_after = vm_kib(pid, "VmRSS");
    assert!(
        rss_after < rss_before + 32 * 1024,
        "daemon 0 grew from {rss_before} KiB to {rss_after} KiB"
    );
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_nobody_reads_and_huge_frames_stay_within_the_bytes_bound() {
    const MIB: u32 = 1024 * 1024;
    const N: u64 = 400;
    let config = eddy_config::Config {
        max_frame_bytes: 4 * MIB,
        max_rpc_data_bytes: 2 * MIB,
        max_connection_bytes: 8 * u64::from(MIB),
        // The count alone would allow them all.
        max_requests_in_flight: 1024,
        // This test's raw client writes frames as they are.
        wire: eddy_config::Wire::Clear,
        ..eddy_testkit::test_config()
    };
    let chunk = config.chunk_size as u32;
    let cl = Cluster::start_with(3, config);
    let pid = daemon_pid(&cl, 0);
    let good = cl.client().await;
    let served = |st: Vec<(u32, Result<eddy_client::DaemonStatus, eddy_client::Errno>)>| {
        st[0]
            .1
            .as_ref()
            .map(|s| s.requests)
            .expect("daemon 0 status")
    };
    let before = served(good.daemon_status().await);
    let hwm_before = vm_kib(pid, "VmHWM");

    // 400 reads of 1 MiB each (holes: zeros), 400 MiB of replies, none read.
    let mut s = authenticated(&cl.dep, 0);
    let pieces: Vec<eddy_proto::Piece> = (0..(MIB / chunk))
        .map(|k| eddy_proto::Piece {
            chunk: u64::from(k),
            offset: 0,
            len: chunk,
        })
        .collect();
    let read = eddy_proto::Request::Read(req::Read {
        file_id: 99,
        pieces,
        backing: None,
        hint: None,
    });
    let body = eddy_proto::encode(&read).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        for id in 1..=N {
            put_frame(&mut w, id, &body, &[]).unwrap();
        }
    });
    // A second connection announces a frame just over the limit and trickles it: closed
    // before anything is buffered for it.
    let mut big = authenticated(&cl.dep, 0);
    big.write_all(&(4 * MIB - 3).to_le_bytes()).unwrap();
    big.write_all(&[0u8; 12]).unwrap();
    assert!(closed(&mut big), "an oversize frame closes its connection");
    // A third announces a frame at the limit and sends a tenth of it, slowly.
    let mut slow = authenticated(&cl.dep, 0);
    slow.write_all(&(4 * MIB - 4).to_le_bytes()).unwrap();
    for _ in 0..40 {
        slow.write_all(&[0u8; 10 * 1024]).unwrap();
    }
    // Gives an unbounded daemon the time to take every read in (no assertion on time).
    std::thread::sleep(Duration::from_millis(1500));
    let taken = served(good.daemon_status().await) - before;
    let hwm = vm_kib(pid, "VmHWM");
    // 8 MiB in flight and the socket buffers: tens of replies, not hundreds.
    assert!(
        taken < N / 4,
        "daemon 0 took {taken} of {N} reads of 1 MiB whose replies nobody reads"
    );
    assert!(
        hwm < hwm_before + 96 * 1024,
        "daemon 0 peaked at {hwm} KiB (was {hwm_before} KiB)"
    );
    // Everyone else is served meanwhile.
    for (id, st) in good.daemon_status().await {
        st.unwrap_or_else(|e| panic!("daemon {id}: {e}"));
    }
    let f = good
        .create("/still", 0o644, true, eddy_client::Creds::root())
        .await
        .unwrap();
    good.pwrite(&f, 0, b"works").await.unwrap();
    // Once the client reads, every read is answered, once, in full.
    let reader = std::thread::spawn(move || {
        let mut seen = vec![false; N as usize + 1];
        for _ in 0..N {
            let frame = get_frame(&mut s).expect("a reply");
            let id = frame.id as usize;
            let resp = eddy_proto::response_from_frame(frame, u64::from(4 * MIB)).unwrap();
            match resp {
                Ok(eddy_proto::Reply::Data(d) | eddy_proto::Reply::Checked { data: d, .. }) => {
                    assert_eq!(d.len(), MIB as usize);
                    assert!(d.iter().all(|&b| b == 0), "a hole reads as zeros");
                }
                other => panic!("reply {id}: {other:?}"),
            }
            assert!(!seen[id], "reply {id} twice");
            seen[id] = true;
        }
        seen.iter().skip(1).all(|&b| b)
    });
    assert!(reader.join().unwrap(), "every read answered once");
    writer.join().unwrap();
    drop(slow);
}
