//! eddy-cli's integration tests, one binary (slurm): each module was a test binary of its own
//! (`tests/<name>.rs`), merged so that the whole stack is linked once, not once per file.
//!
//! Slurm and the burst buffer: a private Slurm cluster, the burst_buffer/lua plugin, `eddy bb`
//! phase by phase and its security checks.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

mod bb_history;
mod bb_phases;
mod bb_pool;
mod bb_security;
mod burst_buffer;
mod slurm;
mod walltime;
