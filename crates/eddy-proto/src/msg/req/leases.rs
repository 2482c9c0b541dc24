//! The requests of directory leases (decision 0075): the grant, the registration at every
//! daemon, the recall, the holder's long poll, the return and the holder's batches.

use super::super::records::*;
use serde::{Deserialize, Serialize};
/// Most operations one `Batch` carries; a longer batch is refused as a whole (EINVAL).
pub const LEASE_BATCH_MAX: usize = 1024;

/// Most names a daemon lists in its answer to a `LeaseNote`; past it the answer says the
/// list is not complete and the holder keeps no knowledge of absent names.
pub const LEASE_NAMES_MAX: usize = 4096;

/// Asks the owner of `dir`'s record for an exclusive lease on the names in `dir`, held by
/// the connection it came on (it goes when that connection closes). Replies `LeaseGrant`:
/// granted with the lease's id, or refused (another client holds it, the directory cools
/// down after a recall, or it is under a linked prefix).
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub dir: String,
}

/// The holder of `lease` on `dir` tells a daemon of it: the daemon installs it in its
/// registry (held by the connection it came on: that connection's requests are the
/// holder's) and replies the names it holds in `dir` (`LeaseNames`, at most
/// `LEASE_NAMES_MAX`). A lease the daemon knows to be over is ESTALE.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseNote {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub dir: String,
    pub lease: LeaseRef,
}

/// A daemon asks the owner of `dir`'s record (the lease's granter) to take lease `id` back
/// before it serves another client's request in `dir`: answered once the holder gave it
/// back, or once it was revoked after `lease_recall_timeout_ms`, or at once when the lease
/// is no longer held. Replies `()`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recall {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub dir: String,
    pub id: u64,
}

/// The holder's long poll at a granter: answered with the ids of the leases held by this
/// connection that are recalled, at once if some are, else as soon as one is, else empty
/// after `wait_ms` (capped at half the RPC deadline): the holder asks again. Replies
/// `Vec<u64>`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseWait {
    pub wait_ms: u32,
}

/// The holder gives `lease` on `dir` back, to every daemon: each drops it from its
/// registry, the granter ends it and answers the recalls waiting for it. At the granter, a
/// lease it revoked is ESTALE (the holder's unsent operations there fail with EIO).
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseReturn {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub dir: String,
    pub lease: LeaseRef,
}

/// Operations of a lease's holder on names in `dir` that this daemon owns, applied in
/// order as the single requests would be (copies to the other owners, the room check).
/// Refused as a whole with ESTALE when the lease is not registered here (revoked, or never
/// noted), EINVAL past `LEASE_BATCH_MAX` operations or for an operation outside `dir`.
/// Replies one outcome per operation (`Vec<BatchOutcome>`).
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    #[cfg_attr(feature = "arbitrary", arbitrary(with = crate::fuzzing::path))]
    pub dir: String,
    pub lease: LeaseRef,
    pub ops: Vec<BatchOp>,
}
