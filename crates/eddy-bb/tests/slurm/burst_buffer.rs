//! Eddy as Slurm's burst buffer, end to end: a private Slurm of three nodes on this host
//! (tests/common/slurm.rs) with `BurstBufferType=burst_buffer/lua` and the project's own
//! slurm/burst_buffer.lua, pointed at this build's `eddy` and a site file of the test. Real
//! batch scripts with `#EDDY` lines go through sbatch as the user `nobody` (Slurm refuses
//! burst buffers to root); the daemons run as the job's user, mounts are made on the job's
//! nodes through the site's launcher (here `{cmd}`: every node is this host), and a
//! directory of this test stands for the parallel file system.
//!
//! Needs root, FUSE and Slurm; without them it fails, naming what is missing. The jobs against
//! the site's history (profiles, timed stage-in) are in bb_history.rs, on the same `Site`.

use eddy_testkit::eventually::{eventually_else, poll_every};
use eddy_testkit::require;
use eddy_testkit::slurm::{processes_mentioning, require_slurm, set_mode, SlurmCluster};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The job's user (Slurm gives root no burst buffer).
pub(crate) const USER: &str = "nobody";
/// A second user, without any history of jobs (uid 1 on Debian).
pub(crate) const OTHER_USER: &str = "daemon";
pub(crate) const NOBODY: u32 = 65534;
/// Bound on a job going through its whole life, staging included.
pub(crate) const JOB_BOUND: Duration = Duration::from_secs(120);
/// Bound on teardown finishing after the job has ended.
pub(crate) const TEARDOWN_BOUND: Duration = Duration::from_secs(60);

/// A job comment (its user's to set, also with `scontrol update`) that reads as a node list
/// in `scontrol show job -o`.
pub(crate) const FORGED_COMMENT: &str = "--comment=x NodeList=forged[001-100] BatchHost=forged001";

pub(crate) const BB_CONF: &str = "Directive=EDDY\n\
                       Flags=TeardownFailure\n\
                       StageInTimeout=120\n\
                       StageOutTimeout=120\n\
                       OtherTimeout=120\n";

