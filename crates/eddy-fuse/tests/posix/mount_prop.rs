//! Property test through the FUSE mount: random writes, truncates and reads at random offsets
//! and sizes, spanning chunk and daemon boundaries, compared byte for byte with an in-memory
//! model.

use eddy_config::Config;
use eddy_testkit::model::{bytes, op, Model, Op, CHUNK};
use eddy_testkit::Mounted;
use proptest::prelude::*;
use std::os::unix::fs::FileExt;

#[test]
fn random_io_through_the_mount_matches_the_model() {
    let m = Mounted::start_with(
        3,
        Config {
            chunk_size: CHUNK,
            ..eddy_testkit::test_config()
        },
    );
    let case = std::sync::atomic::AtomicU64::new(0);
    proptest!(ProptestConfig { cases: 40, ..ProptestConfig::default() }, |(ops in proptest::collection::vec(op(), 1..25))| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = m.path(&format!("case{n}"));
        let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
        let mut model = Model::default();
        for op in &ops {
            match *op {
                Op::Write { offset, len, seed } => {
                    let data = bytes(seed, len);
                    f.write_all_at(&data, offset).unwrap();
                    model.write(offset, &data);
                }
                Op::Truncate { size } => {
                    f.set_len(size).unwrap();
                    model.truncate(size);
                }
                Op::Read { offset, len } => {
                    let mut buf = vec![0u8; len];
                    let mut got = 0;
                    while got < len {
                        let n = f.read_at(&mut buf[got..], offset + got as u64).unwrap();
                        if n == 0 { break; }
                        got += n;
                    }
                    prop_assert_eq!(&buf[..got], model.read(offset, len));
                }
            }
        }
        drop(f);
        prop_assert!(std::fs::read(&path).unwrap() == model.0, "whole file differs from the model");
        std::fs::remove_file(&path).unwrap();
    });
}
