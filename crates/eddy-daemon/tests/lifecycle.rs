//! Daemon life cycle and robustness: the ready file, the unix socket, clean and unclean
//! restarts, refused handshakes and malformed input on one connection while others go on.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

use eddy_testkit::require;

use clap::Parser;
use eddy_daemon::{read_ready, Daemon, DaemonArgs, DaemonError, DaemonSettings, SECRET_ENV};
use eddy_proto::auth::{self, ClientHello, HelloResult, ServerHello};
use eddy_proto::frame::{read_frame, write_frame};
use eddy_proto::req;
use eddy_proto::{decode_plain, encode, Piece, Reply, Request, PROTOCOL_VERSION};
use eddy_testkit::wire::*;
use std::path::Path;
use std::process::{Command, Stdio};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until the daemon closes the connection; no reply may arrive before.
async fn assert_closed(stream: &mut TcpStream) {
    let mut buf = [0u8; 64];
    match tokio::time::timeout(GUARD, stream.read(&mut buf))
        .await
        .expect("connection was not closed")
    {
        Ok(0) | Err(_) => {}
        Ok(n) => panic!("expected the connection to close, got {n} bytes"),
    }
}

/// A connection that has passed the handshake, as raw bytes.
async fn authed_stream(addr: std::net::SocketAddr) -> TcpStream {
    connect(addr).await.stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_closes_only_its_connection() {
    let root = tempfile::tempdir().unwrap();
    let mut settings = DaemonSettings::new(
        root.path(),
        "127.0.0.1:0".parse().unwrap(),
        SECRET.to_vec(),
        config(4096),
    );
    settings.config.connect_timeout_ms = 300;
    let d = Daemon::start(settings).await.unwrap();
    let addr = d.local_addr();
    let mut good = connect(addr).await;
    good.inode(create("/keep", file(1))).await;

    // Wrong secret: EACCES, then the connection is closed.
    let (mut bad, verdict) =
        handshake(TcpStream::connect(addr).await.unwrap(), b"not the secret").await;
    assert_eq!(verdict.unwrap_err().errno, libc::EACCES);
    assert_closed(&mut bad.stream).await;
    assert_eq!(good.inode(stat("/keep")).await.file_id, 1);

    // Wrong protocol version: EPROTO.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let frame = read_frame(&mut s, MAX).await.unwrap();
    let hello: ServerHello = decode_plain(&frame, MAX as u64).unwrap();
    let reply = ClientHello {
        version: PROTOCOL_VERSION + 1,
        ..auth::answer(SECRET, &hello)
    };
    write_frame(&mut s, 0, &encode(&reply).unwrap(), &[], MAX)
        .await
        .unwrap();
    let frame = read_frame(&mut s, MAX).await.unwrap();
    let verdict: HelloResult = decode_plain(&frame, MAX as u64).unwrap();
    assert_eq!(verdict.unwrap_err().errno, libc::EPROTO);
    assert_closed(&mut s).await;

    // A client of the version before the two-way handshake (its hello: version and proof,
    // no nonce): EPROTO naming both versions, then the connection is closed.
    let mut s = TcpStream::connect(addr).await.unwrap();
    read_frame(&mut s, MAX).await.unwrap();
    let old = encode(&(4u32, vec![0u8; 32])).unwrap();
    write_frame(&mut s, 0, &old, &[], MAX).await.unwrap();
    let frame = read_frame(&mut s, MAX).await.unwrap();
    // Read as that client reads it: `Result<(), Errno>`.
    let verdict: Result<(), eddy_proto::Errno> = decode_plain(&frame, MAX as u64).unwrap();
    let e = verdict.unwrap_err();
    assert_eq!(e.errno, libc::EPROTO);
    assert!(e.msg.contains("protocol 4"), "{}", e.msg);
    assert_closed(&mut s).await;

    // Garbage instead of a ClientHello: EPROTO.
    let mut s = TcpStream::connect(addr).await.unwrap();
    read_frame(&mut s, MAX).await.unwrap();
    write_frame(&mut s, 0, &[0xff; 7], &[], MAX).await.unwrap();
    let frame = read_frame(&mut s, MAX).await.unwrap();
    let verdict: HelloResult = decode_plain(&frame, MAX as u64).unwrap();
    assert_eq!(verdict.unwrap_err().errno, libc::EPROTO);
    assert_closed(&mut s).await;

    // An unauthenticated client cannot send a big frame.
    let mut s = TcpStream::connect(addr).await.unwrap();
    read_frame(&mut s, MAX).await.unwrap();
    s.write_all(&(1u32 << 20).to_le_bytes()).await.unwrap();
    assert_closed(&mut s).await;

    // A silent client is dropped at the handshake deadline.
    let mut s = TcpStream::connect(addr).await.unwrap();
    read_frame(&mut s, MAX).await.unwrap();
    assert_closed(&mut s).await;
    assert_eq!(good.inode(stat("/keep")).await.file_id, 1);

    // After the handshake: garbage bytes (a length shorter than the header).
    let mut s = authed_stream(addr).await;
    s.write_all(&[3, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef])
        .await
        .unwrap();
    assert_closed(&mut s).await;
    assert_eq!(good.inode(stat("/keep")).await.file_id, 1);

    // A length over the frame limit.
    let mut s = authed_stream(addr).await;
    s.write_all(&u32::MAX.to_le_bytes()).await.unwrap();
    s.write_all(&[0u8; 16]).await.unwrap();
    assert_closed(&mut s).await;
    assert_eq!(good.inode(stat("/keep")).await.file_id, 1);

    // A truncated frame: the header promises 100 bytes, 20 come, then end of stream.
    let mut s = authed_stream(addr).await;
    s.write_all(&100u32.to_le_bytes()).await.unwrap();
    s.write_all(&[1u8; 20]).await.unwrap();
    s.shutdown().await.unwrap();
    assert_closed(&mut s).await;
    assert_eq!(good.inode(stat("/keep")).await.file_id, 1);

    // A frame whose meta length runs past its end.
    let mut s = authed_stream(addr).await;
    let mut garbled = 20u32.to_le_bytes().to_vec();
    garbled.extend_from_slice(&1u64.to_le_bytes());
    garbled.extend_from_slice(&100u32.to_le_bytes());
    garbled.extend_from_slice(&[0u8; 8]);
    s.write_all(&garbled).await.unwrap();
    assert_closed(&mut s).await;

    // A well-formed frame whose meta section is no request.
    let mut s = authed_stream(addr).await;
    write_frame(&mut s, 5, &[0xff; 32], &[], MAX).await.unwrap();
    assert_closed(&mut s).await;
    // A payload on a request that carries none.
    let mut s = authed_stream(addr).await;
    let meta = encode(&stat("/keep")).unwrap();
    write_frame(&mut s, 5, &meta, b"unexpected", MAX)
        .await
        .unwrap();
    assert_closed(&mut s).await;
    // A request whose length field claims far more bytes than the frame holds.
    let mut s = authed_stream(addr).await;
    let mut body = encode(&Request::Write(req::Write {
        sums: Vec::new(),
        file_id: 1,
        pieces: vec![],
        data: Default::default(),
        backing: None,
        hint: None,
    }))
    .unwrap();
    let n = body.len() - 2; // the trailing `backing: None` and `hint: None` bytes
    body[n - 8..n].copy_from_slice(&(1u64 << 60).to_le_bytes());
    write_frame(&mut s, 6, &body, &[], MAX).await.unwrap();
    assert_closed(&mut s).await;

    // The good connection and new ones are still served.
    assert_eq!(good.inode(stat("/keep")).await.file_id, 1);
    let mut again = connect(addr).await;
    assert_eq!(again.inode(stat("/keep")).await.file_id, 1);
    d.shutdown();
    d.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_file_unix_socket_and_shutdown_request() {
    let root = tempfile::tempdir().unwrap();
    let d = start(root.path(), 4096).await;
    let ready = read_ready(root.path()).unwrap().expect("ready file");
    assert_eq!(ready.addr, d.local_addr().to_string());
    assert_eq!(ready.pid, std::process::id());
    assert_eq!(ready.id, 0);
    let sock = d.socket_path().unwrap().to_owned();
    assert_eq!(ready.socket.as_deref(), Some(sock.to_str().unwrap()));
    assert_eq!(sock, root.path().join("eddyd.sock"));
    let raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.path().join("eddyd.ready")).unwrap()).unwrap();
    for field in ["id", "pid", "addr", "socket", "host"] {
        assert!(raw.get(field).is_some(), "ready file lacks {field}");
    }

    let (mut c, verdict) = handshake(
        tokio::net::UnixStream::connect(&sock).await.unwrap(),
        SECRET,
    )
    .await;
    verdict.unwrap();
    c.inode(create("/via-unix", file(3))).await;
    assert_eq!(c.inode(stat("/via-unix")).await.file_id, 3);
    let Reply::Status(s) = c.ok(Request::Status(req::Status)).await else {
        panic!()
    };
    assert_eq!(s.root, root.path().display().to_string());
    assert_eq!(s.entries, 1);

    assert!(matches!(
        c.ok(Request::Shutdown(req::Shutdown)).await,
        Reply::Ok
    ));
    d.wait().await.unwrap();
    assert!(
        read_ready(root.path()).unwrap().is_none(),
        "ready file removed on clean exit"
    );
    assert!(!sock.exists(), "socket removed on clean exit");
}

