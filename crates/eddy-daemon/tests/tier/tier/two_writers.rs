//! Two deployments caching one backend directory, both writing one file (decision 0030):
//! the second stage-out does not silently write over the first one's bytes. The conflict is
//! seen on open and at stage-out, shown by status, held back from write-back, and resolved
//! only by a stage-out with `overwrite`.

use super::*;

/// Opens an existing file through the library and writes `data` at its start.
async fn write_head(c: &Client, path: &str, data: &[u8]) {
    let f = c
        .open(path, libc::O_WRONLY, 0, Creds::root())
        .await
        .unwrap_or_else(|e| panic!("open {path}: {e:?}"));
    c.pwrite(&f, 0, data).await.unwrap();
    c.close(&f).await.unwrap();
}

/// The conflicts the deployment's daemons report: their count and paths.
async fn conflicts(c: &Client) -> (u64, Vec<String>) {
    let mut paths = Vec::new();
    let mut n = 0;
    for s in statuses(c).await {
        n += s.tier.conflicts;
        paths.extend(s.tier.conflict_paths);
    }
    paths.sort();
    (n, paths)
}

/// The stage-out results as path → "ok", "EBUSY" or the whole error.
fn errnos(results: &[FileResult]) -> BTreeMap<String, String> {
    results
        .iter()
        .map(|r| {
            let e = match &r.error {
                None => "ok".to_string(),
                Some(e) if e.ends_with("(EBUSY)") => "EBUSY".to_string(),
                Some(e) => e.clone(),
            };
            (r.path.clone(), e)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_cache_does_not_overwrite_the_first_writers_bytes() {
    let backend = tempfile::tempdir().unwrap();
    let b = backend.path();
    let original = random_bytes(100 * KIB);
    std::fs::write(b.join("shared.dat"), &original).unwrap();
    let first = Cluster::start_with(3, linked(&[("/", b)]));
    let second = Cluster::start_with(3, linked(&[("/", b)]));
    let (ca, cb) = (first.client().await, second.client().await);

    // Both take the file and change it; both create one new name.
    let (by_a, by_b) = (random_bytes(70 * KIB), random_bytes(70 * KIB));
    write_head(&ca, "/shared.dat", &by_a).await;
    write_head(&cb, "/shared.dat", &by_b).await;
    write_all(&ca, "/new.dat", b"from the first", false).await;
    write_all(&cb, "/new.dat", b"from the second", false).await;
    write_all(&ca, "/solo.dat", b"round one", false).await;

    // The first stage-out meets no conflict and writes its copies.
    all_ok(&ca.stage_out(&[], &|_| {}).await.unwrap());
    let mut want_a = by_a.clone();
    want_a.extend_from_slice(&original[by_a.len()..]);
    same(
        &std::fs::read(b.join("shared.dat")).unwrap(),
        &want_a,
        "after the first stage-out",
    );
    assert_eq!(
        conflicts(&cb).await.0,
        0,
        "no conflict seen before an open or a stage-out"
    );

    // The second deployment goes on with its dirty copy.
    write_head(&cb, "/shared.dat", &by_b[..10]).await;

    // Its stage-out writes neither file, twice, and says why.
    for round in 0..2 {
        let results = cb.stage_out(&[], &|_| {}).await.unwrap();
        let got = errnos(&results);
        assert_eq!(
            got.get("/shared.dat"),
            Some(&"EBUSY".to_string()),
            "round {round}: {results:#?}"
        );
        assert_eq!(
            got.get("/new.dat"),
            Some(&"EBUSY".to_string()),
            "round {round}: {results:#?}"
        );
        let msg = results
            .iter()
            .find(|r| r.path == "/shared.dat")
            .and_then(|r| r.error.clone())
            .unwrap_or_default();
        assert!(
            msg.contains("another writer") && msg.contains("--overwrite"),
            "{msg}"
        );
        same(
            &std::fs::read(b.join("shared.dat")).unwrap(),
            &want_a,
            "the first writer's bytes",
        );
        assert_eq!(std::fs::read(b.join("new.dat")).unwrap(), b"from the first");
        let (n, paths) = conflicts(&cb).await;
        assert_eq!(
            (n, paths),
            (2, vec!["/new.dat".to_string(), "/shared.dat".to_string()])
        );
        let held: u64 = statuses(&cb).await.iter().map(|s| s.tier.held_back).sum();
        assert!(
            held >= 2,
            "the chunks of both files are held back ({held} daemon-files)"
        );
    }
    // The second deployment still reads its own copy.
    let f = cb
        .open("/shared.dat", libc::O_RDONLY, 0, Creds::root())
        .await
        .unwrap();
    same(
        &cb.pread(&f, 0, 10).await.unwrap(),
        &by_b[..10],
        "the second copy",
    );
    cb.close(&f).await.unwrap();

    // Meanwhile the first deployment changes its (saved) copy again.
    write_head(&ca, "/shared.dat", b"again").await;

    // With overwrite, its copy wins, and nothing is left in conflict or held back.
    all_ok(&cb.stage_out_with(&[], true, &|_| {}).await.unwrap());
    let mut want_b = by_b.clone();
    want_b.extend_from_slice(&original[by_b.len()..]);
    same(
        &std::fs::read(b.join("shared.dat")).unwrap(),
        &want_b,
        "after the overwrite",
    );
    assert_eq!(
        std::fs::read(b.join("new.dat")).unwrap(),
        b"from the second"
    );
    assert_eq!(conflicts(&cb).await.0, 0);
    let held: u64 = statuses(&cb).await.iter().map(|s| s.tier.held_back).sum();
    assert_eq!(held, 0);

    // A deployment's own write-backs are never a conflict: a file only the first one writes
    // goes out at every stage-out.
    write_all(&ca, "/solo.dat", b"round two", false).await;
    let results = ca.stage_out(&[], &|_| {}).await.unwrap();
    assert_eq!(
        errnos(&results).get("/solo.dat"),
        Some(&"ok".to_string()),
        "{results:#?}"
    );
    assert_eq!(std::fs::read(b.join("solo.dat")).unwrap(), b"round two");
    // ... while the file the second one overwrote is now the first one's conflict.
    let results = ca.stage_out(&[], &|_| {}).await.unwrap();
    assert_eq!(
        errnos(&results).get("/shared.dat"),
        Some(&"EBUSY".to_string()),
        "{results:#?}"
    );
    same(
        &std::fs::read(b.join("shared.dat")).unwrap(),
        &want_b,
        "the second writer's bytes",
    );
    // A clean copy is no conflict: it is taken again from the backend on its next open.
    std::fs::write(b.join("new.dat"), b"changed in the backend").unwrap();
    write_head(&cb, "/new.dat", b"CHANGED").await;
    all_ok(&cb.stage_out(&[], &|_| {}).await.unwrap());
    assert_eq!(
        std::fs::read(b.join("new.dat")).unwrap(),
        b"CHANGED in the backend"
    );
}
