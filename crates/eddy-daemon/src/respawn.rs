//! A daemon restarting itself in place when its metadata store refuses every write
//! (decision 0060). fjall poisons its database when a journal write or a flush fails, here
//! because writers that ask no daemon (the kernel through passthrough, direct local I/O) took
//! the last blocks of the device the store shares; from then on every removal is EIO, so a
//! full deployment could not be emptied until someone restarted the daemon.
//!
//! Instead the daemon stops as on SIGTERM and `exec`s its own program with the same
//! arguments. Its TCP listener (and the metrics endpoint's) stay open across the `exec`:
//! their descriptors are handed to the new program with `--inherit-listeners`, so it serves
//! at the same addresses that the deployment file and the clients know, and connections made
//! meanwhile wait in the listeners' backlog. The new program opens the store again, which
//! recovers from its journal as after any restart; clients reconnect as after one. The last
//! part of the reserve (`Room::give_last`) is given to the store just before, so that it has
//! room to open and to journal the removals that make room.

use crate::state::State;
use crate::DaemonError;
use eddy_proto::Errno;
use std::ffi::{CString, OsString};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener as TokioListener;

/// The argument naming the inherited listeners (`tcp=FD[,metrics=FD]`).
pub const INHERIT_ARG: &str = "--inherit-listeners";

/// Descriptor numbers of listeners inherited from the program before the `exec`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Inherited {
    pub tcp: Option<RawFd>,
    pub metrics: Option<RawFd>,
}

impl Inherited {
    /// Parses `tcp=FD[,metrics=FD]`.
    pub fn parse(text: &str) -> Result<Inherited, String> {
        let mut got = Inherited::default();
        for part in text.split(',').filter(|p| !p.is_empty()) {
            let (name, fd) = part
                .split_once('=')
                .ok_or_else(|| format!("{INHERIT_ARG} {text:?}: {part:?} is not NAME=FD"))?;
            let fd: RawFd = fd
                .parse()
                .ok()
                .filter(|fd| *fd > 2)
                .ok_or_else(|| format!("{INHERIT_ARG} {text:?}: {fd:?} is not a descriptor"))?;
            let slot = match name {
                "tcp" => &mut got.tcp,
                "metrics" => &mut got.metrics,
                _ => {
                    return Err(format!(
                        "{INHERIT_ARG} {text:?}: no listener named {name:?}"
                    ))
                }
            };
            if slot.replace(fd).is_some() {
                return Err(format!("{INHERIT_ARG} {text:?}: {name} given twice"));
            }
        }
        Ok(got)
    }
}

/// The listener at descriptor `fd`, checked: a listening TCP socket bound to `want`'s
/// address (and to its port, unless that is 0). Taken over (closed with the listener).
pub fn take_listener(fd: RawFd, want: SocketAddr) -> std::io::Result<TcpListener> {
    use nix::sys::socket::{getsockname, getsockopt, sockopt, SockaddrStorage};
    let bad = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
    // Only a descriptor that is open here can be checked; a closed number is refused before
    // anything owns it.
    // SAFETY: F_GETFD only reads the descriptor's flags; on a number that is not open it
    // fails with EBADF and touches nothing.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        let e = std::io::Error::last_os_error();
        return Err(bad(format!("descriptor {fd}: {e}")));
    }
    // SAFETY: `fd` is open (checked above) and named by this program's own arguments as the
    // listener it left for this one; nothing else in the process owns it, and it is closed
    // only through the `OwnedFd` made here.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let listening = getsockopt(&owned, sockopt::AcceptConn)
        .map_err(|e| bad(format!("descriptor {fd} is not a socket: {e}")))?;
    if !listening {
        return Err(bad(format!("descriptor {fd} is not a listening socket")));
    }
    let bound: SocketAddr = getsockname::<SockaddrStorage>(owned.as_raw_fd())
        .ok()
        .and_then(|a| match (a.as_sockaddr_in(), a.as_sockaddr_in6()) {
            (Some(v4), _) => Some(SocketAddr::from((v4.ip(), v4.port()))),
            (_, Some(v6)) => Some(SocketAddr::from((v6.ip(), v6.port()))),
            _ => None,
        })
        .ok_or_else(|| bad(format!("descriptor {fd} is not a TCP socket")))?;
    if bound.ip() != want.ip() || (want.port() != 0 && bound.port() != want.port()) {
        return Err(bad(format!(
            "descriptor {fd} listens on {bound}, not on {want}"
        )));
    }
    let listener = TcpListener::from(owned);
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// What the daemon keeps to restart in place: copies of its listeners' descriptors
/// (close-on-exec until the restart).
#[derive(Default)]
pub struct Listeners {
    pub(crate) tcp: Option<OwnedFd>,
    pub(crate) metrics: Option<OwnedFd>,
}

impl Listeners {
    /// Copies of `tcp` and `metrics` (close-on-exec).
    pub(crate) fn keep(tcp: &impl AsFd, metrics: Option<&impl AsFd>) -> std::io::Result<Listeners> {
        Ok(Listeners {
            tcp: Some(tcp.as_fd().try_clone_to_owned()?),
            metrics: metrics
                .map(|m| m.as_fd().try_clone_to_owned())
                .transpose()?,
        })
    }
}

