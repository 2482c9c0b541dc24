//! `Deployment`: the hosts file written at start-up (the daemons, the secret, the config)
//! that clients and tools read, and the private, atomic write it is saved with.

use crate::{read, Config, ConfigError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One daemon of a deployment. Ids are stable across restarts and index placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonEntry {
    /// Stable id; placement hashes over the ordered list of ids.
    pub id: u32,
    /// Host name the daemon runs on (as given to the launcher).
    pub host: String,
    /// TCP address clients on other nodes use, `ip:port`.
    pub addr: String,
    /// Unix socket for clients on the same node, if any.
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// Storage root directory of the daemon (on its host).
    pub root: PathBuf,
    /// Where it serves `/metrics` for Prometheus, `ip:port` as scrapers reach it (the
    /// address it bound, the daemon's own IP in place of an unspecified one), if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
}

/// The hosts file of a deployment: written by `eddy start`, read by clients and tools.
/// It carries the secret, so it is written with mode 0600.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deployment {
    /// Name of the deployment (free text, e.g. the job id).
    pub name: String,
    /// Shared secret, hex encoded; clients prove knowledge of it on connect.
    pub secret: String,
    /// Tunables shared by daemons and clients.
    #[serde(default)]
    pub config: Config,
    /// The daemons, ordered by id.
    pub daemons: Vec<DaemonEntry>,
    /// The job the deployment serves (decision 0032); empty in files written before it was
    /// recorded.
    #[serde(default)]
    pub job: JobInfo,
    /// The membership's epoch (decision 0081): 0 at start, one more at each change of what
    /// clients place by (`eddy grow`, `eddy shrink`). A daemon at a newer epoch refuses a
    /// client at an older one, which reads this file again.
    #[serde(default)]
    pub epoch: u64,
    /// While items move (decision 0081): the ids of the daemons of the placement they move
    /// from. Clients place by these meanwhile; the daemons copy every item to its owners
    /// among the members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moving_from: Option<Vec<u32>>,
    /// Daemons being drained (`eddy shrink`): listed and reachable until their items have
    /// moved and they stop, but not members (nothing is placed on them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub draining: Vec<u32>,
}

/// Who a deployment serves: what its counters and its job profile are named by (decision
/// 0032). Filled by `eddy start` (from Slurm's environment) and the burst buffer (from the
/// job's record).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobInfo {
    /// The Slurm job id (`SLURM_JOB_ID`), when there is one.
    pub id: Option<String>,
    /// The Slurm job name (`SLURM_JOB_NAME`).
    pub name: Option<String>,
    /// The user who started the deployment (name, else uid).
    pub user: String,
    /// SHA-256 (hex) of the job script, when known (the burst buffer; `eddy start
    /// --script`): with the name, what identifies "the same application" across runs.
    pub script_hash: Option<String>,
    /// When the deployment started, unix milliseconds (0: unknown).
    pub start_ms: u64,
}

impl JobInfo {
    /// The job as the daemons' counters name it: the Slurm job id, else the deployment's
    /// name.
    pub fn label(&self, deployment: &str) -> String {
        self.id.clone().unwrap_or_else(|| deployment.to_string())
    }

    /// The SHA-256 of a job script, hex.
    pub fn script_hash(script: &[u8]) -> String {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(script))
    }

    /// The name of user `uid`, else the uid as text.
    pub fn user_name(uid: u32) -> String {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .ok()
            .flatten()
            .map_or_else(|| uid.to_string(), |u| u.name)
    }

    /// The job of a deployment started by this process: Slurm's job id and name from the
    /// environment (`SLURM_JOB_ID`, `SLURM_JOB_NAME`), the calling user.
    pub fn from_env() -> JobInfo {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        JobInfo {
            id: var("SLURM_JOB_ID"),
            name: var("SLURM_JOB_NAME"),
            user: JobInfo::user_name(nix::unistd::getuid().as_raw()),
            script_hash: None,
            start_ms: 0,
        }
    }
}

