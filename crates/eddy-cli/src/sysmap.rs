//! `eddy sysmap`: the arguments of the node inventory's command and its printing; the
//! inventory itself is eddy-sysmap's.
//!
//! - `eddy sysmap [--path DIR]... [--db FILE] [--bench-mib N] [--node NAME]`: collect;
//! - `eddy sysmap show --db FILE [--node NAME]...`: the stored records;
//! - `eddy sysmap capacity --db FILE --path DIR --node NAME...`: `capacity` as JSON;
//! - `eddy sysmap probe --db FILE --hosts FILE --dir DIR`: probe the servers' bandwidth and
//!   record their health (decision 0039); `eddy sysmap health --db FILE`: the stored health;
//! - `eddy sysmap probe-serve`: the server side of a probe (started by the launcher).

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use eddy_sysmap::{capacity, collect, load, upsert};
use serde::Serialize;
use std::path::PathBuf;

/// `eddy sysmap`: collect this node's record, or (with a subcommand) read the database.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SysmapArgs {
    #[command(subcommand)]
    pub command: Option<SysmapCommand>,
    #[command(flatten)]
    pub collect: CollectArgs,
}

/// Collecting this node's record (the default action).
#[derive(Debug, Args)]
pub struct CollectArgs {
    /// Storage path to describe and measure; repeatable (default: the mount points of local
    /// block-device file systems, /dev/shm and /tmp).
    #[arg(long, value_name = "DIR")]
    pub path: Vec<PathBuf>,
    /// Also upsert the record into this SQLite database (may be shared by many nodes).
    #[arg(long, value_name = "FILE")]
    pub db: Option<PathBuf>,
    /// MiB written and read back per path to measure its bandwidth; 0 skips the measurement.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub bench_mib: u64,
    /// Name of this node (default: the short host name).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum SysmapCommand {
    /// Print the stored inventory (every node, or the named ones) as JSON.
    Show {
        /// The inventory database.
        #[arg(long, value_name = "FILE")]
        db: PathBuf,
        /// Only this node; repeatable.
        #[arg(long, value_name = "NAME")]
        node: Vec<String>,
    },
    /// Probe the servers' bandwidth end to end (in parallel, each bounded in time) and
    /// record their health in the inventory: below --anomaly-ratio of the peers' median, or
    /// down, is anomalous (excluded from allocations; re-admitted when a later probe is back).
    Probe(ProbeArgs),
    /// Print the servers' latest health (every one, or the named ones) as JSON.
    Health {
        /// The inventory database.
        #[arg(long, value_name = "FILE")]
        db: PathBuf,
        /// Only this host; repeatable.
        #[arg(long, value_name = "NAME")]
        node: Vec<String>,
    },
    /// Internal: the server side of one probe (reads the prober's nonce from standard input,
    /// prints `LISTEN addr:port`, receives from the prober, writes and fsyncs the bytes under
    /// --dir, answers, removes its file, exits).
    #[command(hide = true)]
    ProbeServe {
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        #[arg(long, value_name = "ADDR:PORT")]
        listen: String,
        /// The prober's address: connections from any other are dropped.
        #[arg(long, value_name = "ADDR")]
        peer: std::net::IpAddr,
        /// The most bytes accepted.
        #[arg(long, value_name = "BYTES")]
        bytes: u64,
        /// Seconds the whole probe may take.
        #[arg(long, value_name = "SECS")]
        bound: f64,
    },
    /// Print, per node, the capacity and available bytes of the storage holding PATH.
    Capacity {
        /// The inventory database.
        #[arg(long, value_name = "FILE")]
        db: PathBuf,
        /// The storage path (its closest recorded ancestor path or mount point is used).
        #[arg(long, value_name = "DIR")]
        path: PathBuf,
        /// Node to report; repeatable, at least one.
        #[arg(long, value_name = "NAME", required = true)]
        node: Vec<String>,
    },
}

