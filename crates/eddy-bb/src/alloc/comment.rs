//! The Slurm job's Comment: the one-line summary of the allocation (only the reasons that name no
//! other job, decision 0056), the job's id and user as Slurm has them, and the Comment set beside
//! what the job's user wrote there.

use super::{hosts_of, rule_name, COMMENT_MAX, SLURM_BOUND};
use crate::nodes::run_bounded;
use crate::site::Pool;
use anyhow::{Context, Result};
use eddy_alloc::Decision;
use std::ffi::OsString;
use std::path::Path;

/// The rule lines of `eddy_alloc::decide` that name no other job (its other reasons, and the
/// notes before them, may name neighbours, their history runs or a run of another user's):
/// only these ever reach the Comment, which other users may read (decision 0056).
const COMMENT_REASONS: [&str; 8] = [
    "no history of ",
    "not scaled: ",
    "scaling: ",
    "no idle server",
    "only ",
    "no interference expected",
    "isolated on ",
    "no usable server",
];

/// The one-line summary for the Slurm job's Comment, at most `COMMENT_MAX` bytes: the rule,
/// the job's own servers and the last rule line, never a line about another job.
pub fn comment(decision: &Decision, pool: &Pool) -> String {
    let hosts = hosts_of(decision, &pool.node_names()).join(",");
    let why = decision
        .reasons
        .iter()
        .rev()
        .find(|r| COMMENT_REASONS.iter().any(|p| r.starts_with(p)))
        .cloned()
        .unwrap_or_default();
    let mut line = format!(
        "eddy alloc: {} {} server(s) {hosts}",
        rule_name(decision),
        decision.servers.len()
    );
    if !why.is_empty() {
        line.push_str(": ");
        line.push_str(&why);
    }
    one_line(&line)
}

/// `line` as a note of the Comment: one plain line (Slurm's own words split at spaces or
/// quotes differently) of at most `COMMENT_MAX` bytes, `...` where it was cut.
pub fn one_line(line: &str) -> String {
    let mut line = line.replace(['\n', '"', '\''], " ");
    if line.len() > COMMENT_MAX {
        let mut end = COMMENT_MAX - 3;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push_str("...");
    }
    line
}

// ------------------------------------------------------------------ with I/O

/// A Slurm job's name and node count, asked field by field (`squeue -o %j`, `%D`), never cut
/// out of a record its user could forge words into (see `nodes`).
pub fn slurm_job(job: u32) -> Result<(String, u32)> {
    let ask = |field: &str| -> Result<String> {
        let args: Vec<OsString> = ["-h", "-j", &job.to_string(), "-o", field]
            .iter()
            .map(OsString::from)
            .collect();
        Ok(run_bounded(Path::new("squeue"), &args, SLURM_BOUND)?
            .trim()
            .to_string())
    };
    let name = ask("%j")?;
    let nodes = ask("%D")?;
    let nodes: u32 = nodes
        .parse()
        .with_context(|| format!("squeue gives job {job} {nodes:?} nodes, not a number"))?;
    Ok((name, nodes))
}

/// Adds `text` to the Slurm job's Comment, after the comment its user gave it (`--comment`),
/// which stays; a Comment that ends with `text` already (a rerun) is left as it is.
pub fn set_comment(job: u32, text: &str) -> Result<()> {
    let args: Vec<OsString> = ["-h", "-j", &job.to_string(), "-o", "%k"]
        .iter()
        .map(OsString::from)
        .collect();
    let current = run_bounded(Path::new("squeue"), &args, SLURM_BOUND)
        .context("cannot read the job's Comment")?;
    let Some(comment) = with_note(&current, text) else {
        return Ok(());
    };
    let args: Vec<OsString> = vec![
        "update".into(),
        format!("JobId={job}").into(),
        format!("Comment={comment}").into(),
    ];
    run_bounded(Path::new("scontrol"), &args, SLURM_BOUND).map(|_| ())
}

/// The Comment with Eddy's `note` after the user's own (`current`, as `squeue -o %k` prints
/// it: `(null)` for none), or None when it ends with the note already.
pub fn with_note(current: &str, note: &str) -> Option<String> {
    let own = current.trim_end_matches(['\n', '\r']);
    let own = if own == "(null)" { "" } else { own };
    if own.ends_with(note) {
        return None;
    }
    Some(if own.trim().is_empty() {
        note.to_string()
    } else {
        format!("{own} | {note}")
    })
}
