//! Stopping a deployment: write the dirty data of linked prefixes back to the backend,
//! unmount, stop the daemons, wait for local processes, mark the state stopped. Idempotent:
//! with nothing running it says so and succeeds. If the write-back fails, nothing is stopped
//! and the error says what is not written back; `discard` stops without writing back.
//! After the unmount the daemons are asked to stop, each answering with its counters, from
//! which the job profile is made and stored in the I/O history while they exit
//! (`profile.rs`; never a reason for the stop to fail).

use crate::profile::{self, Ending, HistoryTarget};
use crate::stage::{self, Report};
use crate::state::StateDir;
use crate::{human_bytes, Say};
use anyhow::{bail, Result};
use eddy_client::Client;
use eddy_config::Deployment;
use std::path::Path;
use std::time::Duration;
use tokio::runtime::Runtime;

/// Files not written back that a refusal lists (the rest are counted).
const LISTED_UNFLUSHED: usize = 100;

/// How `stop` treats the dirty data of linked prefixes.
#[derive(Debug, Clone, Default)]
pub struct StopOptions {
    /// Stop even though dirty data is not written back: no write-back is attempted and that
    /// data is lost.
    pub discard: bool,
    /// Where the job profile goes (the deployment's `history_db` or the user's default; a
    /// site's database for the burst buffer).
    pub history: HistoryTarget,
    /// How the deployment's servers were allocated (the burst buffer's pool mode): recorded
    /// in the profile.
    pub allocation: Option<eddy_history::Allocation>,
}

/// What `stop` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// No deployment was running in the state directory.
    NothingRunning,
    /// The deployment `name` with `daemons` daemons stopped.
    Stopped { name: String, daemons: usize },
}

/// Stops the deployment in `state`; says what it does (the write-back, warnings, the end)
/// through `say` as it goes.
pub fn stop(state: &StateDir, options: StopOptions, say: Say) -> Result<Stopped> {
    // Nothing waits for a prefetch: it ends first, whatever the rest of the stop does.
    for p in crate::prefetch::end_all(state) {
        say.out(&format!("eddy: ended the {p}"));
    }
    if !state.has_deployment() {
        say.out(&format!(
            "eddy: nothing is running in {}",
            state.dir().display()
        ));
        return Ok(Stopped::NothingRunning);
    }
    let dep = state.load_deployment()?;
    let write_back = !dep.config.links.is_empty() && !options.discard;
    if write_back {
        flush(state, &dep, false, say)?;
    } else if !dep.config.links.is_empty() {
        warn_discarded(&dep, say);
    }
    let mut problems = unmount_all(state);
    if write_back {
        // What was written through a mount between the write-back and the unmount.
        if let Err(e) = flush(state, &dep, true, say) {
            for p in &problems {
                say.err(&format!("eddy: warning: {p}"));
            }
            return Err(e);
        }
    }
    // One round: every daemon answers the stop with its counters as it stops (the job
    // profile's), and exits once the client is gone; the profile is made meanwhile.
    let (live, not_stopped) = match Daemons::connect(&dep) {
        Ok(d) => d.stop_with_counters(&dep),
        Err(e) => (
            dep.daemons.iter().map(|d| (d.id, Err(e.clone()))).collect(),
            vec![e],
        ),
    };
    let profile = profile::record_answered(
        state,
        &dep,
        &options.history,
        options.allocation.as_ref(),
        Ending::Stopped,
        live,
        say,
    );
    problems.extend(not_stopped);
    // A daemon that acknowledged shutdown is given one RPC timeout to exit before signals.
    let grace = Duration::from_millis(dep.config.rpc_timeout_ms);
    let killed = crate::procs::stop_processes(&state.read_pids()?, grace);
    problems.extend(
        killed
            .into_iter()
            .map(|p| format!("{p} did not exit after shutdown and was signalled")),
    );
    state.mark_stopped()?;
    if profile.is_some() && options.history == HistoryTarget::User {
        // Counted in the profile: the daemons' persisted snapshots go.
        profile::remove_persisted(&dep);
    }
    for p in &problems {
        say.err(&format!("eddy: warning: {p}"));
    }
    say.out(&format!(
        "eddy: deployment {:?} stopped ({} daemons)",
        dep.name,
        dep.daemons.len()
    ));
    Ok(Stopped::Stopped {
        name: dep.name,
        daemons: dep.daemons.len(),
    })
}

