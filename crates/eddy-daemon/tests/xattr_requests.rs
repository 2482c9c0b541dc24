//! Extended-attribute and special-file requests against a real daemon over TCP: every bad
//! request is an errno, and the daemon keeps serving the connection.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

use eddy_proto::req;
use eddy_proto::{FileKind, Reply, Request, XattrSet};
use eddy_testkit::wire::*;

fn set(path: &str, name: &str, value: &[u8], how: XattrSet) -> Request {
    Request::SetXattr(req::SetXattr {
        path: path.into(),
        name: name.into(),
        value: value.to_vec(),
        how,
    })
}

fn get(path: &str, name: &str) -> Request {
    Request::GetXattr(req::GetXattr {
        path: path.into(),
        name: name.into(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xattr_requests_and_their_errors() {
    let root = tempfile::tempdir().unwrap();
    let d = start(root.path(), 4096).await;
    let mut c = connect(d.local_addr()).await;
    c.inode(create("/f", file(1))).await;
    let mut fifo = inode(FileKind::Fifo, 2);
    fifo.rdev = 77; // kept as given: the client decides
    let made = c.inode(create("/p", fifo)).await;
    assert_eq!((made.kind, made.rdev), (FileKind::Fifo, 77));

    let after = c.inode(set("/f", "user.a", b"1", XattrSet::Create)).await;
    assert_eq!(after.xattrs.len(), 1);
    assert_eq!(c.inode(stat("/f")).await.xattrs, after.xattrs);
    assert_eq!(c.data(get("/f", "user.a")).await, b"1");
    let cases: Vec<(Request, i32)> = vec![
        (set("/f", "user.a", b"2", XattrSet::Create), libc::EEXIST),
        (set("/f", "user.b", b"2", XattrSet::Replace), libc::ENODATA),
        (set("/f", "", b"2", XattrSet::Any), libc::ERANGE),
        (
            set("/f", &"u".repeat(300), b"2", XattrSet::Any),
            libc::ERANGE,
        ),
        (
            set("/f", "user.big", &vec![0; 65537], XattrSet::Any),
            libc::E2BIG,
        ),
        (
            set("/f", "system.posix_acl_access", b"", XattrSet::Any),
            libc::EOPNOTSUPP,
        ),
        (set("/p", "user.a", b"2", XattrSet::Any), libc::EPERM),
        (set("/missing", "user.a", b"2", XattrSet::Any), libc::ENOENT),
        (set("relative", "user.a", b"2", XattrSet::Any), libc::EINVAL),
        (get("/f", "user.none"), libc::ENODATA),
        (get("/missing", "user.a"), libc::ENOENT),
        (
            Request::RemoveXattr(req::RemoveXattr {
                path: "/f".into(),
                name: "user.none".into(),
            }),
            libc::ENODATA,
        ),
    ];
    for (req, want) in cases {
        let what = format!("{req:?}").chars().take(80).collect::<String>();
        assert_eq!(c.errno(req).await, want, "{what}");
    }
    c.inode(set("/p", "trusted.x", b"t", XattrSet::Any)).await;
    match c
        .ok(Request::ListXattr(req::ListXattr { path: "/p".into() }))
        .await
    {
        Reply::Names(n) => assert_eq!(n, ["trusted.x"]),
        other => panic!("expected names, got {other:?}"),
    }
    let removed = c
        .inode(Request::RemoveXattr(req::RemoveXattr {
            path: "/f".into(),
            name: "user.a".into(),
        }))
        .await;
    assert!(removed.xattrs.is_empty());
    // Still serving.
    assert_eq!(c.inode(stat("/f")).await.file_id, 1);
}
