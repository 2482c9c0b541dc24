//! Bounds on what peers can hold at a daemon before and after they authenticate.
//!
//! `Unproven`: at most `max_unauthenticated` connections wait for their handshake at once. A
//! new connection is always taken in; when the room is full it pushes out the connection
//! that has waited longest, which is closed. Peers that open connections and say nothing
//! thus hold a bounded number of sockets and buffers, and cannot keep a client that
//! completes its handshake in one round trip from being served.
//!
//! The bytes a connection has in flight after the handshake are bounded in `server.rs`
//! with a semaphore of `max_connection_bytes` permits per connection.

use eddy_proto::sync::lock;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// The connections waiting for their handshake, oldest first.
pub(crate) struct Unproven {
    max: usize,
    waiting: Mutex<Waiting>,
}

/// The last place number given, and the places taken (number, push-out signal).
type Waiting = (u64, VecDeque<(u64, Arc<Notify>)>);

/// A connection's place among those waiting; gives it up when dropped.
pub(crate) struct Place {
    gate: Arc<Unproven>,
    id: u64,
    /// Notified when a newer connection pushed this one out.
    pub pushed_out: Arc<Notify>,
}

impl Unproven {
    pub fn new(max: usize) -> Arc<Unproven> {
        Arc::new(Unproven {
            max: max.max(1),
            waiting: Mutex::new((0, VecDeque::new())),
        })
    }

    /// Takes a new connection in, pushing out the oldest ones past the bound.
    pub fn admit(self: &Arc<Self>) -> Place {
        let pushed_out = Arc::new(Notify::new());
        let mut w = lock(&self.waiting);
        while w.1.len() >= self.max {
            if let Some((_, old)) = w.1.pop_front() {
                // Remembered if that connection is not waiting on it yet.
                old.notify_one();
            }
        }
        w.0 += 1;
        let id = w.0;
        w.1.push_back((id, Arc::clone(&pushed_out)));
        Place {
            gate: Arc::clone(self),
            id,
            pushed_out,
        }
    }

    /// Connections waiting now.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        eddy_proto::sync::lock(&self.waiting).1.len()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut w = lock(&self.gate.waiting);
        w.1.retain(|(id, _)| *id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_oldest_is_pushed_out_past_the_bound() {
        let gate = Unproven::new(2);
        let a = gate.admit();
        let b = gate.admit();
        assert_eq!(gate.waiting(), 2);
        let c = gate.admit();
        assert_eq!(gate.waiting(), 2);
        // `a` was told (the notification waits for it), `b` was not.
        a.pushed_out.notified().await;
        drop(b);
        assert_eq!(gate.waiting(), 1);
        drop(a);
        assert_eq!(gate.waiting(), 1);
        drop(c);
        assert_eq!(gate.waiting(), 0);
    }
}
