//! Protection on the wire (decision 0022), against real daemons over real sockets. A TCP
//! proxy of the test's own sits between a client (the library, connected through a
//! deployment file whose daemon 0 address is the proxy's) and daemon 0. On command it
//! (a) injects a forged frame, (b) replays a write frame it saw earlier on the connection,
//! (c) flips one byte of a write's payload in flight, (d) flips one byte of a read reply's
//! payload on its way back. With `wire = "mac"` and `"sealed"` each attack closes the
//! connection, the client's call fails with EIO, and nothing of the frame was stored: the
//! file reads back as it was through a fresh connection.
//!
//! With `wire = "clear"` the frames are not protected, and the test shows it: a flipped
//! payload byte of a write is caught by the end-to-end checksums (decision 0019: EIO, the
//! connection stays open, nothing stored), not by the wire, and an injected write is
//! stored. A client whose setting differs from the daemons' is refused with EPROTO.

use eddy_client::{Client, Creds};
use eddy_config::{Config, Deployment, Wire};
use eddy_proto::frame::{read_frame, write_frame};
use eddy_proto::req;
use eddy_proto::wire::Mode;
use eddy_proto::{checksum, decode_plain, encode, Piece, Request};
use eddy_testkit::{pattern, test_config, Cluster};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Guard against a hang; never an assertion on speed.
const GUARD: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attack {
    /// A forged write frame goes in before the next request.
    Inject,
    /// The first write frame of the connection goes again before the next request.
    Replay,
    /// One byte of the next write's payload is flipped.
    Flip,
    /// One byte of the next reply payload (a read's data) is flipped.
    FlipReply,
}

#[derive(Default)]
struct Shared {
    armed: Option<Attack>,
    /// The frame `Inject` sends.
    forged: Vec<u8>,
    /// Connections the daemon ended while the client's side was open.
    closed_by_daemon: usize,
    /// Connections the client ended while the daemon's side was open.
    closed_by_client: usize,
}

struct Proxy {
    addr: String,
    shared: Arc<Mutex<Shared>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    async fn start(daemon: String, tag: usize) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let shared = Arc::new(Mutex::new(Shared::default()));
        let sh = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(up) = TcpStream::connect(&daemon).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (dr, dw) = up.into_split();
                let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
                tokio::spawn(pump(cr, dw, sh.clone(), tag, true, done.clone()));
                tokio::spawn(pump(dr, cw, sh.clone(), tag, false, done));
            }
        });
        Proxy { addr, shared, task }
    }

    fn arm(&self, attack: Attack, forged: Vec<u8>) {
        let mut st = self.shared.lock().unwrap();
        st.armed = Some(attack);
        st.forged = forged;
    }

    fn counts(&self) -> (usize, usize, bool) {
        let st = self.shared.lock().unwrap();
        (st.closed_by_daemon, st.closed_by_client, st.armed.is_none())
    }
}

/// One whole frame off the stream (length prefix included); `None` at its end.
async fn next_frame<R: AsyncRead + Unpin>(r: &mut R) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await.ok()?;
    let mut f = vec![0u8; 4 + u32::from_le_bytes(len) as usize];
    f[..4].copy_from_slice(&len);
    r.read_exact(&mut f[4..]).await.ok()?;
    Some(f)
}

/// Where a frame's payload lies (the header stays readable in every mode).
fn payload_range(f: &[u8], tag: usize) -> std::ops::Range<usize> {
    let meta = u32::from_le_bytes([f[12], f[13], f[14], f[15]]) as usize;
    let start = 16 + meta;
    start..f.len().saturating_sub(tag).max(start)
}

