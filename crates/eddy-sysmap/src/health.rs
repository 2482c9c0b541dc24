//! Server health probes and anomaly screening (issue 22, decision 0039): a short probe, at
//! allocation, of each pool server's bandwidth end to end, from the allocating host through
//! the network into the server's storage.
//!
//! The prober starts `eddy sysmap probe-serve --dir D --listen ADDR:0 --peer P --bytes N
//! --bound S` on each server through the site's launcher template (`ssh {host} {cmd}`, or `ip
//! netns exec {host} {cmd}` in tests), and writes a fresh random nonce (hex, one line) on its
//! standard input: never in its arguments or environment, which other users of the server can
//! read (decision 0055). The server prints `LISTEN addr:port` and accepts connections until
//! the bound: one from an address other than P (the prober's, as the server sees it) is
//! closed at once; one that does not present, within `HEADER_WAIT`, a header of `EDDYPRB2`,
//! the nonce and a big-endian u64 length (at most N) is answered `ERR` and closed, and the
//! server goes on waiting for the prober. From the prober it receives that many bytes
//! (bounded by bytes and by time), writes them into a fresh file under D, fsyncs, answers `OK
//! <bytes>` (or `ERR <why>`), removes its file and exits. The prober times connect → answer.
//! Servers are probed in parallel; one that cannot be reached in the bound is "down", never a
//! hang.
//!
//! The rule ([`assess`]): a server whose bandwidth is below `ratio` (the allocation policy's
//! `anomaly_ratio`) × the median of its peers' is anomalous; each probe replaces a host's
//! row in the inventory's `health` table, so a server whose later probe is back is
//! re-admitted.

use anyhow::{bail, Context, Result};
use eddy_alloc::decide::median;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The header's magic (version 2: with the prober's nonce).
pub const MAGIC: &[u8; 8] = b"EDDYPRB2";
/// Bytes of the nonce a prober proves in its header (hex on the server's standard input).
pub const NONCE_LEN: usize = 32;
/// The header: the magic, the nonce, the length (big-endian u64).
const HEADER_LEN: usize = MAGIC.len() + NONCE_LEN + 8;
/// The longest a connection may take to present its header before the server drops it and
/// goes on waiting for the prober (which sends its header as soon as it is connected).
pub const HEADER_WAIT: Duration = Duration::from_secs(2);
/// The most connections the server reads headers from at once; past it the oldest is dropped
/// (the prober's, sent at once, is read before many others can arrive).
pub const MAX_PENDING: usize = 64;
/// How long the server's accept loop sleeps when nothing happened.
const IDLE_POLL: Duration = Duration::from_millis(5);

/// The secret of one probe: given to the server on its standard input, proved by the prober in
/// its header, so that no other connection is taken for the prober's.
#[derive(Clone, PartialEq, Eq)]
pub struct Nonce([u8; NONCE_LEN]);

impl std::fmt::Debug for Nonce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Nonce(..)")
    }
}

impl Nonce {
    /// A fresh random nonce.
    pub fn random() -> Nonce {
        Nonce(rand::random())
    }

    /// The line the prober writes on the server's standard input.
    pub fn line(&self) -> String {
        format!("{}\n", hex::encode(self.0))
    }

    /// Reads the nonce's line (hex) from `input`: at most one line of the nonce's length.
    pub fn read_line(input: impl Read) -> Result<Nonce> {
        let mut line = String::new();
        let limit = (2 * NONCE_LEN + 2) as u64;
        BufReader::new(input.take(limit))
            .read_line(&mut line)
            .context("reading the probe's nonce")?;
        let text = line.trim_end_matches(['\n', '\r']);
        if text.is_empty() {
            bail!(
                "no nonce on standard input (the launcher must give the command the prober's \
                 standard input)"
            );
        }
        let bytes = hex::decode(text)
            .ok()
            .and_then(|b| <[u8; NONCE_LEN]>::try_from(b).ok());
        bytes
            .map(Nonce)
            .with_context(|| format!("the nonce on standard input is not {NONCE_LEN} bytes of hex"))
    }

