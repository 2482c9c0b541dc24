//! Python objects' memory through the buffer protocol (a `bytearray`, a `memoryview`, a
//! NumPy array, `bytes` to write from), so that a read lands in the caller's memory with no
//! copy in between.
//!
//! The stable ABI declares `PyObject_GetBuffer`, `PyBuffer_Release` and `Py_buffer` only
//! from Python 3.11 on, while this module is built for the stable ABI of 3.9 (one wheel for
//! 3.9 and later, decision 0067). The functions and the struct are part of every CPython 3
//! (the struct's layout has not changed since 3.3 and was made stable, as it was, in 3.11),
//! so they are declared here and resolved, like every other symbol of the module, against
//! the interpreter that loads it.

use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;
use std::ffi::{c_char, c_int, c_void};

/// CPython's `Py_buffer`.
#[repr(C)]
struct PyBufferView {
    buf: *mut c_void,
    obj: *mut pyo3::ffi::PyObject,
    len: pyo3::ffi::Py_ssize_t,
    itemsize: pyo3::ffi::Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut pyo3::ffi::Py_ssize_t,
    strides: *mut pyo3::ffi::Py_ssize_t,
    suboffsets: *mut pyo3::ffi::Py_ssize_t,
    internal: *mut c_void,
}

/// `PyBUF_SIMPLE`: a contiguous buffer of bytes.
const SIMPLE: c_int = 0;
/// `PyBUF_WRITABLE`.
const WRITABLE: c_int = 1;

extern "C" {
    fn PyObject_GetBuffer(
        obj: *mut pyo3::ffi::PyObject,
        view: *mut PyBufferView,
        flags: c_int,
    ) -> c_int;
    fn PyBuffer_Release(view: *mut PyBufferView);
}

/// A buffer exported by a Python object, held until dropped (with the GIL held: every
/// holder drops it on the thread that took it, after its GIL-free section ended). While it
/// is held the object cannot resize or free that memory (a `bytearray` refuses to resize).
pub(crate) struct Held {
    view: PyBufferView,
}

/// Memory of a held buffer, to use without the GIL: its address and length.
#[derive(Clone, Copy)]
pub(crate) struct Raw {
    ptr: usize,
    pub(crate) len: usize,
}

impl Held {
    /// The object's memory, contiguous bytes, writable when `writable`. A `TypeError` when
    /// the object has no buffer, a `BufferError` when it cannot give one so (read-only, not
    /// contiguous).
    pub(crate) fn get(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Held> {
        let mut view = PyBufferView {
            buf: std::ptr::null_mut(),
            obj: std::ptr::null_mut(),
            len: 0,
            itemsize: 0,
            readonly: 0,
            ndim: 0,
            format: std::ptr::null_mut(),
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            suboffsets: std::ptr::null_mut(),
            internal: std::ptr::null_mut(),
        };
        let flags = if writable { WRITABLE } else { SIMPLE };
        // SAFETY: `obj` is a live object (the Bound holds a reference and the GIL); `view`
        // is a Py_buffer of CPython's layout for the call to fill in.
        let rc = unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut view, flags) };
        if rc != 0 {
            let e = PyErr::take(obj.py())
                .unwrap_or_else(|| PyBufferError::new_err("the object gave no buffer"));
            if e.is_instance_of::<PyTypeError>(obj.py())
                || e.is_instance_of::<PyBufferError>(obj.py())
            {
                return Err(e);
            }
            return Err(PyTypeError::new_err(format!(
                "a bytes-like object is required: {e}"
            )));
        }
        let held = Held { view };
        if held.view.len < 0 || (held.view.buf.is_null() && held.view.len > 0) {
            return Err(PyBufferError::new_err("the object gave an invalid buffer"));
        }
        Ok(held)
    }

    /// The memory, to be used while `self` is held.
    pub(crate) fn raw(&self) -> Raw {
        Raw {
            ptr: self.view.buf as usize,
            len: usize::try_from(self.view.len).unwrap_or(0),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Dropped with the GIL held (see `Held`): a Bound's methods are the only way to
        // make one, and the holders keep it outside their GIL-free closures.
        // SAFETY: the view was filled by a successful PyObject_GetBuffer and is released
        // once, here.
        unsafe { PyBuffer_Release(&mut self.view) };
    }
}

impl Raw {
    /// The memory as a writable slice.
    ///
    /// # Safety
    /// The `Held` it came from is still held, was taken writable, and nothing else uses
    /// the memory as a Rust reference meanwhile.
    pub(crate) unsafe fn slice_mut<'a>(self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: the caller's promise: `len` bytes at `ptr`, exported and held.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.len) }
    }

    /// The memory as a slice.
    ///
    /// # Safety
    /// The `Held` it came from is still held.
    pub(crate) unsafe fn slice<'a>(self) -> &'a [u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the caller's promise: `len` bytes at `ptr`, exported and held.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}
