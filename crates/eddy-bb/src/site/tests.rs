//! Tests of the site settings: defaults and limits, the shipped examples, the walltime, history and
//! allocation knobs, root templates, pools.

use super::*;
use crate::directives::parse;

fn site(extra: &str) -> Site {
    let s: Site = toml::from_str(extra).unwrap();
    s.validate().unwrap();
    s
}

#[test]
fn defaults_apply_and_limits_refuse_in_words() {
    let s = site("max_capacity = \"1TiB\"\nbackend_roots = [\"/pfs\"]\n");
    let r = s
        .resolve(&parse("#EDDY link /d=/pfs/x\n", "EDDY").unwrap())
        .unwrap();
    assert_eq!((r.mode, r.capacity), (Mode::NodeLocal, 10 << 30));
    let too_big = s.resolve(&parse("#EDDY capacity=2T pool=node-local\n", "EDDY").unwrap());
    assert!(too_big
        .unwrap_err()
        .to_string()
        .contains("more than this site allows"));
    let outside = s.resolve(&parse("#EDDY link /d=/etc\n", "EDDY").unwrap());
    assert!(outside
        .unwrap_err()
        .to_string()
        .contains("must lie under /pfs"));
    let no_pool = s.resolve(&parse("#EDDY mode=pool\n", "EDDY").unwrap());
    assert!(no_pool
        .unwrap_err()
        .to_string()
        .contains("no I/O-node pool"));
    let unknown = s.resolve(&parse("#EDDY capacity=1G pool=fast\n", "EDDY").unwrap());
    let unknown = unknown.unwrap_err().to_string();
    assert!(
        unknown.contains("pool=fast is not a pool of this site (node-local)"),
        "{unknown}"
    );
}

#[test]
fn the_shipped_settings_and_example_jobs_are_valid() {
    site(include_str!("../../../../slurm/bb.toml"));
    let s = site("max_capacity = \"10TiB\"\n[pool]\nname = \"io\"\nnodes = [\"a\", \"b\", \"c\", \"d\"]\nroot = \"/n/{job}\"\ncapacity = \"64T\"\n");
    for example in [
        include_str!("../../../../examples/slurm/node-local.sh"),
        include_str!("../../../../examples/slurm/pool.sh"),
    ] {
        s.resolve(&parse(example, "EDDY").unwrap()).unwrap();
    }
}

#[test]
fn walltime_knobs_parse_and_bad_ones_are_refused() {
    assert!(
        site("").walltime.is_none(),
        "no [walltime]: staging at once"
    );
    let w = site(
        "[walltime]\npredictor = \"easy++\"\ncorrection = \"power\"\nstage_in_rate = \"1GiB\"\n",
    )
    .walltime
    .unwrap();
    assert_eq!(w.predictor, Some(eddy_walltime::Predictor::EasyPlusPlus));
    assert_eq!(w.correction, eddy_walltime::Correction::Power);
    assert_eq!((w.source.as_str(), w.recheck_s), ("sacct", 5));
    let d = site("[walltime]\n").walltime.unwrap();
    assert_eq!((d.predictor, d.max_wait_s), (None, 3600));
    assert_eq!(
        (d.snapshot_s, d.max_history, d.max_delay_by_others_s),
        (60, 500, 900)
    );
    let t = site("[walltime]\nsnapshot_s = 10\nmax_history = 50\nmax_delay_by_others_s = 0\n")
        .walltime
        .unwrap();
    assert_eq!(
        (t.snapshot_s, t.max_history, t.max_delay_by_others_s),
        (10, 50, 0)
    );
    for bad in [
        "[walltime]\nstage_in_rate = \"fast\"\n",
        "[walltime]\nstage_in_rate = \"0\"\n",
        "[walltime]\nsource = \"history.json\"\n",
    ] {
        let s: Site = toml::from_str(bad).unwrap();
        assert!(s.validate().is_err(), "{bad}");
    }
    assert!(toml::from_str::<Site>("[walltime]\npredictor = \"magic\"\n").is_err());
}

