//! Reads and listings of backend files: lazy import, the backend's bytes, one fetch per cold chunk, read-ahead, changes seen on the next open.

use super::*;

/// 100,000 files made directly in the backend are listed, through the library page by page
/// (resumed by cookie) and through the mount, exactly; a stat shows the backend's size and
/// mtime without fetching any data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_backend_directory_is_listed_lazily() {
    const N: usize = 100_000;
    let backend = tempfile::tempdir().unwrap();
    let many = backend.path().join("many");
    std::fs::create_dir(&many).unwrap();
    let mut want: Vec<String> = (0..N).map(|i| format!("f{i:06}")).collect();
    for n in &want {
        std::fs::File::create(many.join(n)).unwrap();
    }
    // One of them with data and an exact mtime.
    std::fs::write(many.join("f050000"), random_bytes(12_345)).unwrap();
    set_mtime(&many.join("f050000"), 1_600_000_000, 123_456_789);
    want.sort();

    // The first page imports each daemon's third of the 100,000 names in one request: on a
    // loaded 2-core machine with a debug build that can take longer than the tests' usual
    // deadline.
    let config = Config {
        rpc_timeout_ms: 30_000,
        ..linked(&[("/", backend.path())])
    };
    let m = Mounted::start_with(3, config);
    let c = m.cluster.client().await;
    let listed = list_by_cookie(&c, "/many", 10).await;
    assert_eq!(listed.len(), N, "entries listed through the library");
    assert!(listed == want, "names listed through the library differ");

    let out = m.ok("ls many | wc -l");
    assert_eq!(out.trim(), N.to_string(), "ls many | wc -l on the mount");
    let mut on_mount: Vec<String> = std::fs::read_dir(m.path("many"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    on_mount.sort();
    assert!(on_mount == want, "names listed through the mount differ");

    let i = c.stat("/many/f050000").await.unwrap();
    assert_eq!(i.kind, FileKind::File);
    assert_eq!(i.size, 12_345);
    assert_eq!((i.mtime.sec, i.mtime.nsec), (1_600_000_000, 123_456_789));
    let md = std::fs::metadata(m.path("many/f050000")).unwrap();
    assert_eq!(md.len(), 12_345);
    assert_eq!((md.mtime(), md.mtime_nsec()), (1_600_000_000, 123_456_789));
    assert_eq!(
        total(&c, |t| t.fetches).await,
        0,
        "listing and stat fetched data"
    );
    assert_eq!(total(&c, |t| t.cached_bytes).await, 0);
}

/// Backend files read at random offsets and lengths by many processes at once through the
/// mount, and by several library clients at once, give the backend's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_from_many_processes_equal_the_backend_bytes() {
    let backend = tempfile::tempdir().unwrap();
    let sizes = [3 * MIB + 12_345, 5 * MIB + 1, 2 * MIB + 65_535];
    let mut files = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let data = random_bytes(size);
        std::fs::write(backend.path().join(format!("file{i}")), &data).unwrap();
        files.push(data);
    }
    let m = Mounted::start_with(3, linked(&[("/", backend.path())]));

    // Rounds of 8 dd processes at once, each reading one random range of one file.
    let mut rng_state = 0x1234_5678_9abc_def0u64;
    let mut next = move |bound: usize| {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        (rng_state % bound as u64) as usize
    };
    for _round in 0..8 {
        let mut children = Vec::new();
        for _ in 0..8 {
            let i = next(files.len());
            let size = files[i].len();
            let off = next(size);
            let len = 1 + next((size - off).min(700 * KIB));
            let child = Command::new("dd")
                .arg(format!("if={}", m.path(&format!("file{i}")).display()))
                .arg("iflag=skip_bytes,count_bytes")
                .arg(format!("skip={off}"))
                .arg(format!("count={len}"))
                .arg("bs=256K")
                .arg("status=none")
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            children.push((i, off, len, child));
        }
        for (i, off, len, child) in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "dd of file{i} at {off}+{len} failed");
            same(
                &out.stdout,
                &files[i][off..off + len],
                &format!("dd of file{i} at {off}+{len} through the mount"),
            );
        }
    }
    // Whole files through the mount.
    for (i, want) in files.iter().enumerate() {
        let got = std::fs::read(m.path(&format!("file{i}"))).unwrap();
        same(&got, want, &format!("whole file{i} through the mount"));
    }

    // Three library clients, each with several reads in flight at once.
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(m.cluster.client().await);
    }
    let mut reads = Vec::new();
    for r in 0..24 {
        let i = next(files.len());
        let size = files[i].len();
        let off = next(size);
        let len = 1 + next((size - off).min(MIB + 3));
        let c = clients[r % 3].clone();
        reads.push(async move {
            let f = c
                .open(&format!("/file{i}"), libc::O_RDONLY, 0, Creds::root())
                .await
                .unwrap();
            let got = c.pread(&f, off as u64, len).await.unwrap();
            (i, off, len, got)
        });
    }
    for (i, off, len, got) in futures::future::join_all(reads).await {
        same(
            &got,
            &files[i][off..off + len],
            &format!("library read of file{i} at {off}+{len}"),
        );
    }
    let c = &clients[0];
    assert!(total(c, |t| t.fetches).await > 0);
    // Reads past the end are short, at the end empty.
    let f = c
        .open("/file1", libc::O_RDONLY, 0, Creds::root())
        .await
        .unwrap();
    let end = files[1].len() as u64;
    same(
        &c.pread(&f, end - 10, 100).await.unwrap(),
        &files[1][files[1].len() - 10..],
        "read across the end",
    );
    assert!(c.pread(&f, end, 100).await.unwrap().is_empty());
}

