//! Objects planted where the job's user writes: after a deployment of `nobody`'s daemons has
//! started (node-local: `eddy start --local 3 --daemon-user nobody --mount M --link` as root;
//! and the burst buffer's pool path, `eddy bb` phase by phase), the user replaces every
//! object of its daemon roots and of the job's `user/` directory — the Unix sockets,
//! `eddyd.fd`, the ready and root-mark files, the metadata store's files, chunk data and
//! `.sum` files, the persisted counters (`stats/`) — with one kind of object per test: links
//! to root's canary files (0600 and 0644) and directory, FIFOs, hard links, or Unix sockets
//! with hostile servers (silent, garbage, and on `eddyd.fd` descriptors of root's files).
//! Then root does everything it does for a job: I/O through its mount as the user and as
//! root, `eddy status`, `eddy stage-out`, `eddy writeback`, `eddy stop` (the job profile),
//! the burst buffer's data-out and teardown (the site's profile, the node's clean-up).
//!
//! Every case checks: each root canary keeps its bytes, owner and mode; no file of root's
//! appears where the user writes; each command ends within `BOUND` (a guard against a hang,
//! not a performance claim) and, when it fails, says why; nothing the user can read (the
//! attacker's log of what reached its servers, its daemon roots, the backend, what it read
//! through the mount) holds the 0600 canary's bytes. Failures name the case
//! (`[local/fifo] eddy stop: ...`) and are all reported at once.

use eddy_testkit::bbsite::{Site, NOBODY};
use eddy_testkit::cli::{eddy_cmd, s};
use eddy_testkit::require;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The longest any one operation may take before the test calls it hung.
const BOUND: Duration = Duration::from_secs(60);

const ATTACKER: &str = include_str!("attacker.py");

/// What every planted object becomes (attacker.py's KIND).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plant {
    Symlink,
    Fifo,
    HardLink,
    Silent,
    Garbage,
    Descriptors,
}

impl Plant {
    fn name(self) -> &'static str {
        match self {
            Plant::Symlink => "symlink",
            Plant::Fifo => "fifo",
            Plant::HardLink => "hardlink",
            Plant::Silent => "silent",
            Plant::Garbage => "garbage",
            Plant::Descriptors => "descriptors",
        }
    }

    /// The attacker ends its own daemons first and serves in their place (their sockets
    /// are its hostile servers); for the other kinds the daemons go on running among the
    /// planted objects.
    fn replaces_daemons(self) -> bool {
        matches!(self, Plant::Silent | Plant::Garbage)
    }
}

mod canaries;
use canaries::Canaries;

/// A root-owned 0755 directory for one case: canaries, the attacker's own directory
/// (nobody's), the backend (nobody's), logs of the commands (root's).
struct World {
    dir: tempfile::TempDir,
    canaries: Canaries,
    attacker: PathBuf,
    own: PathBuf,
    backend: PathBuf,
    case: String,
    failures: Vec<String>,
    /// What the user read or could read, checked for the secret at the end.
    seen_by_user: Vec<u8>,
    ops: u32,
}

