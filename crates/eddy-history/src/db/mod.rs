//! The history database: job profiles in SQLite (a path) or PostgreSQL (a `postgres://` URL,
//! for a site whose login nodes share one history), with one schema and numbered migrations
//! for both (decision 0033).
//!
//! A row is a profile: the whole profile as JSON (`profile`, what a reader decodes) and
//! copies of the fields queries filter and sort by as indexed columns. Migrations are the SQL
//! files of `crates/eddy-history/migrations/`, compiled in, applied in order on open inside
//! one transaction and recorded in `eddy_migrations`; opening an up-to-date database changes
//! nothing, and a database newer than this program is refused rather than written.
//!
//! This module does no network or file I/O beyond the database's own, and never decides what
//! a profile says: it stores and finds what `JobProfile` holds.

mod postgres;
mod sqlite;
#[cfg(test)]
mod tests;

use crate::profile::{IoMode, JobProfile, Source};
use std::path::PathBuf;
use std::time::Duration;

/// One numbered migration: SQL that SQLite and PostgreSQL both accept.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: u32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, in order; a database is at the version of the last one it recorded.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "profiles",
        sql: include_str!("../../migrations/0001_profiles.sql"),
    },
    Migration {
        version: 2,
        name: "filter_indexes",
        sql: include_str!("../../migrations/0002_filter_indexes.sql"),
    },
    Migration {
        version: 3,
        name: "allocation",
        sql: include_str!("../../migrations/0003_allocation.sql"),
    },
];

/// The schema version this program writes.
pub fn latest_version() -> u32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// The table that records applied migrations (made before the first migration runs).
const MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS eddy_migrations (\
     version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)";

/// Errors of the history database, each with what was being done.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("{what}: {source}")]
    Sqlite {
        what: String,
        source: rusqlite::Error,
    },
    #[error("{what}: {source}")]
    Postgres {
        what: String,
        source: ::postgres::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("profile {key}: {source}")]
    Json {
        key: String,
        source: serde_json::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T> = std::result::Result<T, HistoryError>;

/// Where a history lives, as a site names it (`history_db`, `--db`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbSpec {
    /// An SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL connection URL (`postgres://` or `postgresql://`, with user, password,
    /// host, port, database name, and `?host=/dir` for a unix socket).
    Postgres(String),
}

impl DbSpec {
    /// A `postgres://`/`postgresql://` URL is PostgreSQL, anything else without a scheme a
    /// path to an SQLite file; another scheme is refused.
    pub fn parse(spec: &str) -> Result<DbSpec> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(HistoryError::Invalid(
                "the history database is empty: name an SQLite file or a postgres:// URL".into(),
            ));
        }
        if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
            return Ok(DbSpec::Postgres(spec.to_string()));
        }
        if let Some((scheme, _)) = spec.split_once("://") {
            return Err(HistoryError::Invalid(format!(
                "history database {scheme}:// is not known: name an SQLite file (a path) or a \
                 PostgreSQL URL (postgres://user:password@host:port/dbname)"
            )));
        }
        Ok(DbSpec::Sqlite(PathBuf::from(spec)))
    }
}

/// How a connection to the history is made beyond its URL: the password (a site keeps it in
/// a root-only file, never in the URL of a settings file others read) and the bounds that
/// keep one held lock or a server that does not answer from stalling the caller (the burst
/// buffer's setup holds the site's allocation lock meanwhile). `None`: no bound of that
/// kind (the interactive commands).
#[derive(Clone, Default)]
pub struct Access {
    /// The role's password; overrides one in the URL.
    pub password: Option<String>,
    /// Bound on reaching the server (each address tried).
    pub connect_timeout: Option<Duration>,
    /// Bound on waiting for any lock (the migrations' advisory lock, rows, tables): past it
    /// the statement fails (PostgreSQL's `lock_timeout`; SQLite's busy timeout).
    pub lock_timeout: Option<Duration>,
    /// Bound on one statement (PostgreSQL's `statement_timeout`).
    pub statement_timeout: Option<Duration>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("password", &self.password.as_ref().map(|_| "(hidden)"))
            .field("connect_timeout", &self.connect_timeout)
            .field("lock_timeout", &self.lock_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .finish()
    }
}

