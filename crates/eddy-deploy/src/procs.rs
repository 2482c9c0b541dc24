//! Processes: finding the daemon binary, spawning detached children with their output in a
//! log file, and stopping recorded processes without ever signalling a reused pid.

use crate::state::RecordedProcess;
use anyhow::{Context, Result};
use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How often waits poll for a file, a port or a process.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Environment variable naming the daemon binary explicitly.
pub const DAEMON_BIN_ENV: &str = "EDDY_DAEMON_BIN";

/// The `eddyd` binary: $EDDY_DAEMON_BIN, else next to this executable, else `eddyd` on PATH.
pub fn daemon_binary() -> PathBuf {
    if let Some(path) = std::env::var_os(DAEMON_BIN_ENV) {
        return PathBuf::from(path);
    }
    let sibling = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("eddyd")));
    match sibling {
        // privileged-path: the eddyd beside this eddy program (root's installation)
        Some(path) if path.is_file() => path,
        _ => PathBuf::from("eddyd"),
    }
}

/// Spawns `program args` detached (`detached_command`), stdin from /dev/null and
/// stdout/stderr into `log` (truncated; readable by its owner only: a log names paths of
/// the job).
pub fn spawn_detached(program: &Path, args: &[OsString], log: &Path) -> Result<Child> {
    // privileged-path: a log in the caller's state directory (root's 0700/0711)
    let out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(log)
        .and_then(|f| {
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            Ok(f)
        })
        .with_context(|| format!("cannot create log file {}", log.display()))?;
    let err = out
        .try_clone()
        .with_context(|| format!("cannot reopen log file {}", log.display()))?;
    let mut cmd = detached_command(program, args);
    cmd.stdout(out).stderr(err);
    spawn(cmd, program)
}

/// `program args` to be run detached: in a process group of its own from its first
/// instruction, so that the signals of the caller's terminal (^C, ^Z, a hang-up: the
/// kernel sends them to the terminal's foreground group and its session leader) and a
/// signal to the caller's group (Slurm ending a script) do not reach it, and `stop`
/// signals its group; holding none of the caller's descriptors above stderr
/// (`cloexec_inherited`, done here in the caller); stdin from /dev/null (stdout and stderr
/// too, unless the caller sets them).
///
/// Nothing of it runs between fork and exec, so std spawns it with `posix_spawn` (a vfork:
/// this large process's page tables are not copied), which a `pre_exec` would rule out:
/// `eddy start --local 1024` launches a thousand daemons (decision 0076). A caller that
/// adds a `pre_exec` of its own (dropping privileges) gets a fork again.
pub fn detached_command(program: &Path, args: &[OsString]) -> Command {
    cloexec_inherited();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    cmd
}

/// Spawns `cmd`, saying which program could not be run.
pub fn spawn(mut cmd: Command, program: &Path) -> Result<Child> {
    cmd.spawn().with_context(|| {
        format!(
            "cannot run {}: check that it is installed and executable",
            program.display()
        )
    })
}

/// Marks every descriptor of this process above stderr close-on-exec, so that a detached
/// process holds none this one inherited: a pipe of the caller's caller (Slurm's
/// slurmscriptd reads the result of burst_buffer.lua until every writer is gone) must not
/// stay open for the life of a daemon or a mount. Done in this process, before the spawn,
/// where it lasts: what this process opens itself is close-on-exec already (std opens
/// everything so), nothing it runs is meant to inherit a descriptor but its stdio (which
/// the spawn puts in place), and the one descriptor this code base hands over on purpose
/// (fuser's to fusermount) is made inheritable in the child, after its fork.
fn cloexec_inherited() {
    // SAFETY: a plain syscall on descriptor numbers; no memory is touched.
    let done = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    } == 0;
    if done {
        return;
    }
    // Kernels before 5.11: each open descriptor, as /proc lists them.
    // privileged-path: the kernel's /proc
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: plain syscalls on a descriptor number; no memory is touched.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// Records a just-spawned child for `eddy stop`.
pub fn record(label: String, child: &Child) -> RecordedProcess {
    let pid = child.id();
    let start_time = proc_stat(pid).map(|s| s.start_time).unwrap_or(0);
    RecordedProcess {
        label,
        pid,
        start_time,
    }
}

