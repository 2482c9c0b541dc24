//! Space for sequential writers (decision 0074): a client's writes carry the stream's hint,
//! and a daemon preallocates, for a sequential writer, the slots of the next chunks it owns
//! in its data file (blocks allocated past what is written); truncate and removal give them
//! back, a writer that jumps about gets none, and `write_prealloc_chunks = 0` turns it off.
//! The writes go through the daemons (direct local I/O off), as a writer on another node's.
//! Blocks and counters are asserted, never times. The daemons' roots are on a tmpfs of the
//! test's own: a device less than an eighth free gets no space ahead, so the host's disks
//! must not decide the outcome.

use super::*;
use eddy_client::DaemonStatus;

const CS: usize = 64 * KIB;

/// The device the daemons' roots are on: 256 MiB, far more than an eighth free throughout.
fn disk() -> Tmpfs {
    Tmpfs::new(256 * 1024 * 1024)
}

/// Three daemons with their roots on `disk`.
fn cluster(disk: &Tmpfs, config: Config) -> Cluster {
    Cluster::start_on(3, config, |i| disk.path().join(format!("d{i}")))
}

fn config(window: u32) -> Config {
    Config {
        direct_io: false,
        write_prealloc_chunks: window,
        ..test_config()
    }
}

/// Bytes the daemons' data files of `id` hold on their devices (st_blocks), and the sum of
/// their lengths (each sparse, to its last chunk's end); files that do not exist count 0.
fn on_disk(cl: &Cluster, id: eddy_proto::FileId) -> (u64, u64) {
    let rel = eddy_proto::fdpass::data_file(id);
    (0..3)
        .filter_map(|i| std::fs::metadata(cl.root_of(i).join(&rel)).ok())
        .fold((0, 0), |(b, l), m| (b + m.blocks() * 512, l + m.len()))
}

async fn prealloc(c: &Client) -> (u64, u64) {
    let s: Vec<DaemonStatus> = statuses(c).await;
    (
        s.iter().map(|s| s.preallocated_bytes).sum(),
        s.iter().map(|s| s.preallocated_total_bytes).sum(),
    )
}

/// A sequential writer's data files hold blocks past the bytes written (the next chunks'
/// slots), counted as preallocated; every byte reads back; a truncate to 0 gives every block
/// back; written again and removed, nothing stays preallocated and the data files are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequential_writer_gets_space_ahead_that_truncate_and_unlink_give_back() {
    let disk = disk();
    let cl = cluster(&disk, config(8));
    let c = cl.client().await;
    let me = Creds::root();
    let data = random_bytes(24 * CS);
    let f = c.create("/seq.bin", 0o644, true, me).await.unwrap();
    for k in 0..24 {
        c.pwrite(&f, (k * CS) as u64, &data[k * CS..(k + 1) * CS])
            .await
            .unwrap();
    }
    c.fsync(&f).await.unwrap();
    let (now, ever) = prealloc(&c).await;
    assert!(ever > 0, "nothing preallocated for a sequential writer");
    assert!(
        now > 0,
        "the slots ahead of the last write are preallocated"
    );
    assert!(now <= 3 * 8 * CS as u64, "{now} bytes: past the window");
    let (blocks, _) = on_disk(&cl, f.file_id());
    let written = data.len() as u64;
    assert!(
        blocks >= written + now,
        "the data files hold {blocks} bytes of blocks for {written} bytes written and {now} \
         preallocated"
    );
    same(
        &c.pread(&f, 0, data.len()).await.unwrap(),
        &data,
        "read back",
    );
    assert_eq!(c.fstat(&f).await.unwrap().size, data.len() as u64);

    // Truncate to 0: every block comes back, nothing stays preallocated.
    c.truncate("/seq.bin", 0, me).await.unwrap();
    assert_eq!(
        prealloc(&c).await.0,
        0,
        "truncate gives preallocations back"
    );
    assert_eq!(
        on_disk(&cl, f.file_id()).0,
        0,
        "blocks left after truncate to 0"
    );

    // Written again, then removed: the data files go with their preallocations.
    for k in 0..24 {
        c.pwrite(&f, (k * CS) as u64, &data[k * CS..(k + 1) * CS])
            .await
            .unwrap();
    }
    c.close(&f).await.unwrap();
    assert!(prealloc(&c).await.0 > 0);
    c.unlink("/seq.bin", me).await.unwrap();
    assert_eq!(prealloc(&c).await.0, 0, "removal forgets preallocations");
    assert_eq!(
        on_disk(&cl, f.file_id()),
        (0, 0),
        "data files left after unlink"
    );
}

