//! `eddy alloc replay --from` a JSON export of realistic profiles (the paper's Table 4 shape,
//! figures worked out by hand from the profiles below) and `eddy alloc explain` against an
//! SQLite history with a pool file: the scaling rule with F and S from the history, the
//! newest run at the job's scale, isolation of an N-1 job from a busy neighbour, anomaly
//! screening, a job without history, and a bad policy file refused.

use eddy_history::{HistoryDb, JobProfile};
use eddy_testkit::cli::{fails, ok, s};
use eddy_testkit::profiles::{profile, Run};
use serde_json::{json, Value};

/// 2026-09-21T14:13:20Z.
const T0: f64 = 1_790_000_000.0;
const GIB: u64 = 1 << 30;

fn run(
    key: &str,
    name: &str,
    start: f64,
    seconds: u32,
    nodes: u32,
    per_node: u64,
    mode: &str,
) -> Value {
    profile(&Run {
        key,
        job_id: Some(key),
        job_name: name,
        user: "alice",
        script_hash: &format!("sha256:{name}"),
        start,
        seconds,
        nodes,
        bytes_per_node: per_node,
        mode,
    })
}

/// Five runs. With a 1 GB/s server and V_min 10 GB: each cfd node peaks at 1.1 x 2 GiB / 30 s
/// = 78.7 MB/s, so F = ceil(1e9 / 78.7e6) = 13 and N_min = F = 13.
/// - cfd, 16 nodes, 64 GiB: scaled, S = ceil(16 / 13) = 2;
/// - wrf, 1 node, 16 GiB: F = 4, N_A 1 < 4: refused at the I/O nodes;
/// - post, 4 nodes, 512 MiB: refused at V_min;
/// - cfd, 32 nodes, 128 GiB: scaled, S = ceil(32 / 13) = 3;
/// - dndc, 16 nodes, 64 GiB, metadata queue 50 >= 32: refused as metadata-bound.
fn history() -> Vec<Value> {
    let mut dndc = run("105", "dndc", T0 + 360.0, 60, 16, 2 * GIB, "N-N");
    dndc["mean_metadata_queue"] = json!(50.0);
    vec![
        run("101", "cfd", T0, 60, 16, 2 * GIB, "N-N"),
        run("102", "wrf", T0 + 60.0, 60, 1, 8 * GIB, "1-1"),
        run("103", "post", T0 + 180.0, 120, 4, 64 << 20, "N-N"),
        run("104", "cfd", T0 + 300.0, 60, 32, 2 * GIB, "N-N"),
        dndc,
    ]
}

/// Runs of spaces as one.
fn squeeze(text: &str) -> String {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

fn stdout(args: &[&str]) -> String {
    String::from_utf8(ok(args).stdout).unwrap()
}

const POLICY: &str = "# a site's policy\n[alloc]\nv_min_bytes = 10_000_000_000\n";

#[test]
fn replay_prints_table_4_of_an_export() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export.json");
    std::fs::write(&export, serde_json::to_string(&history()).unwrap()).unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
    let args = [
        "alloc",
        "replay",
        "--from",
        s(&export),
        "--servers",
        "8",
        "--server-bandwidth",
        "1G",
        "--policy",
        s(&policy),
    ];
    // Columns compared with their spacing collapsed.
    let text = squeeze(&stdout(&args));
    // Node-seconds: 16x60 + 1x60 + 4x120 + 32x60 + 16x60 = 4380.
    for line in [
        "replay of 5 job(s)",
        "on 8 idle server(s) of 953.7 MiB/s",
        // 960 + 1920 of 4380.
        "upgraded (scaled)                          2    40.0%        65.8%",
        "refused: no history                        0     0.0%         0.0%",
        "refused: I/O volume < V_min                1    20.0%        11.0%",
        "refused: I/O nodes < N_min                 1    20.0%         1.4%",
        "refused: metadata queue >= W_metadata      1    20.0%        21.9%",
        // (2 + 1 + 1 + 3 + 1) / 5.
        "mean servers per job: 1.60",
        // 2x60 + 60 + 120 + 3x60 + 60 = 540 server-seconds over 420 s.
        "mean servers in use: 1.29",
    ] {
        let line = squeeze(line);
        assert!(text.contains(&line), "no {line:?} in:\n{text}");
    }

    let mut json_args = args.to_vec();
    json_args.push("--json");
    let r: Value = serde_json::from_str(&stdout(&json_args)).unwrap();
    let per_job: Vec<(String, String, u64)> = r["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["key"].as_str().unwrap().to_string(),
                d["rule"].as_str().unwrap().to_string(),
                d["servers"].as_u64().unwrap(),
            )
        })
        .collect();
    let want = [
        ("101", "scaled", 2),
        ("102", "default", 1),
        ("103", "default", 1),
        ("104", "scaled", 3),
        ("105", "default", 1),
    ];
    let want: Vec<(String, String, u64)> = want
        .iter()
        .map(|(k, r, n)| (k.to_string(), r.to_string(), *n))
        .collect();
    assert_eq!(per_job, want);
    assert_eq!(r["decisions"][4]["refused_at"], "metadata");
    assert!((r["node_hours"].as_f64().unwrap() - 4380.0 / 3600.0).abs() < 1e-9);

    // A bad policy is refused with the key named.
    std::fs::write(&policy, "[alloc]\nalpha = 0\n").unwrap();
    let err = fails(&args);
    assert!(err.contains("alloc.alpha"), "{err}");
}

