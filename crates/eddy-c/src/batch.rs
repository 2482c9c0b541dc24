//! Batched, asynchronous I/O (as UnifyFS's `dispatch_io` and DAOS's event queues): a list of
//! reads, writes, truncates and syncs over several files is submitted at once and runs on
//! the connection's runtime while the caller goes on; the caller waits (with a timeout) or
//! polls, and each operation gets its own result. Each operation is the client's own call.

use crate::handles;
use crate::posix::OpenFile;
use crate::run::Conn;
use crate::{call, call_int, put, R};
use eddy_client::Errno;
use futures::future::join_all;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Reads `len` bytes at `offset` of `file` into `buf`; the result is the count read.
pub const EDDY_OP_READ: u32 = 0;
/// Writes `len` bytes of `buf` at `offset` of `file`; the result is the count written.
pub const EDDY_OP_WRITE: u32 = 1;
/// Sets the size of `file` to `offset`; the result is 0.
pub const EDDY_OP_TRUNCATE: u32 = 2;
/// Makes `file` durable (as `eddy_fsync`); the result is 0.
pub const EDDY_OP_SYNC: u32 = 3;
/// The `result` of an operation that has not ended yet.
pub const EDDY_OP_PENDING: i64 = i64::MIN;

/// One operation of a batch. The library writes `result` (in `eddy_batch_wait`,
/// `eddy_batch_poll` and `eddy_batch_free`): `EDDY_OP_PENDING` until the operation ends,
/// then its count of bytes (reads, writes), 0 (truncates, syncs) or a negative errno.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct eddy_op {
    /// `EDDY_OP_READ`, `EDDY_OP_WRITE`, `EDDY_OP_TRUNCATE` or `EDDY_OP_SYNC`.
    pub kind: u32,
    pub reserved: u32,
    /// An open file of the connection the batch is submitted on.
    pub file: crate::eddy_file_t,
    /// Where to read or write; for a truncate, the new size.
    pub offset: u64,
    /// The data (writes) or where it goes (reads); unused by truncates and syncs.
    pub buf: *mut c_void,
    pub len: u64,
    pub result: i64,
}

/// A caller's pointer, sent to the runtime's task. The caller keeps the memory valid until
/// the batch has ended (`eddy_batch_submit`'s contract).
#[derive(Clone, Copy)]
struct Ptr(usize);

enum Op {
    Read(Arc<OpenFile>, u64, Ptr, usize),
    Write(Arc<OpenFile>, u64, Ptr, usize),
    Truncate(Arc<OpenFile>, u64),
    Sync(Arc<OpenFile>),
    /// Refused at submission.
    Bad(Errno),
}

impl Op {
    /// A truncate or sync orders the batch: it starts once every operation before it has
    /// ended, and the operations after it start once it has.
    fn is_barrier(&self) -> bool {
        matches!(self, Op::Truncate(..) | Op::Sync(_))
    }

    async fn run(self) -> i64 {
        let r: R<i64> = match self {
            Op::Read(of, off, p, len) => {
                // SAFETY: the caller keeps `len` bytes at `p` valid and untouched until the
                // batch has ended (`eddy_batch_submit`).
                let buf = unsafe { std::slice::from_raw_parts_mut(p.0 as *mut u8, len) };
                let cl = of.conn.client.clone();
                cl.pread_into(&of.file, off, buf).await.map(|n| n as i64)
            }
            Op::Write(of, off, p, len) => {
                // SAFETY: as above, readable.
                let buf = unsafe { std::slice::from_raw_parts(p.0 as *const u8, len) };
                let cl = of.conn.client.clone();
                cl.pwrite(&of.file, off, buf).await.map(|n| n as i64)
            }
            Op::Truncate(of, size) => {
                let cl = of.conn.client.clone();
                cl.ftruncate(&of.file, size).await.map(|_| 0)
            }
            Op::Sync(of) => {
                let cl = of.conn.client.clone();
                cl.fsync(&of.file).await.map(|_| 0)
            }
            Op::Bad(e) => Err(e),
        };
        match r {
            Ok(n) => n,
            Err(e) => -i64::from(if e.errno > 0 { e.errno } else { libc::EIO }),
        }
    }
}

