//! Open files: how the kernel is told to treat each open file, the flags that reopen one,
//! and fallocate.

use super::*;

/// How the kernel should treat an open file. Never FOPEN_KEEP_CACHE: the page cache is
/// dropped on open, so that data written by other nodes is seen after an open. O_APPEND
/// files bypass the page cache: the client appends at the end the metadata owner reserves,
/// which may differ from the offset the kernel assumed (another node appended meanwhile),
/// so cached pages would hold the data at the wrong place.
///
/// - Read-only opens: no FLUSH on close (there is no size to publish), which saves a kernel
///   round trip per close. Writable opens keep it: close publishes the size writes reached.
/// - Write-only and append-only opens bypass the page cache: nothing is read back through
///   them, and through the cache the kernel splits an unaligned write in two requests (the
///   partial first page alone). Writers to one file may then proceed in parallel.
pub(super) fn fopen_flags(file: &File) -> FopenFlags {
    if file.renewed() {
        // The kernel's cached size predates the backend's change: read around the page cache,
        // so the new end of the file is not cut at the old one.
        return FopenFlags::FOPEN_DIRECT_IO;
    }
    // Read-only opens keep FLUSH too: a close must release the closing process's POSIX
    // locks at once (decision 0008), and with FOPEN_NOFLUSH only the later, asynchronous
    // release of the open file would.
    if file.append() || !file.readable() {
        return FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
    }
    FopenFlags::empty()
}

/// How the kernel should treat an open file it passes through (decision 0049): reads,
/// writes and mappings go to the data file, but for an O_DIRECT open for writing. The kernel
/// would write it with direct I/O into the data file, and a direct write into a file whose
/// pages someone has mapped and dirtied (another open's shared mapping, which passthrough
/// maps onto the same data file) fails to drop them from the page cache: the data file's
/// file system then records EIO for every open of it, and the next msync or fsync of the
/// mapping reports it (ext4, xfs: "Page cache invalidation failure on direct I/O"), though
/// no byte is damaged. So such an open is FOPEN_DIRECT_IO too, which the kernel lets
/// override passthrough for reads and writes: they come to the mount, whose client has the
/// daemon write the data file through its page cache, and its mappings still go to the data
/// file, like every other open of the inode.
pub(super) fn passthrough_flags(file: &File) -> FopenFlags {
    match file.direct() && file.writable() {
        true => FopenFlags::FOPEN_DIRECT_IO,
        false => FopenFlags::empty(),
    }
}

impl EddyFs {
    /// fallocate: mode 0 and FALLOC_FL_KEEP_SIZE reserve real space on the daemons that
    /// hold the range; every other mode (punching holes, collapsing or inserting ranges,
    /// zeroing, unsharing) is EOPNOTSUPP, never a silent success.
    pub(super) fn do_fallocate(
        &self,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> Result<(), Errno> {
        let file = self.file(fh)?;
        self.run(self.client.fallocate(&file, offset, length, mode))
    }
}
