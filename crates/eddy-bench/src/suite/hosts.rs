//! `eddy bench suite --hosts N`: the netns host layout (decision 0042). Each host is a network
//! namespace (`crate::net`) that runs one daemon (`eddy start --hosts` with the launcher
//! `ip netns exec {host} {cmd}`), one FUSE mount of its own (`eddy mount`, entered into the
//! host's network only, so that the mount is visible in this host's mount namespace) and the
//! ranks r with r mod N = its index; the coordinator listens on this host's end of the bridge.
//! A rank on host i reaches daemon i over its own namespace's interface (local) and every
//! other daemon through the bridge (remote), as on a cluster. Ranks and mounts of host i name
//! themselves host i (`SLURMD_NODENAME`), so that `placement = "local"` puts their files on
//! daemon i. The storage stays one tmpfs
//! (or --storage), so that raw and Eddy runs share it as in the single-host layout.

use crate::args::{LaunchOpts, SuiteArgs};
use crate::net::{self, Net};
use crate::report::Layout;
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The launcher of the daemons.
const LAUNCHER: &str = "ip netns exec {host} {cmd}";
/// The node name a client identifies with (`eddy_rpc::NODE_VAR`, Slurm's): every rank and
/// mount of host i names itself host i, so that `placement = "local"` finds host i's daemon
/// (the namespaces share one host name; decision 0047).
const NODE_VAR: &str = "SLURMD_NODENAME";
/// The launcher of the ranks of the raw, library and preload runs.
const RANK_LAUNCHER: &str = "ip netns exec {host} env SLURMD_NODENAME={host} {cmd}";

/// A rank of the mount run sees its host's mount at the path the coordinator uses (host 0's
/// mount): `ip netns exec` gives each command a private mount namespace, in which this
/// script bind-mounts the host's mount over that path before it runs the rank.
const BIND_SCRIPT: &str = "#!/bin/sh\n\
# eddy bench suite --hosts: a rank of the mount run, with its host's mount at the shared path\n\
src=$1 dst=$2\n\
shift 2\n\
[ \"$src\" = \"$dst\" ] || mount --bind \"$src\" \"$dst\" || exit 1\n\
exec \"$@\"\n";

/// The namespaces of one suite and what the suite needs to use them.
pub(crate) struct Hosts {
    net: Net,
    /// `NAME ADDRESS` per host, for `eddy start --hosts`.
    hosts_file: PathBuf,
    /// Where host i's mount goes: `mounts/NAME`.
    mounts: PathBuf,
    bind: PathBuf,
    link_rate: Option<String>,
}

impl Hosts {
    /// Builds `n` host namespaces (links limited to --link-rate if given) and the files the
    /// suite needs in `base`; refuses what the layout cannot do.
    pub(crate) fn build(a: &SuiteArgs, n: u32, base: &Path) -> Result<Hosts> {
        if n == 0 {
            bail!("--hosts must be at least 1");
        }
        if a.launch.mpi || a.launch.worker_launcher.is_some() {
            bail!("--hosts places the ranks on the hosts itself: drop --mpi / --worker-launcher");
        }
        if base.to_string_lossy().contains(char::is_whitespace) {
            bail!(
                "--hosts: the storage directory {} must not contain white space (it goes into \
                 a launcher template)",
                base.display()
            );
        }
        if let Some(rate) = &a.link_rate {
            net::rate_bytes(rate)?;
        }
        let net = Net::build(net::SUITE, n as usize, 0)?;
        if let Some(rate) = &a.link_rate {
            for i in 0..n as usize {
                net.limit_server(i, rate)?;
            }
        }
        let hosts_file = base.join("hosts");
        let list: String = (0..n as usize)
            .map(|i| format!("{} {}\n", net.server(i), net.server_addr(i)))
            .collect();
        std::fs::write(&hosts_file, list)
            .with_context(|| format!("cannot write {}", hosts_file.display()))?;
        let mounts = base.join("mounts");
        for i in 0..n as usize {
            let m = mounts.join(net.server(i));
            std::fs::create_dir_all(&m)
                .with_context(|| format!("cannot create {}", m.display()))?;
        }
        let bind = base.join("bind.sh");
        std::fs::write(&bind, BIND_SCRIPT)
            .with_context(|| format!("cannot write {}", bind.display()))?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&bind, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(Hosts {
            net,
            hosts_file,
            mounts,
            bind,
            link_rate: a.link_rate.clone(),
        })
    }