/// A submitted batch.
pub(crate) struct Batch {
    conn: Arc<Conn>,
    /// The caller's array, where results are copied.
    ops: Ptr,
    n: usize,
    results: Mutex<Vec<i64>>,
    /// Operations ended so far.
    ended: tokio::sync::watch::Sender<usize>,
}

impl Batch {
    fn ended(&self) -> usize {
        *self.ended.borrow()
    }

    /// Copies the results so far into the caller's array; the count ended.
    fn copy_out(&self) -> usize {
        let results = self.results.lock().unwrap_or_else(|p| p.into_inner());
        for (i, r) in results.iter().enumerate() {
            // SAFETY: the caller keeps its array of `n` operations valid until the batch is
            // freed (`eddy_batch_submit`).
            unsafe { (*(self.ops.0 as *mut eddy_op).add(i)).result = *r };
        }
        results.iter().filter(|&&r| r != EDDY_OP_PENDING).count()
    }

    /// Waits up to `timeout` (None: until the end) for every operation to end, driving the
    /// runtime meanwhile; whether they all have.
    fn wait(&self, timeout: Option<Duration>) -> R<bool> {
        let mut rx = self.ended.subscribe();
        let n = self.n;
        let done = async move {
            let all = rx.wait_for(|&e| e >= n);
            match timeout {
                Some(t) => Ok(tokio::time::timeout(t, all).await.is_ok()),
                None => Ok(all.await.is_ok()),
            }
        };
        self.conn.run(done)
    }
}

fn prepare(conn: &Arc<Conn>, op: &eddy_op) -> Op {
    let of = match handles::file(op.file) {
        Ok(of) if Arc::ptr_eq(&of.conn, conn) => of,
        Ok(_) => {
            return Op::Bad(Errno::einval(
                "the file belongs to another connection than the batch",
            ))
        }
        Err(e) => return Op::Bad(e),
    };
    let Ok(len) = usize::try_from(op.len) else {
        return Op::Bad(Errno::einval("len too large"));
    };
    let buffered = op.kind == EDDY_OP_READ || op.kind == EDDY_OP_WRITE;
    if buffered && op.buf.is_null() && len > 0 {
        return Op::Bad(Errno::new(libc::EFAULT, "buf is NULL"));
    }
    if buffered && len > isize::MAX as usize {
        return Op::Bad(Errno::einval("len too large"));
    }
    let p = Ptr(op.buf as usize);
    match op.kind {
        EDDY_OP_READ => Op::Read(of, op.offset, p, len),
        EDDY_OP_WRITE => Op::Write(of, op.offset, p, len),
        EDDY_OP_TRUNCATE => Op::Truncate(of, op.offset),
        EDDY_OP_SYNC => Op::Sync(of),
        k => Op::Bad(Errno::einval(format!("operation kind {k}"))),
    }
}