#[test]
fn history_db_from_the_site_or_its_config() {
    assert_eq!(site("").history_db().unwrap(), None);
    let s = site("history_db = \"postgres://eddy@db/history\"\n");
    assert_eq!(
        s.history_db().unwrap().as_deref(),
        Some("postgres://eddy@db/history")
    );
    for bad in [
        "history_db = \"rel/h.db\"\n",
        "history_db = \"mysql://x/h\"\n",
        // A password in a settings file others may read.
        "history_db = \"postgres://eddy:s3cret@db/history\"\n",
        "history_db = \"postgres://eddy@db/history?password=s3cret\"\n",
        "[history]\nwriter = \"postgres://w:s3cret@db/history\"\n",
        "[history]\nwriter = \"/var/lib/eddy/history.db\"\n",
        "[history]\nlock_timeout_s = 0\n",
        "[history]\npassword_file = \"pw\"\n",
        "[pool]\nnodes = [\"a\"]\nroot = \"/n/{job}\"\ncapacity = \"1T\"\nmax_servers_per_user = 0\n",
    ] {
        let s: Site = toml::from_str(bad).unwrap();
        assert!(s.validate().is_err(), "{bad}");
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("eddy.toml");
    std::fs::write(&config, "history_db = \"/var/lib/eddy/history.db\"\n").unwrap();
    let s = site(&format!("config = {:?}\n", config.display().to_string()));
    assert_eq!(
        s.history_db().unwrap().as_deref(),
        Some("/var/lib/eddy/history.db")
    );
}

#[test]
fn alloc_knobs_are_checked_by_name_and_pool_peaks_come_from_the_inventory() {
    let err = |text: &str| {
        toml::from_str::<Site>(text)
            .map_err(anyhow::Error::from)
            .and_then(|s| s.validate())
            .unwrap_err()
            .to_string()
    };
    let bad = err("[alloc]\nalpha = -1.0\n");
    assert!(bad.contains("alloc.alpha = -1"), "{bad}");
    let unknown = err("[alloc]\nv_min = 3\n");
    assert!(unknown.contains("v_min"), "{unknown}");
    let pool = "[pool]\nnodes = [\"io1\", \"io2 10.0.0.2\"]\nroot = \"/nvme/eddy/{job}\"\n";
    let peak = err(&format!(
        "{pool}capacity = \"1T\"\npeak_bandwidth = \"fast\"\n"
    ));
    assert!(peak.contains("[pool] peak_bandwidth"), "{peak}");
    let s = site(&format!(
        "[alloc]\nv_min_bytes = 1048576\nn_min = 2\n{pool}capacity = \"1T\"\n\
         peak_bandwidth = \"1MiB\"\n"
    ));
    assert_eq!((s.alloc.v_min_bytes, s.alloc.n_min), (1 << 20, Some(2)));
    let p = s.pool.clone().unwrap();
    assert_eq!(s.pool_peaks(&p).unwrap(), [1048576.0; 2]);
    // io2's storage under the pool's root measured at 300 MiB/s: its own B_f.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inventory.db");
    let rec = eddy_sysmap::NodeRecord {
        node: "io2".into(),
        collected_at: 1,
        cores: 4,
        mem_total_bytes: 1 << 30,
        mem_available_bytes: 1 << 30,
        interfaces: Vec::new(),
        storage: vec![eddy_sysmap::Storage {
            path: "/nvme/eddy".into(),
            write_mib_s: Some(300.0),
            read_mib_s: Some(900.0),
            ..eddy_sysmap::Storage::default()
        }],
    };
    eddy_sysmap::upsert(&db, &rec).unwrap();
    let s = Site {
        inventory: Some(db),
        ..s
    };
    assert_eq!(s.pool_peaks(&p).unwrap(), [1048576.0, 300.0 * 1048576.0]);
}

#[test]
fn root_templates_have_a_fixed_prefix() {
    assert_eq!(fixed_prefix("/tmp/eddy-job-{job}"), "/tmp");
    assert_eq!(fixed_prefix("/nvme/eddy/{job}/{host}"), "/nvme/eddy");
    assert_eq!(fixed_prefix("/{job}"), "/");
    assert_eq!(fixed_prefix("/local/eddy"), "/local/eddy");
}

#[test]
fn pool_sizes_and_modes() {
    let s = site(
        "[pool]\nnodes = [\"io1\", \"io2 10.0.0.2\"]\nroot = \"/nvme/{job}\"\ncapacity = \"2T\"\n",
    );
    let r = s
        .resolve(&parse("#EDDY mode=pool capacity=1G pool=eddy\n", "EDDY").unwrap())
        .unwrap();
    assert_eq!(r.pool_nodes, 2);
    let e = s.resolve(&parse("#EDDY mode=pool\n", "EDDY").unwrap());
    let e = e.unwrap_err().to_string();
    assert!(
        e.contains("mode=pool needs the capacity on a line with the pool"),
        "{e}"
    );
    let r = s
        .resolve(&parse("#EDDY capacity=1G pool=eddy\n", "EDDY").unwrap())
        .unwrap();
    assert_eq!((r.mode, r.capacity), (Mode::Pool, 1 << 30));
    let clash = s.resolve(&parse("#EDDY capacity=1G pool=eddy mode=node-local\n", "EDDY").unwrap());
    let clash = clash.unwrap_err().to_string();
    assert!(
        clash.contains("pool=eddy is a pool pool but mode=node-local"),
        "{clash}"
    );
    let e = s.resolve(&parse("#EDDY capacity=1G pool=eddy nodes=3\n", "EDDY").unwrap());
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("the pool has 2 I/O nodes"));
    // A pool job smaller than the pool's least per job is refused in words; the site
    // sets the least, and a limit of no pool jobs at all is no setting.
    let tiny = s.resolve(&parse("#EDDY capacity=512M pool=eddy\n", "EDDY").unwrap());
    let tiny = tiny.unwrap_err().to_string();
    assert_eq!(
        tiny,
        "capacity 512.0 MiB is less than the eddy pool's least per job (1.0 GiB): ask for \
         at least that much"
    );
    let small = site(
        "[pool]\nnodes = [\"io1\"]\nroot = \"/nvme/{job}\"\ncapacity = \"2T\"\n\
         min_capacity = \"1MiB\"\nmax_jobs_per_user = 2\nprobe_cache_s = 0\n",
    );
    let p = small.pool.as_ref().unwrap();
    assert_eq!((p.max_jobs_per_user, p.probe_cache_s), (2, 0));
    small
        .resolve(&parse("#EDDY capacity=1M pool=eddy\n", "EDDY").unwrap())
        .unwrap();
    for bad in ["min_capacity = \"small\"\n", "max_jobs_per_user = 0\n"] {
        let text =
            format!("[pool]\nnodes = [\"io1\"]\nroot = \"/n/{{job}}\"\ncapacity = \"1T\"\n{bad}");
        let s: Site = toml::from_str(&text).unwrap();
        assert!(s.validate().is_err(), "{bad}");
    }
    let capped = site("[pool]\nnodes = [\"io1\", \"io2\"]\nroot = \"/n/{job}\"\ncapacity = \"2T\"\nmax_servers_per_job = 1\n");
    let r = capped
        .resolve(&parse("#EDDY capacity=1G pool=eddy\n", "EDDY").unwrap())
        .unwrap();
    assert_eq!(r.pool_nodes, 1);
    let e = capped.resolve(&parse("#EDDY capacity=1G pool=eddy nodes=2\n", "EDDY").unwrap());
    let e = e.unwrap_err().to_string();
    assert!(
        e.contains("this site allows a job at most 1 I/O nodes"),
        "{e}"
    );
    assert_eq!(s.mount_point(7), PathBuf::from("/eddy/7"));
    assert!(toml::from_str::<Site>("launcher = \"ssh {host}\"\n")
        .map_err(anyhow::Error::from)
        .and_then(|s| s.validate())
        .is_err());
}

