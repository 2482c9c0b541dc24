//! The burst-buffer phases, in the order Slurm calls them. Each one is safe to run again
//! (Slurm retries, an administrator reruns), and teardown undoes whatever the others did,
//! however far they got, from root's job record. What runs on each node (the mount, the
//! clean-up) is in `phases/node.rs`, a job's `#EDDY prefetch` in `phases/prefetch.rs`.

use crate::as_user::{self, Seen};
use crate::directives::{self, JobRequest, Mode, NODE_LOCAL_POOL};
use crate::job::{DaemonPlace, JobDir, JobRecord};
use crate::nodes;
use crate::site::Site;
use anyhow::{anyhow, bail, Context, Result};
use eddy_config::Config;
use eddy_deploy::launch::{fill, parse_hosts, HostLine};
use eddy_deploy::profile::HistoryTarget;
use eddy_deploy::start::{configure, Overrides};
use eddy_deploy::{human_bytes, Placement, Plan, Say, StopOptions};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn read_request(site: &Site, script: &Path) -> Result<JobRequest> {
    // privileged-path: the job script Slurm passes, in slurmctld's own state directory
    let text = std::fs::read_to_string(script)
        .with_context(|| format!("cannot read the job script {}", script.display()))?;
    directives::parse(&text, &site.directive).map_err(|e| anyhow!(e))
}

/// At submit: the directives parse and the site allows them.
pub fn job_process(site: &Site, script: &Path) -> Result<()> {
    let req = read_request(site, script)?;
    site.resolve(&req)?;
    Ok(())
}

/// Slurm's pools, in MiB: node-local (jobs on their own nodes) and the I/O-node pool; the
/// JSON document Slurm reads (one line).
pub fn pools(site: &Site) -> Result<String> {
    let pool = |name: &str, bytes: u64| serde_json::json!({ "id": name, "quantity": bytes >> 20, "granularity": 1u64 << 20 });
    let mut pools = vec![pool(NODE_LOCAL_POOL, site.node_local_bytes()?)];
    if let Some(p) = &site.pool {
        pools.push(pool(&p.name, site.pool_bytes(p)?));
    }
    Ok(serde_json::json!({ "pools": pools }).to_string())
}

/// While pending: the job's directory and record; pool mode starts the daemons.
pub fn setup(site: &Site, job: u32, uid: u32, gid: u32, script: &Path, say: Say) -> Result<()> {
    let req = read_request(site, script)?;
    let r = site.resolve(&req)?;
    let jd = JobDir::new(site, job);
    jd.create(uid, gid)?;
    // privileged-path: job.toml in the job directory, root's 0711 under the trusted state_dir
    let mut rec = if jd.exists() {
        let rec = jd.load()?;
        // Slurm's job ids start again when its state is cleared: a record of another job
        // with the same id is not this job's to take over.
        if (rec.job, rec.uid, rec.gid) != (job, uid, gid) || rec.request != req {
            bail!(
                "{} holds the record of another job {} of uid {}: an administrator must \
                 remove it (eddy bb teardown {} as it was, or by hand)",
                jd.dir.display(),
                rec.job,
                rec.uid,
                rec.job
            );
        }
        rec
    } else {
        JobRecord {
            job,
            uid,
            gid,
            request: req,
            mode: r.mode,
            capacity: r.capacity,
            pool_nodes: r.pool_nodes,
            daemons: Vec::new(),
            mounted: Vec::new(),
            // privileged-path: the job script Slurm passes, in slurmctld's own state directory
            script_hash: std::fs::read(script)
                .ok()
                .map(|text| eddy_config::JobInfo::script_hash(&text)),
            job_name: None,
            nodes: None,
            decision: None,
            walltime: Default::default(),
            prefetch_pid: None,
            prefetch_start_time: None,
            grow: Default::default(),
        }
    };
    jd.save(&rec)?;
    if rec.mode == Mode::Pool {
        let pool = site
            .pool
            .as_ref()
            .context("mode=pool but the site has no [pool] any more")?;
        // The servers, decided once (a rerun keeps them: its daemons may be running), one
        // job at a time (under the state directory's lock), so that jobs set up together
        // each see the others' decisions. What they are decided from is gathered before the
        // lock (decision 0055): the lock covers the decision and its record, no other I/O.
        if rec.decision.is_none() {
            crate::alloc::check_user_limit(site, pool, &rec)?;
            let gathered = crate::alloc::gather_for(site, pool, &mut rec)?;
            // privileged-path: the site's state_dir, checked by trusted_dir (JobDir::create) just before
            let all = std::fs::File::open(&site.state_dir)
                .with_context(|| format!("cannot open {}", site.state_dir.display()))?;
            lock_exclusive(&all, &site.state_dir)?;
            // Counted again under the lock: jobs of one user set up together are admitted
            // one at a time.
            crate::alloc::check_user_limit(site, pool, &rec)?;
            let decision = crate::alloc::decide_for(site, pool, &rec, gathered)?;
            let summary = crate::alloc::comment(&decision, pool);
            rec.pool_nodes = u32::try_from(decision.servers.len()).unwrap_or(u32::MAX);
            rec.decision = Some(decision);
            jd.save(&rec)?;
            drop(all);
            // Slurm answered the allocation's questions: it is asked to keep the summary.
            let asked = rec.job_name.is_some();
            if let Err(e) = asked
                .then(|| crate::alloc::set_comment(job, &summary))
                .transpose()
            {
                say.err(&format!(
                    "eddy: warning: the job's Comment does not say its allocation: {e:#}"
                ));
            }
        }
        let decision = rec
            .decision
            .as_ref()
            .context("the job's decision is recorded")?;
        for r in &decision.reasons {
            say.out(&format!("eddy: allocation: {r}"));
        }
        let lines: Vec<String> = decision
            .servers
            .iter()
            .filter_map(|id| pool.nodes.get(*id as usize).cloned())
            .collect();
        if lines.len() != decision.servers.len() {
            bail!(
                "the job's servers {:?} are not all in the site's [pool] any more",
                decision.servers
            );
        }
        let hosts = parse_hosts(&lines.join("\n"))?;
        start_daemons(site, &jd, &mut rec, &hosts, &pool.root, say)?;
    }
    Ok(())
}

