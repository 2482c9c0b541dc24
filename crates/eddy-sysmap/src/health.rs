//! Server health probes and anomaly screening (issue 22, decision 0039): a short probe, at
//! allocation, of each pool server's bandwidth end to end, from the allocating host through
//! the network into the server's storage.
//!
//! The prober starts `eddy sysmap probe-serve --dir D --listen ADDR:0 --bytes N --bound S` on
//! each server through the site's launcher template (`ssh {host} {cmd}`, or `ip netns exec
//! {host} {cmd}` in tests). The server prints `LISTEN addr:port`, accepts one connection,
//! receives a header (`EDDYPRB1` and a big-endian u64 length, at most N) and that many bytes
//! (bounded by bytes and by time), writes them into a fresh file under D, fsyncs, answers
//! `OK <bytes>` (or `ERR <why>` on anything else), removes its file and exits. The prober
//! times connect → answer. Servers are probed in parallel; one that cannot be reached in the
//! bound is "down", never a hang.
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
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The header's magic.
pub const MAGIC: &[u8; 8] = b"EDDYPRB1";

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
    let cmd: Vec<OsString> = vec![
        spec.program.clone(),
        "sysmap".into(),
        "probe-serve".into(),
        "--dir".into(),
        dir.into(),
        "--listen".into(),
        format!("{}:0", bracket(&host.address)).into(),
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
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run the launcher {}", prog.to_string_lossy()))?;
    let mut child = Reap(child);
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
    let result = send(&addr, spec.bytes, &left);
    drop(child);
    result
}

fn bracket(a: &str) -> String {
    if a.contains(':') && !a.starts_with('[') {
        format!("[{a}]")
    } else {
        a.to_string()
    }
}

/// Sends the probe's bytes to `addr` and times it to the answer.
fn send(addr: &str, bytes: u64, left: &dyn Fn() -> Result<Duration>) -> Result<f64> {
    let sa = addr
        .to_socket_addrs()
        .with_context(|| format!("bad address {addr}"))?
        .next()
        .with_context(|| format!("no address for {addr}"))?;
    let t0 = Instant::now();
    let mut s = TcpStream::connect_timeout(&sa, left()?)
        .with_context(|| format!("cannot connect to {addr}"))?;
    s.set_nodelay(true).ok();
    let mut header = Vec::with_capacity(16);
    header.extend_from_slice(MAGIC);
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
/// serves one probe of at most `max_bytes` within `bound`, and returns its outcome (the
/// sender was answered either way when it could be).
pub fn serve(
    dir: &Path,
    listener: TcpListener,
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
    let mut conn = loop {
        match listener.accept() {
            Ok((c, _)) => break c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    bail!("no prober connected within {bound:?}");
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e).context("accepting the prober"),
        }
    };
    conn.set_nonblocking(false)?;
    let result = receive(dir, &mut conn, max_bytes, deadline);
    let answer = match &result {
        Ok(n) => format!("OK {n}\n"),
        Err(e) => format!("ERR {}\n", format!("{e:#}").replace('\n', " ")),
    };
    let _ = conn.write_all(answer.as_bytes());
    result
}

/// Removes the probe's file when done, however it ends.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        // privileged-path: the probe's own file, made create_new in the site's pool directory
        let _ = std::fs::remove_file(&self.0);
    }
}

fn receive(dir: &Path, conn: &mut TcpStream, max_bytes: u64, deadline: Instant) -> Result<u64> {
    use std::os::unix::fs::OpenOptionsExt;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| anyhow::anyhow!("the probe took longer than its bound"))
    };
    let mut header = [0u8; 16];
    conn.set_read_timeout(Some(left()?))?;
    conn.read_exact(&mut header).context("reading the header")?;
    if &header[..8] != MAGIC {
        bail!("not a probe (bad magic)");
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&header[8..]);
    let len = u64::from_be_bytes(len);
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
mod tests {
    use super::*;

    fn p(host: &str, bw: Option<f64>) -> Probe {
        Probe {
            host: host.into(),
            bandwidth: bw,
            error: bw.is_none().then(|| "down".to_string()),
        }
    }

    #[test]
    fn below_the_share_of_the_peers_median_is_anomalous() {
        let probes: Vec<Probe> = [100.0, 90.0, 110.0, 105.0, 9.0]
            .iter()
            .enumerate()
            .map(|(i, bw)| p(&format!("s{i}"), Some(*bw)))
            .chain([p("s5", None)])
            .collect();
        let h = assess(&probes, &[], 0.5, 7);
        let flags: Vec<bool> = h.iter().map(|h| h.anomalous).collect();
        assert_eq!(flags, [false, false, false, false, true, true]);
        // s4's peers: 90, 100, 105, 110 → median 102.5.
        assert_eq!(h[4].peer_median, Some(102.5));
        assert!(h.iter().all(|h| h.measured_at == 7));
        // One host alone has no peers: not anomalous.
        assert!(!assess(&[p("a", Some(1.0))], &[], 0.5, 0)[0].anomalous);
    }

