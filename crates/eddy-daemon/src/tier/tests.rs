//! The tier's own tests: fetches, writes merged with the backend, write-back, eviction,
//! capacity, over stores opened as `eddyd` opens them.

use super::*;
use eddy_config::Link;
use fjall::Database;
use std::sync::atomic::AtomicBool;

const CS: u64 = 4096;

struct Fixture {
    dir: tempfile::TempDir,
    config: Config,
    db: Database,
    chunks: ChunkStore,
    tier: Tier,
}

fn fixture(capacity: u64) -> Fixture {
    fixture_with(capacity, CS)
}

fn fixture_with(capacity: u64, chunk_size: u64) -> Fixture {
    fixture_in(tempfile::tempdir().unwrap(), capacity, chunk_size)
}

fn fixture_in(dir: tempfile::TempDir, capacity: u64, chunk_size: u64) -> Fixture {
    std::fs::create_dir(dir.path().join("pfs")).unwrap();
    let config = Config {
        chunk_size,
        cache_capacity_bytes: capacity,
        links: vec![Link {
            prefix: "/".into(),
            backend: dir.path().join("pfs"),
        }],
        ..Config::default()
    };
    let (db, chunks, tier) = open(dir.path(), &config);
    Fixture {
        dir,
        config,
        db,
        chunks,
        tier,
    }
}

fn open(root: &Path, config: &Config) -> (Database, ChunkStore, Tier) {
    let db = Database::builder(root.join("meta")).open().unwrap();
    let ks = crate::meta::LazyKeyspace::open(&db, TIER_KEYSPACE).unwrap();
    let cks = crate::meta::LazyKeyspace::open(&db, crate::chunks::CHUNK_KEYSPACE).unwrap();
    let chunks = ChunkStore::open(&root.join("chunks"), cks, config.chunk_size, 1 << 20).unwrap();
    let tier = Tier::open(ks, Backend::new(config), config, root, &chunks).unwrap();
    (db, chunks, tier)
}

/// The stores at `root` as `eddyd` opens them, through the metadata store: for the tests of
/// the tier's modules that work on records (write-through, moves).
pub(super) fn open_with_meta(
    root: &Path,
    config: &Config,
) -> (crate::meta::MetaStore, ChunkStore, Tier) {
    let meta = crate::meta::MetaStore::open(&root.join("meta"), config).unwrap();
    let chunks = ChunkStore::open(
        &root.join("chunks"),
        meta.chunk_records().unwrap(),
        config.chunk_size,
        1 << 20,
    )
    .unwrap();
    let tier = Tier::open(
        meta.tier_records(),
        Backend::new(config),
        config,
        root,
        &chunks,
    )
    .unwrap();
    (meta, chunks, tier)
}

fn backing(path: &str, size: u64) -> Backing {
    Backing {
        path: path.into(),
        size,
    }
}

fn piece(chunk: u64, offset: u32, len: u32) -> Piece {
    Piece { chunk, offset, len }
}

fn bytes(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn a_miss_is_fetched_once_and_kept() {
    let f = fixture(0);
    let data = bytes(1, 3 * CS as usize + 100);
    std::fs::write(f.dir.path().join("pfs/a"), &data).unwrap();
    let b = backing("/a", data.len() as u64);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let got = f.tier.read(&f.chunks, 7, &[piece(1, 10, 100)], &b).unwrap();
                assert_eq!(got, &data[CS as usize + 10..CS as usize + 110]);
            });
        }
    });
    assert_eq!(
        f.tier.status(&f.chunks).fetches,
        1,
        "four readers, one fetch"
    );
    // The last chunk is short: bytes past the backend's end read as zeros.
    let tail = f.tier.read(&f.chunks, 7, &[piece(3, 0, 200)], &b).unwrap();
    assert_eq!(&tail[..100], &data[3 * CS as usize..]);
    assert_eq!(&tail[100..], &[0u8; 100]);
    let st = f.tier.status(&f.chunks);
    assert_eq!((st.fetches, st.cached_chunks, st.dirty_bytes), (2, 2, 0));
    assert_eq!(st.backend_read_bytes, CS + 100);
}

