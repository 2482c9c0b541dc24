//! Special files (FIFOs, sockets, device nodes) and extended attributes, through a real FUSE
//! mount over 3 daemons and through the client library. Every test here needs FUSE (and root
//! for device nodes): one that cannot run fails.

use eddy_client::{Creds, FileKind, SetAttr, XattrSet};
use eddy_testkit::{errno, Cluster, Mounted};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::process::{Command, Stdio};

/// The error cases of extended attributes, as a Python script run on the mount.
const XATTR_ERRNO_PY: &str = include_str!("../scripts/xattr_errno.py");

/// Runs a shell command as the unprivileged uid/gid 65534 with no supplementary groups.
const AS_NOBODY: &str = "setpriv --reuid=65534 --regid=65534 --clear-groups";

fn mounted() -> Mounted {
    eddy_testkit::require::root("create device nodes");
    eddy_testkit::require::switch_user();
    Mounted::start_with(3, eddy_testkit::shared_config())
}

/// Runs the errno script as root or as nobody on `dir`; it must pass.
fn run_errno_script(m: &Mounted, who: &str, dir: &str) {
    let prefix = if who == "user" { AS_NOBODY } else { "" };
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("{prefix} /usr/bin/python3 - {who} {dir}"))
        .current_dir(m.mnt.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(XATTR_ERRNO_PY.as_bytes())
        .expect("script");
    let out = child.wait_with_output().expect("python3");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "xattr checks as {who} failed:\n{stdout}\n{stderr}"
    );
}

