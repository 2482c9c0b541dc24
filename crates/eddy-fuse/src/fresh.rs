//! Directories this mount made itself, known whole for the negative TTL after the mkdir:
//! a name in one that this mount has not made, looked up or listed since is missing, as a
//! negative entry the kernel took at the mkdir would say. The lookup the kernel sends before
//! every create (and a stat of a missing name) in such a directory is then answered without
//! asking the daemons (decision 0044). The answer is never staler than a negative entry: a
//! name another node makes there within the window is seen when the window ends, as with
//! `fuse_negative_ttl_ms`; a create of it through this mount still goes to its owner (an
//! O_EXCL create gets EEXIST there).

use eddy_proto::path;
use eddy_proto::sync::lock;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Directories tracked at most; past it, the expired ones are dropped, then all.
const MAX_DIRS: usize = 4096;

struct Fresh {
    /// End of the window: the mkdir's time plus the negative TTL.
    until: Instant,
    /// Names this mount made or saw in it since (they may exist).
    names: HashSet<String>,
}

pub(crate) struct FreshDirs {
    /// The negative TTL; zero turns the whole thing off.
    ttl: Duration,
    dirs: Mutex<HashMap<String, Fresh>>,
}

impl FreshDirs {
    pub fn new(ttl: Duration, enabled: bool) -> FreshDirs {
        FreshDirs {
            ttl: if enabled { ttl } else { Duration::ZERO },
            dirs: Mutex::default(),
        }
    }

    /// `dir` was just made through this mount (empty, as of `started`, when its mkdir was
    /// sent).
    pub fn made(&self, dir: &str, started: Instant) {
        if self.ttl.is_zero() {
            return;
        }
        let mut dirs = lock(&self.dirs);
        if dirs.len() >= MAX_DIRS {
            let now = Instant::now();
            dirs.retain(|_, f| f.until > now);
            if dirs.len() >= MAX_DIRS {
                dirs.clear();
            }
        }
        let fresh = Fresh {
            until: started + self.ttl,
            names: HashSet::new(),
        };
        dirs.insert(dir.to_string(), fresh);
    }

    /// `p` may exist now (made, found or linked through this mount).
    pub fn seen(&self, p: &str) {
        let Some((dir, name)) = path::split(p) else {
            return;
        };
        if let Some(f) = lock(&self.dirs).get_mut(dir) {
            f.names.insert(name.to_string());
        }
    }

    /// Forgets what is known of `dir` (it is listed, removed or renamed).
    pub fn forget(&self, dir: &str) {
        lock(&self.dirs).remove(dir);
    }

    /// Forgets everything (a rename may move names and directories anywhere).
    pub fn forget_all(&self) {
        lock(&self.dirs).clear();
    }

    /// If `p` is known to be missing: for how much longer that answer holds.
    pub fn missing(&self, p: &str) -> Option<Duration> {
        let (dir, name) = path::split(p)?;
        let mut dirs = lock(&self.dirs);
        let f = dirs.get(dir)?;
        let left = f.until.checked_duration_since(Instant::now());
        match left {
            Some(left) if !left.is_zero() => (!f.names.contains(name)).then_some(left),
            _ => {
                dirs.remove(dir);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_a_fresh_directory_are_missing_until_seen() {
        let f = FreshDirs::new(Duration::from_secs(3600), true);
        assert_eq!(f.missing("/d/x"), None, "not made here");
        f.made("/d", Instant::now());
        assert!(f.missing("/d/x").is_some());
        assert!(f.missing("/d/e/x").is_none(), "below it: unknown");
        f.seen("/d/x");
        assert_eq!(f.missing("/d/x"), None);
        assert!(f.missing("/d/y").is_some());
        f.forget("/d");
        assert_eq!(f.missing("/d/y"), None);
        f.made("/d", Instant::now());
        f.forget_all();
        assert_eq!(f.missing("/d/y"), None);
    }

    #[test]
    fn the_window_ends_and_off_means_off() {
        let f = FreshDirs::new(Duration::from_secs(1), true);
        let long_ago = Instant::now()
            .checked_sub(Duration::from_secs(2))
            .unwrap_or_else(Instant::now);
        f.made("/d", long_ago);
        if long_ago + Duration::from_secs(1) <= Instant::now() {
            assert_eq!(f.missing("/d/x"), None);
        }
        let off = FreshDirs::new(Duration::from_secs(1), false);
        off.made("/d", Instant::now());
        assert_eq!(off.missing("/d/x"), None);
    }
}
