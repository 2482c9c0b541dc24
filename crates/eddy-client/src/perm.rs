//! Permission rules, as pure functions of the entries involved and the caller's credentials:
//! the POSIX rules as Linux applies them, for callers the library checks (`Creds::enforce`).
//! The FUSE mount leaves the checks to the kernel (default_permissions) and passes
//! enforce = false; the consequences of an operation that are not checks (set-id bits cleared
//! by a write, a truncate or a chown) apply to every caller. What the library looks up to
//! apply them (ancestors, parent, entry) is in `access.rs`.
//!
//! Errors follow Linux: EACCES when mode bits deny (search, read, write, "set times to now"),
//! EPERM when only the owner or root may do it (chmod, chown, chgrp, explicit times, removal
//! from a sticky directory).

use eddy_proto::{Errno, FileKind, Inode, SetAttr, SetTime};
use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_ISVTX: u32 = 0o1000;
const S_IXGRP: u32 = 0o0010;

/// A caller's supplementary groups: a sorted set of group ids, interned, so that `Creds`
/// stays `Copy` (decision 0011). Each distinct set is allocated once per process and kept
/// for its lifetime: a process sees few distinct sets (its own, a few test users).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Groups(&'static [u32]);

impl Groups {
    /// The set of `ids` (order and duplicates do not matter).
    pub fn new(ids: &[u32]) -> Groups {
        if ids.is_empty() {
            return Groups::default();
        }
        let mut set = ids.to_vec();
        set.sort_unstable();
        set.dedup();
        static SETS: OnceLock<Mutex<HashSet<&'static [u32]>>> = OnceLock::new();
        let mut sets = SETS
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(&known) = sets.get(set.as_slice()) {
            return Groups(known);
        }
        let leaked: &'static [u32] = Box::leak(set.into_boxed_slice());
        sets.insert(leaked);
        Groups(leaked)
    }

    /// The supplementary groups of the calling process (getgroups(2)).
    pub fn of_process() -> Groups {
        // SAFETY: with size 0, getgroups only returns the number of groups.
        let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
        let mut ids = vec![0 as libc::gid_t; usize::try_from(n).unwrap_or(0)];
        // SAFETY: the buffer holds `n` group ids.
        let got = unsafe { libc::getgroups(n, ids.as_mut_ptr()) };
        ids.truncate(usize::try_from(got).unwrap_or(0));
        Groups::new(&ids)
    }

    pub fn contains(self, gid: u32) -> bool {
        self.0.binary_search(&gid).is_ok()
    }

    pub fn as_slice(self) -> &'static [u32] {
        self.0
    }
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0).finish()
    }
}

/// Who performs an operation and what the caller has already checked: the owner of new
/// entries; with `enforce`, the subject of permission checks; with `parent_resolved`, the
/// caller (a kernel, through FUSE) has already resolved the parent directory, so the library
/// need not look it up again. uid 0 is root: it passes every check and keeps set-id bits
/// when it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, besides `gid`.
    pub groups: Groups,
    pub enforce: bool,
    pub parent_resolved: bool,
}

