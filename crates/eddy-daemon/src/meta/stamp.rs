//! Changes to an entry that follow from operations on other entries or on its data: the times
//! of a directory whose entries changed (`TouchDir`) and the set-id bits a write or truncate
//! by an unprivileged caller clears (`ClearSetId`), and the atime a read moves (`Accessed`,
//! decision 0061). Who may do what is checked by the caller
//! (the kernel through FUSE, the library); here each change is one read-modify-write of one
//! key under its stripe lock.

use super::{MetaStore, Through, MODE_BITS};
use eddy_config::Atime;
use eddy_proto::{Errno, FileKind, Inode, SetAttr, Timespec};

/// Set-user-ID and set-group-ID bits, and group execute (which decides whether set-group-ID
/// means "run as the group" or "mandatory locking").
const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_IXGRP: u32 = 0o0010;

/// The mode without the set-id bits a write, a truncate or a chown clears (as Linux's
/// `should_remove_suid`): set-user-ID always, set-group-ID only with group execute.
pub(crate) fn without_setid(mode: u32) -> u32 {
    let mut m = mode & MODE_BITS & !S_ISUID;
    if m & S_IXGRP != 0 {
        m &= !S_ISGID;
    }
    m
}

/// A directory's times after an entry changed in it at `time`: merged with max.
fn touched(mut dir: Inode, time: Timespec) -> Inode {
    dir.mtime = dir.mtime.max(time);
    dir.ctime = dir.ctime.max(time);
    dir
}

impl MetaStore {
    /// Moves a directory's mtime and ctime to at least `time`. Only the record changes: a
    /// linked directory's backend copy is not touched (its own times moved with the
    /// write-through of the change inside it).
    pub fn touch_dir(&self, p: &str, time: Timespec, via: &dyn Through) -> Result<(), Errno> {
        self.update(p, via, |norm, dir| {
            if dir.kind != FileKind::Dir {
                return Err(Errno::new(
                    libc::ENOTDIR,
                    format!("{norm}: not a directory"),
                ));
            }
            Ok((touched(dir, time), ()))
        })
    }

    /// Moves a directory's link count (2 and its subdirectories) by `delta`, never below 2.
    pub fn count_subdirs(&self, p: &str, delta: i32, via: &dyn Through) -> Result<(), Errno> {
        self.update(p, via, |norm, mut dir| {
            if dir.kind != FileKind::Dir {
                return Err(Errno::new(
                    libc::ENOTDIR,
                    format!("{norm}: not a directory"),
                ));
            }
            let n = i64::from(dir.nlink.max(2)) + i64::from(delta);
            dir.nlink = u32::try_from(n.max(2)).unwrap_or(u32::MAX);
            Ok((dir, ()))
        })
    }

    /// A read at `time`: the atime becomes `time` if `strict`, else under relatime's rule
    /// (not later than the mtime or ctime, or a day old). Only the record changes: not the
    /// ctime, and not a linked file's backend copy (a read there moved nothing either).
    pub fn accessed(
        &self,
        p: &str,
        time: Timespec,
        strict: bool,
        via: &dyn Through,
    ) -> Result<(), Errno> {
        let rule = if strict {
            Atime::Strictatime
        } else {
            Atime::Relatime
        };
        self.update(p, via, |_, mut ino| {
            let t = |ts: Timespec| (ts.sec, ts.nsec);
            if rule.due(t(ino.atime), t(ino.mtime), t(ino.ctime), time.sec) {
                ino.atime = time;
            }
            Ok((ino, ()))
        })
    }

    /// Clears the set-id bits a write or truncate by an unprivileged caller clears, written
    /// through to the backend of a linked file like a chmod.
    pub fn clear_setid(&self, p: &str, via: &dyn Through) -> Result<Inode, Errno> {
        self.update(p, via, |norm, mut ino| {
            let mode = without_setid(ino.mode);
            if ino.kind != FileKind::File || mode == ino.mode {
                return Ok((ino.clone(), ino));
            }
            ino.mode = mode;
            ino.ctime = Timespec::now();
            let attr = SetAttr {
                mode: Some(mode),
                ..SetAttr::default()
            };
            via.set_attr(norm, &attr, &mut ino)?;
            Ok((ino.clone(), ino))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setid_bits_cleared_as_linux_does() {
        assert_eq!(without_setid(0o4755), 0o755);
        assert_eq!(without_setid(0o6755), 0o755);
        // Set-group-ID without group execute marks mandatory locking: it stays.
        assert_eq!(without_setid(0o2745), 0o2745);
        assert_eq!(without_setid(0o6745), 0o2745);
        assert_eq!(without_setid(0o1777), 0o1777);
    }

    #[test]
    fn directory_times_never_move_backwards() {
        let t = |sec| Timespec { sec, nsec: 0 };
        let mut dir = Inode::new(FileKind::Dir, 1, 0o755, 0, 0);
        dir.mtime = t(10);
        dir.ctime = t(12);
        let later = touched(dir.clone(), t(11));
        assert_eq!((later.mtime, later.ctime), (t(11), t(12)));
        let earlier = touched(later.clone(), t(5));
        assert_eq!(earlier, later);
    }

    #[test]
    fn a_read_moves_the_atime_alone_and_once_per_change_under_relatime() {
        use crate::meta::through::NoBackend;
        let t = |sec| Timespec { sec, nsec: 0 };
        let dir = tempfile::tempdir().unwrap();
        let store = MetaStore::open(dir.path(), &eddy_config::Config::default()).unwrap();
        let mut f = Inode::new(FileKind::File, 7, 0o644, 0, 0);
        (f.atime, f.mtime, f.ctime) = (t(100), t(100), t(100));
        store.create("/f", f, true, &NoBackend).unwrap();
        // A read after the change: the atime moves, nothing else.
        store.accessed("/f", t(200), false, &NoBackend).unwrap();
        let i = store.stat("/f", &NoBackend).unwrap();
        assert_eq!((i.atime, i.mtime, i.ctime), (t(200), t(100), t(100)));
        // Read again (another client that saw the old times): relatime keeps it.
        store.accessed("/f", t(300), false, &NoBackend).unwrap();
        assert_eq!(store.stat("/f", &NoBackend).unwrap().atime, t(200));
        // strictatime moves it at every read; a day later relatime does too.
        store.accessed("/f", t(400), true, &NoBackend).unwrap();
        assert_eq!(store.stat("/f", &NoBackend).unwrap().atime, t(400));
        let day = eddy_config::Atime::RELATIME_STALE_S;
        store
            .accessed("/f", t(400 + day), false, &NoBackend)
            .unwrap();
        assert_eq!(store.stat("/f", &NoBackend).unwrap().atime, t(400 + day));
    }
}
