//! `eddy bench deploy`: the start and the stop of large local deployments (decision 0076).
//! For each number of daemons, `eddy start --local N` is timed until it returns (every
//! daemon ready and serving), the daemons are left idle for a moment and their memory read
//! from /proc (resident set, anonymous part, threads), then `eddy stop` is timed until it
//! returns and checked to have left no daemon running.

use crate::args::DeployArgs;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One deployment's figures.
#[derive(Debug, Serialize)]
struct Figures {
    daemons: u32,
    start_s: f64,
    stop_s: f64,
    /// Resident set (VmRSS) of an idle daemon, the mean over all, in KiB: its private
    /// memory and the pages of the program it shares with the others.
    rss_kib: u64,
    /// Anonymous resident memory (RssAnon), its own, in KiB.
    anon_kib: u64,
    threads: f64,
}

#[derive(Debug, Serialize)]
struct Results {
    storage: PathBuf,
    fs_type: String,
    reserve_bytes: u64,
    cpus: usize,
    runs: Vec<Figures>,
}

pub fn run(args: DeployArgs) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the eddy program's path")?;
    let storage = args.storage.clone().unwrap_or_else(|| "/var/tmp".into());
    let work = storage.join(format!("eddy-bench-deploy.{}", std::process::id()));
    std::fs::create_dir_all(&work)
        .with_context(|| format!("cannot make the work directory {}", work.display()))?;
    let config = work.join("config.toml");
    std::fs::write(&config, format!("meta_reserve_bytes = {}\n", args.reserve))
        .with_context(|| format!("cannot write {}", config.display()))?;
    let mut results = Results {
        fs_type: crate::tier::host::fs_type(&work),
        storage: storage.clone(),
        reserve_bytes: args.reserve,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        runs: Vec::new(),
    };
    let mut failed = None;
    for &n in &args.daemons {
        match one(&exe, &work, &config, n, Duration::from_secs(args.idle_s)) {
            Ok(f) => {
                note!(
                    "eddy bench deploy: {n} daemons: start {:.2} s, stop {:.2} s",
                    f.start_s,
                    f.stop_s
                );
                results.runs.push(f);
            }
            Err(e) => {
                failed = Some(e.context(format!("{n} daemons")));
                break;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    print_table(&results);
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&results)?;
        if path.as_os_str() == "-" {
            println!("{text}");
        } else {
            std::fs::write(path, text + "\n")
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    failed.map_or(Ok(()), Err)
}

/// Starts `n` daemons under `work`, reads their memory, stops them.
fn one(exe: &Path, work: &Path, config: &Path, n: u32, idle: Duration) -> Result<Figures> {
    let root = work.join(format!("n{n}"));
    let state = root.join("state");
    let eddy = |args: &[&std::ffi::OsStr]| crate::run_eddy(exe, args).map(|(took, _)| took);
    let n_arg = n.to_string();
    let start = eddy(&[
        "start".as_ref(),
        "--local".as_ref(),
        n_arg.as_ref(),
        "--root".as_ref(),
        root.as_os_str(),
        "--state".as_ref(),
        state.as_os_str(),
        "--config".as_ref(),
        config.as_os_str(),
        "--name".as_ref(),
        "bench-deploy".as_ref(),
    ]);
    let stop = || eddy(&["stop".as_ref(), "--state".as_ref(), state.as_os_str()]);
    let start = match start {
        Ok(t) => t,
        Err(e) => {
            // Whatever a failed start left (nothing, normally).
            let _ = stop();
            return Err(e);
        }
    };
    std::thread::sleep(idle);
    let pids = daemons_under(&root);
    let memory = memory_of(&pids);
    let stop = stop()?;
    let left = daemons_under(&root);
    if !left.is_empty() {
        bail!("eddy stop left {} daemons running: {left:?}", left.len());
    }
    let _ = std::fs::remove_dir_all(&root);
    if pids.len() != n as usize {
        bail!("{} daemons ran, not {n}", pids.len());
    }
    let (rss, anon, threads) = memory?;
    let per = |x: u64| x / u64::from(n.max(1));
    Ok(Figures {
        daemons: n,
        start_s: start.as_secs_f64(),
        stop_s: stop.as_secs_f64(),
        rss_kib: per(rss),
        anon_kib: per(anon),
        threads: threads as f64 / f64::from(n.max(1)),
    })
}

/// The processes serving a daemon root under `root` (`--root ROOT/d<i>` on their command
/// line).
fn daemons_under(root: &Path) -> Vec<u32> {
    let prefix = root.join("d");
    let prefix = prefix.as_os_str().as_encoded_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            args.windows(2)
                .any(|w| w[0] == b"--root" && w[1].starts_with(prefix))
        })
        .collect()
}

/// Sums of VmRSS, RssAnon (KiB) and Threads over `pids`.
fn memory_of(pids: &[u32]) -> Result<(u64, u64, u64)> {
    let (mut rss, mut anon, mut threads) = (0, 0, 0);
    for pid in pids {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("daemon {pid} is gone before its memory was read"))?;
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        rss += field("VmRSS:");
        anon += field("RssAnon:");
        threads += field("Threads:");
    }
    Ok((rss, anon, threads))
}

fn print_table(r: &Results) {
    println!(
        "eddy bench deploy: local daemons, roots on {} ({}), metadata reserve {} bytes, {} CPUs",
        r.storage.display(),
        r.fs_type,
        r.reserve_bytes,
        r.cpus
    );
    println!(
        "{:>8} {:>9} {:>8} {:>14} {:>15} {:>15}",
        "daemons", "start s", "stop s", "RSS/daemon MiB", "anon/daemon MiB", "threads/daemon"
    );
    for f in &r.runs {
        println!(
            "{:>8} {:>9.2} {:>8.2} {:>14.1} {:>15.1} {:>15.1}",
            f.daemons,
            f.start_s,
            f.stop_s,
            f.rss_kib as f64 / 1024.0,
            f.anon_kib as f64 / 1024.0,
            f.threads
        );
    }
}