#[test]
fn pool_grow_knobs_are_checked_by_name_and_unset_means_no_grow() {
    let pool =
        "[pool]\nnodes = [\"io1\", \"io2\"]\nroot = \"/nvme/eddy/{job}\"\ncapacity = \"1T\"\n";
    assert!(site(pool).pool.unwrap().grow.is_none());
    let s = site(&format!(
        "{pool}[pool.grow]\npoll_s = 2\nmax_grows = 1\nmove_deadline_s = 60\n"
    ));
    let g = s.pool.unwrap().grow.unwrap();
    assert_eq!((g.poll_s, g.max_grows, g.move_deadline_s), (2, 1, 60));
    // The rest keep their defaults.
    assert_eq!((g.sustain, g.busy_ratio, g.cooldown_s), (2, 0.8, 300));
    let err = |text: &str| {
        toml::from_str::<Site>(text)
            .map_err(anyhow::Error::from)
            .and_then(|s| s.validate())
            .unwrap_err()
            .to_string()
    };
    let bad = err(&format!("{pool}[pool.grow]\nbusy_ratio = 1.5\n"));
    assert!(
        bad.contains("[pool.grow] pool.grow.busy_ratio = 1.5"),
        "{bad}"
    );
    let unknown = err(&format!("{pool}[pool.grow]\nevery_s = 5\n"));
    assert!(unknown.contains("every_s"), "{unknown}");
}
