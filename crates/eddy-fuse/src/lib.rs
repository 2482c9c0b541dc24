//! eddy-fuse: the FUSE front-end of Eddy. It mounts the namespace of a deployment as a
//! local file system and translates each kernel request into calls of `eddy-client`.
//!
//! The kernel speaks inode numbers, Eddy speaks paths: `table` keeps the mapping (with the
//! kernel's lookup counts). Requests are served by several threads at once, each running the
//! client's futures itself on the client's runtime, which it drives meanwhile
//! (`eddy_client::driver`, decision 0052). Permissions are checked by the kernel
//! (`default_permissions`) from the attributes we report.
//!
//! What the mount answers, beyond plain POSIX calls:
//! - hard links, special files (FIFOs, sockets, devices), RENAME_EXCHANGE: EOPNOTSUPP
//!   (EINVAL for the rename flag); extended attributes: EOPNOTSUPP (the kernel's answer
//!   to our ENOSYS);
//! - POSIX record locks, OFD locks and flock are served across nodes by the file's lock
//!   daemon (`locks`, decision 0008);
//! - the page cache is dropped at every open (no `keep_cache`) and O_APPEND files bypass it,
//!   so data written on other nodes is seen after an open;
//! - an open file follows a rename done through this mount; a file unlinked or replaced by a
//!   rename through this mount while open lives on under a hidden name until its last close
//!   (`fs/names.rs`, decision 0061); one unlinked or renamed on another node can no longer
//!   be used through its handle (Eddy names metadata by path);
//! - reads move the atime as the `atime` setting or `--atime` says (relatime by default; the
//!   kernel leaves a FUSE file's atime to the file system, decision 0061); the mount is
//!   `nodev,nosuid` unless root asked for `dev`/`suid`;
//! - a file whose chunks all lie in one data file of a daemon of this host is handed to the
//!   kernel (FUSE passthrough, `fs/passthrough.rs`, decision 0049) when the mount runs as
//!   root: the kernel reads and writes it, and flush, fsync and release tell the daemon;
//! - `MountGuard` (tests) aborts its FUSE connection when files are still open at unmount,
//!   since the serving process could not answer for them once it exits.
//!
//! This crate must not talk to daemons itself (everything goes through `eddy_client::Client`),
//! keep per-file state beyond open handles, or answer an unsupported operation (locks, hard
//! links, special files) with a silent success.

mod attr;
mod dir;
mod fresh;
mod fs;
mod locks;
mod negatives;
mod table;
mod xcache;

use eddy_client::driver::Driver;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

/// How to mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountOptions {
    /// Let users other than the one mounting access the file system (`allow_other`).
    pub allow_other: bool,
    /// Source name shown in the mount table, e.g. "eddy".
    pub fsname: String,
    /// Threads serving requests (config `fuse_threads`).
    pub threads: usize,
    /// How long the kernel may cache attributes and entries (config `fuse_attr_ttl_ms`).
    pub attr_ttl: Duration,
    /// How long the kernel may remember that a name does not exist (config
    /// `fuse_negative_ttl_ms`).
    pub negative_ttl: Duration,
    /// Answer lookups in directories this mount made within the negative TTL from what it
    /// knows (config `fuse_fresh_dirs`).
    pub fresh_dirs: bool,
    /// Kernel read-ahead of the mount in KiB, 0 for the kernel's (config `fuse_read_ahead_kb`).
    pub read_ahead_kb: u32,
    /// Hand the kernel the data file of a file that qualifies (FUSE passthrough, decision
    /// 0049; config `fuse_passthrough` and `direct_io`). Taken only when the mount runs as
    /// root and the kernel offers it.
    pub passthrough: bool,
    /// When reads move atime (config `atime`, `eddy mount --atime`; decision 0061). The
    /// kernel leaves a FUSE file's atime to the file system: the mount moves it through the
    /// client, and shows `noatime` in the mount table for `Noatime`.
    pub atime: eddy_config::Atime,
    /// Device nodes on the mount open their devices (`dev`); off by default (`nodev`).
    /// Honoured only for a mount made by root (decision 0061).
    pub dev: bool,
    /// Set-user-ID and set-group-ID bits of programs on the mount count at exec (`suid`);
    /// off by default (`nosuid`). Honoured only for a mount made by root (decision 0061).
    pub suid: bool,
    /// How requests cross to the kernel (config `fuse_transport`, decision 0078): FUSE over
    /// io_uring when asked for and offered, else `/dev/fuse`.
    pub transport: eddy_config::FuseTransport,
}

