//! Namespaces as hosts, shared by `eddy bench alloc` (I/O servers and compute nodes) and
//! `eddy bench suite --hosts` (hosts that run a daemon and ranks): a network namespace per
//! node, all plugged into one bridge (in a namespace of its own), plus a veth into this
//! host's namespace for the coordinator and the `eddy` commands; optionally `tc tbf` on a
//! node's link, both directions. Everything is removed on drop (processes in the namespaces
//! killed first), also when the command fails or is interrupted.

use anyhow::{bail, Context, Result};
use std::process::Command;

/// What `ip`/`tc` said when it failed.
fn run(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {program} (iproute2 is needed)"))?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Which command builds the namespaces: its name in errors, the first letters of the
/// namespace names and the second octet of the 10.x.y.0/24 network, so that a pool of
/// `bench alloc` and a layout of `bench suite` in one process never share a name or subnet.
#[derive(Debug, Clone, Copy)]
pub struct Owner {
    pub command: &'static str,
    pub tag: &'static str,
    pub octet: u8,
}

/// `eddy bench alloc`'s pool.
pub const ALLOC: Owner = Owner {
    command: "eddy bench alloc",
    tag: "ea",
    octet: 215,
};
/// `eddy bench suite --hosts`'s layout.
pub const SUITE: Owner = Owner {
    command: "eddy bench suite --hosts",
    tag: "eh",
    octet: 216,
};

pub struct Net {
    pub prefix: String,
    pub subnet: u32,
    octet: u8,
    created: Vec<String>,
    root_link: Option<String>,
}

impl Net {
    pub fn server(&self, i: usize) -> String {
        format!("{}s{i}", self.prefix)
    }
    pub fn compute(&self, k: usize) -> String {
        format!("{}c{k}", self.prefix)
    }
    fn bridge(&self) -> String {
        format!("{}b", self.prefix)
    }
    pub fn server_addr(&self, i: usize) -> String {
        format!("10.{}.{}.{}", self.octet, self.subnet, i + 1)
    }
    fn compute_addr(&self, k: usize) -> String {
        format!("10.{}.{}.{}", self.octet, self.subnet, k + 101)
    }
    /// This host's address on the bridge.
    pub fn root_addr(&self) -> String {
        format!("10.{}.{}.254", self.octet, self.subnet)
    }

    /// Every namespace it made (the bridge's last), for a caller that checks they are gone.
    pub fn namespaces(&self) -> &[String] {
        &self.created
    }

    /// Builds the namespaces (`servers` nodes named `{prefix}s{i}`, `computes` named
    /// `{prefix}c{k}`); fails naming what is missing (root, iproute2, tc, veth).
    pub fn build(owner: Owner, servers: usize, computes: usize) -> Result<Net> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("{} builds network namespaces and needs root", owner.command);
        }
        // Two builds in one process (tests) get names and subnets of their own.
        static BUILT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = BUILT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let pid = std::process::id();
        let mut net = Net {
            prefix: format!("{}{}n{n}", owner.tag, pid % 100_000),
            subnet: 20 + (pid + 37 * n) % 200,
            octet: owner.octet,
            created: Vec::new(),
            root_link: None,
        };
        let mut names: Vec<String> = (0..servers).map(|i| net.server(i)).collect();
        names.extend((0..computes).map(|k| net.compute(k)));
        names.push(net.bridge());
        for n in &names {
            run("ip", &["netns", "add", n])
                .context("cannot create a network namespace (root and a kernel with netns)")?;
            net.created.push(n.clone());
        }
        let br = net.bridge();
        run("ip", &["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        run("ip", &["-n", &br, "link", "set", "br0", "up"])?;
        for i in 0..servers {
            net.plug(&net.server(i), &format!("s{i}"), &net.server_addr(i))?;
        }
        for k in 0..computes {
            net.plug(&net.compute(k), &format!("c{k}"), &net.compute_addr(k))?;
        }
        let root = format!("{}r", net.prefix);
        run(
            "ip",
            &[
                "link", "add", &root, "type", "veth", "peer", "name", "root", "netns", &br,
            ],
        )?;
        net.root_link = Some(root.clone());
        run("ip", &["-n", &br, "link", "set", "root", "master", "br0"])?;
        run("ip", &["-n", &br, "link", "set", "root", "up"])?;
        run(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/24", net.root_addr()),
                "dev",
                &root,
            ],
        )?;
        run("ip", &["link", "set", &root, "up"])?;
        Ok(net)
    }

    fn plug(&self, ns: &str, port: &str, addr: &str) -> Result<()> {
        let br = self.bridge();
        run(
            "ip",
            &[
                "-n", &br, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ],
        )?;
        run("ip", &["-n", &br, "link", "set", port, "master", "br0"])?;
        run("ip", &["-n", &br, "link", "set", port, "up"])?;
        run(
            "ip",
            &[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ],
        )?;
        run("ip", &["-n", ns, "link", "set", "eth0", "up"])?;
        run("ip", &["-n", ns, "link", "set", "lo", "up"])
    }

    /// Limits a link to `rate` (tc syntax, e.g. `200mbit`) in both directions: the node's
    /// `eth0` egress and its bridge port's egress (the node's ingress).
    fn limit(&self, ns: &str, port: &str, rate: &str) -> Result<()> {
        let tbf = |dev: &str| -> Vec<String> {
            [
                "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", "64kb",
                "latency", "200ms",
            ]
            .map(String::from)
            .to_vec()
        };
        for (inside, dev) in [(ns.to_string(), "eth0"), (self.bridge(), port)] {
            let mut args = vec!["netns".to_string(), "exec".into(), inside];
            args.extend(tbf(dev));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run("ip", &args).context("tc (iproute2) with the tbf qdisc is needed")?;
        }
        Ok(())
    }

    pub fn limit_server(&self, i: usize, rate: &str) -> Result<()> {
        self.limit(&self.server(i), &format!("s{i}"), rate)
    }

    pub fn limit_compute(&self, k: usize, rate: &str) -> Result<()> {
        self.limit(&self.compute(k), &format!("c{k}"), rate)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in &self.created {
            if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    if let Ok(pid) = pid.parse::<i32>() {
                        // SAFETY: kill has no memory preconditions.
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                }
            }
        }
        for ns in self.created.iter().rev() {
            let _ = run("ip", &["netns", "del", ns]);
        }
        if let Some(l) = &self.root_link {
            let _ = run("ip", &["link", "del", l]);
        }
    }
}

/// Bytes/s of a tc rate (`200mbit`, `1gbit`, `800kbit`, `25mbps` = MB/s).
pub fn rate_bytes(rate: &str) -> Result<f64> {
    let r = rate.trim().to_ascii_lowercase();
    let split = r
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(r.len());
    let (num, unit) = r.split_at(split);
    let n: f64 = num
        .parse()
        .with_context(|| format!("bad rate {rate:?}: e.g. 200mbit"))?;
    let bits = match unit {
        "bit" | "" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "kbps" => 8e3,
        "mbps" => 8e6,
        "gbps" => 8e9,
        _ => bail!("bad rate unit in {rate:?}: bit, kbit, mbit, gbit, kbps, mbps or gbps"),
    };
    let b = n * bits / 8.0;
    if !(b.is_finite() && b > 0.0) {
        bail!("bad rate {rate:?}");
    }
    Ok(b)
}

/// A tc rate of `share` of `rate` (for the throttled server).
pub fn scaled_rate(rate: &str, share: f64) -> Result<String> {
    Ok(format!(
        "{}bit",
        (rate_bytes(rate)? * 8.0 * share).round() as u64
    ))
}
