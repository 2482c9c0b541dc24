//! Stream hints (decision 0072): the daemons read ahead, for one reader's stream, the chunks
//! of a backend file they own that it reads next: strided readers get their next records,
//! sequential ones their next chunks across chunk boundaries (the client's own read-ahead
//! off, so that what comes ahead is the daemons' doing), random ones nothing; with
//! `stream_hints = false` nothing; absurd hints are ignored without harm.

use super::*;
use eddy_proto::{req, Backing, Pattern, Piece, StreamHint};
use std::collections::BTreeSet;

const CS: usize = 64 * KIB;

/// A linked backend directory with the client's own read-ahead off.
fn hinted(backend: &Path, hints: bool) -> Config {
    Config {
        readahead_chunks: 0,
        stream_hints: hints,
        ..linked(&[("/", backend)])
    }
}

async fn open(c: &Client, path: &str) -> eddy_client::File {
    c.open(path, libc::O_RDONLY, 0, Creds::root())
        .await
        .unwrap()
}

/// A strided reader (4 KiB records six chunks apart) gets, from the third read on (when its
/// client has seen the stride), the records among the next `stream_readahead_chunks` that
/// each daemon it read from owns fetched ahead: exactly those, and reading them afterwards
/// fetches nothing. A sequential reader gets the chunks after its reads, across chunk
/// boundaries, from the daemons it read from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strided_and_sequential_streams_are_read_ahead_by_the_owners() {
    let backend = tempfile::tempdir().unwrap();
    let stride = 6 * CS;
    let records = 40;
    let data = random_bytes(records * stride);
    std::fs::write(backend.path().join("strided.bin"), &data).unwrap();
    std::fs::write(backend.path().join("seq.bin"), &data).unwrap();
    let cl = Cluster::start_with(3, hinted(backend.path(), true));
    let c = cl.client().await;
    let window = c.config().stream_readahead_chunks as usize;
    assert!(window >= 4, "the default window is several chunks");

    let f = open(&c, "/strided.bin").await;
    let owner = |k: usize| c.rpc().placement().chunk_owner(f.file_id(), k as u64);
    let (rec, read) = (4 * KIB, 8);
    let fetched0 = total(&c, |t| t.fetches).await;
    let mut ahead = BTreeSet::new();
    for r in 0..read {
        let off = r * stride + 100;
        same(
            &c.pread(&f, off as u64, rec).await.unwrap(),
            &data[off..off + rec],
            &format!("record {r}"),
        );
        if r >= 2 {
            // The owner of this record's chunk fetches its own among the next records.
            let d = owner(6 * r);
            ahead.extend(
                (r + 1..=r + window)
                    .filter(|&j| j < records && owner(6 * j) == d)
                    .map(|j| 6 * j),
            );
        }
    }
    for r in 0..read {
        ahead.remove(&(6 * r));
    }
    assert!(
        !ahead.is_empty(),
        "some record ahead has an owner that was read from"
    );
    let want = fetched0 + read as u64 + ahead.len() as u64;
    assert!(
        wait_for(&c, |n| n >= want, |t| t.fetches).await,
        "the strided reader's records ahead ({ahead:?}) were not fetched: {} fetches, {want} expected",
        total(&c, |t| t.fetches).await
    );
    // The records ahead were fetched by read-ahead alone (the reader never read them).
    let counted = total(&c, |t| t.read_ahead_bytes).await;
    assert!(
        counted >= (ahead.len() * CS) as u64,
        "{counted} bytes counted as read ahead, for {} chunks",
        ahead.len()
    );
    // `eddy status` shows what each daemon read ahead, in its backend tier table.
    let out = cli::ok(&["status", "--state", s(cl.dir.path())]);
    let out = String::from_utf8_lossy(&out.stdout);
    let mut lines = out.lines().skip_while(|l| !l.contains("READ AHEAD"));
    let header = lines.next().expect("a READ AHEAD column in eddy status");
    let end = header.find("READ AHEAD").unwrap() + "READ AHEAD".len();
    for st in statuses(&c).await {
        let row = lines.next().expect("a row per daemon");
        let cell = row.get(end - 10..end).unwrap_or_default().trim();
        assert_eq!(
            cell == "0 B",
            st.tier.read_ahead_bytes == 0,
            "eddy status shows {cell:?} read ahead for a daemon that read ahead {} bytes:\n{out}",
            st.tier.read_ahead_bytes
        );
    }
    // Another handle (a stream of its own, advised RANDOM: nothing read ahead for it)
    // reads the records fetched ahead: nothing is fetched.
    let g = open(&c, "/strided.bin").await;
    c.advise(&g, 0, 0, Advice::Random).await.unwrap();
    let fetched = total(&c, |t| t.fetches).await;
    assert_eq!(fetched, want, "fetched beyond the records ahead");
    for &k in &ahead {
        same(
            &c.pread(&g, (k * CS) as u64, CS).await.unwrap(),
            &data[k * CS..(k + 1) * CS],
            &format!("chunk {k}"),
        );
    }
    assert_eq!(
        total(&c, |t| t.fetches).await,
        fetched,
        "chunks read ahead for the strided reader were fetched again"
    );

    // Sequential: 1 MiB reads of the first 2 MiB; each read's owners fetch their chunks of
    // the next `window` chunks.
    let s = open(&c, "/seq.bin").await;
    let owner = |k: usize| c.rpc().placement().chunk_owner(s.file_id(), k as u64);
    let before = total(&c, |t| t.fetches).await;
    let step = 1 << 20;
    let mut ahead = BTreeSet::new();
    for i in 0..2 {
        let off = i * step;
        same(
            &c.pread(&s, off as u64, step).await.unwrap(),
            &data[off..off + step],
            &format!("MiB {i} of seq.bin"),
        );
        if i >= 1 {
            // Each daemon sees its own chunks of the read, and reads ahead from the end of
            // its last one.
            for d in (off / CS..(off + step) / CS)
                .map(owner)
                .collect::<BTreeSet<u32>>()
            {
                let Some(last) = (off / CS..(off + step) / CS).rfind(|&k| owner(k) == d) else {
                    continue;
                };
                ahead.extend((last + 1..=last + window).filter(|&k| owner(k) == d));
            }
        }
    }
    for k in 0..2 * step / CS {
        ahead.remove(&k);
    }
    let want = before + (2 * step / CS) as u64 + ahead.len() as u64;
    assert!(
        wait_for(&c, |n| n >= want, |t| t.fetches).await,
        "the sequential reader's next chunks ({ahead:?}) were not fetched"
    );
    let fetched = total(&c, |t| t.fetches).await;
    assert_eq!(fetched, want, "fetched beyond the chunks ahead");
    let g = open(&c, "/seq.bin").await;
    c.advise(&g, 0, 0, Advice::Random).await.unwrap();
    for &k in &ahead {
        c.pread(&g, (k * CS) as u64, CS).await.unwrap();
    }
    assert_eq!(
        total(&c, |t| t.fetches).await,
        fetched,
        "chunks read ahead for the sequential reader were fetched again"
    );
}

