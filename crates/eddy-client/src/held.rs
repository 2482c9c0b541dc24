//! The files this client holds open, for every front-end (the mount, the preload library, the
//! library used directly; decision 0061): an open file follows the renames done through this
//! client (its handles reach its metadata by path), and a file unlinked or replaced by a
//! rename while one of its handles is open lives on under a hidden name in its directory
//! (`eddy_config::HIDDEN_ORPHAN`, left out of listings), as NFS clients do, until the last of
//! those handles is closed; its data is freed then. What other clients do is not seen here: a
//! file unlinked or replaced on another node is gone for this one's handles.

use crate::file::FileInner;
use crate::{Client, Creds, Errno, File, FileId, FileKind};
use eddy_config::{is_hidden_orphan, HIDDEN_ORPHAN};
use eddy_proto::path;
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, Weak};

/// The handles open now (by their shared state's address; a handle dropped without a close
/// simply stops counting), and the hidden names of files unlinked or replaced while open.
#[derive(Default)]
pub(crate) struct Held(Mutex<State>);

#[derive(Default)]
struct State {
    open: HashMap<usize, Weak<FileInner>>,
    hidden: HashSet<String>,
}

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        eddy_proto::sync::lock(&self.0)
    }

    /// A handle opened now.
    pub fn add(&self, f: &File) {
        let mut st = self.lock();
        st.open.retain(|_, w| w.strong_count() > 0);
        st.open.insert(
            std::sync::Arc::as_ptr(&f.0) as usize,
            std::sync::Arc::downgrade(&f.0),
        );
    }

    /// A handle closed: it no longer keeps a hidden name alive.
    fn remove(&self, f: &File) {
        self.lock()
            .open
            .remove(&(std::sync::Arc::as_ptr(&f.0) as usize));
    }

    /// The handles open now whose path is `p` or, with `below`, lies under it (files only,
    /// without `below`).
    fn open_at(&self, p: &str, below: bool) -> Vec<File> {
        self.lock()
            .open
            .values()
            .filter_map(Weak::upgrade)
            .map(File)
            .filter(|f| below || f.inode_kind() != FileKind::Dir)
            .filter(|f| {
                let fp = f.path();
                *fp == *p || (below && path::is_within(&fp, p))
            })
            .collect()
    }

    /// Whether a handle of this client has the file at `p` open.
    pub fn is_open(&self, p: &str) -> bool {
        !self.open_at(p, false).is_empty()
    }

    fn is_hidden(&self, p: &str) -> bool {
        self.lock().hidden.contains(p)
    }
}

impl Client {
    /// Whether `path` is the hidden name this client gave a file unlinked or replaced while
    /// open (its `st_nlink` then counts one name too many: the hidden one is not a name).
    pub fn unlinked_while_open(&self, path: &str) -> bool {
        self.0.held.is_hidden(path)
    }

    /// An unlink of `p`: when a handle of this client has the file open, the name is hidden
    /// instead of removed (true: nothing more to do).
    pub(crate) async fn hide_if_open(&self, p: &str, creds: Creds) -> Result<bool, Errno> {
        if is_hidden_orphan(path::split(p).map_or(p, |(_, n)| n)) {
            return Ok(false);
        }
        let Some(victim) = self.0.held.open_at(p, false).first().map(File::file_id) else {
            return Ok(false);
        };
        self.hide(p, victim, creds).await.map(|_| true)
    }

    /// A rename of `from` over `to`: when a handle of this client has `to` open and `from` is
    /// not another name of the same file, `to` is hidden first, so that the handles keep
    /// reaching the replaced file. Returns the hidden name it took.
    pub(crate) async fn keep_replaced(
        &self,
        from: &str,
        to: &str,
        creds: Creds,
    ) -> Result<Option<String>, Errno> {
        if is_hidden_orphan(path::split(to).map_or(to, |(_, n)| n)) {
            return Ok(None);
        }
        let Some(victim) = self.0.held.open_at(to, false).first().map(File::file_id) else {
            return Ok(None);
        };
        // Another name of the same file changes nothing; a directory cannot replace a file
        // (the rename says ENOTDIR).
        let source = self.ns().stat_norm(from).await?;
        if source.file_id == victim || source.kind == FileKind::Dir {
            return Ok(None);
        }
        match self.hide(to, victim, creds).await {
            // Removed meanwhile (on another node): nothing left to replace.
            Err(e) if e.errno == libc::ENOENT => Ok(None),
            res => res.map(Some),
        }
    }

