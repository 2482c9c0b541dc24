//! The write-through of namespace changes on linked paths: a new directory, symlink or
//! special file is made in the backend at once (a file when it is written back), an unlink
//! or rmdir removes the backend copy, chmod, chown, truncate and utimens change it, and a
//! rename moves it (`backend_rename`; the client moves the metadata after). The store calls
//! the first three through `Through` under the entry's key lock, before it stores the
//! record, so a change that fails in the backend leaves the record as it was. Every backend
//! call goes through `Backend::run`, under its deadline.

use super::Tier;
use crate::backend::read_entry;
use crate::meta::{MetaStore, Through};
use eddy_proto::{Errno, FileKind, Inode, SetAttr, TierState, Timespec};
use std::io::ErrorKind;
use std::path::Path;

/// The time of a `Timespec`, as the standard library sets it.
pub(super) fn system_time(t: Timespec) -> std::time::SystemTime {
    let d = std::time::Duration::new(t.sec.unsigned_abs(), t.nsec);
    if t.sec >= 0 {
        std::time::UNIX_EPOCH + d
    } else {
        std::time::UNIX_EPOCH - d
    }
}

/// mknod(2) of a special file in the backend, with the mode as asked (not cut by the
/// daemon's umask).
fn make_node(p: &Path, kind: FileKind, mode: u32, rdev: u64) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let fmt = match kind {
        FileKind::Fifo => libc::S_IFIFO,
        FileKind::Socket => libc::S_IFSOCK,
        FileKind::CharDevice => libc::S_IFCHR,
        FileKind::BlockDevice => libc::S_IFBLK,
        _ => return Err(std::io::Error::from_raw_os_error(libc::EINVAL)),
    };
    let c = std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the calls.
    let made = unsafe { libc::mknod(c.as_ptr(), fmt | (mode & 0o7777), rdev as libc::dev_t) };
    if made != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::chmod(c.as_ptr(), mode & 0o7777) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn ignore_missing<T: Default>(r: std::io::Result<T>) -> std::io::Result<T> {
    match r {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(T::default()),
        other => other,
    }
}

/// The store's operations on a linked path: imported from and written through to the
/// backend. On a path that is not linked, nothing.
impl Through for Tier {
    fn linked(&self, norm: &str) -> bool {
        Tier::linked(self, norm).is_some()
    }

    fn import(&self, norm: &str) -> Result<Option<Inode>, Errno> {
        self.import_entry(norm)
    }

