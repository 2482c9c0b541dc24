//! eddy-daemon's integration tests of the backend tier, one binary (tier): the daemons'
//! mover (lazy import, chunk fetches, validation, write-back, eviction, pins, failures of the
//! backend) with real daemons, a backend directory or a GlusterFS volume, real FUSE mounts
//! and `eddy stage-in`/`stage-out`. The tier's benchmark is tested with the other benchmarks
//! (eddy-cli, `tests/ops/bench`), the GlusterFS test backend itself by eddy-testkit
//! (`tests/gluster_smoke.rs`).

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

mod tier;
