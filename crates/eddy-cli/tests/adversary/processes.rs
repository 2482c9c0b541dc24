//! Processes that root ends by their command line: `eddy stop` ends the background
//! prefetches of its state directory (`prefetch --background ... --state STATE`, decision
//! 0071) and the burst buffer's node clean-up ends what still serves a daemon root
//! (`--root ROOT`). A command line is whatever its process wants it to be: another user on
//! the node starts processes that say exactly that, and root must leave them alone. Root
//! ends only processes of its own or of the directory's owner (the deployment's user).

use eddy_testkit::bbsite::Site;
use eddy_testkit::cli::{eddy_cmd, s};
use eddy_testkit::require;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Stdio};

/// A user of the node who is neither root nor the deployment's user.
const NEIGHBOUR: u32 = 4242;

/// `sh NAME ARGS...` as `uid` in `dir`, where `dir/NAME` is a script that sleeps: a
/// process whose command line after the program is `NAME ARGS...`.
fn posing(uid: u32, dir: &Path, name: &str, args: &[&str]) -> Child {
    let child = eddy_testkit::as_user(uid)
        .arg("sh")
        .arg(name)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let want = format!("sh\0{name}\0");
    eddy_testkit::eventually::eventually(format!("{name} started as uid {uid}"), || {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        cmdline.starts_with(want.as_bytes()).then_some(())
    });
    child
}

fn still_runs(child: &mut Child) -> bool {
    matches!(child.try_wait(), Ok(None))
}

#[test]
fn a_neighbours_process_posing_as_a_deployments_prefetch_or_daemon_is_never_signalled_by_root() {
    require::switch_user();
    let site = Site::new("", "capacity = \"1GiB\"");
    let (root, state, backend, bin) = (
        site.path("local/root"),
        site.path("local/state"),
        site.path("pfs/run"),
        site.path("bin"),
    );
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    for name in ["prefetch", "eddyd"] {
        std::fs::write(bin.join(name), "sleep 600\n").unwrap();
    }
    let link = format!("/d={}", backend.display());
    let out = eddy_cmd()
        .args([
            "start",
            "--local",
            "3",
            "--root",
            s(&root),
            "--state",
            s(&state),
        ])
        .args(["--daemon-user", "nobody", "--link", &link])
        .output()
        .unwrap();
    assert!(out.status.success(), "eddy start: {out:?}");

    // The neighbour's processes, saying what root looks for.
    let d0 = root.join("d0");
    let mut prefetch = posing(
        NEIGHBOUR,
        &bin,
        "prefetch",
        &["--background", "--state", s(&state), "--", "/d"],
    );
    let mut daemon = posing(NEIGHBOUR, &bin, "eddyd", &["--root", s(&d0)]);

    let out = eddy_cmd()
        .args(["stop", "--state", s(&state)])
        .output()
        .unwrap();
    let stop_said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "eddy stop: {out:?}");
    let prefetch_lives = still_runs(&mut prefetch);

    let out = eddy_cmd()
        .args(["bb", "--site", s(&site.path("bb.toml")), "node-clean"])
        .args(["--root", s(&d0)])
        .output()
        .unwrap();
    let clean_said = String::from_utf8_lossy(&out.stderr).into_owned();
    let clean_ok = out.status.success();
    let daemon_lives = still_runs(&mut daemon);

    for c in [&mut prefetch, &mut daemon] {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert!(
        prefetch_lives,
        "root's eddy stop signalled uid {NEIGHBOUR}'s process posing as a prefetch: {stop_said}"
    );
    assert!(clean_ok, "eddy bb node-clean: {clean_said}");
    assert!(
        daemon_lives,
        "root's node clean-up signalled uid {NEIGHBOUR}'s process posing as a daemon: {clean_said}"
    );
}
