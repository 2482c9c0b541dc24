//! Helpers for tests that drive the `eddy` binary as a user would.

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The `eddy` command, using this build's `eddyd` and ignoring the caller's `EDDY_STATE`.
/// Its `XDG_DATA_HOME` is the build's `test-data-home` (see [`test_data_home`]), so that the
/// profiles `eddy stop` stores in the per-user default history stay out of the real home.
pub fn eddy_cmd() -> Command {
    let mut c = Command::new(super::eddy_bin());
    c.env("EDDY_DAEMON_BIN", super::eddyd_bin())
        .env_remove("EDDY_STATE")
        .env("XDG_DATA_HOME", test_data_home())
        .stdin(Stdio::null());
    c
}

/// The `XDG_DATA_HOME` of the `eddy` commands tests run: `test-data-home` in this build's
/// directory (the per-user default history lands in `eddy/history.db` there).
pub fn test_data_home() -> std::path::PathBuf {
    super::bin_dir().join("test-data-home")
}

/// Runs `eddy ARGS` to completion.
pub fn eddy(args: &[&str]) -> Output {
    eddy_cmd().args(args).output().expect("run eddy")
}

/// A command's status and both outputs, for failure messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `eddy ARGS`, which must succeed.
pub fn ok(args: &[&str]) -> Output {
    let out = eddy(args);
    assert!(
        out.status.success(),
        "eddy {args:?} failed:\n{}",
        text(&out)
    );
    out
}

/// Runs `eddy ARGS`, which must fail; returns its stderr.
pub fn fails(args: &[&str]) -> String {
    let out = eddy(args);
    assert!(
        !out.status.success(),
        "eddy {args:?} should fail:\n{}",
        text(&out)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A path as an argument.
pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A TCP port nobody listens on right now.
/// A TCP port nobody listens on right now, below the kernel's ephemeral range (32768 and
/// up by default): a port the kernel hands out for `bind(:0)` may be handed again to an
/// outgoing connection of another test before the server that was told it binds it (a
/// slurmctld failing with "Address already in use"); ports below the range are taken only by
/// servers that ask for them by number.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    // Spread by process, so that test binaries run at once start apart.
    let seed = std::process::id().wrapping_mul(2_654_435_761) % SPAN;
    for _ in 0..SPAN {
        let k = NEXT.fetch_add(7_919, Ordering::Relaxed);
        let port = LOW + (seed + k) % SPAN;
        let port = u16::try_from(port).expect("below 32000");
        let free = std::net::TcpListener::bind(("0.0.0.0", port)).is_ok()
            && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
        if free {
            return port;
        }
    }
    panic!("found no free TCP port in {LOW}..{}", LOW + SPAN);
}

/// The first of `n` consecutive TCP ports on 127.0.0.1 nobody listens on right now.
pub fn free_ports(n: u16) -> u16 {
    for _ in 0..100 {
        let first = free_port();
        if first.checked_add(n).is_none() {
            continue;
        }
        let free = (1..n).all(|i| std::net::TcpListener::bind(("127.0.0.1", first + i)).is_ok());
        if free {
            return first;
        }
    }
    panic!("found no {n} consecutive free ports on 127.0.0.1");
}
