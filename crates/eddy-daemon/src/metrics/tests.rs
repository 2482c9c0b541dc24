//! The encoding of a hand-built snapshot, parsed back line by line.

use super::*;
use eddy_proto::stats::{BackendStats, ClientId, ClientStats, OpStats, StoreStats};
use std::collections::{BTreeMap, BTreeSet};

fn hist(values: &[u64]) -> Histogram {
    let mut h = Histogram::default();
    for &v in values {
        h.record(v);
    }
    h
}

fn op(name: &str, count: u64, errors: u64, bytes: u64, sizes: &[u64], us: &[u64]) -> OpStats {
    OpStats {
        op: name.into(),
        metadata: !matches!(name, "write" | "read"),
        count,
        errors,
        bytes,
        sizes: hist(sizes),
        queue_us: hist(&us.iter().map(|u| u / 10).collect::<Vec<_>>()),
        service_us: hist(us),
    }
}

fn snapshot() -> DaemonStats {
    DaemonStats {
        daemon: 2,
        host: "n2".into(),
        job: "job \"7\"".into(),
        started_ms: 1_700_000_000_500,
        now_ms: 1_700_000_010_000,
        counting: true,
        ops: vec![
            op("write", 3, 0, 3 * 4096, &[4096; 3], &[5, 900, 70_000]),
            op("read", 2, 1, 1000, &[1000, 0], &[3, 3]),
            op("stat", 4, 2, 0, &[], &[1, 2, 1, 1]),
        ],
        clients: vec![
            ClientStats {
                client: ClientId {
                    host: "c1".into(),
                    pid: 41,
                    rank: Some(0),
                },
                key: 1,
                ops: 5,
                metadata_ops: 4,
                read_bytes: 1000,
                written_bytes: 0,
                errors: 3,
                first_ms: 0,
                last_ms: 0,
            },
            ClientStats {
                client: ClientId {
                    host: "c2".into(),
                    pid: 42,
                    rank: None,
                },
                key: 2,
                ops: 3,
                written_bytes: 3 * 4096,
                first_ms: 5,
                ..ClientStats::default()
            },
        ],
        queued: 1,
        in_flight: 4,
        errors: vec![(libc::ENOENT, 2), (libc::EIO, 1), (4242, 1)],
        backend: BackendStats {
            reads: 6,
            writes: 7,
            read_bytes: 800,
            written_bytes: 900,
            read_ahead_bytes: 300,
            merged_reads: 11,
            merged_writes: 13,
        },
        backends: vec![
            StoreStats {
                name: "fast".into(),
                read_bytes: 500,
                written_bytes: 600,
                placed_files: 2,
                placed_bytes: 700,
                ..StoreStats::default()
            },
            StoreStats {
                name: "archive".into(),
                written_bytes: 300,
                failures: 1,
                ..StoreStats::default()
            },
        ],
        leases: eddy_proto::stats::LeaseStats {
            grants: 21,
            recalls: 5,
            revocations: 1,
            refused: 3,
            batched_ops: 640,
        },
        ..DaemonStats::default()
    }
}