/// `eddy sysmap probe`: the servers' health.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The inventory database the results go into.
    #[arg(long, value_name = "FILE")]
    pub db: PathBuf,
    /// The servers (`name [address]` per line, as `eddy start --hosts`).
    #[arg(long, value_name = "FILE")]
    pub hosts: PathBuf,
    /// How a command is started on a server (`{host}`, `{cmd}`).
    #[arg(long, value_name = "TEMPLATE", default_value = eddy_deploy::launch::SSH_LAUNCHER)]
    pub launcher: String,
    /// The storage directory probed on each server (`{host}` is filled in).
    #[arg(long, value_name = "DIR")]
    pub dir: String,
    /// Bytes sent to each server (suffixes K, M, G).
    #[arg(long, value_name = "BYTES", default_value = "8M", value_parser = eddy_config::parse_bytes)]
    pub bytes: u64,
    /// The longest one probe may take, seconds; past it the server is down.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub bound: f64,
    /// A server below this share of its peers' median bandwidth is anomalous (the
    /// allocation policy's `anomaly_ratio`).
    #[arg(long, value_name = "SHARE", default_value_t = eddy_alloc::Policy::default().anomaly_ratio)]
    pub anomaly_ratio: f64,
}

/// Runs `eddy sysmap probe`.
fn probe(a: ProbeArgs) -> Result<()> {
    use eddy_sysmap::health;
    let hosts: Vec<health::Host> = eddy_deploy::launch::read_hosts_file(&a.hosts)?
        .into_iter()
        .map(|h| health::Host {
            name: h.name,
            address: h.address,
        })
        .collect();
    if !(a.bound.is_finite() && a.bound > 0.0) {
        anyhow::bail!("--bound {}: give a positive number of seconds", a.bound);
    }
    let spec = health::ProbeSpec {
        launcher: &a.launcher,
        program: std::env::current_exe()
            .context("cannot find this program's path")?
            .into(),
        dir: &a.dir,
        bytes: a.bytes,
        bound: std::time::Duration::from_secs_f64(a.bound),
    };
    let probes = health::probe(&spec, &hosts);
    print_json(&health::record(&a.db, &probes, a.anomaly_ratio)?)
}

/// Runs `eddy sysmap probe-serve`: the nonce comes on standard input (a pipe of the prober's,
/// through the launcher), within the bound.
fn probe_serve(
    dir: &std::path::Path,
    listen: &str,
    peer: std::net::IpAddr,
    bytes: u64,
    bound: f64,
) -> Result<()> {
    use eddy_sysmap::health::{serve, Nonce};
    let bound = std::time::Duration::from_secs_f64(bound.clamp(0.001, 3600.0));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(Nonce::read_line(std::io::stdin().lock()));
    });
    let nonce = rx
        .recv_timeout(bound)
        .map_err(|_| anyhow::anyhow!("no nonce on standard input within {bound:?}"))??;
    let l = std::net::TcpListener::bind(listen)
        .with_context(|| format!("cannot listen on {listen}"))?;
    serve(dir, l, &nonce, peer, bytes, bound, &mut |line| {
        outln!("{line}")
    })?;
    Ok(())
}

/// Runs `eddy sysmap`.
pub fn sysmap(args: SysmapArgs) -> Result<()> {
    match args.command {
        None => {
            let c = args.collect;
            let record = collect(c.node, &c.path, c.bench_mib)?;
            if let Some(db) = &c.db {
                upsert(db, &record)?;
            }
            print_json(&record)
        }
        Some(SysmapCommand::Show { db, node }) => print_json(&load(&db, &node)?),
        Some(SysmapCommand::Probe(a)) => probe(a),
        Some(SysmapCommand::Health { db, node }) => {
            print_json(&eddy_sysmap::health::latest(&db, &node)?)
        }
        Some(SysmapCommand::ProbeServe {
            dir,
            listen,
            peer,
            bytes,
            bound,
        }) => probe_serve(&dir, &listen, peer, bytes, bound),
        Some(SysmapCommand::Capacity { db, path, node }) => {
            print_json(&capacity(&db, &node, &path)?)
        }
    }
}

fn print_json<T: Serialize>(v: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(v).context("cannot encode JSON")?;
    outln!("{text}");
    Ok(())
}
