//! Waiting for a condition in a test: look again and again until it holds, within a bound
//! that only guards against a hang (never a claim on speed), instead of a fixed sleep or a
//! deadline loop written by hand.
//!
//! A probe answers `Some(value)` once the condition holds, `None` while it does not. The
//! looks come quickly at first (1 ms apart), then further apart (up to 100 ms), so a short
//! wait costs little and a long one does not spin; [`poll_every`] fixes the interval for a
//! test that must catch a short-lived state.
//!
//! ```
//! use eddy_testkit::eventually::eventually;
//! let start = std::time::Instant::now();
//! let t = eventually("a millisecond passed", || {
//!     (start.elapsed().as_millis() >= 1).then_some(start.elapsed())
//! });
//! assert!(t.as_millis() >= 1);
//! ```

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

/// The guard of [`eventually`]: long enough for any condition of a healthy test on a loaded
/// 2-core machine, short enough that a hang fails the test instead of the whole run.
pub const GUARD: Duration = Duration::from_secs(60);

const FIRST: Duration = Duration::from_millis(1);
const LONGEST: Duration = Duration::from_millis(100);

/// The value `probe` gives once the condition holds; panics naming `what` when it does not
/// within [`GUARD`].
pub fn eventually<T>(what: impl Display, probe: impl FnMut() -> Option<T>) -> T {
    eventually_within(GUARD, what, probe)
}

/// [`eventually`] with a guard of `bound`.
pub fn eventually_within<T>(
    bound: Duration,
    what: impl Display,
    probe: impl FnMut() -> Option<T>,
) -> T {
    match poll_for(bound, probe) {
        Some(v) => v,
        None => panic!("not within {bound:?}: {what}"),
    }
}

/// The value once `probe` answers `Ok`; while it answers `Err(seen)` it is asked again, and
/// when `bound` passes first the test fails naming `what` and the last `seen`.
pub fn eventually_seen<T, S: std::fmt::Debug>(
    bound: Duration,
    what: impl Display,
    mut probe: impl FnMut() -> Result<T, S>,
) -> T {
    let mut last = None;
    let got = poll_for(bound, || match probe() {
        Ok(v) => Some(v),
        Err(seen) => {
            last = Some(seen);
            None
        }
    });
    match got {
        Some(v) => v,
        None => panic!("not within {bound:?}: {what}; last seen: {last:?}"),
    }
}

/// [`eventually_within`] whose failure message is made when it fails: what the logs or a
/// job's output say then, not when the wait began.
pub fn eventually_else<T>(
    bound: Duration,
    probe: impl FnMut() -> Option<T>,
    failure: impl FnOnce() -> String,
) -> T {
    match poll_for(bound, probe) {
        Some(v) => v,
        None => panic!("not within {bound:?}: {}", failure()),
    }
}

/// The value `probe` gives once the condition holds, or `None` when `bound` passed first
/// (for a test that goes on either way and says what it saw).
pub fn poll_for<T>(bound: Duration, probe: impl FnMut() -> Option<T>) -> Option<T> {
    poll(bound, None, probe)
}

/// [`poll_for`], looking every `every` (for a short-lived state a test must catch).
pub fn poll_every<T>(
    bound: Duration,
    every: Duration,
    probe: impl FnMut() -> Option<T>,
) -> Option<T> {
    poll(bound, Some(every), probe)
}

/// [`poll_every`] for a probe that says what it saw: `Ok` once the condition holds, else
/// `Err` with the last thing it saw (for the caller's failure message).
pub fn poll_seen_every<T, S>(
    bound: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Result<T, S>,
) -> Result<T, Option<S>> {
    let mut last = None;
    let got = poll_every(bound, every, || match probe() {
        Ok(v) => Some(v),
        Err(seen) => {
            last = Some(seen);
            None
        }
    });
    got.ok_or(last)
}

fn poll<T>(
    bound: Duration,
    every: Option<Duration>,
    mut probe: impl FnMut() -> Option<T>,
) -> Option<T> {
    let mut pace = Pace::new(bound, every);
    loop {
        if let Some(v) = probe() {
            return Some(v);
        }
        std::thread::sleep(pace.next_gap()?);
    }
}