/// Copies frames one way, applying the armed attack to the first frame it concerns.
async fn pump<R, W>(
    mut r: R,
    mut w: W,
    shared: Arc<Mutex<Shared>>,
    tag: usize,
    to_daemon: bool,
    other_done: Arc<std::sync::atomic::AtomicBool>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    use std::sync::atomic::Ordering;
    let mut index = 0usize;
    let mut first_write: Option<Vec<u8>> = None;
    while let Some(mut f) = next_frame(&mut r).await {
        let payload = payload_range(&f, tag);
        // Frame 0 each way is the handshake (hello, client hello); the rest are protected.
        let request = to_daemon && index > 0;
        let is_write = request && !payload.is_empty();
        let mut before = None;
        {
            let mut st = shared.lock().unwrap();
            let fire = match st.armed {
                Some(Attack::Inject) if request => {
                    before = Some(st.forged.clone());
                    true
                }
                Some(Attack::Replay) if request => {
                    before = first_write.clone();
                    true
                }
                Some(Attack::Flip) if is_write => {
                    f[payload.start + payload.len() / 2] ^= 0x01;
                    true
                }
                Some(Attack::FlipReply) if !to_daemon && index > 0 && !payload.is_empty() => {
                    f[payload.start + payload.len() / 2] ^= 0x01;
                    true
                }
                _ => false,
            };
            if fire {
                st.armed = None;
            }
        }
        if is_write && first_write.is_none() {
            first_write = Some(f.clone());
        }
        if let Some(b) = before {
            if w.write_all(&b).await.is_err() {
                break;
            }
        }
        if w.write_all(&f).await.is_err() {
            break;
        }
        index += 1;
    }
    // This side ended first: count who ended the connection.
    if !other_done.swap(true, Ordering::AcqRel) {
        let mut st = shared.lock().unwrap();
        match to_daemon {
            true => st.closed_by_client += 1,
            false => st.closed_by_daemon += 1,
        }
    }
    let _ = w.shutdown().await;
}

/// The cluster's deployment with daemon 0 reached through `proxy` (TCP only), saved to a
/// file and loaded from it as a client on another node would.
fn through(cl: &Cluster, proxy: &Proxy) -> Deployment {
    let mut dep = cl.dep.clone();
    for d in &mut dep.daemons {
        d.socket = None;
    }
    dep.daemons[0].addr = proxy.addr.clone();
    let path = cl.dir.path().join("via-proxy.toml");
    dep.save(&path).expect("save");
    Deployment::load(&path).expect("load")
}

fn config(wire: Wire) -> Config {
    Config {
        wire,
        ..test_config()
    }
}

/// A file created through `c`, and the offset of a chunk of it that daemon 0 holds.
async fn file_on_daemon_0(c: &Client, cl: &Cluster, path: &str) -> (eddy_client::File, u64) {
    let f = c
        .create(path, 0o644, true, Creds::root())
        .await
        .expect("create");
    let ids = cl.dep.daemons.iter().map(|d| d.id).collect();
    let p = eddy_placement::Placement::new(ids).expect("placement");
    let k = (0..256)
        .find(|&k| p.chunk_owner(f.file_id(), k) == 0)
        .expect("a chunk of daemon 0");
    (f, k * cl.dep.config.chunk_size)
}

/// A complete write frame of `data` at `offset` of file `file_id`, with valid checksums;
/// on a protected connection followed by a tag's worth of bytes that are not its tag.
fn forged_write(cl: &Cluster, file_id: u128, offset: u64, data: &[u8], tag: usize) -> Vec<u8> {
    let chunk = cl.dep.config.chunk_size;
    let pieces = vec![Piece {
        chunk: offset / chunk,
        offset: 0,
        len: data.len() as u32,
    }];
    let sums = checksum::sums(&pieces, data, cl.dep.config.checksum_block());
    let req = Request::Write(req::Write {
        file_id,
        pieces,
        sums,
        data: data.to_vec().into(),
        backing: None,
        hint: None,
    });
    let mut f = req
        .to_frame(1 << 40, cl.dep.config.max_frame_bytes)
        .expect("frame")
        .to_vec();
    f.extend(std::iter::repeat_n(0x5a, tag));
    let len = (f.len() - 4) as u32;
    f[..4].copy_from_slice(&len.to_le_bytes());
    f
}