/// The site around the cluster: the backend ("the parallel file system"), where jobs' state,
/// storage and mounts go, and the settings file `eddy bb` reads (also bb_pool's).
pub(crate) struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    pub(crate) fn new() -> Site {
        Site::with(|_| String::new())
    }

    /// A site whose settings start with the top-level lines `extra` makes of the site's
    /// directory.
    pub(crate) fn with(extra: impl Fn(&Path) -> String) -> Site {
        let dir = tempfile::tempdir().unwrap();
        set_mode(dir.path(), 0o755);
        let site = Site { dir };
        let pfs = site.pfs();
        std::fs::create_dir_all(pfs.join("run/inputs/deep")).unwrap();
        std::fs::write(
            pfs.join("run/inputs/a.dat"),
            eddy_testkit::pattern(7, 0, 3 << 20),
        )
        .unwrap();
        std::fs::write(pfs.join("run/inputs/deep/b.txt"), b"input b\n").unwrap();
        chown_tree(&pfs, NOBODY);
        std::fs::create_dir(site.path("out")).unwrap();
        set_mode(&site.path("out"), 0o1777);
        let p = |name: &str| site.path(name).display().to_string();
        let text = format!(
            "{extra}state_dir = \"{jobs}\"\n\
             mount = \"{mnt}/{{job}}\"\n\
             node_root = \"{nodes}/{{host}}/job-{{job}}\"\n\
             launcher = \"{{cmd}}\"\n\
             node_local_capacity = \"8GiB\"\n\
             [pool]\n\
             name = \"io\"\n\
             nodes = [\"io1 127.{net}.1.21\", \"io2 127.{net}.1.22\", \"io3 127.{net}.1.23\"]\n\
             root = \"{pool}/{{host}}/job-{{job}}\"\n\
             capacity = \"4GiB\"\n\
             [alloc]\n\
             anomaly_ratio = 0.05\n",
            extra = extra(site.dir.path()),
            jobs = p("jobs"),
            mnt = p("mnt"),
            nodes = p("nodes"),
            pool = p("pool"),
            net = eddy_testkit::slurm::loopback_net(),
        );
        std::fs::write(site.path("bb.toml"), text).unwrap();
        let lua = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../slurm/burst_buffer.lua"),
        )
        .unwrap();
        let lua = lua
            .replace(
                "local EDDY = \"/usr/bin/eddy\"",
                &format!("local EDDY = \"{}\"", eddy_testkit::eddy_bin()),
            )
            .replace(
                "local SITE = \"/etc/eddy/bb.toml\"",
                &format!("local SITE = \"{}\"", p("bb.toml")),
            );
        assert!(
            lua.contains(eddy_testkit::eddy_bin()),
            "the settings lines of burst_buffer.lua moved"
        );
        std::fs::write(site.path("burst_buffer.lua"), lua).unwrap();
        site
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn pfs(&self) -> PathBuf {
        self.path("pfs")
    }

    pub(crate) fn cluster(&self) -> SlurmCluster {
        require::root("mount FUSE and run Slurm's daemons");
        require::fuse();
        require_slurm();
        SlurmCluster::builder()
            .nodes(3)
            .burst_buffer(&self.path("burst_buffer.lua"), BB_CONF)
            .start()
    }

    /// A cluster of two nodes with real accounting (slurmdbd and MariaDB).
    pub(crate) fn cluster_with_accounting(&self) -> SlurmCluster {
        require::root("mount FUSE and run Slurm's daemons");
        require::fuse();
        eddy_testkit::slurm::require_accounting();
        SlurmCluster::builder()
            .nodes(2)
            .accounting()
            .burst_buffer(&self.path("burst_buffer.lua"), BB_CONF)
            .start()
    }

    /// A batch script: `#SBATCH` lines, then `#EDDY` lines, then the body (after `set -eu`,
    /// with `$EDDY` the eddy program).
    pub(crate) fn script(&self, nodes: u32, eddy: &[&str], body: &str) -> String {
        let eddy: String = eddy.iter().map(|l| format!("#EDDY {l}\n")).collect();
        format!(
            "#!/bin/bash\n#SBATCH -N {nodes}\n#SBATCH -o {out}/slurm-%j.out\n{eddy}set -eu\n\
             EDDY={program}\n{body}\n",
            out = self.path("out").display(),
            program = eddy_testkit::eddy_bin(),
        )
    }

    pub(crate) fn job_output(&self, job: u32) -> String {
        let out = self.path(&format!("out/slurm-{job}.out"));
        format!(
            "--- {}:\n{}",
            out.display(),
            std::fs::read_to_string(&out).unwrap_or_default()
        )
    }

    /// Submits `script` as the job's user and waits until it has COMPLETED and been torn
    /// down; its id.
    /// Every job carries a comment of its user's that forges a node list of a record of
    /// `Key=Value` words: the job's nodes are still its own.
    pub(crate) fn run_to_completion(&self, cluster: &SlurmCluster, script: &str) -> u32 {
        let job = self.submit(cluster, script);
        self.completes(cluster, job);
        job
    }

    /// Submits `script` as the job's user, with the forged comment; its id.
    pub(crate) fn submit(&self, cluster: &SlurmCluster, script: &str) -> u32 {
        cluster
            .sbatch(script, &[FORGED_COMMENT], Some(USER))
            .unwrap()
    }

    /// Waits until job `job` has COMPLETED and been torn down, leaving nothing.
    pub(crate) fn completes(&self, cluster: &SlurmCluster, job: u32) {
        let state = cluster
            .wait_state(job, &["COMPLETED", "FAILED", "CANCELLED"], JOB_BOUND)
            .unwrap();
        assert_eq!(
            state,
            "COMPLETED",
            "{}\n{}",
            self.job_output(job),
            cluster.logs()
        );
        self.assert_gone(cluster, job);
    }

    /// The profile teardown stored of job `job`, from the site's history
    /// (`eddy history show JOB --json`).
    pub(crate) fn profile(&self, job: u32) -> eddy_history::JobProfile {
        let out = eddy_testkit::cli::ok(&[
            "history",
            "show",
            &job.to_string(),
            "--json",
            "--site",
            eddy_testkit::cli::s(&self.path("bb.toml")),
        ]);
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Waits until teardown removed the job's directory, then checks that nothing of the job
    /// is left: no mount, no storage root, no process serving it.
    pub(crate) fn assert_gone(&self, cluster: &SlurmCluster, job: u32) {
        let dir = self.path("jobs").join(job.to_string());
        eventually_else(
            TEARDOWN_BOUND,
            || (!dir.exists()).then_some(()),
            || {
                format!(
                    "job {job}'s directory is still there: {}\nreason: {}\n{}",
                    std::fs::read_to_string(dir.join("job.toml")).unwrap_or_default(),
                    cluster.job_reason(job),
                    cluster.logs()
                )
            },
        );
        let mnt = self.path("mnt").join(job.to_string());
        assert!(
            !eddy_testkit::is_mountpoint(&mnt),
            "{} is still mounted",
            mnt.display()
        );
        assert!(!mnt.exists(), "mount point {} is left", mnt.display());
        for base in ["nodes", "pool"] {
            for host in std::fs::read_dir(self.path(base))
                .into_iter()
                .flatten()
                .flatten()
            {
                let root = host.path().join(format!("job-{job}"));
                assert!(!root.exists(), "storage {} is left", root.display());
                // A daemon has its root, a mount its mount point, as a whole argument.
                let procs = processes_mentioning(&format!("{}\0", root.display()));
                assert!(procs.is_empty(), "daemons of job {job} are left: {procs:?}");
            }
        }
        let procs = processes_mentioning(&format!("{}\0", mnt.display()));
        assert!(
            procs.is_empty(),
            "processes of job {job} are left: {procs:?}"
        );
    }
}

