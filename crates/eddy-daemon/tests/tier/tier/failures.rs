//! A backend that fails (read-only, hung) and several linked prefixes on several backends.

use super::*;

/// Stage-out into a read-only backend fails for every dirty file, naming its backend path,
/// and loses nothing; once the backend is writable again, stage-out succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage_out_into_a_read_only_backend_fails_per_file_and_loses_nothing() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path().to_path_buf();
    let mut old = random_bytes(300_000);
    std::fs::write(b.join("old.bin"), &old).unwrap();
    let cl = Cluster::start_with(3, linked(&[("/", &b)]));
    let c = cl.client().await;
    let me = Creds::root();
    c.mkdir("/d", 0o755, me).await.unwrap();
    let mut expect = vec![
        ("d/new1".to_string(), random_bytes(500_000)),
        ("d/new2".to_string(), random_bytes(3)),
        ("d/empty".to_string(), Vec::new()),
    ];
    for (p, data) in &expect {
        write_all(&c, &format!("/{p}"), data, false).await;
    }
    let f = c.open("/old.bin", libc::O_RDWR, 0, me).await.unwrap();
    let patch = random_bytes(70_000);
    c.pwrite(&f, 60_000, &patch).await.unwrap();
    c.close(&f).await.unwrap();
    old[60_000..130_000].copy_from_slice(&patch);
    expect.push(("old.bin".to_string(), old));
    let dirty = total(&c, |t| t.dirty_bytes).await;
    assert!(dirty > 0);

    {
        let _ro = ReadOnly::new(&b);
        assert!(
            std::fs::write(b.join("probe"), b"x").is_err(),
            "the bind mount is not read-only"
        );
        let results = c.stage_out(&[], &|_| {}).await.unwrap();
        let by_path: BTreeMap<&str, &FileResult> =
            results.iter().map(|r| (r.path.as_str(), r)).collect();
        for (p, _) in &expect {
            let r = by_path
                .get(format!("/{p}").as_str())
                .unwrap_or_else(|| panic!("no result for /{p}: {results:#?}"));
            let err = r
                .error
                .as_deref()
                .unwrap_or_else(|| panic!("stage-out of /{p} into a read-only backend: {r:?}"));
            let bpath = b.join(p).display().to_string();
            assert!(
                err.contains(&bpath),
                "error for /{p} does not name {bpath}: {err}"
            );
        }
        assert_eq!(
            total(&c, |t| t.dirty_bytes).await,
            dirty,
            "dirty bytes after a failed stage-out"
        );
        for (p, want) in &expect {
            same(
                &eddy_testkit::read_all(&c, &format!("/{p}")).await,
                want,
                &format!("{p} while read-only"),
            );
        }
        let e = c
            .mkdir("/d2", 0o755, me)
            .await
            .expect_err("mkdir in a read-only backend");
        assert_eq!(e.errno, libc::EROFS, "{e:?}");
    }
    assert!(
        std::fs::write(b.join("probe"), b"x").is_ok(),
        "backend still read-only"
    );
    std::fs::remove_file(b.join("probe")).unwrap();
    let results = c.stage_out(&[], &|_| {}).await.unwrap();
    all_ok(&results);
    for (p, want) in &expect {
        same(
            &std::fs::read(b.join(p)).unwrap(),
            want,
            &format!("backend {p}"),
        );
    }
    assert_eq!(total(&c, |t| t.dirty_bytes).await, 0);
}

