//! `eddy sysmap` on this machine: the real binary describing a temporary directory and
//! /dev/shm, measuring them, writing the inventory database (twice, and from concurrent
//! processes) and reading it back; probing servers' health (decision 0039).

use eddy_testkit::cli::{fails, ok, s, text};
use serde_json::Value;
use std::path::Path;

fn json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", text(out)))
}

fn storage<'a>(rec: &'a Value, path: &str) -> &'a Value {
    rec["storage"]
        .as_array()
        .expect("storage array")
        .iter()
        .find(|s| s["path"] == path)
        .unwrap_or_else(|| panic!("no storage entry {path} in {rec:#}"))
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn collects_measures_stores_and_shows() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = s(dir.path());
    let db = dir.path().join("inv.db");
    let args = [
        "sysmap",
        "--node",
        "node-a",
        "--path",
        tmp,
        "--path",
        "/dev/shm",
        "--bench-mib",
        "4",
    ];
    let rec = json(&ok(&args));
    assert_eq!(rec["node"], "node-a");
    assert!(num(&rec["cores"]) >= 1.0);
    assert!(num(&rec["mem_total_bytes"]) >= num(&rec["mem_available_bytes"]));
    assert!(num(&rec["mem_available_bytes"]) > 0.0);
    let ifs = rec["interfaces"].as_array().unwrap();
    let lo = ifs.iter().find(|i| i["name"] == "lo").expect("lo listed");
    assert!(
        lo["ipv4"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "127.0.0.1/8"),
        "{lo}"
    );
    assert_eq!(lo["up"], true);
    assert!(num(&lo["mtu"]) > 0.0);
    for (path, class) in [(tmp, None), ("/dev/shm", Some("ram"))] {
        let st = storage(&rec, path);
        assert!(st["error"].is_null(), "{st}");
        assert!(num(&st["capacity_bytes"]) > 0.0, "{st}");
        assert!(
            num(&st["available_bytes"]) <= num(&st["capacity_bytes"]),
            "{st}"
        );
        assert!(num(&st["write_mib_s"]) > 0.0, "{st}");
        assert!(num(&st["read_mib_s"]) > 0.0, "{st}");
        assert!(
            st["mount_point"].is_string() && st["fs_type"].is_string(),
            "{st}"
        );
        if let Some(c) = class {
            assert_eq!(st["class"], c, "{st}");
            assert_eq!(st["fs_type"], "tmpfs", "{st}");
        } else {
            assert!(["nvme", "ssd", "hdd", "ram", "other"].contains(&st["class"].as_str().unwrap()));
        }
    }
    // The measurement leaves nothing behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    // Two runs into the database: the second replaces the first.
    let db_s = s(&db);
    ok(&[
        "sysmap",
        "--node",
        "node-a",
        "--path",
        tmp,
        "--bench-mib",
        "0",
        "--db",
        db_s,
    ]);
    let second = json(&ok(&[
        "sysmap",
        "--node",
        "node-a",
        "--path",
        "/dev/shm",
        "--bench-mib",
        "0",
        "--db",
        db_s,
    ]));
    ok(&[
        "sysmap",
        "--node",
        "node-b",
        "--path",
        tmp,
        "--bench-mib",
        "0",
        "--db",
        db_s,
    ]);
    let shown = json(&ok(&["sysmap", "show", "--db", db_s, "--node", "node-a"]));
    let shown = shown.as_array().unwrap();
    assert_eq!(shown.len(), 1);
    assert_eq!(
        shown[0], second,
        "show gives back what the last run printed"
    );
    let all = json(&ok(&["sysmap", "show", "--db", db_s]));
    let names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["node"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["node-a", "node-b"]);

    // The Slurm query: node-a has /dev/shm recorded, node-b the temporary directory.
    let cap = json(&ok(&[
        "sysmap",
        "capacity",
        "--db",
        db_s,
        "--path",
        &format!("{tmp}/job1"),
        "--node",
        "node-b",
    ]));
    assert_eq!(cap[0]["path"], tmp);
    assert!(num(&cap[0]["capacity_bytes"]) > 0.0);
    let err = fails(&[
        "sysmap", "capacity", "--db", db_s, "--path", "/dev/shm", "--node", "node-a", "--node",
        "node-zz",
    ]);
    assert!(err.contains("node-zz"), "{err}");
    let err = fails(&["sysmap", "show", "--db", s(&dir.path().join("missing.db"))]);
    assert!(err.contains("missing.db"), "{err}");
}

