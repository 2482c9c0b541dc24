//! What root reads of a user's making — modules beside a log, a daemon's replies, a metrics
//! endpoint's labels, a job's Slurm Comment — attacked by the user (decision 0056).

use eddy_testkit::cli::{eddy_cmd, s, text};
use eddy_testkit::{require, sh_as_user};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The unprivileged attacker.
const NOBODY: u32 = 65534;

/// The IOR log PyDarshan ships (its package directory, asked of the PyDarshan Python).
fn shipped_log() -> PathBuf {
    let python = eddy_history::darshan::interpreter()
        .unwrap_or_else(|e| require::missing(&format!("{e:#}")));
    let out = std::process::Command::new(&python)
        .args([
            "-I",
            "-c",
            "import darshan, os; print(os.path.dirname(darshan.__file__))",
        ])
        .current_dir("/")
        .output()
        .unwrap();
    if !out.status.success() {
        require::missing(&format!(
            "{} cannot import darshan: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let pkg = String::from_utf8(out.stdout).unwrap();
    let log = Path::new(pkg.trim()).join("examples/example_logs/ior_hdf5_example.darshan");
    assert!(log.exists(), "{} is shipped with PyDarshan", log.display());
    log
}

/// Root imports a Darshan log from a directory anyone can write, working in that directory
/// (`cd /shared/logs && eddy history import *.darshan`): `nobody` planted there a module of
/// every name the helper imports, each writing a canary. None of them runs.
#[test]
fn a_planted_json_py_never_runs_as_root() {
    require::root("import as root from a directory nobody writes");
    require::switch_user();
    let log = shipped_log();
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::copy(&log, logs.join("ior.darshan")).unwrap();
    let canary = logs.join("canary");
    let mut plant = String::new();
    for module in [
        "json", "hashlib", "sys", "warnings", "darshan", "numpy", "pandas", "cffi",
    ] {
        plant.push_str(&format!(
            "printf '%s\\n' 'import os' 'open({canary:?}, \"a\").write(\"{module} \" + \
             str(os.getuid()) + \" \")' > {}/{module}.py\n",
            s(&logs)
        ));
    }
    let planted = sh_as_user(NOBODY, &plant);
    assert!(planted.status.success(), "{}", text(&planted));
    assert!(logs.join("json.py").exists());

    let db = dir.path().join("history.db");
    let out = eddy_cmd()
        .args(["history", "import", "--db", s(&db), "ior.darshan", "--json"])
        .current_dir(&logs)
        .output()
        .unwrap();
    let ran = std::fs::read_to_string(&canary).unwrap_or_default();
    assert!(ran.is_empty(), "planted modules ran as root:\n{ran}");
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("darshan:32324925@1594155460"),
        "{}",
        text(&out)
    );
}

/// The Comment of a Slurm job, as Slurm keeps it (`squeue -o %k`).
fn slurm_comment(cluster: &eddy_testkit::slurm::SlurmCluster, job: u32) -> String {
    let out = cluster
        .command("squeue")
        .args(["-h", "-t", "all", "-j", &job.to_string(), "-o", "%k"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A pool job's setup (run by SlurmUser) sums its allocation up in the job's Comment: the
/// comment the user gave the job stays, Eddy's note comes after it, and the note names no
/// other job (with `PrivateData=jobs`, other users' job ids are not the job's user's to see).
#[test]
fn the_slurm_comment_keeps_the_users_and_names_no_other_job() {
    eddy_testkit::slurm::require_slurm();
    let site = eddy_testkit::bbsite::Site::new("", "capacity = \"1GiB\"");
    let cluster = eddy_testkit::slurm::SlurmCluster::start();
    let script = site.script(&["capacity=64M pool=io"]);
    let body = "#!/bin/bash\n#SBATCH -J ioapp\nsleep 600\n";
    // A neighbour set up on the pool first, then the job (held: Slurm keeps them pending).
    let mut jobs = Vec::new();
    for own in ["run 7 of my study", "the job's own note"] {
        let job = cluster
            .sbatch(
                body,
                &["--hold", &format!("--comment={own}")],
                Some("nobody"),
            )
            .unwrap();
        let mut cmd =
            eddy_testkit::slurm::SlurmCluster::command(&cluster, eddy_testkit::eddy_bin());
        cmd.arg("bb")
            .arg("--site")
            .arg(site.path("bb.toml"))
            .args([
                "setup",
                &job.to_string(),
                "65534",
                "65534",
                "io",
                "67108864",
            ])
            .arg(&script);
        let out =
            eddy_testkit::slurm::output_bounded(&mut cmd, std::time::Duration::from_secs(120))
                .expect("eddy bb setup did not end in 120 s");
        assert!(out.status.success(), "{}", text(&out));
        jobs.push((job, own));
    }
    for &(job, own) in &jobs {
        let comment = slurm_comment(&cluster, job);
        let (users, note) = comment
            .split_once(" | ")
            .unwrap_or_else(|| panic!("job {job}'s own comment is gone: {comment:?}"));
        assert_eq!(users, own, "{comment:?}");
        assert!(note.starts_with("eddy alloc: "), "{comment:?}");
        let words: Vec<&str> = note.split(|c: char| !c.is_ascii_alphanumeric()).collect();
        for &(other, _) in &jobs {
            assert!(
                other == job || !words.contains(&other.to_string().as_str()),
                "job {job}'s Comment names job {other}: {comment:?}"
            );
        }
    }
    for &(job, _) in jobs.iter().rev() {
        site.bb_ok(&["teardown", &job.to_string(), s(&script), "false"]);
    }
}

/// Stops the deployment in a state directory when the test ends, whatever happened.
struct StopGuard(PathBuf);

impl Drop for StopGuard {
    fn drop(&mut self) {
        let _ = eddy_testkit::cli::eddy(&["stop", "--state", s(&self.0)]);
    }
}

/// How a relay turns a real daemon into one that pages for ever.
#[derive(Clone, Copy)]
enum Forever {
    /// Every paged request is asked from its start again, and every page says `more`: the
    /// cursor never moves.
    SameCursor,
}

/// A daemon of the user's that pages for ever: the job's real daemon (`eddyd`, `wire =
/// "clear"`), behind a relay in this process that forwards the handshake as it is and, after
/// it, rewrites the paged requests and their replies (decoded and encoded with eddy-proto).
struct Relay {
    addr: std::net::SocketAddr,
    _rt: tokio::runtime::Runtime,
}

const RELAY_MAX: u32 = 64 * 1024 * 1024;

impl Relay {
    fn start(daemon: std::net::SocketAddr, how: Forever) -> Relay {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        rt.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay_connection(client, daemon, how));
            }
        });
        Relay { addr, _rt: rt }
    }
}

/// Relays one connection; the ops of the requests under way by id, for their replies.
async fn relay_connection(
    client: tokio::net::TcpStream,
    daemon: std::net::SocketAddr,
    how: Forever,
) {
    use eddy_proto::frame::{read_frame, write_frame, write_frames};
    use eddy_proto::{response_frame, response_from_frame, Reply, Request};
    let Ok(server) = tokio::net::TcpStream::connect(daemon).await else {
        return;
    };
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let ops = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
    let up_ops = ops.clone();
    let up = async move {
        while let Ok(frame) = read_frame(&mut cr, RELAY_MAX).await {
            let id = frame.id;
            let decoded = (id != 0)
                .then(|| Request::from_frame(frame.clone(), RELAY_MAX as u64).ok())
                .flatten();
            let Some(mut req) = decoded else {
                // The handshake, and whatever this relay does not read: as it came.
                if write_frame(&mut sw, id, &frame.meta, &frame.payload, RELAY_MAX)
                    .await
                    .is_err()
                {
                    return;
                }
                continue;
            };
            match (&mut req, how) {
                (Request::Readdir(r), Forever::SameCursor) => r.after = None,
                (Request::CheckBackend(r), Forever::SameCursor) => r.after = None,
                (Request::FlushDirty(r), Forever::SameCursor) => r.after = None,
                (Request::FinalizeDirty(r), Forever::SameCursor) => r.after = None,
                _ => {}
            }
            up_ops.lock().unwrap().insert(id, req.op_name());
            let out = req.to_frame(id, RELAY_MAX).unwrap();
            if write_frames(&mut sw, std::slice::from_ref(&out))
                .await
                .is_err()
            {
                return;
            }
        }
    };
    let down = async move {
        while let Ok(frame) = read_frame(&mut sr, RELAY_MAX).await {
            let id = frame.id;
            let op = ops.lock().unwrap().remove(&id);
            let decoded = op
                .is_some()
                .then(|| response_from_frame(frame.clone(), RELAY_MAX as u64).ok())
                .flatten();
            let Some(mut resp) = decoded else {
                if write_frame(&mut cw, id, &frame.meta, &frame.payload, RELAY_MAX)
                    .await
                    .is_err()
                {
                    return;
                }
                continue;
            };
            match &mut resp {
                Ok(Reply::Entries(page)) => page.more = true,
                Ok(Reply::Flushed(page)) => page.more = true,
                _ => {}
            }
            let out = response_frame(id, &resp, RELAY_MAX).unwrap();
            if write_frames(&mut cw, std::slice::from_ref(&out))
                .await
                .is_err()
            {
                return;
            }
        }
    };
    tokio::join!(up, down);
}

/// Runs `eddy ARGS` as root, which must end (with an error) within the guard.
/// `eddy start --local 1` as root on `root` (under a temporary directory) with `more`
/// arguments, stopped when the guard is dropped: the guard and the deployment it wrote.
fn start_one(root: &Path, more: &[&str]) -> (StopGuard, eddy_config::Deployment) {
    let guard = StopGuard(root.to_path_buf());
    let mut args = vec!["start", "--local", "1", "--root", s(root)];
    args.extend_from_slice(more);
    let out = eddy_testkit::cli::eddy(&args);
    assert!(out.status.success(), "{}", text(&out));
    let dep = eddy_config::Deployment::load(&root.join("deployment.toml")).unwrap();
    (guard, dep)
}

/// `python3 -c SCRIPT` as `nobody`, once it printed the line `says` (its work is done and it
/// holds what it made until killed).
fn python_as_nobody(script: &str, says: &str) -> std::process::Child {
    let mut child = eddy_testkit::as_user(NOBODY)
        .args(["/usr/bin/python3", "-c", script])
        .current_dir("/")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), says);
    child
}

