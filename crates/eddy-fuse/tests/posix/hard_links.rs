//! Hard links (decision 0009) over 3 real daemons: through the client library (link counts,
//! one inode through every name, data removed with the last name, rename over a link, names
//! whose records live on different daemons, errors as POSIX specifies, persistence across a
//! kill -9), and through a real FUSE mount as root and as an unprivileged user, with the tools
//! that make hard links: tar, rsync -aH, cp -al and git.

use eddy_client::{Client, Creds, FileKind, SetAttr, XattrSet};
use eddy_placement::Placement;
use eddy_testkit::{errno, Cluster, Mounted};

/// Runs a shell command as the unprivileged uid/gid 65534 with no supplementary groups.
const AS_NOBODY: &str = "setpriv --reuid=65534 --regid=65534 --clear-groups";

/// Data files the daemons hold for `file_id` (one per daemon holding chunks of it, in one
/// of the hashed subdirectories of `chunks/`: decision 0015).
fn chunk_files(cl: &Cluster, file_id: u128) -> usize {
    (0..cl.dep.daemons.len())
        .map(|i| {
            std::fs::read_dir(cl.root_of(i).join("chunks"))
                .map(|d| {
                    d.filter_map(Result::ok)
                        .filter(|e| e.path().join(format!("{file_id:032x}")).exists())
                        .count()
                })
                .unwrap_or(0)
        })
        .sum()
}

/// A name in `dir` whose metadata owner is not `avoid`.
fn name_owned_elsewhere(dir: &str, avoid: u32) -> String {
    let p = Placement::new(vec![0, 1, 2]).unwrap();
    (0..)
        .map(|i| format!("{dir}/n{i}"))
        .find(|path| p.meta_owner(path) != avoid)
        .unwrap()
}

