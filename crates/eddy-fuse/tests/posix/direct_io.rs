//! Direct local chunk I/O (decision 0048): a client on the daemons' host reads and writes
//! their data files itself and reports what it wrote; checksums, other clients, damage,
//! a daemon killed or a connection lost while a client holds descriptors, a full daemon.
//! The daemons run on this machine as host `localhost`; a client counts as on that host by
//! `placement_host`, one that does not goes through the daemons as before.

use eddy_client::{Client, Creds};
use eddy_config::Config;
use eddy_testkit::{errno, pattern, read_all, Cluster};
use std::collections::BTreeMap;

const CREAT: i32 = libc::O_RDWR | libc::O_CREAT;

fn local() -> Config {
    Config {
        placement_host: Some("localhost".into()),
        ..eddy_testkit::test_config()
    }
}

/// A client of `cl` that is not on the daemons' host: everything goes by RPC.
async fn remote_client(cl: &Cluster) -> Client {
    let mut dep = cl.dep.clone();
    dep.config.placement_host = Some("elsewhere".into());
    Client::connect(dep).await.unwrap()
}

/// Flips a bit of byte 70,000 of the data file of `file_id`, found on the first of `daemons`
/// whose chunk directories hold one (a test fails when none does).
fn damage_data_file(cl: &Cluster, daemons: impl IntoIterator<Item = usize>, file_id: u128) {
    let path = daemons
        .into_iter()
        .flat_map(|i| std::fs::read_dir(cl.root_of(i).join("chunks")).unwrap())
        .map(|d| d.unwrap().path().join(format!("{file_id:032x}")))
        .find(|p| p.exists())
        .expect("the data file");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[70_000] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
}

fn count(c: &Client, op: &str) -> u64 {
    c.rpc_counts().get(op).copied().unwrap_or(0)
}

/// Writes and reads of a file spread over 3 local daemons go straight to their data files:
/// no Write or Read request; one lease per daemon; the daemons' checksums take the client's
/// reports, so a client elsewhere reads the same bytes through the daemons, which verify.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_chunks_are_read_and_written_directly_and_verified_by_the_daemons() {
    let cl = Cluster::start_with(3, local());
    let c = cl.client().await;
    let me = Creds::root();
    let cs = c.config().chunk_size as usize;
    let f = c.open("/d", CREAT, 0o644, me).await.unwrap();
    let data = pattern(7, 0, cs * 9 + 1234);
    // Aligned, then unaligned writes over it.
    c.pwrite(&f, 0, &data).await.unwrap();
    let patch = pattern(8, 0, 70_000);
    c.pwrite(&f, 100_001, &patch).await.unwrap();
    let mut want = data.clone();
    want[100_001..100_001 + patch.len()].copy_from_slice(&patch);
    assert_eq!(c.pread(&f, 0, want.len() + 10).await.unwrap(), want);
    c.fsync(&f).await.unwrap();
    c.close(&f).await.unwrap();
    assert_eq!(count(&c, "write"), 0, "{:?}", c.rpc_counts());
    assert_eq!(count(&c, "read"), 0, "{:?}", c.rpc_counts());
    // One lease per daemon holding chunks of the file (hashed: ten chunks miss one of the
    // three daemons about one time in twenty).
    let holders = (0..=(want.len() / cs) as u64)
        .map(|k| c.rpc().placement().chunk_owner(f.file_id(), k))
        .collect::<std::collections::BTreeSet<_>>()
        .len() as u64;
    assert_eq!(count(&c, "direct_open"), holders, "{:?}", c.rpc_counts());
    assert!(count(&c, "direct_commit") >= holders);

    // Another local client reads directly, a client elsewhere through the daemons: the
    // daemons verify every block against the checksums the reports stored.
    let c2 = cl.client().await;
    assert_eq!(read_all(&c2, "/d").await, want);
    assert_eq!(count(&c2, "read"), 0);
    // Read directly, and counted by the daemons all the same (the job's I/O profile).
    let mut read = 0;
    for (_, s) in c2.rpc().all(|| eddy_proto::req::Stats).await {
        read += s
            .unwrap()
            .ops
            .iter()
            .filter(|o| o.op == "read")
            .map(|o| o.bytes)
            .sum::<u64>();
    }
    assert!(read >= want.len() as u64, "{read}");
    let far = remote_client(&cl).await;
    assert_eq!(read_all(&far, "/d").await, want);
    assert!(count(&far, "read") > 0);
    assert_eq!(count(&far, "direct_open"), 0);

    // The daemons count what was written directly (the job's I/O profile).
    let mut written = 0;
    for (_, s) in far.rpc().all(|| eddy_proto::req::Stats).await {
        let s = s.unwrap();
        written += s
            .ops
            .iter()
            .filter(|o| o.op == "direct_commit")
            .map(|o| o.bytes)
            .sum::<u64>();
    }
    assert_eq!(written, (data.len() + patch.len()) as u64);
}

