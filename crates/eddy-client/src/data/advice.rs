//! What a program says of how it will read a file (`posix_fadvise`, through the preload, the
//! library, C and Python): `Sequential` makes every read of the handle read ahead, `Random`
//! stops read-ahead, `WillNeed` fetches a linked file's range from the backend into the
//! cache in the background, so that the reads that follow find it there (decision 0070).
//! `DontNeed` and `NoReuse` are accepted and change nothing: the client keeps no copy of a
//! file's bytes to drop, and the daemons' cache evicts by use.

use crate::data::Data;
use crate::{Errno, File};
use eddy_proto::req;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// `posix_fadvise` advice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    Normal,
    Sequential,
    Random,
    WillNeed,
    DontNeed,
    NoReuse,
}

impl Advice {
    /// The advice of a `POSIX_FADV_*` value; EINVAL for another.
    pub fn from_posix(advice: i32) -> Result<Advice, Errno> {
        Ok(match advice {
            libc::POSIX_FADV_NORMAL => Advice::Normal,
            libc::POSIX_FADV_SEQUENTIAL => Advice::Sequential,
            libc::POSIX_FADV_RANDOM => Advice::Random,
            libc::POSIX_FADV_WILLNEED => Advice::WillNeed,
            libc::POSIX_FADV_DONTNEED => Advice::DontNeed,
            libc::POSIX_FADV_NOREUSE => Advice::NoReuse,
            other => return Err(Errno::einval(format!("unknown fadvise advice {other}"))),
        })
    }
}

/// A handle's read-ahead, as advised (`FileInner::ra_mode`).
pub(crate) const RA_DETECT: u8 = 0;
pub(crate) const RA_ALWAYS: u8 = 1;
pub(crate) const RA_NEVER: u8 = 2;

/// Background `WillNeed` fetches of one client running at once; more wait their turn.
const WILLNEED_AT_ONCE: usize = 4;

/// The chunks one `Prefetch` request of a `WillNeed` fetch asks a daemon for: a fetch of a
/// large range goes in rounds of this many per daemon, each waiting for the last, so that it
/// never holds more than this of any daemon's backend threads.
const WILLNEED_ROUND: usize = 8;

impl Data<'_> {
    /// Applies `advice` to the range `[offset, offset + len)` of `f` (`len` 0: to the end of
    /// the file). EINVAL for an offset or length past what a file can hold.
    pub(crate) async fn advise(
        &self,
        f: &File,
        offset: u64,
        len: u64,
        advice: Advice,
    ) -> Result<(), Errno> {
        if i64::try_from(offset).is_err() || i64::try_from(len).is_err() {
            return Err(Errno::einval("fadvise: offset or length out of range"));
        }
        let mode = match advice {
            Advice::Normal => RA_DETECT,
            Advice::Sequential => RA_ALWAYS,
            Advice::Random => RA_NEVER,
            Advice::WillNeed => return self.will_need(f, offset, len).await,
            Advice::DontNeed | Advice::NoReuse => return Ok(()),
        };
        f.0.ra_mode.store(mode, Ordering::Relaxed);
        Ok(())
    }

    /// Starts the background fetch of the chunks of a linked file's range that lie in its
    /// backend copy; returns at once. Nothing to do for a file that is not linked (its data
    /// is in the daemons already) or a range past the backend copy's end.
    async fn will_need(&self, f: &File, offset: u64, len: u64) -> Result<(), Errno> {
        let Some(backing) = f.backing() else {
            return Ok(());
        };
        let cs = self.config().chunk_size;
        let end = match len {
            0 => backing.size,
            n => offset.saturating_add(n).min(backing.size),
        };
        if offset >= end {
            return Ok(());
        }
        let by_daemon = self.by_owner(f.file_id(), offset / cs..end.div_ceil(cs));
        let (client, file_id) = (self.client(), f.file_id());
        let turn = Arc::clone(&self.0.willneed);
        tokio::spawn(async move {
            let Ok(_turn) = turn.acquire().await else {
                return;
            };
            let rounds = by_daemon.into_iter().map(|(daemon, chunks)| {
                let (client, backing) = (client.clone(), backing.clone());
                async move {
                    for round in chunks.chunks(WILLNEED_ROUND) {
                        let req = req::Prefetch {
                            file_id,
                            chunks: round.to_vec(),
                            backing: backing.clone(),
                            pin: false,
                        };
                        if let Err(e) = client.rpc().call(daemon, req).await {
                            tracing::debug!(
                                "fetch advised with WILLNEED failed (reads will fetch): {e}"
                            );
                            return;
                        }
                    }
                }
            });
            futures::future::join_all(rounds).await;
        });
        Ok(())
    }
}

/// The semaphore of `WILLNEED_AT_ONCE` (one per client).
pub(crate) fn willneed_turns() -> Arc<tokio::sync::Semaphore> {
    Arc::new(tokio::sync::Semaphore::new(WILLNEED_AT_ONCE))
}
