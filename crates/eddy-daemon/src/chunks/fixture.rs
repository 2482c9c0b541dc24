//! What the unit tests of the chunk store share: a store on a temporary directory, reopened
//! as a restarted daemon would, and small helpers.

use super::layout::{subdir_of, sum_path};
use super::{ChunkStore, CHUNK_KEYSPACE};
use eddy_proto::{FileId, Piece};
use fjall::Database;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The chunk size of the tests' stores.
pub(super) const CS: u64 = 4096;

/// A chunk store on a temporary directory, with the database holding its chunk map.
pub(super) struct Fixture {
    pub(super) dir: tempfile::TempDir,
    pub(super) db: Database,
    pub(super) store: ChunkStore,
}

pub(super) fn open(dir: tempfile::TempDir) -> Fixture {
    open_with(dir, 0)
}

pub(super) fn open_with(dir: tempfile::TempDir, capacity: u64) -> Fixture {
    let db = Database::builder(dir.path().join("meta")).open().unwrap();
    let ks = crate::meta::LazyKeyspace::open(&db, CHUNK_KEYSPACE).unwrap();
    let store = ChunkStore::open(&dir.path().join("chunks"), ks, CS, 1 << 20)
        .unwrap()
        .capacity(capacity);
    Fixture { dir, db, store }
}

/// Drops the store and its database (as a stopped daemon would) and opens them again.
pub(super) fn reopen(f: Fixture) -> Fixture {
    f.db.persist(fjall::PersistMode::SyncAll).unwrap();
    let Fixture { dir, db, store } = f;
    drop((store, db));
    open(dir)
}

pub(super) fn p(chunk: u64, offset: u32, len: u32) -> Piece {
    Piece { chunk, offset, len }
}

pub(super) fn data_file(f: &Fixture, id: FileId) -> PathBuf {
    f.dir
        .path()
        .join("chunks")
        .join(subdir_of(id))
        .join(format!("{id:032x}"))
}

pub(super) fn open_blocks(dir: tempfile::TempDir, block: Option<u64>) -> Fixture {
    let f = open(dir);
    let Fixture { dir, db, store } = f;
    Fixture {
        dir,
        db,
        store: store.checksums(block),
    }
}

pub(super) fn flip(path: &Path, at: u64) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x10;
    f.write_all_at(&b, at).unwrap();
}

pub(super) fn sums_exists(f: &Fixture, id: FileId) -> bool {
    sum_path(&data_file(f, id)).exists()
}

/// The pieces of `len` bytes at `at` in chunks of CS bytes.
pub(super) fn pieces_of(at: u64, len: usize) -> Vec<Piece> {
    let mut out = Vec::new();
    let (mut pos, end) = (at, at + len as u64);
    while pos < end {
        let k = pos / CS;
        let n = ((k + 1) * CS).min(end) - pos;
        out.push(p(k, (pos - k * CS) as u32, n as u32));
        pos += n;
    }
    out
}
