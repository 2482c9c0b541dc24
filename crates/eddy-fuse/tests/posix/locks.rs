//! Advisory locks through real FUSE mounts of a 3-daemon deployment: HDF5 and SQLite end to
//! end, SQLite writers on two mounts, flock and fcntl exclusion between mounts, release when
//! the holder is killed or its mount stops, and an interrupted wait. These tests need FUSE,
//! python3 with h5py and flock(1): without them they fail.

use eddy_testkit::python::{finish, py, py_spawn, wait_line, PYTHON};
use eddy_testkit::{test_config, Mounted};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn mounted() -> Mounted {
    Mounted::start_with(3, test_config())
}

/// Holds an exclusive lock (`fcntl`: lockf on bytes 0..10, `flock`: flock) on argv[1],
/// prints "locked", then sleeps argv[2] seconds and exits (releasing it).
const HOLD: &str = r#"
import fcntl, sys, time
f = open(sys.argv[1], 'a+')
how = sys.argv[3]
if how == 'flock':
    fcntl.flock(f, fcntl.LOCK_EX)
else:
    fcntl.lockf(f, fcntl.LOCK_EX, 10, 0)
print('locked', flush=True)
time.sleep(float(sys.argv[2]))
"#;

#[test]
fn hdf5_and_sqlite_work_on_the_mount() {
    let m = mounted();
    let h5 = m.path("data.h5");
    let db = m.path("data.db");
    py(
        r#"
import sys, h5py, numpy as np, sqlite3
with h5py.File(sys.argv[1], 'w') as f:
    f.create_dataset('x', data=np.arange(100000, dtype='i8'))
    f.attrs['run'] = 7
with h5py.File(sys.argv[1], 'a') as f:
    f['x'][5] = -5
with h5py.File(sys.argv[1], 'r') as f:
    x = f['x'][:]
    assert f.attrs['run'] == 7 and x[5] == -5 and x[99999] == 99999 and x.sum() == 4999950000 - 10
c = sqlite3.connect(sys.argv[2])
c.execute('create table t (k integer primary key, v text)')
c.executemany('insert into t (v) values (?)', [('row %d' % i,) for i in range(2000)])
c.commit()
c.close()
c = sqlite3.connect(sys.argv[2])
assert c.execute('select count(*), max(v) from t').fetchone() == (2000, 'row 999')
assert c.execute('pragma integrity_check').fetchone()[0] == 'ok'
"#,
        &[&h5, &db],
    );
}

#[test]
fn sqlite_writers_on_two_mounts_take_turns() {
    let m = mounted();
    let other = m.another_mount();
    let (a, b) = (m.path("shared.db"), other.path("shared.db"));
    py(
        r#"
import sys, sqlite3
c = sqlite3.connect(sys.argv[1])
c.execute('create table counter (n integer)')
c.execute('insert into counter values (0)')
c.execute('create table log (who text, n integer)')
c.commit()
"#,
        &[&a],
    );
    // The first writer holds an exclusive transaction for 2 s; the second must wait for it.
    let (holder, mut out) = py_spawn(
        r#"
import sys, sqlite3, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute('begin exclusive')
c.execute("insert into log values ('holder', 0)")
print('locked', flush=True)
time.sleep(2)
c.execute('commit')
"#,
        &[&a],
    );
    wait_line(&mut out, "locked");
    let t = Instant::now();
    py(
        r#"
import sys, sqlite3
c = sqlite3.connect(sys.argv[1], timeout=60)
c.execute("insert into log values ('waiter', 1)")
c.commit()
"#,
        &[&b],
    );
    let waited = t.elapsed();
    finish(holder);
    assert!(
        waited >= Duration::from_millis(1000),
        "the second writer did not wait: {waited:?}"
    );
    // Then both mounts increment one counter in turns, many times each.
    let incr = r#"
import sys, sqlite3
c = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
for i in range(150):
    c.execute('begin immediate')
    n = c.execute('select n from counter').fetchone()[0]
    c.execute('update counter set n = ?', (n + 1,))
    c.execute('commit')
"#;
    let (p1, _o1) = py_spawn(incr, &[&a]);
    let (p2, _o2) = py_spawn(incr, &[&b]);
    finish(p1);
    finish(p2);
    let got = py(
        r#"
import sys, sqlite3
c = sqlite3.connect(sys.argv[1])
print(c.execute('pragma integrity_check').fetchone()[0])
print(c.execute('select n from counter').fetchone()[0])
print(sorted(c.execute('select who from log').fetchall()))
"#,
        &[&b],
    );
    assert_eq!(got, "ok\n300\n[('holder',), ('waiter',)]\n", "{got}");
}

