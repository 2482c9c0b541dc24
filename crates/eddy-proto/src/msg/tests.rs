//! Round trips of messages and records, and the decoder's bounds.

use super::req;
use super::*;
use crate::frame::{Frame, OutFrame};
use crate::Errno;
use bytes::Bytes;

#[test]
fn operation_names_are_distinct() {
    let mut names = OP_NAMES.to_vec();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), OP_NAMES.len());
    assert_eq!(Request::Status(req::Status).op_name(), "status");
    assert_eq!(Request::Shutdown(req::Shutdown).op_name(), "shutdown");
    assert_eq!(
        Request::ShutdownWithStats(req::ShutdownWithStats).op_name(),
        "shutdown_with_stats"
    );
    assert_eq!(Op::ALL.len(), 71);
}
use proptest::prelude::*;

/// The frame as a reader gets it.
fn read_back(f: OutFrame) -> Frame {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut buf = Vec::new();
        crate::frame::write_frames(&mut buf, &[f]).await.unwrap();
        crate::frame::read_frame(&mut &buf[..], 1 << 20)
            .await
            .unwrap()
    })
}

fn inode() -> Inode {
    Inode {
        kind: FileKind::File,
        file_id: 0xdead_beef,
        mode: 0o644,
        uid: 1,
        gid: 2,
        size: 3,
        atime: Timespec { sec: 4, nsec: 5 },
        mtime: Timespec::default(),
        ctime: Timespec::default(),
        target: None,
        tier: None,
        rdev: 0,
        xattrs: Vec::new(),
        nlink: 1,
        shared: None,
    }
}

#[test]
fn request_round_trip() {
    let r = Request::Write(req::Write {
        file_id: 9,
        pieces: vec![Piece {
            chunk: 1,
            offset: 2,
            len: 3,
        }],
        sums: vec![7],
        data: Bytes::from_static(&[1, 2, 3]),
        backing: Some(Backing {
            path: "/in/x".into(),
            size: 5,
        }),
        hint: None,
    });
    let frame = read_back(r.to_frame(4, 1 << 20).unwrap());
    assert_eq!((frame.id, &frame.payload[..]), (4, &[1u8, 2, 3][..]));
    assert_eq!(Request::from_frame(frame, 1 << 20).unwrap(), r);
    // The data is not in the encoding.
    let bare = decode::<Request>(&encode(&r).unwrap(), 1 << 20).unwrap();
    assert!(matches!(bare, Request::Write(ref w) if w.data.is_empty()));
    assert_eq!(bare.payload(), Bytes::new());
    let data: Response = Ok(Reply::Data(Bytes::from(vec![9u8; 100])));
    let frame = read_back(response_frame(1, &data, 1 << 20).unwrap());
    assert_eq!(frame.payload.len(), 100);
    assert_eq!(response_from_frame(frame, 1 << 20).unwrap(), data);
    let checked: Response = Ok(Reply::Checked {
        data: Bytes::from(vec![3u8; 10]),
        sums: vec![1, 2],
    });
    let frame = read_back(response_frame(1, &checked, 1 << 20).unwrap());
    assert_eq!(frame.payload.len(), 10);
    assert_eq!(response_from_frame(frame, 1 << 20).unwrap(), checked);
    // A payload where none belongs is EPROTO.
    let stat = Request::Stat(req::Stat { path: "/a".into() });
    let mut frame = read_back(stat.to_frame(2, 1 << 20).unwrap());
    frame.payload = Bytes::from_static(b"xx");
    assert_eq!(
        Request::from_frame(frame, 1 << 20).unwrap_err().errno,
        libc::EPROTO
    );
    let resp: Response = Err(Errno::enoent("/x"));
    let bytes = encode(&resp).unwrap();
    assert_eq!(decode::<Response>(&bytes, 1 << 20).unwrap(), resp);
}

#[test]
fn record_round_trip_and_version_check() {
    let rec = inode().to_record();
    assert_eq!(Inode::from_record(&rec).unwrap(), inode());
    let mut bad = rec.clone();
    bad[0] = 99;
    assert_eq!(Inode::from_record(&bad).unwrap_err().errno, libc::EIO);
    assert!(Inode::from_record(&[]).is_err());
}

#[test]
fn version_1_records_are_still_read() {
    let i = inode();
    let v1 = (
        i.kind, i.file_id, i.mode, i.uid, i.gid, i.size, i.atime, i.mtime, i.ctime, i.target,
    );
    let mut rec = vec![1u8];
    rec.extend(encode(&v1).unwrap());
    assert_eq!(Inode::from_record(&rec).unwrap(), inode());
    let tiered = Inode {
        tier: Some(TierState {
            backend_mtime: Timespec { sec: 9, nsec: 1 },
            backend_size: 77,
            dirty: true,
        }),
        ..inode()
    };
    assert_eq!(Inode::from_record(&tiered.to_record()).unwrap(), tiered);
}

