//! Several backends under one linked prefix, placed by rule (decision 0073), with 3 daemons
//! and real backends side by side (plain directories, the GlusterFS volume, a small tmpfs):
//! imports read every backend (the link's own first), new files go where their attribute,
//! the rules (path, size, owner) or the default say at their first write-back and nowhere
//! else, hard links across backends are EXDEV, a rename before the first write-back lands in
//! the new place's backend while a written-back file is moved there at the next one
//! (`backend_moves.rs`), a full backend and a
//! read-only one keep the data dirty with errors naming them, and `eddy status`, `eddy
//! stats` and the counters show each backend.

use super::*;
use eddy_client::XattrSet;
use eddy_config::{BackendDecl, IoMode, PlacementRule, BACKEND_XATTR};

/// A backend of `prefix` named `name` at `path`.
pub(super) fn decl(name: &str, prefix: &str, path: &Path, kind: &str) -> BackendDecl {
    BackendDecl {
        name: name.into(),
        prefix: prefix.into(),
        path: path.to_path_buf(),
        kind: kind.into(),
        capacity_bytes: 0,
        read_only: false,
    }
}

/// A rule placing on `backend`, with no condition yet.
pub(super) fn rule(backend: &str) -> PlacementRule {
    PlacementRule {
        backend: backend.into(),
        path: None,
        min_size: None,
        max_size: None,
        uid: None,
        gid: None,
        io_mode: None,
    }
}

/// The test configuration with `/w` linked to `default` and more backends and rules.
pub(super) fn multi(
    default: &Path,
    backends: Vec<BackendDecl>,
    rules: Vec<PlacementRule>,
) -> Config {
    Config {
        backends,
        placement_rules: rules,
        ..linked(&[("/w", default)])
    }
}

/// The per-backend figures summed over the daemons, by name.
pub(super) async fn per_backend(c: &Client) -> BTreeMap<String, eddy_proto::stats::StoreStats> {
    let mut sums: BTreeMap<String, eddy_proto::stats::StoreStats> = BTreeMap::new();
    for s in statuses(c).await {
        for b in s.tier.backends {
            let e = sums
                .entry(b.name.clone())
                .or_insert_with(|| eddy_proto::stats::StoreStats {
                    name: b.name.clone(),
                    ..Default::default()
                });
            e.placed_files += b.placed_files;
            e.placed_bytes += b.placed_bytes;
            e.dirty_bytes += b.dirty_bytes;
            e.read_bytes += b.read_bytes;
            e.written_bytes += b.written_bytes;
            e.failures += b.failures;
        }
    }
    sums
}

/// The file's `user.eddy.backend`, as the library reads it.
pub(super) async fn backend_of(c: &Client, p: &str) -> String {
    let v = c
        .getxattr(p, BACKEND_XATTR, Creds::root())
        .await
        .unwrap_or_else(|e| panic!("getxattr {p} {BACKEND_XATTR}: {e:?}"));
    String::from_utf8(v).unwrap()
}

/// Where a relative path exists among the backends (name → directory).
pub(super) fn found_in(rel: &str, backends: &[(&str, &Path)]) -> Vec<String> {
    backends
        .iter()
        .filter(|(_, dir)| dir.join(rel).exists())
        .map(|(name, _)| name.to_string())
        .collect()
}

