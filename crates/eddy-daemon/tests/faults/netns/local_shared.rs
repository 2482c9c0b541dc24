//! One file of placement `local` (decision 0043: its chunks all on the daemon of the host that
//! made it) written at once from three hosts, each through its own mount, at unaligned offsets
//! (ior-hard's records of 47008 bytes). Host 0's mount hands the kernel the data file (FUSE
//! passthrough) and each of its closes has the daemon checksum the whole file again, while
//! the other hosts' writes reach the daemon over TCP. That checksumming ran without the
//! chunks' locks, so it could store a block's old checksum over the one a write from another
//! host had just stored: once host 0's lease was gone, every reader got EIO and the daemon
//! logged `checksum mismatch` (seen in `eddy bench suite --hosts 3 --placement local` with
//! ior-hard's file placed locally). Every byte must read back from every host as its one
//! writer wrote it, and nothing may be taken for damage.

use super::*;
use std::os::unix::fs::FileExt;

const RECORD: usize = 47_008;
const RECORDS: usize = 240;

fn record(round: usize, r: usize) -> Vec<u8> {
    eddy_testkit::pattern((round * RECORDS + r) as u64 + 1, 0, RECORD)
}

#[test]
fn a_local_file_written_from_three_hosts_at_once_reads_back_without_eio() {
    eddy_testkit::require::fuse();
    let mut net = setup();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("local.toml");
    std::fs::write(&config, "placement = \"local\"\n").unwrap();
    let state = start_on_hosts(
        &mut net,
        dir.path(),
        &["--config", s(&config), "--chunk-size", "524288"],
    );
    let mnts: Vec<PathBuf> = (0..HOSTS)
        .map(|i| dir.path().join(format!("m{i}")))
        .collect();
    let mut mounts: Vec<std::process::Child> = (0..HOSTS)
        .map(|i| mount_in(&net.host(i), &state, &mnts[i], Some(&net.host(i))))
        .collect();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // Made by host 0: every chunk on daemon 0.
        std::fs::File::create(mnts[0].join("shared")).unwrap();
        for round in 0..3 {
            std::thread::scope(|sc| {
                for (i, mnt) in mnts.iter().enumerate() {
                    sc.spawn(move || {
                        let f = std::fs::OpenOptions::new()
                            .write(true)
                            .open(mnt.join("shared"))
                            .unwrap();
                        for r in (i..RECORDS).step_by(HOSTS) {
                            if let Err(e) = f.write_all_at(&record(round, r), (r * RECORD) as u64) {
                                panic!("round {round}: host {i}, record {r}: {e}");
                            }
                        }
                        f.sync_all().unwrap();
                    });
                }
            });
            for (i, mnt) in mnts.iter().enumerate() {
                let got = std::fs::read(mnt.join("shared"))
                    .unwrap_or_else(|e| panic!("round {round}: reading on host {i}: {e}"));
                assert_eq!(got.len(), RECORDS * RECORD, "round {round}, host {i}");
                for r in 0..RECORDS {
                    assert!(
                        got[r * RECORD..(r + 1) * RECORD] == record(round, r)[..],
                        "round {round}: record {r} read on host {i} differs"
                    );
                }
            }
        }
        let out = net.eddy_ok(&["status", "--state", s(&state), "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for d in v["daemons"].as_array().unwrap() {
            assert_eq!(d["checksum_errors"], 0, "{d}");
        }
    }));
    for (mnt, child) in mnts.iter().zip(mounts.iter_mut()) {
        let _ = Command::new("umount").arg("-l").arg(mnt).status();
        let _ = child.kill();
        let _ = child.wait();
    }
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
