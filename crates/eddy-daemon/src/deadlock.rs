//! The deadlock coordinator's waits-for graph (decision 0028). One daemon of the deployment,
//! chosen by placement, is every client's coordinator: a client whose blocking lock request
//! (`F_SETLKW`) is blocked learns from the file's lock daemon which owners hold the
//! conflicting locks (`LockHolders`) and records here that it waits for them (`WaitsFor`),
//! again at every slice of its wait (a record not renewed expires). A wait that would close
//! a cycle (a holder waits, through any chain of waits on any files and daemons, for the
//! waiter) is a deadlock: it is not recorded and the waiter gets EDEADLK, as Linux answers
//! the request that closes a cycle of POSIX lock owners.

use eddy_proto::sync::lock;
use eddy_proto::{Errno, LockOwner};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most holders one wait may name (a request naming more is EINVAL).
const MAX_HOLDERS: usize = 4096;
/// Most waits recorded at once (beyond: ENOLCK, and that waiter goes undetected).
const MAX_WAITS: usize = 65_536;

struct Wait {
    holders: Vec<LockOwner>,
    until: Instant,
}

/// Waits recorded: waiter → its waits (a process's threads may wait for several locks).
#[derive(Default)]
pub struct WaitGraph {
    waits: Mutex<HashMap<LockOwner, HashMap<u64, Wait>>>,
}

impl WaitGraph {
    /// Records that `waiter` (in its wait `wait`) waits for `holders`, for `ttl`; empty
    /// `holders` ends that wait. `Ok(true)`: the wait closes a cycle (not recorded).
    pub fn wait(
        &self,
        waiter: LockOwner,
        wait: u64,
        holders: Vec<LockOwner>,
        ttl: Duration,
    ) -> Result<bool, Errno> {
        if holders.len() > MAX_HOLDERS {
            return Err(Errno::einval(format!(
                "a wait names {} lock holders, more than {MAX_HOLDERS}",
                holders.len()
            )));
        }
        let now = Instant::now();
        let mut g = lock(&self.waits);
        g.retain(|_, ws| {
            ws.retain(|_, w| w.until > now);
            !ws.is_empty()
        });
        if holders.is_empty() {
            if let Some(ws) = g.get_mut(&waiter) {
                ws.remove(&wait);
                if ws.is_empty() {
                    g.remove(&waiter);
                }
            }
            return Ok(false);
        }
        if reaches(&g, &holders, waiter) {
            if let Some(ws) = g.get_mut(&waiter) {
                ws.remove(&wait);
            }
            return Ok(true);
        }
        let known = g.get(&waiter).is_some_and(|ws| ws.contains_key(&wait));
        if !known && g.values().map(HashMap::len).sum::<usize>() >= MAX_WAITS {
            return Err(Errno::new(
                libc::ENOLCK,
                format!("{MAX_WAITS} lock waits are recorded already"),
            ));
        }
        let until = now.checked_add(ttl).unwrap_or(now);
        g.entry(waiter)
            .or_default()
            .insert(wait, Wait { holders, until });
        Ok(false)
    }
}

/// Whether `target` is reached from `start` along recorded waits (owner → owners it waits
/// for).
fn reaches(
    g: &HashMap<LockOwner, HashMap<u64, Wait>>,
    start: &[LockOwner],
    target: LockOwner,
) -> bool {
    let mut seen = HashSet::new();
    let mut stack = start.to_vec();
    while let Some(o) = stack.pop() {
        if o == target {
            return true;
        }
        if !seen.insert(o) {
            continue;
        }
        if let Some(ws) = g.get(&o) {
            for w in ws.values() {
                stack.extend(w.holders.iter().copied());
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(n: u64) -> LockOwner {
        LockOwner {
            session: u128::from(n % 2),
            owner: n,
        }
    }

    const TTL: Duration = Duration::from_secs(60);

    #[test]
    fn the_wait_that_closes_a_cycle_is_refused() {
        let g = WaitGraph::default();
        assert!(!g.wait(o(1), 1, vec![o(2)], TTL).unwrap());
        assert!(!g.wait(o(2), 2, vec![o(3), o(4)], TTL).unwrap());
        assert!(!g.wait(o(4), 4, vec![o(5)], TTL).unwrap(), "no cycle");
        assert!(g.wait(o(3), 3, vec![o(1)], TTL).unwrap(), "3 → 1 → 2 → 3");
        // The refused wait was not recorded; once 2 stops waiting there is no cycle.
        assert!(!g.wait(o(2), 2, vec![], TTL).unwrap());
        assert!(!g.wait(o(3), 3, vec![o(1)], TTL).unwrap());
        // Renewing one's own wait is no cycle.
        assert!(!g.wait(o(3), 3, vec![o(1)], TTL).unwrap());
    }

    #[test]
    fn expired_waits_are_forgotten() {
        let g = WaitGraph::default();
        assert!(!g.wait(o(1), 1, vec![o(2)], Duration::ZERO).unwrap());
        assert!(!g.wait(o(2), 2, vec![o(1)], TTL).unwrap());
        assert!(g.wait(o(1), 1, vec![o(2)], TTL).unwrap());
    }
}
