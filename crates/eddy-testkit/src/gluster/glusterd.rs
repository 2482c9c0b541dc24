//! The glusterd the test volumes are served by: started by the first test process that finds
//! none (its pid in `KIT_PID_FILE`, so the kit knows its own), shared by the test processes
//! that run at the same time (each holds a shared lock on `users` while it lives), and stopped
//! by the last of them as it exits (an `atexit` handler): a finished `make test` leaves no
//! glusterd listening.
//!
//! A glusterd the kit did not start (the machine's own service, or one left by an older kit)
//! is used as it is and never stopped; every failure of a gluster command names it. One that
//! runs in another network namespace than the tests cannot serve their bricks (volume
//! operations fail with "Commit failed on localhost"): the kit refuses it at once and says
//! what to do.

use super::{
    find_in_path, gluster, is_alive, output_text, run, tail, FileLock, COMMAND_TIMEOUT,
    GLUSTERD_LOG, READY_TIMEOUT,
};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

use crate::eventually::poll_for;

/// Where the glusterd the kit starts writes its pid (the machine's service uses
/// /run/glusterd.pid).
pub const KIT_PID_FILE: &str = "/run/eddy-testkit-glusterd.pid";
/// How long the last user waits for the kit's glusterd to end before it kills it.
const STOP_BOUND: Duration = Duration::from_secs(10);

static SEEN: AtomicBool = AtomicBool::new(false);
/// This process's shared lock on the users file, held from its first volume to its exit.
static USERS: Mutex<Option<std::fs::File>> = Mutex::new(None);
static AT_EXIT: Once = Once::new();

/// Serialises starting and stopping the kit's glusterd between test processes.
fn start_lock_path() -> PathBuf {
    std::env::temp_dir().join("eddy-glusterd.lock")
}

/// Every test process using the kit's glusterd holds a shared lock on this file.
fn users_path() -> PathBuf {
    std::env::temp_dir().join("eddy-glusterd.users")
}

/// Makes sure one glusterd runs and answers, starting it if needed; the first call in a process
/// also removes volumes left behind by dead test processes, and registers this process as a
/// user of the glusterd (the last user stops the one the kit started).
pub(super) fn ensure_glusterd() {
    // Fast path: this process has already seen glusterd answer, and it still runs.
    if SEEN.load(Ordering::SeqCst) && running_glusterd().is_some() {
        return;
    }
    let _lock = FileLock::acquire(&start_lock_path());
    join_users();
    let mut last = None;
    let list = poll_for(READY_TIMEOUT, || {
        // (Checked on every round: a glusterd that was shutting down may be gone by now.)
        match running_glusterd() {
            None => start_glusterd(),
            Some(pid) if kit_glusterd() != Some(pid) => {
                if let Err(why) = same_namespaces(pid) {
                    panic!(
                        "gluster: {} runs in {why} than the tests: {} is not an address of its \
                         there, so every volume operation would fail (\"Commit failed on \
                         localhost\"). Stop it (`systemctl stop glusterd`, or `kill {pid}`) \
                         and run the tests again: the kit then starts its own glusterd and \
                         stops it when the tests end.",
                        describe(pid),
                        super::GLUSTER_HOST
                    );
                }
            }
            Some(_) => {}
        }
        let out = gluster(&["volume", "list"]);
        if out.status.success() {
            return Some(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        last = Some(out);
        None
    });
    let Some(list) = list else {
        panic!(
            "gluster: glusterd (pid {:?}) does not answer after {:?}: {}{}\nglusterd log:\n{}",
            running_glusterd(),
            READY_TIMEOUT,
            last.as_ref().map(output_text).unwrap_or_default(),
            foreign_note(),
            tail(Path::new(GLUSTERD_LOG), 30)
        );
    };
    if !SEEN.swap(true, Ordering::SeqCst) {
        super::collect_stale_volumes(&list);
    }
}

/// Takes this process's shared lock on the users file (once), and registers the handler that
/// stops the kit's glusterd at exit if this process is its last user.
fn join_users() {
    let mut users = eddy_proto::sync::lock(&USERS);
    if users.is_none() {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(users_path())
            .unwrap_or_else(|e| panic!("gluster: open {}: {e}", users_path().display()));
        // SAFETY: flock on a descriptor we own; a shared lock waits only for a stopping glusterd.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH) } != 0 {
            panic!(
                "gluster: flock {}: {}",
                users_path().display(),
                std::io::Error::last_os_error()
            );
        }
        *users = Some(f);
    }
    AT_EXIT.call_once(|| {
        // SAFETY: registers a plain function without arguments, which never unwinds.
        if unsafe { libc::atexit(stop_at_exit) } != 0 {
            eprintln!("gluster: cannot register the glusterd stop at exit");
        }
    });
}

/// At exit: this process leaves the users; if none is left and the glusterd running is the
/// one the kit started, stops it. Never panics (it runs inside exit(3)).
extern "C" fn stop_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Ok(mut users) = USERS.lock() {
            users.take();
        }
        let Ok(start) = open_lock_file(&start_lock_path()) else {
            return;
        };
        // SAFETY: flock on a descriptor we own; the start lock is held for seconds at most.
        if unsafe { libc::flock(start.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return;
        }
        let Ok(users) = open_lock_file(&users_path()) else {
            return;
        };
        // SAFETY: flock on a descriptor we own; non-blocking: another user keeps it running.
        if unsafe { libc::flock(users.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return;
        }
        if let Some(pid) = kit_glusterd() {
            stop(pid);
        }
        // Both locks go with their descriptors.
    });
}

