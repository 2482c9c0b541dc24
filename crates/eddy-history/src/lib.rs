//! eddy-history: what Eddy remembers of the I/O of the jobs it served, so that the next run
//! of the same application can be given what it needs (the DFRA method, issue 22).
//!
//! - `profile`: the job profile, one per job: volume, bandwidth per compute node, IOPS,
//!   metadata rate and queue, I/O mode, nodes that did I/O, request sizes, load per daemon,
//!   the time series; each field named after the DFRA test it feeds. Built from the daemons'
//!   counters (`eddy_proto::stats`) at a deployment's end, or from a Darshan log.
//! - `darshan`: Darshan logs read with PyDarshan, made into profiles (`eddy history import`).
//! - `db`: the history database, SQLite (a path) or PostgreSQL (a URL), one schema with
//!   numbered migrations: put, get, list with filters, the runs of one application.
//! - `plot`: a profile's PNG (bandwidth and IOPS per daemon over time, request sizes,
//!   metadata operations).
//! - `build`: the profile from the daemons' counters (`profile_from_stats`).

#![forbid(unsafe_code)]

pub mod build;
pub mod darshan;
pub mod db;
pub mod plot;
pub mod profile;

pub use build::{merge_instances, profile_from_stats, JobMeta};
pub use db::{
    has_password, redacted, user_default_db, Access, App, DbSpec, Filter, HistoryDb, HistoryError,
    Inserted,
};
pub use profile::{
    Allocation, DaemonLoad, Grown, IoMode, JobProfile, JobSummary, SeriesPoint, Source,
};
