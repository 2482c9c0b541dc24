//! Every request type against a real daemon over a real TCP connection.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

use eddy_proto::req;
use eddy_proto::{DirPage, SubtreePage};
use eddy_proto::{FileKind, Piece, RemoveKind, Reply, Request, SetAttr, SetTime, Timespec};
use eddy_testkit::wire::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_stat_remove_insert() {
    let root = tempfile::tempdir().unwrap();
    let d = start(root.path(), 4096).await;
    let mut c = connect(d.local_addr()).await;

    assert_eq!(c.errno(stat("/f")).await, libc::ENOENT);
    let created = c.inode(create("/f", file(11))).await;
    assert_eq!(created.file_id, 11);
    assert_eq!(c.inode(stat("/f")).await, created);
    // Paths are normalised by the daemon.
    assert_eq!(c.inode(stat("//f/")).await, created);
    assert_eq!(c.errno(stat("relative")).await, libc::EINVAL);
    assert_eq!(c.errno(create("/f", file(12))).await, libc::EEXIST);
    // Without exclusive an existing entry comes back as is, whatever its kind.
    let again = c
        .inode(Request::Create(req::Create {
            path: "/f".into(),
            inode: file(13),
            exclusive: false,
        }))
        .await;
    assert_eq!(again.file_id, 11);
    c.inode(create("/d", dir())).await;
    let d_again = c
        .inode(Request::Create(req::Create {
            path: "/d".into(),
            inode: file(14),
            exclusive: false,
        }))
        .await;
    assert_eq!(d_again.kind, FileKind::Dir);

    let rm = |p: &str, kind| {
        Request::Remove(req::Remove {
            path: p.into(),
            kind,
        })
    };
    assert_eq!(c.errno(rm("/d", RemoveKind::NotDir)).await, libc::EISDIR);
    assert_eq!(c.errno(rm("/f", RemoveKind::Dir)).await, libc::ENOTDIR);
    assert_eq!(c.inode(rm("/d", RemoveKind::Dir)).await.kind, FileKind::Dir);
    assert_eq!(c.inode(rm("/f", RemoveKind::Any)).await.file_id, 11);
    assert_eq!(c.errno(rm("/f", RemoveKind::Any)).await, libc::ENOENT);
    assert_eq!(c.errno(stat("/f")).await, libc::ENOENT);

    let ins = |p: &str, id, replace| {
        Request::Insert(req::Insert {
            path: p.into(),
            inode: file(id),
            replace,
        })
    };
    assert!(matches!(c.ok(ins("/g", 20, false)).await, Reply::Ok));
    assert_eq!(c.errno(ins("/g", 21, false)).await, libc::EEXIST);
    assert_eq!(c.inode(stat("/g")).await.file_id, 20);
    assert!(matches!(c.ok(ins("/g", 22, true)).await, Reply::Ok));
    assert_eq!(c.inode(stat("/g")).await.file_id, 22);

    let status = match c.ok(Request::Status(req::Status)).await {
        Reply::Status(s) => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(status.entries, 1);
    assert_eq!(status.pid, std::process::id());
    assert!(status.fs_total_bytes > 0);
    assert!(status.requests >= 20);
    d.shutdown();
    d.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setattr_semantics() {
    let root = tempfile::tempdir().unwrap();
    let d = start(root.path(), 4096).await;
    let mut c = connect(d.local_addr()).await;
    let attr = |attr| {
        Request::SetAttr(req::SetAttr {
            path: "/f".into(),
            attr,
        })
    };
    assert_eq!(
        c.errno(attr(SetAttr {
            mode: Some(0o600),
            ..Default::default()
        }))
        .await,
        libc::ENOENT
    );
    c.inode(create("/f", file(1))).await;
    let at = Timespec { sec: 1234, nsec: 5 };
    let new = c
        .inode(attr(SetAttr {
            mode: Some(0o100755),
            uid: Some(7),
            gid: Some(8),
            size: Some(99),
            atime: Some(SetTime::At(at)),
            mtime: Some(SetTime::Now),
        }))
        .await;
    assert_eq!(new.mode, 0o755, "type bits are dropped");
    assert_eq!((new.uid, new.gid, new.size), (7, 8, 99));
    assert_eq!(new.atime, at);
    assert!(new.mtime.sec > 1_000_000_000, "mtime is now");
    assert!(new.ctime.sec > 1_000_000_000, "ctime follows every change");
    assert_eq!(c.inode(stat("/f")).await, new);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdir_pages_and_subtree() {
    let root = tempfile::tempdir().unwrap();
    let d = start(root.path(), 4096).await;
    let mut c = connect(d.local_addr()).await;
    c.inode(create("/", dir())).await;
    c.inode(create("/d", dir())).await;
    for i in 0..25 {
        c.inode(create(&format!("/d/n{i:02}"), file(i))).await;
    }
    // Neighbours that must not show up in /d's listing.
    c.inode(create("/d/n00/deep", file(100))).await;
    c.inode(create("/dd", file(101))).await;
    c.inode(create("/e", dir())).await;

    let mut names = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let req = Request::Readdir(req::Readdir {
            dir: "/d".into(),
            after: after.clone(),
            limit: 10,
        });
        let Reply::Entries(DirPage { entries, more }) = c.ok(req).await else {
            panic!("expected entries")
        };
        pages += 1;
        assert!(entries.len() <= 10);
        names.extend(entries.iter().map(|e| e.name.clone()));
        after = entries.last().map(|e| e.name.clone());
        if !more {
            break;
        }
    }
    assert_eq!(pages, 3);
    let expected: Vec<String> = (0..25).map(|i| format!("n{i:02}")).collect();
    assert_eq!(names, expected);

    let has = |d: &str| Request::HasChildren(req::HasChildren { dir: d.into() });
    assert!(matches!(c.ok(has("/d")).await, Reply::Bool(true)));
    assert!(matches!(c.ok(has("/e")).await, Reply::Bool(false)));
    let Reply::Entries(DirPage { entries, more }) = c
        .ok(Request::Readdir(req::Readdir {
            dir: "/e".into(),
            after: None,
            limit: 10,
        }))
        .await
    else {
        panic!()
    };
    assert!(entries.is_empty() && !more);

    // Subtree of /d: 25 children plus one deeper entry, never /dd.
    let mut paths = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let req = Request::ListSubtree(req::ListSubtree {
            dir: "/d".into(),
            after: after.clone(),
            limit: 7,
        });
        let Reply::Subtree(SubtreePage { entries, more }) = c.ok(req).await else {
            panic!("expected subtree")
        };
        paths.extend(entries.iter().map(|e| e.path.clone()));
        after = entries.last().map(|e| e.path.clone());
        if !more {
            break;
        }
    }
    assert_eq!(paths.len(), 26);
    assert!(paths.contains(&"/d/n00/deep".to_string()));
    assert!(!paths.iter().any(|p| p == "/dd" || p == "/d"));
    let mut dedup = paths.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), 26);

    // Subtree of the root: everything but the root itself.
    let Reply::Subtree(SubtreePage { entries, more }) = c
        .ok(Request::ListSubtree(req::ListSubtree {
            dir: "/".into(),
            after: None,
            limit: 1000,
        }))
        .await
    else {
        panic!()
    };
    assert!(!more);
    assert_eq!(entries.len(), 29);
    assert!(!entries.iter().any(|e| e.path == "/"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_grow_size_keeps_the_max() {
    let root = tempfile::tempdir().unwrap();
    let d = start(root.path(), 4096).await;
    let mut c = connect(d.local_addr()).await;
    c.inode(create("/shared", file(1))).await;
    c.inode(create("/dir", dir())).await;
    let grow = |size| {
        Request::GrowSize(req::GrowSize {
            path: "/shared".into(),
            size,
        })
    };
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let addr = d.local_addr();
        tasks.push(tokio::spawn(async move {
            let mut c = connect(addr).await;
            // Pipelined: all requests outstanding at once on this connection.
            let mut ids = Vec::new();
            for i in 0..50u64 {
                ids.push(c.send(&grow((i * 7919 + w * 104_729) % 1_000_003)).await);
            }
            for id in ids {
                c.recv(id).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let expected = (0..8u64)
        .flat_map(|w| (0..50u64).map(move |i| (i * 7919 + w * 104_729) % 1_000_003))
        .max()
        .unwrap();
    assert_eq!(c.inode(stat("/shared")).await.size, expected);
    // A smaller size never shrinks the file.
    assert_eq!(c.inode(grow(5)).await.size, expected);
    assert_eq!(
        c.errno(Request::GrowSize(req::GrowSize {
            path: "/nope".into(),
            size: 1
        }))
        .await,
        libc::ENOENT
    );
    assert_eq!(
        c.errno(Request::GrowSize(req::GrowSize {
            path: "/dir".into(),
            size: 1
        }))
        .await,
        libc::EISDIR
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reserve_append_is_disjoint_and_contiguous() {
    let root = tempfile::tempdir().unwrap();
    let d = start(root.path(), 4096).await;
    let mut c = connect(d.local_addr()).await;
    let mut start_inode = file(1);
    start_inode.size = 1000;
    c.inode(create("/log", start_inode)).await;
    let mut tasks = Vec::new();
    for w in 0..6u64 {
        let addr = d.local_addr();
        tasks.push(tokio::spawn(async move {
            let mut c = connect(addr).await;
            let mut sent = Vec::new();
            for i in 0..30u64 {
                let len = 1 + (w * 31 + i * 17) % 200;
                let id = c
                    .send(&Request::ReserveAppend(req::ReserveAppend {
                        path: "/log".into(),
                        len,
                    }))
                    .await;
                sent.push((id, len));
            }
            let mut got = Vec::new();
            for (id, len) in sent {
                let Ok(Reply::Offset(eddy_proto::Offset(off))) = c.recv(id).await else {
                    panic!("reserve failed")
                };
                got.push((off, len));
            }
            got
        }));
    }
    let mut ranges = Vec::new();
    for t in tasks {
        ranges.extend(t.await.unwrap());
    }
    ranges.sort();
    let mut next = 1000;
    for (off, len) in &ranges {
        assert_eq!(*off, next, "ranges must be contiguous and disjoint");
        next += len;
    }
    assert_eq!(c.inode(stat("/log")).await.size, next);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_read_holes_and_bounds() {
    let root = tempfile::tempdir().unwrap();
    let cs = 4096u32;
    let d = start(root.path(), u64::from(cs)).await;
    let mut c = connect(d.local_addr()).await;
    let fid = 0xabcdef_u128;
    let p = |chunk, offset, len| Piece { chunk, offset, len };
    let pattern = |n: usize, seed: u8| {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect::<Vec<u8>>()
    };

    let a = pattern(100, 1);
    let b = pattern(cs as usize, 2);
    let data = [a.clone(), b.clone()].concat();
    let write = Request::Write(req::Write {
        sums: Vec::new(),
        file_id: fid,
        pieces: vec![p(0, 10, 100), p(3, 0, cs)],
        data: data.into(),
        backing: None,
        hint: None,
    });
    assert!(matches!(c.ok(write).await, Reply::Ok));

    // Holes before and after the written range read as zeros, as do chunks never written
    // and bytes past a chunk's end.
    let got = c
        .data(Request::Read(req::Read {
            file_id: fid,
            pieces: vec![p(0, 0, 200), p(1, 0, 50), p(3, 100, 20)],
            backing: None,
            hint: None,
        }))
        .await;
    assert_eq!(got.len(), 270);
    assert!(got[..10].iter().all(|&x| x == 0));
    assert_eq!(&got[10..110], &a[..]);
    assert!(got[110..250].iter().all(|&x| x == 0));
    assert_eq!(&got[250..270], &b[100..120]);
    let missing = c
        .data(Request::Read(req::Read {
            file_id: 999,
            pieces: vec![p(5, 7, 33)],
            backing: None,
            hint: None,
        }))
        .await;
    assert_eq!(missing, vec![0u8; 33]);

    // Overwrite in the middle keeps the rest.
    let write = Request::Write(req::Write {
        sums: Vec::new(),
        file_id: fid,
        pieces: vec![p(0, 50, 4)],
        data: vec![9, 9, 9, 9].into(),
        backing: None,
        hint: None,
    });
    c.ok(write).await;
    let got = c
        .data(Request::Read(req::Read {
            file_id: fid,
            pieces: vec![p(0, 48, 8)],
            backing: None,
            hint: None,
        }))
        .await;
    assert_eq!(got, vec![a[38], a[39], 9, 9, 9, 9, a[44], a[45]]);

    // A piece crossing the chunk end, or data not matching the pieces, is EINVAL.
    let beyond = Request::Write(req::Write {
        sums: Vec::new(),
        file_id: fid,
        pieces: vec![p(0, cs - 10, 11)],
        data: vec![0; 11].into(),
        backing: None,
        hint: None,
    });
    assert_eq!(c.errno(beyond).await, libc::EINVAL);
    let read_beyond = Request::Read(req::Read {
        file_id: fid,
        pieces: vec![p(0, cs, 1)],
        backing: None,
        hint: None,
    });
    assert_eq!(c.errno(read_beyond).await, libc::EINVAL);
    let short = Request::Write(req::Write {
        sums: Vec::new(),
        file_id: fid,
        pieces: vec![p(0, 0, 10)],
        data: vec![0; 9].into(),
        backing: None,
        hint: None,
    });
    assert_eq!(c.errno(short).await, libc::EINVAL);
    // Nothing of the refused writes landed.
    let got = c
        .data(Request::Read(req::Read {
            file_id: fid,
            pieces: vec![p(0, cs - 10, 10)],
            backing: None,
            hint: None,
        }))
        .await;
    assert_eq!(got, vec![0u8; 10]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_across_chunks_and_remove_data() {
    let root = tempfile::tempdir().unwrap();
    let cs = 4096u32;
    let d = start(root.path(), u64::from(cs)).await;
    let mut c = connect(d.local_addr()).await;
    let fid = 77u128;
    let pieces: Vec<Piece> = (0..3)
        .map(|k| Piece {
            chunk: k,
            offset: 0,
            len: cs,
        })
        .collect();
    let data = vec![0x5a_u8; 3 * cs as usize];
    c.ok(Request::Write(req::Write {
        sums: Vec::new(),
        file_id: fid,
        pieces: pieces.clone(),
        data: data.into(),
        backing: None,
        hint: None,
    }))
    .await;
    c.ok(Request::Sync(req::Sync { file_id: Some(fid) })).await;
    // One sparse data file for the file (decision 0015), in one of the hashed subdirectories.
    let data_file = std::fs::read_dir(root.path().join("chunks"))
        .unwrap()
        .map(|d| d.unwrap().path().join(format!("{fid:032x}")))
        .find(|p| p.exists())
        .expect("the file's data file");
    assert_eq!(
        std::fs::metadata(&data_file).unwrap().len(),
        3 * u64::from(cs)
    );
    let usage = |s: eddy_proto::DaemonStatus| (s.chunks, s.chunk_bytes);
    let Reply::Status(s) = c.ok(Request::Status(req::Status)).await else {
        panic!()
    };
    assert_eq!(usage(*s), (3, 3 * u64::from(cs)));

    // Cut inside chunk 1: chunk 0 intact, chunk 1 keeps 100 bytes, chunk 2 is gone.
    c.ok(Request::TruncateData(req::TruncateData {
        file_id: fid,
        size: u64::from(cs) + 100,
    }))
    .await;
    let Reply::Status(s) = c.ok(Request::Status(req::Status)).await else {
        panic!()
    };
    assert_eq!(usage(*s), (2, u64::from(cs) + 100));
    assert_eq!(
        std::fs::metadata(&data_file).unwrap().len(),
        u64::from(cs) + 100
    );
    let got = c
        .data(Request::Read(req::Read {
            file_id: fid,
            pieces: pieces.clone(),
            backing: None,
            hint: None,
        }))
        .await;
    assert!(got[..cs as usize + 100].iter().all(|&x| x == 0x5a));
    assert!(got[cs as usize + 100..].iter().all(|&x| x == 0));

    // Truncating at a chunk boundary deletes the chunk that starts there.
    c.ok(Request::TruncateData(req::TruncateData {
        file_id: fid,
        size: u64::from(cs),
    }))
    .await;
    assert_eq!(std::fs::metadata(&data_file).unwrap().len(), u64::from(cs));
    let Reply::Status(s) = c.ok(Request::Status(req::Status)).await else {
        panic!()
    };
    assert_eq!((s.chunks, s.chunk_bytes), (1, u64::from(cs)));

    c.ok(Request::RemoveData(req::RemoveData { file_id: fid }))
        .await;
    assert!(!data_file.exists());
    c.ok(Request::RemoveData(req::RemoveData { file_id: fid }))
        .await;
    c.ok(Request::TruncateData(req::TruncateData {
        file_id: fid,
        size: 0,
    }))
    .await;
    let got = c
        .data(Request::Read(req::Read {
            file_id: fid,
            pieces,
            backing: None,
            hint: None,
        }))
        .await;
    assert!(got.iter().all(|&x| x == 0));
    let Reply::Status(s) = c.ok(Request::Status(req::Status)).await else {
        panic!()
    };
    assert_eq!((s.chunks, s.chunk_bytes), (0, 0));
    c.ok(Request::Sync(req::Sync { file_id: None })).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_and_requests_on_identity_records() {
    let root = tempfile::tempdir().unwrap();
    let d = start(root.path(), 4096).await;
    let mut c = connect(d.local_addr()).await;
    c.inode(create("/f", file(11))).await;
    let identity = c
        .inode(Request::Link(req::Link { path: "/f".into() }))
        .await;
    assert_eq!((identity.nlink, identity.file_id), (2, 11));
    let daemon = identity.shared.expect("the identity's daemon");
    // A request on the name says where the identity record is.
    assert_eq!(
        c.ok(stat("/f")).await,
        Reply::Shared {
            daemon,
            file_id: 11
        }
    );
    let on = |file_id, op: &Request| {
        Request::OnIdentity(req::OnIdentity {
            file_id,
            op: eddy_proto::encode(op).unwrap(),
        })
    };
    assert_eq!(c.inode(on(11, &stat("/f"))).await.nlink, 2);
    let grown = c
        .inode(on(
            11,
            &Request::GrowSize(req::GrowSize {
                path: "/f".into(),
                size: 99,
            }),
        ))
        .await;
    assert_eq!(grown.size, 99);
    // Bad requests on identity records: nested, undecodable, not an entry request, unknown.
    assert_eq!(c.errno(on(11, &on(11, &stat("/f")))).await, libc::EINVAL);
    let garbage = Request::OnIdentity(req::OnIdentity {
        file_id: 11,
        op: vec![0xff; 7],
    });
    assert_eq!(c.errno(garbage).await, libc::EPROTO);
    assert_eq!(
        c.errno(on(
            11,
            &Request::RemoveData(req::RemoveData { file_id: 11 })
        ))
        .await,
        libc::EINVAL
    );
    assert_eq!(c.errno(on(12, &stat("/f"))).await, libc::ENOENT);
    assert_eq!(
        c.errno(Request::DropName(req::DropName { file_id: 12 }))
            .await,
        libc::ENOENT
    );
    assert_eq!(
        c.inode(Request::DropName(req::DropName { file_id: 11 }))
            .await
            .nlink,
        1
    );
    // The daemon still serves.
    assert_eq!(c.inode(on(11, &stat("/f"))).await.size, 99);
}

/// What a daemon counts (decision 0032): a connection that identified has its requests
/// counted under its client (ops, bytes, the file's writer and reader), errors by errno,
/// per op kind; an unidentified one under the unknown client; `Stats` answers it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identify_and_stats_count_what_was_served() {
    use eddy_proto::stats::{ClientId, DaemonStats};
    let root = tempfile::tempdir().unwrap();
    let d = start(root.path(), 4096).await;
    let mut c = connect(d.local_addr()).await;
    let me = ClientId {
        host: "node7".into(),
        pid: 4242,
        rank: Some(3),
    };
    let identify = Request::Identify(req::Identify { client: me.clone() });
    assert!(matches!(c.ok(identify).await, Reply::Ok));
    let fid = 0x5151_u128;
    c.inode(create("/f", file(fid))).await;
    let piece = Piece {
        chunk: 0,
        offset: 0,
        len: 3000,
    };
    let write = Request::Write(req::Write {
        sums: Vec::new(),
        file_id: fid,
        pieces: vec![piece],
        data: vec![7u8; 3000].into(),
        backing: None,
        hint: None,
    });
    c.ok(write).await;
    let read = Request::Read(req::Read {
        file_id: fid,
        pieces: vec![Piece { len: 1000, ..piece }],
        backing: None,
        hint: None,
    });
    assert_eq!(c.data(read).await.len(), 1000);
    assert_eq!(c.errno(stat("/missing")).await, libc::ENOENT);
    // Another connection, not identified.
    let mut anon = connect(d.local_addr()).await;
    anon.inode(stat("/f")).await;

    let s: DaemonStats = match c.ok(Request::Stats(req::Stats)).await {
        Reply::Stats(s) => *s,
        other => panic!("{other:?}"),
    };
    assert!(s.counting);
    let op = |name: &str| s.ops.iter().find(|o| o.op == name).unwrap().clone();
    assert_eq!(op("write").bytes, 3000);
    assert_eq!(op("write").count, 1);
    assert_eq!(op("write").sizes.total(), 1);
    assert!(!op("write").metadata);
    assert_eq!(op("read").bytes, 1000);
    assert_eq!(op("stat").count, 2);
    assert_eq!(op("stat").errors, 1);
    assert!(op("stat").metadata);
    assert_eq!(op("stat").service_us.total(), 2);
    assert_eq!(op("stat").queue_us.total(), 2);
    assert_eq!(s.errors, vec![(libc::ENOENT, 1)]);
    let mine = s.clients.iter().find(|x| x.client == me).unwrap();
    assert_eq!(mine.ops, 4);
    assert_eq!(mine.metadata_ops, 2);
    assert_eq!(mine.written_bytes, 3000);
    assert_eq!(mine.read_bytes, 1000);
    assert_eq!(mine.errors, 1);
    assert!(mine.first_ms > 0 && mine.last_ms >= mine.first_ms);
    let unknown = s.clients.iter().find(|x| x.client != me).unwrap();
    assert_eq!(unknown.ops, 1);
    assert_eq!(s.clients.len(), 2);
    assert_eq!(s.files.len(), 1);
    let f = &s.files[0];
    assert_eq!(f.file_id, fid);
    assert_eq!(f.writers, vec![mine.key]);
    assert_eq!(f.readers, vec![mine.key]);
    assert_eq!((f.written_bytes, f.read_bytes), (3000, 1000));
    // The Stats request itself is not yet counted, nothing waits now.
    assert_eq!((s.queued, s.in_flight), (0, 1));
    d.shutdown();
    d.wait().await.unwrap();
}

/// With `stats_counting = false` (only to measure what counting costs) nothing is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counting_switched_off_counts_nothing() {
    let root = tempfile::tempdir().unwrap();
    let settings = eddy_daemon::DaemonSettings::new(
        root.path(),
        "127.0.0.1:0".parse().unwrap(),
        SECRET.to_vec(),
        eddy_config::Config {
            stats_counting: false,
            ..config(4096)
        },
    );
    let d = eddy_daemon::Daemon::start(settings).await.unwrap();
    let mut c = connect(d.local_addr()).await;
    c.inode(create("/f", file(3))).await;
    assert_eq!(c.errno(stat("/g")).await, libc::ENOENT);
    let Reply::Stats(s) = c.ok(Request::Stats(req::Stats)).await else {
        panic!("not a Stats reply")
    };
    assert!(!s.counting);
    assert!(s.ops.is_empty() && s.clients.is_empty() && s.errors.is_empty());
    assert!(s.series.is_empty());
    assert_eq!((s.queued, s.in_flight), (0, 0));
    d.shutdown();
    d.wait().await.unwrap();
}
