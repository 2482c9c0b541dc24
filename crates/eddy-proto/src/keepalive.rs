//! Noticing a peer that went away without a word (its node died, or its network was cut:
//! no FIN or RST ever comes), on both ends of a TCP connection.

use std::time::Duration;

/// Sets TCP keepalive and a user timeout on `stream`: probes start after a quarter of the
/// RPC deadline `rpc_timeout` of silence, two more follow an eighth apart, and the kernel
/// gives the connection up when the peer has acknowledged nothing (requests or probes) for
/// `give_up` (on Linux the user timeout also governs keepalive failure). Whoever reads the
/// connection then sees it fail instead of waiting for TCP's retransmissions for minutes.
/// Returns the first option that could not be set.
pub fn detect_dead_peer(
    stream: &tokio::net::TcpStream,
    rpc_timeout: Duration,
    give_up: Duration,
) -> nix::Result<()> {
    use nix::sys::socket::{setsockopt, sockopt};
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let secs = |ms: u64| u32::try_from(ms.div_ceil(1000).max(1)).unwrap_or(u32::MAX);
    let rpc = ms(rpc_timeout);
    // Each is tried even if one before failed: the others still help.
    let results = [
        setsockopt(stream, sockopt::KeepAlive, &true),
        setsockopt(stream, sockopt::TcpKeepIdle, &secs(rpc / 4)),
        setsockopt(stream, sockopt::TcpKeepInterval, &secs(rpc / 8)),
        setsockopt(stream, sockopt::TcpKeepCount, &2),
        setsockopt(
            stream,
            sockopt::TcpUserTimeout,
            &u32::try_from(ms(give_up)).unwrap_or(u32::MAX),
        ),
    ];
    results.into_iter().find(Result::is_err).unwrap_or(Ok(()))
}
