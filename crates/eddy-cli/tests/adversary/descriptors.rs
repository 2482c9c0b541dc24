//! Descriptors from the job's user's daemons (decision 0058). The daemons run as the job's
//! user (`nobody`), the mount as root: the user replaces the daemon's descriptor socket
//! (`eddyd.fd` in the daemon's root, which is the user's) with a server of its own that
//! answers every token with a descriptor of its choosing. Root's mount must never register
//! such a descriptor as a passthrough backing file (the kernel would open it again with the
//! mount's credentials), and root's library client must never read or write through one.

use eddy_testkit::python::PYTHON;
use eddy_testkit::{as_user, require, sh_as_user};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

const NOBODY: u32 = 65534;

/// The attacker's descriptor server, run as `nobody`: replaces the socket at argv[1] and
/// answers every 16-byte token with one byte (1) and a descriptor of argv[3], opened as
/// argv[2] says (`ro`, `rw` or `path`: O_PATH, which needs no right on the file itself).
/// Prints a line once it listens.
const HOSTILE_SERVER: &str = r#"
import os, socket, sys
path, how, victim = sys.argv[1:4]
try:
    os.unlink(path)
except FileNotFoundError:
    pass
srv = socket.socket(socket.AF_UNIX)
srv.bind(path)
srv.listen(64)
print("listening", flush=True)
flags = {"ro": os.O_RDONLY, "rw": os.O_RDWR, "path": os.O_PATH}[how]
while True:
    c, _ = srv.accept()
    c.settimeout(2)
    try:
        c.recv(16)
        fd = os.open(victim, flags)
        socket.send_fds(c, [b"\x01"], [fd])
        os.close(fd)
    except Exception as e:
        print("hostile server:", e, file=sys.stderr)
    c.close()
"#;

/// A deployment of one daemon run as `nobody` with a root mount, stopped on drop.
struct Deployment {
    dir: tempfile::TempDir,
    hostile: Option<Child>,
}

