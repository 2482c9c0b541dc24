//! The daemon's snapshot written to its root (`ROOT/stats/<instance hex>.json`, decision
//! 0032), every `stats_persist_ms` and once more at a clean stop: what is left of its
//! counters when the daemon is killed, read by `eddy start`/`eddy stop` to make the job
//! profile of a deployment that did not stop cleanly. Written on the blocking pool, atomically
//! (a fresh 0600 temp file, fsync, rename): a reader sees a whole snapshot or the one before.

use crate::state::State;
use eddy_proto::stats::{deployment_tag, persist_file, PersistedStats};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Writes the snapshot now (on the blocking pool); a failure is logged, never fatal.
pub(crate) async fn persist_now(state: &Arc<State>) {
    if !state.stats.counting() || state.settings.config.stats_persist_ms == 0 {
        return;
    }
    let st = Arc::clone(state);
    let written = tokio::task::spawn_blocking(move || write(&st)).await;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot persist the counters' snapshot"),
        Err(e) => tracing::warn!(error = %e, "the counters' snapshot task failed"),
    }
}

/// Persists the snapshot every `stats_persist_ms` until the daemon stops (the last one is
/// written by the stop's cleanup).
pub(crate) async fn persister(state: Arc<State>) {
    let every = state.settings.config.stats_persist_ms;
    if !state.stats.counting() || every == 0 {
        return;
    }
    let mut stop = state.shutdown.subscribe();
    let mut tick = tokio::time::interval(Duration::from_millis(every));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tick.tick() => {}
        }
        persist_now(&state).await;
    }
}

/// The file of this daemon process.
fn path(state: &State) -> PathBuf {
    state.settings.root.join(persist_file(state.instance))
}

fn write(state: &State) -> std::io::Result<()> {
    let file = path(state);
    if let Some(dir) = file.parent() {
        crate::rootdir::private_dir(dir)?;
    }
    let persisted = PersistedStats {
        deployment: deployment_tag(&state.settings.secret),
        instance: state.instance,
        stats: state.snapshot(),
    };
    let text = serde_json::to_vec(&persisted).map_err(std::io::Error::other)?;
    eddy_config::write_private(&file, &text).map_err(std::io::Error::other)
}
