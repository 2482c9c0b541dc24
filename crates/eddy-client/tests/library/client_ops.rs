//! Every client-library operation against 3 real daemons, including the error cases.

use eddy_client::{Client, Creds, FileKind, SetAttr, SetTime, Timespec};
use eddy_testkit::{errno, pattern, Cluster};

const RW: i32 = libc::O_RDWR;
const CREAT: i32 = libc::O_RDWR | libc::O_CREAT;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn files_span_chunks_and_daemons() {
    let cl = Cluster::start(3);
    let c = cl.client().await;
    let me = Creds::root();
    let f = c.open("/big", CREAT, 0o644, me).await.unwrap();
    let cs = c.config().chunk_size as usize;
    let data = pattern(1, 0, cs * 7 + 123);
    assert_eq!(c.pwrite(&f, 0, &data).await.unwrap(), data.len());
    assert_eq!(c.stat("/big").await.unwrap().size, data.len() as u64);
    assert_eq!(c.pread(&f, 0, data.len() + 1000).await.unwrap(), data);
    // Unaligned window crossing several chunks.
    let off = cs as u64 * 2 - 17;
    assert_eq!(
        c.pread(&f, off, cs * 3).await.unwrap(),
        &data[off as usize..off as usize + cs * 3]
    );
    // Past end of file: short, then empty.
    assert_eq!(
        c.pread(&f, data.len() as u64 - 10, 100)
            .await
            .unwrap()
            .len(),
        10
    );
    assert!(c
        .pread(&f, data.len() as u64 + 5, 100)
        .await
        .unwrap()
        .is_empty());
    c.fsync(&f).await.unwrap();
    c.close(&f).await.unwrap();
    // Each chunk sits on the daemon placement names for it, and nowhere else.
    let placement = eddy_placement::Placement::new(vec![0, 1, 2]).unwrap();
    let status = c.daemon_status().await;
    assert_eq!(status.len(), 3);
    for (id, s) in status {
        let expected = (0..8)
            .filter(|&k| placement.chunk_owner(f.file_id(), k) == id)
            .count() as u64;
        assert_eq!(s.unwrap().chunks, expected, "chunks held by daemon {id}");
    }
    // A second client (another connection) sees the same bytes.
    let c2 = cl.client().await;
    let g = c2.open("/big", libc::O_RDONLY, 0, me).await.unwrap();
    assert_eq!(c2.pread(&g, 0, data.len()).await.unwrap(), data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn error_cases_give_posix_errnos() {
    // Other users work under the namespace root: it is shared (root_mode 0755).
    let cl = Cluster::start_with(3, eddy_testkit::shared_config());
    let c = cl.client().await;
    let me = Creds::root();
    c.mkdir("/d", 0o755, me).await.unwrap();
    let f = c.open("/d/f", CREAT, 0o644, me).await.unwrap();
    c.pwrite(&f, 0, b"x").await.unwrap();

    assert_eq!(errno(c.stat("/nope").await), libc::ENOENT);
    assert_eq!(errno(c.open("/nope", RW, 0, me).await), libc::ENOENT);
    assert_eq!(errno(c.mkdir("/nope/sub", 0o755, me).await), libc::ENOENT);
    assert_eq!(errno(c.mkdir("/d", 0o755, me).await), libc::EEXIST);
    assert_eq!(
        errno(c.open("/d/f", CREAT | libc::O_EXCL, 0o644, me).await),
        libc::EEXIST
    );
    assert_eq!(errno(c.mkdir("/d/f/sub", 0o755, me).await), libc::ENOTDIR);
    assert_eq!(errno(c.stat("/d/f/sub").await), libc::ENOTDIR);
    assert_eq!(
        errno(
            c.open("/d/f", libc::O_RDONLY | libc::O_DIRECTORY, 0, me)
                .await
        ),
        libc::ENOTDIR
    );
    assert_eq!(
        errno(c.readdir("/d/f", None).unwrap().next_page().await),
        libc::ENOTDIR
    );
    assert_eq!(errno(c.rmdir("/d/f", me).await), libc::ENOTDIR);
    assert_eq!(errno(c.open("/d", RW, 0, me).await), libc::EISDIR);
    assert_eq!(errno(c.unlink("/d", me).await), libc::EISDIR);
    assert_eq!(errno(c.truncate("/d", 0, me).await), libc::EISDIR);
    assert_eq!(errno(c.rmdir("/d", me).await), libc::ENOTEMPTY);
    assert_eq!(errno(c.rmdir("/", me).await), libc::EBUSY);
    assert_eq!(
        errno(c.stat(&format!("/{}", "n".repeat(256))).await),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        errno(c.mkdir(&"/abcdefghijklmnop".repeat(2100), 0o755, me).await),
        libc::ENAMETOOLONG
    );
    assert_eq!(errno(c.stat("relative/path").await), libc::EINVAL);
    assert_eq!(errno(c.stat("/a\0b").await), libc::EINVAL);
    assert_eq!(errno(c.readlink("/d/f").await), libc::EINVAL);
    assert_eq!(errno(c.rename("/d", "/d/inside", me).await), libc::EINVAL);
    // ".." never escapes the namespace.
    assert_eq!(c.stat("/../../d/../d/f").await.unwrap().size, 1);

    let ro = c.open("/d/f", libc::O_RDONLY, 0, me).await.unwrap();
    assert_eq!(errno(c.pwrite(&ro, 0, b"y").await), libc::EBADF);
    let wo = c.open("/d/f", libc::O_WRONLY, 0, me).await.unwrap();
    assert_eq!(errno(c.pread(&wo, 0, 1).await), libc::EBADF);

    // Permissions, for a caller the library checks.
    let alice = Creds::user(1000, 1000);
    let bob = Creds::user(1001, 1001);
    c.mkdir("/home", 0o777, me).await.unwrap();
    let private = c
        .open("/home/alice", CREAT | libc::O_EXCL, 0o600, alice)
        .await
        .unwrap();
    c.pwrite(&private, 0, b"secret").await.unwrap();
    assert_eq!(c.stat("/home/alice").await.unwrap().uid, 1000);
    assert_eq!(
        errno(c.open("/home/alice", libc::O_RDONLY, 0, bob).await),
        libc::EACCES
    );
    assert!(c
        .open("/home/alice", libc::O_RDONLY, 0, alice)
        .await
        .is_ok());
    c.mkdir("/locked", 0o755, me).await.unwrap();
    assert_eq!(
        errno(c.open("/locked/x", CREAT, 0o644, bob).await),
        libc::EACCES
    );
    assert_eq!(errno(c.mkdir("/locked/x", 0o755, bob).await), libc::EACCES);
    let chmod = SetAttr {
        mode: Some(0o644),
        ..SetAttr::default()
    };
    assert_eq!(
        errno(c.setattr("/home/alice", chmod.clone(), bob).await),
        libc::EPERM
    );
    assert_eq!(
        c.setattr("/home/alice", chmod, alice).await.unwrap().mode,
        0o644
    );
    assert!(c.open("/home/alice", libc::O_RDONLY, 0, bob).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rename_files_and_directories() {
    let cl = Cluster::start(3);
    let c = cl.client().await;
    let me = Creds::root();
    let cs = c.config().chunk_size as usize;
    let a = pattern(2, 0, cs * 3 + 5);
    let f = c.create("/a", 0o644, true, me).await.unwrap();
    c.pwrite(&f, 0, &a).await.unwrap();
    let b = pattern(3, 0, cs + 1);
    let g = c.create("/b", 0o644, true, me).await.unwrap();
    c.pwrite(&g, 0, &b).await.unwrap();

    // File onto a new name: data follows, old name gone.
    c.rename("/a", "/a2", me).await.unwrap();
    assert_eq!(errno(c.stat("/a").await), libc::ENOENT);
    let h = c.open("/a2", libc::O_RDONLY, 0, me).await.unwrap();
    assert_eq!(c.pread(&h, 0, a.len()).await.unwrap(), a);
    // File replacing a file.
    c.rename("/b", "/a2", me).await.unwrap();
    let h = c.open("/a2", libc::O_RDONLY, 0, me).await.unwrap();
    assert_eq!(c.pread(&h, 0, a.len()).await.unwrap(), b);
    assert_eq!(errno(c.stat("/b").await), libc::ENOENT);

    // Directory with a subtree.
    c.mkdir("/src", 0o755, me).await.unwrap();
    c.mkdir("/src/sub", 0o700, me).await.unwrap();
    for i in 0..20 {
        let f = c
            .create(&format!("/src/sub/f{i}"), 0o644, true, me)
            .await
            .unwrap();
        c.pwrite(&f, 0, &pattern(i, 0, 1000 + i as usize))
            .await
            .unwrap();
    }
    c.symlink("sub/f1", "/src/link", me).await.unwrap();
    c.rename("/src", "/dst", me).await.unwrap();
    assert_eq!(errno(c.stat("/src").await), libc::ENOENT);
    assert_eq!(errno(c.stat("/src/sub/f3").await), libc::ENOENT);
    assert_eq!(c.stat("/dst/sub").await.unwrap().mode, 0o700);
    for i in 0..20 {
        let f = c
            .open(&format!("/dst/sub/f{i}"), libc::O_RDONLY, 0, me)
            .await
            .unwrap();
        assert_eq!(
            c.pread(&f, 0, 5000).await.unwrap(),
            pattern(i, 0, 1000 + i as usize)
        );
    }
    // The relative symlink still resolves from its new place.
    let l = c.open("/dst/link", libc::O_RDONLY, 0, me).await.unwrap();
    assert_eq!(c.pread(&l, 0, 5000).await.unwrap(), pattern(1, 0, 1001));
    // Directory onto an empty directory replaces it; onto a non-empty one fails.
    c.mkdir("/empty", 0o755, me).await.unwrap();
    c.rename("/dst", "/empty", me).await.unwrap();
    assert!(c.stat("/empty/sub/f0").await.is_ok());
    c.mkdir("/other", 0o755, me).await.unwrap();
    c.mkdir("/other/x", 0o755, me).await.unwrap();
    c.mkdir("/full", 0o755, me).await.unwrap();
    c.mkdir("/full/y", 0o755, me).await.unwrap();
    assert_eq!(
        errno(c.rename("/other", "/full", me).await),
        libc::ENOTEMPTY
    );
    assert_eq!(errno(c.rename("/other", "/a2", me).await), libc::ENOTDIR);
    assert_eq!(errno(c.rename("/a2", "/other", me).await), libc::EISDIR);
    assert_eq!(errno(c.rename("/missing", "/x", me).await), libc::ENOENT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readdir_of_100k_entries_in_pages() {
    let cl = Cluster::start(3);
    let c = cl.client().await;
    let me = Creds::root();
    c.mkdir("/big", 0o755, me).await.unwrap();
    const N: usize = 100_000;
    let names: Vec<String> = (0..N).map(|i| format!("entry-{i:06}")).collect();
    for batch in names.chunks(500) {
        let futs = batch.iter().map(|n| c.mkdir_or_file(n));
        for r in futures::future::join_all(futs).await {
            r.unwrap();
        }
    }
    let mut rd = c.readdir("/big", None).unwrap();
    let mut seen = Vec::with_capacity(N);
    let mut pages = 0;
    while let Some(page) = rd.next_page().await.unwrap() {
        assert!(page.len() <= c.config().readdir_page as usize);
        pages += 1;
        seen.extend(page.into_iter().map(|e| e.name));
        if seen.len() == 1000 {
            // Resume from a cookie in a fresh reader: the continuation is seamless.
            let mut again = c.readdir("/big", rd.cookie().map(String::from)).unwrap();
            let next = again.next_page().await.unwrap().unwrap();
            assert_eq!(next[0].name, names[1000]);
        }
    }
    assert!(pages >= N / c.config().readdir_page as usize);
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(seen, sorted, "every entry exactly once, in name order");
    // The listing of the parent is not polluted by the 100k grandchildren.
    let top = c
        .readdir("/", None)
        .unwrap()
        .next_page()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        top.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        vec!["big"]
    );
}

trait MkOrFile {
    async fn mkdir_or_file(&self, name: &str) -> Result<(), eddy_client::Errno>;
}

impl MkOrFile for eddy_client::Client {
    /// Even entries are files, odd ones directories.
    async fn mkdir_or_file(&self, name: &str) -> Result<(), eddy_client::Errno> {
        let p = format!("/big/{name}");
        let odd = name.bytes().last().is_some_and(|b| b % 2 == 1);
        if odd {
            self.mkdir(&p, 0o755, Creds::root()).await.map(|_| ())
        } else {
            self.create(&p, 0o644, true, Creds::root())
                .await
                .map(|_| ())
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sparse_files_and_truncate_across_chunks() {
    let cl = Cluster::start(3);
    let c = cl.client().await;
    let me = Creds::root();
    let cs = c.config().chunk_size;
    let f = c.create("/sparse", 0o644, true, me).await.unwrap();
    let tail = pattern(9, 0, 100);
    c.pwrite(&f, 10 * cs + 7, &tail).await.unwrap();
    assert_eq!(c.stat("/sparse").await.unwrap().size, 10 * cs + 107);
    let all = c.pread(&f, 0, (11 * cs) as usize).await.unwrap();
    assert_eq!(all.len() as u64, 10 * cs + 107);
    assert!(
        all[..(10 * cs + 7) as usize].iter().all(|&b| b == 0),
        "holes read as zeros"
    );
    assert_eq!(&all[(10 * cs + 7) as usize..], &tail[..]);
    // Into a caller's buffer full of other bytes: the holes are zeros there too, the read is
    // short at the end of the file, and the bytes past it are left alone.
    let mut buf = vec![0xA5u8; (11 * cs) as usize];
    let n = c.pread_into(&f, 0, &mut buf).await.unwrap();
    assert_eq!(n, all.len());
    assert_eq!(&buf[..n], &all[..]);
    assert!(
        buf[n..].iter().all(|&b| b == 0xA5),
        "past the end: untouched"
    );
    let mut past = [0xA5u8; 16];
    assert_eq!(c.pread_into(&f, 11 * cs, &mut past).await.unwrap(), 0);

    // Truncate down into the middle of a chunk, then up again: the cut bytes read as zeros.
    let g = c.create("/t", 0o644, true, me).await.unwrap();
    let data = pattern(4, 0, (4 * cs) as usize);
    c.pwrite(&g, 0, &data).await.unwrap();
    let cut = cs + cs / 3;
    assert_eq!(c.truncate("/t", cut, me).await.unwrap().size, cut);
    assert_eq!(c.stat("/t").await.unwrap().size, cut);
    let h = c.open("/t", libc::O_RDONLY, 0, me).await.unwrap();
    assert_eq!(
        c.pread(&h, 0, (4 * cs) as usize).await.unwrap(),
        &data[..cut as usize]
    );
    c.truncate("/t", 3 * cs + 5, me).await.unwrap();
    let h = c.open("/t", libc::O_RDONLY, 0, me).await.unwrap();
    let back = c.pread(&h, 0, (4 * cs) as usize).await.unwrap();
    assert_eq!(back.len() as u64, 3 * cs + 5);
    assert_eq!(&back[..cut as usize], &data[..cut as usize]);
    assert!(back[cut as usize..].iter().all(|&b| b == 0));
    // O_TRUNC empties the file; the old data does not come back when it grows again.
    let t = c
        .open("/t", libc::O_RDWR | libc::O_TRUNC, 0, me)
        .await
        .unwrap();
    assert_eq!(c.stat("/t").await.unwrap().size, 0);
    c.ftruncate(&t, 2 * cs).await.unwrap();
    assert!(c
        .pread(&t, 0, (2 * cs) as usize)
        .await
        .unwrap()
        .iter()
        .all(|&b| b == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn symlinks_attributes_statfs_unlink() {
    let cl = Cluster::start(3);
    let c = cl.client().await;
    let me = Creds::root();
    let f = c.create("/file", 0o640, true, me).await.unwrap();
    c.pwrite(&f, 0, b"hello").await.unwrap();
    let l = c.symlink("/file", "/link", me).await.unwrap();
    assert_eq!(l.kind, FileKind::Symlink);
    assert_eq!(c.readlink("/link").await.unwrap(), "/file");
    assert_eq!(c.stat("/link").await.unwrap().kind, FileKind::Symlink);
    let via = c.open("/link", libc::O_RDONLY, 0, me).await.unwrap();
    assert_eq!(c.pread(&via, 0, 10).await.unwrap(), b"hello");
    assert_eq!(
        errno(
            c.open("/link", libc::O_RDONLY | libc::O_NOFOLLOW, 0, me)
                .await
        ),
        libc::ELOOP
    );
    c.symlink("/loop2", "/loop1", me).await.unwrap();
    c.symlink("/loop1", "/loop2", me).await.unwrap();
    assert_eq!(
        errno(c.open("/loop1", libc::O_RDONLY, 0, me).await),
        libc::ELOOP
    );
    assert_eq!(errno(c.symlink("/x", "/link", me).await), libc::EEXIST);

    let t = Timespec {
        sec: 1_000_000_000,
        nsec: 5,
    };
    let attr = SetAttr {
        mode: Some(0o4711),
        uid: Some(7),
        gid: Some(8),
        atime: Some(SetTime::At(t)),
        mtime: Some(SetTime::At(t)),
        size: None,
    };
    let i = c.setattr("/file", attr, me).await.unwrap();
    assert_eq!(
        (i.mode, i.uid, i.gid, i.atime, i.mtime),
        (0o4711, 7, 8, t, t)
    );
    let now = c
        .setattr(
            "/file",
            SetAttr {
                mtime: Some(SetTime::Now),
                ..SetAttr::default()
            },
            me,
        )
        .await
        .unwrap();
    assert!(now.mtime > t);
    assert_eq!(c.stat("/file").await.unwrap().mode, 0o4711);

    let s = c.statfs().await.unwrap();
    assert!(s.total_bytes > 0 && s.avail_bytes > 0 && s.avail_bytes <= s.total_bytes);

    c.unlink("/link", me).await.unwrap();
    assert!(
        c.stat("/file").await.is_ok(),
        "unlinking a symlink leaves its target"
    );
    // Closed first: a file open through this client lives on until its last close.
    c.close(&f).await.unwrap();
    c.close(&via).await.unwrap();
    c.unlink("/file", me).await.unwrap();
    assert_eq!(errno(c.stat("/file").await), libc::ENOENT);
    assert_eq!(errno(c.unlink("/file", me).await), libc::ENOENT);
    // The data went with the name: no chunk is left on any daemon.
    for (_, s) in c.daemon_status().await {
        assert_eq!(s.unwrap().chunks, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_and_disjoint_writers_in_one_process() {
    let cl = Cluster::start(3);
    let c = cl.client().await;
    let me = Creds::root();
    c.create("/log", 0o644, true, me).await.unwrap();
    const WRITERS: usize = 8;
    const RECORDS: usize = 50;
    const REC: usize = 1000;
    let tasks = (0..WRITERS).map(|w| {
        let c = c.clone();
        tokio::spawn(async move {
            let f = c
                .open("/log", libc::O_WRONLY | libc::O_APPEND, 0, Creds::root())
                .await
                .unwrap();
            for r in 0..RECORDS {
                let mut rec = vec![b'a' + w as u8; REC];
                rec[..8].copy_from_slice(&(r as u64).to_le_bytes());
                c.pwrite(&f, 0, &rec).await.unwrap();
            }
        })
    });
    for t in futures::future::join_all(tasks).await {
        t.unwrap();
    }
    let f = c.open("/log", libc::O_RDONLY, 0, me).await.unwrap();
    let all = c.pread(&f, 0, WRITERS * RECORDS * REC + 1).await.unwrap();
    assert_eq!(all.len(), WRITERS * RECORDS * REC);
    let mut next = [0u64; WRITERS];
    for rec in all.chunks(REC) {
        let w = (rec[REC - 1] - b'a') as usize;
        assert!(
            rec[8..].iter().all(|&b| b == rec[REC - 1]),
            "records never interleave"
        );
        let r = u64::from_le_bytes(rec[..8].try_into().unwrap());
        assert_eq!(r, next[w], "each writer's records stay in order");
        next[w] += 1;
    }
    assert!(next.iter().all(|&n| n == RECORDS as u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_after_another_clients_truncate_are_published() {
    let cl = Cluster::start(3);
    let a = cl.client().await;
    let b = cl.client().await;
    let me = Creds::root();
    let f = a.create("/f", 0o644, true, me).await.unwrap();
    a.pwrite(&f, 0, &pattern(1, 0, 100_000)).await.unwrap();
    let before = a.stat("/f").await.unwrap().mtime;
    // Another client truncates; the first keeps writing inside the size it remembers.
    b.truncate("/f", 10, me).await.unwrap();
    a.pwrite(&f, 50_000, b"after").await.unwrap();
    assert_eq!(
        a.stat("/f").await.unwrap().size,
        50_005,
        "a client sees its own writes"
    );
    a.close(&f).await.unwrap();
    let st = b.stat("/f").await.unwrap();
    assert_eq!(st.size, 50_005);
    assert!(st.mtime >= before);
    let g = b.open("/f", libc::O_RDONLY, 0, me).await.unwrap();
    let all = b.pread(&g, 0, 60_000).await.unwrap();
    assert_eq!(&all[..10], &pattern(1, 0, 10)[..]);
    assert!(all[10..50_000].iter().all(|&x| x == 0));
    assert_eq!(&all[50_000..], b"after");
}

/// Sum of the requests every daemon has served.
async fn requests(c: &eddy_client::Client) -> u64 {
    c.daemon_status()
        .await
        .into_iter()
        .map(|(_, s)| s.unwrap().requests)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_updates_are_batched_and_published_on_close() {
    // A long interval: only the first write and the close publish a size.
    let cl = Cluster::start_with(
        3,
        eddy_config::Config {
            size_update_ms: 3_600_000,
            ..eddy_testkit::test_config()
        },
    );
    let writer = cl.client().await;
    let reader = cl.client().await;
    let me = Creds::root();
    let f = writer.create("/shared", 0o644, true, me).await.unwrap();
    let cs = writer.config().chunk_size;
    // 200 writes that each stay inside one chunk of one daemon.
    let before = requests(&writer).await;
    for i in 0..200u64 {
        writer.pwrite(&f, i * 100, &[i as u8; 100]).await.unwrap();
    }
    let after = requests(&writer).await;
    // 3 status requests per `requests` call, 200 data RPCs, exactly one size publication.
    assert_eq!(after - before, 3 + 200 + 1);
    assert!(20_000 < cs, "the writes above stayed in chunk 0");
    // The writer sees its own size; the reader sees what was published so far.
    assert_eq!(writer.stat("/shared").await.unwrap().size, 20_000);
    assert_eq!(reader.stat("/shared").await.unwrap().size, 100);
    let g = writer.open("/shared", libc::O_RDONLY, 0, me).await.unwrap();
    assert_eq!(writer.pread(&g, 0, 30_000).await.unwrap().len(), 20_000);
    // Close publishes: every client sees the whole file from then on.
    writer.close(&f).await.unwrap();
    assert_eq!(reader.stat("/shared").await.unwrap().size, 20_000);
    let r = reader.open("/shared", libc::O_RDONLY, 0, me).await.unwrap();
    let all = reader.pread(&r, 0, 30_000).await.unwrap();
    assert_eq!(all.len(), 20_000);
    assert!(all
        .chunks(100)
        .enumerate()
        .all(|(i, c)| c.iter().all(|&b| b == i as u8)));
    // fsync publishes too.
    let f = writer.open("/shared", libc::O_WRONLY, 0, me).await.unwrap();
    writer.pwrite(&f, 25_000, b"x").await.unwrap();
    writer.pwrite(&f, 30_000, b"y").await.unwrap();
    writer.fsync(&f).await.unwrap();
    assert_eq!(reader.stat("/shared").await.unwrap().size, 30_001);
    // A chmod or utimens replies with the whole file, unpublished writes included (a kernel
    // takes that size as the file's), and publishes them.
    writer.pwrite(&f, 40_000, b"z").await.unwrap();
    writer.pwrite(&f, 45_000, b"z").await.unwrap();
    let attr = SetAttr {
        mtime: Some(SetTime::Now),
        ..SetAttr::default()
    };
    assert_eq!(
        writer.setattr("/shared", attr, me).await.unwrap().size,
        45_001
    );
    assert_eq!(reader.stat("/shared").await.unwrap().size, 45_001);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_sizes_reach_other_clients_without_close() {
    let cl = Cluster::start(3);
    let writer = cl.client().await;
    let reader = cl.client().await;
    let me = Creds::root();
    let f = writer.create("/grow", 0o644, true, me).await.unwrap();
    for i in 0..50u64 {
        writer.pwrite(&f, i * 1000, &[1u8; 1000]).await.unwrap();
    }
    // No fsync, no close: the deferred publication must still come (a liveness check with a
    // generous bound, not a speed test).
    eddy_testkit::eventually::eventually_async(
        std::time::Duration::from_secs(30),
        "the size was never published",
        || async { (reader.stat("/grow").await.unwrap().size == 50_000).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlink_and_truncate_reach_only_the_chunk_holders() {
    let cl = Cluster::start(5);
    let c = cl.client().await;
    let me = Creds::root();
    let cs = c.config().chunk_size as usize;
    let f = c.create("/small", 0o644, true, me).await.unwrap();
    c.pwrite(&f, 0, &pattern(1, 0, cs / 2)).await.unwrap();
    c.close(&f).await.unwrap();
    // truncate: stat, the data of the one chunk, the size; unlink: the entry, the one chunk,
    // the directory's times (the first change of an interval sends them at once, decision
    // 0011: past the interval of the create).
    let before = requests(&c).await;
    c.truncate("/small", 10, me).await.unwrap();
    let after = requests(&c).await;
    assert_eq!(after - before, 5 + 3);
    let interval = std::time::Duration::from_millis(c.config().dir_time_update_ms);
    tokio::time::sleep(interval * 2).await;
    c.unlink("/small", me).await.unwrap();
    assert_eq!(requests(&c).await - after, 5 + 3);
    // A file with more chunks than daemons: every daemon is asked, and no chunk is left.
    let g = c.create("/big", 0o644, true, me).await.unwrap();
    c.pwrite(&g, 0, &pattern(2, 0, cs * 12)).await.unwrap();
    c.close(&g).await.unwrap();
    c.truncate("/big", cs as u64 + 1, me).await.unwrap();
    let h = c.open("/big", libc::O_RDONLY, 0, me).await.unwrap();
    assert_eq!(
        c.pread(&h, 0, cs * 12).await.unwrap(),
        pattern(2, 0, cs + 1)
    );
    // Closed first: a file open through this client lives on until its last close.
    c.close(&h).await.unwrap();
    c.unlink("/big", me).await.unwrap();
    for (id, s) in c.daemon_status().await {
        assert_eq!(
            s.unwrap().chunks,
            0,
            "daemon {id} kept chunks of removed files"
        );
    }
}

/// An fsync reaches the daemons holding the file's unsynced writes and its metadata owner,
/// not every daemon (decision 0015); a write through another handle is synced by that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsync_reaches_only_the_daemons_with_unsynced_data_and_the_owner() {
    let cl = Cluster::start(3);
    let c = cl.client().await;
    let me = Creds::root();
    let cs = cl.dep.config.chunk_size;
    let path = "/synced";
    let f = c.create(path, 0o644, true, me).await.unwrap();
    c.fsync(&f).await.unwrap();
    let p = eddy_placement::Placement::new(vec![0, 1, 2]).unwrap();
    let owner = p.meta_owner(path);
    let elsewhere = (0..)
        .find(|&k| p.chunk_owner(f.file_id(), k) != owner)
        .unwrap();
    let at_owner = (0..)
        .find(|&k| p.chunk_owner(f.file_id(), k) == owner)
        .unwrap();

    // Written on one daemon that is not the owner: that one and the owner.
    c.pwrite(&f, elsewhere * cs + 7, b"data").await.unwrap();
    let before = syncs(&c);
    c.fsync(&f).await.unwrap();
    assert_eq!(syncs(&c) - before, 2);

    // Written on the owner: the owner alone.
    c.pwrite(&f, at_owner * cs, b"more").await.unwrap();
    let before = syncs(&c);
    c.fsync(&f).await.unwrap();
    assert_eq!(syncs(&c) - before, 1);

    // Nothing written since: the owner alone. A write through another handle is synced by
    // that handle, not this one.
    let g = c.open(path, libc::O_RDWR, 0, me).await.unwrap();
    c.pwrite(&g, elsewhere * cs, b"other").await.unwrap();
    let before = syncs(&c);
    c.fsync(&f).await.unwrap();
    assert_eq!(syncs(&c) - before, 1);
    c.fsync(&g).await.unwrap();
    assert_eq!(syncs(&c) - before, 3);

    // `Sync{file_id: None}` (sync of everything) still reaches every daemon.
    let before = syncs(&c);
    c.sync_all().await.unwrap();
    assert_eq!(syncs(&c) - before, 3);
    let got = c.pread(&f, elsewhere * cs, 9).await.unwrap();
    assert_eq!(&got[..5], b"other");
}

/// Sync requests the client has sent.
fn syncs(c: &Client) -> u64 {
    c.rpc_counts().get("sync").copied().unwrap_or(0)
}