/// A tmpfs of its own, unmounted on drop.
struct SmallDevice(tempfile::TempDir);

impl SmallDevice {
    fn new(size: &str) -> SmallDevice {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount(8) runs");
        assert!(status.success(), "this test mounts a tmpfs: run it as root");
        SmallDevice(dir)
    }

    fn free(&self) -> u64 {
        let v = nix::sys::statvfs::statvfs(self.0.path()).unwrap();
        v.blocks_available() * v.fragment_size()
    }

    /// Leaves about `left` bytes free with a file that is not Eddy's.
    fn fill_to(&self, name: &str, left: u64) {
        let n = self.free().saturating_sub(left);
        std::fs::write(self.0.path().join(name), vec![7u8; n as usize]).unwrap();
    }
}

impl Drop for SmallDevice {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}

#[test]
fn readers_beside_a_fetch_never_see_a_chunk_half_filled() {
    // A fetch counts itself once it has read the backend, then fills the chunk file:
    // readers aim at the chunk whose file is being filled (large chunks widen that
    // window). They must wait for the fetch rather than read zeros.
    const BIG: u64 = 4 << 20;
    const MIB: u64 = 1 << 20;
    const N: u64 = 12;
    let f = fixture_with(0, BIG);
    let data = bytes(9, (N * BIG) as usize);
    std::fs::write(f.dir.path().join("pfs/big"), &data).unwrap();
    let b = backing("/big", data.len() as u64);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for k in 0..N {
                f.tier.prefetch(&f.chunks, 3, &[k], &b, false).unwrap();
            }
            done.store(true, Ordering::SeqCst);
        });
        for _ in 0..2 {
            s.spawn(|| {
                while !done.load(Ordering::SeqCst) {
                    let Some(k) = f.tier.fetches.load(Ordering::SeqCst).checked_sub(1) else {
                        continue;
                    };
                    // The chunk's last MiB: what a half-filled chunk file lacks.
                    let tail = piece(k, (BIG - MIB) as u32, MIB as u32);
                    let got = f.tier.read(&f.chunks, 3, &[tail], &b).unwrap();
                    let at = ((k + 1) * BIG - MIB) as usize;
                    assert!(got == data[at..at + MIB as usize], "chunk {k}: wrong bytes");
                }
            });
        }
    });
    assert_eq!(
        f.tier.status(&f.chunks).fetches,
        N,
        "each chunk fetched once"
    );
}

#[test]
fn partial_writes_merge_with_the_backend_and_flush_back() {
    let f = fixture(0);
    let data = bytes(2, 2 * CS as usize);
    let path = f.dir.path().join("pfs/b");
    std::fs::write(&path, &data).unwrap();
    let b = backing("/b", data.len() as u64);
    f.tier
        .write(&f.chunks, 9, &[piece(0, 100, 4)], b"WXYZ", &b)
        .unwrap();
    // Beyond the backend copy: no fetch, a hole before the bytes.
    f.tier
        .write(&f.chunks, 9, &[piece(3, 10, 2)], b"ok", &b)
        .unwrap();
    let st = f.tier.status(&f.chunks);
    assert_eq!(st.fetches, 1);
    assert_eq!(st.dirty_bytes, CS + 12);
    let (outcomes, more) = f.tier.flush_dirty(&f.chunks, "/", None, 10);
    assert!(!more);
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].error, None);
    let mut want = data.clone();
    want[100..104].copy_from_slice(b"WXYZ");
    want.resize(3 * CS as usize + 10, 0);
    want.extend_from_slice(b"ok");
    assert_eq!(std::fs::read(&path).unwrap(), want);
    assert_eq!(f.tier.status(&f.chunks).dirty_bytes, 0);
    // Nothing left to flush.
    assert!(f.tier.flush_dirty(&f.chunks, "/", None, 10).0.is_empty());
}

