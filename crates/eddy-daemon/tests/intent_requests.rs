//! Directory rename intents over real connections: the connection that records or takes over
//! an intent holds it; another connection finds it busy until the holder releases it or its
//! connection closes; a restart of the daemon keeps the intents and frees them all.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

use eddy_proto::req;
use eddy_proto::{RenameIntent, Reply, Request};
use eddy_testkit::wire::*;

fn begin(from: &str, to: &str, dir_id: u128) -> Request {
    Request::BeginRename(req::BeginRename {
        from: from.into(),
        to: to.into(),
        dir_id,
    })
}

fn claim(from: Option<&str>) -> Request {
    Request::ClaimRenames(req::ClaimRenames {
        from: from.map(str::to_string),
        limit: 100,
    })
}

fn intent(from: &str, to: &str, dir_id: u128) -> RenameIntent {
    RenameIntent {
        from: from.into(),
        to: to.into(),
        dir_id,
    }
}

async fn renames<S>(c: &mut Conn<S>, req: Request) -> Vec<RenameIntent>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    match c.ok(req).await {
        Reply::Renames(v) => v,
        other => panic!("expected renames, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intents_are_held_by_their_connection_and_kept_across_a_restart() {
    let root = tempfile::tempdir().unwrap();
    let d = start(root.path(), 4096).await;
    let mut a = connect(d.local_addr()).await;
    let mut b = connect(d.local_addr()).await;

    assert!(renames(&mut a, begin("/src", "/dst", 7)).await.is_empty());
    // Held by a: busy for b, and not free to take over.
    assert_eq!(b.errno(begin("/src", "/other", 8)).await, libc::EBUSY);
    assert!(renames(&mut b, claim(None)).await.is_empty());
    assert!(renames(&mut b, claim(Some("/src"))).await.is_empty());
    // Released by a: b takes it over, once.
    a.ok(Request::ReleaseRename(req::ReleaseRename {
        from: "/src".into(),
    }))
    .await;
    assert_eq!(
        renames(&mut b, claim(None)).await,
        [intent("/src", "/dst", 7)]
    );
    assert!(renames(&mut a, claim(None)).await.is_empty());
    // b's connection closes: free again, and a begins the same rename: it gets the recorded
    // one back to complete first.
    drop(b);
    let mut found = Vec::new();
    for _ in 0..100 {
        // The daemon notices the closed connection in its own time: look until it did.
        found = renames(&mut a, claim(Some("/src"))).await;
        if !found.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(found, [intent("/src", "/dst", 7)]);
    assert_eq!(
        renames(&mut a, begin("/src", "/dst", 7)).await,
        [intent("/src", "/dst", 7)]
    );

    // Bad paths are refused; the connection and the daemon go on.
    assert_eq!(a.errno(begin("relative", "/x", 1)).await, libc::EINVAL);
    assert_eq!(a.errno(begin("/x", "/x/y", 1)).await, libc::EINVAL);
    assert_eq!(a.errno(begin("/", "/x", 1)).await, libc::EBUSY);
    assert_eq!(
        a.errno(Request::EndRename(req::EndRename {
            from: "/x\0".into(),
            to: "/y".into()
        }))
        .await,
        libc::EINVAL
    );
    assert!(renames(&mut a, begin("/p/q", "/r", 9)).await.is_empty());
    // Ending with another target keeps the intent.
    a.ok(Request::EndRename(req::EndRename {
        from: "/p/q".into(),
        to: "/elsewhere".into(),
    }))
    .await;

    // A restart on the same root: both intents are still there, and nobody holds them.
    drop(a);
    d.shutdown();
    d.wait().await.unwrap();
    let d = start(root.path(), 4096).await;
    let mut c = connect(d.local_addr()).await;
    let mut got = renames(&mut c, claim(None)).await;
    got.sort_by(|x, y| x.from.cmp(&y.from));
    assert_eq!(got, [intent("/p/q", "/r", 9), intent("/src", "/dst", 7)]);
    for (from, to) in [("/p/q", "/r"), ("/src", "/dst")] {
        c.ok(Request::EndRename(req::EndRename {
            from: from.into(),
            to: to.into(),
        }))
        .await;
    }
    let mut e = connect(d.local_addr()).await;
    assert!(renames(&mut e, claim(None)).await.is_empty());
    d.shutdown();
    d.wait().await.unwrap();
}