/// One sample line: its name, labels and value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses a sample line of the text format (version 0.0.4), or says why it is not one.
fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(['{', ' '])
        .ok_or_else(|| format!("no value: {line}"))?;
    let name = &line[..name_end];
    if !is_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices().peekable();
        let end;
        loop {
            let key_start = chars.peek().map(|&(i, _)| i).ok_or("labels cut short")?;
            if inner[key_start..].starts_with('}') {
                end = Some(key_start + 1);
                break;
            }
            let eq = inner[key_start..].find('=').ok_or("label without =")? + key_start;
            let key = &inner[key_start..eq];
            if !is_name(key) || key.contains(':') {
                return Err(format!("bad label name {key:?}"));
            }
            while chars.peek().is_some_and(|&(i, _)| i <= eq) {
                chars.next();
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err(format!("label {key} value not quoted"));
            }
            let mut value = String::new();
            loop {
                match chars.next().ok_or("label value cut short")?.1 {
                    '"' => break,
                    '\\' => match chars.next().ok_or("escape cut short")?.1 {
                        'n' => value.push('\n'),
                        c @ ('\\' | '"') => value.push(c),
                        c => return Err(format!("bad escape \\{c}")),
                    },
                    '\n' => return Err("newline in a label value".into()),
                    c => value.push(c),
                }
            }
            if labels.insert(key.to_string(), value).is_some() {
                return Err(format!("label {key} twice"));
            }
            match chars.next().ok_or("labels cut short")? {
                (_, ',') => {}
                (i, '}') => {
                    end = Some(i + 1);
                    break;
                }
                (_, c) => return Err(format!("unexpected {c:?} after a label")),
            }
        }
        rest = &inner[end.ok_or("labels not closed")?..];
    }
    let value_text = rest
        .strip_prefix(' ')
        .ok_or_else(|| format!("no space before the value: {line}"))?;
    let value = match value_text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        t => t.parse().map_err(|e| format!("bad value {t:?}: {e}"))?,
    };
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Every line is a HELP, a TYPE or a sample of a declared family; returns the samples.
fn parse(text: &str) -> Vec<Sample> {
    assert!(text.ends_with('\n'), "the text ends with a newline");
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or("");
            assert!(is_name(name), "HELP of a bad name: {line}");
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let words: Vec<&str> = rest.split(' ').collect();
            assert_eq!(words.len(), 2, "{line}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&words[1]),
                "{line}"
            );
            assert!(
                types
                    .insert(words[0].to_string(), words[1].to_string())
                    .is_none(),
                "family declared twice: {line}"
            );
        } else {
            let s = parse_sample(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    s.name
                        .strip_suffix(suffix)
                        .filter(|f| types.get(*f).is_some_and(|t| t == "histogram"))
                })
                .unwrap_or(&s.name);
            assert!(types.contains_key(family), "sample before its TYPE: {line}");
            samples.push(s);
        }
    }
    samples
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn value(samples: &[Sample], name: &str, pairs: &[(&str, &str)]) -> Option<f64> {
    let want = labels(pairs);
    samples
        .iter()
        .find(|s| s.name == name && s.labels == want)
        .map(|s| s.value)
}

const JOB: (&str, &str) = ("job", "job \"7\"");
const DAEMON: (&str, &str) = ("daemon", "2");

