//! `eddy bench alloc`: DFRA's allocation proven on a live pool (issue 22, decision 0039). I/O
//! servers and compute nodes are network namespaces (net.rs), each link limited with `tc`;
//! Eddy deployments are started with `eddy start --hosts` and the `ip netns exec` launcher on
//! the servers an allocation chose (`eddy_alloc::decide`), the jobs' ranks run in the compute
//! namespaces (each with a host name of its own, so that the daemons' counters see nodes)
//! against `eddy:STATE`, and the four scenarios are measured in one run:
//! a. scaling (default allocation vs the one decided from the job's profile),
//! b. isolation (a bandwidth job alone, beside an N-1 job on shared servers, and with the
//!    N-1 job isolated by the interference rule),
//! c. screening (one server throttled to 10 %: probed, marked anomalous, avoided; and the
//!    same-size allocation without screening),
//! d. growth (a job of 4 ranks per compute node bound by its 2 servers' links; the run-time
//!    rule judges its live counters, and the job runs again after `eddy grow` adds the servers
//!    the rule chose to its running deployment; growth.rs).

use crate::args::{LaunchOpts, WorkloadOpts};
use crate::coord::{run_plan, RunSpec};
use crate::fs::{EddyFs, Fs, Target};
use crate::net::{self, Net};
use crate::plan::Plan;
use anyhow::{bail, Context, Result};
use clap::{Args, Parser};
use eddy_alloc::{decide, Decision, Job, Policy, RunningJob, Server};
use eddy_history::JobProfile;
use eddy_sysmap::health::{self, Health};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod growth;

#[derive(Debug, Args)]
pub struct AllocArgs {
    /// I/O server namespaces (at least 8 for the figures).
    #[arg(long, default_value_t = 8)]
    pub servers: usize,
    /// Compute node namespaces (at least 4).
    #[arg(long, default_value_t = 4)]
    pub computes: usize,
    /// Each server's link rate, both directions (tc syntax).
    #[arg(long, default_value = "200mbit")]
    pub server_rate: String,
    /// Each compute node's link rate: B_c, a compute node's peak I/O bandwidth (default: the
    /// server rate).
    #[arg(long)]
    pub compute_rate: Option<String>,
    /// MiB each rank writes (default 64, 8 with --quick).
    #[arg(long)]
    pub rank_mib: Option<u64>,
    /// Small sizes, for tests.
    #[arg(long)]
    pub quick: bool,
    /// Directory for the daemons' storage and the deployments' state (default: a fresh one
    /// under /dev/shm); removed at the end.
    #[arg(long, value_name = "DIR")]
    pub storage: Option<PathBuf>,
    /// The inventory database the health probes go into (default: in the storage
    /// directory).
    #[arg(long, value_name = "FILE")]
    pub inventory: Option<PathBuf>,
    /// Write the results as JSON to this file (`-` = stdout; the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub servers: usize,
    pub computes: usize,
    pub server_rate: String,
    pub compute_rate: String,
    pub rank_mib: u64,
    pub policy: Policy,
    /// The first probe: each server's B_f, bytes/s.
    pub pool_bandwidth: Vec<Option<f64>>,
    pub scaling: Scaling,
    pub isolation: Isolation,
    pub screening: Screening,
    pub growth: growth::Growth,
}

#[derive(Debug, Serialize)]
pub struct Scaling {
    pub default: Decision,
    pub default_mib_s: f64,
    pub history: JobProfile,
    pub scaled: Decision,
    pub scaled_mib_s: f64,
    /// scaled / default.
    pub ratio: f64,
}

#[derive(Debug, Serialize)]
pub struct Isolation {
    /// The bandwidth job's servers (the default allocation; it has no history).
    pub bandwidth_job: Vec<u32>,
    /// The N-1 job on shared servers (the default).
    pub shared: Decision,
    /// The N-1 job by DFRA, with the bandwidth job running on its default servers.
    pub dfra: Decision,
    pub alone_mib_s: f64,
    pub shared_mib_s: f64,
    pub isolated_mib_s: f64,
    /// alone / shared, alone / isolated.
    pub slowdown_shared: f64,
    pub slowdown_isolated: f64,
}

