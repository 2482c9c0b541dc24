//! Property test: random writes, truncates and reads at random offsets and sizes, spanning
//! chunk and daemon boundaries, through the client library, compared byte for byte with an
//! in-memory model.

mod common;

use common::Cluster;
use eddy_client::{Client, Creds};
use eddy_config::Config;
use proptest::prelude::*;

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

fn bytes(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i * 7) as u8)).collect()
}

async fn run(c: &Client, path: &str, ops: &[Op]) -> Result<(), TestCaseError> {
    let me = Creds::root();
    let f = c.create(path, 0o644, true, me).await.unwrap();
    let mut model: Vec<u8> = Vec::new();
    for op in ops {
        match *op {
            Op::Write { offset, len, seed } => {
                let data = bytes(seed, len);
                c.pwrite(&f, offset, &data).await.unwrap();
                let end = offset as usize + len;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[offset as usize..end].copy_from_slice(&data);
            }
            Op::Truncate { size } => {
                c.ftruncate(&f, size).await.unwrap();
                model.resize(size as usize, 0);
            }
            Op::Read { offset, len } => {
                let got = c.pread(&f, offset, len).await.unwrap();
                let start = (offset as usize).min(model.len());
                let end = (offset as usize + len).min(model.len());
                prop_assert_eq!(&got[..], &model[start..end], "read {} at {}", len, offset);
            }
        }
    }
    prop_assert_eq!(c.stat(path).await.unwrap().size, model.len() as u64);
    // A fresh handle (another open) sees the same bytes.
    let g = c.open(path, libc::O_RDONLY, 0, me).await.unwrap();
    let all = c.pread(&g, 0, model.len() + 10).await.unwrap();
    prop_assert!(all == model, "whole-file contents differ from the model");
    c.unlink(path, me).await.unwrap();
    Ok(())
}

#[test]
fn random_io_matches_the_model() {
    let cl = Cluster::start_with(
        3,
        Config {
            chunk_size: CHUNK,
            ..common::test_config()
        },
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(cl.client());
    let case = std::sync::atomic::AtomicU64::new(0);
    proptest!(ProptestConfig { cases: 48, ..ProptestConfig::default() }, |(ops in proptest::collection::vec(op(), 1..25))| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = format!("/case{n}");
        rt.block_on(run(&c, &path, &ops))?;
    });
}
