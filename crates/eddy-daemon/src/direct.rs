//! Direct local I/O, the daemon's side (decision 0048): the leases it grants to clients of
//! its host, the one-use tokens those redeem for descriptors, and the descriptor socket
//! (`eddyd.fd` in the private root, served with or without a Unix socket for requests) that
//! hands them over with SCM_RIGHTS.
//!
//! A lease is granted by `DirectOpen` on an authenticated connection and held by it: it
//! ends with its last report (`DirectCommit { release }`) or with the connection, and a
//! write lease left that way has its file adopted (`ChunkStore::direct_close`). Leases are
//! memory only: a restarted daemon knows none, so a client's report under an old one is
//! ESTALE (and its file was adopted at the start). A token is 128 random bits, valid once
//! and for `TOKEN_TTL`, redeemed only by a process of the daemon's own user (or root),
//! checked by the socket's peer credentials.

use crate::advisory::ConnId;
use crate::state::State;
use eddy_proto::sync::lock;
use eddy_proto::{fdpass, Errno, FileId};
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a token may wait to be redeemed.
const TOKEN_TTL: Duration = Duration::from_secs(10);
/// How long a client may take to send its token.
const REDEEM_TIMEOUT: Duration = Duration::from_secs(2);

/// A lease: the file, whether it writes, the connection that holds it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lease {
    pub file_id: FileId,
    pub write: bool,
    pub conn: ConnId,
}

/// Descriptors waiting for their token.
struct Handout {
    files: Vec<File>,
    at: Instant,
}

/// The leases and tokens of this daemon.
#[derive(Default)]
pub(crate) struct Direct {
    leases: Mutex<HashMap<u64, Lease>>,
    tokens: Mutex<HashMap<u128, Handout>>,
}

impl Direct {
    /// Records a lease and the descriptors its token hands over; returns (lease, token).
    pub fn grant(&self, lease: Lease, files: Vec<File>) -> (u64, u128) {
        let (id, token) = (rand::random::<u64>(), rand::random::<u128>());
        lock(&self.leases).insert(id, lease);
        let mut tokens = lock(&self.tokens);
        tokens.retain(|_, h| h.at.elapsed() < TOKEN_TTL);
        tokens.insert(
            token,
            Handout {
                files,
                at: Instant::now(),
            },
        );
        (id, token)
    }

    /// The lease `id`, if it is `conn`'s and for `file_id`.
    pub fn lease(&self, id: u64, conn: ConnId, file_id: FileId) -> Result<Lease, Errno> {
        lock(&self.leases)
            .get(&id)
            .filter(|l| l.conn == conn && l.file_id == file_id)
            .copied()
            .ok_or_else(|| {
                Errno::new(
                    libc::ESTALE,
                    format!(
                        "no direct lease {id} of file {file_id:032x} on this connection (the \
                         daemon restarted or the connection was lost): write through the daemon"
                    ),
                )
            })
    }

    /// Ends lease `id`.
    pub fn end(&self, id: u64) -> Option<Lease> {
        lock(&self.leases).remove(&id)
    }

    /// Ends the leases of connection `conn`; returns them.
    fn end_conn(&self, conn: ConnId) -> Vec<Lease> {
        let mut leases = lock(&self.leases);
        let ids: Vec<u64> = leases
            .iter()
            .filter(|(_, l)| l.conn == conn)
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| leases.remove(&id))
            .collect()
    }

    /// The descriptors of `token`, once.
    fn redeem(&self, token: u128) -> Option<Vec<File>> {
        lock(&self.tokens)
            .remove(&token)
            .filter(|h| h.at.elapsed() < TOKEN_TTL)
            .map(|h| h.files)
    }
}

/// Connection `conn` closed: its leases end; a file it wrote directly without reporting
/// its last writes is adopted.
pub(crate) async fn closed(state: &Arc<State>, conn: ConnId) {
    let leases = state.direct.end_conn(conn);
    for l in leases.into_iter().filter(|l| l.write) {
        let adopted = state
            .blocking_any(move |st| st.chunks.direct_close(l.file_id, true))
            .await
            .and_then(|r| r);
        match adopted {
            Ok(()) => tracing::info!(
                file = format!("{:032x}", l.file_id),
                "a direct writer's connection closed: its file was adopted"
            ),
            Err(e) => tracing::warn!(
                file = format!("{:032x}", l.file_id),
                "cannot adopt the file of a direct writer whose connection closed (the next \
                 start does): {e}"
            ),
        }
    }
}

/// Binds the descriptor socket in the storage root `root` (a stale one replaced).
pub(crate) fn bind(root: &Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    let path = fdpass::socket_path(root);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = std::os::unix::net::UnixListener::bind(&path)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serves the descriptor socket on a thread of its own until the daemon stops: each
/// connection sends a token and gets its descriptors (none for a token unknown, used or
/// expired, or a peer of another user).
pub(crate) fn serve(state: Arc<State>, listener: std::os::unix::net::UnixListener) {
    let spawned = std::thread::Builder::new()
        .name("eddyd-fdpass".into())
        .spawn(move || {
            for stream in listener.incoming() {
                if *state.shutdown.borrow() {
                    return;
                }
                match stream {
                    Ok(s) => {
                        if let Err(e) = hand_over(&state, s) {
                            tracing::warn!("descriptor socket: {e}");
                        }
                    }
                    Err(e) => {
                        tracing::warn!("descriptor socket: accept failed: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the descriptor socket's thread (direct I/O off): {e}");
    }
}

fn hand_over(state: &State, mut s: UnixStream) -> Result<(), Errno> {
    let io = |e: std::io::Error| Errno::from_io(&e, "descriptor socket");
    s.set_read_timeout(Some(REDEEM_TIMEOUT)).map_err(io)?;
    s.set_write_timeout(Some(REDEEM_TIMEOUT)).map_err(io)?;
    let peer = nix::sys::socket::getsockopt(&s, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| Errno::new(e as i32, "peer credentials"))?;
    let me = nix::unistd::geteuid().as_raw();
    let token = fdpass::read_token(&mut s)?;
    if peer.uid() != me && peer.uid() != 0 {
        fdpass::hand_over(&s, &[])?;
        return Err(Errno::new(
            libc::EPERM,
            format!(
                "uid {} asked for descriptors of uid {me}'s daemon: refused",
                peer.uid()
            ),
        ));
    }
    match state.direct.redeem(token) {
        Some(files) => {
            let fds: Vec<_> = files.iter().map(|f| f.as_fd()).collect();
            fdpass::hand_over(&s, &fds)
        }
        None => {
            fdpass::hand_over(&s, &[])?;
            Err(Errno::new(
                libc::EPERM,
                "a token unknown, used or expired was refused",
            ))
        }
    }
}