    /// Whether `other` is this nonce, compared in constant time.
    fn matches(&self, other: &[u8]) -> bool {
        other.len() == NONCE_LEN
            && self
                .0
                .iter()
                .zip(other)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// One probe's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    pub host: String,
    /// Bytes/s end to end (send, write, fsync, answer); `None` when down.
    pub bandwidth: Option<f64>,
    /// Why it is down.
    pub error: Option<String>,
}

/// A host's latest health, as stored in the inventory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    pub host: String,
    /// Bytes/s of its latest probe; `None`: down.
    pub bandwidth: Option<f64>,
    /// Seconds since the Unix epoch.
    pub measured_at: u64,
    /// Below `ratio` × its peers' median, or down.
    pub anomalous: bool,
    /// The peers' median it was compared with, bytes/s.
    pub peer_median: Option<f64>,
    pub error: Option<String>,
}

/// A host to probe: the name the launcher gets and the address the server listens on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    pub address: String,
}

/// The probe's settings.
#[derive(Debug, Clone)]
pub struct ProbeSpec<'a> {
    /// The launcher template (`{host}` and `{cmd}` words, as `eddy start --launcher`).
    pub launcher: &'a str,
    /// The `eddy` program on the servers.
    pub program: OsString,
    /// The storage directory on each server (`{host}` is filled in).
    pub dir: &'a str,
    /// Bytes sent to each server.
    pub bytes: u64,
    /// The longest a probe may take, start of the server included.
    pub bound: Duration,
}

/// The rule: each probed host against the median of its peers' bandwidth (the other hosts
/// of `probes`, and of `others`, the latest stored health of hosts not probed now). Down
/// hosts are anomalous; a host without measured peers is not.
pub fn assess(probes: &[Probe], others: &[Health], ratio: f64, now: u64) -> Vec<Health> {
    let peers_of = |host: &str| -> Vec<f64> {
        probes
            .iter()
            .filter(|p| p.host != host)
            .filter_map(|p| p.bandwidth)
            .chain(
                others
                    .iter()
                    .filter(|h| h.host != host && !probes.iter().any(|p| p.host == h.host))
                    .filter_map(|h| h.bandwidth),
            )
            .collect()
    };
    probes
        .iter()
        .map(|p| {
            let peer_median = median(peers_of(&p.host));
            let anomalous = match (p.bandwidth, peer_median) {
                (None, _) => true,
                (Some(bw), Some(m)) => bw < ratio * m,
                (Some(_), None) => false,
            };
            Health {
                host: p.host.clone(),
                bandwidth: p.bandwidth,
                measured_at: now,
                anomalous,
                peer_median,
                error: p.error.clone(),
            }
        })
        .collect()
}

/// Probes `hosts` in parallel; each result within `spec.bound` (a host that cannot be
/// reached is down, with the reason).
pub fn probe(spec: &ProbeSpec, hosts: &[Host]) -> Vec<Probe> {
    std::thread::scope(|s| {
        let handles: Vec<_> = hosts
            .iter()
            .map(|h| s.spawn(move || probe_one(spec, h)))
            .collect();
        handles
            .into_iter()
            .zip(hosts)
            .map(|(t, h)| {
                let r = t
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("the probe thread failed")));
                match r {
                    Ok(bw) => Probe {
                        host: h.name.clone(),
                        bandwidth: Some(bw),
                        error: None,
                    },
                    Err(e) => Probe {
                        host: h.name.clone(),
                        bandwidth: None,
                        error: Some(format!("{e:#}")),
                    },
                }
            })
            .collect()
    })
}

/// Kills and reaps the server process when the probe ends, however it ends.
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        if !matches!(self.0.try_wait(), Ok(Some(_))) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

