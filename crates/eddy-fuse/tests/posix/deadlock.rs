//! Deadlock detection for blocking record locks (`F_SETLKW`, decision 0028): process A holds
//! bytes of file X and waits for file Y, B holds Y and asks for X; the request that closes
//! the cycle gets EDEADLK, the other gets its lock once the first gives up: never both hang.
//! The same against a local tmpfs file shows Linux's own answer. Needs FUSE and python3.

use eddy_testkit::python::PYTHON;
use eddy_testkit::{test_config, Mounted};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// Holds an exclusive lock of bytes 0..10 of argv[1], prints "holds", waits for a line on
/// stdin, then asks for bytes 0..10 of argv[2] with F_SETLKW and prints "ok" or
/// "EDEADLK"; after EDEADLK it exits (its lock goes). An alarm ends a wait that hangs.
const CROSS: &str = r#"
import errno, fcntl, signal, sys
signal.alarm(60)
mine = open(sys.argv[1], 'r+')
fcntl.lockf(mine, fcntl.LOCK_EX, 10, 0)
print('holds', flush=True)
sys.stdin.readline()
other = open(sys.argv[2], 'r+')
try:
    fcntl.lockf(other, fcntl.LOCK_EX, 10, 0)
    print('ok', flush=True)
except OSError as e:
    print('EDEADLK' if e.errno == errno.EDEADLK else 'errno %d' % e.errno, flush=True)
"#;

struct Proc {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
}

fn start(mine: &Path, other: &Path) -> Proc {
    let mut child = Command::new(PYTHON)
        .arg("-c")
        .arg(CROSS)
        .arg(mine)
        .arg(other)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 is required");
    let stdin = child.stdin.take().expect("stdin");
    let out = BufReader::new(child.stdout.take().expect("stdout"));
    Proc { child, stdin, out }
}

impl Proc {
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.out.read_line(&mut l).expect("read");
        l.trim().to_string()
    }

    fn go(&mut self) {
        self.stdin.write_all(b"go\n").expect("write");
        self.stdin.flush().expect("flush");
    }
}

/// A holds X and waits for Y; then B, holding Y, asks for X. Returns what each printed, in
/// the order (A, B).
fn cross(ax: &Path, ay: &Path, bx: &Path, by: &Path) -> (String, String) {
    let mut a = start(ax, ay);
    assert_eq!(a.line(), "holds");
    let mut b = start(by, bx);
    assert_eq!(b.line(), "holds");
    a.go();
    // A is waiting now or soon: whichever request closes the cycle gets EDEADLK.
    b.go();
    // The one refused exits and its lock goes; the other then gets its lock. Both hanging
    // ends at their alarm, with nothing printed.
    let rb = b.line();
    let ra = a.line();
    let _ = a.child.wait();
    let _ = b.child.wait();
    (ra, rb)
}

fn sorted(r: (String, String)) -> Vec<String> {
    let mut v = vec![r.0, r.1];
    v.sort();
    v
}

#[test]
fn a_local_tmpfs_file_gives_edeadlk() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("tmpfs at /dev/shm");
    let (x, y) = (dir.path().join("x"), dir.path().join("y"));
    std::fs::write(&x, b"0123456789").expect("write");
    std::fs::write(&y, b"0123456789").expect("write");
    assert_eq!(sorted(cross(&x, &y, &x, &y)), ["EDEADLK", "ok"]);
}

#[test]
fn two_processes_through_one_mount_get_edeadlk() {
    let m = Mounted::start_with(3, test_config());
    let (x, y) = (m.path("x"), m.path("y"));
    std::fs::write(&x, b"0123456789").expect("write");
    std::fs::write(&y, b"0123456789").expect("write");
    assert_eq!(sorted(cross(&x, &y, &x, &y)), ["EDEADLK", "ok"]);
}

#[test]
fn processes_on_two_mounts_get_edeadlk() {
    let m = Mounted::start_with(3, test_config());
    let other = m.another_mount();
    // Files whose locks live on different daemons, so the cycle spans two of them.
    let mut names = Vec::new();
    for i in 0..16 {
        let name = format!("f{i}");
        std::fs::write(m.path(&name), b"0123456789").expect("write");
        names.push(name);
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let daemons: Vec<u32> = rt.block_on(async {
        let c = m.cluster.client().await;
        let mut v = Vec::new();
        for n in &names {
            let f = c
                .open(
                    &format!("/{n}"),
                    libc::O_RDONLY,
                    0,
                    eddy_client::Creds::root(),
                )
                .await
                .expect("open");
            v.push(c.rpc().chunk_owners(f.file_id(), u64::MAX)[0]);
        }
        v
    });
    let j = (1..names.len())
        .find(|&j| daemons[j] != daemons[0])
        .expect("16 files all on one lock daemon");
    let (x, y) = (&names[0], &names[j]);
    let got = cross(&m.path(x), &m.path(y), &other.path(x), &other.path(y));
    assert_eq!(sorted(got), ["EDEADLK", "ok"]);
}
