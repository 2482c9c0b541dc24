//! End-to-end checksums (decision 0019) against three real daemons: bits flipped in the
//! stored data and sum files on disk are EIO (never the wrong bytes), counted once per block,
//! found by `eddy scrub`; a payload damaged in flight is refused and nothing is stored; data
//! fsync'd before a kill -9 still verifies after the restart; with two copies, a damaged one is
//! read around.

use eddy_client::{Client, Creds};
use eddy_config::Config;
use eddy_proto::req;
use eddy_proto::{checksum, FileId, Piece, Request};
use eddy_testkit::cli::eddy;
use eddy_testkit::raw::{authenticated, call};
use eddy_testkit::{pattern, test_config, Cluster, Mounted};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Four checksum blocks per chunk, so that flips fall inside chunks, not on their edges.
const BLOCK: u64 = 16 * 1024;

fn config() -> Config {
    Config {
        checksum_block_bytes: BLOCK,
        ..test_config()
    }
}

/// The data files of `id` on the daemons (`chunks/<hh>/<id hex>`), with the daemon index.
fn data_files(cl: &Cluster, id: FileId) -> Vec<(usize, PathBuf)> {
    let name = format!("{id:032x}");
    let mut out = Vec::new();
    for i in 0..cl.dep.daemons.len() {
        let chunks = cl.root_of(i).join("chunks");
        for sub in std::fs::read_dir(&chunks).expect("chunk directory") {
            let p = sub.unwrap().path().join(&name);
            if p.exists() {
                out.push((i, p));
            }
        }
    }
    out
}

/// Offsets of the data (not holes) of a sparse file, by SEEK_DATA/SEEK_HOLE.
fn data_ranges(path: &Path) -> Vec<(u64, u64)> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as i64;
    let mut out = Vec::new();
    let mut at = 0i64;
    while at < len {
        // SAFETY: lseek(2) on a descriptor we own.
        let start = unsafe { libc::lseek(f.as_raw_fd(), at, libc::SEEK_DATA) };
        if start < 0 {
            break;
        }
        // SAFETY: as above.
        let end = unsafe { libc::lseek(f.as_raw_fd(), start, libc::SEEK_HOLE) };
        out.push((start as u64, end as u64));
        at = end;
    }
    out
}

fn flip(path: &Path, at: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x04;
    f.write_all_at(&b, at).unwrap();
    f.sync_all().unwrap();
}

/// Flips one bit of the stored data of `id` in block `nth` of the first stretch of data,
/// on any daemon, that has such a block (a daemon may hold only the file's short last
/// chunk); returns the file offset of the flipped byte.
fn flip_data(cl: &Cluster, id: FileId, nth: u64) -> u64 {
    let files = data_files(cl, id);
    let (path, at) = files
        .iter()
        .flat_map(|(_, path)| data_ranges(path).into_iter().map(move |r| (path, r)))
        .map(|(path, (start, end))| (path, start + nth * BLOCK + 77, end))
        .find(|&(_, at, end)| at < end)
        .map(|(path, at, _)| (path, at))
        .unwrap_or_else(|| panic!("no stored data of {id:032x} has a block {nth}: {files:?}"));
    flip(path, at);
    at
}

async fn checksum_errors(c: &Client) -> u64 {
    let mut n = 0;
    for (id, s) in c.daemon_status().await {
        let s = s.unwrap_or_else(|e| panic!("daemon {id}: {e}"));
        n += s.checksum_errors;
    }
    n
}