/// N readers of one cold chunk at once cause one backend read; a sequential reader has the
/// next chunks fetched ahead of it, so reading them fetches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_fetch_per_cold_chunk_and_read_ahead_for_sequential_readers() {
    let backend = tempfile::tempdir().unwrap();
    let cs = 64 * KIB;
    let cold = random_bytes(12 * cs + 777);
    let seq = random_bytes(20 * cs + 4321);
    std::fs::write(backend.path().join("cold.bin"), &cold).unwrap();
    std::fs::write(backend.path().join("seq.bin"), &seq).unwrap();
    let cl = Cluster::start_with(3, linked(&[("/", backend.path())]));
    assert_eq!(cl.dep.config.chunk_size as usize, cs);
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(cl.client().await);
    }
    let c = clients[0].clone();

    // 8 readers (4 clients, 2 reads each, same range of chunk 9) of a chunk nobody read.
    let before = statuses(&c).await;
    let (off, len) = (9 * cs + 100, 1000);
    let reads = (0..8).map(|r| {
        let c = clients[r % 4].clone();
        async move {
            let f = c
                .open("/cold.bin", libc::O_RDONLY, 0, Creds::root())
                .await
                .unwrap();
            c.pread(&f, off as u64, len).await.unwrap()
        }
    });
    for got in futures::future::join_all(reads).await {
        same(&got, &cold[off..off + len], "concurrent read of chunk 9");
    }
    let after = statuses(&c).await;
    let fetches: u64 = after.iter().map(|s| s.tier.fetches).sum::<u64>()
        - before.iter().map(|s| s.tier.fetches).sum::<u64>();
    let read_bytes: u64 = after.iter().map(|s| s.tier.backend_read_bytes).sum::<u64>()
        - before
            .iter()
            .map(|s| s.tier.backend_read_bytes)
            .sum::<u64>();
    assert_eq!(fetches, 1, "8 concurrent readers of one cold chunk");
    assert_eq!(read_bytes, cs as u64, "one chunk read from the backend");
    assert_eq!(total(&c, |t| t.cached_chunks).await, 1);

    // A sequential reader: after chunk 0, the next chunks get cached without being read.
    let cached0 = total(&c, |t| t.cached_chunks).await;
    let f = c
        .open("/seq.bin", libc::O_RDONLY, 0, Creds::root())
        .await
        .unwrap();
    same(
        &c.pread(&f, 0, cs).await.unwrap(),
        &seq[..cs],
        "chunk 0 of seq.bin",
    );
    let ahead = c.config().readahead_chunks as u64;
    assert!(ahead >= 2, "the default read-ahead is several chunks");
    assert!(
        wait_for(&c, |n| n >= cached0 + 1 + ahead, |t| t.cached_chunks).await,
        "after reading chunk 0 of seq.bin, {} chunks are cached, expected {} (read-ahead of {ahead})",
        total(&c, |t| t.cached_chunks).await,
        cached0 + 1 + ahead
    );
    // Reading the chunks fetched ahead reads nothing from the backend. Another handle reads
    // them one by one, each after a read of the last chunk (never near the previous read, so
    // that these reads start no read-ahead of their own).
    let g = c
        .open("/seq.bin", libc::O_RDONLY, 0, Creds::root())
        .await
        .unwrap();
    let last = 20 * cs;
    same(
        &c.pread(&g, last as u64, cs).await.unwrap(),
        &seq[last..],
        "last chunk of seq.bin",
    );
    let fetched = total(&c, |t| t.fetches).await;
    for k in 1..=ahead as usize {
        same(
            &c.pread(&g, (k * cs) as u64, cs).await.unwrap(),
            &seq[k * cs..(k + 1) * cs],
            &format!("chunk {k} of seq.bin"),
        );
        c.pread(&g, last as u64, cs).await.unwrap();
    }
    assert_eq!(
        total(&c, |t| t.fetches).await,
        fetched,
        "chunks fetched ahead were fetched again"
    );
    // The rest of the file, sequentially, is right too.
    same(
        &eddy_testkit::read_all(&c, "/seq.bin").await,
        &seq,
        "seq.bin",
    );
}

