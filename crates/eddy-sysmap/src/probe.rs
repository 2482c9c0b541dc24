//! What `eddy sysmap` reads about this node: /proc, /sys, statvfs, getifaddrs, and a short
//! write/read measurement per storage path. Parsers are pure functions (unit-tested); the
//! probes around them report what they cannot read instead of failing.

use super::{DeviceClass, Interface, Storage};
use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, HashSet};
use std::ffi::CStr;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Component, Path, PathBuf};
use std::time::Instant;

/// File systems that are never default storage candidates: pseudo, network and cluster file
/// systems, read-only images.
const NOT_LOCAL: &[&str] = &[
    "proc",
    "sysfs",
    "devtmpfs",
    "devpts",
    "tmpfs",
    "ramfs",
    "cgroup",
    "cgroup2",
    "mqueue",
    "hugetlbfs",
    "debugfs",
    "tracefs",
    "securityfs",
    "pstore",
    "bpf",
    "configfs",
    "fusectl",
    "binfmt_misc",
    "efivarfs",
    "autofs",
    "nsfs",
    "rpc_pipefs",
    "overlay",
    "squashfs",
    "iso9660",
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "lustre",
    "gpfs",
    "beegfs",
    "ceph",
    "glusterfs",
    "9p",
    "virtiofs",
    "afs",
    "orangefs",
    "pvfs2",
];

/// One line of /proc/self/mountinfo (the fields sysmap uses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub major: u32,
    pub minor: u32,
    /// The directory of the file system mounted here ("/" unless a bind mount of a subtree).
    pub root: PathBuf,
    pub mount_point: PathBuf,
    pub read_only: bool,
    pub fs_type: String,
    pub source: String,
}

/// Undoes the octal escapes of mountinfo (`\040` space, `\011` tab, `\012` newline, `\134`).
pub fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            if let Ok(v) = u8::try_from(v) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses one mountinfo line; `None` for a malformed one.
pub fn parse_mountinfo_line(line: &str) -> Option<MountEntry> {
    let fields: Vec<&str> = line.split(' ').collect();
    let sep = fields.iter().position(|f| *f == "-")?;
    if sep < 6 || fields.len() < sep + 3 {
        return None;
    }
    let (major, minor) = fields[2].split_once(':')?;
    Some(MountEntry {
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
        root: PathBuf::from(unescape_mount(fields[3])),
        mount_point: PathBuf::from(unescape_mount(fields[4])),
        read_only: fields[5].split(',').any(|o| o == "ro"),
        fs_type: unescape_mount(fields[sep + 1]),
        source: unescape_mount(fields[sep + 2]),
    })
}

/// Parses a whole mountinfo file, skipping malformed lines.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines().filter_map(parse_mountinfo_line).collect()
}

/// This process's mounts.
pub fn mounts() -> Result<Vec<MountEntry>> {
    let text =
        // privileged-path: the kernel's /proc
        fs::read_to_string("/proc/self/mountinfo").context("cannot read /proc/self/mountinfo")?;
    Ok(parse_mountinfo(&text))
}

/// Whether a mount is a local block-device file system (a default storage candidate).
pub fn is_local_block(m: &MountEntry) -> bool {
    m.source.starts_with("/dev/")
        && !m.read_only
        && !NOT_LOCAL.contains(&m.fs_type.as_str())
        && !m.fs_type.starts_with("fuse")
}

/// The default candidates: one mount point per local block device (the mount of its whole
/// file system, not bind mounts of parts of it), then /dev/shm and /tmp when they exist.
pub fn default_paths(mounts: &[MountEntry]) -> Vec<PathBuf> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut local: Vec<&MountEntry> = mounts
        .iter()
        .filter(|m| is_local_block(m) && m.root == Path::new("/"))
        .collect();
    local.sort_by_key(|m| m.mount_point.as_os_str().len());
    for m in local {
        // privileged-path: mount points from the kernel's mount table
        if seen.insert((m.major, m.minor)) && m.mount_point.is_dir() {
            out.push(m.mount_point.clone());
        }
    }
    for p in ["/dev/shm", "/tmp"] {
        let p = PathBuf::from(p);
        // privileged-path: storage paths the caller names (sysmap --storage)
        if p.is_dir() && !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// The mount a path lies in: the longest mount point that is an ancestor of it (the last one
/// mounted, for stacked mounts).
pub fn mount_of<'a>(mounts: &'a [MountEntry], path: &Path) -> Option<&'a MountEntry> {
    let mut best: Option<&MountEntry> = None;
    for m in mounts {
        if path.starts_with(&m.mount_point)
            && best.is_none_or(|b| {
                m.mount_point.components().count() >= b.mount_point.components().count()
            })
        {
            best = Some(m);
        }
    }
    best
}

