//! The handling target: requests executed by a real daemon's stores.

use arbitrary::Unstructured;
use bytes::Bytes;
use eddy_config::{Config, Link};
use eddy_daemon::{DaemonSettings, Embedded};
use eddy_proto::{req, FileKind, Inode, Piece, Reply, Request};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Requests one input may hold.
const MAX_REQUESTS: usize = 16;
/// Inputs run against one set of stores before it is thrown away and a fresh one opened, so
/// that what earlier inputs left behind stays small.
const FRESH_EVERY: u64 = 2_000;
/// First byte of an input that is one raw request body (bincode), not structured input.
const RAW: u8 = b'R';
/// Namespace prefix linked to a backend directory (paths of `eddy_proto::fuzzing` reach it).
const LINK_PREFIX: &str = "/l";
/// What the file beside the backend directory holds: no reply may ever carry it.
const CANARY: &[u8] = b"eddy-fuzz canary: outside the backend";

/// A daemon's stores in a temporary directory, fed inputs one after the other; each input is
/// up to `MAX_REQUESTS` requests, run in order as one connection's (its locks and rename
/// intents are released before the next input).
pub struct Requests {
    rt: tokio::runtime::Runtime,
    dir: tempfile::TempDir,
    daemon: Option<Embedded>,
    generation: u32,
    runs: u64,
}

impl Drop for Requests {
    fn drop(&mut self) {
        self.daemon = None;
        // The temporary directory removes itself after this; it cannot when an input made a
        // backend directory unwritable (a fuzzed chmod through the linked prefix) and the
        // target does not run as root.
        let _ = remove_tree(self.dir.path());
    }
}

/// Removes the tree at `path`, making its directories writable first (only the directories
/// themselves: links are never followed).
fn remove_tree(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fn open_up(dir: &Path) -> std::io::Result<()> {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                open_up(&e.path())?;
            }
        }
        Ok(())
    }
    if std::fs::symlink_metadata(path)?.is_dir() {
        open_up(path)?;
    }
    std::fs::remove_dir_all(path)
}

impl Requests {
    /// Longest a request may take before the target reports a hang.
    pub const DEADLINE: Duration = Duration::from_secs(20);

    /// Stores in a new temporary directory (in memory, /dev/shm, where there is one: fsync
    /// is then free).
    pub fn open() -> Result<Requests, String> {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::Builder::new().prefix("eddy-fuzz").tempdir_in(shm)
        } else {
            tempfile::Builder::new().prefix("eddy-fuzz").tempdir()
        }
        .map_err(|e| format!("cannot make a temporary directory: {e}"))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot build a runtime: {e}"))?;
        let mut me = Requests {
            rt,
            dir,
            daemon: None,
            generation: 0,
            runs: 0,
        };
        me.fresh()?;
        Ok(me)
    }

    /// Runs one input.
    pub fn run(&mut self, data: &[u8]) {
        if self.runs > 0 && self.runs.is_multiple_of(FRESH_EVERY) {
            if let Err(e) = self.fresh() {
                panic!("cannot open fresh stores: {e}");
            }
        }
        self.runs += 1;
        if let Some(d) = self.daemon.as_mut() {
            d.reconnect();
        }
        for req in requests_of(data) {
            self.execute(req);
        }
        self.check_backend_parent();
    }

    /// Inputs run so far.
    pub fn runs(&self) -> u64 {
        self.runs
    }

    /// Throws the current stores away and opens new ones, with a few entries in place.
    fn fresh(&mut self) -> Result<(), String> {
        self.daemon = None;
        if self.generation > 0 {
            let old = self.gen_dir(self.generation);
            remove_tree(&old).map_err(|e| format!("cannot remove {}: {e}", old.display()))?;
        }
        self.generation += 1;
        let base = self.gen_dir(self.generation);
        let backend = backend_dir(&base);
        std::fs::create_dir_all(backend.join("d"))
            .and_then(|()| std::fs::write(backend.join("f"), b"a backend file"))
            .and_then(|()| std::fs::write(backend.join("d/a"), vec![7u8; 70_000]))
            .and_then(|()| std::fs::write(canary_path(&base), CANARY))
            .map_err(|e| format!("cannot make the backend under {}: {e}", base.display()))?;
        let config = Config {
            chunk_size: 64 * 1024,
            max_rpc_data_bytes: 1 << 20,
            max_frame_bytes: 4 << 20,
            // A waiting lock waits at most half of this; backend calls three quarters.
            rpc_timeout_ms: 200,
            io_threads: 4,
            backend_threads: 2,
            links: vec![Link {
                prefix: LINK_PREFIX.into(),
                backend,
            }],
            ..Config::default()
        };
        config
            .validate()
            .map_err(|e| format!("the fuzzed daemon's config: {e}"))?;
        let listen = "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?;
        let mut settings = DaemonSettings::new(&base.join("root"), listen, vec![7; 32], config);
        settings.socket = None;
        // Two copies, the other daemon never reachable (its deployment file does not
        // exist): every change leaves hints, and the repair requests have work to do.
        settings.config.replicas = 2;
        settings.members = Some(vec![0, 1]);
        settings.peers = Some(base.join("no-peers.toml"));
        let daemon = self
            .rt
            .block_on(Embedded::open(settings))
            .map_err(|e| format!("cannot open the stores: {e}"))?;
        self.daemon = Some(daemon);
        for req in seed_requests() {
            // Some of these fail on purpose (an entry already there); none may panic.
            self.execute(req);
        }
        Ok(())
    }

    fn gen_dir(&self, generation: u32) -> PathBuf {
        self.dir.path().join(format!("g{generation}"))
    }

    /// Executes one request; panics on a hang or a broken reply invariant.
    fn execute(&self, req: Request) {
        let Some(daemon) = self.daemon.as_ref() else {
            return;
        };
        let op = req.op_name();
        let read_len: Option<u64> = req.bulk().reply;
        let shown = shorten(format!("{req:?}"));
        let resp = self
            .rt
            .block_on(async { tokio::time::timeout(Self::DEADLINE, daemon.handle(req)).await })
            .unwrap_or_else(|_| panic!("{op} did not finish within {:?}: {shown}", Self::DEADLINE));
        if std::env::var_os("EDDY_FUZZ_SHOW").is_some() {
            eprintln!("{shown} -> {}", shorten(format!("{resp:?}")));
        }
        if let Some(data) = resp.as_ref().ok().and_then(Reply::data) {
            if let Some(want) = read_len {
                assert_eq!(
                    data.len() as u64,
                    want,
                    "a read replied another length: {shown}"
                );
            }
            assert!(
                !contains(data, CANARY),
                "a reply carries a file outside the backend directory: {shown}"
            );
        }
    }

    /// Nothing in the directory above the backend changed: only the backend and the canary.
    fn check_backend_parent(&self) {
        let base = self.gen_dir(self.generation);
        let parent = backend_dir(&base)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let mut names: Vec<String> = std::fs::read_dir(&parent)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        assert_eq!(
            names,
            ["canary", "inner"],
            "something was made beside the backend directory"
        );
        let canary = std::fs::read(canary_path(&base)).unwrap_or_default();
        assert_eq!(
            canary, CANARY,
            "the file beside the backend directory changed"
        );
    }
}

