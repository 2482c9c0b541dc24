//! The handshake both ways, against real daemons over real sockets: a client without the
//! secret is refused; a listener that cannot prove the secret, a daemon answering under
//! another id, a daemon of another chunk size and a daemon of an older protocol are refused
//! by the client, each with an error that says what is wrong.

use eddy_testkit::Cluster;
use std::time::Duration;

/// Guard against a hang; never an assertion on speed.
const GUARD: Duration = Duration::from_secs(60);
use eddy_client::Client;
use eddy_config::Deployment;
use eddy_proto::auth::{self, ClientHello, DaemonProof, HelloResult, ServerHello};
use eddy_proto::frame::{read_frame, write_frame};
use eddy_proto::wire::Mode;
use eddy_proto::{decode_plain, encode, PROTOCOL_VERSION};

/// The deployment as a client on another node sees it: TCP only.
fn over_tcp(dep: &Deployment) -> Deployment {
    let mut dep = dep.clone();
    for d in &mut dep.daemons {
        d.socket = None;
    }
    dep
}

/// What each daemon answers to a status request from a client of `dep`.
async fn statuses(dep: Deployment) -> Vec<(u32, Result<(), eddy_client::Errno>)> {
    let c = Client::new(dep).expect("client");
    tokio::time::timeout(GUARD, c.daemon_status())
        .await
        .expect("no hang")
        .into_iter()
        .map(|(id, r)| (id, r.map(|_| ())))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_the_wrong_secret_is_refused() {
    let cl = Cluster::start(3);
    let mut dep = over_tcp(&cl.dep);
    dep.secret = Deployment::new_secret();
    for (id, r) in statuses(dep).await {
        let e = r.expect_err("refused");
        assert_eq!(e.errno, libc::EACCES, "daemon {id}: {e}");
        assert!(e.msg.contains("wrong deployment secret"), "{}", e.msg);
        assert!(e.msg.contains(&format!("daemon {id}")), "{}", e.msg);
    }
    // The right secret still works, over TCP and over the unix sockets.
    for (id, r) in statuses(over_tcp(&cl.dep)).await {
        r.unwrap_or_else(|e| panic!("daemon {id}: {e}"));
    }
    cl.client().await.stat("/").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapped_addresses_are_named_as_such() {
    let cl = Cluster::start(3);
    let mut dep = over_tcp(&cl.dep);
    let (a0, a1) = (dep.daemons[0].addr.clone(), dep.daemons[1].addr.clone());
    dep.daemons[0].addr = a1.clone();
    dep.daemons[1].addr = a0.clone();
    let got = statuses(dep).await;
    let e0 = got[0].1.clone().expect_err("daemon 0 refused");
    assert_eq!(e0.errno, libc::EPROTO);
    assert!(
        e0.msg.contains(&format!(
            "daemon at {a1} says it is daemon 1 but the deployment file lists daemon 0 there"
        )),
        "{}",
        e0.msg
    );
    assert!(
        e0.msg.contains("stale or its addresses are swapped"),
        "{}",
        e0.msg
    );
    let e1 = got[1].1.clone().expect_err("daemon 1 refused");
    assert!(
        e1.msg
            .contains(&format!("daemon at {a0} says it is daemon 0")),
        "{}",
        e1.msg
    );
    got[2].1.clone().expect("daemon 2 is where the file says");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_size_mismatch_is_refused() {
    let cl = Cluster::start(3);
    let mut dep = over_tcp(&cl.dep);
    dep.config.chunk_size *= 2;
    for (id, r) in statuses(dep.clone()).await {
        let e = r.expect_err("refused");
        assert_eq!(e.errno, libc::EPROTO, "daemon {id}: {e}");
        assert!(
            e.msg.contains(&format!(
                "stores chunks of {} bytes but the deployment says {}",
                cl.dep.config.chunk_size, dep.config.chunk_size
            )),
            "{}",
            e.msg
        );
    }
    // The library refuses before anything is written with the wrong chunk size.
    let e = Client::connect(dep).await.err().expect("connect refused");
    assert_eq!(e.errno, libc::EPROTO, "{e}");
}

/// A listener on the port the deployment names for daemon 0, speaking the handshake
/// without the secret: it answers every client's proof with a proof of its own making.
async fn impostor(
    listener: tokio::net::TcpListener,
    hello: impl Fn() -> Vec<u8> + Send + 'static,
    proof: Option<Vec<u8>>,
) {
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        let hello = hello();
        let proof = proof.clone();
        tokio::spawn(async move {
            write_frame(&mut s, 0, &hello, &[], 4096).await.ok()?;
            let frame = read_frame(&mut s, 4096).await.ok()?;
            let _: ClientHello = decode_plain(&frame, 4096).ok()?;
            let verdict: HelloResult = Ok(DaemonProof { proof: proof? });
            write_frame(&mut s, 0, &encode(&verdict).ok()?, &[], 4096)
                .await
                .ok()?;
            // Holds the connection open: the client must not wait for anything more.
            let _ = read_frame(&mut s, 4096).await;
            Some(())
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_cannot_prove_the_secret_is_refused() {
    let cl = Cluster::start(3);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let chunk_size = cl.dep.config.chunk_size;
    let fake = tokio::spawn(impostor(
        listener,
        move || {
            encode(&ServerHello {
                version: PROTOCOL_VERSION,
                daemon_id: 0,
                nonce: auth::new_nonce(),
                chunk_size,
                instance: 1,
                // What the client expects over TCP with `wire = "auto"`.
                wire: Mode::Mac,
            })
            .unwrap()
        },
        // A proof made with another secret (the client's own proof, replayed, is tried in
        // eddy-proto's unit tests).
        Some(auth::daemon_proof(
            b"a guess",
            &[0; 32],
            &[0; 32],
            0,
            Mode::Mac,
        )),
    ));
    let mut dep = over_tcp(&cl.dep);
    dep.daemons[0].addr = addr.clone();
    let got = statuses(dep).await;
    let e = got[0].1.clone().expect_err("the impostor is refused");
    assert_eq!(e.errno, libc::EACCES, "{e}");
    assert!(
        e.msg.contains(&format!(
            "daemon 0 ({addr}) could not prove the deployment secret"
        )),
        "{}",
        e.msg
    );
    got[1].1.clone().expect("daemon 1 is genuine");
    got[2].1.clone().expect("daemon 2 is genuine");
    fake.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_daemon_with_another_secret_is_refused_both_ways() {
    // Two deployments on this host; the deployment file of the first names, for daemon 0,
    // the address of the second's daemon 0 (its port was reused).
    let ours = Cluster::start(3);
    let theirs = Cluster::start(3);
    let mut dep = over_tcp(&ours.dep);
    dep.daemons[0].addr = theirs.dep.daemons[0].addr.clone();
    let got = statuses(dep).await;
    let e = got[0].1.clone().expect_err("refused");
    assert_eq!(e.errno, libc::EACCES, "{e}");
    assert!(e.msg.contains("wrong deployment secret"), "{}", e.msg);
    got[1].1.clone().expect("daemon 1 is ours");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_of_an_older_protocol_gets_eproto_not_a_hang() {
    let cl = Cluster::start(3);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    // The hello of protocol 4: version, id, nonce; then it waits for a reply.
    let fake = tokio::spawn(impostor(
        listener,
        || encode(&(4u32, 0u32, [7u8; 32])).unwrap(),
        None,
    ));
    let mut dep = over_tcp(&cl.dep);
    dep.daemons[0].addr = addr;
    let got = statuses(dep).await;
    let e = got[0].1.clone().expect_err("refused");
    assert_eq!(e.errno, libc::EPROTO, "{e}");
    assert!(
        e.msg.contains(&format!(
            "speaks protocol 4 but this client speaks {PROTOCOL_VERSION}"
        )),
        "{}",
        e.msg
    );
    fake.abort();
}
