//! Tests of the chunk store: one data file per file, chunks at their offsets, holes, deletion, bad pieces.

use super::*;
use crate::chunks::fixture::*;

#[test]
fn one_data_file_per_file_with_chunks_at_their_offsets_and_holes_as_zeros() {
    let f = open(tempfile::tempdir().unwrap());
    f.store.write(7, &[p(3, 10, 4)], b"abcd").unwrap();
    f.store.write(7, &[p(1, 0, 2)], b"xy").unwrap();
    let entries: Vec<_> = std::fs::read_dir(f.dir.path().join("chunks").join(subdir_of(7)))
        .unwrap()
        .collect();
    assert_eq!(
        entries.len(),
        2,
        "one data file and its sum file, no directory per file"
    );
    let raw = std::fs::read(data_file(&f, 7)).unwrap();
    assert_eq!(&raw[(3 * CS + 10) as usize..], b"abcd");
    assert_eq!(&raw[CS as usize..CS as usize + 2], b"xy");
    assert_eq!(f.store.usage(), (14 + 2, 2));
    // Holes (chunk 0, 2, the start of chunk 3) and bytes past a chunk's end: zeros.
    let got = f
        .store
        .read(7, &[p(0, 0, 8), p(1, 0, 4), p(2, 0, 4), p(3, 8, 8)])
        .unwrap();
    let want = [
        vec![0u8; 8],
        b"xy\0\0".to_vec(),
        vec![0u8; 4],
        b"\0\0abcd\0\0".to_vec(),
    ]
    .concat();
    assert_eq!(got, want);
    // A file never written reads as zeros.
    assert_eq!(f.store.read(8, &[p(0, 0, 5)]).unwrap(), vec![0u8; 5]);
    // Presence and length as the tier sees them.
    let _g = f.store.lock(7, 2);
    assert!(!f.store.exists_locked(7, 2).unwrap());
    assert_eq!(f.store.len_locked(7, 3).unwrap(), Some(14));
    assert_eq!(
        f.store.read_whole_locked(7, 3).unwrap().unwrap(),
        [vec![0u8; 10], b"abcd".to_vec()].concat()
    );
}

#[test]
fn deleting_one_chunk_leaves_a_hole_and_the_others() {
    let f = open(tempfile::tempdir().unwrap());
    f.store
        .write(4, &[p(0, 0, 4096), p(1, 0, 4096), p(2, 0, 1)], &[9u8; 8193])
        .unwrap();
    let freed = {
        let _g = f.store.lock(4, 1);
        f.store.delete_locked(4, 1).unwrap()
    };
    assert_eq!(freed, 4096);
    assert_eq!(f.store.usage(), (4097, 2));
    let got = f
        .store
        .read(4, &[p(0, 4090, 6), p(1, 0, 4), p(2, 0, 2)])
        .unwrap();
    assert_eq!(got, [vec![9u8; 6], vec![0u8; 4], vec![9u8, 0]].concat());
    // Truncating inside the first chunk drops everything after it.
    f.store.truncate(4, 100).unwrap();
    assert_eq!(f.store.usage(), (100, 1));
    assert_eq!(std::fs::metadata(data_file(&f, 4)).unwrap().len(), 100);
    // A growing truncate keeps everything.
    f.store.truncate(4, 1 << 20).unwrap();
    assert_eq!(f.store.usage(), (100, 1));
}

#[test]
fn bad_pieces_are_errors_not_panics() {
    let f = open(tempfile::tempdir().unwrap());
    assert!(f.store.write(1, &[p(0, 4000, 200)], &[0u8; 200]).is_err());
    assert!(f.store.write(1, &[p(u64::MAX, 0, 1)], &[0u8; 1]).is_err());
    assert!(f.store.read(1, &[p(u64::MAX / 2, 0, 1)]).is_err());
    assert!(f.store.write(1, &[p(0, 0, 2)], &[0u8; 1]).is_err());
    assert_eq!(f.store.usage(), (0, 0));
}

/// A data file whose chunk map was never stored (a passthrough writer's on a device that
/// filled under the store, before the daemon adopted it; decision 0060) is removed too:
/// before, a file with no chunk recorded was taken as having no data file, which stayed until
/// the daemon's next start.
#[test]
fn a_data_file_with_no_chunk_recorded_is_removed() {
    let f = open(tempfile::tempdir().unwrap());
    let path = data_file(&f, 7);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, vec![1u8; 3 * CS as usize]).unwrap();
    f.store.remove(7).unwrap();
    assert!(!path.exists(), "the data file stayed");
    // Removing a file that has nothing here is fine.
    f.store.remove(8).unwrap();
}
