//! A file moved between two backends of its link (decision 0073): a rename to a name whose
//! placement picks another backend, or a `user.eddy.backend` set to another backend, makes
//! the record name the new backend B while the data is still in the old one, A (the first
//! backend holding the name). The check before the next write-back (`check_one`, on the
//! metadata owner, after the conflict check) then copies it:
//!
//! 1. a move mark `m` + file id records the target and A's stamp (mtime, size);
//! 2. A's file is copied, in pieces each under the backend deadline, to a hidden name in the
//!    same directory of B (`.eddy-move-<file id>`), fsynced, renamed to the file's name
//!    there, and B's directory fsynced: B holds the name only once it holds every byte;
//! 3. the mark says "copied";
//! 4. every other backend's copy (A's) is removed;
//! 5. the record takes B's stamp, and the mark goes.
//!
//! Until step 4, reads find A's copy (or B's identical one); the chunk owners' dirty chunks
//! are written back after the check, to B. A crash or an error leaves the record naming B
//! and the data in A (and the dirty chunks in Eddy); the next check starts again (from what
//! the hidden copy holds, if A's stamp is still the one the mark recorded), or, after step
//! 3, removes A's copy. A name held by two backends is never written back by eviction
//! (`evict.rs`), so a copy the move will remove is never changed meanwhile.

use super::{rec_err, stores, Tier};
use crate::backend::{reach, reach_existing, read_entry, BackendEntry};
use crate::meta::MetaStore;
use eddy_proto::{Errno, FileId, Inode, TierState, Timespec};
use std::path::{Path, PathBuf};
use std::time::Instant;

const MOVING: u8 = b'm';
/// Bytes copied by one backend call of a move.
const PIECE: u64 = 8 << 20;

fn mark_key(id: FileId) -> Vec<u8> {
    let mut key = Vec::with_capacity(17);
    key.push(MOVING);
    key.extend_from_slice(&id.to_be_bytes());
    key
}

/// A move under way: its target backend, whether the copy is complete there, and the stamp
/// of the source copy it is made from.
#[derive(Debug, PartialEq)]
struct Moving {
    to: String,
    copied: bool,
    from: (Timespec, u64),
}

impl Moving {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(21 + self.to.len());
        v.push(u8::from(self.copied));
        v.extend_from_slice(&self.from.0.sec.to_be_bytes());
        v.extend_from_slice(&self.from.0.nsec.to_be_bytes());
        v.extend_from_slice(&self.from.1.to_be_bytes());
        v.extend_from_slice(self.to.as_bytes());
        v
    }

    fn decode(v: &[u8]) -> Option<Moving> {
        let sec = i64::from_be_bytes(v.get(1..9)?.try_into().ok()?);
        let nsec = u32::from_be_bytes(v.get(9..13)?.try_into().ok()?);
        let size = u64::from_be_bytes(v.get(13..21)?.try_into().ok()?);
        Some(Moving {
            to: String::from_utf8(v.get(21..)?.to_vec()).ok()?,
            copied: *v.first()? != 0,
            from: (Timespec { sec, nsec }, size),
        })
    }
}

/// The hidden name the copy is made under, beside `dst`.
fn hidden(dst: &Path, id: FileId) -> PathBuf {
    dst.with_file_name(format!(".eddy-move-{id:032x}"))
}

/// The hidden copy `tmp`, opened for writing (made 0600 if missing, never through a link).
fn open_copy(tmp: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(reach(tmp)?.path())
}

/// Copies `[at, at + PIECE)` of `src` into `tmp` (made if missing); returns the bytes copied.
fn copy_piece(src: &Path, tmp: &Path, at: u64) -> std::io::Result<u64> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let from = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(reach(src)?.path())?;
    let to = open_copy(tmp)?;
    let mut buf = vec![0u8; PIECE as usize];
    let mut done = 0u64;
    while done < PIECE {
        let n = from.read_at(&mut buf[done as usize..], at + done)?;
        if n == 0 {
            break;
        }
        to.write_all_at(&buf[done as usize..done as usize + n], at + done)?;
        done += n as u64;
    }
    Ok(done)
}

/// fsyncs the directory holding `p`.
fn sync_dir(p: &Path) -> std::io::Result<()> {
    if let Some(dir) = p.parent() {
        std::fs::File::open(reach(dir)?.path())?.sync_all()?;
    }
    Ok(())
}

/// Ends the copy: `tmp` cut to `size`, fsynced, renamed to `dst`, the directory fsynced.
fn land(tmp: &Path, dst: &Path, size: u64) -> std::io::Result<Option<BackendEntry>> {
    let f = open_copy(tmp)?;
    f.set_len(size)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(reach(tmp)?.path(), reach(dst)?.path())?;
    sync_dir(dst)?;
    read_entry(dst)
}