/// With a GlusterFS backend whose bricks are frozen, a read of a cold chunk gives EIO within
/// the deadline instead of hanging, while the scratch namespace and cached chunks keep
/// working; after the thaw the same read succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_backend_gives_eio_in_time_and_scratch_keeps_working() {
    let vol = GlusterVolume::start("tier_hang");
    let data = random_bytes(4 * MIB + 99);
    std::fs::write(vol.mount().join("f"), &data).unwrap();
    let config = Config {
        backend_timeout_ms: 1500,
        rpc_timeout_ms: 4000,
        ..linked(&[("/data", vol.mount())])
    };
    let rpc_deadline = Duration::from_millis(config.rpc_timeout_ms);
    let cl = Cluster::start_with(3, config);
    let c = cl.client().await;
    let cs = 64 * KIB;
    let me = Creds::root();
    let f = c.open("/data/f", libc::O_RDONLY, 0, me).await.unwrap();
    same(&c.pread(&f, 0, cs).await.unwrap(), &data[..cs], "chunk 0");

    vol.freeze();
    let hang_guard = Duration::from_secs(30);
    let t = Instant::now();
    let r = tokio::time::timeout(hang_guard, c.pread(&f, (10 * cs) as u64, 1000))
        .await
        .expect("a read of a cold chunk hung with the backend frozen");
    let took = t.elapsed();
    let e = r.expect_err("a read of a cold chunk with the backend frozen");
    assert_eq!(e.errno, libc::EIO, "{e:?}");
    assert!(
        took <= rpc_deadline + Duration::from_secs(1),
        "EIO came after {took:?}"
    );
    let bpath = vol.mount().join("f").display().to_string();
    assert!(
        e.msg.contains(&bpath),
        "the error does not name {bpath}: {e:?}"
    );

    // Cold reads of other chunks in flight while the scratch namespace is used.
    let cold: Vec<_> = (20..24u64)
        .map(|k| {
            let (c, f) = (c.clone(), f.clone());
            tokio::spawn(async move {
                let t = Instant::now();
                let r = tokio::time::timeout(hang_guard, c.pread(&f, k * cs as u64, 10)).await;
                (k, r, t.elapsed())
            })
        })
        .collect();
    c.mkdir("/scratch", 0o755, me).await.unwrap();
    let s = random_bytes(300_000);
    write_all(&c, "/scratch/s", &s, true).await;
    same(
        &eddy_testkit::read_all(&c, "/scratch/s").await,
        &s,
        "scratch file",
    );
    assert_eq!(names(&c, "/scratch").await, ["s"]);
    c.rename("/scratch/s", "/scratch/t", me).await.unwrap();
    c.unlink("/scratch/t", me).await.unwrap();
    // A chunk cached before the freeze is still served.
    same(
        &c.pread(&f, 0, cs).await.unwrap(),
        &data[..cs],
        "cached chunk 0",
    );
    for h in cold {
        let (k, r, took) = h.await.unwrap();
        let r = r.unwrap_or_else(|_| panic!("read of chunk {k} hung"));
        let e = r.expect_err("cold read with the backend frozen");
        assert_eq!(e.errno, libc::EIO, "chunk {k}: {e:?}");
        assert!(
            took <= rpc_deadline + Duration::from_secs(1),
            "chunk {k}: EIO after {took:?}"
        );
    }
    // A name never looked up needs the backend too: EIO in time as well.
    let t = Instant::now();
    let r = tokio::time::timeout(hang_guard, c.stat("/data/never-seen"))
        .await
        .expect("a stat hung with the backend frozen");
    let e = r.expect_err("stat of an unimported name with the backend frozen");
    assert_eq!(e.errno, libc::EIO, "{e:?}");
    assert!(t.elapsed() <= rpc_deadline + Duration::from_secs(1));

    vol.thaw();
    let got = tokio::time::timeout(hang_guard, c.pread(&f, (10 * cs) as u64, 1000))
        .await
        .expect("read after thaw hung")
        .expect("read after thaw");
    same(&got, &data[10 * cs..10 * cs + 1000], "chunk 10 after thaw");
    same(
        &eddy_testkit::read_all(&c, "/data/f").await,
        &data,
        "whole file after thaw",
    );
    drop(c);
    drop(cl);
}

