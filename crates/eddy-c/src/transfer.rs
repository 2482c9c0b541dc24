//! Transfer (stage a tree in from, or out to, the backend directory its prefix is linked to:
//! the client's `stage_in` and `stage_out_with`, which `eddy stage-in` and `eddy stage-out`
//! run) and the job's counters (`eddy stats --json`: `Client::stats_snapshots`).

use crate::handles;
use crate::{call, str_arg, R};
use eddy_client::{Errno, FileResult};
use std::ffi::{c_char, c_int, c_void};

/// `eddy_transfer`: from the backend into the cache (as `eddy stage-in`).
pub const EDDY_STAGE_IN: c_int = 0;
/// `eddy_transfer`: from the cache to the backend (as `eddy stage-out`).
pub const EDDY_STAGE_OUT: c_int = 1;
/// `eddy_transfer` flag (stage-in): keep the staged chunks from eviction until unpinned.
pub const EDDY_TRANSFER_PIN: u32 = 1;
/// `eddy_transfer` flag (stage-out): write files in conflict with their backend copy over it.
pub const EDDY_TRANSFER_OVERWRITE: u32 = 2;
/// The longest path an `eddy_transfer_result` holds, its NUL included (longer ones are cut).
pub const EDDY_PATH_MAX: usize = 4096;

/// The result of one file of a transfer.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct eddy_transfer_result {
    /// Namespace path, NUL-terminated (cut at `EDDY_PATH_MAX - 1` bytes).
    pub path: [c_char; EDDY_PATH_MAX],
    /// Bytes moved.
    pub bytes: u64,
    /// 0, or a negative errno (-EIO with the message in `eddy_last_error` after the call:
    /// the first failure's).
    pub error: i32,
    pub reserved: u32,
}

/// Called as each file's part ends: `path` (valid during the call only), the bytes moved
/// and 0 or a negative errno, and the caller's `user` pointer. It runs on the thread that
/// called `eddy_transfer` and must not call the library (that is -EDEADLK).
pub type eddy_progress_fn =
    Option<unsafe extern "C" fn(user: *mut c_void, path: *const c_char, bytes: u64, error: i32)>;

fn errno_of(r: &FileResult) -> i32 {
    r.error.as_ref().map_or(0, |_| -libc::EIO)
}