impl Creds {
    /// The calling process's effective ids and supplementary groups; checks enforced unless
    /// it is root.
    pub fn current() -> Creds {
        // SAFETY: geteuid/getegid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Creds {
            groups: Groups::of_process(),
            ..Creds::user(uid, gid)
        }
    }

    /// A caller the library checks, with no supplementary groups (add them with
    /// `with_groups`); checks enforced unless `uid` is 0.
    pub fn user(uid: u32, gid: u32) -> Creds {
        Creds {
            uid,
            gid,
            groups: Groups::default(),
            enforce: uid != 0,
            parent_resolved: false,
        }
    }

    /// The same caller with these supplementary groups.
    pub fn with_groups(self, groups: &[u32]) -> Creds {
        Creds {
            groups: Groups::new(groups),
            ..self
        }
    }

    /// A request the kernel has vetted (FUSE with default_permissions): no permission checks,
    /// no parent lookups.
    pub fn kernel(uid: u32, gid: u32) -> Creds {
        Creds {
            uid,
            gid,
            groups: Groups::default(),
            enforce: false,
            parent_resolved: true,
        }
    }

    /// Root, no checks.
    pub fn root() -> Creds {
        Creds {
            enforce: false,
            ..Creds::user(0, 0)
        }
    }

    /// Whether the caller belongs to group `gid` (its own group or a supplementary one).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(gid)
    }

    /// Whether the caller's writes, truncates keep a file's set-id bits (root's do; Linux:
    /// CAP_FSETID).
    pub fn keeps_setid(&self) -> bool {
        self.uid == 0
    }

    /// Whether the library checks this caller's rights (enforced, not root).
    pub(crate) fn checked(&self) -> bool {
        self.enforce && self.uid != 0
    }
}

/// Requested access, as the r/w/x bits of one class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Access(u32);

