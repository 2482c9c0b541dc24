//! What tests need beyond the build: root, FUSE, network namespaces, Slurm, OpenMPI, other
//! programs. A test whose requirement is missing fails at once with a message that names what
//! is missing and how to get it; it never returns early and passes without checking anything.
//!
//! `scripts/install-deps.sh` (run by `make test`) installs and sets up everything named here.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// How to get what is missing.
const HOW: &str = "run `bash scripts/install-deps.sh` as root (`make test` does), \
                   then run the tests as root";

/// Fails the test: `what` cannot be had here.
#[track_caller]
pub fn missing(what: &str) -> ! {
    panic!("this test cannot run here: {what}.\nTo get it: {HOW}.")
}

/// The test needs euid 0, for `why`.
#[track_caller]
pub fn root(why: &str) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        missing(&format!("it needs root (euid 0) to {why}"));
    }
}

/// A program on PATH or in the sbin directories (where Debian puts daemons and `ip`).
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// The test needs `name`, which the Debian package `package` provides.
#[track_caller]
pub fn program(name: &str, package: &str) -> PathBuf {
    find_program(name).unwrap_or_else(|| {
        missing(&format!(
            "`{name}` is not installed (Debian package {package})"
        ))
    })
}

/// The test needs every program of `names`, from the Debian packages `packages`.
#[track_caller]
pub fn programs(names: &[&str], packages: &str) {
    let absent: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| find_program(n).is_none())
        .collect();
    if !absent.is_empty() {
        missing(&format!(
            "{} not installed (Debian packages {packages})",
            absent.join(", ")
        ));
    }
}

/// The test mounts a FUSE file system: /dev/fuse, and fusermount3 when not root.
#[track_caller]
pub fn fuse() {
    if !Path::new("/dev/fuse").exists() {
        missing(
            "/dev/fuse is missing (install fuse3 and load the kernel module with \
             `modprobe fuse`; a container needs the device passed in, e.g. --device /dev/fuse)",
        );
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        program("fusermount3", "fuse3");
    }
}

/// The test needs the FUSE control file system on /sys/fs/fuse/connections.
#[track_caller]
pub fn fusectl() {
    fuse();
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            l.split(' ').nth(4) == Some("/sys/fs/fuse/connections") && l.contains(" fusectl ")
        });
    if !mounted {
        missing(
            "the FUSE control file system is not mounted on /sys/fs/fuse/connections \
             (`mount -t fusectl fusectl /sys/fs/fuse/connections`)",
        );
    }
}

/// The kernel's switch for FUSE over io_uring (decision 0078).
pub const ENABLE_URING_PARAMETER: &str = "/sys/module/fuse/parameters/enable_uring";

/// The test mounts over FUSE io_uring (`fuse_transport = "io_uring"`): FUSE, and the kernel's
/// `fuse.enable_uring` set to `Y` (Linux 6.14+ built with `CONFIG_FUSE_IO_URING`). The test
/// does not turn it on itself: whoever runs it does (`make test`'s io_uring lane, as root), and
/// restores it afterwards.
#[track_caller]
pub fn fuse_io_uring() {
    fuse();
    match std::fs::read_to_string(ENABLE_URING_PARAMETER) {
        Ok(v) if v.trim() == "Y" => {}
        Ok(v) => missing(&format!(
            "the mount is asked to run over FUSE io_uring, and {ENABLE_URING_PARAMETER} is {} \
             (as root: `echo Y > {ENABLE_URING_PARAMETER}`; `make test`'s io_uring lane sets it \
             and restores it)",
            v.trim()
        )),
        Err(e) => missing(&format!(
            "the mount is asked to run over FUSE io_uring, and {ENABLE_URING_PARAMETER} cannot \
             be read ({e}): FUSE over io_uring needs Linux 6.14 or later built with \
             CONFIG_FUSE_IO_URING"
        )),
    }
}

/// The test creates network namespaces with iproute2.
#[track_caller]
pub fn netns() {
    root("create network namespaces");
    let ip = program("ip", "iproute2");
    let works = Command::new(ip)
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !works {
        missing("`ip -V` fails (Debian package iproute2)");
    }
}

/// The test switches to another user with setpriv (util-linux).
#[track_caller]
pub fn switch_user() {
    root("run commands as another user");
    program("setpriv", "util-linux");
}

/// The test launches processes with OpenMPI's mpirun.
#[track_caller]
pub fn mpirun() {
    program("mpirun", "openmpi-bin");
}
