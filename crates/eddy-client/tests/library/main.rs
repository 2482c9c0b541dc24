//! eddy-client's integration tests, one binary (library): the client library against real
//! daemons of this host (three or more, each its own process and storage): every namespace
//! and data operation, a property test against an in-memory model, and several processes
//! writing and appending to one shared file at once. No root, no FUSE, no services: in the
//! fast lane (scripts/fast-lane.txt).

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

mod client_ops;
mod client_prop;
mod leases;
mod members;
mod shared_file;
