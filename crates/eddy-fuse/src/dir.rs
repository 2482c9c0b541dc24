//! State of one open directory: a cursor over the listing that lets a continuing `readdir`
//! resume where the previous one stopped, holding at most one page of entries.
//!
//! Offsets handed to the kernel are positions 1, 2, 3, ...: "." is position 0 (offset 1),
//! ".." position 1 (offset 2), then the entries in listing order. A request for the offset
//! of the current position continues; a larger one skips forward; a smaller one (rewinddir,
//! seekdir backwards) restarts the listing from the beginning and skips.

use crate::attr::file_type;
use eddy_client::driver::Driver;
use eddy_client::{Client, DirReader};
use eddy_proto::{DirEntry, Errno};
use fuser::FileType;
use std::collections::VecDeque;

/// One item of a listing, as handed to the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    pub name: String,
    pub kind: FileType,
    /// Known for "." and ".."; for other entries the caller asks the inode table.
    pub ino: Option<u64>,
    /// The listed entry (not for "." and "..").
    pub entry: Option<DirEntry>,
}

/// Where the next entries come from.
pub(crate) trait Source {
    /// The next page of entries; `None` at the end.
    fn next_page(&mut self) -> Result<Option<Vec<DirEntry>>, Errno>;
}

/// A `DirReader` driven from a FUSE thread.
struct ReaderSource<'a> {
    reader: &'a mut DirReader,
    driver: &'a Driver,
}

impl Source for ReaderSource<'_> {
    fn next_page(&mut self) -> Result<Option<Vec<DirEntry>>, Errno> {
        self.driver.drive(self.reader.next_page())
    }
}

/// Cursor state of one open directory.
pub(crate) struct DirStream {
    path: String,
    ino: u64,
    parent_ino: u64,
    /// Created on first use, dropped on restart.
    reader: Option<DirReader>,
    /// Entries fetched but not yet handed out (at most one page).
    page: VecDeque<DirEntry>,
    /// The reader said there is nothing more.
    done: bool,
    /// Items handed out so far (= offset of the last one).
    pos: u64,
}

impl DirStream {
    pub(crate) fn new(path: String, ino: u64, parent_ino: u64) -> DirStream {
        DirStream {
            path,
            ino,
            parent_ino,
            reader: None,
            page: VecDeque::new(),
            done: false,
            pos: 0,
        }
    }

    /// Path of the directory as it was opened.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// Items handed out so far; the offset to give the kernel for `current` is this + 1.
    pub(crate) fn position(&self) -> u64 {
        self.pos
    }

    /// Moves the cursor to `offset`, the offset of the last item the kernel received.
    pub(crate) fn seek(
        &mut self,
        offset: u64,
        client: &Client,
        driver: &Driver,
    ) -> Result<(), Errno> {
        if offset < self.pos {
            self.restart();
        }
        while self.pos < offset {
            if self.current(client, driver)?.is_none() {
                break;
            }
            self.advance();
        }
        Ok(())
    }

    /// The item at the cursor, without consuming it; `None` at the end.
    pub(crate) fn current(
        &mut self,
        client: &Client,
        driver: &Driver,
    ) -> Result<Option<Item>, Errno> {
        if self.pos >= 2 && self.page.is_empty() && !self.done {
            let mut reader = match self.reader.take() {
                Some(reader) => reader,
                None => client.readdir(&self.path, None)?,
            };
            let filled = self.fill(&mut ReaderSource {
                reader: &mut reader,
                driver,
            });
            self.reader = Some(reader);
            filled?;
        }
        Ok(self.peek())
    }

    /// Consumes the item at the cursor.
    pub(crate) fn advance(&mut self) {
        if self.pos >= 2 {
            self.page.pop_front();
        }
        self.pos += 1;
    }

    /// Fetches pages until one has an entry or the listing ends.
    fn fill(&mut self, source: &mut dyn Source) -> Result<(), Errno> {
        while self.page.is_empty() && !self.done {
            match source.next_page()? {
                // Files unlinked while open live on under a hidden name until closed.
                Some(entries) => self.page.extend(
                    entries
                        .into_iter()
                        .filter(|e| !crate::fs::is_hidden_orphan(&e.name)),
                ),
                None => self.done = true,
            }
        }
        Ok(())
    }

