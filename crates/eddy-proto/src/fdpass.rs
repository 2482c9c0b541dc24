//! Descriptors passed over a Unix socket (SCM_RIGHTS), for direct local I/O (decision
//! 0048): on the daemon's descriptor socket (`eddyd.fd` in its root, served whether or
//! not the daemon has a Unix socket for requests), the client sends the 16-byte token of a
//! `DirectGrant`; the daemon answers one byte, the number of descriptors, with the
//! descriptors attached. Blocking calls on std sockets with timeouts: the exchange is local
//! and short.
//!
//! The client side trusts nothing of it (decision 0058): the daemon and its root belong to
//! the job's user, and the client may be root (the mount). `DaemonRoot` holds the daemon's
//! root by a descriptor opened without following links; the socket is reached beneath that
//! descriptor, its peer must be the root's owner, and every descriptor that arrives must be
//! a regular file of that owner on the root's device, opened with exactly the access asked
//! for (never `O_PATH`), or it is closed unused.

use crate::{Errno, FileId};
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Most descriptors one answer carries.
pub const MAX_FDS: usize = 4;

/// The name of a daemon's descriptor socket in its storage root (private to the
/// daemon's user, as the root is).
pub const SOCKET_FILE: &str = "eddyd.fd";

/// A daemon's descriptor socket, in its storage root `root`.
pub fn socket_path(root: &std::path::Path) -> std::path::PathBuf {
    root.join(SOCKET_FILE)
}

/// A daemon's storage root as a client holds it: the directory, opened once without
/// following a link in any component, its owner (the daemon's user) and its device.
#[derive(Debug)]
pub struct DaemonRoot {
    dir: OwnedFd,
    uid: u32,
    gid: u32,
    dev: u64,
}