/// `ShutdownWithStats` (what `eddy stop` sends, decision 0076) answers with the counters as
/// they are when the stop is asked for, then the daemon stops cleanly as after `Shutdown`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_stats_answers_the_counters_then_stops() {
    let root = tempfile::tempdir().unwrap();
    let d = start(root.path(), 4096).await;
    let mut c = connect(d.local_addr()).await;
    c.inode(create("/counted", file(3))).await;
    assert_eq!(c.inode(stat("/counted")).await.file_id, 3);
    assert_eq!(c.errno(stat("/missing")).await, libc::ENOENT);
    let s = match c
        .ok(Request::ShutdownWithStats(req::ShutdownWithStats))
        .await
    {
        Reply::Stats(s) => *s,
        other => panic!("not a Stats reply: {other:?}"),
    };
    assert_eq!(s.daemon, 0);
    assert!(s.counting);
    let op = |name: &str| s.ops.iter().find(|o| o.op == name).cloned();
    assert_eq!(op("create").map(|o| o.count), Some(1));
    assert_eq!(op("stat").map(|o| (o.count, o.errors)), Some((2, 1)));
    assert_eq!(s.errors, vec![(libc::ENOENT, 1)]);
    // The stop itself is not in the counters it answers with.
    assert_eq!(op("shutdown_with_stats").map_or(0, |o| o.count), 0);
    drop(c);
    // It stops by itself, as after `Shutdown`: nothing else asks it to.
    tokio::time::timeout(std::time::Duration::from_secs(60), d.wait())
        .await
        .expect("the daemon stopped after ShutdownWithStats")
        .unwrap();
    assert!(
        read_ready(root.path()).unwrap().is_none(),
        "ready file removed on clean exit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_errors_for_a_locked_root_and_a_used_port() {
    let root = tempfile::tempdir().unwrap();
    let d = start(root.path(), 4096).await;
    let same_root = DaemonSettings::new(
        root.path(),
        "127.0.0.1:0".parse().unwrap(),
        SECRET.to_vec(),
        config(4096),
    );
    let err = Daemon::start(same_root)
        .await
        .err()
        .expect("second daemon on one root");
    assert!(matches!(err, DaemonError::Meta { .. }), "{err}");

    let other = tempfile::tempdir().unwrap();
    let same_port =
        DaemonSettings::new(other.path(), d.local_addr(), SECRET.to_vec(), config(4096));
    let err = Daemon::start(same_port)
        .await
        .err()
        .expect("second daemon on one port");
    assert!(matches!(err, DaemonError::Listen { .. }), "{err}");
    assert!(err.to_string().contains("--listen"), "{err}");
    d.shutdown();
    d.wait().await.unwrap();
}

