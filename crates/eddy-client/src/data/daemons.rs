//! Requests to daemons as such rather than to an item's owners: raw calls for tools,
//! statfs over every device once, each daemon's status and counters, scrub pages, shutdown,
//! and the sync of everything.

use crate::data::Data;
use crate::{DaemonStatus, Errno, FileId, FsStats};
use eddy_proto::{req, Reply, Request, Rpc};
use eddy_rpc::Failure;
use std::collections::BTreeMap;

impl Data<'_> {
    /// Sends one request to one daemon, telling an error answer apart from an unreachable
    /// daemon: for tools.
    pub async fn call_daemon<R: Rpc>(&self, daemon: u32, req: R) -> Result<R::Reply, Failure> {
        self.rpc().try_call(daemon, req).await
    }

    /// `call_daemon` for a request as it travels (kept by the caller, e.g. to be sent
    /// again), answered with the reply as it came.
    pub async fn call_daemon_raw(&self, daemon: u32, req: &Request) -> Result<Reply, Failure> {
        self.rpc().send(daemon, req).await.map(|(r, _)| r)
    }

    pub async fn statfs(&self) -> Result<FsStats, Errno> {
        let mut s = FsStats {
            block_size: 4096,
            ..FsStats::default()
        };
        let statuses = self.rpc().all_ok(|| req::Status).await?;
        let mut devices: BTreeMap<&str, Vec<&DaemonStatus>> = BTreeMap::new();
        for d in &statuses {
            devices.entry(d.device.as_str()).or_default().push(d);
        }
        for on in devices.values() {
            let one = device_stats(on);
            s.total_bytes += one.total_bytes;
            s.free_bytes += one.free_bytes;
            s.avail_bytes += one.avail_bytes;
            s.files += one.files;
            s.files_free += one.files_free;
        }
        Ok(s)
    }

    /// Status of every daemon, in id order.
    pub async fn daemon_status(&self) -> Vec<(u32, Result<DaemonStatus, Errno>)> {
        self.rpc().all(|| req::Status).await
    }

    /// Tells every daemon that this client serves a FUSE mount at `mountpoint` on
    /// `transport`, now and on every connection it opens later (decision 0079).
    pub async fn announce_mount(&self, mountpoint: String, transport: eddy_proto::MountTransport) {
        self.rpc().announce_mount(mountpoint, transport).await
    }

    /// What every daemon counted of the I/O it served (`Request::Stats`, decision 0032).
    pub async fn daemon_stats(&self) -> Vec<(u32, Result<eddy_proto::stats::DaemonStats, Errno>)> {
        self.rpc().all(|| req::Stats).await
    }

    /// The snapshots of the daemons that answered, in daemon order (what `eddy stats --json`
    /// prints and libeddy's `eddy_stats_json` returns), and the daemons that did not, with
    /// why.
    pub async fn stats_snapshots(
        &self,
    ) -> (Vec<eddy_proto::stats::DaemonStats>, Vec<(u32, Errno)>) {
        let mut out = Vec::new();
        let mut failed = Vec::new();
        for (id, r) in self.daemon_stats().await {
            match r {
                Ok(s) => out.push(s),
                Err(e) => failed.push((id, e)),
            }
        }
        out.sort_by_key(|s| s.daemon);
        (out, failed)
    }

    /// One page of a scrub on `daemon`: its stored blocks of up to `limit` chunks after
    /// `after` verified (`Request::Scrub`).
    pub async fn scrub_page(
        &self,
        daemon: u32,
        after: Option<(FileId, u64)>,
        limit: u32,
    ) -> Result<eddy_proto::ScrubPage, Errno> {
        self.rpc().call(daemon, req::Scrub { after, limit }).await
    }

    /// Asks every daemon to stop.
    pub async fn shutdown_daemons(&self) -> Vec<(u32, Result<(), Errno>)> {
        self.rpc().all(|| req::Shutdown).await
    }

    /// Asks every daemon to stop, each answering with its counters as it stops
    /// (`Request::ShutdownWithStats`): the counters of a job profile and the stop in one
    /// round (decision 0076).
    pub async fn shutdown_daemons_with_stats(
        &self,
    ) -> Vec<(u32, Result<eddy_proto::stats::DaemonStats, Errno>)> {
        self.rpc().all(|| req::ShutdownWithStats).await
    }

    /// Makes every daemon's metadata and chunks durable.
    pub async fn sync_all(&self) -> Result<(), Errno> {
        self.rpc()
            .all_ok(|| req::Sync { file_id: None })
            .await
            .map(|_| ())
    }
}

/// What the daemons whose roots share one device (`DaemonStatus::device`, the same on all of
/// them) offer together: the device counted once, bounded by the sum of their capacities when
/// every one of them has one (`capacity_bytes`), less what they keep in reserve for their
/// metadata stores (decision 0060).
pub(crate) fn device_stats(on: &[&DaemonStatus]) -> FsStats {
    let Some(first) = on.first() else {
        return FsStats::default();
    };
    let (total, free, avail) = (
        first.fs_total_bytes,
        first.fs_free_bytes,
        first.fs_avail_bytes,
    );
    let reserve = on.iter().map(|d| d.reserve_bytes).max().unwrap_or(0);
    let avail = avail.saturating_sub(reserve);
    // Each daemon may take what its capacity leaves it, and no daemon more than the device
    // has; together no more than the device has either.
    let capped = on.iter().all(|d| d.capacity_bytes > 0);
    let (total, free, avail) = if capped {
        let caps: u64 = on.iter().map(|d| d.capacity_bytes).sum();
        let left: u64 = on
            .iter()
            .map(|d| d.capacity_bytes.saturating_sub(d.chunk_bytes))
            .sum();
        (total.min(caps), free.min(left), avail.min(left))
    } else {
        (total, free, avail)
    };
    FsStats {
        block_size: 4096,
        total_bytes: total,
        free_bytes: free,
        avail_bytes: avail,
        files: first.fs_files,
        files_free: first.fs_files_free,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(device: &str, cap: u64, held: u64) -> DaemonStatus {
        DaemonStatus {
            device: device.into(),
            fs_total_bytes: 1000,
            fs_free_bytes: 600,
            fs_avail_bytes: 500,
            fs_files: 10,
            fs_files_free: 5,
            capacity_bytes: cap,
            chunk_bytes: held,
            reserve_bytes: 50,
            ..DaemonStatus::default()
        }
    }

    #[test]
    fn a_shared_device_counts_once_and_capacities_bound_it() {
        let (a, b, c) = (on("m:1", 0, 0), on("m:1", 0, 0), on("m:1", 0, 0));
        let s = device_stats(&[&a, &b, &c]);
        assert_eq!(
            (s.total_bytes, s.free_bytes, s.avail_bytes),
            (1000, 600, 450)
        );
        assert_eq!((s.files, s.files_free), (10, 5));
        // Capped daemons: the sum of their caps, never more than the device.
        let (a, b) = (on("m:1", 200, 150), on("m:1", 300, 0));
        let s = device_stats(&[&a, &b]);
        assert_eq!(
            (s.total_bytes, s.free_bytes, s.avail_bytes),
            (500, 350, 350)
        );
        let (a, b) = (on("m:1", 800, 0), on("m:1", 800, 0));
        let s = device_stats(&[&a, &b]);
        assert_eq!(
            (s.total_bytes, s.free_bytes, s.avail_bytes),
            (1000, 600, 450)
        );
        // One uncapped daemon may take the whole device.
        let (a, b) = (on("m:1", 200, 0), on("m:1", 0, 0));
        assert_eq!(device_stats(&[&a, &b]).total_bytes, 1000);
    }
}