/// How long a descriptor exchange may take, each way.
pub const EXCHANGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl DaemonRoot {
    /// Opens the daemon root `root` (`O_PATH`, no link followed anywhere on the path).
    pub fn open(root: &Path) -> Result<DaemonRoot, Errno> {
        let what = || format!("daemon root {}", root.display());
        let dir = openat2(
            None,
            root,
            libc::O_DIRECTORY,
            libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
        )
        .map_err(|e| Errno::from_io(&e, what()))?;
        let st = nix::sys::stat::fstat(&dir).map_err(|e| Errno::new(e as i32, what()))?;
        Ok(DaemonRoot {
            dir,
            uid: st.st_uid,
            gid: st.st_gid,
            dev: st.st_dev,
        })
    }

    /// The daemon's user: the owner of its root.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// The group of the daemon's root.
    pub fn gid(&self) -> u32 {
        self.gid
    }

    /// The descriptor socket's entry beneath the root, not followed: `Ok` when it is a
    /// socket of the root's owner.
    fn socket_entry(&self) -> Result<(), Errno> {
        let st = nix::sys::stat::fstatat(
            &self.dir,
            SOCKET_FILE,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(|e| Errno::new(e as i32, format!("{SOCKET_FILE} in the daemon's root")))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFSOCK || st.st_uid != self.uid {
            return Err(Errno::new(
                libc::EACCES,
                format!(
                    "{SOCKET_FILE} in the daemon's root is not a socket of the root's owner                      (uid {}): not used",
                    self.uid
                ),
            ));
        }
        Ok(())
    }

    /// Whether the root holds a descriptor socket of its owner now.
    pub fn has_socket(&self) -> bool {
        self.socket_entry().is_ok()
    }

    /// Connects to the descriptor socket beneath the root (`socket_beneath` the root's own
    /// descriptor, so a root renamed or replaced since it was opened is not followed, and the
    /// socket checked is the one reached), and checks that the peer is the root's owner
    /// (`SO_PEERCRED`) before a byte is sent.
    pub fn connect(&self) -> Result<UnixStream, Errno> {
        let sock = socket_beneath(&self.dir, std::ffi::OsStr::new(SOCKET_FILE)).map_err(|e| {
            let what = format!("{SOCKET_FILE} in the daemon's root");
            match e.kind() {
                std::io::ErrorKind::PermissionDenied => {
                    Errno::new(libc::EACCES, format!("{what}: {e}: not used"))
                }
                _ => Errno::from_io(&e, what),
            }
        })?;
        if sock.uid != self.uid {
            return Err(Errno::new(
                libc::EACCES,
                format!(
                    "{SOCKET_FILE} in the daemon's root belongs to uid {}, not to the root's \
                     owner (uid {}): not used",
                    sock.uid, self.uid
                ),
            ));
        }
        // privileged-path: /proc/self/fd of the socket inode opened O_PATH|O_NOFOLLOW beneath the root and checked above; the peer checked next
        let s = UnixStream::connect(sock.proc_path())
            .map_err(|e| Errno::from_io(&e, "the daemon's descriptor socket"))?;
        let io = |e: std::io::Error| Errno::from_io(&e, "the daemon's descriptor socket");
        s.set_read_timeout(Some(EXCHANGE_TIMEOUT)).map_err(io)?;
        s.set_write_timeout(Some(EXCHANGE_TIMEOUT)).map_err(io)?;
        let peer = nix::sys::socket::getsockopt(&s, nix::sys::socket::sockopt::PeerCredentials)
            .map_err(|e| Errno::new(e as i32, "the descriptor socket's peer"))?;
        if peer.uid() != self.uid {
            return Err(Errno::new(
                libc::EACCES,
                format!(
                    "the descriptor socket is served by uid {}, not by the daemon's user (uid \
                     {}): not used",
                    peer.uid(),
                    self.uid
                ),
            ));
        }
        Ok(s)
    }

    /// Redeems `token` of a lease of file `id` and checks what arrives: the file's data file
    /// opened read-write when `write`, else read-only, then at most its sum file, read-only.
    /// A descriptor that fails a check fails the whole answer (all are closed).
    pub fn redeem(&self, token: u128, id: FileId, write: bool) -> Result<Vec<OwnedFd>, Errno> {
        let mut s = self.connect()?;
        let fds = redeem(&mut s, token)?;
        if fds.len() > 2 {
            return Err(Errno::eio(format!(
                "the daemon sent {} descriptors for one lease",
                fds.len()
            )));
        }
        let data = data_file(id);
        for (i, fd) in fds.iter().enumerate() {
            match i {
                0 => self.check(fd, &data, write)?,
                _ => self.check(fd, &sum_file(&data), false)?,
            }
        }
        Ok(fds)
    }

    /// A descriptor from the daemon is usable only as the file at `rel` beneath the root
    /// (opened here beneath the root's descriptor, no link followed, not leaving its file
    /// system: the same inode), a regular file of the root's owner, opened (not `O_PATH`)
    /// with exactly the access asked for: read-write when `write`, else read-only.
    pub fn check(&self, fd: &OwnedFd, rel: &str, write: bool) -> Result<(), Errno> {
        let refuse = |why: String| {
            Errno::new(
                libc::EACCES,
                format!("a descriptor from the daemon's socket refused: {why}"),
            )
        };
        let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL)
            .map_err(|e| Errno::new(e as i32, "the flags of a descriptor from the daemon"))?;
        if flags & libc::O_PATH != 0 {
            return Err(refuse("opened O_PATH".into()));
        }
        let want = if write { libc::O_RDWR } else { libc::O_RDONLY };
        if flags & libc::O_ACCMODE != want {
            return Err(refuse(format!(
                "access mode {:o}, asked for {want:o}",
                flags & libc::O_ACCMODE
            )));
        }
        let st = nix::sys::stat::fstat(fd)
            .map_err(|e| Errno::new(e as i32, "the status of a descriptor from the daemon"))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(refuse(format!(
                "not a regular file (mode {:o})",
                st.st_mode
            )));
        }
        if st.st_uid != self.uid {
            return Err(refuse(format!(
                "owned by uid {}, not by the daemon's user (uid {})",
                st.st_uid, self.uid
            )));
        }
        if st.st_dev != self.dev {
            return Err(refuse("not on the daemon root's device".into()));
        }
        let named = openat2(
            Some(&self.dir),
            Path::new(rel),
            0,
            libc::RESOLVE_BENEATH
                | libc::RESOLVE_NO_SYMLINKS
                | libc::RESOLVE_NO_MAGICLINKS
                | libc::RESOLVE_NO_XDEV,
        )
        .map_err(|e| refuse(format!("{rel} beneath the daemon's root: {e}")))?;
        let at = nix::sys::stat::fstat(&named)
            .map_err(|e| Errno::new(e as i32, format!("{rel} beneath the daemon's root")))?;
        if (at.st_dev, at.st_ino) != (st.st_dev, st.st_ino) {
            return Err(refuse(format!(
                "not the file {rel} beneath the daemon's root"
            )));
        }
        Ok(())
    }
}