/// Removes a backend file (gone already is fine) and fsyncs its directory.
fn remove_copy(p: &Path) -> std::io::Result<()> {
    let Some(reached) = reach_existing(p)? else {
        return Ok(());
    };
    match std::fs::remove_file(reached.path()) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    }
    sync_dir(p)
}

impl Tier {
    fn moving(&self, id: FileId) -> Result<Option<Moving>, Errno> {
        let v = self
            .records
            .get(mark_key(id))
            .map_err(|e| rec_err("read", e))?;
        Ok(v.and_then(|v| Moving::decode(&v)))
    }

    fn set_moving(&self, id: FileId, m: &Moving) -> Result<(), Errno> {
        self.records
            .insert(mark_key(id), m.encode())
            .map_err(|e| rec_err("insert", e))
    }

    pub(super) fn clear_moving(&self, id: FileId) -> Result<(), Errno> {
        self.records
            .remove(mark_key(id))
            .map_err(|e| rec_err("remove", e))
    }

    /// The backend the file `ino` at `p`, now in backend `held`, is to move to: the one its
    /// `user.eddy.backend` names, when that is another backend of its link. Never for a file
    /// with several names (a hard link spans one backend) nor an identity record.
    pub(super) fn move_target(&self, ino: &Inode, p: &str, held: usize) -> Option<usize> {
        if ino.shared.is_some() || eddy_proto::path::parse_identity(p).is_some() {
            return None;
        }
        let (_, range) = self.backend.stores_for(p).filter(|(_, r)| r.len() > 1)?;
        let name = stores::named(ino)?;
        let j = range
            .into_iter()
            .find(|j| self.backend.store(*j).name == name)?;
        (j != held).then_some(j)
    }

    /// At the check of the dirty file `p` (its record `ino` under `key`, locked by the
    /// caller), before the conflict check: a move whose copy is complete is finished (the
    /// other copies removed, the record stamped); one cut short before that is dropped when
    /// the file no longer asks for it. Returns the backend and entry of a finished move.
    pub(super) fn resume_move(
        &self,
        meta: &MetaStore,
        key: &[u8],
        ino: &mut Inode,
        p: &str,
    ) -> Result<Option<(usize, BackendEntry)>, Errno> {
        let Some(m) = self.moving(ino.file_id)? else {
            return Ok(None);
        };
        let Some((_, range)) = self.backend.stores_for(p) else {
            return self.clear_moving(ino.file_id).map(|()| None);
        };
        let to = range.clone().find(|j| self.backend.store(*j).name == m.to);
        let holders = self.backend.holders(p)?;
        // Copied: the mark says so, or the target is the first backend holding the name (a
        // crash between the rename into place and the mark: before the move, the name was
        // not in the target, or the file would have been there).
        let first = holders.first().map(|(i, _)| *i);
        match to {
            Some(j) if (m.copied || first == Some(j)) && holders.iter().any(|(h, _)| *h == j) => {
                self.finish_move(meta, key, ino, p, j, &holders).map(Some)
            }
            _ if m.copied => {
                // The copy it made is gone (unlinked, or the backend changed by hand).
                self.clear_moving(ino.file_id).map(|()| None)
            }
            _ => {
                let asked = holders
                    .first()
                    .and_then(|(i, _)| self.move_target(ino, p, *i));
                if asked.is_some() && asked == to {
                    return Ok(None); // `move_file` takes it up again
                }
                if let Some(j) = to {
                    let tmp = hidden(&self.backend.store_path(j, p), ino.file_id);
                    self.backend
                        .run("move", &tmp.clone(), move || remove_copy(&tmp))
                        .map_err(|e| self.at_store(j, e))?;
                }
                self.clear_moving(ino.file_id).map(|()| None)
            }
        }
    }