/// A file changed in the backend after it was read (new contents, size and mtime) is read
/// anew on the next open, through the library and through the mount; a file removed from
/// the backend is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_changes_are_seen_on_the_next_open() {
    let backend = tempfile::tempdir().unwrap();
    let (f, g) = (backend.path().join("f"), backend.path().join("g"));
    let a = random_bytes(200_000);
    std::fs::write(&f, &a).unwrap();
    std::fs::write(&g, &a).unwrap();
    set_mtime(&f, 1_500_000_000, 0);
    set_mtime(&g, 1_500_000_000, 0);
    let m = Mounted::start_with(3, linked(&[("/", backend.path())]));
    let c = m.cluster.client().await;
    // Replaces a backend file's contents and mtime.
    let change = |p: &Path, data: &[u8], sec: u64, nsec: u32| {
        std::fs::write(p, data).unwrap();
        set_mtime(p, sec, nsec);
    };

    // Through the library: /f.
    same(
        &eddy_testkit::read_all(&c, "/f").await,
        &a,
        "f before the change",
    );
    let b = random_bytes(333_333);
    change(&f, &b, 1_500_000_100, 5);
    same(
        &eddy_testkit::read_all(&c, "/f").await,
        &b,
        "f after it grew in the backend",
    );
    let i = c.stat("/f").await.unwrap();
    assert_eq!(i.size, b.len() as u64);
    assert_eq!((i.mtime.sec, i.mtime.nsec), (1_500_000_100, 5));
    // Smaller: nothing of the old generation shows past the new end.
    let small = random_bytes(70_000);
    change(&f, &small, 1_500_000_200, 0);
    same(
        &eddy_testkit::read_all(&c, "/f").await,
        &small,
        "f after it shrank",
    );
    let h = c
        .open("/f", libc::O_RDONLY, 0, Creds::root())
        .await
        .unwrap();
    assert!(c.pread(&h, 70_000, 100_000).await.unwrap().is_empty());
    // Removed in the backend: gone from Eddy on the next open.
    std::fs::remove_file(&f).unwrap();
    let e = c
        .open("/f", libc::O_RDONLY, 0, Creds::root())
        .await
        .expect_err("open of a file removed from the backend");
    assert_eq!(e.errno, libc::ENOENT, "{e:?}");

    // Through the mount: /g. The kernel caches attributes for fuse_attr_ttl_ms, so each
    // reopen comes that long after the change.
    let ttl = Duration::from_millis(c.config().fuse_attr_ttl_ms + 500);
    same(
        &std::fs::read(m.path("g")).unwrap(),
        &a,
        "g before the change",
    );
    change(&g, &b, 1_500_000_100, 5);
    tokio::time::sleep(ttl).await;
    same(
        &std::fs::read(m.path("g")).unwrap(),
        &b,
        "g through the mount after it grew in the backend",
    );
    change(&g, &small, 1_500_000_200, 0);
    tokio::time::sleep(ttl).await;
    same(
        &std::fs::read(m.path("g")).unwrap(),
        &small,
        "g through the mount after it shrank in the backend",
    );
    std::fs::remove_file(&g).unwrap();
    tokio::time::sleep(ttl).await;
    let e = std::fs::read(m.path("g")).expect_err("g was removed from the backend");
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
}

