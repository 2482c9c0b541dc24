//! The Python package as a user gets it: the wheel built by maturin (one abi3 wheel),
//! installed with pip in a fresh venv (no other package) and used there, and installed in
//! the venv of the pinned test packages (numpy, pandas, pyarrow, zarr, xarray, fsspec,
//! pytest: `scripts/python-env.sh`, `make python-test-env`) where the pytest suite of
//! `tests/python` runs against three real daemons started by `eddy start --local 3`; then
//! `eddy stop` stores the job's profile and the history tests read it back. A package that
//! cannot be installed or imported fails the test. The root lane (it builds, and installs
//! from PyPI on first use).

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

use eddy_testkit::cli::{eddy_cmd, text};
use eddy_testkit::{bin_dir, eddy_bin, require};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The interpreter the venvs are made from (Debian's: what scripts/install-deps.sh installs).
const PYTHON: &str = "/usr/bin/python3";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn check(what: &str, out: &Output) {
    assert!(out.status.success(), "{what} failed: {}", text(out));
}

fn run(what: &str, cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| require::missing(&format!("{what}: cannot run: {e}")));
    check(what, &out);
    out
}

/// maturin: $MATURIN, else the venv scripts/install-deps.sh puts it in.
fn maturin() -> PathBuf {
    let m = std::env::var_os("MATURIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/eddy/maturin-venv/bin/maturin"));
    if !m.exists() {
        require::missing(&format!(
            "maturin ({}; scripts/install-deps.sh installs it)",
            m.display()
        ));
    }
    m
}

/// The build's directory (CARGO_TARGET_DIR, else target): the parent of `bin_dir`.
fn target_dir() -> PathBuf {
    bin_dir()
        .parent()
        .map(Path::to_path_buf)
        .expect("the build directory")
}

/// The wheel of this source, built (debug profile, with the build's other crates) into `out`.
fn build_wheel(out: &Path) -> PathBuf {
    run(
        "maturin build",
        Command::new(maturin())
            .arg("build")
            .arg("--manifest-path")
            .arg(workspace().join("crates/eddy-py/Cargo.toml"))
            .arg("--out")
            .arg(out)
            .args(["--interpreter", PYTHON])
            .env("CARGO_TARGET_DIR", target_dir()),
    );
    let wheels: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    assert_eq!(wheels.len(), 1, "one wheel expected: {wheels:?}");
    let name = wheels[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        name.contains("-cp39-abi3-"),
        "not an abi3 wheel for 3.9+: {name}"
    );
    wheels[0].clone()
}

/// The venv of the pinned test packages, made (or kept) by scripts/python-env.sh.
fn test_venv() -> PathBuf {
    let venv = target_dir().join("python-test-venv");
    run(
        "scripts/python-env.sh",
        Command::new("bash")
            .arg(workspace().join("scripts/python-env.sh"))
            .arg(&venv)
            .arg(workspace().join("crates/eddy-py/requirements-test.txt")),
    );
    run(
        "importing the test packages",
        Command::new(venv.join("bin/python")).args([
            "-c",
            "import numpy, pandas, pyarrow, zarr, xarray, fsspec, pytest",
        ]),
    );
    venv
}

/// A deployment of three daemons started by `eddy start`, stopped when dropped.
struct Deployment {
    state: PathBuf,
    running: bool,
}

impl Deployment {
    fn start(dir: &Path, config: &Path) -> Deployment {
        let state = dir.join("state");
        let out = eddy_cmd()
            .args(["start", "--local", "3", "--root"])
            .arg(dir.join("root"))
            .arg("--state")
            .arg(&state)
            .arg("--config")
            .arg(config)
            .output()
            .unwrap();
        check("eddy start", &out);
        Deployment {
            state,
            running: true,
        }
    }

    fn stop(&mut self) {
        if std::mem::take(&mut self.running) {
            let out = eddy_cmd()
                .arg("stop")
                .arg("--state")
                .arg(&self.state)
                .output()
                .unwrap();
            check("eddy stop", &out);
        }
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        if self.running {
            self.running = false;
            let _ = eddy_cmd()
                .arg("stop")
                .arg("--state")
                .arg(&self.state)
                .output();
        }
    }
}

/// What a fresh venv with nothing but the wheel does: connect through EDDY_STATE, write,
/// list, read back.
const SMOKE: &str = r#"
import eddy, sys
fs = eddy.connect()
fs.makedirs("/fresh/venv", exist_ok=True)
with fs.open("/fresh/venv/hello.txt", "w") as f:
    f.write("hello from a fresh venv\n" * 1000)
assert fs.listdir("/fresh/venv") == ["hello.txt"], fs.listdir("/fresh/venv")
with fs.open("/fresh/venv/hello.txt") as f:
    assert f.read() == "hello from a fresh venv\n" * 1000
print("python", sys.version_info[:2], "eddy", eddy.__version__, "ok")
"#;

fn pytest(venv: &Path, state: &Path, marks: &str, extra: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(venv.join("bin/python"));
    cmd.args(["-m", "pytest", "-v", "-p", "no:cacheprovider", "-m", marks])
        .arg(workspace().join("crates/eddy-py/tests/python"))
        .env("EDDY_STATE", state)
        .env("EDDY_BIN", eddy_bin())
        .env("XDG_DATA_HOME", eddy_testkit::cli::test_data_home());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn the_wheel_installs_in_a_fresh_venv_and_its_tests_pass_against_real_daemons() {
    let dir = tempfile::tempdir().unwrap();
    let venv = test_venv();
    let wheel = build_wheel(&dir.path().join("wheels"));
    run(
        "pip install of the wheel in the test venv",
        Command::new(venv.join("bin/pip"))
            .args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--force-reinstall",
                "--no-deps",
            ])
            .arg(&wheel),
    );
    let fresh = dir.path().join("fresh");
    run(
        "python3 -m venv",
        Command::new(PYTHON).args(["-m", "venv"]).arg(&fresh),
    );
    run(
        "pip install of the wheel in a fresh venv",
        Command::new(fresh.join("bin/pip"))
            .args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-index",
            ])
            .arg(&wheel),
    );

    let history = dir.path().join("history.db");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "chunk_size = 65536\nhistory_db = {:?}\n",
            history.display().to_string()
        ),
    )
    .unwrap();
    let mut dep = Deployment::start(dir.path(), &config);

    let smoke = run(
        "the fresh venv's script",
        Command::new(fresh.join("bin/python"))
            .args(["-c", SMOKE])
            .env("EDDY_STATE", &dep.state),
    );
    assert!(String::from_utf8_lossy(&smoke.stdout).contains(" ok"));

    let out = pytest(&venv, &dep.state, "not history", &[]);
    check("pytest", &out);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains(" passed"), "{said}");
    // The examples of examples/python ran among them.
    for t in [
        "test_hello_writes_reads_back_and_lists",
        "test_dataframes_go_through_eddy_urls",
    ] {
        assert!(
            said.contains(&format!("test_examples.py::{t} PASSED")),
            "{said}"
        );
    }

    // The stop stores the job's profile in the configured history; the history tests read
    // it through the package and through `eddy history`.
    dep.stop();
    assert!(
        history.exists(),
        "eddy stop stored no profile in {}",
        history.display()
    );
    let out = pytest(
        &venv,
        &dep.state,
        "history",
        &[("EDDY_TEST_HISTORY_DB", &history)],
    );
    check("pytest -m history", &out);
}