    /// Directories, symlinks and special files are made in the backend at once; a file is
    /// created there when it is written back (it is marked dirty).
    fn create(&self, norm: &str, inode: &mut Inode) -> Result<(), Errno> {
        let Some(bp) = Tier::linked(self, norm) else {
            return Ok(());
        };
        let mode = inode.mode;
        let target = inode.target.clone();
        let kind = inode.kind;
        let rdev = inode.rdev;
        if kind == FileKind::File {
            inode.tier = Some(TierState {
                dirty: true,
                ..TierState::default()
            });
            return Ok(());
        }
        // With several backends (decision 0073) in the default one, with the directories
        // above it that only another backend held.
        let bp = match self.backend.stores_for(norm) {
            Some((_, range)) if range.len() > 1 => {
                self.parents_in(range.start, norm)?;
                self.backend.store_path(range.start, norm)
            }
            _ => bp,
        };
        let p = bp.clone();
        let made = self.backend.run("create", &bp, move || {
            let reached = crate::backend::reach(&p)?;
            let p = reached.path();
            match kind {
                FileKind::Dir => {
                    use std::os::unix::fs::PermissionsExt;
                    match std::fs::create_dir(p) {
                        Err(e) if e.kind() == ErrorKind::AlreadyExists && p.is_dir() => {}
                        other => other?,
                    }
                    // The mode as asked, not as the daemon's umask would cut it.
                    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))?;
                }
                FileKind::Symlink => std::os::unix::fs::symlink(target.unwrap_or_default(), p)?,
                special => make_node(p, special, mode, rdev)?,
            }
            read_entry(p)
        })?;
        inode.tier = Some(match made {
            Some(e) => TierState {
                backend_mtime: e.stat.mtime,
                backend_size: e.stat.size,
                dirty: false,
            },
            None => TierState::default(),
        });
        Ok(())
    }

    /// An entry missing in the backend (a file never written back) is fine.
    /// With several backends (decision 0073), from every backend holding it (a name in two
    /// backends is one name); refused (EROFS) when one of them is read-only.
    fn remove(&self, norm: &str, kind: FileKind) -> Result<(), Errno> {
        if Tier::linked(self, norm).is_none() {
            return Ok(());
        }
        for (i, bp) in self.through_all(norm)? {
            let p = bp.clone();
            self.backend
                .run("remove", &bp, move || {
                    let Some(reached) = crate::backend::reach_existing(&p)? else {
                        return Ok(());
                    };
                    let p = reached.path();
                    ignore_missing(if kind == FileKind::Dir {
                        std::fs::remove_dir(p)
                    } else {
                        std::fs::remove_file(p)
                    })
                })
                .map_err(|e| self.store_err(i, e))?;
        }
        Ok(())
    }

    /// chmod, chown, truncate and utimens of the backend copy, if it was written back.
    fn set_attr(&self, norm: &str, attr: &SetAttr, new: &mut Inode) -> Result<(), Errno> {
        for (n, bp) in self.through_paths(norm)?.into_iter().enumerate() {
            self.set_attr_at(&bp, attr, new, n == 0)?;
        }
        Ok(())
    }

    /// setxattr and removexattr of the backend copy, if it exists (decision 0029).
    fn xattr(
        &self,
        norm: &str,
        kind: FileKind,
        name: &str,
        value: Option<&[u8]>,
    ) -> Result<(), Errno> {
        if name == eddy_config::BACKEND_XATTR {
            self.check_backend_attr(norm, kind, value)?;
        }
        for bp in self.through_paths(norm)? {
            let (p, name, value) = (bp.clone(), name.to_string(), value.map(<[u8]>::to_vec));
            self.backend.run("setxattr", &bp, move || {
                let reached = crate::backend::reach(&p)?;
                let p = reached.path();
                super::xattrs::write_through(p, kind, &name, value.as_deref())
            })?;
        }
        Ok(())
    }
}

impl Tier {
    /// Where a change of `norm` is written through: the backend path of `through_path`, or
    /// with several backends (decision 0073) that of every backend holding it (EROFS if one
    /// is read-only).
    fn through_paths(&self, norm: &str) -> Result<Vec<std::path::PathBuf>, Errno> {
        if eddy_proto::path::parse_identity(norm).is_none() && self.backend.is_multi(norm) {
            return Ok(self
                .through_all(norm)?
                .into_iter()
                .map(|(_, p)| p)
                .collect());
        }
        Ok(self.through_path(norm)?.into_iter().collect())
    }

    /// Every backend of `norm`'s link holding it, with its path there (the link's own
    /// directory alone for a link with one backend); EROFS naming the first read-only one.
    pub(super) fn through_all(
        &self,
        norm: &str,
    ) -> Result<Vec<(usize, std::path::PathBuf)>, Errno> {
        if !self.backend.is_multi(norm) {
            return Ok(self.locate(norm)?.into_iter().collect());
        }
        let held = self.backend.holders(norm)?;
        for (i, _) in &held {
            self.writable(*i, norm)?;
        }
        Ok(held)
    }

    /// An error of backend `i`, named after it when the link has several.
    fn store_err(&self, i: usize, e: Errno) -> Errno {
        if self.backend.store_is_multi(i) {
            self.at_store(i, e)
        } else {
            e
        }
    }

