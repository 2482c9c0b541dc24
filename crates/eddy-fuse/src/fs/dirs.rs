//! Directories: the cursors of open directories, and readdir(plus) over the client's merged
//! listing.

use super::*;

impl EddyFs {
    /// The cursor of an open directory.
    pub(super) fn dir_stream(&self, fh: FileHandle) -> Result<Arc<Mutex<DirStream>>, Errno> {
        lock(&self.dirs)
            .get(&fh.0)
            .cloned()
            .ok_or_else(|| Errno::new(libc::EBADF, format!("unknown directory handle {}", fh.0)))
    }

    pub(super) fn do_readdir(
        &self,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectory,
    ) -> Result<(), Errno> {
        let stream = self.dir_stream(fh)?;
        let mut stream = lock(&stream);
        stream.seek(offset, &self.client, &self.driver)?;
        while let Some(item) = stream.current(&self.client, &self.driver)? {
            let ino = match item.ino {
                Some(ino) => ino,
                None => lock(&self.table).peek(
                    &join(stream.path(), &item.name),
                    item.entry.as_ref().and_then(|e| shared_id(&e.inode)),
                ),
            };
            if reply.add(INodeNo(ino), stream.position() + 1, item.kind, &item.name) {
                break; // the reply buffer is full: this entry comes first next time
            }
            stream.advance();
        }
        Ok(())
    }

    /// Like `do_readdir`, with each entry's attributes; every entry but "." and ".." counts as
    /// a lookup for the kernel, so it enters the inode table (and leaves it on forget).
    pub(super) fn do_readdirplus(
        &self,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectoryPlus,
    ) -> Result<(), Errno> {
        let stream = self.dir_stream(fh)?;
        let mut stream = lock(&stream);
        stream.seek(offset, &self.client, &self.driver)?;
        while let Some(item) = stream.current(&self.client, &self.driver)? {
            let next = stream.position() + 1;
            let full = match (&item.entry, item.ino) {
                (Some(entry), _) => {
                    let inode = self.run(self.client.entry_inode(stream.path(), entry))?;
                    let path = join(stream.path(), &item.name);
                    let ino = lock(&self.table).lookup_entry(&path, shared_id(&inode));
                    let attr = self.attr(INodeNo(ino), &inode);
                    let full =
                        reply.add(INodeNo(ino), next, &item.name, &self.ttl, &attr, GENERATION);
                    if full {
                        // Not sent: the kernel holds no reference to it.
                        lock(&self.table).forget(ino, 1);
                    }
                    full
                }
                // "." and "..": the kernel takes no reference and ignores their attributes.
                (None, Some(ino)) => {
                    let attr = file_attr(ino, &dot_inode(), self.blksize);
                    reply.add(
                        INodeNo(ino),
                        next,
                        &item.name,
                        &Duration::ZERO,
                        &attr,
                        GENERATION,
                    )
                }
                (None, None) => false,
            };
            if full {
                break; // the reply buffer is full: this entry comes first next time
            }
            stream.advance();
        }
        Ok(())
    }
}
