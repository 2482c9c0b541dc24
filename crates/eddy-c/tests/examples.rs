//! The C examples (examples/c) as a user builds them: `make install PREFIX=<tmp>` (the
//! build already done), compiled against the installed library through pkg-config, run
//! against three real daemons through EDDY_STATE; the MPI one with four ranks under mpirun.
//! What they wrote is then read back through the client library. The root lane.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]

use eddy_testkit::{bin_dir, test_config, Cluster};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn check(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `make install` into a temporary prefix, of what `cargo build` made (bin_dir).
fn install() -> tempfile::TempDir {
    eddy_testkit::require::program("make", "make");
    eddy_testkit::require::program("pkg-config", "pkg-config");
    let prefix = tempfile::tempdir().unwrap();
    let out = Command::new("make")
        .arg("-C")
        .arg(workspace())
        .arg("install")
        .arg(format!("PREFIX={}", prefix.path().display()))
        .arg(format!("OUT={}", bin_dir().display()))
        .arg("NO_BUILD=1")
        .output()
        .expect("make");
    check("make install", &out);
    for f in [
        "bin/eddy",
        "bin/eddyd",
        "lib/libeddy.so",
        "lib/libeddy.so.1",
        "lib/libeddy_preload.so",
        "include/eddy.h",
        "lib/pkgconfig/eddy.pc",
    ] {
        assert!(prefix.path().join(f).exists(), "make install left out {f}");
    }
    prefix
}

/// Compiles examples/c/`source` with `compiler` and the flags pkg-config gives for the
/// installed library.
fn build(compiler: &str, source: &str, prefix: &Path) -> PathBuf {
    let pc = prefix.join("lib/pkgconfig");
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "eddy"])
        .env("PKG_CONFIG_PATH", &pc)
        .output()
        .expect("pkg-config");
    check("pkg-config eddy", &flags);
    let flags = String::from_utf8(flags.stdout).unwrap();
    assert!(flags.contains("-leddy"), "{flags}");
    let exe = prefix.join(source.trim_end_matches(".c"));
    let out = Command::new(compiler)
        .args(["-Wall", "-Werror", "-O1", "-o"])
        .arg(&exe)
        .arg(workspace().join("examples/c").join(source))
        .args(flags.split_whitespace())
        .output()
        .unwrap_or_else(|e| {
            eddy_testkit::require::missing(&format!("`{compiler}` cannot run: {e}"))
        });
    check(&format!("{compiler} {source}"), &out);
    exe
}

/// The whole of `path` in the namespace, through the client library.
fn read_back(cl: &Cluster, path: &str) -> Vec<u8> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = eddy_client::Client::connect(cl.dep.clone()).await.unwrap();
        let f = c
            .open(path, libc::O_RDONLY, 0, eddy_client::Creds::current())
            .await
            .unwrap();
        let size = c.fstat(&f).await.unwrap().size;
        let data = c.pread(&f, 0, size as usize).await.unwrap();
        c.close(&f).await.unwrap();
        data
    })
}

fn mkdir(cl: &Cluster, path: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = eddy_client::Client::connect(cl.dep.clone()).await.unwrap();
        c.mkdir(path, 0o755, eddy_client::Creds::current())
            .await
            .unwrap();
    });
}

#[test]
fn the_c_example_writes_reads_and_checks_through_eddy_state() {
    eddy_testkit::require::program("gcc", "gcc");
    let cl = Cluster::start_with(3, test_config());
    let prefix = install();
    let exe = build("gcc", "hello.c", prefix.path());
    mkdir(&cl, "/c");
    let out = Command::new("timeout")
        .arg("120")
        .arg(&exe)
        .arg("/c")
        .env("EDDY_STATE", cl.dir.path())
        .env("LD_LIBRARY_PATH", prefix.path().join("lib"))
        .output()
        .unwrap();
    check("hello", &out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "HELLO-OK /c/hello.bin /c/hello-batch.bin\n"
    );
    let want: Vec<u8> = (0..1usize << 20)
        .map(|i| ((i * 31 + 7) % 251) as u8)
        .collect();
    assert_eq!(read_back(&cl, "/c/hello-batch.bin"), want);
    assert_eq!(
        read_back(&cl, "/c/hello.bin"),
        want[..1 << 19],
        "truncated by the batch"
    );

    // Without EDDY_STATE the program fails with the library's message, and does not crash.
    let out = Command::new(&exe)
        .arg("/c")
        .env_remove("EDDY_STATE")
        .env("LD_LIBRARY_PATH", prefix.path().join("lib"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("EDDY_STATE is not set"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_mpi_example_writes_one_shared_file_from_four_ranks() {
    eddy_testkit::require::mpirun();
    eddy_testkit::require::program("mpicc", "libopenmpi-dev");
    let cl = Cluster::start_with(3, test_config());
    let prefix = install();
    let exe = build("mpicc", "mpi_shared.c", prefix.path());
    mkdir(&cl, "/mpi");
    let out = Command::new("timeout")
        .arg("300")
        .arg("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "4"])
        .args(["-x", "EDDY_STATE", "-x", "LD_LIBRARY_PATH"])
        .arg(&exe)
        .arg("/mpi")
        .env("EDDY_STATE", cl.dir.path())
        .env("LD_LIBRARY_PATH", prefix.path().join("lib"))
        .output()
        .expect("mpirun");
    check("mpirun mpi_shared", &out);
    const BLOCK: usize = 256 * 1024 + 17;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("MPI-OK 4 {}", 4 * BLOCK)),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let want: Vec<u8> = (0..4usize)
        .flat_map(|r| (0..BLOCK).map(move |i| b'a' + ((r * 7 + i) % 26) as u8))
        .collect();
    assert_eq!(read_back(&cl, "/mpi/shared.bin"), want);
}