fn open_lock_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
}

/// Stops glusterd `pid`: SIGTERM, then SIGKILL past `STOP_BOUND`.
fn stop(pid: i32) {
    // SAFETY: kill(2) has no memory preconditions; `pid` is the kit's glusterd.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    if poll_for(STOP_BOUND, || (!is_alive(pid)).then_some(())).is_none() {
        eprintln!("gluster: glusterd {pid} did not end within {STOP_BOUND:?}: killed");
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let _ = std::fs::remove_file(KIT_PID_FILE);
}

/// Starts glusterd: `glusterd -p KIT_PID_FILE --log-level WARNING`. It daemonizes; its parent
/// exits once the daemon runs (after about 2 s).
fn start_glusterd() {
    let out = run(
        Command::new(find_in_path("glusterd").expect("glusterd")).args([
            "-p",
            KIT_PID_FILE,
            "--log-level",
            "WARNING",
        ]),
        COMMAND_TIMEOUT,
    );
    if !out.status.success() {
        panic!(
            "gluster: starting glusterd failed: {}\nglusterd log:\n{}",
            output_text(&out),
            tail(Path::new(GLUSTERD_LOG), 30)
        );
    }
}

/// The pid of a live (not zombie) glusterd, if any.
pub fn running_glusterd() -> Option<i32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|&pid| is_glusterd(pid))
}

fn is_glusterd(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end() == "glusterd")
        .unwrap_or(false)
        && is_alive(pid)
}

/// The glusterd the kit started, if it runs.
pub fn kit_glusterd() -> Option<i32> {
    let pid = std::fs::read_to_string(KIT_PID_FILE)
        .ok()?
        .trim()
        .parse::<i32>()
        .ok()?;
    is_glusterd(pid).then_some(pid)
}

/// Ok if `pid` shares this process's network namespace (where the bricks' host name is an
/// address of this host), else why not.
fn same_namespaces(pid: i32) -> Result<(), String> {
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/net"));
    let ours = std::fs::read_link("/proc/self/ns/net");
    match (theirs, ours) {
        (Ok(a), Ok(b)) if a != b => Err("another network namespace".to_string()),
        _ => Ok(()),
    }
}

/// `glusterd <pid> (<its command line>), not started by the test kit`.
fn describe(pid: i32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    format!("glusterd {pid} (`{cmdline}`), not started by the test kit,")
}

/// When the glusterd answering is not the kit's: a sentence naming it, for failure messages.
pub(super) fn foreign_note() -> String {
    match running_glusterd() {
        Some(pid) if kit_glusterd() != Some(pid) => format!(
            "\nThe {} may be what fails: if it is the machine's own, stop it (`systemctl stop \
             glusterd`, or `kill {pid}`) and run the tests again; the kit then starts its own \
             and stops it when the tests end.",
            describe(pid)
        ),
        _ => String::new(),
    }
}
