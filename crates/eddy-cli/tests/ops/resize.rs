//! `eddy grow` and `eddy shrink` under load (decision 0081): writers that verify every byte
//! they wrote run through the FUSE mount and through the preload library while a deployment
//! of real daemons grows from 3 to 6 and shrinks from 6 to 4; no I/O fails, every file reads
//! back whole afterwards, the new daemons hold data and the drained ones are gone.

use eddy_testkit::cli::{eddy, fails, ok, s, text};
use eddy_testkit::{preloaded, require};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Writes file after file (each `SIZE` bytes of a pattern seeded by its name, fsync'd, read
/// back and compared, an earlier one read again and compared; every fourth given a second
/// name, `NAME.l`, every other of those losing it again) until the stop file exists; with
/// `verify`, only reads every file it finds under DIR and compares, and checks that a file
/// with a second name shows two links and one inode through both. Exits 1 at the first
/// error or difference, saying which; prints how many files it wrote.
const WRITER: &str = r#"
import hashlib, os, sys, random
mode, d, tag, stop = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
SIZE = 300 * 1024 + 17
def data(name):
    out, seed = bytearray(), name.encode()
    while len(out) < SIZE:
        seed = hashlib.sha256(seed).digest()
        out += seed
    return bytes(out[:SIZE])
def check(path):
    with open(path, "rb") as f:
        got = f.read()
    want = data(os.path.basename(path).removesuffix(".l"))
    if got != want:
        at = next((j for j in range(min(len(got), len(want))) if got[j] != want[j]), min(len(got), len(want)))
        zero = got[at:at + 64] == bytes(len(got[at:at + 64]))
        print("differs:", path, len(got), "first at", at, "zeros" if zero else "other bytes", file=sys.stderr)
        sys.exit(1)
if mode == "verify":
    names = sorted(os.listdir(d))
    for n in names:
        check(os.path.join(d, n))
        if n.endswith(".l"):
            continue
        st = os.stat(os.path.join(d, n))
        other = n + ".l"
        want = 2 if other in names else 1
        if st.st_nlink != want or (want == 2 and os.stat(os.path.join(d, other)).st_ino != st.st_ino):
            print("links:", n, "shows", st.st_nlink, "links, has", want, "names", file=sys.stderr)
            sys.exit(1)
    print(len([n for n in names if not n.endswith(".l")]))
    sys.exit(0)
os.makedirs(d, exist_ok=True)
i = 0
while not os.path.exists(stop) or i < 8:
    name = "%s-%05d" % (tag, i)
    path = os.path.join(d, name)
    with open(path, "wb") as f:
        f.write(data(name))
        f.flush()
        os.fsync(f.fileno())
    check(path)
    check(os.path.join(d, "%s-%05d" % (tag, random.randrange(i + 1))))
    if i % 4 == 1:
        os.link(path, path + ".l")
        check(path + ".l")
    if i % 8 == 5:
        os.unlink(path + ".l")
    i += 1
print(i)
"#;

/// A configuration without direct local I/O: a move refuses a deployment that serves it
/// (its descriptors cannot follow a move yet).
fn movable_config(dir: &Path) -> PathBuf {
    let path = dir.join("movable.toml");
    std::fs::write(&path, "direct_io = false\n").unwrap();
    path
}

/// Starts 3 local daemons in `root` (chunks of 64 KiB, `movable_config`).
fn start_movable(dir: &Path, root: &Path) {
    start_local(root, &movable_config(dir));
}

/// Starts 3 local daemons in `root` (chunks of 64 KiB) with the configuration file `config`.
fn start_local(root: &Path, config: &Path) {
    ok(&[
        "start",
        "--local",
        "3",
        "--root",
        s(root),
        "--chunk-size",
        "65536",
        "--name",
        "t",
        "--config",
        s(config),
    ]);
}

/// Stops the deployment when the test ends, whatever happened.
struct StopGuard(PathBuf);

impl Drop for StopGuard {
    fn drop(&mut self) {
        let _ = eddy(&["stop", "--state", s(&self.0)]);
    }
}

fn status_json(state: &Path) -> serde_json::Value {
    let out = eddy(&["status", "--state", s(state), "--json"]);
    assert!(out.status.success(), "eddy status: {}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

fn writer(cmd: Command, script: &Path, dir: &str, tag: &str, stop: &Path) -> Child {
    let mut cmd = cmd;
    cmd.arg(script)
        .args(["write", dir, tag, s(stop)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finished(child: Child, what: &str) -> u64 {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the {what} writer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
fn a_deployment_grows_and_shrinks_under_writers_through_the_mount_and_the_preload() {
    require::fuse();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let _guard = StopGuard(root.clone());
    start_movable(dir.path(), &root);
    let state = root.clone();
    let mnt = dir.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    ok(&["mount", "--state", s(&state), s(&mnt)]);
    let script = dir.path().join("writer.py");
    std::fs::write(&script, WRITER).unwrap();
    let stop = dir.path().join("stop");

    let through_mount = writer(
        Command::new("python3"),
        &script,
        s(&mnt.join("m")),
        "m",
        &stop,
    );
    let through_preload = writer(
        preloaded("python3", "/eddy", &state),
        &script,
        "/eddy/p",
        "p",
        &stop,
    );
    std::thread::sleep(std::time::Duration::from_secs(2));

    let out = text(&ok(&["grow", "--state", s(&state), "--local", "3"]));
    assert!(out.contains("6 members at epoch 2"), "{out}");
    let st = status_json(&state);
    assert_eq!(ids(&st["members"]), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(st["epoch"], 2);
    assert!(st["moving_from"].is_null(), "{st}");
    for d in st["daemons"].as_array().unwrap() {
        assert_eq!(d["membership"]["epoch"], 2, "{d}");
        assert_eq!(d["membership"]["left"], 0, "{d}");
    }
    let new_chunks: u64 = st["daemons"].as_array().unwrap()[3..]
        .iter()
        .map(|d| d["chunks"].as_u64().unwrap())
        .sum();
    assert!(new_chunks > 0, "the new daemons hold no data: {st}");

    let out = text(&ok(&[
        "shrink",
        "--state",
        s(&state),
        "--drain",
        "1",
        "--drain",
        "4",
    ]));
    assert!(out.contains("4 members at epoch 4"), "{out}");
    let st = status_json(&state);
    assert_eq!(ids(&st["members"]), vec![0, 2, 3, 5]);
    assert_eq!(st["daemons"].as_array().unwrap().len(), 4);

    std::fs::write(&stop, b"").unwrap();
    let written_m = finished(through_mount, "mount");
    let written_p = finished(through_preload, "preload");
    assert!(written_m >= 8 && written_p >= 8);

    // Every byte reads back, through a fresh mount of the deployment as it is now.
    ok(&["umount", s(&mnt)]);
    ok(&["mount", "--state", s(&state), s(&mnt)]);
    for (sub, written) in [("m", written_m), ("p", written_p)] {
        let out = Command::new("python3")
            .arg(&script)
            .args(["verify", s(&mnt.join(sub)), sub, s(&stop)])
            .output()
            .unwrap();
        assert!(out.status.success(), "verify {sub}: {}", text(&out));
        let n: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert_eq!(n, written, "files under {sub}");
    }
    ok(&["stop", "--state", s(&state)]);
}

#[test]
fn grow_and_shrink_refuse_bad_arguments_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let _guard = StopGuard(root.clone());
    ok(&["start", "--local", "3", "--root", s(&root), "--name", "t"]);
    let err = fails(&["grow", "--state", s(&root), "--local", "1"]);
    assert!(err.contains("direct_io = false"), "{err}");
    let err = fails(&["grow", "--state", s(&root), "--local", "0"]);
    assert!(err.contains("at least one daemon"), "{err}");
    let err = fails(&["shrink", "--state", s(&root), "--drain", "9"]);
    assert!(err.contains("not part of the deployment"), "{err}");
    let err = fails(&[
        "shrink",
        "--state",
        s(&root),
        "--drain",
        "0",
        "--drain",
        "1",
        "--drain",
        "2",
    ]);
    assert!(err.contains("would leave 0 daemons"), "{err}");
    let st = status_json(&root);
    assert_eq!(st["epoch"], 0);
    assert_eq!(ids(&st["members"]), vec![0, 1, 2]);
}

/// The eddyd processes serving a root under `root` (by their command line).
fn daemons_under(root: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        let serves = args.windows(2).any(|w| {
            w[0] == b"--root"
                && Path::new(std::str::from_utf8(w[1]).unwrap_or("")).starts_with(root)
        });
        let zombie = std::fs::read_to_string(e.path().join("stat"))
            .map(|st| {
                st.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true);
        n += usize::from(serves && !zombie);
    }
    n
}

#[test]
fn a_grow_killed_at_any_step_is_finished_by_the_next_command_and_every_byte_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let _guard = StopGuard(root.clone());
    start_movable(dir.path(), &root);
    let script = dir.path().join("writer.py");
    std::fs::write(&script, WRITER).unwrap();
    let stop = dir.path().join("stop");
    std::fs::write(&stop, b"").unwrap();
    let mut written = Vec::new();
    for tag in ["a", "b"] {
        let w = writer(
            preloaded("python3", "/eddy", &root),
            &script,
            &format!("/eddy/{tag}"),
            tag,
            &stop,
        );
        written.push((tag, finished(w, tag)));
    }

    // Killed early (while its daemons start, or before they took the membership), then
    // during the copy: whatever step each reached, the next command finishes it.
    for delay in [150, 900] {
        let mut grow = eddy_testkit::cli::eddy_cmd()
            .args(["grow", "--state", s(&root), "--local", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay));
        grow.kill().unwrap();
        grow.wait().unwrap();
    }
    let out = text(&ok(&["grow", "--state", s(&root), "--local", "1"]));
    assert!(out.contains("members at epoch"), "{out}");

    let st = status_json(&root);
    let epoch = st["epoch"].as_u64().unwrap();
    assert!(st["moving_from"].is_null(), "{st}");
    let daemons = st["daemons"].as_array().unwrap();
    assert_eq!(ids(&st["members"]).len(), daemons.len());
    for d in daemons {
        assert_eq!(d["membership"]["epoch"].as_u64(), Some(epoch), "{d}");
        assert_eq!(d["membership"]["left"], 0, "{d}");
    }
    assert_eq!(
        daemons_under(&root),
        daemons.len(),
        "a daemon of an unfinished grow still runs"
    );
    for (tag, n) in written {
        let out = preloaded("python3", "/eddy", &root)
            .arg(&script)
            .args(["verify", &format!("/eddy/{tag}"), tag, s(&stop)])
            .output()
            .unwrap();
        assert!(out.status.success(), "verify {tag}: {}", text(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            n.to_string(),
            "files under {tag}"
        );
    }
}

#[test]
fn a_deployment_started_through_a_launcher_grows_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "h 127.0.0.1\nh 127.0.0.1\nh 127.0.0.1\n").unwrap();
    let more = dir.path().join("more");
    std::fs::write(&more, "g 127.0.0.1\ng 127.0.0.1\n").unwrap();
    let state = dir.path().join("state");
    let _guard = StopGuard(state.clone());
    ok(&[
        "start",
        "--hosts",
        s(&hosts),
        "--launcher",
        "env {cmd}",
        "--root",
        s(&dir.path().join("r{id}")),
        "--state",
        s(&state),
        "--listen-port",
        "0",
        "--chunk-size",
        "65536",
        "--config",
        s(&movable_config(dir.path())),
    ]);
    let script = dir.path().join("writer.py");
    std::fs::write(&script, WRITER).unwrap();
    let stop = dir.path().join("stop");
    std::fs::write(&stop, b"").unwrap();
    let w = writer(
        preloaded("python3", "/eddy", &state),
        &script,
        "/eddy/a",
        "a",
        &stop,
    );
    let n = finished(w, "preload");

    let out = text(&ok(&["grow", "--state", s(&state), "--hosts", s(&more)]));
    assert!(out.contains("5 members at epoch 2"), "{out}");
    let dep = eddy_config::Deployment::load(&state.join("deployment.toml")).unwrap();
    let added: Vec<(u32, &str)> = dep.daemons[3..]
        .iter()
        .map(|d| (d.id, d.host.as_str()))
        .collect();
    assert_eq!(added, vec![(3, "g"), (4, "g")]);
    assert!(dep.daemons[3].root.ends_with("r3"), "{:?}", dep.daemons[3]);
    let err = fails(&["grow", "--state", s(&state), "--local", "1"]);
    assert!(err.contains("eddy start --local"), "{err}");

    let out = preloaded("python3", "/eddy", &state)
        .arg(&script)
        .args(["verify", "/eddy/a", "a", s(&stop)])
        .output()
        .unwrap();
    assert!(out.status.success(), "verify: {}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), n.to_string());
}

#[test]
fn a_shrink_whose_members_lack_room_for_the_data_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let _guard = StopGuard(root.clone());
    let config = dir.path().join("small.toml");
    std::fs::write(&config, "direct_io = false\ncapacity_bytes = 8388608\n").unwrap();
    start_local(&root, &config);
    // 18 MB over three daemons of 8 MiB: two could not hold it.
    let fill = "import os\nfor i in range(18):\n    open('/eddy/f%d' % i, 'wb').write(os.urandom(1000000))\n";
    let out = preloaded("python3", "/eddy", &root)
        .args(["-c", fill])
        .output()
        .unwrap();
    assert!(out.status.success(), "fill: {}", text(&out));
    let err = fails(&["shrink", "--state", s(&root), "--drain", "2"]);
    assert!(
        err.contains("capacity_bytes") && err.contains("nothing changed"),
        "{err}"
    );
    let st = status_json(&root);
    assert_eq!(st["epoch"], 0);
    assert!(
        st["moving_from"].is_null() && st["draining"].as_array().is_none_or(|d| d.is_empty()),
        "{st}"
    );
    assert_eq!(ids(&st["members"]), vec![0, 1, 2]);
    // With half of it removed, the same shrink goes through.
    let out = preloaded("python3", "/eddy", &root)
        .args([
            "-c",
            "import os\nfor i in range(9):\n    os.unlink('/eddy/f%d' % i)\n",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "unlink: {}", text(&out));
    let out = text(&ok(&["shrink", "--state", s(&root), "--drain", "2"]));
    assert!(out.contains("2 members at epoch 2"), "{out}");
}

/// A move whose copy outlasts `--deadline-s` (slowed by `move_bandwidth_bytes`: 2,400 small
/// files, a quarter of whose items move at 64 KiB/s a daemon) gives up at the deadline whatever
/// the daemons answer, before its cut-over, leaving the hosts file at the copy's epoch:
/// clients keep reading by the old members, and the next `grow` finishes the move. Root's
/// run-time grow of a pool job bounds its moves so (decision 0082).
#[test]
fn a_move_past_its_deadline_gives_up_and_the_next_command_finishes_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let _guard = StopGuard(root.clone());
    let config = dir.path().join("slow.toml");
    std::fs::write(&config, "direct_io = false\nmove_bandwidth_bytes = 65536\n").unwrap();
    start_local(&root, &config);
    let fill =
        "for i in range(2400):\n    open('/eddy/f%d' % i, 'wb').write(bytes([i % 256]) * 4000)\n";
    let out = preloaded("python3", "/eddy", &root)
        .args(["-c", fill])
        .output()
        .unwrap();
    assert!(out.status.success(), "fill: {}", text(&out));
    let started = std::time::Instant::now();
    let err = fails(&[
        "grow",
        "--state",
        s(&root),
        "--local",
        "1",
        "--deadline-s",
        "2",
    ]);
    assert!(err.contains("passed its deadline"), "{err}");
    assert!(err.contains("copying"), "{err}");
    // A guard against a hang, never a claim on speed: the copy alone takes far longer.
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    let st = status_json(&root);
    assert_eq!(st["epoch"], 1, "{st}");
    assert_eq!(ids(&st["moving_from"]), vec![0, 1, 2], "{st}");
    // Clients still read every byte meanwhile.
    let check = "for i in range(2400):\n    assert open('/eddy/f%d' % i, 'rb').read() == bytes([i % 256]) * 4000, i\n";
    let out = preloaded("python3", "/eddy", &root)
        .args(["-c", check])
        .output()
        .unwrap();
    assert!(out.status.success(), "read during the move: {}", text(&out));
    // The next command finishes the move first (no deadline), then grows by its own daemon.
    let out = text(&ok(&["grow", "--state", s(&root), "--local", "1"]));
    assert!(out.contains("finishing it first"), "{out}");
    assert!(out.contains("5 members at epoch 4"), "{out}");
    let out = preloaded("python3", "/eddy", &root)
        .args(["-c", check])
        .output()
        .unwrap();
    assert!(out.status.success(), "read after the move: {}", text(&out));
}
