//! `eddy bench suite --client-py PYTHON`: the Python package (decision 0067) beside the Rust
//! library on the suite's deployment, in the same run. Two measurements:
//!
//! - a file of `BIG` bytes (written through the client library) read whole into memory,
//!   `READS` times each: by the Rust library (`eddy_client::session::Session`, one
//!   `pread_into` into a buffer, as the package calls it) and by PYTHON (`eddy.connect()`,
//!   `open(path, "rb", buffering=0).readinto(numpy_array)`); the ratio is Python's
//!   bandwidth over Rust's (best of the reads each; the goal is ≥ 0.9);
//! - a zarr array of `CHUNKS` chunks written whole and read whole through fsspec
//!   (`eddy://`), beside the same array in a directory of the raw storage (zarr's own
//!   directory store: its raw-tmpfs baseline), with the ratios of their times.
//!
//! Every byte is verified: the Python read's SHA-256 against the written bytes', zarr's
//! arrays element by element; a mismatch fails the suite rather than give a figure.

use anyhow::{bail, Context};
use eddy_client::session::Session;
use eddy_client::Creds;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// The whole-file read: 1 GiB.
const BIG: usize = 1 << 30;
/// Reads of it by each side (the best counts).
const READS: usize = 3;
/// The zarr array: this many chunks of `CHUNK_ELEMS` float64 (256 KiB each).
const CHUNKS: usize = 1000;
const CHUNK_ELEMS: usize = 32 * 1024;
/// Where the file lives in the namespace.
const BIG_PATH: &str = "/eddy-bench-python.bin";

/// What the Python benchmark measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PythonBench {
    /// The interpreter and its version, eddy's, numpy's and zarr's.
    pub python: String,
    pub file_bytes: u64,
    /// Best whole-file read, seconds: the Rust library, the package into a NumPy array.
    pub rust_read_s: f64,
    pub python_read_s: f64,
    /// Python's bandwidth over Rust's.
    pub read_ratio: f64,
    pub zarr_chunks: u64,
    pub zarr_bytes: u64,
    /// The zarr array through `eddy://` (fsspec) and in a raw directory, seconds.
    pub zarr_eddy_write_s: f64,
    pub zarr_eddy_read_s: f64,
    pub zarr_raw_write_s: f64,
    pub zarr_raw_read_s: f64,
}

const SCRIPT: &str = r#"
import hashlib, json, os, shutil, sys, time
import numpy as np, zarr, fsspec, eddy
path, size, reads, rawdir, chunks, elems = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
fs = eddy.connect()
arr = np.ones(size, dtype=np.uint8)
best = None
for _ in range(reads):
    t = time.perf_counter()
    with fs.open(path, "rb", buffering=0) as f:
        n = f.readinto(arr)
    dt = time.perf_counter() - t
    assert n == size, (n, size)
    best = dt if best is None else min(best, dt)
digest = hashlib.sha256(arr).hexdigest()
del arr
data = np.arange(chunks * elems, dtype="f8").reshape(chunks, elems)
def run(where):
    t = time.perf_counter()
    z = zarr.open(where, mode="w", shape=data.shape, chunks=(1, elems), dtype="f8", compressor=None)
    z[:] = data
    w = time.perf_counter() - t
    t = time.perf_counter()
    back = zarr.open(where, mode="r")[:]
    r = time.perf_counter() - t
    assert np.array_equal(back, data), where
    return w, r
ew, er = run("eddy:///eddy-bench-python.zarr")
local = os.path.join(rawdir, "eddy-bench-python.zarr")
rw, rr = run(local)
shutil.rmtree(local)
fs_ = fsspec.filesystem("eddy")
fs_.rm("/eddy-bench-python.zarr", recursive=True)
print(json.dumps({"read_s": best, "sha256": digest, "zarr": [ew, er, rw, rr], "bytes": data.nbytes,
  "python": "%s %s (eddy %s, numpy %s, zarr %s)" % (sys.executable, sys.version.split()[0], eddy.__version__, np.__version__, zarr.__version__)}))
"#;

