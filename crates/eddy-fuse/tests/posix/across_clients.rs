//! The contract between clients that directory leases (decision 0075) must keep, through
//! public interfaces only: POSIX calls on two FUSE mounts (two `eddy mount` processes, two
//! clients), python3 processes under the preload library (one client each) and the client
//! library, on 3 daemons. Two mounts contending on one directory (close-to-open, unlink and
//! rename visibility, listings), `O_EXCL` races between preloaded processes and mounts (one
//! winner per name, `EEXIST` for the others), a creator killed with SIGKILL (what it closed or
//! fsync'd is there, the directory lists, empties and serves again), a creator stopped with
//! SIGSTOP (the others' calls in its directory complete; its own later calls succeed or fail
//! with `EIO`, never hang) and many processes of both kinds in one shared directory.
//!
//! The mounts run with `fuse_attr_ttl_ms` and `fuse_negative_ttl_ms` at 0: the kernel keeps
//! no entry of its own beyond what the mount asks, so "at once" below means at once, not
//! within a TTL. Where a client holds a lease, the other client's call is what recalls it.

use eddy_client::Client;
use eddy_config::Config;
use eddy_testkit::python::PYTHON;
use eddy_testkit::{Cluster, Mounted};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod faults;

/// The preload library's namespace prefix in these tests.
const PREFIX: &str = "/eddy";

/// The configuration of these tests: directory leases on (whatever the default), and the kernel
/// caches no entry or attribute on its own.
fn strict() -> Config {
    Config {
        fuse_attr_ttl_ms: 0,
        fuse_negative_ttl_ms: 0,
        ..eddy_testkit::leased_config()
    }
}

/// A guard against a hang past the RPC deadline (a recall waits for at most about that):
/// several deadlines, never a claim on speed.
fn guard(config: &Config) -> Duration {
    Duration::from_millis(config.rpc_timeout_ms * 6)
}

fn kind(r: std::io::Result<impl Sized>) -> Option<ErrorKind> {
    r.err().map(|e| e.kind())
}

/// The names in `dir`, sorted; a name listed twice fails the test.
fn listing(dir: &Path) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("list {}: {e}", dir.display())) {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(names.insert(name.clone()), "{name} listed twice in {dir:?}");
    }
    names
}

/// The names in `dir` through the client library, sorted; a name listed twice fails.
async fn library_listing(c: &Client, dir: &str) -> BTreeSet<String> {
    let mut r = c.readdir(dir, None).expect("readdir");
    let mut names = BTreeSet::new();
    while let Some(page) = r.next_page().await.expect("readdir page") {
        for e in page {
            assert!(names.insert(e.name.clone()), "{} listed twice", e.name);
        }
    }
    names
}

/// A file's bytes in these tests: its name and `n`, repeated to `len` bytes.
fn content(name: &str, len: usize) -> Vec<u8> {
    format!("{name}:").bytes().cycle().take(len).collect()
}

/// A python3 process of a test, on a mount (a plain process) or under the preload library
/// (its own client): its stdout read line by line on a thread, its stdin kept to tell it
/// to go on.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    what: String,
}

impl Proc {
    fn on_mount(script: &str, args: &[&str], what: &str) -> Proc {
        let mut c = Command::new(PYTHON);
        c.arg("-c").arg(script).args(args);
        Proc::spawn(c, what)
    }

    fn preloaded(cl: &Cluster, script: &str, args: &[&str], what: &str) -> Proc {
        let mut c = eddy_testkit::preloaded(PYTHON, PREFIX, cl.dir.path());
        c.arg("-c").arg(script).args(args);
        Proc::spawn(c, what)
    }

    fn spawn(mut c: Command, what: &str) -> Proc {
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 is required");
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc {
            stdin: child.stdin.take(),
            child,
            lines,
            what: what.to_string(),
        }
    }

    /// The next line it prints, within `bound`.
    fn line(&self, bound: Duration) -> String {
        self.lines
            .recv_timeout(bound)
            .unwrap_or_else(|e| panic!("{}: no line within {bound:?} ({e})", self.what))
    }

    fn expect(&self, want: &str, bound: Duration) {
        let got = self.line(bound);
        assert_eq!(got, want, "{}", self.what);
    }

