//! A random-operation verifier in the manner of fsx: one file, a seeded random sequence of
//! write, read, truncate, fallocate (keeping the size and extending it), mmap read and
//! write, and O_DIRECT write and read, against a shadow copy in memory, checked after every
//! step (the size, and the bytes the step touched read back; the whole file every
//! `FULL_CHECK_EVERY` steps and at the end).
//!
//! The same loop drives every front-end: [`PosixFile`] (any path: the FUSE mount, the
//! preload library when the program runs under it: the `eddy-fsx` program) and any other
//! [`Target`] (the tests give it the library client). `make test` runs a few thousand
//! steps of each; `make soak` millions (`EDDY_FSX_OPS`).

use std::fmt::Write as _;

/// Steps between two checks of the whole file.
pub const FULL_CHECK_EVERY: u64 = 200;
/// O_DIRECT's alignment of offsets, lengths and buffers.
pub const DIRECT_ALIGN: u64 = 4096;

/// What a front-end can do besides pread, pwrite, ftruncate and fallocate.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub mmap_read: bool,
    pub mmap_write: bool,
    pub direct: bool,
}

/// One file under test.
pub trait Target {
    fn pwrite(&mut self, at: u64, data: &[u8]) -> Result<(), String>;
    /// Up to `len` bytes at `at` (short at the end of the file).
    fn pread(&mut self, at: u64, len: usize) -> Result<Vec<u8>, String>;
    fn truncate(&mut self, size: u64) -> Result<(), String>;
    fn fallocate(&mut self, at: u64, len: u64, keep_size: bool) -> Result<(), String>;
    fn size(&mut self) -> Result<u64, String>;
    fn fsync(&mut self) -> Result<(), String>;
    /// Through a shared mapping of the file's first `size` bytes (only with `Caps`).
    fn map_read(&mut self, _at: u64, _len: usize, _size: u64) -> Result<Vec<u8>, String> {
        Err("no mmap".into())
    }
    fn map_write(&mut self, _at: u64, _data: &[u8], _size: u64) -> Result<(), String> {
        Err("no mmap".into())
    }
    /// O_DIRECT, aligned to `DIRECT_ALIGN` (only with `Caps`).
    fn direct_write(&mut self, _at: u64, _data: &[u8]) -> Result<(), String> {
        Err("no O_DIRECT".into())
    }
    fn direct_read(&mut self, _at: u64, _len: usize) -> Result<Vec<u8>, String> {
        Err("no O_DIRECT".into())
    }
}

/// The operations, as counted in [`Report`].
pub const OPS: [&str; 11] = [
    "write",
    "read",
    "truncate",
    "falloc_keep",
    "falloc_extend",
    "map_read",
    "map_write",
    "direct_write",
    "direct_read",
    "fsync",
    "full_check",
];

/// What a run did: steps per operation (by `OPS`' order).
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub counts: [u64; OPS.len()],
}

impl Report {
    pub fn count(&self, op: &str) -> u64 {
        OPS.iter()
            .position(|o| *o == op)
            .map_or(0, |i| self.counts[i])
    }

    pub fn json(&self) -> String {
        let mut s = String::from("{");
        for (i, op) in OPS.iter().enumerate() {
            let _ = write!(
                s,
                "{}\"{op}\":{}",
                if i > 0 { "," } else { "" },
                self.counts[i]
            );
        }
        s.push('}');
        s
    }
}

/// A small seeded generator (splitmix64): the sequence is the seed's, on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(len + 8);
        while v.len() < len {
            v.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        v.truncate(len);
        v
    }
}

