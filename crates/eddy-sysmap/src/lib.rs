//! eddy-sysmap: the node inventory (the "sysmap" of ADA-FS), decision 0013. Every node
//! describes itself ([`collect`]: cores, memory, network interfaces, storage candidates with
//! a short measured bandwidth) and may upsert the record into a shared SQLite database
//! ([`upsert`]), which [`load`] reads back and [`capacity`] answers the Slurm integration's
//! question from (how much storage each node has under a path). The `eddy sysmap` command
//! is the front end (its arguments and printing are eddy-cli's); this crate prints nothing.
//! [`health`] probes pool servers' bandwidth end to end and keeps their latest health (the
//! anomaly screening of decision 0039) in the same database.

pub mod db;
pub mod health;
mod probe;

pub use db::{capacity, load, upsert};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One node's inventory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub node: String,
    /// When it was collected, seconds since the Unix epoch.
    pub collected_at: u64,
    /// Online CPUs.
    pub cores: u32,
    pub mem_total_bytes: u64,
    pub mem_available_bytes: u64,
    pub interfaces: Vec<Interface>,
    pub storage: Vec<Storage>,
}

/// A network interface.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    pub mac: Option<String>,
    /// "address/prefix".
    pub ipv4: Vec<String>,
    pub ipv6: Vec<String>,
    pub mtu: Option<u32>,
    /// Link speed in Mbit/s, when the driver knows it.
    pub speed_mbps: Option<u64>,
    /// Administratively up and not reported down by the kernel.
    pub up: bool,
    /// The kernel's operstate ("up", "down", "unknown" …).
    pub operstate: Option<String>,
}

/// The class of the device under a storage path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceClass {
    Nvme,
    Ssd,
    Hdd,
    Ram,
    Other,
}

impl DeviceClass {
    fn as_str(self) -> &'static str {
        match self {
            DeviceClass::Nvme => "nvme",
            DeviceClass::Ssd => "ssd",
            DeviceClass::Hdd => "hdd",
            DeviceClass::Ram => "ram",
            DeviceClass::Other => "other",
        }
    }

    fn parse(s: &str) -> Option<DeviceClass> {
        [Self::Nvme, Self::Ssd, Self::Hdd, Self::Ram, Self::Other]
            .into_iter()
            .find(|c| c.as_str() == s)
    }
}

/// A storage candidate path; fields that could not be read are empty and named in `error`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Storage {
    /// The path as given.
    pub path: String,
    pub mount_point: Option<String>,
    pub fs_type: Option<String>,
    /// The mount's source (e.g. "/dev/nvme0n1p2", "tmpfs").
    pub device: Option<String>,
    /// The disk under it (partitions, dm, md and loop devices resolved), e.g. "nvme0n1".
    pub disk: Option<String>,
    pub class: Option<DeviceClass>,
    pub capacity_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    /// Free bytes an unprivileged user may use.
    pub available_bytes: Option<u64>,
    /// Measured: write with fsync, MiB/s.
    pub write_mib_s: Option<f64>,
    /// Measured: read back after dropping the file from the page cache, MiB/s.
    pub read_mib_s: Option<f64>,
    pub error: Option<String>,
}

/// Collects this node's record; storage paths default to [`probe::default_paths`].
pub fn collect(node: Option<String>, paths: &[PathBuf], bench_mib: u64) -> Result<NodeRecord> {
    let node = match node {
        Some(n) => n,
        None => probe::short_hostname()?,
    };
    // privileged-path: the kernel's /proc
    let meminfo = std::fs::read_to_string("/proc/meminfo").context("cannot read /proc/meminfo")?;
    let (mem_total_bytes, mem_available_bytes) =
        probe::parse_meminfo(&meminfo).context("in /proc/meminfo")?;
    let mounts = probe::mounts()?;
    let paths = if paths.is_empty() {
        probe::default_paths(&mounts)
    } else {
        paths.to_vec()
    };
    let storage = paths
        .iter()
        .map(|p| probe::storage(&mounts, p, bench_mib))
        .collect();
    Ok(NodeRecord {
        node,
        collected_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        cores: probe::cores(),
        mem_total_bytes,
        mem_available_bytes,
        interfaces: probe::interfaces()?,
        storage,
    })
}
