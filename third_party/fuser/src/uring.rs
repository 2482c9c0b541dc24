//! FUSE over io_uring (Linux 6.14+, `CONFIG_FUSE_IO_URING`, module parameter
//! `fuse.enable_uring`).
//!
//! After INIT has negotiated `FUSE_OVER_IO_URING`, the server registers ring entries on every
//! queue the kernel keeps (one per possible CPU) with `FUSE_IO_URING_CMD_REGISTER`; once each
//! queue has one, the kernel sends requests as completions of those entries instead of through
//! `read(2)` on `/dev/fuse`, and takes each reply with `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`,
//! which also hands the entry back for the next request. FORGET, INTERRUPT and notifications
//! still go over `/dev/fuse`, so one classic event loop keeps reading it.
//!
//! Requests are parsed and dispatched by the same code as on `/dev/fuse` (`AnyRequest`,
//! `RequestWithSender::dispatch`); only where the bytes come from and where the reply goes
//! differ. A reply is staged in a buffer and copied into its entry by the thread that owns
//! the queue, once the request's borrow of the entry has ended; replies sent from other
//! threads wake that thread through an eventfd.

use std::alloc::Layout;
use std::io;
use std::io::IoSlice;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::os::fd::FromRawFd;
use std::os::fd::OwnedFd;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::thread::ThreadId;

use io_uring::IoUring;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::debug;
use log::error;
use log::warn;
use parking_lot::Mutex;

use crate::Filesystem;
use crate::KernelConfig;
use crate::ReplyEmpty;
use crate::channel::Channel;
use crate::channel::ChannelSender;
use crate::ll::Operation;
use crate::reply::ReplySender;
use crate::request::RequestWithSender;
use crate::session::SessionEventLoop;

const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;

/// `struct fuse_uring_req_header`: `in_out` (128), `op_in` (128), `ring_ent_in_out` (32).
const OP_IN: usize = 128;
const OP_IN_SIZE: usize = 128;
const ENT_IN_OUT: usize = 256;
const HEADER_SIZE: usize = 288;
/// `fuse_uring_ent_in_out.commit_id` and `.payload_sz`.
const COMMIT_ID: usize = ENT_IN_OUT + 8;
const PAYLOAD_SZ: usize = ENT_IN_OUT + 16;
const IN_HEADER_SIZE: usize = 40;
const OUT_HEADER_SIZE: usize = 16;
/// The kernel's smallest request buffer (`FUSE_MIN_READ_BUFFER`).
const MIN_PAYLOAD: usize = 8192;
/// The most ring entries one queue thread registers. It starts with one and registers
/// another (its memory allocated then) only while every entry it has holds a request
/// answered later from another thread (a blocking lock's answer), so that such requests do
/// not hold the queue's other requests back.
const MAX_ENTRIES: usize = 64;
/// `user_data` of the eventfd read that wakes a queue's thread.
const WAKE: u64 = u64::MAX;
/// Offset of `len` in `struct io_uring_sqe` (kernel ABI, include/uapi/linux/io_uring.h).
const SQE_LEN_OFFSET: usize = 24;

/// Which transport a session serves requests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `read(2)`/`write(2)` on `/dev/fuse`.
    DevFuse,
    /// FUSE over io_uring, one queue per possible CPU.
    IoUring,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::DevFuse => "/dev/fuse",
            Transport::IoUring => "io_uring",
        })
    }
}

/// The number of queues the kernel keeps: one per possible CPU (`nr_cpu_ids`).
fn possible_cpus() -> io::Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut max = 0usize;
    for part in text.trim().split(',') {
        let last = part.rsplit('-').next().unwrap_or(part);
        let n: usize = last
            .trim()
            .parse()
            .map_err(|_| io::Error::other(format!("cannot parse possible CPUs {text:?}")))?;
        max = max.max(n);
    }
    Ok(max + 1)
}