impl PartialEq for Access {
    fn eq(&self, o: &Access) -> bool {
        (
            &self.password,
            self.connect_timeout,
            self.lock_timeout,
            self.statement_timeout,
        ) == (
            &o.password,
            o.connect_timeout,
            o.lock_timeout,
            o.statement_timeout,
        )
    }
}

impl Eq for Access {}

/// A history as messages may show it: an SQLite path as it is, a PostgreSQL URL without its
/// password (nor any other parameter); a URL that cannot be read is not shown at all.
pub fn redacted(spec: &str) -> String {
    match DbSpec::parse(spec) {
        Ok(DbSpec::Sqlite(p)) => p.display().to_string(),
        Ok(DbSpec::Postgres(url)) => postgres::display_url(&url)
            .unwrap_or_else(|| "a PostgreSQL URL (not shown: it cannot be read)".into()),
        Err(_) => "a history database setting (not shown: it cannot be read)".into(),
    }
}

/// Whether `spec` is a PostgreSQL URL that carries a password (in its user part or as a
/// `password=` parameter); a URL that cannot be read counts as one.
pub fn has_password(spec: &str) -> bool {
    match DbSpec::parse(spec) {
        Ok(DbSpec::Postgres(url)) => postgres::has_password(&url),
        _ => false,
    }
}

/// The per-user default history (an SQLite file), used when neither `--db` nor a
/// configuration names one: `$XDG_DATA_HOME/eddy/history.db` (an absolute
/// `XDG_DATA_HOME`), else `$HOME/.local/share/eddy/history.db`; `None` without either.
pub fn user_default_db() -> Option<PathBuf> {
    user_default_db_from(
        std::env::var_os("XDG_DATA_HOME").map(PathBuf::from),
        std::env::var_os("HOME").map(PathBuf::from),
    )
}

fn user_default_db_from(xdg_data_home: Option<PathBuf>, home: Option<PathBuf>) -> Option<PathBuf> {
    let data = xdg_data_home.filter(|d| d.is_absolute()).or_else(|| {
        home.filter(|h| h.is_absolute())
            .map(|h| h.join(".local").join("share"))
    })?;
    Some(data.join("eddy").join("history.db"))
}

/// How `insert_new` went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// The profile is stored.
    Stored,
    /// A profile with its key is there already: it stays as it was.
    KeyTaken,
}

/// Which profiles `list` returns; every set field must match. Newest (by start) first.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub user: Option<String>,
    pub job_name: Option<String>,
    /// The Slurm job id.
    pub job_id: Option<String>,
    /// One application: the job name and the script hash (none: profiles without one).
    pub app: Option<App>,
    /// Started at or after / at or before, unix seconds.
    pub since: Option<f64>,
    pub until: Option<f64>,
    /// At most this many (the newest).
    pub limit: Option<u64>,
}

/// "The same application" across runs: the Slurm job name and the hash of the job script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    pub job_name: String,
    pub script_hash: Option<String>,
}

/// A value bound to a query, in the types the columns have in both databases.
#[derive(Debug, Clone)]
enum Val {
    Text(Option<String>),
    Real(f64),
    Int(i64),
}

/// The columns written by `put`, in the order of `upsert_sql`'s placeholders.
const COLUMNS: [&str; 12] = [
    "key",
    "job_id",
    "job_name",
    "user_name",
    "script_hash",
    "start_time",
    "end_time",
    "source",
    "io_mode",
    "volume",
    "profile",
    "alloc_rule",
];

/// The columns a database at schema `version` has (`alloc_rule` came with migration 3): a
/// database migrated to an older version only (the migrations' tests) is written without it.
fn columns_at(version: u32) -> &'static [&'static str] {
    if version >= 3 {
        &COLUMNS
    } else {
        &COLUMNS[..11]
    }
}

/// `INSERT ... ON CONFLICT (key) DO UPDATE` of `cols`, which SQLite (3.24+) and PostgreSQL
/// share; `ph(i)` writes the i-th (1-based) placeholder in the backend's syntax.
fn upsert_sql(cols: &[&str], ph: fn(usize) -> String) -> String {
    let names = cols.join(", ");
    let phs: Vec<String> = (1..=cols.len()).map(ph).collect();
    let sets: Vec<String> = cols[1..]
        .iter()
        .map(|c| format!("{c} = excluded.{c}"))
        .collect();
    format!(
        "INSERT INTO profiles ({names}) VALUES ({}) ON CONFLICT (key) DO UPDATE SET {}",
        phs.join(", "),
        sets.join(", ")
    )
}