async fn write_file(c: &Client, path: &str, data: &[u8]) -> u128 {
    let f = c.create(path, 0o644, true, Creds::root()).await.unwrap();
    c.pwrite(&f, 0, data).await.unwrap();
    c.close(&f).await.unwrap();
    f.file_id()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_share_one_file_and_its_data_goes_with_the_last() {
    let cl = Cluster::start_with(3, eddy_testkit::shared_config());
    let c = cl.client().await;
    let root = Creds::root();
    c.mkdir("/a", 0o755, root).await.unwrap();
    c.mkdir("/b", 0o755, root).await.unwrap();
    let data = eddy_testkit::pattern(1, 0, 300_000);
    let id = write_file(&c, "/a/f", &data).await;
    let placement = Placement::new(vec![0, 1, 2]).unwrap();
    // The second name's record lives on another daemon than the first's.
    let other = name_owned_elsewhere("/b", placement.meta_owner("/a/f"));
    let linked = c.link("/a/f", &other, root).await.unwrap();
    assert_eq!((linked.nlink, linked.file_id), (2, id));
    let third = c.link(&other, "/a/g", root).await.unwrap();
    assert_eq!(third.nlink, 3);
    for name in ["/a/f", other.as_str(), "/a/g"] {
        let i = c.stat(name).await.unwrap();
        assert_eq!(
            (i.file_id, i.nlink, i.size),
            (id, 3, data.len() as u64),
            "{name}"
        );
        assert_eq!(eddy_testkit::read_all(&c, name).await, data, "{name}");
    }
    // Writes, attributes and extended attributes through one name show through the others.
    let f = c
        .open("/a/g", libc::O_WRONLY | libc::O_APPEND, 0, root)
        .await
        .unwrap();
    c.pwrite(&f, 0, b"tail").await.unwrap();
    c.close(&f).await.unwrap();
    let chmod = SetAttr {
        mode: Some(0o600),
        ..SetAttr::default()
    };
    c.setattr(&other, chmod, root).await.unwrap();
    c.setxattr("/a/f", "user.tag", b"v", XattrSet::Any, root)
        .await
        .unwrap();
    let via_f = c.stat("/a/f").await.unwrap();
    assert_eq!((via_f.size, via_f.mode), (data.len() as u64 + 4, 0o600));
    assert_eq!(c.getxattr("/a/g", "user.tag", root).await.unwrap(), b"v");
    // A listing shows the current inode of every name.
    let mut rd = c.readdir("/a", None).unwrap();
    let mut listed = Vec::new();
    while let Some(page) = rd.next_page().await.unwrap() {
        listed.extend(
            page.into_iter()
                .map(|e| (e.name, e.inode.nlink, e.inode.size)),
        );
    }
    let size = data.len() as u64 + 4;
    assert_eq!(listed, [("f".into(), 3, size), ("g".into(), 3, size)]);
    // Names go one by one; the data stays until the last.
    c.unlink("/a/f", root).await.unwrap();
    assert_eq!(c.stat("/a/g").await.unwrap().nlink, 2);
    c.unlink(&other, root).await.unwrap();
    assert_eq!(c.stat("/a/g").await.unwrap().nlink, 1);
    assert!(chunk_files(&cl, id) > 0);
    assert_eq!(eddy_testkit::read_all(&c, "/a/g").await.len() as u64, size);
    c.unlink("/a/g", root).await.unwrap();
    assert_eq!(chunk_files(&cl, id), 0, "the last name took the data");
    assert_eq!(errno(c.stat("/a/g").await), libc::ENOENT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_over_and_between_names() {
    let cl = Cluster::start_with(3, eddy_testkit::shared_config());
    let c = cl.client().await;
    let root = Creds::root();
    let x = write_file(&c, "/x", b"xxxx").await;
    let y = write_file(&c, "/y", b"yyyy").await;
    c.link("/y", "/y2", root).await.unwrap();
    // Two names of one file: rename does nothing, both stay.
    c.link("/x", "/x2", root).await.unwrap();
    c.rename("/x", "/x2", root).await.unwrap();
    assert_eq!(c.stat("/x").await.unwrap().nlink, 2);
    assert_eq!(c.stat("/x2").await.unwrap().nlink, 2);
    // A file renamed over one name of a linked file: that file loses a name, not its data.
    c.rename("/x", "/y", root).await.unwrap();
    assert_eq!(eddy_testkit::read_all(&c, "/y").await, b"xxxx");
    assert_eq!(c.stat("/y").await.unwrap().file_id, x);
    assert_eq!(c.stat("/y2").await.unwrap().nlink, 1);
    assert_eq!(eddy_testkit::read_all(&c, "/y2").await, b"yyyy");
    assert!(chunk_files(&cl, y) > 0);
    // A name renamed into a directory keeps pointing at the file.
    c.mkdir("/d", 0o755, root).await.unwrap();
    c.rename("/x2", "/d/x3", root).await.unwrap();
    assert_eq!(c.stat("/d/x3").await.unwrap().nlink, 2);
    c.rename("/d", "/e", root).await.unwrap();
    assert_eq!(c.stat("/e/x3").await.unwrap().file_id, x);
    c.unlink("/y", root).await.unwrap();
    assert_eq!(c.stat("/e/x3").await.unwrap().nlink, 1);
    assert_eq!(eddy_testkit::read_all(&c, "/e/x3").await, b"xxxx");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_errors_as_posix_says() {
    let backend = tempfile::tempdir().unwrap();
    std::fs::write(backend.path().join("in_pfs"), b"p").unwrap();
    let config = eddy_config::Config {
        links: vec![eddy_config::Link {
            prefix: "/pfs".into(),
            backend: backend.path().to_path_buf(),
        }],
        ..eddy_testkit::shared_config()
    };
    let cl = Cluster::start_with(3, config);
    let c = cl.client().await;
    let root = Creds::root();
    c.mkdir("/dir", 0o755, root).await.unwrap();
    write_file(&c, "/f", b"f").await;
    write_file(&c, "/taken", b"t").await;
    assert_eq!(errno(c.link("/dir", "/dir2", root).await), libc::EPERM);
    assert_eq!(errno(c.link("/missing", "/m2", root).await), libc::ENOENT);
    assert_eq!(errno(c.link("/f", "/nodir/f", root).await), libc::ENOENT);
    assert_eq!(errno(c.link("/f", "/taken/f", root).await), libc::ENOTDIR);
    // An existing new name: EEXIST, and the count is as it was.
    assert_eq!(errno(c.link("/f", "/taken", root).await), libc::EEXIST);
    assert_eq!(c.stat("/f").await.unwrap().nlink, 1);
    assert_eq!(errno(c.link("/f", "/pfs/f", root).await), libc::EXDEV);
    // Under one linked prefix: a link there and in the backend (decision 0029).
    assert_eq!(
        c.link("/pfs/in_pfs", "/pfs/again", root)
            .await
            .unwrap()
            .nlink,
        2
    );
    {
        use std::os::unix::fs::MetadataExt;
        let (a, b) = (
            std::fs::metadata(backend.path().join("in_pfs")).unwrap(),
            std::fs::metadata(backend.path().join("again")).unwrap(),
        );
        assert_eq!(
            (a.ino(), a.nlink()),
            (b.ino(), 2),
            "one backend file, two names"
        );
    }
    // A new name the backend has already: EEXIST.
    std::fs::write(backend.path().join("there"), b"t").unwrap();
    assert_eq!(
        errno(c.link("/pfs/in_pfs", "/pfs/there", root).await),
        libc::EEXIST
    );
    // Symlinks and special files take more names like files.
    c.symlink("/f", "/sym", root).await.unwrap();
    assert_eq!(c.link("/sym", "/sym2", root).await.unwrap().nlink, 2);
    assert_eq!(c.readlink("/sym2").await.unwrap(), "/f");
    c.mknod("/fifo", FileKind::Fifo, 0o600, 0, root)
        .await
        .unwrap();
    let fifo = c.link("/fifo", "/fifo2", root).await.unwrap();
    assert_eq!((fifo.kind, fifo.nlink), (FileKind::Fifo, 2));
    // An unprivileged caller links what it owns or may read and write; anything else is
    // EPERM (Linux's protected_hardlinks), and it needs write access to the new directory.
    let user = Creds::user(1000, 1000);
    c.mkdir("/open", 0o777, root).await.unwrap();
    assert_eq!(errno(c.link("/f", "/open/f", user).await), libc::EPERM);
    c.setattr(
        "/f",
        SetAttr {
            mode: Some(0o666),
            ..SetAttr::default()
        },
        root,
    )
    .await
    .unwrap();
    c.link("/f", "/open/f", user).await.unwrap();
    assert_eq!(errno(c.link("/f", "/dir/f", user).await), libc::EACCES);
    // A file in a directory the caller may not search is out of its reach.
    c.mkdir("/private", 0o700, root).await.unwrap();
    write_file(&c, "/private/p", b"p").await;
    assert_eq!(
        errno(c.link("/private/p", "/open/p", user).await),
        libc::EACCES
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_and_counts_survive_kill_9_of_every_daemon() {
    let mut cl = Cluster::start_with(3, eddy_testkit::shared_config());
    let data = eddy_testkit::pattern(7, 0, 200_000);
    let id = {
        let c = cl.client().await;
        let id = write_file(&c, "/f", &data).await;
        c.link("/f", "/g", Creds::root()).await.unwrap();
        c.link("/g", "/h", Creds::root()).await.unwrap();
        c.sync_all().await.unwrap();
        id
    };
    cl.kill_and_restart_all();
    let c = cl.client().await;
    for name in ["/f", "/g", "/h"] {
        let i = c.stat(name).await.unwrap();
        assert_eq!((i.file_id, i.nlink), (id, 3), "{name}");
        assert_eq!(eddy_testkit::read_all(&c, name).await, data, "{name}");
    }
}

fn mounted() -> Mounted {
    eddy_testkit::require::root("switch to an unprivileged user");
    eddy_testkit::require::switch_user();
    eddy_testkit::require::programs(
        &["tar", "rsync", "cp", "git", "stat"],
        "tar rsync coreutils git",
    );
    Mounted::start_with(3, eddy_testkit::shared_config())
}

/// `stat -c '%i %h'` of each name: inode number and link count.
fn ino_and_links(m: &Mounted, names: &str) -> Vec<String> {
    m.ok(&format!("stat -c '%i %h' {names}"))
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn hard_links_through_the_mount_as_root_and_as_a_user() {
    let m = mounted();
    m.ok("echo hello > a && mkdir d && ln a d/b && ln d/b c");
    let seen = ino_and_links(&m, "a d/b c");
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|s| *s == seen[0]), "{seen:?}");
    assert!(seen[0].ends_with(" 3"), "{seen:?}");
    // Written through one name, read through another (one page cache for the kernel).
    m.ok("echo world >> c");
    assert_eq!(m.ok("cat d/b"), "hello\nworld\n");
    m.ok("rm a");
    assert_eq!(ino_and_links(&m, "c")[0], seen[0].replace(" 3", " 2"));
    let (ok, _, err) = m.sh("ln d d2");
    assert!(
        !ok && err.contains("hard link not allowed for directory"),
        "{err}"
    );
    // An unprivileged user links its own files; a file of root's it may not write is
    // refused by the kernel's protected_hardlinks (EPERM).
    m.ok("mkdir -m 1777 tmp");
    m.ok(&format!(
        "{AS_NOBODY} sh -c 'echo mine > tmp/u && ln tmp/u tmp/u2 && stat -c %h tmp/u2'"
    ));
    assert_eq!(m.ok("stat -c '%h %U' tmp/u"), "2 nobody\n");
    let (ok, _, err) = m.sh(&format!("{AS_NOBODY} ln c tmp/steal"));
    assert!(!ok && err.contains("Operation not permitted"), "{err}");
}

#[test]
fn tar_rsync_cp_and_git_keep_hard_links_on_the_mount() {
    let m = mounted();
    m.ok("mkdir src src/sub && for i in 1 2 3; do head -c 150000 /dev/urandom > src/f$i; done");
    m.ok("ln src/f1 src/l1 && ln src/f2 src/sub/l2");
    // tar: the second name is stored as a hard-link member, and extracted as a link.
    let listing = m.ok("tar cf ../t.tar src && tar tvf ../t.tar");
    assert_eq!(listing.matches("link to").count(), 2, "{listing}");
    m.ok("mkdir x && tar xf ../t.tar -C x && rm ../t.tar");
    // rsync -aH and cp -al, into the mount.
    m.ok("rsync -aH src/ rs/ && cp -al src cpal");
    for (a, b) in [
        ("x/src/f1", "x/src/l1"),
        ("x/src/f2", "x/src/sub/l2"),
        ("rs/f1", "rs/l1"),
        ("rs/f2", "rs/sub/l2"),
        ("src/f1", "cpal/l1"),
    ] {
        let s = ino_and_links(&m, &format!("{a} {b}"));
        assert_eq!(s[0], s[1], "{a} and {b}");
        m.ok(&format!(
            "cmp {a} {b} && cmp {a} src/{}",
            a.rsplit('/').next().unwrap()
        ));
    }
    assert_eq!(ino_and_links(&m, "src/f1")[0].split(' ').nth(1), Some("4"));
    // git: a local clone hard-links the object store; both repositories stay sound.
    m.ok(
        "git init -q repo && cd repo && git config user.email u@e && git config user.name u \
         && cp -r ../src . && git add . && git commit -qm one && git gc -q",
    );
    m.ok("git clone -q repo clone && cd clone && git fsck --strict && cd ../repo && git fsck --strict");
    let packs = m.ok("stat -c %h clone/.git/objects/pack/*.pack");
    assert_eq!(packs.trim(), "2", "the clone links the pack");
    m.ok(
        "cd repo && echo change >> src/f1 && git commit -qam two && git gc -q && git fsck --strict",
    );
    m.ok("cd clone && git pull -q && git log --oneline | wc -l | grep -qx 2 && git fsck --strict");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_link_counts_follow_their_subdirectories() {
    let cl = Cluster::start_with(3, eddy_testkit::shared_config());
    let c = cl.client().await;
    let root = Creds::root();
    let links = |p: &'static str| {
        let c = c.clone();
        async move { c.stat(p).await.unwrap().nlink }
    };
    for d in ["/p", "/q", "/p/a", "/p/b", "/q/empty"] {
        c.mkdir(d, 0o755, root).await.unwrap();
    }
    write_file(&c, "/p/file", b"f").await;
    assert_eq!((links("/p").await, links("/q").await), (4, 3));
    assert_eq!(links("/p/a").await, 2);
    // Moved to another parent: its ".." goes along.
    c.rename("/p/a", "/q/a", root).await.unwrap();
    assert_eq!((links("/p").await, links("/q").await), (3, 4));
    // Over an empty directory of another parent: that one is gone, this one arrives.
    c.rename("/p/b", "/q/empty", root).await.unwrap();
    assert_eq!((links("/p").await, links("/q").await), (2, 4));
    // Renamed within its parent: no change; removed: one less.
    c.rename("/q/a", "/q/a2", root).await.unwrap();
    assert_eq!(links("/q").await, 4);
    c.rmdir("/q/a2", root).await.unwrap();
    assert_eq!(links("/q").await, 3);
    // A file moving between directories changes no count.
    c.rename("/p/file", "/q/file", root).await.unwrap();
    assert_eq!((links("/p").await, links("/q").await), (2, 3));
}
