//! `eddy history list|show|export|plot` on an SQLite file and on a real PostgreSQL server
//! started by the test, with profiles stored through eddy-history (as the teardown stores
//! them): the filters, the JSON round trip, the plot, the default database from the config,
//! and two login nodes writing into one PostgreSQL at once.

use eddy_history::{HistoryDb, JobProfile};
use eddy_testkit::cli::{fails, ok, s};
use eddy_testkit::postgres::PgServer;
use eddy_testkit::profiles::{profile, Run};

/// 2026-09-21T14:13:20Z.
const T0: f64 = 1_790_000_000.0;

fn job(
    key: &str,
    job_id: Option<&str>,
    name: &str,
    user: &str,
    start: f64,
    mode: &str,
) -> JobProfile {
    serde_json::from_value(profile(&Run {
        key,
        job_id,
        job_name: name,
        user,
        script_hash: &format!("sha256:{name}"),
        start,
        seconds: 120,
        nodes: 4,
        bytes_per_node: 512 << 20,
        mode,
    }))
    .unwrap()
}

/// Four runs of three applications by two users; one keyed by deployment name and start
/// (Slurm job id 9001 recorded beside it).
fn jobs() -> Vec<JobProfile> {
    vec![
        job("7001", Some("7001"), "wrf", "alice", T0, "N-N"),
        job("7002", Some("7002"), "wrf", "alice", T0 + 86_400.0, "N-N"),
        job("7003", Some("7003"), "lammps", "bob", T0 + 3_600.0, "N-1"),
        job(
            "climate@1790172800",
            Some("9001"),
            "climate",
            "alice",
            T0 + 172_800.0,
            "1-1",
        ),
    ]
}

fn stdout(args: &[&str]) -> String {
    String::from_utf8(ok(args).stdout).unwrap()
}

fn keys_of(json: &str) -> Vec<String> {
    let v: Vec<serde_json::Value> = serde_json::from_str(json).unwrap();
    v.iter()
        .map(|r| r["key"].as_str().unwrap().to_string())
        .collect()
}