#[test]
fn flock_and_fcntl_exclude_across_mounts() {
    let m = mounted();
    let other = m.another_mount();
    let (a, b) = (m.path("f"), other.path("f"));
    std::fs::write(&a, b"0123456789abcdefghij").expect("write");

    // flock: non-blocking attempts fail on the other mount, a blocking one waits.
    let (holder, mut out) = py_spawn(HOLD, &[&a, Path::new("2"), Path::new("flock")]);
    wait_line(&mut out, "locked");
    let st = Command::new("flock")
        .args(["-n", "-x"])
        .arg(&b)
        .arg("true")
        .status()
        .expect("flock(1) is required");
    assert_eq!(st.code(), Some(1), "flock -n got a held lock");
    let t = Instant::now();
    let st = Command::new("flock")
        .args(["-x"])
        .arg(&b)
        .arg("true")
        .status()
        .expect("flock(1)");
    assert!(st.success());
    assert!(
        t.elapsed() >= Duration::from_millis(800),
        "{:?}",
        t.elapsed()
    );
    finish(holder);

    // fcntl byte ranges: bytes 0..10 held on one mount.
    let (holder, mut out) = py_spawn(HOLD, &[&a, Path::new("3"), Path::new("fcntl")]);
    wait_line(&mut out, "locked");
    let got = py(
        r#"
import fcntl, sys, struct, os
f = open(sys.argv[1], 'r+')
fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 10)   # bytes 10..20: free
print('free range ok')
try:
    fcntl.lockf(f, fcntl.LOCK_SH | fcntl.LOCK_NB, 10, 5)  # bytes 5..15: conflict
    print('overlap granted')
except OSError as e:
    print('overlap refused', e.errno in (11, 13))
# F_GETLK reports the holder's exclusive lock over 0..10.
req = struct.pack('hhqqi', fcntl.F_WRLCK, 0, 0, 1, 0)
got = struct.unpack('hhqqi', fcntl.fcntl(f, fcntl.F_GETLK, req))
print('getlk', got[0] == fcntl.F_WRLCK, got[2], got[3])
"#,
        &[&b],
    );
    assert_eq!(
        got, "free range ok\noverlap refused True\ngetlk True 0 10\n",
        "{got}"
    );
    finish(holder);
    // Released at the holder's exit: the whole file can be locked now.
    py(
        r#"
import fcntl, sys
f = open(sys.argv[1], 'r+')
fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 0, 0)
"#,
        &[&b],
    );
}

/// Tries a non-blocking exclusive lock of bytes 0..10 on argv[1] every 100 ms for up to
/// argv[2] seconds; prints the seconds it took.
const ACQUIRE: &str = r#"
import fcntl, sys, time
f = open(sys.argv[1], 'a+')
t = time.time()
while True:
    try:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
        break
    except OSError:
        if time.time() - t > float(sys.argv[2]):
            raise
        time.sleep(0.1)
print('%.1f' % (time.time() - t))
"#;

#[test]
fn a_killed_holder_releases_its_lock() {
    let m = mounted();
    let other = m.another_mount();
    let (a, b) = (m.path("k"), other.path("k"));
    std::fs::write(&a, b"x").expect("write");
    let (mut holder, mut out) = py_spawn(HOLD, &[&a, Path::new("600"), Path::new("fcntl")]);
    wait_line(&mut out, "locked");
    assert!(
        Command::new(PYTHON)
            .arg("-c")
            .arg(ACQUIRE)
            .arg(&b)
            .arg("0.5")
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(false),
        "the lock was not held"
    );
    holder.kill().expect("kill -9");
    let _ = holder.wait();
    py(ACQUIRE, &[&b, Path::new("5")]);
}