fn probe_one(spec: &ProbeSpec, host: &Host) -> Result<f64> {
    let deadline = Instant::now() + spec.bound;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| anyhow::anyhow!("no answer within {:?}", spec.bound))
    };
    let dir = spec.dir.replace("{host}", &host.name);
    let nonce = Nonce::random();
    let peer = source_address(&host.address)?;
    let cmd: Vec<OsString> = vec![
        spec.program.clone(),
        "sysmap".into(),
        "probe-serve".into(),
        "--dir".into(),
        dir.into(),
        "--listen".into(),
        format!("{}:0", bracket(&host.address)).into(),
        "--peer".into(),
        peer.to_string().into(),
        "--bytes".into(),
        spec.bytes.to_string().into(),
        "--bound".into(),
        format!("{:.3}", spec.bound.as_secs_f64()).into(),
    ];
    let argv = eddy_config::launcher::argv(spec.launcher, &host.name, 0, &cmd)
        .map_err(anyhow::Error::msg)?;
    let (prog, args) = argv
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("empty launcher"))?;
    let child = Command::new(prog)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run the launcher {}", prog.to_string_lossy()))?;
    let mut child = Reap(child);
    // The nonce, one line into a pipe (never more than its buffer holds, so this does not
    // wait); a launcher that is gone already says why below.
    if let Some(mut stdin) = child.0.stdin.take() {
        let _ = stdin.write_all(nonce.line().as_bytes());
    }
    // The first line, read in a thread so that a launcher that hangs cannot hold us.
    let stdout = child.0.stdout.take().context("no stdout")?;
    let stderr = child.0.stderr.take().context("no stderr")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let r = BufReader::new(stdout).read_line(&mut line).map(|_| line);
        let _ = tx.send(r);
    });
    let line = match rx.recv_timeout(left()?) {
        Ok(Ok(l)) if !l.is_empty() => l,
        Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            let _ = child.0.kill();
            let mut err = String::new();
            let _ = BufReader::new(stderr).take(2000).read_to_string(&mut err);
            bail!("the probe server did not start: {}", err.trim());
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            bail!("the probe server did not start within {:?}", spec.bound)
        }
    };
    let addr = line
        .trim()
        .strip_prefix("LISTEN ")
        .with_context(|| format!("unexpected line from the probe server: {line:?}"))?
        .to_string();
    let result = send(&addr, &nonce, spec.bytes, &left);
    drop(child);
    result
}

/// The address this host connects to `address` from (a route lookup of a UDP socket, which
/// sends nothing): the only peer the probe server accepts.
fn source_address(address: &str) -> Result<IpAddr> {
    let target = format!("{}:9", bracket(address))
        .to_socket_addrs()
        .with_context(|| format!("bad address {address}"))?
        .next()
        .with_context(|| format!("no address for {address}"))?;
    let any: IpAddr = if target.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let socket = UdpSocket::bind((any, 0)).context("cannot open a UDP socket")?;
    socket
        .connect(target)
        .with_context(|| format!("no route to {address}"))?;
    Ok(socket
        .local_addr()
        .context("the route's source address")?
        .ip())
}

fn bracket(a: &str) -> String {
    if a.contains(':') && !a.starts_with('[') {
        format!("[{a}]")
    } else {
        a.to_string()
    }
}

/// Sends the probe's bytes to `addr` and times it to the answer.
fn send(addr: &str, nonce: &Nonce, bytes: u64, left: &dyn Fn() -> Result<Duration>) -> Result<f64> {
    let sa = addr
        .to_socket_addrs()
        .with_context(|| format!("bad address {addr}"))?
        .next()
        .with_context(|| format!("no address for {addr}"))?;
    let t0 = Instant::now();
    let mut s = TcpStream::connect_timeout(&sa, left()?)
        .with_context(|| format!("cannot connect to {addr}"))?;
    s.set_nodelay(true).ok();
    let mut header = Vec::with_capacity(HEADER_LEN);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&nonce.0);
    header.extend_from_slice(&bytes.to_be_bytes());
    s.set_write_timeout(Some(left()?))?;
    s.write_all(&header).context("sending the header")?;
    let block: Vec<u8> = (0..1u32 << 16)
        .map(|i| i.wrapping_mul(2654435761) as u8)
        .collect();
    let mut sent = 0u64;
    while sent < bytes {
        let n = (bytes - sent).min(block.len() as u64) as usize;
        s.set_write_timeout(Some(left()?))?;
        if let Err(e) = s.write_all(&block[..n]) {
            // A server that refused (its answer says why) closes before all bytes are in.
            let mut answer = String::new();
            s.set_read_timeout(Some(Duration::from_millis(200))).ok();
            let _ = BufReader::new(&mut s).take(1000).read_line(&mut answer);
            match answer.trim().strip_prefix("ERR ") {
                Some(why) => bail!("the probe server refused: {why}"),
                None => return Err(e).context("sending the probe's bytes"),
            }
        }
        sent += n as u64;
    }
    s.set_read_timeout(Some(left()?))?;
    let mut answer = String::new();
    BufReader::new(&mut s)
        .take(1000)
        .read_line(&mut answer)
        .context("waiting for the answer")?;
    let secs = t0.elapsed().as_secs_f64().max(1e-6);
    match answer.trim().strip_prefix("OK ") {
        Some(n) if n.parse::<u64>().ok() == Some(bytes) => Ok(bytes as f64 / secs),
        _ => bail!("the probe server answered {:?}", answer.trim()),
    }
}

