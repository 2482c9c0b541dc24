//! Several backends under one linked prefix (decision 0073): where an entry is (the first
//! backend of its link holding it, in their order: the link's own directory, then the
//! `[[backends]]` as declared), and where a new file goes (`place`, on its metadata owner,
//! when the check before a write-back first meets it: its `user.eddy.backend`, else the
//! first placement rule that matches, else the default backend). A placed file has an empty
//! backend file in its backend from then on, so that the daemons writing back its chunks
//! find it there as they find any imported file; its record carries the backend's name in
//! `user.eddy.backend`. A link with one backend works as it always did: nothing here is
//! asked of it beyond `locate`, which answers its own directory without a look.

use super::Tier;
use crate::backend::{reach, read_entry, BackendEntry};
use crate::meta::MetaStore;
use eddy_config::{FileFacts, BACKEND_XATTR};
use eddy_proto::{Errno, Inode, TierState, Xattr};
use std::path::{Path, PathBuf};

/// The backend named by an entry's `user.eddy.backend`, if it has one.
pub(super) fn named(ino: &Inode) -> Option<&str> {
    ino.xattrs
        .iter()
        .find(|x| x.name == BACKEND_XATTR)
        .and_then(|x| std::str::from_utf8(&x.value).ok())
}

/// Records `name` as the entry's `user.eddy.backend`.
pub(super) fn record_name(ino: &mut Inode, name: &str) {
    let value = name.as_bytes().to_vec();
    match ino
        .xattrs
        .binary_search_by(|x| x.name.as_str().cmp(BACKEND_XATTR))
    {
        Ok(i) => ino.xattrs[i].value = value,
        Err(i) => ino.xattrs.insert(
            i,
            Xattr {
                name: BACKEND_XATTR.to_string(),
                value,
            },
        ),
    }
}

/// Makes the missing directories above `p` in the backend whose directory is `top` (each
/// as the first of `like` that has it, else 0755 as the daemon's umask cuts it): a file
/// placed in a backend that lacks its directory, or a directory made in the default backend
/// below one another backend holds.
fn make_parents(top: &Path, p: &Path, like: &[PathBuf]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let Ok(rel) = p.strip_prefix(top) else {
        return Ok(());
    };
    let Some(parent) = rel.parent() else {
        return Ok(());
    };
    let mut at = top.to_path_buf();
    for c in parent.components() {
        at.push(c);
        if std::fs::symlink_metadata(reach(&at)?.path()).is_ok() {
            continue;
        }
        let mode = like
            .iter()
            .find_map(|other| {
                let there = other.join(at.strip_prefix(top).ok()?);
                std::fs::metadata(reach(&there).ok()?.path()).ok()
            })
            .filter(std::fs::Metadata::is_dir)
            .map(|m| m.permissions().mode() & 0o7777);
        let reached = reach(&at)?;
        match std::fs::DirBuilder::new()
            .mode(mode.unwrap_or(0o755))
            .create(reached.path())
        {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            other => other?,
        }
        if let Some(mode) = mode {
            std::fs::set_permissions(reached.path(), std::fs::Permissions::from_mode(mode))?;
        }
    }
    Ok(())
}

/// Whether `size` more bytes fit in the backend `store`: its file system's free space and its
/// quota (`capacity_bytes`: what its file system uses, counted as `df` does); the reason
/// when they do not.
pub(super) fn room(store: &eddy_config::Store, size: u64) -> std::io::Result<Result<(), String>> {
    let free = nix::sys::statvfs::statvfs(&store.path).map_err(std::io::Error::from)?;
    let frag = free.fragment_size();
    let avail = free.blocks_available().saturating_mul(frag);
    let used = free
        .blocks()
        .saturating_sub(free.blocks_free())
        .saturating_mul(frag);
    if size > avail {
        return Ok(Err(format!(
            "it needs {size} bytes and the backend has {avail} free"
        )));
    }
    if store.capacity_bytes > 0 && used.saturating_add(size) > store.capacity_bytes {
        return Ok(Err(format!(
            "it needs {size} bytes and the backend uses {used} of its quota of {} \
             (capacity_bytes)",
            store.capacity_bytes
        )));
    }
    Ok(Ok(()))
}

