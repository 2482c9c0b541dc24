//! The data layer: every request about a file's bytes and the daemons that store them,
//! sent to the owners of a file's chunks (and their copies) or to daemons as stores: reads
//! and writes split by chunk with the copies' settlement and hints, direct local I/O and
//! its leases, fsync, truncation and removal of chunks, allocation, stage-in/out and early
//! write-back, placement by locality, statfs, status, counters, scrub and shutdown.
//!
//! It is one of the two parts of the client that send requests (the other is `namespace`,
//! for names and the records they lead to); the `Client` façade and the modules beside these
//! two call into them and send nothing themselves (`scripts/check-client-layers.py`). `Data`
//! is a view of the client: its methods reach the client's state (`self.0`) and, through
//! `Deref`, the façade's own methods.

mod advice;
pub use advice::Advice;
pub(crate) use advice::{willneed_turns, RA_ALWAYS, RA_DETECT, RA_NEVER};
mod chunks;
pub(crate) use chunks::now_or_in_background;
mod daemons;
pub(crate) mod direct;
pub(crate) mod integrity;
pub(crate) mod layout;
pub(crate) mod locality;
mod read;
mod replica;
mod space;
mod streams;
pub(crate) use streams::Stream;
mod sync;
pub(crate) mod tier;
mod write;

use crate::{Client, Inner};
use std::sync::Arc;

/// The data layer of a client: the client's state and the client itself.
pub(crate) struct Data<'a>(pub(crate) &'a Arc<Inner>, &'a Client);

impl Data<'_> {
    /// The client itself, to be kept (by a task in the background).
    pub(crate) fn client(&self) -> Client {
        self.1.clone()
    }
}

impl std::ops::Deref for Data<'_> {
    type Target = Client;

    fn deref(&self) -> &Client {
        self.1
    }
}

impl Client {
    /// The data layer of this client.
    pub(crate) fn data(&self) -> Data<'_> {
        Data(&self.0, self)
    }
}
