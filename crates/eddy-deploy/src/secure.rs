//! File work done as root where a user may be watching: root never follows a path a user
//! can change. Either every directory of the path is root's and closed to others (checked on
//! the resolved path, so no user can swap a component afterwards: `trusted_dir`), or the work
//! goes through a directory descriptor opened without following links, with `mkdirat`,
//! `openat(O_CREAT|O_EXCL|O_NOFOLLOW)`, `fchown`/`fchmod` on descriptors and `renameat`
//! (`DirFd`), so that a link a user plants is never followed and never chowned.

use anyhow::{bail, Context, Result};
use nix::errno::Errno;
use nix::fcntl::{openat, renameat, OFlag, AT_FDCWD};
use nix::sys::stat::{fchmod, fstat, mkdirat, FileStat, Mode};
use nix::unistd::{fchown, Gid, Uid};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The user and group this process runs as: root, or Slurm's SlurmUser.
pub fn me() -> (u32, u32) {
    (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    )
}

/// Makes `path` if missing (as `create_dir_all`), resolves it and checks that no user but
/// root (or the user this process runs as, e.g. Slurm's SlurmUser) can change what it names:
/// every directory on the way, and the entry itself, is theirs and writable by its owner
/// only, or sticky with the next entry theirs (as `/tmp` holding a root-owned directory).
/// Returns the resolved directory, open.
pub fn trusted_dir(path: &Path) -> Result<DirFd> {
    // privileged-path: trusted_dir itself: the resolved path is then checked from / component by component
    std::fs::create_dir_all(path).with_context(|| format!("cannot create {}", path.display()))?;
    // privileged-path: trusted_dir itself: the resolved path is then checked from / component by component
    let canon = std::fs::canonicalize(path)
        .with_context(|| format!("cannot resolve {}", path.display()))?;
    // Every entry on the way is root's, so no one else can rename or replace the next one
    // (in a sticky directory such as /tmp, only an entry's owner can); and none but a sticky
    // one is writable by others, so no one else can add or remove entries in it.
    let (me, _) = me();
    let check = |p: &Path| -> Result<bool> {
        let st =
            // privileged-path: lstat (no link followed) of each component trusted_dir checks
            nix::sys::stat::lstat(p).with_context(|| format!("cannot stat {}", p.display()))?;
        if st.st_uid != 0 && st.st_uid != me {
            bail!(
                "{} belongs to uid {}: root does not work under a directory another user can \
                 change",
                p.display(),
                st.st_uid
            );
        }
        let open = st.st_mode & 0o022 != 0;
        if open && st.st_mode & 0o1000 == 0 {
            bail!(
                "{} is writable by group or others (mode {:o}): root does not work under a \
                 directory another user can change",
                p.display(),
                st.st_mode & 0o7777
            );
        }
        Ok(open)
    };
    let mut cur = PathBuf::from("/");
    let mut open = check(&cur)?;
    for comp in canon.components().skip(1) {
        cur.push(comp);
        open = check(&cur)?;
    }
    if open {
        bail!(
            "{} is writable by others (sticky): choose a directory of root's own",
            canon.display()
        );
    }
    DirFd::open(&canon)
}

/// Reads a secret of root's (a database password): `path` must be a regular file (not a
/// link) of root's or this process's user, readable by its owner only (mode 0600 or 0400),
/// at most `max` bytes, in a directory no other user can change (`trusted_dir`, which must
/// exist). Its content without the trailing newline.
pub fn read_secret(path: &Path, max: u64) -> Result<String> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .with_context(|| format!("secret file {} has no directory", path.display()))?;
    let name = path
        .file_name()
        .with_context(|| format!("secret file {} has no name", path.display()))?;
    // privileged-path: only to say clearly that it is missing; trusted_dir checks it next
    if !parent.is_dir() {
        bail!(
            "the directory of the secret file {} is missing",
            path.display()
        );
    }
    let dir = trusted_dir(parent)
        .with_context(|| format!("the directory of the secret file {}", path.display()))?;
    let fd = openat(
        dir.fd.as_fd(),
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        Mode::empty(),
    )
    .with_context(|| {
        format!(
            "cannot open the secret file {} (a link is refused)",
            path.display()
        )
    })?;
    let st = fstat(fd.as_fd()).with_context(|| format!("cannot stat {}", path.display()))?;
    let (me, _) = me();
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        bail!("the secret file {} is not a regular file", path.display());
    }
    if st.st_uid != 0 && st.st_uid != me {
        bail!(
            "the secret file {} belongs to uid {}, not root's: refused",
            path.display(),
            st.st_uid
        );
    }
    if st.st_mode & 0o077 != 0 {
        bail!(
            "the secret file {} is open to group or others (mode {:o}): make it 0600",
            path.display(),
            st.st_mode & 0o7777
        );
    }
    if u64::try_from(st.st_size).unwrap_or(u64::MAX) > max {
        bail!(
            "the secret file {} is larger than {max} bytes",
            path.display()
        );
    }
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(std::fs::File::from(fd), max),
        &mut text,
    )
    .with_context(|| {
        format!(
            "cannot read the secret file {} (UTF-8 text)",
            path.display()
        )
    })?;
    Ok(text.trim_end_matches(['\n', '\r']).to_string())
}

