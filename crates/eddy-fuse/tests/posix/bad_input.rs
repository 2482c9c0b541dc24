//! Bad input at the system level: malformed frames on raw connections never stop a daemon
//! from serving good clients; a wrong secret is refused; a full device gives ENOSPC and
//! loses nothing.

use eddy_client::{Client, Creds};
use eddy_config::Deployment;
use eddy_proto::req;
use eddy_testkit::{pattern, Cluster};
use rand::{Rng, SeedableRng};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_close_only_their_connection() {
    let cl = Cluster::start(3);
    let c = cl.client().await;
    let f = c.create("/ok", 0o644, true, Creds::root()).await.unwrap();
    c.pwrite(&f, 0, b"fine").await.unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let addrs: Vec<String> = cl.dep.daemons.iter().map(|d| d.addr.clone()).collect();
    for round in 0..60 {
        let addr = &addrs[round % addrs.len()];
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let garbage: Vec<u8> = match round % 4 {
            // Random bytes.
            0 => (0..rng.gen_range(1..4000)).map(|_| rng.gen()).collect(),
            // A huge length prefix.
            1 => u32::MAX.to_le_bytes().to_vec(),
            // A well-formed frame with an undecodable meta section and a payload.
            2 => {
                let meta: Vec<u8> = (0..rng.gen_range(0..200)).map(|_| rng.gen()).collect();
                let payload: Vec<u8> = (0..rng.gen_range(0..200)).map(|_| rng.gen()).collect();
                let mut v = ((meta.len() + payload.len() + 12) as u32)
                    .to_le_bytes()
                    .to_vec();
                v.extend_from_slice(&0u64.to_le_bytes());
                v.extend_from_slice(&(meta.len() as u32).to_le_bytes());
                v.extend(meta);
                v.extend(payload);
                v
            }
            // A truncated frame, then hang up.
            _ => vec![100, 0, 0, 0, 1, 2],
        };
        let _ = s.write_all(&garbage);
        let _ = s.shutdown(std::net::Shutdown::Write);
        // The daemon answers with at most its hello and closes: reading ends, never hangs.
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
        if round % 10 == 9 {
            let g = c
                .open("/ok", libc::O_RDONLY, 0, Creds::root())
                .await
                .unwrap();
            assert_eq!(
                c.pread(&g, 0, 10).await.unwrap(),
                b"fine",
                "good client served after round {round}"
            );
        }
    }
    for (id, s) in c.daemon_status().await {
        assert!(s.is_ok(), "daemon {id} still serving");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_secret_is_refused() {
    let cl = Cluster::start(3);
    let mut dep: Deployment = cl.dep.clone();
    dep.secret = Deployment::new_secret();
    let err = Client::connect(dep).await.map(|_| ()).unwrap_err();
    assert_eq!(err.errno, libc::EACCES, "{err}");
    // The right secret still works.
    assert!(Client::connect(cl.dep.clone()).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_device_gives_enospc_and_loses_nothing() {
    eddy_testkit::require::root("mount a small tmpfs under each daemon");
    // Each daemon's root on its own 8 MiB tmpfs.
    let mnt = tempfile::tempdir().unwrap();
    let mut guards = Vec::new();
    for i in 0..3 {
        let dir = mnt.path().join(format!("t{i}"));
        std::fs::create_dir(&dir).unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(st.success(), "mount tmpfs");
        guards.push(Unmount(dir));
    }
    let cl = Cluster::start_on(3, eddy_testkit::test_config(), |i| guards[i].0.join("root"));
    let c = cl.client().await;
    let me = Creds::root();
    let keep = c.create("/keep", 0o644, true, me).await.unwrap();
    let kept = pattern(3, 0, 1 << 20);
    c.pwrite(&keep, 0, &kept).await.unwrap();
    let big = c.create("/big", 0o644, true, me).await.unwrap();
    let block = pattern(4, 0, 1 << 20);
    let mut err = None;
    for i in 0..64u64 {
        if let Err(e) = c.pwrite(&big, i << 20, &block).await {
            err = Some(e);
            break;
        }
    }
    assert_eq!(
        err.expect("a 64 MiB write into 24 MiB must fail").errno,
        libc::ENOSPC
    );
    // Nothing else was damaged, and the daemons still serve.
    let g = c.open("/keep", libc::O_RDONLY, 0, me).await.unwrap();
    assert_eq!(c.pread(&g, 0, kept.len()).await.unwrap(), kept);
    // Removed while open, the file keeps its space until its handle is closed (decision
    // 0061); the close gives it back.
    c.unlink("/big", me).await.unwrap();
    c.close(&big).await.unwrap();
    let again = c.create("/again", 0o644, true, me).await.unwrap();
    c.pwrite(&again, 0, &block).await.unwrap();
    assert_eq!(c.pread(&again, 0, block.len()).await.unwrap(), block);
    drop(cl);
}

struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_stalls_only_itself() {
    let config = eddy_config::Config {
        max_requests_in_flight: 16,
        // This test's raw client writes frames as they are.
        wire: eddy_config::Wire::Clear,
        ..eddy_testkit::test_config()
    };
    let cl = Cluster::start_with(3, config);
    let good = cl.client().await;
    let mut s = eddy_testkit::raw::authenticated(&cl.dep, 0);

    // Pipeline 2,000 reads of 64 KiB (128 MiB of replies) from a thread, reading nothing: the
    // socket buffers fill with replies, and the daemon stops reading this connection at 16
    // unanswered requests.
    const N: u64 = 2_000;
    let mut w = s.try_clone().unwrap();
    let read = eddy_proto::Request::Read(req::Read {
        file_id: 7,
        pieces: vec![eddy_proto::Piece {
            chunk: 0,
            offset: 0,
            len: 65_536,
        }],
        backing: None,
        hint: None,
    });
    let body = eddy_proto::encode(&read).unwrap();
    let served = |st: Vec<(u32, Result<eddy_client::DaemonStatus, eddy_client::Errno>)>| {
        st[0].1.as_ref().map(|s| s.requests).unwrap()
    };
    let before = served(good.daemon_status().await);
    let writer = std::thread::spawn(move || {
        for id in 1..=N {
            eddy_testkit::raw::put_frame(&mut w, id, &body, &[]).unwrap();
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    // Replies nobody reads pile up in the socket buffers (a few MiB, about a hundred replies),
    // then 16 requests wait for them; the rest stay unread in the socket.
    let taken = served(good.daemon_status().await) - before;
    assert!(
        taken < N / 2,
        "the daemon took {taken} of {N} requests nobody reads replies to"
    );
    // The same daemon serves everyone else meanwhile.
    for (id, st) in good.daemon_status().await {
        assert!(st.is_ok(), "daemon {id} stopped serving other clients");
    }
    let f = good
        .create("/still", 0o644, true, Creds::root())
        .await
        .unwrap();
    good.pwrite(&f, 0, b"works").await.unwrap();
    // Once the client reads, every request is answered, in full.
    let reader = std::thread::spawn(move || {
        let mut seen = vec![false; N as usize + 1];
        for _ in 0..N {
            let frame = eddy_testkit::raw::get_frame(&mut s).unwrap();
            let id = frame.id;
            let resp = eddy_proto::response_from_frame(frame, 1 << 20).unwrap();
            assert_eq!(
                resp.ok().as_ref().and_then(eddy_proto::Reply::data),
                Some(&vec![0; 65_536].into()),
                "a hole reads as zeros"
            );
            assert!(!seen[id as usize], "reply {id} twice");
            seen[id as usize] = true;
        }
        seen.iter().skip(1).all(|&b| b)
    });
    assert!(reader.join().unwrap(), "every request answered once");
    writer.join().unwrap();
}
