//! The site's history database and pool mode's allocation against a job's user (decision
//! 0054): the site's database credentials never reach a job's files or messages; a session
//! holding a lock in the database does not stall the setup of pool jobs (which runs under the
//! site's allocation lock); another user's run of an identical script does not steer a
//! victim's allocation; clients naming nodes of their own (`SLURMD_NODENAME`) do not make
//! N_A; the site's caps on servers per job and per user hold whatever the history says.
//!
//! The attacker is `nobody` (Slurm gives root no burst buffer) or, for the history another
//! user left, `daemon`. The tests with Slurm start a private cluster (eddy_testkit::slurm)
//! with the project's burst_buffer.lua; the others run the `eddy bb` phases as Slurm would
//! (eddy_testkit::bbsite). PostgreSQL is a private server (eddy_testkit::postgres).

use eddy_testkit::bbsite::{s, Site, NOBODY};
use eddy_testkit::eventually;
use eddy_testkit::postgres::PgServer;
use eddy_testkit::require;
use eddy_testkit::slurm::{output_bounded, require_slurm, set_mode, SlurmCluster};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The advisory lock the history's migrations take ("eddyhist").
const MIGRATION_LOCK: i64 = 0x6564_6479_6869_7374;
/// Bound on a job going through its whole life (a guard, not a claim of speed).
const JOB_BOUND: Duration = Duration::from_secs(150);
/// Bound on one `eddy bb` phase run here.
const PHASE_BOUND: Duration = Duration::from_secs(120);
/// The burst buffer's settings in Slurm: the phases' timeouts above the history's bounds.
const BB_CONF: &str = "Directive=EDDY\nFlags=TeardownFailure\nStageInTimeout=120\n\
                       StageOutTimeout=120\nOtherTimeout=120\n";

/// A password the site keeps from its users.
const SITE_SECRET: &str = "site-history-secret-7f3a";

/// A private Slurm of `nodes` nodes with the project's burst_buffer.lua pointed at this build
/// and `site`'s settings; `out/` (1777) takes the jobs' output.
fn cluster(site: &Site, nodes: usize) -> SlurmCluster {
    require::fuse();
    require_slurm();
    let lua = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../slurm/burst_buffer.lua"),
    )
    .unwrap()
    .replace(
        "local EDDY = \"/usr/bin/eddy\"",
        &format!("local EDDY = \"{}\"", eddy_testkit::eddy_bin()),
    )
    .replace(
        "local SITE = \"/etc/eddy/bb.toml\"",
        &format!("local SITE = \"{}\"", site.path("bb.toml").display()),
    );
    assert!(
        lua.contains(eddy_testkit::eddy_bin()),
        "burst_buffer.lua's settings moved"
    );
    std::fs::write(site.path("burst_buffer.lua"), lua).unwrap();
    let out = site.path("out");
    std::fs::create_dir_all(&out).unwrap();
    set_mode(&out, 0o1777);
    SlurmCluster::builder()
        .nodes(nodes)
        .burst_buffer(&site.path("burst_buffer.lua"), BB_CONF)
        .start()
}

/// A pool job's script named `ioapp` on one node, with `body`.
fn pool_script(site: &Site, body: &str) -> String {
    format!(
        "#!/bin/bash\n#SBATCH -N 1\n#SBATCH -J ioapp\n#SBATCH -o {out}/slurm-%j.out\n\
         #EDDY capacity=64M pool=io\nset -eu\n{body}\n",
        out = site.path("out").display()
    )
}

/// A step that writes 1 MiB through the preload library, its environment starting with
/// `env` (e.g. a node name of its own).
fn write_step(env: &str) -> String {
    format!(
        "srun -N 1 -n 1 env {env}LD_PRELOAD={so} EDDY_PREFIX=/bb /usr/bin/python3 -c \
         \"import os; open('/bb/out-' + str(os.getpid()), 'wb').write(b'x' * (1 << 20))\"\n",
        so = eddy_testkit::preload_so().display()
    )
}

