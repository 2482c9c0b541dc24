//! Writes reaching the backend: write-through and stage-out, and fsync'd dirty data across kill -9.

use super::*;

/// Namespace operations and writes through the mount and the library: mkdir, unlink, rmdir,
/// rename and chmod reach the backend at once; after stage-out the backend tree equals,
/// byte for byte and mode for mode, the same operations done on a local copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage_out_makes_the_backend_equal_to_what_was_written() {
    let backend = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    let expect_dir = tempfile::tempdir().unwrap();
    let b = backend.path();
    // The backend's initial contents.
    for d in ["old/emptydir", "olddir/in"] {
        std::fs::create_dir_all(b.join(d)).unwrap();
    }
    for (name, size) in [
        ("old/a.bin", 300_000),
        ("old/b.bin", 150_000),
        ("old/c.bin", 1000),
        ("old/t.bin", 500_000),
        ("old/grow.bin", 70_000),
        ("old/ren.bin", 140_000),
        ("old/gone.bin", 10),
        ("old/app.txt", 65_536 + 10),
        ("old/sg.bin", 500_000),
        ("old/over.bin", 4 * MIB),
        ("old/victim.bin", 300_000),
        ("olddir/x", 80_000),
        ("olddir/in/y", 5),
    ] {
        std::fs::write(b.join(name), random_bytes(size)).unwrap();
    }
    // What the mount copies in.
    let tree = src.path().join("tree");
    std::fs::create_dir_all(tree.join("sub/deeper")).unwrap();
    for (name, size) in [
        ("f1", 1),
        ("f2", 64 * KIB),
        ("f3", 3 * MIB + 7),
        ("sub/s1", 200_001),
        ("sub/deeper/d1", 65_535),
        ("sub/deeper/zero", 0),
    ] {
        std::fs::write(tree.join(name), random_bytes(size)).unwrap();
    }
    std::fs::write(src.path().join("patch"), random_bytes(150_000)).unwrap();
    let expect = expect_dir.path().join("b");
    copy_tree(b, &expect);

    let m = Mounted::start_with(3, linked(&[("/", b)]));
    let c = m.cluster.client().await;
    // The same commands on the mount and on the local copy.
    let commands = r#"
