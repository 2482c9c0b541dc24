//! `eddy mount` / `eddy umount`: serve the namespace through FUSE. Without --foreground the
//! command re-executes itself detached with --foreground and returns once the mount is up.

use crate::cli::{MountArgs, UmountArgs};
use anyhow::{bail, Context, Result};
use eddy_client::driver::Driver;
use eddy_client::Client;
use eddy_config::Atime;
use eddy_config::Deployment;
use eddy_deploy::mount::mount_background_with;
use eddy_deploy::mounts::{is_fuse_mounted, mount_target};
use eddy_deploy::state::{absolute, StateDir};
use std::path::Path;
use std::time::Duration;

pub fn mount(args: MountArgs) -> Result<()> {
    let state = StateDir::from_arg(args.state.state.as_deref())?;
    let allow_other = allow_other(args.allow_other, args.owner_only)?;
    let flags = MountFlags::from_args(&args)?;
    if args.foreground {
        return mount_foreground(&state, &args.mountpoint, allow_other, &flags);
    }
    let dep = state.load_deployment()?;
    mount_background_with(
        &state,
        &args.mountpoint,
        allow_other,
        &flags.args(),
        Duration::from_secs(dep.config.start_timeout_s),
    )?;
    outln!(
        "eddy: mounted deployment {:?} on {}",
        dep.name,
        args.mountpoint.display()
    );
    Ok(())
}

/// Whether a mount lets every user in (`allow_other`), from --allow-other / --owner-only.
/// Default: yes when root mounts (a mount made for a job, e.g. by a Slurm prolog, must serve
/// the job's user; root needs no `user_allow_other`), no for any other user. The kernel
/// checks mode bits either way (`default_permissions`).
pub fn allow_other(allow_other: bool, owner_only: bool) -> Result<bool> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if owner_only {
        return Ok(false);
    }
    if !allow_other {
        return Ok(root);
    }
    // privileged-path: /etc/fuse.conf, root's
    if !root && !user_allow_other(&std::fs::read_to_string(FUSE_CONF).unwrap_or_default()) {
        bail!(
            "--allow-other: a user other than root may open a mount to other users only if \
             {FUSE_CONF} has a `user_allow_other` line (ask an administrator), or mount as \
             root; without --allow-other only you can use the mount"
        );
    }
    Ok(true)
}

/// FUSE's configuration file: `user_allow_other` lets users mount with allow_other.
const FUSE_CONF: &str = "/etc/fuse.conf";

/// Whether fuse.conf text enables `user_allow_other` (a line of its own; `#` comments).
fn user_allow_other(conf: &str) -> bool {
    conf.lines()
        .any(|l| l.split('#').next().unwrap_or("").trim() == "user_allow_other")
}

/// Mounts and serves until unmounted (or SIGINT/SIGTERM, which unmount).
/// The options of `eddy mount` beyond who may use it: `--atime`, `--dev`, `--suid`.
struct MountFlags {
    atime: Option<Atime>,
    dev: bool,
    suid: bool,
}

impl MountFlags {
    /// The flags asked for; `--dev` and `--suid` only from root, since the kernel would
    /// take them from no one else (fusermount3 drops them) and a mount must not promise
    /// what it does not do.
    fn from_args(args: &MountArgs) -> Result<MountFlags> {
        let atime = match args.atime.as_deref() {
            None => None,
            Some(name) => Some(Atime::parse(name).with_context(|| {
                format!("--atime {name}: say relatime, strictatime or noatime")
            })?),
        };
        // SAFETY: geteuid has no preconditions.
        if (args.dev || args.suid) && unsafe { libc::geteuid() } != 0 {
            bail!(
                "--dev and --suid need a mount made by root (the kernel takes them from no \
                 one else); mount without them"
            );
        }
        Ok(MountFlags {
            atime,
            dev: args.dev,
            suid: args.suid,
        })
    }

    /// The same flags as arguments of `eddy mount --foreground`.
    fn args(&self) -> Vec<std::ffi::OsString> {
        let mut out = Vec::new();
        if let Some(a) = self.atime {
            let name = match a {
                Atime::Relatime => "relatime",
                Atime::Strictatime => "strictatime",
                Atime::Noatime => "noatime",
            };
            out.extend(["--atime".into(), name.into()]);
        }
        if self.dev {
            out.push("--dev".into());
        }
        if self.suid {
            out.push("--suid".into());
        }
        out
    }
}

fn mount_foreground(
    state: &StateDir,
    mnt: &Path,
    allow_other: bool,
    flags: &MountFlags,
) -> Result<()> {
    let mut dep = state.load_deployment()?;
    // The client applies the atime rule to the reads it serves (decision 0061).
    if let Some(a) = flags.atime {
        dep.config.atime = a;
    }
    let target = mount_target(mnt)?;
    // The client's runtime, driven by the FUSE threads (decision 0052); signals are watched
    // on a runtime of their own.
    let rt = eddy_deploy::runtime()?;
    let driver = Driver::start(Driver::runtime()?, "eddy-mount", || {})?;
    let client = driver
        .drive(Client::connect_following(
            dep.clone(),
            state.deployment_path(),
        ))
        .context("cannot connect to the deployment's daemons; check `eddy status`")?;
    state.add_mount(&target)?;
    rt.spawn(unmount_on_signal(target.clone()));
    let opts = eddy_fuse::MountOptions {
        dev: flags.dev,
        suid: flags.suid,
        ..mount_options(&dep, allow_other)
    };
    let served = eddy_fuse::mount(client, driver, &target, opts);
    if let Err(e) = state.remove_mount(&target) {
        tracing::warn!("cannot update the mount list: {e:#}");
    }
    served.with_context(|| format!("cannot mount on {}", target.display()))
}

fn mount_options(dep: &Deployment, allow_other: bool) -> eddy_fuse::MountOptions {
    eddy_fuse::MountOptions {
        allow_other,
        fsname: format!("eddy:{}", dep.name),
        ..eddy_fuse::MountOptions::from_config(&dep.config)
    }
}

/// Unmounts when the serving process is asked to stop, so no dead mount is left behind.
async fn unmount_on_signal(target: std::path::PathBuf) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot install signal handlers; a killed mount must be unmounted by hand");
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    if let Err(e) = eddy_fuse::unmount(&target) {
        tracing::warn!("cannot unmount {}: {e}", target.display());
    }
}

pub fn umount(args: UmountArgs) -> Result<()> {
    let target =
        // privileged-path: the mount point the caller names on its own command line
        std::fs::canonicalize(&args.mountpoint).unwrap_or_else(|_| absolute(&args.mountpoint));
    if !is_fuse_mounted(&target)? {
        bail!("{} is not a FUSE mount point", target.display());
    }
    eddy_fuse::unmount(&target).with_context(|| {
        format!(
            "cannot unmount {}; is a process using it? (try `fusermount -u {0}`)",
            target.display()
        )
    })?;
    outln!("eddy: unmounted {}", target.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::user_allow_other;

    #[test]
    fn fuse_conf_user_allow_other() {
        assert!(user_allow_other("# comment\nuser_allow_other\n"));
        assert!(user_allow_other("  user_allow_other  # for eddy\n"));
        assert!(!user_allow_other("#user_allow_other\nmount_max = 1000\n"));
        assert!(!user_allow_other(""));
    }
}
