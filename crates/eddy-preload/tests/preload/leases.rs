//! Directory leases (decision 0075) through the preload library: a holder killed with
//! SIGKILL loses nothing it closed or fsync'd (the directory lists, empties and is leased
//! again by another client); a holder that does not answer a recall (stopped with SIGSTOP)
//! is revoked within `lease_recall_timeout_ms` and the other client's request completes.

use crate::preload::{check, Pre};
use eddy_client::Creds;
use eddy_testkit::served::{lease_stats, LeaseStats};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A Python holder: makes `/eddy/<dir>`, creates empty files e0..e99 and files w0..w19 with
/// content (each closed), and s (written and fsync'd, left open), then `then`.
fn holder_script(dir: &str, then: &str) -> String {
    format!(
        r#"
import os, sys, time
d = "/eddy/{dir}"
os.mkdir(d)
for i in range(100):
    os.close(os.open(f"{{d}}/e{{i}}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
for i in range(20):
    fd = os.open(f"{{d}}/w{{i}}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, f"content {{i}}\n".encode())
    os.close(fd)
fd = os.open(f"{{d}}/s", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
os.write(fd, b"synced\n")
os.fsync(fd)
{then}
"#
    )
}

#[test]
fn a_holder_killed_loses_nothing_it_closed_or_synced() {
    let p = Pre::on(eddy_testkit::Cluster::start_with(
        3,
        eddy_testkit::leased_config(),
    ));
    let script = holder_script("k", "os.kill(os.getpid(), 9)");
    let out = p
        .cmd("python3")
        .arg("-c")
        .arg(&script)
        .output()
        .expect("python3");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(9),
        "the holder was to kill itself: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let LeaseStats {
        grants,
        batched_ops: batched,
        ..
    } = p.rt.block_on(lease_stats(&p.client));
    assert!(
        grants >= 1 && batched >= 100,
        "grants {grants}, batched ops {batched}"
    );
    let names = p.names("/k");
    for i in 0..100 {
        assert!(
            names.contains(&format!("e{i}")),
            "e{i} missing from {names:?}"
        );
    }
    for i in 0..20 {
        assert_eq!(
            p.read(&format!("/k/w{i}")),
            format!("content {i}\n").as_bytes()
        );
    }
    assert_eq!(p.read("/k/s"), b"synced\n");
    // Another client takes the directory: creates (a lease of its own), empties it.
    p.rt.block_on(async {
        let c = &p.client;
        for i in 0..40 {
            let f = c
                .open(
                    &format!("/k/n{i}"),
                    libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                    0o644,
                    Creds::root(),
                )
                .await
                .unwrap();
            c.close(&f).await.unwrap();
        }
    });
    let LeaseStats {
        grants: grants_after,
        ..
    } = p.rt.block_on(lease_stats(&p.client));
    assert!(grants_after > grants, "a new holder took the directory");
    p.sh("rm -f /eddy/k/* && rmdir /eddy/k");
    assert!(p.rt.block_on(p.client.stat("/k")).is_err());
}

#[test]
fn a_holder_that_does_not_answer_is_revoked_and_the_other_request_completes() {
    let p = Pre::on(eddy_testkit::Cluster::start_with(
        3,
        eddy_testkit::leased_config(),
    ));
    let script = holder_script("h", "print('ready', flush=True)\ntime.sleep(120)");
    let mut holder = p
        .cmd("python3")
        .arg("-c")
        .arg(&script)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(holder.id().to_string())
            .status()
            .unwrap();
        assert!(ok.success(), "kill -{sig}");
    };
    signal("STOP");
    let started = Instant::now();
    // Another client's lookups in the directory: answered once the lease is revoked.
    let seen = p.rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), async {
            let e = p.client.stat("/h/e7").await;
            let nope = p.client.stat("/h/nope").await;
            (e.map(|i| i.kind), nope.map_err(|e| e.errno))
        })
        .await
    });
    let waited = started.elapsed();
    signal("CONT");
    let _ = holder.kill();
    let _ = holder.wait();
    let (e, nope) = seen.expect("the other client's request did not complete within 60 s");
    // Closed before the holder stopped: sent, so there.
    assert_eq!(e.unwrap(), eddy_client::FileKind::File);
    assert_eq!(nope.unwrap_err(), libc::ENOENT);
    let LeaseStats {
        recalls,
        revocations,
        ..
    } = p.rt.block_on(lease_stats(&p.client));
    assert!(
        recalls >= 1 && revocations >= 1,
        "recalls {recalls}, revocations {revocations} after {waited:?}"
    );
    // The directory is whole and can be emptied.
    assert_eq!(p.names("/h").len(), 121);
    let out = p
        .cmd("sh")
        .arg("-c")
        .arg("rm -f /eddy/h/* && rmdir /eddy/h")
        .output()
        .unwrap();
    check("rm", &out);
}

#[test]
fn a_process_in_its_own_directory_sends_creates_in_batches_and_answers_lookups() {
    let p = Pre::on(eddy_testkit::Cluster::start_with(
        3,
        eddy_testkit::leased_config(),
    ));
    let before = eddy_testkit::served::served(&p.rt, &p.client);
    let script = r#"
import os
d = "/eddy/own"
os.mkdir(d)
for i in range(200):
    os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
for i in range(200):
    assert os.stat(f"{d}/f{i}").st_size == 0
    try:
        os.stat(f"{d}/g{i}")
        raise SystemExit(f"g{i} exists")
    except FileNotFoundError:
        pass
for i in range(100):
    os.unlink(f"{d}/f{i}")
"#;
    let out = p
        .cmd("python3")
        .arg("-c")
        .arg(script)
        .output()
        .expect("python3");
    check("python3", &out);
    let after = eddy_testkit::served::served(&p.rt, &p.client);
    let d = eddy_testkit::served::diff(&before, &after);
    let get = |op: &str| d.get(op).copied().unwrap_or(0);
    // The root made sure of at connect and the mkdir are the only creates sent on their
    // own; the files' creates and unlinks went in batches (a close sends its own); stats of
    // names made or known absent were answered in the process.
    assert_eq!(get("create"), 2, "{d:?}");
    assert_eq!(get("remove"), 0, "{d:?}");
    assert!(get("stat") < 10, "{d:?}");
    assert!(get("batch") >= 1 && get("batch") <= 300, "{d:?}");
    let names = p.names("/own");
    assert_eq!(names.len(), 100);
    assert!(names
        .iter()
        .all(|n| n[1..].parse::<usize>().unwrap() >= 100));
}
