//! The pool's health probes shared by allocations (decision 0055). A probe's result is kept
//! in root's `STATE_DIR/probes.json` (written atomically, 0600) with the time it was taken;
//! an allocation judges a server probed within `[pool] probe_cache_s` by that probe and
//! probes the others. One round runs at a time, under `STATE_DIR/probes.lock`, which is never
//! waited for: an allocation that finds another's round under way judges the servers it would
//! probe by what is stored. So jobs set up together cost the pool one round, and a probe that
//! stalls holds no other job's setup.

use crate::site::{Pool, Site};
use anyhow::{Context, Result};
use eddy_sysmap::health::{probe, Host, Probe, ProbeSpec};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The file of kept probes, in the state directory.
const KEPT: &str = "probes.json";
/// The lock of a probe round, in the state directory.
const ROUND_LOCK: &str = "probes.lock";

/// A probe as kept: its result and when it was taken (seconds since the epoch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Kept {
    probe: Probe,
    at: u64,
}

fn now() -> u64 {
    u64::try_from(crate::walltime::now()).unwrap_or(0)
}

/// The kept probes (none when the file is missing or damaged: the servers are probed again).
fn kept(site: &Site) -> Vec<Kept> {
    // privileged-path: root's file in the site's state_dir (trusted_dir checked at setup)
    std::fs::read(site.state_dir.join(KEPT))
        .ok()
        .and_then(|data| serde_json::from_slice(&data).ok())
        .unwrap_or_default()
}

/// Keeps `fresh`, taken at `at`, in place of the kept probes of the same hosts.
fn keep(site: &Site, fresh: &[Probe], at: u64) -> Result<()> {
    let mut all = kept(site);
    all.retain(|k| !fresh.iter().any(|p| p.host == k.probe.host));
    all.extend(fresh.iter().map(|p| Kept {
        probe: p.clone(),
        at,
    }));
    let data = serde_json::to_vec(&all).context("cannot encode the kept probes")?;
    let (me, my_group) = eddy_deploy::secure::me();
    eddy_deploy::secure::trusted_dir(&site.state_dir)?.write_file(KEPT, &data, 0o600, me, my_group)
}

/// Of `idle`, the probes kept within the pool's `probe_cache_s` and the hosts to probe.
fn split(site: &Site, pool: &Pool, idle: &[Host]) -> (Vec<(Probe, u64)>, Vec<Host>) {
    let kept = kept(site);
    let now = now();
    let mut recent = Vec::new();
    let mut stale = Vec::new();
    for h in idle {
        let k = kept
            .iter()
            .find(|k| k.probe.host == h.name && now.saturating_sub(k.at) < pool.probe_cache_s);
        match k {
            Some(k) => recent.push((k.probe.clone(), now.saturating_sub(k.at))),
            None => stale.push(h.clone()),
        }
    }
    (recent, stale)
}

/// The lock of a probe round, held while open.
struct Round {
    _file: std::fs::File,
}

impl Round {
    /// The round's lock if no other allocation holds it (None if one does); never waits.
    fn try_take(site: &Site) -> Result<Option<Round>> {
        use std::os::unix::fs::OpenOptionsExt;
        let path: PathBuf = site.state_dir.join(ROUND_LOCK);
        // privileged-path: root's lock in the site's state_dir (trusted_dir checked at setup), opened O_NOFOLLOW
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns.
        let r = unsafe {
            libc::flock(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                libc::LOCK_EX | libc::LOCK_NB,
            )
        };
        if r == 0 {
            return Ok(Some(Round { _file: file }));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::WouldBlock {
            return Ok(None);
        }
        Err(e).with_context(|| format!("cannot lock {}", path.display()))
    }
}

fn each(probes: &[Probe]) -> String {
    probes
        .iter()
        .map(|p| match p.bandwidth {
            Some(bw) => format!("{} {}/s", p.host, eddy_deploy::human_bytes(bw as u64)),
            None => format!("{} down", p.host),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The probes the idle servers `idle` are judged by: the kept ones of the last
/// `probe_cache_s` seconds, and a round of the others unless another allocation runs one now
/// (then they are judged by their stored health). Returns (all of them, the fresh ones); the
/// reasons say which is which.
pub(super) fn probes_for(
    site: &Site,
    pool: &Pool,
    idle: &[Host],
    spec: &ProbeSpec,
    notes: &mut Vec<String>,
) -> (Vec<Probe>, Vec<Probe>) {
    let (mut recent, mut stale) = split(site, pool, idle);
    let mut fresh = Vec::new();
    if !stale.is_empty() {
        match Round::try_take(site) {
            Ok(Some(_round)) => {
                // A round that ended while this one waited for nothing has probed them now.
                (recent, stale) = split(site, pool, idle);
                if !stale.is_empty() {
                    let at = now();
                    fresh = probe(spec, &stale);
                    notes.push(format!(
                        "health probe: {} idle server(s) probed ({} each): {}",
                        fresh.len(),
                        eddy_deploy::human_bytes(spec.bytes),
                        each(&fresh)
                    ));
                    if let Err(e) = keep(site, &fresh, at) {
                        notes.push(format!("the probes are not kept: {e:#}"));
                    }
                }
            }
            Ok(None) => notes.push(format!(
                "health probe: another allocation is probing the pool: {} idle server(s) \
                 judged by their stored health",
                stale.len()
            )),
            Err(e) => notes.push(format!("no health probe: {e:#}")),
        }
    }
    if !recent.is_empty() {
        let oldest = recent.iter().map(|(_, age)| *age).max().unwrap_or(0);
        let probes: Vec<Probe> = recent.iter().map(|(p, _)| p.clone()).collect();
        notes.push(format!(
            "health probe: {} idle server(s) judged by their probe of at most {oldest} s ago \
             (kept {} s): {}",
            probes.len(),
            pool.probe_cache_s,
            each(&probes)
        ));
    }
    let mut all: Vec<Probe> = recent.into_iter().map(|(p, _)| p).collect();
    all.extend(fresh.iter().cloned());
    (all, fresh)
}
