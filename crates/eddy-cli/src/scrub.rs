//! `eddy scrub`: every daemon verifies every stored block of its chunks against its checksum
//! (decision 0019), in pages of chunks, all daemons at once, while I/O goes on. A progress
//! bar on stderr (on a terminal), a report at the end; exit status non-zero when a block is
//! damaged or a daemon could not be scrubbed.

use crate::cli::ScrubArgs;
use anyhow::{bail, Context, Result};
use eddy_client::Client;
use eddy_deploy::human_bytes;
use eddy_deploy::StateDir;
use eddy_proto::{FileId, FileKind, ScrubPage};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::io::IsTerminal;
use std::time::Duration;

/// What one daemon's scrub found.
#[derive(Debug, Default, Serialize)]
struct DaemonScrub {
    id: u32,
    chunks: u64,
    blocks: u64,
    bytes: u64,
    mismatches: Vec<Mismatch>,
    /// Why the scrub of this daemon stopped early.
    error: Option<String>,
}

/// A damaged block.
#[derive(Debug, Serialize)]
struct Mismatch {
    daemon: u32,
    /// The file id as 32 hex digits (as the daemons' logs and data files name it).
    file_id: String,
    chunk: u64,
    /// Offset of the block in the chunk, and in the file.
    offset: u64,
    file_offset: u64,
    /// The file's names in the namespace (several for hard links; none when no entry
    /// names the data: a file removed while the scrub ran, or data left behind).
    paths: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Report {
    chunks: u64,
    blocks: u64,
    bytes: u64,
    mismatches: usize,
    daemons: Vec<DaemonScrub>,
}

pub fn scrub(args: ScrubArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    let dep = state.load_deployment()?;
    let rt = eddy_deploy::runtime()?;
    let chunk_size = dep.config.chunk_size;
    let limit = dep.config.scrub_page_chunks;
    let daemons: Vec<u32> = dep.daemons.iter().map(|d| d.id).collect();
    let client = Client::new_following(dep, state.deployment_path())
        .context("the deployment file is not usable")?;
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(None, target);
    bar.set_style(
        ProgressStyle::with_template(
            "scrub {bar:30} {pos}/{len} chunks {binary_bytes} verified {msg} {elapsed}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let results = rt.block_on(async {
        let total: u64 = client
            .daemon_status()
            .await
            .iter()
            .filter_map(|(_, s)| s.as_ref().ok().map(|s| s.chunks))
            .sum();
        bar.set_length(total);
        let runs = daemons
            .iter()
            .map(|&id| scrub_daemon(&client, id, limit, chunk_size, &bar));
        futures::future::join_all(runs).await
    });
    bar.finish_and_clear();
    let mut results = results;
    if results.iter().any(|d| !d.mismatches.is_empty()) {
        let ids: HashSet<u128> = results
            .iter()
            .flat_map(|d| &d.mismatches)
            .filter_map(|m| u128::from_str_radix(&m.file_id, 16).ok())
            .collect();
        let names = rt.block_on(name_files(&client, ids));
        for m in results.iter_mut().flat_map(|d| &mut d.mismatches) {
            if let Some(paths) = u128::from_str_radix(&m.file_id, 16)
                .ok()
                .and_then(|id| names.get(&id))
            {
                m.paths = paths.clone();
            }
        }
    }
    let report = Report {
        chunks: results.iter().map(|d| d.chunks).sum(),
        blocks: results.iter().map(|d| d.blocks).sum(),
        bytes: results.iter().map(|d| d.bytes).sum(),
        mismatches: results.iter().map(|d| d.mismatches.len()).sum(),
        daemons: results,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    let failed: Vec<String> = report
        .daemons
        .iter()
        .filter_map(|d| d.error.as_ref().map(|e| format!("daemon {}: {e}", d.id)))
        .collect();
    if report.mismatches > 0 {
        bail!(
            "{} damaged block(s) found: reads of them fail with EIO. Rewrite the files listed \
             (or copy them again from where they came from); `eddy scrub` again then reports \
             none{}",
            report.mismatches,
            if failed.is_empty() {
                String::new()
            } else {
                format!("; and not every daemon was scrubbed: {}", failed.join("; "))
            }
        );
    }
    if !failed.is_empty() {
        bail!(
            "not every daemon was scrubbed: {}; see their logs, then run `eddy scrub` again",
            failed.join("; ")
        );
    }
    Ok(())
}

/// Scrubs one daemon page by page.
async fn scrub_daemon(
    client: &Client,
    id: u32,
    limit: u32,
    chunk_size: u64,
    bar: &ProgressBar,
) -> DaemonScrub {
    let mut out = DaemonScrub {
        id,
        ..DaemonScrub::default()
    };
    let mut after: Option<(FileId, u64)> = None;
    loop {
        let page: ScrubPage = match client.scrub_page(id, after, limit).await {
            Ok(p) => p,
            Err(e) => {
                out.error = Some(e.to_string());
                return out;
            }
        };
        out.chunks += page.chunks;
        out.blocks += page.blocks;
        out.bytes += page.bytes;
        bar.inc(page.chunks);
        for b in &page.bad {
            out.mismatches.push(Mismatch {
                daemon: id,
                file_id: format!("{:032x}", b.file_id),
                chunk: b.chunk,
                offset: b.offset,
                file_offset: b.chunk * chunk_size + b.offset,
                paths: Vec::new(),
            });
        }
        if !page.bad.is_empty() {
            bar.set_message(format!("{} damaged", page.bad.len()));
        }
        match page.next {
            // The daemon's cursor moves on, or the scrub would go round for ever (decision
            // 0056); its pages are bounded by the chunks it stores.
            Some(next) if after.is_some_and(|a| next <= a) => {
                out.error = Some(format!(
                    "daemon {id} answered a scrub page that does not move past {:032x}/{}:                      stopped",
                    next.0, next.1
                ));
                return out;
            }
            Some(next) => after = Some(next),
            None => return out,
        }
    }
}

/// The names of the files with data `ids`, found by walking the namespace (done only when
/// a scrub found damage: a report names files, not ids). Directories that cannot be listed
/// are left out, with a warning.
async fn name_files(client: &Client, ids: HashSet<u128>) -> HashMap<u128, Vec<String>> {
    let mut names: HashMap<u128, Vec<String>> = HashMap::new();
    let mut dirs = vec!["/".to_string()];
    while let Some(dir) = dirs.pop() {
        let mut listed = match client.readdir(&dir, None) {
            Ok(r) => r,
            Err(e) => {
                errln!("eddy: warning: cannot list {dir} to name damaged files: {e}");
                continue;
            }
        };
        loop {
            let page = match listed.next_page().await {
                Ok(Some(page)) => page,
                Ok(None) => break,
                Err(e) => {
                    errln!("eddy: warning: cannot list {dir} to name damaged files: {e}");
                    break;
                }
            };
            for e in page {
                let path = eddy_proto::path::join(&dir, &e.name);
                if e.inode.kind == FileKind::Dir {
                    dirs.push(path);
                } else if ids.contains(&e.inode.file_id) {
                    names.entry(e.inode.file_id).or_default().push(path);
                }
            }
        }
    }
    for paths in names.values_mut() {
        paths.sort();
    }
    names
}

fn print_report(r: &Report) {
    outln!(
        "scrubbed {} chunks: {} blocks, {} verified; {} damaged block(s)",
        r.chunks,
        r.blocks,
        human_bytes(r.bytes),
        r.mismatches
    );
    for d in &r.daemons {
        outln!(
            "  daemon {}: {} chunks, {} blocks, {}, {} damaged{}",
            d.id,
            d.chunks,
            d.blocks,
            human_bytes(d.bytes),
            d.mismatches.len(),
            d.error
                .as_ref()
                .map(|e| format!(" (stopped: {e})"))
                .unwrap_or_default()
        );
    }
    for m in r.daemons.iter().flat_map(|d| &d.mismatches) {
        let name = if m.paths.is_empty() {
            format!("file {} (no name in the namespace)", m.file_id)
        } else {
            m.paths.join(" = ")
        };
        outln!(
            "  damaged: {name}, file offset {} (daemon {} chunk {} offset {})",
            m.file_offset,
            m.daemon,
            m.chunk,
            m.offset,
        );
    }
}
