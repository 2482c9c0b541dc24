//! eddy-cli's integration tests, one binary (ops): each module was a test binary of its own
//! (`tests/<name>.rs`), merged so that the whole stack is linked once, not once per file.
//!
//! Operating a deployment: `eddy start/stop/status/stats`, the Prometheus endpoint, the
//! system map, the benchmarks, the I/O history and the job profile a deployment's end stores.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

mod alloc;
mod bench;
mod deploy;
mod history;
mod metrics;
mod profile;
mod resize;
mod stats;
mod sysmap;
mod walltime;
