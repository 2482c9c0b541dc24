//! Per-object queues of backend I/O (decision 0074, DCFS3's per-object queues): a daemon's
//! backend reads and writes wait in the queue of their backend file for at most
//! `backend_merge_window_us`; adjacent ones there go as one `pread` or `pwrite` of at most
//! `backend_merge_max_bytes`. A writer that has handed over all it has (a write-back of a
//! file's dirty chunks) `kick`s its queue, which then goes at once without waiting. A read
//! of a file none of whose reads is out goes at once: reads wait for each other only while
//! one of their file is out (a lone reader pays nothing for the queue).
//!
//! Objects: a write's object is the backend file's inode (device, inode number) as the
//! write-back opened it, so two write-backs of one path that opened different files never
//! mix; a read's object is its backend path (each fetch opens it anew).
//!
//! Order and fairness: one dispatcher thread takes, from the objects whose oldest request
//! waited out the window (or that were kicked, or hold `max` bytes), one batch at a time,
//! round robin (the object served goes to the back of the ring), and hands it to the
//! backend threads; at most `slots` batches are out at once (the backend threads), so that
//! requests wait in their queues, where they merge and are served in turn, rather than in
//! the backend threads' channel. An object's writes go one batch at a time and in the order
//! they came, except that a request joins a batch ahead of earlier ones only when it
//! overlaps none of them: a chunk written back twice reaches the backend in the order it
//! was read. A queue holds at most `max` bytes (or `MAX_QUEUED` requests); a request for a
//! full queue waits for room (bounded memory, whatever the writers).

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::Job;

/// At most this many requests wait in one object's queue.
const MAX_QUEUED: usize = 256;

/// What a backend object is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Object {
    /// A backend file opened for writing back: its device and inode numbers.
    File { dev: u64, ino: u64 },
    /// A backend path read from.
    Path(PathBuf),
}

/// The answer to one request: the bytes read (a write: none), or the error of its call.
pub type Answer = std::io::Result<Vec<u8>>;

enum Op {
    Read { len: usize },
    Write { data: Vec<u8> },
}

struct Req {
    offset: u64,
    op: Op,
    arrived: Instant,
    answer: mpsc::SyncSender<Answer>,
}

impl Req {
    fn len(&self) -> u64 {
        match &self.op {
            Op::Read { len } => *len as u64,
            Op::Write { data } => data.len() as u64,
        }
    }
    fn end(&self) -> u64 {
        self.offset.saturating_add(self.len())
    }
}

enum Target {
    Read(PathBuf),
    Write(Arc<File>),
}

struct Queue {
    target: Target,
    reqs: VecDeque<Req>,
    bytes: u64,
    kicked: bool,
    /// Batches of this object out now.
    out: usize,
    /// Writers still handing requests over (`hold_file`): the window does not run out on
    /// them; only a full queue goes.
    holders: usize,
}

#[derive(Default)]
struct Inner {
    objects: HashMap<Object, Queue>,
    /// Objects with requests waiting, in turn order.
    ring: VecDeque<Object>,
    /// Batches out now (all objects).
    out: usize,
    stop: bool,
    /// The order batches were issued in (object, offset, requests), kept for the tests.
    #[cfg(test)]
    issued: Vec<(Object, u64, usize)>,
}

/// The backend tier's data calls, since the daemon started (always counted: `eddy status`
/// shows them; `BackendCounters` counts them for `eddy stats` when counting is on).
#[derive(Default)]
pub struct CallCounts {
    /// Backend `pread` and `pwrite` calls (of fetches and write-backs).
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    /// Requests that went in the call of another (a batch of n counts n - 1).
    pub merged_reads: AtomicU64,
    pub merged_writes: AtomicU64,
}

impl CallCounts {
    pub fn read(&self, requests: u64) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.merged_reads
            .fetch_add(requests.saturating_sub(1), Ordering::Relaxed);
    }
    pub fn wrote(&self, requests: u64) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.merged_writes
            .fetch_add(requests.saturating_sub(1), Ordering::Relaxed);
    }
}

struct Shared {
    inner: Mutex<Inner>,
    /// The dispatcher waits on it for requests, due times and free slots.
    wake: Condvar,
    /// Submitters of a full queue wait on it for room.
    room: Condvar,
    window: Duration,
    max: u64,
    slots: usize,
    counts: Arc<CallCounts>,
    io: Arc<crate::stats::BackendCounters>,
}