/// A profile's row: its indexed columns and its JSON.
fn row_of(p: &JobProfile) -> Result<Vec<Val>> {
    let json_err = |source| HistoryError::Json {
        key: p.key.clone(),
        source,
    };
    let json = serde_json::to_string(p).map_err(json_err)?;
    // serde_json writes a non-finite number as null, which no reader could decode: refuse it
    // now rather than store a row that cannot be read back.
    serde_json::from_str::<JobProfile>(&json).map_err(json_err)?;
    Ok(vec![
        Val::Text(Some(p.key.clone())),
        Val::Text(p.job_id.clone()),
        Val::Text(p.job_name.clone()),
        Val::Text(Some(p.user.clone())),
        Val::Text(p.script_hash.clone()),
        Val::Real(p.start),
        Val::Real(p.end),
        Val::Text(Some(source_name(p.source).to_string())),
        Val::Text(Some(mode_name(p.io_mode).to_string())),
        Val::Int(i64::try_from(p.volume()).unwrap_or(i64::MAX)),
        Val::Text(Some(json)),
        Val::Text(p.allocation.as_ref().map(|a| a.rule.clone())),
    ])
}

fn source_name(s: Source) -> &'static str {
    match s {
        Source::Eddy => "eddy",
        Source::Darshan => "darshan",
    }
}

/// The I/O mode as the profile's JSON spells it.
pub fn mode_name(m: IoMode) -> &'static str {
    match m {
        IoMode::NN => "N-N",
        IoMode::N1 => "N-1",
        IoMode::OneOne => "1-1",
        IoMode::None => "none",
    }
}

/// `INSERT ... ON CONFLICT DO NOTHING` of `cols` (the key is the table's one unique index):
/// what needs the INSERT privilege only, an insert-only role's write, which never replaces a
/// row (naming the conflict target, `ON CONFLICT (key)`, would need SELECT on it too).
fn insert_sql(cols: &[&str], ph: fn(usize) -> String) -> String {
    let phs: Vec<String> = (1..=cols.len()).map(ph).collect();
    format!(
        "INSERT INTO profiles ({}) VALUES ({}) ON CONFLICT DO NOTHING",
        cols.join(", "),
        phs.join(", ")
    )
}

/// `SELECT profile ... WHERE ... ORDER BY start_time DESC` for a filter, with its values.
fn select_sql(filter: &Filter, ph: fn(usize) -> String) -> (String, Vec<Val>) {
    let mut conds: Vec<String> = Vec::new();
    let mut vals: Vec<Val> = Vec::new();
    let mut eq = |col: &str, v: Val, conds: &mut Vec<String>| {
        vals.push(v);
        conds.push(format!("{col} = {}", ph(vals.len())));
    };
    if let Some(u) = &filter.user {
        eq("user_name", Val::Text(Some(u.clone())), &mut conds);
    }
    if let Some(n) = &filter.job_name {
        eq("job_name", Val::Text(Some(n.clone())), &mut conds);
    }
    if let Some(j) = &filter.job_id {
        eq("job_id", Val::Text(Some(j.clone())), &mut conds);
    }
    if let Some(app) = &filter.app {
        eq(
            "job_name",
            Val::Text(Some(app.job_name.clone())),
            &mut conds,
        );
        match &app.script_hash {
            Some(h) => eq("script_hash", Val::Text(Some(h.clone())), &mut conds),
            None => conds.push("script_hash IS NULL".into()),
        }
    }
    let mut sql = "SELECT key, profile FROM profiles".to_string();
    let mut range = |op: &str, t: Option<f64>, conds: &mut Vec<String>| {
        if let Some(t) = t {
            vals.push(Val::Real(t));
            conds.push(format!("start_time {op} {}", ph(vals.len())));
        }
    };
    range(">=", filter.since, &mut conds);
    range("<=", filter.until, &mut conds);
    if !conds.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conds.join(" AND "));
    }
    sql.push_str(" ORDER BY start_time DESC, key DESC");
    if let Some(limit) = filter.limit {
        vals.push(Val::Int(i64::try_from(limit).unwrap_or(i64::MAX)));
        sql.push_str(&format!(" LIMIT {}", ph(vals.len())));
    }
    (sql, vals)
}