#[test]
fn unusable_paths_are_reported_not_fatal() {
    let out = ok(&[
        "sysmap",
        "--path",
        "/proc",
        "--path",
        "/no/such/dir",
        "--bench-mib",
        "1",
    ]);
    let rec = json(&out);
    let proc_ = storage(&rec, "/proc");
    assert!(
        proc_["error"]
            .as_str()
            .unwrap()
            .contains("cannot create a file in /proc"),
        "{proc_}"
    );
    assert!(proc_["write_mib_s"].is_null());
    let missing = storage(&rec, "/no/such/dir");
    assert!(
        missing["error"].as_str().unwrap().contains("/no/such/dir"),
        "{missing}"
    );
}

#[test]
fn default_paths_and_concurrent_writers() {
    // Without --path: the local block file systems plus /dev/shm and /tmp.
    let rec = json(&ok(&["sysmap", "--bench-mib", "0"]));
    assert!(!rec["node"].as_str().unwrap().contains('.'));
    let paths: Vec<&str> = rec["storage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"/dev/shm") && paths.contains(&"/tmp"),
        "{paths:?}"
    );
    assert!(
        !paths
            .iter()
            .any(|p| p.starts_with("/proc") || p.starts_with("/sys")),
        "{paths:?}"
    );

    // Eight processes at once on one database file: every record lands.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inv.db");
    let children: Vec<_> = (0..8)
        .map(|i| {
            eddy_testkit::cli::eddy_cmd()
                .args([
                    "sysmap",
                    "--bench-mib",
                    "0",
                    "--path",
                    "/dev/shm",
                    "--db",
                    s(&db),
                ])
                .args(["--node", &format!("n{i}")])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let all = json(&ok(&["sysmap", "show", "--db", s(&db)]));
    assert_eq!(all.as_array().unwrap().len(), 8, "{all:#}");
    assert!(Path::new(&db).exists());
}

/// `eddy sysmap probe` with a launcher that runs the server here (`{cmd}` alone): two hosts
/// on loopback are measured and healthy; one whose address is not this machine's cannot
/// start its server, is down and anomalous; all three land in the inventory, and `eddy
/// sysmap health` reads them back.
#[test]
fn probe_records_health_and_a_down_server() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inv.db");
    let hosts = dir.path().join("hosts");
    // 192.0.2.1: TEST-NET-1, never an address of this host.
    std::fs::write(&hosts, "a 127.0.0.1\nb 127.0.0.1\ngone 192.0.2.1\n").unwrap();
    let store = dir.path().join("{host}");
    for h in ["a", "b", "gone"] {
        std::fs::create_dir(dir.path().join(h)).unwrap();
    }
    let out = ok(&[
        "sysmap",
        "probe",
        "--db",
        s(&db),
        "--hosts",
        s(&hosts),
        "--launcher",
        "{cmd}",
        "--dir",
        s(&store),
        "--bytes",
        "1M",
        "--bound",
        "20",
        // "a" and "b" are one disk probed at once: their rates differ by chance (a site's
        // servers have a disk each); only a down server must be anomalous here.
        "--anomaly-ratio",
        "0.05",
    ]);
    let rows = json(&out);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    for r in &rows[..2] {
        assert!(num(&r["bandwidth"]) > 0.0, "{r}");
        assert_eq!(r["anomalous"], false, "{r}");
    }
    assert_eq!(rows[2]["host"], "gone");
    assert!(rows[2]["bandwidth"].is_null());
    assert_eq!(rows[2]["anomalous"], true);
    assert!(
        rows[2]["error"].as_str().unwrap().contains("192.0.2.1"),
        "{}",
        rows[2]
    );
    // The probes' files are gone; the inventory is private.
    for h in ["a", "b", "gone"] {
        assert_eq!(std::fs::read_dir(dir.path().join(h)).unwrap().count(), 0);
    }
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&db).unwrap().permissions().mode() & 0o077,
        0
    );
    let out = ok(&["sysmap", "health", "--db", s(&db), "--node", "gone"]);
    let back = json(&out);
    assert_eq!(back.as_array().unwrap().len(), 1);
    assert_eq!(back[0]["anomalous"], true);
    // A bound of nothing is refused.
    let err = fails(&[
        "sysmap",
        "probe",
        "--db",
        s(&db),
        "--hosts",
        s(&hosts),
        "--dir",
        "/x",
        "--bound",
        "0",
    ]);
    assert!(err.contains("--bound"), "{err}");
}
