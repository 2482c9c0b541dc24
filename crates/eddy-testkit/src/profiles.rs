//! Job profiles for the tests of the I/O history, as JSON in the form of
//! `eddy_history::JobProfile` (the testkit does not link eddy-history, so that its own tests
//! can use the testkit): a realistic run on three daemons, a write phase then a read phase,
//! with its time series, request sizes and load per daemon consistent with its totals.

use serde_json::{json, Value};

/// What differs between the runs a test stores.
#[derive(Debug, Clone)]
pub struct Run<'a> {
    pub key: &'a str,
    pub job_id: Option<&'a str>,
    pub job_name: &'a str,
    pub user: &'a str,
    pub script_hash: &'a str,
    /// Start, unix seconds, and length in whole seconds (at least 2).
    pub start: f64,
    pub seconds: u32,
    /// Compute nodes, and bytes each wrote (and read back).
    pub nodes: u32,
    pub bytes_per_node: u64,
    /// `N-N`, `N-1`, `1-1` or `none`.
    pub mode: &'a str,
}

/// Daemons (I/O servers) of every run.
pub const DAEMONS: u32 = 3;
/// Power-of-two buckets of the request-size histogram.
const BUCKETS: usize = 32;

/// The profile of `run`.
pub fn profile(run: &Run) -> Value {
    let seconds = run.seconds.max(2);
    let half = seconds / 2;
    let volume_each = run.bytes_per_node * u64::from(run.nodes);
    // Requests of 1 MiB (bucket 20), and a few of 4 KiB (bucket 12) for headers.
    let big = volume_each / (1 << 20);
    let small = u64::from(run.nodes) * 16;
    let mut sizes = vec![0u64; BUCKETS];
    sizes[20] = 2 * big;
    sizes[12] = 2 * small;
    let data_ops = 2 * (big + small);
    let metadata_ops = u64::from(run.nodes) * 40;
    let per_daemon_bps = volume_each as f64 / f64::from(DAEMONS) / f64::from(half);
    let per_daemon_iops = (big + small) as f64 / f64::from(DAEMONS) / f64::from(half);
    let mut series = Vec::new();
    for d in 0..DAEMONS {
        // A little imbalance, so that the daemons' lines differ.
        let weight = 1.0 + 0.1 * f64::from(d) - 0.1;
        for t in 0..seconds {
            let writing = t < half;
            let bps = per_daemon_bps * weight;
            let opening = t == 0 || t == half;
            series.push(json!({
                "t": f64::from(t),
                "seconds": 1.0,
                "daemon": d,
                "read_bps": if writing { 0.0 } else { bps },
                "write_bps": if writing { bps } else { 0.0 },
                "iops": per_daemon_iops * weight,
                "metadata_ops_per_s": if opening { metadata_ops as f64 / 2.0 / f64::from(DAEMONS) } else { 1.0 },
                "queue_mean": if opening { 2.5 } else { 0.5 },
            }));
        }
    }
    let daemons: Vec<Value> = (0..DAEMONS)
        .map(|d| {
            json!({
                "daemon": d,
                "host": format!("io{d}"),
                "read_bytes": volume_each / u64::from(DAEMONS),
                "written_bytes": volume_each / u64::from(DAEMONS),
                "ops": data_ops / u64::from(DAEMONS),
                "metadata_ops": metadata_ops / u64::from(DAEMONS),
            })
        })
        .collect();
    let node_bw = run.bytes_per_node as f64 / f64::from(half);
    let job_bw = per_daemon_bps * f64::from(DAEMONS);
    let files = match run.mode {
        "N-1" | "1-1" => 1,
        _ => u64::from(run.nodes),
    };
    json!({
        "key": run.key,
        "source": "eddy",
        "job_id": run.job_id,
        "job_name": run.job_name,
        "user": run.user,
        "script_hash": run.script_hash,
        "nodes": (0..run.nodes).map(|n| format!("cn{n:03}")).collect::<Vec<_>>(),
        "start": run.start,
        "end": run.start + f64::from(seconds),
        "read_bytes": volume_each,
        "written_bytes": volume_each,
        "io_nodes": run.nodes,
        "io_processes": run.nodes * 4,
        "peak_node_bandwidth": node_bw * 1.1,
        "mean_node_bandwidth": node_bw,
        "peak_bandwidth": job_bw * 1.1,
        "mean_bandwidth": job_bw,
        "peak_iops": per_daemon_iops * f64::from(DAEMONS) * 1.1,
        "mean_iops": per_daemon_iops * f64::from(DAEMONS),
        "peak_metadata_rate": metadata_ops as f64 / 2.0,
        "mean_metadata_rate": metadata_ops as f64 / f64::from(seconds),
        "mean_metadata_queue": 0.7,
        "io_mode": run.mode,
        "files": files,
        "shared_files": if run.mode == "N-1" { 1 } else { 0 },
        "data_ops": data_ops,
        "metadata_ops": metadata_ops,
        "request_sizes": sizes,
        "daemons": daemons,
        "series": series,
    })
}
