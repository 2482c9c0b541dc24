//! The whole-daemon fuzz test: three real `eddyd` processes take a storm of frames over real
//! TCP connections, before authentication (garbage, cut and oversize frames, wrong proofs)
//! and after it (structure-aware random requests, then a malformed frame of some kind),
//! while a good client checks after every batch, under a deadline, that a file written
//! before the storm reads back the same and that every daemon answers.
//!
//! `make test` sends `DEFAULT_FRAMES` frames with a fixed seed; `make fuzz` sends a million
//! (`EDDY_FUZZ_FRAMES`).

use eddy_client::{Client, Creds};
use eddy_fuzz::arbitrary::Unstructured;
use eddy_proto::auth::{self, HelloResult, ServerHello};
use eddy_proto::frame::{read_frame, write_frame};
use eddy_proto::path::{is_within, normalize, PathLimits};
use eddy_proto::req;
use eddy_proto::{decode_plain, encode, Request};
use eddy_testkit::{pattern, Cluster};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Frames of a `make test` run, over all daemons.
const DEFAULT_FRAMES: usize = 20_000;
/// Frames per connection after authentication (the last one malformed).
const BATCH: usize = 200;
/// Connections per batch before authentication (one bad hello each).
const HELLO_BATCH: usize = 20;
/// Longest a batch, or the good client's check after it, may take.
const DEADLINE: Duration = Duration::from_secs(60);
/// The file the storm must leave alone (no fuzzed request names it or its parent).
const KEEP: &str = "/keep-during-the-storm";

fn frames_to_send() -> usize {
    match std::env::var("EDDY_FUZZ_FRAMES") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("EDDY_FUZZ_FRAMES={v:?} is not a count")),
        Err(_) => DEFAULT_FRAMES,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_frames_leaves_every_daemon_serving_a_good_client() {
    // The storm's frames are written as they are, to reach the decoders behind the
    // handshake: `wire = "clear"`. (With "mac" or "sealed" nothing unchecked reaches them;
    // that check is eddy-proto's `wire` tests and wire.rs.)
    let cl = Cluster::start_with(
        3,
        eddy_config::Config {
            wire: eddy_config::Wire::Clear,
            ..eddy_testkit::test_config()
        },
    );
    let c = cl.client().await;
    let me = Creds::root();
    // Five chunks: on every daemon.
    let kept = pattern(0xf022, 0, 5 * 64 * 1024);
    let f = c.create(KEEP, 0o644, true, me).await.unwrap();
    c.pwrite(&f, 0, &kept).await.unwrap();
    c.fsync(&f).await.unwrap();
    let secret = cl.dep.secret_bytes().unwrap();
    let addrs: Vec<String> = cl.dep.daemons.iter().map(|d| d.addr.clone()).collect();
    let total = frames_to_send();
    let mut rng = StdRng::seed_from_u64(0xedd3);
    let (mut sent, mut batch) = (0usize, 0usize);
    let started = std::time::Instant::now();
    while sent < total {
        let addr = &addrs[batch % addrs.len()];
        let storm = async {
            if batch % 4 == 0 {
                let n = HELLO_BATCH.min(total - sent);
                for _ in 0..n {
                    bad_hello(addr, &secret, &mut rng).await;
                }
                n
            } else {
                let n = BATCH.min(total - sent);
                authenticated_storm(addr, &secret, n, &mut rng).await;
                n
            }
        };
        sent += tokio::time::timeout(DEADLINE, storm)
            .await
            .unwrap_or_else(|_| panic!("batch {batch} to {addr} did not end within {DEADLINE:?}"));
        tokio::time::timeout(DEADLINE, good_client_check(&c, &kept))
            .await
            .unwrap_or_else(|_| {
                panic!("the good client was not served within {DEADLINE:?} after batch {batch}")
            })
            .unwrap_or_else(|e| panic!("after batch {batch} ({sent} frames): {e}"));
        batch += 1;
    }
    eprintln!(
        "{sent} frames in {batch} batches, {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The kept file reads back the same, and every daemon answers its status.
async fn good_client_check(c: &Client, kept: &[u8]) -> Result<(), String> {
    let me = Creds::root();
    let f = c
        .open(KEEP, libc::O_RDONLY, 0, me)
        .await
        .map_err(|e| format!("open {KEEP}: {e}"))?;
    let got = c
        .pread(&f, 0, kept.len() + 10)
        .await
        .map_err(|e| format!("read {KEEP}: {e}"))?;
    if got != kept {
        return Err(format!("{KEEP} reads back {} other bytes", got.len()));
    }
    for (id, s) in c.daemon_status().await {
        s.map_err(|e| format!("daemon {id} does not answer: {e}"))?;
    }
    Ok(())
}

/// One connection that never authenticates: garbage, a cut frame, an oversize length, an
/// undecodable hello or a wrong proof. The daemon must end it (reading ends, never hangs).
async fn bad_hello(addr: &str, secret: &[u8], rng: &mut StdRng) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let hello = read_frame(&mut s, 4096).await.expect("the daemon's hello");
    let server: ServerHello = decode_plain(&hello, 4096).expect("a ServerHello");
    let bytes: Vec<u8> = match rng.gen_range(0..5) {
        0 => random_bytes(rng, 1..3000),
        1 => vec![100, 0, 0, 0, 1, 2],
        2 => u32::MAX.to_le_bytes().to_vec(),
        3 => frame_bytes(0, &random_bytes(rng, 0..200), &[]),
        _ => {
            let mut wrong = secret.to_vec();
            wrong[0] ^= 1;
            let mut h = auth::answer(&wrong, &server);
            if rng.gen() {
                h.version = rng.gen();
            }
            frame_bytes(0, &encode(&h).unwrap(), &[])
        }
    };
    let _ = s.write_all(&bytes).await;
    let _ = s.shutdown().await;
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink).await;
}