impl MountOptions {
    /// The options a deployment's configuration asks for, without `allow_other`.
    pub fn from_config(config: &eddy_config::Config) -> MountOptions {
        MountOptions {
            allow_other: false,
            fsname: "eddy".to_string(),
            threads: config.fuse_threads,
            attr_ttl: Duration::from_millis(config.fuse_attr_ttl_ms),
            negative_ttl: Duration::from_millis(config.fuse_negative_ttl_ms),
            fresh_dirs: config.fuse_fresh_dirs,
            read_ahead_kb: config.fuse_read_ahead_kb,
            passthrough: config.fuse_passthrough && config.direct_io,
            atime: config.atime,
            dev: false,
            suid: false,
            transport: config.fuse_transport,
        }
    }
}

/// Errors of mounting and unmounting.
#[derive(Debug, thiserror::Error)]
pub enum FuseError {
    #[error(
        "cannot mount Eddy at {}: {source} (the directory must exist, /dev/fuse must be \
         accessible and fusermount3 from the fuse3 package installed)",
        mountpoint.display()
    )]
    Mount {
        mountpoint: PathBuf,
        source: io::Error,
    },
    #[error("the FUSE session at {} failed: {source}", mountpoint.display())]
    Session {
        mountpoint: PathBuf,
        source: io::Error,
    },
    #[error(
        "cannot mount Eddy at {} over FUSE io_uring (fuse_transport = \"io_uring\"): {reason}",
        mountpoint.display()
    )]
    Transport { mountpoint: PathBuf, reason: String },
    #[error(transparent)]
    Unmount(#[from] eddy_proto::mounts::UnmountError),
}

/// File system subtype: the mount shows as type "fuse.eddy".
pub const SUBTYPE: &str = "eddy";

/// `name` made safe for the mount table and for fusermount3's comma-separated options.
fn mount_table_name(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c == ',' || c == '\\' || c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    if clean.is_empty() {
        SUBTYPE.to_string()
    } else {
        clean
    }
}

/// The fuser session configuration for `opts`.
fn session_config(opts: &MountOptions) -> fuser::Config {
    use fuser::MountOption;
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::FSName(mount_table_name(&opts.fsname)),
        // As a plain option rather than `Subtype`, which fuser's direct mount(2) path (used
        // as root) drops; fusermount3 reads the same "subtype=" string.
        MountOption::CUSTOM(format!("subtype={SUBTYPE}")),
        MountOption::DefaultPermissions,
        // Whoever holds the deployment's secret (the job's user) can give an entry any owner,
        // mode or device number by talking to the daemons directly: a set-uid root program
        // or a device node in the namespace must mean nothing on a mount root made. fuser
        // defaults to both; said here so that no change of options or library loses them.
        // A site or a test that needs them asks explicitly (`eddy mount --dev --suid`, root
        // only; decision 0061).
        if opts.suid {
            MountOption::Suid
        } else {
            MountOption::NoSuid
        },
        if opts.dev {
            MountOption::Dev
        } else {
            MountOption::NoDev
        },
    ];
    if opts.atime == eddy_config::Atime::Noatime {
        config.mount_options.push(MountOption::NoAtime);
    }
    config.acl = if opts.allow_other {
        fuser::SessionACL::All
    } else {
        fuser::SessionACL::Owner
    };
    config.n_threads = Some(opts.threads.max(1));
    config.clone_fd = true;
    config.io_uring = opts.transport != eddy_config::FuseTransport::DevFuse;
    config
}

/// Where a site turns FUSE over io_uring on (root; Linux 6.14+ with `CONFIG_FUSE_IO_URING`).
pub const ENABLE_URING_PARAMETER: &str = "/sys/module/fuse/parameters/enable_uring";

