//! `eddy bench grow`: what a move costs the job that runs through it (decision 0081). A
//! local deployment of N daemons holds a data set; a foreground writer rewrites it through
//! the client library without pause, its rate sampled every 100 ms; `eddy grow --local K`
//! runs meanwhile. Reported: the writer's rate before, during and after the grow (and their
//! ratios), the bytes the daemons moved against the minimum (the bytes the new daemons hold
//! once the move is collected: the data whose owner changed), the time the grow took, and the
//! same writer's rate on the raw local storage, measured in the same run.

use crate::args::GrowArgs;
use anyhow::{bail, Context, Result};
use eddy_client::{Client, Creds};
use eddy_proto::req;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the writer's progress is sampled.
const SAMPLE: Duration = Duration::from_millis(100);

/// The figures of one run.
#[derive(Debug, Serialize)]
struct Figures {
    storage: PathBuf,
    daemons: u32,
    added: u32,
    data_bytes: u64,
    /// Each daemon's push rate while it serves the writer (`move_busy_bandwidth_bytes`).
    move_busy_bandwidth_bytes: u64,
    /// The writer on the raw storage (the same pattern into plain files, fsync'd).
    raw_write_bytes_per_s: f64,
    before_bytes_per_s: f64,
    during_bytes_per_s: f64,
    after_bytes_per_s: f64,
    /// During ÷ before (the floor: 0.7) and after ÷ before.
    during_vs_before: f64,
    after_vs_before: f64,
    /// Before ÷ the raw storage.
    before_vs_raw: f64,
    grow_s: f64,
    /// Bytes the daemons pushed for the move, and the minimum: the bytes the new daemons hold
    /// once it is collected.
    moved_bytes: u64,
    minimum_bytes: u64,
    moved_vs_minimum: f64,
}

pub fn run(args: GrowArgs) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the eddy program's path")?;
    let storage = args.storage.clone().unwrap_or_else(|| "/var/tmp".into());
    let work = storage.join(format!("eddy-bench-grow.{}", std::process::id()));
    std::fs::create_dir_all(&work)
        .with_context(|| format!("cannot make the work directory {}", work.display()))?;
    let result = measure(&exe, &work, &args);
    let _ = std::fs::remove_dir_all(&work);
    let mut f = result?;
    f.storage = storage;
    print(&f);
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&f)?;
        if path.as_os_str() == "-" {
            println!("{text}");
        } else {
            std::fs::write(path, text + "\n")
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    Ok(())
}

fn print(f: &Figures) {
    let mib = |b: f64| b / (1 << 20) as f64;
    let yielding = match f.move_busy_bandwidth_bytes {
        0 => "pushes not slowed for the writer".to_string(),
        b => format!(
            "pushes at {} MiB/s per daemon while it serves the writer",
            b >> 20
        ),
    };
    note!(
        "eddy bench grow: {} -> {} daemons, {} MiB of data, {yielding}",
        f.daemons,
        f.daemons + f.added,
        f.data_bytes >> 20
    );
    note!(
        "  writer: raw storage {:.0} MiB/s; eddy before {:.0} MiB/s ({:.2}x raw), during the grow \
         {:.0} MiB/s ({:.2}x before), after {:.0} MiB/s ({:.2}x before)",
        mib(f.raw_write_bytes_per_s),
        mib(f.before_bytes_per_s),
        f.before_vs_raw,
        mib(f.during_bytes_per_s),
        f.during_vs_before,
        mib(f.after_bytes_per_s),
        f.after_vs_before
    );
    note!(
        "  grow took {:.2} s; moved {} MiB for a minimum of {} MiB ({:.3}x)",
        f.grow_s,
        f.moved_bytes >> 20,
        f.minimum_bytes >> 20,
        f.moved_vs_minimum
    );
}

/// The deployment's `move_busy_bandwidth_bytes`: the argument's, else the default.
fn busy_rate(args: &GrowArgs) -> u64 {
    args.move_busy_bandwidth
        .unwrap_or(eddy_config::Config::default().move_busy_bandwidth_bytes)
}

/// Runs `eddy ARGS`; its wall time.
fn eddy(exe: &Path, args: &[&std::ffi::OsStr]) -> Result<Duration> {
    crate::run_eddy(exe, args).map(|(took, _)| took)
}