#[test]
fn a_stopped_mount_releases_its_locks() {
    let m = mounted();
    let mut other = m.another_mount();
    let (a, b) = (m.path("s"), other.path("s"));
    std::fs::write(&a, b"x").expect("write");
    // The holder works through the second mount, which then dies under it.
    let (mut holder, mut out) = py_spawn(HOLD, &[&b, Path::new("600"), Path::new("flock")]);
    wait_line(&mut out, "locked");
    let st = Command::new("flock")
        .args(["-n", "-x"])
        .arg(&a)
        .arg("true")
        .status()
        .expect("flock(1)");
    assert_eq!(st.code(), Some(1), "the lock was not held");
    other.kill_process();
    // Within the RPC deadline (5 s in tests) the lock is free for the first mount.
    let t = Instant::now();
    let st = Command::new("flock")
        .args(["-x", "-w", "10"])
        .arg(&a)
        .arg("true")
        .status()
        .expect("flock(1)");
    assert!(st.success(), "the dead mount's lock was kept");
    assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn a_signal_interrupts_a_lock_wait() {
    let m = mounted();
    let other = m.another_mount();
    let (a, b) = (m.path("i"), other.path("i"));
    std::fs::write(&a, b"x").expect("write");
    let (holder, mut out) = py_spawn(HOLD, &[&a, Path::new("8"), Path::new("fcntl")]);
    wait_line(&mut out, "locked");
    let got = py(
        r#"
import fcntl, signal, sys, time
class Alarm(Exception):
    pass
def ring(*_):
    raise Alarm()
signal.signal(signal.SIGALRM, ring)
f = open(sys.argv[1], 'a+')
t = time.time()
signal.alarm(1)
try:
    fcntl.lockf(f, fcntl.LOCK_EX, 10, 0)
    print('granted')
except Alarm:
    print('interrupted', time.time() - t < 3)
"#,
        &[&b],
    );
    assert_eq!(got, "interrupted True\n");
    finish(holder);
}

/// The library's lock API: two clients (two sessions) of one deployment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_lock_ranges_and_lose_them_with_their_connection() {
    use eddy_client::{Creds, LockKind, LockRange, LockRequest};
    let cluster = eddy_testkit::Cluster::start(3);
    let (c1, c2) = (cluster.client().await, cluster.client().await);
    assert_ne!(c1.lock_session(), c2.lock_session());
    let f1 = c1
        .create("/l", 0o644, true, Creds::root())
        .await
        .expect("create");
    let f2 = c2
        .open("/l", libc::O_RDWR, 0, Creds::root())
        .await
        .expect("open");
    let req = |owner, kind, start, end| LockRequest {
        owner,
        handle: owner,
        pid: 1,
        kind,
        range: LockRange { start, end },
    };
    c1.lock(&f1, &req(1, LockKind::Write, 0, 99), false)
        .await
        .expect("lock");
    // The same owner number in another session is another owner.
    let e = c2
        .lock(&f2, &req(1, LockKind::Read, 50, 50), false)
        .await
        .expect_err("conflict");
    assert_eq!(e.errno, libc::EAGAIN);
    c2.lock(&f2, &req(1, LockKind::Write, 100, u64::MAX), false)
        .await
        .expect("a free range");
    let held = c2
        .test_lock(&f2, 1, LockKind::Read, LockRange { start: 0, end: 0 })
        .await
        .expect("test");
    assert_eq!(
        held.map(|h| (h.kind, h.range.end)),
        Some((LockKind::Write, 99))
    );
    // A range that ends before it starts is refused, not a crash.
    let e = c2
        .lock(&f2, &req(1, LockKind::Write, 9, 3), false)
        .await
        .expect_err("bad range");
    assert_eq!(e.errno, libc::EINVAL);
    // A waiting lock is granted once the holder unlocks part of its range.
    let waiter = {
        let (c2, f2) = (c2.clone(), f2.clone());
        tokio::spawn(async move { c2.lock(&f2, &req(2, LockKind::Write, 10, 19), true).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished());
    c1.lock(&f1, &req(1, LockKind::Unlock, 0, 49), false)
        .await
        .expect("unlock");
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("granted in time")
        .expect("task")
        .expect("lock");
    // Dropping the first client closes its connections: its remaining lock goes.
    drop(f1);
    drop(c1);
    let t = Instant::now();
    loop {
        match c2.lock(&f2, &req(3, LockKind::Write, 50, 99), false).await {
            Ok(()) => break,
            Err(e) if e.errno == libc::EAGAIN && t.elapsed() < Duration::from_secs(5) => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("the closed client's lock was kept: {e}"),
        }
    }
}

/// POSIX: closing any descriptor of a file releases the process's locks on it, even one
/// opened read-only after the lock was taken through another.
#[test]
fn closing_any_descriptor_releases_the_process_locks() {
    let m = mounted();
    let other = m.another_mount();
    let (a, b) = (m.path("c"), other.path("c"));
    std::fs::write(&a, b"x").expect("write");
    let (mut holder, mut out) = py_spawn(
        r#"
import fcntl, sys, time
f = open(sys.argv[1], 'r')
fcntl.lockf(f, fcntl.LOCK_SH, 10, 0)
print('locked', flush=True)
time.sleep(1.5)
open(sys.argv[1], 'r').close()
print('closed', flush=True)
time.sleep(600)
"#,
        &[&a],
    );
    wait_line(&mut out, "locked");
    let acquire = |secs: &str| {
        Command::new(PYTHON)
            .arg("-c")
            .arg(ACQUIRE)
            .arg(&b)
            .arg(secs)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    assert!(!acquire("0.3"), "the read lock was not held");
    wait_line(&mut out, "closed");
    assert!(
        acquire("0.5"),
        "the close did not release the process's lock"
    );
    let _ = holder.kill();
    let _ = holder.wait();
}

/// OFD locks belong to the open file: a second open of the same file in the same process is
/// another owner, and closing the first releases the lock for everyone (once the kernel's
/// asynchronous RELEASE arrives).
#[test]
fn ofd_locks_belong_to_the_open_file() {
    let m = mounted();
    let other = m.another_mount();
    let (a, b) = (m.path("o"), other.path("o"));
    std::fs::write(&a, b"0123456789").expect("write");
    let got = py(
        r#"
import fcntl, os, struct, sys, subprocess, time
def ofd(fd, typ, cmd):
    req = struct.pack('hhqqi', typ, 0, 0, 10, 0)
    try:
        fcntl.fcntl(fd, cmd, req)
        return 'ok'
    except OSError as e:
        return 'busy' if e.errno in (11, 13) else 'errno %d' % e.errno
other = 'import fcntl, os, struct, sys\n' \
    'fd = os.open(sys.argv[1], os.O_RDWR)\n' \
    'try:\n' \
    '    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 10, 0)); print("ok")\n' \
    'except OSError:\n' \
    '    print("busy")\n'
def from_other_mount():
    return subprocess.run([sys.executable, '-c', other, sys.argv[2]], capture_output=True, text=True).stdout.strip()
fd1 = os.open(sys.argv[1], os.O_RDWR)
fd2 = os.open(sys.argv[1], os.O_RDWR)
print(ofd(fd1, fcntl.F_WRLCK, fcntl.F_OFD_SETLK))
print(ofd(fd2, fcntl.F_WRLCK, fcntl.F_OFD_SETLK))
print(from_other_mount())
# The kernel sends FUSE's RELEASE of the last close asynchronously: allow it a moment.
def soon(f):
    for _ in range(40):
        r = f()
        if r == 'ok':
            break
        time.sleep(0.05)
    return r
os.close(fd1)
print(soon(lambda: ofd(fd2, fcntl.F_WRLCK, fcntl.F_OFD_SETLK)))
os.close(fd2)
print(soon(from_other_mount))
"#,
        &[&a, &b],
    );
    assert_eq!(got, "ok\nbusy\nbusy\nok\nok\n", "{got}");
}