/// The pace of one wait, shared by the blocking and the asynchronous pollers: the gap before
/// the next look (`every`, else 1 ms doubling up to 100 ms), never past the bound.
struct Pace {
    start: Instant,
    bound: Duration,
    every: Option<Duration>,
    gap: Duration,
}

impl Pace {
    fn new(bound: Duration, every: Option<Duration>) -> Pace {
        Pace {
            start: Instant::now(),
            bound,
            every,
            gap: every.unwrap_or(FIRST),
        }
    }

    /// How long to wait before the next look, or `None` when the bound has passed.
    fn next_gap(&mut self) -> Option<Duration> {
        let left = self.bound.saturating_sub(self.start.elapsed());
        if left.is_zero() {
            return None;
        }
        let gap = self.gap.min(left);
        if self.every.is_none() {
            self.gap = (self.gap * 2).min(LONGEST);
        }
        Some(gap)
    }
}

/// The exit status of `child` once it ended, or `None` when it still runs after `bound`
/// (the caller kills it or fails).
pub fn exited(
    child: &mut std::process::Child,
    bound: Duration,
) -> Option<std::process::ExitStatus> {
    poll_for(bound, || child.try_wait().ok().flatten())
}

/// [`eventually`] for an asynchronous probe (a client's request), on the caller's runtime.
pub async fn eventually_async<T, F>(
    bound: Duration,
    what: impl Display,
    probe: impl FnMut() -> F,
) -> T
where
    F: Future<Output = Option<T>>,
{
    match poll_async(bound, None, probe).await {
        Some(v) => v,
        None => panic!("not within {bound:?}: {what}"),
    }
}

/// [`poll_for`] for an asynchronous probe; `every` fixes the interval (else 1 ms growing to
/// 100 ms).
pub async fn poll_async<T, F>(
    bound: Duration,
    every: Option<Duration>,
    mut probe: impl FnMut() -> F,
) -> Option<T>
where
    F: Future<Output = Option<T>>,
{
    let mut pace = Pace::new(bound, every);
    loop {
        if let Some(v) = probe().await {
            return Some(v);
        }
        tokio::time::sleep(pace.next_gap()?).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn returns_the_first_value_and_looks_no_more() {
        let looks = Cell::new(0);
        let v = eventually("the third look", || {
            looks.set(looks.get() + 1);
            (looks.get() == 3).then_some(looks.get() * 10)
        });
        assert_eq!((v, looks.get()), (30, 3));
    }

    #[test]
    fn gives_up_after_the_bound() {
        let looks = Cell::new(0u32);
        let r: Option<()> = poll_every(Duration::from_millis(30), Duration::from_millis(5), || {
            looks.set(looks.get() + 1);
            None
        });
        assert!(r.is_none());
        assert!(looks.get() >= 2, "looked {} times", looks.get());
    }

    #[test]
    #[should_panic(expected = "not within 10ms: the moon is cheese")]
    fn panics_naming_the_condition() {
        eventually_within(
            Duration::from_millis(10),
            "the moon is cheese",
            || None::<()>,
        );
    }

    #[test]
    fn the_pace_doubles_to_its_longest_and_stops_at_the_bound() {
        let mut pace = Pace::new(Duration::from_secs(60), None);
        let gaps: Vec<_> = (0..9).map(|_| pace.next_gap().unwrap()).collect();
        let ms: Vec<_> = gaps.iter().map(|g| g.as_millis()).collect();
        assert_eq!(ms, [1, 2, 4, 8, 16, 32, 64, 100, 100]);
        let mut fixed = Pace::new(Duration::from_secs(60), Some(Duration::from_millis(7)));
        assert_eq!(fixed.next_gap(), Some(Duration::from_millis(7)));
        assert_eq!(fixed.next_gap(), Some(Duration::from_millis(7)));
        let mut over = Pace::new(Duration::ZERO, None);
        assert_eq!(over.next_gap(), None);
    }

    #[test]
    fn waits_for_an_async_probe() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let n = Cell::new(0);
        let v = rt.block_on(eventually_async(GUARD, "two looks", || {
            n.set(n.get() + 1);
            let k = n.get();
            async move { (k == 2).then_some(k) }
        }));
        assert_eq!(v, 2);
    }
}
