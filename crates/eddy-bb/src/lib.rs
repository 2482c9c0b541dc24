//! eddy-bb: Eddy as Slurm's burst buffer. Each function of `slurm/burst_buffer.lua` calls
//! one phase of `phases` through `eddy bb PHASE` (the Lua stays thin; eddy-cli parses the
//! arguments and prints); a phase does its work or fails with one line a user can act on,
//! which the Lua hands to Slurm (sbatch's message, or the job's Reason). The phases start,
//! stage and stop the job's deployment through eddy-deploy, and read the node inventory
//! (eddy-sysmap) for the site's capacity.
//!
//! `alloc` decides a pool job's I/O nodes with the DFRA policy (eddy-alloc) at setup;
//! `directives` parses a job script's `#EDDY` lines; `site` holds the site's settings and
//! limits; `job` is root's record of a job; `nodes` asks Slurm for a job's nodes and runs
//! commands on them through the site's launcher; `as_user` resolves paths as the job's user
//! (a child of the `eddy` program that runs `eddy bb resolve-paths` after dropping to the
//! user); `walltime` times a pool job's stage-in by its predicted start and records its
//! predicted end (decision 0040); `grow` watches a running pool job's servers and grows them
//! when they hold it back (decision 0082). Lines the phases report go to the caller's `eddy_deploy::Say`.
//!
//! A job's files live in SITE.state_dir/<job id> (see `job`): `job.toml`, root's record of
//! what was made where (teardown trusts nothing else); `state/`, the deployment's state
//! directory (root's); `user/`, the job user's copy of the deployment file (EDDY_STATE).

pub mod alloc;
pub mod as_user;
pub mod directives;
pub mod grow;
pub mod history_db;
pub mod job;
pub mod nodes;
pub mod phases;
pub mod site;
pub mod walltime;
