//! The keys a request changed, for the other owners of those keys (decision 0020). Every
//! write to the metadata keyspace goes through `MetaStore::put`, `MetaStore::delete` or the
//! one batch of `link`, which note the key here before they write it (and mark it pending
//! when first noted: decision 0080); the handler captures what one request noted
//! (its store work runs synchronously on one thread) and forwards the keys' current state.
//! Nothing is noted outside a capture: with one copy the cost is a thread-local check.

use std::cell::RefCell;

thread_local! {
    static CHANGED: RefCell<Option<Vec<Vec<u8>>>> = const { RefCell::new(None) };
}

/// Notes that `key` is about to be written or removed, if a capture is running on this
/// thread; true the first time the capture notes it (the caller then marks it pending,
/// `pending.rs`, before it writes).
pub(crate) fn note(key: &[u8]) -> bool {
    CHANGED.with(|c| {
        if let Some(keys) = c.borrow_mut().as_mut() {
            if !keys.iter().any(|k| k == key) {
                keys.push(key.to_vec());
                return true;
            }
        }
        false
    })
}

/// Runs `f`, returning its result and the keys it changed (each once, in order).
pub fn capture<R>(f: impl FnOnce() -> R) -> (R, Vec<Vec<u8>>) {
    let outer = CHANGED.with(|c| c.borrow_mut().replace(Vec::new()));
    let r = f();
    let keys = CHANGED.with(|c| std::mem::replace(&mut *c.borrow_mut(), outer));
    (r, keys.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_captured_changes_are_kept_once() {
        assert!(!note(b"before"));
        let ((), keys) = capture(|| {
            assert!(note(b"a"));
            assert!(note(b"b"));
            assert!(!note(b"a"));
        });
        assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec()]);
        let ((), keys) = capture(|| {});
        assert!(keys.is_empty());
    }
}