/// Imports read every backend; new files are placed by path, size, owner and attribute
/// (inherited from their directory), each in its backend only and byte-identical there;
/// a rename before the first write-back lands in the new place's backend, after it the file
/// stays; hard links across backends are EXDEV; bad attributes are refused; the status
/// counts each backend. The second backend is the GlusterFS volume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_place_new_files_on_their_backends_and_imports_read_every_backend() {
    let vol = GlusterVolume::start("tier_backends");
    let (fast, bulk) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (pf, pa, pb) = (fast.path(), vol.mount(), bulk.path());
    let stores = [("fast", pf), ("archive", pa), ("bulk", pb)];
    // What the backends hold already: a file in each, a directory in two, a name in two.
    std::fs::create_dir(pf.join("d")).unwrap();
    std::fs::create_dir(pa.join("d")).unwrap();
    let (in_fast, in_archive, in_bulk) =
        (random_bytes(150_000), random_bytes(70_000), random_bytes(9));
    std::fs::write(pf.join("d/in-fast"), &in_fast).unwrap();
    std::fs::write(pa.join("d/in-archive"), &in_archive).unwrap();
    std::fs::write(pb.join("in-bulk"), &in_bulk).unwrap();
    std::fs::write(pf.join("both"), b"the default backend's").unwrap();
    std::fs::write(pa.join("both"), b"the archive's").unwrap();
    let rules = vec![
        PlacementRule {
            path: Some("/w/**/*.tar".into()),
            ..rule("archive")
        },
        PlacementRule {
            min_size: Some(400_000),
            ..rule("bulk")
        },
        PlacementRule {
            uid: Some(4242),
            ..rule("archive")
        },
    ];
    let backends = vec![
        decl("fast", "/w", pf, "ext4"),
        decl("archive", "/w", pa, "gluster"),
        decl("bulk", "/w", pb, "ext4"),
    ];
    let cl = Cluster::start_with(3, multi(pf, backends, rules));
    let c = cl.client().await;
    let me = Creds::root();

    // One namespace: the union of the backends, the first holding a name wins.
    assert_eq!(names(&c, "/w").await, ["both", "d", "in-bulk"]);
    assert_eq!(names(&c, "/w/d").await, ["in-archive", "in-fast"]);
    same(
        &eddy_testkit::read_all(&c, "/w/d/in-fast").await,
        &in_fast,
        "in-fast",
    );
    same(
        &eddy_testkit::read_all(&c, "/w/d/in-archive").await,
        &in_archive,
        "in-archive",
    );
    same(
        &eddy_testkit::read_all(&c, "/w/in-bulk").await,
        &in_bulk,
        "in-bulk",
    );
    same(
        &eddy_testkit::read_all(&c, "/w/both").await,
        b"the default backend's",
        "a name in two backends",
    );
    assert_eq!(backend_of(&c, "/w/d/in-archive").await, "archive");
    assert_eq!(backend_of(&c, "/w/in-bulk").await, "bulk");
    assert_eq!(backend_of(&c, "/w/both").await, "fast");

    // New files: by path, size, owner, attribute (a directory's, copied at creation).
    c.mkdir("/w/run", 0o755, me).await.unwrap();
    c.mkdir("/w/keep", 0o750, me).await.unwrap();
    c.setxattr("/w/keep", BACKEND_XATTR, b"bulk", XattrSet::Any, me)
        .await
        .unwrap();
    c.mkdir("/w/keep/sub", 0o700, me).await.unwrap();
    assert_eq!(backend_of(&c, "/w/keep/sub").await, "bulk", "inherited");
    let mut files: Vec<(&str, Vec<u8>, &str)> = vec![
        ("run/small", random_bytes(1000), "fast"),
        ("run/out.tar", random_bytes(90_000), "archive"),
        ("run/big", random_bytes(500_000), "bulk"),
        ("run/theirs", random_bytes(3000), "archive"),
        ("keep/sub/note", random_bytes(10), "bulk"),
    ];
    for (p, data, _) in &files {
        write_all(&c, &format!("/w/{p}"), data, false).await;
    }
    let chown = SetAttr {
        uid: Some(4242),
        ..SetAttr::default()
    };
    c.setattr("/w/run/theirs", chown, me).await.unwrap();
    // Renamed before its first write-back: placed by its new name.
    let moved = random_bytes(20_000);
    write_all(&c, "/w/run/pre-move", &moved, false).await;
    c.rename("/w/run/pre-move", "/w/run/moved.tar", me)
        .await
        .unwrap();
    files.push(("run/moved.tar", moved, "archive"));
    // Nothing of a new file reaches a backend before its write-back.
    for (p, _, _) in &files {
        assert!(found_in(p, &stores).is_empty(), "{p} in a backend already");
    }
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    for (p, data, want) in &files {
        assert_eq!(found_in(p, &stores), [*want], "backends holding {p}");
        let dir = stores.iter().find(|(n, _)| n == want).unwrap().1;
        same(&std::fs::read(dir.join(p)).unwrap(), data, p);
        assert_eq!(backend_of(&c, &format!("/w/{p}")).await, *want, "{p}");
    }
    assert!(
        pb.join("keep/sub").is_dir(),
        "the directories above a placed file"
    );
    assert_eq!(total(&c, |t| t.dirty_bytes).await, 0);
    let figures = per_backend(&c).await;
    assert_eq!(figures["fast"].placed_files, 1, "{figures:#?}");
    assert_eq!(figures["archive"].placed_files, 3, "{figures:#?}");
    assert_eq!(figures["bulk"].placed_files, 2, "{figures:#?}");
    assert_eq!(figures["bulk"].placed_bytes, 500_010, "{figures:#?}");
    assert!(figures["archive"].written_bytes >= 90_000 + 3000 + 20_000);
    assert!(figures["archive"].read_bytes >= 70_000, "{figures:#?}");

    // A written-back file renamed to a name ruled for another backend: renamed in its
    // backend at once, moved to the other at the next write-back (with what changed since).
    c.rename("/w/run/small", "/w/run/small.tar", me)
        .await
        .unwrap();
    assert_eq!(found_in("run/small.tar", &stores), ["fast"]);
    assert_eq!(backend_of(&c, "/w/run/small.tar").await, "archive");
    let f = c
        .open("/w/run/small.tar", libc::O_RDWR, 0, me)
        .await
        .unwrap();
    c.pwrite(&f, 0, b"CHANGED").await.unwrap();
    c.close(&f).await.unwrap();
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    assert_eq!(found_in("run/small.tar", &stores), ["archive"]);
    let mut small = files[0].1.clone();
    small[..7].copy_from_slice(b"CHANGED");
    same(
        &std::fs::read(pa.join("run/small.tar")).unwrap(),
        &small,
        "moved with its change",
    );

    // Hard links: within the file's backend, yes; a name the rules put elsewhere, EXDEV.
    c.link("/w/run/big", "/w/run/big-too", me).await.unwrap();
    assert_eq!(found_in("run/big-too", &stores), ["bulk"]);
    let e = c
        .link("/w/run/out.tar", "/w/run/plain-name", me)
        .await
        .expect_err("a link from archive to a name placed on fast");
    assert_eq!(e.errno, libc::EXDEV, "{e:?}");
    assert_eq!(
        eddy_testkit::errno(c.stat("/w/run/plain-name").await),
        libc::ENOENT
    );
    c.link("/w/run/out.tar", "/w/run/again.tar", me)
        .await
        .unwrap();
    assert_eq!(
        std::fs::metadata(pa.join("run/out.tar")).unwrap().ino(),
        std::fs::metadata(pa.join("run/again.tar")).unwrap().ino(),
        "one backend file, two names"
    );

    // The attribute: a backend of the link.
    let bad = c
        .setxattr("/w/run", BACKEND_XATTR, b"nowhere", XattrSet::Any, me)
        .await
        .expect_err("an unknown backend");
    assert_eq!(bad.errno, libc::EINVAL, "{bad:?}");
    let linked = c
        .setxattr("/w/run/big", BACKEND_XATTR, b"fast", XattrSet::Any, me)
        .await
        .expect_err("another backend for a file with two names");
    assert_eq!(linked.errno, libc::EXDEV, "{linked:?}");
    c.mkdir("/scratch", 0o755, me).await.unwrap();
    let outside = c
        .setxattr("/scratch", BACKEND_XATTR, b"fast", XattrSet::Any, me)
        .await
        .expect_err("outside a link with several backends");
    assert_eq!(outside.errno, libc::EINVAL, "{outside:?}");

    // Namespace changes reach every backend holding the entry.
    c.unlink("/w/both", me).await.unwrap();
    assert!(
        found_in("both", &stores).is_empty(),
        "a name in two backends is one name"
    );
    drop(c);
    drop(cl);
}

