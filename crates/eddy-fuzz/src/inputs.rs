//! Inputs for runs of a fixed count: seeded random bytes (the same every run) and the kept
//! corpus (inputs libFuzzer found interesting, and every input that once found a bug).

use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};

/// `n` inputs of up to `max_len` bytes from `seed`: the same on every machine and run.
pub fn seeded(seed: u64, n: usize, max_len: usize) -> impl Iterator<Item = Vec<u8>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(move |_| {
        let len = rng.gen_range(0..=max_len);
        (0..len).map(|_| rng.gen()).collect()
    })
}

/// The kept inputs of a target: `corpus/<target>/` of this crate, sorted by name.
pub fn corpus(target: &str) -> std::io::Result<Vec<(PathBuf, Vec<u8>)>> {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| p.is_file());
    files.sort();
    files
        .into_iter()
        .map(|p| std::fs::read(&p).map(|data| (p, data)))
        .collect()
}

/// Where a target's corpus is kept.
pub fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}
