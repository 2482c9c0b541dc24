//! The site's burst-buffer settings (`/etc/eddy/bb.toml`, or `eddy bb --site FILE`): where jobs'
//! state, storage and mounts go, how nodes are reached, the I/O-node pool, and the limits a
//! job's directives must respect. Every field has a default but the pool, so that a site
//! with node-local storage only needs no file at all.

use crate::directives::{JobRequest, Mode, NODE_LOCAL_POOL};
use anyhow::{bail, Context, Result};
use eddy_config::parse_bytes;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod pool;
pub use pool::Pool;

/// Where `eddy bb` reads the site's settings unless told otherwise.
pub const DEFAULT_SITE: &str = "/etc/eddy/bb.toml";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Site {
    /// The directive word of the job scripts (burst_buffer.conf `Directive=`).
    pub directive: String,
    /// Each job's state goes to STATE_DIR/<job id> (deployment file, logs, the job's record).
    /// It must be the same path on every node a job may run on (a shared file system), as the
    /// job's steps and the mounts on its nodes read the deployment file from there.
    pub state_dir: PathBuf,
    /// Mount point of a job's namespace on each of its nodes; `{job}` is the job id.
    pub mount: String,
    /// Storage root of a node-local daemon on each job node; `{job}`, `{host}`, `{id}`. Its
    /// parent must be root's and closed to others (not /tmp): the daemon makes the root
    /// itself, refusing one that is already there and not its own.
    pub node_root: String,
    /// How to run a command on a node: `{host}` and `{cmd}` (e.g. `ssh {host} {cmd}`,
    /// `pdsh -w {host} {cmd}`); `{cmd}` alone runs it on the host of slurmctld.
    pub launcher: String,
    /// The `eddy` program on the nodes (for the mounts the launcher makes there); default:
    /// this program's path.
    pub eddy: Option<PathBuf>,
    /// Mode of a job that does not say (`node-local` or `pool`).
    pub default_mode: Mode,
    /// Capacity of a job that does not say.
    pub default_capacity: String,
    /// Largest capacity a job may ask for (default 1 TiB).
    pub max_capacity: Option<String>,
    /// Backend directories jobs may link (a job's `link` must lie under one); empty: any.
    /// The daemons run as the job's user, so the user's own rights apply either way.
    pub backend_roots: Vec<PathBuf>,
    /// Node inventory written by `eddy sysmap --db` (capacity checks and pool sizes).
    pub inventory: Option<PathBuf>,
    /// Capacity of the node-local pool Slurm charges node-local jobs to; default: the space
    /// available under `node_root` on every node of the inventory, else no limit (1 PiB).
    pub node_local_capacity: Option<String>,
    /// Tunables (an `eddy start --config` file) for every job's deployment.
    pub config: Option<PathBuf>,
    /// Bound in seconds on a command run on a node through the launcher.
    pub node_command_timeout_s: u64,
    /// The dedicated I/O nodes of pool mode.
    pub pool: Option<Pool>,
    /// The I/O history database every job's profile is stored in at teardown (as the
    /// config's `history_db`: an absolute path for SQLite, a `postgres://` URL for
    /// PostgreSQL; decision 0033). Unset: the `config` file's `history_db`, else
    /// `STATE_DIR/history.db` (`profile_db`). A URL here carries no password (refused): it
    /// goes in `[history] password_file`. Never copied into a job's files (decision 0054).
    pub history_db: Option<String>,
    /// How root reaches the history database: the passwords' root-only files, the teardown's
    /// insert-only role, the bounds on every connection (decision 0054).
    pub history: HistorySite,
    /// The allocation policy of pool mode (`eddy_alloc::Policy`, the `[alloc]` table as
    /// `eddy alloc --policy` reads it; decision 0038): which of the pool's nodes each job's
    /// daemons start on.
    pub alloc: eddy_alloc::Policy,
    /// Staging timed by predicted walltime (decision 0040); unset: pool jobs stage in at once.
    pub walltime: Option<WalltimeSite>,
}

