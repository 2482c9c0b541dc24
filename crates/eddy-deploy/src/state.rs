//! The state directory of a deployment and the files in it.
//!
//! Layout (all written by `eddy`, never by the daemons):
//! - `deployment.toml`: the hosts file (`eddy_config::Deployment`, mode 0600, carries the secret);
//!   renamed to `deployment.stopped.toml` by `eddy stop`;
//! - `secret`: the deployment secret in hex (mode 0600), passed to daemons with `--secret-file`;
//! - `config.toml`: the configuration the daemons were started with;
//! - `pids`: processes started on this host (`label pid start-time` per line);
//! - `mounts`: mount points served by `eddy mount` for this deployment, one per line;
//! - `daemon-<id>.log`, `mount.log`: output of the daemons (or their launchers) and mounts;
//! - `profile.json`: the job profile the deployment's end made (`profile.rs`, mode 0600).
//!
//! The daemons' own files are in their roots; `ROOT/stats/` holds the snapshots of their
//! counters that a killed deployment's profile is made from.

use anyhow::{bail, Context, Result};
use eddy_config::Deployment;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A deployment's state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

/// The file of the state directory that records how remote daemons were launched.
const REMOTE_LAUNCH_FILE: &str = "remote-launch.toml";

/// How a deployment's remote daemons are launched: the launcher template (`{host}`,
/// `{cmd}`), the root template (absolute; `{host}`, `{id}`) and the port they listen on
/// (0: any free one).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RemoteLaunch {
    pub launcher: String,
    pub root: String,
    pub port: u16,
}

/// A process this host started for the deployment (a daemon or a launcher).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedProcess {
    pub label: String,
    pub pid: u32,
    /// Start time from /proc/<pid>/stat, so that a reused pid is never signalled.
    pub start_time: u64,
}

impl StateDir {
    /// The state directory given with --state / $EDDY_STATE; required by every command but
    /// `start`, which falls back to its --root.
    pub fn from_arg(state: Option<&Path>) -> Result<StateDir> {
        match state {
            Some(dir) => Ok(StateDir::new(dir)),
            None => bail!(
                "no state directory given: pass --state DIR or set EDDY_STATE \
                 (the --state, else the --root, that `eddy start` was given)"
            ),
        }
    }

    pub fn new(dir: &Path) -> StateDir {
        StateDir { dir: absolute(dir) }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates the directory (and parents); made here, others may pass through it (to daemon
    /// roots inside it, as `--state` defaults to `--root`) but not list it (0711): its files,
    /// the secret, the configuration and the logs among them, are 0600.
    pub fn create(&self) -> Result<()> {
        // privileged-path: the caller's state directory (--state; eddy bb: root's, under a trusted state_dir)
        let existed = self.dir.is_dir();
        // privileged-path: the caller's state directory (--state; eddy bb: root's, under a trusted state_dir)
        std::fs::create_dir_all(&self.dir).with_context(|| {
            format!(
                "cannot create state directory {}; choose a writable --state",
                self.dir.display()
            )
        })?;
        if !existed {
            use std::os::unix::fs::PermissionsExt;
            // privileged-path: the caller's state directory, just made
            std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o711))
                .with_context(|| format!("cannot set the mode of {}", self.dir.display()))?;
        }
        Ok(())
    }

