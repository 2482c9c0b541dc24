//! Faults: a daemon that dies or hangs while a client reads gives EIO within the RPC
//! deadline, never a hang, and the other daemons keep serving.

use eddy_client::{Client, Creds};
use eddy_config::Config;
use eddy_placement::Placement;
use eddy_testkit::{pattern, Cluster};
use std::time::{Duration, Instant};

/// A path whose metadata and first chunk both avoid daemon `avoid`.
fn path_avoiding(avoid: u32, c: &Client, prefix: &str) -> String {
    let p = Placement::new(c.deployment().daemons.iter().map(|d| d.id).collect()).unwrap();
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|path| p.meta_owner(path) != avoid)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_or_hung_daemon_gives_eio_and_others_keep_working() {
    let config = Config {
        rpc_timeout_ms: 2_000,
        connect_timeout_ms: 1_000,
        ..eddy_testkit::test_config()
    };
    let timeout = Duration::from_millis(config.rpc_timeout_ms);
    let mut cl = Cluster::start_with(3, config);
    let c = cl.client().await;
    let me = Creds::root();
    let cs = c.config().chunk_size as usize;
    // A file striped over every daemon, and small files living on daemons 0 and 1 only.
    // Placement leaves one daemon without any of a file's 12 chunks about once in 130
    // files: such a file is set aside, so that daemon 2 surely holds some of `big`.
    let p = Placement::new(vec![0, 1, 2]).unwrap();
    let mut n = 0;
    let big = loop {
        let f = c
            .create(&format!("/big{n}"), 0o644, true, me)
            .await
            .unwrap();
        n += 1;
        if (0..12).any(|k| p.chunk_owner(f.file_id(), k) == 2) {
            break f;
        }
    };
    let data = pattern(1, 0, cs * 12);
    c.pwrite(&big, 0, &data).await.unwrap();
    let mut small = Vec::new();
    for i in 0.. {
        let path = format!("/small{i}");
        let f = c.create(&path, 0o644, true, me).await.unwrap();
        if p.meta_owner(&path) != 2 && p.chunk_owner(f.file_id(), 0) != 2 {
            c.pwrite(&f, 0, &pattern(i, 0, 1000)).await.unwrap();
            small.push((path, i));
            if small.len() == 3 {
                break;
            }
        }
    }

    // Hung daemon (SIGSTOP): the read of the striped file fails with EIO within the deadline.
    let pid = daemon_pid(&cl, 2);
    // SAFETY: plain kill(2) on a daemon we started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let t = Instant::now();
    let r = c.pread(&big, 0, data.len()).await;
    let took = t.elapsed();
    // SAFETY: kill(2) of a daemon this test started and stopped.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(r.unwrap_err().errno, libc::EIO);
    assert!(
        took < timeout * 3,
        "EIO came after {took:?}, deadline {timeout:?}"
    );
    // Once it runs again, the same client reads everything.
    assert_eq!(c.pread(&big, 0, data.len()).await.unwrap(), data);

    // Dead daemon (kill -9): EIO, and files not on it keep working, reads and writes.
    cl.kill(2);
    let t = Instant::now();
    assert_eq!(
        c.pread(&big, 0, data.len()).await.unwrap_err().errno,
        libc::EIO
    );
    assert!(t.elapsed() < timeout * 3);
    for (path, i) in &small {
        let f = c.open(path, libc::O_RDWR, 0, me).await.unwrap();
        assert_eq!(c.pread(&f, 0, 2000).await.unwrap(), pattern(*i, 0, 1000));
        c.pwrite(&f, 0, b"still here").await.unwrap();
    }
    let other = path_avoiding(2, &c, "/new");
    assert!(c.stat(&other).await.unwrap_err().errno == libc::ENOENT);
    // Status reports the dead daemon as an error, not a hang.
    let status = c.daemon_status().await;
    assert!(status[2].1.is_err() && status[0].1.is_ok() && status[1].1.is_ok());
}

fn daemon_pid(cl: &Cluster, i: usize) -> i32 {
    let text = std::fs::read_to_string(cl.root_of(i).join("eddyd.ready")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["pid"].as_i64().unwrap() as i32
}
