//! What an open file asks of the owner of its name: the check of a linked file against its
//! backend copy at open, the atime after a read, the offset an append reserves, a size an
//! allocation reached.

use crate::namespace::Namespace;
use crate::{Errno, File, FileKind, Inode};
use eddy_config::Atime;
use eddy_proto::{req, Revalidated};
use std::sync::atomic::Ordering;

impl Namespace<'_> {
    /// On open of a file under a linked prefix: checks it against its backend copy (a changed
    /// clean file gets a new generation, whose old chunks are dropped) and, for writing,
    /// marks it dirty. Other entries are returned as they are. True when a new generation
    /// was taken.
    pub(crate) async fn validate_linked(
        &self,
        p: &str,
        i: Inode,
        flags: i32,
    ) -> Result<(Inode, bool), Errno> {
        if i.kind != FileKind::File || i.tier.is_none() {
            return Ok((i, false));
        }
        let for_write = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        let req = req::Validate {
            path: p.to_string(),
            for_write,
        };
        let epoch = self.0.sizes.epoch();
        let Revalidated { inode, dropped } = self.meta(p, req).await?;
        let renewed = dropped.is_some();
        if let Some((old, size)) = dropped {
            self.0.sizes.forget(old);
            if let Err(e) = self.data().drop_data(old, size).await {
                tracing::warn!(path = p, "chunks of a stale generation stay: {e}");
            }
        }
        let inode = match self.merge_pending(inode, epoch) {
            (i, true) => i,
            _ => self.stat_raw(p).await?,
        };
        Ok((inode, renewed))
    }

    /// After a read through `f`: moves the file's atime when the rule says so (`atime_due`,
    /// or the first read of a handle that may have written), with one metadata request; the
    /// owner decides again under the entry's lock. Under relatime a handle asks once. Also
    /// called by the mount at the open of a handle the kernel reads through itself (FUSE
    /// passthrough) when `atime_due`. A failure is logged: the read itself succeeded.
    pub async fn note_read(&self, f: &File) {
        if !self.atime_rule(f, true) {
            return;
        }
        let rule = self.config().atime;
        if rule == Atime::Relatime && f.0.atime_checked.swap(true, Ordering::AcqRel) {
            return;
        }
        self.settle_name(&f.path()).await;
        let req = req::Accessed {
            path: f.path().to_string(),
            time: eddy_proto::Timespec::now(),
            strict: rule == Atime::Strictatime,
        };
        if let Err(e) = self.meta(&f.path(), req).await {
            tracing::debug!(path = &*f.path(), "cannot move the atime after a read: {e}");
        }
    }

    /// Reserves `len` bytes at the end of the file open for appending through `f` (at the
    /// owner, atomically): the offset to write them at.
    pub(crate) async fn reserve_append(&self, f: &File, len: u64) -> Result<u64, Errno> {
        // Its create may still be queued under a lease: it goes first.
        self.settle_open(&f.path()).await?;
        let req = req::ReserveAppend {
            path: f.path().to_string(),
            len,
        };
        Ok(self.meta(&f.path(), req).await?.0)
    }

    /// Tells the owner of `path` that its file reaches `size` bytes (merged there with max),
    /// leaving the size cache alone (`send_size` settles it).
    pub(crate) async fn grow_size(&self, path: &str, size: u64) -> Result<(), Errno> {
        self.settle_open(path).await?;
        let req = req::GrowSize {
            path: path.to_string(),
            size,
        };
        self.meta(path, req).await.map(|_| ())
    }
}