#[test]
fn every_line_is_exposition_and_the_samples_are_the_snapshots() {
    let text = encode(snapshot(), 64).unwrap();
    let samples = parse(&text);
    let get = |name: &str, more: &[(&str, &str)]| {
        let mut pairs = vec![JOB, DAEMON];
        pairs.extend_from_slice(more);
        value(&samples, name, &pairs).unwrap_or_else(|| panic!("{name} {more:?} in\n{text}"))
    };
    assert_eq!(get("eddy_operations_total", &[("op", "write")]), 3.0);
    assert_eq!(get("eddy_operations_total", &[("op", "stat")]), 4.0);
    assert_eq!(get("eddy_operation_errors_total", &[("op", "read")]), 1.0);
    assert_eq!(get("eddy_bytes_written_total", &[("op", "write")]), 12288.0);
    assert_eq!(get("eddy_bytes_read_total", &[("op", "read")]), 1000.0);
    // A read's bytes are not written ones, and ops without bytes have no byte series.
    assert!(value(
        &samples,
        "eddy_bytes_written_total",
        &[JOB, DAEMON, ("op", "read")]
    )
    .is_none());
    assert!(!samples
        .iter()
        .any(|s| s.name.starts_with("eddy_bytes_") && s.labels["op"] == "stat"));
    assert_eq!(get("eddy_requests_queued", &[]), 1.0);
    assert_eq!(get("eddy_requests_in_flight", &[]), 4.0);
    let c1 = [
        ("client_host", "c1"),
        ("client_pid", "41"),
        ("client_rank", "0"),
    ];
    assert_eq!(get("eddy_client_bytes_read_total", &c1), 1000.0);
    assert_eq!(get("eddy_client_metadata_operations_total", &c1), 4.0);
    assert_eq!(get("eddy_client_errors_total", &c1), 3.0);
    // No rank: the label is empty, which Prometheus reads as absent.
    let c2 = [
        ("client_host", "c2"),
        ("client_pid", "42"),
        ("client_rank", ""),
    ];
    assert_eq!(get("eddy_client_bytes_written_total", &c2), 12288.0);
    assert_eq!(get("eddy_client_operations_total", &c2), 3.0);
    assert_eq!(get("eddy_errors_total", &[("errno", "ENOENT")]), 2.0);
    assert_eq!(get("eddy_errors_total", &[("errno", "EIO")]), 1.0);
    assert_eq!(get("eddy_errors_total", &[("errno", "4242")]), 1.0);
    assert_eq!(get("eddy_backend_bytes_read_total", &[]), 800.0);
    assert_eq!(get("eddy_backend_bytes_read_ahead_total", &[]), 300.0);
    assert_eq!(get("eddy_backend_bytes_written_total", &[]), 900.0);
    assert_eq!(
        get("eddy_backend_operations_total", &[("dir", "read")]),
        6.0
    );
    assert_eq!(
        get("eddy_backend_merged_requests_total", &[("dir", "read")]),
        11.0
    );
    assert_eq!(
        get("eddy_backend_merged_requests_total", &[("dir", "write")]),
        13.0
    );
    assert_eq!(
        get("eddy_backend_operations_total", &[("dir", "write")]),
        7.0
    );
    // Directory leases (decision 0075).
    assert_eq!(get("eddy_lease_grants_total", &[]), 21.0);
    assert_eq!(get("eddy_lease_recalls_total", &[]), 5.0);
    assert_eq!(get("eddy_lease_revocations_total", &[]), 1.0);
    assert_eq!(get("eddy_lease_refused_total", &[]), 3.0);
    assert_eq!(get("eddy_lease_batched_ops_total", &[]), 640.0);
    // Per backend (decision 0073).
    let fast = [("backend", "fast")];
    let archive = [("backend", "archive")];
    assert_eq!(get("eddy_backend_store_bytes_read_total", &fast), 500.0);
    assert_eq!(get("eddy_backend_store_bytes_written_total", &fast), 600.0);
    assert_eq!(get("eddy_backend_store_placed_files_total", &fast), 2.0);
    assert_eq!(get("eddy_backend_store_placed_bytes_total", &fast), 700.0);
    assert_eq!(
        get("eddy_backend_store_bytes_written_total", &archive),
        300.0
    );
    assert_eq!(get("eddy_backend_store_failures_total", &archive), 1.0);
    assert_eq!(get("eddy_start_time_seconds", &[]), 1_700_000_000.5);
    assert_eq!(get("eddy_counting", &[]), 1.0);
    // The exact bounds: 4096-byte writes are above le=4095, within le=16383.
    let size = |le: &str| {
        get(
            "eddy_request_size_bytes_bucket",
            &[("op", "write"), ("le", le)],
        )
    };
    assert_eq!((size("4095"), size("16383")), (0.0, 3.0));
    assert_eq!(
        get("eddy_request_size_bytes_count", &[("op", "write")]),
        3.0
    );
    // 70 000 µs = 0.07 s: above (2^16 − 1) µs, within (2^18 − 1) µs.
    let service = |le: &str| {
        get(
            "eddy_service_seconds_bucket",
            &[("op", "write"), ("le", le)],
        )
    };
    assert_eq!(service("0.065535"), 2.0);
    assert_eq!(service("0.262143"), 3.0);
    // Sizes are counted for requests carrying data only, their sum exactly; latency sums
    // are estimates within the bounds the header states.
    assert_eq!(
        get("eddy_request_size_bytes_sum", &[("op", "write")]),
        12288.0
    );
    assert!(value(
        &samples,
        "eddy_request_size_bytes_count",
        &[JOB, DAEMON, ("op", "stat")]
    )
    .is_none());
    let sum = get("eddy_service_seconds_sum", &[("op", "write")]);
    let exact = (5.0 + 900.0 + 70_000.0) / 1e6;
    assert!((0.75 * exact..=1.5 * exact).contains(&sum), "{sum}");
}