/// `[history]`: root's access to the site's history database (`history_db`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistorySite {
    /// A file holding the password of `history_db`'s role (PostgreSQL): root's, mode 0600 or
    /// 0400, in a directory only root can change; read at each use, never copied into a job's
    /// files. Unset: no password (a unix socket's peer authentication, or trust).
    pub password_file: Option<PathBuf>,
    /// The database URL the teardown stores each job's profile through: a role that may only
    /// INSERT into `profiles` (docs/guide/slurm-admin.md), without a password in the URL. Unset:
    /// `history_db` itself (its role then needs no more than INSERT for the teardown either:
    /// a stored profile is never replaced).
    pub writer: Option<String>,
    /// The password file of `writer`'s role (as `password_file`).
    pub writer_password_file: Option<PathBuf>,
    /// Bound on reaching the database server, seconds.
    pub connect_timeout_s: u64,
    /// Bound on waiting for a lock in the database (the migrations' advisory lock, a table a
    /// session holds), seconds: past it the history is not used (the allocation decides
    /// without it; the teardown leaves the profile in the job's state).
    pub lock_timeout_s: u64,
    /// Bound on one statement, seconds.
    pub statement_timeout_s: u64,
}

impl Default for HistorySite {
    fn default() -> HistorySite {
        HistorySite {
            password_file: None,
            writer: None,
            writer_password_file: None,
            connect_timeout_s: 5,
            lock_timeout_s: 5,
            statement_timeout_s: 10,
        }
    }
}

/// The largest password file read.
const MAX_PASSWORD_BYTES: u64 = 4096;

impl HistorySite {
    /// The bounds and the password of `password_file` (read now, as root).
    fn access(&self, password_file: Option<&Path>) -> Result<eddy_history::Access> {
        let secs = Duration::from_secs;
        Ok(eddy_history::Access {
            password: password_file
                .map(|f| eddy_deploy::secure::read_secret(f, MAX_PASSWORD_BYTES))
                .transpose()
                .context("[history] the database password")?,
            connect_timeout: Some(secs(self.connect_timeout_s)),
            lock_timeout: Some(secs(self.lock_timeout_s)),
            statement_timeout: Some(secs(self.statement_timeout_s)),
        })
    }

    /// The longest one use of the database may take (connection and a few statements): the
    /// allocation's bound on it, whatever the server does.
    pub fn bound(&self) -> Duration {
        Duration::from_secs(
            self.connect_timeout_s
                .saturating_add(self.lock_timeout_s)
                .saturating_add(self.statement_timeout_s.saturating_mul(3)),
        )
    }

    fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("connect_timeout_s", self.connect_timeout_s),
            ("lock_timeout_s", self.lock_timeout_s),
            ("statement_timeout_s", self.statement_timeout_s),
        ] {
            if v == 0 {
                bail!("[history] {name} = 0: give a number of seconds");
            }
        }
        if let Some(w) = &self.writer {
            eddy_config::check_history_db(w)
                .map_err(|e| anyhow::anyhow!("[history] writer: {e}"))?;
            if !w.starts_with("postgres://") && !w.starts_with("postgresql://") {
                bail!("[history] writer is a PostgreSQL role's URL (postgres://...)");
            }
            no_password("[history] writer", w)?;
        }
        for f in [&self.password_file, &self.writer_password_file]
            .into_iter()
            .flatten()
        {
            if !f.is_absolute() {
                bail!(
                    "[history] password file {} is not an absolute path",
                    f.display()
                );
            }
        }
        Ok(())
    }
}

/// Refuses a database URL with a password in the site's settings (a file others may read).
fn no_password(what: &str, spec: &str) -> Result<()> {
    if eddy_history::has_password(spec) {
        bail!(
            "{what} holds a password: the settings file is no place for it; put it in a \
             root-only file named by [history] password_file (or writer_password_file)"
        );
    }
    Ok(())
}

