//! The daemon itself: its status, and a clean stop.

use super::{Apply, Serve};
use crate::advisory::ConnId;
use crate::handler::State;
use eddy_proto::{req, DaemonStatus, Errno};
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
