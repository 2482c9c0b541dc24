//! A real mount over three real daemons (in this process, on loopback sockets), exercised
//! through ordinary file system calls.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

// What the tests need beyond the build (FUSE, fusectl): shared with every crate's tests.
use eddy_testkit::require;

use eddy_client::driver::Driver;
use eddy_client::Client;
use eddy_config::{Config, DaemonEntry, Deployment};
use eddy_daemon::{Daemon, DaemonSettings};
use eddy_fuse::{spawn_mount, MountGuard, MountOptions};
use std::collections::BTreeSet;
use std::ffi::CString;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::Duration;

struct Fixture {
    guard: Option<MountGuard>,
    daemons: Vec<Daemon>,
    rt: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        drop(self.guard.take());
        for d in self.daemons.drain(..) {
            d.shutdown();
            let _ = self.rt.block_on(d.wait());
        }
    }
}

/// Chunks of 64 KiB and pages of 16 names, so that small tests cross chunk, daemon and page
/// boundaries.
fn config() -> Config {
    Config {
        chunk_size: 64 * 1024,
        readdir_page: 16,
        rpc_timeout_ms: 5_000,
        ..Config::default()
    }
}

/// Daemons and a mount of them; fails the test, naming what is missing, without FUSE.
fn start(n: u32) -> Fixture {
    require::fuse();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let secret = Deployment::new_secret();
    let mut dep = Deployment {
        name: "fuse-test".into(),
        job: Default::default(),
        epoch: 0,
        moving_from: None,
        draining: Vec::new(),
        secret,
        config: config(),
        daemons: vec![],
    };
    let mut daemons = Vec::new();
    for id in 0..n {
        let root = dir.path().join(format!("d{id}"));
        let mut s = DaemonSettings::new(
            &root,
            "127.0.0.1:0".parse().unwrap(),
            dep.secret_bytes().unwrap(),
            config(),
        );
        s.id = id;
        let d = rt.block_on(Daemon::start(s)).unwrap();
        dep.daemons.push(DaemonEntry {
            id,
            host: "localhost".into(),
            addr: d.local_addr().to_string(),
            socket: d.socket_path().map(Path::to_owned),
            root,
            metrics: None,
        });
        daemons.push(d);
    }
    // The mount's client on a runtime its FUSE threads drive (as `eddy mount` does).
    let driver = Driver::start(Driver::runtime().unwrap(), "eddy-mount", || {}).unwrap();
    let client: Client = driver.drive(Client::connect(dep)).unwrap();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let opts = MountOptions {
        allow_other: false,
        fsname: "eddy-test".into(),
        threads: 4,
        attr_ttl: Duration::from_millis(100),
        negative_ttl: Duration::from_millis(100),
        fresh_dirs: true,
        read_ahead_kb: 2048,
        passthrough: false,
        atime: eddy_config::Atime::Relatime,
        dev: false,
        suid: false,
        transport: eddy_config::FuseTransport::DevFuse,
    };
    let guard = spawn_mount(client, driver, &mnt, opts).unwrap();
    Fixture {
        guard: Some(guard),
        daemons,
        rt,
        _dir: dir,
    }
}

fn errno_of(r: std::io::Result<impl Sized>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4096) as u8).collect()
}

