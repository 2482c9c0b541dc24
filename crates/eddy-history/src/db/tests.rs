//! The history database on both backends: the same suite on an SQLite file and on a real
//! PostgreSQL server the test starts (eddy_testkit::postgres), never a stand-in.

use super::*;
use eddy_testkit::postgres::PgServer;
use eddy_testkit::profiles::{profile, Run};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

const T0: f64 = 1_790_000_000.0;

fn run<'a>(key: &'a str, name: &'a str, user: &'a str, hash: &'a str, start: f64) -> Run<'a> {
    Run {
        key,
        job_id: Some(key),
        job_name: name,
        user,
        script_hash: hash,
        start,
        seconds: 60,
        nodes: 4,
        bytes_per_node: 256 << 20,
        mode: "N-N",
    }
}

fn job(r: &Run) -> JobProfile {
    serde_json::from_value(profile(r)).unwrap()
}

/// Five runs: two applications of alice (one of them twice, and once with an edited
/// script), one of bob, one without a Slurm job id.
fn runs() -> Vec<JobProfile> {
    let mut v = vec![
        job(&run("1001", "wrf", "alice", "h-wrf", T0)),
        job(&run("1002", "wrf", "alice", "h-wrf", T0 + 3600.0)),
        job(&run("1003", "wrf", "alice", "h-wrf-2", T0 + 7200.0)),
        job(&Run {
            mode: "N-1",
            ..run("1004", "lammps", "bob", "h-lmp", T0 + 1800.0)
        }),
    ];
    let mut local = job(&run("eddy@1790009000", "", "carol", "", T0 + 9000.0));
    local.job_id = None;
    local.job_name = None;
    local.script_hash = None;
    v.push(local);
    v
}

fn keys(v: &[JobProfile]) -> Vec<&str> {
    v.iter().map(|p| p.key.as_str()).collect()
}

