//! The native module `eddy._eddy` of the Python package `eddy` (decision 0067): Eddy from
//! Python without a mount or an interposed libc, over the one client core. A connection is
//! an `eddy_client::session::Session`, the way libeddy (the C library) connects; every call
//! is one of the client's, run with the GIL released; the counters are
//! `Client::stats_snapshots` (what `eddy stats --json` prints) and the history is
//! eddy-history's database as `eddy history` opens it. The crate translates between Python
//! and the client; it holds no logic of the file system.
//!
//! The pure-Python part of the package (`python/eddy`: `io` objects over `File`, `os`-like
//! functions, the fsspec file system, the records' `to_pandas`) is built on what this
//! module exports: `Client`, `File` and the history functions.
//!
//! Errors: an `Errno` from the client is an `OSError` whose constructor picks the subclass
//! for its errno (`FileNotFoundError` for ENOENT, ...), with the path as its filename; wrong
//! argument types are PyO3's `TypeError`; a panic inside is caught by PyO3 and raised as an
//! exception, never an abort of the interpreter.

mod buffer;
mod client;
mod file;
mod history;

use eddy_client::Errno;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

/// The Python exception for `e`: `OSError(errno, message[, path])`, which Python makes the
/// subclass of that errno.
pub(crate) fn os_error(e: Errno, path: Option<&str>) -> PyErr {
    let errno = if e.errno > 0 { e.errno } else { libc::EIO };
    match path {
        Some(p) => PyOSError::new_err((errno, e.msg, p.to_string())),
        None => PyOSError::new_err((errno, e.msg)),
    }
}

/// `os_error` for a call without a path.
pub(crate) fn err(e: Errno) -> PyErr {
    os_error(e, None)
}

#[pymodule]
fn _eddy(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::Client>()?;
    m.add_class::<file::File>()?;
    m.add_function(wrap_pyfunction!(history::history_list, m)?)?;
    m.add_function(wrap_pyfunction!(history::history_show, m)?)?;
    m.add_function(wrap_pyfunction!(history::history_import, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
