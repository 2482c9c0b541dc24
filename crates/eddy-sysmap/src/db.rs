//! The inventory database: one SQLite file (often on a shared file system), written by every
//! node for itself, read by `eddy sysmap show` and [`capacity`].
//!
//! Schema, version 2 (`PRAGMA user_version` records it), built by the numbered migrations of
//! `crates/eddy-sysmap/migrations/` (`MIGRATIONS`), applied in order at a write, in its
//! transaction; sizes in bytes, rates in MiB/s, times in seconds since the Unix epoch:
//!
//! ```sql
//! nodes      (node TEXT PRIMARY KEY, collected_at INTEGER, cores INTEGER,
//!             mem_total_bytes INTEGER, mem_available_bytes INTEGER)
//! storage    (node, path, mount_point, fs_type, device, disk, class, capacity_bytes,
//!             free_bytes, available_bytes, write_mib_s REAL, read_mib_s REAL, error,
//!             PRIMARY KEY (node, path))
//! interfaces (node, name, mac, ipv4, ipv6, mtu, speed_mbps, up, operstate,
//!             PRIMARY KEY (node, name))     -- ipv4, ipv6: JSON arrays of "addr/prefix"
//! health     (host TEXT PRIMARY KEY, bandwidth REAL, measured_at INTEGER,
//!             anomalous INTEGER, peer_median REAL, error TEXT)   -- version 2, health.rs
//! ```
//!
//! Version 1 files get the `health` table (migration 2) at their next write; a file at the
//! current version is left as it is. A write replaces the node's rows in one
//! `BEGIN IMMEDIATE` transaction (the schema is created or migrated in the same one), so
//! concurrent writers queue on SQLite's
//! lock, each waiting up to [`BUSY_TIMEOUT`]. The rollback journal is kept: WAL needs shared
//! memory, which nodes on a shared file system do not have.

use super::{DeviceClass, Interface, NodeRecord, Storage};
use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection, OpenFlags, TransactionBehavior};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The schema version this code writes and reads: that of the last migration.
pub const SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].version;
/// How long a writer or reader waits for another node's transaction.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(120);

/// One numbered migration: its version (what `PRAGMA user_version` records once it is
/// applied) and its SQL (a file of `crates/eddy-sysmap/migrations/`, compiled in).
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i64,
    pub sql: &'static str,
}

/// Every migration, in order; an inventory is at the version of the last one applied.
/// Add one at the end (a new file, a new line, `SCHEMA_VERSION` follows); never edit one
/// that shipped: inventories made by it exist.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        sql: include_str!("../migrations/0001_inventory.sql"),
    },
    Migration {
        version: 2,
        sql: include_str!("../migrations/0002_health.sql"),
    },
];

/// What [`capacity`] reports for one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCapacity {
    pub node: String,
    /// The recorded storage path used.
    pub path: String,
    pub mount_point: Option<String>,
    pub capacity_bytes: u64,
    pub available_bytes: u64,
    /// When the node recorded it, seconds since the Unix epoch.
    pub collected_at: u64,
}

fn sql_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn from_sql(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Inserts or replaces `rec` (keyed by its node name) in the database at `db`, creating the
/// file and schema if needed; waits for concurrent writers.
pub fn upsert(db: &Path, rec: &NodeRecord) -> Result<()> {
    let ctx = || {
        format!(
            "cannot write node {} to the inventory {}",
            rec.node,
            db.display()
        )
    };
    let mut conn = open_write(db).with_context(ctx)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .with_context(ctx)?;
    migrate(&tx).with_context(ctx)?;
    tx.execute("DELETE FROM storage WHERE node = ?1", [&rec.node])
        .with_context(ctx)?;
    tx.execute("DELETE FROM interfaces WHERE node = ?1", [&rec.node])
        .with_context(ctx)?;
    tx.execute(
        "INSERT OR REPLACE INTO nodes VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            rec.node,
            sql_int(rec.collected_at),
            rec.cores,
            sql_int(rec.mem_total_bytes),
            sql_int(rec.mem_available_bytes)
        ],
    )
    .with_context(ctx)?;
    for s in &rec.storage {
        tx.execute(
            "INSERT OR REPLACE INTO storage VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                rec.node,
                s.path,
                s.mount_point,
                s.fs_type,
                s.device,
                s.disk,
                s.class.map(DeviceClass::as_str),
                s.capacity_bytes.map(sql_int),
                s.free_bytes.map(sql_int),
                s.available_bytes.map(sql_int),
                s.write_mib_s,
                s.read_mib_s,
                s.error
            ],
        )
        .with_context(ctx)?;
    }
    for i in &rec.interfaces {
        tx.execute(
            "INSERT OR REPLACE INTO interfaces VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                rec.node,
                i.name,
                i.mac,
                serde_json::to_string(&i.ipv4)?,
                serde_json::to_string(&i.ipv6)?,
                i.mtu,
                i.speed_mbps.map(sql_int),
                i.up,
                i.operstate
            ],
        )
        .with_context(ctx)?;
    }
    tx.commit().with_context(ctx)
}

