//! How a deployment's daemons are launched: the hosts they run on (hosts files, Slurm's
//! node list, names resolved to addresses), their command line (`DaemonLaunch`, the same for
//! `start`, `replace` and `grow`), the entry a ready daemon is recorded with, and the launcher
//! command that starts one on another host
//! (`launcher_argv`, with each word quoted for a remote shell).

use crate::state::StateDir;
use anyhow::{bail, Context, Result};
use eddy_config::{Config, DaemonEntry};
use std::ffi::OsString;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

/// Default launcher for `--hosts`.
pub const SSH_LAUNCHER: &str = "ssh {host} {cmd}";
/// Default launcher for `--slurm`.
pub const SRUN_LAUNCHER: &str = "srun --nodes=1 --ntasks=1 --overlap -w {host} {cmd}";

/// One host of a hosts file: the name the launcher gets and the address daemons listen on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLine {
    pub name: String,
    pub address: String,
}

/// How a deployment's daemons are started: one path for `eddy start` and `eddy replace`, so
/// that a replacement runs as the user the others run as (`--user`), with the same secret,
/// config and peers.
pub struct DaemonLaunch<'a> {
    pub state: &'a StateDir,
    /// The ids of the deployment's members (`eddyd --members`).
    pub members: &'a [u32],
    /// User the daemons run as (`eddyd --user`), if not the caller.
    pub user: Option<&'a str>,
    /// The job the daemons' counters name (`eddyd --job`; decision 0032).
    pub job: &'a str,
}

impl DaemonLaunch<'_> {
    /// The arguments of daemon `id` on `root`, listening on `listen`, serving metrics on
    /// `metrics` (`eddyd --metrics`, see `metrics_listen`) if given.
    pub fn args(&self, root: &Path, id: u32, listen: &str, metrics: Option<&str>) -> Vec<OsString> {
        let members: Vec<String> = self.members.iter().map(|i| i.to_string()).collect();
        let mut args: Vec<OsString> = vec![
            "--root".into(),
            root.into(),
            "--id".into(),
            id.to_string().into(),
            "--listen".into(),
            listen.into(),
            "--secret-file".into(),
            self.state.secret_path().into(),
            "--config".into(),
            self.state.config_path().into(),
            "--members".into(),
            members.join(",").into(),
            // Where the daemons find each other for copies (written once all listen).
            "--peers".into(),
            self.state.deployment_path().into(),
        ];
        if let Some(user) = self.user {
            args.extend(["--user".into(), user.into()]);
        }
        if !self.job.is_empty() {
            args.extend(["--job".into(), self.job.into()]);
        }
        if let Some(metrics) = metrics {
            args.extend(["--metrics".into(), metrics.into()]);
        }
        args
    }
}

/// Where the `nth` daemon (from 0) of a host serves metrics: the config's `metrics_addr`
/// with its port plus `nth` (`eddy start --metrics HOST:PORT`); `None` when unset.
pub fn metrics_listen(config: &Config, nth: u32) -> Result<Option<String>> {
    config
        .metrics_addr
        .as_deref()
        .map(|base| {
            eddy_config::metrics_addr_of(base, nth)
                .map(|a| a.to_string())
                .context("cannot place the daemons' metrics endpoints")
        })
        .transpose()
}

/// The address scrapers reach a daemon's metrics at, from the one it bound (`bound`): an
/// unspecified IP (`0.0.0.0`, `::`) is replaced by the IP of the daemon's own address
/// (`addr`, `ip:port`).
pub fn metrics_reach(bound: &str, addr: &str) -> String {
    let (Ok(mut bound_at), Ok(addr)) = (
        bound.parse::<std::net::SocketAddr>(),
        addr.parse::<std::net::SocketAddr>(),
    ) else {
        return bound.to_string();
    };
    if bound_at.ip().is_unspecified() && !addr.ip().is_unspecified() {
        bound_at.set_ip(addr.ip());
    }
    bound_at.to_string()
}