/// The byte at `i` of the file.
fn byte(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// Writes the file through the Rust library; its SHA-256.
fn write_big(s: &Session) -> anyhow::Result<String> {
    let c = s.client().clone();
    let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
    let f = s
        .run(async move { c.open(BIG_PATH, flags, 0o644, Creds::current()).await })
        .with_context(|| format!("creating {BIG_PATH}"))?;
    let mut hash = Sha256::new();
    let piece = 64 << 20;
    let mut buf = vec![0u8; piece];
    for start in (0..BIG).step_by(piece) {
        for (k, b) in buf.iter_mut().enumerate() {
            *b = byte(start + k);
        }
        hash.update(&buf);
        let c = s.client().clone();
        let n = s
            .run_here(c.pwrite(&f, start as u64, &buf))
            .context("writing from a thread inside a runtime")??;
        if n != piece {
            bail!("short write of {BIG_PATH}: {n} of {piece} bytes");
        }
    }
    let c = s.client().clone();
    s.run(async move { c.close(&f).await })?;
    Ok(format!("{:x}", hash.finalize()))
}

/// The best of `READS` whole-file reads through the Rust library, seconds; checks the bytes.
fn rust_read(s: &Session, digest: &str) -> anyhow::Result<f64> {
    let c = s.client().clone();
    let f = s.run(async move { c.open(BIG_PATH, libc::O_RDONLY, 0, Creds::current()).await })?;
    let mut buf = vec![1u8; BIG];
    let mut best = f64::MAX;
    for _ in 0..READS {
        let c = s.client().clone();
        let t = Instant::now();
        let n = s
            .run_here(c.pread_into(&f, 0, &mut buf))
            .context("reading from a thread inside a runtime")??;
        best = best.min(t.elapsed().as_secs_f64());
        if n != BIG {
            bail!("short read of {BIG_PATH}: {n} of {BIG} bytes");
        }
    }
    if format!("{:x}", Sha256::digest(&buf)) != digest {
        bail!("the Rust library read other bytes than were written to {BIG_PATH}");
    }
    let c = s.client().clone();
    s.run(async move { c.close(&f).await })?;
    Ok(best)
}

/// Runs both measurements on the deployment of `state`, the raw baseline under `raw`.
pub(crate) fn run(python: &Path, state: &Path, raw: &Path) -> anyhow::Result<PythonBench> {
    note!("eddy bench suite: python ({})", python.display());
    let state_s = state.to_str().context("the state directory is not UTF-8")?;
    let s = Session::connect(Some(state_s), "eddy-bench")
        .map_err(|e| anyhow::anyhow!("connecting to {}: {e}", state.display()))?;
    let digest = write_big(&s)?;
    let rust_read_s = rust_read(&s, &digest)?;
    let out = Command::new(python)
        .arg("-c")
        .arg(SCRIPT)
        .arg(BIG_PATH)
        .arg(BIG.to_string())
        .arg(READS.to_string())
        .arg(raw)
        .arg(CHUNKS.to_string())
        .arg(CHUNK_ELEMS.to_string())
        .env("EDDY_STATE", state)
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !out.status.success() {
        bail!(
            "the Python benchmark failed ({}; PYTHON needs eddy, numpy, zarr 2 and fsspec):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "the Python benchmark said: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })?;
    if v["sha256"].as_str() != Some(digest.as_str()) {
        bail!("Python read other bytes than were written to {BIG_PATH}");
    }
    let c = s.client().clone();
    s.run(async move { c.unlink(BIG_PATH, Creds::current()).await })?;
    let f = |x: &serde_json::Value| x.as_f64().unwrap_or(f64::NAN);
    let python_read_s = f(&v["read_s"]);
    let z = &v["zarr"];
    Ok(PythonBench {
        python: v["python"].as_str().unwrap_or_default().to_string(),
        file_bytes: BIG as u64,
        rust_read_s,
        python_read_s,
        read_ratio: rust_read_s / python_read_s,
        zarr_chunks: CHUNKS as u64,
        zarr_bytes: v["bytes"].as_u64().unwrap_or_default(),
        zarr_eddy_write_s: f(&z[0]),
        zarr_eddy_read_s: f(&z[1]),
        zarr_raw_write_s: f(&z[2]),
        zarr_raw_read_s: f(&z[3]),
    })
}

/// The human table.
pub(crate) fn table(b: &PythonBench) -> String {
    let mib = |bytes: u64, s: f64| bytes as f64 / (1024.0 * 1024.0) / s;
    let zb = b.zarr_bytes;
    format!(
        "python: {}\n\
         {:<34} {:>10} {:>10} {:>12}\n\
         {:<34} {:>9.3}s {:>9.3}s {:>12.2}\n\
         {:<34} {:>10} {:>10} {:>12}\n\
         {:<34} {:>9.3}s {:>9.3}s {:>12.2}\n\
         {:<34} {:>9.3}s {:>9.3}s {:>12.2}\n\
         read into NumPy: {:.0} MiB/s (Python) vs {:.0} MiB/s (Rust library); zarr through eddy://: write {:.0} MiB/s, read {:.0} MiB/s (raw directory: {:.0}, {:.0})\n",
        b.python,
        format!("{} GiB file, read whole", b.file_bytes >> 30),
        "rust-lib",
        "python",
        "python/rust",
        "  best of 3 reads",
        b.rust_read_s,
        b.python_read_s,
        b.read_ratio,
        format!("zarr, {} chunks of {} KiB", b.zarr_chunks, (zb / b.zarr_chunks.max(1)) >> 10),
        "raw-dir",
        "eddy://",
        "raw/eddy",
        "  write the array",
        b.zarr_raw_write_s,
        b.zarr_eddy_write_s,
        b.zarr_raw_write_s / b.zarr_eddy_write_s,
        "  read the array",
        b.zarr_raw_read_s,
        b.zarr_eddy_read_s,
        b.zarr_raw_read_s / b.zarr_eddy_read_s,
        mib(b.file_bytes, b.python_read_s),
        mib(b.file_bytes, b.rust_read_s),
        mib(zb, b.zarr_eddy_write_s),
        mib(zb, b.zarr_eddy_read_s),
        mib(zb, b.zarr_raw_write_s),
        mib(zb, b.zarr_raw_read_s),
    )
}
