//! What the code as of commit e37b04a wrote (`fixtures/e37b04a/`), read by this one: the
//! encodings of requests of every kind (drawn from seeded `arbitrary` inputs), stored
//! `Inode` records, and a daemon's whole root (metadata store and chunk files) holding
//! entries of every kind. The encodings must decode to the same values and encode back to
//! the same bytes: a request's variant order is its wire tag (`eddy_proto::request_table!`).

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

use arbitrary::{Arbitrary, Unstructured};
use eddy_daemon::{DaemonSettings, Embedded};
use eddy_proto::{decode, encode, req, Inode, ReadReply, Reply, Request, OP_NAMES};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/e37b04a")
}

/// The seeded input bytes the fixtures were drawn from (xorshift64 from the seed).
fn seed_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn lines(name: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(fixtures().join(name)).unwrap();
    text.lines()
        .map(|l| l.split(' ').map(str::to_string).collect())
        .collect()
}

/// Kinds of requests at e37b04a: the first lines of `request_table!` (later ones are
/// appended after them, with new wire tags).
const OPS_AT_E37B04A: usize = 48;

/// The seeded input with its first four bytes (the `u32` from which `arbitrary` picks the
/// variant: index = tag × count >> 32) changed so that today's list of requests, longer by
/// the requests appended since, picks the same variant as the list of e37b04a did; the
/// fields are drawn from the same bytes after them.
fn same_variant_today(mut bytes: Vec<u8>) -> Vec<u8> {
    let (old, now) = (OPS_AT_E37B04A as u64, OP_NAMES.len() as u64);
    let Some(head) = bytes.get(..4) else {
        return bytes;
    };
    let tag = u64::from(u32::from_le_bytes(head.try_into().unwrap()));
    let index = (tag * old) >> 32;
    let picks = (index << 32).div_ceil(now);
    assert_eq!((picks * now) >> 32, index);
    bytes[..4].copy_from_slice(&u32::try_from(picks).unwrap().to_le_bytes());
    bytes
}

#[test]
fn requests_encoded_by_the_old_code_decode_to_the_same_requests() {
    let mut ops = BTreeSet::new();
    for l in lines("requests.txt") {
        let (seed, len, op, hex_bytes) = (&l[0], &l[1], &l[2], &l[3]);
        let bytes = same_variant_today(seed_bytes(seed.parse().unwrap(), len.parse().unwrap()));
        let now = Request::arbitrary(&mut Unstructured::new(&bytes)).unwrap();
        let old = hex::decode(hex_bytes).unwrap();
        // Protocol 13 appended `hint` to `Read` (decision 0072), drawn from the bytes after
        // the old fields: the old encoding, then the hint's.
        // Protocol 14 appended `hint` to `Write` the same way (decision 0074).
        let old = match &now {
            Request::Read(r) => [old, encode(&r.hint).unwrap()].concat(),
            Request::Write(w) => [old, encode(&w.hint).unwrap()].concat(),
            _ => old,
        };
        assert_eq!(now.op_name(), op, "seed {seed}: another kind of request");
        assert_eq!(
            encode(&now).unwrap(),
            old,
            "seed {seed}: {op} encodes otherwise"
        );
        // Bulk data travels outside the encoding: it decodes empty.
        let decoded: Request = decode(&old, 1 << 20).unwrap();
        assert_eq!(
            decoded,
            without_payload(now),
            "seed {seed}: {op} decodes otherwise"
        );
        ops.insert(op.clone());
    }
    assert_eq!(
        ops,
        OP_NAMES[..OPS_AT_E37B04A]
            .iter()
            .map(|n| n.to_string())
            .collect::<BTreeSet<_>>(),
        "every kind of request of e37b04a is covered"
    );
}

fn without_payload(r: Request) -> Request {
    match r {
        Request::Write(w) => Request::Write(req::Write {
            data: Default::default(),
            ..w
        }),
        Request::PutChunk(c) => Request::PutChunk(req::PutChunk {
            data: Default::default(),
            ..c
        }),
        other => other,
    }
}