/// A client elsewhere reads a file while a local client writes it directly and has not
/// reported yet: it gets the bytes, not a checksum error (the daemon checksums again the
/// blocks of a file with a direct writer that do not match).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_read_elsewhere_before_its_direct_writes_are_reported() {
    // Reports deferred past the test (they go `size_update_ms` after a first write).
    let cl = Cluster::start_with(
        3,
        Config {
            size_update_ms: 600_000,
            ..local()
        },
    );
    let c = cl.client().await;
    let me = Creds::root();
    let f = c.open("/w", CREAT, 0o644, me).await.unwrap();
    let first = pattern(1, 0, 300_000);
    c.pwrite(&f, 0, &first).await.unwrap();
    c.fsync(&f).await.unwrap();
    // Overwritten in part, not reported (no fsync, no close).
    let second = pattern(2, 0, 100_000);
    c.pwrite(&f, 50_000, &second).await.unwrap();
    let mut want = first.clone();
    want[50_000..150_000].copy_from_slice(&second);
    let far = remote_client(&cl).await;
    let g = far.open("/w", libc::O_RDONLY, 0, me).await.unwrap();
    assert_eq!(far.pread(&g, 0, want.len()).await.unwrap(), want);
    c.close(&f).await.unwrap();
    assert_eq!(far.pread(&g, 0, want.len()).await.unwrap(), want);
    // Nothing was taken for damage.
    for (_, s) in far.rpc().all(|| eddy_proto::req::Status).await {
        assert_eq!(s.unwrap().checksum_errors, 0);
    }
}

/// Damage in a data file (a bit flipped on disk after the file was closed) is found by a
/// direct reader: the block does not match, the read goes through the daemon, which
/// refuses it with EIO naming the block.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn damage_under_a_direct_reader_is_an_error() {
    let cl = Cluster::start_with(1, local());
    let c = cl.client().await;
    let me = Creds::root();
    let f = c.open("/bad", CREAT, 0o644, me).await.unwrap();
    c.pwrite(&f, 0, &pattern(3, 0, 200_000)).await.unwrap();
    c.close(&f).await.unwrap();
    let file_id = c.stat("/bad").await.unwrap().file_id;
    damage_data_file(&cl, [0], file_id);
    let g = c.open("/bad", libc::O_RDONLY, 0, me).await.unwrap();
    let e = c.pread(&g, 65_536, 10_000).await.unwrap_err();
    assert_eq!(e.errno, libc::EIO, "{e:?}");
    assert!(e.msg.contains("checksum mismatch"), "{e:?}");
    // The other blocks read.
    assert_eq!(
        c.pread(&g, 0, 65_536).await.unwrap(),
        pattern(3, 0, 200_000)[..65_536]
    );
}

/// kill -9 of a daemon while a client holds its descriptors and has not reported its
/// writes: the restarted daemon adopts what the data file holds; the client's lease is
/// void, so it writes its unreported bytes again through the daemon and takes a new lease.
/// fsync says the restart may have lost data (EIO, decision 0015), nothing is lost, no
/// block is taken for damage, and the next fsync succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_daemon_killed_while_a_client_holds_its_descriptors() {
    let mut cl = Cluster::start_with(1, local());
    let c = cl.client().await;
    let me = Creds::root();
    let f = c.open("/k", CREAT, 0o644, me).await.unwrap();
    let a = pattern(4, 0, 400_000);
    c.pwrite(&f, 0, &a).await.unwrap();
    cl.kill(0);
    cl.restart(0);
    // Written into the old descriptor's file before the client notices the restart? No:
    // the lease is void once its connection is, and this write settles it first.
    let b = pattern(5, 0, 100_000);
    c.pwrite(&f, 350_000, &b).await.unwrap();
    let mut want = a.clone();
    want.resize(450_000, 0);
    want[350_000..].copy_from_slice(&b);
    assert_eq!(errno(c.fsync(&f).await), libc::EIO);
    c.fsync(&f).await.unwrap();
    c.close(&f).await.unwrap();
    let far = remote_client(&cl).await;
    assert_eq!(read_all(&far, "/k").await, want);
    for (_, s) in far.rpc().all(|| eddy_proto::req::Status).await {
        assert_eq!(s.unwrap().checksum_errors, 0);
    }
    // And after another restart, from the data as synced.
    cl.kill(0);
    cl.restart(0);
    let again = remote_client(&cl).await;
    assert_eq!(read_all(&again, "/k").await, want);
}

