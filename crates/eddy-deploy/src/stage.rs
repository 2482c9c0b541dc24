//! Stage-in, stage-out and unpin: move data between the backend and the cache on request,
//! through the client library; and the write-back `stop` does first.
//!
//! Paths are namespace paths or local paths under a mount of this deployment (see
//! `to_namespace`). The outcome is a `Report` (one result per file), which the caller prints
//! (`Report::lines`, or the report itself as JSON) and turns into its result
//! (`Report::outcome`: an error naming every file that failed).

use crate::human_bytes;
use crate::state::StateDir;
use anyhow::{anyhow, bail, Context, Result};
use eddy_client::{Client, FileResult};
use eddy_config::Deployment;
use eddy_proto::sync::lock;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::io::IsTerminal;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

/// Failed files named in a command's error message (all of them are in its output).
const NAMED_FAILURES: usize = 20;

/// Fetches the files or trees `paths` of the deployment in `state` into the cache (pinned
/// with `pin`: kept from eviction until `unpin`).
pub fn stage_in(state: &StateDir, paths: &[PathBuf], pin: bool) -> Result<Report> {
    let (paths, rt, client) = linked(state, paths)?;
    let bar = Bar::new("stage-in");
    let start = Instant::now();
    let files = rt.block_on(client.stage_in(&paths, pin, &|r| bar.part_ended(r)));
    bar.finish();
    Ok(Report::new(files, start.elapsed(), None))
}

/// Writes the dirty data under `paths` (every linked prefix when empty) of the deployment in
/// `state` back to the backend; returns once it is durable there. Files in conflict with
/// their backend copy (another writer) fail, or with `overwrite` are written over it.
pub fn stage_out(state: &StateDir, paths: &[PathBuf], overwrite: bool) -> Result<Report> {
    let (paths, rt, client) = linked(state, paths)?;
    Ok(write_back(&rt, &client, &paths, overwrite, "stage-out"))
}

/// `stage_in` of namespace paths taken as they are (a job's `#EDDY stage_in` lines, which
/// name namespace paths): nothing of this host is looked up, so a path a job's user names
/// never leads root through the user's links or mounts.
pub fn stage_in_namespace(state: &StateDir, paths: &[String], pin: bool) -> Result<Report> {
    let (rt, client) = linked_client(state)?;
    let bar = Bar::new("stage-in");
    let start = Instant::now();
    let files = rt.block_on(client.stage_in(paths, pin, &|r| bar.part_ended(r)));
    bar.finish();
    Ok(Report::new(files, start.elapsed(), None))
}

/// `stage_out` of namespace paths taken as they are (a job's `#EDDY stage_out` lines; see
/// `stage_in_namespace`).
pub fn stage_out_namespace(state: &StateDir, paths: &[String], overwrite: bool) -> Result<Report> {
    let (rt, client) = linked_client(state)?;
    Ok(write_back(&rt, &client, paths, overwrite, "stage-out"))
}

/// Pins released by `unpin`.
#[derive(Debug, Clone)]
pub struct Unpinned {
    /// Cached chunks whose pins went.
    pub chunks: u64,
    /// The trees, in words: "every linked prefix" or the namespace paths.
    pub under: String,
}

/// Releases the pins `stage_in` put on cached data under `paths` (every linked prefix when
/// empty), so that it can be evicted.
pub fn unpin(state: &StateDir, paths: &[PathBuf]) -> Result<Unpinned> {
    let (paths, rt, client) = linked(state, paths)?;
    let chunks = rt
        .block_on(client.unpin(&paths))
        .map_err(|e| anyhow!("cannot release the pins: {e}"))?;
    let under = if paths.is_empty() {
        "every linked prefix".to_string()
    } else {
        paths.join(", ")
    };
    Ok(Unpinned { chunks, under })
}