/// A writer that jumps about (7 chunks on, modulo 16: never within 4 chunks of its last
/// write's end) gets nothing preallocated, and neither does a sequential one with
/// `write_prealloc_chunks = 0`; the bytes are right either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_writers_and_a_window_of_0_get_no_space_ahead() {
    for window in [8, 0] {
        let disk = disk();
        let cl = cluster(&disk, config(window));
        let c = cl.client().await;
        let me = Creds::root();
        let data = random_bytes(16 * CS);
        let f = c.create("/w.bin", 0o644, true, me).await.unwrap();
        let order: Vec<usize> = if window == 0 {
            (0..16).collect()
        } else {
            (0..16).map(|i| i * 7 % 16).collect()
        };
        for k in order {
            c.pwrite(&f, (k * CS) as u64, &data[k * CS..(k + 1) * CS])
                .await
                .unwrap();
        }
        same(
            &c.pread(&f, 0, data.len()).await.unwrap(),
            &data,
            "read back",
        );
        assert_eq!(prealloc(&c).await, (0, 0), "window {window}");
        c.close(&f).await.unwrap();
    }
}

/// Preallocated space never costs a writer its room: daemons with a capacity of 32 chunks
/// each, written sequentially until ENOSPC, refuse only when one of them holds its whole
/// capacity in chunks (its preallocations given back to the write that needed them), and
/// removing the file frees everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_daemon_gives_its_preallocations_back_before_enospc() {
    let capacity = 32 * CS as u64;
    let disk = disk();
    let cl = cluster(
        &disk,
        Config {
            capacity_bytes: capacity,
            ..config(8)
        },
    );
    let c = cl.client().await;
    let me = Creds::root();
    let f = c.create("/fill.bin", 0o644, true, me).await.unwrap();
    let chunk = random_bytes(CS);
    let mut written = 0usize;
    let err = loop {
        match c.pwrite(&f, (written * CS) as u64, &chunk).await {
            Ok(_) => written += 1,
            Err(e) => break e,
        }
        assert!(written < 200, "no ENOSPC past the deployment's capacity");
    };
    assert_eq!(err.errno, libc::ENOSPC, "{err:?}");
    assert!(
        prealloc(&c).await.1 > 0,
        "the writer got space ahead meanwhile"
    );
    let full: Vec<DaemonStatus> = statuses(&c)
        .await
        .into_iter()
        .filter(|s| s.chunk_bytes == capacity)
        .collect();
    assert!(
        !full.is_empty(),
        "ENOSPC before any daemon held its capacity in chunks: {:?}",
        statuses(&c)
            .await
            .iter()
            .map(|s| (s.chunk_bytes, s.preallocated_bytes))
            .collect::<Vec<_>>()
    );
    for s in &full {
        assert_eq!(
            s.preallocated_bytes, 0,
            "a full daemon keeps no preallocation"
        );
    }
    let _ = c.close(&f).await;
    c.unlink("/fill.bin", me).await.unwrap();
    for s in statuses(&c).await {
        assert_eq!((s.chunk_bytes, s.preallocated_bytes), (0, 0));
    }
    assert_eq!(on_disk(&cl, f.file_id()), (0, 0));
}