/// Reads of chunks in an order with no stride and no two near each other: the daemons read
/// nothing ahead (every chunk is fetched by its own read), with hints on; and with
/// `stream_hints = false`, a sequential and a strided reader get nothing ahead either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_streams_and_streams_without_hints_get_nothing_ahead() {
    let backend = tempfile::tempdir().unwrap();
    let data = random_bytes(100 * CS);
    for n in ["rand.bin", "seq.bin", "strided.bin"] {
        std::fs::write(backend.path().join(n), &data).unwrap();
    }
    let order = [50usize, 3, 90, 20, 71, 8, 60, 33, 95, 12];
    for hints in [true, false] {
        let cl = Cluster::start_with(3, hinted(backend.path(), hints));
        let c = cl.client().await;
        let before = total(&c, |t| t.fetches).await;
        let reads: Vec<usize> = if hints {
            let f = open(&c, "/rand.bin").await;
            for &k in &order {
                c.pread(&f, (k * CS) as u64, CS).await.unwrap();
            }
            order.to_vec()
        } else {
            let f = open(&c, "/seq.bin").await;
            let g = open(&c, "/strided.bin").await;
            for k in 0..10 {
                c.pread(&f, (k * CS) as u64, CS).await.unwrap();
                c.pread(&g, (k * 7 * CS) as u64, 4096).await.unwrap();
            }
            (0..20).collect()
        };
        // Anything read ahead starts with the read that asks for it, before its reply:
        // wait a little for a stray one.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            total(&c, |t| t.fetches).await - before,
            reads.len() as u64,
            "hints {hints}: fetched more than the chunks read"
        );
        assert_eq!(total(&c, |t| t.read_ahead_bytes).await, 0, "hints {hints}");
    }
}

