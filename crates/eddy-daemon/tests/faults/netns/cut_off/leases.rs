//! Directory leases (decision 0075) with two copies when the daemon that granted a lease is
//! cut off the network: the other daemons' recalls to it must not cost a client its request.

use super::*;
use std::time::Duration;

/// A deployment on the hosts with two copies and the tunables `toml` (leases on), as both
/// tests use it: the bound an operation must end within, the placement, and the granter of
/// `/d` (the first owner of its record) with its host's index.
struct Leased {
    dep: eddy_config::Deployment,
    bound: Duration,
    placement: eddy_placement::Placement,
    granter: u32,
    g: usize,
}

fn start_leased(net: &mut Net, dir: &Path, toml: &str) -> Leased {
    let tunables = dir.join("tunables.toml");
    std::fs::write(&tunables, toml).unwrap();
    let state = start_on_hosts(net, dir, &["--replicas", "2", "--config", s(&tunables)]);
    let dep = eddy_config::Deployment::load(&state.join("deployment.toml")).unwrap();
    assert_eq!(dep.config.replicas, 2);
    assert!(dep.config.leases, "the deployment takes leases");
    let bound = Duration::from_millis(dep.config.rpc_timeout_ms) * 6 + Duration::from_secs(2);
    let placement = eddy_rpc::Daemons::new(&dep)
        .expect("daemons")
        .placement()
        .as_ref()
        .clone();
    let granter = placement.meta_owner("/d");
    let g = placement.ids().iter().position(|&d| d == granter).unwrap();
    Leased {
        dep,
        bound,
        placement,
        granter,
        g,
    }
}

/// With two copies, the granter of a leased directory (the first owner of its record) cut
/// off the network while another client creates, looks up and lists names there: every
/// operation succeeds, each within a bound. The holder's runtime is not driven (it answers
/// no recall and never notices the cut), so each other daemon still holds its registration
/// when the other client's first request comes: it recalls the lease from the granter,
/// which it cannot reach, then serves the request. That recall waited the whole connect
/// timeout over connections of its own, and the copy of the create to the granter waited
/// again: together longer than the client's RPC deadline, which then gave up on that daemon
/// too ("cannot reach daemon N: connect timed out").
#[test]
fn a_leased_directory_whose_granter_is_cut_off_costs_no_operation() {
    use eddy_client::{Client, Creds};
    let mut net = setup();
    let dir = tempfile::tempdir().unwrap();
    // The connect timeout two thirds of the RPC deadline: a recall's connect and a copy's
    // connect, one after the other, do not fit in it.
    let Leased {
        dep,
        bound,
        placement,
        granter,
        g,
    } = start_leased(
        &mut net,
        dir.path(),
        "rpc_timeout_ms = 3000\nconnect_timeout_ms = 2000\nleases = true\n",
    );
    // Names in /d whose records the granter holds a copy of: their creates copy to it.
    let names: Vec<String> = (0..)
        .map(|i| format!("/d/x{i}"))
        .filter(|p| {
            placement
                .owners(eddy_placement::path_hash(p), 2)
                .contains(&granter)
        })
        .take(4)
        .collect();

    // The holder, on a runtime driven only by its own calls.
    let holder = {
        let dep = dep.clone();
        in_netns(&net.client(), move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let a = rt.block_on(async {
                let a = Client::connect(dep).await.expect("connect");
                a.mkdir("/d", 0o755, Creds::root()).await.unwrap();
                a
            });
            assert!(a.known_absent("/d/x"), "a lease on /d after its mkdir");
            (rt, a)
        })
    };

    ip(&["-n", &net.host(g), "link", "set", "eth0", "down"]);
    block_on_in_netns(&net.client(), async move {
        let me = Creds::root();
        let b = Client::connect(dep.clone()).await.expect("connect");
        for p in &names {
            let f = within(bound, &format!("create {p}"), b.create(p, 0o644, true, me))
                .await
                .unwrap_or_else(|e| panic!("create {p} with daemon {granter} cut off: {e}"));
            within(bound, &format!("close {p}"), b.close(&f))
                .await
                .unwrap_or_else(|e| panic!("close {p} with daemon {granter} cut off: {e}"));
            within(bound, &format!("stat {p}"), b.stat(p))
                .await
                .unwrap_or_else(|e| panic!("stat {p} with daemon {granter} cut off: {e}"));
        }
        let mut listed = Vec::new();
        let mut r = b.readdir("/d", None).unwrap();
        while let Some(page) = within(bound, "listing /d", r.next_page())
            .await
            .unwrap_or_else(|e| panic!("listing /d with daemon {granter} cut off: {e}"))
        {
            listed.extend(page.into_iter().map(|e| format!("/d/{}", e.name)));
        }
        listed.sort();
        let mut want = names.clone();
        want.sort();
        assert_eq!(listed, want);
    });
    drop(holder);
}

