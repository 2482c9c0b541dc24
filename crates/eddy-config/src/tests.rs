//! Tests of the configuration: defaults, parsing, validation and the files it is read from.

use super::*;

#[test]
fn relatime_moves_atime_once_per_change_or_day() {
    let day = Atime::RELATIME_STALE_S;
    let r = Atime::Relatime;
    // Read after a change (atime not later than mtime or ctime): moves.
    assert!(r.due((100, 0), (100, 0), (50, 0), 200));
    assert!(r.due((100, 0), (50, 0), (100, 5), 200));
    // Read again: stays, until the atime is a day old.
    assert!(!r.due((100, 1), (100, 0), (100, 0), 200));
    assert!(!r.due((100, 1), (100, 0), (100, 0), 100 + day - 1));
    assert!(r.due((100, 1), (100, 0), (100, 0), 100 + day));
    assert!(Atime::Strictatime.due((100, 1), (0, 0), (0, 0), 100));
    assert!(!Atime::Noatime.due((0, 0), (100, 0), (100, 0), 100 + day));
    // Any times a request may carry: no overflow.
    assert!(r.due((i64::MIN + 1, 0), (i64::MIN, 0), (i64::MIN, 0), i64::MAX));
    assert!(!r.due((i64::MAX, 0), (0, 0), (0, 0), i64::MIN));
    assert_eq!(Atime::parse("noatime"), Some(Atime::Noatime));
    assert_eq!(Atime::parse("atime"), None);
    assert_eq!(Config::default().atime, Atime::Relatime);
}

#[test]
fn defaults_are_valid_and_documented_values() {
    let c = Config::default();
    c.validate().unwrap();
    assert_eq!(c.chunk_size, 512 * 1024);
}