/// The payload buffer the kernel requires of each entry: `max(max_write, max_pages * page)`.
pub(crate) fn payload_size(config: &KernelConfig) -> usize {
    let page = page_size::get();
    let pages = usize::from(config.max_pages()) * page;
    let size = (config.max_write as usize).max(pages).max(MIN_PAYLOAD);
    size.div_ceil(page) * page
}

/// One ring entry's memory: the request header area followed by the payload buffer, and the
/// two iovecs that register them.
struct EntryMem {
    ptr: *mut u8,
    layout: Layout,
    payload: usize,
    iov: Box<[libc::iovec; 2]>,
}

// SAFETY: the memory is owned by the entry; who touches it is serialized by the protocol
// (the kernel between registration/commit and the completion, then the queue's thread only).
unsafe impl Send for EntryMem {}
// SAFETY: as above; shared references never access the memory outside that protocol.
unsafe impl Sync for EntryMem {}

impl EntryMem {
    fn new(payload: usize) -> io::Result<Self> {
        let layout = Layout::from_size_align(HEADER_SIZE + payload, 4096)
            .map_err(|e| io::Error::other(e.to_string()))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        let iov = Box::new([
            libc::iovec {
                iov_base: ptr.cast(),
                iov_len: HEADER_SIZE,
            },
            libc::iovec {
                // SAFETY: within the allocation.
                iov_base: unsafe { ptr.add(HEADER_SIZE) }.cast(),
                iov_len: payload,
            },
        ]);
        Ok(Self {
            ptr,
            layout,
            payload,
            iov,
        })
    }
}

impl Drop for EntryMem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

struct Entry {
    mem: EntryMem,
    /// Set while the entry holds a request not yet answered: the one reply clears it.
    awaiting: AtomicBool,
}

/// What a queue thread shares with the senders of its replies. A kernel queue (one per
/// possible CPU) may be served by several such threads, each with a ring of its own.
pub(crate) struct Queue {
    qid: u16,
    /// Which of the threads serving the kernel queue `qid` this is.
    thread: usize,
    /// `MAX_ENTRIES` slots, filled in order as the thread registers entries.
    entries: Box<[OnceLock<Entry>]>,
    /// The payload buffer of each entry.
    payload: usize,
    /// Replies sent, staged until the queue's thread copies them into their entries.
    done: Mutex<Vec<(u16, Vec<u8>)>>,
    wake: OwnedFd,
    owner: Mutex<Option<ThreadId>>,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("qid", &self.qid)
            .field("thread", &self.thread)
            .finish()
    }
}

impl Queue {
    /// Entry `idx`, if registered.
    fn entry(&self, idx: usize) -> Option<&Entry> {
        self.entries.get(idx).and_then(OnceLock::get)
    }

    /// Allocates entry `idx`; `Ok(false)` if there is no such slot or it is taken.
    fn add_entry(&self, idx: usize) -> io::Result<bool> {
        let Some(slot) = self.entries.get(idx) else {
            return Ok(false);
        };
        let entry = Entry {
            mem: EntryMem::new(self.payload)?,
            awaiting: AtomicBool::new(false),
        };
        Ok(slot.set(entry).is_ok())
    }

    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
        let rc = unsafe { libc::write(self.wake.as_raw_fd(), (&raw const one).cast(), 8) };
        if rc != 8 {
            warn!(
                "io_uring queue {}: cannot wake its thread: {}",
                self.qid,
                io::Error::last_os_error()
            );
        }
    }
}

/// Sends the reply to one request that came on a ring entry.
#[derive(Debug, Clone)]
pub(crate) struct RingSender {
    queue: Arc<Queue>,
    idx: u16,
    dev: ChannelSender,
}

