//! The SQLite backend of the history: a file, made 0600 (its directory 0700 when this makes
//! it), shared by processes of one host through SQLite's own locking (a busy writer is waited
//! for, up to `BUSY_TIMEOUT`).

use super::{now, too_new, Access, HistoryError, Result, Val, MIGRATIONS, MIGRATIONS_TABLE};
use rusqlite::types::{ToSqlOutput, Value};
use rusqlite::{params, params_from_iter, Connection, TransactionBehavior};
use std::fs::{DirBuilder, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

/// How long a statement waits for another process's write lock on the file, unless the
/// caller's `Access::lock_timeout` says.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// SQLite's numbered placeholder.
pub(super) fn ph(i: usize) -> String {
    format!("?{i}")
}

fn err(what: impl Into<String>) -> impl FnOnce(rusqlite::Error) -> HistoryError {
    let what = what.into();
    move |source| HistoryError::Sqlite { what, source }
}

impl rusqlite::ToSql for Val {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Val::Text(Some(s)) => ToSqlOutput::from(s.as_str()),
            Val::Text(None) => ToSqlOutput::Owned(Value::Null),
            Val::Real(f) => ToSqlOutput::Owned(Value::Real(*f)),
            Val::Int(i) => ToSqlOutput::Owned(Value::Integer(*i)),
        })
    }
}

/// Opens (making it 0600 if missing) the file and migrates it to `target`.
pub(super) fn open(path: &Path, target: u32, access: &Access) -> Result<Connection> {
    let name = path.display();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // privileged-path: the history database root's settings name (site's history_db, root's config), never a job's file
        if !dir.exists() {
            // privileged-path: the history database root's settings name (site's history_db, root's config), never a job's file
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| HistoryError::Io {
                    what: format!("cannot make the directory {}", dir.display()),
                    source,
                })?;
        }
    }
    // Made here rather than by SQLite so that it is never readable by others (SQLite gives
    // its journal the database file's mode).
    // privileged-path: create_new (O_EXCL: a planted link fails) of the database root's settings name
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(HistoryError::Io {
                what: format!("cannot create the history database {name}"),
                source,
            })
        }
    }
    let mut conn =
        Connection::open(path).map_err(err(format!("cannot open the history database {name}")))?;
    conn.busy_timeout(access.lock_timeout.unwrap_or(BUSY_TIMEOUT))
        .map_err(err(format!("cannot set up {name}")))?;
    migrate(&mut conn, target).map_err(|e| match e {
        HistoryError::Sqlite { what, source } => HistoryError::Sqlite {
            what: format!("{name}: {what}"),
            source,
        },
        other => other,
    })?;
    Ok(conn)
}

/// Applies the migrations above the recorded version, up to `target`, in one transaction
/// that holds the file's write lock (so that two processes opening it at once migrate once).
fn migrate(conn: &mut Connection, target: u32) -> Result<()> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err("cannot lock the database to migrate it"))?;
    tx.execute_batch(MIGRATIONS_TABLE)
        .map_err(err("cannot make the migrations table"))?;
    let current = current_version(&tx)?;
    if current > super::latest_version() {
        return Err(too_new(current));
    }
    for m in MIGRATIONS
        .iter()
        .filter(|m| m.version > current && m.version <= target)
    {
        tx.execute_batch(m.sql)
            .map_err(err(format!("migration {:04}_{} failed", m.version, m.name)))?;
        tx.execute(
            "INSERT INTO eddy_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
            params![m.version, m.name, now()],
        )
        .map_err(err("cannot record a migration"))?;
    }
    tx.commit().map_err(err("cannot commit the migrations"))
}

fn current_version(conn: &Connection) -> Result<u32> {
    conn.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM eddy_migrations",
        [],
        |r| r.get(0),
    )
    .map_err(err("cannot read the schema version"))
}

pub(super) fn version(conn: &mut Connection) -> Result<u32> {
    current_version(conn)
}

pub(super) fn applied(conn: &mut Connection) -> Result<Vec<(u32, f64)>> {
    let mut stmt = conn
        .prepare("SELECT version, applied_at FROM eddy_migrations ORDER BY version")
        .map_err(err("cannot read the migrations"))?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(err("cannot read the migrations"))?;
    rows.collect::<rusqlite::Result<Vec<_>>>()
        .map_err(err("cannot read the migrations"))
}

pub(super) fn put(conn: &mut Connection, key: &str, cols: &[&str], vals: &[Val]) -> Result<()> {
    conn.execute(&super::upsert_sql(cols, ph), params_from_iter(vals.iter()))
        .map_err(err(format!("cannot store the profile {key}")))?;
    Ok(())
}

/// Inserts a row unless its key is there; the rows inserted (0 or 1).
pub(super) fn insert(conn: &mut Connection, key: &str, cols: &[&str], vals: &[Val]) -> Result<u64> {
    let n = conn
        .execute(&super::insert_sql(cols, ph), params_from_iter(vals.iter()))
        .map_err(err(format!("cannot store the profile {key}")))?;
    Ok(n as u64)
}

/// Runs a `SELECT key, profile` query.
pub(super) fn select(
    conn: &mut Connection,
    sql: &str,
    vals: &[Val],
) -> Result<Vec<(String, String)>> {
    let mut stmt = conn
        .prepare(sql)
        .map_err(err("cannot query the profiles"))?;
    let rows = stmt
        .query_map(params_from_iter(vals.iter()), |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .map_err(err("cannot query the profiles"))?;
    rows.collect::<rusqlite::Result<Vec<_>>>()
        .map_err(err("cannot read the profiles"))
}
