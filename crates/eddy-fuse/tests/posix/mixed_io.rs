//! Concurrent mixed I/O never reads as damage (issue 39, decision 0059): the nine
//! fio jobs (O_DIRECT `sync` random reads, `libaio`, `posixaio` and `splice` random writes
//! with and without O_DIRECT, `mmap` random writes of 1 KiB and 4 KiB, buffered 1 KiB reads)
//! on the same two files (1 MiB between them) through a mount with default settings, several rounds: no
//! reader gets EIO, no daemon logs a checksum mismatch, and afterwards the files read the
//! same through the mount and through a client on another host (through the daemons, every
//! block verified), scrub finds nothing, and a byte flipped on disk while nobody writes is
//! EIO again (the checksums are exact, not switched off). `EDDY_FIO_ROUNDS` sets the rounds
//! (3 by default).

use eddy_client::Client;
use eddy_config::{Config, PlacementMode};
use eddy_proto::req;
use eddy_testkit::{read_all, Mounted};

/// A client of the deployment that is not on the daemons' host: everything goes by RPC.
async fn remote_client(m: &Mounted) -> Client {
    let mut dep = m.cluster.dep.clone();
    dep.config.placement_host = Some("elsewhere".into());
    Client::connect(dep).await.unwrap()
}

fn rounds() -> usize {
    std::env::var("EDDY_FIO_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// The command, verbatim but for the directory.
fn fio(dir: &std::path::Path) -> std::process::Output {
    let fio = eddy_testkit::require::program("fio", "fio");
    let args = "--bs=8k --iodepth=16 --iodepth_batch=8 --randrepeat=1 --size=1m --numjobs=5 \
 --name=job1 --ioengine=sync --bs=4096 --direct=1 --rw=randread --filename=file1:file2 \
 --name=job2 --ioengine=libaio --rw=randwrite --direct=1 --filename=file1:file2 \
 --name=job3 --bs=4096 --ioengine=posixaio --rw=randwrite --direct=1 --filename=file1:file2 \
 --name=job4 --ioengine=splice --direct=1 --rw=randwrite --filename=file1:file2 \
 --name=job5 --bs=1k --ioengine=sync --rw=randread --filename=file1:file2 \
 --name=job6 --ioengine=posixaio --rw=randwrite --filename=file1:file2 \
 --name=job7 --ioengine=splice --rw=randwrite --filename=file1:file2 \
 --name=job8 --ioengine=mmap --rw=randwrite --bs=1k --filename=file1:file2 \
 --name=job9 --ioengine=mmap --rw=randwrite --direct=1 --bs=4096 --filename=file1:file2";
    std::process::Command::new(fio)
        .arg(format!("--directory={}", dir.display()))
        .args(args.split_whitespace())
        .output()
        .unwrap()
}

/// Every daemon verifies every block it holds: none may be bad, none counted.
async fn scrub_clean(c: &Client) {
    crate::scrub_clean(c).await;
    for d in c.rpc().ids().to_vec() {
        let s = c.rpc().call(d, req::Status).await.unwrap();
        assert_eq!(s.checksum_errors, 0, "daemon {d}");
    }
}

fn no_mismatch_logged(m: &Mounted) {
    for i in 0..m.cluster.dep.daemons.len() {
        let log = m.cluster.daemon_log(i);
        assert!(
            !log.contains("checksum mismatch"),
            "daemon {i} logged a checksum mismatch:\n{log}"
        );
    }
}

/// The rounds, the checks after them, and a flipped byte found.
fn mixed_rounds(config: Config) {
    let m = Mounted::start_with(3, config);
    for round in 0..rounds() {
        for f in ["file1", "file2"] {
            let _ = std::fs::remove_file(m.path(f));
        }
        let out = fio(m.mnt.path());
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && !text.contains("Input/output error"),
            "round {round}: fio failed:\n{text}"
        );
        no_mismatch_logged(&m);
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let far = rt.block_on(remote_client(&m));
    for f in ["file1", "file2"] {
        let here = std::fs::read(m.path(f)).unwrap();
        // fio shares --size=1m among the job's files: 512 KiB each.
        assert_eq!(here.len(), 512 << 10, "{f}");
        let there = rt.block_on(read_all(&far, &format!("/{f}")));
        assert!(here == there, "{f} reads differently elsewhere");
    }
    rt.block_on(scrub_clean(&far));
    no_mismatch_logged(&m);

    // Exact, not lenient: a byte flipped in file1's data on disk, with no writer left (no
    // lease, so no mark), is EIO to a reader elsewhere.
    let id = rt.block_on(far.lookup("/file1")).unwrap().file_id;
    let rel = eddy_proto::fdpass::data_file(id);
    let data = (0..3)
        .map(|i| m.cluster.root_of(i).join(&rel))
        .find(|p| std::fs::metadata(p).is_ok_and(|md| md.len() > 4096))
        .expect("a data file of file1");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&data)
            .unwrap();
        // Near the end of the data file: inside the last chunk this daemon holds.
        let at = f.metadata().unwrap().len() - 100;
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0x40], at).unwrap();
    }
    let e = rt
        .block_on(async {
            let f = far
                .open("/file1", libc::O_RDONLY, 0, eddy_client::Creds::root())
                .await?;
            let mut out = vec![0u8; 1 << 20];
            far.pread_into(&f, 0, &mut out).await
        })
        .expect_err("a flipped byte must not read as data");
    assert_eq!(e.errno, libc::EIO, "{e}");
}

#[test]
fn mixed_fio_engines_on_shared_files_never_read_eio_with_default_settings() {
    // The test's daemons count as host `localhost` (`eddy start --local` names them by the
    // host's name): the mount is on their host, so it reads and writes their data files
    // directly, as after `eddy start --local 3 --mount M`.
    mixed_rounds(Config {
        placement_host: Some("localhost".into()),
        ..Config::default()
    });
}

/// The same through FUSE passthrough (placement `local`). fio's O_DIRECT writers used to
/// be written by the kernel with direct I/O into the data file while the mmap jobs dirtied
/// its pages through their mappings: the data file's file system recorded EIO (a page cache
/// it could not drop), which the mmap jobs' msync reported (decision 0059).
#[test]
fn mixed_fio_engines_never_read_eio_through_fuse_passthrough() {
    mixed_rounds(Config {
        placement: PlacementMode::Local,
        placement_host: Some("localhost".into()),
        ..Config::default()
    });
}