/// A full backend (a 1 MiB tmpfs) refuses a write-back: the error names it, the data stays
/// dirty and readable in Eddy; after room is made there, the next stage-out completes. A
/// backend over its quota (`capacity_bytes`) is refused before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_backend_keeps_the_data_dirty_until_there_is_room() {
    let fast = tempfile::tempdir().unwrap();
    let small = Tmpfs::new(MIB as u64);
    let quota = tempfile::tempdir().unwrap();
    let backends = vec![
        decl("small", "/w", small.path(), "tmpfs"),
        BackendDecl {
            capacity_bytes: 1,
            ..decl("quota", "/w", quota.path(), "ext4")
        },
    ];
    let rules = vec![
        PlacementRule {
            path: Some("/w/full/**".into()),
            ..rule("small")
        },
        PlacementRule {
            path: Some("/w/q/**".into()),
            ..rule("quota")
        },
    ];
    let cl = Cluster::start_with(3, multi(fast.path(), backends, rules));
    let c = cl.client().await;
    let me = Creds::root();
    c.mkdir("/w/full", 0o755, me).await.unwrap();
    c.mkdir("/w/q", 0o755, me).await.unwrap();
    // Each fits alone when it is placed; together they do not.
    let (a, b) = (random_bytes(700_000), random_bytes(700_000));
    write_all(&c, "/w/full/a", &a, false).await;
    write_all(&c, "/w/full/b", &b, false).await;
    let q = random_bytes(5000);
    write_all(&c, "/w/q/file", &q, false).await;
    let dirty = total(&c, |t| t.dirty_bytes).await;

    let results = c.stage_out(&[], &|_| {}).await.unwrap();
    let by_path: BTreeMap<&str, &FileResult> =
        results.iter().map(|r| (r.path.as_str(), r)).collect();
    let failed: Vec<&&FileResult> = ["/w/full/a", "/w/full/b"]
        .iter()
        .filter_map(|p| by_path.get(p))
        .filter(|r| r.error.is_some())
        .collect();
    assert!(
        !failed.is_empty(),
        "two files in a full backend: {results:#?}"
    );
    for r in &failed {
        let err = r.error.as_deref().unwrap();
        assert!(err.contains("backend small"), "{err}");
        assert!(
            err.contains("No space left") || err.contains("free"),
            "{err}"
        );
    }
    let qerr = by_path["/w/q/file"]
        .error
        .as_deref()
        .expect("over the quota");
    assert!(
        qerr.contains("backend quota") && qerr.contains("capacity_bytes"),
        "{qerr}"
    );
    assert!(
        !quota.path().join("q/file").exists(),
        "nothing written over the quota"
    );
    assert!(total(&c, |t| t.dirty_bytes).await > 0, "kept dirty");
    same(
        &eddy_testkit::read_all(&c, "/w/full/a").await,
        &a,
        "a, kept",
    );
    same(
        &eddy_testkit::read_all(&c, "/w/full/b").await,
        &b,
        "b, kept",
    );
    assert!(per_backend(&c).await["small"].failures > 0);

    // Room made: the next stage-out completes both.
    run_ok(
        Command::new("mount")
            .args(["-o", "remount,size=8m"])
            .arg(small.path()),
    );
    let results = c
        .stage_out(&["/w/full".to_string()], &|_| {})
        .await
        .unwrap();
    all_ok(&results);
    same(
        &std::fs::read(small.path().join("full/a")).unwrap(),
        &a,
        "a in small",
    );
    same(
        &std::fs::read(small.path().join("full/b")).unwrap(),
        &b,
        "b in small",
    );
    assert!(!fast.path().join("full/a").exists(), "only in its backend");
    assert!(total(&c, |t| t.dirty_bytes).await < dirty);
    drop(c);
    drop(cl);
}

