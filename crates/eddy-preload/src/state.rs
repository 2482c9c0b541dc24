//! Process state: the prefix, the reentrancy guard, the client on its own runtime (made on
//! first use, made again in a forked child) and who drives that runtime, the process-local
//! working directory and umask.

use eddy_client::driver::Driver;
use eddy_client::{Client, Creds, Errno};
use std::cell::Cell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

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
    driver: Arc<Driver>,
    pub client: Client,
}

static GLOBAL: AtomicPtr<Global> = AtomicPtr::new(std::ptr::null_mut());
static INIT: parking_lot::Mutex<()> = parking_lot::const_mutex(());

/// Whether this process connected its client (it never does at exit).
pub fn connected() -> bool {
    !GLOBAL.load(Ordering::Acquire).is_null()
}

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
    Ok(unsafe { &*p })
}

fn connect() -> R<Global> {
    let s = settings().ok_or_else(|| Errno::einval("EDDY_PREFIX is not set"))?;
    let state = s.state.as_deref().ok_or_else(|| {
        Errno::einval("EDDY_STATE is not set (the directory holding deployment.toml)")
    })?;
    let file = std::path::Path::new(state).join("deployment.toml");
    let dep = eddy_config::Deployment::load(&file)
        .map_err(|e| Errno::eio(format!("{}: {e}", file.display())))?;
    // The program's threads drive the runtime during their calls, the keeper in between
    // (decision 0052); its threads' own libc calls go to libc.
    let guarded = || {
        let _ = GUARD.try_with(|g| g.set(true));
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(4)
        .thread_name("eddy-preload")
        .on_thread_start(guarded)
        .enable_all()
        .build()
        .map_err(|e| Errno::eio(format!("eddy-preload runtime: {e}")))?;
    let driver = Driver::start(rt, "eddy-preload", guarded)
        .map_err(|e| Errno::eio(format!("eddy-preload: starting its thread: {e}")))?;
    let client = on(&driver, Client::connect_following(dep, file))?;
    Ok(Global { driver, client })
}

/// Whether this thread can run a future itself: it is inside no other runtime (a tokio
/// program) and its thread-locals are alive (glibc's `exit` drops them before the atexit
/// handlers, where stdio flushes its buffers into our descriptors).
fn can_run_here() -> bool {
    matches!(tokio::runtime::Handle::try_current(), Err(e) if e.is_missing_context())
}

/// Runs `f(client)` and waits for its result: on this thread, or as a task of the runtime
/// when this thread cannot run it (see `Driver`).
pub fn run<T, F, Fut>(f: F) -> R<T>
where
    T: Send + 'static,
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = R<T>> + Send + 'static,
{
    let g = global()?;
    on(&g.driver, f(g.client.clone()))
}

/// Runs a future to completion: on this thread when it can run one (`can_run_here`), else
/// as a task of the runtime while this thread blocks.
fn on<T: Send + 'static>(d: &Driver, fut: impl Future<Output = R<T>> + Send + 'static) -> R<T> {
    if can_run_here() {
        return d.drive(fut);
    }
    on_task(d, fut)
}

fn on_task<T: Send + 'static>(
    d: &Driver,
    fut: impl Future<Output = R<T>> + Send + 'static,
) -> R<T> {
    d.on_task(fut)
        .unwrap_or_else(|| Err(Errno::eio("the eddy-preload runtime stopped")))
}

/// Runs `f(client)`, a call that may borrow the caller's buffers, on this thread, which
/// drives the runtime meanwhile (its replies' sockets included), when it can run one
/// (`can_run_here`). `None`: the caller runs it as a task with owned data
/// (`run_as_task`).
pub fn run_here<T, F, Fut>(f: F) -> Option<R<T>>
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = R<T>>,
{
    let g = match global() {
        Ok(g) => g,
        Err(e) => return Some(Err(e)),
    };
    if !can_run_here() {
        return None;
    }
    Some(g.driver.drive(f(g.client.clone())))
}

/// Runs `f(client)` as a task of the runtime while this thread waits.
pub fn run_as_task<T, F, Fut>(f: F) -> R<T>
where
    T: Send + 'static,
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = R<T>> + Send + 'static,
{
    let g = global()?;
    on_task(&g.driver, f(g.client.clone()))
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