/// A connection reset while its lease has unreported writes: the daemon adopts the file at
/// once (its writer is gone), the client writes the bytes again and goes on directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_connection_voids_the_lease_and_nothing_is_lost() {
    let cl = Cluster::start_with(1, local());
    let c = cl.client().await;
    let me = Creds::root();
    let f = c.open("/r", CREAT, 0o644, me).await.unwrap();
    let a = pattern(6, 0, 250_000);
    c.pwrite(&f, 0, &a).await.unwrap();
    c.rpc().drop_connection(0).await;
    let b = pattern(9, 0, 10_000);
    c.pwrite(&f, 5, &b).await.unwrap();
    let mut want = a.clone();
    want[5..10_005].copy_from_slice(&b);
    c.close(&f).await.unwrap();
    assert_eq!(count(&c, "direct_open"), 2, "{:?}", c.rpc_counts());
    let far = remote_client(&cl).await;
    assert_eq!(read_all(&far, "/r").await, want);
}

/// A daemon near its capacity hands out no write descriptors (less than
/// `direct_batch_bytes` of room): writes go through it and end in ENOSPC, never past
/// the capacity by more than what one report may carry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_daemon_refuses_direct_writers_and_writes_end_in_enospc() {
    let cap = 6 * 1024 * 1024;
    let batch = 1024 * 1024;
    let cl = Cluster::start_with(
        1,
        Config {
            capacity_bytes: cap,
            direct_batch_bytes: batch,
            ..local()
        },
    );
    let c = cl.client().await;
    let me = Creds::root();
    let f = c.open("/full", CREAT, 0o644, me).await.unwrap();
    let piece = pattern(11, 0, 256 * 1024);
    let mut at = 0u64;
    let err = loop {
        match c.pwrite(&f, at, &piece).await {
            Ok(_) => at += piece.len() as u64,
            Err(e) => break e,
        }
        assert!(at < 4 * cap, "no ENOSPC after {at} bytes");
    };
    assert_eq!(err.errno, libc::ENOSPC, "{err:?}");
    let _ = c.close(&f).await;
    let held: u64 = c
        .rpc()
        .all(|| eddy_proto::req::Status)
        .await
        .into_iter()
        .map(|(_, s)| s.unwrap().chunk_bytes)
        .sum();
    assert!(held <= cap + batch, "held {held}");
    // What was written before reads back.
    let g = c.open("/full", libc::O_RDONLY, 0, me).await.unwrap();
    let got = c.pread(&g, 0, at as usize).await.unwrap();
    assert_eq!(got.len() as u64, at);
    assert!(got.chunks(piece.len()).all(|p| p == &piece[..]));
}

/// Several threads write one file on a daemon that fills up: a report answered ENOSPC
/// races the other threads' direct writes. Every write that returned success reads back
/// (the lease lives until it is released with what was written meanwhile); none is taken
/// for damage.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_racing_a_full_daemon_s_answer_all_read_back() {
    let cap = 6 * 1024 * 1024;
    let cl = Cluster::start_with(
        1,
        Config {
            capacity_bytes: cap,
            direct_batch_bytes: 1024 * 1024,
            ..local()
        },
    );
    let c = cl.client().await;
    let me = Creds::root();
    let f = c.open("/race", CREAT, 0o644, me).await.unwrap();
    let piece = 64 * 1024;
    let writers = (0..4u64).map(|w| {
        let (c, f) = (c.clone(), f.clone());
        tokio::spawn(async move {
            let mut done = Vec::new();
            // Writer w takes every 4th piece.
            for i in (w..).step_by(4).take(64) {
                let at = i * piece;
                match c.pwrite(&f, at, &pattern(i, at, piece as usize)).await {
                    Ok(_) => done.push(i),
                    Err(e) => {
                        assert_eq!(e.errno, libc::ENOSPC, "{e:?}");
                        break;
                    }
                }
            }
            done
        })
    });
    let mut done = Vec::new();
    for w in writers {
        done.extend(w.await.unwrap());
    }
    assert!(done.len() < 4 * 64, "the daemon never filled up");
    c.close(&f).await.unwrap();
    let g = c.open("/race", libc::O_RDONLY, 0, me).await.unwrap();
    for i in done {
        let at = i * piece;
        let got = c.pread(&g, at, piece as usize).await.unwrap();
        assert!(got == pattern(i, at, piece as usize), "piece {i}");
    }
}