/// The holder of a lease whose granter is cut off the network, its runtime driven (its long
/// poll at the granter runs), while another client creates a name in the directory at a
/// daemon that cannot reach the granter either: once that create has succeeded, the holder
/// sees the name (a lookup finds it, an exclusive create of it is EEXIST). Before, the
/// daemon dropped the holder's registration as soon as its recall to the granter failed and
/// served the create, while the holder answered from its lease until its long poll at the
/// granter failed (up to the RPC deadline after the cut): ENOENT for the new name, and an
/// exclusive create of it accepted (its batch later refused, EIO at its close).
#[test]
fn a_holder_cut_off_from_its_granter_stops_answering_before_another_client_is_served() {
    use eddy_client::{Client, Creds};
    let mut net = setup();
    let dir = tempfile::tempdir().unwrap();
    // The default RPC deadline; a short connect timeout, so that the other client's create
    // ends well before the holder's long poll at the granter could have failed.
    let Leased {
        dep,
        bound,
        placement,
        granter,
        g,
    } = start_leased(
        &mut net,
        dir.path(),
        "connect_timeout_ms = 1000\nleases = true\n",
    );
    // A name in /d whose records the granter holds no copy of: its create and lookups never
    // wait for the granter themselves.
    let name = (0..)
        .map(|i| format!("/d/y{i}"))
        .find(|p| {
            !placement
                .owners(eddy_placement::path_hash(p), 2)
                .contains(&granter)
        })
        .unwrap();

    // The holder, on a runtime of its own whose workers drive it (in the client's namespace).
    let (rt, a) = {
        let dep = dep.clone();
        let name = name.clone();
        in_netns(&net.client(), move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            let a = rt.block_on(async {
                let a = Client::connect(dep).await.expect("connect");
                a.mkdir("/d", 0o755, Creds::root()).await.unwrap();
                a
            });
            assert!(a.known_absent(&name), "a lease on /d after its mkdir");
            (rt, a)
        })
    };

    ip(&["-n", &net.host(g), "link", "set", "eth0", "down"]);
    let name = block_on_in_netns(&net.client(), async move {
        let b = Client::connect(dep).await.expect("connect");
        let f = within(bound, "create", b.create(&name, 0o644, true, Creds::root()))
            .await
            .unwrap_or_else(|e| panic!("create {name} with daemon {granter} cut off: {e}"));
        within(bound, "close", b.close(&f))
            .await
            .unwrap_or_else(|e| panic!("close {name} with daemon {granter} cut off: {e}"));
        name
    });
    // At once, on the holder's own runtime.
    let (rt, a) = in_netns(&net.client(), move || {
        rt.block_on(async {
            let found = within(bound, "stat", a.stat(&name)).await;
            assert!(
                found.is_ok(),
                "the holder does not see {name}, created by another client: {:?}",
                found.err()
            );
            let again = within(bound, "create", a.create(&name, 0o644, true, Creds::root())).await;
            match again {
                Err(e) => assert_eq!(e.errno, libc::EEXIST, "O_EXCL create of {name}: {e}"),
                Ok(_) => panic!("the holder created {name} exclusively, another client made it"),
            }
            assert!(
                !a.known_absent(&name),
                "the holder still answers {name} absent from its lease"
            );
        });
        (rt, a)
    });
    drop(a);
    rt.shutdown_timeout(Duration::from_secs(1));
}
