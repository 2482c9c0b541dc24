//! A job's directory, SITE.state_dir/<job id>, and root's record of it (`job.toml`): the
//! user, the directives, and every node where something was started or mounted, so that
//! teardown can undo all of it from this record alone — never from files the user can write.

use crate::directives::JobRequest;
use crate::site::Site;
use anyhow::{bail, Context, Result};
use eddy_deploy::secure::DirFd;
use eddy_deploy::StateDir;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRecord {
    pub job: u32,
    pub uid: u32,
    pub gid: u32,
    pub request: JobRequest,
    pub mode: crate::directives::Mode,
    pub capacity: u64,
    pub pool_nodes: u32,
    /// Nodes running the job's daemons, with the storage root on each.
    #[serde(default)]
    pub daemons: Vec<DaemonPlace>,
    /// Nodes where the namespace is mounted (or was being mounted).
    #[serde(default)]
    pub mounted: Vec<String>,
    /// SHA-256 of the job script (hex), read at setup: the job's identity in the I/O
    /// history (decision 0032).
    #[serde(default)]
    pub script_hash: Option<String>,
    /// The Slurm job's name and node count, asked at setup (pool mode): with the script
    /// hash, what finds its history.
    #[serde(default)]
    pub job_name: Option<String>,
    #[serde(default)]
    pub nodes: Option<u32>,
    /// Pool mode: the allocation policy's decision (which of the pool's nodes, by which rule,
    /// why; decision 0038).
    #[serde(default)]
    pub decision: Option<eddy_alloc::Decision>,
    /// The predicted times of the job (site's `[walltime]`, decision 0040).
    #[serde(default)]
    pub walltime: WalltimeRecord,
    /// The job's `#EDDY prefetch`, started at pre_run as the job's user on this host: its pid
    /// and start time (/proc), so that data_out and teardown end it without signalling a
    /// reused pid (decision 0071).
    #[serde(default)]
    pub prefetch_pid: Option<u32>,
    #[serde(default)]
    pub prefetch_start_time: Option<u64>,
    /// Pool mode's run-time grow (decision 0082): its watcher and every grow it decided.
    #[serde(default)]
    pub grow: GrowRecord,
}

/// The run-time grow of a pool job: the watcher started at pre_run on this host (pid and
/// start time from /proc, so that it is never confused with a reused pid), each grow it
/// decided, and why it last held (only the latest, so that the record stays small).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GrowRecord {
    pub pid: Option<u32>,
    pub start_time: Option<u64>,
    /// Unix seconds when the watcher started: its warm-up counts from there.
    pub started: Option<i64>,
    pub events: Vec<GrowEvent>,
    pub last_hold: Option<String>,
}

/// One grow: decided at `at` (Unix seconds) from `from` servers, adding pool servers `added`
/// on `hosts`, for `reasons`; how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrowEvent {
    pub at: i64,
    pub from: u32,
    pub added: Vec<u32>,
    pub hosts: Vec<String>,
    pub reasons: Vec<String>,
    pub outcome: GrowOutcome,
    /// Unix seconds when it ended (done or failed).
    #[serde(default)]
    pub ended: Option<i64>,
}

/// How a grow ended: the servers are reserved in the record before any starts (so that
/// other jobs' setups see them taken and teardown cleans them), then the move is done at an
/// epoch, or failed (its reserved places stay for teardown when daemons may have started).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrowOutcome {
    Reserved,
    Done { epoch: u64 },
    Failed { why: String },
}

impl GrowOutcome {
    pub fn describe(&self) -> String {
        match self {
            GrowOutcome::Reserved => "reserved".into(),
            GrowOutcome::Done { epoch } => format!("done at epoch {epoch}"),
            GrowOutcome::Failed { why } => format!("failed: {why}"),
        }
    }
}

