//! Root's canaries for the planted-object cases: files of root's (0600 and 0644) and a directory,
//! which nothing may change or reveal, and sockets of a service of root's that root's clients must
//! never be led to; checked after each case.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Root's files outside the job's reach, which nothing may change or reveal.
pub(super) struct Canaries {
    pub(super) dir: PathBuf,
    pub(super) secret: PathBuf,
    pub(super) public: PathBuf,
    /// The 0600 canary's bytes: the user must never see them.
    pub(super) secret_bytes: Vec<u8>,
    pub(super) files: Vec<(PathBuf, Vec<u8>, u32)>,
    /// Connections made to `service.sock` and `fd-service.sock`, sockets of a service of
    /// root's (here threads of the test) the user links at `eddyd.sock` and `eddyd.fd`: root's
    /// clients must never be led to them.
    pub(super) services: Vec<(&'static str, &'static str, Arc<AtomicUsize>)>,
}

/// A socket of root's at `path` that counts the connections made to it and never answers
/// (the listener lives as long as the test binary).
fn root_service(path: &Path) -> Arc<AtomicUsize> {
    let service = std::os::unix::net::UnixListener::bind(path).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in service.incoming().flatten() {
            counted.fetch_add(1, Ordering::SeqCst);
            held.push(c);
        }
    });
    calls
}

impl Canaries {
    pub(super) fn new(parent: &Path) -> Canaries {
        let dir = parent.join("canary");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let tag: u64 = rand::random();
        let mut files = Vec::new();
        let mut make = |name: &str, mode: u32, bytes: Vec<u8>| {
            let p = dir.join(name);
            std::fs::write(&p, &bytes).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            files.push((p.clone(), bytes, mode));
            p
        };
        let secret_bytes = format!("eddy canary 0600 {tag:016x}: root's secret\n").into_bytes();
        let secret = make("secret", 0o600, secret_bytes.clone());
        let public = make(
            "public",
            0o644,
            format!("eddy canary 0644 {tag:016x}\n").into_bytes(),
        );
        // Named as the daemons' persisted counters are, for a `stats` directory linked here.
        make("snapshot.json", 0o600, secret_bytes.clone());
        make(
            "public.json",
            0o644,
            b"{\"not\": \"a snapshot\"}\n".to_vec(),
        );
        let services = vec![
            (
                "service.sock",
                "eddyd.sock (the RPC connections of the mount, status, stage-out, stop)",
                root_service(&dir.join("service.sock")),
            ),
            (
                "fd-service.sock",
                "eddyd.fd (the mount's direct I/O and passthrough)",
                root_service(&dir.join("fd-service.sock")),
            ),
        ];
        Canaries {
            dir,
            secret,
            public,
            secret_bytes,
            files,
            services,
        }
    }

    /// What changed: bytes, owner, mode, a file added to the directory.
    pub(super) fn check(&self, case: &str, failures: &mut Vec<String>) {
        for (p, bytes, mode) in &self.files {
            match std::fs::symlink_metadata(p) {
                Ok(m) => {
                    if !m.is_file() || m.uid() != 0 || m.mode() & 0o7777 != *mode {
                        failures.push(format!(
                            "[{case}] canary {} is now uid {} mode {:o} (a file: {})",
                            p.display(),
                            m.uid(),
                            m.mode() & 0o7777,
                            m.is_file()
                        ));
                    }
                    if std::fs::read(p).ok().as_ref() != Some(bytes) {
                        failures.push(format!("[{case}] canary {} was written", p.display()));
                    }
                }
                Err(e) => failures.push(format!("[{case}] canary {} is gone: {e}", p.display())),
            }
        }
        for (name, at, calls) in &self.services {
            let calls = calls.load(Ordering::SeqCst);
            if calls > 0 {
                failures.push(format!(
                    "[{case}] root's clients connected {calls} time(s) to a socket of root's \
                     ({}) the user linked at {at}",
                    self.dir.join(name).display()
                ));
            }
        }
        let n = std::fs::read_dir(&self.dir).unwrap().count();
        if n != self.files.len() + self.services.len() {
            failures.push(format!(
                "[{case}] the canary directory {} holds {n} entries, not {}",
                self.dir.display(),
                self.files.len() + self.services.len()
            ));
        }
    }
}
