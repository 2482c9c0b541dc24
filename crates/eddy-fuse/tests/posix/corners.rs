//! POSIX corners through a real FUSE mount (and the preload library where it applies): atime
//! under `relatime`, `strictatime` and `noatime`; a file replaced by a rename while open;
//! `futimens` with given times and ctime; device nodes and set-user-ID programs on a mount
//! with and without `--dev`/`--suid` (decision 0061).

use crate::script_runs::{python, PREFIX};
use eddy_testkit::{test_config, Mounted};
use std::os::unix::fs::PermissionsExt;

/// Writes `f`, sets its atime and mtime an hour back (ctime is now), then reads it twice
/// (a second apart) and says after each read whether the atime moved (`new`) or not (`same`).
const ATIME_PY: &str = r#"
import os, sys, time
p = sys.argv[1] + "/f"
with open(p, "wb") as f:
    f.write(b"data")
past = time.time() - 3600
os.utime(p, (past, past))
def read():
    fd = os.open(p, os.O_RDONLY)
    assert os.read(fd, 4) == b"data"
    os.close(fd)
a0 = os.stat(p).st_atime_ns
read()
a1 = os.stat(p).st_atime_ns
time.sleep(1.1)
read()
a2 = os.stat(p).st_atime_ns
print("first", "new" if a1 != a0 else "same")
print("second", "new" if a2 != a1 else "same")
# An open that reads nothing moves nothing.
os.utime(p, (past, past))
a3 = os.stat(p).st_atime_ns
os.close(os.open(p, os.O_RDONLY))
print("open", "new" if os.stat(p).st_atime_ns != a3 else "same")
"#;

fn atime_lines(first: &str, second: &str) -> String {
    format!("first {first}\nsecond {second}\nopen same\n")
}

#[test]
fn a_read_after_a_change_moves_atime_once_under_relatime() {
    eddy_testkit::require::program("python3", "python3");
    let m = Mounted::start(3);
    std::fs::create_dir(m.path("mnt")).unwrap();
    let mounted = python(ATIME_PY, &[m.path("mnt").to_str().unwrap()], None);
    assert_eq!(
        mounted,
        atime_lines("new", "same"),
        "the mount (relatime, the default)"
    );
    std::fs::create_dir(m.path("pre")).unwrap();
    let preloaded = python(ATIME_PY, &[&format!("{PREFIX}/pre")], Some(&m));
    assert_eq!(
        preloaded,
        atime_lines("new", "same"),
        "the preload library (relatime, the default)"
    );
}

/// The same where the kernel may read the files itself (FUSE passthrough: local placement,
/// the mount run as root): a read-only open that must move the atime is served by the mount.
#[test]
fn a_read_moves_atime_where_files_are_passed_through() {
    eddy_testkit::require::program("python3", "python3");
    let config = eddy_config::Config {
        placement: eddy_config::PlacementMode::Local,
        placement_host: Some("localhost".into()),
        ..test_config()
    };
    let m = Mounted::start_with(3, config.clone());
    let mounted = python(ATIME_PY, &[m.path("").to_str().unwrap()], None);
    assert_eq!(mounted, atime_lines("new", "same"), "relatime, passthrough");
    drop(m);
    let m = Mounted::start_with_args(3, config, &["--atime", "strictatime"]);
    let mounted = python(ATIME_PY, &[m.path("").to_str().unwrap()], None);
    assert_eq!(
        mounted,
        atime_lines("new", "new"),
        "strictatime, passthrough"
    );
}

#[test]
fn strictatime_moves_atime_at_every_read() {
    eddy_testkit::require::program("python3", "python3");
    let m = Mounted::start_with_args(3, test_config(), &["--atime", "strictatime"]);
    let mounted = python(ATIME_PY, &[m.path("").to_str().unwrap()], None);
    assert_eq!(mounted, atime_lines("new", "new"), "a strictatime mount");
}

#[test]
fn noatime_never_moves_atime() {
    eddy_testkit::require::program("python3", "python3");
    let m = Mounted::start_with_args(3, test_config(), &["--atime", "noatime"]);
    let mounted = python(ATIME_PY, &[m.path("").to_str().unwrap()], None);
    assert_eq!(mounted, atime_lines("same", "same"), "a noatime mount");
    let opts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = opts
        .lines()
        .find(|l| l.contains(m.mnt.path().to_str().unwrap()))
        .unwrap_or_default();
    assert!(line.contains("noatime"), "the mount table says: {line}");
}

/// A file held open, then replaced by `rename(new, old)`: its descriptor still reaches it.
pub(crate) const RENAME_OVER_OPEN_PY: &str = r#"
import os, sys
d = sys.argv[1]
fd = os.open(f"{d}/old", os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"old data")
with open(f"{d}/new", "wb") as f:
    f.write(b"new")
os.rename(f"{d}/new", f"{d}/old")
st = os.fstat(fd)
print("fstat", st.st_size, st.st_nlink)
print("pread", os.pread(fd, 8, 0).decode())
os.pwrite(fd, b" more", 8)
print("after write", os.pread(fd, 13, 0).decode())
with open(f"{d}/old", "rb") as f:
    print("by name", f.read().decode())
print("listed", sorted(os.listdir(d)))
os.close(fd)
print("after close", sorted(os.listdir(d)))
"#;