/// A read-only backend is imported and read, and never written: a change of one of its
/// files stays dirty (the stage-out fails with EROFS naming it), unlinking one of its files
/// and choosing it by attribute are EROFS; new files go elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_backend_is_read_and_never_written() {
    let fast = tempfile::tempdir().unwrap();
    let old = tempfile::tempdir().unwrap();
    let data = random_bytes(200_000);
    std::fs::create_dir(old.path().join("d")).unwrap();
    std::fs::write(old.path().join("d/kept"), &data).unwrap();
    std::fs::write(old.path().join("d/other"), b"x").unwrap();
    let before = walk(old.path());
    let backends = vec![BackendDecl {
        read_only: true,
        ..decl("old", "/w", old.path(), "archive")
    }];
    let cl = Cluster::start_with(3, multi(fast.path(), backends, Vec::new()));
    let c = cl.client().await;
    let me = Creds::root();
    same(
        &eddy_testkit::read_all(&c, "/w/d/kept").await,
        &data,
        "read",
    );
    assert_eq!(backend_of(&c, "/w/d/kept").await, "old");
    let f = c.open("/w/d/kept", libc::O_RDWR, 0, me).await.unwrap();
    c.pwrite(&f, 1000, b"NEW").await.unwrap();
    c.close(&f).await.unwrap();
    write_all(&c, "/w/d/new", b"new file", false).await;
    let results = c.stage_out(&[], &|_| {}).await.unwrap();
    let kept = results.iter().find(|r| r.path == "/w/d/kept").unwrap();
    let err = kept
        .error
        .as_deref()
        .expect("a write-back into a read-only backend");
    assert!(
        err.contains("backend old") && err.contains("read-only"),
        "{err}"
    );
    let new = results.iter().find(|r| r.path == "/w/d/new").unwrap();
    assert!(new.error.is_none(), "{new:?}");
    assert_eq!(
        std::fs::read(fast.path().join("d/new")).unwrap(),
        b"new file"
    );
    let mut want = data.clone();
    want[1000..1003].copy_from_slice(b"NEW");
    same(
        &eddy_testkit::read_all(&c, "/w/d/kept").await,
        &want,
        "kept dirty",
    );
    assert!(total(&c, |t| t.dirty_bytes).await > 0);
    let e = c
        .unlink("/w/d/other", me)
        .await
        .expect_err("unlink in a read-only backend");
    assert_eq!(e.errno, libc::EROFS, "{e:?}");
    let e = c
        .setxattr("/w/d", BACKEND_XATTR, b"old", XattrSet::Any, me)
        .await
        .expect_err("a read-only backend by attribute");
    assert_eq!(e.errno, libc::EROFS, "{e:?}");
    assert_eq!(walk(old.path()), before, "the read-only backend changed");
    drop(c);
    drop(cl);
}