impl RingSender {
    pub(crate) fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        let Some(entry) = self.queue.entry(usize::from(self.idx)) else {
            return Err(io::Error::other("no such ring entry"));
        };
        if !entry.awaiting.swap(false, Ordering::AcqRel) {
            return Err(io::Error::other("ring entry already answered"));
        }
        let len: usize = data.iter().map(|s| s.len()).sum();
        let mut staged = Vec::with_capacity(len);
        for s in data {
            staged.extend_from_slice(s);
        }
        self.queue.done.lock().push((self.idx, staged));
        if *self.queue.owner.lock() != Some(std::thread::current().id()) {
            self.queue.wake();
        }
        Ok(())
    }

    pub(crate) fn dev(&self) -> &ChannelSender {
        &self.dev
    }
}

/// The queues' threads, their entries registered, waiting for `Session::run` to hand them the
/// filesystem. Dropped without `run`, the threads end and take their rings with them.
pub(crate) struct Rings<FS: Filesystem> {
    queues: Vec<Arc<Queue>>,
    starts: Vec<std::sync::mpsc::Sender<SessionEventLoop<FS>>>,
    threads: Vec<std::thread::JoinHandle<io::Result<()>>>,
    stop: Arc<AtomicBool>,
}

impl<FS: Filesystem> std::fmt::Debug for Rings<FS> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rings")
            .field("queues", &self.queues.len())
            .finish()
    }
}

impl<FS: Filesystem> Drop for Rings<FS> {
    fn drop(&mut self) {
        // Unblocks threads still waiting for their start (a session dropped before `run`).
        self.starts.clear();
        self.stop.store(true, Ordering::Release);
        for q in &self.queues {
            q.wake();
        }
    }
}

fn cmd_req(qid: u16, commit_id: u64) -> [u8; 80] {
    // struct fuse_uring_cmd_req { u64 flags; u64 commit_id; u16 qid; u8 padding[6]; }
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    cmd
}

fn register_sqe(fd: RawFd, queue: &Queue, idx: usize) -> io::Result<squeue::Entry128> {
    let entry = queue
        .entry(idx)
        .ok_or_else(|| io::Error::other("registering an entry without memory"))?;
    let mut sqe = opcode::UringCmd80::new(types::Fd(fd), FUSE_IO_URING_CMD_REGISTER)
        .addr(Some(entry.mem.iov.as_ptr() as u64))
        .cmd(cmd_req(queue.qid, 0))
        .build()
        .user_data(idx as u64);
    // io-uring's `UringCmd80` sets `addr` but not `len`, and the kernel wants the number of
    // iovecs there. `Entry128` is `repr(C)` around the kernel's `struct io_uring_sqe` (plain
    // integers, zero-initialized by the builder), whose `len: u32` sits at a fixed ABI offset.
    const _: () = assert!(size_of::<squeue::Entry128>() == 128);
    // SAFETY: writes a u32 to the `len` field of the SQE inside `sqe` (offset 24 of 128 bytes,
    // an integer field every bit pattern of which is valid), through a pointer to `sqe`.
    unsafe {
        (&raw mut sqe)
            .cast::<u8>()
            .add(SQE_LEN_OFFSET)
            .cast::<u32>()
            .write_unaligned(2);
    }
    Ok(sqe)
}

fn commit_sqe(fd: RawFd, qid: u16, idx: usize, commit_id: u64) -> squeue::Entry128 {
    opcode::UringCmd80::new(types::Fd(fd), FUSE_IO_URING_CMD_COMMIT_AND_FETCH)
        .cmd(cmd_req(qid, commit_id))
        .build()
        .user_data(idx as u64)
}

fn wake_sqe(queue: &Queue, buf: *mut u64) -> squeue::Entry128 {
    opcode::Read::new(types::Fd(queue.wake.as_raw_fd()), buf.cast(), 8)
        .build()
        .user_data(WAKE)
        .into()
}

