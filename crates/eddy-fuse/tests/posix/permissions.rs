//! POSIX permission rules for callers other than root, and directory times, each checked two
//! ways: through a real FUSE mount of 3 real daemons (where the kernel checks access from the
//! attributes Eddy reports, default_permissions) by real processes of other users (setpriv,
//! python3 printing the errno of each call), and through the client library for callers it
//! checks (`Creds::enforce`). The expected errno of each case is the one POSIX (and Linux)
//! gives: EACCES where mode bits deny, EPERM where only the owner or root may act.
//!
//! The mount tests need root (to switch users), FUSE, setpriv and /usr/bin/python3: they fail,
//! naming what is missing, where those are not there.

use eddy_client::{Client, Creds, FileKind, SetAttr, SetTime, Timespec};
use eddy_testkit::{errno, require, shared_config, test_config, Cluster, Mounted};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const PYTHON: &str = "/usr/bin/python3";

/// Two unprivileged users (uid = gid) and a group neither belongs to unless given.
const A: u32 = 65534;
const B: u32 = 65533;
const G: u32 = 4242;

/// Who runs a script.
#[derive(Clone, Copy)]
enum Who {
    Root,
    /// uid (its gid is the same) and supplementary groups.
    User(u32, &'static [u32]),
}

/// Helpers every script gets: `t(f, *args)` prints "ok" or the errno's name; `mode(p)` the
/// permission bits in octal; `moved(dirs, f, *args)` "ok" when `f` moved the mtime and ctime
/// of every directory of `dirs`.
const PRELUDE: &str = r#"
import os, sys, errno, time
def t(f, *a):
    try:
        f(*a)
        print("ok")
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e.errno)))
def mode(p):
    print(oct(os.stat(p).st_mode & 0o7777))
def make(p, data=b"x"):
    with open(p, "wb") as f:
        f.write(data)
def write(p, flags, data=b"y"):
    fd = os.open(p, flags)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
def times(p):
    s = os.stat(p)
    return (s.st_mtime_ns, s.st_ctime_ns)
def moved(dirs, f, *a):
    before = [times(d) for d in dirs]
    time.sleep(0.02)
    f(*a)
    after = [times(d) for d in dirs]
    ok = all(x[0] > y[0] and x[1] > y[1] for x, y in zip(after, before))
    print("ok" if ok else f"not moved: {before} -> {after}")
"#;

fn requirements() {
    require::switch_user();
    require::fuse();
    if !Path::new(PYTHON).is_file() {
        require::missing("/usr/bin/python3 is not installed (Debian package python3-minimal)");
    }
}