    /// chmod, chown, truncate and utimens of one backend copy; `first`: the record takes
    /// the stamp it shows.
    fn set_attr_at(
        &self,
        bp: &std::path::Path,
        attr: &SetAttr,
        new: &mut Inode,
        first: bool,
    ) -> Result<(), Errno> {
        let bp = bp.to_path_buf();
        let p = bp.clone();
        let (attr, kind) = (attr.clone(), new.kind);
        let (atime, mtime) = (new.atime, new.mtime);
        let seen = self.backend.run("setattr", &bp, move || {
            let Some(reached) = crate::backend::reach_existing(&p)? else {
                return Ok(None); // never written back: stage-out sets everything
            };
            let p = reached.path();
            if std::fs::symlink_metadata(p).is_err() {
                return Ok(None); // never written back: stage-out sets everything
            }
            if let (Some(mode), false) = (attr.mode, kind == FileKind::Symlink) {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))?;
            }
            if attr.uid.is_some() || attr.gid.is_some() {
                std::os::unix::fs::lchown(p, attr.uid, attr.gid)?;
            }
            if let Some(size) = attr.size {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(p)?
                    .set_len(size)?;
            }
            // Times of special files are kept in Eddy only (opening a FIFO to set them would
            // block).
            if (attr.atime.is_some() || attr.mtime.is_some())
                && matches!(kind, FileKind::File | FileKind::Dir)
            {
                let times = std::fs::FileTimes::new()
                    .set_accessed(system_time(atime))
                    .set_modified(system_time(mtime));
                std::fs::File::open(p)?.set_times(times)?;
            }
            read_entry(p)
        })?;
        if let (Some(e), Some(t), true) = (seen, new.tier.as_mut(), first) {
            t.backend_mtime = e.stat.mtime;
            t.backend_size = e.stat.size;
        }
        Ok(())
    }
    /// Renames the backend copy of a linked entry (the client moves the metadata after).
    /// `meta` gives the paths' keys and whether a directory rename is recorded there.
    pub fn backend_rename(&self, meta: &MetaStore, from: &str, to: &str) -> Result<(), Errno> {
        let (from, _) = meta.key_of(from)?;
        let (to, _) = meta.key_of(to)?;
        let (Some(bf), Some(bt)) = (Tier::linked(self, &from), Tier::linked(self, &to)) else {
            return Err(Errno::new(
                libc::EXDEV,
                format!("{from} and {to} are not both under a linked prefix"),
            ));
        };
        // A directory rename recorded here (decision 0010) may be run again to complete it:
        // a missing source then means the backend renamed it already.
        let resuming = meta.renaming(&from, &to);
        if self.backend.is_multi(&from) {
            return self.rename_in_stores(&from, &to, resuming);
        }
        let (f, t) = (bf.clone(), bt);
        self.backend.run("rename", &bf, move || {
            let reached_t = crate::backend::reach(&t)?;
            let t = reached_t.path();
            let renamed = match crate::backend::reach_existing(&f)? {
                Some(reached_f) => std::fs::rename(reached_f.path(), t),
                None => Err(std::io::Error::from(ErrorKind::NotFound)),
            };
            match renamed {
                Err(e) if e.kind() == ErrorKind::NotFound && resuming => Ok(()),
                // The source was never written back: what it replaces must go from the backend
                // too, or its bytes would show through the new file's holes after stage-out.
                Err(e) if e.kind() == ErrorKind::NotFound => match std::fs::symlink_metadata(t) {
                    Ok(m) if m.is_dir() => ignore_missing(std::fs::remove_dir(t)),
                    Ok(_) => ignore_missing(std::fs::remove_file(t)),
                    Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(e),
                },
                other => other,
            }
        })
    }
}

