//! A runtime for the client that the calling threads drive themselves (decision 0052): the
//! front-ends whose callers are plain threads (the preload library, the mount's FUSE threads)
//! run each call on the caller's thread, which waits for its reply in the runtime's own
//! `epoll_wait`, so a request costs the caller one wake-up. A runtime with workers of its own
//! costs two: the worker that sees the reply, then the caller it hands the reply to.
//!
//! The runtime is tokio's `current_thread` one: its sockets, timers and tasks run on
//! whichever thread is inside `block_on`. Between calls a keeper thread drives it: after
//! `IDLE` without a call, or at once for a caller that cannot drive it and waits for a task of
//! it (`Driver::on_task`). A call that finds the keeper driving tells it to step aside (one
//! wake-up, on the first call after a quiet spell); two calls at once share the runtime as
//! tokio does: one drives, the other is woken with its reply.
//!
//! The cost: while a call runs on one thread, the other threads' sockets are read by that
//! thread between the polls of its own call, so a long stretch of work inside one poll (a
//! large direct write) delays the others' replies until it ends.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How long the calling threads may leave the runtime undriven before the keeper takes it:
/// the longest a connection's task or a timer (a deferred size report, a lock waiting for
/// its grant) waits while the callers make calls now and then, and the period at which the
/// keeper looks.
pub const IDLE: Duration = Duration::from_millis(2);

/// A `current_thread` runtime and who drives it (see the module's comment). Dropping it
/// stops the keeper, which then drops the runtime.
pub struct Driver {
    inner: Arc<Inner>,
}

struct Inner {
    rt: tokio::runtime::Runtime,
    /// Calls on calling threads, running or about to.
    calls: AtomicUsize,
    /// Callers waiting for a task of the runtime without driving it (`on_task`).
    waiting: AtomicUsize,
    /// The keeper is inside `block_on`, or about to be.
    keeping: AtomicBool,
    /// The `Driver` is gone: the keeper ends.
    stopping: AtomicBool,
    /// Tells the keeper to leave `block_on`.
    step_aside: tokio::sync::Notify,
    /// When the last call ended, in ns since `epoch`.
    last_end: AtomicU64,
    epoch: Instant,
    keeper: OnceLock<std::thread::Thread>,
}

impl Driver {
    /// Takes `rt` (a `current_thread` runtime) and starts its keeper thread, named `name`,
    /// which runs `init` first.
    pub fn start(
        rt: tokio::runtime::Runtime,
        name: &str,
        init: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<Arc<Driver>> {
        let inner = Arc::new(Inner {
            rt,
            calls: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            keeping: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            step_aside: tokio::sync::Notify::new(),
            last_end: AtomicU64::new(0),
            epoch: Instant::now(),
            keeper: OnceLock::new(),
        });
        let k = Arc::clone(&inner);
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                init();
                k.keep();
            })?;
        let _ = inner.keeper.set(handle.thread().clone());
        Ok(Arc::new(Driver { inner }))
    }

    /// A `current_thread` runtime with everything enabled, for `start`.
    pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }

    /// Runs `fut` to completion on this thread, which drives the runtime meanwhile. Not from
    /// inside a runtime (tokio panics), nor from the keeper.
    pub fn drive<T>(&self, fut: impl Future<Output = T>) -> T {
        let d = &self.inner;
        d.calls.fetch_add(1, Ordering::SeqCst);
        if d.keeping.load(Ordering::SeqCst) {
            d.step_aside.notify_one();
        }
        let out = d.rt.block_on(fut);
        d.last_end.store(d.now(), Ordering::Relaxed);
        d.calls.fetch_sub(1, Ordering::SeqCst);
        if d.waiting.load(Ordering::SeqCst) > 0 {
            d.wake_keeper();
        }
        out
    }

    /// Runs `fut` as a task of the runtime while this thread blocks (for a caller that
    /// cannot drive it: one inside another runtime); the keeper drives it unless a call on
    /// another thread does. `None`: the task ended without an answer (it panicked).
    pub fn on_task<T: Send + 'static>(
        &self,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        let d = &self.inner;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        d.waiting.fetch_add(1, Ordering::SeqCst);
        d.rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        d.wake_keeper();
        let out = rx.recv().ok();
        d.waiting.fetch_sub(1, Ordering::SeqCst);
        out
    }

    /// Spawns `fut` as a task of the runtime, run by whoever drives it next (a call, or the
    /// keeper within `IDLE`).
    pub fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        self.inner.rt.spawn(fut);
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let d = &self.inner;
        d.stopping.store(true, Ordering::SeqCst);
        d.step_aside.notify_one();
        d.wake_keeper();
    }
}