#[test]
fn special_files_on_the_mount() {
    let m = mounted();
    m.ok("mkfifo -m 640 fifo && mknod chr c 1 3 && mknod blk b 8 1");
    m.ok(
        "/usr/bin/python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.bind('sock')\"",
    );
    let meta = |n: &str| fs::symlink_metadata(m.path(n)).unwrap();
    assert!(meta("fifo").file_type().is_fifo());
    assert_eq!(meta("fifo").mode() & 0o7777, 0o640);
    assert!(meta("sock").file_type().is_socket());
    assert!(meta("chr").file_type().is_char_device());
    assert_eq!(meta("chr").rdev(), libc::makedev(1, 3));
    assert!(meta("blk").file_type().is_block_device());
    assert_eq!(meta("blk").rdev(), libc::makedev(8, 1));
    let stat = m.ok("stat -c '%n %F %t:%T' blk chr fifo sock");
    assert_eq!(
        stat,
        "blk block special file 8:1\nchr character special file 1:3\nfifo fifo 0:0\nsock socket 0:0\n"
    );
    let ls = m.ok("ls -l");
    assert!(ls.contains("brw-r--r-- 1 root root 8, 1"), "{ls}");
    assert!(ls.contains("crw-r--r-- 1 root root 1, 3"), "{ls}");
    assert!(
        ls.lines()
            .any(|l| l.starts_with("prw-r-----") && l.ends_with(" fifo")),
        "{ls}"
    );
    assert!(
        ls.lines()
            .any(|l| l.starts_with('s') && l.ends_with(" sock")),
        "{ls}"
    );
    // The listing carries the attributes: the type is right without a stat.
    assert_eq!(m.ok("find . -type p"), "./fifo\n");
    assert_eq!(m.ok("find . -type c"), "./chr\n");

    // Another mount (another node) sees the same entries.
    let other = m.another_mount();
    let om = fs::symlink_metadata(other.path("chr")).unwrap();
    assert!(om.file_type().is_char_device());
    assert_eq!(om.rdev(), libc::makedev(1, 3));

    // chmod, rename, remove like any entry.
    m.ok("chmod 600 fifo && mkdir d && mv fifo d/fifo2 && mv chr d/chr2 && mv sock d/sock2");
    assert_eq!(meta("d/fifo2").mode() & 0o7777, 0o600);
    assert!(meta("d/fifo2").file_type().is_fifo());
    assert_eq!(meta("d/chr2").rdev(), libc::makedev(1, 3));
    assert!(meta("d/sock2").file_type().is_socket());
    m.ok("mv d e && test -p e/fifo2 && test -c e/chr2 && test -S e/sock2 && test ! -e fifo");
    m.ok("rm e/chr2 e/sock2 blk && test ! -e blk");

    // A FIFO carries data between two processes of one mount (the kernel serves it).
    let writer = Command::new("sh")
        .arg("-c")
        .arg("printf 'through the fifo\\n' > e/fifo2")
        .current_dir(m.mnt.path())
        .spawn()
        .expect("writer");
    assert_eq!(m.ok("timeout 20 cat e/fifo2"), "through the fifo\n");
    let mut writer = writer;
    assert!(writer.wait().unwrap().success());

    // A socket bound on the mount accepts connections by that path.
    let talk = "import os, socket
s = socket.socket(socket.AF_UNIX); s.bind('talk'); s.listen(1)
c = socket.socket(socket.AF_UNIX); c.connect('talk'); c.sendall(b'over the socket')
a, _ = s.accept(); print(a.recv(100).decode())";
    assert_eq!(
        m.ok(&format!("/usr/bin/python3 -c \"{talk}\"")),
        "over the socket\n"
    );

    // Device nodes need CAP_MKNOD; FIFOs do not.
    m.ok("mkdir -m 777 pub");
    let (ok, _, err) = m.sh(&format!("{AS_NOBODY} mknod pub/c c 1 3"));
    assert!(!ok && err.contains("Operation not permitted"), "{err}");
    let (ok, _, err) = m.sh(&format!("{AS_NOBODY} mknod pub/b b 8 1"));
    assert!(!ok && err.contains("Operation not permitted"), "{err}");
    m.ok(&format!("{AS_NOBODY} mkfifo pub/f && test -p pub/f"));
    assert_eq!(meta("pub/f").uid(), 65534);
    m.ok("rm pub/f e/fifo2");

    // rsync -a keeps special files (from the mount to local disk).
    m.ok("mkfifo tree_fifo && mknod tree_chr c 1 7");
    let local = tempfile::tempdir().unwrap();
    m.ok(&format!(
        "mkdir t && mv tree_fifo tree_chr t/ && rsync -a t/ {}/",
        local.path().display()
    ));
    let lm = fs::symlink_metadata(local.path().join("tree_chr")).unwrap();
    assert_eq!(lm.rdev(), libc::makedev(1, 7));
    assert!(fs::symlink_metadata(local.path().join("tree_fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
}

#[test]
fn xattrs_on_the_mount() {
    let m = mounted();
    // setfattr/getfattr round trips, text and binary.
    m.ok("touch f && ln -s f l && mkfifo p && mkdir dir");
    m.ok("setfattr -n user.color -v blue f && setfattr -n user.hex -v 0x00ff10 f");
    m.ok("setfattr -n user.on_dir -v yes dir");
    assert_eq!(
        m.ok("getfattr --only-values -n user.color f"),
        "blue",
        "getfattr of user.color"
    );
    assert_eq!(
        m.ok("getfattr -e hex -n user.hex f | grep user.hex"),
        "user.hex=0x00ff10\n"
    );
    let dump = m.ok("getfattr -d f");
    assert!(dump.contains("user.color=\"blue\""), "{dump}");
    assert_eq!(m.ok("getfattr --only-values -n user.on_dir dir"), "yes");
    m.ok("setfattr -x user.hex f");
    let (ok, _, err) = m.sh("getfattr -n user.hex f");
    assert!(!ok && err.contains("No such attribute"), "{err}");

    // Errno by errno, as root.
    m.ok("rm f && touch f");
    run_errno_script(&m, "root", ".");

    // As an unprivileged user.
    m.ok("mkdir -m 777 pub && touch pub/ro pub/secret && chmod 600 pub/secret");
    m.ok("setfattr -n user.a -v 1 pub/ro && setfattr -n user.a -v 1 pub/secret");
    m.ok("setfattr -n trusted.t -v x pub/ro && setfattr -n security.s -v s pub/ro");
    m.ok(&format!("{AS_NOBODY} touch pub/mine"));
    run_errno_script(&m, "user", "pub");

    // Another mount sees them, and a change made there is seen here once the attribute TTL
    // (fuse_attr_ttl_ms) of what this mount last heard has passed.
    let other = m.another_mount();
    let v = xattr_of(&other.path("pub/ro"), "user.a");
    assert_eq!(v, b"1");
    let changed = Command::new("setfattr")
        .args(["-n", "user.a", "-v", "2"])
        .arg(other.path("pub/ro"))
        .status()
        .expect("setfattr");
    assert!(changed.success());
    let ttl = m.cluster.dep.config.fuse_attr_ttl_ms;
    std::thread::sleep(std::time::Duration::from_millis(ttl + 200));
    assert_eq!(xattr_of(&m.path("pub/ro"), "user.a"), b"2");
}

fn xattr_of(p: &std::path::Path, name: &str) -> Vec<u8> {
    let out = Command::new("getfattr")
        .args(["--only-values", "-n", name])
        .arg(p)
        .output()
        .expect("getfattr");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn xattrs_follow_renames_and_copies() {
    let m = mounted();
    m.ok("mkdir -p a/b && touch a/b/f && setfattr -n user.k -v file a/b/f");
    m.ok("setfattr -n user.k -v dir a/b && setfattr -n trusted.t -v root a/b/f");
    m.ok("mv a/b/f a/b/g && mv a renamed");
    assert_eq!(xattr_of(&m.path("renamed/b/g"), "user.k"), b"file");
    assert_eq!(xattr_of(&m.path("renamed/b/g"), "trusted.t"), b"root");
    assert_eq!(xattr_of(&m.path("renamed/b"), "user.k"), b"dir");
    // A rename over an existing file: the target's attributes are the source's.
    m.ok("touch other && setfattr -n user.old -v x other && mv renamed/b/g other");
    let dump = m.ok("getfattr -d other");
    assert!(
        dump.contains("user.k=\"file\"") && !dump.contains("user.old"),
        "{dump}"
    );

    // cp --preserve=all and rsync -aX keep user.* both ways.
    let local = tempfile::tempdir().unwrap();
    let l = local.path().display();
    m.ok(&format!(
        "mkdir -p {l}/src/d && echo hi > {l}/src/d/x && setfattr -n user.c -v cp {l}/src/d/x \
         && setfattr -n user.c -v cpdir {l}/src/d"
    ));
    m.ok(&format!("cp -r --preserve=all {l}/src/d copied"));
    assert_eq!(xattr_of(&m.path("copied/x"), "user.c"), b"cp");
    assert_eq!(xattr_of(&m.path("copied"), "user.c"), b"cpdir");
    m.ok("rsync -aX copied/ synced/");
    assert_eq!(xattr_of(&m.path("synced/x"), "user.c"), b"cp");
    assert_eq!(xattr_of(&m.path("synced"), "user.c"), b"cpdir");
    m.ok(&format!(
        "rsync -aX synced/ {l}/back/ && cp --preserve=all synced/x {l}/cp_back"
    ));
    assert_eq!(xattr_of(&local.path().join("back/x"), "user.c"), b"cp");
    assert_eq!(xattr_of(&local.path().join("cp_back"), "user.c"), b"cp");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_files_and_xattrs_survive_kill_9_and_restart() {
    let mut cl = Cluster::start_with(3, eddy_testkit::shared_config());
    let me = Creds::root();
    {
        let c = cl.client().await;
        c.mkdir("/d", 0o755, me).await.unwrap();
        c.mknod("/d/fifo", FileKind::Fifo, 0o600, 0, me)
            .await
            .unwrap();
        c.mknod(
            "/d/dev",
            FileKind::BlockDevice,
            0o660,
            libc::makedev(8, 2),
            me,
        )
        .await
        .unwrap();
        let f = c.create("/d/f", 0o644, true, me).await.unwrap();
        c.close(&f).await.unwrap();
        for (p, v) in [("/d/f", "file"), ("/d", "dir"), ("/d/fifo", "fifo")] {
            let ns = if p == "/d/fifo" {
                "trusted.k"
            } else {
                "user.k"
            };
            c.setxattr(p, ns, v.as_bytes(), XattrSet::Create, me)
                .await
                .unwrap();
        }
        c.sync_all().await.unwrap();
    }
    cl.kill_and_restart_all();
    let c = cl.client().await;
    assert_eq!(c.stat("/d/fifo").await.unwrap().kind, FileKind::Fifo);
    let dev = c.stat("/d/dev").await.unwrap();
    assert_eq!(
        (dev.kind, dev.rdev, dev.mode),
        (FileKind::BlockDevice, libc::makedev(8, 2), 0o660)
    );
    assert_eq!(c.getxattr("/d/f", "user.k", me).await.unwrap(), b"file");
    assert_eq!(c.getxattr("/d", "user.k", me).await.unwrap(), b"dir");
    assert_eq!(
        c.getxattr("/d/fifo", "trusted.k", me).await.unwrap(),
        b"fifo"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_special_files() {
    let cl = Cluster::start_with(3, eddy_testkit::shared_config());
    let c = cl.client().await;
    let root = Creds::root();
    let user = Creds::user(1000, 1000);
    c.mkdir("/pub", 0o777, root).await.unwrap();
    let fifo = c
        .mknod("/pub/fifo", FileKind::Fifo, 0o640, 99, user)
        .await
        .unwrap();
    assert_eq!(
        (fifo.kind, fifo.uid, fifo.rdev, fifo.mode),
        (FileKind::Fifo, 1000, 0, 0o640)
    );
    c.mknod("/pub/sock", FileKind::Socket, 0o755, 0, user)
        .await
        .unwrap();
    assert_eq!(
        errno(
            c.mknod(
                "/pub/c",
                FileKind::CharDevice,
                0o644,
                libc::makedev(1, 3),
                user
            )
            .await
        ),
        libc::EPERM
    );
    assert_eq!(
        errno(
            c.mknod(
                "/pub/b",
                FileKind::BlockDevice,
                0o644,
                libc::makedev(8, 1),
                user
            )
            .await
        ),
        libc::EPERM
    );
    let chr = c
        .mknod(
            "/pub/c",
            FileKind::CharDevice,
            0o644,
            libc::makedev(1, 3),
            root,
        )
        .await
        .unwrap();
    assert_eq!(chr.rdev, libc::makedev(1, 3));
    assert_eq!(
        errno(c.mknod("/pub/c", FileKind::Fifo, 0o644, 0, root).await),
        libc::EEXIST
    );
    assert_eq!(
        errno(c.mknod("/pub/x", FileKind::File, 0o644, 0, root).await),
        libc::EINVAL
    );
    assert_eq!(
        errno(c.mknod("/none/x", FileKind::Fifo, 0o644, 0, root).await),
        libc::ENOENT
    );
    // No data in Eddy: the library cannot open them.
    assert_eq!(
        errno(c.open("/pub/fifo", libc::O_RDONLY, 0, root).await),
        libc::ENXIO
    );
    // Listed with their kinds, renamed, chmod'ed, removed.
    let mut kinds = Vec::new();
    let mut rd = c.readdir("/pub", None).unwrap();
    while let Some(p) = rd.next_page().await.unwrap() {
        kinds.extend(p.into_iter().map(|e| (e.name, e.inode.kind, e.inode.rdev)));
    }
    assert_eq!(
        kinds,
        [
            ("c".to_string(), FileKind::CharDevice, libc::makedev(1, 3)),
            ("fifo".to_string(), FileKind::Fifo, 0),
            ("sock".to_string(), FileKind::Socket, 0),
        ]
    );
    c.rename("/pub/c", "/c2", root).await.unwrap();
    assert_eq!(c.stat("/c2").await.unwrap().rdev, libc::makedev(1, 3));
    let attr = SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    assert_eq!(
        c.setattr("/pub/fifo", attr, user).await.unwrap().mode,
        0o600
    );
    c.unlink("/c2", root).await.unwrap();
    c.unlink("/pub/fifo", user).await.unwrap();
    assert_eq!(errno(c.stat("/c2").await), libc::ENOENT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_xattrs() {
    let cl = Cluster::start_with(3, eddy_testkit::shared_config());
    let c = cl.client().await;
    let root = Creds::root();
    let user = Creds::user(1000, 1000);
    let other = Creds {
        uid: 1001,
        gid: 1001,
        ..user
    };
    c.mkdir("/pub", 0o777, root).await.unwrap();
    let f = c.create("/pub/f", 0o644, true, user).await.unwrap();
    c.close(&f).await.unwrap();
    c.symlink("/pub/f", "/pub/l", user).await.unwrap();

    c.setxattr("/pub/f", "user.b", b"2", XattrSet::Any, user)
        .await
        .unwrap();
    c.setxattr("/pub/f", "user.a", b"1", XattrSet::Create, user)
        .await
        .unwrap();
    assert_eq!(
        errno(
            c.setxattr("/pub/f", "user.a", b"x", XattrSet::Create, user)
                .await
        ),
        libc::EEXIST
    );
    assert_eq!(
        errno(
            c.setxattr("/pub/f", "user.z", b"x", XattrSet::Replace, user)
                .await
        ),
        libc::ENODATA
    );
    c.setxattr("/pub/f", "user.a", b"11", XattrSet::Replace, user)
        .await
        .unwrap();
    assert_eq!(c.getxattr("/pub/f", "user.a", user).await.unwrap(), b"11");
    assert_eq!(
        errno(c.getxattr("/pub/f", "user.none", user).await),
        libc::ENODATA
    );
    assert_eq!(
        errno(c.removexattr("/pub/f", "user.none", user).await),
        libc::ENODATA
    );
    let long = format!("user.{}", "n".repeat(251));
    assert_eq!(
        errno(c.setxattr("/pub/f", &long, b"x", XattrSet::Any, user).await),
        libc::ERANGE
    );
    let big = vec![1u8; 64 * 1024 + 1];
    assert_eq!(
        errno(
            c.setxattr("/pub/f", "user.big", &big, XattrSet::Any, user)
                .await
        ),
        libc::E2BIG
    );
    assert_eq!(
        errno(
            c.setxattr(
                "/pub/f",
                "system.posix_acl_access",
                b"x",
                XattrSet::Any,
                root
            )
            .await
        ),
        libc::EOPNOTSUPP
    );
    assert_eq!(
        errno(
            c.setxattr("/pub/l", "user.a", b"x", XattrSet::Any, user)
                .await
        ),
        libc::EPERM
    );
    // Permissions: another user may read (0644) but not write; root namespaces are root's.
    assert_eq!(c.getxattr("/pub/f", "user.a", other).await.unwrap(), b"11");
    assert_eq!(
        errno(
            c.setxattr("/pub/f", "user.c", b"x", XattrSet::Any, other)
                .await
        ),
        libc::EACCES
    );
    assert_eq!(
        errno(c.removexattr("/pub/f", "user.a", other).await),
        libc::EACCES
    );
    assert_eq!(
        errno(
            c.setxattr("/pub/f", "trusted.t", b"x", XattrSet::Any, user)
                .await
        ),
        libc::EPERM
    );
    assert_eq!(
        errno(
            c.setxattr("/pub/f", "security.s", b"x", XattrSet::Any, user)
                .await
        ),
        libc::EPERM
    );
    c.setxattr("/pub/f", "trusted.t", b"r", XattrSet::Any, root)
        .await
        .unwrap();
    assert_eq!(
        c.listxattr("/pub/f", root).await.unwrap(),
        ["trusted.t", "user.a", "user.b"]
    );
    assert_eq!(
        c.listxattr("/pub/f", user).await.unwrap(),
        ["user.a", "user.b"]
    );
    assert_eq!(
        errno(c.getxattr("/pub/f", "trusted.t", user).await),
        libc::ENODATA
    );
    let attr = SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    c.setattr("/pub/f", attr, user).await.unwrap();
    assert_eq!(
        errno(c.getxattr("/pub/f", "user.a", other).await),
        libc::EACCES
    );
    // They follow the file through renames, of the file and of its directory.
    c.rename("/pub/f", "/pub/g", user).await.unwrap();
    c.rename("/pub", "/moved", root).await.unwrap();
    assert_eq!(c.getxattr("/moved/g", "user.a", user).await.unwrap(), b"11");
    assert_eq!(
        c.getxattr("/moved/g", "trusted.t", root).await.unwrap(),
        b"r"
    );
    c.removexattr("/moved/g", "user.a", user).await.unwrap();
    assert_eq!(c.listxattr("/moved/g", user).await.unwrap(), ["user.b"]);
    assert_eq!(
        errno(c.getxattr("/pub/g", "user.b", user).await),
        libc::ENOENT
    );
    // ctime moves with a change.
    let before = c.stat("/moved/g").await.unwrap().ctime;
    std::thread::sleep(std::time::Duration::from_millis(5));
    c.setxattr("/moved/g", "user.t", b"", XattrSet::Any, user)
        .await
        .unwrap();
    assert!(c.stat("/moved/g").await.unwrap().ctime > before);
}

/// mknod(2) on local disk, for a backend directory's contents.
fn local_mknod(p: &std::path::Path, mode: u32, dev: u64) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::mknod(c.as_ptr(), mode, dev) };
    assert_eq!(
        rc,
        0,
        "mknod {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_files_under_a_linked_prefix_reach_the_backend() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    local_mknod(&b.join("old_fifo"), libc::S_IFIFO | 0o640, 0);
    local_mknod(
        &b.join("old_chr"),
        libc::S_IFCHR | 0o600,
        libc::makedev(1, 5),
    );
    let config = eddy_config::Config {
        links: vec![eddy_config::Link {
            prefix: "/in".into(),
            backend: b.to_path_buf(),
        }],
        ..eddy_testkit::shared_config()
    };
    let cl = Cluster::start_with(3, config);
    let c = cl.client().await;
    let root = Creds::root();
    // Backend special files are imported with their kind, mode and device number.
    let fifo = c.stat("/in/old_fifo").await.unwrap();
    assert_eq!((fifo.kind, fifo.mode), (FileKind::Fifo, 0o640));
    let mut listed = Vec::new();
    let mut rd = c.readdir("/in", None).unwrap();
    while let Some(p) = rd.next_page().await.unwrap() {
        listed.extend(p.into_iter().map(|e| (e.name, e.inode.kind, e.inode.rdev)));
    }
    assert_eq!(
        listed,
        [
            (
                "old_chr".to_string(),
                FileKind::CharDevice,
                libc::makedev(1, 5)
            ),
            ("old_fifo".to_string(), FileKind::Fifo, 0),
        ]
    );
    // New ones are written through at once, like mkdir.
    c.mknod("/in/fifo", FileKind::Fifo, 0o604, 0, root)
        .await
        .unwrap();
    c.mknod(
        "/in/blk",
        FileKind::BlockDevice,
        0o660,
        libc::makedev(7, 9),
        root,
    )
    .await
    .unwrap();
    c.mknod("/in/sock", FileKind::Socket, 0o700, 0, root)
        .await
        .unwrap();
    let meta = |n: &str| fs::symlink_metadata(b.join(n)).unwrap();
    assert!(meta("fifo").file_type().is_fifo());
    assert_eq!(meta("fifo").mode() & 0o7777, 0o604);
    assert!(meta("blk").file_type().is_block_device());
    assert_eq!(meta("blk").rdev(), libc::makedev(7, 9));
    assert!(meta("sock").file_type().is_socket());
    assert_eq!(meta("sock").mode() & 0o7777, 0o700);
    // chmod, rename and unlink too.
    let attr = SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    c.setattr("/in/fifo", attr, root).await.unwrap();
    assert_eq!(meta("fifo").mode() & 0o7777, 0o600);
    c.rename("/in/fifo", "/in/fifo2", root).await.unwrap();
    assert!(meta("fifo2").file_type().is_fifo());
    assert!(!b.join("fifo").exists());
    for n in ["/in/fifo2", "/in/blk", "/in/sock", "/in/old_chr"] {
        c.unlink(n, root).await.unwrap();
    }
    let left: Vec<_> = fs::read_dir(b)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, ["old_fifo"]);
    // Extended attributes of linked entries are kept in Eddy only.
    c.setxattr("/in/old_fifo", "trusted.k", b"v", XattrSet::Any, root)
        .await
        .unwrap();
    assert_eq!(
        c.getxattr("/in/old_fifo", "trusted.k", root).await.unwrap(),
        b"v"
    );
}