/// While pending: every stage-in source exists (else the job waits with a Reason saying
/// which); pool mode stages in now, or, with the site's `[walltime]`, at the job's predicted
/// start minus the staging estimate (crate::walltime).
pub fn data_in(site: &Site, job: u32, _script: &Path, say: Say) -> Result<()> {
    let jd = JobDir::new(site, job);
    let mut rec = jd.load()?;
    check_sources(&rec)?;
    if rec.mode == Mode::Pool {
        if let Some(w) = crate::walltime::settings(site) {
            crate::walltime::wait_for_stage_in(w, &jd, &mut rec, say)?;
        }
        stage_in(&jd, &rec.request, say)?;
    }
    Ok(())
}

/// Nothing to change: the job uses the capacity it asked for.
pub fn real_size(_site: &Site, _job: u32) -> Result<()> {
    Ok(())
}

/// The job's environment: where the namespace is mounted and the deployment file.
pub fn paths(site: &Site, job: u32, path_file: &Path) -> Result<()> {
    let jd = JobDir::new(site, job);
    let text = format!(
        "EDDY_MOUNT={}\nEDDY_STATE={}\nEDDY_JOB_DIR={}\n",
        site.mount_point(job).display(),
        jd.user_dir().display(),
        jd.dir.display()
    );
    // privileged-path: the path file slurmctld names, in its own state directory
    std::fs::write(path_file, text)
        .with_context(|| format!("cannot write the path file {}", path_file.display()))
}

