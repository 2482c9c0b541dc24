//! Directory listing: every daemon holds some children of a directory (each child lives on
//! the owner of its own path), so a listing merges one sorted stream per daemon. Each stream
//! buffers one page, so memory stays bounded for a directory of any size; the cookie is the
//! last name returned.

use crate::paging::{moved, Pages};
use crate::{Client, DirEntry, Errno, Failure, FileKind};
use eddy_proto::{req, DirPage};
use futures::future::join_all;
use std::collections::VecDeque;

struct Stream {
    daemon: u32,
    buf: VecDeque<DirEntry>,
    after: Option<String>,
    done: bool,
    /// The bounds on this daemon's pages (its names ascend past the cookie, decision 0056).
    pages: Pages,
}

/// Cursor over a directory, in byte order of the names.
pub struct DirReader {
    client: Client,
    dir: String,
    streams: Vec<Stream>,
    cookie: Option<String>,
    checked: bool,
    /// Daemons left out of this listing because they could not be reached.
    unreachable: usize,
}

impl DirReader {
    pub(crate) fn new(client: Client, dir: String, after: Option<String>) -> DirReader {
        let max = client.config().max_paged_entries;
        let streams = client
            .rpc()
            .ids()
            .iter()
            .map(|&daemon| Stream {
                daemon,
                buf: VecDeque::new(),
                after: after.clone(),
                done: false,
                pages: Pages::new(format!("readdir of {dir}"), daemon, max),
            })
            .collect();
        DirReader {
            client,
            dir,
            streams,
            cookie: after,
            checked: false,
            unreachable: 0,
        }
    }

    /// The name of the last entry returned, from which a new reader can resume.
    pub fn cookie(&self) -> Option<&str> {
        self.cookie.as_deref()
    }

    /// The next page of entries (up to `readdir_page`), or `None` at the end.
    pub async fn next_page(&mut self) -> Result<Option<Vec<DirEntry>>, Errno> {
        if !self.checked {
            let d = self.client.stat(&self.dir).await?;
            if d.kind != FileKind::Dir {
                return Err(Errno::new(
                    libc::ENOTDIR,
                    format!("{} is not a directory", self.dir),
                ));
            }
            self.checked = true;
        }
        let page = self.client.config().readdir_page as usize;
        let mut out = Vec::with_capacity(page);
        while out.len() < page {
            self.refill().await?;
            let next = self
                .streams
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.buf.front().map(|e| (i, e.name.as_str())))
                .min_by(|a, b| a.1.cmp(b.1))
                .map(|(i, _)| i);
            let Some(i) = next else { break };
            let e = if self.client.replicas() > 1 {
                self.take_copies(i)
            } else {
                self.streams[i].buf.pop_front()
            };
            out.extend(e);
        }
        if let Some(last) = out.last() {
            self.cookie = Some(last.name.clone());
        }
        self.resolve_shared(&mut out).await?;
        Ok((!out.is_empty()).then_some(out))
    }

    /// With R copies, the entry at the front of stream `i` is the smallest name, and the
    /// other streams may hold copies of it at their fronts: all are taken, and the copy of
    /// the first owner of the entry's path that listed it is kept.
    fn take_copies(&mut self, i: usize) -> Option<DirEntry> {
        let name = self.streams[i].buf.front()?.name.clone();
        let mut copies: Vec<(u32, DirEntry)> = Vec::new();
        for s in &mut self.streams {
            if s.buf.front().is_some_and(|e| e.name == name) {
                if let Some(e) = s.buf.pop_front() {
                    copies.push((s.daemon, e));
                }
            }
        }
        if copies.len() > 1 {
            let owners = self
                .client
                .rpc()
                .meta_owners(&eddy_proto::path::join(&self.dir, &name));
            copies.sort_by_key(|(d, _)| owners.iter().position(|o| o == d).unwrap_or(usize::MAX));
        }
        copies.into_iter().next().map(|(_, e)| e)
    }

    /// The record of a name of a shared file holds the file as it was when it was linked:
    /// its current inode comes from the identity record (all of a page's at once).
    async fn resolve_shared(&self, entries: &mut [DirEntry]) -> Result<(), Errno> {
        let shared: Vec<(usize, u32)> = (0..entries.len())
            .filter_map(|i| entries[i].inode.shared.map(|daemon| (i, daemon)))
            .collect();
        let lookups = shared.iter().map(|&(i, daemon)| {
            let e = &entries[i];
            let path = eddy_proto::path::join(&self.dir, &e.name);
            let file_id = e.inode.file_id;
            async move {
                self.client
                    .ns()
                    .on_identity(daemon, file_id, req::Stat { path })
                    .await
            }
        });
        let inodes = join_all(lookups).await;
        for ((i, _), inode) in shared.into_iter().zip(inodes) {
            match inode {
                Ok(inode) => entries[i].inode = inode,
                // The file lost that name meanwhile: listed as it was, like any entry removed
                // during a listing.
                Err(e) if e.errno == libc::ENOENT => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Fetches the next page of every stream whose buffer ran dry, all at once.
    async fn refill(&mut self) -> Result<(), Errno> {
        let limit = self.client.config().readdir_page;
        let need: Vec<usize> = (0..self.streams.len())
            .filter(|&i| self.streams[i].buf.is_empty() && !self.streams[i].done)
            .collect();
        if need.is_empty() {
            return Ok(());
        }
        // What this client queued in the directory under a lease is listed too.
        self.client.ns().settle_dir(&self.dir).await;
        let calls = need.iter().map(|&i| {
            let s = &self.streams[i];
            let req = req::Readdir {
                dir: self.dir.clone(),
                after: s.after.clone(),
                limit,
            };
            let client = &self.client;
            async move { client.rpc().try_call(s.daemon, req).await }
        });
        let replies = join_all(calls).await;
        for (i, r) in need.into_iter().zip(replies) {
            let r = match r {
                // With R copies, what a daemon that cannot be reached holds is listed from
                // the other copies (up to R-1 such daemons).
                Err(f) if f.is_unreachable() && self.unreachable + 1 < self.client.replicas() => {
                    self.unreachable += 1;
                    self.streams[i].done = true;
                    continue;
                }
                r => r.map_err(Failure::into_errno),
            };
            let DirPage { entries, more } = r?;
            let s = &mut self.streams[i];
            // A daemon's names ascend, from past the cookie: the merge relies on it, and a
            // cookie that moves on is what ends the listing.
            let mut last = s.after.as_ref();
            let mut ascending = true;
            for e in &entries {
                ascending &= moved(last, Some(&e.name));
                last = Some(&e.name);
            }
            s.pages
                .take(entries.len(), limit, !entries.is_empty(), ascending)?;
            s.done = !more || entries.is_empty();
            if let Some(last) = entries.last() {
                s.after = Some(last.name.clone());
            }
            s.buf.extend(entries);
        }
        Ok(())
    }
}
