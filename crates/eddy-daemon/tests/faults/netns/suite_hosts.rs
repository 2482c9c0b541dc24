//! `eddy bench suite --hosts 3`: the netns host layout (decision 0042) at small sizes: the
//! layout recorded, the daemons in three namespaces, every run verified, nothing left.

use super::*;

#[test]
fn bench_suite_runs_in_the_netns_host_layout() {
    eddy_testkit::require::netns();
    eddy_testkit::require::fuse();
    let dir = tempfile::tempdir().unwrap();
    let (table, v) = host_suite(dir.path(), &[]);
    assert!(
        table.contains("eddy, eddy-lib, eddy-preload vs raw"),
        "{table}"
    );

    let layout = &v["layout"];
    assert_eq!(layout["name"], "3 hosts (netns)", "{layout}");
    assert_eq!(layout["hosts"], 3);
    let namespaces = layout_namespaces(&v);
    assert_eq!(namespaces.len(), 3, "{layout}");
    // The daemons ran in the three namespaces: three addresses, one per host, on the
    // namespaces' bridge network, none on loopback.
    let daemons: Vec<&str> = layout["daemons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert_eq!(daemons.len(), 3, "{layout}");
    let ips: Vec<std::net::Ipv4Addr> = daemons
        .iter()
        .map(|d| d.parse::<std::net::SocketAddrV4>().unwrap().ip().to_owned())
        .collect();
    for (i, ip) in ips.iter().enumerate() {
        assert!(!ip.is_loopback(), "{layout}");
        assert_eq!(
            ip.octets()[3] as usize,
            i + 1,
            "daemon {i} is not host {i}: {layout}"
        );
        assert_eq!(
            ip.octets()[..3],
            ips[0].octets()[..3],
            "one network: {layout}"
        );
    }

    // Every run measured every phase, verified (a failed verification fails the run), with
    // positive finite figures.
    let runs = v["runs"].as_array().unwrap();
    let labels: Vec<&str> = runs.iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["raw", "eddy", "eddy-lib", "eddy-preload"]);
    let phase_names = |r: &serde_json::Value| -> Vec<String> {
        r["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["phase"].as_str().unwrap().to_string())
            .collect()
    };
    let expected = phase_names(&runs[0]);
    for name in [
        "ior-easy-write",
        "ior-easy-read",
        "ior-hard-write",
        "ior-hard-read",
        "mdtest-easy-write",
        "mdtest-easy-stat",
        "mdtest-easy-delete",
    ] {
        assert!(expected.iter().any(|p| p == name), "{name}: {expected:?}");
    }
    for r in runs {
        assert_eq!(phase_names(r), expected, "{}", r["label"]);
        assert_eq!(r["procs"], 3);
        for p in r["phases"].as_array().unwrap() {
            assert!(p["ops"].as_u64().unwrap() > 0, "{}: {p}", r["label"]);
            let secs = p["seconds"].as_f64().unwrap();
            assert!(secs.is_finite() && secs > 0.0, "{}: {p}", r["label"]);
            let figure = if p["kind"] == "bw" {
                p["mib_s"].as_f64().unwrap()
            } else {
                p["kiops"].as_f64().unwrap()
            };
            assert!(figure.is_finite() && figure > 0.0, "{}: {p}", r["label"]);
        }
    }

    // No namespace (hosts or bridge) is left, no process in them, no storage but the JSON.
    let list = run("ip", &["netns", "list"]);
    let list = String::from_utf8_lossy(&list.stdout);
    let prefix = namespaces[0].trim_end_matches("s0");
    assert!(
        !list.lines().any(|l| l.starts_with(prefix)),
        "namespaces of the suite are left: {list}"
    );
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["suite.json"]);
}