/// Parses /proc/meminfo: (MemTotal, MemAvailable) in bytes.
pub fn parse_meminfo(text: &str) -> Result<(u64, u64)> {
    let mut total = None;
    let mut avail = None;
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let slot = match key {
            "MemTotal" => &mut total,
            "MemAvailable" => &mut avail,
            _ => continue,
        };
        let mut parts = rest.split_whitespace();
        let n: u64 = parts
            .next()
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("malformed meminfo line {line:?}"))?;
        let mult = match parts.next() {
            Some("kB") => 1024,
            None => 1,
            Some(u) => bail!("unknown unit {u:?} in meminfo line {line:?}"),
        };
        *slot = Some(n * mult);
    }
    match (total, avail) {
        (Some(t), Some(a)) => Ok((t, a)),
        _ => bail!("meminfo has no MemTotal or MemAvailable"),
    }
}

/// The class of a device: RAM for memory file systems and RAM disks, NVMe by name, else the
/// kernel's rotational flag (SSD or HDD), else other.
pub fn device_class(fs_type: &str, disk: Option<&str>, rotational: Option<bool>) -> DeviceClass {
    if matches!(fs_type, "tmpfs" | "ramfs") {
        return DeviceClass::Ram;
    }
    let Some(disk) = disk else {
        return DeviceClass::Other;
    };
    if disk.starts_with("zram") || disk.starts_with("ram") || disk.starts_with("brd") {
        DeviceClass::Ram
    } else if disk.starts_with("nvme") {
        DeviceClass::Nvme
    } else {
        match rotational {
            Some(false) => DeviceClass::Ssd,
            Some(true) => DeviceClass::Hdd,
            None => DeviceClass::Other,
        }
    }
}

fn read_trim(p: impl AsRef<Path>) -> Option<String> {
    // privileged-path: the kernel's sysfs
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

/// The kernel name of block device `major:minor` (e.g. "nvme0n1p2").
fn dev_name(major: u32, minor: u32) -> Option<String> {
    // privileged-path: the kernel's sysfs
    let target = fs::read_link(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

/// The disk under a block device: a partition's disk, a device-mapper or md device's first
/// member, a loop device's backing file's disk; followed a few levels deep.
pub fn parent_disk(major: u32, minor: u32) -> Option<String> {
    let mut name = dev_name(major, minor)?;
    for _ in 0..8 {
        let sys = PathBuf::from(format!("/sys/class/block/{name}"));
        // privileged-path: the kernel's sysfs
        if sys.join("partition").exists() {
            // privileged-path: the kernel's sysfs
            let real = fs::canonicalize(&sys).ok()?;
            name = real.parent()?.file_name()?.to_string_lossy().into_owned();
            continue;
        }
        if let Some(backing) = read_trim(sys.join("loop/backing_file")) {
            // privileged-path: a device node from the kernel's mount table
            let dev = fs::metadata(&backing).ok()?.dev();
            name = dev_name(libc::major(dev), libc::minor(dev))?;
            continue;
        }
        // privileged-path: the kernel's sysfs
        let mut slaves: Vec<String> = fs::read_dir(sys.join("slaves"))
            .ok()
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        slaves.sort();
        match slaves.into_iter().next() {
            Some(s) => name = s,
            None => return Some(name),
        }
    }
    Some(name)
}

/// (capacity, free, available) bytes of the file system holding `path`.
pub fn statvfs(path: &Path) -> Result<(u64, u64, u64)> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).context("path holds a NUL byte")?;
    // SAFETY: statvfs is plain data, for which all zeros is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `st` a writable statvfs.
    // privileged-path: statvfs of a storage path the caller names; reads no file
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", path.display()));
    }
    let f = st.f_frsize as u64;
    Ok((
        st.f_blocks as u64 * f,
        st.f_bfree as u64 * f,
        st.f_bavail as u64 * f,
    ))
}