    /// The item at the cursor from what is buffered.
    fn peek(&self) -> Option<Item> {
        match self.pos {
            0 => Some(Item {
                name: ".".into(),
                kind: FileType::Directory,
                ino: Some(self.ino),
                entry: None,
            }),
            1 => Some(Item {
                name: "..".into(),
                kind: FileType::Directory,
                ino: Some(self.parent_ino),
                entry: None,
            }),
            _ => self.page.front().map(|e| Item {
                name: e.name.clone(),
                kind: file_type(e.inode.kind),
                ino: None,
                entry: Some(e.clone()),
            }),
        }
    }

    fn restart(&mut self) {
        self.reader = None;
        self.page.clear();
        self.done = false;
        self.pos = 0;
    }

    /// Test hook: like `current`, with another source of pages.
    #[cfg(test)]
    fn current_from(&mut self, source: &mut dyn Source) -> Result<Option<Item>, Errno> {
        if self.pos >= 2 {
            self.fill(source)?;
        }
        Ok(self.peek())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_proto::{FileKind, Inode};

    /// Pages of a fixed listing, counting how many were fetched.
    struct Pages {
        pages: VecDeque<Vec<DirEntry>>,
        fetched: usize,
    }

    impl Source for Pages {
        fn next_page(&mut self) -> Result<Option<Vec<DirEntry>>, Errno> {
            self.fetched += 1;
            Ok(self.pages.pop_front())
        }
    }

    fn entry(name: &str, kind: FileKind) -> DirEntry {
        DirEntry {
            name: name.into(),
            inode: Inode::new(kind, 0, 0o644, 0, 0),
        }
    }

    #[test]
    fn lists_dots_then_pages_one_at_a_time() {
        let mut s = DirStream::new("/d".into(), 5, 1);
        let mut src = Pages {
            pages: VecDeque::from(vec![
                vec![entry("a", FileKind::File), entry("b", FileKind::Dir)],
                vec![],
                vec![entry("c", FileKind::Symlink)],
            ]),
            fetched: 0,
        };
        let mut seen = Vec::new();
        while let Some(item) = s.current_from(&mut src).unwrap() {
            seen.push((s.position() + 1, item.name.clone(), item.kind, item.ino));
            assert!(s.page.len() <= 2, "at most one page is buffered");
            s.advance();
        }
        assert_eq!(
            seen,
            vec![
                (1, ".".to_string(), FileType::Directory, Some(5)),
                (2, "..".to_string(), FileType::Directory, Some(1)),
                (3, "a".to_string(), FileType::RegularFile, None),
                (4, "b".to_string(), FileType::Directory, None),
                (5, "c".to_string(), FileType::Symlink, None),
            ]
        );
        assert_eq!(src.fetched, 4, "three pages and the end");
        // At the end, asking again fetches nothing more.
        assert!(s.current_from(&mut src).unwrap().is_none());
        assert_eq!(src.fetched, 4);
    }

    #[test]
    fn an_unconsumed_item_is_offered_again() {
        let mut s = DirStream::new("/".into(), 1, 1);
        let mut src = Pages {
            pages: VecDeque::from(vec![vec![entry("x", FileKind::File)]]),
            fetched: 0,
        };
        s.advance();
        s.advance();
        let first = s.current_from(&mut src).unwrap();
        let again = s.current_from(&mut src).unwrap();
        assert_eq!(first, again);
        assert_eq!(first.map(|i| i.name), Some("x".to_string()));
        assert_eq!(src.fetched, 1);
    }

    #[test]
    fn restart_forgets_the_cursor() {
        let mut s = DirStream::new("/".into(), 1, 1);
        let mut src = Pages {
            pages: VecDeque::from(vec![vec![entry("x", FileKind::File)]]),
            fetched: 0,
        };
        s.advance();
        s.advance();
        assert!(s.current_from(&mut src).unwrap().is_some());
        s.restart();
        assert_eq!(s.position(), 0);
        assert!(s.page.is_empty());
        assert_eq!(
            s.current_from(&mut src).unwrap().map(|i| i.name),
            Some(".".to_string())
        );
    }
}