impl Tier {
    /// Where the entry `norm` is in the backend: a link with one backend, its own directory
    /// (whether or not the entry exists there); with several, the first backend holding it,
    /// `None` when none does.
    pub(super) fn locate(&self, norm: &str) -> Result<Option<(usize, PathBuf)>, Errno> {
        let Some((_, range)) = self.backend.stores_for(norm) else {
            return Ok(None);
        };
        if range.len() == 1 {
            return Ok(Some((
                range.start,
                self.backend.store_path(range.start, norm),
            )));
        }
        Ok(self.backend.holders(norm)?.into_iter().next())
    }

    /// Where the data of the file `norm` is written back: `locate`, which must have found
    /// it in a backend that is not read-only (a file of a link with several backends is
    /// placed by the check before a write-back, `place`).
    pub(super) fn locate_for_write(&self, norm: &str) -> Result<(usize, PathBuf), Errno> {
        let Some((i, p)) = self.locate(norm)? else {
            return Err(Errno::new(
                libc::EAGAIN,
                format!(
                    "{norm}: not placed on a backend yet (the check of a stage-out or of \
                     `eddy writeback` places it); its data stays dirty in Eddy"
                ),
            ));
        };
        self.writable(i, norm)?;
        Ok((i, p))
    }

    /// EROFS when backend `i` is read-only (and the refusal counted).
    pub(super) fn writable(&self, i: usize, norm: &str) -> Result<(), Errno> {
        if self.backend.store(i).read_only {
            self.backend.per_store[i].failed();
            return Err(Errno::new(
                libc::EROFS,
                format!(
                    "{norm}: {} is read-only; nothing is written there and the changes stay \
                     dirty in Eddy",
                    self.backend.store_label(i)
                ),
            ));
        }
        Ok(())
    }

    /// Adds the name of backend `i` to an error from it.
    pub(super) fn at_store(&self, i: usize, e: Errno) -> Errno {
        self.backend.per_store[i].failed();
        let label = self.backend.store_label(i);
        if e.msg.contains(&label) {
            return e;
        }
        Errno::new(e.errno, format!("{label}: {}", e.msg))
    }