#[test]
fn version_2_records_are_still_read() {
    let tier = Some(TierState {
        backend_mtime: Timespec { sec: 3, nsec: 2 },
        backend_size: 11,
        dirty: false,
    });
    let i = Inode { tier, ..inode() };
    let v2 = (
        i.kind, i.file_id, i.mode, i.uid, i.gid, i.size, i.atime, i.mtime, i.ctime, i.target,
        i.tier,
    );
    let mut rec = vec![2u8];
    rec.extend(encode(&v2).unwrap());
    assert_eq!(Inode::from_record(&rec).unwrap(), Inode { tier, ..inode() });
}

#[test]
fn special_files_and_xattrs_round_trip() {
    // The old kinds keep their encodings; the new ones come after them.
    assert_eq!(encode(&FileKind::Symlink).unwrap(), 2u32.to_le_bytes());
    assert_eq!(encode(&FileKind::BlockDevice).unwrap(), 6u32.to_le_bytes());
    let dev = Inode {
        kind: FileKind::CharDevice,
        rdev: 0x0103,
        xattrs: vec![Xattr {
            name: "user.a".into(),
            value: vec![0, 1, 2],
        }],
        ..inode()
    };
    assert_eq!(dev.xattr_bytes(), 9);
    let rec = dev.to_record();
    assert_eq!(rec[0], INODE_RECORD_VERSION);
    assert_eq!(Inode::from_record(&rec).unwrap(), dev);
    assert!(FileKind::Fifo.is_special() && !FileKind::Symlink.is_special());
}

#[test]
fn version_3_records_are_read_with_one_name() {
    let i = Inode {
        rdev: 5,
        xattrs: vec![Xattr {
            name: "user.x".into(),
            value: vec![9],
        }],
        ..inode()
    };
    let v3 = (
        i.kind, i.file_id, i.mode, i.uid, i.gid, i.size, i.atime, i.mtime, i.ctime, &i.target,
        i.tier, i.rdev, &i.xattrs,
    );
    let mut rec = vec![3u8];
    rec.extend(encode(&v3).unwrap());
    let read = Inode::from_record(&rec).unwrap();
    assert_eq!(read, i);
    assert_eq!((read.nlink, read.shared), (1, None));
    let shared = Inode {
        nlink: 3,
        shared: Some(2),
        ..i
    };
    assert_eq!(Inode::from_record(&shared.to_record()).unwrap(), shared);
}

#[test]
fn huge_length_prefix_does_not_allocate() {
    // A Write whose checksums claim 2^60 entries.
    let mut bytes = encode(&Request::Write(req::Write {
        file_id: 1,
        sums: vec![],
        pieces: vec![],
        data: Bytes::new(),
        backing: None,
        hint: None,
    }))
    .unwrap();
    let n = bytes.len() - 2; // the trailing `backing: None` and `hint: None` bytes
    bytes[n - 8..n].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert_eq!(
        decode::<Request>(&bytes, 1 << 20).unwrap_err().errno,
        libc::EPROTO
    );
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode::<Request>(&bytes, 1 << 16);
        let _ = decode::<Response>(&bytes, 1 << 16);
        let frame = Frame { id: 1, meta: Bytes::from(bytes.clone()), payload: Bytes::from(bytes) };
        let _ = Request::from_frame(frame.clone(), 1 << 16);
        let _ = response_from_frame(frame, 1 << 16);
    }
}

/// The fingerprint of the request table: the first 16 hex digits of the BLAKE3 hash of its
/// text without white space (so that how a toolchain spaces `stringify!` does not count).
fn table_fingerprint() -> String {
    let text: String = TABLE_TEXT.chars().filter(|c| !c.is_whitespace()).collect();
    blake3::hash(text.as_bytes()).to_hex()[..16].to_string()
}

#[test]
fn request_table_matches_its_protocol_version() {
    use crate::{PROTOCOL_VERSION, TABLE_FINGERPRINTS};
    let now = table_fingerprint();
    let versions: Vec<u32> = TABLE_FINGERPRINTS.iter().map(|e| e.0).collect();
    assert!(
        versions.windows(2).all(|w| w[0] < w[1]),
        "TABLE_FINGERPRINTS (crates/eddy-proto/src/lib.rs) must list each protocol version \
         once, oldest first: {versions:?}"
    );
    let &(version, recorded) = TABLE_FINGERPRINTS.last().expect("a recorded fingerprint");
    // The version may have been raised for another change of the wire (a request's fields):
    // the table then stays as last recorded.
    let to = if PROTOCOL_VERSION > version {
        format!("add ({PROTOCOL_VERSION}, \"{now}\")")
    } else {
        format!(
            "raise PROTOCOL_VERSION to {0} and add ({0}, \"{now}\")",
            version + 1
        )
    };
    assert!(
        recorded == now && version <= PROTOCOL_VERSION,
        "the request table (request_table!, crates/eddy-proto/src/msg/table.rs) has the \
         fingerprint {now}, but {recorded} is recorded for protocol version {version} \
         (PROTOCOL_VERSION is {PROTOCOL_VERSION}).\n\
         A changed table is a changed protocol: {to} at the end of TABLE_FINGERPRINTS, \
         both in crates/eddy-proto/src/lib.rs (never edit an earlier entry)."
    );
}