/// Runs `code` (after the prelude) as `who`, in the mount's root; returns its output lines.
#[track_caller]
fn py(m: &Mounted, who: Who, code: &str) -> Vec<String> {
    let mut cmd = match who {
        Who::Root => Command::new(PYTHON),
        Who::User(uid, groups) => {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={uid}"));
            if groups.is_empty() {
                c.arg("--clear-groups");
            } else {
                let list: Vec<String> = groups.iter().map(u32::to_string).collect();
                c.arg(format!("--groups={}", list.join(",")));
            }
            c.arg(PYTHON);
            c
        }
    };
    let out = cmd
        .arg("-c")
        .arg(format!("{PRELUDE}\n{code}"))
        .current_dir(m.mnt.path())
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "script failed:\n{code}\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// A mount whose root (0755) holds `pub` (0777) and `tmp` (01777, like /tmp), all root's.
fn mounted() -> Mounted {
    requirements();
    let m = Mounted::start_with(3, shared_config());
    for (dir, mode) in [("pub", 0o777), ("tmp", 0o1777)] {
        std::fs::create_dir(m.path(dir)).unwrap();
        std::fs::set_permissions(m.path(dir), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    m
}

// ------------------------------------------------------------------ through the mount

#[test]
fn mount_sticky_directory_keeps_entries_to_their_owners() {
    let m = mounted();
    let a = Who::User(A, &[]);
    let b = Who::User(B, &[]);
    assert_eq!(
        py(
            &m,
            a,
            "t(make, 'tmp/a'); t(os.mkdir, 'tmp/ad'); t(make, 'tmp/c')"
        ),
        ["ok", "ok", "ok"]
    );
    // Another user may not remove, rename or replace them, though the directory is 0777.
    let out = py(
        &m,
        b,
        "t(os.unlink, 'tmp/a'); t(os.rmdir, 'tmp/ad'); t(os.rename, 'tmp/a', 'tmp/b'); \
         t(make, 'tmp/mine'); t(os.rename, 'tmp/mine', 'tmp/a'); t(os.unlink, 'tmp/mine')",
    );
    assert_eq!(out, ["EPERM", "EPERM", "EPERM", "ok", "EPERM", "ok"]);
    // Their owner may, root may, and so may the directory's owner.
    assert_eq!(
        py(
            &m,
            a,
            "t(os.rename, 'tmp/a', 'tmp/b'); t(os.unlink, 'tmp/b')"
        ),
        ["ok", "ok"]
    );
    assert_eq!(py(&m, Who::Root, "t(os.rmdir, 'tmp/ad')"), ["ok"]);
    std::os::unix::fs::chown(m.path("tmp"), Some(B), None).unwrap();
    assert_eq!(py(&m, b, "t(os.unlink, 'tmp/c')"), ["ok"]);
    // Without the sticky bit, write permission on the directory is enough.
    assert_eq!(py(&m, a, "t(make, 'pub/x')"), ["ok"]);
    assert_eq!(py(&m, b, "t(os.unlink, 'pub/x')"), ["ok"]);
}

#[test]
fn mount_chmod_chown_chgrp_and_utimensat_rules() {
    let m = mounted();
    let a = Who::User(A, &[]);
    let a_in_g = Who::User(A, &[G]);
    let b = Who::User(B, &[]);
    let b_in_g = Who::User(B, &[G]);
    py(
        &m,
        a,
        "make('pub/f'); make('pub/w'); os.chmod('pub/w', 0o666); make('pub/r')",
    );
    // chmod: the owner only.
    assert_eq!(py(&m, b, "t(os.chmod, 'pub/f', 0o600)"), ["EPERM"]);
    assert_eq!(py(&m, a, "t(os.chmod, 'pub/f', 0o640)"), ["ok"]);
    // chown: root only, even to the owner's own uid by another user.
    let chown = format!("t(os.chown, 'pub/f', {B}, -1); t(os.chown, 'pub/f', {A}, -1)");
    assert_eq!(py(&m, a, &chown), ["EPERM", "ok"]);
    assert_eq!(
        py(&m, b, &format!("t(os.chown, 'pub/f', {A}, -1)")),
        ["EPERM"]
    );
    // chgrp: the owner, to a group it belongs to (a supplementary one counts).
    let chgrp = format!("t(os.chown, 'pub/f', -1, {G})");
    assert_eq!(py(&m, a, &chgrp), ["EPERM"]);
    assert_eq!(py(&m, b_in_g, &chgrp), ["EPERM"]);
    assert_eq!(py(&m, a_in_g, &chgrp), ["ok"]);
    // chmod g+s by an owner outside the file's group: the bit is dropped, silently.
    assert_eq!(
        py(&m, a, "os.chmod('pub/f', 0o2755); mode('pub/f')"),
        ["0o755"]
    );
    assert_eq!(
        py(&m, a_in_g, "os.chmod('pub/f', 0o2755); mode('pub/f')"),
        ["0o2755"]
    );
    // utimensat: "now" needs ownership or write permission; explicit times need ownership.
    let out = py(
        &m,
        b,
        "t(os.utime, 'pub/w'); t(os.utime, 'pub/r'); t(os.utime, 'pub/w', (1, 1))",
    );
    assert_eq!(out, ["ok", "EACCES", "EPERM"]);
    assert_eq!(
        py(&m, a, "t(os.utime, 'pub/r', (1, 1)); t(os.utime, 'pub/r')"),
        ["ok", "ok"]
    );
    // Root does what it likes.
    assert_eq!(
        py(
            &m,
            Who::Root,
            &format!("t(os.chown, 'pub/r', {B}, {G}); t(os.chmod, 'pub/r', 0o2700)")
        ),
        ["ok", "ok"]
    );
}

#[test]
fn mount_setid_bits_are_cleared_by_unprivileged_writes_truncates_and_chown() {
    let m = mounted();
    let a = Who::User(A, &[]);
    // Files of root, writable by everyone, with both set-id bits (and group execute).
    let names = [
        "wronly", "rdwr", "append", "trunc", "otrunc", "root", "chown", "lock",
    ];
    let mut setup = String::new();
    for n in names {
        setup += &format!("make('pub/{n}', b'data'); os.chmod('pub/{n}', 0o6777)\n");
    }
    // Set-group-ID without group execute marks mandatory locking: writes keep it.
    setup += "os.chmod('pub/lock', 0o2767)\n";
    py(&m, Who::Root, &setup);
    let out = py(
        &m,
        a,
        "write('pub/wronly', os.O_WRONLY); mode('pub/wronly')\n\
         write('pub/rdwr', os.O_RDWR); mode('pub/rdwr')\n\
         write('pub/append', os.O_WRONLY | os.O_APPEND); mode('pub/append')\n\
         os.truncate('pub/trunc', 1); mode('pub/trunc')\n\
         write('pub/otrunc', os.O_WRONLY | os.O_TRUNC); mode('pub/otrunc')\n\
         write('pub/lock', os.O_WRONLY); mode('pub/lock')",
    );
    assert_eq!(out, ["0o777", "0o777", "0o777", "0o777", "0o777", "0o2767"]);
    // Root's writes keep them; a chown clears them (whoever does it) on files, not on
    // directories.
    let out = py(
        &m,
        Who::Root,
        &format!(
            "write('pub/root', os.O_WRONLY); mode('pub/root')\n\
             os.chown('pub/chown', {A}, -1); mode('pub/chown')\n\
             os.mkdir('pub/d'); os.chmod('pub/d', 0o2775); os.chown('pub/d', {A}, -1); mode('pub/d')"
        ),
    );
    assert_eq!(out, ["0o6777", "0o777", "0o2775"]);
}

#[test]
fn mount_supplementary_groups_and_search_permission() {
    let m = mounted();
    let setup = format!(
        "make('pub/g'); os.chown('pub/g', 0, {G}); os.chmod('pub/g', 0o640)\n\
         os.mkdir('pub/closed'); make('pub/closed/f'); os.chmod('pub/closed/f', 0o666)\n\
         os.chmod('pub/closed', 0o700)\n\
         os.mkdir('pub/gdir'); make('pub/gdir/f'); os.chmod('pub/gdir/f', 0o666)\n\
         os.chown('pub/gdir', 0, {G}); os.chmod('pub/gdir', 0o770)"
    );
    py(&m, Who::Root, &setup);
    let code = "t(lambda: open('pub/g').read()); t(lambda: open('pub/g', 'a').write('x'))\n\
                t(lambda: open('pub/closed/f').read()); t(make, 'pub/closed/new')\n\
                t(lambda: open('pub/gdir/f').read()); t(make, 'pub/gdir/new')";
    assert_eq!(
        py(&m, Who::User(A, &[]), code),
        ["EACCES", "EACCES", "EACCES", "EACCES", "EACCES", "EACCES"]
    );
    assert_eq!(
        py(&m, Who::User(A, &[7, G]), code),
        ["ok", "EACCES", "EACCES", "EACCES", "ok", "ok"]
    );
}

#[test]
fn mount_directory_times_move_with_their_entries() {
    let m = mounted();
    let code = "os.mkdir('pub/t1'); os.mkdir('pub/t2')\n\
                moved(['pub/t1'], make, 'pub/t1/f')\n\
                moved(['pub/t1'], os.mkdir, 'pub/t1/d')\n\
                moved(['pub/t1'], os.symlink, 'f', 'pub/t1/l')\n\
                moved(['pub/t1'], os.mkfifo, 'pub/t1/p')\n\
                moved(['pub/t1'], os.rename, 'pub/t1/f', 'pub/t1/g')\n\
                moved(['pub/t1', 'pub/t2'], os.rename, 'pub/t1/g', 'pub/t2/g')\n\
                moved(['pub/t1', 'pub/t2'], os.rename, 'pub/t1/d', 'pub/t2/d')\n\
                moved(['pub/t2'], os.unlink, 'pub/t2/g')\n\
                moved(['pub/t2'], os.rmdir, 'pub/t2/d')\n\
                moved(['pub/t1'], os.unlink, 'pub/t1/p')";
    assert_eq!(py(&m, Who::Root, code), ["ok"; 10]);
    let a = Who::User(A, &[]);
    assert_eq!(py(&m, a, &code.replace("pub/t", "pub/u")), ["ok"; 10]);
    // Creates that find the entry there leave the times alone.
    let out = py(
        &m,
        a,
        "make('pub/u1/e'); time.sleep(0.05); before = times('pub/u1')\n\
         t(os.mkdir, 'pub/u1/e'); t(os.open, 'pub/u1/e', os.O_CREAT | os.O_WRONLY)\n\
         time.sleep(0.05); print('same' if times('pub/u1') == before else 'moved')",
    );
    assert_eq!(out, ["EEXIST", "ok", "same"]);
    // Times set on a directory just after filling it (cp -a, tar, rsync -a) stay.
    let out = py(
        &m,
        a,
        "os.mkdir('pub/copy')\n\
         for i in range(20): make(f'pub/copy/f{i}')\n\
         os.utime('pub/copy', ns=(1_000_000_007, 2_000_000_009)); time.sleep(0.05)\n\
         s = os.stat('pub/copy'); print(s.st_atime_ns, s.st_mtime_ns)",
    );
    assert_eq!(out, ["1000000007 2000000009"]);
}

// ------------------------------------------------------------------ through the library

fn alice() -> Creds {
    Creds::user(1000, 1000)
}
fn bob() -> Creds {
    Creds::user(1001, 1001)
}
const GROUP: u32 = 4242;

/// A library client on 3 daemons, with `/pub` (0777) and `/tmp` (01777) made by root
/// under a root of mode 0755.
async fn library() -> (Cluster, Client) {
    let cl = Cluster::start_with(3, shared_config());
    let c = cl.client().await;
    c.mkdir("/pub", 0o777, Creds::root()).await.unwrap();
    c.mkdir("/tmp", 0o1777, Creds::root()).await.unwrap();
    (cl, c)
}

async fn make(c: &Client, p: &str, mode: u32, creds: Creds) {
    let f = c.create(p, mode, true, creds).await.unwrap();
    c.pwrite(&f, 0, b"data").await.unwrap();
    c.close(&f).await.unwrap();
}

fn chmod(mode: u32) -> SetAttr {
    SetAttr {
        mode: Some(mode),
        ..SetAttr::default()
    }
}

fn chown(uid: Option<u32>, gid: Option<u32>) -> SetAttr {
    SetAttr {
        uid,
        gid,
        ..SetAttr::default()
    }
}

fn times(atime: SetTime, mtime: SetTime) -> SetAttr {
    SetAttr {
        atime: Some(atime),
        mtime: Some(mtime),
        ..SetAttr::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_sticky_directory_keeps_entries_to_their_owners() {
    let (_cl, c) = library().await;
    let (alice, bob) = (alice(), bob());
    make(&c, "/tmp/a", 0o644, alice).await;
    make(&c, "/tmp/c", 0o644, alice).await;
    c.mkdir("/tmp/ad", 0o777, alice).await.unwrap();
    assert_eq!(errno(c.unlink("/tmp/a", bob).await), libc::EPERM);
    assert_eq!(errno(c.rmdir("/tmp/ad", bob).await), libc::EPERM);
    assert_eq!(errno(c.rename("/tmp/a", "/tmp/b", bob).await), libc::EPERM);
    make(&c, "/tmp/mine", 0o644, bob).await;
    assert_eq!(
        errno(c.rename("/tmp/mine", "/tmp/a", bob).await),
        libc::EPERM
    );
    c.unlink("/tmp/mine", bob).await.unwrap();
    c.rename("/tmp/a", "/tmp/b", alice).await.unwrap();
    c.unlink("/tmp/b", alice).await.unwrap();
    c.rmdir("/tmp/ad", Creds::root()).await.unwrap();
    // The directory's owner may.
    c.setattr("/tmp", chown(Some(1001), None), Creds::root())
        .await
        .unwrap();
    c.unlink("/tmp/c", bob).await.unwrap();
    // Without the sticky bit, write permission on the directory is enough.
    make(&c, "/pub/x", 0o644, alice).await;
    c.unlink("/pub/x", bob).await.unwrap();
    // A directory moving to another parent needs write permission on itself.
    c.mkdir("/pub/ro", 0o555, alice).await.unwrap();
    c.mkdir("/pub/to", 0o777, alice).await.unwrap();
    assert_eq!(
        errno(c.rename("/pub/ro", "/pub/to/ro", alice).await),
        libc::EACCES
    );
    c.rename("/pub/ro", "/pub/ro2", alice).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_chmod_chown_chgrp_and_utimensat_rules() {
    let (_cl, c) = library().await;
    let (alice, bob) = (alice(), bob());
    let alice_in_g = alice.with_groups(&[GROUP]);
    make(&c, "/pub/f", 0o644, alice).await;
    make(&c, "/pub/w", 0o666, alice).await;
    make(&c, "/pub/r", 0o644, alice).await;
    // chmod: the owner only.
    assert_eq!(
        errno(c.setattr("/pub/f", chmod(0o600), bob).await),
        libc::EPERM
    );
    c.setattr("/pub/f", chmod(0o640), alice).await.unwrap();
    // chown: root only, even to the owner's own uid by another user.
    assert_eq!(
        errno(c.setattr("/pub/f", chown(Some(1001), None), alice).await),
        libc::EPERM
    );
    c.setattr("/pub/f", chown(Some(1000), None), alice)
        .await
        .unwrap();
    assert_eq!(
        errno(c.setattr("/pub/f", chown(Some(1000), None), bob).await),
        libc::EPERM
    );
    // chgrp: the owner, to a group it belongs to (a supplementary one counts).
    let chgrp = chown(None, Some(GROUP));
    assert_eq!(
        errno(c.setattr("/pub/f", chgrp.clone(), alice).await),
        libc::EPERM
    );
    assert_eq!(
        errno(
            c.setattr("/pub/f", chgrp.clone(), bob.with_groups(&[GROUP]))
                .await
        ),
        libc::EPERM
    );
    assert_eq!(
        c.setattr("/pub/f", chgrp, alice_in_g).await.unwrap().gid,
        GROUP
    );
    // chmod g+s by an owner outside the file's group: the bit is dropped, silently.
    assert_eq!(
        c.setattr("/pub/f", chmod(0o2755), alice)
            .await
            .unwrap()
            .mode,
        0o755
    );
    assert_eq!(
        c.setattr("/pub/f", chmod(0o2755), alice_in_g)
            .await
            .unwrap()
            .mode,
        0o2755
    );
    // utimensat: "now" needs ownership or write permission; explicit times need ownership.
    let now = times(SetTime::Now, SetTime::Now);
    let at = SetTime::At(Timespec { sec: 1, nsec: 0 });
    let explicit = times(at, at);
    c.setattr("/pub/w", now.clone(), bob).await.unwrap();
    assert_eq!(
        errno(c.setattr("/pub/r", now.clone(), bob).await),
        libc::EACCES
    );
    assert_eq!(
        errno(c.setattr("/pub/w", explicit.clone(), bob).await),
        libc::EPERM
    );
    let mtime_now = SetAttr {
        mtime: Some(SetTime::Now),
        ..SetAttr::default()
    };
    assert_eq!(
        errno(c.setattr("/pub/w", mtime_now, bob).await),
        libc::EPERM
    );
    assert_eq!(
        c.setattr("/pub/r", explicit, alice)
            .await
            .unwrap()
            .mtime
            .sec,
        1
    );
    c.setattr("/pub/r", now, alice).await.unwrap();
    // truncate: write permission.
    assert_eq!(errno(c.truncate("/pub/r", 0, bob).await), libc::EACCES);
    c.truncate("/pub/w", 1, bob).await.unwrap();
    // Root does what it likes.
    let root = Creds::root();
    c.setattr("/pub/r", chown(Some(1001), Some(GROUP)), root)
        .await
        .unwrap();
    assert_eq!(
        c.setattr("/pub/r", chmod(0o2700), root).await.unwrap().mode,
        0o2700
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_setid_bits_are_cleared_by_unprivileged_writes_truncates_and_chown() {
    let (_cl, c) = library().await;
    let (root, alice) = (Creds::root(), alice());
    for n in [
        "write", "trunc", "ftrunc", "otrunc", "root", "chown", "lock",
    ] {
        make(&c, &format!("/pub/{n}"), 0o6777, root).await;
    }
    c.setattr("/pub/lock", chmod(0o2767), root).await.unwrap();
    let mode = |p: &'static str| {
        let c = c.clone();
        async move { c.stat(p).await.unwrap().mode }
    };

    let f = c
        .open("/pub/write", libc::O_WRONLY, 0, alice)
        .await
        .unwrap();
    c.pwrite(&f, 0, b"y").await.unwrap();
    assert_eq!(mode("/pub/write").await, 0o777);
    c.pwrite(&f, 1, b"y").await.unwrap();
    c.close(&f).await.unwrap();
    assert_eq!(
        c.truncate("/pub/trunc", 1, alice).await.unwrap().mode,
        0o777
    );
    let f = c.open("/pub/ftrunc", libc::O_RDWR, 0, alice).await.unwrap();
    assert_eq!(c.ftruncate(&f, 1).await.unwrap().mode, 0o777);
    let f = c
        .open("/pub/otrunc", libc::O_WRONLY | libc::O_TRUNC, 0, alice)
        .await
        .unwrap();
    assert_eq!(f.inode().mode, 0o777);
    // Set-group-ID without group execute marks mandatory locking: writes keep it.
    let f = c.open("/pub/lock", libc::O_WRONLY, 0, alice).await.unwrap();
    c.pwrite(&f, 0, b"y").await.unwrap();
    assert_eq!(mode("/pub/lock").await, 0o2767);
    // Root's writes keep them.
    let f = c.open("/pub/root", libc::O_WRONLY, 0, root).await.unwrap();
    c.pwrite(&f, 0, b"y").await.unwrap();
    c.truncate("/pub/root", 1, root).await.unwrap();
    assert_eq!(mode("/pub/root").await, 0o6777);
    // A chown clears them, whoever does it, on files; not on directories.
    let owned = c.setattr("/pub/chown", chown(Some(1000), None), root);
    assert_eq!(owned.await.unwrap().mode, 0o777);
    c.mkdir("/pub/d", 0o2775, root).await.unwrap();
    let d = c.setattr("/pub/d", chown(Some(1000), None), root).await;
    assert_eq!(d.unwrap().mode, 0o2775);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_supplementary_groups_and_search_permission() {
    let (_cl, c) = library().await;
    let root = Creds::root();
    let (alice, member) = (alice(), alice().with_groups(&[7, GROUP]));
    make(&c, "/pub/g", 0o640, root).await;
    c.setattr("/pub/g", chown(None, Some(GROUP)), root)
        .await
        .unwrap();
    assert_eq!(
        errno(c.open("/pub/g", libc::O_RDONLY, 0, alice).await),
        libc::EACCES
    );
    c.open("/pub/g", libc::O_RDONLY, 0, member).await.unwrap();
    assert_eq!(
        errno(c.open("/pub/g", libc::O_WRONLY, 0, member).await),
        libc::EACCES
    );

    // Search permission on every directory of the path, not only the parent.
    c.mkdir("/pub/closed", 0o700, root).await.unwrap();
    c.mkdir("/pub/closed/open", 0o777, root).await.unwrap();
    make(&c, "/pub/closed/open/f", 0o666, root).await;
    let f = "/pub/closed/open/f";
    assert_eq!(
        errno(c.open(f, libc::O_RDONLY, 0, alice).await),
        libc::EACCES
    );
    assert_eq!(
        errno(
            c.open(
                "/pub/closed/open/new",
                libc::O_CREAT | libc::O_WRONLY,
                0o644,
                alice
            )
            .await
        ),
        libc::EACCES
    );
    assert_eq!(
        errno(c.mkdir("/pub/closed/open/d", 0o755, alice).await),
        libc::EACCES
    );
    assert_eq!(errno(c.unlink(f, alice).await), libc::EACCES);
    assert_eq!(errno(c.truncate(f, 0, alice).await), libc::EACCES);
    // A missing entry below an unsearchable directory: EACCES, not ENOENT.
    assert_eq!(
        errno(
            c.open("/pub/closed/missing", libc::O_RDONLY, 0, alice)
                .await
        ),
        libc::EACCES
    );
    assert_eq!(
        errno(c.open("/pub/missing/f", libc::O_RDONLY, 0, alice).await),
        libc::ENOENT
    );
    // The directory's group, through a supplementary group.
    c.setattr("/pub/closed", chown(None, Some(GROUP)), root)
        .await
        .unwrap();
    c.setattr("/pub/closed", chmod(0o750), root).await.unwrap();
    c.open(f, libc::O_RDWR, 0, member).await.unwrap();
    assert_eq!(
        errno(c.open(f, libc::O_RDONLY, 0, alice).await),
        libc::EACCES
    );
}

/// The mtime and ctime of `dir`.
async fn dir_times(c: &Client, dir: &str) -> (Timespec, Timespec) {
    let i = c.stat(dir).await.unwrap();
    (i.mtime, i.ctime)
}

/// Runs `op` and checks that it moved the mtime and ctime of every directory of `dirs`.
async fn moves<F: std::future::Future<Output = ()>>(c: &Client, dirs: &[&str], op: F) {
    let mut before = Vec::new();
    for d in dirs {
        before.push(dir_times(c, d).await);
    }
    tokio::time::sleep(Duration::from_millis(2)).await;
    op.await;
    for (d, (m0, c0)) in dirs.iter().zip(before) {
        let (m1, c1) = dir_times(c, d).await;
        assert!(
            m1 > m0 && c1 > c0,
            "{d}: ({m0:?}, {c0:?}) -> ({m1:?}, {c1:?})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_directory_times_move_with_their_entries() {
    let (cl, c) = library().await;
    let alice = alice();
    c.mkdir("/pub/t1", 0o777, alice).await.unwrap();
    c.mkdir("/pub/t2", 0o777, alice).await.unwrap();
    let t1 = ["/pub/t1"];
    let both = ["/pub/t1", "/pub/t2"];
    moves(&c, &t1, async {
        make(&c, "/pub/t1/f", 0o644, alice).await;
    })
    .await;
    moves(&c, &t1, async {
        c.mkdir("/pub/t1/d", 0o755, alice).await.unwrap();
    })
    .await;
    moves(&c, &t1, async {
        c.symlink("f", "/pub/t1/l", alice).await.unwrap();
    })
    .await;
    moves(&c, &t1, async {
        c.mknod("/pub/t1/p", FileKind::Fifo, 0o644, 0, alice)
            .await
            .unwrap();
    })
    .await;
    moves(&c, &t1, async {
        c.rename("/pub/t1/f", "/pub/t1/g", alice).await.unwrap();
    })
    .await;
    moves(&c, &both, async {
        c.rename("/pub/t1/g", "/pub/t2/g", alice).await.unwrap();
    })
    .await;
    moves(&c, &both, async {
        c.rename("/pub/t1/d", "/pub/t2/d", alice).await.unwrap();
    })
    .await;
    moves(&c, &["/pub/t2"], async {
        c.unlink("/pub/t2/g", alice).await.unwrap();
    })
    .await;
    moves(&c, &["/pub/t2"], async {
        c.rmdir("/pub/t2/d", alice).await.unwrap();
    })
    .await;
    // An open with O_CREAT that creates the file moves them; one that finds it does not.
    let creat = libc::O_CREAT | libc::O_WRONLY;
    moves(&c, &t1, async {
        c.open("/pub/t1/o", creat, 0o644, alice).await.unwrap();
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = dir_times(&c, "/pub/t1").await;
    c.open("/pub/t1/o", creat, 0o644, alice).await.unwrap();
    c.open("/pub/t1/o", creat, 0o644, Creds::root())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let other = cl.client().await;
    assert_eq!(dir_times(&other, "/pub/t1").await, before);

    // Times set on a directory just after filling it (cp -a, tar, rsync -a) stay: this
    // client's deferred update goes first.
    c.mkdir("/pub/copy", 0o755, alice).await.unwrap();
    for i in 0..20 {
        make(&c, &format!("/pub/copy/f{i}"), 0o644, alice).await;
    }
    let set = Timespec { sec: 2, nsec: 9 };
    c.setattr(
        "/pub/copy",
        times(SetTime::At(set), SetTime::At(set)),
        alice,
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(c.stat("/pub/copy").await.unwrap().mtime, set);
    assert_eq!(other.stat("/pub/copy").await.unwrap().mtime, set);

    // Another client sees the times of a burst of creates once the deferred update is out,
    // and a time never goes back (merged with max).
    let burst = dir_times(&c, "/pub/t1").await;
    for i in 0..20 {
        make(&c, &format!("/pub/t1/burst{i}"), 0o644, alice).await;
    }
    let mine = dir_times(&c, "/pub/t1").await;
    assert!(mine.0 > burst.0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(dir_times(&other, "/pub/t1").await, mine);
    let c2 = cl.client().await;
    let old = Timespec { sec: 1, nsec: 0 };
    c2.setattr(
        "/pub/t1",
        times(SetTime::At(old), SetTime::At(old)),
        Creds::root(),
    )
    .await
    .unwrap();
    let reset = dir_times(&other, "/pub/t1").await;
    assert_eq!(reset.0, old);
    make(&other, "/pub/t1/after", 0o644, alice).await;
    assert!(dir_times(&c2, "/pub/t1").await.0 > mine.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_directory_times_of_a_linked_directory_stay_in_eddy() {
    let backend = tempfile::tempdir().unwrap();
    let d = backend.path().join("d");
    std::fs::create_dir(&d).unwrap();
    let old = std::time::UNIX_EPOCH + Duration::from_secs(1_500_000_000);
    let stamp = std::fs::FileTimes::new()
        .set_accessed(old)
        .set_modified(old);
    std::fs::File::open(&d).unwrap().set_times(stamp).unwrap();
    let config = eddy_config::Config {
        links: vec![eddy_config::Link {
            prefix: "/in".into(),
            backend: backend.path().to_path_buf(),
        }],
        ..test_config()
    };
    let cl = Cluster::start_with(3, config);
    let c = cl.client().await;
    assert_eq!(c.stat("/in/d").await.unwrap().mtime.sec, 1_500_000_000);
    // A file is created in the backend only at stage-out: the backend directory does not
    // change, and Eddy does not stamp it; Eddy's record of the directory moves.
    moves(&c, &["/in/d"], async {
        make(&c, "/in/d/f", 0o644, Creds::root()).await;
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!d.join("f").exists());
    assert_eq!(std::fs::metadata(&d).unwrap().modified().unwrap(), old);
    let other = cl.client().await;
    assert!(other.stat("/in/d").await.unwrap().mtime.sec > 1_500_000_000);
}