impl Inner {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether the runtime needs the keeper: a caller waits on a task, or no call has run
    /// for `IDLE`.
    fn needs_keeper(&self) -> bool {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            return true;
        }
        let quiet = self
            .now()
            .saturating_sub(self.last_end.load(Ordering::Relaxed));
        self.calls.load(Ordering::SeqCst) == 0 && quiet >= IDLE.as_nanos() as u64
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// The keeper thread: drives the runtime whenever it needs it, until a call comes, and
    /// ends when the `Driver` is dropped (the runtime with it, when no call holds it).
    fn keep(&self) {
        while !self.stopping() {
            if !self.needs_keeper() {
                std::thread::park_timeout(IDLE);
                continue;
            }
            self.keeping.store(true, Ordering::SeqCst);
            // A call that came between the check and the flag did not see the flag: the
            // runtime is left to it.
            let call_came =
                self.waiting.load(Ordering::SeqCst) == 0 && self.calls.load(Ordering::SeqCst) > 0;
            if !call_came && !self.stopping() {
                self.rt.block_on(self.step_aside.notified());
            }
            self.keeping.store(false, Ordering::SeqCst);
        }
    }

    fn wake_keeper(&self) {
        if let Some(t) = self.keeper.get() {
            t.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn driver() -> Arc<Driver> {
        Driver::start(Driver::runtime().expect("runtime"), "test-keeper", || {}).expect("start")
    }

    /// A task spawned between calls runs without any caller: the keeper drives it, timers
    /// included.
    #[test]
    fn the_keeper_runs_tasks_and_timers_between_calls() {
        let d = driver();
        let (tx, rx) = std::sync::mpsc::channel();
        d.drive(async {});
        d.spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = tx.send(std::thread::current().name().map(str::to_owned));
        });
        let ran_on = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the task never ran");
        assert_eq!(ran_on.as_deref(), Some("test-keeper"));
    }

    /// A call runs on the calling thread, its I/O included; a caller that cannot drive gets
    /// its task run by the keeper.
    #[test]
    fn calls_run_on_the_caller_and_tasks_on_the_keeper() {
        let d = driver();
        let me = std::thread::current().id();
        let (ran_here, slept) = d.drive(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            (std::thread::current().id() == me, true)
        });
        assert!(ran_here && slept);
        let on = d
            .on_task(async { std::thread::current().name().map(str::to_owned) })
            .expect("an answer");
        assert_eq!(on.as_deref(), Some("test-keeper"));
    }

    /// Dropping the driver ends its keeper, and with it the runtime.
    #[test]
    fn dropping_the_driver_ends_the_keeper() {
        let d = driver();
        d.drive(async {});
        let weak = Arc::downgrade(&d.inner);
        drop(d);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while weak.strong_count() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(IDLE);
        }
        assert_eq!(weak.strong_count(), 0, "the keeper still holds the runtime");
    }

    /// Callers on many threads at once, with the keeper stepping in and out between them:
    /// every call completes, sockets' replies included.
    #[test]
    fn many_threads_calling_at_once_all_complete() {
        let d = driver();
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let d = Arc::clone(&d);
                std::thread::spawn(move || {
                    let mut sum = 0u64;
                    for k in 0..200u64 {
                        sum += d.drive(async move {
                            let (a, mut b) = tokio::io::duplex(64);
                            let w = tokio::spawn(async move {
                                use tokio::io::AsyncWriteExt;
                                let mut a = a;
                                a.write_all(&k.to_le_bytes()).await.expect("write");
                            });
                            use tokio::io::AsyncReadExt;
                            let mut buf = [0u8; 8];
                            b.read_exact(&mut buf).await.expect("read");
                            w.await.expect("join");
                            u64::from_le_bytes(buf)
                        });
                        if k % 50 == 0 {
                            std::thread::sleep(IDLE * 2);
                        }
                    }
                    (t, sum)
                })
            })
            .collect();
        for h in threads {
            let (t, sum) = h.join().expect("thread");
            assert_eq!(sum, (0..200u64).sum::<u64>(), "thread {t}");
        }
    }
}