cp -r "$SRC/tree" tree
dd if="$SRC/patch" of=old/a.bin bs=4096 seek=70001 oflag=seek_bytes conv=notrunc status=none
truncate -s 100000 old/t.bin
truncate -s 1000000 old/grow.bin
printf 'appended' >> old/app.txt
cat old/sg.bin > /dev/null
truncate -s 1000 old/sg.bin
truncate -s 300000 old/sg.bin
cp "$SRC/tree/f3" old/over.bin
dd if="$SRC/patch" of=tree/sparse bs=1000 count=1 seek=200 status=none
mv tree/sparse old/victim.bin
touch tree/empty1 old/empty2
: > empty3
mkdir -p newdir/sub
mkdir -m 777 open
ln -s old/a.bin link
mv old/ren.bin old/renamed.bin
mv tree/f1 tree/f1-moved
mv olddir olddir2
mv tree/sub tree/sub2
chmod 600 old/a.bin
chmod 750 newdir
chmod 640 tree/f2
rm old/gone.bin
rmdir old/emptydir
"#;
    script(m.mnt.path(), src.path(), commands);
    script(&expect, src.path(), commands);

    // Write-through: namespace changes are in the backend before any stage-out.
    let is_dir = |p: &str| b.join(p).symlink_metadata().is_ok_and(|m| m.is_dir());
    let exists = |p: &str| b.join(p).symlink_metadata().is_ok();
    for d in [
        "newdir/sub",
        "open",
        "olddir2",
        "olddir2/in",
        "tree",
        "tree/sub2/deeper",
    ] {
        assert!(
            is_dir(d),
            "directory {d} is not in the backend before stage-out"
        );
    }
    for gone in [
        "olddir",
        "old/ren.bin",
        "old/gone.bin",
        "old/emptydir",
        "tree/sub",
    ] {
        assert!(!exists(gone), "{gone} is still in the backend");
    }
    assert!(exists("old/renamed.bin") && exists("olddir2/x") && exists("olddir2/in/y"));
    assert_eq!(
        std::fs::read_link(b.join("link")).unwrap(),
        Path::new("old/a.bin")
    );
    let mode = |p: &str| b.join(p).metadata().unwrap().mode() & 0o7777;
    assert_eq!(mode("old/a.bin"), 0o600, "chmod of a backend file");
    assert_eq!(mode("newdir"), 0o750, "chmod of a directory");
    assert_eq!(mode("open"), 0o777, "mkdir -m 777");
    assert_eq!(
        b.join("old/t.bin").metadata().unwrap().len(),
        100_000,
        "truncate of a backend file"
    );

    // Eddy itself shows the result of the commands.
    same_tree(m.mnt.path(), &expect);

    // The library: a new file renamed and chmod'ed, a backend file partly overwritten, one
    // truncated, one removed; the same on the local copy.
    let me = Creds::root();
    c.mkdir("/lib", 0o755, me).await.unwrap();
    std::fs::create_dir(expect.join("lib")).unwrap();
    let x = random_bytes(200_000);
    write_all(&c, "/lib/x.bin", &x, false).await;
    std::fs::write(expect.join("lib/x.bin"), &x).unwrap();
    c.rename("/lib/x.bin", "/lib/y.bin", me).await.unwrap();
    std::fs::rename(expect.join("lib/x.bin"), expect.join("lib/y.bin")).unwrap();
    let attr = SetAttr {
        mode: Some(0o604),
        ..SetAttr::default()
    };
    c.setattr("/lib/y.bin", attr, me).await.unwrap();
    std::fs::set_permissions(
        expect.join("lib/y.bin"),
        std::fs::Permissions::from_mode(0o604),
    )
    .unwrap();
    let patch = random_bytes(1000);
    let f = c.open("/old/b.bin", libc::O_RDWR, 0, me).await.unwrap();
    c.pwrite(&f, 10, &patch).await.unwrap();
    c.close(&f).await.unwrap();
    {
        use std::os::unix::fs::FileExt;
        let e = std::fs::File::options()
            .write(true)
            .open(expect.join("old/b.bin"))
            .unwrap();
        e.write_all_at(&patch, 10).unwrap();
    }
    c.truncate("/old/renamed.bin", 5, me).await.unwrap();
    std::fs::File::options()
        .write(true)
        .open(expect.join("old/renamed.bin"))
        .unwrap()
        .set_len(5)
        .unwrap();
    c.unlink("/old/c.bin", me).await.unwrap();
    std::fs::remove_file(expect.join("old/c.bin")).unwrap();
    assert!(!exists("old/c.bin"), "unlink is written through");

    let results = c.stage_out(&[], &|_| {}).await.unwrap();
    all_ok(&results);
    let paths: Vec<&str> = results.iter().map(|r| r.path.as_str()).collect();
    for p in ["/tree/f3", "/old/a.bin", "/lib/y.bin", "/old/b.bin"] {
        assert!(paths.contains(&p), "{p} missing from the results {paths:?}");
    }
    same_tree(b, &expect);
    // Stage-out set the backend files' mtimes to Eddy's.
    for p in ["tree/f3", "old/a.bin", "lib/y.bin", "tree/empty1"] {
        let i = c.stat(&format!("/{p}")).await.unwrap();
        let md = b.join(p).metadata().unwrap();
        assert_eq!(
            (md.mtime(), md.mtime_nsec() as u32),
            (i.mtime.sec, i.mtime.nsec),
            "mtime of {p}"
        );
    }
    // A second stage-out has nothing left to write.
    let again = c.stage_out(&[], &|_| {}).await.unwrap();
    all_ok(&again);
    assert_eq!(again.iter().map(|r| r.bytes).sum::<u64>(), 0, "{again:?}");
    assert_eq!(total(&c, |t| t.dirty_bytes).await, 0);
    same_tree(b, &expect);
}

