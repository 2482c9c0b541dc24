//! The `eddy bb` phases run one by one as slurm/burst_buffer.lua would run them, without
//! Slurm: a pool-mode job's life (setup starts three daemons as the job's user on "I/O
//! nodes" of this host, data-in stages in, a node mounts, data-out stages out, teardown
//! leaves nothing and can run again), the failures a user must read in words, and the pool
//! sizes taken from a node inventory written by `eddy sysmap`.
//!
//! Needs root (daemons switch to the job's user) and FUSE; without them it fails.

use eddy_testkit::require;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use eddy_testkit::bbsite::{s, Site, NOBODY};

#[test]
fn a_pool_job_lives_and_is_torn_down_without_slurm() {
    require::fuse();
    let site = Site::new("", "capacity = \"1GiB\"");
    let pfs = site.path("pfs/run");
    let link = format!("link /d={}", pfs.display());
    let script = site.script(&[
        "capacity=64M pool=io",
        &link,
        "stage_in /d/in pin",
        "stage_out /d/out",
    ]);
    let job = "41";
    site.bb_ok(&["job-process", s(&script)]);
    site.bb_ok(&["setup", job, "65534", "65534", "io", "67108864", s(&script)]);
    // A rerun (Slurm retries, an administrator reruns) finds the daemons started.
    site.bb_ok(&["setup", job, "65534", "65534", "io", "67108864", s(&script)]);
    site.bb_ok(&["data-in", job, s(&script)]);
    site.bb_ok(&["real-size", job]);
    let env_file = site.path("env");
    site.bb_ok(&["paths", job, s(&script), s(&env_file)]);
    let env = std::fs::read_to_string(&env_file).unwrap();
    let mnt = site.path("mnt/41");
    let user_state = site.path("jobs/41/user");
    assert_eq!(
        env,
        format!(
            "EDDY_MOUNT={}\nEDDY_STATE={}\nEDDY_JOB_DIR={}\n",
            mnt.display(),
            user_state.display(),
            site.path("jobs/41").display()
        )
    );
    // Three daemons, as the job's user, each on its own I/O node's storage.
    for host in ["io1", "io2", "io3"] {
        let root = site.path(&format!("pool/{host}/job-41"));
        let meta = std::fs::metadata(&root).unwrap();
        assert_eq!(
            (meta.uid(), meta.mode() & 0o777),
            (NOBODY, 0o700),
            "{}",
            root.display()
        );
    }
    let secret = std::fs::metadata(user_state.join("deployment.toml")).unwrap();
    assert_eq!((secret.uid(), secret.mode() & 0o777), (NOBODY, 0o600));
    // What pre_run does on each node: mount (twice: the second finds it mounted).
    let state = site.path("jobs/41/state");
    site.bb_ok(&["node-mount", s(&state), s(&mnt)]);
    site.bb_ok(&["node-mount", s(&state), s(&mnt)]);
    let input = std::fs::read(pfs.join("in/a.dat")).unwrap();
    assert!(std::fs::read(mnt.join("d/in/a.dat")).unwrap() == input);
    std::fs::create_dir(mnt.join("d/out")).unwrap();
    std::fs::write(mnt.join("d/out/r.txt"), b"result\n").unwrap();
    std::fs::write(mnt.join("d/not-staged.txt"), b"scratch\n").unwrap();
    site.bb_ok(&["post-run", job, s(&script)]);
    site.bb_ok(&["node-clean", "--mount", s(&mnt)]);
    assert!(!eddy_testkit::is_mountpoint(&mnt) && !mnt.exists());
    site.bb_ok(&["data-out", job, s(&script)]);
    assert_eq!(std::fs::read(pfs.join("out/r.txt")).unwrap(), b"result\n");
    assert_eq!(
        std::fs::metadata(pfs.join("out/r.txt")).unwrap().uid(),
        NOBODY
    );
    let status = site.bb_ok(&["status"]);
    assert!(
        status
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["41", "65534", "pool", "64.0", "MiB", "3", "0"]),
        "{status}"
    );
    site.bb_ok(&["teardown", job, s(&script), "false"]);
    site.bb_ok(&["teardown", job, s(&script), "false"]);
    assert!(!site.path("jobs/41").exists());
    assert!(
        !pfs.join("not-staged.txt").exists(),
        "only stage_out trees are staged out"
    );
    for host in ["io1", "io2", "io3"] {
        assert!(!site.path(&format!("pool/{host}/job-41")).exists());
    }
    let left = eddy_testkit::slurm::processes_mentioning(&site.dir.path().display().to_string());
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_teardown_killed_with_its_process_group_still_finishes() {
    // Slurm kills a job's running burst-buffer scripts (their process group) when the job is
    // cancelled, a teardown among them: the work goes on in its own process group and
    // completes.
    let site = Site::new("", "capacity = \"1GiB\"");
    let script = site.script(&["capacity=64M pool=io"]);
    let job = "43";
    site.bb_ok(&["setup", job, "65534", "65534", "io", "67108864", s(&script)]);
    let dir = site.path("jobs/43");
    // Held here, the job's lock keeps the teardown's work waiting until the kill is done.
    let lock = std::fs::File::open(&dir).unwrap();
    // SAFETY: flock on a descriptor we own.
    assert_eq!(
        // SAFETY: flock on a descriptor we own.
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) },
        0
    );
    let mut teardown = Command::new(eddy_testkit::eddy_bin())
        .arg("bb")
        .arg("--site")
        .arg(site.path("bb.toml"))
        .args(["teardown", job, s(&script), "false"])
        .process_group(0)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed once the detached process has started in its own process group (its first
    // words are in its log in the job directory); it is in that group from its spawn on,
    // but the log file exists before the spawn.
    let bound = Duration::from_secs(60);
    let started = |dir: &Path| {
        std::fs::read_dir(dir).unwrap().flatten().any(|e| {
            e.file_name().to_string_lossy().starts_with("teardown-")
                && std::fs::read_to_string(e.path())
                    .is_ok_and(|t| t.contains("tearing down job 43"))
        })
    };
    let every = Duration::from_millis(5);
    let seen = eddy_testkit::eventually::poll_every(bound, every, || started(&dir).then_some(()));
    assert!(seen.is_some(), "the teardown never started");
    // SAFETY: kill(2) of the process group we made for our own child.
    assert_eq!(
        // SAFETY: kill(2) of the process group we made for our own child.
        unsafe { libc::kill(-(teardown.id() as i32), libc::SIGKILL) },
        0
    );
    let status = teardown.wait().unwrap();
    assert!(!status.success(), "killed: {status}");
    assert!(dir.exists(), "the teardown ran past the job's lock");
    drop(lock);
    eddy_testkit::eventually::eventually_within(
        bound,
        "the killed teardown's work finishes",
        || (!dir.exists()).then_some(()),
    );
    for host in ["io1", "io2", "io3"] {
        assert!(!site.path(&format!("pool/{host}/job-43")).exists());
    }
    site.bb_ok(&["teardown", job, s(&script), "false"]);
    // The detached teardown exits right after removing the directory.
    let what = "nothing of the site is left running";
    eddy_testkit::eventually::eventually_seen(bound, what, || {
        let left =
            eddy_testkit::slurm::processes_mentioning(&site.dir.path().display().to_string());
        if left.is_empty() {
            Ok(())
        } else {
            Err(left)
        }
    });
}

