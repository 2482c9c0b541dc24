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
mod tests {
    use super::*;

    /// Backend threads as the daemon's: `n` of them on a channel.
    fn threads(n: usize) -> mpsc::Sender<Job> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..n {
            let rx = Arc::clone(&rx);
            std::thread::spawn(move || loop {
                let job = match rx.lock() {
                    Ok(g) => g.recv(),
                    Err(p) => p.into_inner().recv(),
                };
                match job {
                    Ok(job) => job(),
                    Err(_) => return,
                }
            });
        }
        tx
    }

    fn open_rw(path: &std::path::Path) -> Arc<File> {
        Arc::new(
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .unwrap(),
        )
    }

    const WAIT: Duration = Duration::from_secs(60);

    fn queues(window: Duration, max: u64, slots: usize, jobs: mpsc::Sender<Job>) -> Queues {
        let io = Arc::new(crate::stats::BackendCounters::new(true));
        Queues::new(window, max, slots, jobs, Arc::default(), io)
    }

    /// Adjacent writes handed over together go as one pwrite, and every byte lands; a read of
    /// adjacent ranges by several threads at once merges and each gets its own bytes.
    #[test]
    fn adjacent_writes_and_reads_merge_and_land_where_they_belong() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let rec = 47_008usize;
        // A window far longer than the test: the queues go when full (16 records) or kicked.
        let q = queues(Duration::from_secs(600), 16 * rec as u64, 4, threads(4));
        let f = open_rw(&path);
        let mut want = vec![0u8; 16 * rec];
        let mut tickets = Vec::new();
        q.hold_file(&f);
        // Out of order (odd records first), as several ranks' records come.
        for i in (1..16).step_by(2).chain((0..16).step_by(2)) {
            let data: Vec<u8> = (0..rec).map(|b| (i * 31 + b % 251) as u8).collect();
            want[i * rec..(i + 1) * rec].copy_from_slice(&data);
            tickets.push(q.write(&f, (i * rec) as u64, data, WAIT));
        }
        q.kick_file(&f);
        for t in tickets {
            t.wait(WAIT).unwrap().unwrap();
        }
        assert_eq!(std::fs::read(&path).unwrap(), want);
        let c = q.counts();
        assert_eq!(
            c.writes.load(Ordering::Relaxed),
            1,
            "one pwrite of 16 records"
        );
        assert_eq!(c.merged_writes.load(Ordering::Relaxed), 15);

        // Reads: the first goes at once (nothing of its file is out); three adjacent ones
        // that come while it is out (its backend thread held busy) go as one pread.
        let jobs = threads(1);
        let (hold_tx, hold_rx) = mpsc::channel::<()>();
        jobs.send(Box::new(move || {
            let _ = hold_rx.recv();
        }))
        .unwrap();
        let q = queues(Duration::from_secs(600), 12 * rec as u64, 4, jobs);
        let readers: Vec<_> = (0..4)
            .map(|i| {
                let t = q.read(path.clone(), (i * 4 * rec) as u64, 4 * rec, WAIT);
                (i, t)
            })
            .collect();
        hold_tx.send(()).unwrap();
        for (i, t) in readers {
            let got = t.wait(WAIT).unwrap().unwrap();
            assert_eq!(got, want[i * 4 * rec..(i + 1) * 4 * rec]);
        }
        let c = q.counts();
        assert_eq!(c.reads.load(Ordering::Relaxed), 2);
        assert_eq!(c.merged_reads.load(Ordering::Relaxed), 2);
        // Past the end: short; a missing file: empty.
        let q = queues(Duration::ZERO, 16 * rec as u64, 4, threads(4));
        let t = q.read(path.clone(), (15 * rec) as u64, 2 * rec, WAIT);
        assert_eq!(t.wait(WAIT).unwrap().unwrap().len(), rec);
        let t = q.read(dir.path().join("none"), 0, 10, WAIT);
        assert!(t.wait(WAIT).unwrap().unwrap().is_empty());
    }

    /// A write that overlaps an earlier one is never issued ahead of it: the later bytes win.
    #[test]
    fn overlapping_writes_keep_their_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let q = queues(Duration::from_secs(30), 1 << 20, 4, threads(4));
        let f = open_rw(&path);
        q.hold_file(&f);
        let a = q.write(&f, 100, vec![1u8; 100], WAIT);
        let b = q.write(&f, 0, vec![2u8; 150], WAIT); // ends inside a: not adjacent
        let c = q.write(&f, 200, vec![3u8; 100], WAIT); // adjacent to a, overlaps nothing
        let d = q.write(&f, 150, vec![4u8; 50], WAIT); // adjacent to b's end, overlaps a
        q.kick_file(&f);
        for t in [a, b, c, d] {
            t.wait(WAIT).unwrap().unwrap();
        }
        let got = std::fs::read(&path).unwrap();
        let mut want = vec![2u8; 150];
        want.extend(vec![4u8; 50]);
        want.extend(vec![3u8; 100]);
        assert_eq!(got, want);
    }

    /// A big object's queue does not hold a small one's write past one of its batches: with
    /// one slot, a small file's write handed over after 64 batches' worth of a big file's
    /// is issued second, not last.
    #[test]
    fn one_objects_queue_does_not_starve_anothers() {
        let dir = tempfile::tempdir().unwrap();
        let (big, small) = (dir.path().join("big"), dir.path().join("small"));
        let max = 64 * 1024u64;
        // One backend thread, held busy until everything is queued.
        let jobs = threads(1);
        let (hold_tx, hold_rx) = mpsc::channel::<()>();
        jobs.send(Box::new(move || {
            let _ = hold_rx.recv();
        }))
        .unwrap();
        let q = Arc::new(queues(Duration::ZERO, max, 1, jobs));
        let fb = open_rw(&big);
        let fs = open_rw(&small);
        let bigs = 64 * (max / 4096);
        // The big object's writer hands over 64 batches' worth from a thread of its own
        // (it waits for room in its queue as batches go).
        let (q2, fb2) = (Arc::clone(&q), Arc::clone(&fb));
        let writer = std::thread::spawn(move || {
            let tickets: Vec<_> = (0..bigs)
                .map(|i| q2.write(&fb2, i * 4096, vec![7u8; 4096], WAIT))
                .collect();
            for t in tickets {
                t.wait(WAIT).unwrap().unwrap();
            }
        });
        // Wait until the big queue is full (its first batch is out, held by the busy thread).
        let full = || {
            let inner = lock(&q.shared.inner);
            inner.issued.len() == 1
                && inner
                    .objects
                    .values()
                    .any(|o| o.bytes >= max && matches!(o.target, Target::Write(_)))
        };
        let t0 = Instant::now();
        while !full() {
            assert!(t0.elapsed() < WAIT, "the big queue never filled");
            std::thread::sleep(Duration::from_millis(1));
        }
        let s = q.write(&fs, 0, vec![9u8; 4096], WAIT);
        hold_tx.send(()).unwrap();
        s.wait(WAIT).unwrap().unwrap();
        writer.join().unwrap();
        let issued = lock(&q.shared.inner).issued.clone();
        let small_at = issued
            .iter()
            .position(|(o, _, _)| {
                matches!(o, Object::File { ino, .. }
                    if *ino == std::fs::metadata(&small).unwrap().ino())
            })
            .expect("the small file's write was issued");
        assert!(
            small_at <= 2,
            "the small file's write went out as batch {small_at} of {}",
            issued.len()
        );
        assert!(issued.len() >= 64, "{} batches", issued.len());
        assert_eq!(std::fs::read(&small).unwrap(), vec![9u8; 4096]);
        assert_eq!(
            std::fs::read(&big).unwrap(),
            vec![7u8; (bigs * 4096) as usize]
        );
    }

    /// A write-back that hands over more than a queue holds: it waits for room as batches
    /// go, and adjacent writes still go together, `max` bytes at a time.
    #[test]
    fn a_full_queue_still_merges_what_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let q = queues(Duration::from_secs(600), 4 * 4096, 4, threads(4));
        let f = open_rw(&path);
        q.hold_file(&f);
        let tickets: Vec<_> = (0..12u64)
            .map(|i| q.write(&f, i * 4096, vec![i as u8; 4096], WAIT))
            .collect();
        q.kick_file(&f);
        for t in tickets {
            t.wait(WAIT).unwrap().unwrap();
        }
        let c = q.counts();
        assert_eq!(c.writes.load(Ordering::Relaxed), 3);
        assert_eq!(c.merged_writes.load(Ordering::Relaxed), 9);
    }

    /// A write-back of scattered chunks through a queue that fills: one pwrite per run of
    /// adjacent chunks, however the queue's batches and the hand-over interleave.
    #[test]
    fn scattered_chunks_go_as_one_write_per_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let cs = 4096u64;
        let q = queues(Duration::from_micros(200), 16 * cs, 16, threads(16));
        let f = open_rw(&path);
        // Every chunk k whose pseudo-random draw is below a third, of 300.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let owned: Vec<u64> = (0..300u64)
            .filter(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.is_multiple_of(3)
            })
            .collect();
        let runs = 1 + owned.windows(2).filter(|w| w[1] != w[0] + 1).count() as u64;
        q.hold_file(&f);
        let mut tickets = Vec::new();
        for &k in &owned {
            std::thread::sleep(Duration::from_micros(300));
            tickets.push(q.write(&f, k * cs, vec![k as u8; cs as usize], WAIT));
        }
        q.kick_file(&f);
        for t in tickets {
            t.wait(WAIT).unwrap().unwrap();
        }
        let c = q.counts();
        let writes = c.writes.load(Ordering::Relaxed);
        assert!(
            writes <= runs + owned.len() as u64 / 16,
            "{writes} writes for {runs} runs of {} chunks",
            owned.len()
        );
    }

    use std::os::unix::fs::MetadataExt;
}
