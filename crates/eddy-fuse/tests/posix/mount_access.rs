//! Who may use a mount. Root mounts for a job (`eddy start --mount`, `eddy mount`, e.g. from a
//! Slurm prolog) while the job's steps run as the job's user: such a mount lets every user in
//! (`allow_other`), the kernel still checking mode bits (`default_permissions`); `--owner-only`
//! keeps other users out. Real daemons, real FUSE mounts, a real second user (uid 65534 through
//! setpriv), so these tests need root.

use eddy_testkit::cli::{eddy, fails, ok, s, text};
use eddy_testkit::require;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The other user: nobody on Debian.
const OTHER: u32 = 65534;

/// Stops the deployment of a state directory on drop (unmounting its mounts).
struct Stop(PathBuf);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = eddy(&["stop", "--state", s(&self.0)]);
    }
}

/// A directory for a deployment that other users may traverse (a temporary directory is 0700).
fn open_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// A config file sharing the namespace with other users (`root_mode = "0755"`; the default,
/// 0700, keeps them out of a namespace that is not theirs: decision 0023).
fn sharing_config(dir: &Path) -> PathBuf {
    let path = dir.join("sharing.toml");
    fs::write(&path, "root_mode = \"0755\"\n").unwrap();
    path
}

/// Runs `script` as `OTHER` (`eddy_testkit::sh_as_user`); it must succeed; returns its stdout.
#[track_caller]
fn other_ok(script: &str) -> String {
    let out = eddy_testkit::sh_as_user(OTHER, script);
    assert!(
        out.status.success(),
        "as uid {OTHER}: `{script}` failed:\n{}",
        text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The script must fail with EACCES ("Permission denied").
#[track_caller]
fn other_denied(script: &str) {
    let out = eddy_testkit::sh_as_user(OTHER, script);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("Permission denied"),
        "as uid {OTHER}: `{script}` should fail with EACCES:\n{}",
        text(&out)
    );
}

/// The line of /proc/self/mountinfo for the mount on `mnt` (mount and super block options).
#[track_caller]
fn mountinfo(mnt: &Path) -> String {
    let want = fs::canonicalize(mnt).unwrap();
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .find(|l| l.split(' ').nth(4) == want.to_str())
        .unwrap_or_else(|| panic!("{} is not a mount point", mnt.display()))
        .to_string()
}

fn requirements() {
    require::switch_user();
    require::fuse();
}

#[test]
fn a_mount_made_by_root_serves_the_job_user_with_mode_bits_enforced() {
    requirements();
    let dir = open_dir();
    let (mnt, state) = (dir.path().join("mnt"), dir.path().join("state"));
    fs::create_dir(&mnt).unwrap();
    let root = dir.path().join("root");
    let config = sharing_config(dir.path());
    let _stop = Stop(state.clone());
    ok(&[
        "start",
        "--local",
        "3",
        "--root",
        s(&root),
        "--state",
        s(&state),
        "--config",
        s(&config),
        "--mount",
        s(&mnt),
    ]);
    let info = mountinfo(&mnt);
    assert!(
        info.contains("allow_other") && info.contains("default_permissions"),
        "{info}"
    );

    // As a prolog would: a directory for the job's user, files from root.
    fs::create_dir(mnt.join("job")).unwrap();
    std::os::unix::fs::chown(mnt.join("job"), Some(OTHER), Some(OTHER)).unwrap();
    fs::write(mnt.join("readme"), "for everyone\n").unwrap();
    fs::write(mnt.join("secret"), "root only\n").unwrap();
    fs::set_permissions(mnt.join("secret"), fs::Permissions::from_mode(0o600)).unwrap();

    // The job's user enters the mount, reads what mode bits allow, works in its directory.
    let m = s(&mnt);
    let out = other_ok(&format!(
        "cd {m} && ls && cat readme && cd job && mkdir out && echo hello > out/f && cat out/f"
    ));
    assert!(out.contains("readme") && out.contains("job"), "{out}");
    assert!(
        out.contains("for everyone") && out.ends_with("hello\n"),
        "{out}"
    );
    let f = fs::metadata(mnt.join("job/out/f")).unwrap();
    assert_eq!((f.uid(), f.gid()), (OTHER, OTHER));
    assert_eq!(
        fs::read_to_string(mnt.join("job/out/f")).unwrap(),
        "hello\n"
    );

    // The kernel still denies what mode bits deny: the root directory is root's, 0755.
    let top = fs::metadata(&mnt).unwrap();
    assert_eq!((top.uid(), top.mode() & 0o7777), (0, 0o755));
    other_denied(&format!("echo x > {m}/x"));
    other_denied(&format!("mkdir {m}/d"));
    other_denied(&format!("cat {m}/secret"));
    other_denied(&format!("rm {m}/readme"));
    assert!(!mnt.join("x").exists() && !mnt.join("d").exists());
    assert!(mnt.join("readme").exists());
    // And root, in the job's directory, is root.
    fs::write(mnt.join("job/out/from-root"), "r").unwrap();

    ok(&["stop", "--state", s(&state)]);
}

#[test]
fn owner_only_keeps_other_users_out_and_root_mounts_let_them_in_by_default() {
    requirements();
    let dir = open_dir();
    let state = dir.path().join("state");
    let config = sharing_config(dir.path());
    let _stop = Stop(state.clone());
    ok(&[
        "start",
        "--local",
        "3",
        "--root",
        s(&dir.path().join("root")),
        "--state",
        s(&state),
        "--config",
        s(&config),
    ]);

    // --owner-only: only root (the mounting user) gets in.
    let private = dir.path().join("private");
    fs::create_dir(&private).unwrap();
    ok(&["mount", "--state", s(&state), "--owner-only", s(&private)]);
    assert!(!mountinfo(&private).contains("allow_other"));
    fs::write(private.join("f"), "x").unwrap();
    other_denied(&format!("ls {}", s(&private)));
    let cd = eddy_testkit::sh_as_user(OTHER, &format!("cd {}", s(&private)));
    assert!(!cd.status.success(), "{}", text(&cd));
    other_denied(&format!("cat {}/f", s(&private)));
    ok(&["umount", s(&private)]);

    // `eddy mount` by root, no flag: every user, mode bits checked.
    let shared = dir.path().join("shared");
    fs::create_dir(&shared).unwrap();
    ok(&["mount", "--state", s(&state), s(&shared)]);
    assert!(mountinfo(&shared).contains("allow_other"));
    assert_eq!(other_ok(&format!("cat {}/f", s(&shared))), "x");
    other_denied(&format!("echo y > {}/f", s(&shared)));
    ok(&["umount", s(&shared)]);

    // The flags exclude each other and belong to a mount.
    let err = fails(&[
        "mount",
        "--state",
        s(&state),
        "--owner-only",
        "--allow-other",
        s(&shared),
    ]);
    assert!(err.contains("cannot be used with"), "{err}");
    let err = fails(&[
        "start",
        "--local",
        "1",
        "--root",
        s(&dir.path().join("other")),
        "--owner-only",
    ]);
    assert!(err.contains("--mount"), "{err}");
}