#[test]
fn placement_is_hashed_unless_set() {
    assert_eq!(Config::default().placement, PlacementMode::Hashed);
    let c: Config = toml::from_str("placement = \"local\"\nplacement_host = \"n1\"").unwrap();
    assert_eq!(c.placement, PlacementMode::Local);
    assert_eq!(c.placement_host.as_deref(), Some("n1"));
    assert!(toml::from_str::<Config>("placement = \"near\"").is_err());
    assert_eq!(PlacementMode::parse(b"local"), Some(PlacementMode::Local));
    assert_eq!(
        PlacementMode::parse(b"hashed\0"),
        Some(PlacementMode::Hashed)
    );
    assert_eq!(PlacementMode::parse(b"local\n"), Some(PlacementMode::Local));
    for bad in [&b""[..], b"Local", b"local ", b"striped", b"local\0\0"] {
        assert_eq!(PlacementMode::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn the_path_limit_stays_within_what_the_stores_hold() {
    assert_eq!(Config::default().max_path_bytes, 32 * 1024);
    for (bytes, ok) in [
        (4096, true),
        (MAX_PATH_BYTES_LIMIT, true),
        (4095, false),
        (65536, false),
    ] {
        let c = Config {
            max_path_bytes: bytes,
            ..Config::default()
        };
        assert_eq!(c.validate().is_ok(), ok, "{bytes}");
    }
}

#[test]
fn history_db_is_an_absolute_path_or_a_postgres_url() {
    assert_eq!(Config::default().history_db, None);
    for (spec, ok) in [
        ("/var/lib/eddy/history.db", true),
        ("postgres://eddy:pw@db.site:5432/history", true),
        ("postgresql:///history?host=/run/postgresql", true),
        ("history.db", false),
        ("", false),
        ("mysql://db/history", false),
    ] {
        let c: Config = toml::from_str(&format!("history_db = {spec:?}\n")).unwrap();
        assert_eq!(c.history_db.as_deref(), Some(spec));
        assert_eq!(c.validate().is_ok(), ok, "{spec}");
    }
}

#[test]
fn metrics_addr_is_off_by_default_and_an_ip_and_port() {
    assert_eq!(Config::default().metrics_addr, None);
    let c: Config = toml::from_str("metrics_addr = \"127.0.0.1:9400\"\n").unwrap();
    c.validate().unwrap();
    for bad in ["localhost:9400", "127.0.0.1", "9400", "[::1]:99999"] {
        let c = Config {
            metrics_addr: Some(bad.into()),
            ..Config::default()
        };
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("metrics_addr") && err.contains(bad), "{err}");
    }
    let c = Config {
        metrics_max_connections: 0,
        ..Config::default()
    };
    assert!(c.validate().is_err());
    assert_eq!(
        metrics_addr_of("0.0.0.0:9400", 2).unwrap().to_string(),
        "0.0.0.0:9402"
    );
    assert_eq!(
        metrics_addr_of("[::1]:0", 5).unwrap().to_string(),
        "[::1]:0"
    );
    assert!(metrics_addr_of("127.0.0.1:65535", 1).is_err());
}

#[test]
fn partial_toml_takes_defaults() {
    let c: Config = toml::from_str("chunk_size = 1048576\n").unwrap();
    assert_eq!(c.chunk_size, 1 << 20);
    assert_eq!(c.rpc_timeout_ms, Config::default().rpc_timeout_ms);
}

#[test]
fn root_mode_reads_octal_text_or_integers_and_round_trips() {
    assert_eq!(Config::default().root_mode, FileMode(0o700));
    let c: Config = toml::from_str("root_mode = \"0755\"\n").unwrap();
    assert_eq!(c.root_mode, FileMode(0o755));
    let c: Config = toml::from_str("root_mode = 0o750\n").unwrap();
    assert_eq!(c.root_mode, FileMode(0o750));
    assert!(toml::from_str::<Config>("root_mode = \"0799\"\n").is_err());
    assert!(toml::from_str::<Config>("root_mode = \"17777\"\n").is_err());
    let text = toml::to_string(&c).unwrap();
    assert!(text.contains("root_mode = \"0750\""), "{text}");
    assert_eq!(toml::from_str::<Config>(&text).unwrap(), c);
}

#[test]
fn wire_parses_and_resolves_per_connection_kind() {
    assert_eq!(Config::default().wire, Wire::Auto);
    for (text, want) in [
        ("auto", Wire::Auto),
        ("clear", Wire::Clear),
        ("mac", Wire::Mac),
        ("sealed", Wire::Sealed),
    ] {
        let c: Config = toml::from_str(&format!("wire = \"{text}\"\n")).unwrap();
        assert_eq!(c.wire, want);
        assert_eq!(text.parse::<Wire>().unwrap(), want);
        assert_eq!(want.name(), text);
    }
    assert!(toml::from_str::<Config>("wire = \"tls\"\n").is_err());
    assert_eq!(Wire::Auto.resolve(true), Wire::Mac);
    assert_eq!(Wire::Auto.resolve(false), Wire::Clear);
    // An explicit setting applies to both kinds of connection.
    for w in [Wire::Clear, Wire::Mac, Wire::Sealed] {
        assert_eq!((w.resolve(true), w.resolve(false)), (w, w));
    }
}

#[test]
fn unknown_field_is_rejected() {
    assert!(toml::from_str::<Config>("chunk_sise = 1\n").is_err());
}

#[test]
fn links_parse_cover_and_map_to_backend_paths() {
    let l = Link::parse("/in=/pfs/run7").unwrap();
    assert!(l.covers("/in") && l.covers("/in/a/b"));
    assert!(!l.covers("/inner") && !l.covers("/"));
    assert_eq!(l.backend_path("/in"), PathBuf::from("/pfs/run7"));
    assert_eq!(l.backend_path("/in/a/b"), PathBuf::from("/pfs/run7/a/b"));
    let root = Link::parse("/=/pfs").unwrap();
    assert_eq!(root.prefix, "/");
    assert!(root.covers("/x"));
    // Eddy's hidden names, and whatever lies below one, are never the backend's.
    assert!(!l.covers("/in/a/.eddy-unlinked-00ff") && !root.covers("/.eddy-unlinked-1/x"));
    assert!(l.covers("/in/a/eddy-unlinked-00ff") && l.covers("/in/.eddy-unlinke"));
    assert_eq!(root.backend_path("/x/y"), PathBuf::from("/pfs/x/y"));
    assert_eq!(root.backend_path("/"), PathBuf::from("/pfs"));
    assert!(Link::parse("in=/pfs").is_err());
    assert!(Link::parse("/in=relative").is_err());
    assert!(Link::parse("/a/../b=/pfs").is_err());
    let e = Link::parse("/in=/pfs/../etc").unwrap_err().to_string();
    assert!(e.contains("must not contain `..`"), "{e}");
    assert!(Link::parse("/in").is_err());
}

#[test]
fn overlapping_links_and_bad_watermarks_are_rejected() {
    let mut c = Config {
        links: vec![
            Link::parse("/a=/x").unwrap(),
            Link::parse("/a/b=/y").unwrap(),
        ],
        ..Config::default()
    };
    assert!(c.validate().is_err());
    c.links[1] = Link::parse("/ab=/y").unwrap();
    c.validate().unwrap();
    assert_eq!(c.link_for("/ab/c").unwrap().prefix, "/ab");
    assert!(c.link_for("/c").is_none());
    let text = toml::to_string(&c).unwrap();
    assert_eq!(toml::from_str::<Config>(&text).unwrap(), c);
    c.cache_low_watermark_pct = 95;
    assert!(c.validate().is_err());
}

#[test]
fn checksum_blocks_divide_the_chunk() {
    assert_eq!(Config::default().checksum_block(), 64 * 1024);
    let odd = Config {
        chunk_size: 96 * 1024,
        ..Config::default()
    };
    assert!(odd.validate().is_err());
    let small = Config {
        chunk_size: 16 * 1024,
        ..Config::default()
    };
    assert!(small.validate().is_ok());
    assert_eq!(small.checksum_block(), 16 * 1024);
    let tiny_block = Config {
        checksum_block_bytes: 512,
        ..Config::default()
    };
    assert!(tiny_block.validate().is_err());
}

#[test]
fn tiny_chunk_is_rejected() {
    let c = Config {
        chunk_size: 100,
        ..Config::default()
    };
    assert!(c.validate().is_err());
}

#[test]
fn deployment_round_trips_with_private_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deployment.toml");
    let dep = Deployment {
        name: "job1".into(),
        job: Default::default(),
        epoch: 0,
        moving_from: None,
        draining: Vec::new(),
        secret: Deployment::new_secret(),
        config: Config::default(),
        daemons: vec![
            DaemonEntry {
                id: 0,
                host: "a".into(),
                addr: "127.0.0.1:1".into(),
                socket: None,
                root: "/r0".into(),
                metrics: None,
            },
            DaemonEntry {
                id: 1,
                host: "b".into(),
                addr: "127.0.0.1:2".into(),
                socket: Some("/s".into()),
                root: "/r1".into(),
                metrics: None,
            },
        ],
    };
    dep.save(&path).unwrap();
    assert_eq!(Deployment::load(&path).unwrap(), dep);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn unordered_ids_are_rejected() {
    let dep = Deployment {
        name: "x".into(),
        job: Default::default(),
        epoch: 0,
        moving_from: None,
        draining: Vec::new(),
        secret: Deployment::new_secret(),
        config: Config::default(),
        daemons: vec![
            DaemonEntry {
                id: 1,
                host: "a".into(),
                addr: "x:1".into(),
                socket: None,
                root: "/".into(),
                metrics: None,
            },
            DaemonEntry {
                id: 1,
                host: "b".into(),
                addr: "x:2".into(),
                socket: None,
                root: "/".into(),
                metrics: None,
            },
        ],
    };
    assert!(dep.validate().is_err());
}

#[test]
fn a_deployment_file_without_a_job_loads_and_the_job_names_the_counters() {
    let text = r#"
name = "old"
secret = "0102"
[[daemons]]
id = 0
host = "h"
addr = "127.0.0.1:7000"
root = "/r"
"#;
    let dep: Deployment = toml::from_str(text).unwrap();
    assert_eq!(dep.job, JobInfo::default());
    assert_eq!(dep.job.label(&dep.name), "old");
    let job = JobInfo {
        id: Some("77".into()),
        ..JobInfo::default()
    };
    assert_eq!(job.label("old"), "77");
    assert_eq!(
        JobInfo::script_hash(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(JobInfo::user_name(0), "root");
}

#[test]
fn a_tiny_series_bound_is_refused() {
    let c = Config {
        stats_series_max: 4,
        ..Config::default()
    };
    assert!(c.validate().is_err());
    assert!(Config::default().stats_counting);
}

/// A config with `/out` linked to /pfs/fast and the TOML of backends and rules after it.
fn with_backends(more: &str) -> Result<Config, String> {
    let text = format!("[[links]]\nprefix = \"/out\"\nbackend = \"/pfs/fast\"\n{more}");
    let cfg: Config = toml::from_str(&text).map_err(|e| e.to_string())?;
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(cfg)
}

#[test]
fn backends_and_rules_place_by_attribute_rule_and_default() {
    let cfg = with_backends(
        r#"
[[backends]]
name = "fast"
prefix = "/out"
path = "/pfs/fast"
kind = "ext4"
[[backends]]
name = "archive"
prefix = "/out"
path = "/archive/out"
kind = "archive"
capacity_bytes = 1000000
[[backends]]
name = "old"
prefix = "/out"
path = "/ro/out"
read_only = true
[[placement_rules]]
backend = "archive"
path = "/out/**/*.tar"
[[placement_rules]]
backend = "archive"
min_size = 1000
uid = 7
"#,
    )
    .unwrap();
    let p = cfg.placer().unwrap();
    let names: Vec<&str> = p
        .stores_of("/out")
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["fast", "archive", "old"],
        "the default first, then as declared"
    );
    assert!(p.is_multi("/out"));
    let f = |path, size, uid, asked| FileFacts {
        path,
        size,
        uid,
        gid: 0,
        asked,
        shared: None,
        current: None,
    };
    assert_eq!(
        p.choose("/out", &f("/out/a/b.tar", 1, 0, None)),
        (1, Because::Rule(0))
    );
    assert_eq!(
        p.choose("/out", &f("/out/b.tar", 1, 0, None)),
        (1, Because::Rule(0))
    );
    // `*` stays within a name.
    let nested = FileFacts {
        path: "/out/x.tar/y",
        ..f("", 1, 0, None)
    };
    assert_eq!(p.choose("/out", &nested).1, Because::Default);
    assert_eq!(
        p.choose("/out", &f("/out/c", 5000, 7, None)),
        (1, Because::Rule(1))
    );
    assert_eq!(
        p.choose("/out", &f("/out/c", 5, 7, None)),
        (0, Because::Default)
    );
    assert_eq!(
        p.choose("/out", &f("/out/c", 5000, 8, None)),
        (0, Because::Default)
    );
    assert_eq!(
        p.choose("/out", &f("/out/b.tar", 1, 0, Some("fast"))),
        (0, Because::Attribute)
    );
    // An attribute naming no backend of the link is not taken.
    assert_eq!(
        p.choose("/out", &f("/out/c", 1, 0, Some("nope"))).1,
        Because::Default
    );
}

#[test]
fn rules_by_io_mode_hold_for_shared_or_per_process_files() {
    let cfg = with_backends(
        r#"
[[backends]]
name = "pfs"
prefix = "/out"
path = "/pfs/out"
[[backends]]
name = "nn"
prefix = "/out"
path = "/nn/out"
[[placement_rules]]
backend = "pfs"
io_mode = "shared"
[[placement_rules]]
backend = "nn"
io_mode = "per-process"
path = "/out/run/**"
"#,
    )
    .unwrap();
    let p = cfg.placer().unwrap();
    assert!(p.uses_io_mode());
    let f = |path, shared, current| FileFacts {
        path,
        size: 1,
        uid: 0,
        gid: 0,
        asked: None,
        shared,
        current,
    };
    assert_eq!(p.choose("/out", &f("/out/x", Some(true), None)).0, 1);
    assert_eq!(p.choose("/out", &f("/out/x", Some(false), None)).0, 0);
    let run = "/out/run/a";
    assert_eq!(p.choose("/out", &f(run, Some(false), None)).0, 2);
    assert_eq!(p.choose("/out", &f(run, Some(true), None)).0, 1);
    // Not known (a rename): a rule by I/O mode holds for a file in its backend only.
    assert_eq!(p.choose("/out", &f(run, None, Some("pfs"))).0, 1);
    assert_eq!(p.choose("/out", &f(run, None, Some("nn"))).0, 2);
    assert_eq!(p.choose("/out", &f(run, None, None)).1, Because::Default);
    let bad = with_backends("[[placement_rules]]\nbackend = \"/out\"\nio_mode = \"sometimes\"\n");
    assert!(bad.unwrap_err().contains("sometimes"), "an unknown io_mode");
}

#[test]
fn bad_backends_and_rules_are_refused_with_what_is_wrong() {
    let cases = [
        (
            "[[backends]]\nname = \"a\"\nprefix = \"/elsewhere\"\npath = \"/x\"\n",
            "no [[links]] entry has the prefix",
        ),
        (
            "[[backends]]\nname = \"a b\"\nprefix = \"/out\"\npath = \"/x\"\n",
            "letters, digits",
        ),
        (
            "[[backends]]\nname = \"a\"\nprefix = \"/out\"\npath = \"/pfs/fast/sub\"\n",
            "overlap",
        ),
        (
            "[[backends]]\nname = \"a\"\nprefix = \"/out\"\npath = \"rel\"\n",
            "absolute",
        ),
        (
            "[[backends]]\nname = \"a\"\nprefix = \"/out\"\npath = \"/x\"\n[[backends]]\nname = \"a\"\nprefix = \"/out\"\npath = \"/y\"\n",
            "declared twice",
        ),
        (
            "[[backends]]\nname = \"fast\"\nprefix = \"/out\"\npath = \"/pfs/fast\"\nread_only = true\n",
            "must not be read-only",
        ),
        (
            "[[placement_rules]]\nbackend = \"nope\"\npath = \"/out/*\"\n",
            "is not declared",
        ),
        (
            "[[backends]]\nname = \"ro\"\nprefix = \"/out\"\npath = \"/ro\"\nread_only = true\n[[placement_rules]]\nbackend = \"ro\"\npath = \"/out/*\"\n",
            "read-only",
        ),
        (
            "[[backends]]\nname = \"a\"\nprefix = \"/out\"\npath = \"/x\"\n[[placement_rules]]\nbackend = \"a\"\n",
            "at least one of",
        ),
        (
            "[[backends]]\nname = \"a\"\nprefix = \"/out\"\npath = \"/x\"\n[[placement_rules]]\nbackend = \"a\"\npath = \"/out/[\"\n",
            "is not a glob",
        ),
        (
            "[[backends]]\nname = \"a\"\nprefix = \"/out\"\npath = \"/x\"\n[[placement_rules]]\nbackend = \"a\"\npath = \"*.h5\"\n",
            "absolute namespace paths",
        ),
        (
            "[[backends]]\nname = \"a\"\nprefix = \"/out\"\npath = \"/x\"\n[[placement_rules]]\nbackend = \"a\"\nmin_size = 9\nmax_size = 2\n",
            "above max_size",
        ),
    ];
    for (toml_text, want) in cases {
        let err = with_backends(toml_text).unwrap_err();
        assert!(err.contains(want), "{toml_text}: {err} (wanted {want:?})");
    }
    // One link with one backend, as before: nothing more to say.
    let plain = with_backends("").unwrap();
    assert!(!plain.placer().unwrap().is_multi("/out"));
}

/// The daemons read the deployment's configuration with half its RPC deadline for the
/// copies they send each other (`replicate.rs`): leases on with their default recall time
/// must still validate there, or replication stops (it did, decision 0075).
#[test]
fn a_halved_rpc_deadline_with_leases_still_validates() {
    assert!(
        Config::default().leases,
        "leases are on by default (decision 0075)"
    );
    for rpc_timeout_ms in [10_000, 5_000, 2_500, 1_000, 1] {
        let c = Config {
            rpc_timeout_ms,
            connect_timeout_ms: rpc_timeout_ms,
            leases: true,
            ..Config::default()
        };
        c.validate().unwrap();
    }
}

#[test]
fn clients_place_by_the_old_members_while_items_move_and_drained_daemons_are_no_members() {
    let entry = |id: u32| DaemonEntry {
        id,
        host: "h".into(),
        addr: format!("127.0.0.1:{}", 1 + id),
        socket: None,
        root: format!("/r{id}").into(),
        metrics: None,
    };
    let mut dep = Deployment {
        name: "x".into(),
        job: Default::default(),
        epoch: 1,
        moving_from: Some(vec![0, 1, 2]),
        draining: Vec::new(),
        secret: Deployment::new_secret(),
        config: Config::default(),
        daemons: (0..5).map(entry).collect(),
    };
    dep.validate().unwrap();
    assert_eq!(dep.placed_on(), vec![0, 1, 2]);
    assert_eq!(dep.members(), vec![0, 1, 2, 3, 4]);
    let text = toml::to_string_pretty(&dep).unwrap();
    assert_eq!(toml::from_str::<Deployment>(&text).unwrap(), dep);

    dep.moving_from = None;
    dep.draining = vec![1, 3];
    dep.validate().unwrap();
    assert_eq!(dep.placed_on(), vec![0, 2, 4]);

    dep.config.replicas = 4;
    assert!(dep.validate().is_err(), "4 copies on 3 members");
    dep.config.replicas = 1;
    dep.draining = vec![9];
    assert!(dep.validate().is_err(), "drains a daemon it does not list");
    dep.draining.clear();
    dep.moving_from = Some(vec![0, 7]);
    assert!(
        dep.validate().is_err(),
        "moves from a daemon it does not list"
    );

    let old = "name = \"x\"\nsecret = \"00\"\n[[daemons]]\nid = 0\nhost = \"h\"\naddr = \"a:1\"\nroot = \"/r\"\n";
    let dep: Deployment = toml::from_str(old).unwrap();
    assert_eq!(
        (dep.epoch, dep.moving_from, dep.draining),
        (0, None, vec![])
    );
}