/// Everything `eddy history` does, against the database `spec`.
fn exercise(spec: &str) {
    let stored = jobs();
    let mut db = HistoryDb::open(spec).unwrap();
    for p in &stored {
        db.put(p).unwrap();
    }
    drop(db);
    let h = |rest: &[&str]| {
        let mut args = vec!["history"];
        args.extend_from_slice(rest);
        args.extend_from_slice(&["--db", spec]);
        args.into_iter().map(str::to_string).collect::<Vec<_>>()
    };
    let run = |rest: &[&str]| {
        let args = h(rest);
        stdout(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };

    // The table: a header and one aligned line per job, newest first.
    let table = run(&["list"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 5, "{table}");
    for col in [
        "JOB", "NAME", "USER", "START", "DURATION", "VOLUME", "MODE", "N_A", "PEAK BW",
    ] {
        assert!(lines[0].contains(col), "{table}");
    }
    let order: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(order, ["climate@1790172800", "7002", "7003", "7001"]);
    let mode_col = lines[0].find("MODE").unwrap();
    for l in &lines[1..] {
        assert!(l[mode_col..].starts_with(['N', '1']), "aligned: {table}");
    }
    let first = lines[4];
    assert!(first.contains("2026-09-21T14:13:20Z"), "{first}");
    assert!(first.contains("2m00s"), "{first}");
    assert!(first.contains("4.0 GiB"), "{first}");

    // Filters, as JSON.
    assert_eq!(
        keys_of(&run(&["list", "--user", "alice", "--json"])),
        ["climate@1790172800", "7002", "7001"]
    );
    assert_eq!(
        keys_of(&run(&["list", "--job-name", "wrf", "--json"])),
        ["7002", "7001"]
    );
    assert_eq!(
        keys_of(&run(&[
            "list",
            "--since",
            "2026-09-21T14:30:00Z",
            "--until",
            &(T0 + 86_400.0).to_string(),
            "--json"
        ])),
        ["7002", "7003"]
    );
    assert_eq!(
        keys_of(&run(&[
            "list",
            "--since",
            "2026-09-22",
            "--user",
            "alice",
            "--json"
        ])),
        ["climate@1790172800", "7002"]
    );
    assert_eq!(
        keys_of(&run(&["list", "--limit", "1", "--json"])),
        ["climate@1790172800"]
    );
    assert!(keys_of(&run(&["list", "--user", "nobody", "--json"])).is_empty());
    let row: Vec<serde_json::Value> =
        serde_json::from_str(&run(&["list", "--job-name", "lammps", "--json"])).unwrap();
    assert_eq!(row[0]["io_mode"], "N-1");
    assert_eq!(row[0]["io_nodes"], 4);
    assert_eq!(row[0]["volume"], 4u64 << 30);

    // Show: by key and by Slurm job id; JSON is the stored profile.
    let shown: JobProfile = serde_json::from_str(&run(&["show", "7003", "--json"])).unwrap();
    assert_eq!(shown, stored[2]);
    let by_id: JobProfile = serde_json::from_str(&run(&["show", "9001", "--json"])).unwrap();
    assert_eq!(by_id, stored[3]);
    let human = run(&["show", "7003"]);
    for want in ["lammps", "bob", "N-1", "nodes that did I/O (N_A):", "io2"] {
        assert!(human.contains(want), "{want}: {human}");
    }
    let missing = fails(
        &h(&["show", "4242"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert!(missing.contains("no job 4242"), "{missing}");

    // Export: the profiles, whole; importing the JSON gives the same profiles back.
    let all: Vec<JobProfile> = serde_json::from_str(&run(&["export", "--json"])).unwrap();
    let mut expect = stored.clone();
    expect.sort_by(|a, b| b.start.total_cmp(&a.start));
    assert_eq!(all, expect);
    let alice: Vec<JobProfile> =
        serde_json::from_str(&run(&["export", "--user", "alice"])).unwrap();
    assert_eq!(alice.len(), 3);
    assert!(alice.iter().all(|p| p.user == "alice"));

    // Plot: a PNG of the drawn size, far from blank.
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("7001.png");
    let said = run(&["plot", "7001", "--out", s(&png)]);
    assert!(said.contains("wrote"), "{said}");
    let img = image::open(&png).unwrap().to_rgb8();
    assert_eq!((img.width(), img.height()), (1200, 1100));
    let mut colours: Vec<[u8; 3]> = img.pixels().map(|p| p.0).collect();
    colours.sort_unstable();
    colours.dedup();
    assert!(colours.len() > 50, "{} colours", colours.len());
    let white = img.pixels().filter(|p| p.0 == [255, 255, 255]).count() as f64;
    let share = white / f64::from(img.width() * img.height());
    assert!(share < 0.97, "{share} of the image is white");
}

#[test]
fn history_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history/eddy.db");
    exercise(s(&db));

    // The default database: the --config file's history_db.
    let config = dir.path().join("eddy.toml");
    std::fs::write(&config, format!("history_db = {:?}\n", s(&db))).unwrap();
    let via_config = stdout(&["history", "list", "--json", "--config", s(&config)]);
    assert_eq!(keys_of(&via_config).len(), 4);
    // ... else the site settings'.
    let site = dir.path().join("bb.toml");
    std::fs::write(&site, format!("history_db = {:?}\n", s(&db))).unwrap();
    let via_site = stdout(&["history", "list", "--json", "--site", s(&site)]);
    assert_eq!(keys_of(&via_site).len(), 4);

    // No database anywhere (nor a home for the per-user default, which
    // `profile::history_without_a_database_goes_to_the_users_default` covers): an error that
    // says how to name one.
    let empty = dir.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let out = eddy_testkit::cli::eddy_cmd()
        .args(["history", "list", "--site", s(&empty)])
        .env_remove("HOME")
        .env_remove("XDG_DATA_HOME")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", eddy_testkit::cli::text(&out));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        err.contains("no history database") && err.contains("--db"),
        "{err}"
    );
    let err = fails(&[
        "history",
        "list",
        "--db",
        s(&db),
        "--since",
        "yesterday-ish",
    ]);
    assert!(err.contains("RFC 3339"), "{err}");
    let err = fails(&["history", "list", "--db", "mysql://db/h"]);
    assert!(err.contains("not known"), "{err}");
}

#[test]
fn history_on_postgres() {
    let server = PgServer::start();
    exercise(&server.socket_url());
    // The same history over TCP with a password.
    let listed = stdout(&["history", "list", "--json", "--db", &server.tcp_url()]);
    assert_eq!(keys_of(&listed).len(), 4);
}

/// Two login nodes store their jobs' profiles into one PostgreSQL at once (each from its own
/// connection, the first opens racing to migrate the fresh database): every profile lands.
#[test]
fn two_login_nodes_write_one_postgres() {
    let server = PgServer::start();
    let url = server.socket_url();
    let nodes: Vec<_> = ["login1", "login2"]
        .into_iter()
        .map(|node| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut db = HistoryDb::open(&url).unwrap();
                for i in 0..25u32 {
                    let key = format!("{node}-{i}");
                    let p = job(&key, Some(&key), "app", node, T0 + f64::from(i), "N-N");
                    db.put(&p).unwrap();
                }
            })
        })
        .collect();
    for n in nodes {
        n.join().unwrap();
    }
    let all: Vec<JobProfile> =
        serde_json::from_str(&stdout(&["history", "export", "--db", &url])).unwrap();
    assert_eq!(all.len(), 50);
    for node in ["login1", "login2"] {
        assert_eq!(all.iter().filter(|p| p.user == node).count(), 25, "{node}");
    }
}

