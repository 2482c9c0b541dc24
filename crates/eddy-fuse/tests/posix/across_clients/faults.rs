//! A creator that dies or stops in its own directory: what other clients see (closed and
//! fsync'd files kept, nothing held up past the bound), whatever leases it held.

use super::*;

/// Makes directory argv[1] and argv[2] files in it: f<i> gets its content and is closed
/// (i % 3 == 0), fsync'd and left open (1), or left open unsynced (2); then fsyncs the
/// directory, makes and closes a last few, prints "ready" and waits.
const CREATOR: &str = r#"
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
def content(name, i):
    s = (name + ":").encode()
    k = 100 + 37 * i
    return (s * (k // len(s) + 1))[:k]
os.mkdir(d)
held = []
for i in range(n):
    name = f"f{i}"
    fd = os.open(f"{d}/{name}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, content(name, i))
    if i % 3 == 0:
        os.close(fd)
    else:
        if i % 3 == 1:
            os.fsync(fd)
        held.append(fd)
dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
os.fsync(dfd)
for i in range(n, n + 5):
    name = f"f{i}"
    with open(f"{d}/{name}", "xb") as f:
        f.write(content(name, i))
print("ready", flush=True)
time.sleep(600)
"#;

/// What CREATOR leaves closed or fsync'd: f<i> for i % 3 != 2, and the last five.
fn creator_kept(n: usize) -> Vec<usize> {
    (0..n).filter(|i| i % 3 != 2).chain(n..n + 5).collect()
}

fn creator_content(i: usize) -> Vec<u8> {
    content(&format!("f{i}"), 100 + 37 * i)
}

/// A preloaded process makes a directory and files in it, closes some, fsyncs some and the
/// directory, leaves others open, and is killed with SIGKILL. Through a mount afterwards:
/// every closed or fsync'd file is there with its content; the directory lists, each listed
/// name stats (a never-closed one may be missing, none is EIO); everything is removed and
/// the directory too; then another process makes the directory again and works in it fully.
#[test]
fn a_creator_killed_loses_only_what_it_never_closed_or_fsyncd() {
    let config = strict();
    let m = Mounted::start_with(3, config.clone());
    const N: usize = 60;
    let p = Proc::preloaded(
        &m.cluster,
        CREATOR,
        &["/eddy/out", &N.to_string()],
        "creator",
    );
    p.expect("ready", guard(&config));
    p.signal(libc::SIGKILL);
    drop(p);

    let dir = m.path("out");
    for i in creator_kept(N) {
        let path = dir.join(format!("f{i}"));
        let got = std::fs::read(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        assert_eq!(got, creator_content(i), "f{i}");
    }
    let names = listing(&dir);
    let kept: BTreeSet<String> = creator_kept(N).iter().map(|i| format!("f{i}")).collect();
    let created: BTreeSet<String> = (0..N + 5).map(|i| format!("f{i}")).collect();
    assert!(names.is_superset(&kept), "{:?}", kept.difference(&names));
    assert!(
        names.is_subset(&created),
        "{:?}",
        names.difference(&created)
    );
    for name in &names {
        match std::fs::metadata(dir.join(name)) {
            Ok(md) => assert!(md.is_file(), "{name}"),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::NotFound, "listed {name}: {e}");
                assert!(!kept.contains(name), "kept {name}: {e}");
            }
        }
    }
    for name in &names {
        match std::fs::remove_file(dir.join(name)) {
            Ok(()) => {}
            Err(e) => assert!(
                e.kind() == ErrorKind::NotFound && !kept.contains(name),
                "remove {name}: {e}"
            ),
        }
    }
    assert!(listing(&dir).is_empty());
    std::fs::remove_dir(&dir).unwrap();
    assert_eq!(kind(std::fs::metadata(&dir)), Some(ErrorKind::NotFound));

    // Full function again: a new process makes the directory and the same names.
    let again = Proc::preloaded(
        &m.cluster,
        CREATOR,
        &["/eddy/out", &N.to_string()],
        "creator again",
    );
    again.expect("ready", guard(&config));
    drop(again);
    for i in creator_kept(N) {
        assert_eq!(
            std::fs::read(dir.join(format!("f{i}"))).unwrap(),
            creator_content(i)
        );
    }
}

/// Makes directory argv[1] and argv[2] closed files in it, leaves two more open, prints
/// "ready", waits for "go"; then makes argv[2] more files (create, write, close, fsync of
/// one), stats its first file and lists the directory, and prints each call's outcome:
/// "ok" or its errno, the listing as its names.
const STOPPED: &str = r#"
import os, sys, json
d, n = sys.argv[1], int(sys.argv[2])
os.mkdir(d)
for i in range(n):
    with open(f"{d}/f{i}", "xb") as f:
        f.write(f"f{i}".encode())
held = [os.open(f"{d}/open{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644) for i in range(2)]
print("ready", flush=True)
sys.stdin.readline()
out = {}
def attempt(what, f):
    try:
        r = f()
        out[what] = "ok" if r is None else r
    except OSError as e:
        out[what] = e.errno
def make(name):
    fd = os.open(f"{d}/{name}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, name.encode())
    if name == "g0":
        os.fsync(fd)
    os.close(fd)
for i in range(n):
    attempt(f"g{i}", lambda: make(f"g{i}"))
attempt("stat f0", lambda: None if os.stat(f"{d}/f0").st_size == 2 else "bad size")
attempt("list", lambda: sorted(os.listdir(d)))
for fd in held:
    attempt(f"close {fd}", lambda: os.close(fd))
print(json.dumps(out), flush=True)
"#;

/// A preloaded process that made a directory and files in it is stopped (SIGSTOP) while a
/// mount looks up, lists and creates there: the mount's calls all complete (within a guard of
/// several RPC deadlines) and see the stopped process's closed files. Once it continues, each
/// of its later calls succeeds or fails with EIO, never another error, and it finishes.
#[test]
fn a_stopped_creator_holds_up_no_other_client_and_fails_only_with_eio() {
    let config = strict();
    let m = Mounted::start_with(3, config.clone());
    const N: usize = 20;
    let mut p = Proc::preloaded(
        &m.cluster,
        STOPPED,
        &["/eddy/held", &N.to_string()],
        "stopped creator",
    );
    p.expect("ready", guard(&config));
    p.signal(libc::SIGSTOP);

    let dir = m.path("held");
    let (tx, rx) = mpsc::channel();
    let worker = {
        let dir = dir.clone();
        std::thread::spawn(move || {
            assert_eq!(
                kind(std::fs::metadata(dir.join("nothing"))),
                Some(ErrorKind::NotFound)
            );
            for i in 0..N {
                assert_eq!(
                    std::fs::read(dir.join(format!("f{i}"))).unwrap(),
                    format!("f{i}").as_bytes()
                );
            }
            for i in 0..N {
                let name = dir.join(format!("m{i}"));
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&name)
                    .unwrap_or_else(|e| panic!("{name:?}: {e}"));
                f.write_all(b"m").unwrap();
            }
            let names = listing(&dir);
            for i in 0..N {
                assert!(names.contains(&format!("f{i}")), "f{i} not listed");
                assert!(names.contains(&format!("m{i}")), "m{i} not listed");
            }
            let _ = tx.send(());
        })
    };
    let done = rx.recv_timeout(guard(&config));
    p.signal(libc::SIGCONT);
    if done.is_err() {
        // The worker failed (its panic is reported by join) or hung.
        assert!(
            worker.is_finished(),
            "the mount's calls hung past {:?}",
            guard(&config)
        );
        worker.join().unwrap();
        unreachable!("the worker ended without reporting");
    }
    worker.join().unwrap();

    p.go();
    let r = p.result(guard(&config));
    let r = r.as_object().unwrap();
    let eio = serde_json::json!(libc::EIO);
    for (what, got) in r {
        if what == "list" && got.is_array() {
            let names: BTreeSet<&str> = got
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            for i in 0..N {
                let m = format!("m{i}");
                assert!(
                    names.contains(m.as_str()),
                    "the stopped process does not list {m}"
                );
            }
        } else {
            assert!(got == "ok" || *got == eio, "{what}: {got}");
        }
    }
    assert_eq!(r.len(), N + 2 + 2, "{r:?}");
    for i in 0..N {
        let name = format!("g{i}");
        if r[&name] == "ok" {
            assert_eq!(std::fs::read(dir.join(&name)).unwrap(), name.as_bytes());
        }
    }
}

// ----- many processes of both kinds in one shared directory --------------------------------