#[test]
fn mount_serves_posix_calls() {
    let mut fx = start(3);
    let mnt = fx.guard.as_ref().unwrap().mountpoint().to_owned();
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        mounts.contains("fuse.eddy"),
        "mounted with subtype eddy: {mounts}"
    );

    // Data across chunks and daemons, read back whole and in the middle.
    fs::create_dir(mnt.join("d")).unwrap();
    let data = pattern(300 * 1024 + 17);
    fs::write(mnt.join("d/f"), &data).unwrap();
    assert_eq!(fs::read(mnt.join("d/f")).unwrap(), data);
    let mut f = fs::File::open(mnt.join("d/f")).unwrap();
    f.seek(SeekFrom::Start(65_000)).unwrap();
    let mut mid = vec![0u8; 70_000];
    f.read_exact(&mut mid).unwrap();
    assert_eq!(mid, data[65_000..135_000]);
    drop(f);
    let md = fs::metadata(mnt.join("d/f")).unwrap();
    assert_eq!(md.len(), data.len() as u64);
    assert_eq!(md.blocks(), (data.len() as u64).div_ceil(512));
    assert_eq!(md.blksize(), 64 * 1024);
    assert_eq!(md.nlink(), 1);
    assert!(fs::metadata(mnt.join("d")).unwrap().is_dir());

    // A listing spanning many pages and several readdir calls: every name exactly once.
    fs::create_dir(mnt.join("many")).unwrap();
    let want: BTreeSet<String> = (0..400)
        .map(|i| format!("entry-with-a-longish-name-{i:04}"))
        .collect();
    for name in &want {
        fs::File::create(mnt.join("many").join(name)).unwrap();
    }
    let mut got = Vec::new();
    for e in fs::read_dir(mnt.join("many")).unwrap() {
        got.push(e.unwrap().file_name().to_string_lossy().into_owned());
    }
    assert_eq!(got.len(), want.len(), "no duplicates, nothing missing");
    assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), want);

    // Renaming a directory: entries below it are reachable under the new name.
    fs::rename(mnt.join("d"), mnt.join("e")).unwrap();
    assert_eq!(fs::read(mnt.join("e/f")).unwrap(), data);
    assert_eq!(errno_of(fs::metadata(mnt.join("d/f"))), libc::ENOENT);

    // A file renamed while open for writing: later writes land in it and grow it.
    let mut log = fs::File::create(mnt.join("app.log")).unwrap();
    log.write_all(b"one\n").unwrap();
    fs::rename(mnt.join("app.log"), mnt.join("app.log.1")).unwrap();
    log.write_all(b"two\n").unwrap();
    drop(log);
    assert_eq!(fs::read(mnt.join("app.log.1")).unwrap(), b"one\ntwo\n");
    fs::remove_file(mnt.join("app.log.1")).unwrap();

    // RENAME_NOREPLACE onto an existing entry; RENAME_EXCHANGE refused.
    fs::write(mnt.join("a"), b"a").unwrap();
    fs::write(mnt.join("b"), b"b").unwrap();
    let (a, b) = (cpath(&mnt.join("a")), cpath(&mnt.join("b")));
    // SAFETY: valid NUL-terminated paths.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    assert_eq!(rc, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EEXIST)
    );
    // SAFETY: as above.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(rc, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EINVAL)
    );
    fs::rename(mnt.join("a"), mnt.join("b")).unwrap();
    assert_eq!(fs::read(mnt.join("b")).unwrap(), b"a");

    // Symlinks.
    std::os::unix::fs::symlink("e/f", mnt.join("link")).unwrap();
    assert_eq!(fs::read_link(mnt.join("link")).unwrap(), Path::new("e/f"));
    assert_eq!(fs::read(mnt.join("link")).unwrap(), data);

    // chmod, truncate (by path and through an open file), append.
    fs::set_permissions(mnt.join("b"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        fs::metadata(mnt.join("b")).unwrap().permissions().mode() & 0o7777,
        0o600
    );
    let f = fs::OpenOptions::new()
        .write(true)
        .open(mnt.join("e/f"))
        .unwrap();
    f.set_len(10).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 10);
    drop(f);
    assert_eq!(fs::read(mnt.join("e/f")).unwrap(), data[..10]);
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(mnt.join("e/f"))
        .unwrap();
    // A second appender between two appends of the first: nothing is overwritten.
    let mut g = fs::OpenOptions::new()
        .append(true)
        .open(mnt.join("e/f"))
        .unwrap();
    f.write_all(b"tail").unwrap();
    g.write_all(b"+g").unwrap();
    f.write_all(b"+f").unwrap();
    drop((f, g));
    assert_eq!(&fs::read(mnt.join("e/f")).unwrap()[10..], b"tail+g+f");
    fs::write(mnt.join("e/f"), b"new").unwrap(); // O_TRUNC
    assert_eq!(fs::read(mnt.join("e/f")).unwrap(), b"new");

    // Hard links (decision 0009) and locks (decision 0008) are served.
    fs::hard_link(mnt.join("b"), mnt.join("b2")).unwrap();
    let (b, b2) = (
        fs::metadata(mnt.join("b")).unwrap(),
        fs::metadata(mnt.join("b2")).unwrap(),
    );
    assert_eq!((b.ino(), b.nlink()), (b2.ino(), 2));
    let f = fs::File::open(mnt.join("b")).unwrap();
    // SAFETY: a valid open descriptor.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(rc, 0);
    // SAFETY: as above.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
    assert_eq!(rc, 0);
    let lock = libc::flock {
        l_type: libc::F_RDLCK as i16,
        l_whence: libc::SEEK_SET as i16,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    };
    // SAFETY: a valid open descriptor and lock description.
    let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &lock) };
    assert_eq!(rc, 0, "{:?}", std::io::Error::last_os_error());
    drop(f);
    let fifo = cpath(&mnt.join("fifo"));
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) };
    assert_eq!(rc, 0, "mkfifo: {}", std::io::Error::last_os_error());
    assert!(fs::symlink_metadata(mnt.join("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    fs::remove_file(mnt.join("fifo")).unwrap();

    // Exclusive create, unlink, rmdir.
    let excl = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o640)
        .open(mnt.join("b"));
    assert_eq!(errno_of(excl), libc::EEXIST);
    assert_eq!(errno_of(fs::remove_dir(mnt.join("e"))), libc::ENOTEMPTY);
    fs::remove_file(mnt.join("e/f")).unwrap();
    fs::remove_dir(mnt.join("e")).unwrap();
    assert_eq!(errno_of(fs::metadata(mnt.join("e"))), libc::ENOENT);

    // Extended attributes: user.* round trip; ACLs are not supported.
    let c = cpath(&mnt.join("b"));
    let name = CString::new("user.x").unwrap();
    // SAFETY: valid NUL-terminated strings and a valid buffer.
    let rc = unsafe { libc::setxattr(c.as_ptr(), name.as_ptr(), b"v".as_ptr().cast(), 1, 0) };
    assert_eq!(rc, 0, "setxattr: {}", std::io::Error::last_os_error());
    let mut buf = [0u8; 8];
    // SAFETY: valid NUL-terminated strings and a buffer of the given size.
    let n = unsafe { libc::getxattr(c.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 8) };
    assert_eq!(&buf[..n as usize], b"v");
    let acl = CString::new("system.posix_acl_access").unwrap();
    // SAFETY: as above.
    let rc = unsafe { libc::getxattr(c.as_ptr(), acl.as_ptr(), buf.as_mut_ptr().cast(), 8) };
    assert_eq!(rc, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EOPNOTSUPP)
    );

    // Requests from several threads at once, each on its own files.
    fs::create_dir(mnt.join("par")).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let dir = mnt.join("par");
            s.spawn(move || {
                for i in 0..25 {
                    let body = pattern(10_000 + t * 100 + i);
                    let p = dir.join(format!("t{t}-{i}"));
                    fs::write(&p, &body).unwrap();
                    assert_eq!(fs::read(&p).unwrap(), body);
                }
            });
        }
    });
    assert_eq!(fs::read_dir(mnt.join("par")).unwrap().count(), 100);
    fs::File::open(mnt.join("par")).unwrap().sync_all().unwrap(); // fsyncdir

    // statfs.
    let c = cpath(&mnt);
    // SAFETY: zeroed statvfs is a valid out-parameter; `c` is a valid path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` a writable statvfs, both alive for the call.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    assert!(st.f_bsize > 0 && st.f_blocks > 0);

    // Unmounting ends the mount.
    let guard = fx.guard.take().unwrap();
    guard.unmount().unwrap();
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&*mnt.to_string_lossy()));
}