/// The backend directory, a few levels down, so that a path escaping it by a few `..` is
/// still inside the temporary directory (and is seen by `check_backend_parent`).
fn backend_dir(base: &Path) -> PathBuf {
    base.join("b/1/2/3/4/inner")
}

fn canary_path(base: &Path) -> PathBuf {
    base.join("b/1/2/3/4/canary")
}

/// A request as errors show it: its first 600 characters.
fn shorten(mut text: String) -> String {
    if let Some((at, _)) = text.char_indices().nth(600) {
        text.truncate(at);
        text.push('…');
    }
    text
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The requests of an input: one raw request body after `RAW`, else up to `MAX_REQUESTS`
/// structured ones.
fn requests_of(data: &[u8]) -> Vec<Request> {
    if let Some((&RAW, body)) = data.split_first() {
        return eddy_proto::decode::<Request>(body, body.len() as u64)
            .into_iter()
            .collect();
    }
    let mut u = Unstructured::new(data);
    let mut out = Vec::new();
    while out.len() < MAX_REQUESTS && !u.is_empty() {
        match u.arbitrary::<Request>() {
            Ok(r) => out.push(r),
            Err(_) => break,
        }
    }
    out
}

/// A few entries every fresh store starts with: the root, a directory, a file with data, and
/// the linked prefix.
fn seed_requests() -> Vec<Request> {
    let dir = |mode| Inode::new(FileKind::Dir, 1, mode, 0, 0);
    let file = Inode {
        size: 70_000,
        ..Inode::new(FileKind::File, 2, 0o644, 0, 0)
    };
    vec![
        Request::Create(req::Create {
            path: "/".into(),
            inode: dir(0o755),
            exclusive: false,
        }),
        Request::Create(req::Create {
            path: "/d".into(),
            inode: dir(0o755),
            exclusive: false,
        }),
        Request::Create(req::Create {
            path: "/d/f".into(),
            inode: file,
            exclusive: false,
        }),
        Request::Write(req::Write {
            sums: Vec::new(),
            file_id: 2,
            pieces: vec![
                Piece {
                    chunk: 0,
                    offset: 0,
                    len: 65_536,
                },
                Piece {
                    chunk: 1,
                    offset: 0,
                    len: 4_464,
                },
            ],
            data: Bytes::from(vec![5u8; 70_000]),
            backing: None,
            hint: None,
        }),
        Request::Stat(req::Stat {
            path: "/l/d/a".into(),
        }),
        Request::Hint(req::Hint {
            target: 1,
            file_id: 2,
            chunks: vec![0, 1],
        }),
        Request::PutChunk(req::PutChunk {
            file_id: 3,
            chunk: 0,
            present: true,
            sums: Vec::new(),
            data: Bytes::from(vec![6u8; 1000]),
        }),
        Request::RepairFor(req::RepairFor {
            target: 1,
            full: true,
        }),
    ]
}
