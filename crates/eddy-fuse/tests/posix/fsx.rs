//! The random-operation verifier (`eddy_testkit::fsx`, in the manner of fsx): a seeded random
//! sequence of write, read, truncate, fallocate (keeping the size and extending it), mmap
//! read and write and O_DIRECT write and read on one file, against a shadow copy, checked
//! after every step — through the mount with and without FUSE passthrough, through the
//! preload library (the `eddy-fsx` program under LD_PRELOAD; no writable shared mappings
//! there, which the library refuses) and through the client library (no mmap, no O_DIRECT).
//! Afterwards no daemon counted a checksum error. `EDDY_FSX_OPS` sets the steps per run
//! (3000 by default; `make soak` runs millions), `EDDY_FSX_SEED` the seed.

use eddy_client::{Client, Creds, File};
use eddy_config::{Config, PlacementMode};
use eddy_proto::req;
use eddy_testkit::fsx::{self, Caps, Target};
use eddy_testkit::{Cluster, Mounted};

/// Files up to this size: several 64 KiB chunks (`test_config`) on every daemon.
const MAX_SIZE: u64 = 1_200_000;

fn steps() -> u64 {
    std::env::var("EDDY_FSX_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

fn seed(salt: u64) -> u64 {
    std::env::var("EDDY_FSX_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(39)
        ^ salt
}

/// The test's daemons count as host `localhost`: a client that counts as that host too
/// reads and writes their data files directly (decision 0048), as on a node of a job.
fn local() -> Config {
    Config {
        placement_host: Some("localhost".into()),
        ..eddy_testkit::test_config()
    }
}

const ALL: Caps = Caps {
    mmap_read: true,
    mmap_write: true,
    direct: true,
};

fn no_checksum_errors(c: &Cluster) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(c.client());
    for d in client.rpc().ids().to_vec() {
        let s = rt.block_on(client.rpc().call(d, req::Status)).unwrap();
        assert_eq!(s.checksum_errors, 0, "daemon {d}");
    }
    for i in 0..c.dep.daemons.len() {
        assert!(
            !c.daemon_log(i).contains("checksum mismatch"),
            "daemon {i}: {}",
            c.daemon_log(i)
        );
    }
}

fn through_the_mount(config: Config, salt: u64) {
    let m = Mounted::start_with(3, config);
    let mut f = fsx::PosixFile::create(&m.path("fsx"), true).unwrap();
    let report =
        fsx::run(&mut f, ALL, seed(salt), steps(), MAX_SIZE).unwrap_or_else(|e| panic!("{e}"));
    for op in ["map_write", "direct_write", "falloc_keep", "truncate"] {
        assert!(report.count(op) > 0 || steps() < 100, "{}", report.json());
    }
    drop(f);
    no_checksum_errors(&m.cluster);
}

#[test]
fn random_operations_through_the_mount_with_passthrough_match_the_shadow() {
    through_the_mount(
        Config {
            placement: PlacementMode::Local,
            placement_host: Some("localhost".into()),
            fuse_passthrough: true,
            ..eddy_testkit::test_config()
        },
        1,
    );
}

/// Through the mount on the daemons' host, without passthrough: the mount's client reads
/// and writes the daemons' data files directly (decision 0048), as users get by default,
/// with the plain and the O_DIRECT descriptor as two handles of one file.
#[test]
fn random_operations_through_the_mount_without_passthrough_match_the_shadow() {
    through_the_mount(
        Config {
            fuse_passthrough: false,
            ..local()
        },
        2,
    );
}

/// Through the preload library on the daemons' host (direct local I/O, two descriptors).
#[test]
fn random_operations_through_the_preload_library_match_the_shadow() {
    preload_run(local());
}

fn preload_run(config: Config) {
    let c = Cluster::start_with(3, config);
    let program = eddy_testkit::bin_dir().join("eddy-fsx");
    if !program.is_file() {
        eddy_testkit::require::missing(&format!(
            "{} is not built (`cargo build --bins`; `make test` does)",
            program.display()
        ));
    }
    let out = eddy_testkit::preloaded(&program, "/eddy", c.dir.path())
        .arg("/eddy/fsx")
        .args(["--seed", &seed(3).to_string()])
        .args(["--ops", &steps().to_string()])
        .args(["--max-size", &MAX_SIZE.to_string()])
        .arg("--no-mmap-write")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    no_checksum_errors(&c);
}

/// The client library as a `Target`.
struct Library {
    rt: tokio::runtime::Runtime,
    client: Client,
    file: File,
}

fn err(e: eddy_client::Errno) -> String {
    e.to_string()
}

impl Target for Library {
    fn pwrite(&mut self, at: u64, data: &[u8]) -> Result<(), String> {
        let n = self
            .rt
            .block_on(self.client.pwrite(&self.file, at, data))
            .map_err(err)?;
        (n == data.len())
            .then_some(())
            .ok_or(format!("short write: {n}"))
    }
    fn pread(&mut self, at: u64, len: usize) -> Result<Vec<u8>, String> {
        self.rt
            .block_on(self.client.pread(&self.file, at, len))
            .map_err(err)
    }
    fn truncate(&mut self, size: u64) -> Result<(), String> {
        self.rt
            .block_on(self.client.ftruncate(&self.file, size))
            .map(|_| ())
            .map_err(err)
    }
    fn fallocate(&mut self, at: u64, len: u64, keep_size: bool) -> Result<(), String> {
        let mode = if keep_size {
            libc::FALLOC_FL_KEEP_SIZE
        } else {
            0
        };
        self.rt
            .block_on(self.client.fallocate(&self.file, at, len, mode))
            .map_err(err)
    }
    fn size(&mut self) -> Result<u64, String> {
        self.rt
            .block_on(self.client.fstat(&self.file))
            .map(|i| i.size)
            .map_err(err)
    }
    fn fsync(&mut self) -> Result<(), String> {
        self.rt.block_on(self.client.fsync(&self.file)).map_err(err)
    }
}

#[test]
fn random_operations_through_the_library_match_the_shadow() {
    let c = Cluster::start_with(3, local());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(c.client());
    let file = rt
        .block_on(client.create("/fsx", 0o644, false, Creds::root()))
        .unwrap();
    let mut lib = Library { rt, client, file };
    let none = Caps {
        mmap_read: false,
        mmap_write: false,
        direct: false,
    };
    fsx::run(&mut lib, none, seed(4), steps(), MAX_SIZE).unwrap_or_else(|e| panic!("{e}"));
    lib.rt.block_on(lib.client.close(&lib.file)).unwrap();
    drop(lib);
    no_checksum_errors(&c);
}
