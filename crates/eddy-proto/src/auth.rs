//! The handshake, both ways. On connect the daemon sends `ServerHello` (protocol version, its
//! id, the chunk size it serves, a random nonce); the client answers `ClientHello` with its
//! version, a nonce of its own and its proof of the secret; the daemon answers `HelloResult`:
//! on success its own proof, bound to both nonces and to the id it announced. The client
//! checks that proof (a listener that does not know the secret is refused), the id and the
//! chunk size against the deployment it was given. No request is read before the client's
//! proof checks out, and the daemon proves nothing to a client that has not proven itself.
//! Handshake messages travel in ordinary frames with request id 0.
//!
//! Both hellos carry the wire protection (`wire::Mode`, decision 0022) their side uses on
//! this connection, and both proofs cover it: each side refuses a hello whose mode is not
//! its own (never a silent downgrade), and a mode changed on the way fails the proofs. Once
//! the daemon's proof checked out, both sides derive the connection's keys from the secret
//! and the two nonces (`wire::Keys`), and every later frame is protected.
//!
//! The version is the first field of both hellos and is read first (`Version`), so a peer of
//! another version is refused with EPROTO whatever the rest of its hello looks like; a
//! refusal (`Err`) is encoded the same way in every version.

use crate::wire::Mode;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Bytes of a nonce.
pub const NONCE_BYTES: usize = 32;

/// What a client proves: MAC over this label, the daemon's nonce, the client's, the mode.
const CLIENT_LABEL: &[u8] = b"eddy client proof v2";
/// What a daemon proves: MAC over this label, the client's nonce, the daemon's, its id, the
/// mode.
const DAEMON_LABEL: &[u8] = b"eddy daemon proof v2";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerHello {
    pub version: u32,
    pub daemon_id: u32,
    pub nonce: [u8; NONCE_BYTES],
    /// The chunk size the daemon stores data with.
    pub chunk_size: u64,
    /// Chosen at random when the daemon process started: a client reconnecting to the same
    /// instance knows that what it acknowledged before is still there (decision 0015).
    pub instance: u64,
    /// The protection the daemon requires on this connection.
    pub wire: Mode,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientHello {
    pub version: u32,
    pub proof: Vec<u8>,
    /// The client's nonce, which the daemon's proof covers.
    pub nonce: [u8; NONCE_BYTES],
    /// The protection the client uses on this connection.
    pub wire: Mode,
}

/// The first field of either hello: read alone, it is understood whatever version sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub version: u32,
}

/// The daemon's proof of the secret, sent once the client's proof checked out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonProof {
    pub proof: Vec<u8>,
}

/// The daemon's verdict: its proof, or the reason for refusing.
pub type HelloResult = Result<DaemonProof, crate::Errno>;

/// A fresh random nonce.
pub fn new_nonce() -> [u8; NONCE_BYTES] {
    rand::random()
}

fn mac(secret: &[u8], parts: &[&[u8]]) -> Option<HmacSha256> {
    // HMAC accepts keys of any length; `None` cannot happen.
    let mut mac = HmacSha256::new_from_slice(secret).ok()?;
    for p in parts {
        mac.update(p);
    }
    Some(mac)
}

/// The mark a daemon keeps in its storage root (`eddyd.root`): the HMAC of a fixed label
/// under the deployment's secret, so a root can be recognised as one of this deployment's
/// without the secret being stored there.
pub fn root_mark(secret: &[u8]) -> Vec<u8> {
    mac(secret, &[b"eddy daemon root v1"])
        .map(|m| m.finalize().into_bytes().to_vec())
        .unwrap_or_default()
}

/// The mode as the proofs cover it.
fn mode_bytes(wire: Mode) -> &'static [u8] {
    wire.name().as_bytes()
}

/// The client's proof of the secret for a pair of nonces and the mode it uses.
pub fn client_proof(
    secret: &[u8],
    daemon_nonce: &[u8],
    client_nonce: &[u8],
    wire: Mode,
) -> Vec<u8> {
    mac(
        secret,
        &[CLIENT_LABEL, daemon_nonce, client_nonce, mode_bytes(wire)],
    )
    .map(|m| m.finalize().into_bytes().to_vec())
    .unwrap_or_default()
}

