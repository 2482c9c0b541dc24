//! Early write-back timed by a job's predicted end (decision 0041): beside a live
//! deployment, watch its dirty bytes (the tier counters `eddy status` shows as dirty) and
//! start writing them back when the time left to the predicted end is about what writing
//! them back takes (at the rate the passes measure, first `writeback_rate_estimate`) plus a
//! margin; then keep passes going until the end, so that the stage-out at teardown finds
//! little left. A pass is the client's `write_back_early`: the check of stage-out, then the
//! dirty chunks of the files that passed it; files stay dirty, to be finalised by that
//! stage-out. Ends at the predicted end, when the deployment stops, or when `stop` says so.

use crate::stage::{client, require_links};
use crate::state::StateDir;
use crate::{human_bytes, Say};
use anyhow::{anyhow, bail, Context, Result};
use eddy_client::Client;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::runtime::Runtime;

/// Bytes a pass must write for its rate to replace the estimate (smaller passes are
/// dominated by their fixed costs).
const RATE_MIN_BYTES: u64 = 1024 * 1024;
/// Steps of a wait, so that a signal or the end is noticed soon.
const WAIT_STEP: Duration = Duration::from_millis(50);

/// One write-back pass.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Pass {
    /// Dirty bytes over the deployment when the pass began.
    pub dirty_before: u64,
    /// Bytes written to the backend.
    pub bytes: u64,
    pub seconds: f64,
    /// Files with data written back, and files that failed (in conflict: held back).
    pub files: usize,
    pub failed: usize,
    /// Seconds to the predicted end when the pass began.
    pub left: f64,
}

/// Why the watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Ended {
    /// The predicted end came.
    PredictedEnd,
    /// The deployment was stopped (its state says so).
    Stopped,
    /// Asked to stop (a signal).
    Signal,
}

/// What the watch did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    pub passes: Vec<Pass>,
    /// Seconds to the predicted end when writing back started, if it did.
    pub started_left: Option<f64>,
    /// Dirty bytes when the watch ended, if the deployment still answered.
    pub dirty_at_end: Option<u64>,
    /// The write-back rate last used (bytes per second).
    pub rate: f64,
    pub ended: Ended,
}

/// When to end and how early to start.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The job's predicted end.
    pub end: SystemTime,
    /// Time kept in hand beyond the write-back's own estimate.
    pub margin: Duration,
}

/// The predicted end from `UNIX_SECONDS` text: a number of seconds since the epoch, in the
/// future.
pub fn parse_end(text: &str) -> Result<SystemTime> {
    let secs: f64 = text.trim().parse().map_err(|_| {
        anyhow!("--end {text:?} is not a time: give the predicted end as Unix seconds, e.g. $(( $(date +%s) + 3600 ))")
    })?;
    if !secs.is_finite() || secs < 0.0 {
        bail!("--end {text:?} is not a time in Unix seconds");
    }
    let end = UNIX_EPOCH + Duration::from_secs_f64(secs);
    if end <= SystemTime::now() {
        bail!("--end {text}: the predicted end is in the past; nothing is left to time");
    }
    Ok(end)
}

/// Whether writing back must start: `dirty` bytes at `rate` plus `margin` take at least the
/// `left` seconds.
pub fn due(dirty: u64, rate: f64, margin: Duration, left: Duration) -> bool {
    let need = dirty as f64 / rate.max(1.0) + margin.as_secs_f64();
    left.as_secs_f64() <= need
}

