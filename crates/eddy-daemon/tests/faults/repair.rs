//! Repair (decision 0021): with `replicas = 2` and three real daemons, a daemon killed with
//! SIGKILL in the middle of a write-heavy workload through a FUSE mount, then started again,
//! gets what it missed (`eddy repair` waits for it), started by the test or by
//! `eddy replace --keep-root`; a dead daemon whose root is wiped is replaced
//! (`eddy replace`) and gets a full copy of what it owns. Each time the copies are
//! counted in the daemons' stores (every chunk of every file and every metadata record on
//! exactly two daemons, equal), and another daemon is killed: everything still reads back.

use eddy_client::{Client, Creds};
use eddy_config::Config;
use eddy_daemon::{DaemonSettings, Embedded, Inventory};
use eddy_testkit::cli::{eddy, ok, s, text};
use eddy_testkit::workload::{file_len, verify_mount, write_through_a_kill};
use eddy_testkit::{pattern, Cluster, Mounted};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const REPLICAS: usize = 2;
const WRITERS: usize = 4;

fn config() -> Config {
    Config {
        replicas: REPLICAS,
        rpc_timeout_ms: 3_000,
        connect_timeout_ms: 1_000,
        repair_interval_ms: 200,
        ..eddy_testkit::test_config()
    }
}

