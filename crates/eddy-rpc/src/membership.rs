//! How a client follows the deployment's membership (decision 0081): a call refused for an
//! older epoch, or a daemon that cannot be reached while the hosts file says a newer one
//! (drained and stopped), makes the view follow the hosts file; the callers that chose
//! owners by the old view choose again (`retry_moved`).

use crate::view::{self, View};
use crate::{gave_up, Daemons, Failure, MOVES_MAX};
use eddy_proto::Errno;
use futures::future::join_all;
use std::sync::Arc;
use std::time::Duration;

impl Daemons {
    /// Runs `attempt` again while it fails with `EREMCHG` (`Errno::is_moved`: a daemon
    /// refused a request for its epoch, the view has followed the hosts file since, and the
    /// request was not applied): the caller's owners are computed again from the new view
    /// inside `attempt`. At most `MOVES_MAX` times, then EIO.
    pub async fn retry_moved<T, F, Fut>(&self, mut attempt: F) -> Result<T, Errno>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, Errno>>,
    {
        let mut last = None;
        for _ in 0..MOVES_MAX {
            // On the heap: the attempt is often a whole operation, whose future would
            // otherwise be held inline by every caller up the chain (a thread's stack).
            match Box::pin(attempt()).await {
                Err(e) if e.is_moved() => last = Some(e),
                r => return r,
            }
        }
        Err(gave_up(last))
    }

    /// A daemon refused a request of the view at epoch `seen` with `moved` (EREMCHG): reads
    /// the hosts file again until it is at a newer epoch (every `REREAD`, up to the RPC
    /// deadline) and installs its view: the links of the daemons still listed kept, their
    /// connections told the new epoch first; the observer told every daemon reconnected (the
    /// locks are taken back and unfinished renames completed). Concurrent refreshes
    /// coalesce. An error (EIO) when there is no hosts file or it is not newer in time.
    pub async fn follow(&self, seen: u64, moved: &Errno) -> Result<(), Errno> {
        let Some(path) = &self.hosts_file else {
            return Err(Errno::eio(format!(
                "{}; this client was not made from a hosts file and cannot follow the \
                 membership",
                moved.msg
            )));
        };
        let asked = std::time::Instant::now();
        let mut failed = self.refreshing.lock().await;
        let now = self.view();
        if now.epoch > seen {
            return Ok(()); // another call followed it meanwhile
        }
        match &*failed {
            Some((from, e, at)) if *from == now.epoch && *at >= asked => return Err(e.clone()),
            _ => {}
        }
        let started = std::time::Instant::now();
        let deadline = Duration::from_millis(self.maker.config.rpc_timeout_ms);
        let dep = loop {
            let read = view::load(path);
            match read {
                Ok(dep) if dep.epoch > now.epoch => break dep,
                read => {
                    if started.elapsed() >= deadline {
                        let file = read.ok().map(|d| d.epoch);
                        let e = view::stale(moved, path, file, started.elapsed());
                        *failed = Some((now.epoch, e.clone(), std::time::Instant::now()));
                        return Err(e);
                    }
                }
            }
            tokio::time::sleep(view::REREAD).await;
        };
        let (new, kept) = View::build(&dep, &self.maker, Some(&now))?;
        join_all(kept.iter().map(|l| l.tell_epoch(dep.epoch))).await;
        let listed: Vec<u32> = dep.daemons.iter().map(|d| d.id).collect();
        *self.view.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(new);
        tracing::info!(
            from = now.epoch,
            to = dep.epoch,
            daemons = listed.len(),
            "the deployment's membership moved on; this client follows it"
        );
        if let Some(o) = &self.observer {
            for d in listed {
                o.reconnected(d);
            }
        }
        Ok(())
    }

    /// `daemon` of the view at epoch `seen` could not be reached (`failure`): when the hosts
    /// file is at a newer epoch (the daemon may have been drained and stopped), the view
    /// follows it and the refusal the daemon would have answered is the result (EREMCHG:
    /// the caller sends again under the new view); otherwise the failure as it was. The
    /// file is read once, without waiting for it to change.
    pub async fn unreachable(&self, seen: u64, daemon: u32, failure: Errno) -> Failure {
        let Some(path) = &self.hosts_file else {
            return Failure::Unreachable(failure);
        };
        match view::load(path) {
            Ok(dep) if dep.epoch > seen => {
                let moved = Errno::moved(daemon, dep.epoch, seen);
                match self.follow(seen, &moved).await {
                    Ok(()) => Failure::Daemon(moved),
                    Err(_) => Failure::Unreachable(failure),
                }
            }
            _ => Failure::Unreachable(failure),
        }
    }
}
