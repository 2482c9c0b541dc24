//! pjdfstest, the public POSIX conformance suite (its Rust edition, installed from crates.io
//! by scripts/install-deps.sh), run as root on a real FUSE mount of 3 daemons, switching to
//! unprivileged users as it goes: every case must pass. Cases the suite itself skips are
//! allowed only for the reasons listed here (a facility this machine does not offer it), so
//! a case can never pass by being skipped for a reason of Eddy's.

use eddy_testkit::Mounted;
use std::path::PathBuf;
use std::process::Command;

/// The suite's configuration: Linux's optional features on, the users it switches to (they
/// exist on every Debian system), and a nap longer than the mount's time granularity.
const CONFIG: &str = r#"
[features]
posix_fallocate = {}
utimensat = {}
utime_now = {}
rename_ctime = {}

[settings]
naptime = 0.02
allow_remount = false

[dummy_auth]
entries = [
   ["nobody", "nogroup"],
   ["daemon", "daemon"],
]
"#;

/// Why the suite may skip a case: it would remount the file system under test read-only
/// (the EROFS cases), or the file system reports no LINK_MAX through pathconf (FUSE does not
/// pass it on; Eddy's limit, 65,000 names, is tested in tests/posix/hard_links.rs).
const ALLOWED_SKIPS: [&str; 2] = [
    "Remounts (allow_remount) are not allowed",
    "Cannot get value for LINK_MAX",
];

/// The suite's binary: on the PATH, or where `cargo install` puts it.
fn pjdfstest() -> PathBuf {
    if let Some(p) = eddy_testkit::require::find_program("pjdfstest") {
        return p;
    }
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    match cargo_home.map(|h| h.join("bin/pjdfstest")) {
        Some(p) if p.is_file() => p,
        _ => eddy_testkit::require::missing(
            "`pjdfstest` is not installed (scripts/install-deps.sh installs it with cargo install)",
        ),
    }
}

#[test]
fn pjdfstest_passes_on_the_mount() {
    eddy_testkit::require::root("switch users as the suite does");
    let bin = pjdfstest();
    // The suite switches users under the namespace root: a shared root (decision 0023).
    let m = Mounted::start_with(3, eddy_testkit::shared_config());
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("pjdfstest.toml");
    std::fs::write(&config, CONFIG).unwrap();
    // A second file system for the EXDEV cases: tmpfs.
    let secondary = tempfile::tempdir_in("/dev/shm").expect("a directory on /dev/shm (tmpfs)");
    let out = Command::new(&bin)
        .arg("-c")
        .arg(&config)
        .arg("-p")
        .arg(m.mnt.path())
        .arg("-s")
        .arg(secondary.path())
        .env("NO_COLOR", "1")
        .current_dir(m.mnt.path())
        .output()
        .expect("run pjdfstest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let summary = lines
        .iter()
        .find(|l| l.starts_with("Summary:"))
        .unwrap_or_else(|| {
            panic!(
                "pjdfstest printed no summary:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let failed: Vec<String> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.trim_end().ends_with("FAILED"))
        .map(|(i, l)| format!("{}: {}", l.trim(), lines.get(i + 1).unwrap_or(&"").trim()))
        .collect();
    let bad_skips: Vec<String> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.trim_end().ends_with("skipped"))
        .filter_map(|(i, l)| {
            let why = lines.get(i + 1).unwrap_or(&"").trim();
            (!ALLOWED_SKIPS.iter().any(|a| why.starts_with(a)))
                .then(|| format!("{}: {why}", l.trim()))
        })
        .collect();
    assert!(
        failed.is_empty() && out.status.success(),
        "{summary}\nfailed cases:\n{}",
        failed.join("\n")
    );
    assert!(
        bad_skips.is_empty(),
        "cases skipped for reasons of the mount's:\n{}",
        bad_skips.join("\n")
    );
    assert!(summary.contains(" 0 failed"), "{summary}");
}