fn must_end(args: &[&str]) -> std::process::Output {
    let mut cmd = eddy_cmd();
    cmd.args(args);
    eddy_testkit::slurm::output_bounded(&mut cmd, PAGING_GUARD).unwrap_or_else(|| {
        panic!("`eddy {args:?}` as root still paged after {PAGING_GUARD:?}: it loops on the daemon's pages")
    })
}

/// Guard against a loop that never ends (a failure), never an assertion on speed.
const PAGING_GUARD: std::time::Duration = std::time::Duration::from_secs(120);

/// Root stages a job's data in and out through the job's daemons, which are the user's: a
/// daemon answering every page with `more` and a cursor that never moves (readdir, the
/// stage-out's check) makes root's client fail with a clear error, not loop and grow.
#[test]
fn a_daemon_paging_forever_cannot_hold_roots_stage_in_or_out() {
    require::root("stage as root");
    let dir = tempfile::tempdir().unwrap();
    let pfs = dir.path().join("pfs");
    std::fs::create_dir_all(pfs.join("tree/sub")).unwrap();
    for i in 0..5 {
        std::fs::write(pfs.join(format!("tree/f{i}")), b"data\n").unwrap();
    }
    std::fs::write(pfs.join("tree/sub/g"), b"data\n").unwrap();
    let root = dir.path().join("root");
    let link = format!("/d={}", s(&pfs));
    let (_guard, mut dep) = start_one(
        &root,
        &["--wire", "clear", "--link", &link, "--name", "forever"],
    );
    let daemon: std::net::SocketAddr = dep.daemons[0].addr.parse().unwrap();
    let relay = Relay::start(daemon, Forever::SameCursor);
    // The deployment as root's client reaches it: through the relay, over TCP.
    dep.daemons[0].addr = relay.addr.to_string();
    dep.daemons[0].socket = None;
    let state = dir.path().join("relayed");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    dep.save(&state.join("deployment.toml")).unwrap();

    let out = must_end(&["stage-in", "--state", s(&state), "/d/tree"]);
    let err = text(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("does not move its cursor"), "{err}");

    let out = must_end(&["stage-out", "--state", s(&state)]);
    let err = text(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("does not move its cursor"), "{err}");
}