#[test]
fn the_table_text_has_every_request_and_its_columns() {
    let lines: Vec<&str> = TABLE_TEXT.lines().collect();
    assert_eq!(lines.len(), Op::ALL.len());
    for (line, op) in lines.iter().zip(Op::ALL) {
        assert!(line.contains(&format!("\"{}\"", op.name())), "{line}");
    }
    assert_eq!(
        lines[0],
        "Create \"create\" {path} -> Inode, id: Stat, bulk: [];"
    );
    let write: String = lines[13].split_whitespace().collect();
    assert!(
        write.ends_with("bulk:[payload(data),adds(pieces),writes(data)];"),
        "{write}"
    );
}

#[test]
fn identity_column_readdresses_path_requests_only() {
    let path = "/\0id/00".to_string();
    let create = Request::Create(req::Create {
        path: "/a".into(),
        inode: Inode::new(FileKind::File, 1, 0o644, 0, 0),
        exclusive: false,
    });
    assert!(matches!(create.on_identity(path.clone()), Ok(Request::Stat(s)) if s.path == path));
    let listx = Request::ListXattr(req::ListXattr { path: "/a".into() });
    assert!(matches!(listx.on_identity(path.clone()), Ok(Request::ListXattr(s)) if s.path == path));
    let readdir = Request::HasChildren(req::HasChildren { dir: "/a".into() });
    assert!(matches!(
        readdir.on_identity(path.clone()),
        Err(Op::HasChildren)
    ));
    let nested = Request::OnIdentity(req::OnIdentity {
        file_id: 1,
        op: vec![],
    });
    assert!(nested.on_identity(path).is_err());
}

#[test]
fn bulk_column_measures_the_bytes() {
    let piece = |len| crate::Piece {
        chunk: 0,
        offset: 0,
        len,
    };
    let write = Request::Write(req::Write {
        file_id: 7,
        pieces: vec![piece(10), piece(5)],
        sums: vec![],
        data: Bytes::from(vec![1u8; 15]),
        backing: None,
        hint: None,
    });
    let b = write.bulk();
    assert_eq!(
        (b.adds, b.reply, b.counted, b.file),
        (15, None, 15, Some((7, true)))
    );
    assert_eq!(write.adds_bytes(), Some(15));
    assert_eq!(write.payload().len(), 15);
    let read = Request::Read(req::Read {
        file_id: 8,
        pieces: vec![piece(4096)],
        backing: None,
        hint: None,
    });
    let b = read.bulk();
    assert_eq!(
        (b.adds, b.reply, b.counted, b.file),
        (0, Some(4096), 0, Some((8, false)))
    );
    assert_eq!(read.adds_bytes(), None);
    let stat = Request::Stat(req::Stat { path: "/a".into() });
    assert_eq!(stat.bulk(), Bulk::default());
    assert!(stat.payload().is_empty());
}

/// The lengths of a report's ranges come from the sender: their sum saturates instead of
/// panicking the daemon that counts them (found by the request fuzzer).
#[test]
fn bulk_of_ranges_past_u64_saturates() {
    let report = Request::DirectCommit(req::DirectCommit {
        file_id: 9,
        lease: 1,
        ranges: vec![(0, u64::MAX), (0, 5)],
        sums: vec![],
        read_bytes: 0,
        release: false,
        whole: false,
    });
    assert_eq!(report.bulk().counted, u64::MAX);
    let pieces = vec![
        crate::Piece {
            chunk: 0,
            offset: 0,
            len: u32::MAX,
        };
        3
    ];
    assert_eq!(crate::Piece::total(&pieces), 3 * u64::from(u32::MAX));
}

/// A batch of a lease's holder and its outcomes travel as they are (decision 0075).
#[test]
fn lease_batches_round_trip() {
    let batch = Request::Batch(req::Batch {
        dir: "/d".into(),
        lease: LeaseRef { daemon: 2, id: 7 },
        ops: vec![
            BatchOp::Create(req::Create {
                path: "/d/a".into(),
                inode: inode(),
                exclusive: true,
            }),
            BatchOp::Remove(req::Remove {
                path: "/d/a".into(),
                kind: RemoveKind::NotDir,
            }),
        ],
    });
    let frame = read_back(batch.to_frame(3, 1 << 20).unwrap());
    assert_eq!(Request::from_frame(frame, 1 << 20).unwrap(), batch);
    let outcomes: Vec<BatchOutcome> = vec![Ok(inode()), Err(Errno::new(libc::EEXIST, "there"))];
    let reply = outcomes.clone().into_reply();
    let back: Response = decode(&encode(&Ok::<Reply, Errno>(reply)).unwrap(), 1 << 20).unwrap();
    assert_eq!(typed_reply::<req::Batch>(back.unwrap()).unwrap(), outcomes);
}