#[test]
fn histogram_buckets_are_cumulative_and_end_with_inf_equal_to_count() {
    let text = encode(snapshot(), 64).unwrap();
    let samples = parse(&text);
    // (name, labels but le) -> [(le, count)]
    type Series = BTreeMap<(String, BTreeMap<String, String>), Vec<(f64, f64)>>;
    let mut series = Series::new();
    for s in samples.iter().filter(|s| s.name.ends_with("_bucket")) {
        let mut rest = s.labels.clone();
        let le = rest.remove("le").expect("a bucket has le");
        let le: f64 = match le.as_str() {
            "+Inf" => f64::INFINITY,
            t => t.parse().expect("le is a number"),
        };
        series
            .entry((s.name.clone(), rest))
            .or_default()
            .push((le, s.value));
    }
    let families: BTreeSet<&str> = series.keys().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        families,
        BTreeSet::from([
            "eddy_queue_wait_seconds_bucket",
            "eddy_request_size_bytes_bucket",
            "eddy_service_seconds_bucket"
        ])
    );
    assert_eq!(
        series.len(),
        8,
        "latencies for each of the three ops, sizes for the two carrying data"
    );
    for ((name, rest), buckets) in &series {
        for pair in buckets.windows(2) {
            assert!(pair[0].0 < pair[1].0, "{name} {rest:?}: le ascending");
            assert!(pair[0].1 <= pair[1].1, "{name} {rest:?}: cumulative");
        }
        let (last_le, last) = *buckets.last().unwrap();
        assert_eq!(last_le, f64::INFINITY, "{name} ends with +Inf");
        let family = name.strip_suffix("_bucket").unwrap();
        let pairs: Vec<(&str, &str)> = rest.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            value(&samples, &format!("{family}_count"), &pairs),
            Some(last)
        );
        assert!(value(&samples, &format!("{family}_sum"), &pairs).is_some());
    }
}

#[test]
fn an_empty_snapshot_still_encodes() {
    let samples = parse(&encode(DaemonStats::default(), 64).unwrap());
    assert!(samples.iter().any(|s| s.name == "eddy_requests_in_flight"));
    assert!(!samples.iter().any(|s| s.name == "eddy_operations_total"));
}

#[test]
fn clients_past_the_bound_are_summed_in_one_series() {
    let samples = parse(&encode(snapshot(), 1).unwrap());
    let get = |name: &str, more: &[(&str, &str)]| {
        let mut pairs = vec![JOB, DAEMON];
        pairs.extend_from_slice(more);
        value(&samples, name, &pairs)
    };
    // The first to arrive is named; the later one is in `_others`.
    let c1 = [
        ("client_host", "c1"),
        ("client_pid", "41"),
        ("client_rank", "0"),
    ];
    assert_eq!(get("eddy_client_operations_total", &c1), Some(5.0));
    let others = [
        ("client_host", OTHER_CLIENTS),
        ("client_pid", ""),
        ("client_rank", ""),
    ];
    assert_eq!(
        get("eddy_client_bytes_written_total", &others),
        Some(12288.0)
    );
    let series = samples
        .iter()
        .filter(|s| s.name == "eddy_client_operations_total")
        .count();
    assert_eq!(series, 2);
}
