//! Directory rename intents (decision 0010), held by the connection they came on. Served on
//! the blocking pool: records and ends are fsync'd.

use super::Serve;
use crate::advisory::ConnId;
use crate::state::State;
use eddy_proto::{req, Errno, RenameIntent};
use std::sync::Arc;

impl State {
    /// Runs an intent request's store work on the blocking pool. A request that finished
    /// after its connection closed holds nothing: the close released the connection's
    /// intents before (or releases them after) this check.
    async fn intent<T: Send + 'static>(
        self: &Arc<Self>,
        conn: ConnId,
        f: impl FnOnce(&State) -> Result<T, Errno> + Send + 'static,
    ) -> Result<T, Errno> {
        let result = self.blocking_any(f).await.and_then(|r| r);
        if !self.file_locks.is_open(conn) {
            self.meta.release_renames_of(conn);
        }
        result
    }
}

impl Serve for req::BeginRename {
    async fn serve(self, st: &Arc<State>, conn: ConnId) -> Result<Vec<RenameIntent>, Errno> {
        st.intent(conn, move |st| {
            st.meta
                .begin_rename(conn, &self.from, &self.to, self.dir_id)
        })
        .await
    }
}

impl Serve for req::ClaimRenames {
    async fn serve(self, st: &Arc<State>, conn: ConnId) -> Result<Vec<RenameIntent>, Errno> {
        st.intent(conn, move |st| {
            st.meta
                .claim_renames(conn, self.from.as_deref(), self.limit)
        })
        .await
    }
}

impl Serve for req::EndRename {
    async fn serve(self, st: &Arc<State>, conn: ConnId) -> Result<(), Errno> {
        st.intent(conn, move |st| st.meta.end_rename(&self.from, &self.to))
            .await
    }
}

impl Serve for req::ReleaseRename {
    async fn serve(self, st: &Arc<State>, conn: ConnId) -> Result<(), Errno> {
        st.intent(conn, move |st| st.meta.release_rename(conn, &self.from))
            .await
    }
}