    #[test]
    fn stored_peers_count_and_a_recovered_host_is_readmitted() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("inv.db");
        let all: Vec<Probe> = (0..4)
            .map(|i| p(&format!("s{i}"), Some(if i == 3 { 10.0 } else { 100.0 })))
            .collect();
        let rows = record(&db, &all, 0.5).unwrap();
        assert!(rows[3].anomalous && !rows[0].anomalous);
        // Probing s3 alone compares it with the stored peers: still slow, still anomalous.
        record(&db, &[p("s3", Some(20.0))], 0.5).unwrap();
        let h = latest(&db, &["s3".into()]).unwrap();
        assert!(h[0].anomalous, "{h:?}");
        // Back to speed: re-admitted.
        record(&db, &[p("s3", Some(95.0))], 0.5).unwrap();
        let h = latest(&db, &[]).unwrap();
        assert_eq!(h.len(), 4);
        assert!(h.iter().all(|h| !h.anomalous), "{h:?}");
        // The inventory file is private.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&db).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "inventory mode {mode:o}");
        // fill() gives the allocation the bandwidth, and a down host is unhealthy.
        record(&db, &[p("s1", None)], 0.5).unwrap();
        let h = latest(&db, &[]).unwrap();
        let mut servers: Vec<eddy_alloc::Server> = (0..4)
            .map(|i| {
                let mut s = eddy_alloc::Server::idle_of(i, 100.0);
                s.host = format!("s{i}");
                s
            })
            .collect();
        fill(&mut servers, &h);
        assert_eq!(servers[0].recent_bandwidth, Some(100.0));
        assert!(!servers[1].healthy);
        assert_eq!(servers[3].recent_bandwidth, Some(95.0));
    }

    fn serve_in_thread(
        dir: &Path,
        max: u64,
        bound: Duration,
    ) -> (String, std::thread::JoinHandle<Result<u64>>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let dir = dir.to_path_buf();
        (
            addr,
            std::thread::spawn(move || serve(&dir, l, max, bound, &mut |_| {})),
        )
    }

    #[test]
    fn a_probe_is_received_written_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let (addr, t) = serve_in_thread(dir.path(), 1 << 20, Duration::from_secs(30));
        let deadline = Instant::now() + Duration::from_secs(30);
        let left = || Ok(deadline.saturating_duration_since(Instant::now()));
        let bw = send(&addr, 300_000, &left).unwrap();
        assert!(bw.is_finite() && bw > 0.0);
        assert_eq!(t.join().unwrap().unwrap(), 300_000);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn garbage_and_oversized_probes_are_answered_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (addr, t) = serve_in_thread(dir.path(), 1 << 20, Duration::from_secs(30));
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        let mut answer = String::new();
        BufReader::new(&s).read_line(&mut answer).unwrap();
        assert!(answer.starts_with("ERR "), "{answer}");
        assert!(t.join().unwrap().is_err());

        let (addr, t) = serve_in_thread(dir.path(), 1000, Duration::from_secs(30));
        let deadline = Instant::now() + Duration::from_secs(30);
        let left = || Ok(deadline.saturating_duration_since(Instant::now()));
        let err = send(&addr, 5000, &left).unwrap_err();
        assert!(format!("{err:#}").contains("at most 1000"), "{err:#}");
        assert!(t.join().unwrap().is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn an_unreachable_host_is_down_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let bound = Duration::from_secs(2);
        // A launcher that never starts the server (it sleeps), and one that fails at once.
        let hosts = [
            Host {
                name: "hang".into(),
                address: "127.0.0.1".into(),
            },
            Host {
                name: "gone".into(),
                address: "127.0.0.1".into(),
            },
        ];
        let script = dir.path().join("hang.sh");
        std::fs::write(&script, "#!/bin/sh\nexec sleep 600\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).unwrap();
        let hang = format!("{} {{host}} {{cmd}}", script.display());
        let sleepy = ProbeSpec {
            launcher: &hang,
            program: "eddy".into(),
            dir: &dir.path().to_string_lossy(),
            bytes: 1000,
            bound,
        };
        let r = probe(&sleepy, &hosts);
        let failing = ProbeSpec {
            launcher: "false {host} {cmd}",
            ..sleepy.clone()
        };
        let r2 = probe(&failing, &hosts);
        for x in r.iter().chain(&r2) {
            assert_eq!(x.bandwidth, None, "{x:?}");
            assert!(x.error.is_some());
        }
        assert!(r[0].error.as_deref().unwrap().contains("within"), "{r:?}");
    }
}
