//! `eddy start --hosts` across network namespaces: three "hosts" and a client, each in its own
//! network namespace, joined by a bridge in a fifth one. The daemons are launched with
//! `ip netns exec {host} {cmd}` and reached only over TCP on 10.213.x.0/24 addresses.
//! Needs root and iproute2; fails, naming what is missing, otherwise.

mod common;

use common::cli::{s, text};
use common::{EDDY, EDDYD};
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
            common::require::missing(&format!(
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
        let mut argv = vec!["netns", "exec", client.as_str(), EDDY];
        argv.extend_from_slice(args);
        Command::new("ip")
            .args(&argv)
            .env("EDDY_DAEMON_BIN", EDDYD)
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
    common::require::netns();
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
            EDDY,
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
        .arg(EDDY)
        .args(["mount", "--state", s(state), s(mnt), "--foreground"])
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("nsenter eddy mount");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !common::is_mountpoint(mnt) {
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
