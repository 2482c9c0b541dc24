//! Conversions between Eddy metadata (`Inode`, `Timespec`, `SetAttr`) and FUSE attributes.

use eddy_proto::{FileKind, Inode, SetAttr, SetTime, Timespec};
use fuser::{FileAttr, FileType, INodeNo, TimeOrNow};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Size of the blocks `st_blocks` counts, fixed by POSIX.
const STAT_BLOCK: u64 = 512;

/// The FUSE file type of an entry kind.
pub fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

/// A device number as FUSE carries it (the kernel's 32-bit `new_encode_dev`) from the
/// `dev_t` Eddy stores (glibc's 64-bit encoding); numbers that do not fit give 0.
pub fn fuse_rdev(rdev: u64) -> u32 {
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    if major > 0xfff || minor > 0xf_ffff {
        return 0;
    }
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// A device number from FUSE (32-bit `new_encode_dev`) as a `dev_t`.
pub fn dev_t(rdev: u32) -> u64 {
    let major = (rdev & 0xf_ff00) >> 8;
    let minor = (rdev & 0xff) | ((rdev >> 12) & 0xf_ff00);
    libc::makedev(major, minor)
}

/// A wire timestamp as a `SystemTime` (times before the epoch included).
pub fn system_time(t: Timespec) -> SystemTime {
    let nsec = Duration::from_nanos(u64::from(t.nsec.min(999_999_999)));
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::from_secs(t.sec.unsigned_abs()) + nsec
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + nsec
    }
}

/// A `SystemTime` as a wire timestamp.
pub fn timespec(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec {
            sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nsec: d.subsec_nanos(),
        },
        Err(e) => {
            // Before the epoch: -d = -(s + n) = -(s + 1) + (1e9 - n) ns.
            let d = e.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            if d.subsec_nanos() == 0 {
                Timespec {
                    sec: -secs,
                    nsec: 0,
                }
            } else {
                Timespec {
                    sec: -secs - 1,
                    nsec: 1_000_000_000 - d.subsec_nanos(),
                }
            }
        }
    }
}

/// The FUSE attributes of an entry with inode number `ino`; `blksize` is the preferred I/O
/// size reported to `stat` (the deployment's chunk size).
pub fn file_attr(ino: u64, inode: &Inode, blksize: u32) -> FileAttr {
    let nlink = match inode.kind {
        FileKind::Dir => inode.nlink.max(2),
        _ => inode.nlink,
    };
    FileAttr {
        ino: INodeNo(ino),
        size: inode.size,
        blocks: inode.size.div_ceil(STAT_BLOCK),
        atime: system_time(inode.atime),
        mtime: system_time(inode.mtime),
        ctime: system_time(inode.ctime),
        crtime: system_time(inode.ctime),
        kind: file_type(inode.kind),
        perm: (inode.mode & 0o7777) as u16,
        nlink,
        uid: inode.uid,
        gid: inode.gid,
        rdev: fuse_rdev(inode.rdev),
        blksize,
        flags: 0,
    }
}

/// A FUSE time argument of `setattr` as an Eddy one.
pub fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(timespec(t)),
    }
}

/// The attribute changes of a FUSE `setattr`, size excluded (handled apart because it may go
/// through an open file).
pub fn set_attr(
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
) -> SetAttr {
    SetAttr {
        mode: mode.map(|m| m & 0o7777),
        uid,
        gid,
        size: None,
        atime: atime.map(set_time),
        mtime: mtime.map(set_time),
    }
}

/// Whether a `SetAttr` changes nothing.
pub fn is_noop(attr: &SetAttr) -> bool {
    *attr == SetAttr::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inode(kind: FileKind, size: u64) -> Inode {
        Inode {
            size,
            atime: Timespec { sec: 10, nsec: 5 },
            mtime: Timespec {
                sec: 20,
                nsec: 999_999_999,
            },
            ctime: Timespec { sec: -3, nsec: 250 },
            ..Inode::new(kind, 7, 0o104755, 1000, 100)
        }
    }

    #[test]
    fn file_attr_of_a_file() {
        let a = file_attr(42, &inode(FileKind::File, 1025), 524_288);
        assert_eq!(a.ino, INodeNo(42));
        assert_eq!(a.kind, FileType::RegularFile);
        assert_eq!(a.perm, 0o4755, "type bits above 07777 are dropped");
        assert_eq!(a.size, 1025);
        assert_eq!(a.blocks, 3);
        assert_eq!(a.nlink, 1);
        assert_eq!((a.uid, a.gid), (1000, 100));
        assert_eq!(a.blksize, 524_288);
        assert_eq!(a.atime, UNIX_EPOCH + Duration::new(10, 5));
        assert_eq!(a.mtime, UNIX_EPOCH + Duration::new(20, 999_999_999));
        assert_eq!(
            a.ctime,
            UNIX_EPOCH - Duration::from_secs(3) + Duration::from_nanos(250)
        );
    }

    #[test]
    fn file_attr_of_dirs_and_symlinks() {
        let d = file_attr(1, &inode(FileKind::Dir, 0), 4096);
        assert_eq!(d.kind, FileType::Directory);
        assert_eq!(d.nlink, 2);
        assert_eq!(d.blocks, 0);
        let l = file_attr(2, &inode(FileKind::Symlink, 512), 4096);
        assert_eq!(l.kind, FileType::Symlink);
        assert_eq!(l.nlink, 1);
        assert_eq!(l.blocks, 1);
    }

    #[test]
    fn timespec_round_trips_around_the_epoch() {
        for t in [
            Timespec { sec: 0, nsec: 0 },
            Timespec {
                sec: 1_700_000_000,
                nsec: 123_456_789,
            },
            Timespec { sec: -1, nsec: 1 },
            Timespec { sec: -5, nsec: 0 },
        ] {
            assert_eq!(timespec(system_time(t)), t, "{t:?}");
        }
    }

    #[test]
    fn setattr_conversion() {
        let t = UNIX_EPOCH + Duration::new(5, 6);
        let a = set_attr(
            Some(0o100644),
            None,
            Some(9),
            Some(TimeOrNow::Now),
            Some(TimeOrNow::SpecificTime(t)),
        );
        assert_eq!(a.mode, Some(0o644));
        assert_eq!(a.uid, None);
        assert_eq!(a.gid, Some(9));
        assert_eq!(a.size, None);
        assert_eq!(a.atime, Some(SetTime::Now));
        assert_eq!(a.mtime, Some(SetTime::At(Timespec { sec: 5, nsec: 6 })));
        assert!(!is_noop(&a));
        assert!(is_noop(&set_attr(None, None, None, None, None)));
    }

    #[test]
    fn special_files_carry_type_and_device_number() {
        let mut dev = inode(FileKind::CharDevice, 0);
        dev.rdev = libc::makedev(4, 300);
        let a = file_attr(5, &dev, 4096);
        assert_eq!(a.kind, FileType::CharDevice);
        assert_eq!(dev_t(a.rdev), dev.rdev);
        assert_eq!(a.nlink, 1);
        // The kernel's encoding of small numbers equals glibc's.
        assert_eq!(fuse_rdev(libc::makedev(8, 1)), 0x801);
        assert_eq!(fuse_rdev(libc::makedev(5000, 1)), 0);
        assert_eq!(file_type(FileKind::Fifo), FileType::NamedPipe);
        assert_eq!(file_type(FileKind::Socket), FileType::Socket);
        assert_eq!(file_type(FileKind::BlockDevice), FileType::BlockDevice);
    }
}