/// Dirty data made durable by fsync survives kill -9 of every daemon and a restart, and a
/// stage-out afterwards writes all of it to the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsynced_dirty_data_survives_kill_9_and_reaches_the_backend() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    let mut base = random_bytes(500_000);
    std::fs::write(b.join("base.bin"), &base).unwrap();
    let mut cl = Cluster::start_with(3, linked(&[("/", b)]));
    let mut expect: Vec<(String, Vec<u8>)> = Vec::new();
    {
        let c = cl.client().await;
        c.mkdir("/k", 0o755, Creds::root()).await.unwrap();
        for (i, size) in [0, 1, 65_536, 200_003, MIB + 17].into_iter().enumerate() {
            let data = random_bytes(size);
            write_all(&c, &format!("/k/new{i}"), &data, true).await;
            expect.push((format!("k/new{i}"), data));
        }
        let f = c
            .open("/base.bin", libc::O_RDWR, 0, Creds::root())
            .await
            .unwrap();
        let patch = random_bytes(50_000);
        c.pwrite(&f, 100_000, &patch).await.unwrap();
        base[100_000..150_000].copy_from_slice(&patch);
        c.pwrite(&f, 600_000, b"0123456789").await.unwrap();
        base.resize(600_000, 0);
        base.extend_from_slice(b"0123456789");
        c.fsync(&f).await.unwrap();
        expect.push(("base.bin".into(), base));
        assert!(total(&c, |t| t.dirty_bytes).await > 0);
    }
    cl.kill_and_restart_all();
    let c = cl.client().await;
    assert!(
        total(&c, |t| t.dirty_bytes).await > 0,
        "dirty chunks are known after the restart"
    );
    for (p, want) in &expect {
        same(
            &eddy_testkit::read_all(&c, &format!("/{p}")).await,
            want,
            &format!("{p} after restart"),
        );
    }
    let results = c.stage_out(&[], &|_| {}).await.unwrap();
    all_ok(&results);
    for (p, want) in &expect {
        let got = std::fs::read(b.join(p)).unwrap_or_else(|e| panic!("backend {p}: {e}"));
        same(&got, want, &format!("backend {p} after stage-out"));
    }
    assert_eq!(total(&c, |t| t.dirty_bytes).await, 0);
}

/// A linked prefix's backend path may pass the kernel's PATH_MAX (4096 bytes) as the
/// namespace path may: the daemons reach such backend paths hop by hop through directory
/// descriptors. A tree built through the library to 6 KiB of backend path is made in the
/// backend (mkdir, create, write, rename, link, chmod, setxattr, stage-out), and a tree as
/// deep made in the backend directly is imported with its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_paths_past_path_max_work() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    let cl = Cluster::start_with(3, linked(&[("/l", b)]));
    let c = cl.client().await;
    let me = Creds::root();
    let name = "n".repeat(250);
    let mut dir = "/l".to_string();
    let mut parts: Vec<String> = Vec::new();
    while b.as_os_str().len() + dir.len() < 6 * 1024 {
        dir = format!("{dir}/{name}");
        parts.push(name.clone());
        c.mkdir(&dir, 0o750, me).await.unwrap();
    }
    let data = random_bytes(200 * KIB);
    write_all(&c, &format!("{dir}/f"), &data, false).await;
    c.rename(&format!("{dir}/f"), &format!("{dir}/g"), me)
        .await
        .unwrap();
    c.link(&format!("{dir}/g"), &format!("{dir}/h"), me)
        .await
        .unwrap();
    c.setattr(
        &format!("{dir}/g"),
        SetAttr {
            mode: Some(0o640),
            ..SetAttr::default()
        },
        me,
    )
    .await
    .unwrap();
    c.setxattr(
        &format!("{dir}/g"),
        "user.deep",
        b"yes",
        eddy_client::XattrSet::Any,
        me,
    )
    .await
    .unwrap();
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());

    // What the backend holds there, read by a program that walks down with chdir.
    let walk = r#"
import os, sys
os.chdir(sys.argv[1])
for p in sys.argv[2:]:
    os.chdir(p)
g, h = os.lstat("g"), os.lstat("h")
print(len(os.getcwd()), oct(g.st_mode & 0o7777), g.st_ino == h.st_ino, g.st_nlink,
      os.getxattr("g", "user.deep").decode(), open("g", "rb").read().hex())
with open("deep-from-backend", "wb") as f:
    f.write(b"made in the backend")
"#;
    let mut cmd = Command::new("python3");
    cmd.arg("-c").arg(walk).arg(b).args(&parts);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let fields: Vec<&str> = text.split_whitespace().collect();
    assert!(fields[0].parse::<usize>().unwrap() > 6000, "{text}");
    assert_eq!(&fields[1..5], ["0o640", "True", "2", "yes"], "{text}");
    assert!(fields[5] == data.iter().map(|x| format!("{x:02x}")).collect::<String>());

    // Made in the backend directly, read through Eddy (imported on first touch).
    let f = c
        .open(&format!("{dir}/deep-from-backend"), libc::O_RDONLY, 0, me)
        .await
        .unwrap();
    assert_eq!(c.pread(&f, 0, 100).await.unwrap(), b"made in the backend");
    c.close(&f).await.unwrap();
    c.unlink(&format!("{dir}/h"), me).await.unwrap();
    let out = Command::new("python3")
        .arg("-c")
        .arg("import os, sys\nos.chdir(sys.argv[1])\nfor p in sys.argv[2:]: os.chdir(p)\nprint(sorted(os.listdir('.')))")
        .arg(b)
        .args(&parts)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "['deep-from-backend', 'g']"
    );
}