/// put, get, upsert, list and its filters, runs_of, find: what both backends must do alike.
fn profiles_suite(spec: &str) {
    let mut db = HistoryDb::open(spec).unwrap();
    assert_eq!(db.schema_version().unwrap(), latest_version());
    let all = runs();
    for p in &all {
        db.put(p).unwrap();
    }
    for p in &all {
        assert_eq!(db.get(&p.key).unwrap().as_ref(), Some(p), "{}", p.key);
    }
    assert_eq!(db.get("no-such-job").unwrap(), None);

    // Newest first.
    let listed = db.list(&Filter::default()).unwrap();
    assert_eq!(
        keys(&listed),
        ["eddy@1790009000", "1003", "1002", "1004", "1001"]
    );
    assert_eq!(listed.len(), all.len());

    // Upsert: the same key replaces, never adds.
    let mut changed = all[0].clone();
    changed.written_bytes += 1 << 30;
    changed.io_mode = IoMode::N1;
    db.put(&changed).unwrap();
    assert_eq!(db.get("1001").unwrap(), Some(changed.clone()));
    assert_eq!(db.list(&Filter::default()).unwrap().len(), all.len());

    let by = |f: Filter, db: &mut HistoryDb| {
        db.list(&f)
            .unwrap()
            .iter()
            .map(|p| p.key.clone())
            .collect::<Vec<_>>()
    };
    let user = |u: &str| Filter {
        user: Some(u.into()),
        ..Filter::default()
    };
    assert_eq!(by(user("alice"), &mut db), ["1003", "1002", "1001"]);
    assert_eq!(by(user("bob"), &mut db), ["1004"]);
    assert!(by(user("mallory"), &mut db).is_empty());
    let name = Filter {
        job_name: Some("wrf".into()),
        ..Filter::default()
    };
    assert_eq!(by(name, &mut db), ["1003", "1002", "1001"]);
    let window = Filter {
        since: Some(T0 + 1800.0),
        until: Some(T0 + 7200.0),
        ..Filter::default()
    };
    assert_eq!(by(window, &mut db), ["1003", "1002", "1004"]);
    let newest_two = Filter {
        limit: Some(2),
        ..Filter::default()
    };
    assert_eq!(by(newest_two, &mut db), ["eddy@1790009000", "1003"]);
    let alice_since = Filter {
        user: Some("alice".into()),
        since: Some(T0 + 1.0),
        ..Filter::default()
    };
    assert_eq!(by(alice_since, &mut db), ["1003", "1002"]);

    // The same application: job name and script hash; an edited script is another one.
    let wrf = db.runs_of(None, "wrf", Some("h-wrf")).unwrap();
    assert_eq!(keys(&wrf), ["1002", "1001"]);
    assert_eq!(wrf[1], changed);
    assert_eq!(
        keys(&db.runs_of(None, "wrf", Some("h-wrf-2")).unwrap()),
        ["1003"]
    );
    assert!(db
        .runs_of(None, "lammps", Some("h-wrf"))
        .unwrap()
        .is_empty());
    // Keyed by user: alice's runs are alice's history; bob's identical script finds none.
    assert_eq!(
        keys(&db.runs_of(Some("alice"), "wrf", Some("h-wrf")).unwrap()),
        ["1002", "1001"]
    );
    assert!(db
        .runs_of(Some("bob"), "wrf", Some("h-wrf"))
        .unwrap()
        .is_empty());

    // Insert-only: a new key is stored, a taken one left as it was.
    let mut fresh = all[1].clone();
    fresh.key = "2001".into();
    assert_eq!(db.insert_new(&fresh).unwrap(), Inserted::Stored);
    let mut forged = all[1].clone();
    forged.written_bytes = 1;
    assert_eq!(db.insert_new(&forged).unwrap(), Inserted::KeyTaken);
    assert_eq!(db.get("1002").unwrap().as_ref(), Some(&all[1]));
    assert_eq!(db.get("2001").unwrap(), Some(fresh));

    // A job as a user names it: key or Slurm job id.
    assert_eq!(db.find("1004").unwrap().map(|p| p.key), Some("1004".into()));
    let mut rekeyed = all[3].clone();
    rekeyed.key = "lammps@1790001800".into();
    rekeyed.job_id = Some("77".into());
    db.put(&rekeyed).unwrap();
    assert_eq!(db.find("77").unwrap(), Some(rekeyed));
    assert_eq!(db.find("78").unwrap(), None);

    // Another connection sees what this one stored.
    drop(db);
    let mut again = HistoryDb::open(spec).unwrap();
    assert_eq!(again.list(&Filter::default()).unwrap().len(), all.len() + 2);
}