/// The job's nodes are known: node-local mode starts a daemon on each; the namespace is
/// mounted on each; node-local mode stages in.
pub fn pre_run(site: &Site, site_file: Option<&Path>, job: u32, say: Say) -> Result<()> {
    let jd = JobDir::new(site, job);
    let mut rec = jd.load()?;
    let nodes = nodes::job_nodes(job)?;
    if rec.mode == Mode::NodeLocal {
        let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
        if let Some(msg) = short_of_space(&site.node_space(&names)?, rec.capacity, nodes.len()) {
            bail!("{msg}");
        }
        start_daemons(site, &jd, &mut rec, &nodes, &site.node_root, say)?;
    }
    rec.mounted = nodes.iter().map(|n| n.name.clone()).collect();
    jd.save(&rec)?;
    let mount = site.mount_point(job);
    let eddy = site.eddy_program()?;
    on_nodes(site, &rec.mounted, |_| {
        vec![
            eddy.clone().into(),
            "bb".into(),
            "node-mount".into(),
            jd.state().dir().into(),
            mount.clone().into(),
        ]
    })
    .context("cannot mount the job's namespace on its nodes")?;
    if rec.mode == Mode::NodeLocal {
        stage_in(&jd, &rec.request, say)?;
    }
    // The job does not wait for its prefetch, nor is it held when that cannot start.
    if let Err(e) = prefetch::start(&jd, &mut rec, say) {
        say.out(&format!("eddy: job {job}: no prefetch: {e:#}"));
    }
    if let Some(w) = crate::walltime::settings(site) {
        // A prediction that cannot be made never holds the job.
        if let Err(e) = crate::walltime::record_predicted_end(w, &jd, &mut rec, say) {
            say.out(&format!("eddy: job {job}: no predicted end: {e:#}"));
        }
        // Nor does an early write-back that cannot start.
        if let Err(e) = crate::walltime::start_early_writeback(w, &jd, &mut rec, say) {
            say.out(&format!("eddy: job {job}: no early write-back: {e:#}"));
        }
    }
    // Nor one whose servers cannot grow (decision 0082).
    if let Err(e) = crate::grow::start(site, site_file, &jd, &mut rec, say) {
        say.out(&format!(
            "eddy: job {job}: its servers will not grow: {e:#}"
        ));
    }
    Ok(())
}

/// After the job: unmount from its nodes, so nothing changes during stage-out.
pub fn post_run(site: &Site, job: u32) -> Result<()> {
    let jd = JobDir::new(site, job);
    let rec = jd.load()?;
    crate::grow::stop(site, &rec);
    unmount_nodes(site, &rec)
}

/// After the job: write the stage_out trees (every linked prefix if none is listed) back.
pub fn data_out(site: &Site, job: u32, say: Say) -> Result<()> {
    let jd = JobDir::new(site, job);
    // The servers a grow added are in the record once its watcher is stopped.
    crate::grow::stop(site, &jd.load()?);
    let rec = jd.load()?;
    // What the early write-back did not write is written here, once; a prefetch is over.
    crate::walltime::stop_early_writeback(&jd, &rec, say);
    prefetch::stop(&rec);
    if rec.request.links.is_empty() || !jd.state().has_deployment() {
        return Ok(());
    }
    // Namespace paths as the job wrote them: nothing of this host is resolved for them.
    let report =
        eddy_deploy::stage::stage_out_namespace(&jd.state(), &rec.request.stage_out, false)?;
    for line in report.lines("staged out", "nothing to stage out: no dirty data") {
        say.out(&line);
    }
    report.outcome("stage-out")
}

/// Undo everything, from root's record: unmount, stop the daemons (what was to be kept was
/// staged out by data_out; `hurry` skipped that), remove the storage on every node and the
/// job's directory. Every step is tried; the first failure is reported after all ran.
/// Teardown as Slurm runs it: the work goes on in a process of its own session, which this
/// one waits for and reports. Slurm 22.05 kills a job's running burst-buffer scripts when the
/// job is cancelled (a cancel right after a failed stage-in kills the teardown that failure
/// started); killed or not, the detached teardown finishes, and a teardown started meanwhile
/// waits for it on the job's lock and finds the job gone.
pub fn teardown_detached(
    site: &Site,
    site_file: Option<&Path>,
    job: u32,
    hurry: bool,
    say: Say,
) -> Result<()> {
    let jd = JobDir::new(site, job);
    // privileged-path: the job directory, root's 0711 under the trusted state_dir
    if !jd.dir.exists() {
        return Ok(());
    }
    let exe = std::env::current_exe().context("cannot find the eddy program")?;
    let mut args: Vec<std::ffi::OsString> = vec!["bb".into()];
    if let Some(f) = site_file {
        args.extend(["--site".into(), f.as_os_str().to_owned()]);
    }
    args.extend(["teardown-now".into(), job.to_string().into()]);
    if hurry {
        args.push("--hurry".into());
    }
    // The log lives in the job's directory, which a complete teardown removes; it is open
    // here before the child starts, so its words are read whatever happens to the name.
    let log = jd.dir.join(format!("teardown-{}.log", std::process::id()));
    let mut child = eddy_deploy::procs::spawn_detached(&exe, &args, &log)?;
    let mut words =
        // privileged-path: the teardown log spawn_detached made in the job directory, root's 0711
        std::fs::File::open(&log).with_context(|| format!("cannot read {}", log.display()))?;
    let status = child.wait().context("waiting for the teardown")?;
    let mut out = String::new();
    std::io::Read::read_to_string(&mut words, &mut out)
        .with_context(|| format!("cannot read {}", log.display()))?;
    // privileged-path: the teardown log in the job directory, root's 0711
    let _ = std::fs::remove_file(&log);
    for line in out.lines() {
        say.out(line);
    }
    if status.success() {
        return Ok(());
    }
    let last = out.lines().rev().find(|l| !l.trim().is_empty());
    bail!(
        "{}",
        last.map(|l| l.trim_start_matches("eddy: ").to_string())
            .unwrap_or_else(|| format!("teardown of job {job} failed ({status})"))
    )
}

