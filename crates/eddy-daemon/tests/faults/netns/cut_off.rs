//! A daemon cut off the network: what touches it fails in time and works again when it is back, with one copy and with two.

use super::*;

/// Runs `f` on a thread of its own inside network namespace `ns` (setns(2) moves only the
/// calling thread; threads it starts, a runtime's workers among them, are born there), and
/// returns what it returns; a panic in it fails the test.
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        // SAFETY: setns(2) of this thread with a descriptor we hold open.
        let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// Runs `fut` to completion on a runtime whose threads are in network namespace `ns` (made
/// by a thread already there, so they are too).
fn block_on_in_netns<T: Send + 'static>(
    ns: &str,
    fut: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    in_netns(ns, move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(fut)
    })
}

/// A daemon cut off the network (its namespace's link set down), not killed, while clients
/// in the client namespace write; see `daemon_cut_off`.
#[test]
fn a_daemon_cut_off_the_network_fails_what_touches_it_and_comes_back() {
    daemon_cut_off(1);
}

/// `op`, bounded: a hang fails the test, naming the operation.
async fn within<T>(
    bound: std::time::Duration,
    what: &str,
    op: impl std::future::Future<Output = T>,
) -> T {
    match tokio::time::timeout(bound, op).await {
        Ok(v) => v,
        Err(_) => panic!("{what} hangs: no answer within {bound:?}"),
    }
}

/// Waits until `cond`, at most `limit`.
async fn until(what: &str, limit: std::time::Duration, cond: impl Fn() -> bool) {
    let cond = &cond;
    eddy_testkit::eventually::eventually_async(limit, what, || async move { cond().then_some(()) })
        .await;
}

/// Which phase of `daemon_cut_off` an operation started in.
const BEFORE: u8 = 0;
const CUT: u8 = 1;
const BACK: u8 = 2;

/// An operation that failed: the phases it started and ended in, what it was and the error,
/// the errno.
type Failure = (u8, u8, String, i32);

/// What the writers saw: per phase, operations that started and ended in it and succeeded;
/// and the failures.
#[derive(Default)]
struct Seen {
    ok: [std::sync::atomic::AtomicU64; 3],
    errors: std::sync::Mutex<Vec<Failure>>,
}

