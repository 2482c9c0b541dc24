//! The benchmark's files: sets of relative paths and sizes, each file's bytes a pattern of
//! its key (`pattern.rs`); timed reads that verify every byte (untimed) and timed writes.

use super::IO_BYTES;
use crate::{interrupt, pattern};
use anyhow::{anyhow, bail, Context};
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A file of the benchmark: where it is, the key of its pattern, its size.
#[derive(Debug, Clone)]
pub(super) struct DataFile {
    path: PathBuf,
    key: u64,
    size: u64,
}

impl DataFile {
    pub(super) fn path(&self) -> &Path {
        &self.path
    }
    pub(super) fn key(&self) -> u64 {
        self.key
    }
    pub(super) fn size(&self) -> u64 {
        self.size
    }
}

/// Relative paths and sizes of a set of files.
pub(super) type FileSet = Vec<(String, u64)>;

/// The files of `set` under `dir`, with the pattern keys of `key_name/REL`: the same set
/// under two directories with the same key name holds the same bytes.
pub(super) fn files(dir: &Path, set: &FileSet, key_name: &str) -> Vec<DataFile> {
    set.iter()
        .map(|(rel, size)| DataFile {
            path: dir.join(rel),
            key: pattern::key(&format!("{key_name}/{rel}"), 0),
            size: *size,
        })
        .collect()
}

/// `total` bytes in `n` sizes as equal as possible.
pub(super) fn split(total: u64, n: u32) -> Vec<u64> {
    let n64 = u64::from(n);
    (0..n64)
        .map(|i| total / n64 + u64::from(i < total % n64))
        .collect()
}

pub(super) fn flat_set(total: u64, n: u32) -> FileSet {
    split(total, n)
        .into_iter()
        .enumerate()
        .map(|(i, s)| (format!("f{i}"), s))
        .collect()
}

/// `n` files spread round-robin over `dirs` directories.
pub(super) fn tree_set(total: u64, n: u32, dirs: u32) -> FileSet {
    split(total, n)
        .into_iter()
        .enumerate()
        .map(|(i, s)| (format!("d{}/f{i}", i as u32 % dirs), s))
        .collect()
}

/// A read that retries on EINTR.
pub(super) fn read_some(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match f.read(buf) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// Reads the files one after the other with 1 MiB read calls up to end of file, as `dd`
/// does, and checks every byte against its pattern. Returns the time from each open to each
/// close, without the checks.
pub(super) fn read_files(files: &[DataFile], buf: &mut [u8]) -> anyhow::Result<Duration> {
    let mut spent = Duration::ZERO;
    for f in files {
        interrupt::check()?;
        let show = || f.path.display();
        let mut clock = Instant::now();
        let mut file = File::open(&f.path).with_context(|| format!("cannot open {}", show()))?;
        let mut offset = 0u64;
        loop {
            let mut filled = 0usize;
            let mut eof = false;
            while filled < buf.len() {
                let end = (filled + IO_BYTES).min(buf.len());
                let n = read_some(&mut file, &mut buf[filled..end])
                    .with_context(|| format!("read of {} at {}", show(), offset + filled as u64))?;
                if n == 0 {
                    eof = true;
                    break;
                }
                filled += n;
            }
            spent += clock.elapsed();
            if offset + filled as u64 > f.size {
                bail!(
                    "{} holds more than the {} bytes written to it",
                    show(),
                    f.size
                );
            }
            pattern::verify(&buf[..filled], f.key, offset)
                .map_err(|m| anyhow!("verification failed: {}: {m}", show()))?;
            offset += filled as u64;
            clock = Instant::now();
            if eof {
                break;
            }
        }
        drop(file);
        spent += clock.elapsed();
        if offset != f.size {
            bail!(
                "verification failed: {} ends after {offset} bytes, {} were written",
                show(),
                f.size
            );
        }
    }
    Ok(spent)
}

/// Writes the files (created or truncated) with 1 MiB write calls, then fsync if asked, and
/// closes them. Returns the time from each open to each close, without generating the bytes
/// or creating the parent directories.
pub(super) fn write_files(
    files: &[DataFile],
    buf: &mut [u8],
    fsync: bool,
) -> anyhow::Result<Duration> {
    let mut spent = Duration::ZERO;
    for f in files {
        interrupt::check()?;
        let show = || f.path.display();
        if let Some(parent) = f.path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let mut offset = 0u64;
        let mut file: Option<File> = None;
        loop {
            let n = (f.size - offset).min(buf.len() as u64) as usize;
            pattern::fill(&mut buf[..n], f.key, offset);
            let clock = Instant::now();
            let out = match &mut file {
                Some(out) => out,
                None => file.insert(
                    File::create(&f.path).with_context(|| format!("cannot create {}", show()))?,
                ),
            };
            for piece in buf[..n].chunks(IO_BYTES) {
                out.write_all(piece)
                    .with_context(|| format!("write to {} at {offset}", show()))?;
            }
            spent += clock.elapsed();
            offset += n as u64;
            if offset >= f.size {
                break;
            }
        }
        let clock = Instant::now();
        if let Some(out) = file {
            if fsync {
                out.sync_all()
                    .with_context(|| format!("fsync of {}", show()))?;
            }
            drop(out);
        }
        spent += clock.elapsed();
    }
    Ok(spent)
}

/// `cp -r FROM TO` (TO must not exist); returns its wall time.
pub(super) fn cp_r(from: &Path, to: &Path) -> anyhow::Result<Duration> {
    let clock = Instant::now();
    let out = Command::new("cp")
        .arg("-r")
        .arg(from)
        .arg(to)
        .stdin(Stdio::null())
        .output()
        .context("cannot run cp")?;
    let took = clock.elapsed();
    if !out.status.success() {
        bail!(
            "cp -r {} {} failed: {}",
            from.display(),
            to.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(took)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_spreads_the_remainder() {
        assert_eq!(split(10, 3), vec![4, 3, 3]);
        assert_eq!(split(9, 3), vec![3, 3, 3]);
        assert_eq!(split(3, 3).iter().sum::<u64>(), 3);
        let t = tree_set(1000, 7, 3);
        assert_eq!(t.iter().map(|(_, s)| s).sum::<u64>(), 1000);
        assert_eq!(t[4].0, "d1/f4");
    }

    #[test]
    fn write_then_read_verifies_and_catches_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let set = flat_set(3 * IO_BYTES as u64 + 17, 2);
        let fs = files(dir.path(), &set, "x");
        // A buffer smaller than a file: segments are checked one after the other.
        let mut buf = vec![0u8; IO_BYTES];
        write_files(&fs, &mut buf, true).unwrap();
        read_files(&fs, &mut buf).unwrap();
        // Another key name: other bytes.
        assert!(read_files(&files(dir.path(), &set, "y"), &mut buf).is_err());
        // One flipped byte past the first segment.
        let p = &fs[1].path;
        let mut data = std::fs::read(p).unwrap();
        data[IO_BYTES + 5] ^= 1;
        std::fs::write(p, &data).unwrap();
        let e = read_files(&fs, &mut buf).unwrap_err().to_string();
        assert!(e.contains("verification failed"), "{e}");
        // A short file.
        std::fs::write(p, &data[..100]).unwrap();
        assert!(read_files(&fs, &mut buf).is_err());
    }
}