/// Starts `threads` threads (`Config::n_threads`), at least one per kernel queue and as many
/// for each queue, each of which sets up a ring of its own and registers one entry on the connection of `ch` (io_uring cancels a command when
/// the task that submitted it exits, so the thread that serves an entry is the one that
/// registers it). Fails, and leaves nothing registered, when the kernel refuses a
/// registration.
///
/// Why several threads of one entry each, not one thread of several entries: the kernel
/// hands a request to the entry it made available last, and a queue's thread answers its
/// requests one at a time. With several entries on one thread, a second request of the same
/// CPU would wait behind the first even with other threads idle; with one entry per thread,
/// an available entry always belongs to a thread that waits for a request.
pub(crate) fn register<FS: Filesystem>(
    ch: &Channel,
    payload: usize,
    threads: usize,
) -> io::Result<Rings<FS>> {
    let fd = ch.as_fd().as_raw_fd();
    let nr_queues = possible_cpus()?;
    let qids = u16::try_from(nr_queues).map_err(|_| io::Error::other("too many CPUs"))?;
    let threads_per_queue = threads.div_ceil(nr_queues).max(1);
    let total = nr_queues * threads_per_queue;
    let mut rings = Rings {
        queues: Vec::with_capacity(total),
        starts: Vec::with_capacity(total),
        threads: Vec::with_capacity(total),
        stop: Arc::new(AtomicBool::new(false)),
    };
    for thread in 0..threads_per_queue {
        for qid in 0..qids {
            // SAFETY: plain system call; the result is checked.
            let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
            if efd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a new descriptor only we own.
            let wake = unsafe { OwnedFd::from_raw_fd(efd) };
            let queue = Arc::new(Queue {
                qid,
                thread,
                entries: (0..MAX_ENTRIES).map(|_| OnceLock::new()).collect(),
                payload,
                done: Mutex::new(Vec::new()),
                wake,
                owner: Mutex::new(None),
                stop: rings.stop.clone(),
            });
            let (start_tx, start_rx) = std::sync::mpsc::channel::<SessionEventLoop<FS>>();
            let (ready_tx, ready_rx) = std::sync::mpsc::channel::<io::Result<()>>();
            let q = queue.clone();
            let name = if thread == 0 {
                format!("fuser-uring-{qid}")
            } else {
                format!("fuser-uring-{qid}.{thread}")
            };
            let handle = std::thread::Builder::new().name(name).spawn(move || {
                let (ring, early) = match setup_queue(&q, fd) {
                    Ok(r) => {
                        let _ = ready_tx.send(Ok(()));
                        r
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return Ok(());
                    }
                };
                match start_rx.recv() {
                    Ok(se) => serve_queue(q, ring, early, fd, se),
                    Err(_) => Ok(()),
                }
            })?;
            rings.queues.push(queue);
            rings.starts.push(start_tx);
            rings.threads.push(handle);
            ready_rx
                .recv()
                .map_err(|_| io::Error::other("io_uring queue thread ended"))??;
        }
    }
    Ok(rings)
}

/// Sets up the ring of `queue` and registers its first entry; returns the ring and what
/// completed at once (a request, once every queue has an entry).
fn setup_queue(
    queue: &Queue,
    fd: RawFd,
) -> io::Result<(IoUring<squeue::Entry128>, Vec<(u64, i32)>)> {
    *queue.owner.lock() = Some(std::thread::current().id());
    // No COOP_TASKRUN and no SINGLE_ISSUER: with them the kernel's completion of a FUSE
    // request (task work for this thread) waited for the thread's next entry into the
    // kernel, about a scheduler tick (a stat took ~0.5 ms instead of a few µs); libfuse
    // leaves them off for the same reason.
    let mut ring: IoUring<squeue::Entry128> = IoUring::builder()
        .setup_submit_all()
        .build((2 * MAX_ENTRIES + 2) as u32)?;
    queue.add_entry(0)?;
    let sqe = register_sqe(fd, queue, 0)?;
    // SAFETY: the iovecs and the memory they name live in `queue`, which outlives the
    // ring (its thread drops the ring first).
    unsafe { ring.submission().push(&sqe) }
        .map_err(|_| io::Error::other("io_uring submission queue full"))?;
    ring.submit()?;
    // A refused registration completes at once; a good one only when a request comes.
    let early: Vec<(u64, i32)> = ring
        .completion()
        .map(|c| (c.user_data(), c.result()))
        .collect();
    if let Some(&(_, res)) = early.iter().find(|(_, res)| *res < 0) {
        return Err(io::Error::from_raw_os_error(-res));
    }
    Ok((ring, early))
}

