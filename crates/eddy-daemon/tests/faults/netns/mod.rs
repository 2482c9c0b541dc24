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

/// Starts `eddy mount --foreground` in namespace `ns`'s network only (nsenter, so that the
/// mount is visible to every process of this host) and waits for the mount; `node`, when
/// given, is the host name the mount calls itself (`SLURMD_NODENAME`), so that a file it
/// places by locality finds its daemon.
fn mount_in(ns: &str, state: &Path, mnt: &Path, node: Option<&str>) -> std::process::Child {
    std::fs::create_dir_all(mnt).unwrap();
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--net=/run/netns/{ns}"))
        .arg(eddy_bin())
        .args(["mount", "--state", s(state), s(mnt), "--foreground"])
        .stdin(std::process::Stdio::null());
    if let Some(node) = node {
        cmd.env("SLURMD_NODENAME", node);
    }
    let child = cmd.spawn().expect("nsenter eddy mount");
    eddy_testkit::eventually::eventually(format!("the mount in {ns} appears"), || {
        eddy_testkit::is_mountpoint(mnt).then_some(())
    });
    child
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

/// Runs `eddy bench suite --hosts 3 --preload` at small sizes (3 ranks; ior-easy, ior-hard and
/// mdtest-easy) with its storage in `dir`, its results in `dir/suite.json`, and `extra`
/// arguments; it must succeed. Returns the table it printed and the JSON.
fn host_suite(dir: &Path, extra: &[&str]) -> (String, serde_json::Value) {
    let json = dir.join("suite.json");
    let out = Command::new(eddy_bin())
        .args(["bench", "suite", "--hosts", "3", "--preload", "--storage"])
        .arg(dir)
        .args(["--scale", "0.02", "--procs", "3"])
        .args(["--workloads", "ior-easy,ior-hard,mdtest-easy", "--json"])
        .arg(&json)
        .args(extra)
        .env("EDDY_DAEMON_BIN", eddyd_bin())
        .env_remove("EDDY_STATE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "eddy bench suite --hosts 3 {extra:?}: {}",
        text(&out)
    );
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(table.contains("layout: 3 hosts (netns)"), "{table}");
    let v = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (table, v)
}

/// The network namespaces a suite's JSON says its hosts were, in order.
fn layout_namespaces(v: &serde_json::Value) -> Vec<String> {
    v["layout"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

mod alloc;
mod cut_off;
mod hosts;
mod local_shared;
mod suite_hosts;
mod suite_local;