/// Submits `script` as `nobody` and waits until it has COMPLETED and its directory is gone
/// (torn down); its id.
fn run_job(site: &Site, cluster: &SlurmCluster, script: &str) -> u32 {
    run_job_as(site, cluster, script, "nobody")
}

/// `run_job` as `user`.
fn run_job_as(site: &Site, cluster: &SlurmCluster, script: &str, user: &str) -> u32 {
    let job = cluster.sbatch(script, &[], Some(user)).unwrap();
    let state = cluster
        .wait_state(job, &["COMPLETED", "FAILED", "CANCELLED"], JOB_BOUND)
        .unwrap_or_else(|e| panic!("{e}"));
    let out =
        std::fs::read_to_string(site.path(&format!("out/slurm-{job}.out"))).unwrap_or_default();
    assert_eq!(state, "COMPLETED", "{out}\n{}", cluster.logs());
    let dir = site.path(&format!("jobs/{job}"));
    if eventually::poll_for(Duration::from_secs(60), || (!dir.exists()).then_some(())).is_none() {
        panic!("job {job} not torn down\n{}", cluster.logs());
    }
    job
}

/// The job's Comment (where the allocation sums up its decision).
fn comment(cluster: &SlurmCluster, job: u32) -> String {
    let out = cluster
        .command("squeue")
        .args(["-h", "-t", "all", "-j", &job.to_string(), "-o", "%k"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `eddy bb --site ... args` bounded: (success, stdout + stderr).
fn bb_bounded(site: &Site, args: &[&str]) -> (bool, String) {
    let out = output_bounded(
        Command::new(eddy_testkit::eddy_bin())
            .arg("bb")
            .arg("--site")
            .arg(site.path("bb.toml"))
            .args(args)
            .env_remove("EDDY_STATE"),
        PHASE_BOUND,
    )
    .unwrap_or_else(|| panic!("eddy bb {args:?} did not end within {PHASE_BOUND:?}"));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A root-only password file (0600 in a 0700 directory of root's).
fn password_file(site: &Site, password: &str) -> PathBuf {
    let dir = site.path("secrets");
    std::fs::create_dir_all(&dir).unwrap();
    set_mode(&dir, 0o700);
    let file = dir.join("history.pw");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    set_mode(&file, 0o600);
    file
}

/// `psql` of the test server as its superuser over the unix socket.
fn psql(server: &PgServer) -> Command {
    let mut cmd = Command::new(eddy_testkit::postgres::bin_dir().join("psql"));
    cmd.args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-h"])
        .arg(server.socket_dir())
        .args(["-p", &server.port().to_string(), "-U"])
        .arg(eddy_testkit::postgres::USER)
        .arg(eddy_testkit::postgres::DATABASE);
    cmd
}

/// The application name of the sessions `hold` starts.
const HOLDER_APP: &str = "eddy-test-holder";

/// A `psql` session holding what it took; ended when dropped: its server process is
/// terminated (a killed client alone leaves it sleeping, the lock held) and the client killed
/// and waited for.
struct Holder {
    child: Child,
    terminate: Command,
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.terminate.output();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A session of the database that runs `sql` and then holds on (what it took stays taken)
/// until dropped; returned once `granted` (a query) counts 1.
fn hold(server: &PgServer, sql: &str, granted: &str) -> Holder {
    let mut terminate = psql(server);
    terminate.args([
        "-c",
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = '{HOLDER_APP}'"
        ),
    ]);
    let holder = Holder {
        child: psql(server)
            .env("PGAPPNAME", HOLDER_APP)
            .args(["-c", &format!("{sql} SELECT pg_sleep(600);")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
        terminate,
    };
    let mut last = String::new();
    let taken = eventually::poll_for(Duration::from_secs(30), || {
        let out = psql(server).args(["-c", granted]).output().unwrap();
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        (String::from_utf8_lossy(&out.stdout).trim() == "1").then_some(())
    });
    assert!(taken.is_some(), "the lock was not taken: {last}");
    holder
}

/// The site keeps its history's password in its own config file (`config`, whose
/// `history_db` the teardown falls back to): setup must not copy it into the deployment file
/// the job's user reads, and no message (setup, teardown's failed store) may print it.
#[test]
fn a_site_history_password_never_reaches_the_job_nor_its_messages() {
    let site = Site::new("", "capacity = \"1GiB\"");
    let config = site.path("eddy.toml");
    // Nothing listens on port 9 of the loopback: the store fails, with a warning.
    std::fs::write(
        &config,
        format!("history_db = \"postgres://eddy:{SITE_SECRET}@127.0.0.1:9/history\"\n"),
    )
    .unwrap();
    site.edit_settings(
        "launcher = \"{cmd}\"\n",
        &format!(
            "launcher = \"{{cmd}}\"\nconfig = \"{}\"\n",
            config.display()
        ),
    );
    let script = site.script(&["capacity=64M pool=io"]);
    let (ok, setup) = bb_bounded(
        &site,
        &[
            "setup",
            "61",
            "65534",
            "65534",
            "io",
            "67108864",
            s(&script),
        ],
    );
    assert!(ok, "{setup}");
    assert!(!setup.contains(SITE_SECRET), "setup printed it:\n{setup}");
    // The job's user reads its deployment file, and everything else it may.
    let user_dir = site.path("jobs/61/user");
    let seen = eddy_testkit::sh_as_user(
        NOBODY,
        &format!(
            "cat {d}/deployment.toml; find {j} -type f -readable -exec cat {{}} + 2>/dev/null",
            d = user_dir.display(),
            j = site.path("jobs/61").display()
        ),
    );
    let seen = String::from_utf8_lossy(&seen.stdout);
    assert!(
        seen.contains("secret"),
        "the deployment file was read: {seen}"
    );
    assert!(
        !seen.contains(SITE_SECRET),
        "the job's user reads the site's password:\n{seen}"
    );
    let (ok, teardown) = bb_bounded(&site, &["teardown", "61", s(&script), "false"]);
    assert!(ok, "{teardown}");
    assert!(
        teardown.contains("not stored in the history postgresql://eddy@127.0.0.1:9/history"),
        "the store was tried and failed: {teardown}"
    );
    assert!(
        !teardown.contains(SITE_SECRET),
        "the teardown printed the password:\n{teardown}"
    );
}

/// A session of the history database (any role that can connect) takes the migrations'
/// advisory lock, then a lock on the profiles table, and holds on: pool jobs are set up all
/// the same (each within the site's bounds, without history), never stalled behind it with
/// every other pool job behind them. The site's role connects over TCP with the password of
/// a root-only file.
#[test]
fn a_held_history_lock_does_not_stall_pool_jobs_setup() {
    let server = PgServer::start();
    let site = Site::new("", "capacity = \"1GiB\"");
    let pw = password_file(&site, eddy_testkit::postgres::PASSWORD);
    site.edit_settings(
        "launcher = \"{cmd}\"\n",
        &format!(
            "launcher = \"{{cmd}}\"\nhistory_db = \"postgres://{u}@127.0.0.1:{p}/{d}\"\n\
             [history]\npassword_file = \"{pw}\"\nlock_timeout_s = 2\nstatement_timeout_s = 5\n\
             connect_timeout_s = 5\n",
            u = eddy_testkit::postgres::USER,
            p = server.port(),
            d = eddy_testkit::postgres::DATABASE,
            pw = pw.display()
        ),
    );
    let cluster = cluster(&site, 1);
    let script = pool_script(&site, "true");

    // A fresh database: the first open must migrate it, under the held lock.
    let holder = hold(
        &server,
        &format!("SELECT pg_advisory_lock({MIGRATION_LOCK});"),
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted",
    );
    let job = run_job(&site, &cluster, &script);
    assert!(
        comment(&cluster, job).starts_with("eddy alloc: default"),
        "{}",
        comment(&cluster, job)
    );
    drop(holder);

    // Migrated now (as the site's role does when nothing holds the lock); a session locks
    // the profiles table.
    eddy_history::HistoryDb::open(&server.socket_url()).unwrap();
    let holder = hold(
        &server,
        "BEGIN; LOCK TABLE profiles IN ACCESS EXCLUSIVE MODE;",
        "SELECT count(*) FROM pg_locks WHERE relation = 'profiles'::regclass \
         AND mode = 'AccessExclusiveLock' AND granted",
    );
    let job = run_job(&site, &cluster, &script);
    assert!(
        comment(&cluster, job).starts_with("eddy alloc: default"),
        "{}",
        comment(&cluster, job)
    );
    drop(holder);
}

/// User `daemon` runs a job named `ioapp` with a script identical to the victim's (so of the
/// same hash), writing enough to be scaled next time: the victim's job (`nobody`, no history
/// of its own) is then allocated as a job without history, not from `daemon`'s run.
#[test]
fn another_users_identical_script_does_not_steer_a_victims_allocation() {
    let site = Site::new("", "capacity = \"1GiB\"\npeak_bandwidth = \"1KiB\"");
    let db = site.path("history.db");
    site.edit_settings(
        "launcher = \"{cmd}\"\n",
        &format!(
            "launcher = \"{{cmd}}\"\nhistory_db = \"{}\"\n",
            db.display()
        ),
    );
    // One server without history; with a history of 1 MiB or more from one node or more,
    // the scaling rule (F = 1: S = N_A).
    site.edit_settings(
        "default_servers = 3\n",
        "default_servers = 1\nv_min_bytes = 1048576\nn_min = 1\n",
    );
    let script = pool_script(&site, &write_step(""));
    let cluster = cluster(&site, 1);
    let theirs = run_job_as(&site, &cluster, &script, "daemon");
    let c = comment(&cluster, theirs);
    assert!(c.starts_with("eddy alloc: default"), "{c}");
    let p = eddy_history::HistoryDb::open(s(&db))
        .unwrap()
        .find(&theirs.to_string())
        .unwrap()
        .expect("daemon's profile is stored");
    assert_eq!(p.user, "daemon");
    let victim = run_job(&site, &cluster, &script);
    let c = comment(&cluster, victim);
    assert!(
        c.starts_with("eddy alloc: default 1 server(s) io1: no history of ioapp"),
        "the victim was allocated from daemon's history: {c}"
    );
}

/// The job's user runs clients that name nodes of their own choosing (`SLURMD_NODENAME`):
/// its profile's nodes are those Slurm gave the job, and N_A counts only them (one here),
/// so that the next run is not scaled to servers it never needed.
#[test]
fn forged_node_names_do_not_make_n_a() {
    let site = Site::new("", "capacity = \"1GiB\"");
    let db = site.path("history.db");
    site.edit_settings(
        "launcher = \"{cmd}\"\n",
        &format!(
            "launcher = \"{{cmd}}\"\nhistory_db = \"{}\"\n",
            db.display()
        ),
    );
    let mut body = write_step("");
    for forged in ["forged1", "forged2", "forged3"] {
        body.push_str(&write_step(&format!("SLURMD_NODENAME={forged} ")));
    }
    let cluster = cluster(&site, 1);
    let job = run_job(&site, &cluster, &pool_script(&site, &body));
    let p = eddy_history::HistoryDb::open(s(&db))
        .unwrap()
        .find(&job.to_string())
        .unwrap()
        .expect("the job's profile is stored");
    assert_eq!(p.written_bytes, 4 << 20, "{p:?}");
    assert_eq!(p.nodes, vec![cluster.node().to_string()], "{p:?}");
    assert_eq!(
        p.io_nodes,
        Some(1),
        "N_A counted the forged names: {:?}",
        p.nodes
    );
}

/// The site caps a job at two of the pool's three servers and a user at three: a job whose
/// allocation decides three gets two, the user's next job the one left, and a third is
/// refused in words until one ends; `nodes=` above the cap is refused at submit.
#[test]
fn the_sites_caps_on_servers_per_job_and_per_user_hold() {
    let site = Site::new(
        "",
        "capacity = \"1GiB\"\nmax_servers_per_job = 2\nmax_servers_per_user = 3",
    );
    let script = site.script(&["capacity=64M pool=io"]);
    let (ok, out) = bb_bounded(
        &site,
        &[
            "job-process",
            s(&site.script(&["capacity=64M pool=io nodes=3"])),
        ],
    );
    assert!(
        !ok && out.contains("this site allows a job at most 2 I/O nodes"),
        "{out}"
    );
    let setup = |job: &str| {
        bb_bounded(
            &site,
            &["setup", job, "65534", "65534", "io", "67108864", s(&script)],
        )
    };
    let (ok, a) = setup("71");
    assert!(ok, "{a}");
    assert!(a.contains("started: 2 daemons"), "{a}");
    assert!(
        a.contains("max_servers_per_job: at most 2 server(s), 3 decided"),
        "{a}"
    );
    let (ok, b) = setup("72");
    assert!(ok, "{b}");
    assert!(b.contains("started: 1 daemons"), "{b}");
    let (ok, c) = setup("73");
    assert!(!ok, "{c}");
    assert!(
        c.contains("holds 3 I/O node(s) of the pool in other jobs already"),
        "{c}"
    );
    for job in ["73", "72", "71"] {
        let (ok, out) = bb_bounded(&site, &["teardown", job, s(&script), "false"]);
        assert!(ok, "{out}");
    }
}

/// The teardown stores each job's profile through the site's insert-only role (`[history]
/// writer`, its password in a root-only file): the profile lands, and a row already under the
/// job's key (a Slurm job id reused, or a row planted to be overwritten) stays as it was; the
/// role itself can read, change and remove nothing.
#[test]
fn the_teardown_stores_through_an_insert_only_role_and_replaces_nothing() {
    let server = PgServer::start();
    // The allocation's role (the superuser here) migrates the schema; then the writer role.
    let mut admin = eddy_history::HistoryDb::open(&server.socket_url()).unwrap();
    let made = psql(&server)
        .args([
            "-c",
            "CREATE ROLE eddy_teardown LOGIN PASSWORD 'teardown-secret'; \
             GRANT INSERT ON profiles TO eddy_teardown;",
        ])
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let site = Site::new("", "capacity = \"1GiB\"");
    let pw = password_file(&site, "teardown-secret");
    site.edit_settings(
        "launcher = \"{cmd}\"\n",
        &format!(
            "launcher = \"{{cmd}}\"\nhistory_db = \"{reader}\"\n[history]\n\
             writer = \"postgres://eddy_teardown@127.0.0.1:{p}/{d}\"\n\
             writer_password_file = \"{pw}\"\n",
            reader = server.socket_url(),
            p = server.port(),
            d = eddy_testkit::postgres::DATABASE,
            pw = pw.display()
        ),
    );
    let old: eddy_history::JobProfile = serde_json::from_value(eddy_testkit::profiles::profile(
        &eddy_testkit::profiles::Run {
            key: "82",
            job_id: Some("82"),
            job_name: "earlier",
            user: "daemon",
            script_hash: "h",
            start: 1_790_000_000.0,
            seconds: 60,
            nodes: 2,
            bytes_per_node: 1 << 20,
            mode: "N-N",
        },
    ))
    .unwrap();
    admin.put(&old).unwrap();
    let script = site.script(&["capacity=64M pool=io"]);
    let mut said = String::new();
    for job in ["81", "82"] {
        let (ok, out) = bb_bounded(
            &site,
            &["setup", job, "65534", "65534", "io", "67108864", s(&script)],
        );
        assert!(ok, "{out}");
        let (ok, out) = bb_bounded(&site, &["teardown", job, s(&script), "false"]);
        assert!(ok, "{out}");
        said.push_str(&out);
    }
    let stored = admin
        .get("81")
        .unwrap()
        .expect("job 81's profile is stored");
    assert_eq!(stored.user, "nobody", "{said}");
    assert_eq!(admin.get("82").unwrap().as_ref(), Some(&old), "{said}");
    assert!(
        said.contains("a profile with the key 82 is stored already: it is not replaced"),
        "{said}"
    );
    assert!(!said.contains("teardown-secret"), "{said}");
}
