//! Extended attributes to and from the backend (decision 0029): imported with a backend
//! entry, written through by setfattr and its removal, and set at stage-out on files written
//! back (rsync -aX).

use super::*;

/// `getfattr -d -m - --absolute-names` of a path, as (name, value) lines; only `user.*`
/// names (the test file systems may add `security.*` labels of their own).
fn user_xattrs(p: &Path) -> Vec<String> {
    let out = Command::new("getfattr")
        .args(["-d", "-m", "^user\\.", "--absolute-names"])
        .arg(p)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "getfattr {}: {}",
        p.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("user."))
        .map(str::to_string)
        .collect()
}

fn require_tools() {
    eddy_testkit::require::programs(&["setfattr", "getfattr", "rsync"], "attr rsync");
}

/// A backend file and directory with user.* attributes are seen with them through the
/// mount; setfattr and setfattr -x through the mount reach the backend copy at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xattrs_are_imported_from_and_written_through_to_the_backend() {
    require_tools();
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    std::fs::create_dir(b.join("d")).unwrap();
    std::fs::write(b.join("d/f"), b"data").unwrap();
    run_ok(
        Command::new("setfattr")
            .args(["-n", "user.colour", "-v", "blue"])
            .arg(b.join("d/f")),
    );
    run_ok(
        Command::new("setfattr")
            .args(["-n", "user.size", "-v", "0x00ff10"])
            .arg(b.join("d/f")),
    );
    run_ok(
        Command::new("setfattr")
            .args(["-n", "user.dir", "-v", "yes"])
            .arg(b.join("d")),
    );
    let m = Mounted::start_with(3, linked(&[("/", b)]));

    // Imported with the entry.
    assert_eq!(
        user_xattrs(&m.path("d/f")),
        ["user.colour=\"blue\"", "user.size=0sAP8Q"],
        "a backend file's attributes through the mount"
    );
    assert_eq!(user_xattrs(&m.path("d")), ["user.dir=\"yes\""]);

    // Written through: set, replace and remove reach the backend before any stage-out.
    m.ok("setfattr -n user.new -v fresh d/f && setfattr -n user.colour -v red d/f && setfattr -x user.size d/f && setfattr -x user.dir d && setfattr -n user.made -v 1 d");
    assert_eq!(
        user_xattrs(&b.join("d/f")),
        ["user.colour=\"red\"", "user.new=\"fresh\""],
        "the backend file after setfattr through the mount"
    );
    assert_eq!(user_xattrs(&b.join("d")), ["user.made=\"1\""]);
    // A file made through the mount gets its attributes at stage-out.
    m.ok("echo hello > d/g && setfattr -n user.g -v 7 d/g");
    let c = m.cluster.client().await;
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    assert_eq!(user_xattrs(&b.join("d/g")), ["user.g=\"7\""]);
    m.ok("setfattr -x user.g d/g");
    assert!(
        user_xattrs(&b.join("d/g")).is_empty(),
        "removal reaches the backend"
    );
}

/// `rsync -aX src/ mnt/dst/` into a linked prefix, then stage-out: the backend copy has the
/// source's attributes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsync_ax_into_a_linked_prefix_keeps_xattrs_in_the_backend() {
    require_tools();
    let backend = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    let s = src.path();
    std::fs::create_dir_all(s.join("sub")).unwrap();
    std::fs::write(s.join("a"), random_bytes(100_000)).unwrap();
    std::fs::write(s.join("sub/b"), b"bee").unwrap();
    run_ok(
        Command::new("setfattr")
            .args(["-n", "user.a", "-v", "one"])
            .arg(s.join("a")),
    );
    run_ok(
        Command::new("setfattr")
            .args(["-n", "user.b", "-v", "two"])
            .arg(s.join("sub/b")),
    );
    run_ok(
        Command::new("setfattr")
            .args(["-n", "user.sub", "-v", "three"])
            .arg(s.join("sub")),
    );
    let m = Mounted::start_with(3, linked(&[("/out", backend.path())]));
    run_ok(
        Command::new("rsync")
            .arg("-aX")
            .arg(format!("{}/", s.display()))
            .arg(format!("{}/", m.path("out/dst").display())),
    );
    let c = m.cluster.client().await;
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    let dst = backend.path().join("dst");
    same(
        &std::fs::read(dst.join("a")).unwrap(),
        &std::fs::read(s.join("a")).unwrap(),
        "dst/a in the backend",
    );
    assert_eq!(user_xattrs(&dst.join("a")), ["user.a=\"one\""]);
    assert_eq!(user_xattrs(&dst.join("sub/b")), ["user.b=\"two\""]);
    assert_eq!(user_xattrs(&dst.join("sub")), ["user.sub=\"three\""]);
}