/// A Unix socket held by an `O_PATH` descriptor, checked to be a socket, and its owner.
#[derive(Debug)]
pub struct SocketInode {
    inode: OwnedFd,
    /// The uid that owns the socket.
    pub uid: u32,
}

impl SocketInode {
    /// The path to connect to: through this process's descriptor of the very inode checked,
    /// so that nothing put at the socket's name since is reached.
    pub fn proc_path(&self) -> String {
        format!("/proc/self/fd/{}", self.inode.as_raw_fd())
    }
}

/// The entry `name` of directory `dir`, opened `O_PATH|O_NOFOLLOW` (a link there is refused,
/// never followed) and checked to be a socket: how root reaches a socket in a directory a
/// user owns (the daemons' request sockets, their descriptor sockets). The caller checks the
/// owner against what it expects, and the peer (`SO_PEERCRED`) once connected.
pub fn socket_beneath(dir: &OwnedFd, name: &std::ffi::OsStr) -> std::io::Result<SocketInode> {
    let refuse = |why: &str| {
        std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{}: {why}", name.to_string_lossy()),
        )
    };
    let c = std::ffi::CString::new(name.as_encoded_bytes())
        .map_err(|_| refuse("a name with a NUL byte"))?;
    // SAFETY: openat on a descriptor we hold and a NUL-terminated name; the result is checked.
    let raw = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just gave this process, owned once from here on.
    let inode = unsafe { OwnedFd::from_raw_fd(raw) };
    let st = nix::sys::stat::fstat(&inode).map_err(std::io::Error::from)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(refuse(
            "not a socket (a link, FIFO or file is there): refused",
        ));
    }
    Ok(SocketInode {
        inode,
        uid: st.st_uid,
    })
}

/// The directory of a daemon's root that holds the data files.
pub const CHUNKS_DIR: &str = "chunks";
/// Suffix of a data file's companion holding its block checksums.
pub const SUM_SUFFIX: &str = ".sum";
/// Hashed subdirectories of the chunk directory.
pub const FANOUT: u64 = 256;