/// Decodes a stored profile.
fn decode(key: String, json: &str) -> Result<JobProfile> {
    serde_json::from_str(json).map_err(|source| HistoryError::Json { key, source })
}

/// Seconds since the epoch, for `applied_at`.
fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The refusal of a database whose schema is newer than this program's.
fn too_new(found: u32) -> HistoryError {
    HistoryError::Invalid(format!(
        "the history database is at schema version {found}, newer than this eddy's ({}): \
         use a newer eddy",
        latest_version()
    ))
}

enum Inner {
    Sqlite(rusqlite::Connection),
    Postgres(Box<::postgres::Client>),
}

/// An open history database, migrated to this program's schema.
pub struct HistoryDb {
    inner: Inner,
    /// What to call it in messages (a URL without its password).
    name: String,
    /// The schema version it was migrated to (the columns `put` writes).
    version: u32,
}

impl std::fmt::Debug for HistoryDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryDb")
            .field("name", &self.name)
            .finish()
    }
}

impl HistoryDb {
    /// Opens (creating it if needed) the history `spec` names: a path is an SQLite file
    /// (made 0600, its directory 0700 if this makes it), a `postgres://` URL a PostgreSQL
    /// database; either is migrated to the latest schema.
    pub fn open(spec: &str) -> Result<HistoryDb> {
        Self::open_with(spec, &Access::default())
    }

    /// `open` with a password and bounds (`Access`): a database already at this program's
    /// schema is read without the migrations' lock.
    pub fn open_with(spec: &str, access: &Access) -> Result<HistoryDb> {
        Self::open_at_with(spec, latest_version(), access, true)
    }

    /// Opens `spec` to insert profiles only (`insert_new`), never migrating it: a role that
    /// may only INSERT into `profiles` can (a PostgreSQL site's teardown role; see
    /// docs/guide/slurm-admin.md). The database must be at this program's schema already (the
    /// allocation's `open_with` migrates it).
    pub fn open_insert_only(spec: &str, access: &Access) -> Result<HistoryDb> {
        Self::open_at_with(spec, latest_version(), access, false)
    }

    /// Opens `spec` migrated to `version` only (the migrations' tests start from an old one).
    #[cfg(test)]
    pub(crate) fn open_at(spec: &str, version: u32) -> Result<HistoryDb> {
        Self::open_at_with(spec, version, &Access::default(), true)
    }

    fn open_at_with(spec: &str, version: u32, access: &Access, migrate: bool) -> Result<HistoryDb> {
        match DbSpec::parse(spec)? {
            DbSpec::Sqlite(path) => {
                let name = path.display().to_string();
                let conn = sqlite::open(&path, version, access)?;
                Ok(HistoryDb {
                    inner: Inner::Sqlite(conn),
                    name,
                    version,
                })
            }
            DbSpec::Postgres(url) => {
                let (client, name) = postgres::open(&url, version, access, migrate)?;
                Ok(HistoryDb {
                    inner: Inner::Postgres(Box::new(client)),
                    name,
                    version,
                })
            }
        }
    }

