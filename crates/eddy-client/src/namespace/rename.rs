//! rename(2), and how a directory rename survives the death of its client or of a daemon in
//! the middle (decision 0010).
//!
//! A file, symlink or special file is renamed by inserting the new entry, then removing the
//! old one: never split. A directory's subtree moves entry by entry across every daemon, so
//! the rename is first recorded as an intent at the owner of the old path (durable before
//! anything moves, held by this client's connection), and cleared once everything moved.
//! Every step after the intent is idempotent, so whoever finds an intent unfinished completes
//! it by running them again (roll forward): `Client::connect`, a client whose connection to a
//! daemon was re-established (that daemon restarted), and a retry of the rename.

use crate::namespace::Namespace;
use crate::paging::{moved, Pages};
use crate::{Creds, Errno, FileKind, Inode, Timespec};
use eddy_proto::path;
use eddy_proto::sync::lock;
use eddy_proto::{req, RemoveKind, RenameIntent, SubtreePage};
use futures::future::join_all;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// This client's share of directory renames: those under way here, those it left
/// unfinished, and the pass completing unfinished renames found on the daemons.
#[derive(Default)]
pub(crate) struct Renames {
    /// Old paths of the directory renames this client is running (its own or completions).
    active: Mutex<HashSet<String>>,
    /// Renames of this client that stopped half-way, by old path: a retry completes them.
    left: Mutex<HashMap<String, RenameIntent>>,
    /// One completion pass at a time; `again` asks the running one for another round.
    pass: tokio::sync::Mutex<()>,
    again: AtomicBool,
}

impl Renames {
    /// Marks `from` as under way in this client until the guard drops; EBUSY if it is already.
    fn enter(&self, from: &str) -> Result<Active<'_>, Errno> {
        if !lock(&self.active).insert(from.to_string()) {
            return Err(Errno::new(
                libc::EBUSY,
                format!("{from} is being renamed already"),
            ));
        }
        Ok(Active {
            renames: self,
            from: from.to_string(),
        })
    }

    /// Whether this client left the rename of `from` unfinished.
    fn is_left(&self, from: &str) -> bool {
        lock(&self.left).contains_key(from)
    }

    /// Takes the unfinished rename of `from` this client left, if any.
    fn take_left(&self, from: &str) -> Option<RenameIntent> {
        lock(&self.left).remove(from)
    }

    /// Notes a rename of this client that stopped half-way (a retry completes it).
    fn leave(&self, it: RenameIntent) {
        lock(&self.left).insert(it.from.clone(), it);
    }

    /// Asks for a round of completion (the running pass, or the next, goes round again).
    fn ask_round(&self) {
        self.again.store(true, Ordering::SeqCst);
    }

    /// The completion pass, unless one runs already (then it does the rounds asked for).
    fn try_pass(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        self.pass.try_lock().ok()
    }

    /// Whether the running pass was asked for another round (and takes that request).
    fn another_round(&self) -> bool {
        self.again.swap(false, Ordering::SeqCst)
    }

    /// Whether a pass was asked for after the last round (the caller passes again).
    fn asked_again(&self) -> bool {
        self.again.load(Ordering::SeqCst)
    }
}

/// A directory rename under way in this client.
struct Active<'a> {
    renames: &'a Renames,
    from: String,
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        lock(&self.renames.active).remove(&self.from);
    }
}

/// Why the steps of a directory rename stopped.
enum Stop {
    /// The backend refused the rename of a linked directory: nothing moved, and the intent
    /// is gone (rolled back).
    Undone(Errno),
    /// A step failed: the intent stays for whoever completes it.
    Left(Errno),
}

