//! `eddy prefetch` and a job's `#EDDY prefetch` (decision 0071): a fetch of files or trees of
//! linked prefixes into the cache that nobody waits for. It is the client's stage-in
//! without pins and with `prefetch_files` files at once (`Client::prefetch`), run by a
//! process of its own: `eddy prefetch --background --state STATE -- PATH...`, in a session
//! of its own, which writes its results to `STATE/prefetch.log`.
//!
//! A prefetch never outlives its deployment: `eddy stop` ends those of its state directory
//! on its host before anything else (found by their command line, `running`), and every
//! prefetch, in the background or waited for, gives up within `WATCH` once the deployment
//! file of its state directory is gone or names another deployment (a stop elsewhere, a
//! teardown that removed the job's directory).

use crate::stage::{self, Bar, Report};
use crate::state::{RecordedProcess, StateDir};
use anyhow::{Context, Result};
use eddy_client::FileResult;
use std::ffi::OsString;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// The file in the state directory that background prefetches append their results to.
pub const LOG: &str = "prefetch.log";
/// The flag of the background process (hidden from `--help`): `running` finds it by it.
pub const BACKGROUND: &str = "--background";
/// How often a prefetch looks whether its deployment is still there.
const WATCH: Duration = Duration::from_millis(500);
/// How long `eddy stop` gives a background prefetch to end after SIGTERM, before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// Fetches the files under the namespace paths `paths` into the cache of the deployment in
/// `state` (which must link a backend), without pins, `prefetch_files` files at once;
/// `progress` sees each file's result as it ends. Gives up when the deployment stops or is
/// replaced: the report's `error` then says so, with the files that ended before.
pub fn run(
    state: &StateDir,
    paths: &[String],
    progress: &(dyn Fn(&FileResult) + Sync),
) -> Result<Report> {
    let (rt, client) = stage::linked_client(state)?;
    let secret = client.deployment().secret.clone();
    let bar = Bar::new("prefetch");
    let seen = |r: &FileResult| {
        bar.part_ended(r);
        progress(r);
    };
    let start = Instant::now();
    let ended = rt.block_on(async {
        tokio::select! {
            files = client.prefetch(paths, &seen) => Ok(files),
            why = gone(state, &secret) => Err(why),
        }
    });
    bar.finish();
    Ok(match ended {
        Ok(files) => Report::new(files, start.elapsed(), None),
        Err(why) => Report::new(bar.seen(), start.elapsed(), Some(why)),
    })
}

/// Returns (why) once the deployment file of `state` is gone or holds another deployment.
async fn gone(state: &StateDir, secret: &str) -> String {
    loop {
        tokio::time::sleep(WATCH).await;
        match state.load_deployment() {
            Ok(dep) if dep.secret == secret => {}
            Ok(_) => return "the deployment was replaced by another one".to_string(),
            Err(_) => return "the deployment stopped".to_string(),
        }
    }
}

/// Whom a background prefetch runs as when it is not the caller (the burst buffer, as root,
/// starts a job's `#EDDY prefetch` as the job's user).
#[derive(Debug, Clone)]
pub struct AsUser {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the user's, from the group database).
    pub groups: Vec<libc::gid_t>,
}

/// Starts `exe prefetch --background --state STATE -- PATHS` in a session of its own, with
/// no descriptor of the caller's (stdio /dev/null: the process writes `STATE/prefetch.log`
/// itself), as `user` if given (its uid, gid and groups taken before it runs, in `/` with an
/// empty environment). The deployment must link a backend: that is checked here, so that
/// the caller hears it at once. Returns the child, which the caller need not wait for.
pub fn start_background(
    exe: &Path,
    state: &StateDir,
    paths: &[String],
    user: Option<AsUser>,
) -> Result<Child> {
    let mut args: Vec<OsString> = vec![
        "prefetch".into(),
        BACKGROUND.into(),
        "--state".into(),
        state.dir().into(),
        "--".into(),
    ];
    args.extend(paths.iter().map(OsString::from));
    let mut cmd = crate::procs::detached_command(exe, &args);
    match user {
        Some(u) => {
            cmd.env_clear().current_dir("/");
            // SAFETY: setgroups, setgid and setuid are async-signal-safe and touch only
            // `u.groups`, which the closure owns.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setgroups(u.groups.len(), u.groups.as_ptr()) != 0
                        || libc::setgid(u.gid) != 0
                        || libc::setuid(u.uid) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        None => {
            let dep = state.load_deployment()?;
            stage::require_links(&dep, state)?;
        }
    }
    crate::procs::spawn(cmd, exe)
}

/// In the background process: its standard output and error go to the end of
/// `STATE/prefetch.log` (made 0600; a link there is refused, never followed). Returns the
/// log's path.
pub fn log_to_state(state: &StateDir) -> Result<PathBuf> {
    let path = state.dir().join(LOG);
    // privileged-path: the caller's own state directory; a job's prefetch runs as the job's user (start_background)
    let log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .with_context(|| format!("cannot open the prefetch log {}", path.display()))?;
    for fd in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        // SAFETY: dup2 of a descriptor this function owns onto stdout or stderr.
        if unsafe { libc::dup2(log.as_raw_fd(), fd) } == -1 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("cannot write to {}", path.display()));
        }
    }
    Ok(path)
}

/// The background prefetches of the deployment in `state` running on this host: by their
/// command line (`prefetch --background ... --state STATE`), run by the caller or by the
/// state directory's owner; anyone else's process is never one, whatever it says.
pub fn running(state: &StateDir) -> Vec<RecordedProcess> {
    let dir = state.dir().as_os_str().as_encoded_bytes();
    let owners = crate::procs::owners_of(state.dir());
    crate::procs::with_args("background prefetch", &owners, |args| {
        args.first() == Some(&&b"prefetch"[..])
            && args.contains(&BACKGROUND.as_bytes())
            && args.windows(2).any(|w| w[0] == b"--state" && w[1] == dir)
    })
}

/// Ends the background prefetches of `state` on this host (SIGTERM, SIGKILL after
/// `STOP_GRACE`); names those it ended.
pub fn end_all(state: &StateDir) -> Vec<String> {
    let procs = running(state);
    if procs.is_empty() {
        return Vec::new();
    }
    crate::procs::terminate(&procs, STOP_GRACE)
}