impl Deployment {
    fn start() -> Deployment {
        require::root("start daemons as another user and mount as root");
        require::fuse();
        require::program("setpriv", "util-linux");
        assert!(
            Path::new(PYTHON).exists(),
            "{PYTHON} is missing: install python3"
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let d = Deployment { dir, hostile: None };
        std::fs::create_dir(d.mount()).unwrap();
        // The mount logs each passthrough open (debug) and each refusal (warn).
        let out = eddy_testkit::cli::eddy_cmd()
            .env("EDDY_LOG", "warn,eddy_fuse=debug")
            .args([
                "start",
                "--local",
                "1",
                "--root",
                s(&d.root()),
                "--daemon-user",
                "nobody",
                "--mount",
                s(&d.mount()),
                "--name",
                "adversary",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", eddy_testkit::cli::text(&out));
        // The namespace's root open to all, as a job's scratch directory would be.
        std::fs::set_permissions(d.mount(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        d
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn mount(&self) -> PathBuf {
        self.dir.path().join("m")
    }

    /// What the mount (root) logged.
    fn mount_log(&self) -> String {
        std::fs::read_to_string(self.root().join("mount.log")).unwrap_or_default()
    }

    /// A root-owned file outside the deployment, with `mode`.
    fn canary(&self, name: &str, mode: u32, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    /// As `nobody`: replaces daemon 0's descriptor socket by the hostile server, which hands
    /// over `victim` opened as `how`; returns once it listens.
    fn replace_descriptor_socket(&mut self, how: &str, victim: &Path) {
        let socket = self.root().join("d0").join("eddyd.fd");
        assert!(
            socket.exists(),
            "no descriptor socket at {}",
            socket.display()
        );
        let mut child = as_user(NOBODY)
            .args([PYTHON, "-I", "-c", HOSTILE_SERVER])
            .args([s(&socket), how, s(victim)])
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
        self.hostile = Some(child);
        assert_eq!(
            line.trim(),
            "listening",
            "the hostile server never listened"
        );
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        if let Some(mut c) = self.hostile.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = eddy_testkit::cli::eddy(&["stop", "--state", s(&self.root())]);
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `script` with sh as `nobody` and returns (success, stdout+stderr).
fn as_nobody(script: &str) -> (bool, String) {
    let out = sh_as_user(NOBODY, script);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Content, owner and mode of a file.
fn snapshot(p: &Path) -> (Vec<u8>, u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (std::fs::read(p).unwrap(), m.uid(), m.mode() & 0o7777)
}

#[test]
fn a_descriptor_socket_of_the_users_own_never_makes_the_root_mount_write_a_root_file() {
    let mut d = Deployment::start();
    let canary = d.canary("canary-0644", 0o644, "root's own bytes\n");
    let before = snapshot(&canary);
    // A file of the mount the user may write (made by root, given to nobody).
    let f = d.mount().join("f");
    std::fs::write(&f, b"").unwrap();
    std::os::unix::fs::chown(&f, Some(NOBODY), Some(NOBODY)).unwrap();
    d.replace_descriptor_socket("ro", &canary);
    let (_, out) = as_nobody(&format!(
        "{PYTHON} -I -c 'import os; fd = os.open(\"{0}\", os.O_RDWR); \
         os.pwrite(fd, b\"nobody was here\", 0); os.fsync(fd); os.close(fd)'; \
         cat {0}",
        f.display()
    ));
    assert_eq!(
        snapshot(&canary),
        before,
        "root's 0644 file changed through the mount: {out}"
    );
    // The write itself is the user's to make: it lands in Eddy, through the daemon.
    assert_eq!(std::fs::read(&f).unwrap(), b"nobody was here", "{out}");
    let log = d.mount_log();
    assert!(
        log.contains("direct I/O off for daemon 0"),
        "root said nothing of the descriptor it refused: {log}"
    );
}

#[test]
fn the_root_mount_still_passes_through_the_users_own_data_files() {
    let d = Deployment::start();
    let (ok, out) = as_nobody(&format!(
        "dd if=/dev/urandom of={0}/p bs=64k count=32 conv=fsync 2>&1 && \
         cmp {0}/p {0}/p && cat {0}/p > /dev/null",
        d.mount().display()
    ));
    assert!(ok, "{out}");
    let log = d.mount_log();
    assert!(
        log.contains("FUSE passthrough") && log.contains("p\""),
        "the kernel was not handed the data file: {log}"
    );
    assert!(!log.contains("passthrough off"), "{log}");
    assert!(!log.contains("not to be trusted"), "{log}");
}

#[test]
fn an_o_path_descriptor_never_lets_the_user_read_a_root_only_file_through_the_mount() {
    let mut d = Deployment::start();
    let secret = d.canary("secret-0600", 0o600, "root's secret\n");
    let g = d.mount().join("g");
    std::fs::write(&g, b"the user's own data\n").unwrap();
    std::os::unix::fs::chown(&g, Some(NOBODY), Some(NOBODY)).unwrap();
    d.replace_descriptor_socket("path", &secret);
    for flags in ["os.O_RDONLY", "os.O_RDWR"] {
        let (_, out) = as_nobody(&format!(
            "{PYTHON} -I -c 'import os, sys; fd = os.open(\"{}\", {flags}); \
             sys.stdout.write(os.pread(fd, 4096, 0).decode(errors=\"replace\")); os.close(fd)'",
            g.display()
        ));
        assert!(
            !out.contains("root's secret"),
            "nobody read root's 0600 file through the mount ({flags}): {out}"
        );
        assert!(out.contains("the user's own data"), "({flags}) {out}");
    }
    assert_eq!(snapshot(&secret).0, b"root's secret\n");
}

#[test]
fn a_descriptor_of_another_file_is_never_used_by_roots_library_client() {
    let mut d = Deployment::start();
    // A file of the user's own outside the daemon's root: the server hands it over
    // read-write; root's client must not write the user's bytes there (nor anything).
    let elsewhere = d.dir.path().join("users-file");
    std::fs::write(&elsewhere, b"untouched\n").unwrap();
    std::os::unix::fs::chown(&elsewhere, Some(NOBODY), Some(NOBODY)).unwrap();
    d.replace_descriptor_socket("rw", &elsewhere);
    let dep = eddy_config::Deployment::load(&d.root().join("deployment.toml")).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let data = eddy_testkit::pattern(7, 0, 3 << 20);
    rt.block_on(async {
        let c = eddy_client::Client::connect(dep).await.unwrap();
        let root = eddy_client::Creds::root();
        let f = c
            .open("/big", libc::O_CREAT | libc::O_RDWR, 0o644, root)
            .await
            .unwrap();
        c.pwrite(&f, 0, &data).await.unwrap();
        c.fsync(&f).await.unwrap();
        c.close(&f).await.unwrap();
        let back = eddy_testkit::read_all(&c, "/big").await;
        assert!(
            back == data,
            "root's client read back other bytes than it wrote"
        );
    });
    assert_eq!(std::fs::read(&elsewhere).unwrap(), b"untouched\n");
}
