//! A daemon's state without its sockets: the stores opened under a root exactly as `eddyd`
//! opens them, and requests executed exactly as one connection's are (locks and rename
//! intents held by that connection). For the fuzzer of request handling
//! (`crates/eddy-fuzz`) and for tools that drive a daemon's stores in process.

use crate::advisory::ConnId;
use crate::args::DaemonSettings;
use crate::state::State;
use crate::DaemonError;
use eddy_proto::{Request, Response};
use std::sync::Arc;

/// What a daemon's stores hold (`Embedded::inventory`).
#[derive(Debug, Default)]
pub struct Inventory {
    pub keys: std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    pub chunks: std::collections::BTreeMap<(eddy_proto::FileId, u64), eddy_proto::repair::Digest>,
}

/// A daemon's stores under its root, served as one connection.
pub struct Embedded {
    state: Arc<State>,
    conn: ConnId,
}

impl Embedded {
    /// Opens (or creates) the metadata store, the chunk store and the backend tier under
    /// `settings.root`, as `eddyd` does; no listener is bound, no ready file written.
    pub async fn open(settings: DaemonSettings) -> Result<Embedded, DaemonError> {
        crate::rootdir::prepare_own(&settings.root, &settings.secret)?;
        let state = crate::server::open_state(settings).await?;
        let conn = state.file_locks.open_conn();
        Ok(Embedded { state, conn })
    }

    /// Executes one request as the connection's task does (the reply is not encoded).
    pub async fn handle(&self, req: Request) -> Response {
        self.state.serve(self.conn, req).await
    }

    /// Ends the connection (its locks and rename intents are released, as when a client
    /// goes) and opens another one.
    pub fn reconnect(&mut self) {
        self.state.file_locks.close_conn(self.conn);
        self.state.meta.release_renames_of(self.conn);
        self.conn = self.state.file_locks.open_conn();
    }

    /// What the stores hold, read from them (blocking): every metadata key with its record,
    /// and every chunk (file id, index) with the digest of its content. For tools and
    /// tests that count the copies of a deployment (decision 0021).
    pub fn inventory(&self) -> Result<Inventory, eddy_proto::Errno> {
        let mut inv = Inventory::default();
        self.state.meta.each_key(|k, v| {
            inv.keys.insert(k.to_vec(), v.to_vec());
            true
        })?;
        for (id, k) in self.state.chunks.held() {
            let data = self.state.chunks.whole(id, k)?;
            inv.chunks
                .insert((id, k), eddy_proto::repair::digest(data.as_deref()));
        }
        Ok(inv)
    }

    /// Persists the metadata store (as a stopping daemon does).
    pub fn persist(&self) -> Result<(), eddy_proto::Errno> {
        self.state.meta.persist()
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        self.state.file_locks.close_conn(self.conn);
        self.state.meta.release_renames_of(self.conn);
    }
}
