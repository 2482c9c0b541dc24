//! The fuzz targets, bounded: a fixed count of seeded inputs (the same every run: a failure
//! reproduces) and every kept input of the corpus. `make fuzz` runs the same targets under
//! libFuzzer, a million inputs each.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

use eddy_fuzz::inputs::{corpus, seeded};

/// Seeded inputs per target in `make test`.
const FRAME_INPUTS: usize = 20_000;
const REQUEST_INPUTS: usize = 5_000;

#[test]
fn frames_seeded_inputs() {
    for data in seeded(0xedd1, FRAME_INPUTS, 2048) {
        eddy_fuzz::frames(&data);
    }
}

#[test]
fn frames_kept_inputs() {
    let kept = corpus("frames").expect("read corpus/frames");
    assert!(!kept.is_empty(), "corpus/frames is empty");
    for (path, data) in kept {
        eprintln!("{}", path.display());
        eddy_fuzz::frames(&data);
    }
}

#[test]
fn requests_seeded_inputs() {
    let mut target = eddy_fuzz::Requests::open().expect("open the stores");
    for data in seeded(0xedd2, REQUEST_INPUTS, 1024) {
        target.run(&data);
    }
    assert_eq!(target.runs(), REQUEST_INPUTS as u64);
}

#[test]
fn requests_kept_inputs() {
    let kept = corpus("requests").expect("read corpus/requests");
    assert!(!kept.is_empty(), "corpus/requests is empty");
    let mut target = eddy_fuzz::Requests::open().expect("open the stores");
    for (path, data) in kept {
        eprintln!("{}", path.display());
        target.run(&data);
    }
}