impl Tier {
    /// `backend_rename` under a link with several backends (decision 0073): in each backend
    /// holding the source, renamed there (with the directories above the target it lacks);
    /// in each other one holding the target, the target removed (unless a directory rename
    /// is being completed). Refused (EROFS) before anything when a backend holding either
    /// is read-only. A file keeps its backend: a rename moves no data between backends.
    fn rename_in_stores(&self, from: &str, to: &str, resuming: bool) -> Result<(), Errno> {
        let sources = self.through_all(from)?;
        let targets = self.through_all(to)?;
        let Some((_, range)) = self.backend.stores_for(from) else {
            return Ok(());
        };
        for i in range {
            let (f, t) = (
                self.backend.store_path(i, from),
                self.backend.store_path(i, to),
            );
            if sources.iter().any(|(s, _)| *s == i) {
                self.parents_in(i, to).map_err(|e| self.at_store(i, e))?;
                self.backend
                    .run("rename", &f.clone(), move || {
                        let (rf, rt) = (crate::backend::reach(&f)?, crate::backend::reach(&t)?);
                        std::fs::rename(rf.path(), rt.path())
                    })
                    .map_err(|e| self.at_store(i, e))?;
            } else if !resuming && targets.iter().any(|(s, _)| *s == i) {
                self.backend
                    .run("rename", &t.clone(), move || {
                        let Some(reached) = crate::backend::reach_existing(&t)? else {
                            return Ok(());
                        };
                        let t = reached.path();
                        match std::fs::symlink_metadata(t) {
                            Ok(m) if m.is_dir() => ignore_missing(std::fs::remove_dir(t)),
                            Ok(_) => ignore_missing(std::fs::remove_file(t)),
                            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
                            Err(e) => Err(e),
                        }
                    })
                    .map_err(|e| self.at_store(i, e))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunks::ChunkStore;
    use eddy_config::{Config, Link};
    use eddy_proto::RemoveKind;

    /// The stores as `eddyd` opens them, with `/in` linked to a backend directory.
    struct Stores {
        _root: tempfile::TempDir,
        pfs: tempfile::TempDir,
        meta: MetaStore,
        _chunks: ChunkStore,
        tier: Tier,
    }

    fn stores() -> Stores {
        let root = tempfile::tempdir().unwrap();
        let pfs = tempfile::tempdir().unwrap();
        let config = Config {
            links: vec![Link {
                prefix: "/in".into(),
                backend: pfs.path().to_owned(),
            }],
            ..Config::default()
        };
        let (meta, chunks, tier) = crate::tier::tests::open_with_meta(root.path(), &config);
        Stores {
            _root: root,
            pfs,
            meta,
            _chunks: chunks,
            tier,
        }
    }

    #[test]
    fn store_operations_on_linked_paths_go_through_the_tier() {
        let s = stores();
        std::fs::write(s.pfs.path().join("old"), b"abc").unwrap();
        // Met first by a stat: imported as a clean stub.
        let old = s.meta.stat("/in/old", &s.tier).unwrap();
        assert_eq!((old.kind, old.size), (FileKind::File, 3));
        assert!(old.tier.is_some_and(|t| !t.dirty));
        // Outside the link, nothing is imported or written through.
        assert_eq!(
            s.meta.stat("/out", &s.tier).unwrap_err().errno,
            libc::ENOENT
        );
        let dir = Inode::new(FileKind::Dir, 2, 0o750, 0, 0);
        s.meta.create("/in/d", dir, true, &s.tier).unwrap();
        assert!(s.pfs.path().join("d").is_dir());
        let file = Inode::new(FileKind::File, 3, 0o600, 0, 0);
        let made = s.meta.create("/in/d/f", file, true, &s.tier).unwrap();
        assert!(made.tier.is_some_and(|t| t.dirty), "written back later");
        let chmod = SetAttr {
            mode: Some(0o700),
            ..SetAttr::default()
        };
        s.meta.set_attr("/in/d", &chmod, &s.tier).unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(s.pfs.path().join("d"))
                .unwrap()
                .permissions();
            assert_eq!(mode.mode() & 0o7777, 0o700);
        }
        s.meta
            .remove("/in/old", RemoveKind::NotDir, &s.tier)
            .unwrap();
        assert!(!s.pfs.path().join("old").exists());
        // The store alone neither imports nor writes through.
        std::fs::write(s.pfs.path().join("other"), b"x").unwrap();
        let alone = s.meta.stat("/in/other", &crate::meta::NoBackend);
        assert_eq!(alone.unwrap_err().errno, libc::ENOENT);
    }

    #[test]
    fn a_resumed_backend_rename_keeps_the_renamed_directory() {
        let s = stores();
        std::fs::create_dir_all(s.pfs.path().join("a/sub")).unwrap();
        std::fs::write(s.pfs.path().join("a/sub/f"), b"x").unwrap();
        std::fs::create_dir(s.pfs.path().join("c")).unwrap();
        assert!(s
            .meta
            .begin_rename(1, "/in/a", "/in/b", 7)
            .unwrap()
            .is_empty());
        s.tier.backend_rename(&s.meta, "/in/a", "/in/b").unwrap();
        // Run again to complete the rename: the source is gone, the renamed directory stays.
        s.tier.backend_rename(&s.meta, "/in/a", "/in/b").unwrap();
        assert!(s.pfs.path().join("b/sub/f").exists());
        // Without an intent, a missing source still removes what the target was (a rename
        // of something never written back).
        s.tier.backend_rename(&s.meta, "/in/gone", "/in/c").unwrap();
        assert!(!s.pfs.path().join("c").exists());
        let outside = s.tier.backend_rename(&s.meta, "/in/b", "/elsewhere");
        assert_eq!(outside.unwrap_err().errno, libc::EXDEV);
    }
}