/// Runs `steps` seeded random steps on `t` (an empty file at the start) with files up to
/// `max_size` bytes; `Err` names the step, the operation and the first difference.
pub fn run(
    t: &mut dyn Target,
    caps: Caps,
    seed: u64,
    steps: u64,
    max_size: u64,
) -> Result<Report, String> {
    let mut rng = Rng::new(seed);
    let mut shadow: Vec<u8> = Vec::new();
    let mut report = Report::default();
    let max_size = max_size.max(2 * DIRECT_ALIGN);
    let max_io = (max_size / 4).clamp(1, 256 * 1024);
    t.truncate(0).map_err(|e| format!("start: {e}"))?;
    // Each step on stderr, to see what led to a failure.
    let trace = std::env::var_os("EDDY_FSX_TRACE").is_some();
    for step in 0..steps {
        let ctx = |op: &str, e: String| format!("seed {seed}, step {step} ({op}): {e}");
        let op = rng.below(OPS.len() as u64 - 1) as usize;
        let name = OPS[op];
        let size = shadow.len() as u64;
        // The range the step touched, read back after it.
        let touched: (u64, u64) = match name {
            "write" => {
                let at = rng.below(max_size);
                let len = 1 + rng.below(max_io.min(max_size - at)) as usize;
                let data = rng.bytes(len);
                t.pwrite(at, &data).map_err(|e| ctx(name, e))?;
                put(&mut shadow, at, &data);
                (at, len as u64)
            }
            "read" => {
                let at = rng.below(max_size);
                let len = 1 + rng.below(max_io) as usize;
                let got = t.pread(at, len).map_err(|e| ctx(name, e))?;
                same(&got, slice(&shadow, at, len)).map_err(|e| ctx(name, e))?;
                (at, len as u64)
            }
            "truncate" => {
                // Mostly within the file, now and then past its end.
                let new = rng.below(max_size + 1);
                t.truncate(new).map_err(|e| ctx(name, e))?;
                shadow.resize(new as usize, 0);
                (new.saturating_sub(DIRECT_ALIGN), 2 * DIRECT_ALIGN)
            }
            "falloc_keep" | "falloc_extend" => {
                let at = rng.below(max_size);
                let len = 1 + rng.below(max_io.min(max_size - at));
                let keep = name == "falloc_keep";
                t.fallocate(at, len, keep).map_err(|e| ctx(name, e))?;
                if !keep && at + len > size {
                    shadow.resize((at + len) as usize, 0);
                }
                (at, len)
            }
            "map_read" if caps.mmap_read && size > 0 => {
                let at = rng.below(size);
                let len = 1 + rng.below(max_io.min(size - at)) as usize;
                let got = t.map_read(at, len, size).map_err(|e| ctx(name, e))?;
                same(&got, slice(&shadow, at, len)).map_err(|e| ctx(name, e))?;
                (at, len as u64)
            }
            "map_write" if caps.mmap_write && size > 0 => {
                let at = rng.below(size);
                let len = 1 + rng.below(max_io.min(size - at)) as usize;
                let data = rng.bytes(len);
                t.map_write(at, &data, size).map_err(|e| ctx(name, e))?;
                put(&mut shadow, at, &data);
                (at, len as u64)
            }
            "direct_write" if caps.direct => {
                let blocks = max_size / DIRECT_ALIGN;
                let first = rng.below(blocks);
                let n = 1 + rng.below((blocks - first).min(max_io / DIRECT_ALIGN + 1));
                let (at, len) = (first * DIRECT_ALIGN, n * DIRECT_ALIGN);
                let data = rng.bytes(len as usize);
                t.direct_write(at, &data).map_err(|e| ctx(name, e))?;
                put(&mut shadow, at, &data);
                (at, len)
            }
            "direct_read" if caps.direct => {
                let blocks = max_size / DIRECT_ALIGN;
                let first = rng.below(blocks);
                let n = 1 + rng.below((blocks - first).min(max_io / DIRECT_ALIGN + 1));
                let (at, len) = (first * DIRECT_ALIGN, (n * DIRECT_ALIGN) as usize);
                let got = t.direct_read(at, len).map_err(|e| ctx(name, e))?;
                same(&got, slice(&shadow, at, len)).map_err(|e| ctx(name, e))?;
                (at, len as u64)
            }
            "fsync" => {
                t.fsync().map_err(|e| ctx(name, e))?;
                (0, 0)
            }
            // An operation the front-end lacks (or an empty file to map): a plain read.
            _ => {
                let at = rng.below(size.max(1));
                let len = 1 + rng.below(max_io) as usize;
                let got = t.pread(at, len).map_err(|e| ctx("read", e))?;
                same(&got, slice(&shadow, at, len)).map_err(|e| ctx("read", e))?;
                report.counts[1] += 1;
                continue;
            }
        };
        report.counts[op] += 1;
        if trace {
            eprintln!("step {step}: {name} {touched:?}, size {}", shadow.len());
        }
        // The check after the step: the size, and what it touched (with a margin).
        let got = t.size().map_err(|e| ctx("size", e))?;
        if got != shadow.len() as u64 {
            return Err(ctx(name, format!("size {got}, {} expected", shadow.len())));
        }
        let (a, l) = (touched.0.saturating_sub(512), touched.1 + 1024);
        let back = t.pread(a, l as usize).map_err(|e| ctx("read back", e))?;
        same(&back, slice(&shadow, a, l as usize))
            .map_err(|e| ctx(&format!("{name}, read back at {a}"), e))?;
        if (step + 1) % FULL_CHECK_EVERY == 0 || step + 1 == steps {
            full_check(t, &shadow).map_err(|e| ctx("full check", e))?;
            report.counts[OPS.len() - 1] += 1;
        }
    }
    if steps == 0 {
        full_check(t, &shadow).map_err(|e| format!("seed {seed}, full check: {e}"))?;
    }
    Ok(report)
}

