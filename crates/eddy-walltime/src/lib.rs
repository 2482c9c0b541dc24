//! Walltime prediction for Eddy (decision 0037): how long a job will really run, from the
//! records of past jobs. `job.rs` the job record and the JSON reader, `sacct.rs` Slurm
//! accounting text (`sacct --parsable2`), `swf.rs` the Standard Workload Format of the
//! Parallel Workloads Archive; `predict.rs` the predictors (the user's request, EASY++ and
//! AdaBoost.R2 over smartcore's decision trees in `adaboost.rs`); `correct.rs` the
//! corrections of underestimates (simple and power, as in the COARE walltime paper, §4.4);
//! `replay.rs` the evaluation of every predictor and correction over a trace without
//! looking into the future; `start.rs` a pending job's predicted start (first come, first
//! served over the running and pending jobs' predictions, decision 0040). Pure computation: it runs no command and prints nothing.

#![forbid(unsafe_code)]

pub mod adaboost;
pub mod correct;
pub mod job;
pub mod predict;
pub mod replay;
pub mod sacct;
pub mod start;
pub mod swf;

pub use correct::{correct, Corrected, Correction};
pub use job::Job;
pub use predict::{predict, Model, Params, Prediction, Predictor};
pub use replay::{replay, Evaluation, Row};
