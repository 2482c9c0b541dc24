//! Eddy inodes as the kernel's stat structures.

use eddy_client::{FileKind, FsStats, Inode};

/// The device number every Eddy entry reports ("EDDY").
pub const DEV: u64 = 0x4544_4459;
/// f_type of statfs ("EDDY").
pub const FS_MAGIC: i64 = 0x4544_4459;

pub fn dtype(kind: FileKind) -> u8 {
    match kind {
        FileKind::File => libc::DT_REG,
        FileKind::Dir => libc::DT_DIR,
        FileKind::Symlink => libc::DT_LNK,
        FileKind::Fifo => libc::DT_FIFO,
        FileKind::Socket => libc::DT_SOCK,
        FileKind::CharDevice => libc::DT_CHR,
        FileKind::BlockDevice => libc::DT_BLK,
    }
}

/// As the mount says it: 0 for a file unlinked or replaced while open (decision 0061).
fn nlink(i: &Inode) -> u64 {
    match i.kind {
        FileKind::Dir => u64::from(i.nlink.max(2)),
        _ => u64::from(i.nlink),
    }
}

/// Fills a `struct stat` (the same layout as `stat64` on x86_64).
pub fn fill_stat(i: &Inode, blksize: u64, out: &mut libc::stat) {
    // SAFETY: a plain C struct, all zeros is valid.
    *out = unsafe { std::mem::zeroed() };
    out.st_dev = DEV;
    out.st_ino = i.st_ino();
    out.st_mode = i.st_mode();
    out.st_nlink = nlink(i);
    out.st_uid = i.uid;
    out.st_gid = i.gid;
    out.st_rdev = i.rdev;
    out.st_size = i.size as i64;
    out.st_blksize = blksize as i64;
    out.st_blocks = i.size.div_ceil(512) as i64;
    out.st_atime = i.atime.sec;
    out.st_atime_nsec = i64::from(i.atime.nsec);
    out.st_mtime = i.mtime.sec;
    out.st_mtime_nsec = i64::from(i.mtime.nsec);
    out.st_ctime = i.ctime.sec;
    out.st_ctime_nsec = i64::from(i.ctime.nsec);
}

pub fn fill_statx(i: &Inode, blksize: u64, out: &mut libc::statx) {
    // SAFETY: a plain C struct, all zeros is valid.
    *out = unsafe { std::mem::zeroed() };
    out.stx_mask = libc::STATX_BASIC_STATS;
    out.stx_blksize = blksize as u32;
    out.stx_nlink = nlink(i) as u32;
    out.stx_uid = i.uid;
    out.stx_gid = i.gid;
    out.stx_mode = i.st_mode() as u16;
    out.stx_ino = i.st_ino();
    out.stx_size = i.size;
    out.stx_blocks = i.size.div_ceil(512);
    let ts = |t: eddy_client::Timespec| {
        // SAFETY: a plain C struct, all zeros is valid.
        let mut x: libc::statx_timestamp = unsafe { std::mem::zeroed() };
        x.tv_sec = t.sec;
        x.tv_nsec = t.nsec;
        x
    };
    out.stx_atime = ts(i.atime);
    out.stx_mtime = ts(i.mtime);
    out.stx_ctime = ts(i.ctime);
    out.stx_rdev_major = libc::major(i.rdev);
    out.stx_rdev_minor = libc::minor(i.rdev);
    out.stx_dev_major = libc::major(DEV);
    out.stx_dev_minor = libc::minor(DEV);
}

pub fn fill_statfs(s: &FsStats, max_name: u64, out: &mut libc::statfs) {
    // SAFETY: a plain C struct, all zeros is valid.
    *out = unsafe { std::mem::zeroed() };
    let bs = u64::from(s.block_size.max(1));
    out.f_type = FS_MAGIC;
    out.f_bsize = bs as i64;
    out.f_frsize = bs as i64;
    out.f_blocks = s.total_bytes / bs;
    out.f_bfree = s.free_bytes / bs;
    out.f_bavail = s.avail_bytes / bs;
    out.f_files = s.files;
    out.f_ffree = s.files_free;
    out.f_namelen = max_name as i64;
}

pub fn fill_statvfs(s: &FsStats, max_name: u64, out: &mut libc::statvfs) {
    // SAFETY: a plain C struct, all zeros is valid.
    *out = unsafe { std::mem::zeroed() };
    let bs = u64::from(s.block_size.max(1));
    out.f_bsize = bs;
    out.f_frsize = bs;
    out.f_blocks = s.total_bytes / bs;
    out.f_bfree = s.free_bytes / bs;
    out.f_bavail = s.avail_bytes / bs;
    out.f_files = s.files;
    out.f_ffree = s.files_free;
    out.f_favail = s.files_free;
    out.f_fsid = DEV;
    out.f_namemax = max_name;
}
