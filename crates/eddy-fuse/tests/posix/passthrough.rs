//! FUSE passthrough (decision 0049): a mount run as root hands the kernel the data file of a
//! file whose chunks all lie on one daemon of its host (placement `local`; the daemons and
//! the mount count as host `localhost`), and the kernel reads and writes it. Seen from the
//! daemons: no `write` request and direct reports that carry no bytes (the mount never saw
//! them; each report asks the daemon to take the whole file again); with the setting off,
//! the mount's client writes directly and its reports carry every byte. A client elsewhere
//! reads what the kernel wrote through the daemons, which verify every block; an fsync'd
//! file survives a kill -9 of its daemon; a lock taken through the mount turns it off for
//! the file's later opens.

use eddy_client::Client;
use eddy_config::{Config, PlacementMode};
use eddy_proto::req;
use eddy_testkit::{pattern, read_all, Mounted};

fn config(passthrough: bool) -> Config {
    Config {
        placement: PlacementMode::Local,
        placement_host: Some("localhost".into()),
        fuse_passthrough: passthrough,
        ..eddy_testkit::test_config()
    }
}

/// A client of the deployment that is not on the daemons' host: everything goes by RPC.
async fn remote_client(m: &Mounted) -> Client {
    let mut dep = m.cluster.dep.clone();
    dep.config.placement_host = Some("elsewhere".into());
    Client::connect(dep).await.unwrap()
}

/// Per op, summed over the daemons: (requests, bytes carried).
async fn ops(c: &Client) -> std::collections::BTreeMap<String, (u64, u64)> {
    let mut out = std::collections::BTreeMap::new();
    for (_, s) in c.rpc().all(|| req::Stats).await {
        for o in s.unwrap().ops {
            let e = out.entry(o.op).or_insert((0, 0));
            e.0 += o.count;
            e.1 += o.bytes;
        }
    }
    out
}

fn op(map: &std::collections::BTreeMap<String, (u64, u64)>, name: &str) -> (u64, u64) {
    map.get(name).copied().unwrap_or((0, 0))
}

/// The daemons' counts once the bytes of `name` reach `bytes`, or after 20 s: the kernel
/// sends RELEASE, with the last report, after close(2) has returned.
fn ops_when(
    rt: &tokio::runtime::Runtime,
    c: &Client,
    name: &str,
    bytes: u64,
) -> std::collections::BTreeMap<String, (u64, u64)> {
    // The counts then, or the last ones after the bound (the caller's assertion says what).
    let mut now = rt.block_on(ops(c));
    eddy_testkit::eventually::poll_for(std::time::Duration::from_secs(20), || {
        now = rt.block_on(ops(c));
        (op(&now, name).1 >= bytes).then_some(())
    });
    now
}

/// `got` is `want`, or where they first differ is said (not the bytes).
#[track_caller]
fn same(got: &[u8], want: &[u8]) {
    let first = got.iter().zip(want).position(|(a, b)| a != b);
    assert!(
        got.len() == want.len() && first.is_none(),
        "{} bytes, {} wanted; first difference at {first:?}",
        got.len(),
        want.len()
    );
}

fn write_file(m: &Mounted, name: &str, data: &[u8]) {
    std::fs::write(m.path(name), data).unwrap();
}