/// `posix_fadvise` through the library: `WILLNEED` of a range fetches exactly its chunks in
/// the background (reading them afterwards fetches nothing), `RANDOM` stops a sequential
/// reader's read-ahead, `SEQUENTIAL` makes a reader that jumps read ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advice_fetches_ahead_and_turns_read_ahead_on_and_off() {
    let backend = tempfile::tempdir().unwrap();
    let cs = 64 * KIB;
    let data = random_bytes(40 * cs + 99);
    std::fs::write(backend.path().join("big.bin"), &data).unwrap();
    std::fs::write(backend.path().join("rand.bin"), &data).unwrap();
    std::fs::write(backend.path().join("jump.bin"), &data).unwrap();
    let cl = Cluster::start_with(3, linked(&[("/", backend.path())]));
    let c = cl.client().await;
    let open = |p: &'static str| {
        let c = c.clone();
        async move { c.open(p, libc::O_RDONLY, 0, Creds::root()).await.unwrap() }
    };

    // WILLNEED of chunks 10..30 (bytes 10 cs + 5 up to 30 cs - 5): those 20 chunks, no more.
    let f = open("/big.bin").await;
    let cached0 = total(&c, |t| t.cached_chunks).await;
    let fetched0 = total(&c, |t| t.fetches).await;
    c.advise(
        &f,
        (10 * cs + 5) as u64,
        (20 * cs - 10) as u64,
        Advice::WillNeed,
    )
    .await
    .unwrap();
    assert!(
        wait_for(&c, |n| n >= cached0 + 20, |t| t.cached_chunks).await,
        "WILLNEED of 20 chunks cached {} of them",
        total(&c, |t| t.cached_chunks).await - cached0
    );
    let fetched = total(&c, |t| t.fetches).await;
    assert_eq!(
        fetched - fetched0,
        20,
        "WILLNEED fetched chunks outside its range"
    );
    // Read with another handle that reads ahead nothing of its own (RANDOM).
    let g = open("/big.bin").await;
    c.advise(&g, 0, 0, Advice::Random).await.unwrap();
    for k in 10..30 {
        same(
            &c.pread(&g, (k * cs) as u64, cs).await.unwrap(),
            &data[k * cs..(k + 1) * cs],
            &format!("chunk {k} of big.bin"),
        );
    }
    assert_eq!(
        total(&c, |t| t.fetches).await,
        fetched,
        "chunks fetched by WILLNEED were fetched again"
    );
    // Past the end, and with a length of 0 (to the end): nothing wrong, the rest fetched.
    c.advise(&f, 1 << 40, 10, Advice::WillNeed).await.unwrap();
    c.advise(&f, (39 * cs) as u64, 0, Advice::WillNeed)
        .await
        .unwrap();
    assert!(
        wait_for(&c, |n| n >= cached0 + 22, |t| t.cached_chunks).await,
        "WILLNEED to the end of big.bin cached its last two chunks"
    );

    // RANDOM: a sequential reader reads ahead nothing.
    let r = open("/rand.bin").await;
    c.advise(&r, 0, 0, Advice::Random).await.unwrap();
    let before = total(&c, |t| t.fetches).await;
    for k in 0..6 {
        c.pread(&r, (k * cs) as u64, cs).await.unwrap();
    }
    // Anything read ahead would be fetched by now: the reads' own fetches are awaited, and
    // a read-ahead starts with the read that asks for it. Wait a little for a stray one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        total(&c, |t| t.fetches).await - before,
        6,
        "a reader advised RANDOM read ahead"
    );

    // SEQUENTIAL: a reader that starts in the middle of the file reads ahead at once.
    let j = open("/jump.bin").await;
    c.advise(&j, 0, 0, Advice::Sequential).await.unwrap();
    let before = total(&c, |t| t.cached_chunks).await;
    c.pread(&j, (30 * cs) as u64, cs).await.unwrap();
    let ahead = c.config().readahead_chunks as u64;
    assert!(
        wait_for(&c, |n| n > before + ahead, |t| t.cached_chunks).await,
        "a reader advised SEQUENTIAL that started at chunk 30 read ahead nothing"
    );
    assert!(Advice::from_posix(99).is_err());
}