#[test]
fn dirty_state_survives_a_reopen_and_follows_a_rename() {
    let f = fixture(0);
    let b = backing("/d/new", 0);
    f.tier
        .write(&f.chunks, 5, &[piece(0, 0, 5)], b"hello", &b)
        .unwrap();
    f.tier.rebind("/d", "/e").unwrap();
    f.db.persist(fjall::PersistMode::SyncAll).unwrap();
    let root = f.dir.path().to_owned();
    let config = f.config.clone();
    drop((f.tier, f.chunks, f.db));
    let (_db, chunks, tier) = open(&root, &config);
    assert_eq!(tier.status(&chunks).dirty_bytes, 5);
    std::fs::create_dir(root.join("pfs/e")).unwrap();
    let (outcomes, _) = tier.flush_dirty(&chunks, "/", None, 10);
    assert_eq!(outcomes[0].path, "/e/new");
    assert_eq!(std::fs::read(root.join("pfs/e/new")).unwrap(), b"hello");
}

#[test]
fn eviction_keeps_pinned_and_writes_dirty_back_first() {
    let f = fixture(8 * CS);
    let data = bytes(3, 6 * CS as usize);
    std::fs::write(f.dir.path().join("pfs/pinned"), &data).unwrap();
    let pb = backing("/pinned", data.len() as u64);
    f.tier
        .prefetch(&f.chunks, 1, &[0, 1, 2, 3], &pb, true)
        .unwrap();
    // Clean reads beyond the capacity: the least recently used go, the pinned stay.
    let big = bytes(5, 12 * CS as usize);
    std::fs::write(f.dir.path().join("pfs/big"), &big).unwrap();
    let bb = backing("/big", big.len() as u64);
    for k in 0..12 {
        let got = f
            .tier
            .read(&f.chunks, 3, &[piece(k, 0, CS as u32)], &bb)
            .unwrap();
        assert_eq!(got, &big[(k * CS) as usize..((k + 1) * CS) as usize]);
    }
    let st = f.tier.status(&f.chunks);
    assert!(st.evictions > 0);
    assert_eq!(st.pinned_bytes, 4 * CS, "pinned chunks stay");
    // Dirty data of a new file beyond the capacity: written back, then evicted.
    let nb = backing("/new", 0);
    let fresh = bytes(4, 16 * CS as usize);
    for k in 0..16u64 {
        let part = &fresh[(k * CS) as usize..((k + 1) * CS) as usize];
        f.tier
            .write(&f.chunks, 2, &[piece(k, 0, CS as u32)], part, &nb)
            .unwrap();
    }
    assert!(
        f.chunks.usage().0 <= 8 * CS,
        "use {} above the capacity",
        f.chunks.usage().0
    );
    assert_eq!(f.tier.status(&f.chunks).pinned_bytes, 4 * CS);
    // Evicted dirty chunks are in the backend, and fetched again on a miss although the
    // client thinks the backend copy is empty.
    let in_backend = std::fs::read(f.dir.path().join("pfs/new")).unwrap();
    assert!(in_backend.len() >= 8 * CS as usize);
    for k in 0..16u64 {
        let got = f
            .tier
            .read(&f.chunks, 2, &[piece(k, 0, CS as u32)], &nb)
            .unwrap();
        assert_eq!(
            got,
            &fresh[(k * CS) as usize..((k + 1) * CS) as usize],
            "chunk {k}"
        );
    }
    assert_eq!(f.tier.unpin("/").unwrap(), 4);
}