/// Opens (creating, 0600) the inventory for writing.
fn open_write(db: &Path) -> Result<Connection> {
    use std::os::unix::fs::OpenOptionsExt;
    // privileged-path: the inventory database the site or the caller names
    if !db.exists() {
        // privileged-path: the inventory database the site or the caller names
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(db)
            .with_context(|| format!("cannot create {}", db.display()))?;
    }
    let conn = Connection::open(db)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    Ok(conn)
}

/// Brings the schema (inside the caller's write transaction) to [`SCHEMA_VERSION`]: applies
/// the migrations past the inventory's version, in order, each recording its version in
/// `PRAGMA user_version`. An inventory at the current version is not changed.
fn migrate(tx: &rusqlite::Transaction) -> Result<()> {
    migrate_to(tx, SCHEMA_VERSION)
}

/// Brings the schema to `target` (the tests start from an older version).
fn migrate_to(tx: &rusqlite::Transaction, target: i64) -> Result<()> {
    let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        bail!("schema version {version}, this eddy knows version {SCHEMA_VERSION}");
    }
    for m in MIGRATIONS
        .iter()
        .filter(|m| m.version > version && m.version <= target)
    {
        tx.execute_batch(m.sql)
            .with_context(|| format!("migration {} of the inventory failed", m.version))?;
        tx.pragma_update(None, "user_version", m.version)?;
    }
    Ok(())
}

/// Replaces the health rows of `rows`' hosts.
pub fn health_store(db: &Path, rows: &[crate::health::Health]) -> Result<()> {
    let ctx = || format!("cannot write health to the inventory {}", db.display());
    let mut conn = open_write(db).with_context(ctx)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .with_context(ctx)?;
    migrate(&tx).with_context(ctx)?;
    for h in rows {
        tx.execute(
            "INSERT OR REPLACE INTO health VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                h.host,
                h.bandwidth,
                sql_int(h.measured_at),
                h.anomalous,
                h.peer_median,
                h.error
            ],
        )
        .with_context(ctx)?;
    }
    tx.commit().with_context(ctx)
}

/// The latest health of `hosts` (all when empty), sorted by host; empty for a version 1
/// inventory (no probe yet).
pub fn health_latest(db: &Path, hosts: &[String]) -> Result<Vec<crate::health::Health>> {
    let conn = open_read(db)?;
    let ctx = || format!("cannot read health from the inventory {}", db.display());
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .with_context(ctx)?;
    if version < 2 {
        return Ok(Vec::new());
    }
    let mut q = conn
        .prepare("SELECT host, bandwidth, measured_at, anomalous, peer_median, error FROM health ORDER BY host")
        .with_context(ctx)?;
    let rows = q
        .query_map([], |r| {
            Ok(crate::health::Health {
                host: r.get(0)?,
                bandwidth: r.get(1)?,
                measured_at: from_sql(r.get(2)?),
                anomalous: r.get(3)?,
                peer_median: r.get(4)?,
                error: r.get(5)?,
            })
        })
        .with_context(ctx)?;
    let mut out = Vec::new();
    for r in rows {
        let h = r.with_context(ctx)?;
        if hosts.is_empty() || hosts.contains(&h.host) {
            out.push(h);
        }
    }
    Ok(out)
}

/// Opens an existing inventory for reading and checks its schema version.
fn open_read(db: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("cannot open the inventory {}", db.display()))?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .with_context(|| format!("cannot read the inventory {}", db.display()))?;
    if !(1..=SCHEMA_VERSION).contains(&version) {
        bail!(
            "{} is not an inventory this eddy reads (schema version {version}, expected {SCHEMA_VERSION})",
            db.display()
        );
    }
    Ok(conn)
}

/// Fails naming the nodes of `wanted` that are not in `have`.
fn check_missing(db: &Path, wanted: &[String], have: impl Fn(&str) -> bool) -> Result<()> {
    let missing: Vec<&str> = wanted
        .iter()
        .map(String::as_str)
        .filter(|n| !have(n))
        .collect();
    if !missing.is_empty() {
        bail!(
            "not in the inventory {}: {}",
            db.display(),
            missing.join(", ")
        );
    }
    Ok(())
}