impl World {
    fn new(case: &str, backend: Option<PathBuf>) -> World {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let canaries = Canaries::new(dir.path());
        let attacker = dir.path().join("attacker");
        std::fs::create_dir(&attacker).unwrap();
        let own = attacker.join("own");
        std::fs::write(&own, b"the attacker's own file\n").unwrap();
        let backend = backend.unwrap_or_else(|| {
            let b = dir.path().join("backend");
            std::fs::create_dir(&b).unwrap();
            std::fs::write(b.join("in.dat"), eddy_testkit::pattern(7, 0, 200_000)).unwrap();
            b
        });
        for p in [&attacker, &own] {
            std::os::unix::fs::chown(p, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        chown_tree(&backend);
        let script = dir.path().join("attacker.py");
        std::fs::write(&script, ATTACKER).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
        World {
            dir,
            canaries,
            attacker,
            own,
            backend,
            case: case.to_string(),
            failures: Vec::new(),
            seen_by_user: Vec::new(),
            ops: 0,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Runs `cmd` to its end or `BOUND`; a hang is a failure (the process is killed). A
    /// failed `eddy` command must say why on standard error. Returns whether it succeeded
    /// and its output.
    fn run(&mut self, label: &str, mut cmd: Command, eddy: bool) -> (bool, String) {
        self.ops += 1;
        let out = self.path(&format!("op-{}.out", self.ops));
        let err = self.path(&format!("op-{}.err", self.ops));
        cmd.stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap());
        let mut child = cmd.spawn().unwrap();
        let status = wait_bounded(&mut child, BOUND);
        let text = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
        let (stdout, stderr) = (text(&out), text(&err));
        let Some(status) = status else {
            let _ = child.kill();
            let _ = child.wait();
            self.failures.push(format!(
                "[{}] {label}: still running after {} s (hung)\nstdout: {stdout}\nstderr: {stderr}",
                self.case,
                BOUND.as_secs()
            ));
            return (false, format!("{stdout}{stderr}"));
        };
        if eddy && !status.success() {
            let said = stderr
                .lines()
                .any(|l| l.starts_with("eddy: ") && l.len() > 12);
            if !said {
                self.failures.push(format!(
                    "[{}] {label} failed ({status}) without saying why:\nstdout: {stdout}\nstderr: {stderr}",
                    self.case
                ));
            }
        }
        eprintln!(
            "[{}] {label}: {status}\n{}{}",
            self.case,
            tail(&stdout),
            tail(&stderr)
        );
        (status.success(), format!("{stdout}{stderr}"))
    }

    /// Runs `script` with sh as the job's user; what it prints is the user's to see.
    fn as_user(&mut self, label: &str, script: &str) {
        let mut c = eddy_testkit::as_user(NOBODY);
        c.args(["sh", "-c", script]).current_dir("/");
        let (_, out) = self.run(label, c, false);
        self.seen_by_user.extend_from_slice(out.as_bytes());
    }

    fn as_root(&mut self, label: &str, script: &str) {
        let mut c = Command::new("sh");
        c.args(["-c", script]).current_dir("/");
        self.run(label, c, false);
    }

    fn eddy(&mut self, label: &str, args: &[&str]) -> bool {
        let mut c = eddy_cmd();
        c.args(args);
        self.run(label, c, true).0
    }

    /// Starts attacker.py as the job's user on `targets`; returns once it has planted them
    /// (its servers go on serving until it is killed).
    fn plant(&mut self, kind: Plant, targets: &[PathBuf]) -> Child {
        let mut child = eddy_testkit::as_user(NOBODY)
            .arg(eddy_testkit::python::PYTHON)
            .arg(self.path("attacker.py"))
            .args([
                kind.name(),
                s(&self.canaries.secret),
                s(&self.canaries.public),
            ])
            .arg(&self.canaries.dir)
            .arg(&self.own)
            .arg(&self.attacker)
            .args(targets)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let deadline = Instant::now() + BOUND;
        loop {
            assert!(
                Instant::now() < deadline,
                "the attacker did not plant in time"
            );
            match lines.next() {
                Some(Ok(l)) if l == "ready" => break,
                Some(Ok(l)) => eprintln!("[{}] {l}", self.case),
                _ => panic!("[{}] the attacker ended before planting", self.case),
            }
        }
        child
    }

    /// The end: canaries, root's files in the user's places, the secret in what the user
    /// can read; panics with every failure of the case.
    fn finish(mut self, user_places: &[PathBuf]) {
        self.canaries.check(&self.case, &mut self.failures);
        let mut readable = std::mem::take(&mut self.seen_by_user);
        let mut places = user_places.to_vec();
        places.push(self.attacker.clone());
        places.push(self.backend.clone());
        for place in &places {
            walk(place, &mut |p, m| {
                if m.uid() == 0 && p != place.as_path() {
                    self.failures.push(format!(
                        "[{}] a file of root's appeared where the user writes: {} (mode {:o})",
                        self.case,
                        p.display(),
                        m.mode() & 0o7777
                    ));
                }
                if m.is_file() && m.nlink() == 1 && m.len() < (64 << 20) {
                    readable.extend(std::fs::read(p).unwrap_or_default());
                }
            });
        }
        let secret = &self.canaries.secret_bytes;
        if readable
            .windows(secret.len())
            .any(|w| w == secret.as_slice())
        {
            self.failures.push(format!(
                "[{}] the 0600 canary's bytes reached what the user reads",
                self.case
            ));
        }
        assert!(
            self.failures.is_empty(),
            "{} failure(s):\n{}",
            self.failures.len(),
            self.failures.join("\n")
        );
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(6);
    lines[from..].iter().map(|l| format!("  {l}\n")).collect()
}

fn wait_bounded(child: &mut Child, bound: Duration) -> Option<std::process::ExitStatus> {
    eddy_testkit::eventually::exited(child, bound)
}

/// Every entry under `dir` (not following links), with its lstat.
fn walk(dir: &Path, f: &mut dyn FnMut(&Path, &std::fs::Metadata)) {
    let Ok(m) = std::fs::symlink_metadata(dir) else {
        return;
    };
    f(dir, &m);
    if m.is_dir() {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            walk(&e.path(), f);
        }
    }
}

fn chown_tree(dir: &Path) {
    walk(dir, &mut |p, _| {
        std::os::unix::fs::lchown(p, Some(NOBODY), Some(NOBODY)).unwrap();
    });
}

/// Every object the attacker replaces in a daemon root (or the job's `user/`): each file,
/// socket and FIFO at any depth, and the `stats` directory itself (after its files).
fn objects_of(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk(root, &mut |p, m| {
        if !m.is_dir() {
            out.push(p.to_owned());
        }
    });
    let stats = root.join("stats");
    if stats.is_dir() {
        out.push(stats);
    }
    out
}

/// Pids of the daemons serving `roots`, from their ready files (read before the attack).
fn daemon_pids(roots: &[PathBuf]) -> Vec<u32> {
    roots
        .iter()
        .filter_map(|r| eddy_daemon::read_ready(r).ok().flatten())
        .map(|r| r.pid)
        .collect()
}

/// The user's I/O through the mount and root's, after the attack; then what the user reads
/// back (a file root wrote through a descriptor the attacker chose would show its bytes).
fn io_through_mount(w: &mut World, d: &Path) {
    let d = d.display();
    let label = |what: &str| format!("{what} through the mount ({d})");
    w.as_user(
        &label("I/O as the user"),
        &format!(
            "cat {d}/in.dat > /dev/null; cat {d}/small {d}/before; echo more >> {d}/out.dat; \
             exec 3<>{d}/small; echo rw >&3; exec 3>&-; cat {d}/small; \
             echo mine > {d}/mine; cat {d}/mine; \
             dd if=/dev/zero of={d}/fresh bs=64k count=4 2>&1; cat {d}/fresh | wc -c"
        ),
    );
    w.as_root(
        &label("I/O as root"),
        &format!(
            "cat {d}/small {d}/mine {d}/before > /dev/null; echo root-wrote-this > {d}/small; \
             exec 3<>{d}/out.dat; echo root-rw >&3; exec 3>&-; \
             exec 3<>{d}/mine; echo root-rw >&3; exec 3>&-; echo root >> {d}/before; \
             echo root-new > {d}/root-new; cat {d}/in.dat > /dev/null"
        ),
    );
    w.as_user(
        &label("reading back as the user"),
        &format!("cat {d}/small {d}/root-new {d}/mine {d}/before {d}/out.dat {d}/fresh {d}/in.dat"),
    );
}

/// `eddy start --local 3 --daemon-user nobody --mount M --link /d=BACKEND` as root, the
/// attack, every root operation on it.
fn local_case(kind: Plant) {
    require::fuse();
    require::switch_user();
    let case = format!("local/{}", kind.name());
    let mut w = World::new(&case, None);
    let (root, state, mnt) = (w.path("root"), w.path("state"), w.path("mnt/m"));
    std::fs::create_dir_all(&mnt).unwrap();
    let config = eddy_config::Config {
        chunk_size: 64 * 1024,
        rpc_timeout_ms: 3_000,
        connect_timeout_ms: 2_000,
        root_mode: eddy_config::FileMode(0o755),
        stats_persist_ms: 200,
        // Files placed on the daemon of the host that made them: the mount opens those
        // through FUSE passthrough, with a descriptor it gets on that daemon's `eddyd.fd`.
        placement: eddy_config::PlacementMode::Local,
        ..eddy_config::Config::default()
    };
    let cfg = w.path("config.toml");
    std::fs::write(&cfg, toml::to_string(&config).unwrap()).unwrap();
    let link = format!("/d={}", w.backend.display());
    let started = w.eddy(
        "eddy start",
        &[
            "start",
            "--local",
            "3",
            "--root",
            s(&root),
            "--state",
            s(&state),
            "--daemon-user",
            "nobody",
            "--mount",
            s(&mnt),
            "--link",
            &link,
            "--config",
            s(&cfg),
            "--name",
            "planted",
        ],
    );
    assert!(
        started,
        "[{case}] the deployment did not start: {:?}",
        w.failures
    );
    let d = mnt.join("d");
    // A scratch directory of the user's (outside the linked prefix: the files the mount
    // passes through to a daemon's data file).
    let scratch = mnt.join("s");
    w.as_root(
        "making the user's scratch directory",
        &format!(
            "mkdir {0} && chown {NOBODY}:{NOBODY} {0}",
            scratch.display()
        ),
    );
    w.as_user(
        "writing scratch files before the attack",
        &format!(
            "echo before > {0}/before && cat {0}/before",
            scratch.display()
        ),
    );
    let roots: Vec<PathBuf> = (0..3).map(|i| root.join(format!("d{i}"))).collect();
    write_before_attack(&mut w, &d, " && cat {0}/small");
    counters_persisted(&roots);
    let (pids, attacker) = attack(&mut w, kind, &roots, &[]);

    io_through_mount(&mut w, &d);
    io_through_mount(&mut w, &scratch);
    w.eddy("eddy status", &["status", "--state", s(&state)]);
    w.eddy("eddy stage-out", &["stage-out", "--state", s(&state)]);
    let end = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3;
    w.eddy(
        "eddy writeback",
        &[
            "writeback",
            "--state",
            s(&state),
            "--end",
            &end.to_string(),
            "--margin",
            "0",
        ],
    );
    // What the mount did with the descriptors (passthrough), for the reader of a failure.
    let log = std::fs::read_to_string(state.join("mount.log")).unwrap_or_default();
    for l in log
        .lines()
        .filter(|l| l.contains("passthrough") || l.contains("descriptor"))
    {
        eprintln!("[{case}] mount.log: {l}");
    }
    let again = replant(&mut w, kind, &roots, &pids);
    if !w.eddy("eddy stop", &["stop", "--state", s(&state)]) {
        w.eddy(
            "eddy stop --discard",
            &["stop", "--state", s(&state), "--discard"],
        );
    }
    let mut places = roots.clone();
    places.push(root.clone());
    finish_case(w, [again, Some(attacker)], &pids, &places);
}

/// The user's writes through the mount at `d` before the attack: data of every kind (dirty,
/// to stage out; small; cached from the backend), then `more` (a shell fragment, `{0}` for
/// `d`).
fn write_before_attack(w: &mut World, d: &Path, more: &str) {
    let script = "dd if=/dev/urandom of={0}/out.dat bs=64k count=8 2>&1 && echo small > {0}/small \
                  && cat {0}/in.dat > /dev/null"
        .to_string()
        + more;
    w.as_user(
        "writing through the mount before the attack",
        &script.replace("{0}", &d.display().to_string()),
    );
}

/// Waits until every daemon of `roots` has persisted its counters (a snapshot in
/// `ROOT/stats` written from now on: `stats_persist_ms` is 200 here), so that the attack
/// finds them on disk.
fn counters_persisted(roots: &[PathBuf]) {
    let written = std::time::SystemTime::now();
    let persisted = |root: &PathBuf| {
        std::fs::read_dir(root.join("stats"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                e.metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t > written)
            })
    };
    eddy_testkit::eventually::eventually(
        "every daemon persisted its counters after the writes",
        || roots.iter().all(persisted).then_some(()),
    );
}

/// The attack: the user ends its daemons first when `kind` replaces them, then plants `kind`
/// at every object of `roots` and of `more`. Returns the daemons' pids and the attacker.
fn attack(w: &mut World, kind: Plant, roots: &[PathBuf], more: &[PathBuf]) -> (Vec<u32>, Child) {
    let pids = daemon_pids(roots);
    if kind.replaces_daemons() {
        let list: Vec<String> = pids.iter().map(u32::to_string).collect();
        w.as_user(
            "the user ends its daemons",
            &format!("kill -9 {}", list.join(" ")),
        );
    }
    let targets: Vec<PathBuf> = roots
        .iter()
        .chain(more)
        .flat_map(|r| objects_of(r))
        .collect();
    let attacker = w.plant(kind, &targets);
    (pids, attacker)
}

/// The end of a case: the attackers killed, whatever is left cleaned up, and the checks of
/// `World::finish` on the user's `places`.
fn finish_case(w: World, attackers: [Option<Child>; 2], pids: &[u32], places: &[PathBuf]) {
    for mut a in attackers.into_iter().flatten() {
        let _ = a.kill();
        let _ = a.wait();
    }
    cleanup(&w, pids);
    w.finish(places);
}

/// Before the deployment is stopped: the user ends its daemons (kill -9), which were
/// rewriting their files meanwhile (their counters every `stats_persist_ms`), and plants
/// again whatever is there now, so that the stop and the profile find the planted objects.
/// The socket kinds replaced the daemons already.
fn replant(w: &mut World, kind: Plant, roots: &[PathBuf], pids: &[u32]) -> Option<Child> {
    if kind.replaces_daemons() {
        return None;
    }
    let list: Vec<String> = pids.iter().map(u32::to_string).collect();
    w.as_user(
        "the user ends its daemons",
        &format!("kill -9 {} 2>&1; sleep 0.5", list.join(" ")),
    );
    let targets: Vec<PathBuf> = roots.iter().flat_map(|r| objects_of(r)).collect();
    Some(w.plant(kind, &targets))
}

/// Whatever is left: the mount, the daemons, the attacker's processes.
fn cleanup(w: &World, pids: &[u32]) {
    for p in pids {
        // SAFETY: signalling a pid recorded for this test; at worst one already gone.
        unsafe {
            libc::kill(*p as i32, libc::SIGKILL);
        }
    }
    eddy_testkit::slurm::clean_leftovers(w.dir.path());
}

/// The burst buffer's pool path: setup (daemons as nobody), node-mount, the attack on the
/// daemon roots and the job's `user/`, then data-out, post-run and teardown (the site's
/// profile, node-clean) as root.
fn bb_case(kind: Plant, job: u32) {
    require::fuse();
    require::switch_user();
    let site = Site::new("", "capacity = \"1GiB\"");
    let case = format!("bb/{}", kind.name());
    let mut w = World::new(&case, Some(site.path("pfs/run")));
    // The site's input file, as `in.dat` under the linked prefix.
    std::fs::copy(site.path("pfs/run/in/a.dat"), site.path("pfs/run/in.dat")).unwrap();
    chown_tree(&site.path("pfs/run"));
    let link = format!("link /d={}", site.path("pfs/run").display());
    let script = site.script(&["capacity=64M pool=io", &link]);
    let job_s = job.to_string();
    let bb = |w: &mut World, label: &str, args: &[&str]| {
        let mut c = Command::new(eddy_testkit::eddy_bin());
        c.arg("bb")
            .arg("--site")
            .arg(site.path("bb.toml"))
            .args(args)
            .env_remove("EDDY_STATE");
        w.run(label, c, true).0
    };
    let set = bb(
        &mut w,
        "eddy bb setup",
        &[
            "setup",
            &job_s,
            "65534",
            "65534",
            "io",
            "67108864",
            s(&script),
        ],
    );
    assert!(set, "[{case}] setup failed: {:?}", w.failures);
    let mnt = site.path(&format!("mnt/{job}"));
    let state = site.path(&format!("jobs/{job}/state"));
    let mounted = bb(
        &mut w,
        "eddy bb node-mount",
        &["node-mount", s(&state), s(&mnt)],
    );
    assert!(mounted, "[{case}] node-mount failed: {:?}", w.failures);
    let d = mnt.join("d");
    let roots: Vec<PathBuf> = ["io1", "io2", "io3"]
        .iter()
        .map(|h| site.path(&format!("pool/{h}/job-{job}")))
        .collect();
    let user = site.path(&format!("jobs/{job}/user"));
    write_before_attack(&mut w, &d, "");
    // (The site persists counters every 10 s, the default: this pause, kept from before,
    // awaits no snapshot.)
    std::thread::sleep(Duration::from_millis(600));
    let (pids, attacker) = attack(&mut w, kind, &roots, std::slice::from_ref(&user));

    io_through_mount(&mut w, &d);
    bb(
        &mut w,
        "eddy bb post-run",
        &["post-run", &job_s, s(&script)],
    );
    bb(
        &mut w,
        "eddy bb data-out",
        &["data-out", &job_s, s(&script)],
    );
    let again = replant(&mut w, kind, &roots, &pids);
    bb(
        &mut w,
        "eddy bb teardown",
        &["teardown", &job_s, s(&script), "false"],
    );
    let mut places = roots.clone();
    places.push(user);
    finish_case(w, [again, Some(attacker)], &pids, &places);
}

#[test]
fn links_to_root_files_planted_in_daemon_roots_are_never_followed_by_root() {
    local_case(Plant::Symlink);
    bb_case(Plant::Symlink, 71);
}

#[test]
fn fifos_planted_in_daemon_roots_hang_no_root_operation() {
    local_case(Plant::Fifo);
    bb_case(Plant::Fifo, 72);
}

#[test]
fn hard_links_planted_in_daemon_roots_change_no_root_file() {
    local_case(Plant::HardLink);
    bb_case(Plant::HardLink, 73);
}

#[test]
fn a_silent_server_in_place_of_the_daemons_hangs_no_root_operation() {
    local_case(Plant::Silent);
    bb_case(Plant::Silent, 74);
}

#[test]
fn a_garbage_server_in_place_of_the_daemons_gets_clear_errors() {
    local_case(Plant::Garbage);
    bb_case(Plant::Garbage, 75);
}

/// Fails until the mount checks the descriptors it gets on `eddyd.fd` (the lead's fix of the
/// passthrough): root's mount registers whatever descriptor arrives with
/// FUSE_DEV_IOC_BACKING_OPEN.
#[test]
fn descriptors_of_root_files_sent_on_eddyd_fd_are_never_used_by_root() {
    local_case(Plant::Descriptors);
    bb_case(Plant::Descriptors, 76);
}

/// A job's `stage_out` line names a host path through a link of the user's (here into the
/// job's own mount): root took it for a path on this host and resolved it, following the
/// user's links (and would hang in a mount of the user's that never answers). It is a
/// namespace path, taken as written.
#[test]
fn stage_paths_of_a_job_are_never_resolved_on_the_host_by_root() {
    require::fuse();
    require::switch_user();
    let site = Site::new("", "capacity = \"1GiB\"");
    let job = 77;
    let mnt = site.path(&format!("mnt/{job}"));
    let w = World::new("bb/stage-path", Some(site.path("pfs/run")));
    // The user's link, made before the job: it leads into the job's mount.
    let link = w.attacker.join("into-the-mount");
    let made = eddy_testkit::sh_as_user(
        NOBODY,
        &format!("ln -s {} {}", mnt.display(), link.display()),
    );
    assert!(made.status.success(), "{made:?}");
    let backend = site.path("pfs/run");
    // A second linked prefix named as the host path of the link, so that the stage_out line
    // lies under a linked prefix, as the directives want.
    let other = w.attacker.join("other-backend");
    let made = eddy_testkit::sh_as_user(NOBODY, &format!("mkdir {}", other.display()));
    assert!(made.status.success(), "{made:?}");
    let script = site.script(&[
        "capacity=64M pool=io",
        &format!("link /d={}", backend.display()),
        &format!("link {}={}", link.display(), other.display()),
        &format!("stage_out {}/d/out.dat", link.display()),
    ]);
    let job_s = job.to_string();
    site.bb_ok(&[
        "setup",
        &job_s,
        "65534",
        "65534",
        "io",
        "67108864",
        s(&script),
    ]);
    let state = site.path(&format!("jobs/{job}/state"));
    site.bb_ok(&["node-mount", s(&state), s(&mnt)]);
    let wrote =
        eddy_testkit::sh_as_user(NOBODY, &format!("echo dirty > {}/d/out.dat", mnt.display()));
    assert!(wrote.status.success(), "{wrote:?}");
    site.bb_ok(&["post-run", &job_s, s(&script)]);
    let (_, out, err) = site.bb(&["data-out", &job_s, s(&script)]);
    site.bb_ok(&["teardown", &job_s, s(&script), "false"]);
    assert!(
        !backend.join("out.dat").exists() && !out.contains("/d/out.dat"),
        "root resolved the job's stage_out path through the user's link {} into the \
         namespace and staged /d/out.dat out:\n{out}\n{err}",
        link.display()
    );
}
