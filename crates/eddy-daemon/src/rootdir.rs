//! Making and opening a daemon's storage root safely (decision 0023). Root starts a daemon
//! for a job's user at a path such as `/tmp/eddy-job-{job}`, in a directory every user can
//! write to, so nothing found there is taken on trust:
//!
//! - the directories above the root are walked from `/` one component at a time
//!   (`openat` with `O_NOFOLLOW`; a missing one is made, 0755, as `create_dir_all` would);
//!   each must be owned by root or by the daemon's user and,
//!   if group or others may write to it, carry the sticky bit, so that nobody else can
//!   replace what lies under it. A symbolic link on the way is followed only if root owns
//!   it and the directory holding it (which nobody else may write to), e.g. `/var/run`;
//! - the root itself is made with an exclusive `mkdirat(parent, name, 0700)`. If it exists,
//!   it must be a directory (not a symbolic link) owned by the daemon's user or root and,
//!   for a daemon started with `--user`, private (mode 0700) and either empty or marked as
//!   this deployment's root (`eddyd.root`, `eddy_proto::auth::root_mark`): a restart or
//!   rejoin on the same storage is accepted, another deployment's or user's directory is
//!   refused with the path and the reason. A daemon running as its own user tightens a
//!   looser root of its own to 0700 instead (roots made before this rule were 0755);
//! - ownership and mode are then set through the directory's descriptor (`fchown`,
//!   `fchmod`), never by path.

use crate::DaemonError;
use nix::errno::Errno as NixErrno;
use nix::fcntl::{openat, readlinkat, AtFlags, OFlag, AT_FDCWD};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{fchown, Gid, Uid};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

/// The file in a storage root naming the deployment it belongs to.
pub const MARK_FILE: &str = "eddyd.root";
/// Symbolic links followed on the way to a root, at most (as the kernel's limit).
const MAX_LINKS: usize = 40;

/// Whose root it is and how strictly an existing one is judged.
#[derive(Debug, Clone, Copy)]
pub struct RootOwner {
    pub uid: Uid,
    pub gid: Gid,
    /// Root makes the root for another user (`eddyd --user`): an existing root must be
    /// private and this deployment's; it is handed over with `fchown`.
    pub for_user: bool,
}