/// A directory held open by descriptor, opened without following a link.
#[derive(Debug)]
pub struct DirFd {
    fd: OwnedFd,
    path: PathBuf,
}

fn mode(bits: u32) -> Mode {
    Mode::from_bits_truncate(bits as libc::mode_t)
}

impl DirFd {
    /// Opens `path`; its last component must not be a link (the components before it are
    /// the caller's to trust: see `trusted_dir`).
    pub fn open(path: &Path) -> Result<DirFd> {
        let fd = openat(
            // privileged-path: O_NOFOLLOW on the last component; the caller trusts the ones above (trusted_dir)
            AT_FDCWD,
            path,
            OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
            Mode::empty(),
        )
        .map_err(|e| not_a_dir(path, e))?;
        Ok(DirFd {
            fd,
            path: path.to_owned(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory `name` inside this one, opened without following a link (a user's
    /// directory is read through it, never by path).
    pub fn sub(&self, name: &str) -> Result<DirFd> {
        let path = self.path.join(name);
        let fd = openat(
            self.fd.as_fd(),
            name,
            OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
            Mode::empty(),
        )
        .map_err(|e| not_a_dir(&path, e))?;
        Ok(DirFd { fd, path })
    }

    /// The names in this directory (not `.` and `..`), read through its descriptor.
    pub fn names(&self) -> Result<Vec<String>> {
        let fd = nix::unistd::dup(self.fd.as_fd())
            .with_context(|| format!("cannot list {}", self.path.display()))?;
        let mut dir = nix::dir::Dir::from_fd(fd)
            .with_context(|| format!("cannot list {}", self.path.display()))?;
        let mut out = Vec::new();
        for entry in dir.iter() {
            let entry = entry.with_context(|| format!("cannot list {}", self.path.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name != "." && name != ".." {
                out.push(name);
            }
        }
        Ok(out)
    }

    /// The whole of the regular file `name` in this directory, at most `max` bytes: opened
    /// without following a link and without blocking (a FIFO or a socket planted there is
    /// refused, never waited on), checked to be a regular file on its descriptor.
    pub fn read_file(&self, name: &str, max: u64) -> Result<Vec<u8>> {
        use std::io::Read;
        let path = self.path.join(name);
        let fd = openat(
            self.fd.as_fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .with_context(|| format!("cannot open {} (a link is refused)", path.display()))?;
        let st = fstat(fd.as_fd()).with_context(|| format!("cannot stat {}", path.display()))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            bail!("{} is not a regular file: refused", path.display());
        }
        if u64::try_from(st.st_size).unwrap_or(u64::MAX) > max {
            bail!("{} is larger than {max} bytes: refused", path.display());
        }
        let mut data = Vec::new();
        std::fs::File::from(fd)
            .take(max.saturating_add(1))
            .read_to_end(&mut data)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if data.len() as u64 > max {
            bail!("{} is larger than {max} bytes: refused", path.display());
        }
        Ok(data)
    }

    /// Removes the entry `name` of this directory (not a directory; a link is removed, never
    /// followed).
    pub fn remove_file(&self, name: &str) -> Result<()> {
        nix::unistd::unlinkat(
            self.fd.as_fd(),
            name,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        )
        .with_context(|| format!("cannot remove {}", self.path.join(name).display()))
    }

    pub fn stat(&self) -> Result<FileStat> {
        fstat(self.fd.as_fd()).with_context(|| format!("cannot stat {}", self.path.display()))
    }

    /// The directory `name` inside this one, made with `mode` (exactly, whatever the umask)
    /// and given to `uid`:`gid` if new. An existing one is accepted only if it is a directory
    /// (not a link) owned by `uid`; its mode is set again.
    pub fn child_dir(&self, name: &str, bits: u32, uid: u32, gid: u32) -> Result<DirFd> {
        let path = self.path.join(name);
        let made = match mkdirat(self.fd.as_fd(), name, mode(0o700)) {
            Ok(()) => true,
            Err(Errno::EEXIST) => false,
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", path.display())),
        };
        let fd = openat(
            self.fd.as_fd(),
            name,
            OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
            Mode::empty(),
        )
        .map_err(|e| not_a_dir(&path, e))?;
        let dir = DirFd { fd, path };
        let st = dir.stat()?;
        if !made && st.st_uid != uid {
            bail!(
                "{} exists and belongs to uid {}, not {uid}: remove it if it is left over",
                dir.path.display(),
                st.st_uid
            );
        }
        if made {
            fchown(
                dir.fd.as_fd(),
                Some(Uid::from_raw(uid)),
                Some(Gid::from_raw(gid)),
            )
            .with_context(|| format!("cannot give {} to uid {uid}", dir.path.display()))?;
        }
        fchmod(dir.fd.as_fd(), mode(bits))
            .with_context(|| format!("cannot set the mode of {}", dir.path.display()))?;
        Ok(dir)
    }

    /// Replaces the file `name` with `data`, atomically (a fresh file, then `renameat`), mode
    /// `bits` and owner `uid`:`gid` set on the new file's descriptor. A link or file a user
    /// planted at either name is replaced, never followed.
    pub fn write_file(&self, name: &str, data: &[u8], bits: u32, uid: u32, gid: u32) -> Result<()> {
        let target = self.path.join(name);
        let tmp = format!(".{name}.{:016x}.new", rand::random::<u64>());
        let fd = openat(
            self.fd.as_fd(),
            tmp.as_str(),
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
            mode(0o600),
        )
        .with_context(|| format!("cannot create a file in {}", self.path.display()))?;
        let done = (|| -> Result<()> {
            fchown(
                fd.as_fd(),
                Some(Uid::from_raw(uid)),
                Some(Gid::from_raw(gid)),
            )
            .with_context(|| format!("cannot give {} to uid {uid}", target.display()))?;
            fchmod(fd.as_fd(), mode(bits))
                .with_context(|| format!("cannot set the mode of {}", target.display()))?;
            let mut file = std::fs::File::from(fd);
            file.write_all(data)
                .and_then(|()| file.sync_all())
                .with_context(|| format!("cannot write {}", target.display()))?;
            renameat(self.fd.as_fd(), tmp.as_str(), self.fd.as_fd(), name)
                .with_context(|| format!("cannot write {}", target.display()))
        })();
        if done.is_err() {
            let _ = nix::unistd::unlinkat(
                self.fd.as_fd(),
                tmp.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
        done
    }
}

fn not_a_dir(path: &Path, e: Errno) -> anyhow::Error {
    match e {
        Errno::ELOOP | Errno::ENOTDIR => anyhow::anyhow!(
            "{} is not a directory (a link or a file is there): refused",
            path.display()
        ),
        e => anyhow::Error::new(e).context(format!("cannot open {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn root_only() -> bool {
        nix::unistd::geteuid().is_root()
    }

    #[test]
    fn planted_links_are_replaced_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let d = DirFd::open(dir.path()).unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("out")).unwrap();
        let (uid, gid) = (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        );
        d.write_file("out", b"new", 0o640, uid, gid).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let out = dir.path().join("out");
        assert!(!std::fs::symlink_metadata(&out).unwrap().is_symlink());
        assert_eq!(std::fs::read(&out).unwrap(), b"new");
        assert_eq!(std::fs::metadata(&out).unwrap().mode() & 0o7777, 0o640);
        // No temporary file is left.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        // A link where a directory is wanted is refused, not followed.
        std::os::unix::fs::symlink(dir.path(), dir.path().join("sub")).unwrap();
        let e = d
            .child_dir("sub", 0o700, uid, gid)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("is not a directory"), "{e}");
        let sub = d.child_dir("fresh", 0o711, uid, gid).unwrap();
        assert_eq!(sub.stat().unwrap().st_mode & libc::S_IFMT, libc::S_IFDIR);
        assert_eq!(sub.stat().unwrap().st_mode & 0o7777, 0o711);
        if root_only() {
            // Someone else's directory is not taken over.
            std::os::unix::fs::chown(dir.path().join("fresh"), Some(65534), None).unwrap();
            let e = d.child_dir("fresh", 0o700, 0, 0).err().unwrap().to_string();
            assert!(e.contains("belongs to uid 65534"), "{e}");
        }
    }

    #[test]
    fn a_users_directory_is_read_through_descriptors() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let stats = dir.path().join("stats");
        std::fs::create_dir(&stats).unwrap();
        std::fs::write(stats.join("a.json"), b"{}").unwrap();
        std::fs::write(stats.join("big.json"), vec![b' '; 4096]).unwrap();
        std::os::unix::fs::symlink(&victim, stats.join("link.json")).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(stats.join("fifo.json"))
            .status()
            .unwrap();
        assert!(made.success());
        let d = DirFd::open(dir.path()).unwrap().sub("stats").unwrap();
        let mut names = d.names().unwrap();
        names.sort();
        assert_eq!(names, ["a.json", "big.json", "fifo.json", "link.json"]);
        assert_eq!(d.read_file("a.json", 100).unwrap(), b"{}");
        let e = format!("{:#}", d.read_file("big.json", 100).unwrap_err());
        assert!(e.contains("larger than 100 bytes"), "{e}");
        let e = format!("{:#}", d.read_file("link.json", 100).unwrap_err());
        assert!(e.contains("a link is refused"), "{e}");
        // A FIFO is neither waited on nor read.
        let e = format!("{:#}", d.read_file("fifo.json", 100).unwrap_err());
        assert!(e.contains("not a regular file"), "{e}");
        d.remove_file("link.json").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        // The directory itself replaced by a link: refused.
        std::fs::rename(&stats, dir.path().join("old")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("old"), &stats).unwrap();
        let e = DirFd::open(dir.path()).unwrap().sub("stats").unwrap_err();
        assert!(e.to_string().contains("is not a directory"), "{e}");
    }

    #[test]
    fn trusted_dirs_are_roots_and_closed() {
        assert_eq!(trusted_dir(Path::new("/")).unwrap().path(), Path::new("/"));
        let e = trusted_dir(Path::new("/tmp")).unwrap_err().to_string();
        assert!(e.contains("writable by others"), "{e}");
        if root_only() {
            let dir = tempfile::tempdir().unwrap();
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            // Under sticky /tmp, a root-owned 0755 directory is safe.
            trusted_dir(dir.path()).unwrap();
            let open = dir.path().join("open");
            std::fs::create_dir(&open).unwrap();
            std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
            let e = trusted_dir(&open.join(".")).unwrap_err().to_string();
            assert!(e.contains("writable by group or others"), "{e}");
            let theirs = dir.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            let e = trusted_dir(&theirs).unwrap_err().to_string();
            assert!(e.contains("belongs to uid 65534"), "{e}");
        }
    }

    /// Tests that need root: `make test` runs them, `make test-fast` skips them.
    mod needs_root {
        use super::*;

        #[test]
        fn secrets_are_root_only_files_never_links() {
            assert!(
                root_only(),
                "this test needs root: the checks are of root's files (`make test` runs as root)"
            );
            let dir = tempfile::tempdir().unwrap();
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
            let pw = dir.path().join("pw");
            std::fs::write(&pw, "s3cret\n").unwrap();
            std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
            assert_eq!(read_secret(&pw, 4096).unwrap(), "s3cret");
            std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o644)).unwrap();
            let e = read_secret(&pw, 4096).unwrap_err().to_string();
            assert!(e.contains("open to group or others"), "{e}");
            std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(&pw, Some(65534), None).unwrap();
            let e = read_secret(&pw, 4096).unwrap_err().to_string();
            assert!(e.contains("belongs to uid 65534"), "{e}");
            std::os::unix::fs::chown(&pw, Some(0), None).unwrap();
            let link = dir.path().join("link");
            std::os::unix::fs::symlink(&pw, &link).unwrap();
            let e = format!("{:#}", read_secret(&link, 4096).unwrap_err());
            assert!(e.contains("a link is refused"), "{e}");
            assert!(read_secret(&pw, 3).is_err(), "larger than the bound");
            // A directory others can change is refused.
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
            assert!(read_secret(&pw, 4096).is_err());
        }
    }
}
