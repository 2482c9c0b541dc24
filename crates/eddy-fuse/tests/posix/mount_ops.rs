//! The FUSE mount over 3 real daemons: coreutils, error cases, unsupported operations, and
//! several processes sharing one file.

use eddy_testkit::{pattern, Mounted};
use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};

fn raw_errno(e: std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

#[test]
fn coreutils_work_on_the_mount() {
    let m = Mounted::start(3);
    // A source tree on local disk: nested dirs, a multi-chunk file, a symlink.
    let src = tempfile::tempdir().unwrap();
    let s = src.path();
    fs::create_dir_all(s.join("tree/a/b")).unwrap();
    fs::write(s.join("tree/a/b/big.bin"), pattern(1, 0, 3 << 20)).unwrap();
    fs::write(s.join("tree/a/small.txt"), "hello eddy\n").unwrap();
    std::os::unix::fs::symlink("b/big.bin", s.join("tree/a/link")).unwrap();
    let sd = s.display();

    m.ok(&format!("cp -r {sd}/tree ./tree"));
    assert_eq!(
        fs::read(m.path("tree/a/b/big.bin")).unwrap(),
        pattern(1, 0, 3 << 20)
    );
    m.ok(&format!("cmp {sd}/tree/a/b/big.bin tree/a/b/big.bin"));
    assert_eq!(m.ok("cat tree/a/small.txt"), "hello eddy\n");
    assert_eq!(m.ok("readlink tree/a/link").trim(), "b/big.bin");
    m.ok("cmp tree/a/link tree/a/b/big.bin");
    let ls = m.ok("ls -l tree/a");
    assert!(
        ls.contains("small.txt") && ls.contains("link -> b/big.bin") && ls.contains("11 "),
        "{ls}"
    );
    let found = m.ok("find tree -type f | sort");
    assert_eq!(found, "tree/a/b/big.bin\ntree/a/small.txt\n");
    assert_eq!(
        m.ok("find tree -name '*.txt' -size -2k").trim(),
        "tree/a/small.txt"
    );
    let du: u64 = m
        .ok("du -sk tree")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(du >= 3072, "du reports {du} KiB for 3 MiB of data");
    m.ok("dd if=/dev/zero of=dd.bin bs=1M count=4 status=none");
    assert_eq!(fs::metadata(m.path("dd.bin")).unwrap().len(), 4 << 20);
    m.ok("dd if=dd.bin of=/dev/null bs=1M status=none");
    m.ok("touch -d '2001-02-03 04:05:06' stamp && touch new");
    assert_eq!(
        m.ok("stat -c %Y stamp").trim(),
        m.ok("date -d '2001-02-03 04:05:06' +%s").trim()
    );
    assert_eq!(
        m.ok("stat -c '%s %F %a' tree/a/small.txt").trim(),
        "11 regular file 644"
    );
    m.ok("ln -s tree/a/small.txt sl && cat sl");
    m.ok("mv tree moved && test ! -e tree && test -f moved/a/b/big.bin");
    m.ok("mv moved/a/small.txt moved/renamed.txt && test -f moved/renamed.txt");
    m.ok(&format!(
        "tar -C {sd} -cf {sd}/t.tar tree && mkdir untar && tar -C untar -xf {sd}/t.tar"
    ));
    m.ok(&format!("diff -r {sd}/tree untar/tree"));
    m.ok("chmod 600 untar/tree/a/small.txt");
    assert_eq!(
        fs::metadata(m.path("untar/tree/a/small.txt"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    m.ok("rm -r moved untar");
    assert_eq!(m.ok("ls -A | sort"), "dd.bin\nnew\nsl\nstamp\n");
    let df = m.ok("df -k .");
    assert!(df.lines().count() == 2, "{df}");
}

#[test]
fn errors_on_the_mount() {
    // The last checks run commands as another user.
    eddy_testkit::require::switch_user();
    let m = Mounted::start(3);
    let p = |s: &str| m.path(s);
    fs::create_dir(p("d")).unwrap();
    fs::write(p("d/f"), b"data").unwrap();
    assert_eq!(
        fs::metadata(p("nope")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(raw_errno(fs::create_dir(p("d")).unwrap_err()), libc::EEXIST);
    assert_eq!(
        raw_errno(
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p("d/f"))
                .unwrap_err()
        ),
        libc::EEXIST
    );
    assert_eq!(
        raw_errno(fs::create_dir(p("d/f/x")).unwrap_err()),
        libc::ENOTDIR
    );
    assert_eq!(
        raw_errno(fs::read_dir(p("d/f")).unwrap_err()),
        libc::ENOTDIR
    );
    assert_eq!(
        raw_errno(fs::OpenOptions::new().write(true).open(p("d")).unwrap_err()),
        libc::EISDIR
    );
    assert_eq!(
        raw_errno(fs::remove_dir(p("d")).unwrap_err()),
        libc::ENOTEMPTY
    );
    assert_eq!(
        raw_errno(fs::remove_file(p("d")).unwrap_err()),
        libc::EISDIR
    );
    assert_eq!(
        raw_errno(fs::write(p(&"n".repeat(256)), b"").unwrap_err()),
        libc::ENAMETOOLONG
    );
    // Hard links (tests/posix/hard_links.rs has them whole): a directory cannot take another name.
    assert_eq!(
        raw_errno(fs::hard_link(p("d"), p("d2")).unwrap_err()),
        libc::EPERM
    );
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p("d/f"))
        .unwrap();
    use std::os::fd::AsRawFd;
    // Locks are served (decision 0008; tests/posix/locks.rs has them across mounts). A flock is a
    // whole-file lock of the open file, so it is dropped before the fcntl lock is taken.
    // SAFETY: flock(2) and fcntl(2) on a descriptor we own.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
    // SAFETY: flock(2) on a descriptor we own.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) }, 0);
    // SAFETY: flock is plain data, for which all zeros is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    // SAFETY: fcntl(2) on a descriptor we own, with a flock record alive for the call.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &fl) };
    assert_eq!(r, 0, "{:?}", std::io::Error::last_os_error());
    // Permissions are enforced for other users.
    fs::write(p("private"), b"x").unwrap();
    fs::set_permissions(p("private"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(m.mnt.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let (ok, _, err) = m.sh("setpriv --reuid=65534 --regid=65534 --clear-groups cat private");
    assert!(!ok && err.contains("Permission denied"), "{err}");
    let (ok, _, err) = m.sh("setpriv --reuid=65534 --regid=65534 --clear-groups touch d/new");
    assert!(!ok && err.contains("Permission denied"), "{err}");
    fs::set_permissions(p("private"), fs::Permissions::from_mode(0o644)).unwrap();
    m.ok("setpriv --reuid=65534 --regid=65534 --clear-groups cat private");
    m.ok("chown 65534:65534 d && setpriv --reuid=65534 --regid=65534 --clear-groups touch d/new");
    assert_eq!(fs::metadata(p("d/new")).unwrap().uid(), 65534);
}

#[test]
fn large_directory_and_truncate_through_the_mount() {
    let m = Mounted::start(3);
    // 3,000 entries created through the mount, 100,000 more through the library (faster to
    // make), all listed through the mount, page by page.
    fs::create_dir(m.path("many")).unwrap();
    for i in 0..3000 {
        fs::File::create(m.path(&format!("many/f{i:05}"))).unwrap();
    }
    const LIB: usize = 100_000;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = m.cluster.client().await;
        let names: Vec<String> = (0..LIB).map(|i| format!("/many/g{i:06}")).collect();
        for batch in names.chunks(500) {
            let creates = batch
                .iter()
                .map(|p| c.create(p, 0o644, true, eddy_client::Creds::root()));
            for r in futures::future::join_all(creates).await {
                r.unwrap();
            }
        }
    });
    let names: Vec<String> = fs::read_dir(m.path("many"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 3000 + LIB);
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 3000 + LIB, "no duplicates");
    assert_eq!(
        m.ok("ls -f many | grep -c -v '^[.]'").trim(),
        (3000 + LIB).to_string()
    );

    let cs = m.cluster.dep.config.chunk_size;
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("t"))
        .unwrap();
    let data = pattern(2, 0, (3 * cs) as usize);
    f.write_all_at(&data, 0).unwrap();
    f.set_len(cs + 10).unwrap();
    f.set_len(2 * cs).unwrap();
    let mut back = Vec::new();
    fs::File::open(m.path("t"))
        .unwrap()
        .read_to_end(&mut back)
        .unwrap();
    assert_eq!(back.len() as u64, 2 * cs);
    assert_eq!(&back[..(cs + 10) as usize], &data[..(cs + 10) as usize]);
    assert!(back[(cs + 10) as usize..].iter().all(|&b| b == 0));
    // Sparse: a write far out leaves a hole of zeros.
    let s = fs::File::create(m.path("sparse")).unwrap();
    s.write_all_at(b"end", 50 * cs).unwrap();
    let mut buf = vec![1u8; 4096];
    s.read_at(&mut buf, 10 * cs).unwrap_or(0);
    let r = fs::File::open(m.path("sparse")).unwrap();
    assert_eq!(r.read_at(&mut buf, 10 * cs).unwrap(), 4096);
    assert!(buf.iter().all(|&b| b == 0));
    assert_eq!(fs::metadata(m.path("sparse")).unwrap().len(), 50 * cs + 3);
}

#[test]
fn processes_share_one_file_through_the_mount() {
    let m = Mounted::start(3);
    // 4 dd processes write interleaved 1 MiB blocks of one file at once.
    let src = tempfile::tempdir().unwrap();
    for r in 0..4 {
        fs::write(src.path().join(format!("r{r}")), pattern(r, 0, 1 << 20)).unwrap();
    }
    fs::File::create(m.path("shared")).unwrap();
    let mut script = String::new();
    for r in 0..4 {
        for b in 0..3 {
            let blk = b * 4 + r;
            script += &format!(
                "dd if={}/r{r} of=shared bs=1M seek={blk} conv=notrunc status=none & ",
                src.path().display()
            );
        }
    }
    m.ok(&format!("{script} wait"));
    let all = fs::read(m.path("shared")).unwrap();
    assert_eq!(all.len(), 12 << 20);
    for (blk, data) in all.chunks(1 << 20).enumerate() {
        assert_eq!(
            data,
            &pattern((blk % 4) as u64, 0, 1 << 20)[..],
            "block {blk}"
        );
    }
    // 4 processes append 200 lines each at once: every line arrives whole.
    m.ok("for p in 1 2 3 4; do (for i in $(seq 1 200); do echo \"proc$p line$i padding-padding-padding\" >> log; done) & done; wait");
    let text = fs::read_to_string(m.path("log")).unwrap();
    assert_eq!(text.lines().count(), 800);
    for p in 1..=4 {
        let mine: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("proc{p} ")))
            .collect();
        assert_eq!(mine.len(), 200);
        for (i, l) in mine.iter().enumerate() {
            assert_eq!(*l, format!("proc{p} line{} padding-padding-padding", i + 1));
        }
    }
    // And a handle kept open sees a write made through another handle.
    let mut a = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("x"))
        .unwrap();
    let b = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("x"))
        .unwrap();
    a.write_all(b"0123456789").unwrap();
    let mut buf = [0u8; 10];
    assert_eq!(b.read_at(&mut buf, 0).unwrap(), 10);
    assert_eq!(&buf, b"0123456789");
}

