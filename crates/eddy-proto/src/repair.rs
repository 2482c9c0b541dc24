//! Repair (decision 0021): a daemon holding hints pushes the items another owner missed,
//! and verifies each push by comparing the digest the target replies with (what it holds
//! after the push) with the digest of its own copy, read after the reply. Equal: the
//! copies agree and the hint goes. Different: a change reached one copy only meanwhile,
//! and the item is pushed again next round.

use serde::{Deserialize, Serialize};

/// What a daemon holds of one item: `None` when it holds nothing (an absent key or chunk),
/// else the length of the item's bytes and their CRC32C.
pub type Digest = Option<(u64, u32)>;

/// The digest of an item's bytes (`None`: the item is absent).
pub fn digest(bytes: Option<&[u8]>) -> Digest {
    bytes.map(|b| (b.len() as u64, crate::checksum::crc(b)))
}

/// How one pushed item compares with the pusher's copy, read after the target replied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// Both copies hold the same: the hint is done.
    Same,
    /// The copies differ (a change reached one of them after the push was read): push again.
    Differs,
}

/// Compares the target's digest with the pusher's.
pub fn verdict(target: Digest, mine: Digest) -> Verdict {
    if target == mine {
        Verdict::Same
    } else {
        Verdict::Differs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_tell_content_length_and_absence_apart() {
        let a = digest(Some(b"abc"));
        assert_eq!(verdict(a, digest(Some(b"abc"))), Verdict::Same);
        assert_eq!(verdict(a, digest(Some(b"abd"))), Verdict::Differs);
        // Same bytes followed by zeros: the length tells them apart.
        assert_eq!(verdict(a, digest(Some(b"abc\0"))), Verdict::Differs);
        assert_eq!(verdict(None, digest(None)), Verdict::Same);
        assert_eq!(verdict(None, digest(Some(b""))), Verdict::Differs);
        assert_eq!(verdict(digest(Some(b"")), digest(Some(b""))), Verdict::Same);
    }
}
