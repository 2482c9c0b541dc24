//! The guide's examples, run: every fenced block marked ```` ```sh,test ```` in `README.md` and
//! in the chapters of `docs/guide/` (in `SUMMARY.md`'s order) is run, in order, one bash per
//! document (`set -euo pipefail`, so a variable a block exports is there for the next), with
//! this build's `eddy` first on `PATH` and `HOME` a fresh directory, against the real
//! deployments the blocks themselves start (daemons and FUSE mounts). A block that fails fails
//! the test with its document, the commands as they ran and their output. Whatever a document
//! left running is stopped afterwards (`eddy stop --discard` of every state directory under
//! its `HOME`, then its mounts unmounted), so a failure leaves nothing behind. Decision 0064.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

use eddy_testkit::{bin_dir, eddy_bin, require};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The info string of a block the test runs (mdBook renders it as shell).
const MARK: &str = "sh,test";

/// The longest one document's blocks may take (a guard against a hang, not a measure).
const BOUND: Duration = Duration::from_secs(600);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The documents whose blocks run: the README, then the guide's chapters in SUMMARY's order.
fn documents() -> Vec<PathBuf> {
    let guide = repo().join("docs/guide");
    let summary = std::fs::read_to_string(guide.join("SUMMARY.md")).unwrap();
    let mut docs = vec![repo().join("README.md")];
    for line in summary.lines() {
        if let Some(start) = line.find("](") {
            let rest = &line[start + 2..];
            let target = &rest[..rest.find(')').unwrap()];
            docs.push(guide.join(target));
        }
    }
    docs
}

/// The blocks of `text` marked to run, in order. Panics on a block whose info string names
/// `test` in another form (a marker the test would silently skip).
fn marked_blocks(name: &str, text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, Vec<&str>)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            None if trimmed.starts_with("```") => {
                let info = trimmed.trim_start_matches('`').trim().to_string();
                assert!(
                    info == MARK || !info.contains("test"),
                    "{name}:{}: code block marked `{info}`: the guide's test runs `{MARK}` only",
                    i + 1
                );
                open = Some((info, Vec::new()));
            }
            None => {}
            Some((info, lines)) => {
                if trimmed.starts_with("```") {
                    if info == MARK {
                        blocks.push(lines.join("\n"));
                    }
                    open = None;
                } else {
                    lines.push(line);
                }
            }
        }
    }
    assert!(open.is_none(), "{name}: a code block is not closed");
    blocks
}

fn name_of(doc: &Path) -> String {
    doc.strip_prefix(repo())
        .unwrap_or(doc)
        .display()
        .to_string()
}

/// Stops what a document left running under `home`: every deployment (by its state
/// directory), then any mount still there.
fn clean_up(home: &Path) {
    let mut states = Vec::new();
    let mut dirs = vec![(home.to_path_buf(), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.file_name().is_some_and(|n| n == "deployment.toml") {
                states.push(dir.clone());
            } else if depth < 3 && e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push((p, depth + 1));
            }
        }
    }
    for state in states {
        let _ = Command::new(eddy_bin())
            .args(["stop", "--discard", "--state"])
            .arg(&state)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    for line in mounts.lines() {
        if let Some(point) = line.split_whitespace().nth(1) {
            if Path::new(point).starts_with(home) {
                let _ = Command::new("umount").args(["-l", point]).status();
            }
        }
    }
}

/// A document's HOME: what it left running is stopped when it is dropped, also when the
/// test fails, before the directory goes.
struct Home(tempfile::TempDir);

impl Drop for Home {
    fn drop(&mut self) {
        clean_up(self.0.path());
    }
}

/// Runs `script` in bash with `home` as HOME and working directory; the exit status and the
/// output (stdout and stderr, interleaved as bash -x wrote them).
fn run(script: &str, home: &Path) -> (Option<i32>, String) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![bin_dir()];
    dirs.extend(std::env::split_paths(&path));
    let file = home.join(".guide.sh");
    std::fs::write(&file, format!("set -euo pipefail -x\n{script}\n")).unwrap();
    let mut child = Command::new("bash")
        .arg("--noprofile")
        .arg("--norc")
        .arg(&file)
        .current_dir(home)
        .env("HOME", home)
        .env("PATH", std::env::join_paths(dirs).unwrap())
        .env_remove("EDDY_STATE")
        .env_remove("EDDY_PREFIX")
        .env_remove("LD_PRELOAD")
        .env_remove("XDG_DATA_HOME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        let _ = tx.send(s);
    });
    let out = match rx.recv_timeout(BOUND) {
        Ok(out) => out,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the blocks did not end within {BOUND:?} (a hang)");
        }
    };
    let status = child.wait().unwrap();
    let err = err_reader.join().unwrap();
    (status.code(), format!("{err}\n--- stdout ---\n{out}"))
}

#[test]
fn the_marked_blocks_are_found() {
    let docs = documents();
    for doc in &docs {
        assert!(doc.is_file(), "{} is listed but missing", name_of(doc));
    }
    let count = |name: &str| {
        let doc = repo().join(name);
        marked_blocks(name, &std::fs::read_to_string(doc).unwrap()).len()
    };
    // The front door's first job and the guide's first chapters are what users type first:
    // their examples must stay marked (a marker lost would make this test vacuous).
    assert!(count("README.md") >= 1, "README.md has no `{MARK}` block");
    assert!(
        count("docs/guide/getting-started.md") >= 4,
        "getting-started.md lost its blocks"
    );
    assert!(
        count("docs/guide/backend-tier.md") >= 1,
        "backend-tier.md lost its block"
    );
    let blocks = marked_blocks(
        "x",
        "a\n```sh,test\necho one\n```\n```sh\nno\n```\n```sh,test\necho two\n```\n",
    );
    assert_eq!(blocks, ["echo one", "echo two"]);
}

#[test]
#[should_panic(expected = "the guide's test runs `sh,test` only")]
fn a_misspelt_marker_is_refused() {
    marked_blocks("x", "```sh test\necho\n```\n");
}

#[test]
fn the_guide_examples_run() {
    require::root("mount the examples' deployments for every user, as the guide's root does");
    require::fuse();
    let _ = eddy_bin(); // this build's programs, or a failure saying how to build them
    let mut ran = 0;
    for doc in documents() {
        let name = name_of(&doc);
        let blocks = marked_blocks(&name, &std::fs::read_to_string(&doc).unwrap());
        if blocks.is_empty() {
            continue;
        }
        let home = Home(
            tempfile::Builder::new()
                .prefix("eddy-guide-")
                .tempdir()
                .unwrap(),
        );
        let (code, output) = run(&blocks.join("\n"), home.0.path());
        drop(home);
        assert_eq!(
            code,
            Some(0),
            "{name}: its `{MARK}` blocks failed (exit {code:?}):\n{output}"
        );
        eprintln!("{name}: {} block(s) ran", blocks.len());
        ran += blocks.len();
    }
    assert!(ran >= 6, "only {ran} blocks ran");
}
