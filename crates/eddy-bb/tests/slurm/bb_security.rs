//! The burst-buffer path read as an attacker would: the job's user (`nobody`), who controls
//! the job script, its `#EDDY` lines, the files in the job's own directories and the ports of
//! a shared node, must not reach root, other users' files or slurmctld's time. Each test is
//! one way in, tried for real through `eddy bb` phase by phase (no Slurm; the Slurm side of
//! the same points is in burst_buffer.rs); and a mount root made is closed to set-uid
//! programs and device nodes the job's user can create by talking to the daemons.
//!
//! Needs root (daemons switch to the job's user), FUSE and setpriv; without them it fails.

use eddy_testkit::bbsite::{s, Site, NOBODY};
use eddy_testkit::require;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn mode_of(p: &Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.uid(), m.mode() & 0o7777)
}

/// A root-owned 0600 file standing for /etc/shadow.
fn victim(site: &Site, name: &str) -> std::path::PathBuf {
    let v = site.path(name);
    std::fs::write(&v, b"root's secret\n").unwrap();
    std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o600)).unwrap();
    v
}

#[test]
fn links_planted_in_the_users_directory_are_never_followed_by_root() {
    require::fuse();
    let site = Site::new("", "capacity = \"1GiB\"");
    let link = format!("link /d={}", site.path("pfs/run").display());
    let script = site.script(&["capacity=64M pool=io", &link]);
    // The job's directory as an earlier, interrupted setup left it; the user plants links
    // to root's files at every name root writes or chowns in `user/`.
    let user = site.path("jobs/51/user");
    std::fs::create_dir_all(&user).unwrap();
    std::os::unix::fs::chown(&user, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&user, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut victims = Vec::new();
    for name in [
        "deployment.toml",
        ".deployment.toml.tmp",
        ".deployment.toml.new",
        ".deployment.toml.new.tmp",
    ] {
        let v = victim(&site, &format!("victim-{}", name.trim_start_matches('.')));
        std::os::unix::fs::symlink(&v, user.join(name)).unwrap();
        std::os::unix::fs::lchown(user.join(name), Some(NOBODY), Some(NOBODY)).unwrap();
        victims.push(v);
    }
    site.bb_ok(&[
        "setup",
        "51",
        "65534",
        "65534",
        "io",
        "67108864",
        s(&script),
    ]);
    for v in &victims {
        assert_eq!(
            std::fs::read(v).unwrap(),
            b"root's secret\n",
            "{}",
            v.display()
        );
        assert_eq!(mode_of(v), (0, 0o600), "{} was given away", v.display());
    }
    let dep = user.join("deployment.toml");
    let meta = std::fs::symlink_metadata(&dep).unwrap();
    assert!(
        meta.is_file(),
        "the user's deployment file is a file of its own"
    );
    assert_eq!(mode_of(&dep), (NOBODY, 0o600));
    assert!(std::fs::read_to_string(&dep).unwrap().contains("secret"));
    site.bb_ok(&["teardown", "51", s(&script), "false"]);
}

#[test]
fn job_state_is_closed_to_other_users() {
    require::fuse();
    let site = Site::new("", "capacity = \"1GiB\"");
    let link = format!("link /d={}", site.path("pfs/run").display());
    let script = site.script(&["capacity=64M pool=io", &link]);
    site.bb_ok(&[
        "setup",
        "52",
        "65534",
        "65534",
        "io",
        "67108864",
        s(&script),
    ]);
    let job = site.path("jobs/52");
    assert_eq!(mode_of(&job), (0, 0o711), "the job directory: enter only");
    assert_eq!(mode_of(&job.join("user")), (NOBODY, 0o700));
    for f in ["job.toml", "hosts", "config.toml"] {
        assert_eq!(mode_of(&job.join(f)), (0, 0o600), "{f}");
    }
    assert_eq!(
        mode_of(&job.join("state")).1,
        0o700,
        "the deployment's state"
    );
    let mut logs = 0;
    for e in std::fs::read_dir(job.join("state")).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            assert_eq!(
                mode_of(&p).1 & 0o077,
                0,
                "{} is open to others",
                p.display()
            );
            logs += p.extension().is_some_and(|x| x == "log") as usize;
        }
    }
    assert!(logs >= 3, "one log per daemon");
    site.bb_ok(&["teardown", "52", s(&script), "false"]);
}