impl Seen {
    /// An operation that started in phase `start` and ended in `end` succeeded: one that
    /// straddles two phases counts in neither.
    fn succeeded(&self, start: u8, end: u8) {
        if start == end {
            self.ok[start as usize].fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    fn ok_in(&self, phase: u8) -> u64 {
        self.ok[phase as usize].load(std::sync::atomic::Ordering::SeqCst)
    }
    /// Failures of operations that started or ended in `phase`.
    fn errors_in(&self, phase: u8) -> Vec<Failure> {
        self.errors
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.0 == phase || e.1 == phase)
            .cloned()
            .collect()
    }
}

/// Three daemons in host namespaces, clients in the client namespace. While a write workload
/// runs, host 2's link goes down: operations that need daemon 2 fail with EIO within the RPC
/// deadline (none hangs: each is bounded and the test fails if one outlives the bound),
/// operations on files that do not touch daemon 2 keep working all along. When the link is
/// up again, the same clients reconnect by themselves: what was fsync'd before the cut reads
/// back intact and new writes on daemon 2 succeed.
///
/// `replicas` is the deployment's replica count. With 1 (this build has no replication), an
/// operation needing daemon 2 fails; with more it is to succeed on the other replicas, which
/// the checks below already expect.
fn daemon_cut_off(replicas: usize) {
    use eddy_client::{Client, Creds};
    use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    assert_eq!(
        replicas, 1,
        "this build has no replication: only one replica can be asked for"
    );
    let mut net = setup();
    let dir = tempfile::tempdir().unwrap();
    let state = start_on_hosts(&mut net, dir.path(), &["--chunk-size", "65536"]);
    let mut dep = eddy_config::Deployment::load(&state.join("deployment.toml")).unwrap();
    // The clients' deadlines: shorter than the defaults, so that the test is quicker, but
    // long enough for an fsync on a machine busy with other work.
    dep.config.rpc_timeout_ms = 5_000;
    dep.config.connect_timeout_ms = 2_000;
    let rpc = Duration::from_millis(dep.config.rpc_timeout_ms);
    // An operation that takes longer than this hangs (a few RPCs, each bounded).
    let bound = rpc * 4 + Duration::from_secs(2);
    let cut = 2usize;
    let cut_id = dep.daemons[cut].id;
    let host = net.host(cut);

    block_on_in_netns(&net.client(), async move {
        let me = Creds::root();
        let p = eddy_placement::Placement::new(dep.daemons.iter().map(|d| d.id).collect()).unwrap();
        let a = Client::connect(dep.clone()).await.expect("connect");
        let cs = a.config().chunk_size as usize;

        // Before the cut, fsync'd: a file striped over every daemon, files whose metadata
        // is on daemon 2, and files on daemons 0 and 1 only (metadata and their one chunk).
        let big = a.create("/big", 0o644, true, me).await.unwrap();
        let big_data = eddy_testkit::pattern(1, 0, cs * 9 + 77);
        a.pwrite(&big, 0, &big_data).await.unwrap();
        a.fsync(&big).await.unwrap();
        let mut on_cut = Vec::new();
        let mut elsewhere = Vec::new();
        for i in 0u64.. {
            let path = format!("/f{i}");
            if p.meta_owner(&path) == cut_id {
                if on_cut.len() < 3 {
                    let f = a.create(&path, 0o644, true, me).await.unwrap();
                    a.pwrite(&f, 0, &eddy_testkit::pattern(i, 0, 3000))
                        .await
                        .unwrap();
                    a.fsync(&f).await.unwrap();
                    on_cut.push((path, i));
                }
            } else if elsewhere.len() < 3 {
                let f = a.create(&path, 0o644, true, me).await.unwrap();
                if p.chunk_owner(f.file_id(), 0) != cut_id {
                    a.pwrite(&f, 0, &eddy_testkit::pattern(i, 0, 3000))
                        .await
                        .unwrap();
                    a.fsync(&f).await.unwrap();
                    elsewhere.push(path);
                }
            }
            if on_cut.len() == 3 && elsewhere.len() == 3 {
                break;
            }
        }
        // Names for new files whose metadata is on daemon 2.
        let new_on_cut: Vec<String> = (0u64..)
            .map(|i| format!("/new{i}"))
            .filter(|path| p.meta_owner(path) == cut_id)
            .take(1000)
            .collect();

        let phase = Arc::new(AtomicU8::new(BEFORE));
        let stop = Arc::new(AtomicBool::new(false));
        // Writer B: rewrites, fsyncs and reads back the files not on daemon 2, all along.
        let b = Client::connect(dep.clone()).await.expect("connect");
        let b_seen = Arc::new(Seen::default());
        let b_task = {
            let (phase, stop, seen) = (phase.clone(), stop.clone(), b_seen.clone());
            let files = elsewhere.clone();
            tokio::spawn(async move {
                let mut handles = Vec::new();
                for path in &files {
                    handles.push(b.open(path, libc::O_RDWR, 0, me).await.unwrap());
                }
                let mut last = vec![None; files.len()];
                for round in 0u64.. {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let k = round as usize % files.len();
                    let ph = phase.load(Ordering::SeqCst);
                    let data = eddy_testkit::pattern(1000 + round, 0, 1000 + round as usize % 2000);
                    let r = within(
                        bound,
                        &format!("writing {} (phase {ph})", files[k]),
                        async {
                            b.pwrite(&handles[k], 0, &data).await?;
                            b.fsync(&handles[k]).await?;
                            b.pread(&handles[k], 0, data.len()).await
                        },
                    )
                    .await;
                    match r {
                        Ok(got) => {
                            assert!(got == data, "{} read back other bytes", files[k]);
                            last[k] = Some(round);
                            seen.succeeded(ph, phase.load(Ordering::SeqCst));
                        }
                        Err(e) => {
                            let end = phase.load(Ordering::SeqCst);
                            seen.errors.lock().unwrap().push((
                                ph,
                                end,
                                format!("{}: {e}", files[k]),
                                e.errno,
                            ));
                            break;
                        }
                    }
                }
                last
            })
        };
        // Writer C: new files whose metadata is on daemon 2: create, write, fsync.
        let c = Client::connect(dep.clone()).await.expect("connect");
        let c_seen = Arc::new(Seen::default());
        let c_task = {
            let (phase, stop, seen) = (phase.clone(), stop.clone(), c_seen.clone());
            let names = new_on_cut.clone();
            tokio::spawn(async move {
                let mut written = Vec::new();
                for (n, path) in names.iter().enumerate() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let ph = phase.load(Ordering::SeqCst);
                    let data = eddy_testkit::pattern(5000 + n as u64, 0, 2 * cs + 100);
                    let t = Instant::now();
                    let r = within(bound, &format!("writing {path} (phase {ph})"), async {
                        let f = c
                            .create(path, 0o644, true, me)
                            .await
                            .map_err(|e| ("create", e))?;
                        c.pwrite(&f, 0, &data).await.map_err(|e| ("write", e))?;
                        c.fsync(&f).await.map_err(|e| ("fsync", e))
                    })
                    .await;
                    match r {
                        Ok(()) => {
                            written.push((path.clone(), data));
                            seen.succeeded(ph, phase.load(Ordering::SeqCst));
                        }
                        Err((step, e)) => {
                            let end = phase.load(Ordering::SeqCst);
                            seen.errors.lock().unwrap().push((
                                ph,
                                end,
                                format!("{step} {path}: {e}"),
                                e.errno,
                            ));
                            // Failures come no faster than the deadline would let them,
                            // unless the connect is refused outright.
                            if t.elapsed() < Duration::from_millis(50) {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        }
                    }
                }
                written
            })
        };
        let limit = bound * 4;
        until("writes before the cut", limit, || {
            b_seen.ok_in(BEFORE) >= 3 && c_seen.ok_in(BEFORE) >= 3
        })
        .await;
        assert!(b_seen.errors_in(BEFORE).is_empty() && c_seen.errors_in(BEFORE).is_empty());

        // The cut: host 2 drops off the network; no FIN or RST reaches anyone.
        ip(&["-n", &host, "link", "set", "eth0", "down"]);
        phase.store(CUT, Ordering::SeqCst);
        // Reads that need daemon 2 fail with EIO, within the bound.
        let r = within(
            bound,
            "reading /big during the cut",
            a.pread(&big, 0, big_data.len()),
        )
        .await;
        assert_eq!(r.map(|_| ()).unwrap_err().errno, libc::EIO, "reading /big");
        for (path, _) in &on_cut {
            let r = within(bound, &format!("stat {path} during the cut"), a.stat(path)).await;
            assert_eq!(r.map(|_| ()).unwrap_err().errno, libc::EIO, "stat {path}");
        }
        // Those that do not, work.
        for path in &elsewhere {
            within(bound, &format!("stat {path} during the cut"), a.stat(path))
                .await
                .unwrap_or_else(|e| panic!("stat {path} during the cut: {e}"));
        }
        until("failures and successes during the cut", limit, || {
            c_seen.errors_in(CUT).len() >= 2 && b_seen.ok_in(CUT) >= 5
        })
        .await;

        // The link is back: the same clients reconnect by themselves.
        ip(&["-n", &host, "link", "set", "eth0", "up"]);
        phase.store(BACK, Ordering::SeqCst);
        until(
            "a write on daemon 2 after the link came back",
            limit,
            || c_seen.ok_in(BACK) >= 2,
        )
        .await;
        stop.store(true, Ordering::SeqCst);
        let b_last = b_task.await.unwrap();
        let c_written = c_task.await.unwrap();

        // Writer B never failed; writer C failed during the cut only, with EIO.
        let b_errors = b_seen.errors.lock().unwrap().clone();
        assert!(
            b_errors.is_empty(),
            "files not on daemon 2 failed: {b_errors:?}"
        );
        let c_errors = c_seen.errors.lock().unwrap().clone();
        // Writer C failed with EIO while daemon 2 was cut off, and not once it was back:
        // the first fsync that reaches daemon 2 on a new connection covers changes
        // acknowledged on the old one, and the daemon's instance number tells the client
        // that the same process (which still has them) answers (decision 0015).
        let late: Vec<&Failure> = c_errors
            .iter()
            .filter(|(start, end, _, _)| *start != CUT && *end != CUT)
            .collect();
        assert!(
            c_errors.iter().all(|e| e.3 == libc::EIO) && late.is_empty(),
            "writes on daemon 2 failed otherwise than with EIO while it was cut off, or \
             failed once it was back (phases: 0 before, 1 cut, 2 back): {c_errors:?}"
        );
        assert!(
            c_seen.ok_in(CUT) == 0 || replicas > 1,
            "writes needing daemon 2 succeeded while it was cut off"
        );

        // Everything fsync'd reads back: before the cut, and by the writers.
        assert_eq!(
            within(bound, "reading /big", a.pread(&big, 0, big_data.len() + 1))
                .await
                .unwrap(),
            big_data
        );
        for (path, i) in &on_cut {
            let f = a.open(path, libc::O_RDONLY, 0, me).await.unwrap();
            assert!(
                a.pread(&f, 0, 4000).await.unwrap() == eddy_testkit::pattern(*i, 0, 3000),
                "{path} lost fsync'd bytes"
            );
        }
        for (k, path) in elsewhere.iter().enumerate() {
            let f = a.open(path, libc::O_RDONLY, 0, me).await.unwrap();
            let got = a.pread(&f, 0, 4000).await.unwrap();
            let round = b_last[k].expect("writer B wrote every file");
            let data = eddy_testkit::pattern(1000 + round, 0, 1000 + round as usize % 2000);
            assert!(got[..data.len()] == data[..], "{path} lost fsync'd bytes");
        }
        for (path, data) in &c_written {
            let f = a.open(path, libc::O_RDONLY, 0, me).await.unwrap();
            assert!(
                a.pread(&f, 0, data.len() + 1).await.unwrap() == *data,
                "{path} lost fsync'd bytes"
            );
        }
        // New writes over every daemon succeed, through the client that saw the cut.
        let f = a.open("/big", libc::O_RDWR, 0, me).await.unwrap();
        let fresh = eddy_testkit::pattern(2, 0, big_data.len());
        a.pwrite(&f, 0, &fresh).await.unwrap();
        a.fsync(&f).await.unwrap();
        assert_eq!(a.pread(&f, 0, fresh.len() + 1).await.unwrap(), fresh);
        eprintln!(
            "daemon cut off: {} writes elsewhere during the cut, {} EIO on daemon 2, {} \
             writes on it before and {} after",
            b_seen.ok_in(CUT),
            c_seen.errors_in(CUT).len(),
            c_seen.ok_in(BEFORE),
            c_seen.ok_in(BACK)
        );
    });
}

/// With two copies, a daemon cut off the network (its namespace's link set down, not
/// killed) costs no operation: a writer creating, writing, fsyncing, reading back, stating
/// and unlinking files goes on through the cut and after it, every operation bounded; files
/// written before the cut read back in full during it, the root lists. Once it is back,
/// `eddy repair` restores what it missed: with another daemon cut off then, a fresh client
/// reads every byte.
#[test]
fn a_daemon_cut_off_with_two_copies_costs_no_operation() {
    use eddy_client::{Client, Creds};
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    let mut net = setup();
    let dir = tempfile::tempdir().unwrap();
    // Deadlines shorter than the defaults, so that the test is quicker, but long enough for
    // an fsync on a machine busy with other work; the daemons' copies use them too.
    let tunables = dir.path().join("tunables.toml");
    std::fs::write(
        &tunables,
        "rpc_timeout_ms = 5000\nconnect_timeout_ms = 2000\n",
    )
    .unwrap();
    let state = start_on_hosts(
        &mut net,
        dir.path(),
        &[
            "--chunk-size",
            "65536",
            "--replicas",
            "2",
            "--config",
            s(&tunables),
        ],
    );
    let dep = eddy_config::Deployment::load(&state.join("deployment.toml")).unwrap();
    assert_eq!(dep.config.replicas, 2);
    assert_eq!(dep.config.rpc_timeout_ms, 5_000);
    let rpc = Duration::from_millis(dep.config.rpc_timeout_ms);
    // An operation that takes longer than this hangs (a few RPCs, each bounded).
    let bound = rpc * 4 + Duration::from_secs(2);
    let host = net.host(2);
    let other = net.host(0);
    let client_ns = net.client();
    // `eddy repair` in the client namespace (as `Net::eddy` runs it).
    let repair = move |state: &Path| {
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &client_ns,
                eddy_bin(),
                "repair",
                "--state",
                s(state),
            ])
            .env("EDDY_DAEMON_BIN", eddyd_bin())
            .output()
            .expect("run eddy repair")
    };

    block_on_in_netns(&net.client(), async move {
        let me = Creds::root();
        let a = Client::connect(dep.clone()).await.expect("connect");
        let cs = a.config().chunk_size as usize;
        // Before the cut, fsync'd: a file striped over every daemon and small files.
        let big = a.create("/big", 0o644, true, me).await.unwrap();
        let big_data = eddy_testkit::pattern(1, 0, cs * 9 + 77);
        a.pwrite(&big, 0, &big_data).await.unwrap();
        a.fsync(&big).await.unwrap();
        for i in 0..12u64 {
            let f = a.create(&format!("/f{i}"), 0o644, true, me).await.unwrap();
            a.pwrite(&f, 0, &eddy_testkit::pattern(i, 0, 3000))
                .await
                .unwrap();
            a.fsync(&f).await.unwrap();
        }

        // The writer: every operation must succeed, in every phase.
        let phase = Arc::new(AtomicU8::new(BEFORE));
        let ok: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
        let stop = Arc::new(AtomicBool::new(false));
        let w = Client::connect(dep.clone()).await.expect("connect");
        let writer = {
            let (phase, ok, stop) = (phase.clone(), ok.clone(), stop.clone());
            tokio::spawn(async move {
                let mut kept: BTreeMap<String, Vec<u8>> = BTreeMap::new();
                for n in 0u64.. {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let ph = phase.load(Ordering::SeqCst);
                    let path = format!("/w{n}");
                    let data = eddy_testkit::pattern(100 + n, 0, 2 * cs + 100 + n as usize);
                    within(bound, &format!("writing {path} (phase {ph})"), async {
                        let f = w
                            .create(&path, 0o644, true, me)
                            .await
                            .unwrap_or_else(|e| panic!("create {path} (phase {ph}): {e}"));
                        w.pwrite(&f, 0, &data)
                            .await
                            .unwrap_or_else(|e| panic!("write {path} (phase {ph}): {e}"));
                        w.fsync(&f)
                            .await
                            .unwrap_or_else(|e| panic!("fsync {path} (phase {ph}): {e}"));
                        let got = w
                            .pread(&f, 0, data.len() + 1)
                            .await
                            .unwrap_or_else(|e| panic!("read {path} (phase {ph}): {e}"));
                        assert!(got == data, "{path} read back other bytes (phase {ph})");
                        let st = w
                            .stat(&path)
                            .await
                            .unwrap_or_else(|e| panic!("stat {path} (phase {ph}): {e}"));
                        assert_eq!(st.size, data.len() as u64, "{path}");
                        if n % 3 == 2 {
                            let gone = format!("/w{}", n - 1);
                            w.unlink(&gone, me)
                                .await
                                .unwrap_or_else(|e| panic!("unlink {gone} (phase {ph}): {e}"));
                        }
                    })
                    .await;
                    if n % 3 == 2 {
                        kept.remove(&format!("/w{}", n - 1));
                    }
                    kept.insert(path, data);
                    if phase.load(Ordering::SeqCst) == ph {
                        ok[ph as usize].fetch_add(1, Ordering::SeqCst);
                    }
                }
                kept
            })
        };
        let limit = bound * 4;
        let done = |p: u8| ok[p as usize].load(Ordering::SeqCst);
        until("writes before the cut", limit, || done(BEFORE) >= 3).await;

        ip(&["-n", &host, "link", "set", "eth0", "down"]);
        phase.store(CUT, Ordering::SeqCst);
        // Everything written before reads back, and the root lists, during the cut.
        let got = within(bound, "reading /big during the cut", async {
            a.pread(&big, 0, big_data.len() + 1).await
        })
        .await
        .unwrap_or_else(|e| panic!("reading /big during the cut: {e}"));
        assert!(got == big_data, "/big read back other bytes during the cut");
        for i in 0..12u64 {
            let path = format!("/f{i}");
            let got = within(bound, &format!("reading {path} during the cut"), async {
                let f = a.open(&path, libc::O_RDONLY, 0, me).await?;
                a.pread(&f, 0, 4000).await
            })
            .await
            .unwrap_or_else(|e| panic!("reading {path} during the cut: {e}"));
            assert!(
                got == eddy_testkit::pattern(i, 0, 3000),
                "{path} during the cut"
            );
        }
        let mut names = Vec::new();
        let mut r = a.readdir("/", None).unwrap();
        while let Some(page) = within(bound, "listing / during the cut", r.next_page())
            .await
            .unwrap_or_else(|e| panic!("listing / during the cut: {e}"))
        {
            names.extend(page.into_iter().map(|e| e.name));
        }
        assert!(names.iter().any(|n| n == "big"), "{names:?}");
        assert_eq!(names.iter().filter(|n| n.starts_with('f')).count(), 12);
        until("writes during the cut", limit, || done(CUT) >= 3).await;

        ip(&["-n", &host, "link", "set", "eth0", "up"]);
        phase.store(BACK, Ordering::SeqCst);
        until("writes after the cut", limit, || done(BACK) >= 3).await;
        stop.store(true, Ordering::SeqCst);
        let kept = writer.await.expect("an operation of the writer failed");

        // The copies daemon 2 missed are restored: `eddy repair` ends with nothing left.
        let out = tokio::task::spawn_blocking(move || repair(&state))
            .await
            .unwrap();
        assert!(out.status.success(), "eddy repair: {}", text(&out));
        // Then with another daemon cut off, a fresh client reads every byte: daemon 2
        // holds the copies it missed.
        ip(&["-n", &other, "link", "set", "eth0", "down"]);
        let fresh = Client::connect(dep.clone()).await.expect("connect");
        for (path, data) in &kept {
            let f = fresh.open(path, libc::O_RDONLY, 0, me).await.unwrap();
            let got = fresh.pread(&f, 0, data.len() + 1).await.unwrap();
            assert!(got == *data, "{path} read back other bytes");
        }
        let f = fresh.open("/big", libc::O_RDONLY, 0, me).await.unwrap();
        assert!(fresh.pread(&f, 0, big_data.len() + 1).await.unwrap() == big_data);
        eprintln!(
            "daemon cut off with two copies: {} files written before, {} during, {} after",
            done(BEFORE),
            done(CUT),
            done(BACK)
        );
    });
}

mod leases;