/// The queues of one daemon's backend I/O, and their dispatcher thread (stopped on drop).
pub struct Queues {
    shared: Arc<Shared>,
}

/// A request handed to a queue: wait for its answer.
pub struct Ticket {
    rx: mpsc::Receiver<Answer>,
}

impl Ticket {
    /// The request's answer, within `deadline`; `None` past it (the backend hangs).
    pub fn wait(self, deadline: Duration) -> Option<Answer> {
        match self.rx.recv_timeout(deadline) {
            Ok(a) => Some(a),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => Some(Err(std::io::Error::other(
                "the backend queue stopped before answering",
            ))),
        }
    }
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    eddy_proto::sync::lock(m)
}

/// An error for each request of a failed call: the same errno and message.
fn copy_err(e: &std::io::Error) -> std::io::Error {
    match e.raw_os_error() {
        Some(n) => std::io::Error::from_raw_os_error(n),
        None => std::io::Error::new(e.kind(), e.to_string()),
    }
}

impl Queues {
    /// Queues whose batches run on the backend threads fed by `jobs`; `slots` batches at
    /// most out at once (the number of backend threads).
    pub fn new(
        window: Duration,
        max: u64,
        slots: usize,
        jobs: mpsc::Sender<Job>,
        counts: Arc<CallCounts>,
        io: Arc<crate::stats::BackendCounters>,
    ) -> Queues {
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            wake: Condvar::new(),
            room: Condvar::new(),
            window,
            max: max.max(1),
            slots: slots.max(1),
            counts,
            io,
        });
        let s = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("eddyd-backend-queues".into())
            .spawn(move || dispatch(&s, &jobs));
        if let Err(e) = spawned {
            tracing::error!("cannot start the backend queues' dispatcher: {e}");
        }
        Queues { shared }
    }

    #[cfg(test)]
    fn counts(&self) -> &CallCounts {
        &self.shared.counts
    }

    /// Queues a read of `len` bytes at `offset` of the backend file at `path` (short at its
    /// end, empty if it does not exist).
    pub fn read(&self, path: PathBuf, offset: u64, len: usize, wait: Duration) -> Ticket {
        let object = Object::Path(path.clone());
        self.submit(object, Target::Read(path), offset, Op::Read { len }, wait)
    }

    /// Queues a write of `data` at `offset` of `file` (opened for writing back).
    pub fn write(&self, file: &Arc<File>, offset: u64, data: Vec<u8>, wait: Duration) -> Ticket {
        let target = Target::Write(Arc::clone(file));
        self.submit(file_object(file), target, offset, Op::Write { data }, wait)
    }

    /// A writer is about to hand over several writes of `file` (a write-back of its dirty
    /// chunks): until `kick_file`, its queue goes only when full, however long the writer
    /// takes to read its chunks. Every `hold_file` must be followed by a `kick_file`.
    pub fn hold_file(&self, file: &Arc<File>) {
        let mut inner = lock(&self.shared.inner);
        inner
            .objects
            .entry(file_object(file))
            .or_insert_with(|| Queue::new(Target::Write(Arc::clone(file))))
            .holders += 1;
    }

    /// The writer of `file` has handed over what it had (`hold_file`): its queue goes at
    /// once.
    pub fn kick_file(&self, file: &Arc<File>) {
        let object = file_object(file);
        let mut inner = lock(&self.shared.inner);
        let Some(q) = inner.objects.get_mut(&object) else {
            return;
        };
        q.holders = q.holders.saturating_sub(1);
        if !q.reqs.is_empty() {
            q.kicked = true;
        } else if q.out == 0 && q.holders == 0 {
            inner.objects.remove(&object);
        }
        self.shared.wake.notify_all();
    }

    fn submit(
        &self,
        object: Object,
        target: Target,
        offset: u64,
        op: Op,
        wait: Duration,
    ) -> Ticket {
        let (tx, rx) = mpsc::sync_channel(1);
        let s = &self.shared;
        let mut req = Req {
            offset,
            op,
            arrived: Instant::now(),
            answer: tx,
        };
        let until = Instant::now() + wait;
        let mut inner = lock(&s.inner);
        // A full queue: wait for room (its batches go out meanwhile: a full queue is due).
        loop {
            let full = inner
                .objects
                .get(&object)
                .is_some_and(|q| q.reqs.len() >= MAX_QUEUED || q.bytes >= s.max);
            if !full || inner.stop {
                break;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let _ = req.answer.send(Err(std::io::Error::new(
                    ErrorKind::TimedOut,
                    "the backend file's queue stayed full",
                )));
                return Ticket { rx };
            }
            inner = match s.room.wait_timeout(inner, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        req.arrived = Instant::now();
        let len = req.len();
        let inner_ref = &mut *inner;
        let q = inner_ref
            .objects
            .entry(object.clone())
            .or_insert_with(|| Queue::new(target));
        if q.reqs.is_empty() {
            inner_ref.ring.push_back(object);
        }
        q.reqs.push_back(req);
        q.bytes += len;
        s.wake.notify_all();
        Ticket { rx }
    }
}

impl Queue {
    fn new(target: Target) -> Queue {
        Queue {
            target,
            reqs: VecDeque::new(),
            bytes: 0,
            kicked: false,
            out: 0,
            holders: 0,
        }
    }
}

/// The object of a file opened for writing back: its device and inode numbers.
fn file_object(file: &Arc<File>) -> Object {
    use std::os::unix::fs::MetadataExt;
    match file.metadata() {
        Ok(m) => Object::File {
            dev: m.dev(),
            ino: m.ino(),
        },
        // Cannot tell the file: a queue of its own (the descriptor's address) that merges
        // with nothing else.
        Err(_) => Object::File {
            dev: u64::MAX,
            ino: Arc::as_ptr(file) as u64,
        },
    }
}

impl Drop for Queues {
    fn drop(&mut self) {
        lock(&self.shared.inner).stop = true;
        self.shared.wake.notify_all();
        self.shared.room.notify_all();
    }
}

/// Whether `q` may send a batch now, and if not, when it will be due (None: when something
/// else changes: a batch of it comes back).
fn due(q: &Queue, s: &Shared, now: Instant) -> Result<(), Option<Instant>> {
    if q.reqs.is_empty() {
        return Err(None);
    }
    let writes = matches!(q.target, Target::Write(_));
    if writes && q.out > 0 {
        return Err(None);
    }
    // A read of a file none of whose reads is out goes at once (a lone reader waits for
    // nothing); reads that come while one is out wait for each other, up to the window.
    let idle_read = !writes && q.out == 0;
    if idle_read || q.kicked || q.bytes >= s.max || q.reqs.len() >= MAX_QUEUED {
        return Ok(());
    }
    if q.holders > 0 {
        return Err(None);
    }
    let oldest = q.reqs.iter().map(|r| r.arrived).min().unwrap_or(now);
    let at = oldest + s.window;
    if at <= now {
        Ok(())
    } else {
        Err(Some(at))
    }
}

/// Takes a batch from the front of `q`: its first request and those adjacent to the run,
/// up to `max` bytes. A write joins ahead of earlier requests only if it overlaps none of
/// them.
fn take(q: &mut Queue, max: u64) -> Vec<Req> {
    let Some(first) = q.reqs.pop_front() else {
        return Vec::new();
    };
    let writes = matches!(q.target, Target::Write(_));
    let (mut start, mut end) = (first.offset, first.end());
    let mut batch = VecDeque::from([first]);
    loop {
        let mut joined = None;
        for (i, r) in q.reqs.iter().enumerate() {
            let size = end - start;
            if size.saturating_add(r.len()) > max {
                continue;
            }
            let after = r.offset == end;
            let before = r.end() == start && r.len() > 0;
            if !(after || before) {
                continue;
            }
            let passes = |o: &Req| o.offset < r.end() && r.offset < o.end();
            if writes && q.reqs.iter().take(i).any(passes) {
                continue;
            }
            joined = Some((i, after));
            break;
        }
        let Some((i, after)) = joined else { break };
        let Some(r) = q.reqs.remove(i) else { break };
        if after {
            end = r.end();
            batch.push_back(r);
        } else {
            start = r.offset;
            batch.push_front(r);
        }
    }
    let taken: u64 = batch.iter().map(Req::len).sum();
    q.bytes = q.bytes.saturating_sub(taken);
    if q.reqs.is_empty() {
        q.kicked = false;
    }
    batch.into()
}

fn dispatch(s: &Arc<Shared>, jobs: &mpsc::Sender<Job>) {
    let mut inner = lock(&s.inner);
    loop {
        if inner.stop {
            return;
        }
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let mut chosen = None;
        if inner.out < s.slots {
            for (pos, object) in inner.ring.iter().enumerate() {
                let Some(q) = inner.objects.get(object) else {
                    continue;
                };
                match due(q, s, now) {
                    Ok(()) => {
                        chosen = Some(pos);
                        break;
                    }
                    Err(Some(at)) => next = Some(next.map_or(at, |n| n.min(at))),
                    Err(None) => {}
                }
            }
        }
        let Some(pos) = chosen else {
            inner = match next {
                Some(at) => {
                    let left = at.saturating_duration_since(now);
                    match s.wake.wait_timeout(inner, left) {
                        Ok((g, _)) => g,
                        Err(p) => p.into_inner().0,
                    }
                }
                None => match s.wake.wait(inner) {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                },
            };
            continue;
        };
        let Some(object) = inner.ring.remove(pos) else {
            continue;
        };
        let max = s.max;
        let Some(q) = inner.objects.get_mut(&object) else {
            continue;
        };
        let batch = take(q, max);
        q.out += 1;
        let target = match &q.target {
            Target::Read(p) => Target::Read(p.clone()),
            Target::Write(f) => Target::Write(Arc::clone(f)),
        };
        let more = !q.reqs.is_empty();
        if more {
            // Its turn is over: to the back of the ring.
            inner.ring.push_back(object.clone());
        }
        inner.out += 1;
        #[cfg(test)]
        inner.issued.push((
            object.clone(),
            batch.first().map_or(0, |r| r.offset),
            batch.len(),
        ));
        s.room.notify_all();
        drop(inner);
        let s2 = Arc::clone(s);
        let job: Job = Box::new(move || {
            run(&s2, &target, batch);
            let mut inner = lock(&s2.inner);
            inner.out = inner.out.saturating_sub(1);
            if let Some(q) = inner.objects.get_mut(&object) {
                q.out = q.out.saturating_sub(1);
                if q.out == 0 && q.reqs.is_empty() && q.holders == 0 {
                    inner.objects.remove(&object);
                }
            }
            s2.wake.notify_all();
        });
        if let Err(mpsc::SendError(job)) = jobs.send(job) {
            // No backend thread: run it here rather than lose it.
            job();
        }
        inner = lock(&s.inner);
    }
}

/// One call for the batch, then each request's answer.
fn run(s: &Shared, target: &Target, batch: Vec<Req>) {
    use std::os::unix::fs::FileExt;
    let Some(start) = batch.first().map(|r| r.offset) else {
        return;
    };
    let total: u64 = batch.iter().map(Req::len).sum();
    let n = batch.len() as u64;
    match target {
        Target::Write(file) => {
            let result = if batch.len() == 1 {
                match &batch[0].op {
                    Op::Write { data } => file.write_all_at(data, start),
                    Op::Read { .. } => Ok(()),
                }
            } else {
                let mut buf = Vec::with_capacity(total as usize);
                for r in &batch {
                    if let Op::Write { data } = &r.op {
                        buf.extend_from_slice(data);
                    }
                }
                file.write_all_at(&buf, start)
            };
            s.counts.wrote(n);
            if result.is_ok() {
                s.io.wrote(total, n);
            }
            for r in batch {
                let _ = r.answer.send(match &result {
                    Ok(()) => Ok(Vec::new()),
                    Err(e) => Err(copy_err(e)),
                });
            }
        }
        Target::Read(path) => {
            let result = super::read_range(path, start, total as usize);
            s.counts.read(n);
            match result {
                Ok(buf) => {
                    s.io.read(buf.len() as u64, n);
                    for r in batch {
                        let from = ((r.offset - start) as usize).min(buf.len());
                        let to = (from + r.len() as usize).min(buf.len());
                        let _ = r.answer.send(Ok(buf[from..to].to_vec()));
                    }
                }
                Err(e) => {
                    for r in batch {
                        let _ = r.answer.send(Err(copy_err(&e)));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