/// Why the kernel did not offer FUSE over io_uring, as far as this host tells.
fn no_uring_reason() -> String {
    // privileged-path: the kernel's sysfs
    match std::fs::read_to_string(ENABLE_URING_PARAMETER) {
        Ok(v) if v.trim() == "Y" => "the kernel offered it in INIT but refused to register the \
             rings (see the mount's log)"
            .to_string(),
        Ok(v) => format!(
            "the kernel does not offer it: {ENABLE_URING_PARAMETER} is {} (a site enables it \
             as root with `echo Y > {ENABLE_URING_PARAMETER}` before mounting)",
            v.trim()
        ),
        Err(e) => format!(
            "the kernel does not offer it: cannot read {ENABLE_URING_PARAMETER} ({e}): it \
             needs Linux 6.14 or later built with CONFIG_FUSE_IO_URING"
        ),
    }
}

fn new_session(
    client: eddy_client::Client,
    driver: Arc<Driver>,
    mountpoint: &Path,
    opts: &MountOptions,
) -> Result<fuser::Session<fs::EddyFs>, FuseError> {
    let announcer = client.clone();
    let fs = fs::EddyFs::new(client, Arc::clone(&driver), opts);
    // Directory leases as the configuration says (`leases`): the kernel's negative entries
    // handed out on a lease's word are invalidated before it goes back (decision 0077).
    fs.client_ref()
        .on_lease_return(Some(fs.lease_return_hook()));
    let notifier = fs.locks().notifier_slot();
    let session = fuser::Session::new(fs, mountpoint, &session_config(opts)).map_err(|source| {
        FuseError::Mount {
            mountpoint: mountpoint.to_owned(),
            source,
        }
    })?;
    let transport = session.transport();
    if opts.transport == eddy_config::FuseTransport::IoUring
        && transport != fuser::Transport::IoUring
    {
        // Dropping the session unmounts.
        drop(session);
        return Err(FuseError::Transport {
            mountpoint: mountpoint.to_owned(),
            reason: no_uring_reason(),
        });
    }
    // Set once, right here: the slot cannot be full yet.
    let _ = notifier.set(session.notifier());
    info!(
        mountpoint = %mountpoint.display(),
        threads = opts.threads,
        transport = %transport,
        "Eddy mounted"
    );
    // The daemons learn what serves this connection, and `eddy status` from them (decision
    // 0079). Sent, not awaited: the replies come in the background.
    let transport = match transport {
        fuser::Transport::IoUring => eddy_proto::MountTransport::IoUring,
        fuser::Transport::DevFuse => eddy_proto::MountTransport::DevFuse,
    };
    driver.drive(announcer.announce_mount(mountpoint.display().to_string(), transport));
    Ok(session)
}

/// Mounts the Eddy namespace of `client` at `mountpoint` and serves it until unmounted
/// (blocking). `driver` holds the runtime `client` was connected on; the FUSE threads drive
/// it in their calls (decision 0052). Do not call this from inside a runtime.
pub fn mount(
    client: eddy_client::Client,
    driver: Arc<Driver>,
    mountpoint: &Path,
    opts: MountOptions,
) -> Result<(), FuseError> {
    let session = new_session(client, driver, mountpoint, &opts)?;
    if opts.read_ahead_kb > 0 {
        // Waits for the kernel's INIT, which this thread's session.run() answers.
        let (dir, kb) = (mountpoint.to_owned(), opts.read_ahead_kb);
        std::thread::spawn(move || set_read_ahead(&dir, kb));
    }
    let res = session.run();
    info!(mountpoint = %mountpoint.display(), "Eddy unmounted");
    res.map_err(|source| FuseError::Session {
        mountpoint: mountpoint.to_owned(),
        source,
    })
}

/// A mount served in the background; dropping it unmounts.
#[derive(Debug)]
pub struct MountGuard {
    session: Option<fuser::BackgroundSession>,
    mountpoint: PathBuf,
    /// The connection's name in fusectl, to abort it if the unmount has to be lazy.
    connection: Option<u64>,
}