/// The stored records of `nodes` (every node when empty), sorted by name; fails naming any
/// node that is not stored.
pub fn load(db: &Path, nodes: &[String]) -> Result<Vec<NodeRecord>> {
    let conn = open_read(db)?;
    let ctx = || format!("cannot read the inventory {}", db.display());
    let mut recs: BTreeMap<String, NodeRecord> = BTreeMap::new();
    let mut q = conn
        .prepare(
            "SELECT node, collected_at, cores, mem_total_bytes, mem_available_bytes FROM nodes",
        )
        .with_context(ctx)?;
    let rows = q
        .query_map([], |r| {
            Ok(NodeRecord {
                node: r.get(0)?,
                collected_at: from_sql(r.get(1)?),
                cores: r.get(2)?,
                mem_total_bytes: from_sql(r.get(3)?),
                mem_available_bytes: from_sql(r.get(4)?),
                interfaces: Vec::new(),
                storage: Vec::new(),
            })
        })
        .with_context(ctx)?;
    for r in rows {
        let r = r.with_context(ctx)?;
        if nodes.is_empty() || nodes.contains(&r.node) {
            recs.insert(r.node.clone(), r);
        }
    }
    check_missing(db, nodes, |n| recs.contains_key(n))?;
    let mut q = conn.prepare("SELECT node, path, mount_point, fs_type, device, disk, class, capacity_bytes, free_bytes, available_bytes, write_mib_s, read_mib_s, error FROM storage ORDER BY node, rowid").with_context(ctx)?;
    let rows = q
        .query_map([], |r| {
            let class: Option<String> = r.get(6)?;
            Ok((
                r.get::<_, String>(0)?,
                Storage {
                    path: r.get(1)?,
                    mount_point: r.get(2)?,
                    fs_type: r.get(3)?,
                    device: r.get(4)?,
                    disk: r.get(5)?,
                    class: class.as_deref().and_then(DeviceClass::parse),
                    capacity_bytes: r.get::<_, Option<i64>>(7)?.map(from_sql),
                    free_bytes: r.get::<_, Option<i64>>(8)?.map(from_sql),
                    available_bytes: r.get::<_, Option<i64>>(9)?.map(from_sql),
                    write_mib_s: r.get(10)?,
                    read_mib_s: r.get(11)?,
                    error: r.get(12)?,
                },
            ))
        })
        .with_context(ctx)?;
    for r in rows {
        let (node, s) = r.with_context(ctx)?;
        if let Some(rec) = recs.get_mut(&node) {
            rec.storage.push(s);
        }
    }
    let mut q = conn.prepare("SELECT node, name, mac, ipv4, ipv6, mtu, speed_mbps, up, operstate FROM interfaces ORDER BY node, name").with_context(ctx)?;
    let rows = q
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, Option<u32>>(5)?,
                r.get::<_, Option<i64>>(6)?,
                r.get::<_, bool>(7)?,
                r.get::<_, Option<String>>(8)?,
            ))
        })
        .with_context(ctx)?;
    for r in rows {
        let (node, name, mac, ipv4, ipv6, mtu, speed, up, operstate) = r.with_context(ctx)?;
        if let Some(rec) = recs.get_mut(&node) {
            rec.interfaces.push(Interface {
                ipv4: serde_json::from_str(&ipv4)
                    .with_context(|| format!("{}: bad ipv4 of {node}/{name}", ctx()))?,
                ipv6: serde_json::from_str(&ipv6)
                    .with_context(|| format!("{}: bad ipv6 of {node}/{name}", ctx()))?,
                name,
                mac,
                mtu,
                speed_mbps: speed.map(from_sql),
                up,
                operstate,
            });
        }
    }
    Ok(recs.into_values().collect())
}