#[test]
fn inode_records_stored_by_the_old_code_read_the_same() {
    let rows = lines("inodes.txt");
    assert!(rows.len() > 50);
    for l in rows {
        let bytes = seed_bytes(l[0].parse().unwrap(), l[1].parse().unwrap());
        let now = Inode::arbitrary(&mut Unstructured::new(&bytes)).unwrap();
        let old = hex::decode(&l[2]).unwrap();
        assert_eq!(now.to_record(), old, "seed {}", l[0]);
        assert_eq!(Inode::from_record(&old).unwrap(), now, "seed {}", l[0]);
    }
}

/// The root of a daemon that held `/`, `/d`, a file `/d/f` of 10,000 bytes in three chunks
/// of 4 KiB (checksums on) with an extended attribute and a second name `/d/g`, a symlink
/// `/d/s` and a FIFO `/d/p`: opened by this daemon, it holds and serves exactly that.
#[test]
fn a_daemon_root_written_by_the_old_code_is_served_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let tar = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(fixtures().join("root.tar.gz"))
        .arg("-C")
        .arg(&root)
        .status()
        .unwrap();
    assert!(tar.success());
    std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let config = eddy_config::Config {
        chunk_size: 4096,
        checksums: true,
        checksum_block_bytes: 1024,
        ..Default::default()
    };
    let settings = DaemonSettings::new(
        &root,
        "127.0.0.1:0".parse().unwrap(),
        b"fixture secret".to_vec(),
        config,
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let d = Embedded::open(settings).await.unwrap();
        // Every key and chunk as the old daemon listed them.
        let inv = d.inventory().unwrap();
        let mut now = String::new();
        for (k, v) in &inv.keys {
            now += &format!("key {} {}\n", hex::encode(k), hex::encode(v));
        }
        for ((id, k), dg) in &inv.chunks {
            now += &format!("chunk {id:x} {k} {dg:?}\n");
        }
        let then = std::fs::read_to_string(fixtures().join("inventory.txt")).unwrap();
        assert_eq!(now, then);
        // And served: the entries, the data (verified against its stored checksums), the
        // attribute, the second name.
        let stat = |p: &str| Request::Stat(req::Stat { path: p.into() });
        // Both names point to the identity record, which holds the attributes.
        for name in ["/d/f", "/d/g"] {
            let shared = d.handle(stat(name)).await;
            assert_eq!(
                shared,
                Ok(Reply::Shared {
                    daemon: 0,
                    file_id: 0xf11e
                }),
                "{name}"
            );
        }
        let on_identity = Request::OnIdentity(req::OnIdentity {
            file_id: 0xf11e,
            op: encode(&stat("/d/f")).unwrap(),
        });
        let Ok(Reply::Inode(f)) = d.handle(on_identity).await else {
            panic!("the identity record of /d/f is not served")
        };
        assert_eq!((f.size, f.nlink, f.file_id), (10_000, 2, 0xf11e));
        let Ok(Reply::Inode(s)) = d.handle(stat("/d/s")).await else {
            panic!("/d/s is not served")
        };
        assert_eq!(s.target.as_deref(), Some("f"));
        let pieces = (0..3u64)
            .map(|k| eddy_proto::Piece {
                chunk: k,
                offset: 0,
                len: if k < 2 { 4096 } else { 10_000 - 8192 },
            })
            .collect();
        let read = Request::Read(req::Read {
            file_id: 0xf11e,
            pieces,
            backing: None,
            hint: None,
        });
        let reply = d.handle(read).await.unwrap();
        let ReadReply { data, sums } = eddy_proto::typed_reply::<req::Read>(reply).unwrap();
        let want: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(&data[..], &want[..]);
        assert!(sums.is_some(), "checksums are kept");
        let getx = Request::OnIdentity(req::OnIdentity {
            file_id: 0xf11e,
            op: encode(&Request::GetXattr(req::GetXattr {
                path: "/d/f".into(),
                name: "user.a".into(),
            }))
            .unwrap(),
        });
        assert_eq!(
            d.handle(getx).await.unwrap(),
            Reply::Data(bytes::Bytes::from_static(b"va"))
        );
    });
}