/// Stages the trees or files `paths` (namespace paths under linked prefixes, `n` of them) in
/// (`EDDY_STAGE_IN`: the daemons fetch their chunks from the backend, in parallel) or out
/// (`EDDY_STAGE_OUT`: the daemons write back their dirty chunks, then the files are
/// finalised on the backend; with `n` 0, every linked prefix), as `eddy stage-in` and
/// `eddy stage-out` do. `progress` (may be NULL) sees each file's part as it ends. Up to
/// `max` results, one per file, go to `results` (may be NULL with `max` 0); returns the
/// number of files (which may exceed `max`: the rest were not stored), or a negative errno
/// when the whole transfer failed. When a file failed, the call still returns the count and
/// `eddy_last_error()` names the first failure.
///
/// Blocks until every file has ended: as long as the data takes to move, each request
/// within `rpc_timeout_ms`.
///
/// # Safety
/// `paths` points at `n` NUL-terminated strings; `results` at `max` writable results.
#[no_mangle]
pub unsafe extern "C" fn eddy_transfer(
    conn: crate::eddy_conn_t,
    direction: c_int,
    paths: *const *const c_char,
    n: usize,
    flags: u32,
    progress: eddy_progress_fn,
    user: *mut c_void,
    results: *mut eddy_transfer_result,
    max: usize,
) -> i64 {
    call("eddy_transfer", || {
        let c = handles::conn(conn)?;
        if paths.is_null() && n > 0 {
            return Err(Errno::new(libc::EFAULT, "paths is NULL"));
        }
        if results.is_null() && max > 0 {
            return Err(Errno::new(libc::EFAULT, "results is NULL"));
        }
        if flags & !(EDDY_TRANSFER_PIN | EDDY_TRANSFER_OVERWRITE) != 0 {
            return Err(Errno::einval(format!("flags {flags:#x}")));
        }
        let mut list = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: the caller's promise: `n` strings.
            let p = unsafe { *paths.add(i) };
            // SAFETY: as above.
            list.push(unsafe { str_arg(p, "paths[i]") }?.to_string());
        }
        let user = user as usize;
        // The callback gets C strings; a path with a NUL inside cannot be one and is cut.
        let report = move |r: &FileResult| {
            if let Some(cb) = progress {
                let path = std::ffi::CString::new(r.path.replace('\0', "")).unwrap_or_default();
                // SAFETY: the caller's function, with its own pointer.
                unsafe { cb(user as *mut c_void, path.as_ptr(), r.bytes, errno_of(r)) };
            }
        };
        let pin = flags & EDDY_TRANSFER_PIN != 0;
        let overwrite = flags & EDDY_TRANSFER_OVERWRITE != 0;
        let cl = c.client.clone();
        let files: Vec<FileResult> = match direction {
            EDDY_STAGE_IN => c.run_here(async { Ok(cl.stage_in(&list, pin, &report).await) }),
            EDDY_STAGE_OUT => {
                c.run_here(async { cl.stage_out_with(&list, overwrite, &report).await })
            }
            d => return Err(Errno::einval(format!("direction {d}"))),
        }
        .unwrap_or_else(|| {
            Err(Errno::new(
                libc::EOPNOTSUPP,
                "eddy_transfer from a thread inside a tokio runtime",
            ))
        })?;
        for (k, r) in files.iter().take(max).enumerate() {
            let mut out = eddy_transfer_result {
                path: [0; EDDY_PATH_MAX],
                bytes: r.bytes,
                error: errno_of(r),
                reserved: 0,
            };
            for (to, from) in out
                .path
                .iter_mut()
                .zip(r.path.bytes().take(EDDY_PATH_MAX - 1))
            {
                *to = from as c_char;
            }
            // SAFETY: `results` holds `max` results and k < max.
            unsafe { results.add(k).write(out) };
        }
        if let Some(bad) = files.iter().find(|r| r.error.is_some()) {
            crate::set_last_error(&format!(
                "eddy_transfer: {}: {}",
                bad.path,
                bad.error.as_deref().unwrap_or_default()
            ));
        }
        Ok(files.len() as i64)
    })
}

/// The counters of the deployment's daemons so far (what `eddy stats --json` prints: one
/// JSON array, a snapshot per daemon that answered, with its clients, operations, bytes
/// and latencies), as NUL-terminated text in `buf` when it fits in `size` bytes. Returns the
/// length of the text (without its NUL) as snprintf does: a value ≥ `size` means it did
/// not fit (call again with a larger buffer; `size` 0 asks for the length). -EIO when no
/// daemon answered. Blocks for one request per daemon, sent at once (within
/// `rpc_timeout_ms`).
///
/// # Safety
/// `buf` points at `size` writable bytes (or is NULL with `size` 0).
#[no_mangle]
pub unsafe extern "C" fn eddy_stats_json(
    conn: crate::eddy_conn_t,
    buf: *mut c_char,
    size: usize,
) -> i64 {
    call("eddy_stats_json", || {
        let c = handles::conn(conn)?;
        if buf.is_null() && size > 0 {
            return Err(Errno::new(libc::EFAULT, "buf is NULL"));
        }
        let cl = c.client.clone();
        let (snaps, failed) = c.run(async move { Ok(cl.stats_snapshots().await) })?;
        if snaps.is_empty() {
            let why: Vec<String> = failed
                .iter()
                .map(|(d, e)| format!("daemon {d}: {e}"))
                .collect();
            return Err(Errno::eio(format!(
                "no daemon of the deployment answered ({})",
                why.join("; ")
            )));
        }
        let text = serde_json::to_string(&snaps)
            .map_err(|e| Errno::eio(format!("the statistics as JSON: {e}")))?;
        copy_text(&text, buf, size)
    })
}

/// snprintf's contract: the text and its NUL when it fits, the length always.
fn copy_text(text: &str, buf: *mut c_char, size: usize) -> R<i64> {
    if size > 0 {
        // SAFETY: the caller's promise: `size` bytes.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), size) };
        let n = text.len().min(size - 1);
        out[..n].copy_from_slice(&text.as_bytes()[..n]);
        out[n] = 0;
    }
    Ok(text.len() as i64)
}
