//! Whether the members of a move have room for what they will hold (decision 0081): checked
//! before a grow or a shrink changes anything. Items are placed by hash, so after the move
//! each member holds about an even share of all the chunk data; a member short of its share
//! would stall the move with its copies refused for room, and clients with it.

use crate::human_bytes;
use anyhow::{bail, Result};
use eddy_client::Client;
use eddy_config::Deployment;
use eddy_proto::{req, DaemonStatus};
use std::collections::BTreeMap;

/// The share each member must have room for, over the even share: hashing is not exact.
const SLACK: f64 = 1.1;

/// Room a daemon has for more chunk data: its device's space offered to writers, bounded by
/// its `capacity_bytes`.
fn room(s: &DaemonStatus) -> u64 {
    let device = s.fs_avail_bytes.saturating_sub(s.reserve_bytes);
    match s.capacity_bytes {
        0 => device,
        cap => cap.saturating_sub(s.chunk_bytes).min(device),
    }
}

/// Asks every daemon of `next` for its status and checks that each member has room for its
/// share; an error naming the first member (or device) short of room.
pub(super) fn check(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    next: &Deployment,
) -> Result<()> {
    let mut statuses = Vec::with_capacity(next.daemons.len());
    for d in &next.daemons {
        let s = rt
            .block_on(client.call_daemon(d.id, req::Status))
            .map_err(|e| {
                anyhow::anyhow!(
                    "daemon {} did not say how much room it has: {}; nothing changed",
                    d.id,
                    e.errno()
                )
            })?;
        statuses.push(s);
    }
    shortfall(&statuses, &next.members())
}

/// The check on the daemons' statuses: `members` hold the chunk data of all `statuses`
/// after the move.
fn shortfall(statuses: &[DaemonStatus], members: &[u32]) -> Result<()> {
    let total: u64 = statuses.iter().map(|s| s.chunk_bytes).sum();
    let share = (total as f64 / members.len().max(1) as f64 * SLACK) as u64;
    let mut per_device: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for s in statuses.iter().filter(|s| members.contains(&s.id)) {
        let need = share.saturating_sub(s.chunk_bytes);
        let have = room(s);
        if s.capacity_bytes > 0 && need > have {
            bail!(
                "daemon {} would take about {} more for its share of the {} of data over {} \
                 members, and its capacity_bytes ({}) leaves room for {}: nothing changed \
                 (free space first, or keep more daemons)",
                s.id,
                human_bytes(need),
                human_bytes(total),
                members.len(),
                human_bytes(s.capacity_bytes),
                human_bytes(have)
            );
        }
        let dev = per_device.entry(&s.device).or_insert((0, 0));
        dev.0 += need;
        dev.1 = dev.1.max(s.fs_avail_bytes.saturating_sub(s.reserve_bytes));
    }
    for (device, (need, have)) in per_device {
        if need > have {
            bail!(
                "the members on device {device} would take about {} more for their shares of \
                 the {} of data, and it has {} free: nothing changed (free space first, or \
                 keep more daemons)",
                human_bytes(need),
                human_bytes(total),
                human_bytes(have)
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(id: u32, device: &str, chunk_bytes: u64, capacity: u64, avail: u64) -> DaemonStatus {
        DaemonStatus {
            id,
            device: device.into(),
            chunk_bytes,
            capacity_bytes: capacity,
            fs_avail_bytes: avail,
            ..Default::default()
        }
    }

    #[test]
    fn members_short_of_their_share_are_named() {
        const M: u64 = 1 << 20;
        // 18 MiB over daemons of 8 MiB each: two cannot hold it (9.9 MiB each with slack).
        let three = [
            status(0, "d", 6 * M, 8 * M, 100 * M),
            status(1, "d", 6 * M, 8 * M, 100 * M),
            status(2, "d", 6 * M, 8 * M, 100 * M),
        ];
        let e = shortfall(&three, &[0, 1]).unwrap_err().to_string();
        assert!(
            e.contains("daemon 0") && e.contains("capacity_bytes"),
            "{e}"
        );
        assert!(shortfall(&three, &[0, 1, 2]).is_ok());
        // Without a capacity bound, the device: 9.9 MiB shares on a device with 5 MiB free.
        let shared = [
            status(0, "d", 6 * M, 0, 5 * M),
            status(1, "d", 6 * M, 0, 5 * M),
            status(2, "d", 6 * M, 0, 5 * M),
        ];
        let e = shortfall(&shared, &[0, 1]).unwrap_err().to_string();
        assert!(e.contains("device d"), "{e}");
        // Growing onto an empty daemon with room is fine.
        let grow = [
            status(0, "d", 6 * M, 8 * M, 100 * M),
            status(1, "d", 6 * M, 8 * M, 100 * M),
            status(2, "e", 0, 8 * M, 100 * M),
        ];
        assert!(shortfall(&grow, &[0, 1, 2]).is_ok());
    }
}