/// The teardown itself, one at a time per job (under the lock of its directory).
pub fn teardown(site: &Site, job: u32, hurry: bool, say: Say) -> Result<()> {
    let jd = JobDir::new(site, job);
    // privileged-path: the job directory, root's 0711 under the trusted state_dir
    let Ok(dir) = std::fs::File::open(&jd.dir) else {
        return Ok(()); // gone: done before
    };
    lock_exclusive(&dir, &jd.dir)?;
    // privileged-path: the job directory, root's 0711 under the trusted state_dir
    if !jd.dir.exists() {
        return Ok(()); // done by the teardown this one waited for
    }
    let mut problems = Vec::new();
    // The servers a grow added are in the record once its watcher is stopped.
    if let Ok(rec) = jd.load() {
        crate::grow::stop(site, &rec);
    }
    let rec = match jd.load() {
        Ok(rec) => Some(rec),
        Err(e) => {
            problems.push(format!("{e:#}"));
            None
        }
    };
    if let Some(rec) = &rec {
        crate::walltime::stop_early_writeback(&jd, rec, say);
        prefetch::stop(rec);
        if let Err(e) = unmount_nodes(site, rec) {
            problems.push(format!("{e:#}"));
        }
    }
    let state = jd.state();
    if state.has_deployment() {
        if hurry {
            say.out(&format!(
                "eddy: job {job} cancelled in a hurry: nothing is staged out"
            ));
        }
        // The profile goes to the site's history only (root-owned settings; the job's own
        // configuration and files are not followed), through the site's insert-only role if
        // it has one; its nodes are those Slurm gave the job (root's record), whatever the
        // job's clients call theirs.
        let slurm_nodes = rec
            .as_ref()
            .map(|r| r.mounted.clone())
            .filter(|m| !m.is_empty());
        let options = StopOptions {
            discard: true,
            // A history that cannot be used costs the job its stored profile, never its
            // teardown.
            history: match site.profile_target(slurm_nodes) {
                Ok(target) => HistoryTarget::Site(target),
                Err(e) => HistoryTarget::SiteUnavailable(format!("{e:#}")),
            },
            // The profile carries the allocation its servers were chosen by (decision 0038).
            allocation: rec.as_ref().and_then(|r| {
                let pool = site.pool.as_ref()?;
                let mut a = crate::alloc::allocation(r.decision.as_ref()?, pool);
                a.grown = crate::grow::grown(r);
                Some(a)
            }),
        };
        let stopped = eddy_deploy::stop(&state, options, say);
        if let Err(e) = stopped {
            problems.push(format!("stopping the daemons: {e:#}"));
        }
    }
    if let Some(rec) = &rec {
        let eddy = site.eddy_program()?;
        let hosts: Vec<String> = rec.daemons.iter().map(|d| d.host.clone()).collect();
        let cleaned = on_nodes(site, &hosts, |i| {
            vec![
                eddy.clone().into(),
                "bb".into(),
                "node-clean".into(),
                "--root".into(),
                rec.daemons[i].root.clone().into(),
            ]
        });
        if let Err(e) = cleaned {
            problems.push(format!("removing the job's storage: {e:#}"));
        }
    }
    if problems.is_empty() {
        jd.remove()?;
        return Ok(());
    }
    bail!(
        "teardown of job {job} is incomplete: {}",
        problems.join("; ")
    )
}

