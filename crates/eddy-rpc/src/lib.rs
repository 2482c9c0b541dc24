//! eddy-rpc: how anything reaches the daemons of a deployment, below the POSIX client.
//!
//! `Daemons` keeps one lazily (re)connected, authenticated, multiplexed connection per daemon
//! (`conn.rs`: the handshake of decision 0017, the wire protection of decision 0022), sends a
//! typed request (`eddy_proto::Rpc`) to one daemon within the RPC deadline and tells an error
//! the daemon answered apart from a daemon that could not be reached (`Failure`). Above that
//! it holds what calling the copies of an item needs (decision 0020): the placement and the
//! replicas count (the owners of a path, of a chunk, of a shared file's identity record,
//! ranked with the daemons believed down last), the down marks (kept only with R > 1), the
//! plain failover to the copies in turn and the fan-out to every daemon. It counts the
//! requests it sends, by kind.
//!
//! The links, the placement and the membership epoch are one view (`view.rs`, decision
//! 0081), swapped whole when a daemon refuses a request for an older epoch and the hosts
//! file says a newer one: a caller that chose owners by the old view gets `EREMCHG` back
//! (the request was not applied) and chooses again (`Daemons::retry_moved`).
//!
//! The POSIX client (`eddy-client`) builds on it, and so does the daemon for its calls to its
//! peers (copies of metadata, repair, rejoin): the daemon does not link the client. What a
//! layer above must learn of every call (the client notes changes for the next fsync and
//! completes unfinished renames after a reconnection) it learns through an `Observer`.

mod conn;
mod down;
mod membership;
mod view;

pub use conn::{client_id, wire_mode, Closed, Failure, RANK_VARS};
pub use view::MOVES_MAX;

use conn::Link;
use down::Down;
use eddy_config::Deployment;
use eddy_placement::{path_hash, Placement};
use eddy_proto::{typed_reply, Errno, Reply, Request, Rpc, OP_NAMES};
use futures::future::join_all;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use view::{LinkMaker, View};

/// What a layer above learns of the calls made through `Daemons`.
pub trait Observer: Send + Sync {
    /// `daemon` answered `req` (not with an error) on the connection of `generation` (the
    /// daemon instances connected to so far; decision 0015).
    fn answered(&self, daemon: u32, req: &Request, generation: u64);

    /// A connection to `daemon` replaced an earlier one (the daemon restarted, or the
    /// connection broke or was reset).
    fn reconnected(&self, daemon: u32);
}

/// The membership the hosts file `dep` describes (its epoch, daemons, those drained and
/// those items move from), as a daemon adopts it (decision 0081); with `collect`, asking
/// each daemon to delete what it no longer owns.
pub fn membership_of(dep: &Deployment, collect: bool) -> eddy_proto::req::Membership {
    eddy_proto::req::Membership {
        epoch: dep.epoch,
        daemons: dep
            .daemons
            .iter()
            .map(|d| eddy_proto::req::Member {
                id: d.id,
                host: d.host.clone(),
                addr: d.addr.clone(),
                socket: d.socket.as_ref().map(|s| s.to_string_lossy().into_owned()),
                root: d.root.to_string_lossy().into_owned(),
            })
            .collect(),
        draining: dep.draining.clone(),
        moving_from: dep.moving_from.clone(),
        collect,
    }
}

/// Why a failover (`Daemons::failover_to`) brought no reply.
#[derive(Debug, Clone)]
pub enum Unanswered {
    /// `daemon` answered with an error; `after_unreachable`: an earlier target could not be
    /// reached (the request may have been applied there before it was lost).
    Refused {
        daemon: u32,
        error: Errno,
        after_unreachable: bool,
    },
    /// No target could be reached (the last one's error), or there was none.
    Unreachable(Errno),
}

impl Unanswered {
    pub fn into_errno(self) -> Errno {
        match self {
            Unanswered::Refused { error, .. } | Unanswered::Unreachable(error) => error,
        }
    }
}