/// Writes the dirty data under `paths` (every linked prefix when empty) back to the backend,
/// with a progress bar labelled `label`. A failure of the whole operation (a daemon
/// unreachable) is the report's `error`, with the files that ended before it. The client
/// must be used in `rt` only (its connections live there).
pub fn write_back(
    rt: &Runtime,
    client: &Client,
    paths: &[String],
    overwrite: bool,
    label: &str,
) -> Report {
    let bar = Bar::new(label);
    let start = Instant::now();
    let result = rt.block_on(client.stage_out_with(paths, overwrite, &|r| bar.part_ended(r)));
    bar.finish();
    match result {
        Ok(files) => Report::new(files, start.elapsed(), None),
        Err(e) => Report::new(bar.seen(), start.elapsed(), Some(e.to_string())),
    }
}

/// A client for the deployment (links made lazily, so that a down daemon fails only the
/// requests that need it).
pub fn client(dep: Deployment) -> Result<Client> {
    Client::new(dep).map_err(|e| anyhow!("the deployment file is not usable: {e}"))
}

/// What the stage operations start from: the deployment of the state directory `state`
/// (which must link a backend), the namespace paths of the path arguments, a runtime and a
/// client for that runtime.
fn linked(state: &StateDir, args: &[PathBuf]) -> Result<(Vec<String>, Runtime, Client)> {
    let (rt, client) = linked_client(state)?;
    let paths = namespace_paths(state, args)?;
    Ok((paths, rt, client))
}

/// The runtime and client of the deployment in `state`, which must link a backend.
pub(crate) fn linked_client(state: &StateDir) -> Result<(Runtime, Client)> {
    let dep = state.load_deployment()?;
    require_links(&dep, state)?;
    let rt = crate::runtime()?;
    let client = client(dep)?;
    Ok((rt, client))
}

pub(crate) fn require_links(dep: &Deployment, state: &StateDir) -> Result<()> {
    if dep.config.links.is_empty() {
        bail!(
            "deployment {:?} (state {}) has no backend: nothing is linked; start it with \
             `eddy start --backend DIR` or `--link PREFIX=DIR`",
            dep.name,
            state.dir().display()
        );
    }
    Ok(())
}

// ------------------------------------------------------------------- paths

/// The namespace paths of the PATH arguments (see `to_namespace`).
pub fn namespace_paths(state: &StateDir, args: &[PathBuf]) -> Result<Vec<String>> {
    let mounts = live_mounts(state)?;
    let cwd = if args.iter().any(|a| a.is_relative()) {
        std::env::current_dir().context("cannot read the current directory")?
    } else {
        PathBuf::from("/")
    };
    args.iter()
        .map(|a| to_namespace(a, &cwd, &mounts))
        .collect()
}

/// The recorded mount points of the deployment that are FUSE mounts on this host now.
fn live_mounts(state: &StateDir) -> Result<Vec<PathBuf>> {
    let live = crate::mounts::fuse_mounts()?;
    Ok(state
        .mounts()?
        .into_iter()
        .filter(|m| live.contains(m))
        .collect())
}

/// The namespace path a PATH argument names. An argument that lies under one of `mounts`
/// (absolute, canonical mount points of this deployment), lexically or once the symbolic
/// links on the way to the mount are resolved, is translated to the path below the mount; a
/// relative argument is taken from `cwd` and must lie under a mount; any other absolute
/// argument is a namespace path as it is.
pub fn to_namespace(arg: &Path, cwd: &Path, mounts: &[PathBuf]) -> Result<String> {
    let abs = lexical(&cwd.join(arg));
    if let Some(ns) = below_mount(&abs, mounts)? {
        return Ok(ns);
    }
    if let Some(ns) = below_mount_resolved(&abs, mounts)? {
        return Ok(ns);
    }
    if arg.is_relative() {
        let live = if mounts.is_empty() {
            "none is mounted on this host".to_string()
        } else {
            let list: Vec<String> = mounts.iter().map(|m| m.display().to_string()).collect();
            format!("mounted here: {}", list.join(", "))
        };
        bail!(
            "{}: a relative path must lie under a mount of this deployment ({live}); \
             name a namespace path with an absolute path, e.g. /in/x",
            arg.display()
        );
    }
    arg.to_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("{}: a namespace path must be UTF-8", arg.display()))
}