/// Hints no client sends (a stride of 0 or 1, the largest stride, a pattern past the enum,
/// a sequential stream at the last chunk index a file can have, pieces out of order) are
/// served as plain reads: the right bytes or an error, no read-ahead, and the daemon
/// answers on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_hints_are_ignored() {
    let backend = tempfile::tempdir().unwrap();
    let data = random_bytes(20 * CS);
    std::fs::write(backend.path().join("f.bin"), &data).unwrap();
    let cl = Cluster::start_with(3, linked(&[("/", backend.path())]));
    let c = cl.client().await;
    let f = open(&c, "/f.bin").await;
    let backing = Backing {
        path: "/f.bin".into(),
        size: data.len() as u64,
    };
    let hints = [
        Pattern::Strided { stride: 0 },
        Pattern::Strided { stride: 1 },
        Pattern::Strided { stride: u64::MAX },
        Pattern::Strided {
            stride: u64::MAX - 3,
        },
    ];
    let piece = |chunk: u64, len: u32| Piece {
        chunk,
        offset: 0,
        len,
    };
    for (i, pattern) in hints.into_iter().enumerate() {
        let hint = Some(StreamHint {
            stream: i as u64,
            pattern,
        });
        let k = 3u64;
        let owner = c.rpc().placement().chunk_owner(f.file_id(), k);
        let read = req::Read {
            file_id: f.file_id(),
            pieces: vec![piece(k, 100)],
            backing: Some(backing.clone()),
            hint,
        };
        let got = c.rpc().call(owner, read).await.unwrap();
        same(
            &got.data,
            &data[3 * CS..3 * CS + 100],
            &format!("{pattern:?}"),
        );
    }
    // Sequential and strided, at the last chunk index there is, and with pieces out of order.
    for (i, pattern) in [Pattern::Sequential, Pattern::Strided { stride: 7 }]
        .into_iter()
        .enumerate()
    {
        let hint = Some(StreamHint {
            stream: 100 + i as u64,
            pattern,
        });
        for pieces in [vec![piece(u64::MAX, 100)], vec![piece(9, 10), piece(2, 10)]] {
            let owner = c
                .rpc()
                .placement()
                .chunk_owner(f.file_id(), pieces[0].chunk);
            let read = req::Read {
                file_id: f.file_id(),
                pieces,
                backing: Some(backing.clone()),
                hint,
            };
            let _ = c.rpc().call(owner, read).await;
        }
    }
    // A pattern tag past the enum does not decode: refused as a malformed request.
    let mut raw = eddy_proto::encode(&eddy_proto::Request::Read(req::Read {
        file_id: f.file_id(),
        pieces: vec![piece(0, 100)],
        backing: Some(backing.clone()),
        hint: Some(StreamHint {
            stream: 1,
            pattern: Pattern::Random,
        }),
    }))
    .unwrap();
    let n = raw.len();
    raw[n - 4..].copy_from_slice(&9u32.to_le_bytes());
    assert!(eddy_proto::decode::<eddy_proto::Request>(&raw, 1 << 20).is_err());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(total(&c, |t| t.read_ahead_bytes).await, 0);
    // Every daemon answers on, and the file reads right.
    assert_eq!(statuses(&c).await.len(), 3);
    same(&eddy_testkit::read_all(&c, "/f.bin").await, &data, "f.bin");
}

/// With the client's own read-ahead on (the default), a strided reader whose records are
/// close enough to look sequential to it (4 KiB records three chunks apart) stops reading
/// ahead the gaps once its stride is known: no chunk between its records past its first
/// reads is fetched. Before stream hints, every gap chunk within eight chunks of a read was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strided_reader_does_not_read_the_gaps_ahead() {
    let backend = tempfile::tempdir().unwrap();
    let (stride, records) = (3 * CS, 40);
    let data = random_bytes(records * stride);
    std::fs::write(backend.path().join("strided.bin"), &data).unwrap();
    let cl = Cluster::start_with(3, linked(&[("/", backend.path())]));
    let c = cl.client().await;
    let f = open(&c, "/strided.bin").await;
    for r in 0..30 {
        let off = r * stride;
        c.pread(&f, off as u64, 4096).await.unwrap();
    }
    // Anything read ahead starts with the read that asks for it: wait a little for it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Past chunk 20 (what the first two reads, before the stride was seen, may read ahead),
    // every chunk between records is still in the backend only: reading it fetches it.
    let g = open(&c, "/strided.bin").await;
    c.advise(&g, 0, 0, Advice::Random).await.unwrap();
    let gaps: Vec<usize> = (21..records * 3).filter(|k| k % 3 != 0).collect();
    let before = total(&c, |t| t.fetches).await;
    for &k in &gaps {
        c.pread(&g, (k * CS) as u64, CS).await.unwrap();
    }
    assert_eq!(
        total(&c, |t| t.fetches).await - before,
        gaps.len() as u64,
        "gap chunks of a strided reader were read ahead"
    );
}
