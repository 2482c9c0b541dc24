//! eddy-preload's integration tests, one binary (preload): libeddy_preload.so under
//! unmodified programs (coreutils, tar, find, python3, a shell, C and MPI programs built from
//! tests/scripts) on real daemons of this host, and what its metadata path costs in requests
//! and system calls.
//!
//! The library is built by `cargo build -p eddy-preload` (and by `cargo test` of this crate,
//! whose cdylib it is); the tests find it next to their binary (`eddy_testkit::preload_so`).

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

mod leases;
mod preload;
mod preload_meta;
