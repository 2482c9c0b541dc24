//! Several processes writing disjoint ranges of one shared file at once, and several
//! appending at once, through the client library: the final size and contents are exact.
//!
//! The writer processes are this test binary run again with `EDDY_TEST_WORKER` set: the
//! `child_process_entry` function below does the work in the child and nothing otherwise.

use eddy_client::{Client, Creds};
use eddy_config::Deployment;
use eddy_testkit::{pattern, Cluster};
use std::process::Command;

const RANKS: usize = 4;
const BLOCK: usize = 47_008; // IOR-hard transfer size: never chunk aligned
const BLOCKS_PER_RANK: usize = 12;
const RECORD: usize = 3_000;
const RECORDS_PER_RANK: usize = 40;

fn spawn_children(dep_file: &std::path::Path, job: &str) {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..RANKS)
        .map(|rank| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "shared_file::child_process_entry",
                    "--test-threads=1",
                ])
                .env(
                    "EDDY_TEST_WORKER",
                    format!("{job}:{rank}:{}", dep_file.display()),
                )
                // The child's own test summary would read like this binary's: keep it out.
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a writer process failed");
    }
}

/// Runs only in the child processes started above.
#[test]
fn child_process_entry() {
    let Ok(spec) = std::env::var("EDDY_TEST_WORKER") else {
        return;
    };
    let mut parts = spec.splitn(3, ':');
    let (job, rank, dep) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let rank: usize = rank.parse().unwrap();
    let dep = Deployment::load(std::path::Path::new(dep)).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = Client::connect(dep).await.unwrap();
        match job {
            "strided" => {
                let f = c
                    .open("/shared", libc::O_WRONLY, 0, Creds::root())
                    .await
                    .unwrap();
                for i in 0..BLOCKS_PER_RANK {
                    let off = ((i * RANKS + rank) * BLOCK) as u64;
                    c.pwrite(&f, off, &pattern(rank as u64, off, BLOCK))
                        .await
                        .unwrap();
                }
                c.close(&f).await.unwrap();
            }
            "append" => {
                let f = c
                    .open("/log", libc::O_WRONLY | libc::O_APPEND, 0, Creds::root())
                    .await
                    .unwrap();
                for i in 0..RECORDS_PER_RANK {
                    let mut rec = vec![rank as u8; RECORD];
                    rec[..4].copy_from_slice(&(i as u32).to_le_bytes());
                    c.pwrite(&f, 0, &rec).await.unwrap();
                }
            }
            other => panic!("unknown job {other}"),
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_write_disjoint_ranges_of_one_file() {
    let cl = Cluster::start(3);
    let c = cl.client().await;
    c.create("/shared", 0o644, true, Creds::root())
        .await
        .unwrap();
    let dep = cl.deployment_file.clone();
    tokio::task::spawn_blocking(move || spawn_children(&dep, "strided"))
        .await
        .unwrap();
    let total = RANKS * BLOCKS_PER_RANK * BLOCK;
    assert_eq!(c.stat("/shared").await.unwrap().size, total as u64);
    let f = c
        .open("/shared", libc::O_RDONLY, 0, Creds::root())
        .await
        .unwrap();
    let all = c.pread(&f, 0, total + 1).await.unwrap();
    assert_eq!(all.len(), total);
    for (b, block) in all.chunks(BLOCK).enumerate() {
        let rank = b % RANKS;
        assert_eq!(
            block,
            &pattern(rank as u64, (b * BLOCK) as u64, BLOCK)[..],
            "block {b}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_append_to_one_file() {
    let cl = Cluster::start(3);
    let c = cl.client().await;
    c.create("/log", 0o644, true, Creds::root()).await.unwrap();
    let dep = cl.deployment_file.clone();
    tokio::task::spawn_blocking(move || spawn_children(&dep, "append"))
        .await
        .unwrap();
    let total = RANKS * RECORDS_PER_RANK * RECORD;
    assert_eq!(c.stat("/log").await.unwrap().size, total as u64);
    let f = c
        .open("/log", libc::O_RDONLY, 0, Creds::root())
        .await
        .unwrap();
    let all = c.pread(&f, 0, total).await.unwrap();
    let mut next = [0u32; RANKS];
    for rec in all.chunks(RECORD) {
        let rank = rec[RECORD - 1] as usize;
        assert!(
            rank < RANKS && rec[4..].iter().all(|&b| b as usize == rank),
            "a record was torn"
        );
        assert_eq!(u32::from_le_bytes(rec[..4].try_into().unwrap()), next[rank]);
        next[rank] += 1;
    }
    assert!(next.iter().all(|&n| n as usize == RECORDS_PER_RANK));
}
