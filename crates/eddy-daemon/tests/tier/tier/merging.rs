//! Per-object queues (decision 0074): a daemon's write-back of a file hands its dirty chunks
//! to the backend file's queue, where adjacent ones go as one pwrite. An ior-hard file (ranks
//! writing 47,008-byte records interleaved into one shared file) is written back in fewer
//! backend writes than chunks, every byte where it belongs; with `backend_merge_window_us = 0`
//! every chunk is its own pwrite, as before. Counts and bytes are asserted, never times.

use super::*;

const RECORD: usize = 47_008;
const RANKS: usize = 4;
const PER_RANK: usize = 48;

/// The ior-hard file: record i of rank r at (i * RANKS + r) * RECORD.
fn ior_hard_data() -> Vec<u8> {
    random_bytes(RANKS * PER_RANK * RECORD)
}

/// Writes `data` into `/ior.bin` as RANKS ranks would (each its own handle, all at once,
/// record by record), stages it out, and returns the summed tier figures after.
async fn write_back_ior_hard(window_us: u64, data: &[u8]) -> (TierStatus, u64) {
    let backend = tempfile::tempdir().unwrap();
    let cl = Cluster::start_with(
        3,
        Config {
            backend_merge_window_us: window_us,
            ..linked(&[("/", backend.path())])
        },
    );
    let c = cl.client().await;
    let me = Creds::root();
    c.create("/ior.bin", 0o644, true, me).await.unwrap();
    let ranks = (0..RANKS).map(|r| {
        let c = &c;
        async move {
            let f = c.open("/ior.bin", libc::O_WRONLY, 0, me).await.unwrap();
            for i in 0..PER_RANK {
                let at = (i * RANKS + r) * RECORD;
                c.pwrite(&f, at as u64, &data[at..at + RECORD])
                    .await
                    .unwrap();
            }
            c.close(&f).await.unwrap();
        }
    });
    futures::future::join_all(ranks).await;
    let chunk = c.config().chunk_size;
    let before = statuses(&c).await;
    assert!(before.iter().all(|s| s.tier.backend_writes == 0));
    all_ok(&c.stage_out(&[], &|_| {}).await.unwrap());
    same(
        &std::fs::read(backend.path().join("ior.bin")).unwrap(),
        data,
        &format!("the backend copy (window {window_us} µs)"),
    );
    let mut sum = TierStatus::default();
    for s in statuses(&c).await {
        sum.backend_writes += s.tier.backend_writes;
        sum.merged_writes += s.tier.merged_writes;
        sum.backend_write_bytes += s.tier.backend_write_bytes;
    }
    (sum, (data.len() as u64).div_ceil(chunk))
}

/// With merging (the default window), the dirty chunks of the ior-hard file that lie next to
/// each other on a daemon go as one pwrite: fewer backend writes than chunks, every chunk
/// counted once as a write or a merged request, every byte right. With the window 0, one
/// pwrite per chunk and nothing merged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ior_hard_file_is_written_back_in_fewer_pwrites_when_merged() {
    let data = ior_hard_data();
    let window = Config::default().backend_merge_window_us;
    assert!(window > 0, "merging is on by default");
    let (on, chunks) = write_back_ior_hard(window, &data).await;
    let (off, chunks_off) = write_back_ior_hard(0, &data).await;
    eprintln!("merging on: {on:?}\nmerging off: {off:?}\nchunks: {chunks}");
    assert_eq!(chunks, chunks_off);
    assert!(chunks > 100, "{chunks} chunks");
    // Off: as before, one pwrite per dirty chunk.
    assert_eq!(off.backend_writes, chunks, "window 0: {off:?}");
    assert_eq!(off.merged_writes, 0);
    assert_eq!(off.backend_write_bytes, data.len() as u64);
    // On: each chunk went in some pwrite, most in another's.
    assert_eq!(on.backend_writes + on.merged_writes, chunks, "{on:?}");
    assert!(
        on.backend_writes < off.backend_writes,
        "merged: {} pwrites, unmerged: {}",
        on.backend_writes,
        off.backend_writes
    );
    assert_eq!(on.backend_write_bytes, data.len() as u64);
}

/// Cold reads through the queues: 8 readers at once of one backend file, each a range of
/// whole chunks, read every byte right; every fetch is one backend read or merged into
/// one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_cold_reads_through_the_queues_read_every_byte() {
    let backend = tempfile::tempdir().unwrap();
    let data = random_bytes(8 * 16 * 64 * KIB);
    std::fs::write(backend.path().join("cold.bin"), &data).unwrap();
    let cl = Cluster::start_with(
        3,
        Config {
            readahead_chunks: 0,
            stream_hints: false,
            backend_merge_window_us: 100_000,
            ..linked(&[("/", backend.path())])
        },
    );
    let c = cl.client().await;
    let f = c
        .open("/cold.bin", libc::O_RDONLY, 0, Creds::root())
        .await
        .unwrap();
    let part = data.len() / 8;
    let readers = (0..8).map(|i| {
        let (c, f) = (&c, &f);
        async move {
            let mut got = Vec::new();
            // Chunk by chunk: the readers' fetches meet in the daemons' queues.
            for k in 0..part / (64 * KIB) {
                let at = i * part + k * 64 * KIB;
                got.extend(c.pread(f, at as u64, 64 * KIB).await.unwrap());
            }
            (i, got)
        }
    });
    for (i, got) in futures::future::join_all(readers).await {
        same(
            &got,
            &data[i * part..(i + 1) * part],
            &format!("reader {i}"),
        );
    }
    let fetches = total(&c, |t| t.fetches).await;
    let reads = total(&c, |t| t.backend_reads).await;
    let merged = total(&c, |t| t.merged_reads).await;
    assert_eq!(fetches, 128, "one fetch per chunk");
    assert_eq!(reads + merged, fetches, "every fetch read once");
    assert_eq!(total(&c, |t| t.backend_read_bytes).await, data.len() as u64);
}
