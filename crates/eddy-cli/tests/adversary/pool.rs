//! Pool mode's allocation and its health probes against a user (decision 0055): a probe that
//! stalls holds no other job's setup; jobs set up together share one probe round; a tiny pool
//! job is refused at submission and a user holds at most the site's number of pool jobs; a
//! local user who connects to a probe server first neither takes the probe nor gets its
//! server marked down, and never sees the probe's nonce.
//!
//! The site is `eddy_testkit::bbsite`'s (three "I/O nodes" on loopback addresses of this
//! host, `eddy bb` run phase by phase without Slurm), with a launcher script of the test's
//! in front of `{cmd}`.

use eddy_testkit::bbsite::{s, Site, NOBODY};
use eddy_testkit::require;
use eddy_testkit::slurm::{output_bounded, wait_bounded};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Guard on a setup that must not wait for another job's (a failure guard, not a timing).
const SETUP_BOUND: Duration = Duration::from_secs(60);

/// Writes an executable script of root's (0700) at `path`.
fn script_file(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// A site whose launcher is `launcher.sh {host} {cmd}`: it logs every probe server it starts
/// (`probes.log`) and holds the first one started after the test made `stall` until the test
/// makes `release` (a probe that stalls: a hung node, a slow ssh), then runs the command.
fn site_with_logging_launcher(pool_extra: &str) -> Site {
    let site = Site::new("", &format!("capacity = \"1GiB\"\n{pool_extra}"));
    let d = site.dir.path().display().to_string();
    let launcher = site.path("launcher.sh");
    script_file(
        &launcher,
        &format!(
            "#!/bin/bash\nd={d}\nshift\n\
             case \" $* \" in\n*\" probe-serve \"*)\n\
             echo \"$*\" >> \"$d/probes.log\"\n\
             if mv \"$d/stall\" \"$d/stalled\" 2>/dev/null; then\n\
             for i in $(seq 1200); do [ -e \"$d/release\" ] && break; sleep 0.1; done\n\
             fi;;\nesac\nexec \"$@\"\n"
        ),
    );
    site.edit_settings(
        "launcher = \"{cmd}\"",
        &format!("launcher = \"{} {{host}} {{cmd}}\"", launcher.display()),
    );
    site
}

/// `eddy bb setup JOB` of `nobody`'s pool job `script`, started (not waited for); its words go
/// to `setup-JOB.out` in the site's directory.
fn start_setup(site: &Site, job: u32, script: &Path) -> Child {
    let out = std::fs::File::create(site.path(&format!("setup-{job}.out"))).unwrap();
    Command::new(eddy_testkit::eddy_bin())
        .arg("bb")
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
        .arg(script)
        .env_remove("EDDY_STATE")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap()
}

fn probes_started(site: &Site) -> usize {
    std::fs::read_to_string(site.path("probes.log"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn a_stalled_probe_does_not_hold_another_jobs_setup() {
    let site = site_with_logging_launcher("probe_bound_s = 120\n");
    let script = site.script(&["capacity=64M pool=io"]);
    // Job 71's probe round starts and one of its probes stalls.
    std::fs::write(site.path("stall"), b"").unwrap();
    let mut first = start_setup(&site, 71, &script);
    eddy_testkit::eventually::eventually_within(SETUP_BOUND, "job 71 probes", || {
        assert!(
            first.try_wait().unwrap().is_none(),
            "job 71's setup ended before its probe: {}",
            std::fs::read_to_string(site.path("setup-71.out")).unwrap()
        );
        site.path("stalled").exists().then_some(())
    });
    // Job 72 is set up meanwhile: it waits neither for 71's probe nor for its decision.
    let mut second = Command::new(eddy_testkit::eddy_bin());
    second
        .arg("bb")
        .arg("--site")
        .arg(site.path("bb.toml"))
        .args(["setup", "72", "65534", "65534", "io", "67108864"])
        .arg(&script)
        .env_remove("EDDY_STATE");
    let done = output_bounded(&mut second, SETUP_BOUND);
    let still_stalled = first.try_wait().unwrap().is_none();
    std::fs::write(site.path("release"), b"").unwrap();
    let first_status = wait_bounded(&mut first, Duration::from_secs(180));
    let out = done.expect("job 72's setup waited for job 71's stalled probe (the pool's lock)");
    let words = eddy_testkit::cli::text(&out);
    assert!(out.status.success(), "{words}");
    assert!(
        still_stalled,
        "job 71's probe did not stall: the test proves nothing"
    );
    assert!(
        words.contains("eddy: allocation: health probe: another allocation is probing the pool"),
        "{words}"
    );
    assert!(
        first_status.is_some_and(|s| s.success()),
        "{}",
        std::fs::read_to_string(site.path("setup-71.out")).unwrap()
    );
    site.bb_ok(&["teardown", "71", s(&script), "false"]);
    site.bb_ok(&["teardown", "72", s(&script), "false"]);
}

#[test]
fn pool_jobs_set_up_one_after_another_share_one_probe_round() {
    let site = site_with_logging_launcher("");
    let script = site.script(&["capacity=64M pool=io"]);
    let setup =
        |job: &str| site.bb_ok(&["setup", job, "65534", "65534", "io", "67108864", s(&script)]);
    setup("73");
    // Job 74 beside 73: 73's daemons are asked for their load (before the lock) and answer.
    let beside = setup("74");
    assert!(
        beside.contains("eddy: allocation: ") && !beside.contains("cannot be reached"),
        "{beside}"
    );
    for job in ["73", "74"] {
        site.bb_ok(&["teardown", job, s(&script), "false"]);
    }
    setup("75");
    site.bb_ok(&["teardown", "75", s(&script), "false"]);
    // The pool's three idle servers were probed once, by the first job; the last judged them
    // by that round (`[pool] probe_cache_s`).
    assert_eq!(
        probes_started(&site),
        3,
        "{}",
        std::fs::read_to_string(site.path("probes.log")).unwrap()
    );
}

#[test]
fn a_pool_job_below_the_sites_least_capacity_is_refused_at_submission() {
    let site = Site::new("", "capacity = \"1GiB\"");
    site.edit_settings("min_capacity = \"1MiB\"", "min_capacity = \"256MiB\"");
    let tiny = site.script(&["capacity=16M pool=io"]);
    let e = site.bb_err(&["job-process", s(&tiny)]);
    assert!(
        e.contains("capacity 16.0 MiB is less than the io pool's least per job (256.0 MiB)"),
        "{e}"
    );
    // Setup refuses it too (a job submitted before the site raised its least).
    let e = site.bb_err(&["setup", "76", "65534", "65534", "io", "16777216", s(&tiny)]);
    assert!(e.contains("less than the io pool's least per job"), "{e}");
    site.bb_ok(&["teardown", "76", s(&tiny), "false"]);
    site.bb_ok(&["job-process", s(&site.script(&["capacity=256M pool=io"]))]);
}

#[test]
fn a_user_cannot_hold_more_pool_jobs_than_the_site_allows() {
    let site = Site::new("", "capacity = \"1GiB\"\nmax_jobs_per_user = 1");
    let script = site.script(&["capacity=64M pool=io"]);
    site.bb_ok(&[
        "setup",
        "77",
        "65534",
        "65534",
        "io",
        "67108864",
        s(&script),
    ]);
    let (ok, out, err) = site.bb(&[
        "setup",
        "78",
        "65534",
        "65534",
        "io",
        "67108864",
        s(&script),
    ]);
    assert!(!ok, "a second pool job of nobody was set up:\n{out}");
    // The last line is what slurm/burst_buffer.lua gives Slurm as the job's Reason.
    let last = format!("{out}{err}")
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .to_string();
    assert!(
        last.contains(
            "user nobody (uid 65534) holds 1 pool job(s) already (77): this site allows 1 at a \
             time ([pool] max_jobs_per_user)"
        ),
        "{last}"
    );
    assert!(
        !site.path("pool/io1/job-78").exists(),
        "the refused job got daemons"
    );
    site.bb_ok(&["teardown", "78", s(&script), "false"]);
    // Once the first is gone, the second is set up.
    site.bb_ok(&["teardown", "77", s(&script), "false"]);
    site.bb_ok(&[
        "setup",
        "78",
        "65534",
        "65534",
        "io",
        "67108864",
        s(&script),
    ]);
    site.bb_ok(&["teardown", "78", s(&script), "false"]);
}

/// A launcher (`{cmd}` on this host) for `eddy sysmap probe`: when it has started a probe
/// server and read where it listens, `nobody` connects to it first — a connection that sends
/// garbage, one with the header's magic and a guessed nonce, one that stays silent — and only
/// then does the prober learn the address. It keeps, for the test, the nonce the prober gave
/// on its standard input and the server's arguments and environment as /proc shows them.
fn attacking_launcher(dir: &Path) -> PathBuf {
    let attack = dir.join("attack.sh");
    script_file(
        &attack,
        "#!/bin/bash\n\
         host=${1%:*}; port=${1##*:}\n\
         exec 4<>/dev/tcp/$host/$port || exit 1\n\
         printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&4\n\
         exec 5<>/dev/tcp/$host/$port || exit 1\n\
         printf 'EDDYPRB2%040d' 0 >&5\n\
         exec 6<>/dev/tcp/$host/$port || exit 1\n\
         IFS= read -r -t 5 answer <&4; echo \"garbage: $answer\"\n\
         IFS= read -r -t 5 answer <&5; echo \"forged: $answer\"\n\
         sleep 15 <&6 >/dev/null 2>&1 &\n",
    );
    std::fs::set_permissions(&attack, std::fs::Permissions::from_mode(0o755)).unwrap();
    let launcher = dir.join("launcher.sh");
    script_file(
        &launcher,
        &format!(
            "#!/bin/bash\nd={d}\nh=$1\nshift\n\
             IFS= read -r nonce\n\
             printf '%s' \"$nonce\" > \"$d/$h.nonce\"\n\
             mkfifo \"$d/$h.out\"\n\
             printf '%s\\n' \"$nonce\" | \"$@\" > \"$d/$h.out\" &\n\
             server=$!\n\
             exec 3< \"$d/$h.out\"\n\
             IFS= read -r line <&3\n\
             tr '\\0' ' ' < /proc/$server/cmdline > \"$d/$h.cmdline\"\n\
             tr '\\0' ' ' < /proc/$server/environ > \"$d/$h.environ\"\n\
             setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups {attack} \"${{line#LISTEN }}\" \
             > \"$d/$h.attack\" 2>&1\n\
             echo \"$line\"\n\
             cat <&3\n\
             wait $server\n",
            d = dir.display(),
            attack = attack.display(),
        ),
    );
    launcher
}

#[test]
fn a_local_user_who_connects_first_does_not_take_the_probe() {
    require::switch_user();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let launcher = attacking_launcher(dir.path());
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "a 127.0.0.1\nb 127.0.0.1\n").unwrap();
    for h in ["a", "b"] {
        std::fs::create_dir(dir.path().join(format!("store-{h}"))).unwrap();
    }
    let db = dir.path().join("inv.db");
    let out = eddy_testkit::cli::ok(&[
        "sysmap",
        "probe",
        "--db",
        s(&db),
        "--hosts",
        s(&hosts),
        "--launcher",
        &format!("{} {{host}} {{cmd}}", launcher.display()),
        "--dir",
        s(&dir.path().join("store-{host}")),
        "--bytes",
        "1M",
        "--bound",
        "30",
        "--anomaly-ratio",
        "0.05",
    ]);
    let said = |h: &str, what: &str| {
        std::fs::read_to_string(dir.path().join(format!("{h}.{what}"))).unwrap_or_default()
    };
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for (h, row) in ["a", "b"].iter().zip(rows.as_array().unwrap()) {
        let attack = said(h, "attack");
        // nobody did connect first; the prober was served all the same.
        assert!(attack.contains("garbage: ERR"), "{h}: {attack}");
        assert!(
            row["bandwidth"].as_f64().is_some_and(|bw| bw > 0.0),
            "the prober lost its probe to nobody's connections: {row}\nnobody: {attack}"
        );
        assert_eq!(row["anomalous"], false, "{row}");
        assert!(attack.contains("forged: ERR"), "{h}: {attack}");
        // The nonce was on the server's standard input, never where other users read.
        let nonce = said(h, "nonce");
        assert_eq!(nonce.len(), 64, "{nonce:?}");
        let cmdline = said(h, "cmdline");
        assert!(cmdline.contains("probe-serve"), "{cmdline}");
        assert!(!cmdline.contains(&nonce), "the nonce is in argv: {cmdline}");
        assert!(
            !said(h, "environ").contains(&nonce),
            "the nonce is in environ"
        );
    }
    let health = eddy_testkit::cli::ok(&["sysmap", "health", "--db", s(&db)]);
    let health: serde_json::Value = serde_json::from_slice(&health.stdout).unwrap();
    assert!(
        health
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["anomalous"] == false),
        "{health}"
    );
}