/// Describes one storage path; what cannot be read is left empty and named in `error`.
pub fn storage(mounts: &[MountEntry], path: &Path, bench_mib: u64) -> Storage {
    let mut s = Storage {
        path: path.display().to_string(),
        ..Storage::default()
    };
    let mut errors = Vec::new();
    // privileged-path: storage paths the caller names (sysmap --storage)
    let real = match fs::canonicalize(path) {
        Ok(r) => r,
        Err(e) => {
            s.error = Some(format!("cannot resolve {}: {e}", path.display()));
            return s;
        }
    };
    if let Some(m) = mount_of(mounts, &real) {
        s.mount_point = Some(m.mount_point.display().to_string());
        s.fs_type = Some(m.fs_type.clone());
        s.device = Some(m.source.clone());
        let (mut major, mut minor) = (m.major, m.minor);
        if major == 0 && m.source.starts_with("/dev/") {
            // btrfs and friends show an anonymous device; the source node names the real one.
            // privileged-path: a device node from the kernel's mount table
            if let Ok(md) = fs::metadata(&m.source) {
                if md.file_type().is_block_device() {
                    (major, minor) = (libc::major(md.rdev()), libc::minor(md.rdev()));
                }
            }
        }
        s.disk = if major == 0 {
            None
        } else {
            parent_disk(major, minor)
        };
        let rotational = s
            .disk
            .as_ref()
            .and_then(|d| read_trim(format!("/sys/block/{d}/queue/rotational")))
            .map(|r| r == "1");
        s.class = Some(device_class(&m.fs_type, s.disk.as_deref(), rotational));
    }
    match statvfs(&real) {
        Ok((cap, free, avail)) => {
            s.capacity_bytes = Some(cap);
            s.free_bytes = Some(free);
            s.available_bytes = Some(avail);
        }
        Err(e) => errors.push(format!("{e:#}")),
    }
    if bench_mib > 0 {
        match bench(&real, bench_mib) {
            Ok((w, r)) => {
                s.write_mib_s = Some(w);
                s.read_mib_s = Some(r);
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    if !errors.is_empty() {
        s.error = Some(errors.join("; "));
    }
    s
}

/// Writes `mib` MiB to a temporary file in `dir` with fsync, drops it from the page cache and
/// reads it back: (write, read) MiB/s. The file is removed however this ends.
pub fn bench(dir: &Path, mib: u64) -> Result<(f64, f64)> {
    const BLOCK: usize = 1 << 20;
    let tmp = tempfile::Builder::new()
        .prefix(".eddy-sysmap-")
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a file in {}", dir.display()))?;
    let mut f = tmp.as_file();
    // Incompressible, non-zero data: no device or file system may shortcut it.
    let mut block = vec![0u8; BLOCK];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for b in block.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
    }
    let ctx = || format!("measuring {}", tmp.path().display());
    let start = Instant::now();
    for _ in 0..mib {
        f.write_all(&block).with_context(ctx)?;
    }
    f.sync_all().with_context(ctx)?;
    let write_s = start.elapsed().as_secs_f64();
    // SAFETY: a valid open descriptor; advice only.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc)).with_context(ctx);
    }
    f.seek(SeekFrom::Start(0)).with_context(ctx)?;
    let start = Instant::now();
    let mut total = 0u64;
    loop {
        let n = f.read(&mut block).with_context(ctx)?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    let read_s = start.elapsed().as_secs_f64();
    if total != mib * BLOCK as u64 {
        bail!(
            "read back {total} bytes of {} from {}",
            mib * BLOCK as u64,
            tmp.path().display()
        );
    }
    let rate = |s: f64| mib as f64 / s.max(1e-9);
    Ok((round2(rate(write_s)), round2(rate(read_s))))
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Online CPUs.
pub fn cores() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u32::try_from(n).unwrap_or(1).max(1)
}

/// The short host name (up to the first dot).
pub fn short_hostname() -> Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its length.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return Err(std::io::Error::last_os_error()).context("gethostname");
    }
    let name = CStr::from_bytes_until_nul(&buf)
        .context("host name is not terminated")?
        .to_string_lossy()
        .into_owned();
    Ok(short_name(&name).to_string())
}