impl Drop for Site {
    /// Whatever a failed test left: mounts and processes under the site's directory.
    fn drop(&mut self) {
        eddy_testkit::slurm::clean_leftovers(self.dir.path());
    }
}

pub(crate) fn chown_tree(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
    if p.is_dir() {
        for e in std::fs::read_dir(p).unwrap().flatten() {
            chown_tree(&e.path(), uid);
        }
    }
}

/// A node-local job: one daemon per job node, inputs staged in during pre_run, read through
/// $EDDY_MOUNT by steps on all three nodes; results staged out to the backend byte for byte;
/// afterwards nothing of the job is left. Then `scancel --hurry` of a running job: torn down
/// without stage-out. Then two jobs at once, each with its own deployment and secret.
#[test]
pub(crate) fn node_local_jobs_stage_run_stage_out_and_leave_nothing() {
    let site = Site::new();
    let cluster = site.cluster();
    let pfs = site.pfs();
    let link = format!("link /data={}", pfs.join("run").display());
    let script = site.script(
        3,
        &[
            "capacity=1G pool=node-local",
            &link,
            "stage_in /data/inputs",
            "stage_out /data/results",
        ],
        "mkdir -p \"$EDDY_MOUNT/data/results\"\n\
         echo \"$EDDY_MOUNT $EDDY_STATE\" > \"$EDDY_MOUNT/data/results/env.txt\"\n\
         cp \"$EDDY_MOUNT/data/inputs/a.dat\" \"$EDDY_MOUNT/data/results/copy.dat\"\n\
         cat \"$EDDY_MOUNT/data/inputs/deep/b.txt\" > \"$EDDY_MOUNT/data/results/b.txt\"\n\
         srun -N 3 sh -c 'hostname > \"$EDDY_MOUNT/data/results/step-$SLURMD_NODENAME\"'\n\
         eddy_status=$(\"$EDDY\" status --json)\n\
         echo \"$eddy_status\" > \"$EDDY_MOUNT/data/results/status.json\"\n\
         echo scratch > \"$EDDY_MOUNT/scratch.txt\"",
    );
    let job = site.run_to_completion(&cluster, &script);

    let results = pfs.join("run/results");
    let input = std::fs::read(pfs.join("run/inputs/a.dat")).unwrap();
    let tree = std::process::Command::new("find")
        .arg(&pfs)
        .arg("-ls")
        .output()
        .unwrap();
    let copy = std::fs::read(results.join("copy.dat")).unwrap_or_else(|e| {
        panic!(
            "no staged-out copy: {e}\n{}\n{}",
            String::from_utf8_lossy(&tree.stdout),
            site.job_output(job)
        )
    });
    assert!(copy == input, "the staged-out copy differs from its input");
    assert_eq!(std::fs::read(results.join("b.txt")).unwrap(), b"input b\n");
    for n in &cluster.nodes {
        assert!(
            results.join(format!("step-{n}")).exists(),
            "no result from the step on {n}"
        );
    }
    let env = std::fs::read_to_string(results.join("env.txt")).unwrap();
    let want = format!(
        "{} {}\n",
        site.path("mnt").join(job.to_string()).display(),
        site.path("jobs").join(format!("{job}/user")).display()
    );
    assert_eq!(env, want, "EDDY_MOUNT and EDDY_STATE of the job");
    // One daemon on each job node, as the job's user (files written back are the user's).
    let status: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(results.join("status.json")).unwrap())
            .unwrap();
    let hosts: Vec<&str> = status["daemons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["n1", "n2", "n3"], "{status}");
    assert_eq!(
        std::fs::metadata(results.join("copy.dat")).unwrap().uid(),
        NOBODY
    );
    // Scratch outside the linked prefix is not staged out.
    assert!(!pfs.join("scratch.txt").exists());

    // scancel --hurry of a running job: teardown at once, nothing staged out.
    let script = site.script(
        1,
        &[
            "capacity=1G pool=node-local",
            &link,
            "stage_out /data/hurried",
        ],
        "mkdir -p \"$EDDY_MOUNT/data/hurried\"\n\
         echo partial > \"$EDDY_MOUNT/data/hurried/x\"\n\
         touch \"$EDDY_MOUNT/data/started\"\n\
         sleep 300",
    );
    let job = cluster.sbatch(&script, &[], Some(USER)).unwrap();
    cluster.wait_state(job, &["RUNNING"], JOB_BOUND).unwrap();
    let started = pfs.join("run/started");
    assert!(!started.exists());
    let mnt_file = site.path("mnt").join(format!("{job}/data/started"));
    eventually_else(
        JOB_BOUND,
        || mnt_file.exists().then_some(()),
        || format!("the job never started writing\n{}", site.job_output(job)),
    );
    cluster.cancel(job, true).unwrap();
    site.assert_gone(&cluster, job);
    // Directories reach the backend at once (namespace write-through), files only by
    // stage-out.
    let x = std::fs::read(pfs.join("run/hurried/x")).unwrap_or_default();
    assert!(x.is_empty(), "a hurried teardown staged out {x:?}");
    assert!(!started.exists(), "a hurried teardown staged out");

    // Two jobs at once, one node each: two deployments, two secrets, each readable by the
    // job's user only, and neither sees the other's files.
    let body = "echo \"$SLURM_JOB_ID\" > \"$EDDY_MOUNT/mine\"\n\
                while [ ! -e \"$EDDY_MOUNT/go\" ]; do sleep 0.1; done\n\
                [ \"$(cat \"$EDDY_MOUNT/mine\")\" = \"$SLURM_JOB_ID\" ]\n\
                ls \"$EDDY_MOUNT\" > \"$EDDY_MOUNT/data/seen-$SLURM_JOB_ID\"";
    let script = site.script(1, &["capacity=1G pool=node-local", &link], body);
    let a = cluster.sbatch(&script, &[], Some(USER)).unwrap();
    let b = cluster.sbatch(&script, &[], Some(USER)).unwrap();
    for j in [a, b] {
        cluster.wait_state(j, &["RUNNING"], JOB_BOUND).unwrap();
    }
    let secret_of = |j: u32| {
        let f = site.path("jobs").join(format!("{j}/user/deployment.toml"));
        let mine = site.path("mnt").join(format!("{j}/mine"));
        eventually_else(
            JOB_BOUND,
            || mine.exists().then_some(()),
            || format!("job {j} did not start\n{}", site.job_output(j)),
        );
        let meta = std::fs::metadata(&f).unwrap();
        assert_eq!(
            (meta.uid(), meta.mode() & 0o777),
            (NOBODY, 0o600),
            "{}",
            f.display()
        );
        let dir = std::fs::metadata(f.parent().unwrap()).unwrap();
        assert_eq!((dir.uid(), dir.mode() & 0o777), (NOBODY, 0o700));
        let text = std::fs::read_to_string(&f).unwrap();
        let secret = text
            .lines()
            .find(|l| l.starts_with("secret"))
            .unwrap()
            .to_string();
        // Another user (uid 1, "daemon") cannot read it.
        let other = std::process::Command::new("runuser")
            .args(["-u", "daemon", "--", "cat"])
            .arg(&f)
            .output()
            .unwrap();
        assert!(!other.status.success(), "another user read {}", f.display());
        secret
    };
    assert_ne!(secret_of(a), secret_of(b), "two jobs share a secret");
    for j in [a, b] {
        std::fs::write(site.path("mnt").join(format!("{j}/go")), b"").unwrap();
    }
    for j in [a, b] {
        let s = cluster
            .wait_state(j, &["COMPLETED", "FAILED", "CANCELLED"], JOB_BOUND)
            .unwrap();
        assert_eq!(s, "COMPLETED", "{}", site.job_output(j));
        site.assert_gone(&cluster, j);
        // Everything under /data was staged out (no stage_out line: every linked prefix).
        let seen = std::fs::read_to_string(pfs.join(format!("run/seen-{j}"))).unwrap();
        // Each namespace held its own job's files only.
        assert_eq!(seen, "data\ngo\nmine\n", "job {j}");
    }
}