/// The server side (`eddy sysmap probe-serve`): prints `LISTEN addr:port` through `say`,
/// serves the one probe from `peer` that proves `nonce`, of at most `max_bytes`, within
/// `bound`, and returns its outcome (the prober was answered either way when it could be).
/// Every other connection is dropped (answered `ERR` when it sent a header) and the server
/// goes on waiting for the prober.
pub fn serve(
    dir: &Path,
    listener: TcpListener,
    nonce: &Nonce,
    peer: IpAddr,
    max_bytes: u64,
    bound: Duration,
    say: &mut dyn FnMut(&str),
) -> Result<u64> {
    let deadline = Instant::now() + bound;
    // A site's storage directory that is not made yet (the first job's daemon makes it) is
    // measured through its nearest existing ancestor: the same storage, or the mount it
    // will be made on. Nothing is created.
    let dir = dir
        .ancestors()
        // privileged-path: the site's pool root (root's settings)
        .find(|d| d.is_dir())
        .with_context(|| format!("no directory of {} exists", dir.display()))?;
    let addr = listener.local_addr().context("listener address")?;
    say(&format!("LISTEN {addr}"));
    listener.set_nonblocking(true)?;
    let (mut conn, len) = accept_prober(&listener, nonce, peer, deadline, bound)?;
    conn.set_nonblocking(false)?;
    let result = receive(dir, &mut conn, len, max_bytes, deadline);
    let answer = match &result {
        Ok(n) => format!("OK {n}\n"),
        Err(e) => format!("ERR {}\n", format!("{e:#}").replace('\n', " ")),
    };
    let _ = conn.write_all(answer.as_bytes());
    result
}

/// A connection whose header is being read.
struct Pending {
    conn: TcpStream,
    since: Instant,
    header: [u8; HEADER_LEN],
    got: usize,
}

/// What a pending connection's header says so far.
enum Heard {
    /// Not all of it yet.
    More,
    /// The prober's: the length it announces.
    Prober(u64),
    /// Not the prober's (closed, gone, or a header without the nonce).
    Other,
}

impl Pending {
    fn hear(&mut self, nonce: &Nonce) -> Heard {
        loop {
            match self.conn.read(&mut self.header[self.got..]) {
                Ok(0) => return Heard::Other,
                Ok(n) => self.got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return Heard::Other,
            }
            let magic = self.got.min(MAGIC.len());
            if self.header[..magic] != MAGIC[..magic] {
                let _ = self.conn.write_all(b"ERR not a probe (bad magic)\n");
                return Heard::Other;
            }
            if self.got == HEADER_LEN {
                if !nonce.matches(&self.header[MAGIC.len()..MAGIC.len() + NONCE_LEN]) {
                    let _ = self.conn.write_all(b"ERR not this probe's nonce\n");
                    return Heard::Other;
                }
                let mut len = [0u8; 8];
                len.copy_from_slice(&self.header[MAGIC.len() + NONCE_LEN..]);
                return Heard::Prober(u64::from_be_bytes(len));
            }
        }
        if self.since.elapsed() > HEADER_WAIT {
            return Heard::Other;
        }
        Heard::More
    }
}