#[test]
fn explain_decides_from_the_history_database() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("history.db");
    let mut db = HistoryDb::open(s(&db_path)).unwrap();
    let mut runs = history();
    runs.push(run("106", "ckpt", T0 + 500.0, 60, 4, 64 << 20, "N-1"));
    for v in runs {
        let p: JobProfile = serde_json::from_value(v).unwrap();
        db.put(&p).unwrap();
    }
    drop(db);
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
    // Six servers of 1 GB/s: server 0 carries a running job doing 300 MB/s now, server 5
    // delivers a tenth of its peers' bandwidth.
    let servers: Vec<Value> = (0..6)
        .map(|i| {
            json!({
                "id": i,
                "host": format!("io{i}"),
                "peak_bandwidth": 1e9,
                "recent_bandwidth": if i == 5 { 9e7 } else { 9e8 },
                "jobs": if i == 0 {
                    json!([{ "job": "climate", "live": { "bytes_per_s": 3e8, "iops": 300.0, "metadata_rate": 2.0 } }])
                } else {
                    json!([])
                },
            })
        })
        .collect();
    let pool = dir.path().join("pool.json");
    std::fs::write(&pool, serde_json::to_string(&servers).unwrap()).unwrap();
    let explain = |name: &str, nodes: &str| {
        stdout(&[
            "alloc",
            "explain",
            "--job-name",
            name,
            "--script-hash",
            &format!("sha256:{name}"),
            "--user",
            "alice",
            "--nodes",
            nodes,
            "--pool",
            s(&pool),
            "--db",
            s(&db_path),
            "--policy",
            s(&policy),
        ])
    };

    // cfd on 16 nodes: its 16-node run (101), not the newer 32-node one; two idle servers,
    // never the busy 0 nor the anomalous 5.
    let text = explain("cfd", "16");
    for line in [
        "job cfd (script sha256:cfd, user alice), 16 node(s): 2 run(s) in the history",
        "decision: scaled on 2 server(s): 1,2",
        "first scaling test failed: none",
        "excluded servers: 5",
        "server 5 (io5) excluded as anomalous: recent bandwidth 85.8 MiB/s < 0.50 x the pool's median 858.3 MiB/s",
        "history: run 101",
        "F = ceil(B_f 953.7 MiB/s / B_c 75.1 MiB/s) = 13, S = ceil(N_A 16 / F 13) = 2",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
    // At 32 nodes: run 104, S = 3.
    let text = explain("cfd", "32");
    assert!(
        text.contains("decision: scaled on 3 server(s): 1,2,3"),
        "{text}"
    );
    assert!(text.contains("history: run 104"), "{text}");

    // An N-1 checkpoint job, too small to scale, is kept off the busy default server 0.
    let text = explain("ckpt", "4");
    for line in [
        "decision: isolated on 1 server(s): 1",
        "first scaling test failed: I/O volume < V_min",
        "interference-prone: N-1",
        "server 0: it would disturb neighbour climate (doing I/O, live)",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }

    // A job never seen: the default server, and why.
    let text = explain("new-app", "8");
    assert!(
        text.contains("decision: default on 1 server(s): 0"),
        "{text}"
    );
    assert!(
        text.contains("first scaling test failed: no history"),
        "{text}"
    );

    // JSON: the same decision, whole.
    let out = stdout(&[
        "alloc",
        "explain",
        "--job-name",
        "cfd",
        "--script-hash",
        "sha256:cfd",
        "--nodes",
        "16",
        "--pool",
        s(&pool),
        "--db",
        s(&db_path),
        "--policy",
        s(&policy),
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["decision"]["rule"], "scaled");
    assert_eq!(v["decision"]["servers"], json!([1, 2]));
    assert_eq!(v["decision"]["excluded"], json!([5]));
    assert_eq!(v["history"], "101");
}
