//! The deployment as a client sees it now (decision 0081): the links to the daemons listed,
//! the placement (over the daemons placed on: `Deployment::placed_on`) and the membership
//! epoch, swapped as one when the membership moves on.
//!
//! A daemon at a newer epoch refuses this client's requests with `EREMCHG` before doing
//! anything with them. `Daemons::follow` then reads the hosts file again (every 20 ms until
//! the RPC deadline while the file is not newer yet: the coordinator writes it after the
//! daemons adopt) and builds the new view from it: the links of the daemons still listed at
//! the same address are kept and their connections told the new epoch before the view is
//! installed, new daemons get new links, the others are dropped. Refreshes coalesce: one
//! reads the file, those that come while it does find the view newer and go on.

use crate::conn::{Announced, Link};
use eddy_config::{Config, Deployment};
use eddy_placement::Placement;
use eddy_proto::Errno;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How often the hosts file is read again while it is not newer than the view.
pub(crate) const REREAD: Duration = Duration::from_millis(20);

/// Most refreshes one call follows before it gives up with EIO (a membership that keeps
/// moving under it).
pub const MOVES_MAX: usize = 8;

/// One view of the deployment: every listed daemon's link, the placement and the epoch.
pub(crate) struct View {
    pub epoch: u64,
    pub links: HashMap<u32, Arc<Link>>,
    pub placement: Arc<Placement>,
    /// The daemons placed on, in order (the fan-outs' targets).
    pub ids: Arc<[u32]>,
}

/// What every link of a client shares, to make the links of a new view.
pub(crate) struct LinkMaker {
    pub secret: Arc<Vec<u8>>,
    pub config: Config,
    pub announced: Announced,
}

impl View {
    /// The view `dep` describes, keeping from `old` the link of every daemon still listed at
    /// the same address. Returns it with the links kept (to be told the new epoch).
    pub fn build(
        dep: &Deployment,
        make: &LinkMaker,
        old: Option<&View>,
    ) -> Result<(View, Vec<Arc<Link>>), Errno> {
        let placement = Placement::new(dep.placed_on())
            .ok_or_else(|| Errno::einval("the deployment places on no daemon"))?;
        let mut kept = Vec::new();
        let links = dep
            .daemons
            .iter()
            .map(|d| {
                let same = old
                    .and_then(|v| v.links.get(&d.id))
                    .filter(|l| l.reaches(d))
                    .cloned();
                let link = match same {
                    Some(l) => {
                        kept.push(l.clone());
                        l
                    }
                    None => Arc::new(Link::new(
                        d.clone(),
                        make.secret.clone(),
                        &make.config,
                        make.announced.clone(),
                        dep.epoch,
                    )),
                };
                (d.id, link)
            })
            .collect();
        let ids = placement.ids().into();
        Ok((
            View {
                epoch: dep.epoch,
                links,
                placement: Arc::new(placement),
                ids,
            },
            kept,
        ))
    }
}

/// Reads the hosts file at `path` (checked as at start).
pub(crate) fn load(path: &Path) -> Result<Deployment, Errno> {
    Deployment::load(path).map_err(|e| Errno::eio(format!("cannot read the hosts file again: {e}")))
}

/// What a refresh that found the hosts file no newer than `seen` says, after `waited`.
pub(crate) fn stale(moved: &Errno, path: &Path, file: Option<u64>, waited: Duration) -> Errno {
    let file = file.map_or_else(|| "unreadable".to_string(), |e| format!("at epoch {e}"));
    Errno::eio(format!(
        "{}; the hosts file {} is still {file} after {} ms: this client cannot follow the \
         membership",
        moved.msg,
        path.display(),
        waited.as_millis()
    ))
}
