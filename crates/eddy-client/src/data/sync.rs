//! What makes an open file's data durable and lets a handle go: fsync (the size published,
//! then every daemon that took a write through the handle and the file's metadata owners
//! synced; decision 0015), close and flush.

use crate::data::Data;
use crate::{unsynced, Errno, Failure, File};
use eddy_proto::{req, Request};
use futures::future::join_all;

impl Data<'_> {
    /// Makes the file's data and metadata durable: publishes its size, then sends
    /// `Sync{file_id}` to the daemons that acknowledged writes through this handle since its
    /// last fsync, to its metadata owner, and to the daemons holding other unsynced changes
    /// of this client (its entries, sizes, truncates; decision 0015). EIO if one of them
    /// answers on a newer connection than a change it covers (it may have restarted and
    /// lost it). Refused for this client's membership epoch, it is done again under the new
    /// view (what it covers is kept until it succeeds; decision 0081); a change taken by a
    /// daemon that has left since is covered by syncing every member.
    pub async fn fsync(&self, f: &File) -> Result<(), Errno> {
        self.rpc().retry_moved(|| self.fsync_once(f)).await
    }

    async fn fsync_once(&self, f: &File) -> Result<(), Errno> {
        self.direct_report(f, false).await?;
        self.publish_size(f).await?;
        let mut data = f.0.unsynced.take();
        let mut meta = self.0.unsynced.take();
        let mut targets: std::collections::BTreeSet<u32> =
            data.keys().chain(meta.keys()).copied().collect();
        // With R copies: every owner of the file's metadata, and the copies that cannot be
        // reached are left out (up to R-1 of them: the others hold what they missed).
        let meta_owners = self.rpc().meta_owners(&f.path());
        let tolerated = meta_owners.len() - 1;
        targets.extend(meta_owners);
        // A daemon no longer placed on (drained since it took a change: decision 0081)
        // handed what it held to the members: every member is synced instead.
        let members = self.rpc().ids();
        if targets.iter().any(|d| !members.contains(d)) {
            targets.retain(|d| members.contains(d));
            targets.extend(members.iter().copied());
        }
        let file_id = Some(f.file_id());
        let req = Request::Sync(req::Sync { file_id });
        let syncs = targets.iter().map(|&d| self.rpc().send(d, &req));
        let mut answered = std::collections::HashMap::new();
        let mut failed = None;
        let mut unreachable = Vec::new();
        for (&d, r) in targets.iter().zip(join_all(syncs).await) {
            match r {
                Ok((_, generation)) => {
                    answered.insert(d, generation);
                }
                Err(Failure::Unreachable(e)) if tolerated > 0 => unreachable.push((d, e)),
                Err(e) => failed = failed.or(Some(e.into_errno())),
            }
        }
        if unreachable.len() > tolerated {
            failed = failed.or(unreachable.pop().map(|(_, e)| e));
        }
        for (d, _) in &unreachable {
            data.remove(d);
            meta.remove(d);
        }
        if let Some(e) = failed {
            // Retried by the next fsync.
            f.0.unsynced.restore(data);
            self.0.unsynced.restore(meta);
            return Err(e);
        }
        unsynced::check_generations(&data, &answered, &f.path())?;
        unsynced::check_generations(&meta, &answered, &f.path())
    }

    /// Closes the handle: `flush`, and the last handle of a file unlinked or replaced while
    /// open through this client removes it for good (its data freed; decision 0061).
    pub async fn close(&self, f: &File) -> Result<(), Errno> {
        let flushed = self.flush(f).await;
        let released = self.release_held(f).await;
        flushed.and(released)
    }

    /// What the close of one descriptor does while the handle may stay open (a mount's
    /// FLUSH): publishes the size its writes reached, so that every client sees it from now
    /// on (close-to-open), and reports and ends its direct leases (later I/O takes new ones).
    pub async fn flush(&self, f: &File) -> Result<(), Errno> {
        let reported = self.direct_report(f, true).await;
        let published = self.publish_size(f).await;
        if reported.is_err() || published.is_err() {
            // Direct writes may reach past the size the record keeps (as in
            // `passthrough_close`): a removal drops the data on every daemon (decision 0060).
            self.note_spilled(f.file_id());
        }
        published?;
        self.0.sizes.release(f.file_id());
        reported
    }
}
