//! Hard links under a linked prefix (decision 0029): made in the backend too, written back
//! once through the file's identity, and followed by the surviving name.

use super::*;

/// (st_ino, st_nlink) of each backend path.
fn ino_links(b: &Path, names: &[&str]) -> Vec<(u64, u64)> {
    names
        .iter()
        .map(|n| {
            let m = std::fs::symlink_metadata(b.join(n)).unwrap_or_else(|e| panic!("{n}: {e}"));
            (m.ino(), m.nlink())
        })
        .collect()
}

/// `tar x` of an archive with hard-link members into a linked prefix through the mount, then
/// stage-out: the backend has the same links (one inode, its link count) and the content;
/// the mount shows one inode too. Then: unlink of one name, a write through the other and
/// stage-out leave the surviving name with the new data; a linked name renamed keeps the link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tar_with_hard_links_into_a_linked_prefix_keeps_them_in_the_backend() {
    eddy_testkit::require::programs(
        &["tar", "stat", "setfattr", "getfattr"],
        "tar coreutils attr",
    );
    let backend = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    let s = src.path();
    std::fs::create_dir_all(s.join("t/sub")).unwrap();
    let data = random_bytes(200_000);
    std::fs::write(s.join("t/a"), &data).unwrap();
    std::fs::hard_link(s.join("t/a"), s.join("t/sub/b")).unwrap();
    std::fs::hard_link(s.join("t/a"), s.join("t/c")).unwrap();
    std::fs::write(s.join("t/plain"), b"plain").unwrap();
    run_ok(
        Command::new("tar")
            .arg("cf")
            .arg(s.join("t.tar"))
            .arg("-C")
            .arg(s)
            .arg("t"),
    );
    let m = Mounted::start_with(3, linked(&[("/out", backend.path())]));
    m.ok(&format!(
        "mkdir out/x && tar xf {} -C out/x",
        s.join("t.tar").display()
    ));
    let inos = m.ok("stat -c '%i %h' out/x/t/a out/x/t/sub/b out/x/t/c");
    let lines: Vec<&str> = inos.lines().collect();
    assert!(
        lines.len() == 3 && lines.iter().all(|l| *l == lines[0]) && lines[0].ends_with(" 3"),
        "one inode, 3 links through the mount: {inos}"
    );
    let c = m.cluster.client().await;
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    let b = backend.path().join("x/t");
    let got = ino_links(&b, &["a", "sub/b", "c"]);
    assert!(
        got.iter().all(|g| *g == (got[0].0, 3)),
        "one backend inode with 3 links: {got:?}"
    );
    same(
        &std::fs::read(b.join("c")).unwrap(),
        &data,
        "x/t/c in the backend",
    );
    assert_eq!(std::fs::read(b.join("plain")).unwrap(), b"plain");

    // Unlink of one name, a write through another, stage-out: the survivors have the data.
    m.ok("rm out/x/t/a && printf 'NEW' | dd of=out/x/t/c bs=1 seek=1000 conv=notrunc status=none");
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    let mut want = data.clone();
    want[1000..1003].copy_from_slice(b"NEW");
    assert!(
        !b.join("a").exists(),
        "the unlinked name is gone from the backend"
    );
    same(
        &std::fs::read(b.join("c")).unwrap(),
        &want,
        "x/t/c after the write",
    );
    same(
        &std::fs::read(b.join("sub/b")).unwrap(),
        &want,
        "x/t/sub/b after the write",
    );
    let got = ino_links(&b, &["c", "sub/b"]);
    assert!(got.iter().all(|g| *g == (got[0].0, 2)), "{got:?}");

    // A linked name renamed, then written through and staged out.
    m.ok("mv out/x/t/c out/x/t/renamed && printf 'END' >> out/x/t/sub/b");
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    want.extend_from_slice(b"END");
    assert!(!b.join("c").exists());
    same(
        &std::fs::read(b.join("renamed")).unwrap(),
        &want,
        "x/t/renamed",
    );
    let got = ino_links(&b, &["renamed", "sub/b"]);
    assert!(got.iter().all(|g| *g == (got[0].0, 2)), "{got:?}");

    // chmod and setfattr of a linked file reach the backend file at once, through a name.
    m.ok("chmod 640 out/x/t/renamed && setfattr -n user.k -v v out/x/t/sub/b");
    assert_eq!(b.join("sub/b").metadata().unwrap().mode() & 0o7777, 0o640);
    let got = Command::new("getfattr")
        .args(["-n", "user.k", "--only-values"])
        .arg(b.join("renamed"))
        .output()
        .unwrap();
    assert_eq!(got.stdout, b"v", "{}", String::from_utf8_lossy(&got.stderr));

    // Between a linked prefix and the rest: EXDEV.
    let (ok, _, err) = m.sh("ln out/x/t/renamed scratch-name");
    assert!(!ok && err.contains("cross-device"), "{err}");
}

/// A backend tree whose files have several names, met first through the mount: every name
/// shows one file (one st_ino, the link count), a write through one is read through the
/// other, and after stage-out the backend file (one inode still) has the new data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_files_with_several_names_are_imported_as_one_file() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    std::fs::create_dir_all(b.join("d/e")).unwrap();
    let data = random_bytes(150_000);
    std::fs::write(b.join("d/one"), &data).unwrap();
    std::fs::hard_link(b.join("d/one"), b.join("d/e/two")).unwrap();
    std::fs::hard_link(b.join("d/one"), b.join("d/three")).unwrap();
    std::fs::write(b.join("d/single"), b"single").unwrap();
    let m = Mounted::start_with(3, linked(&[("/", b)]));
    let listed = m.ok("ls -R d >/dev/null && stat -c '%i %h' d/one d/e/two d/three");
    let lines: Vec<&str> = listed.lines().collect();
    assert!(
        lines.len() == 3 && lines.iter().all(|l| *l == lines[0]) && lines[0].ends_with(" 3"),
        "one inode, 3 links through the mount: {listed}"
    );
    let single = m.ok("stat -c '%h' d/single");
    assert_eq!(single.trim(), "1");
    m.ok("printf 'XYZ' | dd of=d/e/two bs=1 seek=10 conv=notrunc status=none");
    let mut want = data.clone();
    want[10..13].copy_from_slice(b"XYZ");
    same(
        &std::fs::read(m.path("d/three")).unwrap(),
        &want,
        "d/three through the mount",
    );
    // Removing one name through the mount leaves the others, with one name less.
    m.ok("rm d/one");
    assert_eq!(m.ok("stat -c '%h' d/three").trim(), "2");
    let c = m.cluster.client().await;
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    assert!(!b.join("d/one").exists());
    same(
        &std::fs::read(b.join("d/three")).unwrap(),
        &want,
        "d/three in the backend",
    );
    let got = ino_links(b, &["d/three", "d/e/two"]);
    assert!(got.iter().all(|g| *g == (got[0].0, 2)), "{got:?}");
}