/// For each of `nodes`, the capacity and available bytes of the storage holding `path`: the
/// recorded entry whose path is `path`, else the one whose path or mount point is the closest
/// ancestor of `path` (entries without figures are ignored). Fails naming the nodes missing
/// from the inventory, and those with no recorded storage holding `path`.
pub fn capacity(db: &Path, nodes: &[String], path: &Path) -> Result<Vec<NodeCapacity>> {
    let recs = load(db, nodes)?;
    let mut out = Vec::new();
    let mut uncovered = Vec::new();
    for name in nodes {
        let Some(rec) = recs.iter().find(|r| &r.node == name) else {
            continue; // load() already failed for missing nodes
        };
        // (matched prefix length in components, exact path first) → best entry
        let mut best: Option<((usize, bool), &Storage)> = None;
        for s in &rec.storage {
            if s.capacity_bytes.is_none() || s.available_bytes.is_none() {
                continue;
            }
            let keys = [Some(s.path.as_str()), s.mount_point.as_deref()];
            for (i, k) in keys.into_iter().enumerate() {
                let Some(k) = k else { continue };
                let k = Path::new(k);
                if super::probe::is_ancestor(k, path) {
                    let score = (k.components().count(), i == 0);
                    if best.is_none_or(|(b, _)| score > b) {
                        best = Some((score, s));
                    }
                }
            }
        }
        match best {
            Some((_, s)) => out.push(NodeCapacity {
                node: rec.node.clone(),
                path: s.path.clone(),
                mount_point: s.mount_point.clone(),
                capacity_bytes: s.capacity_bytes.unwrap_or(0),
                available_bytes: s.available_bytes.unwrap_or(0),
                collected_at: rec.collected_at,
            }),
            None => uncovered.push(name.as_str()),
        }
    }
    if !uncovered.is_empty() {
        bail!(
            "no storage holding {} recorded in {} for: {}",
            path.display(),
            db.display(),
            uncovered.join(", ")
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(path: &str, mount: &str, cap: u64, avail: u64) -> Storage {
        Storage {
            path: path.into(),
            mount_point: Some(mount.into()),
            fs_type: Some("ext4".into()),
            device: Some("/dev/sda1".into()),
            disk: Some("sda".into()),
            class: Some(DeviceClass::Ssd),
            capacity_bytes: Some(cap),
            free_bytes: Some(avail + 1),
            available_bytes: Some(avail),
            write_mib_s: Some(100.5),
            read_mib_s: Some(200.25),
            error: None,
        }
    }

    fn rec(node: &str, t: u64, storage: Vec<Storage>) -> NodeRecord {
        NodeRecord {
            node: node.into(),
            collected_at: t,
            cores: 2,
            mem_total_bytes: 1 << 34,
            mem_available_bytes: 1 << 33,
            interfaces: vec![Interface {
                name: "eth0".into(),
                mac: Some("02:00:00:00:00:01".into()),
                ipv4: vec!["10.0.0.1/24".into()],
                ipv6: vec!["fe80::1/64".into()],
                mtu: Some(1500),
                speed_mbps: Some(10_000),
                up: true,
                operstate: Some("up".into()),
            }],
            storage,
        }
    }

    #[test]
    fn upsert_replaces_and_show_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("inv.db");
        let a1 = rec(
            "a",
            1,
            vec![st("/scratch", "/scratch", 100, 50), st("/tmp", "/", 10, 5)],
        );
        upsert(&db, &a1).unwrap();
        upsert(&db, &rec("b", 1, vec![st("/scratch", "/scratch", 7, 3)])).unwrap();
        assert_eq!(load(&db, &[]).unwrap().len(), 2);
        let mut a2 = rec("a", 2, vec![st("/local", "/local", 300, 200)]);
        a2.storage[0].error = Some("x".into());
        a2.storage[0].class = Some(DeviceClass::Nvme);
        upsert(&db, &a2).unwrap();
        let got = load(&db, &["a".to_string()]).unwrap();
        assert_eq!(got, vec![a2]);
        let err = load(&db, &["a".into(), "zz".into(), "yy".into()]).unwrap_err();
        assert!(format!("{err:#}").contains("zz, yy"), "{err:#}");
        assert!(load(&dir.path().join("none.db"), &[]).is_err());
    }

    #[test]
    fn capacity_takes_the_closest_recorded_ancestor() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("inv.db");
        upsert(
            &db,
            &rec(
                "a",
                5,
                vec![
                    st("/", "/", 1000, 900),
                    st("/local/scratch", "/local", 500, 400),
                ],
            ),
        )
        .unwrap();
        upsert(&db, &rec("b", 6, vec![st("/tmp", "/", 2000, 1500)])).unwrap();
        upsert(&db, &rec("c", 7, vec![st("/dev/shm", "/dev/shm", 10, 9)])).unwrap();
        let nodes = ["a".to_string(), "b".to_string()];
        let got = capacity(&db, &nodes, Path::new("/local/scratch/job7")).unwrap();
        assert_eq!(
            got.iter()
                .map(|c| (
                    c.node.as_str(),
                    c.path.as_str(),
                    c.capacity_bytes,
                    c.available_bytes
                ))
                .collect::<Vec<_>>(),
            vec![("a", "/local/scratch", 500, 400), ("b", "/tmp", 2000, 1500)]
        );
        assert_eq!(got[0].collected_at, 5);
        let got = capacity(&db, &nodes, Path::new("/local/other")).unwrap();
        assert_eq!(got[0].path, "/local/scratch"); // by its mount point /local
        let got = capacity(&db, &nodes, Path::new("/tmp")).unwrap();
        assert_eq!(got[1].path, "/tmp");
        let err = capacity(&db, &["a".into(), "x".into()], Path::new("/")).unwrap_err();
        assert!(format!("{err:#}").contains(": x"), "{err:#}");
        let err = capacity(&db, &["a".into(), "c".into()], Path::new("/data")).unwrap_err();
        assert!(format!("{err:#}").ends_with(": c"), "{err:#}");
    }

    #[test]
    fn concurrent_writers_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("inv.db");
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let db = db.clone();
                std::thread::spawn(move || {
                    for round in 0..5 {
                        let r = rec(&format!("n{i}"), round, vec![st("/s", "/s", 10 + i, i)]);
                        upsert(&db, &r).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let all = load(&db, &[]).unwrap();
        assert_eq!(all.len(), 8);
        assert!(all
            .iter()
            .all(|r| r.collected_at == 4 && r.storage.len() == 1));
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("inv.db");
        Connection::open(&db)
            .unwrap()
            .execute_batch("PRAGMA user_version = 9")
            .unwrap();
        assert!(
            format!("{:#}", upsert(&db, &rec("a", 1, vec![])).unwrap_err()).contains("version 9")
        );
        assert!(load(&db, &[]).is_err());
    }

    /// The schema as SQLite holds it: every object's type, name and SQL, and the version.
    fn schema_of(db: &Path) -> (Vec<(String, String, Option<String>)>, i64) {
        let conn = Connection::open(db).unwrap();
        let mut q = conn
            .prepare("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
            .unwrap();
        let objects = q
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let version = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        (objects, version)
    }

    /// `tests/fixtures/inventory-v2.db` was written by the code before the migrations were
    /// numbered (two nodes, their health): it reads as it did, a write leaves its schema as
    /// it is, and a new inventory gets exactly its schema.
    #[test]
    fn a_schema_2_inventory_of_before_the_migrations_opens_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("inv.db");
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inventory-v2.db"),
            &db,
        )
        .unwrap();
        let before = schema_of(&db);
        assert_eq!(before.1, 2);
        let nodes = load(&db, &[]).unwrap();
        assert_eq!(
            nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(),
            ["node-a", "node-b"]
        );
        assert_eq!(nodes[0].storage[0].class, Some(DeviceClass::Nvme));
        let got = capacity(&db, &["node-b".to_string()], Path::new("/local/scratch/j")).unwrap();
        assert_eq!(got[0].capacity_bytes, 250 << 30);
        let health = health_latest(&db, &[]).unwrap();
        assert_eq!(health.len(), 2);
        assert_eq!(health[1].error.as_deref(), Some("probe timed out"));
        assert!(health[1].anomalous && health[1].bandwidth.is_none());

        upsert(
            &db,
            &rec("node-c", 1_700_000_300, vec![st("/s", "/s", 10, 5)]),
        )
        .unwrap();
        assert_eq!(
            schema_of(&db),
            before,
            "a write changed the schema of a current inventory"
        );
        assert_eq!(load(&db, &[]).unwrap().len(), 3);

        let fresh = dir.path().join("fresh.db");
        upsert(&fresh, &rec("a", 1, vec![])).unwrap();
        assert_eq!(
            schema_of(&fresh),
            before,
            "the migrations build another schema"
        );
    }

    #[test]
    fn a_schema_1_inventory_gets_health_at_its_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("inv.db");
        let mut conn = Connection::open(&db).unwrap();
        let tx = conn.transaction().unwrap();
        migrate_to(&tx, 1).unwrap();
        tx.commit().unwrap();
        drop(conn);
        assert_eq!(schema_of(&db).1, 1);
        assert!(schema_of(&db).0.iter().all(|o| o.1 != "health"));
        upsert(&db, &rec("a", 1, vec![])).unwrap();
        assert!(health_latest(&db, &[]).unwrap().is_empty());
        let (objects, version) = schema_of(&db);
        assert_eq!(version, SCHEMA_VERSION);
        assert!(objects.iter().any(|o| o.1 == "health"));
    }

    #[test]
    fn migrations_are_numbered_in_order() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1);
        }
        assert_eq!(SCHEMA_VERSION, 2);
    }
}