/// Pool mode: the daemons start on the I/O nodes and the inputs are staged in while the job
/// is pending — before its compute node is allocated; results staged out; nothing left.
#[test]
pub(crate) fn pool_jobs_stage_in_before_they_start() {
    let site = Site::new();
    let cluster = site.cluster();
    let pfs = site.pfs();
    let link = format!("link /data={}", pfs.join("run").display());
    let script = site.script(
        1,
        &[
            "capacity=2G pool=io",
            &link,
            "stage_in /data/inputs pin",
            "stage_out /data/out",
        ],
        "\"$EDDY\" status --json > /tmp/eddy-status-$SLURM_JOB_ID.json\n\
         mkdir -p \"$EDDY_MOUNT/data/out\"\n\
         sha256sum < \"$EDDY_MOUNT/data/inputs/a.dat\" > \"$EDDY_MOUNT/data/out/sum\"",
    );
    let job = site.run_to_completion(&cluster, &script);
    // The status the job saw at its start: its daemons on the I/O nodes the allocation gave
    // it (no history: the default, one server, io1), holding the staged inputs already
    // (3 MiB + 8 B pinned before the job read anything).
    let status_file = PathBuf::from(format!("/tmp/eddy-status-{job}.json"));
    let status: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&status_file).unwrap()).unwrap();
    let _ = std::fs::remove_file(&status_file);
    let daemons = status["daemons"].as_array().unwrap();
    let hosts: Vec<&str> = daemons
        .iter()
        .map(|d| d["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["io1"], "{status}");
    let pinned: u64 = daemons
        .iter()
        .map(|d| d["tier"]["pinned_bytes"].as_u64().unwrap_or(0))
        .sum();
    assert!(
        pinned >= 3 << 20,
        "only {pinned} bytes were staged in before the job: {status}"
    );
    let sum = std::fs::read_to_string(pfs.join("run/out/sum")).unwrap();
    let want = std::process::Command::new("sha256sum")
        .stdin(std::fs::File::open(pfs.join("run/inputs/a.dat")).unwrap())
        .output()
        .unwrap();
    assert_eq!(sum.as_bytes(), want.stdout.as_slice());
}

/// What a user gets wrong reaches them in words: a bad directive refused by sbatch, naming
/// the line; a missing stage-in source holds the job with a Reason naming it; cancelling the
/// held job (during staging) tears down cleanly.
#[test]
pub(crate) fn bad_requests_are_refused_or_held_in_words() {
    let site = Site::new();
    let cluster = site.cluster();
    let pfs = site.pfs();
    let link = format!("link /data={}", pfs.join("run").display());

    let bad = site.script(
        1,
        &["capacity=1G pool=node-local", "stage_in /elsewhere"],
        "true",
    );
    let err = cluster.sbatch(&bad, &[], Some(USER)).unwrap_err();
    assert!(
        err.contains("#EDDY line 5: /elsewhere lies under no `link` prefix"),
        "sbatch said: {err}"
    );
    let bad = site.script(1, &["capacity=1G pool=node-local mode=fast"], "true");
    let err = cluster.sbatch(&bad, &[], Some(USER)).unwrap_err();
    assert!(
        err.contains("mode \"fast\" is neither node-local nor pool"),
        "sbatch said: {err}"
    );
    // 20,000 `link` lines (quadratic in the parser before it was bounded: 2.2 s of
    // slurmctld's time): Eddy answers at its bound.
    let links: Vec<String> = (0..20_000)
        .map(|i| format!("link /p{i}=/pfs/{i}"))
        .collect();
    let links: Vec<&str> = links.iter().map(String::as_str).collect();
    // Submits a script of these `#EDDY` lines, which must be refused; says how fast.
    let refused = |lines: &[&str], what: &str| {
        let started = Instant::now();
        let err = cluster
            .sbatch(&site.script(1, lines, "true"), &[], Some(USER))
            .unwrap_err();
        eprintln!(
            "sbatch of {what} refused in {:?}: {err:.200}",
            started.elapsed()
        );
        err
    };
    let err = refused(&links, "20,000 #EDDY link lines");
    assert!(
        err.contains("more than 1000 #EDDY lines"),
        "sbatch said: {err:.500}\n{}",
        cluster.logs()
    );
    // 200,000 lines: refused by the site's bound on a script's size before Slurm reads
    // them (docs/guide/slurm-admin.md: Slurm's own reading alone would take seconds).
    let lines: Vec<&str> = std::iter::repeat_n("nodes=1", 200_000).collect();
    let err = refused(&lines, "200,000 #EDDY lines");
    assert!(!err.contains("timed out"), "sbatch said: {err:.500}");
    // A pool job says its capacity; one given below the first command is refused.
    let err = cluster
        .sbatch(&site.script(1, &["mode=pool"], "true"), &[], Some(USER))
        .unwrap_err();
    assert!(
        err.contains("mode=pool needs the capacity"),
        "sbatch said: {err}"
    );
    let late = site.script(
        1,
        &["capacity=1G pool=io"],
        "true\n#EDDY capacity=900G pool=io",
    );
    let err = cluster.sbatch(&late, &[], Some(USER)).unwrap_err();
    assert!(
        err.contains("below the script's first command"),
        "sbatch said: {err}"
    );
    // A user's words to `scontrol show bbstat` never choose a file slurmctld's side reads.
    let mut bbstat = cluster.command("scontrol");
    bbstat.args(["--", "show", "bbstat", "--site", "/dev/zero"]);
    let out = eddy_testkit::slurm::output_bounded(&mut bbstat, Duration::from_secs(60))
        .expect("scontrol show bbstat --site /dev/zero did not answer within 60 s");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("JOB") && said.contains("CAPACITY"),
        "bbstat said: {said}\n{out:?}"
    );

    let missing = site.script(
        1,
        &["capacity=1G pool=io", &link, "stage_in /data/not-there"],
        "true",
    );
    let job = cluster.sbatch(&missing, &[], Some(USER)).unwrap();
    // squeue asked every 250 ms, not faster: each look is a request to slurmctld.
    let mut reason = String::new();
    let said = poll_every(JOB_BOUND, Duration::from_millis(250), || {
        reason = cluster.job_reason(job);
        reason.contains("not-there").then_some(())
    });
    assert!(
        said.is_some(),
        "no reason about the missing source: {reason:?}\n{}",
        cluster.logs()
    );
    assert!(
        reason.contains("stage_in /data/not-there: its source"),
        "reason: {reason}"
    );
    assert_eq!(cluster.job_state(job), "PENDING");
    cluster.cancel(job, false).unwrap();
    site.assert_gone(&cluster, job);

    // A backend that refuses the stage-out (the job made its directory read-only, which
    // reaches the backend at once, so the file cannot be written back): the job completes,
    // its Reason names the file.
    let refused = site.script(
        1,
        &[
            "capacity=1G pool=node-local",
            &link,
            "stage_out /data/locked",
        ],
        "mkdir \"$EDDY_MOUNT/data/locked\"\n\
         echo result > \"$EDDY_MOUNT/data/locked/r.txt\"\n\
         chmod 0555 \"$EDDY_MOUNT/data/locked\"",
    );
    let job = site.run_to_completion(&cluster, &refused);
    let reason = cluster.job_reason(job);
    assert!(
        reason.contains("slurm_bb_data_out") && reason.contains("/data/locked/r.txt"),
        "reason: {reason}"
    );
}

