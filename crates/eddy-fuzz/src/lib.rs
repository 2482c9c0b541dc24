//! eddy-fuzz: the fuzz targets of what a daemon does with bytes from the network, as plain
//! functions of a byte slice, and the bounded runs `make test` makes of them.
//!
//! - `frames`: frame decoding (the codec, fed in pieces), request, reply and handshake
//!   decoding, path normalisation and stored-record decoding, with round-trip checks;
//! - `Requests`: structure-aware requests (`arbitrary`, with paths from a small alphabet)
//!   and raw bincode executed by a real daemon's stores (fjall metadata, chunk files, a
//!   backend link) in a temporary directory, as one connection's requests are;
//! - `inputs`: seeded inputs and the kept corpus, for runs of a fixed count.
//!
//! The same functions run under libFuzzer (`fuzz_targets/`, `make fuzz`, coverage-guided)
//! and under `cargo test` (`tests/bounded.rs`: a fixed count of seeded inputs plus every
//! kept input). A target panics only on a bug: a panic in the code under test, a broken
//! invariant, or a request that does not finish within `Requests::DEADLINE`.
//!
//! This crate is a test harness: nothing in the daemon or the client depends on it.

#![forbid(unsafe_code)]

mod frames;
pub mod inputs;
mod requests;

pub use arbitrary;
pub use frames::frames;
pub use requests::Requests;
