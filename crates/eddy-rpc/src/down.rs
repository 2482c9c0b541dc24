//! The marks of daemons found unreachable (decision 0020): with `replicas` R > 1 a daemon
//! that could not be reached is treated as down for `down_hold_ms`, so that later calls go
//! to the next copy at once instead of waiting for it again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Daemons found unreachable, until when they are treated as down.
pub(crate) struct Down {
    until: Mutex<HashMap<u32, Instant>>,
    hold: Duration,
}

impl Down {
    pub fn new(hold: Duration) -> Down {
        Down {
            until: Mutex::new(HashMap::new()),
            hold,
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Instant>> {
        eddy_proto::sync::lock(&self.until)
    }

    pub fn is_down(&self, id: u32) -> bool {
        let mut m = self.map();
        match m.get(&id) {
            Some(&t) if t > Instant::now() => true,
            Some(_) => {
                m.remove(&id);
                false
            }
            None => false,
        }
    }

    pub fn mark(&self, id: u32) {
        self.map().insert(id, Instant::now() + self.hold);
    }

    pub fn clear(&self, id: u32) {
        let mut m = self.map();
        if !m.is_empty() {
            m.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_expire() {
        let d = Down::new(Duration::from_millis(30));
        assert!(!d.is_down(1));
        d.mark(1);
        assert!(d.is_down(1) && !d.is_down(2));
        std::thread::sleep(Duration::from_millis(40));
        assert!(!d.is_down(1));
        d.mark(2);
        d.clear(2);
        assert!(!d.is_down(2));
    }
}