#[test]
fn failures_name_what_went_wrong() {
    let site = Site::new("max_capacity = \"1G\"", "capacity = \"1GiB\"");
    let pfs = site.path("pfs/run");
    let link = format!("link /d={}", pfs.display());
    let too_big = site.script(&["capacity=2G pool=io"]);
    let e = site.bb_err(&["job-process", s(&too_big)]);
    assert!(
        e.contains("capacity 2.0 GiB is more than this site allows a job (1.0 GiB)"),
        "{e}"
    );
    let e = site.bb_err(&["job-process", s(&site.script(&["capacity=1G pool=fast"]))]);
    assert!(
        e.contains("pool=fast is not a pool of this site (node-local, io)"),
        "{e}"
    );

    // A daemon that cannot start (its storage root lies under a regular file): setup says
    // which and why; teardown then removes what was made.
    std::fs::write(site.path("pool"), b"not a directory").unwrap();
    let script = site.script(&["capacity=1G pool=io", &link, "stage_out /d/locked"]);
    let e = site.bb_err(&[
        "setup",
        "7",
        "65534",
        "65534",
        "io",
        "1073741824",
        s(&script),
    ]);
    assert!(e.contains("cannot start the job's 3 daemons"), "{e}");
    assert!(
        e.contains("storage root") || e.contains("Not a directory"),
        "{e}"
    );
    site.bb_ok(&["teardown", "7", s(&script), "true"]);
    assert!(!site.path("jobs/7").exists());
    std::fs::remove_file(site.path("pool")).unwrap();

    // A backend that refuses the stage-out (a directory the job's user cannot write): the
    // message names the file.
    site.bb_ok(&[
        "setup",
        "8",
        "65534",
        "65534",
        "io",
        "1073741824",
        s(&script),
    ]);
    std::fs::create_dir(pfs.join("locked")).unwrap(); // root's, mode 0755
    let state = site.path("jobs/8/user");
    let put = Command::new(eddy_testkit::eddy_bin())
        .args(["debug", "put", "--state"])
        .arg(&state)
        .arg(site.path("bb.toml"))
        .arg("/d/locked/r.txt")
        .output()
        .unwrap();
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    let e = site.bb_err(&["data-out", "8", s(&script)]);
    assert!(
        e.contains("stage-out failed for 1 file") && e.contains("/d/locked/r.txt"),
        "{e}"
    );
    site.bb_ok(&["teardown", "8", s(&script), "false"]);
    assert!(!site.path("jobs/8").exists());
}

