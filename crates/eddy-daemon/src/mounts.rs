//! The FUSE mounts connected to this daemon (decision 0079): what each said of itself
//! (`req::Mounted`: its client, mount point and transport), kept per connection while the
//! connection lives, and listed in the `Status` reply (`eddy status` shows them).
//!
//! What a mount sends is untrusted: a mount point or host longer than its bound is refused
//! with EINVAL, a connection holds one entry (a second `Mounted` replaces the first), and a
//! status lists at most `MOUNTS_LISTED` of them and counts the rest.

use crate::advisory::ConnId;
use eddy_proto::{req, Errno, MountSeen, MOUNTS_LISTED, MOUNT_HOST_MAX, MOUNT_POINT_MAX};
use std::collections::HashMap;
use std::sync::Mutex;

/// The mounts of the live connections, by connection.
#[derive(Default)]
pub(crate) struct Mounts {
    by_conn: Mutex<HashMap<ConnId, MountSeen>>,
}

impl Mounts {
    /// Connection `conn` serves the mount `m`; replaces what it said before.
    pub(crate) fn note(&self, conn: ConnId, m: req::Mounted) -> Result<(), Errno> {
        if m.mountpoint.len() > MOUNT_POINT_MAX {
            return Err(Errno::einval(format!(
                "a mount point of {} bytes (at most {MOUNT_POINT_MAX})",
                m.mountpoint.len()
            )));
        }
        if m.client.host.len() > MOUNT_HOST_MAX {
            return Err(Errno::einval(format!(
                "a host name of {} bytes (at most {MOUNT_HOST_MAX})",
                m.client.host.len()
            )));
        }
        tracing::info!(
            host = %m.client.host.escape_debug(),
            pid = m.client.pid,
            mountpoint = %m.mountpoint.escape_debug(),
            transport = m.transport.name(),
            "a mount connected"
        );
        let seen = MountSeen {
            client: m.client,
            mountpoint: m.mountpoint,
            transport: m.transport,
        };
        eddy_proto::sync::lock(&self.by_conn).insert(conn, seen);
        Ok(())
    }

    /// Connection `conn` closed: its mount is no longer connected here.
    pub(crate) fn close_conn(&self, conn: ConnId) {
        eddy_proto::sync::lock(&self.by_conn).remove(&conn);
    }

    /// The mounts connected now, in order, at most `MOUNTS_LISTED` of them, and how many
    /// more there are.
    pub(crate) fn listed(&self) -> (Vec<MountSeen>, u64) {
        let mut all: Vec<MountSeen> = eddy_proto::sync::lock(&self.by_conn)
            .values()
            .cloned()
            .collect();
        all.sort();
        let unlisted = all.len().saturating_sub(MOUNTS_LISTED) as u64;
        all.truncate(MOUNTS_LISTED);
        (all, unlisted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_proto::stats::ClientId;
    use eddy_proto::MountTransport;

    fn mounted(host: &str, pid: u32, mnt: &str, transport: MountTransport) -> req::Mounted {
        req::Mounted {
            client: ClientId {
                host: host.into(),
                pid,
                rank: None,
            },
            mountpoint: mnt.into(),
            transport,
        }
    }

    #[test]
    fn a_connection_holds_one_mount_until_it_closes() {
        let m = Mounts::default();
        m.note(1, mounted("n1", 10, "/mnt/a", MountTransport::DevFuse))
            .unwrap();
        m.note(2, mounted("n2", 20, "/mnt/b", MountTransport::IoUring))
            .unwrap();
        // Said again on the same connection: replaced, not added.
        m.note(1, mounted("n1", 10, "/mnt/a", MountTransport::IoUring))
            .unwrap();
        let (list, more) = m.listed();
        assert_eq!(more, 0);
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].mountpoint, "/mnt/a");
        assert_eq!(list[0].transport, MountTransport::IoUring);
        assert_eq!(list[1].client.host, "n2");
        m.close_conn(1);
        m.close_conn(7);
        let (list, _) = m.listed();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].mountpoint, "/mnt/b");
    }

    #[test]
    fn oversized_names_are_refused_and_the_list_is_bounded() {
        let m = Mounts::default();
        let long = "/".repeat(MOUNT_POINT_MAX + 1);
        let e = m
            .note(1, mounted("n", 1, &long, MountTransport::DevFuse))
            .unwrap_err();
        assert_eq!(e.errno, libc::EINVAL);
        let host = "h".repeat(MOUNT_HOST_MAX + 1);
        let e = m
            .note(1, mounted(&host, 1, "/m", MountTransport::DevFuse))
            .unwrap_err();
        assert_eq!(e.errno, libc::EINVAL);
        assert!(m.listed().0.is_empty());
        // At the bounds: kept.
        let edge = "/".repeat(MOUNT_POINT_MAX);
        m.note(
            1,
            mounted(
                &"h".repeat(MOUNT_HOST_MAX),
                1,
                &edge,
                MountTransport::DevFuse,
            ),
        )
        .unwrap();
        for c in 2..(MOUNTS_LISTED as u64 + 10) {
            m.note(c, mounted("n", c as u32, "/m", MountTransport::IoUring))
                .unwrap();
        }
        let (list, more) = m.listed();
        assert_eq!(list.len(), MOUNTS_LISTED);
        assert_eq!(more, 9);
    }
}
