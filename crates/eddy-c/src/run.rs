//! Connections: a client of a deployment on its own runtime, which the calling threads drive
//! during their calls and a keeper thread between them (`eddy_client::session`, over the
//! driver of decision 0052 the preload library uses; the Python package connects the same way).

use crate::handles;
use crate::{call_int, put, str_arg, R};
use eddy_client::session::{can_run_here, Session};
use eddy_client::{Client, Errno};
use std::cell::Cell;
use std::ffi::c_char;
use std::future::Future;
use std::sync::Arc;

pub(crate) struct Conn {
    session: Session,
    pub(crate) client: Client,
}

thread_local! {
    /// Set while this thread runs a call (a progress callback runs inside one).
    static IN_CALL: Cell<bool> = const { Cell::new(false) };
}

impl Conn {
    /// Runs `fut` to its end and returns its result: on this thread, which drives the
    /// runtime meanwhile, or (a thread inside another runtime: a tokio program) as a task of
    /// the runtime while this thread waits (`Session::run`). A call from inside a call (a
    /// progress callback that calls the library) is EDEADLK: the runtime is this thread's
    /// already.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = R<T>> + Send + 'static,
    ) -> R<T> {
        if !can_run_here() {
            if IN_CALL.with(Cell::get) {
                return Err(in_call());
            }
            return self.session.run(fut);
        }
        let _in = InCall::enter()?;
        self.session.run(fut)
    }

    /// `run` for a future that borrows the caller's memory: on this thread only; `None` when
    /// this thread cannot drive the runtime (the caller then runs an owning version with
    /// `run`).
    pub(crate) fn run_here<T>(&self, fut: impl Future<Output = R<T>>) -> Option<R<T>> {
        if !can_run_here() {
            return None;
        }
        let _in = match InCall::enter() {
            Ok(g) => g,
            Err(e) => return Some(Err(e)),
        };
        self.session.run_here(fut)
    }

    /// Spawns `fut` on the runtime: whoever drives it next runs it (a call, or the keeper).
    pub(crate) fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        self.session.spawn(fut);
    }
}

/// Marks this thread as inside a call until dropped (a panic included).
struct InCall;

impl InCall {
    fn enter() -> R<InCall> {
        if IN_CALL.with(|c| c.replace(true)) {
            return Err(in_call());
        }
        Ok(InCall)
    }
}

impl Drop for InCall {
    fn drop(&mut self) {
        let _ = IN_CALL.try_with(|c| c.set(false));
    }
}

fn in_call() -> Errno {
    Errno::new(
        libc::EDEADLK,
        "called from inside another call of the library (a progress callback may not call libeddy)",
    )
}

/// The connection: `Session::connect`, as the Python package connects.
fn connect(state: Option<&str>) -> R<Conn> {
    let session = Session::connect(state, "libeddy")?;
    let client = session.client().clone();
    Ok(Conn { session, client })
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
