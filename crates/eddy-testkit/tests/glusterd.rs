//! The test kit's glusterd: the last test process using it stops the one the kit started, a
//! glusterd of the machine's own is used and left running, and one in another network
//! namespace is refused at once with what to do. Each case runs `child_uses_a_volume` of this
//! binary as a process of its own (the kit stops its glusterd when such a process exits), so
//! this binary has one test: no other test of its process may hold the glusterd meanwhile.
//!
//! Needs root and GlusterFS (scripts/install-deps.sh); fails, naming them, without.

// Test code: its helpers unwrap too.
#![allow(clippy::unwrap_used)]

use eddy_testkit::gluster::{kit_glusterd, running_glusterd, GlusterVolume};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Bound on a child's whole run (a guard against a hang).
const CHILD_BOUND: Duration = Duration::from_secs(180);

/// Runs `child_uses_a_volume` in a process of its own; its output.
fn child() -> Output {
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_uses_a_volume", "--ignored", "--nocapture"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + CHILD_BOUND;
    while c.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = c.kill();
            panic!("the child did not finish within {CHILD_BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    c.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The glusterd pid the child reported using.
fn used_pid(o: &Output) -> i32 {
    let t = text(o);
    t.lines()
        .find_map(|l| l.strip_prefix("glusterd="))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("the child did not say its glusterd:\n{t}"))
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

/// Starts a glusterd as the machine's service does (not through the kit), `prefix` before it
/// (e.g. `unshare -n`); waits until it runs.
fn foreign_glusterd(prefix: &[&str]) -> i32 {
    let mut argv: Vec<&str> = prefix.to_vec();
    argv.extend([
        "glusterd",
        "-p",
        "/run/glusterd.pid",
        "--log-level",
        "WARNING",
    ]);
    let st = Command::new(argv[0]).args(&argv[1..]).status().unwrap();
    assert!(st.success(), "cannot start {argv:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(pid) = running_glusterd() {
            return pid;
        }
        assert!(Instant::now() < deadline, "{argv:?} did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill_and_wait(pid: i32) {
    // SAFETY: kill(2) of a glusterd this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive(pid) {
        assert!(Instant::now() < deadline, "glusterd {pid} did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Not a test of its own: the process `the_kits_glusterd...` runs, which makes a volume,
/// writes and reads a file through its mount, and says which glusterd served it.
#[test]
#[ignore = "run by kit_glusterd_is_stopped_by_its_last_user_and_a_foreign_one_is_left_or_refused, as a process of its own"]
fn child_uses_a_volume() {
    let v = GlusterVolume::start("kitd");
    std::fs::write(v.mount().join("f"), b"through gluster").unwrap();
    assert_eq!(
        std::fs::read(v.mount().join("f")).unwrap(),
        b"through gluster"
    );
    println!("glusterd={}", running_glusterd().unwrap());
}

#[test]
fn kit_glusterd_is_stopped_by_its_last_user_and_a_foreign_one_is_left_or_refused() {
    if let Some(pid) = running_glusterd() {
        panic!(
            "a glusterd runs already (pid {pid}, the kit's: {}): this test needs none at its \
             start, to see that the kit stops the one it starts; stop it and run again",
            kit_glusterd() == Some(pid)
        );
    }

    // The kit starts its own, and its last user stops it on exit.
    let out = child();
    assert!(out.status.success(), "the child failed:\n{}", text(&out));
    let pid = used_pid(&out);
    assert!(
        !alive(pid) && running_glusterd().is_none(),
        "the glusterd the kit started ({pid}) still runs after its last user exited"
    );

    // The machine's own glusterd: used, and left running.
    let own = foreign_glusterd(&[]);
    let out = child();
    assert!(out.status.success(), "the child failed:\n{}", text(&out));
    assert_eq!(used_pid(&out), own);
    assert!(alive(own), "the kit stopped a glusterd it did not start");
    kill_and_wait(own);

    // One in another network namespace: refused at once, saying what to do.
    let other = foreign_glusterd(&["unshare", "--net"]);
    let out = child();
    kill_and_wait(other);
    let said = text(&out);
    assert!(
        !out.status.success(),
        "the child worked with a glusterd in another network namespace:\n{said}"
    );
    assert!(
        said.contains(&format!("glusterd {other} "))
            && said.contains("another network namespace")
            && said.contains("systemctl stop glusterd"),
        "the refusal does not say why and what to do:\n{said}"
    );
}