/// Serves the session on the rings plus one `/dev/fuse` loop (FORGET, INTERRUPT, and what
/// comes before the rings are ready), until the connection ends.
pub(crate) fn run<FS: Filesystem>(
    mut rings: Rings<FS>,
    ch: Channel,
    event_loop: impl Fn(String, Channel) -> SessionEventLoop<FS>,
) -> io::Result<()> {
    for (q, start) in rings.queues.iter().zip(rings.starts.drain(..)) {
        let se = event_loop(format!("fuser-uring-{}.{}", q.qid, q.thread), ch.clone());
        start
            .send(se)
            .map_err(|_| io::Error::other("io_uring queue thread ended"))?;
    }
    let threads = std::mem::take(&mut rings.threads);
    let se = event_loop("fuser-0".to_string(), ch);
    let classic = se.event_loop();
    // The connection has ended (or failed): the queues end too (`Rings::drop`).
    drop(rings);
    let mut result = classic;
    for t in threads {
        let res = t
            .join()
            .map_err(|_| io::Error::other("io_uring queue thread panicked"))?;
        if let Err(e) = res {
            if result.is_ok() {
                result = Err(e);
            }
        }
    }
    result
}

fn serve_queue<FS: Filesystem>(
    queue: Arc<Queue>,
    mut ring: IoUring<squeue::Entry128>,
    early: Vec<(u64, i32)>,
    fd: RawFd,
    se: SessionEventLoop<FS>,
) -> io::Result<()> {
    let mut commit_ids = vec![0u64; queue.entries.len()];
    // Entries holding a request whose reply has not been committed yet.
    let mut held = vec![false; queue.entries.len()];
    // Entries registered so far (`setup_queue` registered the first).
    let mut registered = 1usize;
    let mut wake_buf: Box<u64> = Box::new(0);
    let wake_ptr: *mut u64 = &raw mut *wake_buf;
    let mut live = registered;
    // SAFETY: `wake_buf` lives until the ring is dropped at the end of this function.
    unsafe { ring.submission().push(&wake_sqe(&queue, wake_ptr)) }
        .map_err(|_| io::Error::other("io_uring submission queue full"))?;
    let mut cqes: Vec<(u64, i32)> = early;
    let result = loop {
        if cqes.is_empty() {
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => break Err(e),
            }
            cqes.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        }
        let mut rearm = false;
        let mut ended = None;
        for &(data, res) in &cqes {
            if data == WAKE {
                rearm = true;
                continue;
            }
            let Ok(idx) = usize::try_from(data) else {
                continue;
            };
            if idx >= registered {
                continue;
            }
            if res < 0 {
                match -res {
                    libc::EINTR | libc::EAGAIN => {
                        let sqe = if commit_ids[idx] == 0 {
                            register_sqe(fd, &queue, idx)
                        } else {
                            Ok(commit_sqe(fd, queue.qid, idx, commit_ids[idx]))
                        };
                        match sqe {
                            Ok(sqe) => {
                                // SAFETY: as in `register`.
                                if unsafe { ring.submission().push(&sqe) }.is_err() {
                                    ended = Some(Err(io::Error::other(
                                        "io_uring submission queue full",
                                    )));
                                }
                            }
                            Err(e) => ended = Some(Err(e)),
                        }
                    }
                    libc::ENOTCONN | libc::ENODEV => {
                        live = live.saturating_sub(1);
                    }
                    e => {
                        error!("io_uring queue {}: entry {idx}: errno {e}", queue.qid);
                        live = live.saturating_sub(1);
                        ended = Some(Err(io::Error::from_raw_os_error(e)));
                    }
                }
                continue;
            }
            held[idx] = true;
            match handle_request(&queue, idx, &se) {
                Ok((commit_id, destroy)) => {
                    commit_ids[idx] = commit_id;
                    if destroy {
                        ended = Some(Ok(()));
                    }
                }
                Err(e) => ended = Some(Err(e)),
            }
        }
        // Copy the replies into their entries, now that no request borrows them, and hand
        // the entries back.
        let done = std::mem::take(&mut *queue.done.lock());
        for (idx, reply) in done {
            let idx = usize::from(idx);
            fill_reply(&queue, idx, &reply);
            held[idx] = false;
            let sqe = commit_sqe(fd, queue.qid, idx, commit_ids[idx]);
            // SAFETY: as in `register`.
            if unsafe { ring.submission().push(&sqe) }.is_err() {
                ended = Some(Err(io::Error::other("io_uring submission queue full")));
            }
        }
        // Every entry of this thread holds a request answered later, from another thread:
        // one more entry, so that the thread serves on meanwhile.
        if ended.is_none()
            && registered < queue.entries.len()
            && held[..registered].iter().all(|h| *h)
        {
            let added = queue
                .add_entry(registered)
                .and_then(|_| register_sqe(fd, &queue, registered));
            match added {
                // SAFETY: as in `register` (the entry's memory lives in `queue`).
                Ok(sqe) => match unsafe { ring.submission().push(&sqe) } {
                    Ok(()) => {
                        registered += 1;
                        live += 1;
                    }
                    Err(_) => ended = Some(Err(io::Error::other("io_uring submission queue full"))),
                },
                // Out of memory for another entry: serve on with those there are.
                Err(e) => warn!("io_uring queue {}: no further entry: {e}", queue.qid),
            }
        }
        cqes.clear();
        if let Some(end) = ended {
            break end;
        }
        if live == 0 {
            break Ok(());
        }
        if rearm {
            if queue.stop.load(Ordering::Acquire) {
                break Ok(());
            }
            // SAFETY: as above.
            if unsafe { ring.submission().push(&wake_sqe(&queue, wake_ptr)) }.is_err() {
                break Err(io::Error::other("io_uring submission queue full"));
            }
        }
    };
    debug!("io_uring queue {} ends: {result:?}", queue.qid);
    drop(ring);
    drop(wake_buf);
    result
}

