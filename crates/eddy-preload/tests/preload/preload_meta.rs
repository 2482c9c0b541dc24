//! The preload library's metadata path (decision 0046): what a create, a stat and an unlink
//! cost in daemon requests and in the descriptor's system calls (counted at the daemons and
//! by strace, never timed), and that a descriptor made while its create is at the daemon is
//! the descriptor POSIX promises: the lowest free number, none left behind by a failed create,
//! its offset shared by dup and fork, inherited through exec, closed by close-on-exec.

use eddy_config::Config;
use eddy_testkit::served::{diff, served};
use eddy_testkit::{test_config, Cluster};
use std::collections::BTreeMap;
use std::process::{Command, Output};

const PREFIX: &str = "/eddy";

fn preloaded(cl: &Cluster, program: &str) -> Command {
    let mut c = eddy_testkit::preloaded(program, PREFIX, cl.dir.path());
    c.env("EDDY_PRELOAD_LOG", "1");
    c
}

fn check(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const PHASE: &str = r#"
import os, sys
phase, d, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(n):
    p = f"{d}/f{i}"
    if phase == "create":
        os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    elif phase == "stat":
        assert os.stat(p).st_size == 0
    else:
        os.unlink(p)
"#;

/// One phase of `n` operations in `dir` by a new process under strace: the daemons'
/// requests it caused and how many memfd_create calls and reopens through /proc/self/fd it
/// made.
fn phase(
    cl: &Cluster,
    rt: &tokio::runtime::Runtime,
    c: &eddy_client::Client,
    name: &str,
    dir: &str,
    n: usize,
) -> (BTreeMap<String, u64>, i64, i64) {
    let trace = tempfile::NamedTempFile::new().unwrap();
    let before = served(rt, c);
    let out = preloaded(cl, "strace")
        .args(["-f", "-qq", "-e", "trace=memfd_create,openat,open", "-o"])
        .arg(trace.path())
        .args(["python3", "-c", PHASE, name, dir, &n.to_string()])
        .output()
        .unwrap();
    check(name, &out);
    let requests = diff(&before, &served(rt, c));
    let text = std::fs::read_to_string(trace.path()).unwrap();
    let memfds = text.matches("memfd_create(\"eddy-preload\"").count();
    let reopens = text
        .lines()
        .filter(|l| {
            l.split("\"/proc/self/fd/")
                .nth(1)
                .is_some_and(|r| r.starts_with(|ch: char| ch.is_ascii_digit()))
        })
        .count();
    (requests, memfds as i64, reopens as i64)
}

/// What `more` operations cost beyond `few`: the same phase run by two new processes, `few`
/// and `few + more` operations each (in directories of their own), the difference taken, so
/// that what a process costs once (its connections, the look-up of the directory) cancels.
fn marginal(
    cl: &Cluster,
    rt: &tokio::runtime::Runtime,
    c: &eddy_client::Client,
    name: &str,
    (few, more): (usize, usize),
) -> (BTreeMap<String, i64>, i64, i64) {
    let (a, am, ar) = phase(cl, rt, c, name, "/eddy/few", few);
    let (b, bm, br) = phase(cl, rt, c, name, "/eddy/many", few + more);
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let d = keys
        .into_iter()
        .filter_map(|k| {
            let n = b.get(k).copied().unwrap_or(0) as i64 - a.get(k).copied().unwrap_or(0) as i64;
            (n != 0).then(|| (k.clone(), n))
        })
        .collect();
    (d, bm - am, br - ar)
}

#[test]
fn preload_create_stat_unlink_cost_one_request_each() {
    eddy_testkit::require::program("strace", "strace");
    eddy_testkit::require::program("python3", "python3");
    // What each operation costs on its own: without directory leases (decision 0075), which
    // answer some here and send others in batches (`leases::a_process_in_its_own_directory`).
    let cl = Cluster::start_with(
        3,
        Config {
            leases: false,
            ..test_config()
        },
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(cl.client());
    for d in ["/few", "/many"] {
        rt.block_on(c.mkdir(d, 0o755, eddy_client::Creds::root()))
            .unwrap();
    }
    let (few, more) = (5, 20);
    let m = more as i64;

    let (create, memfds, reopens) = marginal(&cl, &rt, &c, "create", (few, more));
    assert_eq!(
        create,
        BTreeMap::from([("create".to_string(), m)]),
        "{more} creates"
    );
    // One descriptor per create: one memfd, made write-only once through /proc.
    assert_eq!((memfds, reopens), (m, m), "descriptors of {more} creates");

    let (stat, memfds, _) = marginal(&cl, &rt, &c, "stat", (few, more));
    assert_eq!(
        stat,
        BTreeMap::from([("stat".to_string(), m)]),
        "{more} stats"
    );
    assert_eq!(memfds, 0, "a stat makes no descriptor");

    // Empty files: no chunk requests.
    let (unlink, memfds, _) = marginal(&cl, &rt, &c, "unlink", (few, more));
    assert_eq!(
        unlink,
        BTreeMap::from([("remove".to_string(), m)]),
        "{more} unlinks"
    );
    assert_eq!(memfds, 0, "an unlink makes no descriptor");
}

const SEMANTICS: &str = r#"
import os, subprocess, sys
d = sys.argv[1]
os.mkdir(d)
# The lowest free number; a failed create leaves none behind.
probe = os.open("/dev/null", os.O_RDONLY)
os.close(probe)
fd = os.open(f"{d}/a", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
assert fd == probe, (fd, probe)
try:
    os.open(f"{d}/a", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    sys.exit("EEXIST expected")
except FileExistsError:
    pass
try:
    os.open(f"{d}/missing/x", os.O_CREAT | os.O_WRONLY, 0o644)
    sys.exit("ENOENT expected")
except FileNotFoundError:
    pass
nxt = os.open("/dev/null", os.O_RDONLY)
assert nxt == fd + 1, (nxt, fd)
os.close(nxt)
# dup shares the offset.
os.write(fd, b"ab")
fd2 = os.dup(fd)
os.write(fd2, b"cd")
assert os.lseek(fd, 0, os.SEEK_CUR) == 4
# A program started by fork+exec writes through the inherited descriptor, at the shared offset.
subprocess.run(["sh", "-c", f"printf ef >&{fd}"], pass_fds=(fd,), check=True)
assert os.lseek(fd, 0, os.SEEK_CUR) == 6, os.lseek(fd, 0, os.SEEK_CUR)
# A forked child writes through the dup; the parent goes on after it.
pid = os.fork()
if pid == 0:
    os.write(fd2, b"gh")
    os._exit(0)
os.waitpid(pid, 0)
os.write(fd, b"ij")
os.close(fd)
os.close(fd2)
# Close-on-exec: the descriptor does not reach the exec'd program.
c = os.open(f"{d}/c", os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644)
r = subprocess.run(["sh", "-c", f"printf x >&{c}"], close_fds=False, stderr=subprocess.DEVNULL)
assert r.returncode != 0, "a close-on-exec descriptor was inherited"
os.close(c)
# O_APPEND through an exec'd program and this one.
ap = os.open(f"{d}/a", os.O_WRONLY | os.O_APPEND)
subprocess.run(["sh", "-c", f"printf kl >&{ap}"], pass_fds=(ap,), check=True)
os.write(ap, b"mn")
os.close(ap)
# A directory opened without O_DIRECTORY, listed by an exec'd program.
os.mkdir(f"{d}/sub")
open(f"{d}/sub/x", "w").close()
dfd = os.open(f"{d}/sub", os.O_RDONLY)
code = f"import os; print(sorted(os.listdir({dfd})))"
out = subprocess.run([sys.executable, "-c", code], pass_fds=(dfd,), check=True,
                     capture_output=True, text=True).stdout
assert out.strip() == "['x']", out
os.close(dfd)
# A program exec'd after the creates sees the files.
names = subprocess.run(["ls", d], check=True, capture_output=True, text=True).stdout.split()
assert names == ["a", "c", "sub"], names
with open(f"{d}/a", "rb") as f:
    print(f.read().decode())
"#;

fn semantics(config: Config) {
    eddy_testkit::require::program("python3", "python3");
    let cl = Cluster::start_with(3, config);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(cl.client());
    let out = preloaded(&cl, "python3")
        .args(["-c", SEMANTICS, "/eddy/s"])
        .output()
        .unwrap();
    assert_eq!(check("semantics", &out), "abcdefghijklmn\n");
    // What the programs left, as the client library sees it.
    let data = rt.block_on(eddy_testkit::read_all(&c, "/s/a"));
    assert_eq!(data, b"abcdefghijklmn");
}

#[test]
fn preload_early_descriptor_keeps_fork_exec_dup_and_numbering() {
    let mut config = test_config();
    config.preload_early_descriptor = true;
    semantics(config);
}

#[test]
fn preload_descriptor_after_the_reply_keeps_them_too() {
    semantics(test_config());
}
