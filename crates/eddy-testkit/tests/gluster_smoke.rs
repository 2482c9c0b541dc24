//! The GlusterFS test backend (src/gluster.rs, the tier tests' backend) is a real network file
//! system: data and metadata round-trip through the FUSE client and the brick processes,
//! volumes are independent, and freezing the bricks hangs I/O until they are thawed.
//!
//! Needs root and GlusterFS (scripts/install-deps.sh); fails, naming them, without.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

use eddy_testkit::gluster;

use gluster::{GlusterVolume, DEFAULT_BRICKS};
use rand::{Rng, SeedableRng};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const MIB: usize = 1024 * 1024;
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

fn fs_type(path: &Path) -> i64 {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: statfs fills a zeroed struct of its own type; c is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    assert_eq!(
        // SAFETY: `c` is NUL-terminated and `st` a writable statfs, both alive for the call.
        unsafe { libc::statfs(c.as_ptr(), &mut st) },
        0,
        "statfs {}",
        path.display()
    );
    st.f_type as i64
}

fn random_bytes(rng: &mut impl Rng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

/// The brick files holding `rel` (DHT puts each file on exactly one brick; link files, which
/// have the sticky bit and size 0, are skipped).
fn brick_copies(vol: &GlusterVolume, rel: &str) -> Vec<PathBuf> {
    vol.bricks()
        .iter()
        .map(|b| b.join(rel))
        .filter(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & libc::S_ISVTX == 0)
        })
        .collect()
}

/// Reads `len` bytes at `offset` with O_DIRECT: neither the kernel page cache nor a cache in the
/// FUSE client can answer, so the read must reach a brick.
fn read_direct(path: &Path, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let mut buf = vec![0u8; len + 4096];
    let start = buf.as_ptr().align_offset(4096);
    let mut done = 0;
    while done < len {
        let n = f.read_at(&mut buf[start + done..start + len], offset + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(buf[start..start + done].to_vec())
}

#[test]
fn volume_starts_mounts_and_tears_down() {
    let t = Instant::now();
    let vol = GlusterVolume::start("smoke_start");
    let started = t.elapsed();
    let mnt = vol.mount().to_path_buf();
    let name = vol.name().to_string();
    let pids = vol.brick_pids();
    let bricks: Vec<PathBuf> = vol.bricks().to_vec();

    assert_eq!(
        fs_type(&mnt),
        FUSE_SUPER_MAGIC,
        "the mount is not a FUSE file system"
    );
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(mnt.to_str().unwrap()))
        .expect("mount point listed in /proc/mounts");
    assert!(line.contains("fuse.glusterfs"), "{line}");
    assert!(
        line.starts_with(&format!("{}:/{name} ", gluster::GLUSTER_HOST)),
        "{line}"
    );
    assert_eq!(pids.len(), DEFAULT_BRICKS);
    for &p in &pids {
        let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap();
        assert_eq!(comm.trim(), "glusterfsd");
    }
    // The mount starts empty (gluster's .meta directory is hidden from listings).
    assert_eq!(std::fs::read_dir(&mnt).unwrap().count(), 0);

    let t = Instant::now();
    drop(vol);
    let dropped = t.elapsed();
    eprintln!("gluster volume {name}: start {started:?}, teardown {dropped:?}");

    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(
        !mounts.contains(&format!(":/{name} ")),
        "still mounted: {mounts}"
    );
    for &p in &pids {
        assert!(
            !Path::new(&format!("/proc/{p}/cmdline")).exists()
                || std::fs::read(format!("/proc/{p}/cmdline"))
                    .unwrap()
                    .is_empty(),
            "brick {p} still running"
        );
    }
    for b in &bricks {
        assert!(!b.exists(), "brick directory {} left behind", b.display());
    }
    let list = std::process::Command::new("gluster")
        .args(["--mode=script", "volume", "list"])
        .output()
        .unwrap();
    assert!(list.status.success());
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        !list.lines().any(|l| l.trim() == name),
        "volume {name} not deleted: {list}"
    );
    // Generous bounds (tests run in parallel on small machines); typical: ~0.5 s and ~0.3 s.
    assert!(started < Duration::from_secs(15), "start took {started:?}");
    assert!(
        dropped < Duration::from_secs(10),
        "teardown took {dropped:?}"
    );
}