/// Writes every linked prefix back to the backend; fails, saying what is left and what to
/// do, unless all of it is durable there.
fn flush(state: &StateDir, dep: &Deployment, after_unmount: bool, say: Say) -> Result<()> {
    let rt = crate::runtime()?;
    let client = stage::client(dep.clone())?;
    let report = stage::write_back(&rt, &client, &[], false, "write-back");
    if report.error.is_none() && report.failed == 0 {
        if !report.files.is_empty() {
            say.out(&format!("eddy: {}", report.summary("wrote back")));
        }
        return Ok(());
    }
    let left = dirty_left(&rt, &client);
    bail!("{}", refusal(state.dir(), &report, &left, after_unmount))
}

/// Dirty bytes the reachable daemons still hold, and the daemons that did not answer.
#[derive(Debug, Default)]
struct DirtyLeft {
    bytes: u64,
    unreachable: Vec<(u32, String)>,
}

fn dirty_left(rt: &Runtime, client: &Client) -> DirtyLeft {
    let statuses = rt.block_on(client.daemon_status());
    let mut left = DirtyLeft::default();
    for (id, s) in statuses {
        match s {
            Ok(s) => left.bytes += s.tier.dirty_bytes,
            Err(e) => left.unreachable.push((id, e.to_string())),
        }
    }
    left
}

/// Why stop refused and what to do about it.
fn refusal(state_dir: &Path, report: &Report, left: &DirtyLeft, after_unmount: bool) -> String {
    let mut s = String::from(
        "the deployment is NOT stopped: data under linked prefixes could not be written back \
         to the backend",
    );
    if let Some(e) = &report.error {
        s.push_str(&format!("\n  the write-back did not complete: {e}"));
    }
    if report.failed > 0 {
        s.push_str(&format!(
            "\n  not written back ({} {}):",
            report.failed,
            if report.failed == 1 { "file" } else { "files" }
        ));
        for f in report.failures().take(LISTED_UNFLUSHED) {
            s.push_str(&format!(
                "\n    {}: {}",
                f.path,
                f.error.as_deref().unwrap_or("")
            ));
        }
        let more = report.failed.saturating_sub(LISTED_UNFLUSHED as u64);
        if more > 0 {
            s.push_str(&format!("\n    … and {more} more"));
        }
    }
    s.push_str(&format!(
        "\n  dirty data still held by the daemons that answered: {}",
        human_bytes(left.bytes)
    ));
    for (id, e) in &left.unreachable {
        s.push_str(&format!(
            "\n  daemon {id} did not answer (its dirty data is unknown): {e}"
        ));
    }
    let state = state_dir.display();
    let mounts = if after_unmount {
        "; the mounts were already unmounted (mount again with `eddy mount` to use the data)"
    } else {
        " and the mounts stay"
    };
    let fix = if left.unreachable.is_empty() && report.error.is_none() {
        "the backend".to_string()
    } else {
        format!("the backend or the daemons that did not answer (logs: {state}/daemon-<id>.log)")
    };
    s.push_str(&format!(
        "\nThe daemons keep running with this data{mounts}. Fix {fix} and run \
         `eddy stop --state {state}` again, or run `eddy stop --state {state} --discard` to \
         stop and throw the data that is not written back away."
    ));
    // Refused because another writer changed the backend copy (decision 0030).
    let conflicts = report
        .failures()
        .any(|f| f.error.as_deref().is_some_and(|e| e.ends_with("(EBUSY)")));
    if conflicts {
        s.push_str(&format!(
            "\nFiles another writer changed in the backend are kept, not written over theirs: \
             copy them out of the mount, or run `eddy stage-out --state {state} --overwrite` \
             to write this deployment's copies over the backend's, then stop again."
        ));
    }
    s
}