#[test]
fn pools_are_measured_by_the_inventory() {
    let site = Site::new(&format!("inventory = \"{}\"", "INV"), "");
    let inv = site.path("inventory.db");
    site.edit_settings("\"INV\"", &format!("\"{}\"", inv.display()));
    std::fs::create_dir_all(site.path("pool")).unwrap();
    std::fs::create_dir_all(site.path("nodes")).unwrap();
    for (node, dir) in [
        ("io1", "pool"),
        ("io2", "pool"),
        ("io3", "pool"),
        ("n1", "nodes"),
        ("n2", "nodes"),
    ] {
        let out = Command::new(eddy_testkit::eddy_bin())
            .args(["sysmap", "--db"])
            .arg(&inv)
            .args(["--node", node, "--bench-mib", "0", "--path"])
            .arg(site.path(dir))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let pools: serde_json::Value = serde_json::from_str(&site.bb_ok(&["pools"])).unwrap();
    let pools = pools["pools"].as_array().unwrap();
    let ids: Vec<&str> = pools.iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["node-local", "io"]);
    let avail_mib = {
        // SAFETY: statvfs fills the struct it is given.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        let c = std::ffi::CString::new(s(site.dir.path())).unwrap();
        // SAFETY: `c` is NUL-terminated and `st` a writable statvfs, both alive for the call.
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
        (st.f_bavail * st.f_frsize) >> 20
    };
    for (pool, nodes) in [(&pools[0], 2u64), (&pools[1], 3)] {
        assert_eq!(pool["granularity"].as_u64(), Some(1 << 20));
        let q = pool["quantity"].as_u64().unwrap();
        // The same file system under every "node": N times its available space (give or
        // take what other processes wrote since).
        let want = nodes * avail_mib;
        assert!(
            q.abs_diff(want) <= want / 20 + 64,
            "{pool}: {q} MiB, want about {want}"
        );
    }
}