/// The last `lines` lines of a log file, indented, for error messages.
pub fn log_tail(path: &Path, lines: usize) -> String {
    // privileged-path: a log in the caller's state directory (root's 0700/0711)
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let tail = &all[all.len().saturating_sub(lines)..];
    if tail.is_empty() {
        return format!("(log {} is empty)", path.display());
    }
    let body: Vec<String> = tail.iter().map(|l| format!("    {l}")).collect();
    format!("last lines of {}:\n{}", path.display(), body.join("\n"))
}

struct ProcStat {
    state: char,
    start_time: u64,
}

/// State and start time from /proc/<pid>/stat (None if the process is gone).
fn proc_stat(pid: u32) -> Option<ProcStat> {
    // privileged-path: the kernel's /proc
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after it follow the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let start_time = fields.get(19)?.parse().ok()?;
    Some(ProcStat { state, start_time })
}

/// Whether the recorded process still runs (same pid and start time, not a zombie).
pub fn is_running(p: &RecordedProcess) -> bool {
    match proc_stat(p.pid) {
        Some(s) => s.start_time == p.start_time && s.state != 'Z' && s.state != 'X',
        None => false,
    }
}

/// Ends a helper whose pid and start time a record keeps (`label` names it), if both are
/// recorded and it still runs: SIGTERM, then SIGKILL past `grace`.
pub fn end_recorded(label: &str, pid: Option<u32>, start_time: Option<u64>, grace: Duration) {
    let (Some(pid), Some(start_time)) = (pid, start_time) else {
        return;
    };
    let p = RecordedProcess {
        label: label.into(),
        pid,
        start_time,
    };
    if is_running(&p) {
        terminate(&[p], grace);
    }
}

/// Sends `signal` to the recorded process's group (it leads its own), if it runs.
/// The process is held by a pidfd before its start time is checked, so the signal reaches
/// the recorded process or nothing: its own signal goes through the pidfd, and its group's
/// too where the kernel can (Linux 6.9's `PIDFD_SIGNAL_PROCESS_GROUP`); on older kernels
/// the group is signalled by number right after the check, as before.
fn signal(p: &RecordedProcess, signal: i32) {
    let Ok(pid) = i32::try_from(p.pid) else {
        return;
    };
    // SAFETY: a plain syscall; the descriptor it returns is owned below.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let Ok(raw) = i32::try_from(raw) else {
        return;
    };
    if raw < 0 {
        // Gone (ESRCH), or a kernel before 5.3: the check and the signal by number.
        if is_running(p) {
            // SAFETY: plain syscalls on a pid just checked to be the process we recorded.
            unsafe {
                if libc::kill(-pid, signal) != 0 {
                    libc::kill(pid, signal);
                }
            }
        }
        return;
    }
    // SAFETY: pidfd_open returned a new descriptor that nothing else owns.
    let pidfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
    // Checked after the pidfd is held: a reused pid now fails the start time, and the pidfd
    // keeps naming the process checked.
    if !is_running(p) {
        return;
    }
    let fd = pidfd.as_raw_fd();
    // SAFETY: plain syscalls on a pidfd we own; no memory is passed (info is null).
    unsafe {
        let null = std::ptr::null::<libc::siginfo_t>();
        let group = libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd,
            signal,
            null,
            PIDFD_SIGNAL_PROCESS_GROUP,
        );
        if group != 0 {
            libc::syscall(libc::SYS_pidfd_send_signal, fd, signal, null, 0u32);
            // A process that leads a group of its own (as the processes recorded here do)
            // on a kernel without the flag: its group by number.
            if libc::getpgid(pid) == pid {
                libc::kill(-pid, signal);
            }
        }
    }
}

/// `PIDFD_SIGNAL_PROCESS_GROUP` (linux/pidfd.h, Linux 6.9): signal the pidfd's process group.
const PIDFD_SIGNAL_PROCESS_GROUP: u32 = 1 << 2;

