//! The PostgreSQL backend of the history: one database that the login nodes of a site share
//! (several `eddy` processes writing at once). No TLS: a site reaches its server over a unix
//! socket (`?host=/run/postgresql`) or a trusted network, as libpq's `sslmode=disable`.

use super::{now, too_new, Access, HistoryError, Result, Val, MIGRATIONS, MIGRATIONS_TABLE};
use ::postgres::types::ToSql;
use ::postgres::{Client, Config, NoTls};

/// The advisory lock that serializes migrations across processes ("eddyhist" in ASCII).
const MIGRATION_LOCK: i64 = 0x6564_6479_6869_7374;

/// PostgreSQL's numbered placeholder.
pub(super) fn ph(i: usize) -> String {
    format!("${i}")
}

fn err(what: impl Into<String>) -> impl FnOnce(::postgres::Error) -> HistoryError {
    let what = what.into();
    move |source| HistoryError::Postgres { what, source }
}

fn param(v: &Val) -> &(dyn ToSql + Sync) {
    match v {
        Val::Text(s) => s,
        Val::Real(f) => f,
        Val::Int(i) => i,
    }
}

fn params(vals: &[Val]) -> Vec<&(dyn ToSql + Sync)> {
    vals.iter().map(param).collect()
}

/// The URL as messages show it: user, hosts, port, database, never the password.
fn display(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            ::postgres::config::Host::Tcp(name) => name.clone(),
            ::postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    format!(
        "postgresql://{}@{}:{}/{}",
        config.get_user().unwrap_or_default(),
        hosts.join(","),
        ports.join(","),
        config.get_dbname().unwrap_or_default()
    )
}

/// The URL as messages show it (`display`); None when it cannot be read.
pub(super) fn display_url(url: &str) -> Option<String> {
    url.parse::<Config>().ok().map(|c| display(&c))
}

/// Whether `url` carries a password (one that cannot be read: yes, to be safe).
pub(super) fn has_password(url: &str) -> bool {
    url.parse::<Config>()
        .map_or(true, |c| c.get_password().is_some())
}

/// `-c name=ms` server options for the bounds of `access` (milliseconds, at least 1: 0 would
/// mean no bound to PostgreSQL).
fn bound_options(access: &Access) -> Vec<String> {
    let ms = |d: std::time::Duration| d.as_millis().clamp(1, i32::MAX as u128);
    [
        ("lock_timeout", access.lock_timeout),
        ("statement_timeout", access.statement_timeout),
    ]
    .into_iter()
    .filter_map(|(name, d)| d.map(|d| format!("-c {name}={}", ms(d))))
    .collect()
}

/// Connects to `url` (with the password and bounds of `access`) and, when `migrate`, migrates
/// the database to `target`; also returns its display name.
pub(super) fn open(
    url: &str,
    target: u32,
    access: &Access,
    migrate_it: bool,
) -> Result<(Client, String)> {
    let mut config: Config = url.parse().map_err(|source| HistoryError::Postgres {
        what: "the history database URL is not valid (postgres://user:password@host:port/dbname, \
               or ?host=/socket/dir)"
            .into(),
        source,
    })?;
    if let Some(pw) = &access.password {
        config.password(pw.as_bytes());
    }
    if let Some(t) = access.connect_timeout {
        config.connect_timeout(t);
    }
    let mut options: Vec<String> = config
        .get_options()
        .map(str::to_string)
        .into_iter()
        .collect();
    options.extend(bound_options(access));
    if !options.is_empty() {
        config.options(&options.join(" "));
    }
    let name = display(&config);
    let mut client = config.connect(NoTls).map_err(err(format!(
        "cannot connect to the history database {name}"
    )))?;
    if !migrate_it {
        return Ok((client, name));
    }
    migrate(&mut client, target).map_err(|e| match e {
        HistoryError::Postgres { what, source } => HistoryError::Postgres {
            what: format!("{name}: {what}"),
            source,
        },
        other => other,
    })?;
    Ok((client, name))
}

/// Applies the migrations above the recorded version, up to `target`, in one transaction
/// under an advisory lock, so that login nodes opening the database at once migrate it once.
fn migrate(client: &mut Client, target: u32) -> Result<()> {
    // A database at the schema already is not locked for: the lock is the one any role that
    // can connect may hold, and a reader must not wait on it for nothing.
    if let Ok(current) = current_version(client) {
        if current >= target && current <= super::latest_version() {
            return Ok(());
        }
    }
    let mut tx = client
        .transaction()
        .map_err(err("cannot begin the migrations"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .map_err(err("cannot take the migration lock"))?;
    tx.batch_execute(MIGRATIONS_TABLE)
        .map_err(err("cannot make the migrations table"))?;
    let current = current_version(&mut tx)?;
    if current > super::latest_version() {
        return Err(too_new(current));
    }
    for m in MIGRATIONS
        .iter()
        .filter(|m| m.version > current && m.version <= target)
    {
        tx.batch_execute(m.sql)
            .map_err(err(format!("migration {:04}_{} failed", m.version, m.name)))?;
        let version = i32::try_from(m.version).unwrap_or(i32::MAX);
        tx.execute(
            "INSERT INTO eddy_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
            &[&version, &m.name, &now()],
        )
        .map_err(err("cannot record a migration"))?;
    }
    tx.commit().map_err(err("cannot commit the migrations"))
}

fn current_version(client: &mut impl ::postgres::GenericClient) -> Result<u32> {
    let row = client
        .query_one("SELECT COALESCE(MAX(version), 0) FROM eddy_migrations", &[])
        .map_err(err("cannot read the schema version"))?;
    let v: i32 = row.get(0);
    Ok(u32::try_from(v).unwrap_or(0))
}

pub(super) fn version(client: &mut Client) -> Result<u32> {
    current_version(client)
}

pub(super) fn applied(client: &mut Client) -> Result<Vec<(u32, f64)>> {
    let rows = client
        .query(
            "SELECT version, applied_at FROM eddy_migrations ORDER BY version",
            &[],
        )
        .map_err(err("cannot read the migrations"))?;
    rows.iter()
        .map(|r| {
            let v: i32 = r.try_get(0).map_err(err("cannot read the migrations"))?;
            let at: f64 = r.try_get(1).map_err(err("cannot read the migrations"))?;
            Ok((u32::try_from(v).unwrap_or(0), at))
        })
        .collect()
}

pub(super) fn put(client: &mut Client, key: &str, cols: &[&str], vals: &[Val]) -> Result<()> {
    client
        .execute(&super::upsert_sql(cols, ph), &params(vals))
        .map_err(err(format!("cannot store the profile {key}")))?;
    Ok(())
}

/// Inserts a row unless its key is there; the rows inserted (0 or 1).
pub(super) fn insert(client: &mut Client, key: &str, cols: &[&str], vals: &[Val]) -> Result<u64> {
    client
        .execute(&super::insert_sql(cols, ph), &params(vals))
        .map_err(err(format!("cannot store the profile {key}")))
}

/// Runs a `SELECT key, profile` query.
pub(super) fn select(
    client: &mut Client,
    sql: &str,
    vals: &[Val],
) -> Result<Vec<(String, String)>> {
    let rows = client
        .query(sql, &params(vals))
        .map_err(err("cannot query the profiles"))?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get(0).map_err(err("cannot read the profiles"))?,
                r.try_get(1).map_err(err("cannot read the profiles"))?,
            ))
        })
        .collect()
}