/// Without `placement_host` naming the daemons' host, or with `direct_io` off, nothing is
/// done directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn off_or_elsewhere_nothing_is_direct() {
    let cl = Cluster::start_with(
        2,
        Config {
            direct_io: false,
            ..local()
        },
    );
    let c = cl.client().await;
    let me = Creds::root();
    let f = c.open("/o", CREAT, 0o644, me).await.unwrap();
    c.pwrite(&f, 0, &pattern(1, 0, 200_000)).await.unwrap();
    c.close(&f).await.unwrap();
    let counts: BTreeMap<_, _> = c.rpc_counts();
    assert_eq!(counts.get("direct_open"), None, "{counts:?}");
    assert!(counts.get("write").copied().unwrap_or(0) > 0);
}

/// Bytes the daemons counted, by op: (write, direct_commit).
async fn written_by_op(c: &Client) -> (u64, u64) {
    let (mut rpc, mut direct) = (0, 0);
    for (_, s) in c.rpc().all(|| eddy_proto::req::Stats).await {
        for o in s.unwrap().ops {
            match o.op.as_str() {
                "write" => rpc += o.bytes,
                "direct_commit" => direct += o.bytes,
                _ => {}
            }
        }
    }
    (rpc, direct)
}

/// The mount and the preload library go through the client, so they write and read
/// directly too: programs' files (dd, cp, a Python random-access writer) come out
/// byte-identical, and the daemons counted every byte as reported, none as a Write.
#[test]
fn the_mount_and_the_preload_library_write_directly() {
    let m = eddy_testkit::Mounted::start_with(3, local());
    m.ok("dd if=/dev/urandom of=a bs=64k count=40 status=none && cp a b && cmp a b");
    m.ok("python3 -c \"
import os, random
random.seed(3)
fd = os.open('r', os.O_RDWR | os.O_CREAT, 0o644)
model = bytearray(3_000_000)
for i in range(200):
    off = random.randrange(0, 2_900_000); n = random.randrange(1, 90_000)
    b = os.urandom(n); os.pwrite(fd, b, off); model[off:off+n] = b
    if i % 50 == 0: os.fsync(fd)
end = max(i for i in range(len(model)) if model[i]) + 1 if any(model) else 0
assert os.pread(fd, len(model), 0)[:end] == bytes(model[:end])
os.close(fd)
\"");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let far = rt.block_on(remote_client(&m.cluster));
    let a = rt.block_on(read_all(&far, "/a"));
    assert_eq!(a, std::fs::read(m.path("a")).unwrap());
    let (rpc, direct) = rt.block_on(written_by_op(&far));
    assert_eq!(rpc, 0, "the mount wrote through the daemons");
    assert!(direct >= 2 * 40 * 65536, "{direct}");

    // The preload library, on the same deployment.
    let scratch = tempfile::tempdir().unwrap();
    let out = eddy_testkit::preloaded("sh", "/eddy", m.cluster.dir.path())
        .arg("-c")
        .arg("dd if=/dev/urandom of=/eddy/p bs=64k count=20 status=none && cp /eddy/p /eddy/q && cmp /eddy/p /eddy/q && cp /eddy/p $TMP/real && cmp $TMP/real /eddy/q")
        .env("TMP", scratch.path())
        .current_dir(scratch.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        rt.block_on(read_all(&far, "/p")),
        std::fs::read(scratch.path().join("real")).unwrap()
    );
    let (rpc, direct2) = rt.block_on(written_by_op(&far));
    assert_eq!(rpc, 0, "the preload library wrote through the daemons");
    assert!(direct2 >= direct + 2 * 20 * 65536, "{direct2}");
}

/// With two copies of each chunk, the copy on the client's host is written directly and
/// the copy on another host by RPC: the file survives the loss of either side's daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_two_copies_the_local_copy_is_direct_and_the_other_goes_by_rpc() {
    let mut cl = Cluster::start_with(
        3,
        Config {
            replicas: 2,
            ..local()
        },
    );
    // This client sees daemon 0 on its host, daemons 1 and 2 on another.
    let mut dep = cl.dep.clone();
    for d in dep.daemons.iter_mut().skip(1) {
        d.host = "far".into();
    }
    let c = Client::connect(dep).await.unwrap();
    let me = Creds::root();
    let f = c.open("/two", CREAT, 0o644, me).await.unwrap();
    let data = pattern(12, 0, 64 * 1024 * 20 + 77);
    c.pwrite(&f, 0, &data).await.unwrap();
    c.fsync(&f).await.unwrap();
    c.close(&f).await.unwrap();
    assert_eq!(count(&c, "direct_open"), 1, "{:?}", c.rpc_counts());
    assert!(count(&c, "write") > 0, "{:?}", c.rpc_counts());
    cl.kill(0);
    let far = remote_client(&cl).await;
    assert_eq!(read_all(&far, "/two").await, data);
    cl.restart(0);
    // Daemon 0 serves clients again once it has rejoined (decision 0021): only then is
    // daemon 1 the one copy down (killed earlier, both copies of the root could be out).
    eddy_testkit::eventually::eventually_async(
        std::time::Duration::from_secs(30),
        "daemon 0 rejoins",
        || async {
            let s = c.rpc().call(0, eddy_proto::req::Status).await;
            s.is_ok_and(|s| !s.rejoining).then_some(())
        },
    )
    .await;
    cl.kill(1);
    let far = remote_client(&cl).await;
    assert_eq!(read_all(&far, "/two").await, data);
}