#[test]
fn a_file_replaced_by_a_rename_stays_usable_through_its_descriptor() {
    eddy_testkit::require::program("python3", "python3");
    let m = Mounted::start(3);
    std::fs::create_dir(m.path("d")).unwrap();
    let out = python(RENAME_OVER_OPEN_PY, &[m.path("d").to_str().unwrap()], None);
    assert_eq!(
        out,
        "fstat 8 0\npread old data\nafter write old data more\nby name new\n\
         listed ['old']\nafter close ['old']\n",
        "the mount"
    );
    // No hidden name is left once the last descriptor is closed.
    let left = m.ok("ls -a d");
    assert_eq!(left, ".\n..\nold\n");
}

/// futimens with an explicit mtime (atime omitted, then both given): ctime becomes now, as
/// every change of attributes does (xfstests' t_futimens: "failed to update ctime!").
const FUTIMENS_PY: &str = r#"
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]
UTIME_OMIT = (1 << 30) - 2
p = sys.argv[1] + "/f"
fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"x")
for case in ("omit_atime", "both_given"):
    old = os.fstat(fd)
    time.sleep(1.1)
    ts = (Timespec * 2)()
    if case == "omit_atime":
        ts[0].tv_sec, ts[0].tv_nsec = 0, UTIME_OMIT
    else:
        ts[0].tv_sec, ts[0].tv_nsec = old.st_atime_ns // 10**9, 0
    ts[1].tv_sec, ts[1].tv_nsec = old.st_mtime_ns // 10**9, 0
    if libc.futimens(fd, ts) != 0:
        raise OSError(ctypes.get_errno(), "futimens")
    new = os.fstat(fd)
    print(case, "ctime", "new" if new.st_ctime_ns != old.st_ctime_ns else "same")
    print(case, "mtime", new.st_mtime_ns == old.st_mtime_ns // 10**9 * 10**9)
os.close(fd)
"#;

#[test]
fn futimens_with_given_times_moves_ctime() {
    eddy_testkit::require::program("python3", "python3");
    let expected = "omit_atime ctime new\nomit_atime mtime True\n\
                    both_given ctime new\nboth_given mtime True\n";
    let local = tempfile::tempdir().unwrap();
    let reference = python(FUTIMENS_PY, &[local.path().to_str().unwrap()], None);
    assert_eq!(reference, expected, "a local directory");
    let m = Mounted::start(3);
    std::fs::create_dir(m.path("mnt")).unwrap();
    let mounted = python(FUTIMENS_PY, &[m.path("mnt").to_str().unwrap()], None);
    assert_eq!(mounted, expected, "the mount");
    std::fs::create_dir(m.path("pre")).unwrap();
    let preloaded = python(FUTIMENS_PY, &[&format!("{PREFIX}/pre")], Some(&m));
    assert_eq!(preloaded, expected, "the preload library");
    drop(m);
    // Where the kernel writes the file itself (FUSE passthrough).
    let m = Mounted::start_with(
        3,
        eddy_config::Config {
            placement: eddy_config::PlacementMode::Local,
            placement_host: Some("localhost".into()),
            ..test_config()
        },
    );
    let passed = python(FUTIMENS_PY, &[m.path("").to_str().unwrap()], None);
    assert_eq!(passed, expected, "the mount, passthrough");
}

/// Makes the character device /dev/null is (1, 3) on the mount and writes to it.
fn write_to_a_device_node(m: &Mounted) -> Result<(), std::io::Error> {
    m.ok("mknod null c 1 3");
    std::fs::write(m.path("null"), b"into the void")
}

#[test]
fn a_device_node_opens_on_a_dev_mount_only() {
    let plain = Mounted::start(3);
    let e = write_to_a_device_node(&plain).expect_err("a device node opened on a nodev mount");
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
    drop(plain);

    let dev = Mounted::start_with_args(3, test_config(), &["--dev"]);
    write_to_a_device_node(&dev).expect("a device node on a --dev mount");
    assert_eq!(dev.ok("head -c 4 null | wc -c").trim(), "0");
}

#[test]
fn dev_and_suid_are_refused_to_a_mount_not_made_by_root() {
    eddy_testkit::require::switch_user();
    let state = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    for flag in ["--dev", "--suid"] {
        let out = eddy_testkit::as_user(65534)
            .arg(eddy_testkit::eddy_bin())
            .args(["mount", flag, "--state"])
            .arg(state.path())
            .arg(mnt.path())
            .current_dir("/")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("need a mount made by root"),
            "{flag} as uid 65534: {err}"
        );
    }
}

/// A set-user-ID root copy of `id` on the mount, run by uid 65534: its effective uid.
fn setuid_id_runs_as(m: &Mounted) -> String {
    eddy_testkit::require::switch_user();
    let id = eddy_testkit::require::program("id", "coreutils");
    std::fs::set_permissions(m.path(""), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::copy(id, m.path("id")).unwrap();
    std::fs::set_permissions(m.path("id"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    let out = eddy_testkit::sh_as_user(65534, &format!("{} -u", m.path("id").display()));
    assert!(
        out.status.success(),
        "id from the mount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn set_user_id_counts_on_a_suid_mount_only() {
    let plain = Mounted::start(3);
    assert_eq!(setuid_id_runs_as(&plain), "65534", "a nosuid mount");
    drop(plain);
    let suid = Mounted::start_with_args(3, test_config(), &["--suid"]);
    assert_eq!(setuid_id_runs_as(&suid), "0", "a --suid mount");
}