/// A database at version 1 is upgraded on open, keeping its profiles; opening an up-to-date
/// database applies nothing.
fn migrations_suite(spec: &str) {
    let mut v1 = HistoryDb::open_at(spec, 1).unwrap();
    assert_eq!(v1.schema_version().unwrap(), 1);
    let v1_indexes = v1.index_names().unwrap();
    assert!(
        v1_indexes.iter().any(|n| n == "profiles_start"),
        "{v1_indexes:?}"
    );
    assert!(
        !v1_indexes.iter().any(|n| n == "profiles_app"),
        "{v1_indexes:?}"
    );
    let old = runs();
    v1.put(&old[0]).unwrap();
    drop(v1);

    let mut db = HistoryDb::open(spec).unwrap();
    assert_eq!(db.schema_version().unwrap(), 3);
    let applied = db.applied_migrations().unwrap();
    assert_eq!(applied.iter().map(|a| a.0).collect::<Vec<_>>(), [1, 2, 3]);
    let indexes = db.index_names().unwrap();
    for ix in [
        "profiles_start",
        "profiles_app",
        "profiles_user",
        "profiles_job_id",
        "profiles_alloc_rule",
    ] {
        assert!(indexes.iter().any(|n| n == ix), "{ix} missing: {indexes:?}");
    }
    // A row stored before the allocation was recorded reads as it was, without one.
    let read = db.get(&old[0].key).unwrap();
    assert_eq!(read.as_ref(), Some(&old[0]));
    assert_eq!(read.and_then(|p| p.allocation), None);
    // A run with its allocation keeps it (migration 3).
    let mut allocated = old[1].clone();
    allocated.allocation = Some(crate::Allocation {
        rule: "scaled".into(),
        servers: vec![0, 2],
        hosts: vec!["io1".into(), "io3".into()],
        reasons: vec!["scaling: S = 2".into()],
        // ... and the servers added while it ran (decision 0082), in the profile's JSON.
        grown: vec![crate::Grown {
            at: 1_800_000_000,
            from: 2,
            to: 3,
            servers: vec![1],
            hosts: vec!["io2".into()],
            outcome: "done at epoch 2".into(),
            reasons: vec!["bound by servers".into()],
        }],
    });
    db.put(&allocated).unwrap();
    assert_eq!(db.get(&allocated.key).unwrap().as_ref(), Some(&allocated));
    db.put(&old[1]).unwrap();
    assert_eq!(db.get(&old[1].key).unwrap().as_ref(), Some(&old[1]));
    db.put(&allocated).unwrap();
    drop(db);

    // Re-open: a no-op (the same records, with the times they were first applied).
    let mut db = HistoryDb::open(spec).unwrap();
    assert_eq!(db.applied_migrations().unwrap(), applied);
    assert_eq!(db.list(&Filter::default()).unwrap().len(), 2);
}

#[test]
fn sqlite_profiles() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("made/by/open/history.db");
    profiles_suite(path.to_str().unwrap());
    // Made private: the file 0600, the directories this made 0700.
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&dir.path().join("made")), 0o700);
    assert_eq!(mode(&dir.path().join("made/by/open")), 0o700);
}

#[test]
fn sqlite_migrations() {
    let dir = tempfile::tempdir().unwrap();
    migrations_suite(dir.path().join("h.db").to_str().unwrap());
}

#[test]
fn sqlite_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.db");
    let spec = path.to_str().unwrap();
    HistoryDb::open(spec).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO eddy_migrations (version, name, applied_at) VALUES (99, 'future', 0)",
        [],
    )
    .unwrap();
    drop(conn);
    let err = HistoryDb::open(spec).unwrap_err().to_string();
    assert!(err.contains("schema version 99"), "{err}");
}

#[test]
fn specs() {
    assert_eq!(
        DbSpec::parse("/var/lib/eddy/history.db").unwrap(),
        DbSpec::Sqlite("/var/lib/eddy/history.db".into())
    );
    for url in [
        "postgres://u:p@db:5433/h",
        "postgresql:///h?host=/run/postgresql",
    ] {
        assert_eq!(DbSpec::parse(url).unwrap(), DbSpec::Postgres(url.into()));
    }
    assert!(DbSpec::parse("mysql://db/h").is_err());
    assert!(DbSpec::parse("  ").is_err());
}

#[test]
fn non_finite_numbers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = HistoryDb::open(dir.path().join("h.db").to_str().unwrap()).unwrap();
    let mut p = runs().remove(0);
    p.peak_bandwidth = f64::NAN;
    let err = db.put(&p).unwrap_err().to_string();
    assert!(err.contains("profile 1001"), "{err}");
    assert_eq!(db.get("1001").unwrap(), None);
}

#[test]
fn urls_are_shown_without_their_password() {
    assert_eq!(
        redacted("postgres://u:s3cret@db.example:5433/h?sslmode=disable"),
        "postgresql://u@db.example:5433/h"
    );
    assert!(!redacted("postgres://u:s3cret@[bad").contains("s3cret"));
    assert_eq!(
        redacted("/var/lib/eddy/history.db"),
        "/var/lib/eddy/history.db"
    );
    assert!(has_password("postgres://u:s3cret@db/h"));
    assert!(has_password("postgres://u@db/h?password=s3cret"));
    assert!(!has_password("postgres://u@db/h"));
    assert!(!has_password("/var/lib/eddy/history.db"));
}