/// Through the mount (cp, mv, ln, setfattr) and the preload library, then `eddy stage-out`
/// and `eddy status`/`eddy stats`: files land in their backends, `ln` across backends fails
/// with EXDEV, the tables name the backends.
#[test]
fn several_backends_through_the_mount_and_the_preload() {
    let fast = tempfile::tempdir().unwrap();
    let archive = tempfile::tempdir().unwrap();
    let backends = vec![decl("archive", "/w", archive.path(), "archive")];
    let rules = vec![PlacementRule {
        path: Some("/w/**/*.tar".into()),
        ..rule("archive")
    }];
    let m = Mounted::start_with(3, multi(fast.path(), backends, rules));
    let state = m.cluster.dir.path().to_path_buf();
    m.ok(
        "mkdir -p w/run w/arch && head -c 300000 /dev/urandom > w/run/data.tar \
         && head -c 1000 /dev/urandom > w/run/log \
         && setfattr -n user.eddy.backend -v archive w/arch \
         && printf note > w/arch/note && mv w/run/log w/run/log.tar",
    );
    let (ok, _, err) = m.sh("ln w/run/data.tar w/run/plain");
    assert!(
        !ok && err.contains("cross-device"),
        "ln across backends: {err}"
    );
    let got = m.ok("getfattr --only-values -n user.eddy.backend w/arch/note");
    assert_eq!(got, "archive");
    // The preload library: a new file by its name's rule.
    let out = eddy_testkit::preloaded("sh", "/eddy", &state)
        .arg("-c")
        .arg("printf preloaded > /eddy/w/run/p.tar && printf plain > /eddy/w/run/p")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cli::ok(&["stage-out", "--state", s(&state)]);
    let (a, f) = (archive.path(), fast.path());
    assert!(a.join("run/data.tar").exists() && !f.join("run/data.tar").exists());
    assert!(a.join("run/log.tar").exists() && !f.join("run/log.tar").exists());
    assert_eq!(std::fs::read(a.join("arch/note")).unwrap(), b"note");
    assert_eq!(std::fs::read(a.join("run/p.tar")).unwrap(), b"preloaded");
    assert_eq!(std::fs::read(f.join("run/p")).unwrap(), b"plain");
    let data = std::fs::read(m.path("w/run/data.tar")).unwrap();
    assert_eq!(std::fs::read(a.join("run/data.tar")).unwrap(), data);
    // `mv` of written-back files out of the archive's rule (a file) and its directory's
    // attribute (another): moved to the default backend at the next stage-out.
    let log = std::fs::read(a.join("run/log.tar")).unwrap();
    m.ok("mv w/run/log.tar w/run/log && mv w/arch/note w/run/note");
    cli::ok(&["stage-out", "--state", s(&state)]);
    assert_eq!(std::fs::read(f.join("run/log")).unwrap(), log);
    assert_eq!(std::fs::read(f.join("run/note")).unwrap(), b"note");
    assert!(!a.join("run/log.tar").exists() && !a.join("run/log").exists());
    assert!(!a.join("arch/note").exists() && !a.join("run/note").exists());
    let status =
        String::from_utf8_lossy(&cli::ok(&["status", "--state", s(&state)]).stdout).into_owned();
    let line = status
        .lines()
        .find(|l| l.starts_with("archive "))
        .unwrap_or_else(|| panic!("no archive line in eddy status:\n{status}"));
    assert!(
        line.split_whitespace().nth(3) == Some("4"),
        "4 files placed: {line}"
    );
    let stats =
        String::from_utf8_lossy(&cli::ok(&["stats", "--state", s(&state)]).stdout).into_owned();
    assert!(
        stats.lines().any(|l| l.contains(" archive ")),
        "eddy stats names the backend:\n{stats}"
    );
}