impl Access {
    pub const READ: Access = Access(4);
    pub const WRITE: Access = Access(2);
    pub const EXEC: Access = Access(1);
    pub fn empty() -> Access {
        Access(0)
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

impl std::ops::BitOrAssign for Access {
    fn bitor_assign(&mut self, o: Access) {
        self.0 |= o.0;
    }
}

fn eacces(path: &str, what: &str) -> Errno {
    Errno::new(libc::EACCES, format!("{path}: permission denied ({what})"))
}

fn eperm(path: &str, what: &str) -> Errno {
    Errno::new(libc::EPERM, format!("{path}: {what}"))
}

/// Whether `creds` may access `inode` as `want`: the owner's bits for the owner, else the
/// group's for a member of the file's group (supplementary groups included), else the
/// others'. Only one class applies: an owner denied by the owner bits is denied.
fn allowed(inode: &Inode, creds: Creds, want: Access) -> bool {
    let bits = if creds.uid == inode.uid {
        (inode.mode >> 6) & 7
    } else if creds.in_group(inode.gid) {
        (inode.mode >> 3) & 7
    } else {
        inode.mode & 7
    };
    bits & want.0 == want.0
}

/// EACCES unless `creds` may access `inode` as `want`.
pub(crate) fn check(inode: &Inode, creds: Creds, want: Access, path: &str) -> Result<(), Errno> {
    if !creds.checked() || want.0 == 0 || allowed(inode, creds, want) {
        return Ok(());
    }
    Err(eacces(path, "mode bits"))
}

/// Path resolution through `dir`: it must be a directory the caller may search (EACCES).
pub(crate) fn check_search(dir: &Inode, creds: Creds, path: &str) -> Result<(), Errno> {
    if dir.kind != FileKind::Dir {
        return Err(Errno::new(
            libc::ENOTDIR,
            format!("{path} is not a directory"),
        ));
    }
    if !creds.checked() || allowed(dir, creds, Access::EXEC) {
        return Ok(());
    }
    Err(eacces(path, "no search permission on the directory"))
}

/// Removing or replacing `entry` in the sticky directory `dir` (mode 01000, like /tmp) is for
/// the entry's owner, the directory's owner and root: EPERM for anyone else.
pub(crate) fn check_sticky(
    dir: &Inode,
    entry: &Inode,
    creds: Creds,
    path: &str,
) -> Result<(), Errno> {
    if !creds.checked() || !is_sticky(dir) || creds.uid == entry.uid || creds.uid == dir.uid {
        return Ok(());
    }
    Err(eperm(
        path,
        "in a sticky directory, only the entry's owner, the directory's owner or root may remove or replace it",
    ))
}

/// Whether removal from `dir` depends on the entry's owner.
pub(crate) fn is_sticky(dir: &Inode) -> bool {
    dir.kind == FileKind::Dir && dir.mode & S_ISVTX != 0
}

/// Whether a write or truncate by a caller without the privilege would clear bits of `mode`
/// (set-user-ID; set-group-ID with group execute).
pub(crate) fn has_setid(mode: u32) -> bool {
    mode & S_ISUID != 0 || mode & (S_ISGID | S_IXGRP) == S_ISGID | S_IXGRP
}

/// Checks a change of attributes of `inode` by `creds` and returns the change to apply:
/// - chown: root only; the owner may "change" the owner to itself (EPERM otherwise);
/// - chgrp: root, or the owner to a group it belongs to or to the current group (EPERM);
/// - chmod: root or the owner (EPERM); an owner outside the file's (new) group cannot set
///   set-group-ID: the bit is dropped from the new mode, as Linux does;
/// - times both set to now (utimensat with NULL or UTIME_NOW twice): the owner, or anyone
///   with write permission (EACCES); any other time change: the owner (EPERM);
/// - truncate: write permission (EACCES).
pub(crate) fn check_setattr(
    inode: &Inode,
    attr: &SetAttr,
    creds: Creds,
    path: &str,
) -> Result<SetAttr, Errno> {
    let mut attr = attr.clone();
    if !creds.checked() {
        return Ok(attr);
    }
    let owner = creds.uid == inode.uid;
    if let Some(uid) = attr.uid {
        if !owner || uid != inode.uid {
            return Err(eperm(path, "only root may change the owner"));
        }
    }
    if let Some(gid) = attr.gid {
        if !owner || !(creds.in_group(gid) || gid == inode.gid) {
            return Err(eperm(
                path,
                "only the owner may change the group, to a group it belongs to",
            ));
        }
    }
    if let Some(mode) = attr.mode {
        if !owner {
            return Err(eperm(path, "only the owner may change the mode"));
        }
        if !creds.in_group(attr.gid.unwrap_or(inode.gid)) {
            attr.mode = Some(mode & !S_ISGID);
        }
    }
    let touch = matches!(
        (attr.atime, attr.mtime),
        (Some(SetTime::Now), Some(SetTime::Now))
    );
    if touch {
        if !owner && !allowed(inode, creds, Access::WRITE) {
            return Err(eacces(
                path,
                "setting the times to now needs ownership or write permission",
            ));
        }
    } else if (attr.atime.is_some() || attr.mtime.is_some()) && !owner {
        return Err(eperm(path, "only the owner may set the times"));
    }
    if attr.size.is_some() {
        check(inode, creds, Access::WRITE, path)?;
    }
    Ok(attr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_proto::Timespec;

    /// A file of uid 10, gid 20.
    fn inode(mode: u32) -> Inode {
        Inode::new(FileKind::File, 1, mode, 10, 20)
    }

    fn dir(mode: u32, uid: u32) -> Inode {
        Inode::new(FileKind::Dir, 2, mode, uid, uid)
    }

    const OWNER: Creds = Creds {
        uid: 10,
        gid: 99,
        groups: Groups(&[]),
        enforce: true,
        parent_resolved: false,
    };
    const GROUP: Creds = Creds {
        uid: 11,
        gid: 20,
        ..OWNER
    };
    const OTHER: Creds = Creds {
        uid: 12,
        gid: 21,
        ..OWNER
    };

    fn errno<T: std::fmt::Debug>(r: Result<T, Errno>) -> i32 {
        r.unwrap_err().errno
    }

    fn attr(f: impl FnOnce(&mut SetAttr)) -> SetAttr {
        let mut a = SetAttr::default();
        f(&mut a);
        a
    }

    #[test]
    fn classes_are_checked_in_order() {
        let i = inode(0o640);
        assert!(check(&i, OWNER, Access::READ | Access::WRITE, "/f").is_ok());
        assert!(check(&i, GROUP, Access::READ, "/f").is_ok());
        assert_eq!(errno(check(&i, GROUP, Access::WRITE, "/f")), libc::EACCES);
        assert_eq!(errno(check(&i, OTHER, Access::READ, "/f")), libc::EACCES);
        let unchecked = Creds {
            enforce: false,
            ..OTHER
        };
        assert!(check(&i, unchecked, Access::READ, "/f").is_ok());
        let root = Creds {
            uid: 0,
            gid: 0,
            ..OTHER
        };
        assert!(check(&i, root, Access::WRITE, "/f").is_ok());
        // The owner class applies to the owner even where the group's bits would allow.
        assert_eq!(
            errno(check(
                &inode(0o070),
                OWNER.with_groups(&[20]),
                Access::READ,
                "/f"
            )),
            libc::EACCES
        );
    }

    #[test]
    fn supplementary_groups_count() {
        let i = inode(0o640);
        assert_eq!(errno(check(&i, OTHER, Access::READ, "/f")), libc::EACCES);
        let member = OTHER.with_groups(&[7, 20, 3]);
        assert!(check(&i, member, Access::READ, "/f").is_ok());
        assert_eq!(errno(check(&i, member, Access::WRITE, "/f")), libc::EACCES);
        // Interned: equal sets are one allocation.
        assert_eq!(
            Groups::new(&[3, 20, 7, 7]).as_slice().as_ptr(),
            member.groups.as_slice().as_ptr()
        );
        assert_eq!(member.groups.as_slice(), &[3, 7, 20]);
    }

    #[test]
    fn search_needs_exec_on_a_directory() {
        assert!(check_search(&dir(0o711, 10), OTHER, "/d").is_ok());
        assert_eq!(
            errno(check_search(&dir(0o766, 10), OTHER, "/d")),
            libc::EACCES
        );
        assert_eq!(
            errno(check_search(&inode(0o777), OTHER, "/f")),
            libc::ENOTDIR
        );
        let root = Creds { uid: 0, ..OTHER };
        assert!(check_search(&dir(0o700, 10), root, "/d").is_ok());
    }

    #[test]
    fn sticky_directories_keep_entries_to_their_owners() {
        let tmp = dir(0o1777, 30);
        let mine = inode(0o644); // uid 10
        assert!(check_sticky(&tmp, &mine, OWNER, "/tmp/f").is_ok());
        assert_eq!(
            errno(check_sticky(&tmp, &mine, OTHER, "/tmp/f")),
            libc::EPERM
        );
        let dir_owner = Creds { uid: 30, ..OTHER };
        assert!(check_sticky(&tmp, &mine, dir_owner, "/tmp/f").is_ok());
        let root = Creds { uid: 0, ..OTHER };
        assert!(check_sticky(&tmp, &mine, root, "/tmp/f").is_ok());
        assert!(check_sticky(&dir(0o777, 30), &mine, OTHER, "/d/f").is_ok());
    }

    #[test]
    fn chmod_chown_chgrp_rules() {
        let i = inode(0o644);
        let chmod = attr(|a| a.mode = Some(0o600));
        assert_eq!(errno(check_setattr(&i, &chmod, OTHER, "/f")), libc::EPERM);
        assert_eq!(errno(check_setattr(&i, &chmod, GROUP, "/f")), libc::EPERM);
        assert!(check_setattr(&i, &chmod, OWNER, "/f").is_ok());
        // chown: root only, but the owner may name itself.
        let chown = |uid| attr(|a| a.uid = Some(uid));
        assert_eq!(
            errno(check_setattr(&i, &chown(12), OWNER, "/f")),
            libc::EPERM
        );
        assert!(check_setattr(&i, &chown(10), OWNER, "/f").is_ok());
        assert_eq!(
            errno(check_setattr(&i, &chown(10), OTHER, "/f")),
            libc::EPERM
        );
        assert_eq!(
            errno(check_setattr(&i, &chown(12), OTHER, "/f")),
            libc::EPERM
        );
        // chgrp: the owner, to its own groups or the current one.
        let chgrp = |gid| attr(|a| a.gid = Some(gid));
        assert!(check_setattr(&i, &chgrp(99), OWNER, "/f").is_ok());
        assert!(check_setattr(&i, &chgrp(20), OWNER, "/f").is_ok());
        assert_eq!(
            errno(check_setattr(&i, &chgrp(55), OWNER, "/f")),
            libc::EPERM
        );
        assert!(check_setattr(&i, &chgrp(55), OWNER.with_groups(&[55]), "/f").is_ok());
        assert_eq!(
            errno(check_setattr(&i, &chgrp(20), GROUP, "/f")),
            libc::EPERM
        );
        let root = Creds { uid: 0, ..OTHER };
        assert!(check_setattr(&i, &chown(12), root, "/f").is_ok());
        assert!(check_setattr(&i, &chgrp(55), root, "/f").is_ok());
    }

    #[test]
    fn chmod_by_an_owner_outside_the_group_drops_setgid() {
        let i = inode(0o644); // group 20; OWNER's group is 99
        let setgid = attr(|a| a.mode = Some(0o2755));
        let mode = |c| check_setattr(&i, &setgid, c, "/f").unwrap().mode;
        assert_eq!(mode(OWNER), Some(0o755));
        assert_eq!(mode(OWNER.with_groups(&[20])), Some(0o2755));
        assert_eq!(mode(Creds { uid: 0, ..OTHER }), Some(0o2755));
        // With a chgrp in the same change, the new group counts.
        let both = attr(|a| {
            a.mode = Some(0o2755);
            a.gid = Some(99);
        });
        assert_eq!(
            check_setattr(&i, &both, OWNER, "/f").unwrap().mode,
            Some(0o2755)
        );
        // Set-user-ID is the owner's to set.
        let setuid = attr(|a| a.mode = Some(0o4755));
        assert_eq!(
            check_setattr(&i, &setuid, OWNER, "/f").unwrap().mode,
            Some(0o4755)
        );
    }

    #[test]
    fn utimensat_rules() {
        let writable = inode(0o666);
        let readonly = inode(0o644);
        let now = attr(|a| {
            a.atime = Some(SetTime::Now);
            a.mtime = Some(SetTime::Now);
        });
        let at = SetTime::At(Timespec { sec: 1, nsec: 0 });
        let explicit = attr(|a| {
            a.atime = Some(at);
            a.mtime = Some(at);
        });
        let now_and_omit = attr(|a| a.mtime = Some(SetTime::Now));
        assert!(check_setattr(&writable, &now, OTHER, "/f").is_ok());
        assert_eq!(
            errno(check_setattr(&readonly, &now, OTHER, "/f")),
            libc::EACCES
        );
        assert!(check_setattr(&readonly, &now, OWNER, "/f").is_ok());
        assert_eq!(
            errno(check_setattr(&writable, &explicit, OTHER, "/f")),
            libc::EPERM
        );
        assert!(check_setattr(&readonly, &explicit, OWNER, "/f").is_ok());
        // Not both now: explicit (POSIX; Linux passes times != NULL as ATTR_TIMES_SET).
        assert_eq!(
            errno(check_setattr(&writable, &now_and_omit, OTHER, "/f")),
            libc::EPERM
        );
    }

    #[test]
    fn truncate_needs_write_permission() {
        let t = attr(|a| a.size = Some(0));
        assert_eq!(
            errno(check_setattr(&inode(0o644), &t, OTHER, "/f")),
            libc::EACCES
        );
        assert!(check_setattr(&inode(0o646), &t, OTHER, "/f").is_ok());
    }

    #[test]
    fn setid_bits_a_write_clears() {
        assert!(has_setid(0o4755));
        assert!(has_setid(0o2775));
        assert!(!has_setid(0o2745)); // mandatory locking marker
        assert!(!has_setid(0o1777));
        assert!(Creds::root().keeps_setid() && !OWNER.keeps_setid());
    }
}