/// What users run, in a node-local job on three nodes: an MPI program writing one file per
/// rank (OpenMPI's mpirun inside the allocation), SQLite and HDF5 from Python, tar and git in
/// the namespace; results staged out and checked in the backend.
#[test]
pub(crate) fn user_workloads_run_in_a_burst_buffer_job() {
    let site = Site::new();
    let cluster = site.cluster();
    require::programs(&["mpirun", "git", "tar"], "openmpi-bin, git and tar");
    let pfs = site.pfs();
    let link = format!("link /data={}", pfs.join("run").display());
    let body = r#"R="$EDDY_MOUNT/data/results"
mkdir -p "$R"
cd "$EDDY_MOUNT"
mpirun --oversubscribe -np 3 sh -c 'echo "rank $OMPI_COMM_WORLD_RANK on $SLURMD_NODENAME" > "$EDDY_MOUNT/data/results/rank-$OMPI_COMM_WORLD_RANK"'
/usr/bin/python3 - <<'PY'
import os, sqlite3, h5py, numpy
r = os.environ["EDDY_MOUNT"] + "/data/results"
db = sqlite3.connect(r + "/runs.db")
db.execute("create table runs (id integer primary key, value real)")
db.executemany("insert into runs (value) values (?)", [(i / 10,) for i in range(1000)])
db.commit()
assert db.execute("pragma integrity_check").fetchone()[0] == "ok"
db.close()
with h5py.File(r + "/field.h5", "w") as f:
    f.create_dataset("t", data=numpy.arange(100000, dtype="f8"))
with h5py.File(r + "/field.h5", "r") as f:
    assert f["t"][99999] == 99999.0
PY
tar -C "$EDDY_MOUNT/data/inputs" -cf "$EDDY_MOUNT/inputs.tar" .
mkdir -p "$EDDY_MOUNT/unpacked" && tar -C "$EDDY_MOUNT/unpacked" -xf "$EDDY_MOUNT/inputs.tar"
cmp "$EDDY_MOUNT/unpacked/a.dat" "$EDDY_MOUNT/data/inputs/a.dat"
git init -q "$EDDY_MOUNT/repo" && cd "$EDDY_MOUNT/repo"
cp "$EDDY_MOUNT/data/inputs/deep/b.txt" . && git add b.txt
git -c user.name=u -c user.email=u@x commit -qm first && git fsck --no-progress
git log --oneline > "$R/git.log""#;
    let script = site.script(
        3,
        &[
            "capacity=1G pool=node-local",
            &link,
            "stage_in /data/inputs",
        ],
        body,
    );
    site.run_to_completion(&cluster, &script);
    let results = pfs.join("run/results");
    for rank in 0..3 {
        let text = std::fs::read_to_string(results.join(format!("rank-{rank}"))).unwrap();
        assert!(text.starts_with(&format!("rank {rank} on n")), "{text}");
    }
    let db = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg("import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute('select count(*) from runs').fetchone()[0], c.execute('pragma integrity_check').fetchone()[0])")
        .arg(results.join("runs.db"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&db.stdout).trim(), "1000 ok");
    let h5 = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg("import h5py,sys; print(h5py.File(sys.argv[1],'r')['t'][12345])")
        .arg(results.join("field.h5"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&h5.stdout).trim(), "12345.0");
    let log = std::fs::read_to_string(results.join("git.log")).unwrap();
    assert!(log.trim().ends_with("first"), "{log}");
}

