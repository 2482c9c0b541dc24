//! Python scripts as tests run them: `python3 -c SCRIPT ARGS...`, to completion (`py`) or in
//! the background with their output read line by line (`py_spawn`, `wait_line`, `finish`).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

/// Debian's interpreter, for which python3-h5py is built (scripts/install-deps.sh).
pub const PYTHON: &str = "/usr/bin/python3";

/// Runs a python3 script with `args`; panics with its stderr when it fails.
pub fn py(script: &str, args: &[&Path]) -> String {
    let out = Command::new(PYTHON)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 is required");
    assert!(
        out.status.success(),
        "python3 failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts a python3 script with piped stdout.
pub fn py_spawn(script: &str, args: &[&Path]) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new(PYTHON)
        .arg("-c")
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 is required");
    let out = BufReader::new(child.stdout.take().expect("stdout"));
    (child, out)
}

/// Reads lines until one equals `want`; panics if the output ends first.
pub fn wait_line(out: &mut BufReader<ChildStdout>, want: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).expect("read child output");
        assert!(n > 0, "the child ended before printing {want:?}");
        if line.trim() == want {
            return;
        }
    }
}

/// Waits for a child; panics unless it succeeded.
pub fn finish(mut child: Child) {
    let st = child.wait().expect("wait");
    assert!(st.success(), "child failed: {st}");
}

/// Runs `script` once per argument list, all at once, each a python3 process whose file
/// calls under `prefix` go to the deployment of state directory `state` through
/// libeddy_preload.so; process *i* gets `PMI_RANK=i` when `ranks` (an MPI rank, as a
/// launcher sets it). Each must succeed and print `done`.
pub fn preload_procs(state: &Path, prefix: &str, script: &str, procs: &[Vec<String>], ranks: bool) {
    let children: Vec<Child> = procs
        .iter()
        .enumerate()
        .map(|(i, args)| {
            let mut cmd = crate::preloaded(PYTHON, prefix, state);
            cmd.arg("-c").arg(script).args(args).stdout(Stdio::piped());
            if ranks {
                cmd.env("PMI_RANK", i.to_string());
            }
            cmd.spawn().expect("python3")
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().expect("wait");
        assert!(out.status.success(), "a workload process failed");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");
    }
}
