//! eddy-cli's integration tests, one binary (faults): each module was a test binary of its own
//! (`tests/<name>.rs`), merged so that the whole stack is linked once, not once per file.
//!
//! Failures and the wire: daemons killed and restarted, crash cycles, network namespaces,
//! replication and repair, checksums, peer bounds, the handshake and wire modes, the whole-
//! daemon fuzz storm and storage privacy.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

mod checksums;
mod crash_cycles;
mod fault;
mod fuzz_daemon;
mod handshake;
mod lock_restart;
mod moves;
mod netns;
mod peer_bounds;
mod placement;
mod rename_crash;
mod repair;
mod replication;
mod restart;
mod storage_privacy;
mod wire;
