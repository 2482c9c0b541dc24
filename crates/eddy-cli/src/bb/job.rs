//! A job's directory, SITE.state_dir/<job id>, and root's record of it (`job.toml`): the
//! user, the directives, and every node where something was started or mounted, so that
//! teardown can undo all of it from this record alone — never from files the user can write.

use super::directives::JobRequest;
use super::site::Site;
use crate::state::StateDir;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRecord {
    pub job: u32,
    pub uid: u32,
    pub gid: u32,
    pub request: JobRequest,
    pub mode: super::directives::Mode,
    pub capacity: u64,
    pub pool_nodes: u32,
    /// Nodes running the job's daemons, with the storage root on each.
    #[serde(default)]
    pub daemons: Vec<DaemonPlace>,
    /// Nodes where the namespace is mounted (or was being mounted).
    #[serde(default)]
    pub mounted: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DaemonPlace {
    pub host: String,
    pub address: String,
    pub root: PathBuf,
}

/// Paths of one job's directory.
pub struct JobDir {
    pub dir: PathBuf,
}

impl JobDir {
    pub fn new(site: &Site, job: u32) -> JobDir {
        JobDir {
            dir: site.job_dir(job),
        }
    }

    fn record_path(&self) -> PathBuf {
        self.dir.join("job.toml")
    }

    /// The deployment's state directory (root's).
    pub fn state(&self) -> StateDir {
        StateDir::new(&self.dir.join("state"))
    }

    /// The job user's directory: EDDY_STATE of the job.
    pub fn user_dir(&self) -> PathBuf {
        self.dir.join("user")
    }

    pub fn hosts_file(&self) -> PathBuf {
        self.dir.join("hosts")
    }

    pub fn exists(&self) -> bool {
        self.record_path().exists()
    }

    /// Makes the directory (root's, 0755) and the user's (the user's, 0700).
    pub fn create(&self, uid: u32, gid: u32) -> Result<()> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create {}", self.dir.display()))?;
        set_mode(&self.dir, 0o755)?;
        let user = self.user_dir();
        std::fs::create_dir_all(&user)
            .with_context(|| format!("cannot create {}", user.display()))?;
        chown(&user, uid, gid)?;
        set_mode(&user, 0o700)
    }

    pub fn load(&self) -> Result<JobRecord> {
        let path = self.record_path();
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read the job record {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("job record {} is damaged", path.display()))
    }

    /// Saves the record atomically (write, then rename).
    pub fn save(&self, rec: &JobRecord) -> Result<()> {
        let path = self.record_path();
        let tmp = self.dir.join("job.toml.new");
        let text = toml::to_string(rec).context("cannot encode the job record")?;
        std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))
    }

    /// Gives the job's user a private copy of the deployment file (with the secret): the
    /// user's steps read it, root's state stays root's.
    pub fn publish_deployment(&self, uid: u32, gid: u32) -> Result<()> {
        let from = self.state().deployment_path();
        let to = self.user_dir().join("deployment.toml");
        let data =
            std::fs::read(&from).with_context(|| format!("cannot read {}", from.display()))?;
        let tmp = self.user_dir().join(".deployment.toml.new");
        crate::state::write_private(&tmp, &data)?;
        chown(&tmp, uid, gid)?;
        std::fs::rename(&tmp, &to).with_context(|| format!("cannot write {}", to.display()))
    }

    /// Removes the whole directory (idempotent).
    pub fn remove(&self) -> Result<()> {
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("cannot remove {}", self.dir.display()))
            }
            _ => Ok(()),
        }
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set the mode of {}", path.display()))
}

fn chown(path: &Path, uid: u32, gid: u32) -> Result<()> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .with_context(|| format!("cannot give {} to uid {uid}", path.display()))
}
