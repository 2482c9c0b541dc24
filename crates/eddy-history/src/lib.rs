//! eddy-history: what Eddy remembers of the I/O of the jobs it served, so that the next run
//! of the same application can be given what it needs (the DFRA method, issue 22).
//!
//! - `profile`: the job profile, one per job: volume, bandwidth per compute node, IOPS,
//!   metadata rate and queue, I/O mode, nodes that did I/O, request sizes, load per daemon,
//!   the time series; each field named after the DFRA test it feeds. Built from the daemons'
//!   counters (`eddy_proto::stats`) at a deployment's end, or from a Darshan log.

//! - `build`: the profile from the daemons' counters (`profile_from_stats`).

pub mod build;
pub mod profile;

pub use build::{profile_from_stats, JobMeta};
pub use profile::{DaemonLoad, IoMode, JobProfile, SeriesPoint, Source};