/// Two prefixes linked at once, `/a` to a plain directory and `/b` to a GlusterFS volume:
/// each shows its own backend's files, writes go back to the right backend, a rename between
/// them (or to scratch) is EXDEV, and the scratch namespace never reaches either backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_linked_prefixes_on_two_backends() {
    let vol = GlusterVolume::start("tier_two");
    let plain = tempfile::tempdir().unwrap();
    let (pa, pb) = (plain.path(), vol.mount());
    std::fs::create_dir(pa.join("dir")).unwrap();
    std::fs::create_dir(pb.join("dir")).unwrap();
    let (a1, a2, b1, b2) = (
        random_bytes(100_000),
        random_bytes(7),
        random_bytes(150_000),
        random_bytes(9),
    );
    std::fs::write(pa.join("only-a"), &a1).unwrap();
    std::fs::write(pa.join("dir/x"), &a2).unwrap();
    std::fs::write(pb.join("only-b"), &b1).unwrap();
    std::fs::write(pb.join("dir/y"), &b2).unwrap();
    let cl = Cluster::start_with(3, linked(&[("/a", pa), ("/b", pb)]));
    let c = cl.client().await;
    let me = Creds::root();

    assert_eq!(names(&c, "/a").await, ["dir", "only-a"]);
    assert_eq!(names(&c, "/b").await, ["dir", "only-b"]);
    assert_eq!(names(&c, "/a/dir").await, ["x"]);
    assert_eq!(names(&c, "/b/dir").await, ["y"]);
    same(
        &eddy_testkit::read_all(&c, "/a/only-a").await,
        &a1,
        "/a/only-a",
    );
    same(
        &eddy_testkit::read_all(&c, "/b/dir/y").await,
        &b2,
        "/b/dir/y",
    );
    assert_eq!(eddy_testkit::errno(c.stat("/a/only-b").await), libc::ENOENT);
    assert_eq!(eddy_testkit::errno(c.stat("/b/only-a").await), libc::ENOENT);

    // Writes in each.
    let (na, nb) = (random_bytes(300_000), random_bytes(200_000));
    write_all(&c, "/a/new", &na, false).await;
    write_all(&c, "/b/new", &nb, false).await;
    let patch = random_bytes(5000);
    let f = c.open("/b/only-b", libc::O_RDWR, 0, me).await.unwrap();
    c.pwrite(&f, 70_000, &patch).await.unwrap();
    c.close(&f).await.unwrap();
    let mut b1_new = b1.clone();
    b1_new[70_000..75_000].copy_from_slice(&patch);
    c.mkdir("/a/m", 0o755, me).await.unwrap();
    c.mkdir("/b/m", 0o755, me).await.unwrap();
    assert!(
        pa.join("m").is_dir() && pb.join("m").is_dir(),
        "mkdir write-through"
    );

    // Scratch.
    c.mkdir("/s", 0o755, me).await.unwrap();
    c.mkdir("/s/deep", 0o755, me).await.unwrap();
    write_all(&c, "/s/deep/scratch-file", &random_bytes(100_000), false).await;
    write_all(&c, "/top-scratch", &random_bytes(10), false).await;
    c.rename("/s/deep/scratch-file", "/s/scratch-moved", me)
        .await
        .unwrap();

    // Renames across tiers.
    for (from, to) in [
        ("/a/only-a", "/b/moved"),
        ("/b/only-b", "/a/moved"),
        ("/a/new", "/s/moved"),
        ("/top-scratch", "/a/moved"),
        ("/a/dir", "/b/dir2"),
    ] {
        let e = c
            .rename(from, to, me)
            .await
            .expect_err(&format!("rename {from} {to}"));
        assert_eq!(e.errno, libc::EXDEV, "rename {from} {to}: {e:?}");
    }

    // Stage-out of one prefix leaves the other alone.
    all_ok(&c.stage_out(&["/a".to_string()], &|_| {}).await.unwrap());
    same(
        &std::fs::read(pa.join("new")).unwrap(),
        &na,
        "plain backend new",
    );
    assert!(!pb.join("new").exists(), "stage-out of /a wrote /b/new");
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    same(
        &std::fs::read(pb.join("new")).unwrap(),
        &nb,
        "gluster backend new",
    );
    same(
        &std::fs::read(pb.join("only-b")).unwrap(),
        &b1_new,
        "gluster only-b",
    );
    same(
        &std::fs::read(pa.join("only-a")).unwrap(),
        &a1,
        "plain only-a",
    );

    let tree = |root: &Path| walk(root).into_keys().collect::<Vec<_>>();
    assert_eq!(tree(pa), ["dir", "dir/x", "m", "new", "only-a"]);
    assert_eq!(tree(pb), ["dir", "dir/y", "m", "new", "only-b"]);
    // The scratch namespace is still there, in Eddy only.
    assert_eq!(names(&c, "/s").await, ["deep", "scratch-moved"]);
    let e = c.stage_out(&["/s".to_string()], &|_| {}).await;
    assert_eq!(
        eddy_testkit::errno(e),
        libc::EINVAL,
        "stage-out of a scratch path"
    );
    drop(c);
    drop(cl);
}

// ------------------------------------------------------------------------------ the CLI