    /// Renames `p` to the hidden name of file `id` in the same directory and moves the
    /// handles there; returns that name.
    async fn hide(&self, p: &str, id: FileId, creds: Creds) -> Result<String, Errno> {
        let parent = path::split(p).map_or("/", |(parent, _)| parent);
        let hidden = path::join(parent, &format!("{HIDDEN_ORPHAN}{id:032x}"));
        // Boxed: a rename's future is large, and an unlink or a rename that holds this one
        // inline would carry a second one (a debug build's test thread overflowed its stack).
        Box::pin(self.ns().rename_norm(p, &hidden, creds)).await?;
        self.0.dircache.forget_tree(p);
        self.0.dircache.forget_tree(&hidden);
        self.0.held.lock().hidden.insert(hidden.clone());
        self.follow_rename(p, &hidden);
        Ok(hidden)
    }

    /// Gives a hidden file its name `p` back (a rename over it failed after it was hidden);
    /// best effort.
    pub(crate) async fn unhide(&self, hidden: &str, p: &str) {
        match Box::pin(self.ns().rename_norm(hidden, p, Creds::root())).await {
            Ok(()) => {
                self.0.held.lock().hidden.remove(hidden);
                self.follow_rename(hidden, p);
            }
            Err(e) => tracing::warn!(path = p, "a replaced file keeps its hidden name: {e}"),
        }
    }

    /// Before a truncate or an allocation of file `id`: what any handle of this client wrote
    /// to it directly and has not reported is reported first, each lease's reports in order
    /// (decision 0059). A truncate through one handle then cuts the bytes another handle
    /// wrote past the new size, instead of meeting them in a report after the cut.
    pub(crate) async fn report_every_handle(&self, id: FileId) -> Result<(), Errno> {
        let handles: Vec<File> = {
            let st = self.0.held.lock();
            st.open
                .values()
                .filter_map(Weak::upgrade)
                .map(File)
                .filter(|f| f.file_id() == id)
                .collect()
        };
        for f in handles {
            self.data().direct_report(&f, false).await?;
        }
        Ok(())
    }

    /// After a rename of `from` to `to` through this client: the handles open at or below
    /// `from` now reach their files (their metadata, their pending sizes) at the new path.
    pub(crate) fn follow_rename(&self, from: &str, to: &str) {
        // Hidden names in a directory renamed move with it.
        {
            let mut st = self.0.held.lock();
            let moved: Vec<String> = st
                .hidden
                .iter()
                .filter(|h| path::is_within(h, from))
                .cloned()
                .collect();
            for h in moved {
                st.hidden.remove(&h);
                st.hidden.insert(format!("{to}{}", &h[from.len()..]));
            }
        }
        for f in self.0.held.open_at(from, true) {
            let old = f.path();
            let new = format!("{to}{}", &old[from.len()..]);
            self.0.sizes.moved(f.file_id(), &new);
            f.set_path(new);
        }
    }

    /// The close of a handle: a hidden name no other handle of this client holds open any more
    /// is removed for good (its file's data freed).
    pub(crate) async fn release_held(&self, f: &File) -> Result<(), Errno> {
        self.0.held.remove(f);
        let p = f.path();
        if !self.0.held.is_hidden(&p) || !self.0.held.open_at(&p, false).is_empty() {
            return Ok(());
        }
        self.0.held.lock().hidden.remove(&*p);
        // Nobody else would remove the hidden name (listings leave it out): a failed removal is
        // tried again in the background, as a failed drop of a removed file's data is.
        let (client, p) = (self.clone(), p.to_string());
        crate::data::now_or_in_background(format!("the hidden name {p}"), move || {
            let (client, p) = (client.clone(), p.clone());
            async move {
                match client.ns().unlink_now(&p, Creds::root()).await {
                    // Removed meanwhile (by another node): nothing left.
                    Err(e) if e.errno == libc::ENOENT => Ok(()),
                    res => res,
                }
            }
        })
        .await;
        Ok(())
    }

    /// A handle the front-end lets go without a close (the mount's release of a file with
    /// nothing to flush): it no longer counts as open, though copies of it may live on a
    /// while (a deferred report), so an unlink from now on removes the file at once.
    pub fn let_go(&self, f: &File) {
        self.0.held.remove(f);
    }

    /// Whether the close of `f` must remove a hidden name (`close_has_work`).
    pub(crate) fn holds_hidden(&self, f: &File) -> bool {
        self.0.held.is_hidden(&f.path())
    }
}
