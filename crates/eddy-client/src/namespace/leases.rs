//! Directory leases (decision 0075), what the holder sends: the lease asked for at the owner
//! of the directory's record and noted at every daemon, the long poll that hears of
//! recalls, the lease given back (its batches are in `lease_batches`). The local answers
//! (`lease_answer`, `create_leased`, `unlink_leased`) and the flushes every other operation
//! on a name in a leased directory makes first (`settle_name`, `settle_dir`) are here too;
//! the state is in `crate::leases`.

use crate::leases::{DirLease, LeaseState};
use crate::namespace::Namespace;
use crate::perm::Creds;
use crate::{new_inode, Errno, FileKind, Inode, Timespec};
use eddy_proto::req::{self, LEASE_NAMES_MAX};
use eddy_proto::{path, BatchOp, LeaseGrant, LeaseRef, RemoveKind};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a client does not ask again for a lease it could not get for another reason
/// than a refusal (a daemon not reached, names not all listed).
pub(super) const NOT_AGAIN: Duration = Duration::from_secs(10);

impl Namespace<'_> {
    // ------------------------------------------------------------ taking a lease

    /// Asks for a lease on `dir` (normalised) and notes it at every daemon; true when it is
    /// held and answers from now on. Refused, or a daemon not reached: false, and this
    /// client works as without (and does not ask again for a while).
    pub(crate) async fn acquire_lease(&self, dir: &str) -> bool {
        let leases = &self.0.leases;
        if !leases.on() || leases.get(dir).is_some() || !leases.may_ask(dir) {
            return false;
        }
        if let Some(oldest) = leases.oldest_past_cap() {
            let client = self.client();
            tokio::spawn(async move { client.ns().give_back(&oldest).await });
        }
        let held = self.acquire(dir).await;
        leases.done_asking(dir);
        held
    }

    async fn acquire(&self, dir: &str) -> bool {
        let leases = &self.0.leases;
        // The first owner of the directory's record grants, never a copy (which would grant
        // a second lease beside its own). Every daemon must note the lease: with one found
        // unreachable lately (the granter or another), no lease is asked for, and nothing
        // waits for that daemon.
        let granter = self.rpc().placement().meta_owner(dir);
        if self.rpc().ids().iter().any(|&d| self.rpc().is_down(d)) {
            return false;
        }
        let req = req::Lease {
            dir: dir.to_string(),
        };
        let id = match self.rpc().call(granter, req).await {
            Ok(LeaseGrant::Granted { id }) => id,
            Ok(LeaseGrant::Refused { retry_ms }) => {
                leases.refused(dir, Duration::from_millis(retry_ms));
                return false;
            }
            Err(e) => {
                tracing::debug!(dir, "no lease: {e}");
                leases.refused(dir, NOT_AGAIN);
                return false;
            }
        };
        let l = Arc::new(DirLease {
            dir: dir.to_string(),
            lease: LeaseRef {
                daemon: granter,
                id,
            },
            since: Instant::now(),
            st: Mutex::new(LeaseState::default()),
            sending: Default::default(),
            replies: Default::default(),
        });
        // Installed before the notes (not active yet): names this client creates meanwhile
        // are noted as present.
        leases.insert(Arc::clone(&l));
        self.watch_granter(granter);
        // The granter's note answers: the granter is heard from then (the lease's freshness).
        let noted = Mutex::new(None);
        let notes = futures::future::join_all(self.rpc().ids().iter().map(|&d| {
            let req = req::LeaseNote {
                dir: dir.to_string(),
                lease: l.lease,
            };
            let noted = &noted;
            async move {
                let n = self.rpc().call(d, req).await;
                if d == granter && n.is_ok() {
                    *eddy_proto::sync::lock(noted) = Some(Instant::now());
                }
                n
            }
        }))
        .await;
        let heard = eddy_proto::sync::lock(&noted).take();
        let mut names = HashSet::new();
        let mut complete = heard.is_some();
        for n in notes {
            match n {
                Ok(n) if n.complete && n.names.len() <= LEASE_NAMES_MAX => names.extend(n.names),
                Ok(_) => complete = false,
                Err(e) => {
                    tracing::debug!(dir, "a daemon did not note the lease: {e}");
                    complete = false;
                }
            }
        }
        if !complete {
            leases.refused(dir, NOT_AGAIN);
            self.give_back(&l).await;
            return false;
        }
        let mut st = l.state();
        if st.returning {
            return false;
        }
        st.present.extend(names);
        st.active = true;
        st.fresh_until = heard.map(|t| t + leases.valid_for);
        true
    }

    /// Runs the long poll at `granter` unless it runs already.
    fn watch_granter(&self, granter: u32) {
        if !eddy_proto::sync::lock(&self.0.leases.watching).insert(granter) {
            return;
        }
        let client = self.client();
        tokio::spawn(async move { client.ns().watch(granter).await });
    }

    /// The long poll at `granter` while this client holds leases it granted: a recalled
    /// lease is given back; a granter that cannot be reached has lost its leases with the
    /// connection: they are given back too (what can still be flushed is).
    async fn watch(&self, granter: u32) {
        let leases = &self.0.leases;
        let wait_ms = u32::try_from(leases.poll_cap.as_millis()).unwrap_or(u32::MAX);
        loop {
            if leases.of_granter(granter).is_empty() {
                eddy_proto::sync::lock(&leases.watching).remove(&granter);
                // One taken meanwhile would have found this poll running.
                if leases.of_granter(granter).is_empty()
                    || !eddy_proto::sync::lock(&leases.watching).insert(granter)
                {
                    return;
                }
            }
            let recalled = self.rpc().call(granter, req::LeaseWait { wait_ms }).await;
            let held = leases.of_granter(granter);
            let ids: Vec<u64> = match recalled {
                Ok(ids) => {
                    // Heard from the granter: its leases answer for `valid_for` more (those
                    // noted at every daemon; the others become so with their notes).
                    let until = Instant::now() + leases.valid_for;
                    for l in &held {
                        let mut st = l.state();
                        if st.fresh_until.is_some() {
                            st.fresh_until = Some(until);
                        }
                    }
                    ids
                }
                Err(e) => {
                    tracing::debug!(granter, "lease poll failed, its leases are given back: {e}");
                    held.iter().map(|l| l.lease.id).collect()
                }
            };
            let mut fresh = false;
            for l in held.into_iter().filter(|l| ids.contains(&l.lease.id)) {
                if l.state().returning {
                    continue;
                }
                fresh = true;
                let client = self.client();
                tokio::spawn(async move { client.ns().give_back(&l).await });
            }
            if !ids.is_empty() && !fresh {
                // Being given back already: the granter answers again until it is.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }

    /// Gives lease `l` back: no more local answers, the front end's hook, what is queued
    /// flushed (its failures noted for the calls that depend on them), the registrations
    /// dropped at every daemon and the lease ended at its granter.
    pub(crate) async fn give_back(&self, l: &Arc<DirLease>) {
        {
            let mut st = l.state();
            if st.returning {
                return;
            }
            st.returning = true;
            st.active = false;
        }
        if let Some(hook) = self.0.leases.hook() {
            hook(l.dir.clone()).await;
        }
        self.flush_lease(l).await;
        let ret = |d: u32| {
            let req = req::LeaseReturn {
                dir: l.dir.clone(),
                lease: l.lease,
            };
            let client = self.client();
            async move { client.rpc().call(d, req).await }
        };
        // The other daemons drop their registrations in the background (one that does not
        // answer recalls it lazily, its granter then answering at once); the granter's answer
        // is awaited: it ends the lease, or says it was revoked. A granter found unreachable
        // lately is not waited for (it lost the lease with the connection).
        let granter_down = self.rpc().is_down(l.lease.daemon);
        for d in self
            .rpc()
            .ids()
            .iter()
            .copied()
            .filter(|&d| d != l.lease.daemon || granter_down)
        {
            let (dir, ret) = (l.dir.clone(), ret(d));
            tokio::spawn(async move {
                if let Err(e) = ret.await {
                    tracing::debug!(%dir, daemon = d, "lease return: {e}");
                }
            });
        }
        if granter_down {
            self.0.leases.remove(l);
            return;
        }
        match ret(l.lease.daemon).await {
            Err(e) if e.errno == libc::ESTALE => {
                tracing::warn!(dir = %l.dir, "lease revoked before it was given back: {e}");
            }
            Err(e) => tracing::debug!(dir = %l.dir, "lease return: {e}"),
            Ok(()) => {}
        }
        self.0.leases.remove(l);
    }

    /// Gives back every lease on `dir` or below it (a rename or removal of the directory).
    pub(crate) async fn give_back_within(&self, dir: &str) {
        let leases = self.0.leases.within(dir);
        futures::future::join_all(leases.iter().map(|l| self.give_back(l))).await;
    }

    /// Gives back every lease this client holds, all at once.
    pub(crate) async fn give_back_all(&self) {
        let leases = self.0.leases.all();
        futures::future::join_all(leases.iter().map(|l| self.give_back(l))).await;
    }

    // ------------------------------------------------------------ local answers

    /// A lookup of `p` answered from a lease on its directory: ENOENT for a name known
    /// absent, the entry for one created under the lease; `None` when the daemon must be
    /// asked.
    pub(crate) fn lease_answer(&self, p: &str) -> Option<Result<Inode, Errno>> {
        let (dir, name) = path::split(p)?;
        // Hidden names of files unlinked while open are made by renames of their own.
        if eddy_config::is_hidden_orphan(name) {
            return None;
        }
        let l = self.0.leases.get(dir)?;
        let st = l.state();
        if !st.active {
            return None;
        }
        // This client's own creates, queued or not, are answered as it made them; a name
        // known absent only while the granter was heard from lately.
        if let Some(i) = st.created.get(name) {
            let epoch = self.0.sizes.epoch();
            return Some(Ok(self.merge_pending(i.clone(), epoch).0));
        }
        if !st.answers() {
            return None;
        }
        if !st.present.contains(name) {
            return Some(Err(Errno::new(
                libc::ENOENT,
                format!("{p} does not exist (under this client's lease on {dir})"),
            )));
        }
        None
    }

    /// An `open(O_CREAT)` of `p` answered from a lease on its directory: an absent name is
    /// created here (its create queued), a present one is EEXIST with `exclusive`, and a
    /// file this client created under the lease is opened as it is. `None`: as without.
    pub(crate) async fn create_leased(
        &self,
        p: &str,
        mode: u32,
        exclusive: bool,
        creds: Creds,
    ) -> Result<Option<(Inode, bool)>, Errno> {
        let Some((dir, name)) = path::split(p) else {
            return Ok(None);
        };
        if eddy_config::is_hidden_orphan(name) {
            return Ok(None);
        }
        let Some(l) = self.0.leases.get(dir) else {
            return Ok(None);
        };
        let stale = {
            let st = l.state();
            if !st.active {
                return Ok(None);
            }
            !st.answers()
        };
        if stale {
            // The granter not heard from lately: as without, after what is queued here (the
            // daemons must know this client's creates before it asks them).
            self.flush_lease(&l).await;
            return Ok(None);
        }
        {
            let st = l.state();
            if !st.answers() {
                return Ok(None);
            }
            if st.present.contains(name) {
                if exclusive {
                    return Err(Errno::new(libc::EEXIST, format!("{p} exists")));
                }
                return Ok(st.created.get(name).map(|i| (i.clone(), false)));
            }
        }
        if let Some(e) = self.0.leases.take_error_in(dir) {
            return Err(e);
        }
        // The parent as checked (permission to add entries), for the placement it asks;
        // unchecked (a kernel resolved it), as a create without the lease finds it: cached,
        // else looked up. Never the configuration's placement for want of it: a file in a
        // `hashed` directory placed `local` is written from every host as a local file.
        let parent = self.parent_dir(p, creds).await?;
        let mut inode = new_inode(FileKind::File, mode, creds, None);
        let parent = match parent {
            Some(d) => Some(d),
            None => self.parent_for_placement(p).await,
        };
        self.data().place_new(parent.as_ref(), &mut inode).await;
        let owner = self.rpc().meta_owners(p).first().copied();
        let Some(owner) = owner else {
            return Ok(None);
        };
        let full = {
            let mut st = l.state();
            // Recalled meanwhile, or made by another call of this client: as without.
            if !st.answers() || st.present.contains(name) {
                return Ok(None);
            }
            st.present.insert(name.to_string());
            st.created.insert(name.to_string(), inode.clone());
            let op = BatchOp::Create(req::Create {
                path: p.to_string(),
                inode: inode.clone(),
                exclusive: true,
            });
            self.queue(&l, &mut st, owner, op)
        };
        self.changed_dir_later(dir, Timespec::now());
        if full {
            self.send_lease(&l).await;
        }
        Ok(Some((inode, true)))
    }

    /// An unlink of `p` answered from a lease on its directory: a file this client created
    /// under the lease, not open here, that never held data, is removed here (its removal
    /// queued). False: as without (after what is queued in the directory was flushed).
    pub(crate) async fn unlink_leased(&self, p: &str) -> bool {
        let Some((dir, name)) = path::split(p) else {
            return false;
        };
        let Some(l) = self.0.leases.get(dir) else {
            return false;
        };
        let owner = self.rpc().meta_owners(p).first().copied();
        // Some(full): queued; None: as without.
        let queued = {
            let mut st = l.state();
            let clean = st.created.get(name).is_some_and(|i| {
                st.answers()
                    && i.size == 0
                    && !self.0.sizes.written(i.file_id)
                    && !self.0.held.is_open(p)
                    && !eddy_proto::sync::lock(&self.0.spilled).contains(&i.file_id)
            });
            st.created.remove(name);
            match (clean, owner) {
                (true, Some(owner)) => {
                    st.present.remove(name);
                    let op = BatchOp::Remove(req::Remove {
                        path: p.to_string(),
                        kind: RemoveKind::NotDir,
                    });
                    Some(self.queue(&l, &mut st, owner, op))
                }
                _ => None,
            }
        };
        let Some(full) = queued else {
            self.flush_lease(&l).await;
            return false;
        };
        self.changed_dir_later(dir, Timespec::now());
        if full {
            self.send_lease(&l).await;
        }
        true
    }

    /// Before an operation on the name `p` that the lease does not answer: what is queued
    /// in its directory is flushed, and the name is no longer answered from the lease.
    pub(crate) async fn settle_name(&self, p: &str) {
        if !self.0.leases.any() {
            return;
        }
        let Some((dir, name)) = path::split(p) else {
            return;
        };
        let Some(l) = self.0.leases.get(dir) else {
            return;
        };
        l.state().created.remove(name);
        self.flush_lease(&l).await;
    }

    /// `settle_name` before an operation on the open file at `p` (a size publication, an
    /// append reservation, a lock, set-id clearing): when the file's own deferred create
    /// failed, that failure (ENOSPC on a full device, say) is the operation's error, not the
    /// ENOENT its request would meet.
    pub(crate) async fn settle_open(&self, p: &str) -> Result<(), Errno> {
        self.settle_name(p).await;
        match self.0.leases.take_error(p) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Before an operation on the directory `dir` as a whole (a listing, a removal): what
    /// is queued there is flushed.
    pub(crate) async fn settle_dir(&self, dir: &str) {
        if !self.0.leases.any() {
            return;
        }
        if let Some(l) = self.0.leases.get(dir) {
            self.flush_lease(&l).await;
        }
    }

    /// Flushes every lease (an fsync of everything).
    pub(crate) async fn flush_all_leases(&self) {
        for l in self.0.leases.all() {
            self.flush_lease(&l).await;
        }
    }

    /// A name this client made in `p`'s directory without the lease answering (a mkdir,
    /// a symlink, a create while the lease was being noted): known present.
    pub(crate) fn note_present(&self, p: &str) {
        if let Some((dir, name)) = path::split(p) {
            if let Some(l) = self.0.leases.get(dir) {
                l.state().present.insert(name.to_string());
            }
        }
    }

    /// A name this client removed (or renamed away) without the lease answering: known
    /// absent.
    pub(crate) fn note_absent(&self, p: &str) {
        if let Some((dir, name)) = path::split(p) {
            if let Some(l) = self.0.leases.get(dir) {
                let mut st = l.state();
                st.present.remove(name);
                st.created.remove(name);
            }
        }
    }

    /// A file this client created in `p`'s directory without a lease: after
    /// `lease_after_creates` of them, it asks for one.
    pub(crate) async fn created_without_lease(&self, p: &str) {
        let leases = &self.0.leases;
        if !leases.on() {
            return;
        }
        let Some((dir, _)) = path::split(p) else {
            return;
        };
        if leases.get(dir).is_none() && leases.count_create(dir) {
            self.acquire_lease(dir).await;
        }
    }

    /// Whether operations of the lease on `p`'s directory are queued, or one on `p`
    /// failed (a close has work then).
    pub(crate) fn lease_pending(&self, p: &str) -> bool {
        let Some((dir, _)) = path::split(p) else {
            return false;
        };
        self.0
            .leases
            .get(dir)
            .is_some_and(|l| l.state().queued > 0 || l.state().returning)
    }

    /// At the close of the file at `p`: what is queued in its directory is sent (on its
    /// connections, without waiting for the replies); an earlier failure of a deferred
    /// operation on `p` is its error.
    pub(crate) async fn close_leased(&self, p: &str) -> Result<(), Errno> {
        if !self.0.leases.any() {
            return Ok(());
        }
        if let Some((dir, _)) = path::split(p) {
            if let Some(l) = self.0.leases.get(dir) {
                self.send_lease(&l).await;
            }
        }
        match self.0.leases.take_error(p) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// At an fsync of the file at `p`: what is queued in its directory is flushed; an
    /// earlier failure of a deferred operation on `p` is its error.
    pub(crate) async fn fsync_leased(&self, p: &str) -> Result<(), Errno> {
        if !self.0.leases.any() {
            return Ok(());
        }
        if let Some((dir, _)) = path::split(p) {
            self.settle_dir(dir).await;
        }
        match self.0.leases.take_error(p) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// `settle_name` for a path as the caller gave it.
    pub(crate) async fn settle_path(&self, p: &str) {
        if !self.0.leases.any() {
            return;
        }
        if let Ok(p) = self.norm(p) {
            self.settle_name(&p).await;
        }
    }

    /// Before a rename of `from` to `to`: both names settled, the leases on `from` (a
    /// directory) and below it given back, and those on `to` too (it may be replaced).
    pub(crate) async fn settle_rename(&self, from: &str, to: &str) {
        if !self.0.leases.any() {
            return;
        }
        let (Ok(from), Ok(to)) = (self.norm(from), self.norm(to)) else {
            return;
        };
        self.settle_name(&from).await;
        self.settle_name(&to).await;
        self.give_back_within(&from).await;
        self.give_back_within(&to).await;
    }

    /// After a rename of `from` to `to`: `from` absent, `to` present.
    pub(crate) fn renamed_leased(&self, from: &str, to: &str) {
        if !self.0.leases.any() {
            return;
        }
        if let (Ok(from), Ok(to)) = (self.norm(from), self.norm(to)) {
            self.note_absent(&from);
            self.note_present(&to);
        }
    }

    /// After a name was made outside the lease's own creates (a hard link): present.
    pub(crate) fn made_leased(&self, p: &str) {
        if !self.0.leases.any() {
            return;
        }
        if let Ok(p) = self.norm(p) {
            self.note_present(&p);
        }
    }

    pub(super) fn give_back_later(&self, l: &Arc<DirLease>) {
        let (client, l) = (self.client(), Arc::clone(l));
        tokio::spawn(async move { client.ns().give_back(&l).await });
    }
}
