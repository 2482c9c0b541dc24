//! eddy-cli's integration tests, one binary (posix): each module was a test binary of its own
//! (`tests/<name>.rs`), merged so that the whole stack is linked once, not once per file.
//!
//! The file system as programs see it: the library and the FUSE mount, their property tests,
//! permissions, xattrs, links, locks, sharing, the POSIX suite, the LD_PRELOAD client, RPC
//! counts, bad input and a full device.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

mod bad_input;
mod client_ops;
mod client_prop;
mod corners;
mod deadlock;
mod deep_paths;
mod dir_attr;
mod direct_io;
mod fsx;
mod full_deployment;
mod full_device;
mod hard_links;
mod locks;
mod mixed_io;
mod mount_access;
mod mount_ops;
mod mount_prop;
mod open_files;
mod passthrough;
mod permissions;
mod placement_mount;
mod posix_suite;
mod preload;
mod preload_meta;
mod rpc_counts;
mod script_runs;
mod served;
mod shared_file;
mod special_xattr;
mod times;