fn measure(exe: &Path, work: &Path, args: &GrowArgs) -> Result<Figures> {
    let files = (args.data / args.file_size).max(1);
    let raw = raw_rate(&work.join("raw"), files, args.file_size, args.chunk_size)?;
    let root = work.join("root");
    // A move refuses a deployment serving direct local I/O (decision 0081).
    let config = work.join("config.toml");
    let busy = busy_rate(args);
    std::fs::write(
        &config,
        format!("direct_io = false\nmove_busy_bandwidth_bytes = {busy}\n"),
    )
    .with_context(|| format!("cannot write {}", config.display()))?;
    let (n, k, cs) = (
        args.daemons.to_string(),
        args.add.to_string(),
        args.chunk_size.to_string(),
    );
    eddy(
        exe,
        &[
            "start".as_ref(),
            "--local".as_ref(),
            n.as_ref(),
            "--root".as_ref(),
            root.as_os_str(),
            "--chunk-size".as_ref(),
            cs.as_ref(),
            "--name".as_ref(),
            "bench-grow".as_ref(),
            "--config".as_ref(),
            config.as_os_str(),
        ],
    )?;
    let stop = || {
        eddy(
            exe,
            &["stop".as_ref(), "--state".as_ref(), root.as_os_str()],
        )
    };
    let figures = with_deployment(exe, &root, args, files, &k);
    let stopped = stop();
    let mut f = figures?;
    stopped?;
    f.raw_write_bytes_per_s = raw;
    f.before_vs_raw = f.before_bytes_per_s / raw.max(1.0);
    Ok(f)
}

fn with_deployment(
    exe: &Path,
    root: &Path,
    args: &GrowArgs,
    files: u64,
    k: &str,
) -> Result<Figures> {
    let hosts = root.join("deployment.toml");
    let dep = eddy_config::Deployment::load(&hosts)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let client = Arc::new(
        rt.block_on(Client::connect_following(dep, hosts.clone()))
            .map_err(|e| anyhow::anyhow!("cannot reach the deployment: {e}"))?,
    );
    let data = pattern(args.chunk_size);
    // The data set, written once.
    for i in 0..files {
        rt.block_on(write_file(&client, i, args.file_size, &data))?;
    }
    let written = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let failed: Arc<Mutex<Option<String>>> = Arc::default();
    let writer = {
        let (client, written, done, failed) = (
            client.clone(),
            written.clone(),
            done.clone(),
            failed.clone(),
        );
        let (size, data) = (args.file_size, data.clone());
        rt.spawn(async move {
            let mut i = 0;
            while !done.load(Ordering::Relaxed) {
                if let Err(e) = write_file(&client, i % files, size, &data).await {
                    *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
                    return;
                }
                written.fetch_add(size, Ordering::Relaxed);
                i += 1;
            }
        })
    };
    let t0 = Instant::now();
    let mut samples: Vec<(f64, u64)> = Vec::new();
    let sample_for = |samples: &mut Vec<(f64, u64)>, d: Duration| {
        let until = Instant::now() + d;
        while Instant::now() < until {
            std::thread::sleep(SAMPLE);
            samples.push((t0.elapsed().as_secs_f64(), written.load(Ordering::Relaxed)));
        }
    };
    let window = Duration::from_secs(args.window_s);
    sample_for(&mut samples, window);
    let grow_start = t0.elapsed().as_secs_f64();
    let grow = {
        let (exe, root, k) = (exe.to_owned(), root.to_owned(), k.to_string());
        std::thread::spawn(move || {
            eddy(
                &exe,
                &[
                    "grow".as_ref(),
                    "--state".as_ref(),
                    root.as_os_str(),
                    "--local".as_ref(),
                    k.as_ref(),
                ],
            )
        })
    };
    while !grow.is_finished() {
        sample_for(&mut samples, SAMPLE);
    }
    let grow_s = grow
        .join()
        .map_err(|_| anyhow::anyhow!("the grow's thread panicked"))??
        .as_secs_f64();
    let grow_end = t0.elapsed().as_secs_f64();
    sample_for(&mut samples, window);
    done.store(true, Ordering::Relaxed);
    let _ = rt.block_on(writer);
    if let Some(e) = failed.lock().unwrap_or_else(|e| e.into_inner()).take() {
        bail!("the foreground writer failed: {e}");
    }
    let rate = |from: f64, to: f64| rate_between(&samples, from, to);
    let before = rate(0.0, grow_start);
    let during = rate(grow_start, grow_end);
    let after = rate(grow_end, f64::MAX);
    let (moved, minimum) = rt.block_on(moved_and_minimum(root, args.daemons))?;
    Ok(Figures {
        storage: PathBuf::new(),
        daemons: args.daemons,
        added: args.add,
        data_bytes: files * args.file_size,
        move_busy_bandwidth_bytes: busy_rate(args),
        raw_write_bytes_per_s: 0.0,
        before_bytes_per_s: before,
        during_bytes_per_s: during,
        after_bytes_per_s: after,
        during_vs_before: during / before.max(1.0),
        after_vs_before: after / before.max(1.0),
        before_vs_raw: 0.0,
        grow_s,
        moved_bytes: moved,
        minimum_bytes: minimum,
        moved_vs_minimum: moved as f64 / (minimum.max(1)) as f64,
    })
}

