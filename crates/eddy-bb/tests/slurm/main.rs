//! eddy-bb's integration tests, one binary (slurm): Eddy as Slurm's burst buffer, end to end
//! through the `eddy bb` command of this build.
//!
//! Slurm and the burst buffer: a private Slurm cluster, the burst_buffer/lua plugin, `eddy bb`
//! phase by phase and its security checks.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

mod bb_grow;
mod bb_history;
mod bb_phases;
mod bb_pool;
mod bb_security;
mod burst_buffer;
mod slurm;
mod walltime;