/// The status of a deployment as `eddy status --json` reports it (and whether it succeeded).
fn status_json(state: &Path) -> (bool, serde_json::Value) {
    let out = eddy(&["status", "--state", s(state), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status --json is not JSON ({e}): {}", text(&out)));
    (out.status.success(), v)
}

/// `eddy repair` must succeed, and the deployment be healthy afterwards.
fn repair_to_health(state: &Path) {
    ok(&["repair", "--state", s(state)]);
    let (up, v) = status_json(state);
    assert!(up, "status failed after repair: {v}");
    assert_eq!(v["health"], "healthy", "{v}");
    assert_eq!(v["under_replicated"], 0, "{v}");
    for d in v["daemons"].as_array().unwrap() {
        assert_eq!(d["hints"], 0, "{d}");
        assert_eq!(d["rejoining"], false, "{d}");
    }
}

/// Opens the stores of stopped daemons, as the daemons open them, and reads what they hold.
fn inventories(roots: &[PathBuf]) -> Vec<Inventory> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    roots
        .iter()
        .map(|root| {
            let listen = "127.0.0.1:0".parse().unwrap();
            let mut settings = DaemonSettings::new(root, listen, vec![1; 32], config());
            settings.socket = None;
            let store = rt
                .block_on(Embedded::open(settings))
                .unwrap_or_else(|e| panic!("cannot open the stores of {}: {e}", root.display()));
            store.inventory().unwrap()
        })
        .collect()
}

/// Every chunk of every file (file id → length) on exactly R daemons, with the same
/// content; no chunk of any other file anywhere; every metadata record on exactly R
/// daemons, the same on each.
fn count_copies(inv: &[Inventory], files: &BTreeMap<u128, u64>, cs: u64) {
    let mut chunks: BTreeMap<(u128, u64), Vec<(usize, eddy_proto::repair::Digest)>> =
        BTreeMap::new();
    for (d, i) in inv.iter().enumerate() {
        for (&item, &digest) in &i.chunks {
            chunks.entry(item).or_default().push((d, digest));
        }
    }
    let mut want = 0;
    for (&id, &len) in files {
        for k in 0..len.div_ceil(cs) {
            want += 1;
            let copies = chunks.get(&(id, k)).cloned().unwrap_or_default();
            assert_eq!(
                copies.len(),
                REPLICAS,
                "chunk {k} of file {id:032x} is on daemons {:?}",
                copies.iter().map(|c| c.0).collect::<Vec<_>>()
            );
            let expect = (len - k * cs).min(cs);
            for (d, digest) in &copies {
                assert_eq!(
                    digest.map(|(l, _)| l),
                    Some(expect),
                    "chunk {k} of file {id:032x} on daemon {d}"
                );
            }
            assert!(
                copies.windows(2).all(|w| w[0].1 == w[1].1),
                "the copies of chunk {k} of file {id:032x} differ: {copies:?}"
            );
        }
    }
    let stray: Vec<_> = chunks
        .keys()
        .filter(|(id, _)| !files.contains_key(id))
        .collect();
    assert!(stray.is_empty(), "chunks of no file: {stray:?}");
    assert_eq!(chunks.len(), want, "chunks held");
    let mut keys: BTreeMap<&[u8], Vec<(usize, &[u8])>> = BTreeMap::new();
    for (d, i) in inv.iter().enumerate() {
        for (k, v) in &i.keys {
            keys.entry(k).or_default().push((d, v));
        }
    }
    assert!(!keys.is_empty());
    for (k, copies) in &keys {
        let path = eddy_proto::path::key_to_path(k);
        assert_eq!(
            copies.len(),
            REPLICAS,
            "metadata of {path:?} is on daemons {:?}",
            copies.iter().map(|c| c.0).collect::<Vec<_>>()
        );
        assert!(
            copies.windows(2).all(|w| w[0].1 == w[1].1),
            "the copies of the metadata of {path:?} differ"
        );
    }
}

/// Writes `/a/f<i>` for each `i` of `range` (the workload's file `i` of wave `wave`, see
/// `file_len`) through a client of `dep`, and adds each (path, length) to `files`.
async fn write_files(
    dep: &eddy_config::Deployment,
    range: std::ops::Range<u64>,
    wave: usize,
    files: &mut Vec<(String, usize)>,
) -> Client {
    let me = Creds::root();
    let c = Client::connect(dep.clone()).await.unwrap();
    for i in range {
        let p = format!("/a/f{i}");
        let len = file_len(wave, i as usize);
        let f = c.create(&p, 0o644, true, me).await.unwrap();
        c.pwrite(&f, 0, &pattern(i, 0, len)).await.unwrap();
        c.close(&f).await.unwrap();
        files.push((p, len));
    }
    c
}

/// The files a workload left: path → (file id, length), by a client of the deployment.
async fn file_ids(c: &Client, files: &[(String, usize)]) -> BTreeMap<u128, u64> {
    let mut out = BTreeMap::new();
    for (p, len) in files {
        let st = c.stat(p).await.unwrap_or_else(|e| panic!("stat {p}: {e}"));
        assert_eq!(st.size, *len as u64, "{p}");
        out.insert(st.file_id, st.size);
    }
    out
}

#[test]
fn a_daemon_killed_in_a_workload_and_restarted_gets_every_copy_back() {
    let mut m = Mounted::start_with(3, config());
    let state = m.cluster.dir.path().to_path_buf();
    let root = m.path("");
    let kept = write_through_a_kill(&root, WRITERS, || m.cluster.kill(2));
    verify_mount(&root, &kept);
    // Daemon 2 missed two thirds of the workload: the others hold hints for it.
    let (up, v) = status_json(&state);
    assert!(!up, "status succeeded with a daemon down: {v}");
    assert!(v["under_replicated"].as_u64().unwrap() > 0, "{v}");

    m.cluster.restart(2);
    repair_to_health(&state);
    let files: Vec<(String, usize)> = kept
        .iter()
        .enumerate()
        .flat_map(|(w, k)| {
            k.iter()
                .map(move |&i| (format!("/m{w}/f{i}"), file_len(w, i)))
        })
        .collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ids = rt.block_on(async { file_ids(&m.cluster.client().await, &files).await });
    assert_eq!(ids.len(), files.len());

    // Count the copies in the stores themselves: stop every daemon, open its stores.
    for i in 0..3 {
        assert!(m.cluster.terminate(i), "daemon {i} did not stop cleanly");
    }
    let roots: Vec<PathBuf> = (0..3).map(|i| m.cluster.root_of(i).to_path_buf()).collect();
    let cs = m.cluster.dep.config.chunk_size;
    count_copies(&inventories(&roots), &ids, cs);

    // All three start again at once (all rejoin; none waits for another forever), then
    // another daemon dies: what it shared with daemon 2 is read from daemon 2.
    for i in 0..3 {
        m.cluster.restart(i);
    }
    repair_to_health(&state);
    m.cluster.kill(0);
    verify_mount(&root, &kept);
    let other = m.another_mount();
    verify_mount(&other.path(""), &kept);
}

/// Stops the deployment in `state` when the test ends, whatever happened.
struct StopGuard(PathBuf);

impl Drop for StopGuard {
    fn drop(&mut self) {
        let _ = eddy(&["stop", "--state", s(&self.0)]);
    }
}

/// The pid `eddy start` recorded for daemon `id`.
fn daemon_pid(state: &Path, id: u32) -> i32 {
    let pids = std::fs::read_to_string(state.join("pids")).unwrap();
    let label = format!("daemon-{id}");
    pids.lines()
        .find(|l| l.split_whitespace().next() == Some(label.as_str()))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid of {label} in {pids}"))
}

fn kill_daemon(state: &Path, id: u32) {
    let pid = daemon_pid(state, id);
    // SAFETY: plain kill(2) of a daemon this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    eddy_testkit::eventually::eventually("the killed daemon is gone or a zombie", || {
        let gone = !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| {
                    s[s.rfind(')').unwrap_or(0) + 1..]
                        .trim_start()
                        .starts_with('Z')
                })
                .unwrap_or(true);
        gone.then_some(())
    });
}

fn start_args<'a>(root: &'a Path, cfg: &'a Path) -> Vec<&'a str> {
    vec![
        "start",
        "--local",
        "3",
        "--root",
        s(root),
        "--replicas",
        "2",
        "--chunk-size",
        "65536",
        "--config",
        s(cfg),
        "--name",
        "t",
    ]
}

