//! Process state: the prefix, the reentrancy guard, the client on its own runtime (made on
//! first use, made again in a forked child), the process-local working directory and umask.

use eddy_client::{Client, Creds, Errno};
use std::cell::Cell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use std::sync::OnceLock;

pub type R<T> = Result<T, Errno>;

thread_local! {
    /// Set while this thread runs library code (and for good on the runtime's threads): every
    /// libc call made then goes straight to the real function.
    static GUARD: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is inside the library (or cannot tell: thread teardown).
pub fn guarded() -> bool {
    GUARD.try_with(|g| g.get()).unwrap_or(true)
}

pub fn set_errno(e: i32) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// Whether to report each failure on stderr (EDDY_PRELOAD_LOG set).
static LOG: AtomicBool = AtomicBool::new(false);

/// Runs `f` as the library: guard set, a panic caught and turned into EIO, an error turned
/// into `fail` with errno set.
pub fn enter<T>(fail: T, f: impl FnOnce() -> R<T>) -> T {
    let prev = GUARD.try_with(|g| g.replace(true)).unwrap_or(true);
    let r = catch_unwind(AssertUnwindSafe(f));
    let _ = GUARD.try_with(|g| g.set(prev));
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            if LOG.load(Ordering::Relaxed) {
                eprintln!("eddy-preload: {} (errno {})", e.msg, e.errno);
            }
            set_errno(if e.errno > 0 { e.errno } else { libc::EIO });
            fail
        }
        Err(_) => {
            set_errno(libc::EIO);
            fail
        }
    }
}

// ---------------------------------------------------------------- configuration

pub struct Settings {
    /// The prefix, without a trailing slash (never empty, never "/").
    pub prefix: String,
    pub state: Option<String>,
}

static SETTINGS: OnceLock<Option<Settings>> = OnceLock::new();

/// The settings from EDDY_PREFIX and EDDY_STATE; `None` when the library is inactive.
pub fn settings() -> Option<&'static Settings> {
    SETTINGS
        .get_or_init(|| {
            LOG.store(
                std::env::var_os("EDDY_PRELOAD_LOG").is_some(),
                Ordering::Relaxed,
            );
            let prefix = std::env::var("EDDY_PREFIX").ok()?;
            let prefix = prefix.trim_end_matches('/').to_string();
            if !prefix.starts_with('/') || prefix.is_empty() {
                eprintln!(
                    "eddy-preload: EDDY_PREFIX must be an absolute path other than /: inactive"
                );
                return None;
            }
            let state = std::env::var("EDDY_STATE").ok();
            Some(Settings { prefix, state })
        })
        .as_ref()
}

// ---------------------------------------------------------------- client

pub struct Global {
    /// A current-thread runtime: the calling thread drives it (see `on`).
    rt: tokio::runtime::Runtime,
    pub client: Client,
    /// The library's own thread (see `helper`).
    jobs: parking_lot::Mutex<std::sync::mpsc::Sender<Job>>,
}

type Job = Box<dyn FnOnce() + Send>;

static GLOBAL: AtomicPtr<Global> = AtomicPtr::new(std::ptr::null_mut());
static INIT: parking_lot::Mutex<()> = parking_lot::const_mutex(());

/// The client, connected on first use.
pub fn global() -> R<&'static Global> {
    let p = GLOBAL.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: published once and never freed (a forked child leaks its parent's).
        return Ok(unsafe { &*p });
    }
    let _held = INIT.lock();
    let p = GLOBAL.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: as above.
        return Ok(unsafe { &*p });
    }
    let g = Box::new(connect()?);
    let p = Box::into_raw(g);
    GLOBAL.store(p, Ordering::Release);
    // SAFETY: just published, never freed.
    let g: &'static Global = unsafe { &*p };
    let tick = std::time::Duration::from_millis(g.client.config().size_update_ms.max(1));
    let (tx, rx) = std::sync::mpsc::channel();
    *g.jobs.lock() = tx;
    std::thread::Builder::new()
        .name("eddy-preload".into())
        .spawn(move || helper(&g.rt, rx, tick))
        .map_err(|e| Errno::eio(format!("eddy-preload helper thread: {e}")))?;
    Ok(g)
}

fn connect() -> R<Global> {
    let s = settings().ok_or_else(|| Errno::einval("EDDY_PREFIX is not set"))?;
    let state = s.state.as_deref().ok_or_else(|| {
        Errno::einval("EDDY_STATE is not set (the directory holding deployment.toml)")
    })?;
    let file = std::path::Path::new(state).join("deployment.toml");
    let dep = eddy_config::Deployment::load(&file)
        .map_err(|e| Errno::eio(format!("{}: {e}", file.display())))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(4)
        .thread_name("eddy-preload")
        .on_thread_start(|| {
            let _ = GUARD.try_with(|g| g.set(true));
        })
        .enable_all()
        .build()
        .map_err(|e| Errno::eio(format!("eddy-preload runtime: {e}")))?;
    let client = if can_drive() {
        rt.block_on(Client::connect(dep))?
    } else {
        std::thread::scope(|s| {
            s.spawn(|| {
                let _ = GUARD.try_with(|g| g.set(true));
                rt.block_on(Client::connect(dep))
            })
            .join()
            .unwrap_or_else(|_| Err(Errno::eio("eddy-preload: connecting panicked")))
        })?
    };
    // The helper's channel is made with the helper, in `global`.
    let (tx, _) = std::sync::mpsc::channel();
    Ok(Global {
        rt,
        client,
        jobs: parking_lot::Mutex::new(tx),
    })
}

