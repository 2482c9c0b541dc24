//! eddy-cli's adversary suite, one binary (adversary): a real unprivileged user (`nobody`)
//! attacks every entry point that runs as root or SlurmUser, one test per attack, named for
//! it. The threat model, the privilege map and how a new privileged feature adds its attack
//! here are in docs/security.md.
//!
//! Needs root (the attacker is a real uid other than root's), FUSE, setpriv, and for some
//! attacks Slurm, PostgreSQL or Python: without them a test fails and names what is missing.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

mod descriptors;
mod history_alloc;
mod inputs;
mod planted;
mod pool;
mod processes;
mod walltime;