    /// Places the dirty file `p` (its record `ino`, under `key`, whose lock the caller
    /// holds) of a link with several backends, if no backend holds it yet: chooses its
    /// backend, checks the room there, makes an empty backend file (and the directories
    /// above it), and records the backend's name and the new file's stamp in the record.
    /// Returns the backend and the entry there; an error keeps the file dirty and unplaced.
    pub(super) fn place(
        &self,
        meta: &MetaStore,
        key: &[u8],
        ino: &mut Inode,
        p: &str,
    ) -> Result<Option<(usize, BackendEntry)>, Errno> {
        if !self.backend.is_multi(p) {
            return Ok(None);
        }
        if let Some((i, bp)) = self.backend.holders(p)?.into_iter().next() {
            // Imported, or placed by an earlier check: it stays where it is, unless its
            // attribute names another backend (a rename or `setfattr`: `moves.rs`).
            self.writable(i, p)?;
            if self.move_target(ino, p, i).is_none()
                && named(ino) != Some(self.backend.store(i).name.as_str())
            {
                record_name(ino, &self.backend.store(i).name);
                meta.put(key, ino, true)?;
            }
            let entry = self.backend.entry(&bp)?;
            return Ok(entry.map(|e| (i, e)));
        }
        let Some((prefix, range)) = self.backend.stores_for(p) else {
            return Ok(None);
        };
        let facts = FileFacts {
            path: p,
            size: ino.size,
            uid: ino.uid,
            gid: ino.gid,
            asked: named(ino),
            shared: Some(self.written_by_several(p)),
            current: None,
        };
        let (chosen, because) = self.backend.placer.choose(prefix, &facts);
        let i = range.start + chosen;
        self.writable(i, p)?;
        let store = self.backend.store(i).clone();
        let room_of = store.clone();
        let bp = self.backend.store_path(i, p);
        let top = store.path.clone();
        let like: Vec<PathBuf> = range
            .filter(|j| *j != i)
            .map(|j| self.backend.store(j).path.clone())
            .collect();
        let size = ino.size;
        let target = bp.clone();
        let made = self
            .backend
            .run("place", &bp, move || {
                if let Err(why) = room(&room_of, size)? {
                    return Ok(Err(why));
                }
                make_parents(&top, &target, &like)?;
                {
                    use std::os::unix::fs::OpenOptionsExt;
                    match std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .custom_flags(libc::O_NOFOLLOW)
                        .open(reach(&target)?.path())
                    {
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                        other => drop(other?),
                    }
                }
                Ok(Ok(read_entry(&target)?))
            })
            .map_err(|e| self.at_store(i, e))?;
        let entry = match made {
            Ok(Some(e)) => e,
            Ok(None) => {
                return Err(
                    self.at_store(i, Errno::eio(format!("{p}: the file made there is gone")))
                )
            }
            Err(why) => {
                return Err(self.at_store(
                    i,
                    Errno::new(
                        libc::ENOSPC,
                        format!("{p} is not placed there: {why}; it stays dirty in Eddy"),
                    ),
                ))
            }
        };
        tracing::info!(
            path = p,
            backend = store.name.as_str(),
            by = ?because,
            "placed a new file"
        );
        record_name(ino, &store.name);
        if let Some(t) = ino.tier.as_mut() {
            t.backend_mtime = entry.stat.mtime;
            t.backend_size = entry.stat.size;
        } else {
            ino.tier = Some(TierState {
                backend_mtime: entry.stat.mtime,
                backend_size: entry.stat.size,
                dirty: true,
            });
        }
        meta.put(key, ino, true)?;
        self.backend.per_store[i].placed(size);
        self.forget_writers(p);
        Ok(Some((i, entry)))
    }

    /// The backend a new name `to` of the file `ino` (now named `from`) is made in, under a
    /// link with several backends (decision 0073): the file's (the first backend holding
    /// `from`; placed now by its attribute or the rules if none does), with the directories
    /// above `to` it lacks. When the rules (path, size, owner, group) would place the new
    /// name on another backend, the EXDEV to answer comes third (a hard link never spans two
    /// backends): the source is still made in its backend, since the client has already
    /// made the file one with an identity record, which is written back through its names.
    pub(super) fn link_store(
        &self,
        ino: &Inode,
        from: &str,
        to: &str,
    ) -> Result<Option<(PathBuf, PathBuf, Option<Errno>)>, Errno> {
        if !self.backend.is_multi(from) {
            return Ok(None);
        }
        let Some((prefix, range)) = self.backend.stores_for(from) else {
            return Ok(None);
        };
        let facts = |path, asked, current| FileFacts {
            path,
            size: ino.size,
            uid: ino.uid,
            gid: ino.gid,
            asked,
            shared: None,
            current,
        };
        let i = match self.backend.holders(from)?.into_iter().next() {
            Some((i, _)) => i,
            None => {
                // Placed now: `backend_link` makes it there.
                let facts = FileFacts {
                    shared: Some(self.written_by_several(from)),
                    ..facts(from, named(ino), None)
                };
                let (chosen, _) = self.backend.placer.choose(prefix, &facts);
                let i = range.start + chosen;
                self.writable(i, from)?;
                self.backend.per_store[i].placed(ino.size);
                i
            }
        };
        let current = Some(self.backend.store(i).name.as_str());
        let j = range.start
            + self
                .backend
                .placer
                .choose(prefix, &facts(to, None, current))
                .0;
        self.writable(i, from)?;
        self.parents_in(i, from)?;
        let refused = (i != j).then(|| {
            Errno::new(
                libc::EXDEV,
                format!(
                    "{to}: the placement rules put it on {}, and {from} is on {}: a hard link cannot span two backends",
                    self.backend.store_label(j),
                    self.backend.store_label(i)
                ),
            )
        });
        if refused.is_none() {
            self.parents_in(i, to)?;
        }
        Ok(Some((
            self.backend.store_path(i, from),
            self.backend.store_path(i, to),
            refused,
        )))
    }