/// `scontrol show bbstat`: one line per job with a burst buffer.
pub fn status(site: &Site, say: Say) -> Result<()> {
    // privileged-path: the site's state_dir (root's settings)
    let mut jobs: Vec<u32> = match std::fs::read_dir(&site.state_dir) {
        Ok(entries) => entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).context(format!("cannot list {}", site.state_dir.display())),
    };
    jobs.sort_unstable();
    say.out(&format!(
        "{:>8} {:>6} {:>10} {:>10} {:>7} {:>7}",
        "JOB", "UID", "MODE", "CAPACITY", "DAEMONS", "MOUNTS"
    ));
    for job in jobs {
        let Ok(rec) = JobDir::new(site, job).load() else {
            continue;
        };
        say.out(&format!(
            "{:>8} {:>6} {:>10} {:>10} {:>7} {:>7}",
            job,
            rec.uid,
            rec.mode.as_str(),
            human_bytes(rec.capacity),
            rec.daemons.len(),
            rec.mounted.len()
        ));
    }
    Ok(())
}

pub fn is_hurry(arg: &str) -> bool {
    matches!(arg.trim(), "true" | "1" | "yes")
}

// ------------------------------------------------------------------ on a node

mod node;
mod prefetch;
pub use node::*;

// ------------------------------------------------------------------ helpers

/// Starts the job's daemons on `hosts` (once: a rerun finds them started), recording where
/// before anything starts so that teardown finds every root.
fn start_daemons(
    site: &Site,
    jd: &JobDir,
    rec: &mut JobRecord,
    hosts: &[HostLine],
    root_template: &str,
    say: Say,
) -> Result<()> {
    let state = jd.state();
    if state.has_deployment() {
        return Ok(());
    }
    let root = root_template.replace("{job}", &rec.job.to_string());
    rec.daemons = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| DaemonPlace {
            host: h.name.clone(),
            address: h.address.clone(),
            root: PathBuf::from(fill(&root, &h.name, i as u32)),
        })
        .collect();
    jd.save(rec)?;
    // The hosts and the configuration the daemons get, kept in the job's directory for an
    // administrator to read (the start below takes them as values).
    let hosts_text: String = rec
        .daemons
        .iter()
        .map(|d| format!("{} {}\n", d.host, d.address))
        .collect();
    jd.write_private("hosts", hosts_text.as_bytes())
        .context("cannot write the job's hosts file")?;
    let config = job_config(site, rec, hosts.len())?;
    jd.write_private(
        "config.toml",
        toml::to_string(&config)
            .context("cannot encode the job's configuration")?
            .as_bytes(),
    )
    .context("cannot write the job's configuration")?;
    let links = resolved_links(site, rec)?;
    let started = (|| {
        let config = configure(
            config,
            Overrides {
                chunk_size: rec.request.chunk_size,
                links,
                ..Overrides::default()
            },
        )?;
        let listed: Vec<HostLine> = rec
            .daemons
            .iter()
            .map(|d| HostLine {
                name: d.host.clone(),
                address: d.address.clone(),
            })
            .collect();
        // Any free port, reported by each daemon: no port is known, or squatted, in advance.
        let placement = Placement::remote(listed, PathBuf::from(&root), site.launcher.clone(), 0)?;
        let plan = Plan {
            state: state.clone(),
            config,
            name: format!("job{}", rec.job),
            placement,
            daemon_user: Some(rec.uid.to_string()),
            job: eddy_config::JobInfo {
                id: Some(rec.job.to_string()),
                // The Slurm job's name (pool mode asks it at setup): the history's key to
                // the application, with the script hash.
                name: rec.job_name.clone(),
                user: eddy_config::JobInfo::user_name(rec.uid),
                script_hash: rec.script_hash.clone(),
                start_ms: 0,
            },
        };
        let dep = eddy_deploy::start(&plan)?;
        say.out(&format!(
            "eddy: deployment {:?} started: {} daemons; state in {}",
            dep.name,
            dep.daemons.len(),
            plan.state.dir().display()
        ));
        anyhow::Ok(())
    })();
    started.with_context(|| format!("cannot start the job's {} daemons", hosts.len()))?;
    jd.publish_deployment(rec.uid, rec.gid)
}