#[test]
fn bytes_round_trip_at_random_offsets() {
    let vol = GlusterVolume::start("smoke_bytes");
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x6c75_7374);
    let size = 4 * MIB;
    let path = vol.mount().join("data.bin");
    let mut model = vec![0u8; size];
    {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        // Fill a base layer, then overwrite random ranges (some crossing 128 KiB boundaries).
        let base = random_bytes(&mut rng, size);
        f.write_all_at(&base, 0).unwrap();
        model.copy_from_slice(&base);
        for _ in 0..64 {
            let len = rng.gen_range(1..=300 * 1024);
            let off = rng.gen_range(0..=size - len);
            let data = random_bytes(&mut rng, len);
            f.write_all_at(&data, off as u64).unwrap();
            model[off..off + len].copy_from_slice(&data);
        }
        f.sync_all().unwrap();
        // Read back through the same descriptor.
        for _ in 0..32 {
            let len = rng.gen_range(1..=256 * 1024);
            let off = rng.gen_range(0..=size - len);
            let mut buf = vec![0u8; len];
            f.read_exact_at(&mut buf, off as u64).unwrap();
            assert!(buf == model[off..off + len], "pread at {off}+{len} differs");
        }
    }
    // Fresh descriptor, whole file, and uncached reads that must come from the bricks.
    assert!(
        std::fs::read(&path).unwrap() == model,
        "whole-file read differs"
    );
    for _ in 0..16 {
        let off = rng.gen_range(0..size / 4096) * 4096;
        let len = (rng.gen_range(1..=64) * 4096).min(size - off);
        let got = read_direct(&path, off as u64, len).unwrap();
        assert!(
            got == model[off..off + len],
            "O_DIRECT read at {off}+{len} differs"
        );
    }
    // A read past the end is short.
    let f = File::open(&path).unwrap();
    let mut buf = vec![0u8; 100];
    assert_eq!(f.read_at(&mut buf, size as u64 - 10).unwrap(), 10);
    assert_eq!(&buf[..10], &model[size - 10..]);

    // The data really went through gluster onto a brick.
    let copies = brick_copies(&vol, "data.bin");
    assert_eq!(copies.len(), 1, "expected one brick copy: {copies:?}");
    assert!(
        std::fs::read(&copies[0]).unwrap() == model,
        "brick copy differs"
    );

    // Many small files spread over the bricks and all read back.
    for i in 0..40 {
        std::fs::write(vol.mount().join(format!("small{i}")), format!("file {i}")).unwrap();
    }
    for i in 0..40 {
        let got = std::fs::read_to_string(vol.mount().join(format!("small{i}"))).unwrap();
        assert_eq!(got, format!("file {i}"));
    }
    if DEFAULT_BRICKS > 1 {
        let used = vol
            .bricks()
            .iter()
            .filter(|b| {
                (0..40).any(|i| {
                    b.join(format!("small{i}"))
                        .metadata()
                        .is_ok_and(|m| m.len() > 0)
                })
            })
            .count();
        assert!(used > 1, "DHT put all 40 files on one brick");
    }
}

#[test]
fn stat_shows_size_and_mtime() {
    let vol = GlusterVolume::start("smoke_stat");
    let path = vol.mount().join("f");
    let before = SystemTime::now();
    let mut f = File::create(&path).unwrap();
    f.write_all(&vec![7u8; 3 * MIB + 5]).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let after = SystemTime::now();
    let m = std::fs::metadata(&path).unwrap();
    assert_eq!(m.len(), (3 * MIB + 5) as u64);
    let mtime = m.modified().unwrap();
    assert!(
        mtime >= before - Duration::from_secs(2) && mtime <= after + Duration::from_secs(2),
        "mtime {mtime:?} not between {before:?} and {after:?}"
    );

    // An explicit mtime (with nanoseconds) is stored and shown.
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let times = [
        libc::timespec {
            tv_sec: 1_500_000_000,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: 1_600_000_000,
            tv_nsec: 123_456_789,
        },
    ];
    // SAFETY: valid NUL-terminated path and a two-element timespec array.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) };
    assert_eq!(r, 0, "utimensat: {}", std::io::Error::last_os_error());
    let m = std::fs::metadata(&path).unwrap();
    assert_eq!(m.mtime(), 1_600_000_000);
    assert_eq!(m.mtime_nsec(), 123_456_789);
    assert_eq!(m.atime(), 1_500_000_000);
    let copy = &brick_copies(&vol, "f")[0];
    assert_eq!(std::fs::metadata(copy).unwrap().mtime(), 1_600_000_000);

    // Truncation and a write past the end change the size; the write moves mtime forward.
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(1000)
        .unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 1000);
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(b"tail", 2 * MIB as u64).unwrap();
    drop(f);
    let m = std::fs::metadata(&path).unwrap();
    assert_eq!(m.len(), 2 * MIB as u64 + 4);
    let secs = m
        .modified()
        .unwrap()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(secs > 1_600_000_000, "mtime did not move: {secs}");
    let data = std::fs::read(&path).unwrap();
    assert!(data[..1000].iter().all(|&b| b == 7));
    assert!(data[1000..2 * MIB].iter().all(|&b| b == 0));
    assert_eq!(&data[2 * MIB..], b"tail");
}