fn full_check(t: &mut dyn Target, shadow: &[u8]) -> Result<(), String> {
    let got = t.pread(0, shadow.len() + 1)?;
    same(&got, shadow)
}

fn put(shadow: &mut Vec<u8>, at: u64, data: &[u8]) {
    let end = at as usize + data.len();
    if shadow.len() < end {
        shadow.resize(end, 0);
    }
    shadow[at as usize..end].copy_from_slice(data);
}

fn slice(shadow: &[u8], at: u64, len: usize) -> &[u8] {
    let a = (at as usize).min(shadow.len());
    &shadow[a..(a + len).min(shadow.len())]
}

fn same(got: &[u8], want: &[u8]) -> Result<(), String> {
    if got == want {
        return Ok(());
    }
    let first = got.iter().zip(want).position(|(a, b)| a != b);
    // How far the difference runs, and what was read there (zeros, or other bytes).
    let (run, zeros) = match first {
        Some(i) => {
            let n = got[i..]
                .iter()
                .zip(&want[i..])
                .take_while(|(a, b)| a != b)
                .count();
            (n, got[i..i + n].iter().all(|b| *b == 0))
        }
        None => (0, false),
    };
    Err(format!(
        "{} bytes read, {} expected; first difference at {first:?}, for {run} bytes{}",
        got.len(),
        want.len(),
        if zeros { " (read as zeros)" } else { "" }
    ))
}

/// A file by path, through the kernel's interface: the FUSE mount, or the preload library
/// when the program runs under it. O_DIRECT through a second descriptor.
pub struct PosixFile {
    file: std::fs::File,
    direct: Option<std::fs::File>,
}

impl PosixFile {
    /// Creates (or empties) `path`; with `direct`, opens it with O_DIRECT too.
    pub fn create(path: &std::path::Path, direct: bool) -> Result<PosixFile, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let open = |flags: i32| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .custom_flags(flags)
                .open(path)
                .map_err(|e| format!("open {}: {e}", path.display()))
        };
        let file = open(0)?;
        let direct = match direct {
            true => Some(open(libc::O_DIRECT)?),
            false => None,
        };
        Ok(PosixFile { file, direct })
    }
}