/// Watches the deployment in `state` until `opts.end` (or it stops, or `stop()`), writing
/// back early as described in the module's comment. The passes are reported to `say` and
/// the log. An unreachable daemon at the first look is an error (within the client's
/// timeouts); one later, while the deployment is not stopped, too.
pub fn run(state: &StateDir, opts: Options, stop: &dyn Fn() -> bool, say: Say) -> Result<Outcome> {
    if opts.end <= SystemTime::now() {
        bail!("the predicted end is in the past");
    }
    let dep = state.load_deployment()?;
    require_links(&dep, state)?;
    let mut rate = dep.config.writeback_rate_estimate as f64;
    let interval = Duration::from_millis(dep.config.writeback_pass_interval_ms);
    let rt = crate::runtime()?;
    let daemons = dep.daemons.len();
    let client = client(dep)?;
    let mut out = Outcome {
        passes: Vec::new(),
        started_left: None,
        dirty_at_end: None,
        rate,
        ended: Ended::PredictedEnd,
    };
    let first = dirty_bytes(&rt, &client).context("cannot watch the deployment")?;
    say.out(&format!(
        "eddy writeback: watching {} daemons: {} dirty, the predicted end in {:.1} s, margin \
         {:.1} s, {}/s assumed",
        daemons,
        human_bytes(first),
        time_left(opts.end).unwrap_or_default().as_secs_f64(),
        opts.margin.as_secs_f64(),
        human_bytes(rate as u64)
    ));
    loop {
        if stop() {
            out.ended = Ended::Signal;
            break;
        }
        if !state.has_deployment() {
            out.ended = Ended::Stopped;
            break;
        }
        let Some(left) = time_left(opts.end) else {
            break;
        };
        let dirty = match dirty_bytes(&rt, &client) {
            Ok(d) => d,
            Err(_) if !state.has_deployment() => {
                out.ended = Ended::Stopped;
                break;
            }
            Err(e) => return Err(e.context("cannot watch the deployment")),
        };
        if out.started_left.is_none() && due(dirty, rate, opts.margin, left) {
            out.started_left = Some(left.as_secs_f64());
            say.out(&format!(
                "eddy writeback: starting: {} dirty, {:.1} s to the predicted end, {:.1} s \
                 needed at {}/s plus {:.1} s margin",
                human_bytes(dirty),
                left.as_secs_f64(),
                dirty as f64 / rate.max(1.0),
                human_bytes(rate as u64),
                opts.margin.as_secs_f64()
            ));
        }
        let begun = Instant::now();
        if out.started_left.is_some() && dirty > 0 {
            let pass = match one_pass(&rt, &client, dirty, left) {
                Ok(p) => p,
                Err(_) if !state.has_deployment() => {
                    out.ended = Ended::Stopped;
                    break;
                }
                Err(e) => return Err(e),
            };
            if pass.bytes >= RATE_MIN_BYTES && pass.seconds > 0.0 {
                rate = pass.bytes as f64 / pass.seconds;
            }
            let line = pass_line(out.passes.len() + 1, &pass);
            tracing::info!(
                bytes = pass.bytes,
                seconds = pass.seconds,
                files = pass.files,
                failed = pass.failed,
                "early write-back pass"
            );
            say.out(&line);
            out.passes.push(pass);
        }
        wait(interval.saturating_sub(begun.elapsed()), opts.end, stop);
    }
    out.rate = rate;
    out.dirty_at_end = dirty_bytes(&rt, &client).ok();
    let written: u64 = out.passes.iter().map(|p| p.bytes).sum();
    let why = match out.ended {
        Ended::PredictedEnd => "at the predicted end",
        Ended::Stopped => "the deployment stopped",
        Ended::Signal => "stopped by a signal",
    };
    let left = out.dirty_at_end.map_or("unknown".to_string(), human_bytes);
    say.out(&format!(
        "eddy writeback: {why}: {left} dirty; {} written back early in {} pass{}",
        human_bytes(written),
        out.passes.len(),
        if out.passes.len() == 1 { "" } else { "es" }
    ));
    Ok(out)
}

/// Time from now to `end`, if any is left.
fn time_left(end: SystemTime) -> Option<Duration> {
    end.duration_since(SystemTime::now())
        .ok()
        .filter(|d| !d.is_zero())
}