/// The daemons of a deployment as one caller sees them: a connection to each, the down
/// marks, the placement and the request counters.
pub struct Daemons {
    /// The links, the placement and the membership epoch, swapped as one (`view.rs`): read
    /// on every call (a read lock held for an `Arc` clone).
    view: RwLock<Arc<View>>,
    /// The hosts file the deployment was read from, when it was: read again when a daemon
    /// says the membership moved on (decision 0081).
    hosts_file: Option<PathBuf>,
    /// Held while the hosts file is read again: concurrent refreshes coalesce. Holds the
    /// last refresh that failed (the epoch of the view it started from, its error, when it
    /// ended): a call that waited for it fails with it rather than wait a deadline more.
    refreshing: tokio::sync::Mutex<Option<(u64, Errno, std::time::Instant)>>,
    /// What makes the links of a new view.
    maker: LinkMaker,
    /// Copies of everything (the deployment's `replicas`, at least 1).
    replicas: usize,
    /// Daemons found unreachable lately (with replicas > 1).
    down: Down,
    /// Requests sent, by kind (`eddy_proto::Op` as index).
    rpcs: [AtomicU64; OP_NAMES.len()],
    observer: Option<Box<dyn Observer>>,
    /// What this client announces on each connection (`announce_mount`), shared with the
    /// links.
    announced: conn::Announced,
}

impl Daemons {
    /// Prepares a link to every daemon of `dep` without contacting any: each connects on its
    /// first call (Unix socket where the daemon's socket exists on this host, TCP otherwise),
    /// with `dep`'s secret, deadlines and wire setting, and says `dep`'s membership epoch.
    /// Items are placed on `dep.placed_on()`. Without a hosts file (`with_hosts_file`), a
    /// daemon at a newer epoch is an EIO error: this client cannot follow it.
    pub fn new(dep: &Deployment) -> Result<Daemons, Errno> {
        dep.validate().map_err(|e| Errno::einval(e.to_string()))?;
        let secret = Arc::new(
            dep.secret_bytes()
                .map_err(|e| Errno::einval(e.to_string()))?,
        );
        let announced: conn::Announced = Default::default();
        let maker = LinkMaker {
            secret,
            config: dep.config.clone(),
            announced: announced.clone(),
        };
        let (view, _) = View::build(dep, &maker, None)?;
        Ok(Daemons {
            view: RwLock::new(Arc::new(view)),
            hosts_file: None,
            refreshing: Default::default(),
            maker,
            replicas: dep.config.replicas.max(1),
            down: Down::new(Duration::from_millis(dep.config.down_hold_ms)),
            rpcs: std::array::from_fn(|_| Default::default()),
            observer: None,
            announced,
        })
    }

    /// The same, knowing the hosts file `dep` was read from: when a daemon says the
    /// membership moved on, the file is read again and the view follows it (decision 0081).
    pub fn with_hosts_file(mut self, path: impl Into<PathBuf>) -> Daemons {
        self.hosts_file = Some(path.into());
        self
    }

    /// The same, telling `observer` of every answer and reconnection.
    pub fn observed(mut self, observer: Box<dyn Observer>) -> Daemons {
        self.observer = Some(observer);
        self
    }

