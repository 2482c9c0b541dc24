//! eddy-daemon: `eddyd`, the Eddy storage daemon, one per node. It keeps the metadata of the
//! paths it owns in an embedded LSM store (fjall) and the chunks it owns as files under its
//! root, and serves clients over TCP and a unix socket with the eddy-proto wire format.
//! Its own calls to the other daemons (copies of metadata, repair, rejoin) go through the rpc
//! layer (`eddy_rpc::Daemons`); it does not link the POSIX client.
//!
//! It must not: decide placement (clients do), check anything across daemons (parents,
//! emptiness), panic or stop serving others because of one bad request or connection, or
//! acknowledge a Sync before the data and metadata are on stable storage.
//!
//! A request goes from its connection (`server.rs`) through the checks every request passes
//! (`state.rs`, beside `State`, what every request may touch) to its handler (`ops/`, one
//! per request of `eddy_proto::request_table!`).
//!
//! Layout under the root: `meta/` (fjall, keyspace "meta": `path::meta_key(path)` →
//! `Inode::to_record()`; "tier": the backend tier's records; "intents": unfinished directory
//! renames; the chunk map, decision 0015; "hints": items other owners missed, decision
//! 0021), `chunks/<hh>/<file id, 32 hex>` (one sparse data file per file, and its `.sum`), `eddyd.sock`, `eddyd.ready`, `eddyd.root` (the deployment's mark,
//! decision 0023). Everything under the root is its user's only: the root is made or
//! accepted by `rootdir.rs` and is 0700, like every directory in it; files are 0600.
//!
//! The stores own records and data: the metadata store (`meta`) keys, records, batches and
//! the locks of keys; the chunk store (`chunks`) chunk files and the chunk map. Neither
//! calls the backend. The backend tier (`tier`, with `backend`) owns the backend and does
//! every backend I/O of a linked path: the store's operations reach it through
//! `meta::Through` under the entry's key lock (import, write-through), and its own
//! operations (directory import, validation, renames, finalisation, the chunk cache) read
//! and write the stores' records. The request handlers (`ops`) hand each store operation
//! the tier.

mod advisory;
mod args;
mod backend;
mod chunks;
mod deadlock;
mod direct;
mod embedded;
mod error;
mod gate;
mod hints;
mod leases;
mod locks;
mod members;
mod meta;
mod metrics;
mod mounts;
mod moving;
mod ops;
mod privilege;
mod repair;
mod replicate;
mod respawn;
mod room;
mod rootdir;
mod server;
mod state;
pub mod stats;
mod tier;

pub use args::{system_host_name, DaemonArgs, DaemonSettings, SECRET_ENV, SOCKET_FILE};
pub use embedded::{Embedded, Inventory};
pub use error::DaemonError;
// The ready file and line are eddy-config's (`eddy_config::ready`): launchers read them
// without linking the daemon.
pub use eddy_config::ready::{
    parse_announcement, read_ready, ready_path, ReadyInfo, READY_FILE, READY_LINE,
};
pub use server::{Daemon, CHUNKS_DIR, META_DIR};

/// Name of the keyspace holding the hints (decision 0021).
pub const HINTS_KEYSPACE: &str = "hints";

use tokio::signal::unix::{signal, SignalKind};

/// Runs a daemon until SIGTERM, SIGINT or a client's Shutdown; blocks the calling thread.
/// Builds its own multi-threaded runtime. Returns after a clean stop. Everything the daemon
/// makes is for its user only (umask 077), whatever the umask it was started with.
pub fn run(args: DaemonArgs) -> Result<(), DaemonError> {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let settings = DaemonSettings::from_args(&args)?;
    if let Some(user) = &args.user {
        let mark = eddy_proto::auth::root_mark(&settings.secret);
        privilege::become_user(user, &settings.root, &mark)?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("eddyd")
        .build()
        .map_err(DaemonError::Runtime)?;
    let grace = std::time::Duration::from_millis(settings.config.rpc_timeout_ms);
    let result = runtime.block_on(serve_until_signal(settings));
    // Blocking work still running past the drain (a stuck disk) does not hold the exit.
    runtime.shutdown_timeout(grace);
    match result? {
        Ended::Stopped => Ok(()),
        // Its store refused every write: the program again, on the same listeners.
        Ended::Restart(listeners) => Err(DaemonError::Meta {
            path: args.root.join(META_DIR),
            message: respawn::exec_in_place(listeners).to_string(),
        }),
    }
}

/// How a daemon served by [`serve_until_signal`] ended.
pub enum Ended {
    /// Stopped (a signal, a client's Shutdown).
    Stopped,
    /// Its metadata store refuses every write: the program is to run again in place on
    /// these listeners (decision 0060).
    Restart(respawn::Listeners),
}

/// Starts a daemon and serves until SIGTERM, SIGINT or a client's Shutdown, then stops it
/// cleanly; or until its metadata store refuses every write, then stops it cleanly too and
/// says to run it again in place.
pub async fn serve_until_signal(settings: DaemonSettings) -> Result<Ended, DaemonError> {
    let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Runtime)?;
    let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Runtime)?;
    let mut daemon = Daemon::start(settings).await?;
    let restart = tokio::select! {
        _ = term.recv() => { tracing::info!("SIGTERM received"); false }
        _ = int.recv() => { tracing::info!("SIGINT received"); false }
        _ = daemon.stopped() => false,
        _ = daemon.store_failed() => true,
    };
    let listeners = daemon.take_listeners();
    daemon.shutdown();
    let waited = daemon.wait().await;
    match restart {
        // The store's own refusal (its persist at the stop) is what the restart is for.
        true => {
            if let Err(e) = waited {
                tracing::warn!("stopping before the restart in place: {e}");
            }
            Ok(Ended::Restart(listeners))
        }
        false => waited.map(|()| Ended::Stopped),
    }
}