/// Parses a hosts file: `name [address]` per line, `#` starts a comment.
pub fn parse_hosts(text: &str) -> Result<Vec<HostLine>> {
    let mut hosts = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [] => {}
            [name] => hosts.push(HostLine {
                name: name.to_string(),
                address: name.to_string(),
            }),
            [name, address] => hosts.push(HostLine {
                name: name.to_string(),
                address: address.to_string(),
            }),
            _ => bail!("line {}: expected `name [address]`, found {raw:?}", n + 1),
        }
    }
    if hosts.is_empty() {
        bail!("it lists no hosts");
    }
    Ok(hosts)
}

pub fn read_hosts_file(file: &Path) -> Result<Vec<HostLine>> {
    // privileged-path: the hosts file the caller names on its own command line
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the hosts file {}", file.display()))?;
    parse_hosts(&text).with_context(|| format!("hosts file {} is not valid", file.display()))
}

/// The nodes of the current Slurm job.
pub fn slurm_hosts() -> Result<Vec<HostLine>> {
    let nodelist = std::env::var("SLURM_JOB_NODELIST").context(
        "--slurm needs SLURM_JOB_NODELIST: run it inside a Slurm allocation, or use --hosts FILE",
    )?;
    let out = std::process::Command::new("scontrol")
        .args(["show", "hostnames", &nodelist])
        .output()
        .context("cannot run `scontrol show hostnames`: is Slurm installed on this node?")?;
    if !out.status.success() {
        bail!(
            "`scontrol show hostnames {nodelist}` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_hosts(&String::from_utf8_lossy(&out.stdout)).context("scontrol returned no host names")
}

/// The host with its address as an IP literal, since daemons listen on `ip:port`: a name
/// (a Slurm node, or a hosts file line without an address) is resolved here, IPv4 first.
pub fn resolve_host(host: HostLine) -> Result<HostLine> {
    if host.address.parse::<IpAddr>().is_ok() {
        return Ok(host);
    }
    let ips: Vec<IpAddr> = (host.address.as_str(), 0)
        .to_socket_addrs()
        .with_context(|| {
            format!(
                "cannot resolve the address of host {:?}; give it as `name address` in a hosts file",
                host.name
            )
        })?
        .map(|a| a.ip())
        .collect();
    let ip = ips
        .iter()
        .find(|ip| ip.is_ipv4())
        .or_else(|| ips.first())
        .with_context(|| format!("host {:?} resolves to no address", host.name))?;
    Ok(HostLine {
        address: ip.to_string(),
        ..host
    })
}

pub use eddy_config::launcher::{fill, shell_quote};

/// The launcher command line (`eddy_config::launcher::argv`: `{cmd}` replaced by the
/// command's words, quoted for a remote shell, `{host}`/`{id}` filled in).
pub fn launcher_argv(
    template: &str,
    host: &str,
    id: u32,
    cmd: &[OsString],
) -> Result<Vec<OsString>> {
    eddy_config::launcher::argv(template, host, id, cmd).map_err(anyhow::Error::msg)
}

/// `address:port`, bracketing IPv6 literals.
pub(crate) fn listen_addr(address: &str, port: u16) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

/// The daemon's entry once it has written its ready file.
pub(crate) fn read_ready(root: &Path) -> Result<Option<DaemonEntry>> {
    let ready = eddy_config::ready::read_ready(root).with_context(|| {
        format!(
            "cannot read {}",
            eddy_config::ready::ready_path(root).display()
        )
    })?;
    Ok(ready.map(|r| ready_entry(r, root)))
}

/// A daemon's entry in the deployment from what it said when ready, and its root. The
/// daemon (its user) wrote what it said: a Unix socket is recorded only if it lies in the
/// daemon's own root, never one elsewhere that root's clients would then connect to.
pub(crate) fn ready_entry(info: eddy_config::ready::ReadyInfo, root: &Path) -> DaemonEntry {
    let socket = info
        .socket
        .map(PathBuf::from)
        .filter(|s| s.parent() == Some(root) && s.file_name().is_some());
    DaemonEntry {
        id: info.id,
        host: info.host,
        metrics: info.metrics.map(|m| metrics_reach(&m, &info.addr)),
        addr: info.addr,
        socket,
        root: root.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_file_with_comments_and_addresses() {
        let hosts = parse_hosts("# nodes\nn0 10.0.0.1\n\nn1   # no address\n").unwrap();
        assert_eq!(
            hosts,
            vec![
                HostLine {
                    name: "n0".into(),
                    address: "10.0.0.1".into()
                },
                HostLine {
                    name: "n1".into(),
                    address: "n1".into()
                },
            ]
        );
        assert!(parse_hosts("# only a comment\n").is_err());
        let err = parse_hosts("a b c\n").unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn launcher_template_expands_host_and_cmd() {
        let cmd: Vec<OsString> = vec!["eddyd".into(), "--root".into(), "/r".into()];
        let argv = launcher_argv("ip netns exec {host} {cmd}", "ns0", 0, &cmd).unwrap();
        let words: Vec<&str> = argv.iter().map(|w| w.to_str().unwrap()).collect();
        assert_eq!(
            words,
            ["ip", "netns", "exec", "ns0", "eddyd", "--root", "/r"]
        );
        assert!(launcher_argv("ssh {host}", "h", 0, &cmd).is_err());
        // A remote shell gets every word quoted: `;`, `$( )` and spaces stay literal there.
        let evil: Vec<OsString> =
            vec!["eddyd".into(), "/d=/p/x;touch /tmp/y".into(), "it's".into()];
        let argv =
            launcher_argv("/usr/bin/ssh -o BatchMode=yes {host} {cmd}", "n1", 0, &evil).unwrap();
        assert_eq!(
            argv,
            [
                "/usr/bin/ssh",
                "-o",
                "BatchMode=yes",
                "n1",
                "'eddyd'",
                "'/d=/p/x;touch /tmp/y'",
                "'it'\\''s'"
            ]
            .map(OsString::from)
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(
                argv[4..]
                    .iter()
                    .map(|w| w.to_str().unwrap())
                    .collect::<Vec<_>>()
                    .join(" ")
                    .replacen("'eddyd'", "printf '%s\\n'", 1),
            )
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "/d=/p/x;touch /tmp/y\nit's\n"
        );
        assert_eq!(fill("/tmp/{host}/{id}", "n1", 3), "/tmp/n1/3");
        assert_eq!(listen_addr("::1", 7), "[::1]:7");
    }

    #[test]
    fn metrics_ports_count_up_per_host_and_unspecified_ips_become_the_daemons() {
        let config = |addr: Option<&str>| Config {
            metrics_addr: addr.map(str::to_string),
            ..Config::default()
        };
        assert_eq!(metrics_listen(&config(None), 3).unwrap(), None);
        assert_eq!(
            metrics_listen(&config(Some("0.0.0.0:9400")), 3).unwrap(),
            Some("0.0.0.0:9403".into())
        );
        assert!(metrics_listen(&config(Some("0.0.0.0:65535")), 1).is_err());
        assert_eq!(
            metrics_reach("0.0.0.0:9401", "10.0.0.7:7750"),
            "10.0.0.7:9401"
        );
        assert_eq!(metrics_reach("[::]:9401", "[::1]:7750"), "[::1]:9401");
        assert_eq!(
            metrics_reach("127.0.0.1:9401", "10.0.0.7:7750"),
            "127.0.0.1:9401"
        );
        let state = StateDir::new(Path::new("/s"));
        let launch = DaemonLaunch {
            state: &state,
            members: &[0, 1, 2],
            user: None,
            job: "",
        };
        let args = launch.args(Path::new("/r"), 1, "127.0.0.1:0", Some("127.0.0.1:9401"));
        let n = args.len();
        assert_eq!(
            args[n - 2..],
            ["--metrics", "127.0.0.1:9401"].map(OsString::from)
        );
    }

    #[test]
    fn host_names_resolve_to_ip_literals() {
        let host = |address: &str| HostLine {
            name: "n0".into(),
            address: address.into(),
        };
        assert_eq!(
            resolve_host(host("localhost")).unwrap().address,
            "127.0.0.1"
        );
        assert_eq!(resolve_host(host("::1")).unwrap().address, "::1");
        let err = format!(
            "{:#}",
            resolve_host(host("no-such-host.invalid")).unwrap_err()
        );
        assert!(err.contains("\"n0\""), "{err}");
    }
}