/// `path` (absolute) without `.` and `..` components, worked out on the text only.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The namespace path of `abs` (absolute, lexical) if it lies under one of `mounts` (the
/// innermost one).
fn below_mount(abs: &Path, mounts: &[PathBuf]) -> Result<Option<String>> {
    let Some(mnt) = mounts
        .iter()
        .filter(|m| abs.starts_with(m))
        .max_by_key(|m| m.components().count())
    else {
        return Ok(None);
    };
    let mut ns = String::new();
    for c in abs.strip_prefix(mnt).unwrap_or(Path::new("")).components() {
        let name = c.as_os_str().to_str().ok_or_else(|| {
            anyhow!(
                "{}: the part under the mount must be UTF-8 to name a namespace path",
                abs.display()
            )
        })?;
        ns.push('/');
        ns.push_str(name);
    }
    Ok(Some(if ns.is_empty() { "/".into() } else { ns }))
}

/// Like `below_mount`, for a path that reaches a mount through a symbolic link: resolves
/// the path's ancestors from the top, and stops at the first that is missing or resolves
/// into a mount (so nothing below a mount is resolved here: the namespace's own symbolic
/// links are left to the library).
fn below_mount_resolved(abs: &Path, mounts: &[PathBuf]) -> Result<Option<String>> {
    let comps: Vec<Component> = abs.components().collect();
    let mut prefix = PathBuf::new();
    for (i, c) in comps.iter().enumerate() {
        prefix.push(c);
        // privileged-path: the paths the caller names on its own command line (eddy bb passes a job's as namespace paths, never here)
        let Ok(real) = std::fs::canonicalize(&prefix) else {
            return Ok(None);
        };
        if real == prefix {
            continue;
        }
        let mut candidate = real;
        candidate.extend(&comps[i + 1..]);
        if let Some(ns) = below_mount(&lexical(&candidate), mounts)? {
            return Ok(Some(ns));
        }
    }
    Ok(None)
}

// ------------------------------------------------------------------- results

/// The outcome of a stage-in or stage-out: the `--json` document.
#[derive(Debug, Serialize)]
pub struct Report {
    /// One result per file, by path.
    pub files: Vec<FileResult>,
    /// Bytes moved, over all files.
    pub bytes: u64,
    /// Files that failed.
    pub failed: u64,
    pub seconds: f64,
    /// Why the operation as a whole failed (e.g. a daemon unreachable); `files` then holds
    /// the files that ended before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Report {
    pub fn new(mut files: Vec<FileResult>, elapsed: Duration, error: Option<String>) -> Report {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Report {
            bytes: files.iter().map(|f| f.bytes).sum(),
            failed: files.iter().filter(|f| f.error.is_some()).count() as u64,
            files,
            seconds: elapsed.as_secs_f64(),
            error,
        }
    }

    pub fn failures(&self) -> impl Iterator<Item = &FileResult> {
        self.files.iter().filter(|f| f.error.is_some())
    }

    /// One line per file and a summary (`done` says what happened, e.g. "staged in";
    /// `nothing` is said when there was nothing to do). The summary is left out when the
    /// operation failed as a whole before any file ended (its error says it all).
    pub fn lines(&self, done: &str, nothing: &str) -> Vec<String> {
        let mut lines: Vec<String> = self.files.iter().map(result_line).collect();
        match (self.files.is_empty(), &self.error) {
            (true, None) => lines.push(format!("eddy: {nothing}")),
            (true, Some(_)) => {}
            (false, _) => lines.push(format!("eddy: {}", self.summary(done))),
        }
        lines
    }

    /// E.g. "staged out 3 files, 4.8 MiB in 0.3 s (16.0 MiB/s); 1 failed".
    pub fn summary(&self, done: &str) -> String {
        let n = self.files.len();
        let mut s = format!(
            "{done} {n} file{}, {} in {:.1} s ({}/s)",
            if n == 1 { "" } else { "s" },
            human_bytes(self.bytes),
            self.seconds,
            human_bytes((self.bytes as f64 / self.seconds.max(1e-3)) as u64)
        );
        if self.failed > 0 {
            s.push_str(&format!("; {} failed", self.failed));
        }
        s
    }

    /// The operation's result: an error made of `failure`, if any.
    pub fn outcome(&self, op: &str) -> Result<()> {
        match self.failure(op) {
            Some(msg) => Err(anyhow!(msg)),
            None => Ok(()),
        }
    }