impl Namespace<'_> {
    /// rename(2): files, symlinks and directories. A file replaces a file; a directory
    /// replaces an empty directory. Atomic for files as seen by readers: the new name exists
    /// before the old one goes. Data never moves (it is named by file id). A directory rename
    /// that stops half-way (EIO) is completed later, never left split (decision 0010).
    /// rename(2). A file a handle of this client holds open at `to` lives on under a hidden
    /// name until the last of them is closed, and the handles open at or below `from` follow
    /// the rename (`held`, decision 0061).
    pub async fn rename(&self, from: &str, to: &str, creds: Creds) -> Result<(), Errno> {
        let res = self.rename_open(from, to, creds).await;
        // A stat that crossed the rename is not kept either (decision 0050).
        for p in [from, to] {
            if let Ok(p) = self.norm(p) {
                self.0.dircache.forget_tree(&p);
            }
        }
        res
    }

    async fn rename_open(&self, from: &str, to: &str, creds: Creds) -> Result<(), Errno> {
        let (from, to) = (self.norm(from)?, self.norm(to)?);
        if from == to {
            return self.rename_norm(&from, &to, creds).await;
        }
        let hidden = self.keep_replaced(&from, &to, creds).await?;
        if let Err(e) = self.rename_norm(&from, &to, creds).await {
            if let Some(h) = hidden {
                // The replaced file gets its name back (best effort).
                self.unhide(&h, &to).await;
            }
            return Err(e);
        }
        self.follow_rename(&from, &to);
        Ok(())
    }

    pub(crate) async fn rename_norm(
        &self,
        from: &str,
        to: &str,
        creds: Creds,
    ) -> Result<(), Errno> {
        let from = self.norm(from)?;
        let to = self.norm(to)?;
        if from == "/" || to == "/" {
            return Err(Errno::new(libc::EBUSY, "cannot rename the root directory"));
        }
        // Both names change meaning (a directory moves, or one is replaced).
        self.0.dircache.forget_tree(&from);
        self.0.dircache.forget_tree(&to);
        if from == to {
            self.stat_norm(&from).await?;
            return Ok(());
        }
        if path::is_within(&to, &from) {
            return Err(Errno::einval(format!(
                "cannot move {from} into itself ({to})"
            )));
        }
        if self.retried(&from, &to).await? {
            return Ok(());
        }
        // A linked file moving to one of Eddy's hidden names (the mount's file unlinked while
        // open) leaves the backend tier (`detach`); anything else crossing a tier is EXDEV.
        let detaching = self.detaches(&from, &to);
        let linked = !detaching && self.same_tier(&from, &to)?;
        let src = self.stat_norm(&from).await?;
        if detaching && src.kind == FileKind::Dir {
            return Err(Errno::new(
                libc::EXDEV,
                format!("{to}: a hidden name of Eddy's own is not for a directory"),
            ));
        }
        self.check_parent(&to, creds).await?;
        let dst = match self.stat_norm(&to).await {
            Ok(i) => Some(i),
            Err(e) if e.errno == libc::ENOENT => None,
            Err(e) => return Err(e),
        };
        self.check_rename((&from, &src), (&to, dst.as_ref()), creds)
            .await?;
        if let Some(d) = &dst {
            if src.shared.is_some() && d.file_id == src.file_id {
                // Two names of one file: POSIX says rename does nothing.
                return Ok(());
            }
            match (src.kind == FileKind::Dir, d.kind == FileKind::Dir) {
                (true, false) => {
                    return Err(Errno::new(
                        libc::ENOTDIR,
                        format!("{to} is not a directory"),
                    ))
                }
                (false, true) => {
                    return Err(Errno::new(libc::EISDIR, format!("{to} is a directory")))
                }
                (true, true) => self.ensure_empty(&to).await?,
                (false, false) => {}
            }
        }
        let moving = async {
            if src.kind == FileKind::Dir {
                self.rename_dir(&from, &to, src.clone()).await
            } else if detaching {
                // Boxed: the rare path's future (a whole stage-in) would otherwise enlarge
                // every rename's, on the caller's stack in a debug build.
                Box::pin(self.detach(&from, &to, &src)).await
            } else {
                self.rename_entry(&from, &to, &src, linked).await
            }
        };
        self.changing_parents(&[&from, &to], moving).await?;
        if src.kind == FileKind::Dir {
            // The directory's ".." moves to its new parent, where it replaced a directory or
            // not.
            let replaced = dst.as_ref().is_some_and(|d| d.kind == FileKind::Dir);
            if path::split(&from).map(|s| s.0) != path::split(&to).map(|s| s.0) {
                let arrived = if replaced { 0 } else { 1 };
                self.count_subdirs(&[(&from, -1), (&to, arrived)]).await;
            } else if replaced {
                self.count_subdirs(&[(&to, -1)]).await;
            }
        }
        if let Some(d) = dst {
            if d.kind != FileKind::Dir && d.file_id != src.file_id {
                // Its name now names the moved file: no write-back is rebound to it.
                self.release_name(None, &d).await?;
            }
        }
        Ok(())
    }

    /// Renames anything but a directory: the new entry, then the old one goes.
    async fn rename_entry(
        &self,
        from: &str,
        to: &str,
        src: &Inode,
        linked: bool,
    ) -> Result<(), Errno> {
        if linked {
            // Write-through first: if the backend refuses, nothing has moved.
            self.meta(from, backend_rename(from, to)).await?;
        }
        let mut moved = src.clone();
        moved.ctime = Timespec::now();
        if linked && !self.config().backends.is_empty() {
            // Its new name may place it on another backend of the link (decision 0073).
            let dir = match path::split(to) {
                Some((dir, _)) => self.stat_norm(dir).await.ok(),
                None => None,
            };
            crate::data::locality::retarget_backend(self.config(), dir.as_ref(), to, &mut moved);
        }
        self.meta(to, insert(to, moved, true)).await?;
        self.meta(from, remove_any(from)).await?;
        if linked {
            self.rebind(from, to).await?;
        }
        Ok(())
    }

    /// Moves a linked file to one of Eddy's hidden names (`eddy_config::HIDDEN_ORPHAN`),
    /// which the backend never sees: the file's data is fetched whole and pinned (its backend
    /// copy is about to go), the new entry is written without tier state, the old one is
    /// removed (the backend copy with it, as an unlink does), and then the daemons forget
    /// the file's tier records, so that nothing of it is written back or evicted. A crash
    /// before the last step leaves the hidden entry (as any crash of the mount does) and
    /// dirty chunks a later stage-out writes back under the old name; never a hidden name.
    /// A name of a file with other names keeps the data where those names are.
    async fn detach(&self, from: &str, to: &str, src: &Inode) -> Result<(), Errno> {
        let alone = src.shared.is_none();
        if alone {
            self.data().stage_in_file(from, true).await?;
        }
        let mut moved = src.clone();
        moved.ctime = Timespec::now();
        moved.tier = None;
        self.meta(to, insert(to, moved, true)).await?;
        let unlink = req::Remove {
            path: from.to_string(),
            kind: RemoveKind::NotDir,
        };
        self.meta(from, unlink).await?;
        if alone {
            self.rebind(from, to).await?;
        }
        Ok(())
    }

    /// Renames a directory: records the intent at the owner of `from`, then completes it.
    async fn rename_dir(&self, from: &str, to: &str, src: Inode) -> Result<(), Errno> {
        let _active = self.0.renames.enter(from)?;
        let intent = RenameIntent {
            from: from.to_string(),
            to: to.to_string(),
            dir_id: src.file_id,
        };
        // Twice at most: an intent found there that is only a leftover of a completed rename
        // is ended by the first round.
        for _ in 0..2 {
            let begin = req::BeginRename {
                from: from.to_string(),
                to: to.to_string(),
                dir_id: src.file_id,
            };
            let found = match self.meta(from, begin).await {
                Ok(found) => found,
                // No answer: the intent may be recorded, held by this connection.
                Err(e) if e.errno == libc::EIO => return Err(self.leave(&intent, e).await),
                Err(e) => return Err(e),
            };
            if found.is_empty() {
                return self.finish(&intent, Some(src)).await;
            }
            // A rename of `from` that a dead or failed client left unfinished was recorded
            // first: it is the one that happens.
            for earlier in &found {
                self.finish(earlier, None).await?;
            }
            if let Some(e) = found.iter().find(|e| e.dir_id == src.file_id) {
                if e.to == to {
                    return Ok(());
                }
                return Err(Errno::enoent(format!(
                    "{from}: an unfinished rename of it to {} came first and is now complete",
                    e.to
                )));
            }
        }
        Err(Errno::new(
            libc::EBUSY,
            format!("{from}: its rename could not be recorded; try again"),
        ))
    }

    /// A retry of a directory rename this client left unfinished completes that one first;
    /// true when it was this very rename, which is then done.
    async fn retried(&self, from: &str, to: &str) -> Result<bool, Errno> {
        if !self.0.renames.is_left(from) {
            return Ok(false);
        }
        let _active = self.0.renames.enter(from)?;
        let Some(earlier) = self.0.renames.take_left(from) else {
            return Ok(false);
        };
        let claim = req::ClaimRenames {
            from: Some(from.to_string()),
            limit: 1,
        };
        let claimed = match self.meta(from, claim).await {
            Ok(v) => v,
            Err(e) => {
                self.0.renames.leave(earlier);
                return Err(e);
            }
        };
        // Empty when another client completed it meanwhile.
        for it in &claimed {
            self.finish(it, None).await?;
        }
        // This very rename is done once its directory has left `from`.
        let gone = matches!(self.meta(from, stat(from)).await, Err(e) if e.errno == libc::ENOENT);
        Ok(earlier.to == to && gone)
    }

    /// Runs the steps of a recorded directory rename; when one fails, the intent is left for
    /// whoever completes it and the error is EIO, naming the step.
    async fn finish(&self, it: &RenameIntent, src: Option<Inode>) -> Result<(), Errno> {
        match self.complete(it, src).await {
            Ok(()) => Ok(()),
            Err(Stop::Undone(e)) => Err(e),
            Err(Stop::Left(e)) => Err(self.leave(it, e).await),
        }
    }

    /// The steps of a directory rename after its intent, each idempotent, so that running
    /// them again completes a rename stopped anywhere: the backend's rename (linked), the new
    /// directory entry, the subtree, the old entry, the dirty records (linked), the intent.
    /// `src` is the directory as the renamer saw it; `None` looks at what is at `from` now.
    async fn complete(&self, it: &RenameIntent, src: Option<Inode>) -> Result<(), Stop> {
        let (from, to) = (it.from.as_str(), it.to.as_str());
        let linked = self.same_tier(from, to).map_err(Stop::Left)?;
        let dir = match src {
            Some(i) => Some(i),
            None => match self.meta(from, stat(from)).await {
                Ok(i) if i.kind == FileKind::Dir && i.file_id == it.dir_id => Some(i),
                // Another entry at `from` was made after the old directory went (the last move):
                // only the intent was left.
                Ok(_) => return self.end_intent(it).await,
                Err(e) if e.errno == libc::ENOENT => None,
                Err(e) => return Err(Stop::Left(e)),
            },
        };
        if dir.is_some() && linked {
            // Write-through first. A refusal means the backend kept the old name; metadata
            // moves only after the backend's rename, so nothing has moved: roll back. No
            // answer (EIO) leaves the outcome open: roll forward later.
            if let Err(e) = self.meta(from, backend_rename(from, to)).await {
                if e.errno == libc::EIO {
                    return Err(Stop::Left(e));
                }
                return match self.meta(from, end_rename(it)).await {
                    Ok(_) => Err(Stop::Undone(e)),
                    Err(end) => Err(Stop::Left(Errno::new(
                        e.errno,
                        format!("{e}; then undoing the rename: {end}"),
                    ))),
                };
            }
        }
        if let Some(mut moved) = dir.clone() {
            moved.ctime = Timespec::now();
            self.meta(to, insert(to, moved, true))
                .await
                .map_err(Stop::Left)?;
        }
        self.move_subtree(from, to).await.map_err(Stop::Left)?;
        if dir.is_some() {
            match self.meta(from, remove_any(from)).await {
                Ok(_) => {}
                Err(e) if e.errno == libc::ENOENT => {}
                Err(e) => return Err(Stop::Left(e)),
            }
        }
        if linked {
            self.rebind(from, to).await.map_err(Stop::Left)?;
        }
        self.end_intent(it).await
    }

    /// Clears a completed rename's intent. If its owner does not answer, the rename is done
    /// all the same: the intent stays, and completing it again later changes nothing.
    async fn end_intent(&self, it: &RenameIntent) -> Result<(), Stop> {
        if let Err(e) = self.meta(&it.from, end_rename(it)).await {
            tracing::warn!(from = %it.from, to = %it.to, "directory renamed, but its intent stays: {e}");
            self.release(it).await;
        }
        Ok(())
    }

    /// Gives up this client's hold on an unfinished rename, so that the next client to
    /// connect completes it (or a retry here); returns the error for the caller.
    async fn leave(&self, it: &RenameIntent, cause: Errno) -> Errno {
        self.0.renames.leave(it.clone());
        self.release(it).await;
        Errno::eio(format!(
            "rename of {} to {} stopped half-way: {cause}; it is completed by the next client \
             that connects, or by retrying it",
            it.from, it.to
        ))
    }

    /// Releases this client's hold on an intent. If its owner does not answer, the
    /// connection to it is dropped: the owner frees the intent when it reads again, and this
    /// client's next request to it reconnects, which makes it complete unfinished renames.
    async fn release(&self, it: &RenameIntent) {
        let req = req::ReleaseRename {
            from: it.from.clone(),
        };
        if self.meta(&it.from, req).await.is_err() {
            self.rpc()
                .drop_connection(self.rpc().placement().meta_owner(&it.from))
                .await;
        }
    }

    /// Completes the directory renames left unfinished on the daemons (their client died or
    /// gave up, or a daemon restarted under them). Best effort: what cannot be completed now
    /// is logged and left for the next client. One pass at a time; asked again while one
    /// runs, that one goes round once more.
    pub(crate) async fn complete_unfinished_renames(&self) {
        let r = &self.0.renames;
        r.ask_round();
        loop {
            {
                let Some(_pass) = r.try_pass() else {
                    return;
                };
                while r.another_round() {
                    self.completion_round().await;
                }
            }
            // Asked again between the last round and the end of the pass.
            if !r.asked_again() {
                return;
            }
        }
    }

    /// The same, in the background (a connection to a daemon was re-established).
    pub(crate) fn complete_unfinished_renames_later(&self) {
        let client = self.client();
        tokio::spawn(async move { client.ns().complete_unfinished_renames().await });
    }

    /// Takes over every unfinished rename no client holds, on every daemon, and completes
    /// them, inner ones first: a rename of a directory inside another's old tree completes
    /// before the outer one moves what is left there.
    async fn completion_round(&self) {
        let limit = self.config().readdir_page.max(1);
        let max = self.config().max_paged_entries;
        let ids = self.rpc().ids();
        let claims = ids.iter().map(|&id| async move {
            let mut out = Vec::new();
            // Each page claims renames no page claimed before (a claim is taken), within the
            // bound on a daemon's pages (decision 0056).
            let mut claimed: HashSet<String> = HashSet::new();
            let mut pages = Pages::new("unfinished renames", id, max);
            loop {
                let req = req::ClaimRenames { from: None, limit };
                match self.rpc().call(id, req).await {
                    Ok(v) => {
                        let full = v.len() >= limit as usize;
                        let mut new = true;
                        for it in &v {
                            new &= claimed.insert(it.from.clone());
                        }
                        if let Err(e) = pages.take(v.len(), limit, full, new) {
                            tracing::warn!(daemon = id, "cannot look for unfinished renames: {e}");
                            break;
                        }
                        out.extend(v);
                        if !full {
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(daemon = id, "cannot look for unfinished renames: {e}");
                        break;
                    }
                }
            }
            out
        });
        let mut found: Vec<RenameIntent> = join_all(claims).await.into_iter().flatten().collect();
        found.sort_by_key(|it| std::cmp::Reverse(it.from.matches('/').count()));
        for it in found {
            // A rename this client runs itself: taking it over kept it held; it ends it.
            let Ok(_active) = self.0.renames.enter(&it.from) else {
                continue;
            };
            match self.complete(&it, None).await {
                Ok(()) => {
                    self.0.renames.take_left(&it.from);
                    tracing::info!(from = %it.from, to = %it.to, "completed an unfinished directory rename");
                }
                Err(Stop::Undone(e)) => {
                    self.0.renames.take_left(&it.from);
                    tracing::warn!(from = %it.from, to = %it.to, "undid an unfinished directory rename: the backend refused it: {e}");
                }
                Err(Stop::Left(e)) => {
                    self.release(&it).await;
                    tracing::warn!(from = %it.from, to = %it.to, "cannot complete an unfinished directory rename now; left for the next client: {e}");
                }
            }
        }
    }

    /// Whether `to` is one of Eddy's hidden names in a directory of the linked prefix that
    /// `from` lies under.
    fn detaches(&self, from: &str, to: &str) -> bool {
        let cfg = self.config();
        let Some((parent, name)) = path::split(to) else {
            return false;
        };
        let link = cfg.link_for(from);
        eddy_config::is_hidden_orphan(name) && link.is_some() && link == cfg.link_for(parent)
    }

    /// Whether a rename (or a link) stays within one linked prefix (true) or within the
    /// scratch namespace (false); across a link's boundary it is EXDEV, as between two file
    /// systems (`mv` then copies).
    pub(crate) fn same_tier(&self, from: &str, to: &str) -> Result<bool, Errno> {
        let cfg = self.config();
        match (cfg.link_for(from), cfg.link_for(to)) {
            (None, None) => Ok(false),
            (Some(a), Some(b)) if a == b => Ok(true),
            _ => Err(Errno::new(
                libc::EXDEV,
                format!("{from} and {to} lie in different tiers (linked backends or scratch)"),
            )),
        }
    }

    /// The daemons holding dirty chunks of files under `from` write them back under `to`.
    pub(crate) async fn rebind(&self, from: &str, to: &str) -> Result<(), Errno> {
        self.rpc()
            .all_ok(|| req::Rebind {
                from: from.to_string(),
                to: to.to_string(),
            })
            .await
            .map(|_| ())
    }

    /// Re-inserts every entry below `from` under `to`, then removes the old entries. Run
    /// again, it moves what is left: an entry found moved already (same id at its new name)
    /// is kept, and an old entry found gone already is fine.
    pub(crate) async fn move_subtree(&self, from: &str, to: &str) -> Result<(), Errno> {
        self.0.dircache.forget_tree(from);
        self.0.dircache.forget_tree(to);
        let page = self.config().readdir_page;
        let mut old_paths = Vec::new();
        let max = self.config().max_paged_entries;
        for &id in self.rpc().placement().ids() {
            let mut after: Option<String> = None;
            let mut pages = Pages::new(format!("the subtree of {from}"), id, max);
            loop {
                let req = req::ListSubtree {
                    dir: from.to_string(),
                    after: after.clone(),
                    limit: page,
                };
                let SubtreePage { entries, more } = self.rpc().call(id, req).await?;
                // The daemon pages in key order (`parent \0 name`), not in path order.
                let key = |p: &String| path::meta_key(p);
                let last = entries.last().map(|e| key(&e.path));
                let moved_on = moved(after.as_ref().map(key).as_ref(), last.as_ref());
                pages.take(entries.len(), page, more, moved_on)?;
                let mut moves = Vec::with_capacity(entries.len());
                for e in &entries {
                    // Strictly below `from`, or the daemon's listing is not of that subtree.
                    match e
                        .path
                        .strip_prefix(from)
                        .filter(|rest| rest.starts_with('/'))
                    {
                        Some(rest) => moves.push((format!("{to}{rest}"), &e.inode)),
                        None => {
                            return Err(Errno::eio(format!(
                                "daemon {id} listed {} as below {from}",
                                e.path
                            )))
                        }
                    }
                }
                let inserts = moves.iter().map(|(new_path, inode)| async move {
                    self.insert_moved(new_path, inode).await
                });
                for r in join_all(inserts).await {
                    r?;
                }
                after = entries.last().map(|e| e.path.clone());
                old_paths.extend(entries.into_iter().map(|e| e.path));
                if !more || after.is_none() {
                    break;
                }
            }
        }
        // Deepest first, so no directory is ever left without its parent.
        old_paths.sort_by_key(|p| std::cmp::Reverse(p.len()));
        let removes = old_paths.iter().map(|p| async move {
            match self.meta(p, remove_any(p)).await {
                Err(e) if e.errno != libc::ENOENT => Err(e),
                _ => Ok(()),
            }
        });
        for r in join_all(removes).await {
            r?;
        }
        Ok(())
    }

    /// Inserts a moved entry at its new path. Whatever else is there is replaced (an entry
    /// orphaned by an earlier race), but not the same entry moved already, which may have
    /// changed since.
    async fn insert_moved(&self, new_path: &str, inode: &Inode) -> Result<(), Errno> {
        match self
            .meta(new_path, insert(new_path, inode.clone(), false))
            .await
        {
            Err(e) if e.errno == libc::EEXIST => {}
            other => return other.map(|_| ()),
        }
        match self.meta(new_path, stat(new_path)).await {
            Ok(there) if there.file_id == inode.file_id => Ok(()),
            _ => self
                .meta(new_path, insert(new_path, inode.clone(), true))
                .await
                .map(|_| ()),
        }
    }
}

fn stat(p: &str) -> req::Stat {
    req::Stat {
        path: p.to_string(),
    }
}

fn insert(p: &str, inode: Inode, replace: bool) -> req::Insert {
    req::Insert {
        path: p.to_string(),
        inode,
        replace,
    }
}

fn remove_any(p: &str) -> req::Remove {
    req::Remove {
        path: p.to_string(),
        kind: RemoveKind::Any,
    }
}

fn backend_rename(from: &str, to: &str) -> req::BackendRename {
    req::BackendRename {
        from: from.to_string(),
        to: to.to_string(),
    }
}

fn end_rename(it: &RenameIntent) -> req::EndRename {
    req::EndRename {
        from: it.from.clone(),
        to: it.to.clone(),
    }
}