impl MountGuard {
    /// Where the file system is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts and waits for the serving threads to end. If files are still open under the
    /// mount, it is detached and its connection aborted (those files then fail with
    /// ENOTCONN): this process serves the mount, so it could not answer their last requests
    /// once it exits, and would hang in exit.
    pub fn unmount(mut self) -> Result<(), FuseError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<(), FuseError> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        match unmount_with(&self.mountpoint)? {
            Unmounted::Detached => match self.connection.map(abort_connection) {
                Some(Ok(())) => self.join(session),
                failed => {
                    // Files are still open under the mount and the connection cannot be
                    // aborted (fusectl not mounted?): it is served until they are closed.
                    let why = match failed {
                        Some(Err(e)) => e.to_string(),
                        _ => "connection unknown".to_string(),
                    };
                    warn!(
                        mountpoint = %self.mountpoint.display(),
                        "unmounted lazily, cannot abort the connection ({why}); requests are \
                         served until the last open file is closed"
                    );
                    Ok(())
                }
            },
            Unmounted::Gone | Unmounted::NotMounted => self.join(session),
        }
    }

    fn join(&self, session: fuser::BackgroundSession) -> Result<(), FuseError> {
        session.join().map_err(|source| FuseError::Session {
            mountpoint: self.mountpoint.clone(),
            source,
        })
    }
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            warn!("{e}");
        }
    }
}

/// Like `mount`, but serves from background threads and returns at once, with a guard that
/// unmounts when dropped.
pub fn spawn_mount(
    client: eddy_client::Client,
    driver: Arc<Driver>,
    mountpoint: &Path,
    opts: MountOptions,
) -> Result<MountGuard, FuseError> {
    let session = new_session(client, driver, mountpoint, &opts)?;
    let bg = session.spawn().map_err(|source| FuseError::Session {
        mountpoint: mountpoint.to_owned(),
        source,
    })?;
    if opts.read_ahead_kb > 0 {
        set_read_ahead(mountpoint, opts.read_ahead_kb);
    }
    Ok(MountGuard {
        session: Some(bg),
        mountpoint: mountpoint.to_owned(),
        connection: connection_id(mountpoint),
    })
}

/// Sets the kernel read-ahead of the mount at `mountpoint` to `kb` KiB, through the sysfs
/// entry of its backing device. Waits for the mount to be initialised (the kernel caps the
/// read-ahead when it processes INIT, so setting it earlier would not last). Needs root;
/// otherwise, or if sysfs refuses, the kernel's value stays and a warning says so.
fn set_read_ahead(mountpoint: &Path, kb: u32) {
    use std::os::unix::fs::MetadataExt;
    // privileged-path: the mount point root mounts on (its caller's; eddy bb: in a trusted parent)
    let dev = match std::fs::metadata(mountpoint) {
        Ok(m) => m.dev(),
        Err(e) => {
            warn!(mountpoint = %mountpoint.display(), "cannot set the read-ahead: {e}");
            return;
        }
    };
    let file = read_ahead_file(dev);
    // privileged-path: the kernel's sysfs
    match std::fs::write(&file, format!("{kb}\n")) {
        Ok(()) => debug!(mountpoint = %mountpoint.display(), kb, "read-ahead set"),
        Err(e) => warn!(
            mountpoint = %mountpoint.display(),
            "cannot set the read-ahead to {kb} KiB in {}: {e}; the kernel's value stays \
             (sequential reads come in smaller requests)",
            file.display()
        ),
    }
}

/// The sysfs file holding the read-ahead of the device `dev`.
fn read_ahead_file(dev: u64) -> PathBuf {
    PathBuf::from(format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        libc::major(dev),
        libc::minor(dev)
    ))
}

/// Where the FUSE control file system (fusectl) lists connections.
const FUSECTL_DIR: &str = "/sys/fs/fuse/connections";

/// The fusectl name of the connection serving the mount at `mountpoint`: the kernel's
/// device number of the mount, `major << 20 | minor`.
fn connection_id(mountpoint: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    // privileged-path: the mount point root mounts on (its caller's; eddy bb: in a trusted parent)
    let dev = std::fs::metadata(mountpoint).ok()?.dev();
    Some((u64::from(libc::major(dev)) << 20) | u64::from(libc::minor(dev)))
}