/// Says how much dirty data `--discard` throws away.
fn warn_discarded(dep: &Deployment, say: Say) {
    let left = match crate::runtime().and_then(|rt| Ok((stage::client(dep.clone())?, rt))) {
        Ok((client, rt)) => dirty_left(&rt, &client),
        Err(e) => {
            say.err(&format!(
                "eddy: warning: --discard: cannot tell what is discarded: {e:#}"
            ));
            return;
        }
    };
    if left.bytes > 0 {
        say.err(&format!(
            "eddy: warning: --discard: {} of data not written back to the backend is thrown away",
            human_bytes(left.bytes)
        ));
    }
    for (id, e) in &left.unreachable {
        say.err(&format!(
            "eddy: warning: --discard: daemon {id} did not answer; any data it did not write \
             back is thrown away ({e})"
        ));
    }
}

/// Unmounts every recorded mount that is still mounted; returns what failed.
pub(crate) fn unmount_all(state: &StateDir) -> Vec<String> {
    let mounts = match state.mounts() {
        Ok(m) => m,
        Err(e) => return vec![format!("cannot list the mounts: {e:#}")],
    };
    let mut problems = Vec::new();
    for mnt in mounts {
        match crate::mounts::is_fuse_mounted(&mnt) {
            Ok(false) => {}
            Ok(true) => {
                if let Err(e) = eddy_proto::mounts::unmount(&mnt) {
                    problems.push(format!(
                        "cannot unmount {}: {e}; try `fusermount -u {0}`",
                        mnt.display()
                    ));
                }
            }
            Err(e) => problems.push(format!("{e:#}")),
        }
    }
    problems
}

/// The runtime and client a stop asks the daemons through.
struct Daemons {
    rt: Runtime,
    client: Client,
}

impl Daemons {
    fn connect(dep: &Deployment) -> Result<Daemons, String> {
        let rt = crate::runtime().map_err(|e| format!("{e:#}"))?;
        let client = Client::new(dep.clone())
            .map_err(|e| format!("cannot connect to the daemons to stop them: {e}"))?;
        Ok(Daemons { rt, client })
    }