/// Writes a file's metadata and two chunks, syncs, and returns the bytes written.
async fn write_and_sync<S>(c: &mut Conn<S>) -> Vec<u8>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    c.inode(create("/", dir())).await;
    c.inode(create("/data", file(5))).await;
    let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
    let pieces = vec![
        Piece {
            chunk: 0,
            offset: 0,
            len: 4096,
        },
        Piece {
            chunk: 1,
            offset: 0,
            len: 4096,
        },
    ];
    c.ok(Request::Write(req::Write {
        sums: Vec::new(),
        file_id: 5,
        pieces,
        data: data.clone().into(),
        backing: None,
        hint: None,
    }))
    .await;
    c.inode(Request::GrowSize(req::GrowSize {
        path: "/data".into(),
        size: 8192,
    }))
    .await;
    c.ok(Request::Sync(req::Sync { file_id: Some(5) })).await;
    data
}

async fn check_recovered(root: &Path, data: &[u8]) {
    let d = start(root, 4096).await;
    let mut c = connect(d.local_addr()).await;
    assert_eq!(c.inode(stat("/data")).await.size, 8192);
    let pieces = vec![
        Piece {
            chunk: 0,
            offset: 0,
            len: 4096,
        },
        Piece {
            chunk: 1,
            offset: 0,
            len: 4096,
        },
    ];
    assert_eq!(
        c.data(Request::Read(req::Read {
            file_id: 5,
            pieces,
            backing: None,
            hint: None,
        }))
        .await,
        data
    );
    let Reply::Status(s) = c.ok(Request::Status(req::Status)).await else {
        panic!()
    };
    assert_eq!((s.entries, s.chunks, s.chunk_bytes), (2, 2, 8192));
    assert_eq!(read_ready(root).unwrap().unwrap().pid, std::process::id());
    d.shutdown();
    d.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_restart_recovers_everything() {
    let root = tempfile::tempdir().unwrap();
    let d = start(root.path(), 4096).await;
    let mut c = connect(d.local_addr()).await;
    let data = write_and_sync(&mut c).await;
    d.shutdown();
    d.wait().await.unwrap();
    check_recovered(root.path(), &data).await;
}

const CHILD_ROOT_ENV: &str = "EDDY_TEST_CHILD_ROOT";

/// Not a test of its own: the body of the daemon process that `restart_after_kill_9` starts
/// (this test binary run again with the root in the environment).
#[test]
fn child_daemon() {
    let Ok(root) = std::env::var(CHILD_ROOT_ENV) else {
        return;
    };
    // As `eddy_testkit::wire::config`: the raw client of these tests writes frames in clear.
    let config = Path::new(&root).join("wire.toml");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(&config, "wire = \"clear\"\n").unwrap();
    let argv = [
        "eddyd",
        "--config",
        config.to_str().unwrap(),
        "--root",
        &root,
        "--listen",
        "127.0.0.1:0",
        "--chunk-size",
        "4096",
        "--socket",
        "none",
    ];
    eddy_daemon::run(DaemonArgs::try_parse_from(argv).unwrap()).unwrap();
}

/// Starts `child_daemon` in a new process on `root`, optionally through `unshare` with the
/// chunk directory on a tmpfs of `tmpfs_bytes`, and waits for its ready file.
async fn spawn_child(
    root: &Path,
    tmpfs_bytes: Option<u64>,
) -> (std::process::Child, eddy_daemon::ReadyInfo) {
    let exe = std::env::current_exe().unwrap();
    let test_args = ["--exact", "child_daemon", "--nocapture", "--test-threads=1"];
    let mut cmd = match tmpfs_bytes {
        None => {
            let mut c = Command::new(&exe);
            c.args(test_args);
            c
        }
        Some(bytes) => {
            let script = format!(
                "mkdir -p \"$1/chunks\" && mount -t tmpfs -o size={bytes} tmpfs \"$1/chunks\" && shift && exec \"$@\""
            );
            let mut c = Command::new("unshare");
            c.args(["-rm", "sh", "-c", &script, "sh"])
                .arg(root)
                .arg(&exe)
                .args(test_args);
            c
        }
    };
    let mut child = cmd
        .env(CHILD_ROOT_ENV, root)
        .env(SECRET_ENV, hex::encode(SECRET))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let ready =
        eddy_testkit::eventually::eventually_async(GUARD, "the child daemon is ready", || {
            let r = read_ready(root).unwrap();
            assert!(
                child.try_wait().unwrap().is_none(),
                "child daemon exited early"
            );
            async move { r }
        })
        .await;
    (child, ready)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_after_kill_9_keeps_synced_data() {
    let root = tempfile::tempdir().unwrap();
    let (mut child, ready) = spawn_child(root.path(), None).await;
    assert_eq!(ready.pid, child.id());
    assert_eq!(ready.socket, None);
    let mut c = connect(ready.addr.parse().unwrap()).await;
    let data = write_and_sync(&mut c).await;
    child.kill().unwrap(); // SIGKILL: no clean shutdown
    child.wait().unwrap();
    assert!(
        read_ready(root.path()).unwrap().is_some(),
        "a killed daemon leaves its ready file"
    );
    check_recovered(root.path(), &data).await;
}

/// Whether this machine lets an unprivileged user namespace mount a tmpfs.
fn can_unshare_mount() -> bool {
    Command::new("unshare")
        .args(["-rm", "sh", "-c", "mount -t tmpfs tmpfs /mnt"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_cleanly_and_persists_metadata() {
    let root = tempfile::tempdir().unwrap();
    let (mut child, ready) = spawn_child(root.path(), None).await;
    let mut c = connect(ready.addr.parse().unwrap()).await;
    // No Sync: a clean stop persists the metadata store by itself.
    c.inode(create("/unsynced", file(42))).await;
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        child.wait().unwrap().success(),
        "SIGTERM gives exit status 0"
    );
    assert!(
        read_ready(root.path()).unwrap().is_none(),
        "ready file removed"
    );
    let d = start(root.path(), 4096).await;
    let mut c = connect(d.local_addr()).await;
    assert_eq!(c.inode(stat("/unsynced")).await.file_id, 42);
    d.shutdown();
    d.wait().await.unwrap();
}

/// Tests that need root: `make test` runs them, `make test-fast` skips them.
mod needs_root {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn full_device_gives_enospc_and_harms_nothing_else() {
        if !can_unshare_mount() {
            require::missing(
                "cannot mount a tmpfs in a user namespace (`unshare -rm mount -t tmpfs tmpfs /mnt` \
                 fails): run as root, or allow unprivileged user namespaces \
                 (sysctl kernel.unprivileged_userns_clone=1)",
            );
        }
        let root = tempfile::tempdir().unwrap();
        let (mut child, ready) = spawn_child(root.path(), Some(64 * 1024)).await;
        let mut c = connect(ready.addr.parse().unwrap()).await;
        let chunks = |n: u64| {
            (0..n)
                .map(|k| Piece {
                    chunk: k,
                    offset: 0,
                    len: 4096,
                })
                .collect::<Vec<_>>()
        };
        let kept: Vec<u8> = (0..8 * 4096u32).map(|i| (i % 253) as u8).collect();
        c.ok(Request::Write(req::Write {
            sums: Vec::new(),
            file_id: 1,
            pieces: chunks(8),
            data: kept.clone().into(),
            backing: None,
            hint: None,
        }))
        .await;
        c.inode(create("/kept", file(1))).await;

        let too_much = Request::Write(req::Write {
            sums: Vec::new(),
            file_id: 2,
            pieces: chunks(16),
            data: vec![0xee; 16 * 4096].into(),
            backing: None,
            hint: None,
        });
        assert_eq!(c.errno(too_much).await, libc::ENOSPC);

        // Other data, the metadata store and the connection are unharmed.
        assert_eq!(
            c.data(Request::Read(req::Read {
                file_id: 1,
                pieces: chunks(8),
                backing: None,
                hint: None,
            }))
            .await,
            kept
        );
        assert_eq!(c.inode(stat("/kept")).await.file_id, 1);
        c.inode(create("/after", file(3))).await;
        c.ok(Request::Sync(req::Sync { file_id: Some(1) })).await;
        // Freeing space makes writes possible again.
        c.ok(Request::RemoveData(req::RemoveData { file_id: 2 }))
            .await;
        c.ok(Request::Write(req::Write {
            sums: Vec::new(),
            file_id: 3,
            pieces: chunks(4),
            data: vec![7; 4 * 4096].into(),
            backing: None,
            hint: None,
        }))
        .await;
        let Reply::Status(s) = c.ok(Request::Status(req::Status)).await else {
            panic!()
        };
        assert_eq!((s.chunks, s.chunk_bytes), (12, 12 * 4096));

        assert!(matches!(
            c.ok(Request::Shutdown(req::Shutdown)).await,
            Reply::Ok
        ));
        assert!(child.wait().unwrap().success(), "clean exit after Shutdown");
        assert!(read_ready(root.path()).unwrap().is_none());
    }
}
