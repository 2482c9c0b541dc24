//! What `eddy bb` asks Slurm (through `scontrol`, only from the asynchronous phases: a call
//! from a synchronous one would wait on the slurmctld that waits on it) and how it runs a
//! command on a node (the site's launcher template).

use crate::start::{launcher_argv, HostLine};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Bound on one scontrol call.
const SCONTROL_TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(20);

/// Runs a program with a bound on its run time; its output, or an error with what it said.
pub fn run_bounded(program: &Path, args: &[OsString], bound: Duration) -> Result<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", program.display()))?;
    let deadline = Instant::now() + bound;
    let status = loop {
        if let Some(s) = child
            .try_wait()
            .context("cannot wait for a child process")?
        {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{} did not finish within {} s",
                describe(program, args),
                bound.as_secs()
            );
        }
        std::thread::sleep(POLL);
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    if !status.success() {
        bail!(
            "{} failed ({status}): {}",
            describe(program, args),
            err.trim()
        );
    }
    Ok(out)
}

fn describe(program: &Path, args: &[OsString]) -> String {
    let mut words = vec![program.display().to_string()];
    words.extend(args.iter().map(|a| a.to_string_lossy().into_owned()));
    format!("`{}`", words.join(" "))
}

fn scontrol(args: &[&str]) -> Result<String> {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    run_bounded(Path::new("scontrol"), &args, SCONTROL_TIMEOUT)
}

/// `Key=Value` words of a one-line scontrol record (`scontrol show ... -o`).
pub fn record_fields(line: &str) -> HashMap<String, String> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The job's nodes, each with the address Slurm reaches it at (its NodeAddr).
pub fn job_nodes(job: u32) -> Result<Vec<HostLine>> {
    let rec = record_fields(&scontrol(&["show", "job", "-o", &job.to_string()])?);
    let list = rec
        .get("NodeList")
        .filter(|l| !l.is_empty() && *l != "(null)")
        .with_context(|| format!("job {job} has no nodes yet"))?;
    let names = scontrol(&["show", "hostnames", list])?;
    names
        .lines()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|name| {
            let node = record_fields(&scontrol(&["show", "node", "-o", name])?);
            let address = node
                .get("NodeAddr")
                .cloned()
                .unwrap_or_else(|| name.to_string());
            Ok(HostLine {
                name: name.to_string(),
                address,
            })
        })
        .collect()
}

/// Runs `cmd` on `host` through the launcher template, bounded.
pub fn on_node(launcher: &str, host: &str, cmd: &[OsString], bound: Duration) -> Result<String> {
    let argv = launcher_argv(launcher, host, 0, cmd)?;
    let (program, rest) = argv.split_first().context("empty launcher template")?;
    run_bounded(Path::new(program), rest, bound).with_context(|| format!("on node {host}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scontrol_records_split_into_fields() {
        let rec =
            record_fields("JobId=12 JobName=x UserId=alice(1000) NodeList=n[1-3] Reason=None");
        assert_eq!(rec["NodeList"], "n[1-3]");
        assert_eq!(rec["UserId"], "alice(1000)");
    }

    #[test]
    fn a_command_past_its_bound_is_stopped_and_named() {
        let e = run_bounded(
            Path::new("sleep"),
            &["5".into()],
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("`sleep 5` did not finish within 0 s"),
            "{e}"
        );
        let e = run_bounded(
            Path::new("sh"),
            &["-c".into(), "echo oops >&2; exit 3".into()],
            SCONTROL_TIMEOUT,
        )
        .unwrap_err();
        assert!(e.to_string().contains("oops"), "{e}");
    }
}