/// Bytes per second written between the samples at `from` and `to` (seconds from the
/// start): from the last sample at or before `from` to the last at or before `to`.
fn rate_between(samples: &[(f64, u64)], from: f64, to: f64) -> f64 {
    let at = |t: f64| {
        samples
            .iter()
            .rev()
            .find(|(s, _)| *s <= t)
            .or(samples.first())
            .copied()
            .unwrap_or((0.0, 0))
    };
    let (t1, b1) = at(from);
    let (t2, b2) = at(to);
    if t2 <= t1 {
        return 0.0;
    }
    (b2 - b1) as f64 / (t2 - t1)
}

/// One chunk of the benchmark's pattern (never all zeros: nothing makes it sparse).
fn pattern(len: u64) -> Arc<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    crate::pattern::fill(&mut buf, crate::pattern::key("grow", 0), 0);
    Arc::new(buf)
}

/// Writes file `i` whole, chunk by chunk, fsync'd, through the client.
async fn write_file(client: &Client, i: u64, size: u64, data: &[u8]) -> Result<()> {
    let path = format!("/grow-{i:05}");
    let f = client
        .create(&path, 0o644, false, Creds::root())
        .await
        .map_err(|e| anyhow::anyhow!("create {path}: {e}"))?;
    let mut off = 0;
    while off < size {
        let n = (size - off).min(data.len() as u64) as usize;
        client
            .pwrite(&f, off, &data[..n])
            .await
            .map_err(|e| anyhow::anyhow!("write {path} at {off}: {e}"))?;
        off += n as u64;
    }
    client
        .fsync(&f)
        .await
        .map_err(|e| anyhow::anyhow!("fsync {path}: {e}"))?;
    client
        .close(&f)
        .await
        .map_err(|e| anyhow::anyhow!("close {path}: {e}"))
}

/// The same writer on plain files of the raw storage, once over the data set.
fn raw_rate(dir: &Path, files: u64, size: u64, chunk: u64) -> Result<f64> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let data = pattern(chunk);
    let t = Instant::now();
    for i in 0..files {
        let path = dir.join(format!("grow-{i:05}"));
        let mut f = std::fs::File::create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut off = 0;
        while off < size {
            let n = (size - off).min(chunk) as usize;
            f.write_all(&data[..n])?;
            off += n as u64;
        }
        f.sync_all()?;
    }
    let rate = (files * size) as f64 / t.elapsed().as_secs_f64();
    std::fs::remove_dir_all(dir)?;
    Ok(rate)
}

/// The bytes every daemon pushed for the move (`MembershipState::moved_bytes`) and the
/// chunk bytes the daemons that joined (ids from `first_new`) hold.
async fn moved_and_minimum(root: &Path, first_new: u32) -> Result<(u64, u64)> {
    let dep = eddy_config::Deployment::load(&root.join("deployment.toml"))?;
    let client = Client::new(dep.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (mut moved, mut minimum) = (0, 0);
    for d in &dep.daemons {
        let s = client
            .call_daemon(d.id, req::Membership::question())
            .await
            .map_err(|e| anyhow::anyhow!("daemon {}: {}", d.id, e.errno()))?;
        moved += s.moved_bytes;
        if d.id >= first_new {
            let st = client
                .call_daemon(d.id, req::Status)
                .await
                .map_err(|e| anyhow::anyhow!("daemon {}: {}", d.id, e.errno()))?;
            minimum += st.chunk_bytes;
        }
    }
    Ok((moved, minimum))
}
