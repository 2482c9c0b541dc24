//! Direct local chunk I/O (decision 0048): for the chunks an open file has on a daemon of
//! this client's host, the client reads and writes that daemon's data file itself, through
//! descriptors the daemon hands it (`DirectOpen`, then its token redeemed on the daemon's
//! descriptor socket: `eddy_proto::fdpass`), and tells the daemon what it wrote
//! (`DirectCommit`: the ranges, and the checksums of the whole blocks it wrote; the daemon
//! checksums the blocks written in part from their bytes) at fsync, close, lock and
//! truncate, when `direct_batch_bytes` are pending, and `size_update_ms` after the first
//! write not reported (as sizes are published).
//!
//! Taken per open file and daemon, for a file not under a linked prefix (those go through
//! the daemon's tier), with `direct_io` on. With R copies, the copies on daemons of this
//! host are written directly, the others by RPC as before (reads of R copies go through
//! the daemons, with their failover). A lease is
//! held by the connection it was granted on: once that connection is gone (the daemon
//! restarted, the link was reset) the lease is void, what was written under it and not
//! reported is written again through the daemon (read back from the descriptor, which
//! still names the same data file), and the next I/O asks for a new lease.
//!
//! Reads verify every block against the stored checksums (read through the sum file's
//! descriptor), or against the checksum of a whole block this client wrote and has not
//! reported yet; a block it wrote in part and has not reported is its own bytes, not
//! verified. A mismatch sends the read through the daemon, which tells a direct write in
//! flight from damage.

use crate::data::Data;
use crate::{layout, Errno, File};
use eddy_proto::fdpass::DaemonRoot;
use eddy_proto::{checksum, req, DirectGrant, FileKind, Piece, Request};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

/// The daemons of this client's host that may hand out descriptors: id → the daemon's root,
/// held by a descriptor (a client of another user, which cannot open it, never tries). What
/// arrives on its descriptor socket is checked against it (`fdpass::DaemonRoot`, decision
/// 0058): the client may be root, the daemon and its root are the job's user's.
pub(crate) struct Local {
    roots: HashMap<u32, Arc<DaemonRoot>>,
    /// Daemons that refused direct I/O (off there), or whose descriptor socket handed over
    /// something other than their own files: not asked again.
    off: Mutex<HashSet<u32>>,
}

impl Local {
    pub fn new(dep: &eddy_config::Deployment, host: &str) -> Local {
        let mut roots = HashMap::new();
        if dep.config.direct_io {
            for d in dep.daemons.iter().filter(|d| d.host == host) {
                match DaemonRoot::open(&d.root) {
                    Ok(r) => {
                        roots.insert(d.id, Arc::new(r));
                    }
                    Err(e) => tracing::debug!("no direct I/O on daemon {}: {e}", d.id),
                }
            }
        }
        Local {
            roots,
            off: Mutex::default(),
        }
    }

    fn root(&self, daemon: u32) -> Option<&Arc<DaemonRoot>> {
        if eddy_proto::sync::lock(&self.off).contains(&daemon) {
            return None;
        }
        self.roots.get(&daemon).filter(|r| r.has_socket())
    }
}

/// What one open file does directly, per daemon: a lease, or `None` when it was refused.
/// Leases are asked for one at a time (`granting`): two writes of the handle at once
/// would otherwise both get one and the second replace the first, which nobody then
/// reported or released (its file stayed marked on the daemon, its last writes unreported,
/// until the connection closed).
#[derive(Default)]
pub(crate) struct Handles(
    Mutex<HashMap<u32, Option<Arc<Lease>>>>,
    tokio::sync::Mutex<()>,
);