/// A file id mixed into 64 bits (its top byte picks the data file's subdirectory).
pub fn mix(id: FileId) -> u64 {
    ((id as u64) ^ ((id >> 64) as u64)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The hashed subdirectory (of the chunk directory) of file `id`'s data file.
pub fn data_subdir(id: FileId) -> String {
    format!("{:02x}", (mix(id) >> 56) % FANOUT)
}

/// File `id`'s data file, relative to its daemon's root (decision 0015):
/// `chunks/<hh>/<id as 32 hex>`.
pub fn data_file(id: FileId) -> String {
    format!("{CHUNKS_DIR}/{}/{id:032x}", data_subdir(id))
}

/// The sum file beside the data file `data` (relative to the root as `data` is).
pub fn sum_file(data: &str) -> String {
    format!("{data}{SUM_SUFFIX}")
}

/// `openat2` of `path` beneath `dir` (the working directory when `None`), `O_PATH` with
/// `flags` added, no link followed at the end, with the `resolve` restrictions.
fn openat2(
    dir: Option<&OwnedFd>,
    path: &Path,
    flags: i32,
    resolve: u64,
) -> std::io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: open_how is plain integers, for which all zeroes is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC | flags) as u64;
    how.resolve = resolve;
    // privileged-path: AT_FDCWD only for a daemon root named by the deployment file, resolved with RESOLVE_NO_SYMLINKS
    let dirfd = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: `c` is a NUL-terminated path, `how` a valid open_how of the size given and
    // `dirfd` a descriptor we hold (or AT_FDCWD); the kernel returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; owned from here on, once.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Client side: redeems `token` on the descriptor socket `stream`; returns the descriptors
/// as they came (`DaemonRoot::redeem` checks them).
pub fn redeem(stream: &mut UnixStream, token: u128) -> Result<Vec<OwnedFd>, Errno> {
    stream
        .write_all(&token.to_le_bytes())
        .map_err(|e| Errno::from_io(&e, "sending a token on the daemon's descriptor socket"))?;
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let msg = recvmsg::<()>(
        stream.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|e| Errno::new(e as i32, "receiving descriptors from the daemon"))?;
    let mut fds = Vec::new();
    for cmsg in msg
        .cmsgs()
        .map_err(|e| Errno::new(e as i32, "reading descriptors"))?
    {
        if let ControlMessageOwned::ScmRights(got) = cmsg {
            // SAFETY: the kernel installed these descriptors in this process for us; each is
            // owned from here on, once.
            fds.extend(
                got.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
        return Err(Errno::eio(
            "the daemon sent more descriptors than an answer carries",
        ));
    }
    if msg.bytes != 1 {
        return Err(Errno::eio(
            "the daemon's descriptor socket closed without answering",
        ));
    }
    if fds.len() != usize::from(byte[0]) {
        return Err(Errno::eio(format!(
            "the daemon announced {} descriptors and sent {}",
            byte[0],
            fds.len()
        )));
    }
    Ok(fds)
}

/// Daemon side: reads the token a client sends on `stream`.
pub fn read_token(stream: &mut UnixStream) -> Result<u128, Errno> {
    let mut raw = [0u8; 16];
    stream
        .read_exact(&mut raw)
        .map_err(|e| Errno::from_io(&e, "reading a token on the descriptor socket"))?;
    Ok(u128::from_le_bytes(raw))
}

/// Daemon side: sends `fds` (at most `MAX_FDS`; none answers a refused token).
pub fn hand_over(stream: &UnixStream, fds: &[BorrowedFd<'_>]) -> Result<(), Errno> {
    if fds.len() > MAX_FDS {
        return Err(Errno::einval("too many descriptors for one answer"));
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let byte = [fds.len() as u8];
    let iov = [IoSlice::new(&byte)];
    let rights = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &rights };
    sendmsg::<()>(stream.as_raw_fd(), &iov, cmsgs, MsgFlags::empty(), None)
        .map_err(|e| Errno::new(e as i32, "handing descriptors over"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn descriptors_cross_a_socket_pair_and_read_what_the_sender_wrote() {
        let (mut client, mut daemon) = UnixStream::pair().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        std::fs::write(&path, b"direct bytes").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let token = 0x1234_5678_9abc_def0_1122_3344_5566_7788u128;
        let t = std::thread::spawn(move || {
            let got = read_token(&mut daemon).unwrap();
            assert_eq!(got, token);
            hand_over(&daemon, &[file.as_fd()]).unwrap();
        });
        let fds = redeem(&mut client, token).unwrap();
        t.join().unwrap();
        assert_eq!(fds.len(), 1);
        let mut f = std::fs::File::from(fds.into_iter().next().unwrap());
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "direct bytes");
    }

    /// A daemon root holding file 7's data file (and its sum file), opened as a client does.
    fn root_with_file() -> (tempfile::TempDir, DaemonRoot, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join(data_file(7));
        std::fs::create_dir_all(data.parent().unwrap()).unwrap();
        std::fs::write(&data, b"data").unwrap();
        std::fs::write(dir.path().join(sum_file(&data_file(7))), b"sums").unwrap();
        let root = DaemonRoot::open(dir.path()).unwrap();
        (dir, root, data)
    }

    fn open(p: &Path, flags: i32) -> OwnedFd {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(flags & libc::O_ACCMODE != libc::O_WRONLY)
            .write(flags & libc::O_ACCMODE != libc::O_RDONLY)
            .custom_flags(flags & !libc::O_ACCMODE)
            .open(p)
            .unwrap()
            .into()
    }

    #[test]
    fn the_data_file_itself_with_the_access_asked_for_is_accepted() {
        let (_dir, root, data) = root_with_file();
        let rel = data_file(7);
        root.check(&open(&data, libc::O_RDWR), &rel, true).unwrap();
        root.check(&open(&data, libc::O_RDONLY), &rel, false)
            .unwrap();
    }

    #[test]
    fn a_wider_access_an_o_path_or_another_file_is_refused() {
        let (dir, root, data) = root_with_file();
        let rel = data_file(7);
        let refused = |fd: OwnedFd, rel: &str, write: bool| {
            let e = root.check(&fd, rel, write).unwrap_err();
            assert_eq!(e.errno, libc::EACCES, "{e:?}");
        };
        // Read-write where read-only was asked for, read-only where read-write was.
        refused(open(&data, libc::O_RDWR), &rel, false);
        refused(open(&data, libc::O_RDONLY), &rel, true);
        refused(open(&data, libc::O_PATH), &rel, false);
        // Another file of the same owner, on the same device, beneath the same root.
        let other = dir.path().join("other");
        std::fs::write(&other, b"x").unwrap();
        refused(open(&other, libc::O_RDONLY), &rel, false);
        // The sum file offered as the data file.
        refused(
            open(&dir.path().join(sum_file(&rel)), libc::O_RDONLY),
            &rel,
            false,
        );
        // A link at the expected name to the real file is not followed.
        std::fs::rename(&data, &other).unwrap();
        std::os::unix::fs::symlink(&other, &data).unwrap();
        refused(open(&other, libc::O_RDONLY), &rel, false);
    }

    #[test]
    fn a_socket_entry_that_is_a_link_or_not_a_socket_is_never_connected() {
        let (dir, root, _) = root_with_file();
        assert!(!root.has_socket());
        let elsewhere = tempfile::tempdir().unwrap();
        let real = elsewhere.path().join("real.sock");
        let _l = std::os::unix::net::UnixListener::bind(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join(SOCKET_FILE)).unwrap();
        assert!(!root.has_socket());
        assert_eq!(root.connect().unwrap_err().errno, libc::EACCES);
        std::fs::remove_file(dir.path().join(SOCKET_FILE)).unwrap();
        let _own = std::os::unix::net::UnixListener::bind(dir.path().join(SOCKET_FILE)).unwrap();
        assert!(root.has_socket());
        root.connect().unwrap();
    }

    #[test]
    fn a_refusal_carries_no_descriptor_and_a_closed_socket_is_an_error() {
        let (mut client, daemon) = UnixStream::pair().unwrap();
        hand_over(&daemon, &[]).unwrap();
        assert!(redeem(&mut client, 1).unwrap().is_empty());
        drop(daemon);
        let e = redeem(&mut client, 2).unwrap_err();
        assert!(e.msg.contains("closed") || e.errno == libc::EPIPE, "{e:?}");
    }
}