/// Accepts connections until one from `peer` proves `nonce` (its connection and the length
/// it announces), or the deadline; every other one is dropped.
fn accept_prober(
    listener: &TcpListener,
    nonce: &Nonce,
    peer: IpAddr,
    deadline: Instant,
    bound: Duration,
) -> Result<(TcpStream, u64)> {
    let peer = peer.to_canonical();
    let mut pending: std::collections::VecDeque<Pending> = std::collections::VecDeque::new();
    let mut dropped = 0usize;
    loop {
        if Instant::now() > deadline {
            bail!("no prober connected within {bound:?} ({dropped} other connection(s) dropped)");
        }
        let mut busy = false;
        match listener.accept() {
            Ok((c, from)) => {
                busy = true;
                if from.ip().to_canonical() != peer || c.set_nonblocking(true).is_err() {
                    dropped += 1;
                } else {
                    pending.push_back(Pending {
                        conn: c,
                        since: Instant::now(),
                        header: [0; HEADER_LEN],
                        got: 0,
                    });
                    if pending.len() > MAX_PENDING {
                        pending.pop_front();
                        dropped += 1;
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            // A connection reset before it was accepted, or no descriptor left for it now
            // (a flood of connections): the prober's may still come.
            Err(_) => {}
        }
        let mut i = 0;
        while i < pending.len() {
            let before = pending[i].got;
            match pending[i].hear(nonce) {
                Heard::More => {
                    busy |= pending[i].got != before;
                    i += 1;
                }
                Heard::Prober(len) => {
                    let p = pending.remove(i).context("the prober's connection")?;
                    return Ok((p.conn, len));
                }
                Heard::Other => {
                    busy = true;
                    pending.remove(i);
                    dropped += 1;
                }
            }
        }
        if !busy {
            std::thread::sleep(IDLE_POLL);
        }
    }
}

/// Removes the probe's file when done, however it ends.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        // privileged-path: the probe's own file, made create_new in the site's pool directory
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Receives the `len` bytes the prober announced into a fresh file under `dir`.
fn receive(
    dir: &Path,
    conn: &mut TcpStream,
    len: u64,
    max_bytes: u64,
    deadline: Instant,
) -> Result<u64> {
    use std::os::unix::fs::OpenOptionsExt;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| anyhow::anyhow!("the probe took longer than its bound"))
    };
    if len > max_bytes {
        bail!("{len} bytes announced, at most {max_bytes} accepted");
    }
    let path = dir.join(format!(".eddy-probe.{}", std::process::id()));
    // privileged-path: create_new (O_EXCL: a planted link fails) in the site's pool directory
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let _scratch = Scratch(path);
    let mut buf = vec![0u8; 1 << 16];
    let mut got = 0u64;
    while got < len {
        conn.set_read_timeout(Some(left()?))?;
        let want = (len - got).min(buf.len() as u64) as usize;
        let n = conn.read(&mut buf[..want]).context("receiving")?;
        if n == 0 {
            bail!("the prober closed after {got} of {len} bytes");
        }
        file.write_all(&buf[..n])
            .context("writing the probe file")?;
        got += n as u64;
    }
    file.sync_all().context("fsync of the probe file")?;
    Ok(got)
}

/// Fills the allocation's servers from the latest health: `recent_bandwidth` from the
/// measured bandwidth; a down server is unhealthy.
pub fn fill(servers: &mut [eddy_alloc::Server], health: &[Health]) {
    for s in servers {
        if let Some(h) = health.iter().find(|h| h.host == s.host) {
            match h.bandwidth {
                Some(bw) => s.recent_bandwidth = Some(bw),
                None => s.healthy = false,
            }
        }
    }
}

/// The latest stored health of `hosts` (every host when empty), sorted by host.
pub fn latest(db: &Path, hosts: &[String]) -> Result<Vec<Health>> {
    super::db::health_latest(db, hosts)
}

/// Assesses `probes` against the stored health of the other hosts with `ratio`, stores the
/// result in the inventory `db` and returns it.
pub fn record(db: &Path, probes: &[Probe], ratio: f64) -> Result<Vec<Health>> {
    // privileged-path: the inventory database the site names
    let others = if db.exists() {
        latest(db, &[])?
    } else {
        Vec::new()
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let rows = assess(probes, &others, ratio, now);
    super::db::health_store(db, &rows)?;
    Ok(rows)
}

#[cfg(test)]
mod tests;