/// The library's own thread. It runs the calls a program's thread cannot drive itself (see
/// `on`), and every `tick` it lets the runtime run what is due while no call is under way: a
/// deferred size publication, a directory time, a read-ahead, a connection's end. A program
/// busy computing between calls thus publishes its sizes as a threaded client would.
fn helper(
    rt: &tokio::runtime::Runtime,
    jobs: std::sync::mpsc::Receiver<Job>,
    tick: std::time::Duration,
) {
    let _ = GUARD.try_with(|g| g.set(true));
    loop {
        match jobs.recv_timeout(tick) {
            Ok(job) => job(),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                rt.block_on(tokio::task::yield_now());
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Runs a future to completion on this thread, which drives the runtime's sockets and timers
/// for as long as the call lasts: a call costs no hand-off to another thread. (Threads calling
/// at once share the runtime: one drives it, the others are woken as their replies come.)
/// When this thread cannot drive a runtime — it is inside some other runtime (a tokio
/// program), or its thread-locals are gone (glibc's `exit` drops them before the atexit
/// handlers, where stdio flushes its buffers into our descriptors) — the helper thread runs
/// the call while this one waits.
fn on<T: Send + 'static>(
    g: &'static Global,
    fut: impl Future<Output = R<T>> + Send + 'static,
) -> R<T> {
    if can_drive() {
        return g.rt.block_on(fut);
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let job: Job = Box::new(move || {
        let _ = tx.send(g.rt.block_on(fut));
    });
    g.jobs
        .lock()
        .send(job)
        .map_err(|_| Errno::eio("the eddy-preload helper thread stopped"))?;
    rx.recv()
        .map_err(|_| Errno::eio("the eddy-preload helper thread stopped"))?
}

/// Whether this thread can drive a runtime: it is in none, and its thread-locals live.
pub fn can_drive() -> bool {
    matches!(tokio::runtime::Handle::try_current(), Err(e) if e.is_missing_context())
}

/// Runs `f(client)` on this thread, which must be able to drive the runtime (`can_drive`):
/// the future may borrow the caller's buffers (a read lands straight in the program's buffer,
/// a write is sent from it). Where it cannot, the caller goes through `run` with owned data.
pub fn run_here<T, F, Fut>(f: F) -> R<T>
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = R<T>>,
{
    let g = global()?;
    g.rt.block_on(f(g.client.clone()))
}

/// Runs `f(client)` on the runtime and waits for its result.
pub fn run<T, F, Fut>(f: F) -> R<T>
where
    T: Send + 'static,
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = R<T>> + Send + 'static,
{
    let g = global()?;
    on(g, f(g.client.clone()))
}

pub fn creds() -> Creds {
    Creds::current()
}

// ---------------------------------------------------------------- cwd and umask

/// The working directory when it is under the prefix (an Eddy path), else `None`.
pub static CWD: parking_lot::RwLock<Option<String>> = parking_lot::const_rwlock(None);

static UMASK: AtomicU32 = AtomicU32::new(0o022);

pub fn umask() -> u32 {
    UMASK.load(Ordering::Relaxed)
}

pub fn set_umask(m: u32) {
    UMASK.store(m & 0o777, Ordering::Relaxed);
}

// ---------------------------------------------------------------- fork

extern "C" fn before_fork() {
    // Nobody may be half-way through changing these when the child copies them.
    std::mem::forget(INIT.lock());
    crate::fds::lock_for_fork();
    std::mem::forget(CWD.write());
}

extern "C" fn parent_after_fork() {
    // SAFETY: locked in before_fork by this thread.
    unsafe {
        CWD.force_unlock_write();
        crate::fds::unlock_after_fork();
        INIT.force_unlock();
    }
}

extern "C" fn child_after_fork() {
    // SAFETY: locked in before_fork by the thread that is now the child's only thread.
    unsafe {
        CWD.force_unlock_write();
        crate::fds::unlock_after_fork();
        INIT.force_unlock();
    }
    // The parent's runtime threads and connections do not exist here: leak them, connect
    // again on next use. Open files stay: they are named by path and file id, not by
    // connection.
    GLOBAL.store(std::ptr::null_mut(), Ordering::Release);
    crate::ops::reset_after_fork();
    crate::fds::close_internal_after_fork();
}

pub fn register_fork_handlers() {
    // SAFETY: plain function pointers with static lifetime.
    unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(parent_after_fork),
            Some(child_after_fork),
        );
    }
}
