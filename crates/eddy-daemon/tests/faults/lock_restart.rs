//! Advisory locks across a restart of the daemon that holds them (decision 0028): the daemon
//! killed with -9 and started again on its root opens a grace period in which the clients
//! that held locks take them back before anyone else gets a new one. Through real FUSE mounts
//! of a 3-daemon deployment; these tests need FUSE and python3 with sqlite3.

use eddy_config::Config;
use eddy_testkit::python::{finish, py, py_spawn, wait_line};
use eddy_testkit::{test_config, Mounted};
use std::path::Path;

/// The daemon holding the lock table of the file at `rel` (the first owner of its lock
/// chunk), found through a library client.
async fn lock_daemon_of(m: &Mounted, rel: &str) -> usize {
    let c = m.cluster.client().await;
    let f = c
        .open(rel, libc::O_RDONLY, 0, eddy_client::Creds::root())
        .await
        .expect("open");
    c.rpc().chunk_owners(f.file_id(), u64::MAX)[0] as usize
}

/// Holds an exclusive fcntl lock of bytes 0..10 on argv[1], prints "locked", sleeps.
const HOLD: &str = r#"
import fcntl, sys, time
f = open(sys.argv[1], 'a+')
fcntl.lockf(f, fcntl.LOCK_EX, 10, 0)
print('locked', flush=True)
time.sleep(600)
"#;

/// One non-blocking attempt at bytes 0..10 of argv[1]: prints "granted" or "refused ERRNO".
const TRY: &str = r#"
import fcntl, sys
f = open(sys.argv[1], 'a+')
try:
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
    print('granted')
except OSError as e:
    print('refused', e.errno)
"#;

/// Non-blocking attempts every 100 ms for up to 10 s; prints "granted" or fails.
const ACQUIRE: &str = r#"
import fcntl, sys, time
f = open(sys.argv[1], 'a+')
t = time.time()
while True:
    try:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
        break
    except OSError:
        if time.time() - t > 10:
            raise
        time.sleep(0.1)
print('granted')
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_reclaimed_after_its_daemon_is_killed_and_restarted() {
    let mut m = Mounted::start_with(3, test_config());
    let other = m.another_mount();
    let (a, b) = (m.path("held"), other.path("held"));
    std::fs::write(&a, b"0123456789").expect("write");
    let d = lock_daemon_of(&m, "/held").await;
    let (mut holder, mut out) = py_spawn(HOLD, &[&a]);
    wait_line(&mut out, "locked");
    assert_eq!(py(TRY, &[&b]), "refused 11\n", "the lock was not held");

    m.cluster.kill(d);
    m.cluster.restart(d);
    // The holder's mount takes its lock back in the grace period: the other mount's
    // non-blocking request, which waits for the grace period to end, finds it held.
    assert_eq!(
        py(TRY, &[&b]),
        "refused 11\n",
        "the lock held across the restart of daemon {d} was given to another mount"
    );
    // Released by its holder, it is the other mount's.
    holder.kill().expect("kill the holder");
    let _ = holder.wait();
    assert_eq!(py(ACQUIRE, &[&b]), "granted\n");
}

/// Increments the counter of the database argv[1] argv[2] times, each in its own
/// `BEGIN IMMEDIATE` transaction; prints the count done every 25. Without fsync: an fsync
/// covering writes that the killed daemon had acknowledged fails with EIO by design
/// (decision 0015: they may be lost), which SQLite reports as a disk I/O error; what is
/// tested here is the exclusion, with the writes on the two other copies.
const INCREMENT: &str = r#"
import sys, sqlite3
c = sqlite3.connect(sys.argv[1], timeout=120, isolation_level=None)
c.execute('pragma synchronous = off')
for i in range(int(sys.argv[2])):
    c.execute('begin immediate')
    n = c.execute('select n from counter').fetchone()[0]
    c.execute('update counter set n = ?', (n + 1,))
    c.execute('commit')
    if (i + 1) % 25 == 0:
        print(i + 1, flush=True)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_counter_is_exact_across_a_kill_9_of_the_lock_daemon() {
    // Three copies of everything: the database's data and metadata stay reachable while one
    // daemon is down; its locks live on one daemon, the one killed.
    let config = Config {
        replicas: 3,
        ..test_config()
    };
    let mut m = Mounted::start_with(3, config);
    let other = m.another_mount();
    let (a, b) = (m.path("count.db"), other.path("count.db"));
    py(
        r#"
import sys, sqlite3
c = sqlite3.connect(sys.argv[1])
c.execute('create table counter (n integer)')
c.execute('insert into counter values (0)')
c.commit()
"#,
        &[&a],
    );
    let d = lock_daemon_of(&m, "/count.db").await;
    let n = Path::new("200");
    let (mut p1, mut o1) = py_spawn(INCREMENT, &[&a, n]);
    let (p2, _o2) = py_spawn(INCREMENT, &[&b, n]);
    // Both are incrementing: kill the lock daemon in the middle, and start it again.
    wait_line(&mut o1, "50");
    assert!(
        p1.try_wait().expect("wait").is_none(),
        "the first writer ended early"
    );
    m.cluster.kill(d);
    std::thread::sleep(std::time::Duration::from_millis(300));
    m.cluster.restart(d);
    wait_line(&mut o1, "200");
    finish(p1);
    finish(p2);
    let got = py(
        r#"
import sys, sqlite3
c = sqlite3.connect(sys.argv[1])
print(c.execute('pragma integrity_check').fetchone()[0])
print(c.execute('select n from counter').fetchone()[0])
"#,
        &[&b],
    );
    assert_eq!(got, "ok\n400\n", "daemon {d} was killed: {got}");
}
