//! Running one of tests/scripts' Python programs three ways, for the tests that compare Eddy
//! with a local file system: in a local directory (the reference), on a FUSE mount, and
//! through the preload library under `/eddy` (the same deployment as the mount).

use eddy_testkit::Mounted;
use std::path::Path;
use std::process::Command;

/// The preload library's prefix in these runs.
pub const PREFIX: &str = "/eddy";

/// Runs `python3 -c SCRIPT ARGS...` (with the preload library on `m`'s deployment when
/// `preload`); it must succeed. Returns its stdout.
pub fn python(script: &str, args: &[&str], preload: Option<&Mounted>) -> String {
    let mut c = match preload {
        Some(m) => {
            let mut c = eddy_testkit::preloaded("python3", PREFIX, m.cluster.dir.path());
            c.current_dir("/");
            c
        }
        None => Command::new("python3"),
    };
    c.arg("-c").arg(script).args(args);
    let out = c.output().expect("python3");
    assert!(
        out.status.success(),
        "python3 {args:?} (preload: {}) failed: {}\nstdout:\n{}",
        preload.is_some(),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The type of the file system holding `dir` (for the reference's name in messages).
pub fn fs_type(dir: &Path) -> String {
    let out = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(dir)
        .output()
        .expect("stat -f");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Compares two outputs line by line, naming every line that differs.
pub fn same_lines(what: &str, reference: &str, eddy: &str) {
    let (r, e): (Vec<&str>, Vec<&str>) = (reference.lines().collect(), eddy.lines().collect());
    let mut diffs = Vec::new();
    for i in 0..r.len().max(e.len()) {
        let (a, b) = (r.get(i).copied(), e.get(i).copied());
        if a != b {
            diffs.push(format!("  reference: {a:?}\n  eddy:      {b:?}"));
        }
    }
    assert!(
        diffs.is_empty(),
        "{what}: {} line(s) differ from the reference:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}