/// What the walltime prediction said and did, seconds since the epoch (UTC).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalltimeRecord {
    /// The job's predicted start when its stage-in was timed (the last check).
    pub predicted_start: Option<i64>,
    /// Estimated seconds of its stage-in (its sources' bytes / the site's rate).
    pub stage_in_estimate_s: Option<u64>,
    /// When stage-in was to begin: predicted start − estimate.
    pub stage_in_scheduled: Option<i64>,
    /// When stage-in began.
    pub stage_in_began: Option<i64>,
    /// Why it began then, in words (its time came, no history, the wait bound...).
    pub stage_in_why: Option<String>,
    /// The job's predicted end (its start + its predicted runtime), computed in pre_run.
    pub predicted_end: Option<i64>,
    /// The early write-back (`eddy writeback --end PREDICTED_END`, decision 0041) started at
    /// pre_run on this host: its pid and start time (/proc), so that data_out and teardown
    /// stop it without signalling a reused pid.
    pub writeback_pid: Option<u32>,
    pub writeback_start_time: Option<u64>,
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

    pub fn exists(&self) -> bool {
        // privileged-path: job.toml in the job directory, root's 0711 under the trusted state_dir (JobDir::create)
        self.record_path().exists()
    }

    /// Makes the directory (root's, 0711: the user may pass through to `user/` only), the
    /// deployment's state directory (root's, 0700) and the user's (the user's, 0700),
    /// through descriptors: the site's state directory must be root's and closed to others,
    /// an existing job directory root's, an existing `user/` the job user's; a link planted
    /// at either is refused, never followed.
    pub fn create(&self, uid: u32, gid: u32) -> Result<()> {
        let parent = self.dir.parent().context("a job directory has a parent")?;
        let state_dir = eddy_deploy::secure::trusted_dir(parent)
            .with_context(|| format!("the site's state_dir {}", parent.display()))?;
        let name = self
            .dir
            .file_name()
            .and_then(|n| n.to_str())
            .context("a job directory is named by its job id")?;
        let (me, my_group) = eddy_deploy::secure::me();
        let dir = state_dir.child_dir(name, 0o711, me, my_group)?;
        dir.child_dir("state", 0o700, me, my_group)?;
        dir.child_dir("user", 0o700, uid, gid)?;
        Ok(())
    }

    pub fn load(&self) -> Result<JobRecord> {
        let path = self.record_path();
        // privileged-path: job.toml in the job directory, root's 0711 under the trusted state_dir (JobDir::create)
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read the job record {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("job record {} is damaged", path.display()))
    }

    /// Saves the record atomically, readable by root only.
    pub fn save(&self, rec: &JobRecord) -> Result<()> {
        let text = toml::to_string(rec).context("cannot encode the job record")?;
        self.write_private("job.toml", text.as_bytes())
    }

    /// Writes a file of root's in the job's directory (mode 0600, atomically).
    pub fn write_private(&self, name: &str, data: &[u8]) -> Result<()> {
        let (me, my_group) = eddy_deploy::secure::me();
        DirFd::open(&self.dir)?.write_file(name, data, 0o600, me, my_group)
    }

    /// Gives the job's user a private copy of the deployment file (with the secret): the
    /// user's steps read it, root's state stays root's. Written through the descriptor of
    /// `user/` (a directory the user can change): a link the user planted there is replaced,
    /// never followed.
    pub fn publish_deployment(&self, uid: u32, gid: u32) -> Result<()> {
        let from = self.state().deployment_path();
        let data =
            // privileged-path: the deployment file in root's 0700 state directory of the job
            std::fs::read(&from).with_context(|| format!("cannot read {}", from.display()))?;
        let user = DirFd::open(&self.user_dir())?;
        let owner = user.stat()?.st_uid;
        if owner != uid {
            bail!(
                "{} belongs to uid {owner}, not the job's user {uid}",
                self.user_dir().display()
            );
        }
        user.write_file("deployment.toml", &data, 0o600, uid, gid)
    }

    /// Removes the whole directory (idempotent).
    pub fn remove(&self) -> Result<()> {
        // privileged-path: the job directory is root's; remove_dir_all unlinks links inside, never follows them
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("cannot remove {}", self.dir.display()))
            }
            _ => Ok(()),
        }
    }
}
