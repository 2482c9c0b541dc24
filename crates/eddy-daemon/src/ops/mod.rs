//! The request handlers, by family: each request of `eddy_proto::request_table!` has one,
//! a function of its typed request.
//!
//! - `Apply` (requests served `store` in the table): applied to the stores, synchronously,
//!   inline at memory speed or on the blocking pool when disk-bound (`Props::STORAGE`) or
//!   when a metadata request's path is under a linked prefix (`Props::BACKEND`); the
//!   metadata keys they change are copied to their other owners (decision 0020), and a
//!   request that reached a name of a shared file is answered with where its identity
//!   record is (`Reply::Shared`).
//! - `Serve` (served `conn`): asynchronous, with the connection the request came on (locks
//!   and rename intents are held by their connection; repair pushes wait on peers).
//!
//! `route` is generated from the table: a request without a handler does not compile;
//! so is `apply_on_identity`, what an `OnIdentity` runs (the table's `id` column).

mod daemon;
mod data;
mod direct;
mod intents;
mod leases;
mod links;
mod locks;
mod meta;
mod repair;
mod tier;
mod xattr;

use crate::advisory::ConnId;
use crate::state::State;
use eddy_proto::{Errno, Reply, ReplyType, Request, Response, Rpc};
use std::future::Future;
use std::sync::Arc;

/// A request applied to the stores.
pub(crate) trait Apply: Rpc {
    fn apply(self, st: &State) -> Result<Self::Reply, Errno>;
}

/// A request served asynchronously, with the connection it came on.
pub(crate) trait Serve: Rpc {
    fn serve(
        self,
        st: &Arc<State>,
        conn: ConnId,
    ) -> impl Future<Output = Result<Self::Reply, Errno>> + Send;
}

/// Builds `route` and `apply_request` from the request table.
macro_rules! define_route {
    ($( $name:ident $op:literal { $($field:ident)? } -> $reply:ty, $served:ident, $props:expr,
        id: $id:tt, bulk: [$($kind:ident($bf:ident)),*]; )*) => {
        /// Serves one request that came over connection `conn`, by its handler.
        pub(crate) async fn route(st: &Arc<State>, conn: ConnId, request: Request) -> Response {
            st.note_writer(conn, &request);
            match request {
                $( Request::$name(r) => define_route!(@$served st, conn, r), )*
            }
        }

        /// Applies a request that the table lets reach a file's identity record (its `id`
        /// column, checked by `Request::on_identity` first) to the stores, by its handler.
        /// Such a request is served `store`: one served `conn` with an `id` does not compile.
        pub(crate) fn apply_on_identity(st: &State, request: Request) -> Result<Reply, Errno> {
            match request {
                $( Request::$name(r) => define_route!(@identity $served $id st r $name), )*
            }
        }
    };
    (@store $st:ident, $conn:ident, $r:ident) => {
        $st.run_store($r).await
    };
    (@conn $st:ident, $conn:ident, $r:ident) => {{
        $st.stats.started();
        Serve::serve($r, $st, $conn).await.map(ReplyType::into_reply)
    }};
    (@identity $served:ident - $st:ident $r:ident $name:ident) => {{
        let _ = $r;
        Err(Errno::einval(format!(
            "{} does not apply to a file's identity record",
            <eddy_proto::req::$name as Rpc>::OP.name()
        )))
    }};
    (@identity store $id:ident $st:ident $r:ident $name:ident) => {
        Apply::apply($r, $st).map(ReplyType::into_reply)
    };
    (@identity conn $id:ident $st:ident $r:ident $name:ident) => {
        compile_error!(concat!(
            stringify!($name),
            ": a request served `conn` cannot be sent on an identity record (id: -)"
        ))
    };
}

eddy_proto::request_table!(define_route);

impl State {
    /// Applies a request to the stores: inline when it runs at memory speed, else on the
    /// blocking pool, so that disk and network overlap; then sends the changed keys'
    /// state to their other owners, before the reply.
    async fn run_store<R: Apply>(self: &Arc<Self>, r: R) -> Response {
        let props = R::OP.props();
        let (resp, changed) = if props.storage() || (props.backend() && self.is_linked(r.path())) {
            self.blocking_any(move |st| st.apply_captured(r))
                .await
                .unwrap_or_else(|e| (Err(e), Vec::new()))
        } else {
            self.stats.started();
            self.apply_captured(r)
        };
        self.replicate(changed).await;
        resp
    }

    /// Applies a request, noting the metadata keys it changed when they have copies on
    /// other daemons (decision 0020).
    fn apply_captured<R: Apply>(&self, r: R) -> (Response, Vec<Vec<u8>>) {
        if !self.sends_changes() {
            return (self.apply_one(r), Vec::new());
        }
        crate::meta::changes::capture(|| self.apply_one(r))
    }

    /// Applies a request; one that reached a name of a shared file is answered with where
    /// its identity record is (`Reply::Shared`).
    pub(crate) fn apply_one<R: Apply>(&self, r: R) -> Response {
        match r.apply(self) {
            Err(e) if e.errno == crate::meta::ESHARED => self.meta.shared_reply(&e.msg),
            other => other.map(ReplyType::into_reply),
        }
    }

    /// A size publication tells the tier which client writes the file (its I/O mode, for
    /// the placement rules that ask for one: decision 0073).
    fn note_writer(&self, conn: ConnId, request: &Request) {
        match request {
            Request::GrowSize(r) => self.tier.note_writer(&r.path, conn),
            Request::ReserveAppend(r) => self.tier.note_writer(&r.path, conn),
            _ => {}
        }
    }

    /// Whether a metadata request's path is under a linked prefix (import or write-through
    /// may follow).
    fn is_linked(&self, path: Option<&str>) -> bool {
        let Some(path) = path else { return false };
        self.backend.is_active()
            && eddy_proto::path::normalize(path, self.meta.limits())
                .map(|p| self.backend.link_for(&p).is_some())
                .unwrap_or(false)
    }
}