/// Writes `data` at `at` into an existing file through the mount and fsyncs it.
fn patch_file(m: &Mounted, name: &str, at: u64, data: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(m.path(name))
        .unwrap();
    f.write_all_at(data, at).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn the_kernel_writes_the_data_file_and_a_reader_elsewhere_gets_verified_bytes() {
    let m = Mounted::start_with(3, config(true));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let far = rt.block_on(remote_client(&m));
    let before = rt.block_on(ops(&far));
    let data = pattern(3, 0, 5_000_000 + 777);
    write_file(&m, "f", &data);
    let mut want = data.clone();
    let patch = pattern(4, 0, 300_001);
    patch_file(&m, "f", 1_234_567, &patch);
    want[1_234_567..1_234_567 + patch.len()].copy_from_slice(&patch);
    // Read back through the mount (the kernel reads the data file).
    same(&std::fs::read(m.path("f")).unwrap(), &want);
    assert_eq!(
        std::fs::metadata(m.path("f")).unwrap().len(),
        want.len() as u64
    );
    let after = rt.block_on(ops(&far));
    let delta = |name: &str| {
        let (a, b) = (op(&after, name), op(&before, name));
        (a.0 - b.0, a.1 - b.1)
    };
    assert_eq!(delta("write").0, 0, "{after:?}");
    assert_eq!(delta("read").0, 0, "{after:?}");
    assert!(delta("direct_open").0 >= 2, "{after:?}");
    let commits = delta("direct_commit");
    assert!(commits.0 >= 2, "fsync and release report: {after:?}");
    // The mount never saw the bytes: the daemon counts the growth of the chunks it
    // recorded from the data file (to the page).
    let len = want.len() as u64;
    assert!(
        (len..len + 4096).contains(&commits.1),
        "counted as the chunks' growth: {after:?}"
    );

    // Elsewhere, through the daemons (every block verified; the size was published).
    rt.block_on(async {
        same(&read_all(&far, "/f").await, &want);
        assert!(op(&ops(&far).await, "read").0 > 0);
        crate::scrub_clean(&far).await;
        for d in far.rpc().ids().to_vec() {
            let s = far.rpc().call(d, req::Status).await.unwrap();
            assert_eq!(s.checksum_errors, 0, "daemon {d}");
        }
    });
}

#[test]
fn with_the_setting_off_the_mount_writes_the_bytes_itself() {
    let m = Mounted::start_with(3, config(false));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let far = rt.block_on(remote_client(&m));
    let data = pattern(5, 0, 2_000_000);
    write_file(&m, "f", &data);
    let after = ops_when(&rt, &far, "direct_commit", data.len() as u64);
    // Direct I/O by the mount's client: the reports carry every byte.
    assert_eq!(
        op(&after, "direct_commit").1,
        data.len() as u64,
        "{after:?}"
    );
    same(&rt.block_on(read_all(&far, "/f")), &data);
}

#[test]
fn an_fsynced_file_survives_a_kill_of_its_daemon() {
    let mut m = Mounted::start_with(3, config(true));
    let data = pattern(6, 0, 3_000_000);
    {
        use std::io::Write;
        let mut f = std::fs::File::create(m.path("k")).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let c = rt.block_on(m.cluster.client());
        let id = rt.block_on(c.lookup("/k")).unwrap().file_id;
        let home = eddy_placement::home_of(id).expect("placed by locality") as usize;
        // Killed while the mount holds the file open, the data file handed to the kernel.
        m.cluster.kill(home);
        m.cluster.restart(home);
        drop(f);
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let far = rt.block_on(remote_client(&m));
    rt.block_on(async {
        same(&read_all(&far, "/k").await, &data);
        crate::scrub_clean(&far).await;
    });
    same(&std::fs::read(m.path("k")).unwrap(), &data);
}

#[test]
fn a_lock_turns_passthrough_off_for_later_opens() {
    eddy_testkit::require::programs(&["flock"], "util-linux");
    let m = Mounted::start_with(3, config(true));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let far = rt.block_on(remote_client(&m));
    write_file(&m, "l", &pattern(7, 0, 1_000_000));
    // Passthrough before the lock: its release (which the kernel sends after close(2)
    // returned) reports the file whole, counted as the growth of the chunks (to the page).
    let mut before = op(&rt.block_on(ops(&far)), "direct_commit");
    eddy_testkit::eventually::poll_for(std::time::Duration::from_secs(20), || {
        before = op(&rt.block_on(ops(&far)), "direct_commit");
        (before.1 > 0).then_some(())
    });
    assert!(
        (1_000_000..1_004_096).contains(&before.1),
        "passthrough before the lock: {before:?}"
    );
    m.ok("flock l true");
    let patch = pattern(8, 0, 100_000);
    patch_file(&m, "l", 10, &patch);
    let after = op(
        &ops_when(&rt, &far, "direct_commit", before.1 + patch.len() as u64),
        "direct_commit",
    );
    assert_eq!(
        after.1 - before.1,
        patch.len() as u64,
        "after a lock the mount writes the bytes itself"
    );
    let mut want = pattern(7, 0, 1_000_000);
    want[10..10 + patch.len()].copy_from_slice(&patch);
    same(&rt.block_on(read_all(&far, "/l")), &want);
    same(&std::fs::read(m.path("l")).unwrap(), &want);
}

/// With two copies the kernel would write one of them: no passthrough; the mount writes
/// every copy itself (directly, the daemons being on this host), and the daemons count the
/// bytes of both copies as reported.
#[test]
fn with_two_copies_the_mount_writes_every_copy_itself() {
    let m = Mounted::start_with(
        3,
        Config {
            replicas: 2,
            ..config(true)
        },
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let far = rt.block_on(remote_client(&m));
    let data = pattern(9, 0, 700_000);
    write_file(&m, "two", &data);
    let c = op(
        &ops_when(&rt, &far, "direct_commit", 2 * data.len() as u64),
        "direct_commit",
    );
    assert!(c.1 >= 2 * data.len() as u64, "{c:?}");
    same(&rt.block_on(read_all(&far, "/two")), &data);
}

/// A buffer aligned for O_DIRECT, filled with `byte`.
fn aligned(len: usize, byte: u8) -> (*mut u8, std::alloc::Layout) {
    let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
    // SAFETY: a non-zero size; checked for null.
    let p = unsafe { std::alloc::alloc(layout) };
    assert!(!p.is_null());
    // SAFETY: `len` bytes just allocated.
    unsafe { std::ptr::write_bytes(p, byte, len) };
    (p, layout)
}

/// Decision 0059 (Not done, now done): one open of a passed-through file maps it shared and
/// writes the mapping while another writes it with O_DIRECT. The kernel would write the
/// O_DIRECT one with direct I/O into the data file, whose page cache it then cannot drop
/// (the other's dirty pages): the data file's file system records EIO and the mapping's
/// msync reports it, though no byte is damaged. The mount serves an O_DIRECT writer's
/// reads and writes itself (its mappings still pass through): msync and fsync succeed, and
/// the last bytes of each read back the same here and elsewhere.
#[test]
fn an_o_direct_writer_beside_a_shared_mapping_never_makes_msync_fail() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    const LEN: usize = 1 << 20;
    let m = Mounted::start_with(3, config(true));
    write_file(&m, "mixed", &pattern(5, 0, LEN));
    let open = |flags: i32| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(flags)
            .open(m.path("mixed"))
            .unwrap()
    };
    let plain = open(0);
    let direct = open(libc::O_DIRECT);
    // SAFETY: a shared mapping of LEN bytes of a file of LEN bytes; checked for failure,
    // unmapped below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            LEN,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            plain.as_raw_fd(),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
    let addr = map as usize;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // One thread dirties every page of the mapping, over and over.
    let mapper = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut round = 0u8;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round = round.wrapping_add(1);
                for page in (0..LEN).step_by(4096) {
                    // SAFETY: inside the mapping, which outlives this thread (joined).
                    unsafe { *((addr + page + 100) as *mut u8) = round };
                }
            }
        })
    };
    // Meanwhile O_DIRECT writes over the same pages.
    let (buf, layout) = aligned(64 << 10, 0xd1);
    // SAFETY: `layout.size()` bytes allocated above.
    let bytes = unsafe { std::slice::from_raw_parts(buf, layout.size()) };
    for i in 0..2000u64 {
        let at = (i * 7919 % 16) * (64 << 10);
        direct.write_all_at(bytes, at).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    mapper.join().unwrap();
    // The last of each: an O_DIRECT block at 0, a mapped byte in the last page.
    direct.write_all_at(bytes, 0).unwrap();
    // SAFETY: inside the mapping.
    unsafe { *((addr + LEN - 1) as *mut u8) = 0x5a };
    // SAFETY: our own mapping.
    let synced = unsafe { libc::msync(map, LEN, libc::MS_SYNC) };
    let msync_err = std::io::Error::last_os_error();
    // SAFETY: our own mapping, unmapped once.
    unsafe { libc::munmap(map, LEN) };
    assert_eq!(synced, 0, "msync: {msync_err}");
    plain.sync_all().expect("fsync of the mapped file");
    direct.sync_all().expect("fsync of the O_DIRECT file");
    drop((plain, direct));
    // SAFETY: allocated with this layout.
    unsafe { std::alloc::dealloc(buf, layout) };

    let here = std::fs::read(m.path("mixed")).unwrap();
    assert_eq!(here.len(), LEN);
    assert!(here[..64 << 10].iter().all(|b| *b == 0xd1));
    assert_eq!(here[LEN - 1], 0x5a);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let far = rt.block_on(remote_client(&m));
    rt.block_on(async {
        same(&read_all(&far, "/mixed").await, &here);
        crate::scrub_clean(&far).await;
    });
}