/// One authenticated connection: `n - 1` random requests (all answered or not, as they
/// come), then one malformed frame, which closes the connection.
async fn authenticated_storm(addr: &str, secret: &[u8], n: usize, rng: &mut StdRng) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let hello = read_frame(&mut s, 4096).await.expect("the daemon's hello");
    let server: ServerHello = decode_plain(&hello, 4096).expect("a ServerHello");
    let h = auth::answer(secret, &server);
    write_frame(&mut s, 0, &encode(&h).unwrap(), &[], 4096)
        .await
        .expect("send the hello");
    let verdict = read_frame(&mut s, 4096).await.expect("the verdict");
    let ok: HelloResult = decode_plain(&verdict, 4096).expect("a HelloResult");
    ok.expect("the right secret is accepted");
    let (r, mut w) = s.into_split();
    // Replies are read and dropped, so that the connection never stalls on them.
    let drain = tokio::spawn(async move {
        let mut r = r;
        let mut buf = vec![0u8; 64 * 1024];
        while matches!(r.read(&mut buf).await, Ok(n) if n > 0) {}
    });
    let mut out = Vec::new();
    let mut id = 1u64;
    while (id as usize) < n {
        if let Some(req) = random_request(rng) {
            match req.to_frame(id, 1 << 20) {
                Ok(f) => {
                    let mut one = Vec::new();
                    eddy_proto::frame::write_frames(&mut one, std::slice::from_ref(&f))
                        .await
                        .unwrap();
                    out.extend(one);
                }
                Err(_) => continue,
            }
            id += 1;
        }
    }
    out.extend(malformed_frame(rng));
    let _ = w.write_all(&out).await;
    let _ = w.shutdown().await;
    drain.await.expect("the reply reader");
}

/// A structure-aware random request, unless it could touch the kept file or its parent (the
/// root) or stop the daemon: an authenticated client may do those, and they are not what
/// is tested here.
fn random_request(rng: &mut StdRng) -> Option<Request> {
    let bytes = random_bytes(rng, 8..400);
    let req: Request = Unstructured::new(&bytes).arbitrary().ok()?;
    let stops = matches!(
        req,
        Request::Shutdown(req::Shutdown) | Request::ShutdownWithStats(req::ShutdownWithStats)
    );
    if stops || names_the_kept_file(&req) {
        return None;
    }
    Some(req)
}

fn names_the_kept_file(req: &Request) -> bool {
    let json = serde_json::to_string(req).unwrap_or_default();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
    let mut names = Vec::new();
    path_fields(&value, &mut names);
    names.iter().any(|p| {
        normalize(p, PathLimits::default())
            .map(|n| n == "/" || is_within(&n, KEEP))
            .unwrap_or(false)
    })
}

/// Every string under a key that names a path.
fn path_fields(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("path" | "dir" | "from" | "to" | "prefix", serde_json::Value::String(s)) => {
                        out.push(s.clone())
                    }
                    _ => path_fields(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| path_fields(v, out)),
        _ => {}
    }
}

/// A frame the daemon must refuse (and close the connection for).
fn malformed_frame(rng: &mut StdRng) -> Vec<u8> {
    match rng.gen_range(0..6) {
        // Random bytes.
        0 => random_bytes(rng, 1..4000),
        // An oversize length.
        1 => u32::MAX.to_le_bytes().to_vec(),
        // A length shorter than the header.
        2 => 5u32.to_le_bytes().to_vec(),
        // A meta length past the end of the frame.
        3 => {
            let mut v = 20u32.to_le_bytes().to_vec();
            v.extend_from_slice(&7u64.to_le_bytes());
            v.extend_from_slice(&99u32.to_le_bytes());
            v.extend_from_slice(&[0u8; 8]);
            v
        }
        // An undecodable meta section.
        4 => frame_bytes(9, &random_bytes(rng, 0..300), &random_bytes(rng, 0..300)),
        // A payload on a request that carries none.
        _ => frame_bytes(
            9,
            &encode(&Request::Stat(req::Stat { path: "/a".into() })).unwrap(),
            b"unexpected",
        ),
    }
}

fn frame_bytes(id: u64, meta: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut v = ((12 + meta.len() + payload.len()) as u32)
        .to_le_bytes()
        .to_vec();
    v.extend_from_slice(&id.to_le_bytes());
    v.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    v.extend_from_slice(meta);
    v.extend_from_slice(payload);
    v
}

fn random_bytes(rng: &mut StdRng, len: std::ops::Range<usize>) -> Vec<u8> {
    let n = rng.gen_range(len);
    (0..n).map(|_| rng.gen()).collect()
}