/// The bytes at `offset` as a fresh client (its own connections, not the proxy's) reads
/// them.
async fn stored(cl: &Cluster, path: &str, offset: u64, len: usize) -> Vec<u8> {
    let c = cl.client().await;
    let f = c
        .open(path, libc::O_RDONLY, 0, Creds::root())
        .await
        .expect("open");
    c.pread(&f, offset, len).await.expect("read")
}

/// Waits (bounded) until `cond` holds on the proxy's counts.
async fn until(proxy: &Proxy, what: &str, cond: impl Fn((usize, usize, bool)) -> bool) {
    let cond = &cond;
    let counts = || async move {
        let now = proxy.counts();
        if cond(now) {
            Some(())
        } else {
            None
        }
    };
    if eddy_testkit::eventually::poll_async(GUARD, None, counts)
        .await
        .is_none()
    {
        panic!("{what}: {:?}", proxy.counts());
    }
}

/// Each attack on a cluster running `wire` (mac or sealed).
async fn attacks_are_refused(wire: Wire, mode: Mode) {
    let cl = Cluster::start_with(3, config(wire));
    let proxy = Proxy::start(cl.dep.daemons[0].addr.clone(), mode.tag_bytes()).await;
    let dep = through(&cl, &proxy);
    let len = cl.dep.config.chunk_size as usize;
    let (old, new, newer) = (pattern(1, 0, len), pattern(2, 0, len), pattern(3, 0, len));
    // Every client stays until the end, so that no earlier connection ends during a later
    // attack.
    let mut clients = Vec::new();
    for attack in [
        Attack::Inject,
        Attack::Replay,
        Attack::Flip,
        Attack::FlipReply,
    ] {
        let path = format!("/{mode}-{attack:?}");
        let c = Client::connect(dep.clone()).await.expect("connect");
        let (f, at) = file_on_daemon_0(&c, &cl, &path).await;
        // Two good writes: the first is what `Replay` sends again.
        c.pwrite(&f, at, &old).await.expect("first write");
        c.pwrite(&f, at, &new).await.expect("second write");
        let (by_daemon, by_client, _) = proxy.counts();
        let forged = forged_write(&cl, f.file_id(), at, &pattern(9, 0, len), mode.tag_bytes());
        proxy.arm(attack, forged);
        let e = tokio::time::timeout(GUARD, async {
            match attack {
                // The next request after the forged or replayed frame: a read.
                Attack::Inject | Attack::Replay | Attack::FlipReply => {
                    c.pread(&f, at, len).await.map(|_| ())
                }
                Attack::Flip => c.pwrite(&f, at, &newer).await.map(|_| ()),
            }
        })
        .await
        .expect("no hang")
        .expect_err(&format!("{mode} {attack:?}: the call fails"));
        assert_eq!(e.errno, libc::EIO, "{mode} {attack:?}: {e}");
        assert!(proxy.counts().2, "{mode} {attack:?}: the attack took place");
        if attack == Attack::FlipReply {
            // The client found the reply bad, said why, and closed the connection.
            assert!(e.msg.contains("failed its check"), "{mode}: {e}");
            until(&proxy, "the client closes", |(_, c, _)| c > by_client).await;
        } else {
            // The daemon closed the connection.
            until(&proxy, "the daemon closes", |(d, _, _)| d > by_daemon).await;
        }
        // Nothing of the attack was stored: the second write is what the file holds.
        assert!(
            stored(&cl, &path, at, len).await == new,
            "{mode} {attack:?}: the file changed"
        );
        // The same client works again on a new connection.
        c.pwrite(&f, at, &newer).await.expect("a later write");
        assert!(stored(&cl, &path, at, len).await == newer);
        clients.push(c);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mac_refuses_forged_replayed_and_changed_frames() {
    attacks_are_refused(Wire::Mac, Mode::Mac).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_refuses_forged_replayed_and_changed_frames() {
    attacks_are_refused(Wire::Sealed, Mode::Sealed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_is_what_it_says() {
    let cl = Cluster::start_with(3, config(Wire::Clear));
    let proxy = Proxy::start(cl.dep.daemons[0].addr.clone(), 0).await;
    let dep = through(&cl, &proxy);
    let len = cl.dep.config.chunk_size as usize;
    let (new, newer, forged) = (pattern(2, 0, len), pattern(3, 0, len), pattern(9, 0, len));
    let c = Client::connect(dep).await.expect("connect");
    let (f, at) = file_on_daemon_0(&c, &cl, "/clear").await;
    c.pwrite(&f, at, &new).await.expect("write");
    // A flipped payload byte: the checksums catch it at the daemon, not the wire; the
    // connection stays open and nothing is stored.
    let (by_daemon, by_client, _) = proxy.counts();
    proxy.arm(Attack::Flip, Vec::new());
    let e = c.pwrite(&f, at, &newer).await.expect_err("a damaged write");
    assert_eq!(e.errno, libc::EIO, "{e}");
    assert!(e.msg.contains("corrupted in flight"), "{e}");
    assert!(stored(&cl, "/clear", at, len).await == new);
    c.pwrite(&f, at, &newer)
        .await
        .expect("the connection still serves");
    assert_eq!(proxy.counts(), (by_daemon, by_client, true));
    // A forged write, complete with its checksums, is stored: nothing checks where a frame
    // came from.
    proxy.arm(
        Attack::Inject,
        forged_write(&cl, f.file_id(), at, &forged, 0),
    );
    c.pread(&f, at, len)
        .await
        .expect("the request after the forged frame");
    let (cl_ref, forged_ref) = (&cl, &forged);
    eddy_testkit::eventually::eventually_async(
        GUARD,
        "the forged write is stored",
        || async move { (stored(cl_ref, "/clear", at, len).await == *forged_ref).then_some(()) },
    )
    .await;
    assert_eq!(
        proxy.counts().0,
        by_daemon,
        "the daemon kept the connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_and_daemons_of_different_settings_are_refused() {
    let cl = Cluster::start_with(3, config(Wire::Mac));
    // The library, with a deployment that says sealed: refused before anything is sent.
    let mut dep = cl.dep.clone();
    dep.config.wire = Wire::Sealed;
    let e = Client::connect(dep).await.err().expect("refused");
    assert_eq!(e.errno, libc::EPROTO, "{e}");
    assert!(
        e.msg.contains("requires wire = mac") && e.msg.contains("says sealed"),
        "{e}"
    );
    // A hand-made client hello asking for clear: the daemon refuses it.
    let mut s = TcpStream::connect(&cl.dep.daemons[1].addr)
        .await
        .expect("connect");
    let hello = read_frame(&mut s, 4096).await.expect("hello");
    let hello: eddy_proto::auth::ServerHello = decode_plain(&hello, 4096).expect("ServerHello");
    assert_eq!(hello.wire, Mode::Mac);
    let secret = cl.dep.secret_bytes().expect("secret");
    let mut answer = eddy_proto::auth::answer(&secret, &hello);
    answer.wire = Mode::Clear;
    write_frame(&mut s, 0, &encode(&answer).unwrap(), &[], 4096)
        .await
        .expect("send");
    let verdict = read_frame(&mut s, 4096).await.expect("verdict");
    let verdict: eddy_proto::auth::HelloResult = decode_plain(&verdict, 4096).expect("verdict");
    let e = verdict.expect_err("refused");
    assert_eq!(e.errno, libc::EPROTO, "{e}");
    assert!(e.msg.contains("requires wire = mac"), "{e}");
    // The same cluster under `auto` semantics is not this one: an explicit setting applies
    // to the Unix socket too, so a local client with the deployment's own setting works.
    cl.client()
        .await
        .stat("/")
        .await
        .expect("a matching client");
}
