//! Paths of any depth: the kernel bounds the path string of one call (PATH_MAX), not the
//! depth of a tree. tests/scripts/deep.py builds a tree of 200-byte names by mkdir + chdir
//! to about 10 KB from the root, then runs every namespace operation there with relative
//! names and relative to a directory descriptor; its output on the mount and through the
//! preload library must be the local file system's, line for line. Past `max_path_bytes`
//! from the namespace root (32 KiB), Eddy answers ENAMETOOLONG, at once.

use crate::script_runs::{fs_type, python, same_lines, PREFIX};
use eddy_client::Creds;
use eddy_testkit::{errno, Mounted};

const DEEP_PY: &str = include_str!("../scripts/deep.py");
/// 50 levels of 201 bytes: 10,050 bytes below the starting directory.
const LEVELS: &str = "50";
/// How many more levels the runs on Eddy try: enough to pass 32 KiB.
const BEYOND: &str = "200";

/// The output without its last line (the `beyond` line), and that line.
fn split_beyond(out: &str) -> (String, String) {
    let mut lines: Vec<&str> = out.lines().collect();
    let last = lines.pop().unwrap_or_default().to_string();
    (lines.join("\n"), last)
}

/// `beyond N ENAMETOOLONG`: the mkdir that would pass the limit failed cleanly, after as many
/// levels as fit in 32 KiB from the namespace root.
fn assert_stops_at_the_limit(what: &str, line: &str, start_depth: usize) {
    let f: Vec<&str> = line.split(' ').collect();
    assert_eq!(f.first(), Some(&"beyond"), "{what}: {line}");
    assert_eq!(f.get(2), Some(&"ENAMETOOLONG"), "{what}: {line}");
    let made: usize = f[1].parse().unwrap();
    let reached = start_depth + (50 + made) * 201;
    assert!(
        reached <= 32 * 1024 && reached + 201 > 32 * 1024,
        "{what}: stopped at {reached} bytes from the root: {line}"
    );
}

#[test]
fn trees_deeper_than_path_max_work_through_the_mount_and_the_preload() {
    eddy_testkit::require::program("python3", "python3");
    let local = tempfile::tempdir().expect("tempdir");
    let reference = python(DEEP_PY, &[local.path().to_str().unwrap(), LEVELS], None);
    let kind = fs_type(local.path());
    assert!(reference.starts_with("depth 10050\n"), "{reference}");

    let m = Mounted::start(3);
    std::fs::create_dir(m.path("mnt")).unwrap();
    let mounted = python(
        DEEP_PY,
        &[m.path("mnt").to_str().unwrap(), LEVELS, BEYOND],
        None,
    );
    let (mounted, beyond) = split_beyond(&mounted);
    same_lines(
        &format!("the mount (reference: {kind})"),
        reference.trim_end(),
        &mounted,
    );
    assert_stops_at_the_limit("the mount", &beyond, "/mnt".len());

    std::fs::create_dir(m.path("pre")).unwrap();
    let preloaded = python(
        DEEP_PY,
        &[&format!("{PREFIX}/pre"), LEVELS, BEYOND],
        Some(&m),
    );
    let (preloaded, beyond) = split_beyond(&preloaded);
    same_lines(
        &format!("the preload library (reference: {kind})"),
        reference.trim_end(),
        &preloaded,
    );
    assert_stops_at_the_limit("the preload library", &beyond, "/pre".len());
}

#[test]
fn the_library_takes_long_absolute_paths_up_to_the_limit() {
    let m = Mounted::start(3);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(m.cluster.client());
    let me = Creds::root();
    let name = "n".repeat(250);
    rt.block_on(async {
        // 130 levels of 251 bytes: 32,630 bytes.
        let mut p = String::new();
        for _ in 0..130 {
            p = format!("{p}/{name}");
            c.mkdir(&p, 0o755, me).await.unwrap();
        }
        let f = format!("{p}/file");
        let h = c.create(&f, 0o644, true, me).await.unwrap();
        c.pwrite(&h, 0, b"deep").await.unwrap();
        c.close(&h).await.unwrap();
        assert_eq!(c.stat(&f).await.unwrap().size, 4);
        c.rename(&f, &format!("{p}/moved"), me).await.unwrap();
        c.symlink("moved", &format!("{p}/l"), me).await.unwrap();
        assert_eq!(c.readlink(&format!("{p}/l")).await.unwrap(), "moved");
        c.unlink(&format!("{p}/moved"), me).await.unwrap();
        // One more level would pass 32 KiB from the root (32,768 bytes): ENAMETOOLONG, and
        // so is any path longer than that, even one that normalises to less.
        let over = format!("{p}/{name}");
        assert_eq!(errno(c.mkdir(&over, 0o755, me).await), libc::ENAMETOOLONG);
        assert_eq!(errno(c.stat(&over).await), libc::ENAMETOOLONG);
        let dotted = format!("{p}{}", "/.".repeat(2000));
        assert_eq!(errno(c.stat(&dotted).await), libc::ENAMETOOLONG);
    });
    // The same tree through the mount: the kernel takes no absolute path over 4096 bytes,
    // but relative names from a deep working directory reach it (deep.py above); here a
    // listing of the deepest directory after a walk there by `cd`.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cd {} && for i in $(seq 130); do cd -P {name} || exit 1; done && ls",
            m.mnt.path().display()
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "l");
}