    /// `user.eddy.backend` set (`value`) or removed (`None`) on the entry `norm` of kind
    /// `kind` (decision 0073): only under a link with several backends, naming one of them
    /// that is not read-only (EINVAL, EROFS), on a regular file or a directory. A file
    /// already in a backend moves to the one named at its next write-back (`moves.rs`;
    /// EROFS if the one it is in is read-only); EXDEV for a file with several names, or for
    /// removing it from a file in a backend.
    pub(super) fn check_backend_attr(
        &self,
        norm: &str,
        kind: eddy_proto::FileKind,
        value: Option<&[u8]>,
    ) -> Result<(), Errno> {
        use eddy_proto::FileKind;
        // The identity record of a file with several names: through one of them.
        let mut name = String::new();
        let norm = match eddy_proto::path::parse_identity(norm) {
            Some(id) => {
                name = self
                    .linked_names(id)?
                    .into_iter()
                    .next()
                    .unwrap_or_default();
                name.as_str()
            }
            None => norm,
        };
        let Some((prefix, range)) = self.backend.stores_for(norm).filter(|(_, r)| r.len() > 1)
        else {
            return Err(Errno::einval(format!(
                "{norm}: {BACKEND_XATTR} names a backend of a linked prefix with several ([[backends]]); {norm} is not under one"
            )));
        };
        if !matches!(kind, FileKind::File | FileKind::Dir) {
            return Err(Errno::einval(format!(
                "{norm}: {BACKEND_XATTR} is for regular files and directories"
            )));
        }
        let asked = match value {
            None => None,
            Some(v) => {
                let name = std::str::from_utf8(v).unwrap_or_default();
                let Some(i) = range.clone().find(|i| self.backend.store(*i).name == name) else {
                    let known: Vec<String> =
                        range.map(|i| self.backend.store(i).name.clone()).collect();
                    return Err(Errno::einval(format!(
                        "{norm}: {BACKEND_XATTR} {:?} is not a backend of {prefix} (its backends: {})",
                        String::from_utf8_lossy(v),
                        known.join(", ")
                    )));
                };
                self.writable(i, norm)?;
                Some(i)
            }
        };
        if kind == FileKind::File {
            if let Some((held, _)) = self.backend.holders(norm)?.into_iter().next() {
                if asked == Some(held) {
                    return Ok(());
                }
                // Another backend for a file in one: moved there at its next write-back
                // (`moves.rs`), which removes it from this one; not for a file with
                // several names (a hard link spans one backend) nor without a name.
                if asked.is_none() || !name.is_empty() {
                    return Err(Errno::new(
                        libc::EXDEV,
                        format!(
                            "{norm} is in {}: {}",
                            self.backend.store_label(held),
                            if asked.is_none() {
                                format!("{BACKEND_XATTR} names the backend a written-back file is in, and stays (set another backend's name to move it there)")
                            } else {
                                "a file with several names stays in its backend (a hard link spans one)".to_string()
                            }
                        ),
                    ));
                }
                self.writable(held, norm)?;
            }
        }
        Ok(())
    }

    /// Makes the directories above `norm` in backend `i` that it lacks (before a directory
    /// is made there below one only another backend holds, or a rename into one).
    pub(super) fn parents_in(&self, i: usize, norm: &str) -> Result<(), Errno> {
        let Some((_, range)) = self.backend.stores_for(norm) else {
            return Ok(());
        };
        let top = self.backend.store(i).path.clone();
        let like: Vec<PathBuf> = range
            .filter(|j| *j != i)
            .map(|j| self.backend.store(j).path.clone())
            .collect();
        let target = self.backend.store_path(i, norm);
        self.backend.run("mkdir", &target.clone(), move || {
            make_parents(&top, &target, &like)
        })
    }
}