fn refuse(root: &Path, reason: String) -> DaemonError {
    DaemonError::UnsafeRoot {
        path: root.to_owned(),
        reason,
    }
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

/// Refuses a directory above the root that another user could change.
fn check_above(path: &Path, st: &FileStat, owner: &RootOwner) -> Result<(), String> {
    if st.st_uid != 0 && st.st_uid != owner.uid.as_raw() {
        return Err(format!(
            "{} belongs to uid {}: the directories above a storage root must belong to root \
             or to the daemon's user (uid {}), or someone else could replace the root",
            path.display(),
            st.st_uid,
            owner.uid
        ));
    }
    if st.st_mode & 0o022 != 0 && st.st_mode & libc::S_ISVTX == 0 {
        return Err(format!(
            "{} (mode {:04o}) may be written by other users and has no sticky bit: they \
             could replace the root",
            path.display(),
            st.st_mode & 0o7777
        ));
    }
    Ok(())
}

fn split(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

/// Opens the directory `dir` (absolute) by walking it from `/` under the rules above.
fn walk(dir: &Path, owner: &RootOwner) -> Result<OwnedFd, String> {
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    // privileged-path: the walk's start, `/` itself
    let top = openat(AT_FDCWD, "/", flags, Mode::empty()).map_err(|e| format!("/: {e}"))?;
    let top_st = fstat(&top).map_err(|e| format!("/: {e}"))?;
    check_above(Path::new("/"), &top_st, owner)?;
    let mut stack: Vec<(OwnedFd, PathBuf, FileStat)> = vec![(top, PathBuf::from("/"), top_st)];
    let mut todo = split(dir);
    let mut links = 0usize;
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            if stack.len() > 1 {
                stack.pop();
            }
            continue;
        }
        let Some((cur, cur_path, cur_st)) = stack.last() else {
            return Err("walking to the root lost its place".into());
        };
        let here = cur_path.join(&name);
        let st = match fstatat(cur, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            // A missing directory is made (0755, so the daemon's user can pass) in the
            // directory just checked, as `create_dir_all` would; then looked at as any other.
            Err(NixErrno::ENOENT) => {
                make_passable_dir(cur, &name)
                    .map_err(|e| format!("cannot make {}: {e}", here.display()))?;
                fstatat(cur, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
            }
            other => other,
        }
        .map_err(|e| format!("{}: {e}", here.display()))?;
        match kind(&st) {
            SFlag::S_IFLNK => {
                if st.st_uid != 0 || cur_st.st_uid != 0 || cur_st.st_mode & 0o022 != 0 {
                    return Err(format!(
                        "{} is a symbolic link that a user other than root could have made: \
                         give the storage root's real path",
                        here.display()
                    ));
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(format!("{}: too many symbolic links", dir.display()));
                }
                let target = readlinkat(cur, name.as_os_str())
                    .map_err(|e| format!("{}: {e}", here.display()))?;
                let target = Path::new(&target);
                if target.is_absolute() {
                    stack.truncate(1);
                }
                let mut next = split(target);
                next.extend(todo);
                todo = next;
            }
            SFlag::S_IFDIR => {
                let fd = openat(cur, name.as_os_str(), flags, Mode::empty())
                    .map_err(|e| format!("{}: {e}", here.display()))?;
                let st = fstat(&fd).map_err(|e| format!("{}: {e}", here.display()))?;
                check_above(&here, &st, owner)?;
                stack.push((fd, here, st));
            }
            _ => return Err(format!("{} is not a directory", here.display())),
        }
    }
    stack
        .pop()
        .map(|(fd, _, _)| fd)
        .ok_or_else(|| "walking to the root lost its place".into())
}

/// Whether the directory open at `fd` holds no entry.
fn is_empty(fd: &OwnedFd) -> nix::Result<bool> {
    let mut dir = nix::dir::Dir::openat(
        fd,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    for entry in dir.iter() {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What the mark file holds for `mark`.
fn mark_text(mark: &[u8]) -> String {
    format!("{}\n", hex::encode(mark))
}

/// The mark file's content, if there is one (never following a symbolic link).
fn read_mark(fd: &OwnedFd) -> nix::Result<Option<Vec<u8>>> {
    let f = match openat(
        fd,
        MARK_FILE,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        Mode::empty(),
    ) {
        Ok(f) => f,
        Err(NixErrno::ENOENT) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut text = Vec::new();
    std::fs::File::from(f)
        .take(4096)
        .read_to_end(&mut text)
        .map_err(|e| NixErrno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    Ok(Some(text))
}

/// Writes a new mark file (exclusively: an existing name is never written through).
fn write_mark(fd: &OwnedFd, mark: &[u8], owner: &RootOwner) -> nix::Result<()> {
    let f = openat(
        fd,
        MARK_FILE,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )?;
    if owner.for_user {
        fchown(&f, Some(owner.uid), Some(owner.gid))?;
    }
    let mut file = std::fs::File::from(f);
    file.write_all(mark_text(mark).as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| NixErrno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
}

/// Makes the storage root `root` (or accepts an existing one) for `owner` under the rules
/// of this module; `mark` is this deployment's root mark.
pub fn prepare(root: &Path, owner: RootOwner, mark: &[u8]) -> Result<(), DaemonError> {
    let root = std::path::absolute(root).map_err(|source| DaemonError::Root {
        path: root.to_owned(),
        source,
    })?;
    let (Some(parent), Some(name)) = (root.parent(), root.file_name()) else {
        return Err(refuse(
            &root,
            "a storage root must be a directory below /, named without '..'".into(),
        ));
    };
    let sys = |what: &str, e: NixErrno| refuse(&root, format!("{what}: {e}"));
    let pfd = walk(parent, &owner).map_err(|reason| refuse(&root, reason))?;
    let fresh = match mkdirat(&pfd, name, Mode::from_bits_truncate(0o700)) {
        Ok(()) => true,
        Err(NixErrno::EEXIST) => false,
        Err(e) => return Err(sys("cannot make it", e)),
    };
    let st = fstatat(&pfd, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(|e| sys("stat", e))?;
    match kind(&st) {
        SFlag::S_IFDIR => {}
        SFlag::S_IFLNK => {
            return Err(refuse(
                &root,
                "it exists and is a symbolic link: a storage root is never reached through \
                 one; remove it or choose another root"
                    .into(),
            ))
        }
        _ => {
            return Err(refuse(
                &root,
                "it exists and is not a directory; remove it or choose another root".into(),
            ))
        }
    }
    let fd = openat(
        &pfd,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| sys("cannot open it", e))?;
    let st = fstat(&fd).map_err(|e| sys("stat", e))?;
    check_root(&root, &st, &owner, fresh)?;
    let mode = st.st_mode & 0o7777;
    if mode != 0o700 {
        if !fresh {
            tracing::warn!(
                root = %root.display(),
                "storage root had mode {mode:04o}; tightened to 0700"
            );
        }
        fchmod(&fd, Mode::from_bits_truncate(0o700)).map_err(|e| sys("chmod 0700", e))?;
    }
    match read_mark(&fd).map_err(|e| sys("reading its mark", e))? {
        Some(text) if text == mark_text(mark).as_bytes() => {}
        Some(_) if owner.for_user => {
            return Err(refuse(
                &root,
                format!(
                    "it holds another deployment's storage (its {MARK_FILE} names another \
                     deployment); remove it or choose another root"
                ),
            ))
        }
        Some(_) => {
            // Its owner's own root, used by a deployment started again: it is this one's now.
            nix::unistd::unlinkat(&fd, MARK_FILE, nix::unistd::UnlinkatFlags::NoRemoveDir)
                .map_err(|e| sys("replacing its mark", e))?;
            write_mark(&fd, mark, &owner).map_err(|e| sys("writing its mark", e))?;
        }
        None => {
            if owner.for_user && !fresh && !is_empty(&fd).map_err(|e| sys("listing it", e))? {
                return Err(refuse(
                    &root,
                    format!(
                        "it already holds files but no {MARK_FILE} of this deployment; remove \
                         it or choose another root"
                    ),
                ));
            }
            write_mark(&fd, mark, &owner).map_err(|e| sys("writing its mark", e))?;
        }
    }
    if owner.for_user && (st.st_uid != owner.uid.as_raw() || st.st_gid != owner.gid.as_raw()) {
        fchown(&fd, Some(owner.uid), Some(owner.gid))
            .map_err(|e| sys("cannot give it to the daemon's user", e))?;
    }
    Ok(())
}

/// `prepare` for a daemon running as its own user (no `--user`): the root is the process's
/// effective user's.
pub fn prepare_own(root: &Path, secret: &[u8]) -> Result<(), DaemonError> {
    let owner = RootOwner {
        uid: Uid::effective(),
        gid: Gid::effective(),
        for_user: false,
    };
    prepare(root, owner, &eddy_proto::auth::root_mark(secret))
}

/// Makes the directory `path` (and missing parents) private to its owner: mode 0700, also
/// when it existed with a looser mode.
pub fn private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    // privileged-path: as the daemon's user: private_dir is called after become_user (store, chunks, stats)
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    // privileged-path: as the daemon's user (see private_dir)
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            format!("{} is not a directory", path.display()),
        ));
    }
    if meta.permissions().mode() & 0o7777 != 0o700 {
        // privileged-path: as the daemon's user (see private_dir)
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Refuses an existing root that is not the daemon's (or root's, for `--user`) or, for
/// `--user`, not private.
fn check_root(
    root: &Path,
    st: &FileStat,
    owner: &RootOwner,
    fresh: bool,
) -> Result<(), DaemonError> {
    let uid = st.st_uid;
    let ok_owner = uid == owner.uid.as_raw() || (owner.for_user && uid == 0);
    if !ok_owner {
        return Err(refuse(
            root,
            format!(
                "it exists and belongs to uid {uid}, not to the daemon's user (uid {}); \
                 remove it or choose another root",
                owner.uid
            ),
        ));
    }
    let mode = st.st_mode & 0o7777;
    if owner.for_user && !fresh && mode & 0o077 != 0 {
        return Err(refuse(
            root,
            format!(
                "it exists with mode {mode:04o}: a storage root must be private (0700), and \
                 other users may have read or placed what it holds; remove it or choose \
                 another root"
            ),
        ));
    }
    Ok(())
}

/// Makes the directory `name` in `dir`, mode 0755 whatever the umask (eddyd's is 077), and
/// never seen otherwise: it is made under a name of its own, given its mode, then renamed
/// into place unless another process made `name` meanwhile (several daemons of a host
/// starting at once, whose users could not pass a directory caught at 0700).
fn make_passable_dir(dir: &OwnedFd, name: &std::ffi::OsStr) -> Result<(), NixErrno> {
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut tmp = OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".eddy-mkdir-{}-{n}", std::process::id()));
    mkdirat(dir, tmp.as_os_str(), Mode::from_bits_truncate(0o700))?;
    let placed = openat(
        dir,
        tmp.as_os_str(),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .and_then(|d| fchmod(&d, Mode::from_bits_truncate(0o755)))
    .and_then(|()| {
        nix::fcntl::renameat2(
            dir,
            tmp.as_os_str(),
            dir,
            name,
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        )
    });
    match placed {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ =
                nix::unistd::unlinkat(dir, tmp.as_os_str(), nix::unistd::UnlinkatFlags::RemoveDir);
            match e {
                NixErrno::EEXIST => Ok(()),
                e => Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    const MARK: &[u8] = b"mark of deployment A";

    fn me() -> RootOwner {
        RootOwner {
            uid: Uid::effective(),
            gid: Gid::effective(),
            for_user: false,
        }
    }

    fn nobody() -> RootOwner {
        RootOwner {
            uid: Uid::from_raw(65534),
            gid: Gid::from_raw(65534),
            for_user: true,
        }
    }

    /// The `--user` path runs as root only: without root these tests fail, naming it.
    fn require_root() {
        assert!(
            Uid::effective().is_root(),
            "this test needs root: it makes roots for another user (eddyd --user)"
        );
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    fn reason(r: Result<(), DaemonError>) -> String {
        match r {
            Err(DaemonError::UnsafeRoot { reason, .. }) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_fresh_root_is_private_marked_and_accepted_again() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r");
        prepare(&root, me(), MARK).unwrap();
        assert_eq!(mode(&root), 0o700);
        let mark = root.join(MARK_FILE);
        assert_eq!(mode(&mark), 0o600);
        assert_eq!(std::fs::read(&mark).unwrap(), mark_text(MARK).as_bytes());
        std::fs::create_dir(root.join("meta")).unwrap();
        prepare(&root, me(), MARK).unwrap();
    }

    #[test]
    fn missing_parents_are_made_as_the_walk_goes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("pool/io1/job-5");
        prepare(&root, me(), MARK).unwrap();
        assert_eq!(mode(&dir.path().join("pool/io1")), 0o755);
        assert_eq!(mode(&root), 0o700);
    }

    #[test]
    fn an_own_looser_root_is_tightened() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r");
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        prepare(&root, me(), MARK).unwrap();
        assert_eq!(mode(&root), 0o700);
    }

    #[test]
    fn a_parent_made_by_several_at_once_is_never_seen_unpassable() {
        use std::os::unix::fs::PermissionsExt;
        let top = tempfile::tempdir().unwrap();
        let dir: OwnedFd = std::fs::File::open(top.path()).unwrap().into();
        let dir = std::sync::Arc::new(dir);
        let name = std::ffi::OsString::from("io1");
        let seen_closed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        std::thread::scope(|s| {
            for _ in 0..8 {
                let (dir, name, seen) = (dir.clone(), name.clone(), seen_closed.clone());
                let path = top.path().join("io1");
                s.spawn(move || {
                    make_passable_dir(&dir, &name).unwrap();
                    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
                    if mode & 0o777 != 0o755 {
                        seen.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                });
            }
        });
        assert!(!seen_closed.load(std::sync::atomic::Ordering::Relaxed));
        let names: Vec<_> = std::fs::read_dir(top.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("io1")]);
    }

    #[test]
    fn a_symlink_above_the_root_made_by_a_user_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let link = open.join("l");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        // A link in a directory others may write to is never followed.
        let why = reason(prepare(&link.join("r"), me(), MARK));
        assert!(why.contains("symbolic link"), "{why}");
        assert!(!real.join("r").exists());
    }

    #[test]
    fn a_parent_others_may_write_without_sticky_bit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let why = reason(prepare(&open.join("r"), me(), MARK));
        assert!(why.contains("no sticky bit"), "{why}");
    }

    /// Tests that need root: `make test` runs them, `make test-fast` skips them.
    mod needs_root {
        use super::*;

        #[test]
        fn a_symlink_in_place_of_the_root_is_refused_and_its_target_untouched() {
            require_root();
            let dir = tempfile::tempdir().unwrap();
            let target = dir.path().join("etc-like");
            std::fs::create_dir(&target).unwrap();
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
            let root = dir.path().join("r");
            std::os::unix::fs::symlink(&target, &root).unwrap();
            let why = reason(prepare(&root, nobody(), MARK));
            assert!(why.contains("symbolic link"), "{why}");
            let st = std::fs::metadata(&target).unwrap();
            assert_eq!((st.uid(), st.mode() & 0o7777), (0, 0o755));
            assert!(!target.join(MARK_FILE).exists());
        }

        #[test]
        fn for_a_user_an_existing_dir_of_another_or_loose_or_unmarked_is_refused() {
            require_root();
            let dir = tempfile::tempdir().unwrap();
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
            // Another user's directory.
            let theirs = dir.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
            nix::unistd::chown(&theirs, Some(Uid::from_raw(65533)), None).unwrap();
            let why = reason(prepare(&theirs, nobody(), MARK));
            assert!(why.contains("belongs to uid 65533"), "{why}");
            // The user's own, but readable by others.
            let loose = dir.path().join("loose");
            std::fs::create_dir(&loose).unwrap();
            std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o755)).unwrap();
            nix::unistd::chown(&loose, Some(Uid::from_raw(65534)), None).unwrap();
            let why = reason(prepare(&loose, nobody(), MARK));
            assert!(why.contains("mode 0755"), "{why}");
            assert_eq!(mode(&loose), 0o755);
            // Root's, private, holding files of no deployment.
            let other = dir.path().join("other");
            std::fs::create_dir(&other).unwrap();
            std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o700)).unwrap();
            std::fs::write(other.join("secret"), b"x").unwrap();
            let why = reason(prepare(&other, nobody(), MARK));
            assert!(why.contains("no eddyd.root"), "{why}");
            assert_eq!(std::fs::metadata(&other).unwrap().uid(), 0);
            // Another deployment's root.
            let fresh = dir.path().join("fresh");
            prepare(&fresh, nobody(), b"deployment B").unwrap();
            let why = reason(prepare(&fresh, nobody(), MARK));
            assert!(why.contains("another deployment"), "{why}");
        }

        #[test]
        fn for_a_user_a_fresh_root_is_theirs_and_a_restart_is_accepted() {
            require_root();
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().join("job");
            prepare(&root, nobody(), MARK).unwrap();
            let st = std::fs::symlink_metadata(&root).unwrap();
            assert_eq!(
                (st.uid(), st.gid(), st.mode() & 0o7777),
                (65534, 65534, 0o700)
            );
            assert_eq!(
                std::fs::metadata(root.join(MARK_FILE)).unwrap().uid(),
                65534
            );
            std::fs::create_dir(root.join("meta")).unwrap();
            prepare(&root, nobody(), MARK).unwrap();
            // An empty private directory root made (e.g. `eddy start`'s) is taken and marked.
            let made = dir.path().join("made");
            std::fs::create_dir(&made).unwrap();
            std::fs::set_permissions(&made, std::fs::Permissions::from_mode(0o700)).unwrap();
            prepare(&made, nobody(), MARK).unwrap();
            assert_eq!(std::fs::metadata(&made).unwrap().uid(), 65534);
        }
    }
}
