//! The site's I/O-node pool (`[pool]`, pool mode): its nodes, the roots of jobs' daemons on
//! them, what the allocation knows of them and the limits it keeps, and the run-time grow
//! of a job's servers (`[pool.grow]`, decision 0082).

use crate::directives::NODE_LOCAL_POOL;
use anyhow::{bail, Result};
use eddy_config::parse_bytes;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    /// Name of the pool as Slurm shows it.
    #[serde(default = "default_pool_name")]
    pub name: String,
    /// `name [address]` of each I/O node.
    pub nodes: Vec<String>,
    /// Storage root of a job's daemon on an I/O node; `{job}`, `{host}`, `{id}`.
    pub root: String,
    /// Capacity of the pool when no inventory says it.
    pub capacity: Option<String>,
    /// B_f: an I/O node's peak bandwidth, bytes per second (`2GiB`: 2 GiB/s), for the
    /// allocation's scaling rule (F = ceil(B_f / B_c)); a node the inventory measured (the
    /// storage holding `root`) has its own.
    #[serde(default = "default_peak_bandwidth")]
    pub peak_bandwidth: String,
    /// The seconds of a running job's daemons' latest counters that make its live load (the
    /// allocation's view of its neighbours).
    #[serde(default = "default_live_window_s")]
    pub live_window_s: u64,
    /// Bytes of the health probe sent to each idle I/O node at every allocation (decision
    /// 0039: end to end, through the network into the storage holding `root`); a node far
    /// slower than its peers (`[alloc] anomaly_ratio` of their median) or unreachable is
    /// excluded. `0`: no probe (the inventory's stored health is still used).
    #[serde(default = "default_probe_bytes")]
    pub probe_bytes: String,
    /// The longest one probe may take, its start through the launcher included, seconds.
    #[serde(default = "default_probe_bound_s")]
    pub probe_bound_s: u64,
    /// Seconds a node's probe is used by later allocations before the node is probed again
    /// (decision 0055): jobs set up together share one probe round. `0`: every allocation
    /// probes its idle nodes.
    #[serde(default = "default_probe_cache_s")]
    pub probe_cache_s: u64,
    /// The least capacity a pool job may ask for (decision 0055): every pool job, whatever its
    /// size, gets daemons of its own on its I/O nodes and an allocation; a smaller `capacity=`
    /// is refused at submission.
    #[serde(default = "default_min_capacity")]
    pub min_capacity: String,
    /// The most pool jobs one user may have set up at a time (decided, until their teardown);
    /// the setup of one more fails, and its Reason says so (decision 0055).
    #[serde(default = "default_max_jobs_per_user")]
    pub max_jobs_per_user: u32,
    /// The most I/O nodes one job gets, whatever its history or `nodes=` say. Unset: the
    /// pool's size.
    #[serde(default)]
    pub max_servers_per_job: Option<u32>,
    /// The most I/O nodes one user's pool jobs set up at once hold together (a job decided
    /// while the user holds them all is refused, in words). Unset: no bound but the pool.
    #[serde(default)]
    pub max_servers_per_user: Option<u32>,
    /// `[pool.grow]`: a running job whose servers hold it back gets more of the pool's
    /// nodes (decision 0082; the rule's knobs, `eddy_alloc::GrowPolicy`). Unset: no job
    /// grows; its deployments also keep direct local I/O, which a grow cannot move.
    #[serde(default)]
    pub grow: Option<eddy_alloc::GrowPolicy>,
}

impl Pool {
    /// B_f of a node the inventory does not measure, bytes/s.
    pub fn peak_bandwidth(&self) -> Result<f64> {
        match parse_bytes(&self.peak_bandwidth) {
            Ok(b) if b > 0 => Ok(b as f64),
            Ok(_) => bail!("[pool] peak_bandwidth = 0: give bytes per second, e.g. \"2GiB\""),
            Err(e) => bail!("[pool] peak_bandwidth: {e}"),
        }
    }

    /// The least capacity of a pool job, bytes.
    pub fn min_capacity(&self) -> Result<u64> {
        parse_bytes(&self.min_capacity).map_err(|e| anyhow::anyhow!("[pool] min_capacity: {e}"))
    }

    /// Bytes of the health probe (`0`: none).
    pub fn probe_bytes(&self) -> Result<u64> {
        if self.probe_bytes.trim() == "0" {
            return Ok(0);
        }
        parse_bytes(&self.probe_bytes).map_err(|e| anyhow::anyhow!("[pool] probe_bytes: {e}"))
    }

    pub fn node_names(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect()
    }

    /// Refuses settings that make no sense; a pool without capacity needs an inventory.
    pub(super) fn validate(&self, has_inventory: bool) -> Result<()> {
        let pool = self;
        pool.peak_bandwidth()?;
        pool.probe_bytes()?;
        if pool.probe_bound_s == 0 {
            bail!("[pool] probe_bound_s = 0: give a number of seconds");
        }
        pool.min_capacity()?;
        if pool.max_jobs_per_user == 0 {
            bail!("[pool] max_jobs_per_user = 0: give the number of pool jobs a user may hold");
        }
        for (name, cap) in [
            ("max_servers_per_job", pool.max_servers_per_job),
            ("max_servers_per_user", pool.max_servers_per_user),
        ] {
            if cap == Some(0) {
                bail!("[pool] {name} = 0: give at least 1");
            }
        }
        if pool.live_window_s == 0 {
            bail!("[pool] live_window_s = 0: give a number of seconds");
        }
        if pool.name == NODE_LOCAL_POOL {
            bail!("[pool] name {NODE_LOCAL_POOL:?} is the node-local pool's");
        }
        if pool.nodes.is_empty() {
            bail!("[pool] lists no nodes");
        }
        match &pool.capacity {
            Some(c) => {
                parse_bytes(c).map_err(|e| anyhow::anyhow!("[pool] capacity: {e}"))?;
            }
            None if !has_inventory => {
                bail!("[pool] needs a capacity, or an inventory (eddy sysmap) to measure it")
            }
            None => {}
        }
        if let Some(g) = &self.grow {
            g.check().map_err(|e| anyhow::anyhow!("[pool.grow] {e}"))?;
        }
        Ok(())
    }
}

fn default_pool_name() -> String {
    "eddy".into()
}

/// An I/O node's peak bandwidth when the inventory does not measure it: an NVMe drive's.
fn default_peak_bandwidth() -> String {
    "2GiB".into()
}

fn default_live_window_s() -> u64 {
    10
}

fn default_probe_bytes() -> String {
    "8MiB".into()
}

fn default_probe_bound_s() -> u64 {
    10
}

fn default_probe_cache_s() -> u64 {
    120
}

/// A pool job's least capacity unless the site says otherwise.
fn default_min_capacity() -> String {
    "1GiB".into()
}

fn default_max_jobs_per_user() -> u32 {
    8
}