    pub fn deployment_path(&self) -> PathBuf {
        self.dir.join("deployment.toml")
    }
    pub fn stopped_path(&self) -> PathBuf {
        self.dir.join("deployment.stopped.toml")
    }
    pub fn secret_path(&self) -> PathBuf {
        self.dir.join("secret")
    }
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.toml")
    }
    pub fn pids_path(&self) -> PathBuf {
        self.dir.join("pids")
    }
    pub fn mounts_path(&self) -> PathBuf {
        self.dir.join("mounts")
    }
    pub fn daemon_log(&self, id: u32) -> PathBuf {
        self.dir.join(format!("daemon-{id}.log"))
    }
    pub fn mount_log(&self) -> PathBuf {
        self.dir.join("mount.log")
    }

    /// Whether a deployment file is present (the deployment was started and not stopped).
    pub fn has_deployment(&self) -> bool {
        // privileged-path: in the caller's state directory
        self.deployment_path().exists()
    }

    /// The running deployment, or a clear error if there is none.
    pub fn load_deployment(&self) -> Result<Deployment> {
        let path = self.deployment_path();
        // privileged-path: in the caller's state directory
        if !path.exists() {
            bail!(
                "no deployment is running in {} ({} does not exist); start one with `eddy start`",
                self.dir.display(),
                path.display()
            );
        }
        Deployment::load(&path)
            .with_context(|| format!("cannot load the deployment {}", path.display()))
    }

    pub fn save_deployment(&self, dep: &Deployment) -> Result<()> {
        let path = self.deployment_path();
        dep.save(&path)
            .with_context(|| format!("cannot write the deployment file {}", path.display()))
    }

    /// Marks the deployment stopped: the deployment file becomes `deployment.stopped.toml`,
    /// the pid and mount lists go; logs stay.
    pub fn mark_stopped(&self) -> Result<()> {
        let from = self.deployment_path();
        // privileged-path: rename in the caller's state directory
        std::fs::rename(&from, self.stopped_path())
            .with_context(|| format!("cannot rename {} after stopping", from.display()))?;
        remove_if_exists(&self.pids_path())?;
        remove_if_exists(&self.mounts_path())
    }

    pub fn write_secret(&self, secret: &str) -> Result<()> {
        write_private(&self.secret_path(), secret.as_bytes())
    }

    /// The user the daemons run as (`eddy start --user`), for `eddy replace`; none: the file
    /// goes.
    pub fn write_daemon_user(&self, user: Option<&str>) -> Result<()> {
        match user {
            Some(u) => write_private(&self.daemon_user_path(), u.as_bytes()),
            None => remove_if_exists(&self.daemon_user_path()),
        }
    }

    pub fn daemon_user(&self) -> Result<Option<String>> {
        let text = read_optional(&self.daemon_user_path())?;
        Ok(Some(text.trim().to_string()).filter(|u| !u.is_empty()))
    }

    fn daemon_user_path(&self) -> PathBuf {
        self.dir.join("daemon-user")
    }

    /// How the deployment's remote daemons were launched (`eddy start --hosts/--slurm`), for
    /// `eddy grow --hosts`, which launches its daemons the same way.
    pub fn write_remote_launch(&self, launch: &RemoteLaunch) -> Result<()> {
        let text = toml::to_string_pretty(launch).context("cannot encode the launcher")?;
        write_private(&self.dir.join(REMOTE_LAUNCH_FILE), text.as_bytes())
    }

    /// How the remote daemons were launched; `None` for a deployment of local daemons.
    pub fn remote_launch(&self) -> Result<Option<RemoteLaunch>> {
        let path = self.dir.join(REMOTE_LAUNCH_FILE);
        let text = read_optional(&path)?;
        if text.is_empty() {
            return Ok(None);
        }
        toml::from_str(&text)
            .map(Some)
            .with_context(|| format!("cannot read {}", path.display()))
    }

    pub fn write_config(&self, config: &eddy_config::Config) -> Result<()> {
        let text = toml::to_string_pretty(config).context("cannot encode the configuration")?;
        write_private(&self.config_path(), text.as_bytes())
    }

    pub fn write_pids(&self, procs: &[RecordedProcess]) -> Result<()> {
        let text: String = procs
            .iter()
            .map(|p| format!("{} {} {}\n", p.label, p.pid, p.start_time))
            .collect();
        write_private(&self.pids_path(), text.as_bytes())
    }

    /// The recorded processes; malformed lines are skipped (they are never signalled).
    pub fn read_pids(&self) -> Result<Vec<RecordedProcess>> {
        let text = read_optional(&self.pids_path())?;
        Ok(text.lines().filter_map(parse_pid_line).collect())
    }

    pub fn mounts(&self) -> Result<Vec<PathBuf>> {
        let text = read_optional(&self.mounts_path())?;
        Ok(text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(PathBuf::from)
            .collect())
    }

    pub fn add_mount(&self, mnt: &Path) -> Result<()> {
        let path = self.mounts_path();
        // privileged-path: the mounts list in the caller's state directory
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        writeln!(f, "{}", mnt.display()).with_context(|| format!("cannot write {}", path.display()))
    }

    pub fn remove_mount(&self, mnt: &Path) -> Result<()> {
        let left: Vec<PathBuf> = self.mounts()?.into_iter().filter(|m| m != mnt).collect();
        // privileged-path: in the caller's state directory
        if !self.mounts_path().exists() {
            return Ok(());
        }
        let text: String = left.iter().map(|m| format!("{}\n", m.display())).collect();
        write_private(&self.mounts_path(), text.as_bytes())
    }
}

fn parse_pid_line(line: &str) -> Option<RecordedProcess> {
    let mut it = line.split_whitespace();
    let label = it.next()?.to_string();
    let pid = it.next()?.parse().ok()?;
    let start_time = it.next()?.parse().ok()?;
    Some(RecordedProcess {
        label,
        pid,
        start_time,
    })
}

/// An absolute form of `path` (relative to the current directory), without touching it.
pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// Writes a file readable by its owner only (temp file + rename).
pub fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    Ok(eddy_config::write_private(path, data)?)
}

fn read_optional(path: &Path) -> Result<String> {
    // privileged-path: files of the caller's state directory
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn remove_if_exists(path: &Path) -> Result<()> {
    // privileged-path: files of the caller's state directory
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_and_mounts_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let st = StateDir::new(dir.path());
        let procs = vec![
            RecordedProcess {
                label: "daemon-0".into(),
                pid: 12,
                start_time: 99,
            },
            RecordedProcess {
                label: "launcher-1".into(),
                pid: 13,
                start_time: 100,
            },
        ];
        st.write_pids(&procs).unwrap();
        assert_eq!(st.read_pids().unwrap(), procs);
        st.add_mount(Path::new("/a/b")).unwrap();
        st.add_mount(Path::new("/c")).unwrap();
        st.remove_mount(Path::new("/a/b")).unwrap();
        assert_eq!(st.mounts().unwrap(), vec![PathBuf::from("/c")]);
    }

    #[test]
    fn missing_deployment_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = StateDir::new(dir.path())
            .load_deployment()
            .unwrap_err()
            .to_string();
        assert!(err.contains("no deployment is running"), "{err}");
    }
}
