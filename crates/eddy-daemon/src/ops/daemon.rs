//! The daemon itself: its status, a clean stop (with its counters, or without), and what it
//! counted (`Identify` names a connection's client, `Stats` returns the counters); the mounts
//! connected (`Mounted`); the membership (`Epoch` from each client, `Membership` from a
//! coordinating command, decision 0081).

use super::{Apply, Serve};
use crate::advisory::ConnId;
use crate::state::State;
use eddy_proto::stats::DaemonStats;
use eddy_proto::{req, DaemonStatus, Errno, MembershipState};
use std::sync::Arc;

impl Apply for req::Status {
    fn apply(self, st: &State) -> Result<DaemonStatus, Errno> {
        st.status()
    }
}

/// Replies, then the daemon stops cleanly.
impl Serve for req::Shutdown {
    async fn serve(self, st: &Arc<State>, _conn: ConnId) -> Result<(), Errno> {
        tracing::info!("shutdown requested by a client");
        st.shutdown.send_replace(true);
        Ok(())
    }
}

/// Replies with the counters as they are when the stop is asked for, then the daemon stops
/// cleanly, as after `Shutdown`: the counters and the stop in one request (`eddy stop`).
impl Serve for req::ShutdownWithStats {
    async fn serve(self, st: &Arc<State>, _conn: ConnId) -> Result<DaemonStats, Errno> {
        tracing::info!("shutdown requested by a client, with the counters");
        let stats = st.snapshot();
        st.shutdown.send_replace(true);
        Ok(stats)
    }
}

/// The connection's client says who it is: its requests are counted under it from now on.
impl Serve for req::Identify {
    async fn serve(self, st: &Arc<State>, _conn: ConnId) -> Result<(), Errno> {
        st.stats.identify(self.client);
        Ok(())
    }
}

/// The connection serves a FUSE mount (decision 0079): kept while it lives, for `Status`.
impl Serve for req::Mounted {
    async fn serve(self, st: &Arc<State>, conn: ConnId) -> Result<(), Errno> {
        st.mounts.note(conn, self)
    }
}

/// What this daemon counted: answered from memory.
impl Serve for req::Stats {
    async fn serve(self, st: &Arc<State>, _conn: ConnId) -> Result<DaemonStats, Errno> {
        Ok(st.snapshot())
    }
}

/// The connection's client places by this epoch (decision 0081).
impl Serve for req::Epoch {
    async fn serve(self, st: &Arc<State>, conn: ConnId) -> Result<(), Errno> {
        st.members.note_conn(conn, self.epoch);
        Ok(())
    }
}

/// A coordinating command's membership: adopted when newer (kept in the root first), else
/// only a question; a move's copy, cut-over and collect (`moving.rs`); replies the daemon's
/// state either way.
impl Serve for req::Membership {
    async fn serve(self, st: &Arc<State>, _conn: ConnId) -> Result<MembershipState, Errno> {
        st.membership(self).await
    }
}