fn scrub_json(cl: &Cluster) -> (bool, serde_json::Value, String) {
    let out = eddy(&[
        "scrub",
        "--state",
        eddy_testkit::cli::s(cl.dir.path()),
        "--json",
    ]);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "scrub printed no report ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (
        out.status.success(),
        report,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The (file id, file offset) of every damaged block a scrub report lists.
fn scrubbed_blocks(report: &serde_json::Value) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = report["daemons"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["mismatches"].as_array().unwrap().clone())
        .map(|m| {
            (
                m["file_id"].as_str().unwrap().to_string(),
                m["file_offset"].as_u64().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_bits_are_eio_counted_and_found_by_scrub_after_a_kill_9() {
    let mut cl = Cluster::start_with(3, config());
    let me = Creds::root();
    let cs = cl.dep.config.chunk_size as usize;
    let len = 5 * cs + 1000;
    {
        let c = cl.client().await;
        for i in 0..6u64 {
            let f = c.create(&format!("/f{i}"), 0o644, true, me).await.unwrap();
            c.pwrite(&f, 0, &pattern(i, 0, len)).await.unwrap();
            c.fsync(&f).await.unwrap();
        }
    }
    // (d) What was fsync'd before a kill -9 still verifies after the restart.
    cl.kill_and_restart_all();
    let c = cl.client().await;
    let mut ids = Vec::new();
    for i in 0..6u64 {
        let path = format!("/f{i}");
        let f = c.open(&path, libc::O_RDONLY, 0, me).await.unwrap();
        assert_eq!(c.pread(&f, 0, len).await.unwrap(), pattern(i, 0, len));
        ids.push(c.stat(&path).await.unwrap().file_id);
    }
    let (ok, report, err) = scrub_json(&cl);
    assert!(ok, "a clean scrub succeeds: {err}");
    assert_eq!(report["mismatches"], 0);
    assert!(report["blocks"].as_u64().unwrap() >= (6 * len as u64) / BLOCK);
    assert_eq!(checksum_errors(&c).await, 0);

    // (a) Five flips: one in files 0, 1 and 2, two (in different blocks) in file 3.
    let mut flips: Vec<(u64, u64)> = Vec::new(); // (file index, file offset)
    for i in 0..3u64 {
        flips.push((i, flip_data(&cl, ids[i as usize], 1)));
    }
    flips.push((3, flip_data(&cl, ids[3], 0)));
    flips.push((3, flip_data(&cl, ids[3], 2)));
    for &(i, at) in &flips {
        let path = format!("/f{i}");
        let f = c.open(&path, libc::O_RDONLY, 0, me).await.unwrap();
        // The whole file, and the flipped block alone: EIO naming the path, never data.
        let e = c.pread(&f, 0, len).await.unwrap_err();
        assert_eq!(e.errno, libc::EIO, "{e}");
        assert!(
            e.msg.contains(&path) && e.msg.contains("checksum mismatch"),
            "{e}"
        );
        let block_start = at / BLOCK * BLOCK;
        let e = c.pread(&f, block_start + 10, 100).await.unwrap_err();
        assert_eq!(e.errno, libc::EIO, "{e}");
        assert!(
            e.msg.contains(&format!("file offset {block_start}")),
            "the error names the block's offset: {e}"
        );
        // The bytes before the damaged block still read (unless another flip is there).
        if block_start > 0 && !flips.iter().any(|&(j, o)| j == i && o < block_start) {
            assert_eq!(
                c.pread(&f, 0, block_start as usize).await.unwrap(),
                pattern(i, 0, block_start as usize)
            );
        }
    }
    assert_eq!(
        checksum_errors(&c).await,
        flips.len() as u64,
        "every flipped block read is counted, once"
    );
    // Unflipped files read fine.
    for i in 4..6u64 {
        let f = c
            .open(&format!("/f{i}"), libc::O_RDONLY, 0, me)
            .await
            .unwrap();
        assert_eq!(c.pread(&f, 0, len).await.unwrap(), pattern(i, 0, len));
    }
    // The scrub finds exactly the flipped blocks and fails.
    let (ok, report, err) = scrub_json(&cl);
    assert!(!ok, "a scrub that finds damage exits non-zero");
    assert!(
        err.contains("damaged block") && err.contains("Rewrite"),
        "{err}"
    );
    let mut want: Vec<(String, u64)> = flips
        .iter()
        .map(|&(i, at)| (format!("{:032x}", ids[i as usize]), at / BLOCK * BLOCK))
        .collect();
    want.sort();
    assert_eq!(scrubbed_blocks(&report), want);
    assert_eq!(report["mismatches"], flips.len());
    // Each damaged block is reported with the name of its file.
    for m in report["daemons"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["mismatches"].as_array().unwrap())
    {
        let i = ids
            .iter()
            .position(|&id| format!("{id:032x}") == m["file_id"].as_str().unwrap())
            .unwrap();
        assert_eq!(m["paths"], serde_json::json!([format!("/f{i}")]), "{m}");
    }
    assert_eq!(
        checksum_errors(&c).await,
        flips.len() as u64,
        "no double count"
    );
    // Rewriting the damaged files repairs them: the next scrub is clean.
    for i in 0..4u64 {
        let f = c
            .open(&format!("/f{i}"), libc::O_WRONLY, 0, me)
            .await
            .unwrap();
        c.pwrite(&f, 0, &pattern(i + 10, 0, len)).await.unwrap();
        let f = c
            .open(&format!("/f{i}"), libc::O_RDONLY, 0, me)
            .await
            .unwrap();
        assert_eq!(c.pread(&f, 0, len).await.unwrap(), pattern(i + 10, 0, len));
    }
    let (ok, report, err) = scrub_json(&cl);
    assert!(ok, "{err}");
    assert_eq!(report["mismatches"], 0);
    let status = eddy(&[
        "status",
        "--state",
        eddy_testkit::cli::s(cl.dir.path()),
        "--json",
    ]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let counted: u64 = status["daemons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["checksum_errors"].as_u64().unwrap())
        .sum();
    assert_eq!(counted, flips.len() as u64, "eddy status shows the count");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flip_in_a_sum_file_is_detected_too() {
    let cl = Cluster::start_with(3, config());
    let me = Creds::root();
    let c = cl.client().await;
    let len = 3 * cl.dep.config.chunk_size as usize;
    let f = c.create("/s", 0o644, true, me).await.unwrap();
    c.pwrite(&f, 0, &pattern(1, 0, len)).await.unwrap();
    let id = c.stat("/s").await.unwrap().file_id;
    let (_, data) = data_files(&cl, id).into_iter().next().unwrap();
    let (start, _) = data_ranges(&data)[0];
    // The checksum of the second block of that data: entry start / BLOCK + 1.
    let entry = start / BLOCK + 1;
    let mut sums = data.clone().into_os_string();
    sums.push(".sum");
    flip(Path::new(&sums), entry * 4 + 1);
    let e = c.pread(&f, 0, len).await.unwrap_err();
    assert_eq!(e.errno, libc::EIO, "{e}");
    assert!(
        e.msg.contains(&format!("file offset {}", entry * BLOCK)),
        "{e}"
    );
    assert_eq!(checksum_errors(&c).await, 1);
    let (ok, report, _) = scrub_json(&cl);
    assert!(!ok);
    assert_eq!(
        scrubbed_blocks(&report),
        vec![(format!("{id:032x}"), entry * BLOCK)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_damaged_in_flight_is_refused_and_nothing_is_stored() {
    // The raw client below writes frames as they are: `wire = "clear"` (with "mac" or
    // "sealed" the frame would not get past the wire's check; see wire.rs).
    let cl = Cluster::start_with(
        3,
        Config {
            wire: eddy_config::Wire::Clear,
            ..config()
        },
    );
    let c = cl.client().await;
    let data = pattern(3, 0, 40_000);
    let pieces = vec![Piece {
        chunk: 0,
        offset: 1000,
        len: 40_000,
    }];
    let sums = checksum::sums(&pieces, &data, BLOCK);
    let mut damaged = data.clone();
    damaged[20_000] ^= 1;
    let mut s = authenticated(&cl.dep, 0);
    let write = |data: &[u8], sums: Vec<u32>| {
        Request::Write(req::Write {
            file_id: 77,
            pieces: pieces.clone(),
            sums,
            data: data.to_vec().into(),
            backing: None,
            hint: None,
        })
    };
    let e = call(&mut s, 1, &write(&damaged, sums.clone())).unwrap_err();
    assert_eq!(e.errno, libc::EIO, "{e}");
    assert!(e.msg.contains("corrupted in flight"), "{e}");
    // Too few checksums: a protocol error, nothing stored either.
    let e = call(&mut s, 2, &write(&data, sums[1..].to_vec())).unwrap_err();
    assert_eq!(e.errno, libc::EPROTO, "{e}");
    let status = c.daemon_status().await;
    let s0 = status[0].1.as_ref().unwrap();
    assert_eq!((s0.corrupt_payloads, s0.chunks, s0.chunk_bytes), (1, 0, 0));
    assert!(data_files(&cl, 77).is_empty(), "nothing stored");
    // The same connection still serves: the good payload is written and reads back checked.
    call(&mut s, 3, &write(&data, sums)).unwrap();
    let read = Request::Read(req::Read {
        file_id: 77,
        pieces: pieces.clone(),
        backing: None,
        hint: None,
    });
    match call(&mut s, 4, &read).unwrap() {
        eddy_proto::Reply::Checked { data: got, sums } => {
            assert_eq!(&got[..], &data[..]);
            assert_eq!(checksum::verify(&pieces, &got, &sums, BLOCK).unwrap(), None);
        }
        other => panic!("expected a checked reply, got {other:?}"),
    }
}

#[test]
fn through_a_fuse_mount_a_flipped_bit_is_eio_never_the_wrong_bytes() {
    let m = Mounted::start_with(3, config());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let len = 4 * m.cluster.dep.config.chunk_size as usize;
    std::fs::write(m.path("/good"), pattern(1, 0, len)).unwrap();
    std::fs::write(m.path("/bad"), pattern(2, 0, len)).unwrap();
    let c = rt.block_on(m.cluster.client());
    let id = rt.block_on(c.stat("/bad")).unwrap().file_id;
    flip_data(&m.cluster, id, 2);
    // Another mount has none of it in its page cache: reads reach the daemons.
    let other = m.another_mount();
    let e = std::fs::read(other.path("/bad")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert_eq!(
        std::fs::read(other.path("/good")).unwrap(),
        pattern(1, 0, len)
    );
    assert_eq!(
        rt.block_on(checksum_errors(&c)),
        1,
        "one flipped block read"
    );
    let (ok, report, _) = scrub_json(&m.cluster);
    assert!(!ok);
    assert_eq!(scrubbed_blocks(&report).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_copies_a_flipped_bit_is_read_from_the_other_copy_and_rewritten() {
    let cl = Cluster::start_with(
        3,
        Config {
            replicas: 2,
            ..config()
        },
    );
    let me = Creds::root();
    let c = cl.client().await;
    let len = 4 * cl.dep.config.chunk_size as usize + 500;
    let want = pattern(7, 0, len);
    let f = c.create("/r", 0o644, true, me).await.unwrap();
    c.pwrite(&f, 0, &want).await.unwrap();
    c.close(&f).await.unwrap();
    let id = c.stat("/r").await.unwrap().file_id;
    let files = data_files(&cl, id);
    let daemons: std::collections::BTreeSet<usize> = files.iter().map(|(d, _)| *d).collect();
    assert!(
        daemons.len() >= 2,
        "two copies on distinct daemons: {files:?}"
    );
    // Damage chunk 1 in the copy its first owner holds: the copy reads go to first.
    let ids: Vec<u32> = cl.dep.daemons.iter().map(|d| d.id).collect();
    let placement = eddy_placement::Placement::new(ids).unwrap();
    let first = placement.owners(eddy_placement::chunk_hash(id, 1), 2)[0];
    let (_, path) = files
        .iter()
        .find(|(d, _)| cl.dep.daemons[*d].id == first)
        .expect("the first owner holds chunk 1");
    flip(path, cl.dep.config.chunk_size + 77);
    // Every byte comes back right, from the good copy, through this client and a new one.
    for reader in [c, cl.client().await] {
        let f = reader.open("/r", libc::O_RDONLY, 0, me).await.unwrap();
        let got = reader.pread(&f, 0, len).await.unwrap();
        assert!(got == want, "the damaged copy's bytes were returned");
    }
    // The read told the good copy's daemon, which rewrites the damaged one (read repair,
    // decision 0021): once `eddy repair` ends, the flipped byte is right again on disk and
    // a scrub finds nothing; the damage was counted once.
    let state = cl.dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        eddy(&["repair", "--state", eddy_testkit::cli::s(&state)])
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "eddy repair: {}",
        eddy_testkit::cli::text(&out)
    );
    let at = cl.dep.config.chunk_size + 77;
    let mut byte = [0u8; 1];
    std::os::unix::fs::FileExt::read_exact_at(&std::fs::File::open(path).unwrap(), &mut byte, at)
        .unwrap();
    assert_eq!(byte[0], want[at as usize], "the damaged copy was rewritten");
    let c = cl.client().await;
    assert_eq!(checksum_errors(&c).await, 1);
    let (ok, report, err) = scrub_json(&cl);
    assert!(ok, "a scrub after the repair is clean: {err}");
    assert!(scrubbed_blocks(&report).is_empty(), "{report}");
    let f = c.open("/r", libc::O_RDONLY, 0, me).await.unwrap();
    assert!(c.pread(&f, 0, len).await.unwrap() == want);
}

/// A file shorter than a checksum block, damaged on disk, then rewritten whole: the write
/// replaces every byte its block holds, so the block's checksum is fresh and it reads again
/// (the flipped-bits test above met this when a flip landed in a file's short last chunk).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_short_file_rewritten_whole_reads_again() {
    let cl = Cluster::start_with(3, config());
    let me = Creds::root();
    let c = cl.client().await;
    let f = c.create("/t", 0o644, true, me).await.unwrap();
    c.pwrite(&f, 0, &pattern(1, 0, 1000)).await.unwrap();
    c.fsync(&f).await.unwrap();
    let id = c.stat("/t").await.unwrap().file_id;
    flip_data(&cl, id, 0);
    let f = c.open("/t", libc::O_WRONLY, 0, me).await.unwrap();
    c.pwrite(&f, 0, &pattern(2, 0, 1000)).await.unwrap();
    let f = c.open("/t", libc::O_RDONLY, 0, me).await.unwrap();
    assert_eq!(c.pread(&f, 0, 1000).await.unwrap(), pattern(2, 0, 1000));
}