/// Aborts a FUSE connection: pending and future requests fail with ENOTCONN and the
/// serving threads see the end of the session.
fn abort_connection(id: u64) -> io::Result<()> {
    // privileged-path: the kernel's fusectl
    std::fs::write(
        Path::new(FUSECTL_DIR).join(id.to_string()).join("abort"),
        "1",
    )
}

use eddy_proto::mounts::{unmount_with, Unmounted};

/// Unmounts the file system at `mountpoint`: `fusermount3 -u`, then umount(2), then a lazy
/// unmount. Ok if nothing is mounted there. (`eddy_proto::mounts::unmount`, which
/// eddy-deploy and eddy-bb call without linking this crate.)
pub fn unmount(mountpoint: &Path) -> Result<(), FuseError> {
    Ok(eddy_proto::mounts::unmount(mountpoint)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmount_of_a_plain_directory_is_ok() {
        let dir = tempfile::tempdir().unwrap();
        unmount(dir.path()).unwrap();
        assert!(dir.path().exists());
    }

    #[test]
    fn session_config_uses_the_options() {
        let opts = MountOptions {
            allow_other: true,
            fsname: "job7".into(),
            threads: 3,
            attr_ttl: Duration::from_secs(1),
            negative_ttl: Duration::from_secs(1),
            fresh_dirs: true,
            read_ahead_kb: 0,
            passthrough: false,
            atime: eddy_config::Atime::Relatime,
            dev: false,
            suid: false,
            transport: eddy_config::FuseTransport::DevFuse,
        };
        let c = session_config(&opts);
        assert_eq!(c.n_threads, Some(3));
        assert!(c.clone_fd);
        assert!(!c.io_uring);
        for t in [
            eddy_config::FuseTransport::Auto,
            eddy_config::FuseTransport::IoUring,
        ] {
            let c = session_config(&MountOptions {
                transport: t,
                ..opts.clone()
            });
            assert!(c.io_uring, "{t:?} asks fuser for io_uring");
        }
        assert_eq!(c.acl, fuser::SessionACL::All);
        assert!(c
            .mount_options
            .contains(&fuser::MountOption::DefaultPermissions));
        assert!(c
            .mount_options
            .contains(&fuser::MountOption::FSName("job7".into())));
        assert!(c
            .mount_options
            .contains(&fuser::MountOption::CUSTOM("subtype=eddy".into())));
        for o in [fuser::MountOption::NoSuid, fuser::MountOption::NoDev] {
            assert!(c.mount_options.contains(&o), "{o:?}");
        }
        assert!(!c.mount_options.contains(&fuser::MountOption::NoAtime));
        let opts = MountOptions {
            allow_other: false,
            ..opts
        };
        assert_eq!(session_config(&opts).acl, fuser::SessionACL::Owner);
        // Asked for: dev, suid, noatime, and nodev and nosuid are gone.
        let c = session_config(&MountOptions {
            dev: true,
            suid: true,
            atime: eddy_config::Atime::Noatime,
            ..opts
        });
        for o in [
            fuser::MountOption::Suid,
            fuser::MountOption::Dev,
            fuser::MountOption::NoAtime,
        ] {
            assert!(c.mount_options.contains(&o), "{o:?}");
        }
        for o in [fuser::MountOption::NoSuid, fuser::MountOption::NoDev] {
            assert!(!c.mount_options.contains(&o), "{o:?}");
        }
    }

    #[test]
    fn fsname_is_made_safe() {
        assert_eq!(mount_table_name("eddy:job 1,a\\b"), "eddy:job_1_a_b");
        assert_eq!(mount_table_name(""), "eddy");
    }

    #[test]
    fn options_from_config() {
        let cfg = eddy_config::Config::default();
        let o = MountOptions::from_config(&cfg);
        assert_eq!(o.threads, cfg.fuse_threads);
        assert_eq!(o.attr_ttl, Duration::from_millis(cfg.fuse_attr_ttl_ms));
        assert!(!o.allow_other);
        assert!(!o.dev && !o.suid, "nodev and nosuid unless asked");
        assert_eq!(o.atime, cfg.atime);
    }
}
