//! Ctrl-C / SIGTERM: the coordinator notes the signal instead of dying, so that it can stop
//! its workers, remove its work directory and stop a deployment it started. Workers keep the
//! default action (the handler is reset by exec).

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs the handler for SIGINT and SIGTERM.
pub fn install() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// An error if a signal arrived.
pub fn check() -> anyhow::Result<()> {
    if interrupted() {
        anyhow::bail!("interrupted by a signal");
    }
    Ok(())
}
