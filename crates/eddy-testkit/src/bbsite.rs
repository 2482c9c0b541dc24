//! A burst-buffer site of this host for `eddy bb` run phase by phase (no Slurm): a settings
//! file whose I/O-node pool is three loopback addresses, a "parallel file system" directory
//! of the job user's (`nobody`), and the `eddy bb` runner.

use super::{eddy_bin, require};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const NOBODY: u32 = 65534;

pub struct Site {
    pub dir: tempfile::TempDir,
}

impl Site {
    /// A site whose pool is three loopback addresses of this host, with `extra` TOML lines
    /// (before the [pool] table) and `pool_extra` lines in it (its `min_capacity` is 1 MiB). Its allocation policy's default
    /// is the whole pool (`[alloc] default_servers = 3`): without Slurm a job has no history,
    /// and these tests are of the phases (the allocation's are in the slurm tests' bb_pool).
    pub fn new(extra: &str, pool_extra: &str) -> Site {
        require::root("start daemons that switch to the job's user");
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let site = Site { dir };
        let pfs = site.path("pfs/run");
        std::fs::create_dir_all(pfs.join("in")).unwrap();
        std::fs::write(pfs.join("in/a.dat"), super::pattern(3, 0, 1 << 20)).unwrap();
        for p in [
            site.path("pfs"),
            pfs.clone(),
            pfs.join("in"),
            pfs.join("in/a.dat"),
        ] {
            std::os::unix::fs::chown(&p, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let text = format!(
            "state_dir = \"{d}/jobs\"\nmount = \"{d}/mnt/{{job}}\"\n\
             node_root = \"{d}/nodes/{{host}}/job-{{job}}\"\nlauncher = \"{{cmd}}\"\n\
             {extra}\n\
             [pool]\nname = \"io\"\n\
             nodes = [\"io1 127.{net}.1.31\", \"io2 127.{net}.1.32\", \"io3 127.{net}.1.33\"]\n\
             root = \"{d}/pool/{{host}}/job-{{job}}\"\n\
             # the tests' jobs are small (a site's least is 1 GiB by default)\n\
             min_capacity = \"1MiB\"\n{pool_extra}\n\
             [alloc]\ndefault_servers = 3\n\
             # the three pool \"nodes\" share one disk: their parallel probes measure alike\n\
             # only roughly, so only a far slower one is anomalous here\n\
             anomaly_ratio = 0.05\n",
            d = site.dir.path().display(),
            net = super::slurm::loopback_net(),
        );
        std::fs::write(site.path("bb.toml"), text).unwrap();
        site
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Replaces `from` (which must be there) with `to` in the settings file.
    #[track_caller]
    pub fn edit_settings(&self, from: &str, to: &str) {
        let file = self.path("bb.toml");
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains(from), "no {from:?} in the settings:\n{text}");
        std::fs::write(&file, text.replace(from, to)).unwrap();
    }

    pub fn script(&self, lines: &[&str]) -> PathBuf {
        let text: String = lines.iter().map(|l| format!("#EDDY {l}\n")).collect();
        let p = self.path(&format!("script-{}.sh", text.len()));
        std::fs::write(&p, format!("#!/bin/bash\n{text}srun ./app\n")).unwrap();
        p
    }

    /// `eddy bb --site ... <args>`: (success, stdout, stderr).
    pub fn bb(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(eddy_bin())
            .arg("bb")
            .arg("--site")
            .arg(self.path("bb.toml"))
            .args(args)
            .env_remove("EDDY_STATE")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn bb_ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.bb(args);
        assert!(ok, "eddy bb {args:?} failed:\n{out}\n{err}");
        out
    }

    pub fn bb_err(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.bb(args);
        assert!(!ok, "eddy bb {args:?} succeeded:\n{out}");
        err
    }
}

impl Drop for Site {
    /// Whatever a failed test left: mounts and processes under the site's directory.
    fn drop(&mut self) {
        super::slurm::clean_leftovers(self.dir.path());
    }
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}
