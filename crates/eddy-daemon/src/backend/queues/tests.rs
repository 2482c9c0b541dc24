//! The queues' tests: merging, order, fairness, bounds, with real files and threads.
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