/// `#EDDY prefetch`: the tree is fetched beside the job, which does not wait for it, by a
/// process of the job's user (its log in `$EDDY_STATE` is the user's); while the job runs
/// the tree's every chunk is cached, each fetched once; after the job nothing of the
/// prefetch is left.
#[test]
pub(crate) fn a_jobs_prefetch_caches_its_tree_while_the_job_runs() {
    let site = Site::new();
    let cluster = site.cluster();
    let pfs = site.pfs();
    let restart = pfs.join("run/restart");
    std::fs::create_dir_all(restart.join("sub")).unwrap();
    let sizes = [(1 << 20) + 1, 700 << 10, 2 << 20];
    for (i, (name, size)) in ["r0", "r1", "sub/r2"].iter().zip(sizes).enumerate() {
        std::fs::write(restart.join(name), eddy_testkit::pattern(i as u64, 0, size)).unwrap();
    }
    chown_tree(&pfs, NOBODY);
    // The jobs' chunk size is the default, 512 KiB.
    let chunks: u64 = sizes.iter().map(|s| s.div_ceil(512 << 10) as u64).sum();
    let link = format!("link /data={}", pfs.join("run").display());
    let body = r#"L="$EDDY_STATE/prefetch.log"
for i in $(seq 600); do grep -q ' prefetched ' "$L" 2>/dev/null && break; sleep 0.1; done
eddy_status=$("$EDDY" status --json)
R="$EDDY_MOUNT/data/results"
mkdir -p "$R"
echo "$eddy_status" > "$R/status.json"
stat -c %U "$L" > "$R/owner"
cp "$L" "$R/prefetch.log""#;
    let script = site.script(
        1,
        &[
            "capacity=1G pool=node-local",
            &link,
            "prefetch /data/restart",
            "stage_out /data/results",
        ],
        body,
    );
    let job = site.run_to_completion(&cluster, &script);
    let results = pfs.join("run/results");
    let log = std::fs::read_to_string(results.join("prefetch.log"))
        .unwrap_or_else(|e| panic!("no prefetch log: {e}\n{}", site.job_output(job)));
    assert!(log.contains(" prefetched 3 files, "), "{log}");
    let r2 = log
        .lines()
        .find(|l| l.ends_with(" 2.0 MiB  /data/restart/sub/r2"));
    assert!(r2.is_some_and(|l| l.contains(": ok ")), "{log}");
    let owner = std::fs::read_to_string(results.join("owner")).unwrap();
    assert_eq!(owner.trim(), USER, "the prefetch ran as another user");
    let status: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(results.join("status.json")).unwrap())
            .unwrap();
    let sum = |field: &str| -> u64 {
        status["daemons"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["tier"][field].as_u64().unwrap())
            .sum()
    };
    assert_eq!(sum("cached_chunks"), chunks, "{status}");
    assert_eq!(sum("fetches"), chunks, "{status}");
    let user_dir = site.path("jobs").join(format!("{job}/user"));
    let procs = processes_mentioning(&format!("{}\0", user_dir.display()));
    assert!(
        procs.is_empty(),
        "a prefetch of job {job} is left: {procs:?}"
    );
}
