//! Lookups that every operation starts from: the root and the linked prefixes made sure of,
//! an entry's inode with this client's unpublished writes counted (the directories on the way
//! go through the cache of recent ones first: `Client::dir_inode`), ENOENT refined to
//! ENOTDIR, the parent a new entry goes into, and the publication of a size this client's
//! writes reached.

use crate::namespace::Namespace;
use crate::perm::Creds;
use crate::{new_inode, Errno, FileId, FileKind, Inode};
use eddy_proto::{path, req};

impl Namespace<'_> {
    /// Makes sure the root directory exists, and that every linked prefix is an entry of
    /// the namespace (its scratch ancestors made, the prefix imported from its backend), so
    /// that listings show the links.
    pub(crate) async fn ensure_root(&self) -> Result<(), Errno> {
        let me = Creds::current();
        let cfg = self.config();
        let creds = Creds::user(
            cfg.root_uid.unwrap_or(me.uid),
            cfg.root_gid.unwrap_or(me.gid),
        );
        let prefixes: Vec<String> = self
            .config()
            .links
            .iter()
            .map(|l| l.prefix.clone())
            .collect();
        let mut dirs = vec!["/".to_string()];
        for prefix in &prefixes {
            let mut ancestors = Vec::new();
            let mut cur = prefix.as_str();
            while let Some((parent, _)) = path::split(cur) {
                ancestors.push(parent.to_string());
                cur = parent;
            }
            dirs.extend(ancestors.into_iter().rev().skip(1));
        }
        // The root and the scratch directories above linked prefixes are as closed as
        // `root_mode` says (0700 by default, decision 0023): on a mount every user of the
        // node can reach, they are the gate to the whole namespace.
        let mode = cfg.root_mode.0 & 0o7777;
        for dir in dirs {
            let inode = new_inode(FileKind::Dir, mode, creds, None);
            let req = req::Create {
                path: dir.clone(),
                inode,
                exclusive: false,
            };
            self.meta(&dir, req).await?;
        }
        for prefix in prefixes {
            self.stat_raw(&prefix).await.map_err(|e| {
                Errno::new(
                    e.errno,
                    format!("linked prefix {prefix}: its backend directory: {e}"),
                )
            })?;
        }
        Ok(())
    }

    pub(crate) async fn stat_norm(&self, path: &str) -> Result<Inode, Errno> {
        if let Some(answer) = self.lease_answer(path) {
            return answer;
        }
        match self.stat_raw(path).await {
            Err(e) if e.errno == libc::ENOENT => Err(self.refine_enoent(path, e).await),
            other => other,
        }
    }

    /// Asks the owner for an entry and adds this client's unpublished writes to a file's
    /// size (see `merge_pending`), asking again while a publication ends in between.
    pub(crate) async fn stat_raw(&self, path: &str) -> Result<Inode, Errno> {
        if let Some(answer) = self.lease_answer(path) {
            return answer;
        }
        const TRIES: usize = 4;
        let mut tries = 0;
        loop {
            let epoch = self.0.sizes.epoch();
            let req = req::Stat {
                path: path.to_string(),
            };
            let i = self.meta(path, req).await?;
            tries += 1;
            let (i, settled) = self.merge_pending(i, epoch);
            if settled || tries == TRIES {
                return Ok(self.with_dir_times(path, i));
            }
        }
    }

    /// Sends a size to the file's owner (merged there with max) and settles the size cache:
    /// acknowledged, or pending again on failure.
    pub(crate) async fn send_size(
        &self,
        file_id: FileId,
        path: &str,
        size: u64,
    ) -> Result<(), Errno> {
        // Its create may still be queued under a lease: it goes first.
        let res = match self.settle_open(path).await {
            Ok(()) => {
                let req = req::GrowSize {
                    path: path.to_string(),
                    size,
                };
                self.meta(path, req).await
            }
            Err(e) => Err(e),
        };
        self.0.sizes.done(file_id, size, res.is_ok());
        res.map(|_| ())
    }

    /// Turns ENOENT into ENOTDIR when an ancestor is not a directory, as POSIX wants.
    pub(crate) async fn refine_enoent(&self, path: &str, e: Errno) -> Errno {
        let mut cur = path;
        while let Some((parent, _)) = path::split(cur) {
            if let Ok(i) = self
                .meta(
                    parent,
                    req::Stat {
                        path: parent.to_string(),
                    },
                )
                .await
            {
                if i.kind != FileKind::Dir {
                    return Errno::new(libc::ENOTDIR, format!("{parent} is not a directory"));
                }
                return e;
            }
            cur = parent;
        }
        e
    }

    /// Checks that the parent of `path` is a directory the caller may add entries to (see
    /// `parent_dir`).
    pub(crate) async fn check_parent(&self, path: &str, creds: Creds) -> Result<(), Errno> {
        self.parent_dir(path, creds).await.map(|_| ())
    }
}