/// The site's tunables with the job's capacity spread over its daemons (the most each one
/// holds, and the cache capacity each one evicts down to).
fn job_config(site: &Site, rec: &JobRecord, daemons: usize) -> Result<Config> {
    let mut config = match &site.config {
        Some(p) => Config::load(p).with_context(|| format!("site config {}", p.display()))?,
        None => Config::default(),
    };
    config.root_uid = Some(rec.uid);
    config.root_gid = Some(rec.gid);
    config.metrics_addr = per_job_metrics(config.metrics_addr.as_deref())?;
    // Site-only settings never enter the job's files (its user reads the deployment file):
    // the history is the teardown's to write, from root's settings (decision 0054).
    config.history_db = None;
    // The job holds what it was charged: each daemon its share of all data (decision 0023).
    let share = rec.capacity.div_ceil(daemons.max(1) as u64);
    config.capacity_bytes = share;
    if !rec.request.links.is_empty() {
        config.cache_capacity_bytes = share;
    }
    // A job whose servers may grow serves no direct local I/O, which a move cannot follow
    // (decision 0081): its clients run on compute nodes, never on its I/O nodes, and so lose
    // nothing by it. A linked job does not grow yet, and keeps it.
    let grows = site.pool.as_ref().is_some_and(|p| p.grow.is_some());
    if rec.mode == Mode::Pool && grows && rec.request.links.is_empty() {
        config.direct_io = false;
    }
    Ok(config)
}

/// The site's `metrics_addr` for one job: its IP with port 0, each daemon taking a free port
/// (recorded in the deployment, as for `--metrics IP:0`). A fixed port would be the same for
/// every job on a node: the first job's daemons, or anyone who binds it first, would hold it
/// and the next job's daemons could not start (decision 0056).
fn per_job_metrics(site: Option<&str>) -> Result<Option<String>> {
    let Some(text) = site else {
        return Ok(None);
    };
    let mut addr =
        eddy_config::metrics_socket_addr(text).context("the site config's metrics_addr")?;
    addr.set_port(0);
    Ok(Some(addr.to_string()))
}

/// The stage_in trees, pinned or not, through the deployment.
fn stage_in(jd: &JobDir, req: &JobRequest, say: Say) -> Result<()> {
    for pin in [false, true] {
        let paths: Vec<String> = req
            .stage_in
            .iter()
            .filter(|s| s.pin == pin)
            .map(|s| s.path.clone())
            .collect();
        if paths.is_empty() {
            continue;
        }
        // Namespace paths as the job wrote them: nothing of this host is resolved for them.
        let report = eddy_deploy::stage::stage_in_namespace(&jd.state(), &paths, pin)?;
        for line in report.lines("staged in", "no files to stage in") {
            say.out(&line);
        }
        report.outcome("stage-in")?;
    }
    Ok(())
}

/// Which nodes lack the space a node-local job asks of each (its capacity over its nodes),
/// by the inventory's figures; None if all have it.
fn short_of_space(space: &[(String, u64)], capacity: u64, nodes: usize) -> Option<String> {
    let each = capacity.div_ceil(nodes.max(1) as u64);
    let short: Vec<String> = space
        .iter()
        .filter(|(_, avail)| *avail < each)
        .map(|(node, avail)| format!("{node} has {}", human_bytes(*avail)))
        .collect();
    (!short.is_empty()).then(|| {
        format!(
            "the job asks {} on each of its {nodes} nodes but {} (node inventory); ask for \
             less capacity or more nodes",
            human_bytes(each),
            short.join(", ")
        )
    })
}

/// Every stage_in tree has its source in the backend, as the job's user sees it (asked as
/// root, the answer would tell the user what only root may see).
fn check_sources(rec: &JobRecord) -> Result<()> {
    let mut staged = Vec::new();
    for s in &rec.request.stage_in {
        if let Some(link) = rec.request.links.iter().find(|l| l.covers(&s.path)) {
            staged.push((s, link.backend_path(&s.path)));
        }
    }
    let sources: Vec<PathBuf> = staged.iter().map(|(_, p)| p.clone()).collect();
    let seen = as_user::resolve(rec.uid, rec.gid, &sources)?;
    for ((s, source), seen) in staged.iter().zip(seen) {
        if let Seen::Unreachable(why) = seen {
            bail!(
                "stage_in {}: its source {} cannot be reached by the job's user ({why})",
                s.path,
                source.display()
            );
        }
    }
    Ok(())
}

