//! `eddy start --hosts` across network namespaces: three "hosts" and a client, each in its own
//! network namespace, joined by a bridge in a fifth one. The daemons are launched with
//! `ip netns exec {host} {cmd}` and reached only over TCP on 10.213.x.0/24 addresses.
//! Needs root and iproute2; fails, naming what is missing, otherwise.

use eddy_testkit::cli::{s, text};
use eddy_testkit::{eddy_bin, eddyd_bin};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const HOSTS: usize = 3;

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

fn ip(args: &[&str]) {
    let out = run("ip", args);
    assert!(out.status.success(), "ip {args:?}: {}", text(&out));
}

/// The namespaces of one test run; everything in them is killed and they are deleted on drop.
struct Net {
    prefix: String,
    subnet: u32,
    created: Vec<String>,
    state: Option<PathBuf>,
}

impl Net {
    fn host(&self, i: usize) -> String {
        format!("{}h{i}", self.prefix)
    }
    fn client(&self) -> String {
        format!("{}c", self.prefix)
    }
    fn bridge(&self) -> String {
        format!("{}b", self.prefix)
    }
    fn addr(&self, last: u32) -> String {
        format!("10.213.{}.{last}", self.subnet)
    }

    fn add_ns(&mut self, name: &str) {
        let out = run("ip", &["netns", "add", name]);
        if !out.status.success() {
            eddy_testkit::require::missing(&format!(
                "cannot create network namespace {name} (`ip netns add` needs root and a \
                 kernel with network namespaces): {}",
                text(&out)
            ));
        }
        self.created.push(name.to_string());
    }

    /// Namespace `ns` gets `eth0` with address `addr`, plugged into the bridge as port `port`.
    fn plug(&self, ns: &str, port: &str, addr: &str) {
        let br = self.bridge();
        ip(&[
            "-n", &br, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns,
        ]);
        ip(&["-n", &br, "link", "set", port, "master", "br0"]);
        ip(&["-n", &br, "link", "set", port, "up"]);
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "eth0",
        ]);
        ip(&["-n", ns, "link", "set", "eth0", "up"]);
        ip(&["-n", ns, "link", "set", "lo", "up"]);
    }

    /// Runs eddy inside the client namespace.
    fn eddy(&self, args: &[&str]) -> Output {
        let client = self.client();
        let mut argv = vec!["netns", "exec", client.as_str(), eddy_bin()];
        argv.extend_from_slice(args);
        Command::new("ip")
            .args(&argv)
            .env("EDDY_DAEMON_BIN", eddyd_bin())
            .env_remove("EDDY_STATE")
            .output()
            .expect("run ip netns exec eddy")
    }

    fn eddy_ok(&self, args: &[&str]) -> Output {
        let out = self.eddy(args);
        assert!(out.status.success(), "eddy {args:?} failed: {}", text(&out));
        out
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if let Some(state) = &self.state {
            let _ = self.eddy(&["stop", "--state", s(state)]);
        }
        for ns in &self.created {
            let pids = run("ip", &["netns", "pids", ns]);
            for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
                let _ = run("kill", &["-KILL", pid]);
            }
            let _ = run("ip", &["netns", "del", ns]);
        }
    }
}

/// Builds the five namespaces; fails the test, naming what is missing, if this machine cannot.
fn setup() -> Net {
    eddy_testkit::require::netns();
    // Tests of this file run at once in one process: each gets names and a subnet of its own.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let pid = std::process::id();
    let mut net = Net {
        prefix: format!("eddyt{pid}n{n}"),
        subnet: 20 + (pid + 97 * n) % 200,
        created: Vec::new(),
        state: None,
    };
    let names: Vec<String> = (0..HOSTS)
        .map(|i| net.host(i))
        .chain([net.client(), net.bridge()])
        .collect();
    for name in &names {
        net.add_ns(name);
    }
    let br = net.bridge();
    ip(&["-n", &br, "link", "add", "br0", "type", "bridge"]);
    ip(&["-n", &br, "link", "set", "br0", "up"]);
    for i in 0..HOSTS {
        net.plug(&net.host(i), &format!("p{i}"), &net.addr(i as u32 + 1));
    }
    net.plug(&net.client(), "pc", &net.addr(100));
    net
}

/// `eddy start` of one daemon per host namespace (a hosts file with a comment line, the
/// `ip netns exec` launcher, roots and state under `dir`, then `extra`); returns the state
/// directory, which `net` stops the deployment of when dropped.
fn start_on_hosts(net: &mut Net, dir: &Path, extra: &[&str]) -> PathBuf {
    let state = dir.join("state");
    let hosts_file = dir.join("hosts");
    let hosts: String = (0..HOSTS)
        .map(|i| format!("{} {}\n", net.host(i), net.addr(i as u32 + 1)))
        .collect();
    std::fs::write(&hosts_file, format!("# three namespaces\n{hosts}")).unwrap();
    let root = format!("{}/{{host}}", dir.display());
    net.state = Some(state.clone());
    let mut args = vec![
        "start",
        "--hosts",
        s(&hosts_file),
        "--launcher",
        "ip netns exec {host} {cmd}",
        "--root",
        &root,
        "--state",
        s(&state),
    ];
    args.extend_from_slice(extra);
    net.eddy_ok(&args);
    state
}