    /// Asks every daemon to stop, each answering with its counters as it stops
    /// (`ShutdownWithStats`: the counters of the job profile and the stop in one round,
    /// bounded by twice the RPC deadline as the counters alone were). Returns every
    /// daemon's counters (or why there are none) and the daemons that did not acknowledge
    /// the stop. The client goes with it: a daemon waits for its connections to close
    /// before it exits.
    fn stop_with_counters(self, dep: &Deployment) -> (profile::Answers, Vec<String>) {
        let Daemons { rt, client } = self;
        let bound = Duration::from_millis(dep.config.rpc_timeout_ms.saturating_mul(2));
        let answers: profile::Answers = rt.block_on(async move {
            match tokio::time::timeout(bound, client.shutdown_daemons_with_stats()).await {
                Ok(answers) => answers
                    .into_iter()
                    .map(|(id, r)| (id, r.map_err(|e| e.to_string())))
                    .collect(),
                Err(_) => {
                    let e = format!("no answer within {} ms", bound.as_millis());
                    dep.daemons.iter().map(|d| (d.id, Err(e.clone()))).collect()
                }
            }
        });
        let not_stopped = answers
            .iter()
            .filter_map(|(id, r)| {
                r.as_ref()
                    .err()
                    .map(|e| format!("daemon {id} did not acknowledge shutdown: {e}"))
            })
            .collect();
        (answers, not_stopped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_client::FileResult;

    fn report(files: Vec<FileResult>, error: Option<&str>) -> Report {
        Report::new(files, Duration::ZERO, error.map(str::to_string))
    }

    #[test]
    fn refusal_lists_what_is_not_written_back_and_what_to_do() {
        let r = report(
            vec![
                FileResult {
                    path: "/in/new".into(),
                    bytes: 0,
                    error: Some("/pfs/in/new: read-only file system (EROFS)".into()),
                },
                FileResult {
                    path: "/in/ok".into(),
                    bytes: 3,
                    error: None,
                },
            ],
            None,
        );
        let left = DirtyLeft {
            bytes: 3 << 20,
            unreachable: vec![],
        };
        let msg = refusal(Path::new("/tmp/st"), &r, &left, false);
        assert!(msg.starts_with("the deployment is NOT stopped"), "{msg}");
        assert!(msg.contains("not written back (1 file):\n    /in/new: /pfs/in/new: read-only"));
        assert!(!msg.contains("/in/ok"), "{msg}");
        assert!(
            msg.contains("held by the daemons that answered: 3.0 MiB"),
            "{msg}"
        );
        assert!(msg.contains("Fix the backend and run"), "{msg}");
        assert!(msg.contains("the mounts stay"), "{msg}");
        assert!(msg.contains("`eddy stop --state /tmp/st` again"), "{msg}");
        assert!(
            msg.contains("`eddy stop --state /tmp/st --discard`"),
            "{msg}"
        );
    }

    #[test]
    fn refusal_of_a_file_another_writer_changed_says_how_to_overwrite() {
        let conflict = "its backend copy /pfs/out changed since this deployment took it \
                        (another writer, on another cache); not written back (EBUSY)";
        let r = report(
            vec![FileResult {
                path: "/out".into(),
                bytes: 0,
                error: Some(conflict.into()),
            }],
            None,
        );
        let left = DirtyLeft {
            bytes: 10,
            unreachable: vec![],
        };
        let msg = refusal(Path::new("/tmp/st"), &r, &left, false);
        assert!(
            msg.contains("`eddy stage-out --state /tmp/st --overwrite`"),
            "{msg}"
        );
        let plain = report(
            vec![FileResult {
                path: "/in".into(),
                bytes: 0,
                error: Some("/pfs/in: read-only file system (EROFS)".into()),
            }],
            None,
        );
        let msg = refusal(Path::new("/tmp/st"), &plain, &left, false);
        assert!(!msg.contains("--overwrite"), "{msg}");
    }

    #[test]
    fn refusal_names_an_unreachable_daemon() {
        let r = report(vec![], Some("daemon 1: connection refused (EIO)"));
        let left = DirtyLeft {
            bytes: 0,
            unreachable: vec![(1, "connection refused (EIO)".into())],
        };
        let msg = refusal(Path::new("/s"), &r, &left, true);
        assert!(
            msg.contains("did not complete: daemon 1: connection refused"),
            "{msg}"
        );
        assert!(msg.contains("daemon 1 did not answer"), "{msg}");
        assert!(
            msg.contains(
                "Fix the backend or the daemons that did not answer (logs: /s/daemon-<id>.log)"
            ),
            "{msg}"
        );
        assert!(msg.contains("mounts were already unmounted"), "{msg}");
        assert!(!msg.contains("not written back ("), "{msg}");
    }

    #[test]
    fn refusal_caps_the_list() {
        let files = (0..150)
            .map(|i| FileResult {
                path: format!("/f{i:03}"),
                bytes: 0,
                error: Some("EIO".into()),
            })
            .collect();
        let msg = refusal(
            Path::new("/s"),
            &report(files, None),
            &DirtyLeft::default(),
            false,
        );
        assert!(msg.contains("/f099: EIO"), "{msg}");
        assert!(!msg.contains("/f100"), "{msg}");
        assert!(msg.contains("… and 50 more"), "{msg}");
    }
}