    /// Moves the file `p` (its record `ino` under `key`, locked by the caller) from backend
    /// `from`, which holds it, to backend `to` (see the module's steps); stops with EAGAIN
    /// at `deadline`, to go on at the next check. Returns the new backend entry.
    pub(super) fn move_file(
        &self,
        meta: &MetaStore,
        key: &[u8],
        ino: &mut Inode,
        p: &str,
        (from, to): (usize, usize),
        deadline: Instant,
    ) -> Result<BackendEntry, Errno> {
        self.writable(to, p)?;
        let src = self.backend.store_path(from, p);
        let dst = self.backend.store_path(to, p);
        let tmp = hidden(&dst, ino.file_id);
        let there = self
            .backend
            .entry(&src)?
            .ok_or_else(|| Errno::eio(format!("{p}: its copy in the backend is gone")))?;
        let stamp = (there.stat.mtime, there.stat.size);
        let size = stamp.1;
        let store = self.backend.store(to).clone();
        let why = self
            .backend
            .run("move", &dst, move || room(&store, size))
            .map_err(|e| self.at_store(to, e))?;
        if let Err(why) = why {
            return Err(self.at_store(
                to,
                Errno::new(
                    libc::ENOSPC,
                    format!(
                        "{p} is not moved there from {}: {why}; it stays there and dirty in Eddy",
                        self.backend.store_label(from)
                    ),
                ),
            ));
        }
        // Go on from what an earlier check copied, if the source is unchanged since.
        let want = Moving {
            to: self.backend.store(to).name.clone(),
            copied: false,
            from: stamp,
        };
        let mut at = 0;
        if self.moving(ino.file_id)?.as_ref() == Some(&want) {
            let t = tmp.clone();
            at = self
                .backend
                .run("move", &tmp, move || {
                    Ok(read_entry(&t)?.map_or(0, |e| e.stat.size))
                })
                .map_err(|e| self.at_store(to, e))?
                .min(size);
        } else {
            let t = tmp.clone();
            self.backend
                .run("move", &tmp, move || remove_copy(&t))
                .map_err(|e| self.at_store(to, e))?;
            self.set_moving(ino.file_id, &want)?;
        }
        self.parents_in(to, p).map_err(|e| self.at_store(to, e))?;
        while at < size {
            if Instant::now() >= deadline {
                return Err(Errno::new(
                    libc::EAGAIN,
                    format!(
                        "{p}: moving from {} to {}: {at} of {size} bytes copied in this \
                         write-back's time; the next stage-out or `eddy writeback` goes on \
                         (the file stays where it is and dirty in Eddy until then)",
                        self.backend.store_label(from),
                        self.backend.store_label(to)
                    ),
                ));
            }
            let (s, t) = (src.clone(), tmp.clone());
            let n = self
                .backend
                .run("move", &tmp, move || copy_piece(&s, &t, at))
                .map_err(|e| self.at_store(to, e))?;
            if n == 0 {
                break; // shorter than it was: `land` cuts it to its size
            }
            self.backend.per_store[from].read(n);
            self.backend.per_store[to].wrote(n);
            at += n;
        }
        let (t, d) = (tmp.clone(), dst.clone());
        self.backend
            .run("move", &dst, move || land(&t, &d, size))
            .map_err(|e| self.at_store(to, e))?;
        self.set_moving(
            ino.file_id,
            &Moving {
                copied: true,
                ..want
            },
        )?;
        let holders = self.backend.holders(p)?;
        let (_, entry) = self.finish_move(meta, key, ino, p, to, &holders)?;
        tracing::info!(
            path = p,
            from = self.backend.store(from).name.as_str(),
            to = self.backend.store(to).name.as_str(),
            bytes = size,
            "moved a file between backends"
        );
        Ok(entry)
    }

    /// Steps 4 and 5: the copies of `p` in the backends other than `to` removed, the record
    /// stamped with the copy in `to`, the move mark cleared.
    fn finish_move(
        &self,
        meta: &MetaStore,
        key: &[u8],
        ino: &mut Inode,
        p: &str,
        to: usize,
        holders: &[(usize, PathBuf)],
    ) -> Result<(usize, BackendEntry), Errno> {
        for (i, bp) in holders.iter().filter(|(i, _)| *i != to) {
            self.writable(*i, p)?;
            let bp = bp.clone();
            self.backend
                .run("move", &bp.clone(), move || remove_copy(&bp))
                .map_err(|e| self.at_store(*i, e))?;
        }
        let dst = self.backend.store_path(to, p);
        let entry = self
            .backend
            .entry(&dst)
            .map_err(|e| self.at_store(to, e))?
            .ok_or_else(|| {
                self.at_store(to, Errno::eio(format!("{p}: the copy moved there is gone")))
            })?;
        stores::record_name(ino, &self.backend.store(to).name);
        let dirty = ino.tier.is_none_or(|t| t.dirty);
        ino.tier = Some(TierState {
            backend_mtime: entry.stat.mtime,
            backend_size: entry.stat.size,
            dirty,
        });
        meta.put(key, ino, true)?;
        self.backend.per_store[to].placed(entry.stat.size);
        self.clear_moving(ino.file_id)?;
        Ok((to, entry))
    }
}