#[test]
fn hosts_in_network_namespaces_serve_a_client_in_another() {
    let mut net = setup();
    let dir = tempfile::tempdir().unwrap();
    let state = start_on_hosts(&mut net, dir.path(), &["--chunk-size", "65536"]);

    // The deployment lists the three namespaces at their bridge addresses.
    let dep = eddy_config::Deployment::load(&state.join("deployment.toml")).unwrap();
    let addrs: Vec<String> = dep.daemons.iter().map(|d| d.addr.clone()).collect();
    let expected: Vec<String> = (0..HOSTS)
        .map(|i| format!("{}:{}", net.addr(i as u32 + 1), dep.config.port))
        .collect();
    assert_eq!(addrs, expected);
    for (i, d) in dep.daemons.iter().enumerate() {
        assert_eq!(d.host, net.host(i));
        assert_eq!(d.root, dir.path().join(net.host(i)));
        assert!(
            d.socket.is_none(),
            "remote daemons are reached over TCP only"
        );
    }

    // A few MiB through the client library, from the client namespace, and back.
    let data: Vec<u8> = (0..(3 << 20) + 4321u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let src = dir.path().join("src.bin");
    let back = dir.path().join("back.bin");
    std::fs::write(&src, &data).unwrap();
    net.eddy_ok(&["debug", "put", "--state", s(&state), s(&src), "/big.bin"]);
    net.eddy_ok(&["debug", "get", "--state", s(&state), "/big.bin", s(&back)]);
    assert!(
        std::fs::read(&back).unwrap() == data,
        "data read back differs from data written"
    );

    // Status from the client namespace: three daemons on three addresses, all up, all
    // holding chunks of the striped file.
    let out = net.eddy_ok(&["status", "--state", s(&state), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let daemons = v["daemons"].as_array().unwrap();
    assert_eq!(daemons.len(), HOSTS);
    for (i, d) in daemons.iter().enumerate() {
        assert_eq!(d["up"], true, "{d}");
        assert_eq!(d["addr"], expected[i].as_str());
        assert!(
            d["chunks"].as_u64().unwrap() > 0,
            "daemon {i} holds no chunk: {d}"
        );
    }

    // From a host namespace other than the client's, the same deployment is reachable too.
    let out = run(
        "ip",
        &[
            "netns",
            "exec",
            &net.host(0),
            eddy_bin(),
            "status",
            "--state",
            s(&state),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));

    let out = net.eddy_ok(&["stop", "--state", s(&state)]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("stopped"),
        "{}",
        text(&out)
    );
    for i in 0..HOSTS {
        let pids = run("ip", &["netns", "pids", &net.host(i)]);
        assert!(
            String::from_utf8_lossy(&pids.stdout).trim().is_empty(),
            "a daemon still runs in {}",
            net.host(i)
        );
    }
    let out = net.eddy_ok(&["stop", "--state", s(&state)]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing is running"));
    net.state = None;
}

/// Starts `eddy mount --foreground` in namespace `ns`'s network only (nsenter, so that the
/// mount is visible to every process of this host) and waits for the mount.
fn mount_in(ns: &str, state: &std::path::Path, mnt: &std::path::Path) -> std::process::Child {
    let child = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{ns}"))
        .arg(eddy_bin())
        .args(["mount", "--state", s(state), s(mnt), "--foreground"])
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("nsenter eddy mount");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !eddy_testkit::is_mountpoint(mnt) {
        assert!(
            std::time::Instant::now() < deadline,
            "mount in {ns} did not appear"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child
}

/// A node that dies without closing its connections (its network cut) loses its locks
/// within the RPC deadline: the daemon's TCP keepalive notices, closes the connection and
/// drops the locks taken over it; another node's mount then gets the lock.
#[test]
fn a_dead_nodes_locks_are_released_within_the_deadline() {
    let mut net = setup();
    let dir = tempfile::tempdir().unwrap();
    let state = start_on_hosts(&mut net, dir.path(), &[]);
    let dep = eddy_config::Deployment::load(&state.join("deployment.toml")).unwrap();
    let deadline = std::time::Duration::from_millis(dep.config.rpc_timeout_ms);
    let (ma, mb) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&ma).unwrap();
    std::fs::create_dir_all(&mb).unwrap();
    // Mount a on the "client node", mount b on host 0.
    let mut mount_a = mount_in(&net.client(), &state, &ma);
    let mut mount_b = mount_in(&net.host(0), &state, &mb);
    std::fs::write(ma.join("f"), b"x").unwrap();
    let mut holder = Command::new("flock")
        .arg("-x")
        .arg(ma.join("f"))
        .args(["-c", "echo locked; exec sleep 600"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("flock(1) is required");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    let try_b = |wait: &str| {
        Command::new("flock")
            .args(["-x", "-w", wait])
            .arg(mb.join("f"))
            .arg("true")
            .status()
            .map(|st| st.success())
            .unwrap_or(false)
    };
    assert!(!try_b("0.5"), "the lock was not held");
    // The client node drops off the network: no FIN, no RST ever reaches the daemons.
    ip(&["-n", &net.client(), "link", "set", "eth0", "down"]);
    let t = std::time::Instant::now();
    let got = try_b(&(deadline * 3).as_secs().to_string());
    let took = t.elapsed();
    let _ = holder.kill();
    for m in [&ma, &mb] {
        let _ = Command::new("umount").arg("-l").arg(m).status();
    }
    for c in [&mut mount_a, &mut mount_b] {
        let _ = c.kill();
        let _ = c.wait();
    }
    let _ = holder.wait();
    assert!(got, "the dead node's lock was never released");
    assert!(
        took <= deadline + std::time::Duration::from_secs(2),
        "released after {took:?}, the RPC deadline is {deadline:?}"
    );
    eprintln!("lock of a dead node released after {took:?} (RPC deadline {deadline:?})");
}

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
    let t = std::time::Instant::now();
    while !cond() {
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
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