#[test]
fn a_wiped_daemon_is_replaced_with_a_full_copy() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let cfg = dir.path().join("config.toml");
    std::fs::write(
        &cfg,
        "rpc_timeout_ms = 3000\nconnect_timeout_ms = 1000\nrepair_interval_ms = 200\n",
    )
    .unwrap();
    let _guard = StopGuard(root.clone());
    ok(&start_args(&root, &cfg));
    let dep = eddy_config::Deployment::load(&root.join("deployment.toml")).unwrap();
    let me = Creds::root();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut files: Vec<(String, usize)> = Vec::new();
    rt.block_on(async {
        let c = Client::connect(dep.clone()).await.unwrap();
        c.mkdir("/a", 0o755, me).await.unwrap();
        write_files(&dep, 0..30, 0, &mut files).await;
    });
    kill_daemon(&root, 1);
    let d1 = root.join("d1");
    // Written and removed while daemon 1 is dead: hinted as well as copied in full.
    rt.block_on(async {
        let c = write_files(&dep, 30..40, 1, &mut files).await;
        for i in [3usize, 31] {
            c.unlink(&format!("/a/f{i}"), me).await.unwrap();
        }
    });
    files.retain(|(p, _)| p != "/a/f3" && p != "/a/f31");
    // Started again on its root (it rejoins with what it has), then dead again and wiped.
    ok(&["replace", "1", "--keep-root", "--state", s(&root)]);
    repair_to_health(&root);
    kill_daemon(&root, 1);
    rt.block_on(async {
        let c = write_files(&dep, 40..44, 1, &mut files).await;
        c.unlink("/a/f32", me).await.unwrap();
    });
    files.retain(|(p, _)| p != "/a/f32");
    let err = eddy_testkit::cli::fails(&["replace", "1", "--state", s(&root)]);
    assert!(err.contains("not empty"), "{err}");
    std::fs::remove_dir_all(&d1).unwrap();
    let err = eddy_testkit::cli::fails(&["repair", "--state", s(&root)]);
    assert!(err.contains("daemon 1"), "{err}");
    ok(&["replace", "1", "--state", s(&root)]);
    repair_to_health(&root);
    let ids = rt.block_on(async {
        let c = Client::connect(dep.clone()).await.unwrap();
        file_ids(&c, &files).await
    });

    ok(&["stop", "--state", s(&root)]);
    let roots: Vec<PathBuf> = (0..3).map(|i| root.join(format!("d{i}"))).collect();
    count_copies(&inventories(&roots), &ids, 65536);

    // The deployment again on the same roots; then daemon 2 dies: what it shared with the
    // replacement is read from the replacement.
    ok(&start_args(&root, &cfg));
    repair_to_health(&root);
    kill_daemon(&root, 2);
    let dep = eddy_config::Deployment::load(&root.join("deployment.toml")).unwrap();
    rt.block_on(async {
        let c = Client::connect(dep).await.unwrap();
        for (p, len) in &files {
            let i: u64 = p.trim_start_matches("/a/f").parse().unwrap();
            let w = if i < 30 { 0 } else { 1 };
            let want = pattern(i, 0, file_len(w, i as usize));
            assert_eq!(want.len(), *len);
            let f = c.open(p, libc::O_RDONLY, 0, me).await.unwrap();
            let got = c.pread(&f, 0, len + 10).await.unwrap();
            assert!(got == want, "{p} differs");
        }
    });
}

#[test]
fn repair_names_the_daemons_it_waits_for() {
    let mut cl = Cluster::start_with(3, config());
    let state = cl.dir.path().to_path_buf();
    cl.kill(0);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = cl.client().await;
        for i in 0..8 {
            let f = c
                .create(&format!("/x{i}"), 0o644, true, Creds::root())
                .await
                .unwrap();
            c.pwrite(&f, 0, &pattern(i, 0, 200_000)).await.unwrap();
            c.close(&f).await.unwrap();
        }
    });
    let out = eddy(&["repair", "--state", s(&state)]);
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("daemon 0:"), "{err}");
    assert!(err.contains("wait for it"), "{err}");
    cl.restart(0);
    repair_to_health(&state);
}

/// The uid a process runs as (/proc/PID/status, effective).
fn uid_of_process(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("no Uid in {status}"))
}

#[test]
fn a_replacement_runs_as_the_user_the_deployment_runs_as() {
    eddy_testkit::require::root("start daemons that switch to another user");
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = dir.path().join("root");
    let _guard = StopGuard(root.clone());
    ok(&[
        "start",
        "--local",
        "3",
        "--root",
        s(&root),
        "--daemon-user",
        "nobody",
        "--name",
        "t",
    ]);
    let ready = |id: u32| {
        eddy_daemon::read_ready(&root.join(format!("d{id}")))
            .unwrap()
            .unwrap_or_else(|| panic!("daemon {id} has no ready file"))
    };
    for id in 0..3 {
        assert_eq!(uid_of_process(ready(id).pid), 65534, "daemon {id}");
    }
    kill_daemon(&root, 1);
    ok(&["replace", "1", "--keep-root", "--state", s(&root)]);
    let pid = ready(1).pid;
    assert_eq!(
        uid_of_process(pid),
        65534,
        "the replacement of daemon 1 runs as root, not as the deployment's user"
    );
    ok(&["stop", "--state", s(&root)]);
}