impl Lease {
    /// Whether the kernel reads and writes its data file (FUSE passthrough): the client's
    /// own reads and writes of that open file then go through the daemon.
    pub(crate) fn kernels(&self) -> bool {
        self.kernel.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl Handles {
    /// Whether the handle holds no lease.
    pub fn is_empty(&self) -> bool {
        eddy_proto::sync::lock(&self.0)
            .values()
            .all(Option::is_none)
    }
}

/// A lease of one file on one daemon: the descriptors, and what was written and not
/// reported yet.
pub(crate) struct Lease {
    daemon: u32,
    number: u64,
    data: std::fs::File,
    sums: Option<std::fs::File>,
    write: bool,
    batch: u64,
    /// The generation of the connection that holds it (for fsync's check, decision 0015).
    generation: u64,
    /// Tells when that connection is gone (the lease with it).
    closed: eddy_rpc::Closed,
    /// Its daemon is nearly full: no more direct writes under it; it is released (with what
    /// was written meanwhile) at the next write or the close.
    ended: std::sync::atomic::AtomicBool,
    /// The kernel reads and writes its data file (FUSE passthrough, decision 0049): a
    /// report of a write lease at fsync or release asks the daemon to take the whole file
    /// again (`whole`), unless the data file is as it was at the last such report.
    kernel: std::sync::atomic::AtomicBool,
    /// The data file's (length, mtime) when the daemon last took it whole.
    taken: Mutex<Option<(u64, i64, i64)>>,
    pending: Mutex<Pending>,
    /// Held while a report is taken and sent: one at a time per lease, so that a report
    /// that ends the lease (`release`) reaches the daemon after every earlier one, never
    /// before a deferred report still on its way (the daemon would unmark the file with
    /// blocks not yet reported: a reader there would take them for damage).
    reporting: tokio::sync::Mutex<()>,
}

/// Written and not reported: ranges of the data file, and the checksums of the whole
/// blocks written (by block index from the file's start).
#[derive(Default)]
struct Pending {
    ranges: Vec<(u64, u64)>,
    sums: BTreeMap<u64, u32>,
    bytes: u64,
    /// Bytes read directly, told to the daemon's counters with the next report.
    read: u64,
    /// Direct writes under way now, and how many have begun: a write that ran while
    /// another did (the order of their bytes in the data file is the kernel's, not that of
    /// their checksums here) reports no checksums of its own, and the daemon checksums
    /// its blocks from the data file.
    writing: u32,
    begun: u64,
    /// What the report under way carries (its ranges and checksums), until the daemon has
    /// answered: a direct read meanwhile checks those blocks against these checksums, not
    /// against the sum file the daemon has not written yet.
    sent: Option<Sent>,
}

/// The ranges and the whole blocks' checksums a report carries.
type Sent = (Vec<(u64, u64)>, BTreeMap<u64, u32>);

impl Pending {
    /// Puts back what a failed report took, before what was written since.
    /// (An earlier whole block's checksum is kept only where nothing later wrote: `block`
    /// bytes per checksum.)
    fn put_back(&mut self, earlier: Pending, block: u64) {
        for (g, sum) in earlier.sums {
            if !self.touches(g, block) {
                self.sums.insert(g, sum);
            }
        }
        let later = std::mem::take(&mut self.ranges);
        self.ranges = earlier.ranges;
        self.ranges.extend(later);
        self.bytes += earlier.bytes;
        self.read += earlier.read;
    }

    /// Whether block `g` lies in a range written (in part) and not reported.
    fn touches(&self, g: u64, block: u64) -> bool {
        touches(&self.ranges, g, block)
    }

    /// What block `g` must hold when read directly: `Some(sum)` from this client's own
    /// whole-block writes not yet recorded by the daemon (pending or in the report under
    /// way), `Some(None)` for a block such a write changed in part (its bytes are this
    /// client's own, the daemon checksums it), `None` when the sum file says.
    fn expected(&self, g: u64, block: u64) -> Option<Option<u32>> {
        if let Some(s) = self.sums.get(&g) {
            return Some(Some(*s));
        }
        if self.touches(g, block) {
            return Some(None);
        }
        let (ranges, sums) = self.sent.as_ref()?;
        match sums.get(&g) {
            Some(s) => Some(Some(*s)),
            None => touches(ranges, g, block).then_some(None),
        }
    }

    /// Takes what is to be reported, remembering it as under way.
    fn take_for_report(&mut self) -> Pending {
        let mut taken = std::mem::take(self);
        taken.sent = None;
        self.sent = Some((taken.ranges.clone(), taken.sums.clone()));
        // Writes under way stay counted here.
        (self.writing, self.begun) = (taken.writing, taken.begun);
        taken
    }
}

/// Whether block `g` (of `block` bytes) meets one of `ranges`.
fn touches(ranges: &[(u64, u64)], g: u64, block: u64) -> bool {
    let (a, e) = (g * block, (g + 1) * block);
    ranges.iter().any(|&(o, l)| o < e && o + l > a)
}

impl Lease {
    fn void(&self) -> bool {
        self.closed.is_closed() || self.ended.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl Data<'_> {
    /// Whether the chunks `f` has on `daemon` may be read and written directly.
    fn direct_eligible(&self, f: &File, daemon: u32) -> bool {
        f.backing().is_none()
            && f.inode_kind() == FileKind::File
            && self.0.direct.root(daemon).is_some()
    }

    /// The lease of `f` on `daemon`, asked for if this handle has none yet (`None`: the
    /// I/O goes through the daemon). A void lease is settled first.
    pub(crate) async fn direct_lease(&self, f: &File, daemon: u32) -> Option<Arc<Lease>> {
        if !self.direct_eligible(f, daemon) {
            return None;
        }
        let fast = eddy_proto::sync::lock(&f.0.direct.0).get(&daemon).cloned();
        match fast {
            Some(None) => return None,
            Some(Some(l)) if !l.void() => return Some(l),
            _ => {}
        }
        let _granting = f.0.direct.1.lock().await;
        let known = eddy_proto::sync::lock(&f.0.direct.0).get(&daemon).cloned();
        match known {
            Some(None) => return None,
            Some(Some(l)) if !l.void() => return Some(l),
            Some(Some(l)) => {
                eddy_proto::sync::lock(&f.0.direct.0).remove(&daemon);
                if let Err(e) = self.settle_void(f, &l).await {
                    tracing::warn!("{}: writing again what a void lease wrote: {e}", f.path());
                }
            }
            None => {}
        }
        let got = self.grant(f, daemon).await;
        let lease = match got {
            Ok(l) => Some(Arc::new(l)),
            Err(e) => {
                if e.errno == libc::EACCES {
                    tracing::warn!(
                        "direct I/O off for daemon {daemon}, whose descriptor socket is not to \
                         be trusted: {e}"
                    );
                }
                if e.errno == libc::EOPNOTSUPP || e.errno == libc::EACCES {
                    eddy_proto::sync::lock(&self.0.direct.off).insert(daemon);
                }
                tracing::debug!("{}: no direct I/O on daemon {daemon}: {e}", f.path());
                None
            }
        };
        eddy_proto::sync::lock(&f.0.direct.0).insert(daemon, lease.clone());
        lease
    }

    async fn grant(&self, f: &File, daemon: u32) -> Result<Lease, Errno> {
        let write = f.writable();
        let req = Request::DirectOpen(req::DirectOpen {
            file_id: f.file_id(),
            write,
        });
        let (reply, generation) = self
            .rpc()
            .send(daemon, &req)
            .await
            .map_err(eddy_rpc::Failure::into_errno)?;
        let grant: DirectGrant = eddy_proto::typed_reply::<req::DirectOpen>(reply)?;
        let closed = self
            .rpc()
            .closed_signal(daemon)
            .ok_or_else(|| Errno::eio("the connection that granted a lease is gone"))?;
        let root = self
            .0
            .direct
            .root(daemon)
            .cloned()
            .ok_or_else(|| Errno::new(libc::EOPNOTSUPP, "no descriptor socket"))?;
        let (token, id) = (grant.token, f.file_id());
        let fds = tokio::task::spawn_blocking(move || root.redeem(token, id, write))
            .await
            .map_err(|e| Errno::eio(format!("descriptor socket: {e}")))??;
        let mut fds = fds.into_iter().map(std::fs::File::from);
        let data = fds
            .next()
            .ok_or_else(|| Errno::eio("the daemon refused the token of its own lease"))?;
        Ok(Lease {
            daemon,
            number: grant.lease,
            data,
            sums: fds.next(),
            write,
            batch: grant.batch,
            generation,
            closed,
            ended: Default::default(),
            kernel: Default::default(),
            taken: Mutex::default(),
            pending: Mutex::default(),
            reporting: tokio::sync::Mutex::new(()),
        })
    }

    /// Writes the spans of `data` (a write's buffer) into the lease's data file; reports
    /// them once `direct_batch_bytes` are pending.
    pub(crate) async fn direct_write(
        &self,
        f: &File,
        lease: &Arc<Lease>,
        spans: &[layout::Span],
        data: &[u8],
    ) -> Result<(), Errno> {
        let cfg = self.config();
        let (cs, block) = (cfg.chunk_size, cfg.checksum_block());
        let mut sums = Vec::new();
        let mut ranges = Vec::with_capacity(spans.len());
        // Whether another write of this lease is under way (then, or before this one ends).
        let (busy, begun) = {
            let mut p = eddy_proto::sync::lock(&lease.pending);
            p.writing += 1;
            p.begun += 1;
            (p.writing > 1, p.begun)
        };
        let mut failed = None;
        for s in spans {
            let at = s.piece.chunk * cs + u64::from(s.piece.offset);
            let bytes = &data[s.buf_pos..s.buf_pos + s.piece.len as usize];
            if let Err(e) = lease.data.write_all_at(bytes, at) {
                failed = Some(Errno::from_io(&e, format!("{}: direct write", f.path())));
                break;
            }
            ranges.push((at, bytes.len() as u64));
            if lease.sums.is_some() {
                // The whole blocks' checksums; the daemon checksums the others.
                let first = at.div_ceil(block);
                let end = (at + bytes.len() as u64) / block;
                for g in first..end {
                    let from = (g * block - at) as usize;
                    sums.push((g, checksum::crc(&bytes[from..from + block as usize])));
                }
            }
        }
        f.0.unsynced.note(lease.daemon, lease.generation);
        let (full, first) = {
            let mut p = eddy_proto::sync::lock(&lease.pending);
            p.writing -= 1;
            let first = p.ranges.is_empty();
            if busy || p.begun != begun || failed.is_some() {
                // Concurrent with another write of this lease (or cut short): which bytes
                // the data file holds is not known here, the daemon reads them.
                sums.clear();
                for &(at, len) in &ranges {
                    for g in at / block..(at + len).div_ceil(block) {
                        p.sums.remove(&g);
                    }
                }
            }
            // A block written in part no longer has the checksum of an earlier whole write.
            for &(at, len) in &ranges {
                if !at.is_multiple_of(block) {
                    p.sums.remove(&(at / block));
                }
                if !(at + len).is_multiple_of(block) {
                    p.sums.remove(&((at + len) / block));
                }
            }
            p.bytes += ranges.iter().map(|r| r.1).sum::<u64>();
            p.ranges.extend(ranges);
            p.sums.extend(sums);
            (p.bytes >= lease.batch, first)
        };
        if let Some(e) = failed {
            // What was written before the failure is pending (reported later).
            if first {
                self.report_later(f, lease);
            }
            return Err(e);
        }
        if full {
            self.report(f, lease, false).await?;
        } else if first {
            self.report_later(f, lease);
        }
        Ok(())
    }

    /// Reports what is pending under `lease` after `size_update_ms`, as sizes are published
    /// (the daemon's counters and checksums then lag by that much at most).
    fn report_later(&self, f: &File, lease: &Arc<Lease>) {
        let (client, f, lease) = (self.client(), f.clone(), Arc::clone(lease));
        let delay = std::time::Duration::from_millis(self.config().size_update_ms);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Err(e) = client.data().report(&f, &lease, false).await {
                tracing::debug!(
                    "{}: a deferred report failed (fsync or close retries): {e}",
                    f.path()
                );
            }
        });
    }

    /// Reads `spans` into `out` (at each span's buffer position) from the lease's data file,
    /// verifying every block; `Err` when a block does not match (the caller reads through
    /// the daemon then) or the read failed.
    pub(crate) fn direct_read(
        &self,
        lease: &Lease,
        spans: &[layout::Span],
        out: &mut [u8],
    ) -> Result<(), Errno> {
        let cfg = self.config();
        let (cs, block) = (cfg.chunk_size, cfg.checksum_block());
        let zero = checksum::zeros_crc(block);
        let mut pending = eddy_proto::sync::lock(&lease.pending);
        let mut whole = Vec::new();
        for s in spans {
            let len = s.piece.len as u64;
            let at = s.piece.chunk * cs + u64::from(s.piece.offset);
            let dst = &mut out[s.buf_pos..s.buf_pos + len as usize];
            let Some(sf) = &lease.sums else {
                read_full(&lease.data, dst, at)?;
                continue;
            };
            // The whole blocks the span touches, verified, then its bytes.
            let (a, e) = (at / block * block, (at + len).div_ceil(block) * block);
            let aligned = a == at && e == at + len;
            let buf: &mut [u8] = if aligned {
                dst
            } else {
                whole.resize((e - a) as usize, 0);
                &mut whole[..]
            };
            read_full(&lease.data, buf, a)?;
            let n = ((e - a) / block) as usize;
            let mut raw = vec![0u8; n * 4];
            read_full(sf, &mut raw, a / block * 4)?;
            for (j, bytes) in buf.chunks(block as usize).enumerate() {
                let g = a / block + j as u64;
                let want = match pending.expected(g, block) {
                    Some(own) => own,
                    None => {
                        let r = &raw[j * 4..j * 4 + 4];
                        Some(u32::from_le_bytes([r[0], r[1], r[2], r[3]]) ^ zero)
                    }
                };
                if want.is_some_and(|w| w != checksum::crc(bytes)) {
                    return Err(Errno::eio(format!(
                        "block {g} does not match its checksum in the data file"
                    )));
                }
            }
            if !aligned {
                let from = (at - a) as usize;
                out[s.buf_pos..s.buf_pos + len as usize]
                    .copy_from_slice(&whole[from..from + len as usize]);
            }
        }
        pending.read += spans.iter().map(|s| u64::from(s.piece.len)).sum::<u64>();
        Ok(())
    }

    /// Reports what `f` wrote directly on every daemon (`release`: and ends its leases, as
    /// at close).
    pub(crate) async fn direct_report(&self, f: &File, release: bool) -> Result<(), Errno> {
        let leases: Vec<Arc<Lease>> = {
            let mut map = eddy_proto::sync::lock(&f.0.direct.0);
            let all = map.values().flatten().cloned().collect();
            if release {
                map.clear();
            }
            all
        };
        let mut first = None;
        for l in leases {
            if let Err(e) = self.report(f, &l, release).await {
                first = first.or(Some(e));
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Reports what was written under `lease`; a void lease (or one the daemon no longer
    /// knows) has it written again through the daemon.
    async fn report(&self, f: &File, lease: &Lease, release: bool) -> Result<(), Errno> {
        // One report at a time (see `Lease::reporting`).
        let _one = lease.reporting.lock().await;
        let pending = eddy_proto::sync::lock(&lease.pending).take_for_report();
        let result = self.send_report(f, lease, release, pending).await;
        // Recorded, kept for the next report, or written again: the sum file or the pending
        // writes say from now on.
        eddy_proto::sync::lock(&lease.pending).sent = None;
        result
    }

    async fn send_report(
        &self,
        f: &File,
        lease: &Lease,
        release: bool,
        pending: Pending,
    ) -> Result<(), Errno> {
        // What the kernel wrote: the whole file is taken again, unless unchanged since the
        // last time (its length and mtime, looked at before the report goes).
        let stamp = lease.data.metadata().ok().map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.len(), m.mtime(), m.mtime_nsec())
        });
        let whole = lease.write
            && lease.kernel.load(std::sync::atomic::Ordering::Acquire)
            && (stamp.is_none() || *eddy_proto::sync::lock(&lease.taken) != stamp);
        if pending.ranges.is_empty() && pending.read == 0 && !release && !whole {
            return Ok(());
        }
        // Its connection gone: the daemon adopted the file, the bytes go through it again.
        if lease.closed.is_closed() {
            return self.rewrite(f, lease, pending).await;
        }
        let req = Request::DirectCommit(req::DirectCommit {
            file_id: f.file_id(),
            lease: lease.number,
            ranges: pending.ranges.clone(),
            sums: pending.sums.iter().map(|(g, s)| (*g, *s)).collect(),
            read_bytes: pending.read,
            release,
            whole,
        });
        match self.rpc().send(lease.daemon, &req).await {
            Ok(_) => {
                if whole {
                    *eddy_proto::sync::lock(&lease.taken) = stamp;
                }
                Ok(())
            }
            // Recorded, and the daemon is nearly full: later writes go through it (and get
            // its ENOSPC); the lease is released at the next write or the close, with what
            // another thread may have written meanwhile.
            Err(eddy_rpc::Failure::Daemon(e)) if e.errno == libc::ENOSPC => {
                lease
                    .ended
                    .store(true, std::sync::atomic::Ordering::Release);
                Ok(())
            }
            // Not recorded: kept for the next report (fsync or close retries).
            Err(eddy_rpc::Failure::Daemon(e)) if e.errno != libc::ESTALE => {
                let block = self.config().checksum_block();
                eddy_proto::sync::lock(&lease.pending).put_back(pending, block);
                Err(e)
            }
            Err(_) => self.rewrite(f, lease, pending).await,
        }
    }

    /// A void lease of `f`: what it wrote and did not report is written again through the
    /// daemon.
    async fn settle_void(&self, f: &File, lease: &Lease) -> Result<(), Errno> {
        if !lease.closed.is_closed() {
            // Ended by its daemon (nearly full) on a live connection: what was written
            // since the last report is reported with the lease's release (decision 0048).
            return self.report(f, lease, true).await;
        }
        let pending = {
            let mut p = eddy_proto::sync::lock(&lease.pending);
            let taken = p.take_for_report();
            p.sent = None;
            taken
        };
        self.rewrite(f, lease, pending).await
    }

    /// Writes `pending`'s ranges again through the lease's daemon, their bytes read back
    /// from the data file's descriptor (it names the file the daemon adopted or knows).
    async fn rewrite(&self, f: &File, lease: &Lease, pending: Pending) -> Result<(), Errno> {
        if !lease.write || pending.ranges.is_empty() {
            return Ok(());
        }
        let cfg = self.config();
        let (cs, max) = (cfg.chunk_size, cfg.max_rpc_data_bytes as u64);
        for (off, len) in pending.ranges {
            let mut pos = off;
            while pos < off + len {
                let n = (off + len - pos).min(max);
                let mut buf = vec![0u8; n as usize];
                read_full(&lease.data, &mut buf, pos)?;
                let pieces: Vec<Piece> = layout::pieces(pos, n as usize, cs)
                    .into_iter()
                    .map(|s| s.piece)
                    .collect();
                let req = Request::Write(req::Write {
                    file_id: f.file_id(),
                    sums: crate::integrity::write_sums(cfg, &pieces, &buf),
                    pieces,
                    data: buf.into(),
                    backing: None,
                    hint: None,
                });
                let (_, generation) = self
                    .rpc()
                    .send(lease.daemon, &req)
                    .await
                    .map_err(eddy_rpc::Failure::into_errno)?;
                f.0.unsynced.note(lease.daemon, generation);
                pos += n;
            }
        }
        tracing::info!(
            "{}: a direct lease on daemon {} was lost; its unreported writes were written again \
             through the daemon",
            f.path(),
            lease.daemon
        );
        Ok(())
    }
}

/// FUSE passthrough (decision 0049): the mount hands the kernel the data file of a file
/// whose chunks all lie on one daemon of this host, and the kernel reads and writes it; the
/// client never sees those bytes. The lease stays with the open file, as for direct I/O;
/// its reports say `whole` and the size comes from the data file.
impl Data<'_> {
    /// The daemon that holds every chunk of `f`, when it is one of this host's: the file's
    /// home (placed by locality) or the only daemon of the deployment.
    fn sole_local_daemon(&self, f: &File) -> Option<u32> {
        // With R copies the kernel would write one of them only.
        if self.replicas() != 1 {
            return None;
        }
        let placement = self.rpc().placement();
        let daemon = match placement.home(f.file_id()) {
            Some(h) => h,
            None => match placement.ids() {
                [only] => *only,
                _ => return None,
            },
        };
        self.0.direct.roots.contains_key(&daemon).then_some(daemon)
    }

    /// The data file the kernel may read and write for `f` (a descriptor of the daemon's
    /// own file, at file offset == data-file offset), under a lease of this handle: a write
    /// lease for a writable open (it makes the data file of a new file), a read lease
    /// otherwise. `None`: the file does not qualify (linked, R > 1, chunks on several or
    /// remote daemons, direct I/O off), or the daemon refused; the mount then serves it.
    pub async fn passthrough_open(&self, f: &File) -> Option<std::fs::File> {
        let daemon = self.sole_local_daemon(f)?;
        let lease = self.direct_lease(f, daemon).await?;
        lease
            .kernel
            .store(true, std::sync::atomic::Ordering::Release);
        match lease.data.try_clone() {
            Ok(data) => Some(data),
            Err(e) => {
                tracing::debug!("{}: no passthrough: {e}", f.path());
                None
            }
        }
    }

    /// Before a flush, fsync or close of a file the kernel writes, and before a read the
    /// mount serves of one (an O_DIRECT writer's, decision 0059): a lease lost meanwhile
    /// (the daemon restarted) is asked for again, so that the report that follows reaches
    /// the daemon; and the size the file reached (its data file's length: the kernel wrote
    /// past what this client knows) is recorded for publication, and known to the handle.
    pub async fn passthrough_settle(&self, f: &File) -> Result<(), Errno> {
        let leases: Vec<(u32, Arc<Lease>)> = eddy_proto::sync::lock(&f.0.direct.0)
            .iter()
            .filter_map(|(d, l)| l.clone().map(|l| (*d, l)))
            .filter(|(_, l)| l.kernel.load(std::sync::atomic::Ordering::Acquire))
            .collect();
        for (daemon, lease) in leases {
            if !lease.write {
                continue;
            }
            let lease = match lease.void() {
                false => lease,
                true => match self.direct_lease(f, daemon).await {
                    Some(l) => {
                        l.kernel.store(true, std::sync::atomic::Ordering::Release);
                        l
                    }
                    None => lease,
                },
            };
            let end = lease
                .data
                .metadata()
                .map_err(|e| Errno::from_io(&e, format!("{}: data file", f.path())))?
                .len();
            f.0.unsynced.note(daemon, lease.generation);
            if end > 0 {
                // As a write's size: now, or pending for the publication that follows.
                if let crate::size::Plan::Now(size) =
                    self.0.sizes.record(f.file_id(), &f.path(), end)
                {
                    self.ns().send_size(f.file_id(), &f.path(), size).await?;
                }
                f.raise_known(end);
            }
        }
        Ok(())
    }

    /// flush (a close of one descriptor) of a file the kernel writes: the size is published
    /// (close-to-open); the lease stays, since the kernel may write through other
    /// descriptors of the open file until its release.
    pub async fn passthrough_flush(&self, f: &File) -> Result<(), Errno> {
        // No report: the file stays marked until its release (a reader elsewhere gets the
        // bytes, its blocks checksummed again where they differ), and a daemon killed
        // meanwhile adopts it at its next start. fsync and release take it whole.
        self.passthrough_settle(f).await?;
        self.publish_size(f).await
    }

    /// fsync of a file the kernel writes: `passthrough_flush`, then `fsync`.
    pub async fn passthrough_fsync(&self, f: &File) -> Result<(), Errno> {
        self.passthrough_settle(f).await?;
        self.fsync(f).await
    }

    /// The release of a file the kernel wrote: the last report (whole), the size, the
    /// lease ended (`close`).
    pub async fn passthrough_close(&self, f: &File) -> Result<(), Errno> {
        // Closed even when the size cannot be settled (a full device): the close lets the
        // handle go and removes a hidden name it kept alive.
        let settled = self.passthrough_settle(f).await;
        let closed = self.close(f).await;
        if settled.is_err() || closed.is_err() {
            // The kernel's writes may reach past the size the record keeps: a removal drops
            // the data on every daemon (decision 0060).
            self.note_spilled(f.file_id());
        }
        settled.and(closed)
    }
}

/// pread of all of `buf` at `at`; zeros past the end of the file.
fn read_full(file: &std::fs::File, buf: &mut [u8], at: u64) -> Result<(), Errno> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Errno::from_io(&e, "direct read")),
        }
    }
    buf[done..].fill(0);
    Ok(())
}
