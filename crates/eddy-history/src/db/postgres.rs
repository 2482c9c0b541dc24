//! The PostgreSQL backend of the history: one database that the login nodes of a site share
//! (several `eddy` processes writing at once). No TLS: a site reaches its server over a unix
//! socket (`?host=/run/postgresql`) or a trusted network, as libpq's `sslmode=disable`.

use super::{now, too_new, HistoryError, Result, Val, MIGRATIONS, MIGRATIONS_TABLE};
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

/// Connects to `url` and migrates the database to `target`; also returns its display name.
pub(super) fn open(url: &str, target: u32) -> Result<(Client, String)> {
    let config: Config = url.parse().map_err(|source| HistoryError::Postgres {
        what: "the history database URL is not valid (postgres://user:password@host:port/dbname, \
               or ?host=/socket/dir)"
            .into(),
        source,
    })?;
    let name = display(&config);
    let mut client = config.connect(NoTls).map_err(err(format!(
        "cannot connect to the history database {name}"
    )))?;
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