use stores::room;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunks::ChunkStore;
    use eddy_config::{BackendDecl, Config, Link, BACKEND_XATTR};
    use eddy_proto::XattrSet;

    /// The stores as `eddyd` opens them, with `/in` linked to backend `a` (its default) and
    /// a second backend `b`.
    struct Stores {
        _root: tempfile::TempDir,
        a: tempfile::TempDir,
        b: tempfile::TempDir,
        meta: MetaStore,
        _chunks: ChunkStore,
        tier: Tier,
    }

    fn stores() -> Stores {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let decl = |name: &str, path: &Path| BackendDecl {
            name: name.into(),
            prefix: "/in".into(),
            path: path.to_path_buf(),
            kind: String::new(),
            capacity_bytes: 0,
            read_only: false,
        };
        let config = Config {
            links: vec![Link {
                prefix: "/in".into(),
                backend: a.path().to_owned(),
            }],
            backends: vec![decl("a", a.path()), decl("b", b.path())],
            ..Config::default()
        };
        let (meta, chunks, tier) = crate::tier::tests::open_with_meta(root.path(), &config);
        Stores {
            _root: root,
            a,
            b,
            meta,
            _chunks: chunks,
            tier,
        }
    }

    /// `/in/f` imported from backend a, then asked to move to b (its attribute).
    fn asked_to_move(s: &Stores, data: &[u8]) -> Inode {
        std::fs::write(s.a.path().join("f"), data).unwrap();
        s.meta.stat("/in/f", &s.tier).unwrap();
        s.meta
            .set_xattr(
                "/in/f",
                BACKEND_XATTR,
                b"b".to_vec(),
                XattrSet::Any,
                &s.tier,
            )
            .unwrap();
        let ino = s.meta.stat("/in/f", &s.tier).unwrap();
        assert!(ino.tier.is_some_and(|t| t.dirty), "to be written back");
        ino
    }

    fn check(s: &Stores) -> Vec<eddy_proto::FileOutcome> {
        let (out, _) = s
            .tier
            .check_dirty(&s.meta, "/in", None, 100, (false, &[]))
            .unwrap();
        out
    }

    #[test]
    fn a_move_cut_short_after_its_copy_is_finished_by_the_next_check() {
        let s = stores();
        let data = b"every byte of the file".to_vec();
        let ino = asked_to_move(&s, &data);
        // A crash after step 3: both backends hold the file, the mark says "copied".
        std::fs::write(s.b.path().join("f"), &data).unwrap();
        let there = read_entry(&s.a.path().join("f")).unwrap().unwrap();
        let m = Moving {
            to: "b".into(),
            copied: true,
            from: (there.stat.mtime, there.stat.size),
        };
        s.tier.set_moving(ino.file_id, &m).unwrap();
        let out = check(&s);
        assert!(out.iter().all(|o| o.error.is_none()), "{out:?}");
        assert!(!s.a.path().join("f").exists(), "the old copy removed");
        assert_eq!(std::fs::read(s.b.path().join("f")).unwrap(), data);
        assert_eq!(s.tier.moving(ino.file_id).unwrap(), None);
        let now = s.meta.stat("/in/f", &s.tier).unwrap();
        assert_eq!(stores::named(&now), Some("b"));
    }

    #[test]
    fn a_move_cut_short_before_its_copy_replaces_what_the_target_held() {
        let s = stores();
        let data = b"the file's own bytes, newer".to_vec();
        let ino = asked_to_move(&s, &data);
        // A crash before step 3, over a stale copy of the same name in b, and a hidden copy
        // half made: the mark says "copying".
        std::fs::write(s.b.path().join("f"), b"stale").unwrap();
        std::fs::write(hidden(&s.b.path().join("f"), ino.file_id), b"the f").unwrap();
        let m = Moving {
            to: "b".into(),
            copied: false,
            from: (Timespec { sec: 1, nsec: 0 }, 3),
        };
        s.tier.set_moving(ino.file_id, &m).unwrap();
        let out = check(&s);
        assert!(out.iter().all(|o| o.error.is_none()), "{out:?}");
        assert!(!s.a.path().join("f").exists(), "the old copy removed");
        assert_eq!(std::fs::read(s.b.path().join("f")).unwrap(), data);
        assert_eq!(
            std::fs::read_dir(s.b.path()).unwrap().count(),
            1,
            "no hidden copy left"
        );
        assert_eq!(s.tier.moving(ino.file_id).unwrap(), None);
    }

    #[test]
    fn a_move_mark_reads_back() {
        let m = Moving {
            to: "archive".into(),
            copied: true,
            from: (Timespec { sec: -3, nsec: 7 }, 1 << 40),
        };
        assert_eq!(Moving::decode(&m.encode()), Some(m));
        assert_eq!(Moving::decode(b"short"), None);
    }
}