/// A buffer aligned for O_DIRECT.
struct Aligned {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len.max(1), DIRECT_ALIGN as usize)
            .expect("an O_DIRECT buffer's layout");
        // SAFETY: a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        Aligned { ptr, layout }
    }
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` holds `layout.size()` initialised bytes, owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

fn io(what: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// A shared mapping of the first `size` bytes of `file`.
struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    fn new(file: &std::fs::File, size: u64, write: bool) -> Result<Mapping, String> {
        use std::os::fd::AsRawFd;
        let prot = libc::PROT_READ | if write { libc::PROT_WRITE } else { 0 };
        // SAFETY: a new mapping of a descriptor we hold; checked for failure.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        Ok(Mapping {
            ptr,
            len: size as usize,
        })
    }
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` bytes, inside the file's size (no SIGBUS).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<u8>(), self.len) }
    }
    fn sync(&self) -> Result<(), String> {
        // SAFETY: our own mapping.
        if unsafe { libc::msync(self.ptr, self.len, libc::MS_SYNC) } != 0 {
            return Err(format!("msync: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

fn read_at(file: &std::fs::File, buf: &mut [u8], at: u64) -> Result<usize, String> {
    use std::os::unix::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("pread of {} at {at}: {e}", buf.len())),
        }
    }
    Ok(done)
}

impl Target for PosixFile {
    fn pwrite(&mut self, at: u64, data: &[u8]) -> Result<(), String> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(data, at).map_err(io("pwrite"))
    }
    fn pread(&mut self, at: u64, len: usize) -> Result<Vec<u8>, String> {
        let mut buf = vec![0u8; len];
        let n = read_at(&self.file, &mut buf, at)?;
        buf.truncate(n);
        Ok(buf)
    }
    fn truncate(&mut self, size: u64) -> Result<(), String> {
        self.file.set_len(size).map_err(io("ftruncate"))
    }
    fn fallocate(&mut self, at: u64, len: u64, keep_size: bool) -> Result<(), String> {
        use std::os::fd::AsRawFd;
        let mode = if keep_size {
            libc::FALLOC_FL_KEEP_SIZE
        } else {
            0
        };
        // SAFETY: fallocate on a descriptor we hold.
        let r = unsafe { libc::fallocate(self.file.as_raw_fd(), mode, at as i64, len as i64) };
        if r != 0 {
            return Err(format!("fallocate: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }
    fn size(&mut self) -> Result<u64, String> {
        Ok(self.file.metadata().map_err(io("fstat"))?.len())
    }
    fn fsync(&mut self) -> Result<(), String> {
        self.file.sync_all().map_err(io("fsync"))
    }
    fn map_read(&mut self, at: u64, len: usize, size: u64) -> Result<Vec<u8>, String> {
        let mut m = Mapping::new(&self.file, size, false)?;
        Ok(m.bytes()[at as usize..at as usize + len].to_vec())
    }
    fn map_write(&mut self, at: u64, data: &[u8], size: u64) -> Result<(), String> {
        let mut m = Mapping::new(&self.file, size, true)?;
        m.bytes()[at as usize..at as usize + data.len()].copy_from_slice(data);
        m.sync()
    }
    fn direct_write(&mut self, at: u64, data: &[u8]) -> Result<(), String> {
        use std::os::unix::fs::FileExt;
        let f = self.direct.as_ref().ok_or("not opened with O_DIRECT")?;
        let mut buf = Aligned::new(data.len());
        buf.bytes().copy_from_slice(data);
        f.write_all_at(buf.bytes(), at)
            .map_err(io("O_DIRECT pwrite"))
    }
    fn direct_read(&mut self, at: u64, len: usize) -> Result<Vec<u8>, String> {
        let f = self.direct.as_ref().ok_or("not opened with O_DIRECT")?;
        let mut buf = Aligned::new(len);
        let n = read_at(f, buf.bytes(), at)?;
        Ok(buf.bytes()[..n].to_vec())
    }
}
