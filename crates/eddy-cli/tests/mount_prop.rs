//! Property test through the FUSE mount: random writes, truncates and reads at random offsets
//! and sizes, spanning chunk and daemon boundaries, compared byte for byte with an in-memory
//! model.

mod common;

use common::Mounted;
use eddy_config::Config;
use proptest::prelude::*;
use std::os::unix::fs::FileExt;

const CHUNK: u64 = 4096;

#[derive(Debug, Clone)]
enum Op {
    Write { offset: u64, len: usize, seed: u8 },
    Truncate { size: u64 },
    Read { offset: u64, len: usize },
}

fn op() -> impl Strategy<Value = Op> {
    let span = CHUNK * 12;
    prop_oneof![
        4 => (0..span, 1usize..(3 * CHUNK as usize), any::<u8>()).prop_map(|(offset, len, seed)| Op::Write { offset, len, seed }),
        1 => (0..span).prop_map(|size| Op::Truncate { size }),
        3 => (0..span, 0usize..(4 * CHUNK as usize)).prop_map(|(offset, len)| Op::Read { offset, len }),
    ]
}

#[test]
fn random_io_through_the_mount_matches_the_model() {
    let Some(m) = Mounted::start_with(
        3,
        Config {
            chunk_size: CHUNK,
            ..common::test_config()
        },
    ) else {
        return;
    };
    let case = std::sync::atomic::AtomicU64::new(0);
    proptest!(ProptestConfig { cases: 40, ..ProptestConfig::default() }, |(ops in proptest::collection::vec(op(), 1..25))| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = m.path(&format!("case{n}"));
        let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
        let mut model: Vec<u8> = Vec::new();
        for op in &ops {
            match *op {
                Op::Write { offset, len, seed } => {
                    let data: Vec<u8> = (0..len).map(|i| seed.wrapping_add((i * 7) as u8)).collect();
                    f.write_all_at(&data, offset).unwrap();
                    let end = offset as usize + len;
                    if model.len() < end { model.resize(end, 0); }
                    model[offset as usize..end].copy_from_slice(&data);
                }
                Op::Truncate { size } => {
                    f.set_len(size).unwrap();
                    model.resize(size as usize, 0);
                }
                Op::Read { offset, len } => {
                    let mut buf = vec![0u8; len];
                    let mut got = 0;
                    while got < len {
                        let n = f.read_at(&mut buf[got..], offset + got as u64).unwrap();
                        if n == 0 { break; }
                        got += n;
                    }
                    let start = (offset as usize).min(model.len());
                    let end = (offset as usize + len).min(model.len());
                    prop_assert_eq!(&buf[..got], &model[start..end]);
                }
            }
        }
        drop(f);
        prop_assert!(std::fs::read(&path).unwrap() == model, "whole file differs from the model");
        std::fs::remove_file(&path).unwrap();
    });
}
