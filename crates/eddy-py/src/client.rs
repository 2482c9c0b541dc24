//! `Client`: a connection to a deployment (`eddy_client::session::Session`, as libeddy
//! connects) and the namespace calls, each the client's own, run with the GIL released.

use crate::{err, os_error};
use eddy_client::session::Session;
use eddy_client::{Creds, Errno, Inode, Timespec};
use pyo3::prelude::*;
use std::future::Future;
use std::sync::Arc;

/// A connection to a deployment. `Client(state=None)`: the deployment whose state
/// directory is `state` (the `--state` of `eddy start`), else `EDDY_STATE`'s.
#[pyclass(frozen, module = "eddy._eddy")]
pub(crate) struct Client {
    pub(crate) session: Arc<Session>,
    state: Option<String>,
}

/// The attributes as a tuple: mode, ino, dev, nlink, uid, gid, size, atime_ns, mtime_ns,
/// ctime_ns, blocks, rdev (the Python side makes it an `os.stat_result`).
pub(crate) type StatTuple = (
    u32,
    u64,
    u64,
    u32,
    u32,
    u32,
    u64,
    i128,
    i128,
    i128,
    u64,
    u64,
);

fn ns(t: &Timespec) -> i128 {
    i128::from(t.sec) * 1_000_000_000 + i128::from(t.nsec)
}

pub(crate) fn stat_tuple(i: &Inode) -> StatTuple {
    (
        i.st_mode(),
        i.st_ino(),
        0,
        i.st_nlink(),
        i.uid,
        i.gid,
        i.size,
        ns(&i.atime),
        ns(&i.mtime),
        ns(&i.ctime),
        i.size.div_ceil(512),
        i.rdev,
    )
}

impl Client {
    /// Runs `f(client)` on the session with the GIL released; an error is an `OSError`
    /// naming `path`.
    pub(crate) fn call<T, Fut>(
        &self,
        py: Python<'_>,
        path: Option<&str>,
        f: impl FnOnce(eddy_client::Client) -> Fut + Send,
    ) -> PyResult<T>
    where
        T: Send + 'static,
        Fut: Future<Output = Result<T, Errno>> + Send + 'static,
    {
        let s = &self.session;
        py.detach(|| s.run(f(s.client().clone())))
            .map_err(|e| os_error(e, path))
    }
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (state=None))]
    fn new(py: Python<'_>, state: Option<String>) -> PyResult<Client> {
        let st = state.clone();
        let session = py
            .detach(move || Session::connect(st.as_deref(), "eddy-python"))
            .map_err(err)?;
        Ok(Client {
            session: Arc::new(session),
            state,
        })
    }

    /// The state directory given (None: `EDDY_STATE`'s).
    #[getter]
    fn state(&self) -> Option<String> {
        self.state.clone()
    }

    /// The deployment's chunk size in bytes.
    #[getter]
    fn chunk_size(&self) -> u64 {
        self.session.client().config().chunk_size
    }

    /// Opens `path` with open(2)'s `flags` (os.O_*), `mode` for a new file.
    #[pyo3(signature = (path, flags, mode=0o666))]
    fn open(
        &self,
        py: Python<'_>,
        path: String,
        flags: i32,
        mode: u32,
    ) -> PyResult<crate::file::File> {
        let p = path.clone();
        let f = self.call(py, Some(&path), move |c| async move {
            c.open(&p, flags, mode, Creds::current()).await
        })?;
        Ok(crate::file::File::new(self.session.clone(), f, path))
    }

    /// The attributes of `path`, symbolic links followed (`follow` False: not).
    #[pyo3(signature = (path, follow=true))]
    fn stat(&self, py: Python<'_>, path: String, follow: bool) -> PyResult<StatTuple> {
        let p = path.clone();
        let i = self.call(py, Some(&path), move |c| async move {
            if follow {
                c.stat(&p).await
            } else {
                c.lookup(&p).await
            }
        })?;
        Ok(stat_tuple(&i))
    }

    /// The entries of the directory `path`: (name, attributes) in byte order of the
    /// names, read page by page.
    fn scandir(&self, py: Python<'_>, path: String) -> PyResult<Vec<(String, StatTuple)>> {
        let p = path.clone();
        let entries = self.call(py, Some(&path), move |c| async move {
            let mut r = c.readdir(&p, None)?;
            let mut out = Vec::new();
            while let Some(page) = r.next_page().await? {
                out.extend(page);
            }
            Ok(out)
        })?;
        Ok(entries
            .iter()
            .map(|e| (e.name.clone(), stat_tuple(&e.inode)))
            .collect())
    }

    /// Makes the directory `path`.
    #[pyo3(signature = (path, mode=0o777))]
    fn mkdir(&self, py: Python<'_>, path: String, mode: u32) -> PyResult<()> {
        let p = path.clone();
        self.call(py, Some(&path), move |c| async move {
            c.mkdir(&p, mode, Creds::current()).await.map(drop)
        })
    }

    /// Removes the name `path` (not a directory).
    fn unlink(&self, py: Python<'_>, path: String) -> PyResult<()> {
        let p = path.clone();
        self.call(py, Some(&path), move |c| async move {
            c.unlink(&p, Creds::current()).await
        })
    }

    /// Removes the empty directory `path`.
    fn rmdir(&self, py: Python<'_>, path: String) -> PyResult<()> {
        let p = path.clone();
        self.call(py, Some(&path), move |c| async move {
            c.rmdir(&p, Creds::current()).await
        })
    }

    /// Renames `src` to `dst` (as rename(2)).
    fn rename(&self, py: Python<'_>, src: String, dst: String) -> PyResult<()> {
        let p = src.clone();
        self.call(py, Some(&src), move |c| async move {
            c.rename(&p, &dst, Creds::current()).await
        })
    }

    /// Sets the size of the file `path`.
    fn truncate(&self, py: Python<'_>, path: String, size: u64) -> PyResult<()> {
        let p = path.clone();
        self.call(py, Some(&path), move |c| async move {
            c.truncate(&p, size, Creds::current()).await.map(drop)
        })
    }

    /// The target of the symbolic link `path`.
    fn readlink(&self, py: Python<'_>, path: String) -> PyResult<String> {
        let p = path.clone();
        self.call(
            py,
            Some(&path),
            move |c| async move { c.readlink(&p).await },
        )
    }

    /// The daemons' counters, as `eddy stats --json` prints them (one JSON array, a
    /// snapshot per daemon that answered). OSError (EIO) when none answered.
    fn stats_json(&self, py: Python<'_>) -> PyResult<String> {
        let (snaps, failed) =
            self.call(py, None, |c| async move { Ok(c.stats_snapshots().await) })?;
        if snaps.is_empty() {
            let why: Vec<String> = failed
                .iter()
                .map(|(d, e)| format!("daemon {d}: {e}"))
                .collect();
            return Err(err(Errno::eio(format!(
                "no daemon of the deployment answered ({})",
                why.join("; ")
            ))));
        }
        serde_json::to_string(&snaps)
            .map_err(|e| err(Errno::eio(format!("the statistics as JSON: {e}"))))
    }
}
