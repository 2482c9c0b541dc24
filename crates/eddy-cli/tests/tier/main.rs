//! eddy-cli's integration tests, one binary (tier): each module was a test binary of its own
//! (`tests/<name>.rs`), merged so that the whole stack is linked once, not once per file.
//!
//! The backend tier: staging to and from a backend directory or a GlusterFS volume, and its
//! benchmark.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

mod bench_tier;
mod bench_writeback;
mod gluster_smoke;
mod tier;
