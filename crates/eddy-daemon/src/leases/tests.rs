//! The granter's clock (tokio's, paused: no wall time is waited or asserted).

use super::*;

fn config() -> eddy_config::Config {
    eddy_config::Config {
        rpc_timeout_ms: 10_000,
        lease_recall_timeout_ms: 2_000,
        ..Default::default()
    }
}

/// A holder cut off from its granter answers from its lease until `lease_valid_for` after
/// its last word from the granter, which was sent at the latest when the recall woke its
/// poll: the granter revokes no earlier than `lease_fence` after the recall, though
/// `lease_recall_timeout_ms` is shorter; a holder that gives the lease back ends the
/// recall at once.
#[tokio::test(start_paused = true)]
async fn a_lease_is_revoked_no_earlier_than_its_holder_stops_answering() {
    let cfg = config();
    assert!(cfg.lease_fence() > cfg.lease_valid_for());
    assert!(cfg.lease_fence() > Duration::from_millis(cfg.lease_recall_timeout_ms));
    let leases = std::sync::Arc::new(Leases::new(&cfg, 1));
    let eddy_proto::LeaseGrant::Granted { id } = leases.grant("/d", 7) else {
        panic!("no lease granted on /d");
    };
    let start = tokio::time::Instant::now();
    let l = leases.clone();
    let recall = tokio::spawn(async move { l.recall("/d", id).await });
    tokio::time::sleep(Duration::from_millis(cfg.lease_recall_timeout_ms + 1)).await;
    assert!(!recall.is_finished(), "revoked at lease_recall_timeout_ms");
    tokio::time::sleep_until(start + cfg.lease_valid_for()).await;
    assert!(
        !recall.is_finished(),
        "revoked while the holder may still answer"
    );
    let Ok(Recalled::Revoked) = recall.await else {
        panic!("the recall did not revoke the lease");
    };
    assert!(start.elapsed() >= cfg.lease_fence());
    assert_eq!(leases.counters.revocations.load(Ordering::Relaxed), 1);

    // Given back meanwhile: the recall ends then, nothing is revoked.
    tokio::time::sleep(Duration::from_secs(60)).await; // past the cool-down
    let eddy_proto::LeaseGrant::Granted { id } = leases.grant("/e", 7) else {
        panic!("no lease granted on /e");
    };
    let l = leases.clone();
    let recall = tokio::spawn(async move { l.recall("/e", id).await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    leases.end("/e", id).unwrap();
    let Ok(Recalled::Returned) = recall.await else {
        panic!("a lease given back was revoked");
    };
    assert_eq!(leases.counters.revocations.load(Ordering::Relaxed), 1);
}
