//! `eddy walltime`: replay of a generated SWF trace (several users whose jobs repeat, one
//! who does not), and a prediction from a JSON history.

use eddy_testkit::cli::{fails, ok};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

/// An SWF trace of `n` jobs: users 1–4 repeat their runtime (±2 %) under a request 2–8× as
/// long; user 5 runs anything up to its request.
fn swf_trace(n: usize, seed: u64) -> String {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out =
        String::from("; Version: 2.2\n; Computer: eddy walltime test\n; MaxJobs: generated\n");
    let mut t = 0u64;
    for id in 1..=n {
        let user = 1 + id % 5;
        t += rng.gen_range(200..2000);
        let (run, req) = match user {
            5 => (rng.gen_range(60..36_000u64), 36_000u64),
            u => {
                let base = 900 * u as u64;
                let run = base + rng.gen_range(0..base / 50);
                (run, base * (2 + u as u64 * 3 / 2))
            }
        };
        let wait = rng.gen_range(0..300);
        let procs = 4 * user;
        out.push_str(&format!(
            "{id} {t} {wait} {run} {procs} -1 -1 {procs} {req} 2048 1 {user} 1 -1 1 -1 -1 -1\n"
        ));
    }
    out
}

#[test]
fn replay_of_an_swf_trace_shows_easy_beating_the_request() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.swf");
    std::fs::write(&trace, swf_trace(400, 22)).unwrap();
    let path = trace.to_str().unwrap();

    let out = ok(&["walltime", "replay", path, "--swf", "--json"]);
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["jobs"], 400);
    assert!(e["easy_predicted"].as_u64().unwrap() > 350, "{e}");
    assert!(e["adaboost_predicted"].as_u64().unwrap() > 300, "{e}");
    let rows = e["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 9, "3 predictors × 3 corrections");
    for r in rows {
        for share in ["within_20", "underestimates"] {
            let v = r[share].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&v), "{share} {v} in {r}");
        }
        assert!(r["mae"].as_f64().unwrap() >= 0.0);
        if r["correction"] == "none" {
            assert_eq!(r["mean_corrections"].as_f64().unwrap(), 0.0, "{r}");
        }
    }
    let row = |p: &str, c: &str| {
        rows.iter()
            .find(|r| r["predictor"] == p && r["correction"] == c)
            .unwrap()
            .clone()
    };
    let request = row("request", "none");
    let easy = row("easy++", "none");
    let boost = row("adaboost", "none");
    // The request never underestimates and no correction changes it.
    assert_eq!(request["underestimates"].as_f64().unwrap(), 0.0);
    assert_eq!(row("request", "power")["mae"], request["mae"]);
    // Four users in five repeat: EASY++ is far closer than the request, and so is AdaBoost.
    assert!(
        easy["mae"].as_f64().unwrap() < request["mae"].as_f64().unwrap() / 2.0,
        "{easy} vs {request}"
    );
    assert!(
        easy["within_20"].as_f64().unwrap() > 0.6 && request["within_20"].as_f64().unwrap() < 0.2,
        "{easy} vs {request}"
    );
    assert!(
        boost["mae"].as_f64().unwrap() < request["mae"].as_f64().unwrap(),
        "{boost} vs {request}"
    );
    // Corrections remove underestimates short of the request.
    let easy_simple = row("easy++", "simple");
    assert!(
        easy_simple["underestimates"].as_f64().unwrap() <= easy["underestimates"].as_f64().unwrap()
    );
    assert!(easy_simple["mean_corrections"].as_f64().unwrap() > 0.0);

    // The table: a header line, a column line and nine rows.
    let text = String::from_utf8(ok(&["walltime", "replay", path, "--swf"]).stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 11, "{text}");
    assert!(lines[0].starts_with("400 jobs"), "{text}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("easy++") && l.contains("power")),
        "{text}"
    );

    // Wrong format: an error naming the line, not a panic.
    fails(&["walltime", "replay", path, "--sacct-text"]);
}

#[test]
fn predict_from_a_json_history() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history.json");
    // alice runs 30 jobs of 20 min under a 2-h request, the last two 1100 s and 1300 s;
    // bob has one job.
    let mut jobs = Vec::new();
    for i in 0..30i64 {
        let runtime = match i {
            28 => 1100,
            29 => 1300,
            _ => 1200,
        };
        let submit = i * 10_000;
        jobs.push(json!({"id": i.to_string(), "user": "alice", "cpus": 8, "mem_mb": 8192.0, "limit": 7200,
            "submit": submit, "start": submit + 10, "end": submit + 10 + runtime, "runtime": runtime}));
    }
    jobs.push(json!({"id": "b1", "user": "bob", "cpus": 1, "limit": 600, "submit": 5, "start": 5, "end": 65, "runtime": 60}));
    std::fs::write(&history, serde_json::to_string(&jobs).unwrap()).unwrap();
    let h = history.to_str().unwrap();

    let out = ok(&[
        "walltime",
        "predict",
        "--history",
        h,
        "--user",
        "alice",
        "--cpus",
        "8",
        "--mem",
        "8G",
        "--time",
        "02:00:00",
        "--json",
    ]);
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p["request"], 7200);
    assert_eq!(p["easy++"], 1200, "mean of 1100 and 1300: {p}");
    let boost = p["adaboost"].as_u64().unwrap();
    assert!((900..=1500).contains(&boost), "{p}");
    assert_ne!(p["used"], "request", "{p}");
    assert!(p["walltime"].as_u64().unwrap() <= 7200);

    // bob: too little history for EASY++; a prediction never exceeds the request.
    let out = ok(&[
        "walltime",
        "predict",
        "--history",
        h,
        "--user",
        "bob",
        "--cpus",
        "1",
        "--time",
        "10",
        "--json",
    ]);
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p["easy++"], Value::Null);
    assert!(p["walltime"].as_u64().unwrap() <= 600, "{p}");

    let text = String::from_utf8(
        ok(&[
            "walltime",
            "predict",
            "--history",
            h,
            "--user",
            "alice",
            "--cpus",
            "8",
            "--time",
            "2:00:00",
        ])
        .stdout,
    )
    .unwrap();
    assert!(text.contains("easy++    00:20:00"), "{text}");
    fails(&[
        "walltime",
        "predict",
        "--history",
        h,
        "--user",
        "alice",
        "--cpus",
        "8",
        "--time",
        "two hours",
    ]);
}