/// A host name up to its first dot.
pub fn short_name(name: &str) -> &str {
    name.split('.').next().unwrap_or(name)
}

/// The prefix length of a netmask.
fn prefix_len(mask: &[u8]) -> u32 {
    mask.iter().map(|b| b.count_ones()).sum()
}

/// Addresses per interface from getifaddrs: (IPv4, IPv6) as "addr/prefix".
/// (IPv4, IPv6) addresses of one interface.
type Addrs = (Vec<String>, Vec<String>);

fn addresses() -> Result<BTreeMap<String, Addrs>> {
    let mut out: BTreeMap<String, Addrs> = BTreeMap::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error()).context("getifaddrs");
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: a NUL-terminated name owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: the family tells which sockaddr type the address (and netmask) is.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let entry = out.entry(name).or_default();
        if family == libc::AF_INET {
            // SAFETY: the family is AF_INET: the address is a sockaddr_in, alive with the list.
            let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            let len = if ifa.ifa_netmask.is_null() {
                32
            } else {
                // SAFETY: an AF_INET entry's netmask is a sockaddr_in, alive with the list.
                let m = unsafe { &*(ifa.ifa_netmask as *const libc::sockaddr_in) };
                prefix_len(&m.sin_addr.s_addr.to_ne_bytes())
            };
            entry.0.push(format!("{ip}/{len}"));
        } else if family == libc::AF_INET6 {
            // SAFETY: the family is AF_INET6: the address is a sockaddr_in6, alive with the list.
            let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            let len = if ifa.ifa_netmask.is_null() {
                128
            } else {
                // SAFETY: an AF_INET6 entry's netmask is a sockaddr_in6, alive with the list.
                let m = unsafe { &*(ifa.ifa_netmask as *const libc::sockaddr_in6) };
                prefix_len(&m.sin6_addr.s6_addr)
            };
            entry.1.push(format!("{ip}/{len}"));
        }
    }
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Network interfaces from /sys/class/net plus their addresses.
pub fn interfaces() -> Result<Vec<Interface>> {
    let mut addrs = addresses()?;
    let mut out = Vec::new();
    // privileged-path: the kernel's sysfs
    let dir = fs::read_dir("/sys/class/net").context("cannot list /sys/class/net")?;
    for e in dir {
        let e = e.context("cannot list /sys/class/net")?;
        let name = e.file_name().to_string_lossy().into_owned();
        let sys = e.path();
        let flags = read_trim(sys.join("flags"))
            .and_then(|f| u32::from_str_radix(f.trim_start_matches("0x"), 16).ok())
            .unwrap_or(0);
        let operstate = read_trim(sys.join("operstate"));
        let up = flags & libc::IFF_UP as u32 != 0
            && !matches!(
                operstate.as_deref(),
                Some("down" | "lowerlayerdown" | "notpresent")
            );
        let (ipv4, ipv6) = addrs.remove(&name).unwrap_or_default();
        out.push(Interface {
            mac: read_trim(sys.join("address")).filter(|a| !a.is_empty()),
            mtu: read_trim(sys.join("mtu")).and_then(|m| m.parse().ok()),
            // -1 or EINVAL: the driver does not know (virtual links, down links).
            speed_mbps: read_trim(sys.join("speed")).and_then(|s| s.parse::<u64>().ok()),
            up,
            operstate,
            ipv4,
            ipv6,
            name,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Whether `anc` is `path` or one of its ancestors, compared by components.
pub fn is_ancestor(anc: &Path, path: &Path) -> bool {
    fn norm(p: &Path) -> Vec<Component<'_>> {
        p.components()
            .filter(|c| !matches!(c, Component::CurDir))
            .collect()
    }
    let (a, p) = (norm(anc), norm(path));
    p.len() >= a.len() && p[..a.len()] == a[..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_in_bytes() {
        let text = "MemTotal:       24683656 kB\nMemFree:         1000 kB\nMemAvailable:   12000000 kB\nHugePages_Total:       0\n";
        assert_eq!(
            parse_meminfo(text).unwrap(),
            (24683656 * 1024, 12000000 * 1024)
        );
        assert!(parse_meminfo("MemTotal: 5 kB\n").is_err());
        assert!(parse_meminfo("MemTotal: x kB\nMemAvailable: 1 kB\n").is_err());
    }

    #[test]
    fn mountinfo_lines() {
        let m = parse_mountinfo_line(
            "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 shared:2 - ext3 /dev/root rw,errors=continue",
        )
        .unwrap();
        assert_eq!((m.major, m.minor), (98, 0));
        assert_eq!(m.root, Path::new("/mnt1"));
        assert_eq!(m.mount_point, Path::new("/mnt/parent"));
        assert_eq!(
            (m.fs_type.as_str(), m.source.as_str()),
            ("ext3", "/dev/root")
        );
        assert!(!m.read_only);

        let m = parse_mountinfo_line(
            "27 1 254:0 / /scratch\\040area/my\\011tab\\134x ro,relatime - ext4 /dev/vda rw",
        )
        .unwrap();
        assert_eq!(m.mount_point, Path::new("/scratch area/my\ttab\\x"));
        assert!(m.read_only);
        assert!(parse_mountinfo_line("garbage line").is_none());
        assert!(parse_mountinfo_line("1 2 x:y / / rw - ext4 /dev/a rw").is_none());
        assert_eq!(unescape_mount("a\\04"), "a\\04");
    }

    #[test]
    fn defaults_skip_pseudo_and_bind_mounts() {
        let text = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
42 27 254:0 /run/netns /run/netns rw,relatime shared:1 - ext4 /dev/vda rw
50 27 0:50 / /pfs rw - nfs4 srv:/export rw
51 27 259:1 / /snap/x ro - squashfs /dev/loop0 ro
52 27 0:51 / /mnt/fuse rw - fuse.sshfs host:/ rw
";
        let ms = parse_mountinfo(text);
        let local: Vec<_> = ms.iter().filter(|m| is_local_block(m)).collect();
        assert_eq!(local.len(), 2, "{local:?}");
        let d = default_paths(&ms);
        assert_eq!(d[0], Path::new("/"));
        assert!(!d.contains(&PathBuf::from("/run/netns")));
        assert_eq!(
            mount_of(&ms, Path::new("/run/netns/x")).unwrap().root,
            Path::new("/run/netns")
        );
        assert_eq!(
            mount_of(&ms, Path::new("/dev/shm/a")).unwrap().fs_type,
            "tmpfs"
        );
        assert_eq!(
            mount_of(&ms, Path::new("/home")).unwrap().mount_point,
            Path::new("/")
        );
    }

    #[test]
    fn device_classes() {
        use DeviceClass::*;
        assert_eq!(device_class("tmpfs", None, None), Ram);
        assert_eq!(device_class("ext4", Some("zram0"), Some(false)), Ram);
        assert_eq!(device_class("xfs", Some("nvme0n1"), Some(false)), Nvme);
        assert_eq!(device_class("ext4", Some("sda"), Some(false)), Ssd);
        assert_eq!(device_class("ext4", Some("sdb"), Some(true)), Hdd);
        assert_eq!(device_class("ext4", Some("vda"), None), Other);
        assert_eq!(device_class("btrfs", None, None), Other);
    }

    #[test]
    fn ancestors_and_names() {
        assert!(is_ancestor(Path::new("/"), Path::new("/a/b")));
        assert!(is_ancestor(Path::new("/a"), Path::new("/a/b")));
        assert!(is_ancestor(Path::new("/a/b"), Path::new("/a/b/")));
        assert!(!is_ancestor(Path::new("/a/b"), Path::new("/a/bc")));
        assert_eq!(short_name("n01.cluster.example"), "n01");
        assert_eq!(prefix_len(&[255, 255, 255, 0]), 24);
    }

    #[test]
    fn this_node_probes() {
        let (cap, _, avail) = statvfs(Path::new("/")).unwrap();
        assert!(cap > 0 && avail <= cap);
        let ifs = interfaces().unwrap();
        let lo = ifs.iter().find(|i| i.name == "lo").expect("lo");
        assert!(lo.ipv4.contains(&"127.0.0.1/8".to_string()), "{lo:?}");
        let (w, r) = bench(Path::new("/dev/shm"), 2).unwrap();
        assert!(w > 0.0 && r > 0.0);
        assert!(bench(Path::new("/proc"), 1).is_err());
    }
}