/// Dispatches the request that came on entry `idx`; returns its commit id and whether it
/// was DESTROY.
fn handle_request<FS: Filesystem>(
    queue: &Arc<Queue>,
    idx: usize,
    se: &SessionEventLoop<FS>,
) -> io::Result<(u64, bool)> {
    let Some(entry) = queue.entry(idx) else {
        return Err(io::Error::other("a request on an unregistered ring entry"));
    };
    let base = entry.mem.ptr;
    // SAFETY: the completion was observed, so the kernel has written the request and will
    // not touch the entry before it is committed again: this thread owns the memory. The
    // reads are of plain integers within the header area.
    let (len, commit_id, payload_sz) = unsafe {
        (
            base.cast::<u32>().read_unaligned() as usize,
            base.add(COMMIT_ID).cast::<u64>().read_unaligned(),
            base.add(PAYLOAD_SZ).cast::<u32>().read_unaligned() as usize,
        )
    };
    if commit_id == 0 {
        // The kernel could never match the answer: better to stop than hang a request.
        return Err(io::Error::other("io_uring request with commit id 0"));
    }
    let Some(op_size) = len
        .checked_sub(IN_HEADER_SIZE + payload_sz)
        .filter(|&s| s <= OP_IN_SIZE && payload_sz <= entry.mem.payload)
    else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("io_uring request of {len} bytes with a payload of {payload_sz}"),
        ));
    };
    let sender = RingSender {
        queue: queue.clone(),
        idx: idx as u16,
        dev: se.ch.sender(),
    };
    entry.awaiting.store(true, Ordering::Release);
    // fuser parses one contiguous request: the header, the op's fixed arguments, the rest.
    // Moved in place right before the payload when that keeps them aligned (the fixed
    // arguments are multiples of 8 bytes), else copied out.
    let mut scratch: Vec<u64>;
    let data: &[u8] = if op_size % 8 == 0 {
        let start = HEADER_SIZE - op_size - IN_HEADER_SIZE;
        // SAFETY: this thread owns the entry (above); the regions are within the allocation,
        // `ptr::copy` allows overlap, and the slice covers bytes the kernel wrote or zeroed
        // memory, all initialized.
        unsafe {
            std::ptr::copy(base.add(OP_IN), base.add(HEADER_SIZE - op_size), op_size);
            std::ptr::copy(base, base.add(start), IN_HEADER_SIZE);
            std::slice::from_raw_parts(base.add(start), len)
        }
    } else {
        scratch = vec![0u64; len.div_ceil(8)];
        let dst = scratch.as_mut_ptr().cast::<u8>();
        // SAFETY: as above for the sources; `scratch` holds at least `len` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(base, dst, IN_HEADER_SIZE);
            std::ptr::copy_nonoverlapping(base.add(OP_IN), dst.add(IN_HEADER_SIZE), op_size);
            std::ptr::copy_nonoverlapping(
                base.add(HEADER_SIZE),
                dst.add(IN_HEADER_SIZE + op_size),
                payload_sz,
            );
            std::slice::from_raw_parts(dst, len)
        }
    };
    match RequestWithSender::new_ring(sender.clone(), data) {
        Some(req) => {
            if let Ok(Operation::Destroy(_)) = req.request.operation() {
                req.reply::<ReplyEmpty>().ok();
                return Ok((commit_id, true));
            }
            req.dispatch(se);
        }
        None => {
            // Unparseable: answer EIO so the entry comes back.
            let mut out = [0u8; OUT_HEADER_SIZE];
            out[0..4].copy_from_slice(&(OUT_HEADER_SIZE as u32).to_ne_bytes());
            out[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
            out[8..16].copy_from_slice(&commit_id.to_ne_bytes());
            ReplySender::Ring(sender).send(&[IoSlice::new(&out)])?;
        }
    }
    Ok((commit_id, false))
}

