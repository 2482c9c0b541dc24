//! The in-memory model the property tests compare Eddy with: random writes, truncates and
//! reads over a dozen small chunks, so that every case crosses chunk and daemon boundaries.

use proptest::prelude::*;

/// Chunk size of the deployments the property tests run on.
pub const CHUNK: u64 = 4096;

#[derive(Debug, Clone)]
pub enum Op {
    Write { offset: u64, len: usize, seed: u8 },
    Truncate { size: u64 },
    Read { offset: u64, len: usize },
}

pub fn op() -> impl Strategy<Value = Op> {
    let span = CHUNK * 12;
    prop_oneof![
        4 => (0..span, 1usize..(3 * CHUNK as usize), any::<u8>())
            .prop_map(|(offset, len, seed)| Op::Write { offset, len, seed }),
        1 => (0..span).prop_map(|size| Op::Truncate { size }),
        3 => (0..span, 0usize..(4 * CHUNK as usize)).prop_map(|(offset, len)| Op::Read { offset, len }),
    ]
}

/// The bytes a write of `seed` puts down.
pub fn bytes(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i * 7) as u8)).collect()
}

/// The file as the model sees it.
#[derive(Debug, Default)]
pub struct Model(pub Vec<u8>);

impl Model {
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let end = offset as usize + data.len();
        if self.0.len() < end {
            self.0.resize(end, 0);
        }
        self.0[offset as usize..end].copy_from_slice(data);
    }

    pub fn truncate(&mut self, size: u64) {
        self.0.resize(size as usize, 0);
    }

    /// What a read of `len` bytes at `offset` must return.
    pub fn read(&self, offset: u64, len: usize) -> &[u8] {
        let start = (offset as usize).min(self.0.len());
        let end = (offset as usize + len).min(self.0.len());
        &self.0[start..end]
    }
}
