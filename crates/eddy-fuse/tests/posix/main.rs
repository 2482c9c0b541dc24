//! eddy-fuse's integration tests, one binary (posix): the file system as programs see it
//! through a real FUSE mount (`eddy mount`) of real daemons: its property test, permissions,
//! xattrs, links, locks, the POSIX suite, RPC counts, passthrough, bad input, a full device
//! and clients contending on one directory (two mounts and preloaded processes), with the
//! preload library beside the mount where a test compares the two (built by
//! `cargo build -p eddy-preload`, as `make test` does: this crate does not depend on that one,
//! not even for its tests, ARCHITECTURE.md). The library client's own
//! tests are eddy-client's (`tests/library`), the preload library's eddy-preload's
//! (`tests/preload`). Needs root and FUSE.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

mod across_clients;
mod bad_input;
mod corners;
mod deadlock;
mod deep_paths;
mod dir_attr;
mod direct_io;
mod fsx;
mod full_deployment;
mod full_device;
mod hard_links;
mod io_uring;
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
mod rpc_counts;
mod script_runs;
mod special_xattr;
mod times;

/// Every daemon verifies every block it holds: none may be bad.
async fn scrub_clean(c: &eddy_client::Client) {
    for d in c.rpc().ids().to_vec() {
        let mut after = None;
        loop {
            let page = c
                .rpc()
                .call(d, eddy_proto::req::Scrub { after, limit: 1000 })
                .await
                .unwrap();
            assert!(page.bad.is_empty(), "daemon {d}: {:?}", page.bad);
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
    }
}