    pub(crate) fn count(&self) -> usize {
        self.net.namespaces().len() - 1
    }

    fn names(&self) -> Vec<String> {
        (0..self.count()).map(|i| self.net.server(i)).collect()
    }

    /// Host i's mount point.
    pub(crate) fn mount(&self, i: usize) -> PathBuf {
        self.mounts.join(self.net.server(i))
    }

    /// Where every rank of the mount run (and the coordinator) finds the mount: host 0's.
    pub(crate) fn shared_mount(&self) -> PathBuf {
        self.mount(0)
    }

    /// How the raw, library and preload runs start their ranks: rank r in host r mod N.
    pub(crate) fn launch(&self) -> LaunchOpts {
        LaunchOpts {
            listen: format!("{}:0", self.net.root_addr()),
            worker_launcher: Some(RANK_LAUNCHER.to_string()),
            worker_hosts: self.names(),
            ..LaunchOpts::local()
        }
    }

    /// How the mount run starts its ranks: as `launch`, each seeing its host's mount at
    /// `shared_mount` (the script is run by /bin/sh: tmpfs is often mounted noexec).
    pub(crate) fn mount_launch(&self) -> LaunchOpts {
        LaunchOpts {
            worker_launcher: Some(format!(
                "ip netns exec {{host}} env {NODE_VAR}={{host}} /bin/sh {} {}/{{host}} {} {{cmd}}",
                self.bind.display(),
                self.mounts.display(),
                self.shared_mount().display()
            )),
            ..self.launch()
        }
    }

    /// `eddy start` arguments that put daemon i in host i, its storage in `root/NAME`.
    pub(crate) fn start_args(&self, root: &Path) -> Result<Vec<OsString>> {
        for n in self.names() {
            let r = root.join(&n);
            std::fs::create_dir_all(&r)
                .with_context(|| format!("cannot create {}", r.display()))?;
        }
        Ok(vec![
            "--hosts".into(),
            self.hosts_file.clone().into(),
            "--launcher".into(),
            LAUNCHER.into(),
            "--root".into(),
            format!("{}/{{host}}", root.display()).into(),
        ])
    }

    /// Mounts the deployment of `state` once per host, each `eddy mount` in that host's
    /// network (nsenter: the mount stays visible in this mount namespace); `eddy stop`
    /// unmounts them, as it does every mount of its deployment.
    pub(crate) fn mount_all(&self, exe: &Path, state: &Path) -> Result<Vec<PathBuf>> {
        let mut done = Vec::new();
        for i in 0..self.count() {
            let ns = self.net.server(i);
            let mnt = self.mount(i);
            let out = Command::new("nsenter")
                .arg(format!("--net=/run/netns/{ns}"))
                .arg(exe)
                .arg("mount")
                .arg("--state")
                .arg(state)
                .arg(&mnt)
                .stdin(Stdio::null())
                .env_remove("EDDY_STATE")
                .env(NODE_VAR, &ns)
                .output()
                .context("cannot run nsenter (util-linux)")?;
            if !out.status.success() {
                bail!(
                    "eddy mount in {ns} failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            done.push(mnt);
        }
        Ok(done)
    }

    /// The layout as results record it, with the daemons' addresses of `state`'s deployment.
    pub(crate) fn layout(&self, state: &Path, placement: Option<String>) -> Result<Layout> {
        Ok(Layout {
            name: Layout::hosts_name(self.count() as u32),
            hosts: self.count() as u32,
            namespaces: self.names(),
            daemons: daemon_addrs(state)?,
            link_rate: self.link_rate.clone(),
            placement,
        })
    }
}

/// The daemons' addresses of the deployment whose state is `state`.
pub(crate) fn daemon_addrs(state: &Path) -> Result<Vec<String>> {
    let file = state.join("deployment.toml");
    let dep = eddy_config::Deployment::load(&file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    Ok(dep.daemons.into_iter().map(|d| d.addr).collect())
}
