//! `eddy sysmap`: the arguments of the node inventory's command and its printing; the
//! inventory itself is eddy-sysmap's.
//!
//! - `eddy sysmap [--path DIR]... [--db FILE] [--bench-mib N] [--node NAME]`: collect;
//! - `eddy sysmap show --db FILE [--node NAME]...`: the stored records;
//! - `eddy sysmap capacity --db FILE --path DIR --node NAME...`: `capacity` as JSON.

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
