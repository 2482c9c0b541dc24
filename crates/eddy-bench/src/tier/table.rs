//! The human output of a tier run: the table, what each side does, the headline ratios and
//! the notes.

use super::{mib, TierReport, MIB};
use std::fmt::Write as _;

fn goal_text(g: Option<f64>) -> String {
    g.map_or("-".into(), |g| format!(">={g:.2}"))
}

/// How many times faster (or slower) `ratio` is, in words.
fn times(ratio: f64) -> String {
    if (0.98..=1.02).contains(&ratio) {
        "about as fast as".into()
    } else if ratio > 1.0 {
        format!("{ratio:.2}× faster than")
    } else {
        format!("{:.2}× slower than", 1.0 / ratio.max(1e-12))
    }
}

/// The human output: the table, what each side does, the headline ratios and the notes.
pub fn table(r: &TierReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "eddy bench tier: Eddy ({} daemons) vs baseline (ratio = eddy / baseline throughput)",
        r.daemons
    );
    let _ = writeln!(s, "backend:    {} ({})", r.backend, r.backend_fs);
    let _ = writeln!(s, "storage:    {}", r.storage);
    if let Some(c) = &r.config {
        let _ = writeln!(s, "config:     {c}");
    }
    let _ = writeln!(s, "page cache: {}", r.page_cache);
    let ra = r
        .mount_read_ahead_kb
        .map_or("unknown".into(), |k| format!("{k} KiB"));
    let busy = r
        .cpu_busy_pct
        .map_or("unknown".into(), |b| format!("{b:.0} %"));
    let _ = writeln!(
        s,
        "mount read-ahead: {ra}; {} CPUs, {busy} busy in the second before the start",
        r.cpus
    );
    let _ = writeln!(
        s,
        "{} per side and round, {} rounds (median time of each side), {} files; stage-in tree: \
         {} files in {} directories",
        mib(r.size_bytes),
        r.rounds,
        r.files,
        r.tree_files,
        r.tree_dirs.min(r.tree_files)
    );
    let _ = writeln!(
        s,
        "{:<14} {:>12} {:>12} {:>8} {:>7} {:>9} {:>9} {:>6}",
        "phase", "baseline", "eddy", "ratio", "goal", "base s", "eddy s", "unit"
    );
    for p in &r.phases {
        let _ = writeln!(
            s,
            "{:<14} {:>12.1} {:>12.1} {:>8.3} {:>7} {:>9.3} {:>9.3} {:>6}",
            p.phase,
            p.baseline_mib_s,
            p.eddy_mib_s,
            p.ratio,
            goal_text(p.goal),
            p.baseline_seconds,
            p.eddy_seconds,
            p.unit
        );
    }
    s.push('\n');
    for p in &r.phases {
        let _ = writeln!(s, "{}: {} MiB", p.phase, p.bytes as f64 / MIB);
        let _ = writeln!(s, "  baseline: {}", p.baseline);
        let _ = writeln!(s, "  eddy:     {}", p.eddy);
        if let Some(n) = p.eddy_backend_bytes {
            let dir = if p.phase == "stage-out" { "to" } else { "from" };
            let _ = writeln!(
                s,
                "  eddy moved {} {dir} the backend in {} rounds",
                mib(n),
                p.eddy_rounds_s.len()
            );
        }
    }
    s.push('\n');
    for p in &r.phases {
        match p.phase.as_str() {
            "stage-in" => {
                let _ = writeln!(
                    s,
                    "stage-in is {} cp -r (ratio {:.3}: {:.2} s vs {:.2} s)",
                    times(p.ratio),
                    p.ratio,
                    p.eddy_seconds,
                    p.baseline_seconds
                );
            }
            "stage-out" => {
                let _ = writeln!(
                    s,
                    "stage-out is {} writing directly into the backend with fsync (ratio \
                     {:.3}: {:.2} s vs {:.2} s)",
                    times(p.ratio),
                    p.ratio,
                    p.eddy_seconds,
                    p.baseline_seconds
                );
            }
            _ => {
                if let Some(g) = p.goal {
                    let verdict = if p.ratio >= g { "meets" } else { "misses" };
                    let _ = writeln!(
                        s,
                        "{}: {:.3}× the baseline, {verdict} the goal of {g:.2}×",
                        p.phase, p.ratio
                    );
                }
            }
        }
    }
    if let Some((extra, reads)) = miss_cost(r) {
        let _ = writeln!(
            s,
            "a miss costs {extra:.2} s over a hit for the same bytes (cold-read minus warm-read), \
             {reads:.2}× the time of reading them from the backend directly (about one backend \
             read is the aim: no whole-file copy, no second pass)"
        );
    }
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

/// What a cache miss adds to a hit: the median time of `cold-read` minus that of `warm-read`
/// (both with the page cache dropped, same bytes), in seconds (not below zero) and in units
/// of the direct backend read of `cold-read`'s baseline. On a machine where the backend reads
/// faster than the mount serves cached data, this isolates the tier's own cost from the
/// mount's data path, which bounds both sides.
fn miss_cost(r: &TierReport) -> Option<(f64, f64)> {
    let cold = r.phases.iter().find(|p| p.phase == "cold-read")?;
    let warm = r.phases.iter().find(|p| p.phase == "warm-read")?;
    if cold.bytes != warm.bytes || cold.baseline_seconds <= 0.0 {
        return None;
    }
    let extra = (cold.eddy_seconds - warm.eddy_seconds).max(0.0);
    Some((extra, extra / cold.baseline_seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::{Rounds, TierPhase, FORMAT};
    use std::time::Duration;

    #[test]
    fn table_names_every_phase_and_the_headlines() {
        let d = Duration::from_millis;
        let one = |b: u64, e: u64| Rounds {
            base: vec![d(b)],
            eddy: vec![d(e)],
            moved: vec![Some(1 << 20)],
        };
        let r = TierReport {
            format: FORMAT.into(),
            backend: "/b".into(),
            backend_fs: "ext4".into(),
            storage: "/s".into(),
            daemons: 3,
            config: None,
            size_bytes: 1 << 20,
            rounds: 1,
            files: 8,
            tree_files: 64,
            tree_dirs: 4,
            page_cache_dropped: true,
            page_cache: "dropped".into(),
            mount_read_ahead_kb: Some(128),
            cpus: 2,
            cpu_busy_pct: Some(1.0),
            started_unix: 1,
            phases: vec![
                TierPhase::new("cold-read", "b", "e", 1 << 20, &one(100, 125), Some(0.9)),
                TierPhase::new("warm-read", "b", "e", 1 << 20, &one(90, 75), Some(0.95)),
                TierPhase::new("stage-in", "b", "e", 1 << 20, &one(300, 100), None),
                TierPhase::new("stage-out", "b", "e", 1 << 20, &one(100, 200), None),
            ],
            notes: vec!["n1".into()],
        };
        let t = table(&r);
        assert!(t.contains("cold-read: 0.800× the baseline, misses"), "{t}");
        assert!(t.contains("stage-in is 3.00× faster than cp -r"), "{t}");
        assert!(t.contains("stage-out is 2.00× slower than"), "{t}");
        assert!(t.contains("note: n1"), "{t}");
        // cold 125 ms - warm 75 ms = 50 ms, half the direct backend read of 100 ms.
        assert!(t.contains("a miss costs 0.05 s over a hit"), "{t}");
        assert!(
            t.contains("0.50× the time of reading them from the backend"),
            "{t}"
        );
        let line = t.lines().find(|l| l.starts_with("cold-read ")).unwrap();
        assert!(line.contains("0.800") && line.contains(">=0.90"), "{t}");
    }
}