#[test]
fn a_file_unlinked_while_open_lives_until_closed() {
    let m = Mounted::start(3);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lib = rt.block_on(m.cluster.client());
    let names = |dir: &str| -> Vec<String> {
        rt.block_on(async {
            let mut rd = lib.readdir(dir, None).unwrap();
            let mut out = Vec::new();
            while let Some(page) = rd.next_page().await.unwrap() {
                out.extend(page.into_iter().map(|e| e.name));
            }
            out
        })
    };
    fs::create_dir(m.path("tmp")).unwrap();
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("tmp/scratch"))
        .unwrap();
    f.write_all(&pattern(3, 0, 300_000)).unwrap();
    fs::remove_file(m.path("tmp/scratch")).unwrap();
    // Gone from the namespace as users see it...
    assert_eq!(
        fs::metadata(m.path("tmp/scratch")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(
        fs::read_dir(m.path("tmp")).unwrap().next().is_none(),
        "listing shows nothing"
    );
    // ...but alive through the descriptor: more writes, reads, fstat.
    f.write_all(&pattern(4, 300_000, 1000)).unwrap();
    let mut back = vec![0u8; 301_000];
    f.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(&back[..300_000], &pattern(3, 0, 300_000)[..]);
    assert_eq!(&back[300_000..], &pattern(4, 300_000, 1000)[..]);
    assert_eq!(f.metadata().unwrap().len(), 301_000);
    assert_eq!(
        names("/tmp").len(),
        1,
        "kept under a hidden name until closed"
    );
    // The last close removes it for good, data included.
    drop(f);
    eddy_testkit::eventually::eventually_within(
        std::time::Duration::from_secs(10),
        "the unlinked file is removed at its last close",
        || names("/tmp").is_empty().then_some(()),
    );
    fs::remove_dir(m.path("tmp")).unwrap();
    // A file unlinked while closed goes at once, as before.
    fs::write(m.path("plain"), b"x").unwrap();
    fs::remove_file(m.path("plain")).unwrap();
    assert!(names("/").is_empty());
}

#[test]
fn listings_carry_attributes_including_unpublished_sizes() {
    // Sizes are published only at close here, so a listing from the daemons alone would show
    // the file being written at the size of its first write.
    let config = eddy_config::Config {
        size_update_ms: 3_600_000,
        ..eddy_testkit::test_config()
    };
    let m = Mounted::start_with(3, config);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lib = rt.block_on(m.cluster.client());
    let requests = || -> u64 {
        rt.block_on(lib.daemon_status())
            .into_iter()
            .map(|(_, s)| s.unwrap().requests)
            .sum()
    };
    fs::create_dir(m.path("d")).unwrap();
    for i in 0..1000 {
        fs::write(m.path(&format!("d/f{i:04}")), vec![7u8; i % 100]).unwrap();
    }
    let mut w = fs::File::create(m.path("d/growing")).unwrap();
    w.write_all(&[1u8; 1000]).unwrap();
    w.write_all(&[2u8; 4000]).unwrap();
    // Listing with attributes: sizes right, and no lookup per entry.
    let before = requests();
    let ls = m.ok("ls -l d");
    let used = requests() - before;
    assert!(
        ls.lines()
            .any(|l| l.contains(" 99 ") && l.ends_with("f0099")),
        "{}",
        &ls[..200.min(ls.len())]
    );
    let growing = ls.lines().find(|l| l.ends_with("growing")).unwrap();
    assert!(
        growing.contains(" 5000 "),
        "the writer's unpublished size is listed: {growing}"
    );
    // 3 status requests per count, readdir pages from 3 daemons, one stat of the file being
    // written: far fewer than the 1001 lookups of a listing without attributes.
    assert!(used < 200, "ls -l of 1001 entries cost {used} requests");
    assert_eq!(fs::metadata(m.path("d/growing")).unwrap().len(), 5000);
    drop(w);
}

#[test]
fn two_mounts_see_each_others_writes() {
    // Two mounts of one deployment, as two nodes of a job have.
    let a = Mounted::start(3);
    let b = a.another_mount();
    let data = pattern(5, 0, 3 << 20);
    fs::write(a.path("from-a"), &data).unwrap();
    // Close-to-open: after the writer's close, an open on the other mount sees every byte.
    assert_eq!(fs::read(b.path("from-a")).unwrap(), data);
    // And the other way: a rewrite through b is seen by a's next open.
    let w = fs::OpenOptions::new()
        .write(true)
        .open(b.path("from-a"))
        .unwrap();
    w.write_all_at(b"rewritten by b", 1000).unwrap();
    drop(w);
    let back = fs::read(a.path("from-a")).unwrap();
    assert_eq!(&back[1000..1014], b"rewritten by b");
    assert_eq!(back.len(), data.len());
    // Appenders on both mounts at once: every line arrives whole, none lost.
    let mut script = String::new();
    for (m, tag) in [(a.mnt.path(), "a"), (b.mnt.path(), "b")] {
        for p in 0..2 {
            script += &format!(
                "(for i in $(seq 1 150); do echo \"{tag}{p} line$i ....................\" >> {}/log; done) & ",
                m.display()
            );
        }
    }
    a.ok(&format!("{script} wait"));
    let text = fs::read_to_string(b.path("log")).unwrap();
    assert_eq!(text.lines().count(), 600);
    for tag in ["a0", "a1", "b0", "b1"] {
        let mine: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{tag} ")))
            .collect();
        assert_eq!(mine.len(), 150, "{tag}");
        for (i, l) in mine.iter().enumerate() {
            assert_eq!(*l, format!("{tag} line{} ....................", i + 1));
        }
    }
    // Metadata: a directory made on one mount is listed on the other.
    fs::create_dir(a.path("made-on-a")).unwrap();
    fs::write(a.path("made-on-a/f"), b"x").unwrap();
    let names: Vec<String> = fs::read_dir(b.path("made-on-a"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["f".to_string()]);
}