#[test]
fn a_stale_record_of_another_user_is_refused() {
    let site = Site::new("", "capacity = \"1GiB\"");
    let script = site.script(&["capacity=64M pool=io"]);
    let job = site.path("jobs/53");
    std::fs::create_dir_all(&job).unwrap();
    let record = "job = 53\nuid = 1000\ngid = 1000\nmode = \"pool\"\ncapacity = 1\n\
                  pool_nodes = 1\n[request]\nlinks = []\nstage_in = []\nstage_out = []\n";
    std::fs::write(job.join("job.toml"), record).unwrap();
    let e = site.bb_err(&[
        "setup",
        "53",
        "65534",
        "65534",
        "io",
        "67108864",
        s(&script),
    ]);
    assert!(
        e.contains("holds the record of another job 53 of uid 1000"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(job.join("job.toml")).unwrap(),
        record,
        "the record is left as it was"
    );
}

#[test]
fn status_words_of_a_user_never_choose_the_site_file() {
    let site = Site::new("", "capacity = \"1GiB\"");
    // `scontrol show bbstat --site /dev/zero`: the Lua passes the words after `--`; even
    // without it, a --site after the phase is not eddy's option.
    for args in [
        vec!["status", "--", "--site", "/dev/zero"],
        vec!["status", "--site", "/dev/zero"],
    ] {
        let mut cmd = Command::new(eddy_testkit::eddy_bin());
        cmd.arg("bb")
            .arg("--site")
            .arg(site.path("bb.toml"))
            .args(&args);
        let out = eddy_testkit::slurm::output_bounded(&mut cmd, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("eddy bb {args:?} did not finish in 30 s"));
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("JOB"));
    }
}

#[test]
fn scripts_are_bounded_and_pools_charged() {
    let site = Site::new("", "capacity = \"1GiB\"");
    let huge = site.path("huge.sh");
    let mut text = String::from("#!/bin/bash\n#EDDY capacity=1G pool=io\n");
    for i in 0..200_000 {
        text.push_str(&format!("#EDDY link /p{i}=/pfs/{i}\n"));
    }
    text.push_str("srun ./app\n");
    std::fs::write(&huge, text).unwrap();
    let started = Instant::now();
    let e = site.bb_err(&["job-process", s(&huge)]);
    eprintln!(
        "job-process of 200,000 #EDDY lines answered in {:?}",
        started.elapsed()
    );
    assert!(e.contains("more than 1000 #EDDY lines"), "{e:.400}");
    assert!(
        e.len() < 4096,
        "one short answer, not one per line: {} bytes",
        e.len()
    );
    // A pool job must say its capacity, where Slurm charges it.
    let e = site.bb_err(&["job-process", s(&site.script(&["mode=pool"]))]);
    assert!(e.contains("mode=pool needs the capacity"), "{e}");
    // A directive below the first command is neither charged nor obeyed: refused.
    let late = site.path("late.sh");
    std::fs::write(
        &late,
        "#!/bin/bash\n#EDDY capacity=1G pool=io\necho\n#EDDY capacity=900G pool=io\n",
    )
    .unwrap();
    let e = site.bb_err(&["job-process", s(&late)]);
    assert!(e.contains("below the script's first command"), "{e}");
    // The site's default bound on a job's capacity.
    let e = site.bb_err(&["job-process", s(&site.script(&["capacity=2P pool=io"]))]);
    assert!(
        e.contains("more than this site allows a job (1.0 TiB)"),
        "{e}"
    );
}