#[test]
fn the_user_default_follows_xdg_then_home() {
    use super::user_default_db_from as d;
    let p = PathBuf::from;
    assert_eq!(
        d(Some(p("/x/data")), Some(p("/home/u"))),
        Some(p("/x/data/eddy/history.db"))
    );
    assert_eq!(
        d(Some(p("rel")), Some(p("/home/u"))),
        Some(p("/home/u/.local/share/eddy/history.db"))
    );
    assert_eq!(
        d(None, Some(p("/home/u"))),
        Some(p("/home/u/.local/share/eddy/history.db"))
    );
    assert_eq!(d(None, Some(p("home"))), None);
    assert_eq!(d(None, None), None);
}

/// Tests that need services (a server the test kit starts): `make test` runs them, `make test-fast` skips them.
mod needs_services {
    use super::*;

    #[test]
    fn postgres_profiles_over_tcp_with_password() {
        let server = PgServer::start();
        profiles_suite(&server.tcp_url());
        // A wrong password is refused, and the message does not show the URL's password.
        let bad = server
            .tcp_url()
            .replace(eddy_testkit::postgres::PASSWORD, "wrong-password");
        let err = HistoryDb::open(&bad).unwrap_err().to_string();
        assert!(err.contains("cannot connect"), "{err}");
        assert!(!err.contains("wrong-password"), "{err}");
    }

    /// A raw connection to the test server as `user` over TCP.
    fn raw_client(server: &PgServer, user: &str, password: &str) -> ::postgres::Client {
        let url = format!(
            "postgres://{user}:{password}@127.0.0.1:{}/{}",
            server.port(),
            eddy_testkit::postgres::DATABASE
        );
        ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap()
    }

    /// The teardown's role of docs/guide/slurm-admin.md: it may INSERT into `profiles` and nothing
    /// else. Its password comes with `Access`, not in the URL; it stores a new profile and
    /// cannot replace, read, change or remove one.
    #[test]
    fn postgres_an_insert_only_role_stores_new_profiles_and_nothing_else() {
        let server = PgServer::start();
        let mut admin = HistoryDb::open(&server.socket_url()).unwrap();
        let all = runs();
        admin.put(&all[0]).unwrap();
        let mut su = raw_client(
            &server,
            eddy_testkit::postgres::USER,
            eddy_testkit::postgres::PASSWORD,
        );
        su.batch_execute(
            "CREATE ROLE eddy_teardown LOGIN PASSWORD 'teardown-secret';\
             GRANT INSERT ON profiles TO eddy_teardown;",
        )
        .unwrap();
        let url = format!(
            "postgres://eddy_teardown@127.0.0.1:{}/{}",
            server.port(),
            eddy_testkit::postgres::DATABASE
        );
        let access = Access {
            password: Some("teardown-secret".into()),
            connect_timeout: Some(Duration::from_secs(10)),
            lock_timeout: Some(Duration::from_secs(5)),
            statement_timeout: Some(Duration::from_secs(10)),
        };
        let mut writer = HistoryDb::open_insert_only(&url, &access).unwrap();
        assert!(!format!("{writer:?}").contains("teardown-secret"));
        assert_eq!(writer.insert_new(&all[1]).unwrap(), Inserted::Stored);
        let mut forged = all[0].clone();
        forged.written_bytes = 7;
        assert_eq!(writer.insert_new(&forged).unwrap(), Inserted::KeyTaken);
        assert!(writer.put(&forged).is_err(), "an upsert needs UPDATE");
        assert!(writer.get(&all[0].key).is_err(), "reading needs SELECT");
        assert_eq!(admin.get(&all[0].key).unwrap().as_ref(), Some(&all[0]));
        assert_eq!(admin.get(&all[1].key).unwrap().as_ref(), Some(&all[1]));
        let mut raw = raw_client(&server, "eddy_teardown", "teardown-secret");
        for sql in [
            "SELECT profile FROM profiles",
            "UPDATE profiles SET volume = 0",
            "DELETE FROM profiles",
        ] {
            let e = format!("{:?}", raw.batch_execute(sql).unwrap_err());
            assert!(e.contains("permission denied"), "{sql}: {e}");
        }
        assert_eq!(admin.list(&Filter::default()).unwrap().len(), 2);
    }