    /// The database as messages name it (a PostgreSQL URL without its password).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `sqlite` or `postgresql`.
    pub fn backend(&self) -> &'static str {
        match self.inner {
            Inner::Sqlite(_) => "sqlite",
            Inner::Postgres(_) => "postgresql",
        }
    }

    /// The schema version the database records.
    pub fn schema_version(&mut self) -> Result<u32> {
        match &mut self.inner {
            Inner::Sqlite(c) => sqlite::version(c),
            Inner::Postgres(c) => postgres::version(c),
        }
    }

    /// The recorded migrations: version and when each was applied (unix seconds).
    pub fn applied_migrations(&mut self) -> Result<Vec<(u32, f64)>> {
        match &mut self.inner {
            Inner::Sqlite(c) => sqlite::applied(c),
            Inner::Postgres(c) => postgres::applied(c),
        }
    }

    /// The names of the indexes on the profiles table (the migrations' tests check them).
    #[cfg(test)]
    pub(crate) fn index_names(&mut self) -> Result<Vec<String>> {
        let sql = match self.inner {
            Inner::Sqlite(_) => {
                "SELECT name, name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'profiles' \
                 ORDER BY name"
            }
            Inner::Postgres(_) => {
                "SELECT indexname::text, indexname::text FROM pg_indexes WHERE tablename = 'profiles' \
                 ORDER BY indexname"
            }
        };
        let rows = match &mut self.inner {
            Inner::Sqlite(c) => sqlite::select(c, sql, &[])?,
            Inner::Postgres(c) => postgres::select(c, sql, &[])?,
        };
        Ok(rows.into_iter().map(|(n, _)| n).collect())
    }

    /// Stores `profile`, replacing the one with the same key.
    pub fn put(&mut self, profile: &JobProfile) -> Result<()> {
        let cols = columns_at(self.version);
        let mut vals = row_of(profile)?;
        vals.truncate(cols.len());
        match &mut self.inner {
            Inner::Sqlite(c) => sqlite::put(c, &profile.key, cols, &vals),
            Inner::Postgres(c) => postgres::put(c, &profile.key, cols, &vals),
        }
    }

    /// Stores `profile` unless a profile with its key is there (which stays as it was): the
    /// INSERT privilege is all it needs.
    pub fn insert_new(&mut self, profile: &JobProfile) -> Result<Inserted> {
        let cols = columns_at(self.version);
        let mut vals = row_of(profile)?;
        vals.truncate(cols.len());
        let rows = match &mut self.inner {
            Inner::Sqlite(c) => sqlite::insert(c, &profile.key, cols, &vals)?,
            Inner::Postgres(c) => postgres::insert(c, &profile.key, cols, &vals)?,
        };
        Ok(if rows == 0 {
            Inserted::KeyTaken
        } else {
            Inserted::Stored
        })
    }

    /// The profile with this key.
    pub fn get(&mut self, key: &str) -> Result<Option<JobProfile>> {
        let filter = KeyFilter(key);
        let rows = match &mut self.inner {
            Inner::Sqlite(c) => sqlite::select(c, &filter.sql(sqlite::ph), &filter.vals())?,
            Inner::Postgres(c) => postgres::select(c, &filter.sql(postgres::ph), &filter.vals())?,
        };
        rows.into_iter()
            .next()
            .map(|(k, j)| decode(k, &j))
            .transpose()
    }

    /// The profiles `filter` selects, newest first.
    pub fn list(&mut self, filter: &Filter) -> Result<Vec<JobProfile>> {
        let rows = match &mut self.inner {
            Inner::Sqlite(c) => {
                let (sql, vals) = select_sql(filter, sqlite::ph);
                sqlite::select(c, &sql, &vals)?
            }
            Inner::Postgres(c) => {
                let (sql, vals) = select_sql(filter, postgres::ph);
                postgres::select(c, &sql, &vals)?
            }
        };
        rows.into_iter().map(|(k, j)| decode(k, &j)).collect()
    }

    /// The previous runs of one application (the same job name and script hash; a `None`
    /// hash matches profiles without one), of `user` only when given, newest first: the
    /// history DFRA decides from. The burst buffer always names the job's user: another
    /// user's runs of an identical script are theirs, not a history that steers this job.
    pub fn runs_of(
        &mut self,
        user: Option<&str>,
        job_name: &str,
        script_hash: Option<&str>,
    ) -> Result<Vec<JobProfile>> {
        self.list(&Filter {
            user: user.map(str::to_string),
            app: Some(App {
                job_name: job_name.to_string(),
                script_hash: script_hash.map(str::to_string),
            }),
            ..Filter::default()
        })
    }

    /// A job as a user names it: a profile key, else a Slurm job id (its newest run).
    pub fn find(&mut self, job: &str) -> Result<Option<JobProfile>> {
        if let Some(p) = self.get(job)? {
            return Ok(Some(p));
        }
        let by_id = self.list(&Filter {
            job_id: Some(job.to_string()),
            limit: Some(1),
            ..Filter::default()
        })?;
        Ok(by_id.into_iter().next())
    }
}

/// The select of one key.
struct KeyFilter<'a>(&'a str);

impl KeyFilter<'_> {
    fn sql(&self, ph: fn(usize) -> String) -> String {
        format!("SELECT key, profile FROM profiles WHERE key = {}", ph(1))
    }

    fn vals(&self) -> Vec<Val> {
        vec![Val::Text(Some(self.0.to_string()))]
    }
}
