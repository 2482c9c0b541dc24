//! The cache under pressure: eviction within each daemon's capacity, pins until unpinned.

use super::*;

/// The configuration of the eviction tests: 32 MiB of cache per daemon.
fn small_cache(links: &[(&str, &Path)]) -> Config {
    Config {
        cache_capacity_bytes: 32 * MIB as u64,
        ..linked(links)
    }
}

/// A 200 MiB working set (100 MiB written, 100 MiB of backend files read) through caches of
/// 32 MiB per daemon: all data correct, chunks evicted, every daemon within its capacity, and
/// stage-out writes everything written to the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_keeps_each_daemon_within_its_capacity() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    std::fs::create_dir(b.join("in")).unwrap();
    let mut inputs = Vec::new();
    for i in 0..10 {
        let data = random_bytes(10 * MIB + 1000 * i);
        std::fs::write(b.join(format!("in/r{i}")), &data).unwrap();
        inputs.push(data);
    }
    let cl = Cluster::start_with(3, small_cache(&[("/", b)]));
    let cap = cl.dep.config.cache_capacity_bytes;
    let c = cl.client().await;
    c.mkdir("/out", 0o755, Creds::root()).await.unwrap();
    let mut outputs = Vec::new();
    for i in 0..10 {
        let data = random_bytes(10 * MIB + 333 * i);
        write_all(&c, &format!("/out/w{i}"), &data, false).await;
        outputs.push(data);
    }
    for (i, want) in inputs.iter().enumerate() {
        same(
            &eddy_testkit::read_all(&c, &format!("/in/r{i}")).await,
            want,
            &format!("in/r{i}"),
        );
    }
    for (i, want) in outputs.iter().enumerate() {
        same(
            &eddy_testkit::read_all(&c, &format!("/out/w{i}")).await,
            want,
            &format!("out/w{i}"),
        );
    }
    let st = statuses(&c).await;
    for s in &st {
        eprintln!(
            "daemon {}: {} bytes of chunks, {} evictions, {} fetches, {} bytes written back",
            s.id, s.chunk_bytes, s.tier.evictions, s.tier.fetches, s.tier.backend_write_bytes
        );
    }
    assert!(
        st.iter().map(|s| s.tier.evictions).sum::<u64>() > 0,
        "no eviction"
    );
    for s in &st {
        // "Around the capacity": a few chunks of slack for writes racing the eviction.
        assert!(
            s.chunk_bytes <= cap + MIB as u64,
            "daemon {} holds {} bytes of chunks, capacity {cap}",
            s.id,
            s.chunk_bytes
        );
        assert!(s.tier.evictions > 0, "daemon {} evicted nothing", s.id);
    }
    let results = c.stage_out(&[], &|_| {}).await.unwrap();
    all_ok(&results);
    for (i, want) in outputs.iter().enumerate() {
        same(
            &std::fs::read(b.join(format!("out/w{i}"))).unwrap(),
            want,
            &format!("backend out/w{i}"),
        );
    }
    for (i, want) in inputs.iter().enumerate() {
        same(
            &std::fs::read(b.join(format!("in/r{i}"))).unwrap(),
            want,
            &format!("backend in/r{i} (read only)"),
        );
    }
}

/// A 20 MiB tree staged in with a pin stays cached while 200 MiB of other data pass through
/// 32 MiB caches; once unpinned, it can be evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_stage_in_survives_cache_pressure_until_unpinned() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    std::fs::create_dir_all(b.join("pinned/sub")).unwrap();
    std::fs::create_dir(b.join("other")).unwrap();
    let mut pinned = Vec::new();
    for i in 0..5 {
        let p = if i % 2 == 0 {
            format!("pinned/p{i}")
        } else {
            format!("pinned/sub/p{i}")
        };
        let data = random_bytes(4 * MIB);
        std::fs::write(b.join(&p), &data).unwrap();
        pinned.push((p, data));
    }
    for i in 0..20 {
        std::fs::write(b.join(format!("other/o{i}")), random_bytes(10 * MIB)).unwrap();
    }
    let cl = Cluster::start_with(3, small_cache(&[("/", b)]));
    let c = cl.client().await;
    let results = c.stage_in(&["/pinned".to_string()], true, &|_| {}).await;
    assert_eq!(results.len(), 5, "{results:?}");
    all_ok(&results);
    assert_eq!(
        results.iter().map(|r| r.bytes).sum::<u64>(),
        20 * MIB as u64
    );
    let pins: Vec<u64> = statuses(&c)
        .await
        .iter()
        .map(|s| s.tier.pinned_bytes)
        .collect();
    assert_eq!(pins.iter().sum::<u64>(), 20 * MIB as u64, "{pins:?}");

    // 200 MiB of other data.
    for i in 0..20 {
        let got = eddy_testkit::read_all(&c, &format!("/other/o{i}")).await;
        same(
            &got,
            &std::fs::read(b.join(format!("other/o{i}"))).unwrap(),
            &format!("other/o{i}"),
        );
    }
    let st = statuses(&c).await;
    assert!(st.iter().map(|s| s.tier.evictions).sum::<u64>() > 0);
    let pins_after: Vec<u64> = st.iter().map(|s| s.tier.pinned_bytes).collect();
    assert_eq!(pins_after, pins, "pinned bytes per daemon changed");
    let fetched = total(&c, |t| t.fetches).await;
    for (p, want) in &pinned {
        same(&eddy_testkit::read_all(&c, &format!("/{p}")).await, want, p);
    }
    assert_eq!(
        total(&c, |t| t.fetches).await,
        fetched,
        "reading pinned files fetched from the backend"
    );

    let unpinned = c.unpin(&["/pinned".to_string()]).await.unwrap();
    assert_eq!(unpinned, (20 * MIB / (64 * KIB)) as u64, "chunks unpinned");
    assert_eq!(total(&c, |t| t.pinned_bytes).await, 0);
    for i in 0..12 {
        eddy_testkit::read_all(&c, &format!("/other/o{i}")).await;
    }
    let fetched = total(&c, |t| t.fetches).await;
    for (p, want) in &pinned {
        same(&eddy_testkit::read_all(&c, &format!("/{p}")).await, want, p);
    }
    assert!(
        total(&c, |t| t.fetches).await > fetched,
        "unpinned files were never evicted"
    );
}
