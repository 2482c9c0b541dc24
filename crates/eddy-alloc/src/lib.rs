//! eddy-alloc: which of a pool's I/O servers (Eddy daemons) a job gets, decided from its I/O
//! history the way DFRA does (`../shared/papers/dfra-io-forwarding-allocation.txt` §3–5,
//! decision 0036). A pure library: no I/O, no clock; the CLI (`eddy alloc`) feeds it.
//!
//! - `policy`: the thresholds (`Policy`: V_min, N_min, W_metadata, α and the server peaks,
//!   the anomaly ratio, the default allocation size), from an `[alloc]` TOML table.
//! - `pool`: the inputs: the job, its history, the pool's servers with their live load and
//!   the jobs running on them.
//! - `decide`: the rules (anomaly screening, the scaling rule, the interference rule) and the
//!   `Decision` with the numbers each used.
//! - `grow`: the scaling rule applied to a running job (`judge`: is it bound by its servers,
//!   to how many does it grow and onto which idle ones, is the data move worth it), from its
//!   daemons' live counters and a `[pool.grow]` table (`GrowPolicy`), and the watcher's
//!   pacing of grows (`Watch`: warm-up, sustained polls, cool-down, most grows per job).
//! - `replay`: a whole history run through the policy, summed up in the shape of the paper's
//!   Table 4.

#![forbid(unsafe_code)]

pub mod decide;
pub mod grow;
pub mod policy;
pub mod pool;
pub mod replay;

pub use decide::{decide, Decision, Rule, Test};
pub use grow::{judge, Cap, GrowPolicy, GrowVerdict, Live, LiveServer, Observed, Watch};
pub use policy::Policy;
pub use pool::{Job, Load, RunningJob, Server, Traits};
pub use replay::{replay, Replay};

#[cfg(test)]
mod tests;