    /// The current view.
    fn view(&self) -> Arc<View> {
        self.view.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The placement over the daemons placed on now.
    pub fn placement(&self) -> Arc<Placement> {
        self.view().placement.clone()
    }

    /// The daemons placed on now, in order: the fan-outs' targets.
    pub fn ids(&self) -> Arc<[u32]> {
        self.view().ids.clone()
    }

    /// The membership epoch this client places by (what each connection says, `Epoch`).
    pub fn epoch(&self) -> u64 {
        self.view().epoch
    }

    /// Copies of everything (the deployment's `replicas`).
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// Requests sent so far, by kind (`Request::op_name`): what an operation costs in round
    /// trips.
    pub fn rpc_counts(&self) -> BTreeMap<&'static str, u64> {
        OP_NAMES
            .iter()
            .zip(&self.rpcs)
            .map(|(&name, n)| (name, n.load(Ordering::Relaxed)))
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    fn link(&self, daemon: u32) -> Option<Arc<Link>> {
        self.view().links.get(&daemon).cloned()
    }

    // ------------------------------------------------------------------ one daemon

    /// Sends a request (as it travels) to one daemon; returns the reply and the generation of
    /// the connection that carried it, or why it failed: an error the daemon answered, or a
    /// daemon that could not be reached within the deadline (marked down with R > 1).
    ///
    /// A daemon that refuses the request for this client's membership epoch (EREMCHG), or
    /// that cannot be reached while the hosts file says a newer one (it left), makes the
    /// view follow the hosts file (`follow`); the request, not applied, is sent again to
    /// the same daemon when the new view places items as the old one did and still lists it,
    /// else the refusal (EREMCHG) is the result: the caller computes its owners again and
    /// resends (`retry_moved`). A view that cannot follow is an EIO error.
    pub async fn send(&self, daemon: u32, req: &Request) -> Result<(Reply, u64), Failure> {
        let mut moves = 0;
        loop {
            self.rpcs[req.op() as usize].fetch_add(1, Ordering::Relaxed);
            let view = self.view();
            let Some(link) = view.links.get(&daemon) else {
                return Err(Failure::Daemon(Errno::eio(format!(
                    "daemon {daemon} is not part of this deployment"
                ))));
            };
            let reply = link.call_classified(req).await;
            if let (Some(o), Ok((_, generation))) = (&self.observer, &reply) {
                o.answered(daemon, req, *generation);
            }
            self.note_outcome(daemon, &reply);
            if let Some(o) = &self.observer {
                if link.take_reconnected() {
                    o.reconnected(daemon);
                }
            }
            let reply = match reply {
                Err(Failure::Unreachable(e)) => Err(self.unreachable(view.epoch, daemon, e).await),
                reply => reply,
            };
            let moved = match reply {
                Err(Failure::Daemon(e)) if e.is_moved() => e,
                reply => return reply,
            };
            if let Err(e) = self.follow(view.epoch, &moved).await {
                return Err(Failure::Daemon(e));
            }
            moves += 1;
            if moves >= MOVES_MAX {
                return Err(Failure::Daemon(gave_up(Some(moved))));
            }
            let now = self.view();
            if now.placement != view.placement || !now.links.contains_key(&daemon) {
                return Err(Failure::Daemon(moved));
            }
        }
    }

    /// Sends a request to one daemon and returns once it is on its connection (queued in
    /// order, written at once unless the socket is full), with the future of its reply and
    /// the generation of the connection that carried it. Requests started one after the
    /// other to one daemon reach it in that order. The observer is not told of the answer;
    /// a refusal for the membership epoch (EREMCHG) is the reply's outcome as it came: the
    /// caller's next `send` follows the membership.
    pub async fn start(
        &self,
        daemon: u32,
        req: &Request,
    ) -> Result<
        impl std::future::Future<Output = Result<(Reply, u64), Failure>> + Send + 'static,
        Failure,
    > {
        self.rpcs[req.op() as usize].fetch_add(1, Ordering::Relaxed);
        let Some(link) = self.link(daemon) else {
            return Err(Failure::Daemon(Errno::eio(format!(
                "daemon {daemon} is not part of this deployment"
            ))));
        };
        link.start(req).await
    }

    /// Sends a typed request to one daemon, telling an error answer apart from a daemon that
    /// cannot be reached.
    pub async fn try_call<R: Rpc>(&self, daemon: u32, req: R) -> Result<R::Reply, Failure> {
        let (reply, _) = self.send(daemon, &req.into()).await?;
        typed_reply::<R>(reply).map_err(Failure::Daemon)
    }

    /// Sends a typed request to one daemon; its reply, typed.
    pub async fn call<R: Rpc>(&self, daemon: u32, req: R) -> Result<R::Reply, Errno> {
        typed_reply::<R>(self.call_raw(daemon, &req.into()).await?)
    }

    /// `call` for a request as it travels, answered with the reply as it came.
    pub async fn call_raw(&self, daemon: u32, req: &Request) -> Result<Reply, Errno> {
        self.send(daemon, req)
            .await
            .map(|(reply, _)| reply)
            .map_err(Failure::into_errno)
    }

    /// Closes the connection to a daemon that did not answer (the next request opens a new
    /// one); the daemon then drops what this connection held.
    pub async fn drop_connection(&self, daemon: u32) {
        if let Some(link) = self.link(daemon) {
            link.reset().await;
        }
    }

    /// What tells when the current connection to `daemon` is dead (`None` when there is
    /// none); it holds nothing of the connection: the client takes its locks back when it
    /// is lost (decision 0028).
    pub fn closed_signal(&self, daemon: u32) -> Option<Closed> {
        self.link(daemon).and_then(|l| l.closed_signal())
    }

    /// True once after a connection to `daemon` replaced an earlier one. With an observer,
    /// `send` takes it and tells the observer.
    pub fn take_reconnected(&self, daemon: u32) -> bool {
        self.link(daemon)
            .is_some_and(|link| link.take_reconnected())
    }

    /// Tells every daemon that this client serves a FUSE mount at `mountpoint` running on
    /// `transport` (`Mounted`, decision 0079): on each connection open now, and on every
    /// connection opened from now on, right after `Identify`; `eddy status` lists it. Returns
    /// once it is sent (the replies are awaited in the background: a daemon that refuses
    /// it only leaves the mount out of its status).
    pub async fn announce_mount(&self, mountpoint: String, transport: eddy_proto::MountTransport) {
        let req = Request::Mounted(eddy_proto::req::Mounted {
            client: client_id(),
            mountpoint,
            transport,
        });
        *self.announced.write().unwrap_or_else(|p| p.into_inner()) = Some(req);
        let view = self.view();
        join_all(view.links.values().map(|l| l.announce())).await;
    }

    // ------------------------------------------------------------------ down marks

    /// Whether `daemon` was found unreachable lately (only tracked with R > 1).
    pub fn is_down(&self, daemon: u32) -> bool {
        self.down.is_down(daemon)
    }

    /// Forgets that `daemon` was found unreachable (it told the caller it is up again).
    pub fn mark_up(&self, daemon: u32) {
        self.down.clear(daemon);
    }

    /// Notes that `daemon` was found unreachable by a call made elsewhere (only tracked with
    /// R > 1): the calls through these connections skip it as if they had found it so.
    pub fn mark_down(&self, daemon: u32) {
        if self.replicas > 1 {
            self.down.mark(daemon);
        }
    }

    /// Notes the outcome of a call for the down marks (only with R > 1).
    fn note_outcome<T>(&self, daemon: u32, r: &Result<T, Failure>) {
        if self.replicas == 1 {
            return;
        }
        match r {
            Err(Failure::Unreachable(_)) => self.down.mark(daemon),
            _ => self.down.clear(daemon),
        }
    }

    // ------------------------------------------------------------------ owners

    /// `owners` with the daemons believed down moved to the end (order kept otherwise).
    pub fn ranked(&self, mut owners: Vec<u32>) -> Vec<u32> {
        if owners.len() > 1 {
            owners.sort_by_key(|&d| self.down.is_down(d));
        }
        owners
    }

    /// The R owners of a path's metadata, the ones believed down last.
    pub fn meta_owners(&self, path: &str) -> Vec<u32> {
        let placement = self.placement();
        if self.replicas == 1 {
            return vec![placement.meta_owner(path)];
        }
        self.ranked(placement.owners(path_hash(path), self.replicas))
    }

    /// The R owners of chunk `k` of a file, in placement order (a file placed by locality:
    /// its home first, decision 0043).
    pub fn chunk_owners(&self, file_id: u128, k: u64) -> Vec<u32> {
        let placement = self.placement();
        if self.replicas == 1 {
            return vec![placement.chunk_owner(file_id, k)];
        }
        placement.chunk_owners(file_id, k, self.replicas)
    }

    /// The daemons holding the identity record of the shared file `file_id` whose names
    /// point at `daemon`: its holder (that daemon while it is placed on, else the owner by
    /// the record's hash, decision 0083), then the R-1 daemons after it in id order (the
    /// ring), the ones believed down last.
    pub fn identity_holders(&self, daemon: u32, file_id: u128) -> Vec<u32> {
        let owners = self
            .placement()
            .identity_owners(daemon, file_id, self.replicas);
        if owners.len() == 1 {
            return owners;
        }
        self.ranked(owners)
    }

    /// Whether a failed call to one copy should be tried on the next: unreachable, or (for
    /// reads) EIO from the daemon (a copy with a damaged chunk: the next may have it whole).
    pub fn worth_another_copy(f: &Failure, read: bool) -> bool {
        match f {
            Failure::Unreachable(_) => true,
            Failure::Daemon(e) => read && e.errno == libc::EIO,
        }
    }

    // ------------------------------------------------------------------ several daemons

    /// Sends `req` to the first of `targets` that can be reached; an answer (error or not)
    /// from any of them is the result.
    pub async fn failover(&self, targets: &[u32], req: &Request) -> Result<Reply, Errno> {
        self.failover_to(targets, req)
            .await
            .map_err(Unanswered::into_errno)
    }

    /// `failover`, telling which daemon refused the request and whether an earlier target
    /// could not be reached (for a caller that refines such an answer).
    pub async fn failover_to(&self, targets: &[u32], req: &Request) -> Result<Reply, Unanswered> {
        let mut last = None;
        for &d in targets {
            match self.send(d, req).await {
                Ok((reply, _)) => return Ok(reply),
                Err(Failure::Unreachable(e)) => last = Some(e),
                Err(Failure::Daemon(error)) => {
                    return Err(Unanswered::Refused {
                        daemon: d,
                        error,
                        after_unreachable: last.is_some(),
                    })
                }
            }
        }
        Err(Unanswered::Unreachable(last.unwrap_or_else(|| {
            Errno::eio("no daemon to send the request to")
        })))
    }

    /// Sends a request built per daemon to every daemon at once; results in id order.
    pub async fn all<R: Rpc, F: Fn() -> R>(&self, make: F) -> Vec<(u32, Result<R::Reply, Errno>)> {
        self.all_classified(make)
            .await
            .into_iter()
            .map(|(id, r)| (id, r.map_err(Failure::into_errno)))
            .collect()
    }

    /// `all`, telling error answers apart from daemons that cannot be reached.
    ///
    /// The daemons are those placed on now. When one refuses the request for this client's
    /// membership epoch and the view that follows places items otherwise, the whole fan-out
    /// is sent again to the daemons of the new view (at most `MOVES_MAX` times): the
    /// daemons that took it the first time take it again, so a fan-out's request must be one
    /// that can be applied twice (all of them are: statuses, syncs, removals of a file's
    /// chunks, lookups of children, write-back marks, rebinds to the same name).
    pub async fn all_classified<R: Rpc, F: Fn() -> R>(
        &self,
        make: F,
    ) -> Vec<(u32, Result<R::Reply, Failure>)> {
        let mut moves = 0;
        loop {
            let ids = self.ids();
            let futs = ids.iter().map(|&id| {
                let req = make().into();
                async move {
                    let (reply, _) = self.send(id, &req).await?;
                    typed_reply::<R>(reply).map_err(Failure::Daemon)
                }
            });
            let results: Vec<_> = ids.iter().copied().zip(join_all(futs).await).collect();
            let moved = results.iter().find_map(|(_, r)| match r {
                Err(Failure::Daemon(e)) if e.is_moved() => Some(e.clone()),
                _ => None,
            });
            match moved {
                Some(e) if moves + 1 >= MOVES_MAX => {
                    let gave_up = Failure::Daemon(gave_up(Some(e)));
                    return ids.iter().map(|&id| (id, Err(gave_up.clone()))).collect();
                }
                Some(_) => moves += 1,
                None => return results,
            }
        }
    }

    /// Like `all`, but the first error wins. With R copies, up to R-1 daemons that cannot be
    /// reached are left out (what they hold has a copy on the others).
    pub async fn all_ok<R: Rpc, F: Fn() -> R>(&self, make: F) -> Result<Vec<R::Reply>, Errno> {
        let results = self.all_classified(make).await;
        let unreachable = results
            .iter()
            .filter(|(_, r)| matches!(r, Err(Failure::Unreachable(_))))
            .count();
        let tolerated = unreachable < self.replicas;
        results
            .into_iter()
            .filter(|(_, r)| !(tolerated && matches!(r, Err(Failure::Unreachable(_)))))
            .map(|(_, r)| r.map_err(Failure::into_errno))
            .collect()
    }
}

/// The error of a call that followed the membership `MOVES_MAX` times and still found it
/// moved on.
fn gave_up(last: Option<Errno>) -> Errno {
    let last = last.map_or_else(String::new, |e| format!(": {}", e.msg));
    Errno::eio(format!(
        "the deployment's membership moved on {MOVES_MAX} times during one call{last}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_config::{Config, DaemonEntry};
    use eddy_proto::req;

    /// A deployment of `n` daemons at addresses where nothing listens (ports just freed), so
    /// every call fails to connect: a daemon that cannot be reached, for real.
    fn unreachable(n: u32, replicas: usize) -> Deployment {
        let daemons = (1..=n)
            .map(|id| {
                let port = std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .map(|a| a.port())
                    .expect("a free local port");
                DaemonEntry {
                    id,
                    host: "localhost".into(),
                    addr: format!("127.0.0.1:{port}"),
                    socket: None,
                    root: "/nonexistent".into(),
                    metrics: None,
                }
            })
            .collect();
        Deployment {
            name: "rpc-test".into(),
            job: Default::default(),
            epoch: 0,
            moving_from: None,
            draining: Vec::new(),
            secret: Deployment::new_secret(),
            config: Config {
                replicas,
                ..Config::default()
            },
            daemons,
        }
    }

    #[tokio::test]
    async fn an_unreachable_daemon_is_marked_down_and_ranked_last() {
        let d = Daemons::new(&unreachable(3, 2)).expect("valid deployment");
        match d.try_call(1, req::Status).await {
            Err(Failure::Unreachable(e)) => assert_eq!(e.errno, libc::EIO, "{e}"),
            other => panic!("expected an unreachable daemon, got {other:?}"),
        }
        assert!(d.is_down(1) && !d.is_down(2));
        assert_eq!(d.ranked(vec![1, 2, 3]), vec![2, 3, 1]);
        assert_eq!(d.identity_holders(1, 7), vec![2, 1]);
        d.mark_up(1);
        assert!(!d.is_down(1));
        assert_eq!(d.rpc_counts().get("status"), Some(&1));
        assert_eq!(d.replicas(), 2);
    }

    #[tokio::test]
    async fn with_one_copy_nothing_is_marked_down() {
        let d = Daemons::new(&unreachable(2, 1)).expect("valid deployment");
        assert!(d.try_call(2, req::Status).await.is_err());
        assert!(!d.is_down(2));
        assert_eq!(d.chunk_owners(7, 0).len(), 1);
        assert_eq!(d.identity_holders(2, 7), vec![2]);
    }

    #[tokio::test]
    async fn failover_and_fan_out_tell_unreachable_from_refused() {
        let d = Daemons::new(&unreachable(3, 2)).expect("valid deployment");
        match d.failover_to(&[1, 2], &req::Status.into()).await {
            Err(Unanswered::Unreachable(e)) => assert_eq!(e.errno, libc::EIO, "{e}"),
            other => panic!("expected no copy reached, got {other:?}"),
        }
        // A daemon the deployment does not list is an error answer, not a missing copy.
        match d.failover_to(&[9], &req::Status.into()).await {
            Err(Unanswered::Refused {
                daemon: 9,
                after_unreachable: false,
                ..
            }) => {}
            other => panic!("expected a refusal by daemon 9, got {other:?}"),
        }
        let all = d.all(|| req::Status).await;
        assert_eq!(all.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(all.iter().all(|(_, r)| r.is_err()));
        // Three daemons unreachable with two copies: more than a copy can make up for.
        assert!(d.all_ok(|| req::Status).await.is_err());
    }

    /// A hosts file of its own for one test.
    fn hosts_file(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("eddy-rpc-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        dir.join("hosts.toml")
    }

    #[tokio::test]
    async fn the_view_follows_a_newer_hosts_file_keeping_the_links_still_listed() {
        let mut dep = unreachable(3, 1);
        dep.config.rpc_timeout_ms = 200;
        let file = hosts_file("follow");
        dep.save(&file).expect("hosts file written");
        let d = Daemons::new(&dep).expect("valid").with_hosts_file(&file);
        let before = d.view();
        assert_eq!((d.epoch(), &d.ids()[..]), (0, &[1, 2, 3][..]));

        let mut next = dep.clone();
        next.epoch = 1;
        next.daemons[2].addr = "127.0.0.1:1".into();
        let mut extra = next.daemons[0].clone();
        extra.id = 4;
        next.daemons.push(extra);
        next.draining = vec![2];
        next.save(&file).expect("hosts file written");
        let moved = Errno::moved(1, 1, 0);
        // Refreshes that come together read the file once between them; all see the view.
        let all = join_all((0..4).map(|_| d.follow(0, &moved))).await;
        assert!(all.iter().all(Result::is_ok), "{all:?}");
        let after = d.view();
        assert_eq!(d.epoch(), 1);
        assert_eq!(
            &d.ids()[..],
            &[1, 3, 4],
            "drained daemon 2 is placed on no more"
        );
        assert_eq!(after.links.len(), 4, "every listed daemon has a link");
        assert!(Arc::ptr_eq(&before.links[&1], &after.links[&1]));
        assert!(Arc::ptr_eq(&before.links[&2], &after.links[&2]));
        assert!(
            !Arc::ptr_eq(&before.links[&3], &after.links[&3]),
            "daemon 3 moved to another address: a new link"
        );

        // The daemons moved on again but the file did not: EIO naming both epochs, for
        // every call that waited on the one refresh.
        let moved = Errno::moved(1, 2, 1);
        let all = join_all((0..3).map(|_| d.follow(1, &moved))).await;
        for r in all {
            let e = r.expect_err("the file is not newer");
            assert_eq!(e.errno, libc::EIO);
            assert!(
                e.msg.contains("epoch 2") && e.msg.contains("still at epoch 1"),
                "{e}"
            );
        }
        assert_eq!(d.epoch(), 1);
        let _ = std::fs::remove_dir_all(file.parent().expect("a directory"));
    }

    #[tokio::test]
    async fn without_a_hosts_file_a_moved_membership_is_eio() {
        let d = Daemons::new(&unreachable(2, 1)).expect("valid deployment");
        let e = d
            .follow(0, &Errno::moved(1, 1, 0))
            .await
            .expect_err("nothing to follow");
        assert_eq!(e.errno, libc::EIO);
        assert!(e.msg.contains("cannot follow"), "{e}");
        let mut tries = 0;
        let r: Result<(), Errno> = d
            .retry_moved(|| {
                tries += 1;
                async { Err(Errno::moved(1, 1, 0)) }
            })
            .await;
        assert_eq!(tries, MOVES_MAX);
        assert_eq!(r.expect_err("gave up").errno, libc::EIO);
    }

    #[tokio::test]
    async fn items_are_placed_on_the_daemons_they_move_from_while_every_listed_daemon_has_a_link() {
        let mut dep = unreachable(4, 2);
        dep.epoch = 3;
        dep.moving_from = Some(vec![1, 2, 3]);
        let d = Daemons::new(&dep).expect("valid deployment");
        assert_eq!((d.epoch(), &d.ids()[..]), (3, &[1, 2, 3][..]));
        assert_eq!(d.view().links.len(), 4);
        for k in 0..64 {
            assert!(d.chunk_owners(7, k).iter().all(|&o| o != 4));
        }
        assert!(d.all(|| req::Status).await.iter().all(|(id, _)| *id != 4));
    }
}