/// Sleeps `d`, in steps, returning early at `end` or when `stop()`.
fn wait(d: Duration, end: SystemTime, stop: &dyn Fn() -> bool) {
    let until = Instant::now() + d;
    while Instant::now() < until && !stop() && time_left(end).is_some() {
        std::thread::sleep(WAIT_STEP.min(until.saturating_duration_since(Instant::now())));
    }
}

/// The dirty bytes of every daemon, summed; an error if any daemon does not answer.
pub fn dirty_bytes(rt: &Runtime, client: &Client) -> Result<u64> {
    let mut sum = 0;
    for (id, r) in rt.block_on(client.daemon_status()) {
        let s = r.map_err(|e| anyhow!("daemon {id} does not answer: {e}"))?;
        sum += s.tier.dirty_bytes;
    }
    Ok(sum)
}

/// One early write-back pass over every linked prefix.
fn one_pass(rt: &Runtime, client: &Client, dirty: u64, left: Duration) -> Result<Pass> {
    let start = Instant::now();
    let files = rt
        .block_on(client.write_back_early(&[], &|_| {}))
        .map_err(|e| anyhow!("early write-back did not complete: {e}"))?;
    Ok(Pass {
        dirty_before: dirty,
        bytes: files.iter().map(|f| f.bytes).sum(),
        seconds: start.elapsed().as_secs_f64(),
        files: files.iter().filter(|f| f.bytes > 0).count(),
        failed: files.iter().filter(|f| f.error.is_some()).count(),
        left: left.as_secs_f64(),
    })
}

/// E.g. "eddy writeback: pass 2: 12.0 MiB of 14.0 MiB dirty in 0.40 s (30.0 MiB/s), 3
/// files; 20.1 s left".
fn pass_line(n: usize, p: &Pass) -> String {
    let mut s = format!(
        "eddy writeback: pass {n}: {} of {} dirty in {:.2} s ({}/s), {} file{}; {:.1} s left",
        human_bytes(p.bytes),
        human_bytes(p.dirty_before),
        p.seconds,
        human_bytes((p.bytes as f64 / p.seconds.max(1e-3)) as u64),
        p.files,
        if p.files == 1 { "" } else { "s" },
        p.left
    );
    if p.failed > 0 {
        s.push_str(&format!(
            "; {} in conflict with their backend copy, left alone",
            p.failed
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_when_the_time_left_is_what_writing_back_takes() {
        let mib = 1024 * 1024;
        let m = Duration::from_secs(2);
        // 100 MiB at 10 MiB/s: 10 s, plus 2 s margin.
        assert!(!due(
            100 * mib,
            10.0 * mib as f64,
            m,
            Duration::from_secs(13)
        ));
        assert!(due(
            100 * mib,
            10.0 * mib as f64,
            m,
            Duration::from_secs(12)
        ));
        assert!(due(0, 10.0, m, Duration::from_secs(2)));
        assert!(!due(0, 10.0, m, Duration::from_secs(3)));
    }

    #[test]
    fn ends_are_checked() {
        let err = parse_end("soon").unwrap_err().to_string();
        assert!(err.contains("not a time"), "{err}");
        let err = parse_end("1000").unwrap_err().to_string();
        assert!(err.contains("in the past"), "{err}");
        assert!(parse_end("-5").is_err());
        assert!(parse_end("NaN").is_err());
        let later = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 60;
        assert!(parse_end(&later.to_string()).is_ok());
    }

    #[test]
    fn pass_lines_say_bytes_and_seconds() {
        let p = Pass {
            dirty_before: 4 << 20,
            bytes: 2 << 20,
            seconds: 0.5,
            files: 1,
            failed: 1,
            left: 9.0,
        };
        assert_eq!(
            pass_line(3, &p),
            "eddy writeback: pass 3: 2.0 MiB of 4.0 MiB dirty in 0.50 s (4.0 MiB/s), 1 file; \
             9.0 s left; 1 in conflict with their backend copy, left alone"
        );
    }
}