/// `[walltime]`: how a pool job's stage-in is timed by its predicted start, and how its
/// predicted end is computed (eddy-bb's `walltime`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WalltimeSite {
    /// The predictor of every job's runtime: `easy++`, `adaboost` or `request`; unset: the
    /// one with the lowest error when the user's history is replayed (`eddy walltime predict`).
    pub predictor: Option<eddy_walltime::Predictor>,
    /// Correction of a running job past its prediction: `none`, `simple` or `power`.
    pub correction: eddy_walltime::Correction,
    /// The history: `sacct` (Slurm accounting of each user) or the path of a file of finished
    /// jobs (a JSON array of job records, or an SWF trace by its `.swf` name).
    pub source: String,
    /// How far back `sacct` looks (its `-S`).
    pub since: String,
    /// The stage-in rate the estimate assumes, bytes per second (`500MiB`: per second).
    pub stage_in_rate: String,
    /// Most seconds a job's stage-in waits for its time (Slurm's StageInTimeout must be
    /// longer than this plus the staging itself).
    pub max_wait_s: u64,
    /// Seconds between re-checks of the prediction while waiting; the queue (`squeue`,
    /// `sinfo`) is read at most once per `recheck_s` for all waiting stage-ins.
    pub recheck_s: u64,
    /// Seconds the waiting stage-ins keep each user's predictions (shared in
    /// `<state_dir>/walltime/`): a user's `sacct` is read, and its model fitted, about once
    /// per snapshot however many stage-ins wait and however often they re-check.
    pub snapshot_s: u64,
    /// The most recent finished jobs of a user that its model learns from and replays (the
    /// cost of a model grows with the square of its history; a user with a long history
    /// makes no prediction dearer than this). 0: no predictions (every job stages at once).
    pub max_history: usize,
    /// The most seconds other users' pending jobs ahead may delay a job's predicted start
    /// (its stage-in) beyond what the running jobs and its user's own jobs ahead make it.
    pub max_delay_by_others_s: u64,
    /// Finished jobs the regression needs before it predicts.
    pub min_train: usize,
    /// Start `eddy writeback --end PREDICTED_END` beside a job with linked prefixes at
    /// pre_run, so that at its predicted end little of its data is left to stage out
    /// (decision 0041).
    pub early_writeback: bool,
    /// Seconds before the predicted end by which the early write-back aims to be done (its
    /// `--margin`).
    pub writeback_margin_s: u64,
}

impl Default for WalltimeSite {
    fn default() -> WalltimeSite {
        WalltimeSite {
            predictor: None,
            correction: eddy_walltime::Correction::None,
            source: "sacct".into(),
            since: "now-90days".into(),
            stage_in_rate: "500MiB".into(),
            max_wait_s: 3600,
            recheck_s: 5,
            snapshot_s: 60,
            max_history: 500,
            max_delay_by_others_s: 900,
            min_train: eddy_walltime::Params::default().min_train,
            early_writeback: true,
            writeback_margin_s: 30,
        }
    }
}

/// Largest capacity a job may ask for unless the site says otherwise.
pub const DEFAULT_MAX_CAPACITY: &str = "1TiB";

/// The node-local pool's size when nothing measures it: no limit in practice.
const UNLIMITED: u64 = 1 << 50;

/// Available bytes, summed over `nodes`, of the storage holding the fixed part of a root
/// template (the directories before the first placeholder).
fn available(db: &Path, nodes: &[String], template: &str) -> Result<u64> {
    if nodes.is_empty() {
        return Ok(0);
    }
    let caps = eddy_sysmap::capacity(db, nodes, Path::new(fixed_prefix(template)))?;
    Ok(caps.iter().map(|c| c.available_bytes).sum())
}

/// The directories of a root template before its first placeholder.
pub(crate) fn fixed_prefix(template: &str) -> &str {
    match template.find('{') {
        Some(i) => &template[..template[..i].rfind('/').unwrap_or(0).max(1)],
        None => template,
    }
}

impl Default for Site {
    fn default() -> Site {
        Site {
            directive: "EDDY".into(),
            state_dir: PathBuf::from("/var/lib/eddy/jobs"),
            mount: "/eddy/{job}".into(),
            node_root: "/var/lib/eddy/nodes/job-{job}".into(),
            launcher: "ssh {host} {cmd}".into(),
            eddy: None,
            default_mode: Mode::NodeLocal,
            default_capacity: "10GiB".into(),
            max_capacity: Some(DEFAULT_MAX_CAPACITY.into()),
            backend_roots: Vec::new(),
            inventory: None,
            config: None,
            node_command_timeout_s: 60,
            node_local_capacity: None,
            pool: None,
            history_db: None,
            history: HistorySite::default(),
            alloc: eddy_alloc::Policy::default(),
            walltime: None,
        }
    }
}