#[test]
fn the_mount_gets_the_configured_read_ahead() {
    use std::os::unix::fs::MetadataExt;
    let fx = start(3);
    let mnt = fx.guard.as_ref().unwrap().mountpoint().to_owned();
    let dev = fs::metadata(&mnt).unwrap().dev();
    let file = format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        libc::major(dev),
        libc::minor(dev)
    );
    let kb = fs::read_to_string(&file).unwrap();
    assert_eq!(kb.trim(), "2048", "{file}");
}

#[test]
fn unmount_with_an_open_file_aborts_the_connection() {
    // Aborting the connection goes through the FUSE control file system.
    require::fusectl();
    let mut fx = start(3);
    let mnt = fx.guard.as_ref().unwrap().mountpoint().to_owned();
    fs::write(mnt.join("held"), b"data").unwrap();
    let mut held = fs::File::open(mnt.join("held")).unwrap();

    // The mount is busy: it is detached, and its connection aborted so that nothing waits
    // on this process to answer for the open file.
    fx.guard.take().unwrap().unmount().unwrap();
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&*mnt.to_string_lossy()));
    let mut buf = Vec::new();
    assert_eq!(errno_of(held.read_to_end(&mut buf)), libc::ENOTCONN);
}

/// Runs a shell command line in `dir`, returning its stdout; fails the test on a non-zero
/// exit.
fn sh(dir: &Path, script: &str) -> String {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "`{script}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn coreutils_work_on_the_mount() {
    let fx = start(3);
    let mnt = fx.guard.as_ref().unwrap().mountpoint().to_owned();
    let src = tempfile::tempdir().unwrap();
    sh(src.path(), "mkdir -p tree/a/b && head -c 200000 /dev/urandom > tree/a/b/big && echo hi > tree/small && ln -s a/b/big tree/link && chmod 640 tree/small");
    let dest = mnt.display().to_string();
    let from = src.path().display().to_string();
    // Copy in with attributes, compare, copy back out.
    sh(&mnt, &format!("cp -a {from}/tree {dest}/tree"));
    sh(
        &mnt,
        &format!("diff -r --no-dereference {from}/tree {dest}/tree"),
    );
    assert_eq!(sh(&mnt, "stat -c %a tree/small").trim(), "640");
    assert_eq!(sh(&mnt, "readlink tree/link").trim(), "a/b/big");
    assert_eq!(
        sh(&mnt, "find tree | sort").lines().collect::<Vec<_>>(),
        vec![
            "tree",
            "tree/a",
            "tree/a/b",
            "tree/a/b/big",
            "tree/link",
            "tree/small"
        ]
    );
    // Times: touch with a given date, then mv of the whole tree keeps contents and times.
    sh(&mnt, "touch -d '2001-02-03 04:05:06 UTC' tree/small");
    sh(&mnt, "mv tree moved");
    assert_eq!(
        sh(&mnt, "date -u -r moved/small +%FT%T").trim(),
        "2001-02-03T04:05:06"
    );
    sh(&mnt, &format!("cmp {from}/tree/a/b/big moved/a/b/big"));
    assert!(
        sh(&mnt, "du -s moved")
            .split_whitespace()
            .next()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    // Truncate and dd in the middle of a file.
    sh(&mnt, "truncate -s 100 moved/a/b/big && dd if=/dev/zero of=moved/a/b/big bs=10 seek=20 count=1 conv=notrunc status=none");
    assert_eq!(sh(&mnt, "stat -c %s moved/a/b/big").trim(), "210");
    // Recursive removal.
    sh(&mnt, "rm -rf moved");
    assert_eq!(sh(&mnt, "ls -A"), "");
}
