//! Moving data between the backend and the cache on request: stage-in (every daemon fetches
//! its own chunks of the named files and trees, in parallel), stage-out (every daemon writes
//! back its own dirty chunks, then the metadata owners finalise the files: create, size,
//! mode, times) and unpinning. Results are per file; progress is reported as it comes.

use crate::data::Data;
use crate::paging::{moved, Pages};
use crate::{Errno, FileKind};
use eddy_proto::{req, FileId, FileOutcome, Flushed, Rpc};
use futures::stream::{self, StreamExt};
use std::collections::{BTreeMap, HashSet};

/// Files staged in at once.
const STAGE_IN_FILES: usize = 16;
/// Chunks per prefetch request: small enough that a daemon fetches a file's chunks on
/// several threads at once.
const PREFETCH_CHUNKS: usize = 4;
/// Files per flush or finalisation request.
const FLUSH_PAGE: u32 = 64;
/// Files an early write-back pass writes back at once (each on every daemon at once).
const EARLY_FILES: usize = 4;

/// What happened to one file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FileResult {
    /// Namespace path.
    pub path: String,
    /// Bytes moved (fetched from or written to the backend).
    pub bytes: u64,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

impl Data<'_> {
    /// Prefetches the files under `paths` (files or trees of linked prefixes) into the cache;
    /// `pin` keeps their chunks from eviction. `progress` sees each file's result as it
    /// ends. A path that is not linked, or does not exist, is a failed result.
    pub async fn stage_in(
        &self,
        paths: &[String],
        pin: bool,
        progress: &(dyn Fn(&FileResult) + Sync),
    ) -> Vec<FileResult> {
        self.fetch_files(paths, pin, STAGE_IN_FILES, progress).await
    }

    /// `stage_in` without pins, `prefetch_files` files at a time (`eddy prefetch`, a job's
    /// `#EDDY prefetch`: a fetch that runs beside the reads of a job, which does not wait
    /// for it).
    pub async fn prefetch(
        &self,
        paths: &[String],
        progress: &(dyn Fn(&FileResult) + Sync),
    ) -> Vec<FileResult> {
        let at_once = self.config().prefetch_files.max(1) as usize;
        self.fetch_files(paths, false, at_once, progress).await
    }

    /// The files under `paths` fetched into the cache, `at_once` files at a time.
    async fn fetch_files(
        &self,
        paths: &[String],
        pin: bool,
        at_once: usize,
        progress: &(dyn Fn(&FileResult) + Sync),
    ) -> Vec<FileResult> {
        let mut files = Vec::new();
        let mut results = Vec::new();
        for p in paths {
            match self.collect_files(p).await {
                Ok(mut f) => files.append(&mut f),
                Err(e) => {
                    let r = FileResult {
                        path: p.clone(),
                        bytes: 0,
                        error: Some(e.to_string()),
                    };
                    progress(&r);
                    results.push(r);
                }
            }
        }
        let mut staged: Vec<FileResult> = stream::iter(files)
            .map(|path| async move {
                let r = match self.stage_in_file(&path, pin).await {
                    Ok(bytes) => FileResult {
                        path,
                        bytes,
                        error: None,
                    },
                    Err(e) => FileResult {
                        path,
                        bytes: 0,
                        error: Some(e.to_string()),
                    },
                };
                progress(&r);
                r
            })
            .buffer_unordered(at_once)
            .collect()
            .await;
        results.append(&mut staged);
        results
    }

    /// The regular files at or under a namespace path, which must be linked.
    async fn collect_files(&self, p: &str) -> Result<Vec<String>, Errno> {
        let p = self.norm(p)?;
        if self.config().link_for(&p).is_none() {
            return Err(Errno::einval(format!(
                "{p} is not under a linked prefix: only backend data can be staged"
            )));
        }
        let top = self.stat(&p).await?;
        let mut files = Vec::new();
        let mut dirs = match top.kind {
            FileKind::Dir => vec![p],
            FileKind::File => return Ok(vec![p]),
            // Symlinks and special files have no data to stage.
            _ => return Ok(Vec::new()),
        };
        // The daemons' listings are bounded one by one (`DirReader`), the tree as a whole
        // here: a daemon inventing directories within directories ends at the bound.
        let max = self.config().max_paged_entries;
        let mut seen: u64 = 0;
        while let Some(dir) = dirs.pop() {
            let mut reader = self.readdir(&dir, None)?;
            while let Some(page) = reader.next_page().await? {
                seen = seen.saturating_add(page.len() as u64);
                if seen > max {
                    return Err(Errno::eio(format!(
                        "the tree being staged holds more than max_paged_entries ({max}) \
                         entries (at {dir}): not staged"
                    )));
                }
                for e in page {
                    let child = eddy_proto::path::join(&dir, &e.name);
                    match e.inode.kind {
                        FileKind::Dir => dirs.push(child),
                        FileKind::File => files.push(child),
                        _ => {}
                    }
                }
            }
        }
        files.sort();
        Ok(files)
    }

    /// Fetches every chunk of one linked file on the daemons that own them, all at once.
    pub(crate) async fn stage_in_file(&self, path: &str, pin: bool) -> Result<u64, Errno> {
        let f = self
            .open(path, libc::O_RDONLY, 0, crate::Creds::root())
            .await?;
        let Some(backing) = f.backing() else {
            return Err(Errno::einval(format!("{path} is not a linked file")));
        };
        let cs = self.config().chunk_size;
        let chunks = f.inode().size.div_ceil(cs);
        let mut by_daemon: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for k in 0..chunks {
            by_daemon
                .entry(self.rpc().placement().chunk_owner(f.file_id(), k))
                .or_default()
                .push(k);
        }
        let calls = by_daemon.into_iter().flat_map(|(daemon, ks)| {
            ks.chunks(PREFETCH_CHUNKS)
                .map(|batch| {
                    let req = req::Prefetch {
                        file_id: f.file_id(),
                        chunks: batch.to_vec(),
                        backing: backing.clone(),
                        pin,
                    };
                    self.rpc().call(daemon, req)
                })
                .collect::<Vec<_>>()
        });
        let mut bytes = 0;
        for r in futures::future::join_all(calls).await {
            bytes += r?;
        }
        Ok(bytes)
    }

    /// The prefixes a stage-out or unpin of `paths` covers: the paths themselves (each must
    /// be linked), or every linked prefix when none is given.
    fn linked_prefixes(&self, paths: &[String]) -> Result<Vec<String>, Errno> {
        if paths.is_empty() {
            return Ok(self
                .config()
                .links
                .iter()
                .map(|l| l.prefix.clone())
                .collect());
        }
        paths
            .iter()
            .map(|p| {
                let n = self.norm(p)?;
                match self.config().link_for(&n) {
                    Some(_) => Ok(n),
                    None => Err(Errno::einval(format!("{n} is not under a linked prefix"))),
                }
            })
            .collect()
    }

    /// Writes every dirty file under `paths` (all linked prefixes when empty) back to the
    /// backend and returns when it is durable there: first every daemon writes back its own
    /// dirty chunks (pwrite + fsync into the backend file), in parallel; then the metadata
    /// owners finalise the files (create, size, mode, times). One result per file is
    /// returned; `progress` sees each daemon's part of a file as it ends (bytes add up).
    ///
    /// A dirty file whose backend copy changed since this deployment took it (another writer,
    /// on another cache: decision 0030) is not written back: its result is the conflict
    /// (EBUSY), and its chunks are held back until a stage-out `with overwrite` lets this
    /// copy win.
    pub async fn stage_out(
        &self,
        paths: &[String],
        progress: &(dyn Fn(&FileResult) + Sync),
    ) -> Result<Vec<FileResult>, Errno> {
        self.stage_out_with(paths, false, progress).await
    }

    /// `stage_out`; with `overwrite`, the files in conflict with their backend copy are
    /// written over it.
    pub async fn stage_out_with(
        &self,
        paths: &[String],
        overwrite: bool,
        progress: &(dyn Fn(&FileResult) + Sync),
    ) -> Result<Vec<FileResult>, Errno> {
        let prefixes = self.linked_prefixes(paths)?;
        let mut merged: BTreeMap<String, FileResult> = BTreeMap::new();
        let mut failed: HashSet<FileId> = HashSet::new();
        for prefix in &prefixes {
            for o in self.check_backend(prefix, overwrite).await? {
                if o.error.is_some() {
                    failed.insert(o.file_id);
                    report(std::slice::from_ref(&o), progress);
                    merge(&mut merged, o);
                }
            }
        }
        for prefix in &prefixes {
            let outcomes = self
                .paged_everywhere(
                    |after| req::FlushDirty {
                        prefix: prefix.clone(),
                        after,
                        limit: FLUSH_PAGE,
                    },
                    next_flush_page,
                    progress,
                )
                .await?;
            for o in outcomes {
                if o.error.is_some() {
                    failed.insert(o.file_id);
                }
                merge(&mut merged, o);
            }
        }
        let skip: Vec<FileId> = failed.into_iter().collect();
        for prefix in &prefixes {
            let outcomes = self.finalize_everywhere(prefix, &skip, progress).await?;
            for o in outcomes {
                merge(&mut merged, o);
            }
        }
        Ok(merged.into_values().collect())
    }

    /// Early write-back (decision 0041): the dirty data of the files under `paths` (all
    /// linked prefixes when empty) goes to the backend while the job may still be writing,
    /// and the files stay dirty, to be finalised by the stage-out at the job's end. The
    /// files are checked against their backend copies as a stage-out checks them (decision
    /// 0030): those in conflict are held back and reported (EBUSY), and only the files that
    /// passed the check, which marks them as being written back by this deployment, have
    /// their dirty chunks written back, one file at a time on every daemon at once. A chunk
    /// written to after a pass read it stays dirty (the tier's chunk versions), so nothing
    /// written meanwhile is marked clean. One result per file (bytes add up over daemons).
    pub async fn write_back_early(
        &self,
        paths: &[String],
        progress: &(dyn Fn(&FileResult) + Sync),
    ) -> Result<Vec<FileResult>, Errno> {
        let prefixes = self.linked_prefixes(paths)?;
        let mut merged: BTreeMap<String, FileResult> = BTreeMap::new();
        let mut passed: Vec<String> = Vec::new();
        for prefix in &prefixes {
            for o in self.check_backend(prefix, false).await? {
                if o.error.is_some() {
                    report(std::slice::from_ref(&o), progress);
                    merge(&mut merged, o);
                } else {
                    passed.push(o.path);
                }
            }
        }
        let flushed: Vec<Result<Vec<FileOutcome>, Errno>> = stream::iter(passed)
            .map(|file| async move {
                self.paged_everywhere(
                    |after| req::FlushDirty {
                        prefix: file.clone(),
                        after,
                        limit: FLUSH_PAGE,
                    },
                    next_flush_page,
                    progress,
                )
                .await
            })
            .buffer_unordered(EARLY_FILES)
            .collect()
            .await;
        for outcomes in flushed {
            for o in outcomes? {
                merge(&mut merged, o);
            }
        }
        Ok(merged.into_values().collect())
    }

    /// Runs a paged flush on every daemon at once, each daemon's pages in turn: `make(cursor)`
    /// asks for the page after `cursor`, `next(page, cursor)` moves the cursor past a page.
    ///
    /// The pages are the daemons' (the job's user's) to make: each must hold at most
    /// `FLUSH_PAGE` files and move the cursor on, or write bytes of the file it cut short (a
    /// flush's time budget), and a daemon's series at most `max_paged_entries` (`Pages`).
    async fn paged_everywhere<C, R, M, N>(
        &self,
        make: M,
        next: N,
        progress: &(dyn Fn(&FileResult) + Sync),
    ) -> Result<Vec<FileOutcome>, Errno>
    where
        C: Clone + Ord,
        R: Rpc<Reply = Flushed>,
        M: Fn(Option<C>) -> R,
        N: Fn(&[FileOutcome], Option<C>) -> Option<C>,
    {
        let max = self.config().max_paged_entries;
        let ids = self.rpc().ids();
        let per_daemon = ids.iter().map(|&id| {
            let (make, next) = (&make, &next);
            async move {
                let mut out: Vec<FileOutcome> = Vec::new();
                let mut cursor = None;
                let mut pages = Pages::new(R::OP.name(), id, max);
                loop {
                    let Flushed { files, more } = self.rpc().call(id, make(cursor.clone())).await?;
                    let after = next(&files, cursor.clone());
                    let cut_short = files.iter().any(|f| !f.complete && f.bytes > 0);
                    let moved = moved(cursor.as_ref(), after.as_ref()) || cut_short;
                    pages.take(files.len(), FLUSH_PAGE, more, moved)?;
                    cursor = after;
                    report(&files, progress);
                    // A file cut short comes again on the next page: one outcome, its bytes
                    // summed, so what is kept grows with files, not with pages.
                    for f in files {
                        match out.last_mut() {
                            Some(l) if l.file_id == f.file_id && !l.complete => {
                                l.bytes = l.bytes.saturating_add(f.bytes);
                                l.error = l.error.take().or(f.error);
                                l.complete = f.complete;
                            }
                            _ => out.push(f),
                        }
                    }
                    if !more {
                        return Ok(out);
                    }
                }
            }
        });
        let mut all = Vec::new();
        for r in futures::future::join_all(per_daemon).await {
            all.extend(r?);
        }
        Ok(all)
    }

    /// The metadata owners check their dirty files under `prefix` against the backend
    /// (decision 0030), and the daemons holding their chunks hold back those in conflict
    /// (EBUSY; with `overwrite`, let go of every file that passed). Returns the outcomes of
    /// the check.
    async fn check_backend(
        &self,
        prefix: &str,
        overwrite: bool,
    ) -> Result<Vec<FileOutcome>, Errno> {
        // What eviction wrote back already changed the backend copy by this deployment's
        // hand: not a conflict.
        let mut ours: Vec<FileId> = Vec::new();
        for written in self
            .rpc()
            .all_ok(|| req::WrittenBack {
                prefix: prefix.to_string(),
            })
            .await?
        {
            ours.extend(written.files.iter().map(|f| f.file_id));
        }
        ours.sort_unstable();
        ours.dedup();
        let checked = self
            .paged_everywhere(
                |after| req::CheckBackend {
                    prefix: prefix.to_string(),
                    after,
                    limit: FLUSH_PAGE,
                    overwrite,
                    ours: ours.clone(),
                },
                |files, after| files.last().map(|f| f.path.clone()).or(after),
                &|_| {},
            )
            .await?;
        let conflict = |o: &&FileOutcome| o.error.as_ref().is_some_and(|e| e.errno == libc::EBUSY);
        let conflicts: Vec<&FileOutcome> = checked.iter().filter(conflict).collect();
        let clear: Vec<&FileOutcome> = checked.iter().filter(|o| o.error.is_none()).collect();
        let hold = |files: Vec<&FileOutcome>, hold: bool| {
            let files: Vec<FileId> = files.iter().map(|o| o.file_id).collect();
            async move {
                if files.is_empty() {
                    return Ok(());
                }
                self.rpc()
                    .all_ok(|| req::HoldBack {
                        files: files.clone(),
                        hold,
                    })
                    .await
                    .map(|_| ())
            }
        };
        hold(conflicts, true).await?;
        if overwrite {
            hold(clear, false).await?;
        }
        Ok(checked)
    }

    /// The metadata owners finalise the written-back files under `prefix` (all but `skip`).
    async fn finalize_everywhere(
        &self,
        prefix: &str,
        skip: &[FileId],
        progress: &(dyn Fn(&FileResult) + Sync),
    ) -> Result<Vec<FileOutcome>, Errno> {
        self.paged_everywhere(
            |after| req::FinalizeDirty {
                prefix: prefix.to_string(),
                skip: skip.to_vec(),
                after,
                limit: FLUSH_PAGE,
            },
            |files, after| files.last().map(|f| f.path.clone()).or(after),
            progress,
        )
        .await
    }

    /// Releases the pins of cached chunks under `paths` (all linked prefixes when empty);
    /// returns how many chunks were pinned.
    pub async fn unpin(&self, paths: &[String]) -> Result<u64, Errno> {
        let mut n = 0;
        for prefix in self.linked_prefixes(paths)? {
            for r in self
                .rpc()
                .all_ok(|| req::Unpin {
                    prefix: prefix.clone(),
                })
                .await?
            {
                n += r;
            }
        }
        Ok(n)
    }
}

/// Shows each outcome of a page to `progress`.
fn report(files: &[FileOutcome], progress: &(dyn Fn(&FileResult) + Sync)) {
    for o in files {
        progress(&FileResult {
            path: o.path.clone(),
            bytes: o.bytes,
            error: o.error.as_ref().map(|e| e.to_string()),
        });
    }
}

/// Adds one daemon's outcome for a file to the file's result.
fn merge(merged: &mut BTreeMap<String, FileResult>, o: FileOutcome) {
    let r = merged.entry(o.path.clone()).or_insert(FileResult {
        path: o.path,
        bytes: 0,
        error: None,
    });
    r.bytes += o.bytes;
    if let (None, Some(e)) = (&r.error, o.error) {
        r.error = Some(e.to_string());
    }
}

/// Where the next page of a `FlushDirty` starts: after the last file written back whole (a
/// file cut short by the daemon's time budget comes again next page).
fn next_flush_page(files: &[FileOutcome], after: Option<FileId>) -> Option<FileId> {
    files
        .iter()
        .filter(|f| f.complete)
        .map(|f| f.file_id)
        .max()
        .or(after)
}
