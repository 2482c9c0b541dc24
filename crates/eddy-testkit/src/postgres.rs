//! A private PostgreSQL server for tests, from Debian's packages (`postgresql`, see
//! scripts/install-deps.sh): `initdb` into a temporary directory owned by the `postgres`
//! system user (PostgreSQL refuses to run as root), started with `pg_ctl` as that user,
//! listening on a unix socket in that directory (trust, for the test's own processes) and on
//! 127.0.0.1 at a free port (password authentication). Dropping the server stops it
//! (`pg_ctl stop -m fast`); it never outlives the test.

use crate::cli::free_port;
use crate::slurm::{output_bounded, tail};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The database superuser initdb makes, its password (TCP connections) and the database the
/// tests use.
pub const USER: &str = "eddy";
pub const PASSWORD: &str = "eddy-test-secret";
pub const DATABASE: &str = "history";
/// The system user the server runs as (made by Debian's postgresql-common).
const SYSTEM_USER: &str = "postgres";
/// Bound on initdb, on the server coming up and on stopping it.
const BOUND: Duration = Duration::from_secs(60);

/// The directory of the newest installed PostgreSQL's programs
/// (`/usr/lib/postgresql/<version>/bin`); fails the test when there is none.
pub fn bin_dir() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    match versions.pop() {
        Some((_, bin)) => bin,
        None => crate::require::missing(
            "the PostgreSQL server is not installed (/usr/lib/postgresql/<version>/bin/postgres; \
             Debian package postgresql)",
        ),
    }
}

/// A running private PostgreSQL server.
pub struct PgServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    stopped: bool,
}

impl PgServer {
    /// Makes and starts a server with an empty database `DATABASE`; fails the test when
    /// PostgreSQL or root (to act as the `postgres` user) is missing.
    pub fn start() -> PgServer {
        crate::require::root("run the PostgreSQL server as the postgres system user");
        crate::require::program("runuser", "util-linux");
        let bin = bin_dir();
        let (uid, gid) = system_user();
        let dir = tempfile::Builder::new()
            .prefix("eddy-pg-")
            .tempdir()
            .unwrap();
        chown(dir.path(), uid, gid);
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let pwfile = dir.path().join("pw");
        std::fs::write(&pwfile, format!("{PASSWORD}\n")).unwrap();
        chown(&pwfile, uid, gid);
        let mut server = PgServer {
            port: free_port(),
            bin,
            dir,
            stopped: true,
        };
        server.run_checked(
            "initdb",
            &[
                "-D",
                &server.data().display().to_string(),
                "-U",
                USER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                &format!("--pwfile={}", pwfile.display()),
                "--no-sync",
                "--no-instructions",
                "-E",
                "UTF8",
                "--locale=C",
            ],
        );
        let options = format!(
            "-c listen_addresses=127.0.0.1 -c port={} -c unix_socket_directories={} \
             -c fsync=off -c logging_collector=off",
            server.port,
            server.socket_dir().display()
        );
        server.stopped = false;
        server.run_checked(
            "pg_ctl",
            &[
                "start",
                "-w",
                "-t",
                "60",
                "-D",
                &server.data().display().to_string(),
                "-l",
                &server.log().display().to_string(),
                "-o",
                &options,
            ],
        );
        server.run_checked(
            "createdb",
            &[
                "-h",
                &server.socket_dir().display().to_string(),
                "-p",
                &server.port.to_string(),
                "-U",
                USER,
                DATABASE,
            ],
        );
        server
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// The directory holding the server's unix socket.
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's port (TCP on 127.0.0.1, and the number in the socket's name).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The database over the unix socket: `postgresql:///history?host=DIR&port=P&user=eddy`.
    pub fn socket_url(&self) -> String {
        format!(
            "postgresql:///{DATABASE}?host={}&port={}&user={USER}",
            self.socket_dir().display(),
            self.port
        )
    }

    /// The database over TCP with a password: `postgres://eddy:PW@127.0.0.1:P/history`.
    pub fn tcp_url(&self) -> String {
        format!(
            "postgres://{USER}:{PASSWORD}@127.0.0.1:{}/{DATABASE}",
            self.port
        )
    }

    /// Runs a PostgreSQL program as the system user; fails the test, with the server's log,
    /// if it does not succeed in time.
    fn run_checked(&self, program: &str, args: &[&str]) {
        let path = self.bin.join(program);
        let out = output_bounded(
            Command::new("runuser")
                .args(["-u", SYSTEM_USER, "--"])
                .arg(&path)
                .args(args)
                .current_dir(self.dir.path()),
            BOUND,
        );
        match out {
            Some(o) if o.status.success() => {}
            Some(o) => panic!(
                "{program} {args:?} failed ({}):\n{}{}\n{}",
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr),
                tail(&self.log())
            ),
            None => panic!(
                "{program} {args:?} did not finish within {BOUND:?}\n{}",
                tail(&self.log())
            ),
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let _ = output_bounded(
            Command::new("runuser")
                .args(["-u", SYSTEM_USER, "--"])
                .arg(self.bin.join("pg_ctl"))
                .args(["stop", "-m", "fast", "-w", "-D"])
                .arg(self.data()),
            BOUND,
        );
    }
}

/// Uid and gid of the `postgres` system user; fails the test when it does not exist.
fn system_user() -> (u32, u32) {
    let name = std::ffi::CString::new(SYSTEM_USER).unwrap();
    // SAFETY: getpwnam with a valid C string; the result is read before any other call.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        crate::require::missing(
            "the postgres system user does not exist (Debian package postgresql makes it)",
        );
    }
    // SAFETY: pw is non-null and points to getpwnam's static record.
    unsafe { ((*pw).pw_uid, (*pw).pw_gid) }
}

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}