/// The job's links with their backend directories resolved as the job's user sees them
/// (links followed), each checked again against the site's `backend_roots` (resolved too):
/// a link of the user's own under an allowed root leads nowhere else. The daemons get the
/// resolved paths.
fn resolved_links(site: &Site, rec: &JobRecord) -> Result<Vec<eddy_config::Link>> {
    let backends: Vec<PathBuf> = rec
        .request
        .links
        .iter()
        .map(|l| l.backend.clone())
        .collect();
    let seen = as_user::resolve(rec.uid, rec.gid, &backends)?;
    let roots: Vec<PathBuf> = site
        .backend_roots
        .iter()
        // privileged-path: the site's backend_roots (root's settings), resolved as the site wrote them
        .map(|r| std::fs::canonicalize(r).unwrap_or_else(|_| r.clone()))
        .collect();
    rec.request
        .links
        .iter()
        .zip(seen)
        .map(|(link, seen)| {
            let backend = match seen {
                Seen::Resolved(p) => p,
                Seen::Unreachable(why) => bail!(
                    "link {}={}: the job's user cannot reach it ({why})",
                    link.prefix,
                    link.backend.display()
                ),
            };
            if !roots.is_empty() && !roots.iter().any(|r| backend.starts_with(r)) {
                bail!(
                    "link {}={} leads to {}, outside the backend directories jobs may link",
                    link.prefix,
                    link.backend.display(),
                    backend.display()
                );
            }
            Ok(eddy_config::Link {
                prefix: link.prefix.clone(),
                backend,
            })
        })
        .collect()
}

fn unmount_nodes(site: &Site, rec: &JobRecord) -> Result<()> {
    let eddy = site.eddy_program()?;
    let mount = site.mount_point(rec.job);
    on_nodes(site, &rec.mounted, |_| {
        vec![
            eddy.clone().into(),
            "bb".into(),
            "node-clean".into(),
            "--mount".into(),
            mount.clone().into(),
        ]
    })
    .context("cannot unmount the job's namespace from its nodes")
}

/// Runs `cmd(i)` on `hosts[i]`, all at once, each bounded; fails naming every node that
/// failed.
fn on_nodes(
    site: &Site,
    hosts: &[String],
    cmd: impl Fn(usize) -> Vec<OsString> + Sync,
) -> Result<()> {
    let bound = Duration::from_secs(site.node_command_timeout_s);
    let failures: Vec<String> = std::thread::scope(|s| {
        let runs: Vec<_> = hosts
            .iter()
            .enumerate()
            .map(|(i, host)| {
                let argv = cmd(i);
                s.spawn(move || nodes::on_node(&site.launcher, host, &argv, bound))
            })
            .collect();
        runs.into_iter()
            .filter_map(|h| match h.join() {
                Ok(Ok(_)) => None,
                Ok(Err(e)) => Some(format!("{e:#}")),
                Err(_) => Some("a node command panicked".to_string()),
            })
            .collect()
    });
    if failures.is_empty() {
        Ok(())
    } else {
        bail!("{}", failures.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_short_of_space_are_named() {
        let space = [("n1".to_string(), 10u64 << 30), ("n2".to_string(), 3 << 30)];
        assert_eq!(short_of_space(&space, 9 << 30, 3), None);
        let msg = short_of_space(&space, 15 << 30, 3).unwrap();
        assert_eq!(
            msg,
            "the job asks 5.0 GiB on each of its 3 nodes but n2 has 3.0 GiB (node inventory); \
             ask for less capacity or more nodes"
        );
        assert_eq!(
            short_of_space(&[], 1 << 50, 1),
            None,
            "no inventory, no check"
        );
        assert!(is_hurry("true") && !is_hurry("false"));
    }

    #[test]
    fn a_site_metrics_port_becomes_each_jobs_free_port() {
        assert_eq!(per_job_metrics(None).unwrap(), None);
        assert_eq!(
            per_job_metrics(Some("0.0.0.0:9400")).unwrap().as_deref(),
            Some("0.0.0.0:0")
        );
        assert_eq!(
            per_job_metrics(Some("[::1]:0")).unwrap().as_deref(),
            Some("[::1]:0")
        );
        assert!(per_job_metrics(Some("node1:9400")).is_err());
    }
}