#[derive(Debug, Serialize)]
pub struct Screening {
    pub throttled_host: String,
    pub throttled_rate: String,
    pub health: Vec<Health>,
    pub screened: Decision,
    pub unscreened: Decision,
    /// Scenario a's scaled run, on unthrottled servers.
    pub baseline_mib_s: f64,
    pub screened_mib_s: f64,
    pub unscreened_mib_s: f64,
    /// The hosts `eddy status --inventory` flags as anomalous, for the screened and the
    /// unscreened deployment.
    pub status_flagged_screened: Vec<String>,
    pub status_flagged_unscreened: Vec<String>,
    /// baseline / screened, baseline / unscreened.
    pub slowdown_screened: f64,
    pub slowdown_unscreened: f64,
}

/// The work directory, removed on drop.
struct Work(PathBuf);

impl Drop for Work {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running deployment, stopped on drop.
struct Dep {
    state: PathBuf,
    stopped: bool,
}

impl Dep {
    fn stop(&mut self) -> Result<()> {
        self.stopped = true;
        let out = Command::new(eddy()?)
            .args(["stop", "--state"])
            .arg(&self.state)
            .output()
            .context("cannot run eddy stop")?;
        if !out.status.success() {
            bail!(
                "eddy stop --state {}: {}",
                self.state.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// The hosts of its daemons that `eddy status --inventory` flags as anomalous.
    fn flagged(&self, inventory: &Path) -> Result<Vec<String>> {
        let out = Command::new(eddy()?)
            .args(["status", "--json", "--state"])
            .arg(&self.state)
            .arg("--inventory")
            .arg(inventory)
            .output()
            .context("cannot run eddy status")?;
        if !out.status.success() {
            bail!(
                "eddy status --state {}: {}",
                self.state.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).context("eddy status --json")?;
        Ok(v["daemons"]
            .as_array()
            .map(|d| {
                d.iter()
                    .filter(|d| d["host_health"]["anomalous"] == true)
                    .filter_map(|d| d["host"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Stops it and returns the profile it left.
    fn stop_profile(&mut self) -> Result<JobProfile> {
        self.stop()?;
        let p = self.state.join("profile.json");
        let text = std::fs::read(&p).with_context(|| format!("no profile at {}", p.display()))?;
        serde_json::from_slice(&text).with_context(|| format!("bad profile {}", p.display()))
    }
}

impl Drop for Dep {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.stop();
        }
    }
}

fn eddy() -> Result<PathBuf> {
    std::env::current_exe().context("cannot find this program's path")
}

struct Bench<'a> {
    net: &'a Net,
    work: &'a Path,
    next: std::sync::atomic::AtomicU32,
    launcher: String,
}

/// The workload options of a job: ior-easy of `procs` ranks, `mib` each, in `mode`.
fn workload(procs: u32, mib: u64, mode: &str) -> Result<WorkloadOpts> {
    #[derive(Parser)]
    struct W {
        #[command(flatten)]
        w: WorkloadOpts,
    }
    let procs = procs.to_string();
    let bytes = (mib << 20).to_string();
    let w = W::try_parse_from([
        "w",
        "--procs",
        &procs,
        "--workloads",
        "ior-easy",
        "--easy-mode",
        mode,
        "--easy-xfer",
        "1048576",
        "--easy-bytes",
        &bytes,
    ])
    .context("workload options")?;
    Ok(w.w)
}

impl Bench<'_> {
    fn seq(&self) -> u32 {
        self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    }

    /// `eddy start` on the servers `ids`, named `job`.
    fn start(&self, job: &str, ids: &[u32]) -> Result<Dep> {
        self.start_with(job, ids, "")
    }

    /// The `name address` lines of the servers `ids`, as `eddy start --hosts` reads them.
    fn hosts_lines(&self, ids: &[u32]) -> String {
        ids.iter()
            .map(|&i| {
                format!(
                    "{} {}\n",
                    self.net.server(i as usize),
                    self.net.server_addr(i as usize)
                )
            })
            .collect()
    }

    /// `eddy start` on the servers `ids`, named `job`, with `extra` (whole TOML lines) added
    /// to its configuration.
    fn start_with(&self, job: &str, ids: &[u32], extra: &str) -> Result<Dep> {
        if ids.is_empty() {
            bail!("an allocation without servers for {job}");
        }
        let n = self.seq();
        let name = format!("dep{n}-{job}");
        let dir = self.work.join(&name);
        std::fs::create_dir_all(&dir)?;
        let hosts_file = dir.join("hosts");
        std::fs::write(&hosts_file, self.hosts_lines(ids))?;
        let config = dir.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "history_db = {:?}\n{extra}",
                self.work.join("history.db").to_string_lossy()
            ),
        )?;
        let state = dir.join("state");
        let root = format!("{}/roots/{{host}}/{name}", self.work.display());
        let out = Command::new(eddy()?)
            .args(["start", "--hosts"])
            .arg(&hosts_file)
            .args(["--launcher", "ip netns exec {host} {cmd}", "--root", &root])
            .arg("--state")
            .arg(&state)
            .arg("--config")
            .arg(&config)
            .args(["--listen-port", &(7300 + n).to_string(), "--name", job])
            .env_remove("EDDY_STATE")
            .output()
            .context("cannot run eddy start")?;
        if !out.status.success() {
            bail!(
                "eddy start of {job} on {ids:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(Dep {
            state,
            stopped: false,
        })
    }

    /// Runs one job (ior-easy-write) on `dep` with its ranks on compute nodes `nodes`;
    /// returns its MiB/s.
    fn run(&self, dep: &Dep, job: &str, opts: &WorkloadOpts, nodes: &[usize]) -> Result<f64> {
        crate::interrupt::check()?;
        let dir = format!("/{job}-{}", self.seq());
        EddyFs::connect(&dep.state)?
            .mkdir(Path::new(&dir))
            .with_context(|| format!("cannot create {dir} in the deployment"))?;
        let target: Target = format!("eddy:{}:{dir}", dep.state.display())
            .parse()
            .map_err(|e: String| anyhow::anyhow!(e))?;
        let plan = Plan::new(&target, opts, "ior-easy-write")?;
        let launch = LaunchOpts {
            listen: format!("{}:0", self.net.root_addr()),
            worker_launcher: Some(self.launcher.clone()),
            worker_hosts: nodes.iter().map(|&k| self.net.compute(k)).collect(),
            ..LaunchOpts::local()
        };
        note!("eddy bench alloc: {job} on {}", dep.state.display());
        let spec = RunSpec {
            label: job.to_string(),
            launch: &launch,
            keep: true,
        };
        let report = run_plan(&plan, &spec)?;
        let bw = report
            .phases
            .first()
            .map(|p| p.mib_s)
            .context("no phase measured")?;
        if !(bw.is_finite() && bw > 0.0) {
            bail!("{job}: no bandwidth measured");
        }
        Ok(bw)
    }

    /// Two jobs at once; their MiB/s.
    fn run_pair(
        &self,
        a: (&Dep, &str, &WorkloadOpts, &[usize]),
        b: (&Dep, &str, &WorkloadOpts, &[usize]),
    ) -> Result<(f64, f64)> {
        let one = |(dep, job, opts, nodes): (&Dep, &str, &WorkloadOpts, &[usize])| {
            self.run(dep, job, opts, nodes)
        };
        std::thread::scope(|sc| {
            let ta = sc.spawn(|| one(a));
            let tb = sc.spawn(|| one(b));
            let ra = ta
                .join()
                .map_err(|_| anyhow::anyhow!("job thread failed"))?;
            let rb = tb
                .join()
                .map_err(|_| anyhow::anyhow!("job thread failed"))?;
            Ok((ra?, rb?))
        })
    }
}

fn job(name: &str, nodes: u32) -> Job {
    Job {
        user: None,
        job_name: name.into(),
        script_hash: None,
        nodes,
        default_servers: Vec::new(),
    }
}

pub fn run(a: AllocArgs) -> Result<()> {
    if a.servers < 4 || a.computes < 3 {
        bail!(
            "--servers: at least 4 (scenario d grows 2 to 4), --computes: at least 3 (8 and 4 \
             for the issue's figures)"
        );
    }
    let compute_rate = a.compute_rate.clone().unwrap_or(a.server_rate.clone());
    let b_c = net::rate_bytes(&compute_rate)?;
    net::rate_bytes(&a.server_rate)?;
    let rank_mib = a.rank_mib.unwrap_or(if a.quick { 8 } else { 64 });
    let base = match &a.storage {
        Some(d) => d.clone(),
        None => PathBuf::from("/dev/shm"),
    };
    let work = tempfile::Builder::new()
        .prefix("eddy-bench-alloc.")
        .tempdir_in(&base)
        .with_context(|| format!("cannot create a work directory in {}", base.display()))?
        .keep();
    let work = Work(work);
    let net = Net::build(net::ALLOC, a.servers, a.computes)?;
    for i in 0..a.servers {
        net.limit_server(i, &a.server_rate)?;
        std::fs::create_dir_all(work.0.join("roots").join(net.server(i)))?;
    }
    for k in 0..a.computes {
        net.limit_compute(k, &compute_rate)?;
    }
    // Each rank gets the host name of its compute namespace (its own UTS namespace), so that
    // the daemons count nodes as a cluster's would.
    let uts = work.0.join("uts.sh");
    std::fs::write(
        &uts,
        "#!/bin/sh\nhostname \"$1\" || exit 1\nshift\nexec \"$@\"\n",
    )?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&uts, std::fs::Permissions::from_mode(0o700))?;
    }
    let bench = Bench {
        net: &net,
        work: &work.0,
        next: std::sync::atomic::AtomicU32::new(0),
        launcher: format!(
            "ip netns exec {{host}} unshare --uts {} {{host}} {{cmd}}",
            uts.display()
        ),
    };
    let inventory = a
        .inventory
        .clone()
        .unwrap_or_else(|| work.0.join("inventory.db"));
    let hosts: Vec<health::Host> = (0..a.servers)
        .map(|i| health::Host {
            name: net.server(i),
            address: net.server_addr(i),
        })
        .collect();
    let dir = format!("{}/roots/{{host}}", work.0.display());
    let spec = health::ProbeSpec {
        launcher: "ip netns exec {host} {cmd}",
        program: eddy()?.into(),
        dir: &dir,
        bytes: if a.quick { 2 << 20 } else { 8 << 20 },
        bound: Duration::from_secs(60),
    };

    let computes = a.computes as u32;
    let job_a = workload(computes, rank_mib, "n-n")?;
    let volume_a = u64::from(computes) * (rank_mib << 20);
    let policy = Policy {
        v_min_bytes: volume_a / 2,
        n_min: Some(3),
        default_servers: 1,
        compute_peak_bandwidth: Some(b_c),
        ..Policy::default()
    };
    policy.check().map_err(anyhow::Error::msg)?;

    // The pool: B_f of each server from a first probe.
    let first = health::record(
        &inventory,
        &health::probe(&spec, &hosts),
        policy.anomaly_ratio,
    )?;
    let mut pool: Vec<Server> = Vec::new();
    for (i, h) in first.iter().enumerate() {
        let Some(bw) = h.bandwidth else {
            bail!(
                "server {} is down: {}",
                h.host,
                h.error.as_deref().unwrap_or("?")
            );
        };
        let mut s = Server::idle_of(i as u32, bw);
        s.host = h.host.clone();
        pool.push(s);
    }
    let all: Vec<usize> = (0..a.computes).collect();

    // a. Scaling.
    note!("eddy bench alloc: a. scaling");
    let ja = job("ior-easy-nn", computes);
    let default = decide(&policy, &ja, None, &pool);
    let mut dep = bench.start("a-default", &default.servers)?;
    let default_mib_s = bench.run(&dep, "a-default", &job_a, &all)?;
    let history = dep.stop_profile()?;
    let scaled = decide(&policy, &ja, Some(&history), &pool);
    let mut dep = bench.start("a-scaled", &scaled.servers)?;
    let scaled_mib_s = bench.run(&dep, "a-scaled", &job_a, &all)?;
    dep.stop()?;
    let scaling = Scaling {
        default,
        default_mib_s,
        history: history.clone(),
        scaled,
        scaled_mib_s,
        ratio: scaled_mib_s / default_mib_s,
    };

    // b. Isolation: a bandwidth job on half the compute nodes, an N-1 job (twice its bytes,
    // so that it runs throughout) on one other node.
    note!("eddy bench alloc: b. isolation");
    let half: Vec<usize> = (0..a.computes / 2).collect();
    let other = vec![a.computes - 1];
    let job_bw = workload(half.len() as u32, rank_mib, "n-n")?;
    let job_n1 = workload(2, rank_mib * half.len() as u64, "n-1")?;
    let jb = job("bandwidth-job", half.len() as u32);
    let jn = job("n1-job", 1);
    let bw_servers = decide(&policy, &jb, None, &pool).servers;
    let shared = decide(&policy, &jn, None, &pool);
    // The N-1 job's history: a run alone on the default allocation.
    let mut d = bench.start("b-n1-history", &shared.servers)?;
    bench.run(&d, "b-n1-history", &job_n1, &other)?;
    let n1_history = d.stop_profile()?;
    let mut d1 = bench.start("b-bandwidth", &bw_servers)?;
    let alone = bench.run(&d1, "b-alone", &job_bw, &half)?;
    let mut d2 = bench.start("b-n1-shared", &shared.servers)?;
    let (shared_bw, _) = bench.run_pair(
        (&d1, "b-shared", &job_bw, &half),
        (&d2, "b-n1-shared", &job_n1, &other),
    )?;
    d2.stop()?;
    let mut busy = pool.clone();
    for s in busy.iter_mut().filter(|s| bw_servers.contains(&s.id)) {
        s.jobs.push(RunningJob {
            job: "bandwidth-job".into(),
            expected: None,
            live: None,
        });
    }
    let dfra = decide(&policy, &jn, Some(&n1_history), &busy);
    let mut d3 = bench.start("b-n1-dfra", &dfra.servers)?;
    let (isolated_bw, _) = bench.run_pair(
        (&d1, "b-isolated", &job_bw, &half),
        (&d3, "b-n1-dfra", &job_n1, &other),
    )?;
    d3.stop()?;
    d1.stop()?;
    let isolation = Isolation {
        bandwidth_job: bw_servers,
        shared,
        dfra,
        alone_mib_s: alone,
        shared_mib_s: shared_bw,
        isolated_mib_s: isolated_bw,
        slowdown_shared: alone / shared_bw,
        slowdown_isolated: alone / isolated_bw,
    };

    // c. Screening: the first server of the scaled allocation throttled to 10 %.
    note!("eddy bench alloc: c. screening");
    let slow = scaling.scaled.servers.first().copied().unwrap_or(0) as usize;
    let throttled_rate = net::scaled_rate(&a.server_rate, 0.1)?;
    net.limit_server(slow, &throttled_rate)?;
    let health = health::record(
        &inventory,
        &health::probe(&spec, &hosts),
        policy.anomaly_ratio,
    )?;
    let mut screened_pool = pool.clone();
    health::fill(&mut screened_pool, &health);
    let screened = decide(&policy, &ja, Some(&history), &screened_pool);
    let unscreened = decide(&policy, &ja, Some(&history), &pool);
    let mut dep = bench.start("c-screened", &screened.servers)?;
    let screened_mib_s = bench.run(&dep, "c-screened", &job_a, &all)?;
    let status_flagged_screened = dep.flagged(&inventory)?;
    dep.stop()?;
    let mut dep = bench.start("c-unscreened", &unscreened.servers)?;
    let unscreened_mib_s = bench.run(&dep, "c-unscreened", &job_a, &all)?;
    let status_flagged_unscreened = dep.flagged(&inventory)?;
    dep.stop()?;
    let screening = Screening {
        throttled_host: net.server(slow),
        throttled_rate,
        health: health::latest(&inventory, &[])?,
        screened,
        unscreened,
        baseline_mib_s: scaled_mib_s,
        screened_mib_s,
        unscreened_mib_s,
        status_flagged_screened,
        status_flagged_unscreened,
        slowdown_screened: scaled_mib_s / screened_mib_s,
        slowdown_unscreened: scaled_mib_s / unscreened_mib_s,
    };

    // d. Growth: a job bound by its 2 servers' links, before and after its deployment grows
    // to 4.
    note!("eddy bench alloc: d. growth");
    let growth = growth::measure(&bench, &a, slow, &policy, &pool, rank_mib, &all)?;

    let summary = Summary {
        servers: a.servers,
        computes: a.computes,
        server_rate: a.server_rate.clone(),
        compute_rate,
        rank_mib,
        policy,
        pool_bandwidth: first.iter().map(|h| h.bandwidth).collect(),
        scaling,
        isolation,
        screening,
        growth,
    };
    crate::table_and_json(a.json.as_deref(), &table(&summary), &summary)?;
    drop(net);
    drop(work);
    Ok(())
}

fn table(s: &Summary) -> String {
    let a = &s.scaling;
    let b = &s.isolation;
    let c = &s.screening;
    let d = &s.growth;
    format!(
        "eddy bench alloc: {} servers at {}, {} compute nodes at {}, {} MiB per rank\n\
         {:<44} {:>10} {:>10} {:>8}\n\
         {:<44} {:>10.1} {:>10.1} {:>7.2}x\n\
         {:<44} {:>10.1} {:>10.1} {:>7.2}x\n\
         {:<44} {:>10.1} {:>10.1} {:>7.2}x\n\
         {:<44} {:>10.1} {:>10.1} {:>7.2}x\n\
         {:<44} {:>10.1} {:>10.1} {:>7.2}x\n\
         {:<44} {:>10.1} {:>10.1} {:>7.2}x\n\
         servers: a default {:?} scaled {:?} ({:?}); b bandwidth job {:?}, N-1 job shared {:?}, \
         DFRA {:?} ({:?}); c throttled {} at {}, screened {:?} excluded {:?}, unscreened {:?}; \
         d {:?} grown by {:?} in {:.1} s to {} members\n\
         d. the run-time rule on the live counters: {}\n",
        s.servers,
        s.server_rate,
        s.computes,
        s.compute_rate,
        s.rank_mib,
        "scenario",
        "base MiB/s",
        "MiB/s",
        "ratio",
        "a. scaled vs default (want >= 2x)",
        a.default_mib_s,
        a.scaled_mib_s,
        a.ratio,
        "b. slowdown beside N-1 job, shared servers",
        b.alone_mib_s,
        b.shared_mib_s,
        b.slowdown_shared,
        "b. slowdown beside N-1 job, DFRA isolation",
        b.alone_mib_s,
        b.isolated_mib_s,
        b.slowdown_isolated,
        "c. slowdown with screening (slow one avoided)",
        c.baseline_mib_s,
        c.screened_mib_s,
        c.slowdown_screened,
        "c. slowdown without screening",
        c.baseline_mib_s,
        c.unscreened_mib_s,
        c.slowdown_unscreened,
        "d. grown 2 -> 4 vs before (want >= 1.8x)",
        d.before_mib_s,
        d.after_mib_s,
        d.ratio,
        a.default.servers,
        a.scaled.servers,
        a.scaled.rule,
        b.bandwidth_job,
        b.shared.servers,
        b.dfra.servers,
        b.dfra.rule,
        c.throttled_host,
        c.throttled_rate,
        c.screened.servers,
        c.screened.excluded,
        c.unscreened.servers,
        d.servers_before,
        d.servers_added,
        d.grow_s,
        d.members_after,
        match &d.verdict.hold {
            Some(why) => format!("held ({why})"),
            None => format!(
                "grow to {} ({})",
                d.verdict.target,
                d.verdict.reasons.first().map_or("", String::as_str)
            ),
        },
    )
}
