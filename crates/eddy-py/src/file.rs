//! `File`: an open file of the client, read into and written from Python buffers without a
//! copy, with the GIL released during the I/O. The package's `eddy.RawFile` (an
//! `io.RawIOBase`) keeps the position and wraps it as `open` does.

use crate::buffer::{Held, Raw};
use eddy_client::session::Session;
use eddy_client::{Errno, File as ClientFile};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::{Arc, Mutex};

/// An open file (`Client.open`). Its calls take the offset: the position is the caller's.
#[pyclass(frozen, module = "eddy._eddy")]
pub(crate) struct File {
    session: Arc<Session>,
    file: Mutex<Option<ClientFile>>,
    path: String,
}

/// What a call on a closed file raises, as Python's own files do.
fn closed() -> PyErr {
    PyValueError::new_err("I/O operation on closed file")
}

impl File {
    pub(crate) fn new(session: Arc<Session>, file: ClientFile, path: String) -> File {
        File {
            session,
            file: Mutex::new(Some(file)),
            path,
        }
    }

    /// The client's file, while open.
    fn open_file(&self) -> PyResult<ClientFile> {
        self.file
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(closed)
    }

    fn os_err(&self, e: Errno) -> PyErr {
        crate::os_error(e, Some(&self.path))
    }

    /// Runs an owning call on the open file with the GIL released.
    fn call<T: Send + 'static, Fut>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(eddy_client::Client, ClientFile) -> Fut + Send,
    ) -> PyResult<T>
    where
        Fut: std::future::Future<Output = Result<T, Errno>> + Send + 'static,
    {
        let file = self.open_file()?;
        let s = &self.session;
        py.detach(|| s.run(f(s.client().clone(), file)))
            .map_err(|e| self.os_err(e))
    }
}

/// Reads at `offset` into `raw` (held writable by the caller) without the GIL.
fn read_into(s: &Session, f: &ClientFile, offset: u64, raw: Raw) -> Result<usize, Errno> {
    let c = s.client().clone();
    // SAFETY: the caller holds the buffer `raw` came from, taken writable, for the whole call;
    // this is the only Rust reference to it.
    let buf = unsafe { raw.slice_mut() };
    if let Some(r) = s.run_here(c.pread_into(f, offset, buf)) {
        return r;
    }
    // A thread inside another tokio runtime: the read runs as a task, then is copied.
    let (c, f2, len) = (c.clone(), f.clone(), raw.len);
    let data = s.run(async move { c.pread(&f2, offset, len).await })?;
    buf[..data.len()].copy_from_slice(&data);
    Ok(data.len())
}

/// Writes `raw` (held by the caller) at `offset` without the GIL.
fn write_from(s: &Session, f: &ClientFile, offset: u64, raw: Raw) -> Result<usize, Errno> {
    let c = s.client().clone();
    // SAFETY: the caller holds the buffer `raw` came from for the whole call.
    let data = unsafe { raw.slice() };
    if let Some(r) = s.run_here(c.pwrite(f, offset, data)) {
        return r;
    }
    let (c, f2, d) = (c.clone(), f.clone(), data.to_vec());
    s.run(async move { c.pwrite(&f2, offset, &d).await })
}

#[pymethods]
impl File {
    /// The namespace path it was opened as.
    #[getter]
    fn path(&self) -> String {
        self.path.clone()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.file
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }

    #[getter]
    fn readable(&self) -> PyResult<bool> {
        Ok(self.open_file()?.readable())
    }

    #[getter]
    fn writable(&self) -> PyResult<bool> {
        Ok(self.open_file()?.writable())
    }

    /// The size the file had when it was opened (no request).
    #[getter]
    fn size_at_open(&self) -> PyResult<u64> {
        Ok(self.open_file()?.inode().size)
    }

    /// Opened with O_APPEND: every write goes to the end, whatever its offset.
    #[getter]
    fn append(&self) -> PyResult<bool> {
        Ok(self.open_file()?.append())
    }

    /// Reads up to `len(buf)` bytes at `offset` straight into `buf` (any writable
    /// contiguous buffer: bytearray, memoryview, NumPy array); the count read, 0 at the end.
    fn readinto(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, offset: u64) -> PyResult<usize> {
        let f = self.open_file()?;
        let held = Held::get(buf, true)?;
        let raw = held.raw();
        let s = &self.session;
        let r = py.detach(|| read_into(s, &f, offset, raw));
        drop(held);
        r.map_err(|e| self.os_err(e))
    }

    /// Up to `size` bytes at `offset`.
    fn read<'py>(
        &self,
        py: Python<'py>,
        size: usize,
        offset: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let data = self.call(
            py,
            move |c, f| async move { c.pread(&f, offset, size).await },
        )?;
        Ok(PyBytes::new(py, &data))
    }

    /// Writes the bytes of `buf` (any contiguous buffer) at `offset` (O_APPEND: at the end);
    /// the count written.
    fn write(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, offset: u64) -> PyResult<usize> {
        let f = self.open_file()?;
        let held = Held::get(buf, false)?;
        let raw = held.raw();
        let s = &self.session;
        let r = py.detach(|| write_from(s, &f, offset, raw));
        drop(held);
        r.map_err(|e| self.os_err(e))
    }

    /// The file's size now (its own writes included).
    fn size(&self, py: Python<'_>) -> PyResult<u64> {
        self.call(py, |c, f| async move { c.fstat(&f).await.map(|i| i.size) })
    }

    /// The attributes of the open file.
    fn stat(&self, py: Python<'_>) -> PyResult<crate::client::StatTuple> {
        let i = self.call(py, |c, f| async move { c.fstat(&f).await })?;
        Ok(crate::client::stat_tuple(&i))
    }

    /// Sets the size (open for writing).
    fn truncate(&self, py: Python<'_>, size: u64) -> PyResult<()> {
        self.call(py, move |c, f| async move {
            c.ftruncate(&f, size).await.map(drop)
        })
    }

    /// How the program will read `length` bytes at `offset` (`length` 0: to the end), with
    /// `advice` one of `os.POSIX_FADV_*` (as `os.posix_fadvise`): `WILLNEED` starts a
    /// background fetch of a linked file's range into the cache; `SEQUENTIAL` and `RANDOM`
    /// turn read-ahead on for every read and off.
    fn fadvise(&self, py: Python<'_>, offset: u64, length: u64, advice: i32) -> PyResult<()> {
        self.call(py, move |c, f| async move {
            let advice = eddy_client::Advice::from_posix(advice)?;
            c.advise(&f, offset, length, advice).await
        })
    }

    /// Makes the data and the size durable on the daemons (as fsync(2)).
    fn fsync(&self, py: Python<'_>) -> PyResult<()> {
        self.call(py, |c, f| async move { c.fsync(&f).await })
    }

    /// Closes the file (publishes the size its writes reached); a second close does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.file.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(f) = taken else { return Ok(()) };
        let s = &self.session;
        py.detach(|| {
            let c = s.client().clone();
            s.run(async move { c.close(&f).await })
        })
        .map_err(|e| self.os_err(e))
    }
}

impl Drop for File {
    /// A file dropped open is closed by the runtime (whoever drives it next).
    fn drop(&mut self) {
        let taken = self
            .file
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(f) = taken {
            let c = self.session.client().clone();
            self.session.spawn(async move {
                let _ = c.close(&f).await;
            });
        }
    }
}