impl Site {
    /// Reads `path`; a missing default file means the defaults.
    pub fn load(path: Option<&Path>) -> Result<Site> {
        let (path, explicit) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from(DEFAULT_SITE), false),
        };
        // privileged-path: the site settings, root's (/etc/eddy/bb.toml or --site, taken before the phase only)
        let site: Site = match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text)
                .with_context(|| format!("site settings {} are not valid", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => Site::default(),
            Err(e) => {
                return Err(e).with_context(|| format!("cannot read {}", path.display()));
            }
        };
        site.validate()
            .with_context(|| format!("site settings {}", path.display()))?;
        Ok(site)
    }

    fn validate(&self) -> Result<()> {
        parse_bytes(&self.default_capacity)
            .map_err(|e| anyhow::anyhow!("default_capacity: {e}"))?;
        self.max_capacity()?;
        if !self.launcher.split_whitespace().any(|w| w == "{cmd}") {
            bail!("launcher {:?} has no {{cmd}} word", self.launcher);
        }
        if let Some(db) = &self.history_db {
            eddy_config::check_history_db(db).map_err(|e| anyhow::anyhow!("{e}"))?;
            no_password("history_db", db)?;
        }
        self.history.validate()?;
        if let Some(c) = &self.node_local_capacity {
            parse_bytes(c).map_err(|e| anyhow::anyhow!("node_local_capacity: {e}"))?;
        }
        self.alloc
            .check()
            .map_err(|e| anyhow::anyhow!("[alloc] {e}"))?;
        if let Some(w) = &self.walltime {
            let rate = parse_bytes(&w.stage_in_rate)
                .map_err(|e| anyhow::anyhow!("[walltime] stage_in_rate: {e}"))?;
            if rate == 0 {
                bail!("[walltime] stage_in_rate must be above 0");
            }
            if w.source != "sacct" && !Path::new(&w.source).is_absolute() {
                bail!(
                    "[walltime] source {:?} is neither `sacct` nor an absolute path",
                    w.source
                );
            }
        }
        if let Some(pool) = &self.pool {
            pool.validate(self.inventory.is_some())?;
        }
        Ok(())
    }

    /// The mode a job asks for: by its pool (`node-local` or the site's I/O pool), by
    /// `mode=`, else the site's default; a pool and a mode that disagree are refused.
    fn mode(&self, req: &JobRequest) -> Result<Mode> {
        let by_pool = match req.pool.as_deref() {
            None => None,
            Some(NODE_LOCAL_POOL) => Some(Mode::NodeLocal),
            Some(p) if self.pool.as_ref().is_some_and(|pool| pool.name == p) => Some(Mode::Pool),
            Some(p) => bail!(
                "pool={p} is not a pool of this site ({})",
                self.pool_names().join(", ")
            ),
        };
        match (by_pool, req.mode) {
            (Some(a), Some(b)) if a != b => bail!(
                "pool={} is a {} pool but mode={} is asked",
                req.pool.as_deref().unwrap_or_default(),
                a.as_str(),
                b.as_str()
            ),
            (Some(m), _) | (None, Some(m)) => Ok(m),
            (None, None) => Ok(self.default_mode),
        }
    }

    /// The history database jobs' profiles go to: `history_db`, else the `config` file's.
    pub fn history_db(&self) -> Result<Option<String>> {
        if let Some(db) = &self.history_db {
            return Ok(Some(db.clone()));
        }
        match &self.config {
            Some(path) => Ok(eddy_config::Config::load(path)
                .with_context(|| format!("the site's config {}", path.display()))?
                .history_db),
            None => Ok(None),
        }
    }

    /// Where the teardown stores a job's profile: `history_db()`, else the SQLite file
    /// `history.db` in the (root-owned) `state_dir`, beside the jobs' directories.
    pub fn profile_db(&self) -> Result<String> {
        Ok(match self.history_db()? {
            Some(db) => db,
            None => self.default_history_db().display().to_string(),
        })
    }

    /// How root opens `profile_db()` to read (the allocation): the password of
    /// `[history] password_file` and the bounds.
    pub fn history_access(&self) -> Result<eddy_history::Access> {
        self.history.access(self.history.password_file.as_deref())
    }

    /// Where and how the teardown stores a job's profile: `[history] writer` (an insert-only
    /// role, with its password file), else `profile_db()`; `slurm_nodes` are the job's nodes
    /// as Slurm gave them (root's record), N_A's bound.
    pub fn profile_target(
        &self,
        slurm_nodes: Option<Vec<String>>,
    ) -> Result<eddy_deploy::profile::SiteHistory> {
        let (spec, file, insert_only_role) = match &self.history.writer {
            Some(w) => (
                w.clone(),
                self.history.writer_password_file.as_deref(),
                true,
            ),
            None => (
                self.profile_db()?,
                self.history.password_file.as_deref(),
                false,
            ),
        };
        Ok(eddy_deploy::profile::SiteHistory {
            spec,
            access: self.history.access(file)?,
            insert_only_role,
            slurm_nodes,
        })
    }

    /// The site's default history: `STATE_DIR/history.db`.
    pub fn default_history_db(&self) -> PathBuf {
        self.state_dir.join("history.db")
    }

    /// The pools Slurm knows: node-local, and the I/O-node pool if the site has one.
    pub fn pool_names(&self) -> Vec<String> {
        let mut names = vec![NODE_LOCAL_POOL.to_string()];
        names.extend(self.pool.as_ref().map(|p| p.name.clone()));
        names
    }

    pub fn max_capacity(&self) -> Result<Option<u64>> {
        self.max_capacity
            .as_deref()
            .map(|c| parse_bytes(c).map_err(|e| anyhow::anyhow!("max_capacity: {e}")))
            .transpose()
    }

    /// The job's directives resolved against the site's defaults and limits: the mode, the
    /// capacity, and every refusal a user can act on, in words.
    pub fn resolve(&self, req: &JobRequest) -> Result<Resolved> {
        let mode = self.mode(req)?;
        let pool_nodes = match (mode, &self.pool) {
            (Mode::Pool, None) => {
                bail!("mode=pool: this site has no I/O-node pool; use mode=node-local")
            }
            (Mode::Pool, Some(pool)) => {
                let size = u32::try_from(pool.nodes.len()).unwrap_or(u32::MAX);
                let most = pool.max_servers_per_job.map_or(size, |m| m.min(size));
                let n = req.nodes.unwrap_or(most);
                if n > size {
                    bail!("nodes={n}: the pool has {} I/O nodes", pool.nodes.len());
                }
                if n > most {
                    bail!("nodes={n}: this site allows a job at most {most} I/O nodes");
                }
                n
            }
            (Mode::NodeLocal, _) => {
                if req.nodes.is_some() {
                    bail!("nodes= applies to mode=pool; node-local runs one daemon per job node");
                }
                0
            }
        };
        let capacity = match (req.capacity, mode) {
            (Some(c), _) => c,
            // The I/O nodes are shared: Slurm must charge what a job takes of them.
            (None, Mode::Pool) => bail!(
                "mode=pool needs the capacity on a line with the pool, e.g. `#{} capacity=100G \
                 pool={}`: Slurm charges the pool with it",
                self.directive,
                self.pool.as_ref().map_or("POOL", |p| p.name.as_str())
            ),
            (None, Mode::NodeLocal) => {
                parse_bytes(&self.default_capacity).map_err(|e| anyhow::anyhow!(e))?
            }
        };
        if let (Mode::Pool, Some(pool)) = (mode, &self.pool) {
            let min = pool.min_capacity()?;
            if capacity < min {
                bail!(
                    "capacity {} is less than the {} pool's least per job ({}): ask for at \
                     least that much",
                    eddy_deploy::human_bytes(capacity),
                    pool.name,
                    eddy_deploy::human_bytes(min)
                );
            }
        }
        if let Some(max) = self.max_capacity()? {
            if capacity > max {
                bail!(
                    "capacity {} is more than this site allows a job ({})",
                    eddy_deploy::human_bytes(capacity),
                    eddy_deploy::human_bytes(max)
                );
            }
        }
        for link in &req.links {
            if !self.backend_roots.is_empty()
                && !self
                    .backend_roots
                    .iter()
                    .any(|r| link.backend.starts_with(r))
            {
                bail!(
                    "link {}={}: backend directories must lie under {}",
                    link.prefix,
                    link.backend.display(),
                    self.backend_roots
                        .iter()
                        .map(|r| r.display().to_string())
                        .collect::<Vec<_>>()
                        .join(" or ")
                );
            }
        }
        Ok(Resolved {
            mode,
            capacity,
            pool_nodes,
        })
    }

    /// Bytes of the node-local pool (see `node_local_capacity`).
    pub fn node_local_bytes(&self) -> Result<u64> {
        if let Some(c) = &self.node_local_capacity {
            return parse_bytes(c).map_err(|e| anyhow::anyhow!(e));
        }
        let Some(db) = &self.inventory else {
            return Ok(UNLIMITED);
        };
        let pool_nodes = self
            .pool
            .as_ref()
            .map(|p| p.node_names())
            .unwrap_or_default();
        let nodes: Vec<String> = eddy_sysmap::load(db, &[])?
            .into_iter()
            .map(|r| r.node)
            .filter(|n| !pool_nodes.contains(n))
            .collect();
        available(db, &nodes, &self.node_root)
    }

    /// Bytes of the I/O-node pool: its `capacity`, else what the inventory measured.
    pub fn pool_bytes(&self, pool: &Pool) -> Result<u64> {
        match (&pool.capacity, &self.inventory) {
            (Some(c), _) => parse_bytes(c).map_err(|e| anyhow::anyhow!(e)),
            (None, Some(db)) => available(db, &pool.node_names(), &pool.root),
            (None, None) => bail!("[pool] has no capacity and the site no inventory"),
        }
    }

    /// Available bytes under `node_root` on each of `nodes` the inventory knows (others are
    /// left out); empty without an inventory.
    pub fn node_space(&self, nodes: &[String]) -> Result<Vec<(String, u64)>> {
        let Some(db) = &self.inventory else {
            return Ok(Vec::new());
        };
        let known: Vec<String> = eddy_sysmap::load(db, &[])?
            .into_iter()
            .map(|r| r.node)
            .filter(|n| nodes.contains(n))
            .collect();
        if known.is_empty() {
            return Ok(Vec::new());
        }
        let caps = eddy_sysmap::capacity(db, &known, Path::new(fixed_prefix(&self.node_root)))?;
        Ok(caps
            .into_iter()
            .map(|c| (c.node, c.available_bytes))
            .collect())
    }

    /// B_f of each of the pool's nodes, in the pool's order: what the inventory measured of
    /// the storage holding the pool's `root` on that node (its write rate, else its read
    /// rate), else the pool's `peak_bandwidth`.
    pub fn pool_peaks(&self, pool: &Pool) -> Result<Vec<f64>> {
        let default = pool.peak_bandwidth()?;
        let names = pool.node_names();
        let measured: Vec<eddy_sysmap::NodeRecord> = match &self.inventory {
            // Every node it has (a pool node it lacks keeps the default).
            Some(db) => eddy_sysmap::load(db, &[])?,
            None => Vec::new(),
        };
        let prefix = fixed_prefix(&pool.root);
        Ok(names
            .iter()
            .map(|n| {
                measured
                    .iter()
                    .filter(|r| &r.node == n)
                    .flat_map(|r| &r.storage)
                    .filter(|st| st.path == prefix)
                    .find_map(|st| st.write_mib_s.or(st.read_mib_s))
                    .filter(|mib| mib.is_finite() && *mib > 0.0)
                    .map_or(default, |mib| mib * f64::from(1u32 << 20))
            })
            .collect())
    }

    /// The state directory of job `job`.
    pub fn job_dir(&self, job: u32) -> PathBuf {
        self.state_dir.join(job.to_string())
    }

    pub fn mount_point(&self, job: u32) -> PathBuf {
        PathBuf::from(self.mount.replace("{job}", &job.to_string()))
    }

    pub fn eddy_program(&self) -> Result<PathBuf> {
        match &self.eddy {
            Some(p) => Ok(p.clone()),
            None => std::env::current_exe().context("cannot find the path of this program"),
        }
    }
}

/// A job's directives with the site's defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub mode: Mode,
    pub capacity: u64,
    /// Pool mode: how many I/O nodes the job gets.
    pub pool_nodes: u32,
}

#[cfg(test)]
mod tests;