/// `eddy history import` on the IOR log PyDarshan ships: one profile stored under its
/// Darshan key, its volume and mode as the import reads them, shown and listed like any
/// other job; a file that is not a Darshan log stores nothing and names the file.
#[test]
fn darshan_logs_are_imported_into_the_history() {
    let python = eddy_history::darshan::interpreter().unwrap();
    let out = std::process::Command::new(&python)
        .args([
            "-c",
            "import darshan, os; print(os.path.dirname(darshan.__file__))",
        ])
        .output()
        .unwrap();
    let pkg = String::from_utf8(out.stdout).unwrap();
    let log =
        std::path::Path::new(pkg.trim()).join("examples/example_logs/ior_hdf5_example.darshan");
    assert!(log.exists(), "{} is shipped with PyDarshan", log.display());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.db");
    let bad = dir.path().join("not-a-log.darshan");
    std::fs::write(&bad, b"plain text").unwrap();

    let e = fails(&["history", "import", "--db", s(&db), s(&log), s(&bad)]);
    assert!(e.contains("not-a-log.darshan"), "{e}");
    assert!(HistoryDb::open(s(&db))
        .unwrap()
        .list(&Default::default())
        .unwrap()
        .is_empty());

    let json = stdout(&["history", "import", "--db", s(&db), s(&log), "--json"]);
    assert_eq!(keys_of(&json), ["darshan:32324925@1594155460"]);
    let shown: JobProfile = serde_json::from_str(&stdout(&[
        "history",
        "show",
        "--db",
        s(&db),
        "32324925",
        "--json",
    ]))
    .unwrap();
    // The figures of `python -m darshan summary` for this log (see
    // crates/eddy-history/tests/darshan.rs, which checks each against PyDarshan).
    assert_eq!(shown.read_bytes, 4_202_504);
    assert_eq!(shown.written_bytes, 4_195_800 + 2_421);
    assert_eq!(shown.io_mode, eddy_history::IoMode::N1);
    assert_eq!(shown.job_name.as_deref(), Some("ior"));
    let listed = stdout(&["history", "list", "--db", s(&db), "--job-name", "ior"]);
    assert!(listed.contains("darshan:32324925@1594155460"), "{listed}");
}
