//! A file moved between backends of one link (decision 0073), with 3 daemons: a rename to a
//! name whose placement picks another backend, or `user.eddy.backend` set to another, moves
//! the file at the next write-back (every byte, those never cached in Eddy and those
//! changed since), and removes it from the old backend; a target backend that is full or
//! read-only fails the move with an error naming it, the data staying in the old backend and
//! in Eddy, and the next stage-out after the fix moves it.

use super::backends::{backend_of, decl, found_in, multi, per_backend, rule};
use super::*;
use eddy_client::XattrSet;
use eddy_config::{PlacementRule, BACKEND_XATTR};

/// The error of the stage-out result for `path`.
fn error_of(results: &[FileResult], path: &str) -> String {
    let r = results
        .iter()
        .find(|r| r.path == path)
        .unwrap_or_else(|| panic!("no result for {path}: {results:#?}"));
    r.error
        .clone()
        .unwrap_or_else(|| panic!("{path} moved: {results:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_renamed_into_another_backend_moves_there_at_the_next_write_back() {
    let (fast, archive, small) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        Tmpfs::new(MIB as u64),
    );
    let (pf, pa, ps) = (fast.path(), archive.path(), small.path());
    let stores = [("fast", pf), ("archive", pa), ("small", ps)];
    // In the default backend already, never read through Eddy: none of it is cached (and
    // larger than one piece of a move's copy).
    std::fs::create_dir(pf.join("old")).unwrap();
    let cold = random_bytes(9 * MIB + 12_345);
    std::fs::write(pf.join("old/cold"), &cold).unwrap();
    let rules = vec![
        PlacementRule {
            path: Some("/w/**/*.tar".into()),
            ..rule("archive")
        },
        PlacementRule {
            path: Some("/w/tiny/**".into()),
            ..rule("small")
        },
    ];
    let backends = vec![
        decl("fast", "/w", pf, "ext4"),
        decl("archive", "/w", pa, "archive"),
        decl("small", "/w", ps, "tmpfs"),
    ];
    let cl = Cluster::start_with(3, multi(pf, backends, rules));
    let c = cl.client().await;
    let me = Creds::root();

    // Written back to the default backend, then renamed to names ruled for the archive.
    let mut new = random_bytes(700_000);
    write_all(&c, "/w/new", &new, false).await;
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    assert_eq!(found_in("new", &stores), ["fast"]);
    assert_eq!(backend_of(&c, "/w/new").await, "fast");
    c.rename("/w/new", "/w/new.tar", me).await.unwrap();
    c.rename("/w/old/cold", "/w/old/cold.tar", me)
        .await
        .unwrap();
    // Renamed in its backend at once; its attribute names where it goes.
    assert_eq!(found_in("new.tar", &stores), ["fast"]);
    assert_eq!(found_in("old/cold.tar", &stores), ["fast"]);
    assert_eq!(backend_of(&c, "/w/new.tar").await, "archive");
    assert_eq!(backend_of(&c, "/w/old/cold.tar").await, "archive");
    // Changed after the rename: the change goes to the new backend too.
    let f = c.open("/w/new.tar", libc::O_RDWR, 0, me).await.unwrap();
    c.pwrite(&f, 300_000, b"CHANGED AFTER THE RENAME")
        .await
        .unwrap();
    c.close(&f).await.unwrap();
    new[300_000..300_024].copy_from_slice(b"CHANGED AFTER THE RENAME");
    same(
        &eddy_testkit::read_all(&c, "/w/new.tar").await,
        &new,
        "before the move",
    );
    let before = per_backend(&c).await;
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    for (p, data) in [("new.tar", &new), ("old/cold.tar", &cold)] {
        assert_eq!(found_in(p, &stores), ["archive"], "backends holding {p}");
        same(&std::fs::read(pa.join(p)).unwrap(), data, p);
        assert_eq!(backend_of(&c, &format!("/w/{p}")).await, "archive");
        same(
            &eddy_testkit::read_all(&c, &format!("/w/{p}")).await,
            data,
            "read after the move",
        );
    }
    assert!(
        std::fs::read_dir(pa.join("old")).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains("eddy-move")),
        "no hidden copy left"
    );
    assert_eq!(total(&c, |t| t.dirty_bytes).await, 0);
    let after = per_backend(&c).await;
    assert!(
        after["archive"].written_bytes - before["archive"].written_bytes
            >= (new.len() + cold.len()) as u64,
        "{after:#?}"
    );
    // Renamed back to a name no rule takes: moved to the default backend again.
    c.rename("/w/new.tar", "/w/new", me).await.unwrap();
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    assert_eq!(found_in("new", &stores), ["fast"]);
    same(&std::fs::read(pf.join("new")).unwrap(), &new, "moved back");

    // A target backend too small: the error names it, the data stays where it was and in
    // Eddy; after room is made, the next stage-out moves it.
    let big = random_bytes(2 * MIB);
    write_all(&c, "/w/big", &big, false).await;
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    c.mkdir("/w/tiny", 0o755, me).await.unwrap();
    c.rename("/w/big", "/w/tiny/big", me).await.unwrap();
    for _ in 0..2 {
        let results = c.stage_out(&[], &|_| {}).await.unwrap();
        let err = error_of(&results, "/w/tiny/big");
        assert!(
            err.contains("backend small") && err.contains("free"),
            "{err}"
        );
        assert_eq!(found_in("tiny/big", &stores), ["fast"]);
        same(
            &std::fs::read(pf.join("tiny/big")).unwrap(),
            &big,
            "kept in the old backend",
        );
        same(
            &eddy_testkit::read_all(&c, "/w/tiny/big").await,
            &big,
            "kept readable in Eddy",
        );
    }
    run_ok(
        Command::new("mount")
            .args(["-o", "remount,size=8m"])
            .arg(ps),
    );
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    assert_eq!(found_in("tiny/big", &stores), ["small"]);
    same(&std::fs::read(ps.join("tiny/big")).unwrap(), &big, "moved");
    assert_eq!(backend_of(&c, "/w/tiny/big").await, "small");

    // By attribute: another backend named for a written-back file moves it the same way;
    // a read-only target fails the move with EROFS named after it, until it is writable.
    c.setxattr("/w/tiny/big", BACKEND_XATTR, b"archive", XattrSet::Any, me)
        .await
        .unwrap();
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    assert_eq!(found_in("tiny/big", &stores), ["archive"]);
    same(
        &std::fs::read(pa.join("tiny/big")).unwrap(),
        &big,
        "by attribute",
    );
    run_ok(Command::new("mount").args(["-o", "remount,ro"]).arg(ps));
    c.setxattr("/w/tiny/big", BACKEND_XATTR, b"small", XattrSet::Any, me)
        .await
        .unwrap();
    let results = c.stage_out(&[], &|_| {}).await.unwrap();
    let err = error_of(&results, "/w/tiny/big");
    assert!(
        err.contains("backend small") && err.contains("Read-only"),
        "{err}"
    );
    assert_eq!(found_in("tiny/big", &stores), ["archive"]);
    same(
        &eddy_testkit::read_all(&c, "/w/tiny/big").await,
        &big,
        "kept readable in Eddy",
    );
    run_ok(Command::new("mount").args(["-o", "remount,rw"]).arg(ps));
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    assert_eq!(found_in("tiny/big", &stores), ["small"]);
    same(
        &std::fs::read(ps.join("tiny/big")).unwrap(),
        &big,
        "retried",
    );
    assert_eq!(total(&c, |t| t.dirty_bytes).await, 0);
    drop(c);
    drop(cl);
}