    fn go(&mut self) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid, which we have not reaped.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }

    /// Its last line, parsed as JSON, once it exited successfully within `bound`.
    fn result(mut self, bound: Duration) -> serde_json::Value {
        let line = self.line(bound);
        drop(self.stdin.take());
        let st = eddy_testkit::eventually::exited(&mut self.child, bound);
        if st.is_none() {
            let _ = self.child.kill();
        }
        let st = st.unwrap_or_else(|| panic!("{}: did not exit within {bound:?}", self.what));
        assert!(st.success(), "{}: {st}", self.what);
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{}: {line:?}: {e}", self.what))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.signal(libc::SIGCONT);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ----- two mounts contending on one directory --------------------------------------------

/// Two mounts take turns in one directory: a name one looked up as missing and the other
/// then created and closed reads with its content on the first at once; an unlink on one is
/// ENOENT on the other at once, a rename is seen there at once, an O_EXCL create of a removed
/// name succeeds on the other; both list exactly the names created and not removed.
#[test]
fn two_mounts_in_turn_see_each_others_creates_unlinks_and_renames_at_once() {
    let m = Mounted::start_with(3, strict());
    let other = m.another_mount();
    std::fs::create_dir(m.path("d")).unwrap();
    let dirs = [m.path("d"), other.path("d")];
    let mut model = BTreeSet::new();
    for k in 0..48usize {
        let (w, r) = (&dirs[k % 2], &dirs[1 - k % 2]);
        let name = format!("f{k}");
        let data = content(&name, 100 + 97 * k);
        // The reader looks the name up first: missing (an entry it keeps must not hide the
        // create that follows).
        assert_eq!(
            kind(std::fs::metadata(r.join(&name))),
            Some(ErrorKind::NotFound)
        );
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(w.join(&name))
            .unwrap();
        f.write_all(&data).unwrap();
        drop(f);
        assert_eq!(
            std::fs::read(r.join(&name)).unwrap(),
            data,
            "{name} on the other mount"
        );
        model.insert(name.clone());
        match k % 4 {
            1 => {
                // Removed where it was read: gone at once where it was made, and free again.
                std::fs::remove_file(r.join(&name)).unwrap();
                assert_eq!(
                    kind(std::fs::metadata(w.join(&name))),
                    Some(ErrorKind::NotFound)
                );
                assert_eq!(
                    kind(std::fs::File::open(w.join(&name))),
                    Some(ErrorKind::NotFound)
                );
                model.remove(&name);
                let again = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(w.join(&name));
                assert!(again.is_ok(), "O_EXCL create of removed {name}: {again:?}");
                drop(again);
                std::fs::remove_file(w.join(&name)).unwrap();
                assert_eq!(
                    kind(std::fs::metadata(r.join(&name))),
                    Some(ErrorKind::NotFound)
                );
            }
            2 => {
                // Renamed where it was read: the new name only, where it was made.
                let to = format!("r{k}");
                std::fs::rename(r.join(&name), r.join(&to)).unwrap();
                assert_eq!(
                    kind(std::fs::metadata(w.join(&name))),
                    Some(ErrorKind::NotFound)
                );
                assert_eq!(std::fs::read(w.join(&to)).unwrap(), data, "{to}");
                model.remove(&name);
                model.insert(to);
            }
            _ => {}
        }
        if k % 6 == 5 {
            assert_eq!(listing(&dirs[0]), model, "mount A after step {k}");
            assert_eq!(listing(&dirs[1]), model, "mount B after step {k}");
        }
    }
    assert_eq!(listing(&dirs[0]), model);
    assert_eq!(listing(&dirs[1]), model);
}

/// Two mounts create, remove and list in one directory at the same time (a thread each):
/// every listing shows no name twice and every name its own mount created and has not
/// removed; each sees the other's closed files with their content; at the end both list
/// exactly what was created and not removed.
#[test]
fn two_mounts_at_once_in_one_directory_list_each_name_once_and_lose_none() {
    let m = Mounted::start_with(3, strict());
    let other = m.another_mount();
    std::fs::create_dir(m.path("d")).unwrap();
    let dirs = [m.path("d"), other.path("d")];
    const N: usize = 120;
    let kept: Vec<BTreeSet<String>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|side| {
                let (mine, theirs) = (dirs[side].clone(), dirs[1 - side].clone());
                s.spawn(move || {
                    let tag = ["a", "b"][side];
                    let peer = ["b", "a"][side];
                    let mut own = BTreeSet::new();
                    for j in 0..N {
                        let name = format!("{tag}{j}");
                        std::fs::write(mine.join(&name), content(&name, 64 + j)).unwrap();
                        own.insert(name);
                        if j % 3 == 2 {
                            let gone = format!("{tag}{}", j - 1);
                            std::fs::remove_file(mine.join(&gone)).unwrap();
                            own.remove(&gone);
                        }
                        // A name of the other side: missing, or there with its content.
                        let seen = format!("{peer}{j}");
                        match std::fs::read(theirs.join(&seen)) {
                            Ok(data) => assert!(
                                data.is_empty() || data == content(&seen, 64 + j),
                                "{seen} read {} bytes through {tag}'s mount: {:?}",
                                data.len(),
                                String::from_utf8_lossy(&data)
                            ),
                            Err(e) => assert_eq!(e.kind(), ErrorKind::NotFound, "{seen}: {e}"),
                        }
                        if j % 10 == 9 {
                            let names = listing(&mine);
                            let missing: Vec<_> = own.difference(&names).collect();
                            assert!(missing.is_empty(), "{tag} does not list {missing:?}");
                        }
                    }
                    own
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let want: BTreeSet<String> = kept.iter().flatten().cloned().collect();
    assert_eq!(want.len(), 2 * (N - N / 3));
    for dir in &dirs {
        assert_eq!(listing(dir), want, "{dir:?}");
        for name in &want {
            let j: usize = name[1..].parse().unwrap();
            assert_eq!(
                std::fs::read(dir.join(name)).unwrap(),
                content(name, 64 + j)
            );
        }
    }
}

// ----- O_EXCL races -----------------------------------------------------------------------

/// Waits for "go", then tries to make every name of argv[2..] in argv[1] (mkdir for names
/// starting with "sub", else an O_CREAT|O_EXCL file holding argv[3]'s tag), in its own order;
/// prints {name: "won" | errno}.
const RACE: &str = r#"
import os, sys, json, random
d, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
names = [f"f{i}" for i in range(n)] + [f"sub{i}" for i in range(n // 8)]
random.Random(tag).shuffle(names)
print("ready", flush=True)
sys.stdin.readline()
out = {}
for name in names:
    p = f"{d}/{name}"
    try:
        if name.startswith("sub"):
            os.mkdir(p)
        else:
            fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.write(fd, tag.encode())
            os.close(fd)
        out[name] = "won"
    except OSError as e:
        out[name] = e.errno
print(json.dumps(out), flush=True)
"#;

/// RACE through the client library: one more client racing beside the processes.
async fn library_race(c: Client, dir: &str, tag: &str, n: usize) -> serde_json::Value {
    let root = eddy_client::Creds::root();
    let mut out = serde_json::Map::new();
    // Its own order: from the other end.
    let names: Vec<String> = (0..n)
        .map(|i| format!("f{i}"))
        .chain((0..n / 8).map(|i| format!("sub{i}")))
        .rev()
        .collect();
    for name in names {
        let path = format!("{dir}/{name}");
        let r = if name.starts_with("sub") {
            c.mkdir(&path, 0o755, root).await.map(|_| ())
        } else {
            match c.create(&path, 0o644, true, root).await {
                Ok(f) => {
                    c.pwrite(&f, 0, tag.as_bytes()).await.unwrap();
                    c.close(&f).await
                }
                Err(e) => Err(e),
            }
        };
        let v = match r {
            Ok(()) => serde_json::json!("won"),
            Err(e) => serde_json::json!(e.errno),
        };
        out.insert(name, v);
    }
    serde_json::Value::Object(out)
}

/// Eight racers — two processes under the preload library, two on each of two mounts, two
/// clients of the library — make the same names with O_CREAT|O_EXCL (and mkdir) at once:
/// exactly one wins each name, every other gets EEXIST and nothing else, every name exists
/// afterwards, and a file holds its winner's tag.
#[test]
fn o_excl_races_between_preloaded_processes_and_mounts_have_one_winner_per_name() {
    let config = strict();
    let m = Mounted::start_with(3, config.clone());
    let other = m.another_mount();
    std::fs::create_dir(m.path("race")).unwrap();
    const N: usize = 64;
    let n = N.to_string();
    let (a, b) = (m.path("race"), other.path("race"));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let mut procs = Vec::new();
    for (i, how) in ["pre", "pre", "a", "a", "b", "b"].iter().enumerate() {
        let tag = format!("{how}{i}");
        let what = format!("racer {tag}");
        procs.push(match *how {
            "pre" => Proc::preloaded(&m.cluster, RACE, &["/eddy/race", &tag, &n], &what),
            "a" => Proc::on_mount(RACE, &[a, &tag, &n], &what),
            _ => Proc::on_mount(RACE, &[b, &tag, &n], &what),
        });
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let clients = [
        rt.block_on(m.cluster.client()),
        rt.block_on(m.cluster.client()),
    ];
    for p in &procs {
        p.expect("ready", guard(&config));
    }
    for p in &mut procs {
        p.go();
    }
    let lib: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            rt.spawn(async move { library_race(c, "/race", &format!("lib{i}"), N).await })
        })
        .collect();
    let mut results: Vec<(String, serde_json::Value)> = procs
        .into_iter()
        .map(|p| (p.what.clone(), p.result(guard(&config))))
        .collect();
    for (i, task) in lib.into_iter().enumerate() {
        results.push((format!("racer lib{i}"), rt.block_on(task).unwrap()));
    }
    let mut winners: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (what, r) in &results {
        for (name, got) in r.as_object().unwrap() {
            if got == "won" {
                winners.entry(name.clone()).or_default().push(what.clone());
            } else {
                assert_eq!(got.as_i64(), Some(libc::EEXIST as i64), "{what} on {name}");
            }
        }
    }
    let names = listing(&m.path("race"));
    assert_eq!(names.len(), N + N / 8);
    assert_eq!(winners.keys().cloned().collect::<BTreeSet<_>>(), names);
    for (name, won) in &winners {
        assert_eq!(won.len(), 1, "{name} won by {won:?}");
        let path = m.path(&format!("race/{name}"));
        if name.starts_with('f') {
            let tag = won[0].trim_start_matches("racer ");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), tag, "{name}");
        } else {
            assert!(path.is_dir(), "{name}");
        }
    }
    assert_eq!(listing(&other.path("race")), names);
}

// ----- a creator killed, a creator stopped --------------------------------------------------

/// mdtest-hard-like: worker argv[2] makes argv[3] files w<tag>.<j> of 3901 bytes in shared
/// directory argv[1] (O_CREAT|O_EXCL, write, close), stats a name of another worker (which
/// may or may not exist yet), removes every third of its own; prints its errors (anything
/// but ENOENT on another's name) and the names it kept.
const SHARED: &str = r#"
import os, sys, json
d, tag, n, peers = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(",")
def content(name):
    s = (name + ":").encode()
    return (s * (3901 // len(s) + 1))[:3901]
errors, kept = [], []
print("ready", flush=True)
sys.stdin.readline()
for j in range(n):
    name = f"w{tag}.{j}"
    try:
        fd = os.open(f"{d}/{name}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.write(fd, content(name))
        os.close(fd)
        kept.append(name)
        st = os.stat(f"{d}/{name}")
        if st.st_size != 3901:
            errors.append(f"{name}: size {st.st_size}")
    except OSError as e:
        errors.append(f"{name}: {e}")
    peer = peers[j % len(peers)]
    try:
        os.stat(f"{d}/w{peer}.{j}")
    except FileNotFoundError:
        pass
    except OSError as e:
        errors.append(f"stat w{peer}.{j}: {e}")
    if j % 3 == 2 and kept:
        gone = kept.pop(0)
        try:
            os.unlink(f"{d}/{gone}")
        except OSError as e:
            errors.append(f"unlink {gone}: {e}")
print(json.dumps({"errors": errors, "kept": kept}), flush=True)
"#;

/// Eight processes — four preloaded, two on each of two mounts — create, write, stat and
/// remove small files in one shared directory at once: none gets an error, and afterwards
/// the directory lists exactly the names they kept, once each, with their content, through
/// both mounts and the client library.
#[test]
fn many_processes_of_both_kinds_in_one_shared_directory_lose_and_duplicate_nothing() {
    let config = strict();
    let m = Mounted::start_with(3, config.clone());
    let other = m.another_mount();
    std::fs::create_dir(m.path("shared")).unwrap();
    const N: usize = 60;
    let kinds = ["pre", "pre", "pre", "pre", "a", "a", "b", "b"];
    let tags: Vec<String> = (0..kinds.len())
        .map(|i| format!("{}{i}", kinds[i]))
        .collect();
    let peers = tags.join(",");
    let (a, b) = (m.path("shared"), other.path("shared"));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let n = N.to_string();
    let mut procs: Vec<Proc> = kinds
        .iter()
        .zip(&tags)
        .map(|(how, tag)| {
            let what = format!("worker {tag}");
            match *how {
                "pre" => Proc::preloaded(
                    &m.cluster,
                    SHARED,
                    &["/eddy/shared", tag, &n, &peers],
                    &what,
                ),
                "a" => Proc::on_mount(SHARED, &[a, tag, &n, &peers], &what),
                _ => Proc::on_mount(SHARED, &[b, tag, &n, &peers], &what),
            }
        })
        .collect();
    for p in &procs {
        p.expect("ready", guard(&config));
    }
    for p in &mut procs {
        p.go();
    }
    let mut want = BTreeSet::new();
    for p in procs {
        let what = p.what.clone();
        let r = p.result(guard(&config));
        let errors = r["errors"].as_array().unwrap();
        assert!(errors.is_empty(), "{what}: {errors:?}");
        for name in r["kept"].as_array().unwrap() {
            assert!(want.insert(name.as_str().unwrap().to_string()));
        }
    }
    assert_eq!(want.len(), kinds.len() * (N - N / 3));
    assert_eq!(listing(&m.path("shared")), want);
    assert_eq!(listing(&other.path("shared")), want);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(m.cluster.client());
    assert_eq!(rt.block_on(library_listing(&c, "/shared")), want);
    for name in &want {
        let data = std::fs::read(other.path(&format!("shared/{name}"))).unwrap();
        assert_eq!(data, content(name, 3901), "{name}");
    }
}

// ----- the kernel's negative entries under a lease (decision 0077) --------------------------

/// With the default entry times (a negative entry kept for `fuse_negative_ttl_ms`, 1 s):
/// mount A made a directory (its client holds the lease on it) and looked a name up there
/// (missing: a negative entry its kernel keeps); mount B creates the name. The recall makes A
/// drop that entry before B's create is answered, so A reads the file at once, not a second
/// later. Without leases A's kernel would answer ENOENT from its entry until it expired.
/// (A directory another client made or used lately is not leased at once: after a recall it
/// cools down, decision 0075; then the negative TTL applies as without leases.)
#[test]
fn a_negative_entry_kept_under_a_lease_is_dropped_when_another_mount_creates_the_name() {
    let m = Mounted::start_with(3, eddy_testkit::leased_config());
    let other = m.another_mount();
    std::fs::create_dir(m.path("d")).unwrap();
    for _ in 0..3 {
        assert_eq!(
            kind(std::fs::metadata(m.path("d/x"))),
            Some(ErrorKind::NotFound)
        );
    }
    std::fs::write(other.path("d/x"), b"made on B").unwrap();
    assert_eq!(std::fs::read(m.path("d/x")).unwrap(), b"made on B");
}

/// Makes directory argv[1], then three times: creates `x.lock` with O_EXCL, writes, unlinks it
/// while it is still open, closes it (as git's lock files go, with the mount's release
/// arriving after the unlink), and creates it again with O_EXCL; prints "done".
const RELOCK: &str = r#"
import os, sys
d = sys.argv[1]
os.mkdir(d)
for i in range(3):
    fd = os.open(f"{d}/x.lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, b"1")
    os.unlink(f"{d}/x.lock")
    os.close(fd)
fd = os.open(f"{d}/x.lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
os.close(fd)
print("done", flush=True)
"#;

/// A name unlinked while open in a directory this client made (so leased) is free again: an
/// O_CREAT|O_EXCL create of it succeeds, through the mount and under the preload library
/// (it got EEXIST from the lease, which still counted the name present).
#[test]
fn a_name_unlinked_while_open_is_free_again_for_o_excl() {
    let config = eddy_testkit::leased_config();
    let m = Mounted::start_with(3, config.clone());
    let on_mount = m.path("m");
    let p = Proc::on_mount(RELOCK, &[on_mount.to_str().unwrap()], "on the mount");
    p.expect("done", guard(&config));
    let p = Proc::preloaded(&m.cluster, RELOCK, &["/eddy/p"], "under the preload");
    p.expect("done", guard(&config));
    for d in ["m", "p"] {
        assert_eq!(
            listing(&m.path(d)),
            BTreeSet::from(["x.lock".to_string()]),
            "{d}"
        );
    }
}