/// One file of `local` placement (decision 0043: every chunk on a daemon of the creating
/// host) written at once, at unaligned offsets, by clients of that host, which write its data
/// files directly, and by clients elsewhere, whose writes the daemons make (ior-hard's
/// pattern: records of 47008 bytes, record r written by writer r mod W, so every 64 KiB block
/// gets bytes of several writers). No write, no read and no daemon may take any of it for
/// damage, and every byte reads back as the one writer of its record wrote it.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn a_local_file_written_at_once_directly_and_through_the_daemons_never_reads_eio() {
    const RECORD: usize = 47_008;
    const WRITERS: usize = 6;
    // One writer on the daemons' host alone (its lease is the file's only one), or more.
    let locals: usize = std::env::var("EDDY_MIXED_LOCALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    const ROUNDS: usize = 4;
    let records: usize = std::env::var("EDDY_MIXED_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(240);
    let cl = Cluster::start_with(
        3,
        Config {
            placement: eddy_config::PlacementMode::Local,
            ..local()
        },
    );
    let me = Creds::root();
    let mut clients = Vec::new();
    for w in 0..WRITERS {
        // The first writers on the daemons' host (direct), the others elsewhere (by RPC).
        clients.push(std::sync::Arc::new(if w < locals {
            cl.client().await
        } else {
            remote_client(&cl).await
        }));
    }
    let f = clients[0].open("/shared", CREAT, 0o644, me).await.unwrap();
    clients[0].close(&f).await.unwrap();
    let want = move |round: usize, r: usize| pattern((round * records + r) as u64, 0, RECORD);
    for round in 0..ROUNDS {
        let mut tasks = Vec::new();
        for (w, c) in clients.iter().enumerate() {
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                let f = c.open("/shared", libc::O_RDWR, 0, me).await.unwrap();
                for r in (w..records).step_by(WRITERS) {
                    let off = (r * RECORD) as u64;
                    if let Err(e) = c.pwrite(&f, off, &want(round, r)).await {
                        panic!("round {round}: writer {w}, record {r}: {e:?}");
                    }
                    // Read back what a neighbour wrote now and then, while all write.
                    if r % 7 == 0 && r > 0 {
                        if let Err(e) = c.pread(&f, off - RECORD as u64, 2 * RECORD).await {
                            panic!("round {round}: writer {w} reading at {off}: {e:?}");
                        }
                    }
                }
                c.close(&f).await.unwrap();
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        for (w, c) in clients.iter().enumerate().skip(locals - 1).take(2) {
            let got = read_all(c, "/shared").await;
            assert_eq!(got.len(), records * RECORD, "round {round}, reader {w}");
            for r in 0..records {
                assert!(
                    got[r * RECORD..(r + 1) * RECORD] == want(round, r)[..],
                    "round {round}, reader {w}: record {r} differs"
                );
            }
        }
    }
    let mut errors = 0;
    for (_, s) in clients[WRITERS - 1]
        .rpc()
        .all(|| eddy_proto::req::Status)
        .await
    {
        errors += s.unwrap().checksum_errors;
    }
    assert_eq!(errors, 0, "blocks taken for damage");
    // The file's chunks are on the daemons of its host, and the protection stays: a byte
    // flipped on disk now reads as EIO.
    let file_id = clients[0].stat("/shared").await.unwrap().file_id;
    damage_data_file(&cl, 0..3, file_id);
    let far = &clients[WRITERS - 1];
    let g = far.open("/shared", libc::O_RDONLY, 0, me).await.unwrap();
    let e = far.pread(&g, 65_536, 10_000).await.unwrap_err();
    assert_eq!(e.errno, libc::EIO, "{e:?}");
}
