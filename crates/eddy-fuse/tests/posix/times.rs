//! Which of atime, mtime and ctime every operation changes, of the file and of its
//! directories: the same program (tests/scripts/times.py) on a local directory (the
//! reference: a temporary directory, ext4 or tmpfs on the test machines, named in the
//! messages), on the FUSE mount and through the preload library. It sets every time an hour
//! into the past, sleeps once, runs every operation and prints `same`/`new` per timestamp;
//! the patterns must match the reference's line for line (never the times themselves).

use crate::script_runs::{fs_type, python, same_lines, PREFIX};
use eddy_testkit::Mounted;

const TIMES_PY: &str = include_str!("../scripts/times.py");

#[test]
fn every_operation_moves_the_times_the_local_file_system_moves() {
    eddy_testkit::require::program("python3", "python3");
    let local = tempfile::tempdir().expect("tempdir");
    let reference = python(TIMES_PY, &[local.path().to_str().unwrap()], None);
    let kind = fs_type(local.path());
    assert!(reference.lines().count() > 40, "reference run: {reference}");

    let m = Mounted::start(3);
    std::fs::create_dir(m.path("mnt")).unwrap();
    let mounted = python(TIMES_PY, &[m.path("mnt").to_str().unwrap()], None);
    same_lines(
        &format!("the mount (reference: {kind})"),
        &reference,
        &mounted,
    );

    std::fs::create_dir(m.path("pre")).unwrap();
    let preloaded = python(TIMES_PY, &[&format!("{PREFIX}/pre")], Some(&m));
    same_lines(
        &format!("the preload library (reference: {kind})"),
        &reference,
        &preloaded,
    );
}