#[test]
fn a_truncate_forgets_what_lies_beyond() {
    let f = fixture(0);
    let b = backing("/t", 0);
    let data = bytes(6, 3 * CS as usize);
    f.tier
        .write(
            &f.chunks,
            4,
            &[
                piece(0, 0, CS as u32),
                piece(1, 0, CS as u32),
                piece(2, 0, CS as u32),
            ],
            &data,
            &b,
        )
        .unwrap();
    f.chunks.truncate(4, CS + 10).unwrap();
    f.tier.truncated(4, CS + 10).unwrap();
    let st = f.tier.status(&f.chunks);
    assert_eq!((st.cached_chunks, st.dirty_bytes), (2, CS + 10));
    f.tier.forget(4).unwrap();
    assert_eq!(f.tier.status(&f.chunks).cached_chunks, 0);
}

/// Tests that need root: `make test` runs them, `make test-fast` skips them.
mod needs_root {
    use super::*;

    #[test]
    fn an_unset_capacity_is_the_room_to_grow_not_the_devices_use() {
        // A shared device 90 % full of others' files: what the daemon fetches stays until
        // the free room itself runs short; then it evicts its own chunks, and only those.
        let dev = SmallDevice::new("32m");
        let f = fixture_in(tempfile::tempdir_in(dev.0.path()).unwrap(), 0, CS);
        let data = bytes(3, 64 * CS as usize);
        std::fs::write(f.dir.path().join("pfs/a"), &data).unwrap();
        let b = backing("/a", data.len() as u64);
        dev.fill_to("others-1", 3 << 20);
        for k in 0..32 {
            let got = f
                .tier
                .read(&f.chunks, 5, &[piece(k, 0, CS as u32)], &b)
                .unwrap();
            assert_eq!(got, &data[(k * CS) as usize..((k + 1) * CS) as usize]);
        }
        let st = f.tier.status(&f.chunks);
        assert_eq!((st.cached_chunks, st.evictions), (32, 0), "{st:?}");
        let held = f.chunks.usage().0;
        assert_eq!(held, 32 * CS);
        assert!(st.capacity_bytes >= held + dev.free() / 2, "{st:?}");
        // Others take the room: held is now far above 90 % of held + free.
        dev.fill_to("others-2", 2 * CS);
        let got = f
            .tier
            .read(&f.chunks, 5, &[piece(40, 0, CS as u32)], &b)
            .unwrap();
        assert_eq!(got, &data[(40 * CS) as usize..(41 * CS) as usize]);
        let st = f.tier.status(&f.chunks);
        assert!(st.evictions > 0, "{st:?}");
        assert!(st.cached_bytes <= st.low_watermark_bytes, "{st:?}");
        assert!(dev.0.path().join("others-2").exists());
        // What was evicted comes back from the backend, intact.
        let got = f
            .tier
            .read(&f.chunks, 5, &[piece(0, 0, CS as u32)], &b)
            .unwrap();
        assert_eq!(got, &data[..CS as usize]);
        drop(f);
    }

    #[test]
    fn a_full_device_below_the_configured_capacity_still_gets_room() {
        // The configured capacity is more than the device has: when the device fills,
        // making room evicts down to the low watermark of the room there is.
        let dev = SmallDevice::new("16m");
        let f = fixture_in(tempfile::tempdir_in(dev.0.path()).unwrap(), 1 << 30, CS);
        let data = bytes(4, 64 * CS as usize);
        std::fs::write(f.dir.path().join("pfs/a"), &data).unwrap();
        let b = backing("/a", data.len() as u64);
        for k in 0..64 {
            f.tier
                .read(&f.chunks, 6, &[piece(k, 0, CS as u32)], &b)
                .unwrap();
        }
        assert_eq!(f.tier.status(&f.chunks).evictions, 0);
        dev.fill_to("others", 0);
        let held = f.chunks.usage().0;
        assert!(f.tier.make_room(&f.chunks).unwrap() > 0);
        let room = f.tier.room(f.chunks.usage().0);
        assert!(
            f.chunks.usage().0 <= room * 3 / 4,
            "held {held}, room {room}"
        );
        let got = f
            .tier
            .read(&f.chunks, 6, &[piece(0, 0, CS as u32)], &b)
            .unwrap();
        assert_eq!(got, &data[..CS as usize]);
        drop(f);
    }
}