/// Rules by I/O mode: a file written by two clients (N-1) goes to the backend for shared
/// files, each file written by one client (N-N) to the one for per-process files; a rename
/// later keeps each where it is (its I/O mode is not known then: a rule by I/O mode holds
/// for a file in its backend).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_by_io_mode_place_shared_and_per_process_files_apart() {
    let (fast, pfs, nn) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let stores = [
        ("fast", fast.path()),
        ("pfs", pfs.path()),
        ("nn", nn.path()),
    ];
    let backends = vec![
        decl("fast", "/w", fast.path(), "ext4"),
        decl("pfs", "/w", pfs.path(), "lustre"),
        decl("nn", "/w", nn.path(), "ext4"),
    ];
    let rules = vec![
        PlacementRule {
            io_mode: Some(IoMode::Shared),
            ..rule("pfs")
        },
        PlacementRule {
            io_mode: Some(IoMode::PerProcess),
            path: Some("/w/out/**".into()),
            ..rule("nn")
        },
    ];
    let cl = Cluster::start_with(3, multi(fast.path(), backends, rules));
    let (c1, c2) = (cl.client().await, cl.client().await);
    let me = Creds::root();
    c1.mkdir("/w/out", 0o755, me).await.unwrap();
    // One file, two writers (each its half), as ranks of an N-1 checkpoint.
    let shared = random_bytes(400_000);
    let f1 = c1.create("/w/out/ckpt", 0o644, false, me).await.unwrap();
    let f2 = c2.open("/w/out/ckpt", libc::O_RDWR, 0, me).await.unwrap();
    c1.pwrite(&f1, 0, &shared[..200_000]).await.unwrap();
    c2.pwrite(&f2, 200_000, &shared[200_000..]).await.unwrap();
    c1.close(&f1).await.unwrap();
    c2.close(&f2).await.unwrap();
    // A file per writer (N-N).
    let (r0, r1) = (random_bytes(30_000), random_bytes(40_000));
    write_all(&c1, "/w/out/rank0", &r0, false).await;
    write_all(&c2, "/w/out/rank1", &r1, false).await;
    // Outside the per-process rule's path: the default.
    write_all(&c1, "/w/alone", b"one writer", false).await;
    all_ok(&c1.stage_out(&[], &|_| {}).await.unwrap());
    assert_eq!(found_in("out/ckpt", &stores), ["pfs"]);
    same(
        &std::fs::read(pfs.path().join("out/ckpt")).unwrap(),
        &shared,
        "the shared file",
    );
    assert_eq!(found_in("out/rank0", &stores), ["nn"]);
    assert_eq!(found_in("out/rank1", &stores), ["nn"]);
    same(
        &std::fs::read(nn.path().join("out/rank1")).unwrap(),
        &r1,
        "r1",
    );
    assert_eq!(found_in("alone", &stores), ["fast"]);
    assert_eq!(backend_of(&c2, "/w/out/ckpt").await, "pfs");
    // Renamed once written back: each stays in its backend.
    c1.rename("/w/out/ckpt", "/w/out/ckpt.done", me)
        .await
        .unwrap();
    c2.rename("/w/out/rank1", "/w/out/rank1.done", me)
        .await
        .unwrap();
    all_ok(&c1.stage_out(&[], &|_| {}).await.unwrap());
    assert_eq!(found_in("out/ckpt.done", &stores), ["pfs"]);
    assert_eq!(found_in("out/rank1.done", &stores), ["nn"]);
    drop((c1, c2));
    drop(cl);
}
