//! The POSIX rules for one owner's locks over byte ranges, shared by the daemon's lock table
//! (every owner's locks of a file) and the client's record of the locks it holds (which it
//! takes back after a restart of their daemon, decision 0028): a request replaces the
//! owner's own locks over its range, splitting them where they stick out, and merges with
//! the owner's adjacent locks of the same kind; an unlock cuts the range out.

use crate::{LockKind, LockRange};

/// A lock over a range held by an owner, as a lock set stores it.
pub trait RangeLock: Copy {
    /// Whether `other` has the same owner (the owner's own locks are replaced, not conflicts).
    fn same_owner(&self, other: &Self) -> bool;
    fn kind(&self) -> LockKind;
    fn range(&self) -> LockRange;
    /// The same lock over another range.
    fn with_range(self, range: LockRange) -> Self;
}

/// Whether two inclusive ranges share a byte.
pub fn overlaps(a: LockRange, b: LockRange) -> bool {
    a.start <= b.end && b.start <= a.end
}

/// Applies a granted request (`new`'s kind Read, Write or Unlock) to a set of locks: the
/// owner's locks over the range are cut out (split where they stick out), the new one put
/// in and merged with the owner's adjacent locks of the same kind. Returns whether anything
/// was released or downgraded (waiters may proceed).
pub fn apply<T: RangeLock>(locks: &mut Vec<T>, new: T) -> bool {
    let r = new.range();
    let unlock = new.kind() == LockKind::Unlock;
    let mut released = false;
    let mut out = Vec::with_capacity(locks.len() + 2);
    for h in locks.drain(..) {
        if !h.same_owner(&new) || !overlaps(h.range(), r) {
            out.push(h);
            continue;
        }
        if unlock || (h.kind() == LockKind::Write && new.kind() == LockKind::Read) {
            released = true;
        }
        let hr = h.range();
        if hr.start < r.start {
            out.push(h.with_range(LockRange {
                start: hr.start,
                end: r.start - 1,
            }));
        }
        if hr.end > r.end {
            out.push(h.with_range(LockRange {
                start: r.end + 1,
                end: hr.end,
            }));
        }
    }
    if !unlock {
        let mut range = r;
        // Merge with the owner's adjacent locks of the same kind.
        out.retain(|h| {
            let hr = h.range();
            let adjacent = hr.end.checked_add(1) == Some(range.start)
                || range.end.checked_add(1) == Some(hr.start);
            if h.same_owner(&new) && h.kind() == new.kind() && adjacent {
                range.start = range.start.min(hr.start);
                range.end = range.end.max(hr.end);
                false
            } else {
                true
            }
        });
        out.push(new.with_range(range));
    }
    *locks = out;
    released
}