/// A pool job's setup with a site config that names a fixed metrics port, which `nobody`
/// bound first on the node: the job's daemons still start, each on a free port of the site's
/// IP, recorded in the job's deployment (before, the squatter kept every job's daemons from
/// starting, and two jobs on a node could not both run).
#[test]
fn a_squatted_site_metrics_port_does_not_stop_a_job() {
    require::switch_user();
    let squatted = eddy_testkit::cli::free_port();
    let mut squatter = python_as_nobody(
        &format!(
            "import socket, sys, time\n\
             s = socket.socket()\ns.bind(('127.0.0.1', {squatted}))\ns.listen()\n\
             print('bound', flush=True)\ntime.sleep(600)\n"
        ),
        "bound",
    );

    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = dir.path().join("eddy.toml");
    std::fs::write(
        &config,
        format!("metrics_addr = \"127.0.0.1:{squatted}\"\n"),
    )
    .unwrap();
    let site = eddy_testkit::bbsite::Site::new(
        &format!("config = {:?}", s(&config)),
        "capacity = \"1GiB\"",
    );
    let script = site.script(&["capacity=64M pool=io"]);
    let setup = site.bb(&[
        "setup",
        "71",
        "65534",
        "65534",
        "io",
        "67108864",
        s(&script),
    ]);
    let _ = squatter.kill();
    let _ = squatter.wait();
    assert!(setup.0, "setup failed:\n{}\n{}", setup.1, setup.2);
    let dep = eddy_config::Deployment::load(&site.path("jobs/71/state/deployment.toml")).unwrap();
    let metrics: Vec<String> = dep
        .daemons
        .iter()
        .filter_map(|d| d.metrics.clone())
        .collect();
    assert_eq!(metrics.len(), dep.daemons.len(), "{metrics:?}");
    for m in &metrics {
        let addr: std::net::SocketAddr = m.parse().unwrap();
        assert_eq!(addr.ip().to_string(), "127.0.0.1", "{m}");
        assert_ne!(addr.port(), squatted, "{m}");
        assert_ne!(addr.port(), 0, "{m}");
    }
    site.bb_ok(&["teardown", "71", s(&script), "false"]);
}

