//! A client of the deployment a state directory names (or `EDDY_STATE`, as the preload
//! library finds it) on a runtime its callers drive (`driver`, decision 0052): what the
//! libraries for other languages (libeddy, the C library; the Python package) hold per
//! connection, so that they connect and run their calls the one way.

use crate::driver::Driver;
use crate::{Client, Errno};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

/// The variable naming the state directory when none is given.
pub const STATE_ENV: &str = "EDDY_STATE";

/// A connected client and the runtime its calls run on.
pub struct Session {
    driver: Arc<Driver>,
    client: Client,
}

/// The state directory: `state`, else `EDDY_STATE`.
pub fn state_dir(state: Option<&str>) -> Result<PathBuf, Errno> {
    match state {
        Some(s) => Ok(PathBuf::from(s)),
        None => std::env::var_os(STATE_ENV).map(PathBuf::from).ok_or_else(|| {
            Errno::einval(
                "no state directory given and EDDY_STATE is not set (the directory holding deployment.toml)",
            )
        }),
    }
}

impl Session {
    /// Connects to the deployment of the state directory `state` (the directory holding
    /// `deployment.toml`, the `--state` of `eddy start`), else `EDDY_STATE`'s; `name` names
    /// the runtime's keeper thread. Contacts the daemons (within the RPC deadline): an
    /// unreachable deployment fails here. ENOENT: no usable `deployment.toml`.
    pub fn connect(state: Option<&str>, name: &str) -> Result<Session, Errno> {
        let file = state_dir(state)?.join("deployment.toml");
        let dep = eddy_config::Deployment::load(&file)
            .map_err(|e| Errno::new(libc::ENOENT, format!("{}: {e}", file.display())))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(4)
            .thread_name(name)
            .enable_all()
            .build()
            .map_err(|e| Errno::eio(format!("{name} runtime: {e}")))?;
        let driver = Driver::start(rt, name, || {})
            .map_err(|e| Errno::eio(format!("{name}: starting its thread: {e}")))?;
        let s = Session {
            driver,
            client: Client::new_following(dep.clone(), file.clone())?,
        };
        let client = s.run(Client::connect_following(dep, file))?;
        Ok(Session { client, ..s })
    }

    /// The client (a cheap handle: clone it into the futures given to `run`).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Runs `fut` to its end: on this thread, which drives the runtime meanwhile, or (a
    /// thread inside another tokio runtime) as a task of the runtime while this thread
    /// waits.
    pub fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T, Errno>> + Send + 'static,
    ) -> Result<T, Errno> {
        if can_run_here() {
            return self.driver.drive(fut);
        }
        self.driver
            .on_task(fut)
            .unwrap_or_else(|| Err(Errno::eio("the client's runtime stopped")))
    }

    /// `run` for a future that borrows the caller's memory (a buffer read into): on this
    /// thread only; `None` when this thread cannot drive the runtime (it is inside another
    /// runtime: the caller then runs an owning version with `run`).
    pub fn run_here<T>(
        &self,
        fut: impl Future<Output = Result<T, Errno>>,
    ) -> Option<Result<T, Errno>> {
        can_run_here().then(|| self.driver.drive(fut))
    }

    /// Spawns `fut` on the runtime: whoever drives it next runs it (a call, or the keeper).
    pub fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        self.driver.spawn(fut);
    }
}

/// Whether this thread can drive a runtime itself: it is inside no other runtime.
pub fn can_run_here() -> bool {
    matches!(tokio::runtime::Handle::try_current(), Err(e) if e.is_missing_context())
}