impl Deployment {
    /// A fresh random secret (32 bytes, hex).
    pub fn new_secret() -> String {
        let bytes: [u8; 32] = rand::random();
        hex::encode(bytes)
    }

    /// The secret as raw bytes.
    pub fn secret_bytes(&self) -> Result<Vec<u8>, ConfigError> {
        hex::decode(&self.secret)
            .map_err(|e| ConfigError::Invalid(format!("deployment secret is not hex: {e}")))
    }

    /// The members (decision 0081): the daemons items are placed on once they have moved,
    /// every daemon listed but those being drained; ascending.
    pub fn members(&self) -> Vec<u32> {
        self.daemons
            .iter()
            .map(|d| d.id)
            .filter(|id| !self.draining.contains(id))
            .collect()
    }

    /// The daemons clients place by now: those items move from while they move, else the
    /// members.
    pub fn placed_on(&self) -> Vec<u32> {
        match &self.moving_from {
            Some(from) => from.clone(),
            None => self.members(),
        }
    }

    /// Checks ids are unique and sorted, the membership consistent and the config sane.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.config.validate()?;
        if self.daemons.is_empty() {
            return Err(ConfigError::Invalid("deployment lists no daemons".into()));
        }
        let listed = |id: &u32| self.daemons.iter().any(|d| d.id == *id);
        if let Some(bad) = self
            .draining
            .iter()
            .chain(self.moving_from.iter().flatten())
            .find(|id| !listed(id))
        {
            return Err(ConfigError::Invalid(format!(
                "daemon {bad} is drained or moved from but not listed in the deployment"
            )));
        }
        let members = self.members().len();
        let placed = self.placed_on().len();
        if self.config.replicas > members.min(placed) {
            return Err(ConfigError::Invalid(format!(
                "replicas {} exceeds the {} daemons of the deployment: each copy needs a \
                 daemon of its own",
                self.config.replicas,
                members.min(placed)
            )));
        }
        for pair in self.daemons.windows(2) {
            if pair[0].id >= pair[1].id {
                return Err(ConfigError::Invalid(format!(
                    "daemon ids must be unique and ascending (found {} then {})",
                    pair[0].id, pair[1].id
                )));
            }
        }
        self.secret_bytes()?;
        Ok(())
    }

    /// Reads and validates a deployment file.
    pub fn load(path: &Path) -> Result<Deployment, ConfigError> {
        let text = read(path)?;
        let dep: Deployment = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        dep.validate()?;
        Ok(dep)
    }

    /// Writes the deployment atomically (temp file + rename) with mode 0600.
    pub fn save(&self, path: &Path) -> Result<(), ConfigError> {
        let text = toml::to_string_pretty(self)
            .map_err(|e| ConfigError::Invalid(format!("cannot encode deployment: {e}")))?;
        write_private(path, text.as_bytes())
    }
}

/// Writes a file readable by its owner only (mode 0600), atomically: a temp file beside it,
/// synced, then renamed over it.
pub fn write_private(path: &Path, data: &[u8]) -> Result<(), ConfigError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // A fresh name, made exclusively: a file or link already there (planted, or left by a
    // crash) is never written through.
    let tmp = path.with_extension(format!("{:016x}.tmp", rand::random::<u64>()));
    let werr = |source| ConfigError::Write {
        path: tmp.clone(),
        source,
    };
    // privileged-path: create_new (O_EXCL: a planted link fails) of a fresh random name in the caller's state directory
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(werr)?;
    let written = f
        .write_all(data)
        .and_then(|()| f.sync_all())
        .map_err(werr)
        .and_then(|()| {
            // privileged-path: rename replaces the name, never follows a link; in the caller's state directory
            std::fs::rename(&tmp, path).map_err(|source| ConfigError::Write {
                path: path.to_owned(),
                source,
            })
        });
    if written.is_err() {
        // privileged-path: unlink of the fresh temporary name in the caller's state directory
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