/// Waits until none of `procs` runs or `bound` passes; returns those still running.
/// Each process is held by a pidfd, which becomes readable when it exits, and the wait
/// sleeps in `poll(2)` on all of them: an exit is seen when it happens, and only the
/// processes that exited are looked at again. A process no pidfd holds (a kernel before
/// 5.3, no descriptor left) is looked at every `POLL_INTERVAL`, as before. Whatever the
/// pidfd says, a process counts as gone only once `is_running` says so.
pub fn wait_gone(procs: &[RecordedProcess], bound: Duration) -> Vec<RecordedProcess> {
    let deadline = Instant::now() + bound;
    let mut waiting: Vec<(RecordedProcess, Option<std::os::fd::OwnedFd>)> = procs
        .iter()
        .filter_map(|p| {
            // Held before the check: a pid reused after it is never the one waited on.
            let fd = pidfd(p.pid);
            is_running(p).then(|| (p.clone(), fd))
        })
        .collect();
    loop {
        let now = Instant::now();
        if waiting.is_empty() || now >= deadline {
            return waiting.into_iter().map(|(p, _)| p).collect();
        }
        let polled = waiting.iter().any(|(_, fd)| fd.is_none());
        let step = if polled { POLL_INTERVAL } else { MAX_POLL_WAIT };
        let timeout = (deadline - now).min(step);
        let mut fds: Vec<libc::pollfd> = waiting
            .iter()
            .filter_map(|(_, fd)| fd.as_ref())
            .map(|fd| libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = i32::try_from(timeout.as_millis().max(1)).unwrap_or(i32::MAX);
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd for the length of the call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        let timed_out = ready == 0;
        let mut flagged = fds.iter().map(|f| f.revents != 0);
        let mut next = Vec::with_capacity(waiting.len());
        for (p, fd) in waiting {
            // Looked at again: the processes whose pidfd is readable, those without one,
            // and all of them when the poll timed out or failed.
            let look = match fd {
                Some(_) => flagged.next().unwrap_or(true) || ready <= 0,
                None => true,
            };
            if !look || is_running(&p) {
                // Readable yet running (not expected): polled from now on, never spun on.
                let fd = if look && !timed_out && ready > 0 {
                    None
                } else {
                    fd
                };
                next.push((p, fd));
            }
        }
        waiting = next;
    }
}

/// The longest one `poll(2)` of `wait_gone` sleeps when every process is held by a pidfd:
/// then every process is looked at again.
const MAX_POLL_WAIT: Duration = Duration::from_secs(1);

/// A pidfd for `pid` (None if it is gone or pidfds cannot be had here).
fn pidfd(pid: u32) -> Option<std::os::fd::OwnedFd> {
    let pid = i32::try_from(pid).ok()?;
    // SAFETY: a plain syscall; the descriptor it returns is owned below.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let raw = i32::try_from(raw).ok().filter(|r| *r >= 0)?;
    // SAFETY: pidfd_open returned a new descriptor that nothing else owns.
    Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) })
}

/// Stops recorded processes: waits `grace` for them to exit by themselves, then SIGTERM and
/// another `grace`, then SIGKILL. Returns the processes that had to be signalled.
pub fn stop_processes(procs: &[RecordedProcess], grace: Duration) -> Vec<String> {
    terminate(&wait_gone(procs, grace), grace)
}

/// SIGTERM, then SIGKILL for what is still running after `grace`; names those signalled.
pub fn terminate(procs: &[RecordedProcess], grace: Duration) -> Vec<String> {
    procs.iter().for_each(|p| signal(p, libc::SIGTERM));
    let stubborn = wait_gone(procs, grace);
    stubborn.iter().for_each(|p| signal(p, libc::SIGKILL));
    let _ = wait_gone(&stubborn, grace);
    procs
        .iter()
        .map(|p| format!("{} (pid {})", p.label, p.pid))
        .collect()
}

/// The processes of this host whose command line has `--root ROOT` (daemons serving it),
/// run by the caller or by ROOT's owner (the daemons' user).
pub fn serving_root(root: &Path) -> Vec<RecordedProcess> {
    let want = root.as_os_str().as_encoded_bytes();
    with_args(
        &format!("daemon of {}", root.display()),
        &owners_of(root),
        |args| args.windows(2).any(|w| w[0] == b"--root" && w[1] == want),
    )
}