/// Submits the `n` operations of `ops` on `conn` and returns at once (`*out`: the batch's
/// handle); they run while the caller goes on. Reads and writes run concurrently (their
/// order is not kept: give overlapping ones separate batches); a truncate or a sync starts
/// once every operation before it in the array has ended, and those after it wait for it.
/// An operation that is wrong in itself (a bad file handle, a file of another connection,
/// an unknown kind, a NULL buffer) fails alone, with its own result; the others run.
///
/// `ops`, and the buffers its operations name, must stay valid and untouched by the caller
/// until the batch has ended (`eddy_batch_wait` returned 0, `eddy_batch_poll` returned `n`,
/// or `eddy_batch_free` returned): the library writes the results into `ops` and the data
/// read into the buffers. Never blocks.
///
/// # Safety
/// `ops` points at `n` `eddy_op`s (as above); `out` at an `eddy_batch_t`.
#[no_mangle]
pub unsafe extern "C" fn eddy_batch_submit(
    conn: crate::eddy_conn_t,
    ops: *mut eddy_op,
    n: usize,
    out: *mut crate::eddy_batch_t,
) -> i32 {
    call_int("eddy_batch_submit", || {
        if out.is_null() {
            return Err(Errno::new(libc::EFAULT, "out is NULL"));
        }
        if ops.is_null() && n > 0 {
            return Err(Errno::new(libc::EFAULT, "ops is NULL"));
        }
        let c = handles::conn(conn)?;
        let mut prepared = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: the caller's promise: `n` operations.
            let op = unsafe { &mut *ops.add(i) };
            op.result = EDDY_OP_PENDING;
            prepared.push(prepare(&c, op));
        }
        let (ended, _) = tokio::sync::watch::channel(0usize);
        let batch = Arc::new(Batch {
            conn: c.clone(),
            ops: Ptr(ops as usize),
            n,
            results: Mutex::new(vec![EDDY_OP_PENDING; n]),
            ended,
        });
        let h = handles::insert(handles::Obj::Batch(batch.clone()))?;
        c.spawn(run_batch(batch, prepared));
        // SAFETY: checked above, the caller's promise.
        unsafe { put(out, h, "out") }?;
        Ok(0)
    })
}

/// Runs the operations in groups cut by the barriers (truncates, syncs).
async fn run_batch(batch: Arc<Batch>, ops: Vec<Op>) {
    let finish = |i: usize, r: i64| {
        batch.results.lock().unwrap_or_else(|p| p.into_inner())[i] = r;
        batch.ended.send_modify(|e| *e += 1);
    };
    let mut group: Vec<(usize, Op)> = Vec::new();
    for (i, op) in ops.into_iter().enumerate() {
        if !op.is_barrier() {
            group.push((i, op));
            continue;
        }
        let now = std::mem::take(&mut group);
        join_all(now.into_iter().map(|(k, op)| async move {
            let r = op.run().await;
            finish(k, r);
        }))
        .await;
        let r = op.run().await;
        finish(i, r);
    }
    join_all(group.into_iter().map(|(k, op)| async move {
        let r = op.run().await;
        finish(k, r);
    }))
    .await;
}

/// Waits until every operation of the batch has ended, at most `timeout_ms` milliseconds
/// (negative: as long as they take; each operation ends within the client's deadlines,
/// `rpc_timeout_ms` per request). Copies the results into the batch's `ops` array (those
/// still running stay `EDDY_OP_PENDING`). 0 when all have ended, -ETIMEDOUT otherwise;
/// -EBADF for a bad handle. The calling thread drives the connection meanwhile.
#[no_mangle]
pub extern "C" fn eddy_batch_wait(batch: crate::eddy_batch_t, timeout_ms: c_int) -> i32 {
    call_int("eddy_batch_wait", || {
        let b = handles::batch(batch)?;
        let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        let all = b.wait(timeout)?;
        b.copy_out();
        if !all {
            return Err(Errno::new(
                libc::ETIMEDOUT,
                format!(
                    "{} of {} operations ended in {timeout_ms} ms",
                    b.ended(),
                    b.n
                ),
            ));
        }
        Ok(0)
    })
}

/// Copies the results so far into the batch's `ops` array and returns how many operations
/// have ended (the batch has ended when that is its `n`). Never blocks.
#[no_mangle]
pub extern "C" fn eddy_batch_poll(batch: crate::eddy_batch_t) -> i64 {
    call("eddy_batch_poll", || {
        let b = handles::batch(batch)?;
        Ok(b.copy_out() as i64)
    })
}

/// Frees the batch: waits for the operations still running to end (so that no buffer is
/// written after it returns; within the client's deadlines), copies their results into the
/// `ops` array; the handle is invalid from now on.
#[no_mangle]
pub extern "C" fn eddy_batch_free(batch: crate::eddy_batch_t) -> i32 {
    call_int("eddy_batch_free", || {
        let b = handles::remove_batch(batch)?;
        b.wait(None)?;
        b.copy_out();
        Ok(0)
    })
}
