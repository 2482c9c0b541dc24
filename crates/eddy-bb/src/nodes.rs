//! What `eddy bb` asks Slurm (through `squeue`, `sinfo` and `scontrol`, only from the asynchronous phases: a call
//! from a synchronous one would wait on the slurmctld that waits on it) and how it runs a
//! command on a node (the site's launcher template).

use anyhow::{bail, Context, Result};
use eddy_deploy::launch::{launcher_argv, HostLine};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Bound on one call of a Slurm tool.
const SLURM_TOOL_TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(20);

/// Runs a program with a bound on its run time; its output, or an error with what it said.
pub fn run_bounded(program: &Path, args: &[OsString], bound: Duration) -> Result<String> {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null());
    output_bounded(cmd, bound)
}

/// Runs `cmd` with a bound on its run time (killed past it); its standard output, or an error
/// with what it said on standard error.
pub fn output_bounded(mut cmd: Command, bound: Duration) -> Result<String> {
    let what = describe(
        Path::new(cmd.get_program()),
        &cmd.get_args().map(OsString::from).collect::<Vec<_>>(),
    );
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {what}"))?;
    // Read while it runs, so that a child with much to say never blocks on a full pipe.
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_string(&mut text);
            }
            text
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
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
            bail!("{what} did not finish within {} s", bound.as_secs());
        }
        std::thread::sleep(POLL);
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if !status.success() {
        bail!("{what} failed ({status}): {}", err.trim());
    }
    Ok(out)
}

fn describe(program: &Path, args: &[OsString]) -> String {
    let mut words = vec![program.display().to_string()];
    words.extend(args.iter().map(|a| a.to_string_lossy().into_owned()));
    format!("`{}`", words.join(" "))
}

fn slurm_tool(program: &str, args: &[&str]) -> Result<String> {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    run_bounded(Path::new(program), &args, SLURM_TOOL_TIMEOUT)
}

/// Whether Slurm still runs the job (`squeue -o %T`, its state alone): false once it is
/// completing or gone, as for a job Slurm no longer lists.
pub fn job_running(job: u32) -> Result<bool> {
    let state = slurm_tool("squeue", &["-h", "-j", &job.to_string(), "-o", "%T"])?;
    Ok(matches!(
        state.trim(),
        "RUNNING" | "CONFIGURING" | "SUSPENDED" | "PENDING"
    ))
}

/// The job's nodes, each with the address Slurm reaches it at (its NodeAddr). Asked field by
/// field (`squeue -o %N`, `sinfo -o "%N %o"`), never cut out of a record of `Key=Value`
/// words: a job's comment or name (its user's to set) could carry `NodeList=` of its own.
pub fn job_nodes(job: u32) -> Result<Vec<HostLine>> {
    let list = slurm_tool("squeue", &["-h", "-j", &job.to_string(), "-o", "%N"])?;
    let list = list.trim();
    if list.is_empty() || list == "(null)" || list.contains(char::is_whitespace) {
        bail!("job {job} has no nodes yet (squeue says {list:?})");
    }
    let names = slurm_tool("scontrol", &["show", "hostnames", list])?;
    let names: Vec<&str> = names
        .lines()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    let table = slurm_tool("sinfo", &["-h", "-N", "-n", list, "-o", "%N %o"])?;
    node_addresses(&names, &table)
}

/// Each of `names` with its address from `sinfo -N -o "%N %o"` lines (a node listed once
/// per partition); a node sinfo does not show is reached by its name.
pub fn node_addresses(names: &[&str], table: &str) -> Result<Vec<HostLine>> {
    let mut addrs: HashMap<&str, &str> = HashMap::new();
    for line in table.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some(name), Some(addr), None) => {
                addrs.insert(name, addr);
            }
            (None, _, _) => {}
            _ => bail!("sinfo printed {line:?}, not a node and its address"),
        }
    }
    Ok(names
        .iter()
        .map(|name| HostLine {
            name: name.to_string(),
            address: addrs.get(name).copied().unwrap_or(name).to_string(),
        })
        .collect())
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
    fn node_addresses_come_from_sinfo_lines() {
        let table = "n1 10.0.0.1\nn2 10.0.0.2\nn1 10.0.0.1\n\n";
        let nodes = node_addresses(&["n1", "n2", "n3"], table).unwrap();
        let got: Vec<(&str, &str)> = nodes
            .iter()
            .map(|h| (h.name.as_str(), h.address.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![("n1", "10.0.0.1"), ("n2", "10.0.0.2"), ("n3", "n3")]
        );
        assert!(node_addresses(&["n1"], "n1 a NodeList=x\n").is_err());
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
            SLURM_TOOL_TIMEOUT,
        )
        .unwrap_err();
        assert!(e.to_string().contains("oops"), "{e}");
    }
}