/// Whose processes may act for a directory: the caller (its effective uid) and the
/// directory's owner, if it is there (never following a link at its name).
pub fn owners_of(dir: &Path) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail and touches no memory.
    let mut uids = vec![unsafe { libc::geteuid() }];
    // privileged-path: lstat of the directory, never following a link; only its owner is read
    if let Ok(meta) = std::fs::symlink_metadata(dir) {
        if meta.is_dir() && meta.uid() != uids[0] {
            uids.push(meta.uid());
        }
    }
    uids
}

/// The processes of this host whose arguments (after the program) satisfy `pred`, whose
/// real and effective uids are both among `owners`, this one excepted, each labelled
/// `label`. A process of anyone else is never listed, whatever its command line says: a
/// command line is whatever its process wants it to be.
pub fn with_args(
    label: &str,
    owners: &[u32],
    pred: impl Fn(&[&[u8]]) -> bool,
) -> Vec<RecordedProcess> {
    // privileged-path: the kernel's /proc
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != std::process::id())
        .filter(|&pid| {
            proc_uids(pid).is_some_and(|(r, e)| owners.contains(&r) && owners.contains(&e))
        })
        .filter(|pid| {
            // privileged-path: the kernel's /proc
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).skip(1).collect();
            pred(&args)
        })
        .filter_map(|pid| {
            let stat = proc_stat(pid)?;
            Some(RecordedProcess {
                label: label.to_string(),
                pid,
                start_time: stat.start_time,
            })
        })
        .collect()
}

/// The real and effective uids of a process, from /proc/<pid>/status (None if it is gone).
fn proc_uids(pid: u32) -> Option<(u32, u32)> {
    // privileged-path: the kernel's /proc
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let mut ids = line.split_whitespace().map(|f| f.parse::<u32>().ok());
    Some((ids.next()??, ids.next()??))
}