/// Anyone on the node may connect to a job's metrics endpoint and say nothing: more idle
/// connections than the endpoint holds (`metrics_max_connections`, 8) do not keep a scrape
/// out.
#[test]
fn idle_connections_do_not_blind_the_metrics_endpoint() {
    require::switch_user();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let (_guard, dep) = start_one(&root, &["--metrics", "127.0.0.1:0", "--name", "idle"]);
    let addr = dep.daemons[0].metrics.clone().unwrap();
    let url = format!("http://{addr}/metrics");
    // `nobody` holds 12 connections open without a word.
    let mut idle = python_as_nobody(
        &format!(
            "import socket, time\nhost, port = {addr:?}.rsplit(':', 1)\n\
             held = [socket.create_connection((host, int(port))) for _ in range(12)]\n\
             print('connected', flush=True)\ntime.sleep(600)\n"
        ),
        "connected",
    );
    // Accepted in order: the scrape comes after all of them.
    let scraped = eddy_testkit::prometheus::http_get(&url);
    let _ = idle.kill();
    let _ = idle.wait();
    let (code, body) = scraped.unwrap_or_else(|e| panic!("the scrape was kept out: {e}"));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("eddy_start_time_seconds"), "{body}");
}

/// A job's user controls its daemons, so their `/metrics`: one exposes a series labelled
/// with another job's id (and that job's instance). Scraped as Eddy tells sites to (`eddy
/// status --prometheus` target groups, `honor_labels: false`), the series stays the forger's
/// job's and the other job has none of it in the real Prometheus.
#[test]
fn a_job_cannot_label_its_metrics_as_another_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let (_guard, victim) = start_one(&root, &["--metrics", "127.0.0.1:0", "--name", "victim"]);
    let victim_addr = victim.daemons[0].metrics.clone().unwrap();

    // The forger's "daemon": its own endpoint, serving the victim's labels.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let forger_addr = listener.local_addr().unwrap().to_string();
    let forged = format!(
        "# TYPE eddy_bytes_written_total counter\n\
         eddy_bytes_written_total{{job=\"victim\",daemon=\"0\",op=\"write\",instance=\"{victim_addr}\"}} 1e15\n"
    );
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut head = [0u8; 4096];
            let _ = std::io::Read::read(&mut conn, &mut head);
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{forged}",
                forged.len()
            );
            let _ = std::io::Write::write_all(&mut conn, reply.as_bytes());
        }
    });
    // The forger's deployment as root's state has it: its own job, its endpoint.
    let mut forger = victim.clone();
    forger.name = "forger".into();
    forger.job = Default::default();
    forger.daemons[0].metrics = Some(forger_addr);
    let forger_state = dir.path().join("forger");
    std::fs::create_dir(&forger_state).unwrap();
    forger.save(&forger_state.join("deployment.toml")).unwrap();

    let groups: Vec<String> = [root.clone(), forger_state]
        .iter()
        .map(|state| {
            let out = eddy_testkit::cli::ok(&["status", "--state", s(state), "--prometheus"]);
            String::from_utf8(out.stdout).unwrap()
        })
        .collect();
    let prom = eddy_testkit::prometheus::Prometheus::start(&groups);
    let bound = std::time::Duration::from_secs(60);
    prom.wait_for("count(up == 1)", bound, |v| v == 2.0);
    prom.wait_for(
        "count(eddy_start_time_seconds{job=\"victim\"})",
        bound,
        |v| v == 1.0,
    );
    // The forged series arrived, and it is not the victim's but the forger's.
    prom.wait_for("count(eddy_bytes_written_total)", bound, |v| v >= 1.0);
    let stolen = prom.query("eddy_bytes_written_total{job=\"victim\"}");
    assert!(
        stolen.is_empty(),
        "the forged series is the victim's: {stolen:?}"
    );
    let kept = prom.query("eddy_bytes_written_total{job=\"forger\",exported_job=\"victim\"}");
    assert_eq!(kept.len(), 1, "{kept:?}");
}
