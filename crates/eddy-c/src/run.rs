//! Connections: a client of a deployment on its own runtime, which the calling threads drive
//! during their calls and a keeper thread between them (`eddy_client::driver`, decision
//! 0052, the driver the preload library uses).

use crate::handles;
use crate::{call_int, put, str_arg, R};
use eddy_client::driver::Driver;
use eddy_client::{Client, Errno};
use std::cell::Cell;
use std::ffi::c_char;
use std::future::Future;
use std::sync::Arc;

pub(crate) struct Conn {
    driver: Arc<Driver>,
    pub(crate) client: Client,
}

thread_local! {
    /// Set while this thread runs a call (a progress callback runs inside one).
    static IN_CALL: Cell<bool> = const { Cell::new(false) };
}

impl Conn {
    /// Runs `fut` to its end and returns its result: on this thread, which drives the
    /// runtime meanwhile, or (a thread inside another runtime: a tokio program) as a task of
    /// the runtime while this thread waits. A call from inside a call (a progress callback
    /// that calls the library) is EDEADLK: the runtime is this thread's already.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = R<T>> + Send + 'static,
    ) -> R<T> {
        if !can_run_here() {
            return self.on_task(fut);
        }
        self.drive(fut)
    }

    /// `run` for a future that borrows the caller's memory: on this thread only; `None` when
    /// this thread cannot drive the runtime (the caller then runs an owning version with
    /// `run`).
    pub(crate) fn run_here<T>(&self, fut: impl Future<Output = R<T>>) -> Option<R<T>> {
        if !can_run_here() {
            return None;
        }
        Some(self.drive(fut))
    }

    fn drive<T>(&self, fut: impl Future<Output = R<T>>) -> R<T> {
        if IN_CALL.with(|c| c.replace(true)) {
            return Err(in_call());
        }
        /// Clears `IN_CALL` however the call ends (a panic included).
        struct Out;
        impl Drop for Out {
            fn drop(&mut self) {
                let _ = IN_CALL.try_with(|c| c.set(false));
            }
        }
        let _out = Out;
        self.driver.drive(fut)
    }

    fn on_task<T: Send + 'static>(&self, fut: impl Future<Output = R<T>> + Send + 'static) -> R<T> {
        if IN_CALL.with(Cell::get) {
            return Err(in_call());
        }
        self.driver
            .on_task(fut)
            .unwrap_or_else(|| Err(Errno::eio("the libeddy runtime stopped")))
    }

    /// Spawns `fut` on the runtime: whoever drives it next runs it (a call, or the keeper).
    pub(crate) fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        self.driver.spawn(fut);
    }
}

fn in_call() -> Errno {
    Errno::new(
        libc::EDEADLK,
        "called from inside another call of the library (a progress callback may not call libeddy)",
    )
}

/// Whether this thread can drive a runtime itself: it is inside no other runtime.
fn can_run_here() -> bool {
    matches!(tokio::runtime::Handle::try_current(), Err(e) if e.is_missing_context())
}

fn connect(state: Option<&str>) -> R<Conn> {
    let state = match state {
        Some(s) => s.to_string(),
        None => std::env::var("EDDY_STATE").map_err(|_| {
            Errno::einval(
                "no state directory given and EDDY_STATE is not set (the directory holding deployment.toml)",
            )
        })?,
    };
    let file = std::path::Path::new(&state).join("deployment.toml");
    let dep = eddy_config::Deployment::load(&file)
        .map_err(|e| Errno::new(libc::ENOENT, format!("{}: {e}", file.display())))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(4)
        .thread_name("libeddy")
        .enable_all()
        .build()
        .map_err(|e| Errno::eio(format!("libeddy runtime: {e}")))?;
    let driver = Driver::start(rt, "libeddy", || {})
        .map_err(|e| Errno::eio(format!("libeddy: starting its thread: {e}")))?;
    let conn = Conn {
        driver,
        client: Client::new(dep.clone())?,
    };
    // Connecting contacts the daemons (the root directory, unfinished renames): within the
    // RPC deadline, an unreachable deployment fails here.
    let client = conn.run(Client::connect(dep))?;
    Ok(Conn { client, ..conn })
}

/// Connects to the deployment whose state directory is `state_dir` (the directory holding
/// `deployment.toml`, the `--state` of `eddy start`), or, with `state_dir` NULL, the one
/// named by the environment variable `EDDY_STATE` (as the preload library finds it). On
/// success `*out` is the connection's handle.
///
/// A connection belongs to the process that made it: a child made by `fork` connects anew.
///
/// Blocks until every daemon needed has answered: at most `rpc_timeout_ms` (default 10 s)
/// per request; an unreachable deployment is -EIO (or -ETIMEDOUT), never a hang.
///
/// Errors: -EFAULT (`out` NULL), -EINVAL (no state directory, not UTF-8), -ENOENT (no
/// usable `deployment.toml`), -EIO (the daemons).
///
/// # Safety
/// `state_dir` is NULL or a NUL-terminated string; `out` points at an `eddy_conn_t`.
#[no_mangle]
pub unsafe extern "C" fn eddy_connect(
    state_dir: *const c_char,
    out: *mut crate::eddy_conn_t,
) -> i32 {
    call_int("eddy_connect", || {
        if out.is_null() {
            return Err(Errno::new(libc::EFAULT, "out is NULL"));
        }
        let state = if state_dir.is_null() {
            None
        } else {
            // SAFETY: the caller's promise.
            Some(unsafe { str_arg(state_dir, "state_dir") }?)
        };
        let conn = connect(state)?;
        let h = handles::insert(handles::Obj::Conn(Arc::new(conn)))?;
        // SAFETY: checked above, the caller's promise.
        unsafe { put(out, h, "out") }?;
        Ok(0)
    })
}

/// Closes the connection handle `conn`: it is invalid from now on. Files opened through it
/// stay usable until they are closed (they hold the connection); its resources go with the
/// last of them. Never blocks. Errors: -EBADF (not an open connection handle).
#[no_mangle]
pub extern "C" fn eddy_disconnect(conn: crate::eddy_conn_t) -> i32 {
    call_int("eddy_disconnect", || {
        handles::remove_conn(conn)?;
        Ok(0)
    })
}
