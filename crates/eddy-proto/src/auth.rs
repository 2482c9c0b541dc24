//! The handshake. On connect the daemon sends `ServerHello` (protocol version, its id, a
//! random nonce); the client answers `ClientHello` with its version and
//! HMAC-SHA256(secret, nonce); the daemon answers `HelloResult`. A wrong version or proof
//! closes the connection: no request is read before the proof checks out. Handshake
//! messages travel in ordinary frames with request id 0.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Bytes of the daemon's nonce.
pub const NONCE_BYTES: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerHello {
    pub version: u32,
    pub daemon_id: u32,
    pub nonce: [u8; NONCE_BYTES],
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientHello {
    pub version: u32,
    pub proof: Vec<u8>,
}

/// The daemon's verdict: `Ok(())` or the reason for refusing.
pub type HelloResult = Result<(), crate::Errno>;

/// A fresh random nonce.
pub fn new_nonce() -> [u8; NONCE_BYTES] {
    rand::random()
}

/// The proof of the secret for a nonce.
pub fn prove(secret: &[u8], nonce: &[u8]) -> Vec<u8> {
    let mut mac = match HmacSha256::new_from_slice(secret) {
        Ok(m) => m,
        // HMAC accepts keys of any length; this branch cannot be taken.
        Err(_) => return Vec::new(),
    };
    mac.update(nonce);
    mac.finalize().into_bytes().to_vec()
}

/// Checks a proof in constant time.
pub fn verify(secret: &[u8], nonce: &[u8], proof: &[u8]) -> bool {
    match HmacSha256::new_from_slice(secret) {
        Ok(mut mac) => {
            mac.update(nonce);
            mac.verify_slice(proof).is_ok()
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn right_secret_verifies_wrong_does_not() {
        let nonce = new_nonce();
        let p = prove(b"secret", &nonce);
        assert!(verify(b"secret", &nonce, &p));
        assert!(!verify(b"secreT", &nonce, &p));
        assert!(!verify(b"secret", &new_nonce(), &p));
        assert!(!verify(b"secret", &nonce, &p[..10]));
    }
}