#[test]
fn paths_are_looked_at_as_the_job_user_sees_them() {
    require::fuse();
    let site = Site::new("", "capacity = \"1GiB\"");
    let pfs = site.path("pfs/run");
    site.edit_settings(
        "launcher = \"{cmd}\"",
        &format!(
            "launcher = \"{{cmd}}\"\nbackend_roots = [\"{}\"]",
            pfs.display()
        ),
    );
    // A source under a directory only root may enter: "there" for root, not for the user.
    let secret_dir = site.path("pfs/run/root-only");
    std::fs::create_dir(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("id_rsa"), b"key").unwrap();
    std::fs::set_permissions(&secret_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = format!("link /d={}", pfs.display());
    let script = site.script(&[
        "capacity=64M pool=io",
        &link,
        "stage_in /d/root-only/id_rsa",
    ]);
    site.bb_ok(&[
        "setup",
        "54",
        "65534",
        "65534",
        "io",
        "67108864",
        s(&script),
    ]);
    let e = site.bb_err(&["data-in", "54", s(&script)]);
    assert!(
        e.contains("cannot be reached by the job's user") && e.contains("Permission denied"),
        "{e}"
    );
    site.bb_ok(&["teardown", "54", s(&script), "false"]);
    // `..` never passes for a backend directory; a link of the user's under an allowed
    // root that leads outside it is found out before anything starts.
    let e = site.bb_err(&[
        "job-process",
        s(&site.script(&[&format!("link /d={}/../..", pfs.display())])),
    ]);
    assert!(e.contains("must not contain `..`"), "{e}");
    let escape = site.path("pfs/run/escape");
    std::os::unix::fs::symlink(site.path("jobs"), &escape).unwrap();
    let script = site.script(&[
        "capacity=64M pool=io",
        &format!("link /d={}", escape.display()),
    ]);
    site.bb_ok(&["job-process", s(&script)]);
    let e = site.bb_err(&[
        "setup",
        "55",
        "65534",
        "65534",
        "io",
        "67108864",
        s(&script),
    ]);
    assert!(
        e.contains("outside the backend directories jobs may link"),
        "{e}"
    );
    site.bb_ok(&["teardown", "55", s(&script), "false"]);
}

#[test]
fn a_remote_shell_launcher_gets_every_word_quoted() {
    require::fuse();
    // A stand-in for ssh: like ssh, it joins its command words with spaces and hands the line
    // to a shell on the "other host" (here, in a directory of its own).
    let site = Site::new("", "capacity = \"1GiB\"");
    let bin = site.path("bin");
    let there = site.path("there");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&there).unwrap();
    let ssh = bin.join("ssh");
    std::fs::write(
        &ssh,
        format!(
            "#!/bin/sh\nshift\ncd '{}' || exit 1\nexec sh -c \"$*\"\n",
            there.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Storage roots whose path is shell syntax there: a space, `;` and `${IFS}`.
    let odd = "pool dir;touch${IFS}pwned;x";
    site.edit_settings(
        "launcher = \"{cmd}\"",
        &format!("launcher = \"{} {{host}} {{cmd}}\"", ssh.display()),
    );
    site.edit_settings(
        "/pool/{host}/job-{job}",
        &format!("/{odd}/{{host}}/job-{{job}}"),
    );
    let link = format!("link /d={}", site.path("pfs/run").display());
    let script = site.script(&["capacity=64M pool=io", &link, "stage_in /d/in/a.dat"]);
    site.bb_ok(&[
        "setup",
        "56",
        "65534",
        "65534",
        "io",
        "67108864",
        s(&script),
    ]);
    assert!(
        !there.join("pwned").exists(),
        "a word of the command reached the remote shell as a command"
    );
    for host in ["io1", "io2", "io3"] {
        let root = site.path(&format!("{odd}/{host}/job-56"));
        assert_eq!(mode_of(&root), (NOBODY, 0o700), "{}", root.display());
    }
    site.bb_ok(&["data-in", "56", s(&script)]);
    site.bb_ok(&["teardown", "56", s(&script), "false"]);
}

#[test]
fn a_taken_port_does_not_stop_a_job() {
    require::fuse();
    let site = Site::new("", "capacity = \"1GiB\"");
    let script = site.script(&["capacity=64M pool=io"]);
    // Another user holds the port a job's daemons were given before (41000 + job mod 1000)
    // on every pool address.
    let net = eddy_testkit::slurm::loopback_net();
    let _held: Vec<std::net::TcpListener> = (31..=33)
        .map(|h| std::net::TcpListener::bind(format!("127.{net}.1.{h}:41057")).unwrap())
        .collect();
    site.bb_ok(&[
        "setup",
        "57",
        "65534",
        "65534",
        "io",
        "67108864",
        s(&script),
    ]);
    let dep = std::fs::read_to_string(site.path("jobs/57/user/deployment.toml")).unwrap();
    let dep: eddy_config::Deployment = toml::from_str(&dep).unwrap();
    assert_eq!(dep.daemons.len(), 3);
    for d in &dep.daemons {
        assert!(!d.addr.ends_with(":41057"), "{}", d.addr);
    }
    site.bb_ok(&["teardown", "57", s(&script), "false"]);
}

#[test]
fn daemon_roots_in_open_directories_are_refused() {
    require::fuse();
    // A pool root in a world-writable sticky directory (as /tmp): the user plants a link
    // there to a directory of root's before the job's daemons start.
    let site = Site::new("", "capacity = \"1GiB\"");
    let open = site.path("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    site.edit_settings(
        &format!(
            "root = \"{}/pool/{{host}}/job-{{job}}\"",
            site.dir.path().display()
        ),
        &format!("root = \"{}/job-{{job}}-{{host}}\"", open.display()),
    );
    let precious = site.path("precious");
    std::fs::create_dir(&precious).unwrap();
    for host in ["io1", "io2", "io3"] {
        let planted = open.join(format!("job-58-{host}"));
        std::os::unix::fs::symlink(&precious, &planted).unwrap();
        std::os::unix::fs::lchown(&planted, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    let script = site.script(&["capacity=64M pool=io"]);
    let e = site.bb_err(&[
        "setup",
        "58",
        "65534",
        "65534",
        "io",
        "67108864",
        s(&script),
    ]);
    assert!(e.contains(&open.display().to_string()), "{e}");
    assert_eq!(
        mode_of(&precious),
        (0, 0o755),
        "root's directory was given away"
    );
    assert_eq!(std::fs::read_dir(&precious).unwrap().count(), 0);
    site.bb_ok(&["teardown", "58", s(&script), "false"]);
}

#[test]
fn set_uid_programs_and_devices_mean_nothing_on_a_root_mount() {
    require::switch_user();
    let m = eddy_testkit::Mounted::start(3);
    // Whoever holds the secret can make an entry root's with any mode: root does it here.
    let id = m.path("id");
    std::fs::copy("/usr/bin/id", &id).unwrap();
    std::fs::set_permissions(&id, std::fs::Permissions::from_mode(0o4755)).unwrap();
    assert_eq!(mode_of(&id), (0, 0o4755));
    let out = eddy_testkit::as_user(NOBODY)
        .arg(&id)
        .arg("-u")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "65534",
        "a set-uid root program on the mount ran as root"
    );
    // A device node of the namespace opens nothing: /dev/null's numbers, and it fails.
    let (ok, _, err) = m.sh("mknod nul c 1 3 && echo x > nul");
    assert!(!ok, "a device node of the namespace opened");
    assert!(err.contains("Permission denied"), "{err}");
}

#[test]
fn a_job_holds_no_more_than_it_was_charged() {
    require::fuse();
    require::switch_user();
    let site = Site::new("", "capacity = \"1GiB\"");
    // 3 MiB over three daemons: 1 MiB each.
    let script = site.script(&["capacity=3M pool=io"]);
    site.bb_ok(&["setup", "59", "65534", "65534", "io", "3145728", s(&script)]);
    let mnt = site.path("mnt/59");
    site.bb_ok(&["node-mount", s(&site.path("jobs/59/state")), s(&mnt)]);
    let dd = |name: &str, mib: u32| {
        eddy_testkit::as_user(NOBODY)
            .args(["dd", "if=/dev/zero"])
            .arg(format!("of={}", mnt.join(name).display()))
            .args(["bs=64K", &format!("count={}", mib * 16)])
            .output()
            .unwrap()
    };
    let small = dd("small", 1);
    assert!(small.status.success(), "{small:?}");
    let big = dd("big", 16);
    assert!(!big.status.success(), "16 MiB fit in a 3 MiB job");
    let err = String::from_utf8_lossy(&big.stderr);
    assert!(err.contains("No space left on device"), "{err}");
    assert_eq!(
        std::fs::read(mnt.join("small")).unwrap(),
        vec![0u8; 1 << 20],
        "what fit before reads back"
    );
    site.bb_ok(&["node-clean", "--mount", s(&mnt)]);
    site.bb_ok(&["teardown", "59", s(&script), "false"]);
}