#[test]
fn two_volumes_at_once() {
    let a = GlusterVolume::start("smoke_a");
    let b = GlusterVolume::start_with_bricks("smoke_b", 1);
    assert_ne!(a.name(), b.name());
    assert_ne!(a.mount(), b.mount());
    assert_eq!(b.brick_pids().len(), 1);
    let (pa, pb) = (a.brick_pids(), b.brick_pids());
    assert!(
        pa.iter().all(|p| !pb.contains(p)),
        "shared bricks: {pa:?} {pb:?}"
    );

    std::fs::write(a.mount().join("only-in-a"), b"A").unwrap();
    std::fs::write(b.mount().join("only-in-b"), b"B").unwrap();
    std::fs::create_dir(a.mount().join("dir")).unwrap();
    std::fs::write(a.mount().join("dir/x"), b"ax").unwrap();
    std::fs::create_dir(b.mount().join("dir")).unwrap();
    std::fs::write(b.mount().join("dir/x"), b"bx").unwrap();
    assert!(!b.mount().join("only-in-a").exists());
    assert!(!a.mount().join("only-in-b").exists());
    assert_eq!(std::fs::read(a.mount().join("dir/x")).unwrap(), b"ax");
    assert_eq!(std::fs::read(b.mount().join("dir/x")).unwrap(), b"bx");

    // Tearing one down leaves the other working.
    let a_mnt = a.mount().to_path_buf();
    drop(a);
    assert!(!a_mnt.exists());
    std::fs::write(b.mount().join("after"), b"still here").unwrap();
    assert_eq!(
        std::fs::read(b.mount().join("after")).unwrap(),
        b"still here"
    );
    assert_eq!(std::fs::read(b.mount().join("only-in-b")).unwrap(), b"B");
}

#[test]
fn frozen_bricks_hang_reads_until_thawed() {
    let vol = GlusterVolume::start("smoke_freeze");
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    let data = random_bytes(&mut rng, 2 * MIB);
    let path = vol.mount().join("cold");
    {
        let mut f = File::create(&path).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
    }
    // Sanity: an uncached read works while the bricks run.
    assert!(read_direct(&path, 0, 4096).unwrap() == data[..4096]);

    vol.freeze();
    for p in vol.brick_pids() {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap();
        let state = stat[stat.rfind(')').unwrap() + 1..]
            .trim_start()
            .chars()
            .next();
        assert_eq!(state, Some('T'), "brick {p} not stopped");
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let reader_path = path.clone();
    let reader = std::thread::spawn(move || {
        let t = Instant::now();
        let r = read_direct(&reader_path, MIB as u64, MIB);
        let _ = tx.send((r, t.elapsed()));
    });
    match rx.recv_timeout(Duration::from_secs(2)) {
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        Ok((r, took)) => {
            vol.thaw();
            panic!(
                "read of an uncached file completed in {took:?} with frozen bricks: {r:?}",
                r = r.map(|v| v.len())
            );
        }
        Err(e) => panic!("reader thread died: {e}"),
    }

    let thawed = Instant::now();
    vol.thaw();
    let (r, took) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("read did not complete within 30 s after thaw");
    let got = r.expect("read after thaw failed");
    assert!(got == data[MIB..], "bytes read after thaw differ");
    assert!(took >= Duration::from_secs(2), "read took only {took:?}");
    eprintln!("read completed {:?} after thaw", thawed.elapsed());
    reader.join().unwrap();

    // The volume is fully usable again.
    std::fs::write(vol.mount().join("after-thaw"), b"ok").unwrap();
    assert_eq!(
        std::fs::read(vol.mount().join("after-thaw")).unwrap(),
        b"ok"
    );
}

#[test]
fn frozen_bricks_fail_requests_after_the_ping_timeout() {
    let vol = GlusterVolume::start_with("smoke_ping", 1, &[("network.ping-timeout", "2")]);
    let path = vol.mount().join("f");
    std::fs::write(&path, vec![1u8; 256 * 1024]).unwrap();
    let private = vol.mount().join(format!(
        ".meta/graphs/active/{}-client-0/private",
        vol.name()
    ));
    let private = std::fs::read_to_string(&private).unwrap();
    assert!(private.contains("ping_timeout = 2"), "{private}");

    vol.freeze();
    let t = Instant::now();
    let err = read_direct(&path, 0, 4096).expect_err("read from frozen bricks succeeded");
    let took = t.elapsed();
    vol.thaw();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN), "{err}");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(15),
        "failed after {took:?}"
    );
    // The client reconnects to the thawed brick (it retries every few seconds).
    let v = eddy_testkit::eventually::eventually("the client reconnects to the brick", || {
        read_direct(&path, 0, 4096).ok()
    });
    assert!(v.iter().all(|&b| b == 1));
    eprintln!(
        "frozen read failed after {took:?}; reconnected {:?} after thaw",
        t.elapsed() - took
    );
}
