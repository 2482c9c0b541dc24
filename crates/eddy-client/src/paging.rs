//! The bounds on a daemon's paged replies (decision 0056). The daemons are the job's user's:
//! a page is input, and a loop that asks for the next page while the reply says `more` would
//! run as long as the daemon likes, holding its caller (root's stage-out, a root mount) and
//! growing what the caller keeps. Each series of pages from one daemon goes through a
//! [`Pages`]: a page holds no more than was asked, each page with more to come moves its
//! cursor on (or, for a flush, wrote bytes of the file it cut short), and the series brings
//! at most `max_paged_entries` entries. Past any of them: EIO, naming the daemon.

use crate::Errno;

/// One series of pages from one daemon.
pub(crate) struct Pages {
    /// What is paged, for errors ("readdir of /d", "stage-out's flush").
    what: String,
    daemon: u32,
    entries: u64,
    max_entries: u64,
}

impl Pages {
    pub(crate) fn new(what: impl Into<String>, daemon: u32, max_entries: u64) -> Pages {
        Pages {
            what: what.into(),
            daemon,
            entries: 0,
            max_entries,
        }
    }

    /// Takes a page of `n` entries asked with `limit`; `more`: the page must move the cursor
    /// (more follow); `moved`: it moved its cursor on (or made progress it can show).
    pub(crate) fn take(
        &mut self,
        n: usize,
        limit: u32,
        more: bool,
        moved: bool,
    ) -> Result<(), Errno> {
        let (what, daemon) = (&self.what, self.daemon);
        if n > limit as usize {
            return Err(Errno::eio(format!(
                "daemon {daemon} answered {n} entries to a page of {what} of at most {limit}"
            )));
        }
        self.entries = self.entries.saturating_add(n as u64);
        if self.entries > self.max_entries {
            return Err(Errno::eio(format!(
                "daemon {daemon} paged more than max_paged_entries ({}) entries of {what}: \
                 stopped",
                self.max_entries
            )));
        }
        if more && !moved {
            return Err(Errno::eio(format!(
                "daemon {daemon} answered a page of {what} that does not move its cursor on: \
                 stopped"
            )));
        }
        Ok(())
    }
}

/// Whether a cursor moved forward from `before` to `after` (no cursor: the start).
pub(crate) fn moved<C: Ord>(before: Option<&C>, after: Option<&C>) -> bool {
    match (before, after) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(b), Some(a)) => a > b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_must_move_hold_what_was_asked_and_stay_under_the_bound() {
        let mut p = Pages::new("a listing", 3, 10);
        p.take(4, 4, true, true).unwrap();
        let e = p.take(5, 4, true, true).unwrap_err();
        assert!(e.msg.contains("daemon 3 answered 5 entries"), "{e}");
        let e = p.take(1, 4, true, false).unwrap_err();
        assert!(e.msg.contains("does not move its cursor"), "{e}");
        // The last page need not move.
        p.take(0, 4, false, false).unwrap();
        p.take(4, 4, true, true).unwrap();
        let e = p.take(4, 4, true, true).unwrap_err();
        assert!(e.msg.contains("max_paged_entries (10)"), "{e}");
        assert_eq!(e.errno, libc::EIO);

        assert!(moved(None, Some(&1)));
        assert!(moved(Some(&1), Some(&2)));
        assert!(!moved(Some(&2), Some(&2)));
        assert!(!moved(Some(&2), Some(&1)));
        assert!(!moved::<u32>(Some(&2), None));
        assert!(!moved::<u32>(None, None));
    }
}
