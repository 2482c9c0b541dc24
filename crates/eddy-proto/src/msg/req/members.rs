//! The requests of a deployment's membership (decision 0081): a client's epoch on its
//! connection, and the membership a coordinating command makes a daemon adopt.

use serde::{Deserialize, Serialize};

/// Most daemons a `Membership` lists; a longer list is refused (EINVAL).
pub const MEMBERS_MAX: usize = 65_536;

/// The epoch of the membership this connection's client places by: sent by every client on
/// each connection, first after `Identify` (eddy-rpc's connection setup), and again on every
/// open connection when it reads a newer hosts file. A daemon at a newer epoch refuses the
/// connection's requests (those not served while rejoining) with `EREMCHG`; the client reads
/// the hosts file again. Replies `Ok`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Epoch {
    pub epoch: u64,
}

/// One daemon of a membership, as the hosts file lists it.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: u32,
    pub host: String,
    /// `ip:port` other nodes reach it at.
    pub addr: String,
    /// Its Unix socket on its host, if any.
    pub socket: Option<String>,
    /// Its storage root (on its host).
    pub root: String,
}

/// The membership at `epoch` (from `eddy grow` and `eddy shrink`): every daemon listed,
/// those being drained, and while items move the ids of the placement they move from. A
/// daemon adopts it when `epoch` is newer than its own (and keeps it in its root); an epoch not
/// newer is only a question. With `collect`, at the daemon's settled epoch (no `moving_from`),
/// the daemon deletes what it holds and does not own any more, locally (the coordinator sends
/// it once every daemon reported nothing left to copy). Refused with EINVAL when the list is empty, longer than
/// `MEMBERS_MAX`, names a daemon twice, or leaves this daemon out of it. Replies
/// `MembershipState`.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    pub epoch: u64,
    pub daemons: Vec<Member>,
    pub draining: Vec<u32>,
    pub moving_from: Option<Vec<u32>>,
    pub collect: bool,
}

impl Membership {
    /// A membership that only asks a daemon how it stands (epoch 0 is never newer).
    pub fn question() -> Membership {
        Membership {
            epoch: 0,
            daemons: Vec::new(),
            draining: Vec::new(),
            moving_from: None,
            collect: false,
        }
    }
}
