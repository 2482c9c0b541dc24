//! The cluster's accounting (SlurmBuilder::accounting): a private MariaDB server (its own data
//! directory, a unix socket only, run as the mysql user) under a private slurmdbd, and the cluster
//! registered with sacctmgr.

use super::{
    nix_user_id, output_bounded, set_mode, SlurmCluster, BRING_UP, CLIENT_BOUND, CLUSTER, DB_USER,
};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

impl SlurmCluster {
    pub(super) fn db_socket(&self) -> PathBuf {
        self.path("mysql-run/mysqld.sock")
    }

    /// MariaDB (initialised in `mysql/`, socket in `mysql-run/`, both the `mysql` user's,
    /// 0700), then slurmdbd on `port` storing into it, then the cluster registered.
    pub(super) fn start_accounting(&mut self, port: u16) {
        let (uid, gid) = nix_user_id(DB_USER).unwrap_or_else(|| {
            crate::require::missing(&format!("the system user `{DB_USER}` is missing"))
        });
        let data = self.path("mysql");
        let run = self.path("mysql-run");
        for d in [&data, &run] {
            std::fs::create_dir(d).unwrap();
            std::os::unix::fs::chown(d, Some(uid), Some(gid)).unwrap();
            set_mode(d, 0o700);
        }
        let datadir = format!("--datadir={}", data.display());
        let mut install = self.command("mariadb-install-db");
        install.args([
            "--no-defaults",
            &format!("--user={DB_USER}"),
            &datadir,
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
        ]);
        let out = output_bounded(&mut install, BRING_UP);
        let ok = out.as_ref().is_some_and(|o| o.status.success());
        assert!(
            ok,
            "mariadb-install-db failed: {}",
            out.map(|o| format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ))
            .unwrap_or_else(|| format!("did not end in {BRING_UP:?}"))
        );
        let socket = format!("--socket={}", self.db_socket().display());
        self.spawn(
            "mariadbd",
            &[
                "--no-defaults".to_string(),
                format!("--user={DB_USER}"),
                datadir,
                socket.clone(),
                "--skip-networking".to_string(),
                format!("--pid-file={}", run.join("mariadbd.pid").display()),
                format!("--log-error={}", run.join("mariadbd.err").display()),
            ],
        );
        self.wait_for("MariaDB answering on its socket", |c| {
            let mut ping = c.command("mariadb");
            ping.args(["--no-defaults", &socket, "-u", "root", "-e", "SELECT 1"]);
            output_bounded(&mut ping, CLIENT_BOUND).is_some_and(|o| o.status.success())
        });
        let d = self.dir.path().display();
        let dbd_conf = format!(
            "AuthType=auth/munge\n\
             AuthInfo=socket={munge}\n\
             DbdHost=localhost\n\
             DbdAddr=127.0.0.1\n\
             DbdPort={port}\n\
             SlurmUser=root\n\
             PidFile={d}/slurmdbd.pid\n\
             LogFile={d}/slurmdbd.log\n\
             StorageType=accounting_storage/mysql\n\
             StorageHost=localhost\n\
             StorageUser=root\n\
             StorageLoc=slurm_acct_db\n",
            munge = self.munge_socket().display(),
        );
        let conf = self.path("slurmdbd.conf");
        std::fs::write(&conf, dbd_conf).unwrap();
        set_mode(&conf, 0o600);
        // slurmdbd reads slurmdbd.conf next to SLURM_CONF; its MySQL client finds the
        // private server's socket through MYSQL_UNIX_PORT.
        let out = std::fs::File::create(self.path("slurmdbd.out")).unwrap();
        let child = self
            .command("slurmdbd")
            .arg("-D")
            .env("MYSQL_UNIX_PORT", self.db_socket())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start slurmdbd: {e}"));
        self.daemons.push(("slurmdbd".to_string(), child));
        self.register_cluster();
    }

    /// `sacctmgr -i add cluster CLUSTER`, retried (bounded) until slurmdbd answers.
    pub(super) fn register_cluster(&mut self) {
        let mut said = String::new();
        let registered =
            crate::eventually::poll_every(BRING_UP, Duration::from_millis(500), || {
                said = match self.client("sacctmgr", &["-i", "add", "cluster", CLUSTER], None) {
                    Ok(o) => {
                        let text = format!(
                            "{}{}",
                            String::from_utf8_lossy(&o.stdout),
                            String::from_utf8_lossy(&o.stderr)
                        );
                        if o.status.success() || text.contains("already exists") {
                            return Some(());
                        }
                        text
                    }
                    Err(e) => e,
                };
                None
            });
        assert!(
            registered.is_some(),
            "cannot register cluster {CLUSTER} with slurmdbd in {BRING_UP:?}: {said}\n{}",
            self.logs()
        );
    }
}