    /// The error message of `op` if anything failed: the operation's own error, then every
    /// failed file (the first `NAMED_FAILURES` with their reasons).
    pub fn failure(&self, op: &str) -> Option<String> {
        let files = self.failed_list();
        match (&self.error, self.failed) {
            (None, 0) => None,
            (None, n) => Some(format!("{op} failed for {n} {}: {files}", plural(n))),
            (Some(e), 0) => Some(format!("{op} did not complete: {e}")),
            (Some(e), n) => Some(format!(
                "{op} did not complete: {e}; it failed for {n} {} before: {files}",
                plural(n)
            )),
        }
    }

    /// "/a/x (reason), /a/y (reason), … and N more".
    fn failed_list(&self) -> String {
        let mut parts: Vec<String> = self
            .failures()
            .take(NAMED_FAILURES)
            .map(|f| match why(f) {
                Why::Alone(e) => e.to_string(),
                Why::Of(e) => format!("{} ({e})", f.path),
            })
            .collect();
        let more = self.failed.saturating_sub(NAMED_FAILURES as u64);
        if more > 0 {
            parts.push(format!("… and {more} more"));
        }
        parts.join(", ")
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        "file"
    } else {
        "files"
    }
}

/// One file's line: status, bytes, path (and why it failed).
pub fn result_line(f: &FileResult) -> String {
    let bytes = human_bytes(f.bytes);
    match why(f) {
        _ if f.error.is_none() => format!("ok     {bytes:>10}  {}", f.path),
        Why::Alone(e) => format!("FAILED {bytes:>10}  {e}"),
        Why::Of(e) => format!("FAILED {bytes:>10}  {}: {e}", f.path),
    }
}

/// Why a file failed, without saying its path twice.
enum Why<'a> {
    /// The message names the file itself ("/in/x is not under a linked prefix").
    Alone(&'a str),
    /// The reason, to follow the file's path ("no such file or directory (ENOENT)").
    Of(&'a str),
}

/// The error of a failed file (an empty reason for one that did not fail).
fn why(f: &FileResult) -> Why<'_> {
    let e = f.error.as_deref().unwrap_or("");
    match e.strip_prefix(f.path.as_str()) {
        Some(rest) => match rest.strip_prefix(": ") {
            Some(reason) => Why::Of(reason),
            None if rest.starts_with(' ') => Why::Alone(e),
            None => Why::Of(e),
        },
        None => Why::Of(e),
    }
}

// ------------------------------------------------------------------- progress

/// The progress bar on stderr (hidden unless stderr is a terminal): bytes, files, rate. It
/// also merges the results it sees by file, for a report when the operation as a whole fails.
pub struct Bar {
    bar: ProgressBar,
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    files: BTreeMap<String, FileResult>,
    failed: HashSet<String>,
}