    /// Another session holds the migrations' advisory lock, then the profiles table: a reader
    /// with a lock bound gets an error within it (never waits on), and a database at the schema
    /// already is opened without that lock at all.
    #[test]
    fn postgres_held_locks_bound_the_open_and_the_reads() {
        let server = PgServer::start();
        let access = Access {
            lock_timeout: Some(Duration::from_secs(1)),
            statement_timeout: Some(Duration::from_secs(5)),
            connect_timeout: Some(Duration::from_secs(5)),
            password: None,
        };
        let guard = Duration::from_secs(30);
        let mut holder = raw_client(
            &server,
            eddy_testkit::postgres::USER,
            eddy_testkit::postgres::PASSWORD,
        );
        holder
            .execute("SELECT pg_advisory_lock($1)", &[&0x6564_6479_6869_7374_i64])
            .unwrap();
        // A fresh database needs the migrations, hence the lock: refused within the bound.
        let t = std::time::Instant::now();
        let e = HistoryDb::open_with(&server.socket_url(), &access).unwrap_err();
        assert!(t.elapsed() < guard, "waited {:?}", t.elapsed());
        assert!(e.to_string().contains("lock"), "{e}");
        holder
            .execute("SELECT pg_advisory_unlock_all()", &[])
            .unwrap();
        HistoryDb::open(&server.socket_url()).unwrap();
        // Up to date: the held lock is not waited for.
        holder
            .execute("SELECT pg_advisory_lock($1)", &[&0x6564_6479_6869_7374_i64])
            .unwrap();
        let mut db = HistoryDb::open_with(&server.socket_url(), &access).unwrap();
        // A table lock held in an open transaction: a read fails within the bound.
        holder
            .batch_execute("BEGIN; LOCK TABLE profiles IN ACCESS EXCLUSIVE MODE;")
            .unwrap();
        let t = std::time::Instant::now();
        let e = db.runs_of(Some("alice"), "wrf", None).unwrap_err();
        assert!(t.elapsed() < guard, "waited {:?}", t.elapsed());
        assert!(e.to_string().contains("cannot query"), "{e}");
        holder.batch_execute("ROLLBACK").unwrap();
    }

    #[test]
    fn postgres_migrations_over_unix_socket() {
        let server = PgServer::start();
        migrations_suite(&server.socket_url());
    }

    /// Two login nodes open the same fresh database at once (both migrate it) and store their
    /// jobs' profiles concurrently: every profile lands, the schema once.
    #[test]
    fn postgres_two_writers() {
        let server = PgServer::start();
        let url = server.socket_url();
        let writers: Vec<_> = ["login1", "login2"]
            .into_iter()
            .map(|node| {
                let url = url.clone();
                std::thread::spawn(move || {
                    let mut db = HistoryDb::open(&url).unwrap();
                    for i in 0..20 {
                        let key = format!("{node}-{i}");
                        let p = job(&run(&key, node, node, "h", T0 + f64::from(i)));
                        db.put(&p).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let mut db = HistoryDb::open(&url).unwrap();
        assert_eq!(db.applied_migrations().unwrap().len(), MIGRATIONS.len());
        for node in ["login1", "login2"] {
            let mine = db
                .list(&Filter {
                    user: Some(node.into()),
                    ..Filter::default()
                })
                .unwrap();
            assert_eq!(mine.len(), 20, "{node}");
        }
    }
}