/// Copies a staged reply (`fuse_out_header` and body) into entry `idx`.
fn fill_reply(queue: &Queue, idx: usize, reply: &[u8]) {
    let Some(entry) = queue.entry(idx) else {
        return;
    };
    let base = entry.mem.ptr;
    let mut header = [0u8; OUT_HEADER_SIZE];
    let n = reply.len().min(OUT_HEADER_SIZE);
    header[..n].copy_from_slice(&reply[..n]);
    let mut body = &reply[n..];
    if body.len() > entry.mem.payload {
        error!(
            "io_uring queue {}: reply of {} bytes exceeds the payload buffer ({}); answering EIO",
            queue.qid,
            body.len(),
            entry.mem.payload
        );
        header[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
        body = &[];
    }
    // SAFETY: the entry is answered and not yet committed: only this thread touches it, and
    // no request borrows it any more (dispatch has returned). Writes stay in the allocation.
    unsafe {
        std::ptr::copy_nonoverlapping(header.as_ptr(), base, OUT_HEADER_SIZE);
        std::ptr::copy_nonoverlapping(body.as_ptr(), base.add(HEADER_SIZE), body.len());
        base.add(PAYLOAD_SZ)
            .cast::<u32>()
            .write_unaligned(body.len() as u32);
    }
}