/// The daemon's TCP listener and metrics endpoint: inherited from the program before a
/// restart in place, else bound; with the copies kept for the next restart.
pub(crate) async fn listen(
    settings: &crate::args::DaemonSettings,
) -> Result<
    (
        TokioListener,
        Option<(TokioListener, SocketAddr)>,
        Listeners,
    ),
    DaemonError,
> {
    let inherited = settings.inherited;
    let listen_err = |source| DaemonError::Listen {
        addr: settings.listen.to_string(),
        source,
    };
    let tcp = match inherited.tcp {
        // Restarted in place: the listener the clients know, still open.
        Some(fd) => take_listener(fd, settings.listen)
            .and_then(TokioListener::from_std)
            .map_err(listen_err)?,
        None => TokioListener::bind(settings.listen)
            .await
            .map_err(listen_err)?,
    };
    // A daemon asked for metrics that cannot serve them does not start.
    let metrics = match (settings.metrics, inherited.metrics) {
        (Some(at), Some(fd)) => {
            let err = |source| DaemonError::Metrics {
                addr: at.to_string(),
                source,
            };
            let l = take_listener(fd, at)
                .and_then(TokioListener::from_std)
                .map_err(err)?;
            let bound = l.local_addr().map_err(err)?;
            Some((l, bound))
        }
        (Some(at), None) => Some(crate::metrics::bind(at).await?),
        (None, _) => None,
    };
    let kept = Listeners::keep(&tcp, metrics.as_ref().map(|(l, _)| l)).map_err(listen_err)?;
    Ok((tcp, metrics, kept))
}

/// Resolves when the metadata store refuses every write (one of its journal writes or
/// flushes failed) and the device has room for it to open again, with the last of the
/// reserve given to it: the daemon is then to restart in place.
pub(crate) async fn store_failed(state: &Arc<State>) {
    if !state.settings.restart_in_place {
        // Started by root with --user: the store stays refusing writes until the daemon is
        // restarted (`eddy replace`, or a new start), as the refusal's message says.
        return std::future::pending().await;
    }
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let st = Arc::clone(state);
        let due =
            tokio::task::spawn_blocking(move || st.meta.refuses_writes() && st.room.give_last())
                .await
                .unwrap_or(false);
        if due {
            tracing::error!(
                "daemon {}: its metadata store refuses every write since one failed (its \
                 device was full): restarting in place, on the same addresses",
                state.settings.id
            );
            return;
        }
    }
}

/// Replaces this process with its own program and arguments, handing it `listeners`
/// (a previous `--inherit-listeners` is replaced). Returns only when the `exec` failed.
pub fn exec_in_place(listeners: Listeners) -> Errno {
    let mut named = Vec::new();
    for (name, fd) in [("tcp", &listeners.tcp), ("metrics", &listeners.metrics)] {
        let Some(fd) = fd else { continue };
        // Kept open across the exec: the new program takes it.
        if let Err(e) = nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
        ) {
            return Errno::new(e as i32, format!("keeping the {name} listener open: {e}"));
        }
        named.push(format!("{name}={}", fd.as_raw_fd()));
    }
    let mut args: Vec<OsString> = Vec::new();
    let mut given = std::env::args_os();
    while let Some(a) = given.next() {
        if a == INHERIT_ARG {
            given.next();
            continue;
        }
        if a.to_str()
            .is_some_and(|s| s.starts_with(&format!("{INHERIT_ARG}=")))
        {
            continue;
        }
        args.push(a);
    }
    if args.is_empty() {
        return Errno::eio("restarting in place: the program's arguments are unknown");
    }
    args.push(INHERIT_ARG.into());
    args.push(named.join(",").into());
    let args: Result<Vec<CString>, _> = args
        .into_iter()
        .map(|a| CString::new(a.into_vec()))
        .collect();
    let Ok(args) = args else {
        return Errno::eio("restarting in place: an argument holds a NUL byte");
    };
    let err = match nix::unistd::execv(c"/proc/self/exe", &args) {
        Err(e) => e,
        Ok(never) => match never {},
    };
    // The descriptors stay this process's; they are closed when `listeners` is dropped.
    drop(listeners);
    Errno::new(err as i32, format!("restarting in place: exec: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inherited_listeners_are_parsed_and_bad_ones_refused() {
        assert_eq!(
            Inherited::parse("tcp=5,metrics=7"),
            Ok(Inherited {
                tcp: Some(5),
                metrics: Some(7)
            })
        );
        assert_eq!(Inherited::parse("tcp=9").map(|i| i.metrics), Ok(None));
        for bad in ["tcp", "tcp=x", "tcp=1", "tcp=-3", "udp=5", "tcp=5,tcp=6"] {
            assert!(Inherited::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn a_listener_is_taken_over_only_when_it_is_the_one_asked_for() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let fd = l.as_fd().try_clone_to_owned().unwrap();
        let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
        let wrong = SocketAddr::from(([127, 0, 0, 1], at.port().wrapping_add(1).max(1)));
        assert!(take_listener(raw, wrong).is_err());
        // The refused descriptor was closed with the check: take another copy.
        let raw = std::os::fd::IntoRawFd::into_raw_fd(l.as_fd().try_clone_to_owned().unwrap());
        let taken = take_listener(raw, SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        assert_eq!(taken.local_addr().unwrap(), at);
        // A file is no listener.
        let f = tempfile::tempfile().unwrap();
        let raw = std::os::fd::IntoRawFd::into_raw_fd(f);
        assert!(take_listener(raw, at).is_err());
        assert!(take_listener(999_999, at).is_err());
    }
}