/// Checks a client's proof in constant time.
pub fn verify_client(
    secret: &[u8],
    daemon_nonce: &[u8],
    client_nonce: &[u8],
    wire: Mode,
    proof: &[u8],
) -> bool {
    mac(
        secret,
        &[CLIENT_LABEL, daemon_nonce, client_nonce, mode_bytes(wire)],
    )
    .is_some_and(|m| m.verify_slice(proof).is_ok())
}

/// The daemon's proof of the secret, bound to both nonces, to the id it announced and to the
/// mode.
pub fn daemon_proof(
    secret: &[u8],
    client_nonce: &[u8],
    daemon_nonce: &[u8],
    id: u32,
    wire: Mode,
) -> Vec<u8> {
    mac(
        secret,
        &[
            DAEMON_LABEL,
            client_nonce,
            daemon_nonce,
            &id.to_le_bytes(),
            mode_bytes(wire),
        ],
    )
    .map(|m| m.finalize().into_bytes().to_vec())
    .unwrap_or_default()
}

/// Checks a daemon's proof in constant time.
pub fn verify_daemon(
    secret: &[u8],
    client_nonce: &[u8],
    daemon_nonce: &[u8],
    id: u32,
    wire: Mode,
    proof: &[u8],
) -> bool {
    mac(
        secret,
        &[
            DAEMON_LABEL,
            client_nonce,
            daemon_nonce,
            &id.to_le_bytes(),
            mode_bytes(wire),
        ],
    )
    .is_some_and(|m| m.verify_slice(proof).is_ok())
}

/// The client's answer to a `ServerHello`: its hello (with a fresh nonce) to send, using the
/// mode the daemon announced (tools and tests; `Client` checks the mode against its own
/// deployment first).
pub fn answer(secret: &[u8], hello: &ServerHello) -> ClientHello {
    let nonce = new_nonce();
    ClientHello {
        version: crate::PROTOCOL_VERSION,
        proof: client_proof(secret, &hello.nonce, &nonce, hello.wire),
        nonce,
        wire: hello.wire,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn right_secret_verifies_wrong_does_not() {
        let (d, c) = (new_nonce(), new_nonce());
        let p = client_proof(b"secret", &d, &c, Mode::Mac);
        assert!(verify_client(b"secret", &d, &c, Mode::Mac, &p));
        assert!(!verify_client(b"secreT", &d, &c, Mode::Mac, &p));
        assert!(!verify_client(b"secret", &new_nonce(), &c, Mode::Mac, &p));
        assert!(!verify_client(b"secret", &d, &new_nonce(), Mode::Mac, &p));
        assert!(!verify_client(b"secret", &d, &c, Mode::Mac, &p[..10]));
        // The proof covers the mode: a hello's mode changed on the way does not verify.
        assert!(!verify_client(b"secret", &d, &c, Mode::Clear, &p));
    }

    #[test]
    fn daemon_proof_is_bound_to_id_and_is_not_a_client_proof() {
        let (d, c) = (new_nonce(), new_nonce());
        let p = daemon_proof(b"secret", &c, &d, 3, Mode::Sealed);
        assert!(verify_daemon(b"secret", &c, &d, 3, Mode::Sealed, &p));
        assert!(!verify_daemon(b"secret", &c, &d, 4, Mode::Sealed, &p));
        assert!(!verify_daemon(b"other", &c, &d, 3, Mode::Sealed, &p));
        assert!(!verify_daemon(b"secret", &c, &d, 3, Mode::Mac, &p));
        // A proof one side made cannot be replayed as the other side's.
        let cp = client_proof(b"secret", &d, &c, Mode::Sealed);
        assert!(!verify_daemon(b"secret", &c, &d, 3, Mode::Sealed, &cp));
        assert!(!verify_client(b"secret", &d, &c, Mode::Sealed, &p));
    }

    #[test]
    fn the_version_reads_from_any_hello() {
        let h = ServerHello {
            version: 9,
            daemon_id: 1,
            nonce: new_nonce(),
            chunk_size: 4096,
            instance: 7,
            wire: Mode::Clear,
        };
        let bytes = crate::encode(&h).unwrap();
        let v: Version = crate::decode(&bytes, 4096).unwrap();
        assert_eq!(v.version, 9);
        // An old refusal (Result<(), Errno>) reads as a refusal today.
        let old: Result<(), crate::Errno> = Err(crate::Errno::new(libc::EPROTO, "old"));
        let now: HelloResult = crate::decode(&crate::encode(&old).unwrap(), 4096).unwrap();
        assert_eq!(now.unwrap_err().errno, libc::EPROTO);
    }
}