/// Kills children spawned by a start that failed, and reaps them.
pub fn kill_children(children: &mut [Child]) {
    for child in children.iter_mut() {
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: the child is ours and not yet reaped, so its pid cannot be reused.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_ends_with_the_exits_and_returns_what_still_runs() {
        let dir = tempfile::tempdir().unwrap();
        let short = spawn_detached(Path::new("sleep"), &["0.3".into()], &dir.path().join("a"));
        let long = spawn_detached(Path::new("sleep"), &["30".into()], &dir.path().join("b"));
        let (mut short, mut long) = (short.unwrap(), long.unwrap());
        let recs = [record("short".into(), &short), record("long".into(), &long)];
        let stale = RecordedProcess {
            start_time: recs[1].start_time + 1,
            ..recs[1].clone()
        };
        // The stale record is never waited on; the long sleep is still running at the bound.
        let left = wait_gone(
            &[recs[0].clone(), recs[1].clone(), stale],
            Duration::from_secs(2),
        );
        assert_eq!(left, vec![recs[1].clone()]);
        assert!(!is_running(&recs[0]), "the short sleep has exited");
        short.wait().unwrap();
        let reaper = std::thread::spawn(move || long.wait().unwrap());
        signal(&recs[1], libc::SIGKILL);
        assert!(wait_gone(&recs, Duration::from_secs(60)).is_empty());
        reaper.join().unwrap();
    }

    #[test]
    fn detached_child_is_recorded_and_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("sleep.log");
        let mut child = spawn_detached(Path::new("sleep"), &["30".into()], &log).unwrap();
        let rec = record("sleep".into(), &child);
        assert!(is_running(&rec));
        let stale = RecordedProcess {
            start_time: rec.start_time + 1,
            ..rec.clone()
        };
        assert!(
            !is_running(&stale),
            "a different start time is another process"
        );
        let reaper = std::thread::spawn(move || child.wait().unwrap());
        let killed = stop_processes(std::slice::from_ref(&rec), Duration::from_millis(200));
        assert_eq!(killed.len(), 1);
        reaper.join().unwrap();
        assert!(!is_running(&rec));
    }

    #[test]
    fn a_stale_record_is_never_signalled_and_the_group_is() {
        use std::io::BufRead;
        // A session leader with a child of its own, in its group; the child's pid is its
        // first line.
        let mut cmd = detached_command(
            Path::new("sh"),
            &["-c".into(), "sleep 30 & echo $!; wait".into()],
        );
        cmd.stdout(Stdio::piped());
        let mut leader = spawn(cmd, Path::new("sh")).unwrap();
        let rec = record("sh".into(), &leader);
        let mut line = String::new();
        std::io::BufReader::new(leader.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let member = RecordedProcess {
            label: "sleep".into(),
            pid: line.trim().parse().unwrap(),
            start_time: 0,
        };
        let member = RecordedProcess {
            start_time: proc_stat(member.pid).unwrap().start_time,
            ..member
        };
        let stale = RecordedProcess {
            start_time: rec.start_time + 1,
            ..rec.clone()
        };
        signal(&stale, libc::SIGKILL);
        assert!(
            is_running(&rec),
            "a record of another start time was signalled"
        );
        assert!(is_running(&member));
        signal(&rec, libc::SIGKILL);
        leader.wait().unwrap();
        let left = wait_gone(std::slice::from_ref(&member), Duration::from_secs(20));
        assert!(
            left.is_empty(),
            "the leader's group outlived its signal: {left:?}"
        );
    }

    /// The fields of /proc/<pid>/stat after the command name, from the state on.
    fn stat_fields(pid: u32) -> Vec<String> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let rest = &text[text.rfind(')').unwrap() + 1..];
        rest.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn a_detached_child_leads_its_group_in_the_callers_session_and_inherits_no_descriptor() {
        use std::os::unix::fs::MetadataExt;
        // A pipe without close-on-exec, as one this process inherited from its caller.
        let mut fds = [0i32; 2];
        // SAFETY: pipe(2) writes two descriptors into `fds`, owned below.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: pipe returned these descriptors, nothing else owns them.
        let (r, w) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        let pipe_ino = std::fs::metadata(format!("/proc/self/fd/{}", r.as_raw_fd()))
            .unwrap()
            .ino();
        let dir = tempfile::tempdir().unwrap();
        let mut child =
            spawn_detached(Path::new("sleep"), &["30".into()], &dir.path().join("log")).unwrap();
        let pid = child.id();
        // Once it runs `sleep` (spawn returns after the exec), its descriptors are its own.
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        assert!(exe.to_string_lossy().contains("sleep"), "{exe:?}");
        let held: Vec<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::metadata(e.path()).ok())
            .map(|m| m.ino())
            .collect();
        let fields = stat_fields(pid);
        // SAFETY: getsid(0) reads this process's session and touches no memory.
        let my_session = unsafe { libc::getsid(0) };
        let _ = child.kill();
        let _ = child.wait();
        drop((r, w));
        assert!(!held.contains(&pipe_ino), "the caller's pipe was inherited");
        // Field 5 of stat is the process group, 6 the session (here from the state, 3).
        assert_eq!(
            fields[2],
            pid.to_string(),
            "not the leader of its own group"
        );
        // Nothing ran between its fork and its exec (no setsid): a posix_spawn.
        assert_eq!(
            fields[3],
            my_session.to_string(),
            "not in the caller's session"
        );
    }

    #[test]
    fn processes_of_other_uids_are_never_listed_whatever_they_say() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("sleep.log");
        let marker = format!("{}", 31_000 + std::process::id() % 1000);
        let mut child = spawn_detached(Path::new("sleep"), &[marker.clone().into()], &log).unwrap();
        // SAFETY: geteuid cannot fail and touches no memory.
        let me = unsafe { libc::geteuid() };
        let matches = |args: &[&[u8]]| args.first() == Some(&marker.as_bytes());
        // Looked for again while it is not found (for up to 10 s): on a loaded host a scan
        // of /proc can miss a process that runs.
        let mut mine = with_args("sleep", &[me], matches);
        for _ in 0..100 {
            if mine.len() == 1 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
            mine = with_args("sleep", &[me], matches);
        }
        let others = with_args("sleep", &[me.wrapping_add(1)], matches);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(mine.len(), 1, "{mine:?}");
        assert!(others.is_empty(), "{others:?}");
        assert_eq!(owners_of(dir.path()), vec![me]);
    }

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("x.log");
        std::fs::write(&log, "a\nb\nc\n").unwrap();
        let tail = log_tail(&log, 2);
        assert!(
            tail.contains("b") && tail.contains("c") && !tail.contains("    a"),
            "{tail}"
        );
    }
}