impl Bar {
    pub fn new(label: &str) -> Bar {
        let tty = std::io::stderr().is_terminal();
        let target = if tty {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(None, target);
        let style = ProgressStyle::with_template(
            "{spinner} {prefix}: {msg} {binary_bytes} ({binary_bytes_per_sec}) {elapsed}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
        bar.set_style(style);
        bar.set_prefix(label.to_string());
        bar.set_message("0 files");
        if tty {
            bar.enable_steady_tick(Duration::from_millis(200));
        }
        Bar {
            bar,
            seen: Mutex::new(Seen::default()),
        }
    }

    /// A file (stage-in) or one daemon's part of a file (stage-out) ended.
    pub fn part_ended(&self, r: &FileResult) {
        let mut seen = lock(&self.seen);
        let entry = seen
            .files
            .entry(r.path.clone())
            .or_insert_with(|| FileResult {
                path: r.path.clone(),
                bytes: 0,
                error: None,
            });
        entry.bytes += r.bytes;
        if entry.error.is_none() {
            entry.error.clone_from(&r.error);
        }
        if r.error.is_some() {
            seen.failed.insert(r.path.clone());
        }
        let msg = match seen.failed.len() {
            0 => format!("{} files", seen.files.len()),
            f => format!("{} files ({f} failed)", seen.files.len()),
        };
        drop(seen);
        self.bar.inc(r.bytes);
        self.bar.set_message(msg);
    }

    /// The results seen so far, merged by file.
    pub fn seen(&self) -> Vec<FileResult> {
        let seen = lock(&self.seen);
        seen.files.values().cloned().collect()
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(path: &str, bytes: u64) -> FileResult {
        FileResult {
            path: path.into(),
            bytes,
            error: None,
        }
    }

    fn bad(path: &str, why: &str) -> FileResult {
        FileResult {
            path: path.into(),
            bytes: 0,
            error: Some(why.into()),
        }
    }

    fn ns(arg: &str, cwd: &str, mounts: &[&str]) -> Result<String> {
        let mounts: Vec<PathBuf> = mounts.iter().map(PathBuf::from).collect();
        to_namespace(Path::new(arg), Path::new(cwd), &mounts)
    }

    #[test]
    fn local_paths_under_a_mount_become_namespace_paths() {
        let m = ["/tmp/mnt"];
        assert_eq!(ns("/tmp/mnt/in/x", "/", &m).unwrap(), "/in/x");
        assert_eq!(ns("/tmp/mnt", "/", &m).unwrap(), "/");
        assert_eq!(ns("/tmp/mnt/", "/", &m).unwrap(), "/");
        assert_eq!(ns("/tmp/mnt/./in//x/", "/", &m).unwrap(), "/in/x");
        assert_eq!(ns("/tmp/mnt/in/../out/y", "/", &m).unwrap(), "/out/y");
        // Relative paths are local, from the current directory.
        assert_eq!(ns("x", "/tmp/mnt/in", &m).unwrap(), "/in/x");
        assert_eq!(ns(".", "/tmp/mnt/in", &m).unwrap(), "/in");
        assert_eq!(ns("../out", "/tmp/mnt/in", &m).unwrap(), "/out");
        // The innermost of nested mounts wins.
        let nested = ["/tmp/mnt", "/tmp/mnt/in/sub"];
        assert_eq!(ns("/tmp/mnt/in/sub/f", "/", &nested).unwrap(), "/f");
    }

    #[test]
    fn other_absolute_paths_are_namespace_paths() {
        let m = ["/tmp/mnt"];
        assert_eq!(ns("/in/x", "/", &m).unwrap(), "/in/x");
        assert_eq!(ns("/in/x", "/", &[]).unwrap(), "/in/x");
        // A sibling sharing the mount's name as a text prefix is not under it.
        assert_eq!(ns("/tmp/mnt2/a", "/", &m).unwrap(), "/tmp/mnt2/a");
        // Passed on as given: the library normalises (and rejects) namespace paths.
        assert_eq!(ns("/in/./x/", "/", &m).unwrap(), "/in/./x/");
    }

    #[test]
    fn relative_paths_outside_a_mount_are_refused() {
        let err = ns("in/x", "/home/u", &["/tmp/mnt"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("relative path must lie under a mount"),
            "{err}"
        );
        assert!(err.contains("/tmp/mnt"), "{err}");
        let err = ns("x", "/home/u", &[]).unwrap_err().to_string();
        assert!(err.contains("none is mounted"), "{err}");
    }

    #[test]
    fn symbolic_links_to_a_mount_are_followed() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(real.join("a/mnt")).unwrap();
        std::os::unix::fs::symlink(real.join("a"), real.join("link")).unwrap();
        std::os::unix::fs::symlink(real.join("a/mnt"), real.join("direct")).unwrap();
        let mounts = vec![real.join("a/mnt")];
        let via = real.join("link/mnt/in/x");
        assert_eq!(
            to_namespace(&via, Path::new("/"), &mounts).unwrap(),
            "/in/x"
        );
        let direct = real.join("direct/in");
        assert_eq!(
            to_namespace(&direct, Path::new("/"), &mounts).unwrap(),
            "/in"
        );
        let elsewhere = real.join("link/other");
        assert_eq!(
            to_namespace(&elsewhere, Path::new("/"), &mounts).unwrap(),
            elsewhere.to_str().unwrap()
        );
    }

    #[test]
    fn report_sums_sorts_and_formats() {
        let r = Report::new(
            vec![ok("/in/b", 2048), bad("/in/a", "EROFS"), ok("/in/c", 1)],
            Duration::from_millis(500),
            None,
        );
        let paths: Vec<&str> = r.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["/in/a", "/in/b", "/in/c"]);
        assert_eq!((r.bytes, r.failed), (2049, 1));
        assert_eq!(result_line(&r.files[1]), "ok        2.0 KiB  /in/b");
        assert_eq!(result_line(&r.files[0]), "FAILED        0 B  /in/a: EROFS");
        assert_eq!(
            r.summary("staged out"),
            "staged out 3 files, 2.0 KiB in 0.5 s (4.0 KiB/s); 1 failed"
        );
        let json: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(json["bytes"], 2049);
        assert_eq!(json["failed"], 1);
        assert_eq!(json["files"][0]["error"], "EROFS");
        assert_eq!(json["files"][1]["error"], serde_json::Value::Null);
        assert!(json.get("error").is_none(), "{json}");
    }

    #[test]
    fn failures_name_every_failed_file() {
        let clean = Report::new(vec![ok("/a", 1)], Duration::ZERO, None);
        assert_eq!(clean.failure("stage-out"), None);
        let two = Report::new(
            vec![bad("/a/x", "read-only"), ok("/a/y", 3), bad("/a/z", "EIO")],
            Duration::ZERO,
            None,
        );
        assert_eq!(
            two.failure("stage-out").unwrap(),
            "stage-out failed for 2 files: /a/x (read-only), /a/z (EIO)"
        );
        let many: Vec<FileResult> = (0..25).map(|i| bad(&format!("/f{i:02}"), "e")).collect();
        let msg = Report::new(many, Duration::ZERO, None)
            .failure("stage-in")
            .unwrap();
        assert!(
            msg.starts_with("stage-in failed for 25 files: /f00 (e),"),
            "{msg}"
        );
        assert!(msg.contains("/f19 (e), … and 5 more"), "{msg}");
        assert!(!msg.contains("/f20"), "{msg}");
        let down = Report::new(
            vec![bad("/a/x", "EIO")],
            Duration::ZERO,
            Some("daemon 2 unreachable".into()),
        );
        assert_eq!(
            down.failure("stage-out").unwrap(),
            "stage-out did not complete: daemon 2 unreachable; it failed for 1 file \
             before: /a/x (EIO)"
        );
        let json: serde_json::Value = serde_json::to_value(&down).unwrap();
        assert_eq!(json["error"], "daemon 2 unreachable");
    }

    #[test]
    fn a_path_the_error_names_is_not_repeated() {
        let enoent = bad("/in/m", "/in/m: no such file or directory (ENOENT)");
        let scratch = bad("/s/x", "/s/x is not under a linked prefix (EINVAL)");
        let other = bad("/in/mm", "/in/m: odd");
        assert_eq!(
            result_line(&enoent),
            "FAILED        0 B  /in/m: no such file or directory (ENOENT)"
        );
        assert_eq!(
            result_line(&scratch),
            "FAILED        0 B  /s/x is not under a linked prefix (EINVAL)"
        );
        assert_eq!(result_line(&other), "FAILED        0 B  /in/mm: /in/m: odd");
        let msg = Report::new(vec![enoent, scratch, other], Duration::ZERO, None)
            .failure("stage-in")
            .unwrap();
        assert_eq!(
            msg,
            "stage-in failed for 3 files: /in/m (no such file or directory (ENOENT)), \
             /in/mm (/in/m: odd), /s/x is not under a linked prefix (EINVAL)"
        );
    }

    #[test]
    fn bar_merges_parts_of_a_file() {
        let bar = Bar::new("test");
        bar.part_ended(&ok("/a", 10));
        bar.part_ended(&ok("/b", 1));
        bar.part_ended(&bad("/a", "EIO"));
        bar.part_ended(&ok("/a", 5));
        bar.finish();
        let seen = bar.seen();
        assert_eq!(
            seen,
            vec![
                FileResult {
                    path: "/a".into(),
                    bytes: 15,
                    error: Some("EIO".into())
                },
                ok("/b", 1)
            ]
        );
    }
}
